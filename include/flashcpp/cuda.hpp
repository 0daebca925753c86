// Small CUDA RAII helpers: the optional convenience layer. Nothing here synchronizes implicitly.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "flashcpp/error.hpp"

namespace flashcpp {

/// Throws Error(cuda_error) naming `what`, the CUDA error and, when given, where (`file:line`, the file's
/// base name) when `status != cudaSuccess`. FLASHCPP_CUDA_CHECK(expr) passes the expression itself.
void cuda_check(cudaError_t status, const char* what, const char* file = nullptr, int line = 0);
#define FLASHCPP_CUDA_CHECK(expr) ::flashcpp::cuda_check((expr), #expr, __FILE__, __LINE__)

/// Facts about one GPU, read once per device and cached (thread-safe). The one device query: ops, MLA dispatch,
/// the CLI and the C ABI all read their device facts here.
struct DeviceFacts {
  int id = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0;
  size_t l2_bytes = 0;
  int max_smem_per_block_optin = 0;
};
/// Number of visible CUDA devices; 0 when there is no GPU or no driver (never throws).
int cuda_device_count() noexcept;
/// Cached device facts; throws invalid_argument for an id outside [0, cuda_device_count()).
const DeviceFacts& device_facts(int device_id);

/// Sets the current CUDA device for a scope and restores the previous one (also on exceptions).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_id);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

/// Owned CUDA stream (non-blocking).
class Stream {
 public:
  explicit Stream(int device_id = 0);
  ~Stream();
  Stream(Stream&& o) noexcept : s_(o.s_), device_(o.device_) { o.s_ = nullptr; }
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }
  int device() const { return device_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
  int device_ = 0;
};

/// Owned device allocation (cudaMalloc on `device_id`).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, int device_id = 0);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_), device_(o.device_) { o.p_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }
  size_t size() const { return bytes_; }
  int device() const { return device_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

/// Owned page-locked host allocation (cudaMallocHost).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; o.bytes_ = 0; }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }
  size_t size() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

/// Owned CUDA event (timing enabled).
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t s);
  cudaEvent_t get() const { return e_; }
  /// Milliseconds from `start` to this event (both must have completed).
  float elapsed_ms_since(const Event& start) const;

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace flashcpp
