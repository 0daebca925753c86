// Host buffers with device twins for the GPU tests of the FlashInfer ops: fresh random fills (never zeros), poison,
// upload and download with every CUDA status checked (tests/support/gpu.hpp), and the tests' shared Runtime.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "flashcpp/cuda.hpp"
#include "flashcpp/reference.hpp"
#include "flashcpp/runtime.hpp"
#include "support/gpu.hpp"

namespace flashcpp::testing {

/// One Runtime per test binary (modules load once).
inline const Runtime& runtime() {
  static const std::shared_ptr<Runtime> rt = Runtime::create();
  return *rt;
}

inline uint64_t fresh_seed() { return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}(); }

inline uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A host tensor (any dtype's bytes) with its device twin; `slack` extra device bytes after it, poisoned with it.
struct Buf {
  DType dtype = DType::bf16;
  std::vector<int64_t> shape;
  std::vector<uint8_t> host;
  DeviceBuffer dev;
  size_t slack = 0;
  int64_t numel() const { return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>()); }
  size_t bytes() const { return static_cast<size_t>(numel() * dtype_size(dtype)); }
  TensorView host_view() {
    return TensorView::contiguous(host.data(), dtype, Device::cpu(), std::span<const int64_t>(shape));
  }
  TensorView dev_view() const {
    return TensorView::contiguous(dev.get(), dtype, Device::cuda(0), std::span<const int64_t>(shape));
  }
};

inline Buf make(DType t, std::vector<int64_t> shape, bool on_device = true, size_t slack = 0) {
  Buf b;
  b.dtype = t;
  b.shape = std::move(shape);
  b.slack = slack;
  b.host.assign(b.bytes(), 0);
  if (on_device) b.dev = DeviceBuffer(std::max<size_t>(b.bytes() + slack, 16), 0);
  return b;
}

/// Uniform values in [lo, hi) rounded to the dtype, generated in parallel; a value that rounds to zero becomes lo / 2
/// (never zeros).
inline void fill_random(Buf& b, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  const int64_t n = b.numel();
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  const TensorView hv = b.host_view();
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += threads) {
        const double u = static_cast<double>(splitmix(seed ^ (static_cast<uint64_t>(i) * 0x100000001b3ull)) >> 11) /
                         9007199254740992.0;
        reference::store(hv, i, lo + (hi - lo) * u);
        if (reference::load(hv, i) == 0.0) reference::store(hv, i, lo / 2);
      }
    });
  for (auto& th : pool) th.join();
}

inline void upload(Buf& b) {
  if (b.bytes() > 0) CUDA_OK(upload_bytes(b.dev.get(), b.host.data(), b.bytes()));
}
inline void poison(Buf& b) { CUDA_OK(fill_bytes(b.dev.get(), kPoisonByte, std::max<size_t>(b.bytes() + b.slack, 16))); }
/// Waits for the device (and checks it reported no error), then copies b back.
inline void download(Buf& b) {
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
  if (b.bytes() > 0) CUDA_OK(cudaMemcpy(b.host.data(), b.dev.get(), b.bytes(), cudaMemcpyDeviceToHost));
}

}  // namespace flashcpp::testing
