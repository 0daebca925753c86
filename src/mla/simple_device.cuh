// Device helpers the portable kernels share (sparse_attention_simple.cu, sparse_attention_combine.cu, kv_quantize.cu): warp
// reductions, bf16 / fp16 pair stores, the lse element of a (token, head) and the FP8 dequantization of 16 values.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "mla/fp8_v32.hpp"
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
// Two output values as fp16 (F16: out of KvFormat::f16) or bf16.
template <bool F16>
__device__ __forceinline__ void store_16bit_pair(uint16_t* dst, float a, float b) {
  if constexpr (F16) {
    dst[0] = __half_as_ushort(__float2half_rn(a));
    dst[1] = __half_as_ushort(__float2half_rn(b));
  } else {
    store_bf16_pair(reinterpret_cast<__nv_bfloat16*>(dst), a, b);
  }
}

// 16 e4m3 values (one 16-byte load) times their tile's scale as 16 bf16 in two 16-byte words: e4m3 -> f32 exact,
// times the f32 scale, rounded once to bf16 (exact for power-of-two scales: FlashMLA's bf16(e4m3) * bf16(scale)).
__device__ __forceinline__ void dequant_fp8x16(const uint4 raw, const float scale, uint4& out0, uint4& out1) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t packed[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t b0 = static_cast<uint8_t>(words[w] >> (16 * h));
      const uint8_t b1 = static_cast<uint8_t>(words[w] >> (16 * h + 8));
      const uint32_t lo = fp8::float_to_bf16(fp8::e4m3_to_float(b0) * scale);
      const uint32_t hi = fp8::float_to_bf16(fp8::e4m3_to_float(b1) * scale);
      packed[w * 2 + h] = lo | (hi << 16);
    }
  }
  out0 = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  out1 = make_uint4(packed[4], packed[5], packed[6], packed[7]);
}

}  // namespace flashcpp::mla::kernels
