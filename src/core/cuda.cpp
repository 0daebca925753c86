#include "flashcpp/cuda.hpp"

#include <array>
#include <memory>
#include <mutex>
#include <vector>

namespace flashcpp {

void cuda_check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw Error(ErrorCode::cuda_error,
              std::string(what) + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
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

const DeviceInfo& device_info(int device_id) {
  const int n = cuda_device_count();
  if (device_id < 0 || device_id >= n)
    throw Error(ErrorCode::invalid_argument, "device id " + std::to_string(device_id) + " is outside [0, " +
                                                 std::to_string(n) + ") (visible CUDA devices: " + std::to_string(n) + ")");
  static std::mutex mu;
  static std::vector<std::unique_ptr<DeviceInfo>> cache(static_cast<size_t>(n));
  std::lock_guard lock(mu);
  auto& slot = cache[static_cast<size_t>(device_id)];
  if (!slot) {
    cudaDeviceProp prop{};
    cuda_check(cudaGetDeviceProperties(&prop, device_id), "cudaGetDeviceProperties");
    auto info = std::make_unique<DeviceInfo>();
    info->id = device_id;
    info->name = prop.name;
    info->sm_count = prop.multiProcessorCount;
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->total_memory = prop.totalGlobalMem;
    info->l2_bytes = static_cast<size_t>(prop.l2CacheSize);
    info->max_smem_per_block_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
    slot = std::move(info);
  }
  return *slot;
}

DeviceGuard::DeviceGuard(int device_id) {
  cuda_check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device_id) {
    cuda_check(cudaSetDevice(device_id), "cudaSetDevice");
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) (void)cudaSetDevice(previous_);
}

Stream::Stream(int device_id) : device_(device_id) {
  DeviceGuard g(device_id);
  cuda_check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}
Stream::~Stream() {
  if (s_) (void)cudaStreamDestroy(s_);
}
void Stream::synchronize() const { cuda_check(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

DeviceBuffer::DeviceBuffer(size_t bytes, int device_id) : bytes_(bytes), device_(device_id) {
  if (bytes == 0) return;
  DeviceGuard g(device_id);
  cuda_check(cudaMalloc(&p_, bytes), "cudaMalloc");
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
  if (bytes) cuda_check(cudaMallocHost(&p_, bytes), "cudaMallocHost");
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

Event::Event() { cuda_check(cudaEventCreate(&e_), "cudaEventCreate"); }
Event::~Event() {
  if (e_) (void)cudaEventDestroy(e_);
}
void Event::record(cudaStream_t s) { cuda_check(cudaEventRecord(e_, s), "cudaEventRecord"); }
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  cuda_check(cudaEventElapsedTime(&ms, start.e_, e_), "cudaEventElapsedTime");
  return ms;
}

}  // namespace flashcpp
