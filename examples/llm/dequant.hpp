// Dequantization of GGUF tensors at load time, on the CPU: ggml's Q4_0, Q4_1, Q8_0, F16, BF16 and F32 blocks to
// f16 or bf16 (round to nearest even) or f32. Load-time work: the model is dequantized once into the 16-bit weights
// the GPU GEMMs read (cuBLASLt has no Q4_1 input), so a simple, exactly specified CPU routine serves both the GPU
// engine and the CPU reference, and its output can be checked value by value in tests.
//
// Blocks (ggml): Q4_0 = f16 d + 16 bytes (32 values, q in [0, 15], x = d * (q - 8)); Q4_1 = f16 d, f16 m + 16
// bytes (x = d * q + m); Q8_0 = f16 d + 32 int8 (x = d * q). In a 4-bit block, byte j holds value j in its low
// nibble and value j + 16 in its high nibble.
#pragma once
#include <cstdint>
#include <span>

#include "flashcpp/dtype.hpp"
#include "gguf.hpp"

namespace flashcpp::llm {

/// f32 -> bf16 bits, round to nearest even (NaN stays NaN).
uint16_t f32_to_bf16(float x);
float bf16_to_f32(uint16_t b);
float f16_to_f32(uint16_t h);

/// Dequantizes dst.size() elements of `type` from `src` (exactly ggml_bytes(type, dst.size()) bytes, else
/// invalid_argument naming `what`) into f32.
void dequantize(GgmlType type, std::span<const uint8_t> src, std::span<float> dst, std::string_view what);
/// The same into 16-bit floats of `out` (DType::f16 or DType::bf16, else invalid_argument): the f32 value rounded to
/// nearest even (beyond the f16 range: infinity, which Model::load refuses).
void dequantize(GgmlType type, std::span<const uint8_t> src, std::span<uint16_t> dst, DType out, std::string_view what);
inline void dequantize_bf16(GgmlType type, std::span<const uint8_t> src, std::span<uint16_t> dst, std::string_view what) {
  dequantize(type, src, dst, DType::bf16, what);
}
/// A 16-bit float of `type` (f16 or bf16) as f32.
float half_bits_to_f32(DType type, uint16_t bits);

}  // namespace flashcpp::llm
