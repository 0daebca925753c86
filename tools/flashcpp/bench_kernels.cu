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

__global__ void fill_normal_bf16_kernel(__nv_bfloat16* dst, size_t n, uint64_t seed, float mean, float stddev, float lo,
                                        float hi) {
  constexpr float kUnit = 1.0f / 16777216.0f;  // 24 random bits per uniform
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint64_t r = mix(seed ^ (i * 0xD1B54A32D192ED03ull));
    const float u1 = (static_cast<float>(r >> 40) + 1.0f) * kUnit;  // (0, 1]: log stays finite
    const float u2 = static_cast<float>((r >> 16) & 0xFFFFFFu) * kUnit;
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    dst[i] = __float2bfloat16_rn(fminf(fmaxf(mean + stddev * z, lo), hi));
  }
}

// One block per row (grid-stride over rows), so the used byte is read once per row, not per value.
__global__ void nan_unused_rows_kernel(uint16_t* dst, size_t rows, size_t row_elems, const uint8_t* used) {
  constexpr uint16_t kBf16Nan = 0x7FC0;
  for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
    if (used[row] != 0) continue;
    for (size_t e = threadIdx.x; e < row_elems; e += blockDim.x) dst[row * row_elems + e] = kBf16Nan;
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

cudaError_t fill_normal_bf16(void* dst, size_t n, uint64_t seed, float mean, float stddev, float lo, float hi,
                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  fill_normal_bf16_kernel<<<kFillBlocks, kFillThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), n, seed, mean,
                                                                    stddev, lo, hi);
  return cudaGetLastError();
}

cudaError_t fill_nan_unused_rows_bf16(void* dst, size_t rows, size_t row_elems, const uint8_t* used,
                                      cudaStream_t stream) {
  if (rows == 0 || row_elems == 0) return cudaSuccess;
  nan_unused_rows_kernel<<<kFillBlocks, kFillThreads, 0, stream>>>(static_cast<uint16_t*>(dst), rows, row_elems, used);
  return cudaGetLastError();
}

}  // namespace flashcpp::cli
