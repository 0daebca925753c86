#include "flashcpp/cuda.hpp"

#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/per_device.hpp"
#include "core/test_hooks.hpp"

namespace flashcpp {

void cuda_check(cudaError_t status, const char* what, const char* file, int line) {
  if (status == cudaSuccess) return;
  std::string where;
  if (file != nullptr) {
    const std::string_view f(file);
    const size_t slash = f.find_last_of('/');
    const std::string_view base = slash == std::string_view::npos ? f : f.substr(slash + 1);
    where = " at " + std::string(base) + ":" + std::to_string(line);
  }
  throw Error(ErrorCode::cuda_error, std::string(what) + " failed" + where + ": " + cudaGetErrorName(status) + " (" +
                                         cudaGetErrorString(status) + ")");
}

int cuda_device_count() noexcept {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky "no device" error
      return 0;
    }
    return n;
  }();
  return count;
}

const TestOverrides* test_overrides() noexcept {
  static const TestOverrides* const overrides =
      static_cast<const TestOverrides*>(::dlsym(RTLD_DEFAULT, kTestOverridesSymbol));
  return overrides;
}

int visible_device_count() noexcept {
  if (const TestOverrides* t = test_overrides())
    if (const int n = t->visible_devices.load(std::memory_order_relaxed); n >= 0) return n;
  return cuda_device_count();
}

const DeviceFacts& device_facts(int device_id) {
  if (const TestOverrides* t = test_overrides())
    if (DeviceFactsFn hook = t->device_facts.load(std::memory_order_relaxed)) return hook(device_id);
  const int n = cuda_device_count();
  if (device_id < 0 || device_id >= n)
    throw Error(ErrorCode::invalid_argument, "device id " + std::to_string(device_id) + " is outside [0, " +
                                                 std::to_string(n) + ") (visible CUDA devices: " + std::to_string(n) + ")");
  // Read once per device, lock-free afterwards: every op call asks.
  static PerDevice<DeviceFacts> facts(n);
  return facts.get(device_id, [](int id, DeviceFacts& f) {
    cudaDeviceProp prop{};
    FLASHCPP_CUDA_CHECK(cudaGetDeviceProperties(&prop, id));
    f.id = id;
    f.name = prop.name;
    f.sm_count = prop.multiProcessorCount;
    f.cc_major = prop.major;
    f.cc_minor = prop.minor;
    f.total_memory = prop.totalGlobalMem;
    f.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
    f.max_smem_per_block_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
  });
}

DeviceGuard::DeviceGuard(int device_id) {
  FLASHCPP_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device_id) {
    FLASHCPP_CUDA_CHECK(cudaSetDevice(device_id));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) (void)cudaSetDevice(previous_);
}

Stream::Stream(int device_id) : device_(device_id) {
  DeviceGuard g(device_id);
  FLASHCPP_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
}
Stream::~Stream() {
  if (s_) (void)cudaStreamDestroy(s_);
}
void Stream::synchronize() const { FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(s_)); }

DeviceBuffer::DeviceBuffer(size_t bytes, int device_id) : bytes_(bytes), device_(device_id) {
  if (bytes == 0) return;
  DeviceGuard g(device_id);
  FLASHCPP_CUDA_CHECK(cudaMalloc(&p_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (p_) (void)cudaFree(p_);
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) (void)cudaFree(p_);
    p_ = o.p_; bytes_ = o.bytes_; device_ = o.device_;
    o.p_ = nullptr; o.bytes_ = 0;
  }
  return *this;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) FLASHCPP_CUDA_CHECK(cudaMallocHost(&p_, bytes));
}
PinnedBuffer::~PinnedBuffer() {
  if (p_) (void)cudaFreeHost(p_);
}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) (void)cudaFreeHost(p_);
    p_ = o.p_; bytes_ = o.bytes_;
    o.p_ = nullptr; o.bytes_ = 0;
  }
  return *this;
}

Event::Event() { FLASHCPP_CUDA_CHECK(cudaEventCreate(&e_)); }
Event::~Event() {
  if (e_) (void)cudaEventDestroy(e_);
}
void Event::record(cudaStream_t s) { FLASHCPP_CUDA_CHECK(cudaEventRecord(e_, s)); }
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  FLASHCPP_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

}  // namespace flashcpp
