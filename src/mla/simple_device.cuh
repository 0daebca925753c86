// Device helpers the portable kernels share (sparse_attention_simple.cu, sparse_attention_combine.cu, kv_quantize.cu): warp
// reductions, bf16 pair stores and the lse element of a (token, head).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::kernels {

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ int64_t lse_offset(const SparseAttentionParams& p, int64_t token, int head) {
  return p.token_offset(token, p.lse_stride_token, p.lse_stride_request) +
         static_cast<int64_t>(head) * p.lse_stride_head;
}

__device__ __forceinline__ void store_bf16_pair(__nv_bfloat16* dst, float a, float b) {
  dst[0] = __float2bfloat16_rn(a);
  dst[1] = __float2bfloat16_rn(b);
}

}  // namespace flashcpp::mla::kernels
