#include "capi/capi.hpp"

#include <atomic>
#include <mutex>
#include <span>

#include "flashcpp/version.hpp"
#include "flashcpp/version_config.hpp"
#include "ops/common.hpp"
#include "runtime/runtime_internal.hpp"

// flashcpp::version().c_abi (core, below the C ABI, cannot include the C header) is generated from the macros.
static_assert(flashcpp::generated::kCAbiVersion == FLASHCPP_C_ABI_VERSION,
              "version_config.hpp's kCAbiVersion must equal FLASHCPP_C_ABI_VERSION (re-run CMake)");

namespace flashcpp::capi {
namespace {
thread_local std::string t_last_error;  // flashcpp_last_error()'s
}  // namespace

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

// The status codes are the ErrorCode values (common.h promises it; checked here, code by code).
constexpr bool same_code(ErrorCode code, flashcpp_status status) { return static_cast<int>(code) == status; }
static_assert(same_code(ErrorCode::invalid_argument, FLASHCPP_INVALID_ARGUMENT) &&
              same_code(ErrorCode::unsupported, FLASHCPP_UNSUPPORTED) &&
              same_code(ErrorCode::not_found, FLASHCPP_NOT_FOUND) &&
              same_code(ErrorCode::cuda_error, FLASHCPP_CUDA_ERROR) &&
              same_code(ErrorCode::ffi_error, FLASHCPP_FFI_ERROR) && same_code(ErrorCode::io_error, FLASHCPP_IO_ERROR) &&
              same_code(ErrorCode::network_error, FLASHCPP_NETWORK_ERROR) &&
              same_code(ErrorCode::integrity_error, FLASHCPP_INTEGRITY_ERROR) &&
              same_code(ErrorCode::internal, FLASHCPP_INTERNAL) && same_code(ErrorCode::untrusted, FLASHCPP_UNTRUSTED),
              "flashcpp_status and ErrorCode must number the outcomes alike");

flashcpp_status status_of(ErrorCode code) noexcept {
  const int v = static_cast<int>(code);
  return v >= FLASHCPP_INVALID_ARGUMENT && v <= FLASHCPP_UNTRUSTED ? static_cast<flashcpp_status>(v) : FLASHCPP_INTERNAL;
}

void require_non_null(const void* p, const char* op, const char* name) {
  if (p == nullptr) throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument '" + name + "' must not be NULL");
}

DType dtype_of(int32_t code, const char* op, const char* name) {
  if (code < FLASHCPP_F16 || code > FLASHCPP_BOOL)
    throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument '" + name + "' has an unknown dtype code " +
                                                 std::to_string(code));
  return static_cast<DType>(code);
}

bool flag_of(int32_t value, const char* op, const char* name) {
  if (value != 0 && value != 1)
    throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument '" + name + "' must be 0 or 1; got " +
                                                 std::to_string(value));
  return value == 1;
}

void require_device_id(int64_t device_id, const char* op, const char* name) {
  const int n = visible_device_count();
  if (device_id < 0 || device_id >= n)
    throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument '" + name + "' must be a visible CUDA device; " +
                                                 "device id " + std::to_string(device_id) + " is outside [0, " +
                                                 std::to_string(n) + ") (visible CUDA devices: " + std::to_string(n) + ")");
}

TensorView to_view(const flashcpp_tensor* t, const char* op, const char* name) {
  auto fail = [&](const std::string& rule) {
    throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument '" + name + "' " + rule);
  };
  require_non_null(t, op, name);
  if (t->rank < 0 || t->rank > FLASHCPP_MAX_RANK)
    fail("must have rank in [0, " + std::to_string(FLASHCPP_MAX_RANK) + "]; got " + std::to_string(t->rank));
  if (t->dtype < FLASHCPP_F16 || t->dtype > FLASHCPP_BOOL) fail("has an unknown dtype code " + std::to_string(t->dtype));
  if (t->device_type != FLASHCPP_CPU && t->device_type != FLASHCPP_CUDA && t->device_type != FLASHCPP_CUDA_HOST)
    fail("has an unknown device type " + std::to_string(t->device_type));
  const auto n = static_cast<size_t>(t->rank);
  for (size_t i = 0; i < n; ++i)
    if (t->shape[i] < 0)
      fail("must have non-negative sizes; got " + std::to_string(t->shape[i]) + " in dim " + std::to_string(i));
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
const char* flashcpp_version(void) { return flashcpp::version_string(); }
const char* flashcpp_status_name(flashcpp_status s) {
  if (s == FLASHCPP_SUCCESS) return "success";
  if (s < FLASHCPP_INVALID_ARGUMENT || s > FLASHCPP_UNTRUSTED) return "unknown status";
  return flashcpp::to_string(static_cast<flashcpp::ErrorCode>(s)).data();  // static, NUL-terminated literals
}
}
