// Device dequantization of DeepSeek V3.2 FP8 cache values (e4m3 x per-128-dims f32 scale) to bf16 for the
// tensor cores, with FlashMLA's rounding: bf16(x) * bf16(scale), rounded once to bf16 (x is exact in bf16).
//
// Fast path, integer and bf16 arithmetic only (Hopper converts e4m3 -> f16 -> f32 -> bf16 at a quarter of
// the FMA rate; this path avoids the conversion units): e4m3 "s eeee mmm" (bias 7) placed as bf16 bits
// "s 0000eeee mmm0000" is x * 2^-120 exactly, subnormals included (e4m3 subnormals become bf16
// subnormals, which bf16 multiplication keeps); one bf16x2 multiply by bf16(scale) * 2^120 restores it.
// Scales with |scale| >= 2^7 (bf16(scale) * 2^120 could overflow) and non-finite ones take the f32 path.
// e4m3 NaN codes (0x7f, 0xff) are not NaN on the fast path; the quantizer never writes them.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace flashcpp::mla::fp8 {

__device__ __forceinline__ uint32_t byte_perm(uint32_t a, uint32_t sel) { return __byte_perm(a, 0u, sel); }

// Bytes 0, 1 (sel_sign 0x1404, sel_val 0x4140) or 2, 3 (0x3424, 0x4342) of `v` as bf16x2 of x * 2^-120.
__device__ __forceinline__ uint32_t e4m3x2_to_scaled_bf16x2(uint32_t v, uint32_t v_abs, uint32_t sel_sign,
                                                           uint32_t sel_val) {
  const uint32_t sign = byte_perm(v, sel_sign);            // byte b at bits 15..8 of its lane: sign at 15
  const uint32_t val = byte_perm(v_abs, sel_val) << 4;     // 7 value bits at bits 10..4 of its lane
  return (sign & 0x80008000u) | val;
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

__device__ __forceinline__ uint32_t pack_bf16x2_rn(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

/// 16 e4m3 values (dims 0..15 of `raw`, byte 0 first) times `scale` -> 16 bf16: dims 0..7 in `lo`,
/// 8..15 in `hi` (bf16x2 words, lower dim in the low half).
__device__ __forceinline__ void dequant_e4m3x16(const uint4 raw, float scale, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[8];
  if (fabsf(scale) < 128.f) {
    const __nv_bfloat16 sb = __float2bfloat16_rn(__bfloat162float(__float2bfloat16_rn(scale)) * 0x1p120f);
    const uint32_t s2 = static_cast<uint32_t>(__bfloat16_as_ushort(sb)) * 0x10001u;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v_abs = w[i] & 0x7f7f7f7fu;
      out[2 * i] = bf16x2_mul(e4m3x2_to_scaled_bf16x2(w[i], v_abs, 0x1404u, 0x4140u), s2);
      out[2 * i + 1] = bf16x2_mul(e4m3x2_to_scaled_bf16x2(w[i], v_abs, 0x3424u, 0x4342u), s2);
    }
  } else {
    const float sf = __bfloat162float(__float2bfloat16_rn(scale));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const __half2_raw h =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>((w[i / 2] >> (16 * (i & 1))) & 0xffffu), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      out[i] = pack_bf16x2_rn(f.x * sf, f.y * sf);
    }
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

}  // namespace flashcpp::mla::fp8
