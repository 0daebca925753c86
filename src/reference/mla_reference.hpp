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
/// out_magnitude [rows, h_q, d_v]: sum_j p_j |v_jc| with the weights p_j of out (softmax over the valid
/// slots, the sink in the denominator), so |out| <= out_magnitude; a kernel whose every term p_j v_jc has a
/// relative error of at most e is off by at most e * out_magnitude (the GPU tests' bound for bf16 P).
struct MlaReferenceResult {
  int64_t rows = 0, h_q = 0, d_v = 0;
  std::vector<double> out, lse, max_logits, out_magnitude;
  double out_at(int64_t row, int64_t h, int64_t c) const { return out[(row * h_q + h) * d_v + c]; }
  double out_magnitude_at(int64_t row, int64_t h, int64_t c) const { return out_magnitude[(row * h_q + h) * d_v + c]; }
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

/// Dense decode (FlashMLA's flash_mla_with_kvcache): request r's tokens attend to its first cache_seqlens[r] cached
/// tokens (clamped to [0, max_blocks * block_size]; causal: token s sees length - (s_q - 1 - s)), token j in block
/// block_table[r][j / block_size] (an id outside [0, num_blocks) masks the token). q bf16 or fp16 [b, s_q, h_q, 576];
/// kv_cache bf16 or fp16 [num_blocks, block_size, 1, 576] or the V3.2 FP8 rows u8/i8/e4m3 [num_blocks, block_size, 1,
/// 656] (dequantized); block_table i32 [b, max_blocks]; cache_seqlens i32 [b]; attn_sink f32 [h_q] or null.
/// `tokens` as for sparse decode. max_logits is filled too.
MlaReferenceResult mla_dense_decode_reference(const TensorView& q, const TensorView& kv_cache,
                                              const TensorView& block_table, const TensorView& cache_seqlens,
                                              bool causal, OptionalTensor attn_sink, double sm_scale,
                                              std::span<const int64_t> tokens = {});

/// The 576 values one 656-byte V3.2 row stands for: e4m3 * scale for dims 0..511, bf16 RoPE for 512..575.
std::vector<double> mla_dequantize_v32_row(const uint8_t* row);

/// Independent quantizer: the V3.2 bytes of `kv` bf16 [..., 576] (host, any strides) as contiguous
/// 656-byte rows in row-major order of the leading dims. The e4m3 code is found by exhaustive nearest
/// search (ties to the even code), the scale as 2^ceil(log2(max(amax / 448, 1e-4))) with amax / 448 in f32.
std::vector<uint8_t> mla_quantize_v32_reference(const TensorView& kv);

/// Decodes an e4m3fn byte exactly (NaN for 0x7f / 0xff).
double e4m3_value(uint8_t code);

// DeepSeek V4 ("MODEL1") FP8 cache: d_qk 512, 584 bytes per token in two records per page (mla/fp8_v4.hpp).

/// The 512 values token `slot` of a V4 page stands for: e4m3 * 2^(e8m0 - 127) for dims 0..447, bf16 RoPE
/// for 448..511. `page` points at the page's first byte.
std::vector<double> mla_dequantize_v4_token(const uint8_t* page, int64_t block_size, int64_t slot);

/// Independent V4 quantizer: `kv` bf16 [num_blocks, block_size, 1, 512] (host, any strides) as pages of
/// `page_bytes` (>= block_size * 584) bytes each, consecutive; pad bytes and page padding are 0. Codes by
/// exhaustive nearest search (ties to even), scales as for V3.2 per 64-value tile.
std::vector<uint8_t> mla_quantize_v4_reference(const TensorView& kv, int64_t page_bytes);

/// One paged V4 KV pool: cache u8/i8/e4m3 [num_blocks, block_size, 1, 584] (page stride = stride(0)),
/// indices i32 [b, s_q, topk] (block * block_size + offset; anything outside [0, num_blocks * block_size)
/// masked), topk_length i32 [b] or null (per request: slots >= it are masked).
struct MlaV4Pool {
  TensorView cache, indices;
  OptionalTensor topk_length = nullptr;
};

/// Sparse decode over one or two V4 pools attended in one softmax (FlashMLA's main and extra caches).
/// q bf16 [b, s_q, h_q, 512]; extra may be null; attn_sink f32 [h_q] or null. `tokens` as for V3.2.
MlaReferenceResult mla_sparse_decode_v4_reference(const TensorView& q, const MlaV4Pool& main, const MlaV4Pool* extra,
                                                  OptionalTensor attn_sink, double sm_scale,
                                                  std::span<const int64_t> tokens = {});

}  // namespace flashcpp::reference
