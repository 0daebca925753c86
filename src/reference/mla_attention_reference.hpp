// float64 CPU reference of batch MLA paged attention, plus the host element codecs the MLA/GDN/MoE
// references share (exact decoders of f16, bf16, e4m3; round-to-nearest-even encoders).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "flashcpp/reference.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp::reference {

// ------------------------------------------------------------------------------- element codecs
// f16 and bf16: half_to_float / float_to_half / bf16_to_float / float_to_bf16 of flashcpp/reference.hpp.
float e4m3_bits_to_float(uint8_t v) noexcept;  ///< OCP e4m3fn: no inf, 0x7f/0xff are NaN, max 448
uint8_t float_to_e4m3_bits(float f) noexcept;   ///< round to nearest even, saturating to ±448 (as CUDA's satfinite)
/// x rounded through `t` (f16, bf16, e4m3 or f32; f64 returns x).
double round_through(DType t, double x) noexcept;

/// Element `index` (in elements from `data`) of a host buffer of dtype `t` (f16, bf16, f32, f64, e4m3, i32, i64).
double load(const void* data, DType t, int64_t index) noexcept;
/// Element at a multi-index of a host tensor (strides honoured).
double at(const TensorView& t, std::initializer_list<int64_t> idx) noexcept;


// ------------------------------------------------------------------------------- batch MLA
/// Inputs on the host (any of f16/bf16/f32 for the tensors): q_nope [n, H, 512], q_pe [n, H, 64],
/// ckv_cache [P, page_size, 512], kpe_cache [P, page_size, 64]. Token j of request b lives in page
/// kv_indices[kv_indptr[b] + j / page_size], slot j % page_size. Causal keeps j <= i + kv_len − qo_len.
/// Writes out [n, H, 512] and lse_e [n, H] (natural log of the softmax denominator; −inf for an empty row).
struct MlaReferenceInputs {
  TensorView q_nope, q_pe, ckv_cache, kpe_cache;
  std::span<const int32_t> qo_indptr, kv_indptr, kv_len, kv_indices;
  bool causal = false;
  double sm_scale = 0.0;
};
void batch_mla_reference(const MlaReferenceInputs& in, std::vector<double>& out, std::vector<double>& lse_e,
                         int threads = 1);

}  // namespace flashcpp::reference
