// Random benchmark data made on the device (bench_kernels.cu): the benchmark shapes hold billions of values
// (22 GiB of MoE weights, a 2.4-billion-value KV cache at sparse-MLA decode b 128), which drawing on the host
// and copying took minutes of GPU-machine time for. Values depend only on (seed, element index).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace flashcpp::cli {

cudaError_t launch_empty_kernel(cudaStream_t stream);  // the bare-launch floor of `flashcpp bench`
/// n bf16 values drawn uniformly from [lo, hi), asynchronously on `stream`.
cudaError_t fill_uniform_bf16(void* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);
/// n random finite e4m3 codes (every byte value but the two NaN codes), asynchronously on `stream`.
cudaError_t fill_random_e4m3(void* dst, size_t n, uint64_t seed, cudaStream_t stream);
/// n bf16 values mean + stddev * N(0, 1) (Box-Muller) clamped to [lo, hi], asynchronously on `stream`.
cudaError_t fill_normal_bf16(void* dst, size_t n, uint64_t seed, float mean, float stddev, float lo, float hi,
                             cudaStream_t stream);
/// NaN into every value of the `rows` rows of `row_elems` consecutive bf16 values at `dst` whose byte in `used`
/// (device memory, one per row) is 0, asynchronously on `stream` (FlashMLA's tests poison the KV rows no index
/// reads).
cudaError_t fill_nan_unused_rows_bf16(void* dst, size_t rows, size_t row_elems, const uint8_t* used,
                                      cudaStream_t stream);

}  // namespace flashcpp::cli
