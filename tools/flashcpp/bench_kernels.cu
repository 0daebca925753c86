// Device helpers of the benchmark commands: the bare-launch floor for `flashcpp bench` (an empty kernel launched
// through cudaLaunchKernel) and random benchmark data generated on the device (bench_data.hpp).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashcpp/bench_data.hpp"

namespace flashcpp::cli {
namespace {

__global__ void empty_kernel() {}

// SplitMix64: a well-mixed 64-bit value per (seed, element).
__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void fill_uniform_bf16_kernel(__nv_bfloat16* dst, size_t n, uint64_t seed, float lo, float hi) {
  const float step = (hi - lo) * (1.0f / 16777216.0f);  // 24 random bits per value
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = __float2bfloat16_rn(lo + step * static_cast<float>(mix(seed ^ (i * 0xD1B54A32D192ED03ull)) >> 40));
}

__global__ void fill_e4m3_kernel(uint8_t* dst, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint8_t b = static_cast<uint8_t>(mix(seed ^ (i * 0xD1B54A32D192ED03ull)) >> 56);
    if ((b & 0x7F) == 0x7F) b &= 0xFE;  // the NaN codes become ±448
    dst[i] = b;
  }
}

constexpr unsigned kFillBlocks = 4096, kFillThreads = 256;

}  // namespace

cudaError_t launch_empty_kernel(cudaStream_t stream) {
  return cudaLaunchKernel(reinterpret_cast<const void*>(&empty_kernel), dim3(1), dim3(1), nullptr, 0, stream);
}

cudaError_t fill_uniform_bf16(void* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_uniform_bf16_kernel<<<kFillBlocks, kFillThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), n, seed, lo, hi);
  return cudaGetLastError();
}

cudaError_t fill_random_e4m3(void* dst, size_t n, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_e4m3_kernel<<<kFillBlocks, kFillThreads, 0, stream>>>(static_cast<uint8_t*>(dst), n, seed);
  return cudaGetLastError();
}

}  // namespace flashcpp::cli
