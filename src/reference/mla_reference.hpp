// Float64 CPU references for sparse MLA (FlashMLA semantics, see include/flashcpp/mla.hpp): prefill over a
// bf16 KV, decode over the dequantized V3.2 FP8 cache, and the V3.2 quantizer. Written for clarity, not
// speed; every input is a host TensorView (any strides).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "flashcpp/tensor.hpp"

namespace flashcpp::reference {

/// Reference results for `rows` query tokens (all tokens, or the ones asked for), row-major:
/// out [rows, h_q, d_v], lse / max_logits [rows, h_q]. Empty rows: out 0, lse +inf, max_logits -inf.
struct MlaReferenceResult {
  int64_t rows = 0, h_q = 0, d_v = 0;
  std::vector<double> out, lse, max_logits;
  double out_at(int64_t row, int64_t h, int64_t c) const { return out[(row * h_q + h) * d_v + c]; }
  double lse_at(int64_t row, int64_t h) const { return lse[row * h_q + h]; }
  double max_logits_at(int64_t row, int64_t h) const { return max_logits[row * h_q + h]; }
};

/// Sparse prefill. q bf16 [s_q, h_q, d_qk]; kv bf16 [s_kv, 1, d_qk]; indices i32 [s_q, 1, topk];
/// attn_sink f32 [h_q] or null; topk_length i32 [s_q] or null. `tokens`: the q rows to compute (empty = all).
MlaReferenceResult mla_sparse_prefill_reference(const TensorView& q, const TensorView& kv, const TensorView& indices,
                                                OptionalTensor attn_sink, OptionalTensor topk_length, double sm_scale,
                                                int d_v = 512, std::span<const int64_t> tokens = {});

/// Sparse decode over the dequantized cache. q bf16 [b, s_q, h_q, 576]; kv_cache u8/i8/e4m3
/// [num_blocks, block_size, 1, 656]; indices i32 [b, s_q, topk] (block * block_size + offset; anything
/// outside [0, num_blocks * block_size) masked); topk_length i32 [b] or null; attn_sink f32 [h_q] or null.
/// `tokens`: flattened (b * s_q + s) tokens to compute (empty = all). max_logits is filled too.
MlaReferenceResult mla_sparse_decode_reference(const TensorView& q, const TensorView& kv_cache,
                                               const TensorView& indices, OptionalTensor attn_sink,
                                               OptionalTensor topk_length, double sm_scale,
                                               std::span<const int64_t> tokens = {});

/// The 576 values one 656-byte V3.2 row stands for: e4m3 * scale for dims 0..511, bf16 RoPE for 512..575.
std::vector<double> mla_dequantize_v32_row(const uint8_t* row);

/// Independent quantizer: the V3.2 bytes of `kv` bf16 [..., 576] (host, any strides) as contiguous
/// 656-byte rows in row-major order of the leading dims. The e4m3 code is found by exhaustive nearest
/// search (ties to the even code), the scale as 2^ceil(log2(max(amax / 448, 1e-4))) with amax / 448 in f32.
std::vector<uint8_t> mla_quantize_v32_reference(const TensorView& kv);

/// Decodes an e4m3fn byte exactly (NaN for 0x7f / 0xff).
double e4m3_value(uint8_t code);

}  // namespace flashcpp::reference
