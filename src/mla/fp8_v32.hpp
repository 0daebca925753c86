// The DeepSeek V3.2 FP8 KV-cache format, shared by host code (CPU quantizer, reference, tests) and
// device code (quantizer and dequantizing kernels). Plain integer arithmetic only, so the host and the
// device produce the same bytes.
//
// One token = 656 bytes:
//   [0, 512)    512 x float8_e4m3fn, dims 0..511 divided by their tile's scale
//   [512, 528)  4 x float32 scales (little endian), scale i covers dims [128 i, 128 i + 128)
//   [528, 656)  64 x bf16, dims 512..575 (RoPE), copied unquantized
// Scales are powers of two: scale = 2^ceil(log2(max(amax / 448, 1e-4))) (FlashMLA's tests/quant.py).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FLASHCPP_HD __host__ __device__ __forceinline__
#else
#define FLASHCPP_HD inline
#endif

namespace flashcpp::mla::fp8 {

inline constexpr int kBytesPerToken = 656;
inline constexpr int kNopeDims = 512;
inline constexpr int kRopeDims = 64;
inline constexpr int kDims = kNopeDims + kRopeDims;  // 576
inline constexpr int kTileDims = 128;
inline constexpr int kNumScales = kNopeDims / kTileDims;  // 4
inline constexpr int kScaleOffset = 512;
inline constexpr int kRopeOffset = 528;
inline constexpr float kE4m3Max = 448.f;
inline constexpr float kMinScale = 1e-4f;

FLASHCPP_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
FLASHCPP_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// bf16 bits -> float (exact).
FLASHCPP_HD float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

/// float -> bf16 bits, round to nearest even (NaN stays NaN).
FLASHCPP_HD uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// float8_e4m3fn bits -> float (exact). 0x7f / 0xff are NaN; there is no infinity.
FLASHCPP_HD float e4m3_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t man = b & 0x7u;
  if (exp == 0xfu && man == 0x7u) return bits_float(sign | 0x7fc00000u);
  float mag;
  if (exp == 0) {
    mag = static_cast<float>(man) * (1.f / 512.f);  // subnormal: man * 2^-9
  } else {
    mag = bits_float(((exp + 120u) << 23) | (man << 20));  // 2^(exp-7) * (1 + man/8)
  }
  return bits_float(float_bits(mag) | sign);
}

/// float -> float8_e4m3fn bits, round to nearest even, saturating finite values to +-448 (the values
/// the quantizer produces never exceed 448 in magnitude, so saturation never changes them). NaN -> 0x7f.
FLASHCPP_HD uint8_t float_to_e4m3(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  if (abs_bits >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (and inf): saturate
  const int exp = static_cast<int>(abs_bits >> 23) - 127;               // unbiased float exponent
  if (exp < -6) {
    // Subnormal range of e4m3 (including values that round up to the smallest normal 2^-6):
    // the code is round(|f| * 2^9) computed exactly on the float's bits.
    if (exp < -11) {  // |f| < 2^-11: rounds to 0 unless above half of 2^-9 (impossible below 2^-10)
      return sign;
    }
    const uint32_t man = (abs_bits & 0x7fffffu) | 0x800000u;  // 24-bit significand, value man * 2^(exp-23)
    const int shift = 23 - (exp + 9);                          // value*2^9 = man >> shift
    const uint32_t q = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<uint8_t>(sign | r);  // r == 8 encodes 2^-6 (exp field 1, man 0)
  }
  // Normal: keep 3 mantissa bits, round to nearest even on the 20 dropped bits.
  uint32_t man = abs_bits & 0x7fffffu;
  uint32_t q = man >> 20;
  const uint32_t rem = man & 0xfffffu;
  uint32_t e = static_cast<uint32_t>(exp + 7);
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) {
    ++q;
    if (q == 8) {
      q = 0;
      ++e;
    }
  }
  uint32_t code = (e << 3) | q;
  if (code > 0x7eu) code = 0x7eu;
  return static_cast<uint8_t>(sign | code);
}

/// Power-of-two scale for a tile whose largest magnitude is `amax` (float, as FlashMLA computes it):
/// s = max(amax / 448, 1e-4) rounded up to a power of two.
FLASHCPP_HD float pow2_scale(float amax) {
  float s = amax / kE4m3Max;
  if (!(s >= kMinScale)) s = kMinScale;  // also maps NaN to the minimum
  const uint32_t b = float_bits(s);
  if ((b & 0x7fffffu) == 0) return s;                 // already a power of two
  const uint32_t e = (b >> 23) & 0xffu;               // s >= 1e-4 is normal; s <= 2^119 is finite
  return bits_float((e + 1u) << 23);
}

}  // namespace flashcpp::mla::fp8
