// The DeepSeek V4 FP8 KV-cache format (FlashMLA's "MODEL1", d_qk 512), shared by host code (CPU quantizer,
// reference, tests) and device code. Plain integer arithmetic only, so host and device give the same bytes.
//
// A token stands for 512 values: dims 0..447 ("NoPE") quantized in 7 tiles of 64, dims 448..511 (RoPE) kept
// as bf16. It takes 584 bytes, split in two records that live in different parts of its page:
//   token record, 576 bytes:  [0, 448)   448 x float8_e4m3fn, dim / its tile's scale
//                             [448, 576) 64 x bf16, dims 448..511
//   scale record, 8 bytes:    [0, 7)     7 x e8m0: tile i (dims [64 i, 64 i + 64)) has scale 2^(byte - 127)
//                             [7]        padding (FlashMLA leaves it unwritten; flashcpp writes 0)
// A page of `block_size` tokens holds first the block_size token records, then the block_size scale records:
// token t's record at t * 576, its scales at block_size * 576 + t * 8. Pages may be padded (FlashMLA's tests
// pad them to a multiple of 576 bytes); the page stride only has to be a multiple of 16 bytes.
// Scales are powers of two as in V3.2: 2^ceil(log2(max(amax / 448, 1e-4))); 1e-4 keeps them in [2^-13, 2^120]
// so every scale byte is in [114, 247] (255 would be e8m0's NaN).
#pragma once
#include <cstdint>

#include "mla/fp8_v32.hpp"  // the e4m3 / bf16 conversions and the power-of-two scale rule are the same

namespace flashcpp::mla::fp8_v4 {

inline constexpr int kBytesPerToken = 584;
inline constexpr int kDims = 512;
inline constexpr int kNopeDims = 448;
inline constexpr int kRopeDims = 64;
inline constexpr int kTileDims = 64;
inline constexpr int kNumScales = kNopeDims / kTileDims;               // 7
inline constexpr int kTokenRecordBytes = kNopeDims + kRopeDims * 2;    // 576
inline constexpr int kScaleRecordBytes = kBytesPerToken - kTokenRecordBytes;  // 8
inline constexpr int kRopeOffset = kNopeDims;                          // within the token record
inline constexpr int kPageStrideMultiple = 16;
static_assert(kNumScales + 1 == kScaleRecordBytes, "7 scales and one pad byte");

/// Byte offset of token `slot`'s token record / scale record within its page.
FLASHCPP_HD int64_t token_record_offset(int64_t slot) { return slot * kTokenRecordBytes; }
FLASHCPP_HD int64_t scale_record_offset(int64_t block_size, int64_t slot) {
  return block_size * kTokenRecordBytes + slot * kScaleRecordBytes;
}

/// The e8m0 byte of a power-of-two scale from fp8::pow2_scale (a normal float): its biased exponent.
FLASHCPP_HD uint8_t e8m0_of_pow2(float scale) { return static_cast<uint8_t>((fp8::float_bits(scale) >> 23) & 0xffu); }

/// The scale an e8m0 byte stands for (255 is NaN in e8m0 and never produced by the quantizer).
FLASHCPP_HD float pow2_of_e8m0(uint8_t e) {
  return e == 0xffu ? fp8::bits_float(0x7fc00000u) : e == 0 ? fp8::bits_float(0x00400000u)  // 2^-127, subnormal
                                                     : fp8::bits_float(static_cast<uint32_t>(e) << 23);
}

/// Quantizes one token (512 bf16 values at `src`, consecutive) into its two records. The host quantizer
/// calls this directly; the device kernel spreads the same arithmetic over a warp.
FLASHCPP_HD void quantize_token(const uint16_t* src, uint8_t* token_record, uint8_t* scale_record) {
  for (int t = 0; t < kNumScales; ++t) {
    float amax = 0.f;
    for (int c = 0; c < kTileDims; ++c) {
      const float x = fp8::bf16_to_float(src[t * kTileDims + c]);
      const float a = x < 0.f ? -x : x;
      amax = a > amax ? a : amax;
    }
    const float scale = fp8::pow2_scale(amax);
    for (int c = 0; c < kTileDims; ++c)
      token_record[t * kTileDims + c] = fp8::float_to_e4m3(fp8::bf16_to_float(src[t * kTileDims + c]) / scale);
    scale_record[t] = e8m0_of_pow2(scale);
  }
  scale_record[kNumScales] = 0;
  for (int c = 0; c < kRopeDims; ++c) {
    const uint16_t v = src[kNopeDims + c];
    token_record[kRopeOffset + 2 * c] = static_cast<uint8_t>(v & 0xffu);
    token_record[kRopeOffset + 2 * c + 1] = static_cast<uint8_t>(v >> 8);
  }
}

}  // namespace flashcpp::mla::fp8_v4
