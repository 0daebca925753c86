#include "gather_rows.hpp"

namespace flashcpp::llm {
namespace {

// One block per output row; 16-byte vectors when the width allows (576 bf16 = 72 of them).
__global__ void gather_rows_kernel(const uint16_t* __restrict__ table, const int32_t* __restrict__ rows, int64_t width,
                                   uint16_t* __restrict__ out) {
  const int64_t i = blockIdx.x;
  const uint16_t* src = table + static_cast<int64_t>(rows[i]) * width;
  uint16_t* dst = out + i * width;
  if (width % 8 == 0) {
    const int64_t v = width / 8;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x)
      reinterpret_cast<uint4*>(dst)[j] = reinterpret_cast<const uint4*>(src)[j];
  } else {
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) dst[j] = src[j];
  }
}

}  // namespace

cudaError_t launch_gather_rows(const uint16_t* table, const int32_t* rows, int64_t n, int64_t width, uint16_t* out,
                               cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  gather_rows_kernel<<<static_cast<unsigned>(n), 128, 0, stream>>>(table, rows, width, out);
  return cudaGetLastError();
}

}  // namespace flashcpp::llm
