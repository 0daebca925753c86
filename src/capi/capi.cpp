#include "capi/capi.hpp"

#include <atomic>
#include <mutex>
#include <span>

#include "runtime/runtime_internal.hpp"

namespace flashcpp::capi {
thread_local std::string t_last_error;

void set_last_error(std::string message) noexcept {
  try {
    t_last_error = std::move(message);
  } catch (...) {
  }
}
void clear_last_error() noexcept { t_last_error.clear(); }

std::shared_ptr<const Runtime> default_runtime() {
  // A runtime that started is kept for the process, and handed out without touching a reference count (the
  // aliasing constructor with no owner): the hot path is one atomic load. One that could not start
  // (Runtime::Impl::failed) reports why after the op's argument checks, and the next call tries again.
  static std::atomic<const Runtime*> started{nullptr};
  if (const Runtime* rt = started.load(std::memory_order_acquire))
    return std::shared_ptr<const Runtime>(std::shared_ptr<const Runtime>(), rt);
  static std::mutex mu;
  static std::shared_ptr<const Runtime> owner;
  std::lock_guard lock(mu);
  if (!owner) {
    try {
      owner = Runtime::create();
    } catch (const Error& e) {
      return Runtime::Impl::failed(e);
    }
    started.store(owner.get(), std::memory_order_release);
  }
  return owner;
}

flashcpp_status status_of(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return FLASHCPP_INVALID_ARGUMENT;
    case ErrorCode::unsupported: return FLASHCPP_UNSUPPORTED_ARCH;
    case ErrorCode::cuda_error: return FLASHCPP_CUDA_ERROR;
    case ErrorCode::not_found: return FLASHCPP_NOT_FOUND;
    case ErrorCode::ffi_error: return FLASHCPP_FFI_ERROR;
    case ErrorCode::io_error:
    case ErrorCode::network_error:
    case ErrorCode::integrity_error:
    case ErrorCode::untrusted: return FLASHCPP_IO_ERROR;
    case ErrorCode::internal: return FLASHCPP_INTERNAL;
  }
  return FLASHCPP_INTERNAL;
}

TensorView to_view(const flashcpp_tensor* t, const char* op, const char* name) {
  auto fail = [&](const std::string& rule) {
    throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument '" + name + "' " + rule);
  };
  if (t == nullptr) fail("must not be NULL");
  if (t->rank < 0 || t->rank > FLASHCPP_MAX_RANK)
    fail("must have rank in [0, " + std::to_string(FLASHCPP_MAX_RANK) + "]; got " + std::to_string(t->rank));
  if (t->dtype < FLASHCPP_F16 || t->dtype > FLASHCPP_BOOL) fail("has an unknown dtype code " + std::to_string(t->dtype));
  if (t->device_type != FLASHCPP_CPU && t->device_type != FLASHCPP_CUDA && t->device_type != FLASHCPP_CUDA_HOST)
    fail("has an unknown device type " + std::to_string(t->device_type));
  const auto n = static_cast<size_t>(t->rank);
  return TensorView::strided(t->data, static_cast<DType>(t->dtype),
                             Device{static_cast<DeviceType>(t->device_type), t->device_id},
                             std::span<const int64_t>(t->shape, n), std::span<const int64_t>(t->strides, n));
}

bool to_optional_view(const flashcpp_tensor* t, const char* op, const char* name, TensorView& out) {
  if (t == nullptr) return false;
  out = to_view(t, op, name);
  return true;
}

}  // namespace flashcpp::capi

extern "C" {
const char* flashcpp_last_error(void) { return flashcpp::capi::t_last_error.c_str(); }
uint32_t flashcpp_abi_version(void) { return FLASHCPP_C_ABI_VERSION; }
const char* flashcpp_status_name(flashcpp_status s) {
  switch (s) {
    case FLASHCPP_SUCCESS: return "success";
    case FLASHCPP_INVALID_ARGUMENT: return "invalid argument";
    case FLASHCPP_UNSUPPORTED_ARCH: return "unsupported architecture";
    case FLASHCPP_CUDA_ERROR: return "CUDA error";
    case FLASHCPP_INTERNAL: return "internal error";
    case FLASHCPP_NOT_FOUND: return "not found";
    case FLASHCPP_FFI_ERROR: return "FFI error";
    case FLASHCPP_IO_ERROR: return "I/O error";
  }
  return "unknown status";
}
}
