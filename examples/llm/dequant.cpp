// Dequantization of ggml blocks (dequant.hpp). Every product below is exact in f32 (an f16 scale has 11
// significant bits, a quant at most 8), so the results do not depend on whether the compiler fuses the Q4_1
// multiply-add: d * q is exact, and one rounding of d * q + m is all either way.
#include "dequant.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "flashcpp/error.hpp"
#include "flashcpp/reference.hpp"

namespace flashcpp::llm {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

constexpr size_t kBlock = 32;  // values per Q4_0 / Q4_1 / Q8_0 block

// One block of 32 values into out[0..32); `p` points at the block.
void q4_0_block(const uint8_t* p, float* out) {
  const float d = f16_to_f32(load_u16(p));
  const uint8_t* qs = p + 2;
  for (size_t j = 0; j < kBlock / 2; ++j) {
    out[j] = d * static_cast<float>((qs[j] & 0x0f) - 8);
    out[j + kBlock / 2] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

void q4_1_block(const uint8_t* p, float* out) {
  const float d = f16_to_f32(load_u16(p));
  const float m = f16_to_f32(load_u16(p + 2));
  const uint8_t* qs = p + 4;
  for (size_t j = 0; j < kBlock / 2; ++j) {
    out[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
    out[j + kBlock / 2] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

void q8_0_block(const uint8_t* p, float* out) {
  const float d = f16_to_f32(load_u16(p));
  for (size_t j = 0; j < kBlock; ++j) out[j] = d * static_cast<float>(static_cast<int8_t>(p[2 + j]));
}

void check_size(GgmlType type, std::span<const uint8_t> src, size_t n, std::string_view what) {
  const uint64_t wanted = ggml_bytes(type, n, what);
  if (src.size() != wanted)
    throw_error(ErrorCode::invalid_argument, std::string(what) + ": " + std::to_string(src.size()) + " bytes given, " +
                                                 std::to_string(n) + " elements of " +
                                                 ggml_type_name(static_cast<uint32_t>(type)) + " take " +
                                                 std::to_string(wanted));
}

/// Calls emit(first element index, values, count) for consecutive runs of dequantized values (a block at a time).
template <class Emit>
void for_each_run(GgmlType type, std::span<const uint8_t> src, size_t n, Emit&& emit) {
  float run[kBlock];
  const uint8_t* p = src.data();
  switch (type) {
    case GgmlType::f32:
      for (size_t i = 0; i < n; i += kBlock) {
        const size_t count = std::min(kBlock, n - i);
        std::memcpy(run, p + i * 4, count * 4);
        emit(i, run, count);
      }
      return;
    case GgmlType::f16:
      for (size_t i = 0; i < n; i += kBlock) {
        const size_t count = std::min(kBlock, n - i);
        for (size_t j = 0; j < count; ++j) run[j] = f16_to_f32(load_u16(p + (i + j) * 2));
        emit(i, run, count);
      }
      return;
    case GgmlType::bf16:
      for (size_t i = 0; i < n; i += kBlock) {
        const size_t count = std::min(kBlock, n - i);
        for (size_t j = 0; j < count; ++j) run[j] = bf16_to_f32(load_u16(p + (i + j) * 2));
        emit(i, run, count);
      }
      return;
    case GgmlType::q4_0:
      for (size_t b = 0; b < n / kBlock; ++b) {
        q4_0_block(p + b * 18, run);
        emit(b * kBlock, run, kBlock);
      }
      return;
    case GgmlType::q4_1:
      for (size_t b = 0; b < n / kBlock; ++b) {
        q4_1_block(p + b * 20, run);
        emit(b * kBlock, run, kBlock);
      }
      return;
    case GgmlType::q8_0:
      for (size_t b = 0; b < n / kBlock; ++b) {
        q8_0_block(p + b * 34, run);
        emit(b * kBlock, run, kBlock);
      }
      return;
  }
}

}  // namespace

uint16_t f32_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  // A NaN keeps its sign and top payload bits, with the quiet bit set so that truncation cannot make it infinity.
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // Round to nearest, ties to even: add just under half an ulp of bf16, plus one when the kept part is odd.
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);  // infinity, or NaN with its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal f16 (mantissa * 2^-24): normalise, every one is a normal f32.
    int shift = 0;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<uint32_t>(127 - 15 + 1 - shift) << 23) | ((mantissa & 0x3ff) << 13);
  }
  return std::bit_cast<float>(bits);
}

void dequantize(GgmlType type, std::span<const uint8_t> src, std::span<float> dst, std::string_view what) {
  check_size(type, src, dst.size(), what);
  for_each_run(type, src, dst.size(),
               [&](size_t first, const float* values, size_t count) {
                 std::memcpy(dst.data() + first, values, count * sizeof(float));
               });
}

void dequantize(GgmlType type, std::span<const uint8_t> src, std::span<uint16_t> dst, DType out, std::string_view what) {
  if (out != DType::f16 && out != DType::bf16)
    throw_error(ErrorCode::invalid_argument, std::string(what) + ": the 16-bit output must be f16 or bf16");
  check_size(type, src, dst.size(), what);
  const GgmlType same = out == DType::f16 ? GgmlType::f16 : GgmlType::bf16;
  if (type == same) {  // already in the output type: the bits as they are (a NaN's payload included)
    if (!dst.empty()) std::memcpy(dst.data(), src.data(), src.size());
    return;
  }
  uint16_t (*const round)(float) = out == DType::f16 ? +[](float x) { return reference::float_to_half(x); } : &f32_to_bf16;
  for_each_run(type, src, dst.size(), [&](size_t first, const float* values, size_t count) {
    for (size_t j = 0; j < count; ++j) dst[first + j] = round(values[j]);
  });
}

float half_bits_to_f32(DType type, uint16_t bits) { return type == DType::f16 ? f16_to_f32(bits) : bf16_to_f32(bits); }

}  // namespace flashcpp::llm
