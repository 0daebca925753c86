// Device dequantization of DeepSeek V3.2 FP8 cache values (e4m3 x per-128-dims f32 scale) to bf16 for the
// tensor cores, with FlashMLA's rounding: bf16(x) * bf16(scale), rounded once to bf16 (x is exact in bf16).
//
// Fast path, integer and bf16 arithmetic only (Hopper converts e4m3 -> f16 -> f32 -> bf16 at a quarter of
// the FMA rate; this path avoids the conversion units): e4m3 "s eeee mmm" (bias 7) placed as bf16 bits
// "s 0000eeee mmm0000" is x * 2^-120 exactly, subnormals included (e4m3 subnormals become bf16
// subnormals, which bf16 multiplication keeps); one bf16x2 multiply by bf16(scale) * 2^120 restores it.
// Scales with |scale| >= 2^7 (bf16(scale) * 2^120 could overflow) and non-finite ones take the f32 path.
// Callers that dequantize several chunks check their scales once and run the fast path for all of them
// (straight-line code the compiler can interleave).
// e4m3 NaN codes (0x7f, 0xff) are not NaN on the fast path; the quantizer never writes them.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace flashcpp::mla::fp8 {

// prmt.b32, default mode: byte i of the result is byte (nibble i of sel) & 7 of {b:a}, or that byte's sign
// replicated over the byte when the nibble's bit 3 is set.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
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

/// Byte selectors of the fast path, per thread: bytes 0, 1 (`low`) and 2, 3 (`high`) of the first word of a
/// pair, or of the second word when `swap` (prmt nibbles: byte, then its sign replicated).
struct E4m3Selectors {
  uint32_t low, high;
};
__device__ __forceinline__ E4m3Selectors e4m3_selectors(bool swap) {
  return swap ? E4m3Selectors{0xd5c4u, 0xf7e6u} : E4m3Selectors{0x9180u, 0xb3a2u};
}

/// Whether the fast path can take `scale`, and its multiplier: bf16(scale) * 2^120 as bf16x2.
__device__ __forceinline__ bool e4m3_fast_scale_ok(float scale) { return fabsf(scale) < 128.f; }
__device__ __forceinline__ uint32_t e4m3_fast_scale(float scale) {
  const __nv_bfloat16 sb = __float2bfloat16_rn(__bfloat162float(__float2bfloat16_rn(scale)) * 0x1p120f);
  return static_cast<uint32_t>(__bfloat16_as_ushort(sb)) * 0x10001u;
}

/// Fast path: 16 e4m3 values (`raw`, byte 0 first) times the multiplier `s2` (e4m3_fast_scale) -> 16 bf16
/// (bf16x2 words, lower dim in the low half): dims 0..7 in `first` and 8..15 in `second`, or the other way
/// round with swapped selectors. Per pair of values: one prmt puts each byte with its sign replicated into a
/// 16-bit lane, a shift and a mask leave "s 0000eeee mmm0000", one bf16x2 multiply scales.
__device__ __forceinline__ void dequant_e4m3x16_fast(const uint4 raw, uint32_t s2, E4m3Selectors sel, uint4& first,
                                                     uint4& second) {
  auto pair = [&](uint32_t a, uint32_t b, uint32_t s) { return bf16x2_mul((prmt(a, b, s) << 4) & 0x87f087f0u, s2); };
  first = make_uint4(pair(raw.x, raw.z, sel.low), pair(raw.x, raw.z, sel.high), pair(raw.y, raw.w, sel.low),
                     pair(raw.y, raw.w, sel.high));
  second = make_uint4(pair(raw.z, raw.x, sel.low), pair(raw.z, raw.x, sel.high), pair(raw.w, raw.y, sel.low),
                      pair(raw.w, raw.y, sel.high));
}

/// Any scale: 16 e4m3 values times `scale` -> 16 bf16, dims 0..7 in `lo`, 8..15 in `hi`. Scales the fast path
/// cannot take (|scale| >= 2^7, non-finite) go through f32.
__device__ __forceinline__ void dequant_e4m3x16(const uint4 raw, float scale, uint4& lo, uint4& hi) {
  if (e4m3_fast_scale_ok(scale)) {
    dequant_e4m3x16_fast(raw, e4m3_fast_scale(scale), e4m3_selectors(false), lo, hi);
    return;
  }
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[8];
  const float sf = __bfloat162float(__float2bfloat16_rn(scale));
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>((w[i / 2] >> (16 * (i & 1))) & 0xffffu), __NV_E4M3);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    out[i] = pack_bf16x2_rn(f.x * sf, f.y * sf);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

}  // namespace flashcpp::mla::fp8
