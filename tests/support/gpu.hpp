// GPU test helpers: skip unless FLASHCPP_GPU_TESTS=1, check every CUDA status, poison outputs.
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "flashcpp/cuda.hpp"

namespace flashcpp::testing {

inline bool gpu_tests_enabled() {
  const char* v = std::getenv("FLASHCPP_GPU_TESTS");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

/// Byte used to poison outputs before a kernel runs: 0xFF makes bf16/f16/f32 NaN, so an output the
/// kernel failed to write can never match the reference.
inline constexpr int kPoisonByte = 0xFF;

/// Host-to-device copy and byte fill that have completed on return. cudaMemcpy from pageable memory and cudaMemset
/// may return before the device has written the bytes, and they run on the legacy default stream, which the
/// library's non-blocking streams do not wait for: a kernel launched next on such a stream could read stale inputs,
/// or have its outputs overwritten by the poison afterwards (seen with several test processes sharing one GPU).
inline cudaError_t upload_bytes(void* dst, const void* src, size_t bytes) {
  const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}
inline cudaError_t fill_bytes(void* dst, int value, size_t bytes) {
  const cudaError_t e = cudaMemset(dst, value, bytes);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

}  // namespace flashcpp::testing

/// Skips the test unless FLASHCPP_GPU_TESTS=1 and a CUDA device is visible.
#define FLASHCPP_REQUIRE_GPU()                                                                   \
  do {                                                                                           \
    if (!::flashcpp::testing::gpu_tests_enabled()) GTEST_SKIP() << "set FLASHCPP_GPU_TESTS=1"; \
    if (::flashcpp::cuda_device_count() == 0) GTEST_FAIL() << "FLASHCPP_GPU_TESTS=1 but no CUDA device"; \
  } while (0)

/// Asserts a CUDA call succeeded, naming the call.
#define CUDA_OK(expr)                                                                             \
  do {                                                                                            \
    cudaError_t _e = (expr);                                                                      \
    ASSERT_EQ(_e, cudaSuccess) << #expr << ": " << cudaGetErrorName(_e) << " " << cudaGetErrorString(_e); \
  } while (0)
