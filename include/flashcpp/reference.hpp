// The public `reference` backend: float64 CPU implementations of the FlashInfer ops, with the same
// arguments as the GPU ops but on host TensorViews (cpu or cuda_host memory), no Runtime and no stream.
// Use it in your own CPU tests, or to check a GPU result. Inputs may be f16, bf16, f32 or f64 (outputs
// too: results are rounded to the output's dtype on store); every product and sum is accumulated in
// double. Arguments are validated (host memory, ranks, shapes, heads); errors are Error(invalid_argument).
// Large problems are split over the host's hardware threads.
#pragma once
#include <cstdint>

#include "flashcpp/activation.hpp"
#include "flashcpp/attention.hpp"
#include "flashcpp/cascade.hpp"
#include "flashcpp/norm.hpp"
#include "flashcpp/page.hpp"
#include "flashcpp/rope.hpp"
#include "flashcpp/sampling.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp::reference {

// -------------------------------------------------------------------------------------------------
// Element conversions (round to nearest even) and element access

float half_to_float(uint16_t h) noexcept;
uint16_t float_to_half(float f) noexcept;
float bf16_to_float(uint16_t b) noexcept;
uint16_t float_to_bf16(float f) noexcept;
/// FP8 codes (e4m3fn: bias 7, no inf, S.1111.111 NaN; e5m2: bias 15, IEEE-like). The encoders round v once to
/// nearest even and saturate (a magnitude beyond the largest finite, inf included, becomes +-448 / +-57344), as
/// CUDA's __nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...) does; NaN gives 0x7f.
float e4m3_to_float(uint8_t b) noexcept;
uint8_t float_to_e4m3(double v) noexcept;
float e5m2_to_float(uint8_t b) noexcept;
uint8_t float_to_e5m2(double v) noexcept;
/// Element at `offset` elements from t.data (f16, bf16, f32, f64, e4m3, e5m2, integer types) as double.
double load(const TensorView& t, int64_t offset);
/// Stores v (rounded to t's dtype: f16, bf16, f32, f64, or e4m3 / e5m2 as the encoders above) at `offset` elements
/// from t.data.
void store(const TensorView& t, int64_t offset, double v);
/// Element offset of an index (uses the view's strides).
int64_t offset_of(const TensorView& t, std::initializer_list<int64_t> index);

// -------------------------------------------------------------------------------------------------
// Norm

void rmsnorm(const TensorView& out, const TensorView& input, const TensorView& weight,
             const RmsNormOptions& options = {});
void fused_qk_rmsnorm(const TensorView& out, const TensorView& input, const TensorView& weight,
                      const RmsNormOptions& options = {});
void gemma_rmsnorm(const TensorView& out, const TensorView& input, const TensorView& weight,
                   const RmsNormOptions& options = {});
/// residual = input + residual (rounded to residual's dtype); input = norm(exact sum) * weight.
void fused_add_rmsnorm(const TensorView& input, const TensorView& residual, const TensorView& weight,
                       const RmsNormOptions& options = {});
void gemma_fused_add_rmsnorm(const TensorView& input, const TensorView& residual, const TensorView& weight,
                             const RmsNormOptions& options = {});

// -------------------------------------------------------------------------------------------------
// Paged KV cache (all host tensors, including the page table)

void append_paged_kv_cache(const TensorView& append_key, const TensorView& append_value,
                           const TensorView& batch_indices, const TensorView& positions, const PagedKvCache& cache);
void append_paged_mla_kv_cache(const TensorView& append_ckv, const TensorView& append_kpe,
                               const TensorView& batch_indices, const TensorView& positions,
                               const PagedMlaKvCache& cache);

// -------------------------------------------------------------------------------------------------
// Attention. lse (optional, f32/f64) is log2(sum_j exp(s_j)); a row with no visible key gets out = 0
// and lse = -inf.

void single_prefill(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    OptionalTensor lse, const SinglePrefillOptions& options = {});
void single_decode(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                   OptionalTensor lse, const SingleDecodeOptions& options = {});
/// Uses config's causal, layout, window_left, logits_soft_cap and sm_scale (heads and dims from shapes).
void batch_prefill_ragged(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& qo_indptr,
                          const TensorView& kv_indptr, const TensorView& out, OptionalTensor lse,
                          const BatchPrefillConfig& config);
void batch_prefill_paged(const TensorView& q, const PagedKvCache& kv, const TensorView& qo_indptr,
                         const TensorView& out, OptionalTensor lse, const BatchPrefillConfig& config);
/// q [batch, H_qo, D]; uses config's layout, window_left, logits_soft_cap and sm_scale.
void batch_decode(const TensorView& q, const PagedKvCache& kv, const TensorView& out, OptionalTensor lse,
                  const BatchDecodeConfig& config);

// -------------------------------------------------------------------------------------------------
// Gated activations (flashcpp/activation.hpp): out [..., d] = act(input[..., :d]) * input[..., d:]. Rows may
// be strided here.

void silu_and_mul(const TensorView& out, const TensorView& input);
void gelu_and_mul(const TensorView& out, const TensorView& input);
void gelu_tanh_and_mul(const TensorView& out, const TensorView& input);

// -------------------------------------------------------------------------------------------------
// Cascade merges (flashcpp/cascade.hpp): states (v, s) with s the base-2 log-sum-exp.

void merge_state(const TensorView& v_a, const TensorView& s_a, const TensorView& v_b, const TensorView& s_b,
                 const TensorView& v_merged, const TensorView& s_merged);
/// Tokens whose mask byte is 0 keep (v, s) unchanged; mask null: every token merges.
void merge_state_in_place(const TensorView& v, const TensorView& s, const TensorView& v_other,
                          const TensorView& s_other, const TensorView* mask = nullptr);
void merge_states(const TensorView& v, const TensorView& s, const TensorView& v_merged, const TensorView& s_merged);

// -------------------------------------------------------------------------------------------------
// Sampling (flashcpp/sampling.hpp), on host views; a per-row parameter is a host 1-D tensor with one value per
// row. The renorm functions give the distribution each sampler draws from (FlashInfer's pivot rules: token t
// survives top-k when fewer than k probabilities are strictly greater, top-p when their mass is below top_p,
// min-p when p_t >= min_p x the row's largest), so sample frequencies can be tested against them.

/// probs = softmax(logits / temperature) per row.
void softmax(const TensorView& logits, const TensorView& probs, SamplingParam temperature = 1.0);
void top_k_renorm_probs(const TensorView& probs, const TensorView& renorm, TopKParam top_k);
void top_p_renorm_probs(const TensorView& probs, const TensorView& renorm, SamplingParam top_p);
/// What min_p_sampling_from_probs draws from (FlashInfer has no min-p renorm op).
void min_p_renorm_probs(const TensorView& probs, const TensorView& renorm, SamplingParam min_p);
/// What top_k_top_p_sampling_from_probs draws from: both filters on the same row.
void top_k_top_p_renorm_probs(const TensorView& probs, const TensorView& renorm, TopKParam top_k,
                              SamplingParam top_p);
/// masked = logits with all but each row's top_k largest set to -inf.
void top_k_mask_logits(const TensorView& logits, const TensorView& masked, TopKParam top_k);

// -------------------------------------------------------------------------------------------------
// RoPE (flashcpp/rope.hpp), on host views; pos_ids int32 or int64. q_rope / k_rope may be q / k (in place).

void apply_rope_pos_ids(const TensorView& q, const TensorView& k, const TensorView& q_rope, const TensorView& k_rope,
                        const TensorView& pos_ids, const RopeOptions& options = {});
void apply_llama31_rope_pos_ids(const TensorView& q, const TensorView& k, const TensorView& q_rope,
                                const TensorView& k_rope, const TensorView& pos_ids, const RopeOptions& options,
                                const Llama31RopeScaling& scaling = {});
/// Every pos_ids value must be a row of cos_sin_cache (checked here).
void apply_rope_with_cos_sin_cache(const TensorView& q, const TensorView& k, const TensorView& q_rope,
                                   const TensorView& k_rope, const TensorView& cos_sin_cache,
                                   const TensorView& pos_ids, bool interleave = false);
/// Ragged batch: request b's tokens [indptr[b], indptr[b+1]) at positions offsets[b] + 0, 1, ... (indptr and offsets
/// host int32 or int64; indptr checked here: from 0 or above, never decreasing, at most q.size(0)). Rows outside
/// [indptr[0], indptr[batch]) of q_rope and k_rope are left as they are, as FlashInfer's kernel leaves them.
void apply_rope(const TensorView& q, const TensorView& k, const TensorView& q_rope, const TensorView& k_rope,
                const TensorView& indptr, const TensorView& offsets, const RopeOptions& options = {});
void apply_llama31_rope(const TensorView& q, const TensorView& k, const TensorView& q_rope, const TensorView& k_rope,
                        const TensorView& indptr, const TensorView& offsets, const RopeOptions& options,
                        const Llama31RopeScaling& scaling = {});
/// RoPE on the rotary parts from the cos/sin cache, every part times its scale, rounded once on store: outputs e4m3
/// or e5m2 (float_to_e4m3 / float_to_e5m2: nearest even, saturating, as FlashInfer's kernel) or any float dtype (f64:
/// the exact value, before FP8 rounding). k parts rank 3 or 2 (MLA); nope parts all four or none; every pos_ids value
/// must be a row of the cache (checked here).
void rope_quantize_fp8(const RopeQuantizeTensors& args, const RopeQuantizeOptions& options = {});
/// rope_quantize_fp8 of q, and of k into the cache's dtype, appended (with GQA/MHA's v x quant_scale_kv) at the slot
/// of positions[i] in request batch_indices[i] as append_paged_kv_cache / append_paged_mla_kv_cache place it. Every
/// tensor, the page table included, on the host; the cache of any dtype rope_quantize_fp8's outputs take (f64: the
/// exact values). Slots outside a request's pages are refused.
void rope_quantize_append_paged_kv_cache(const RopeQuantizeAppendTensors& args, const RopeQuantizeOptions& options = {});

// -------------------------------------------------------------------------------------------------
// DSA top-k (flashcpp/topk.hpp), on host views (any strides; k is the output's width). One exact selection per
// row, in descending order of FlashInfer's order of values (the IEEE total order of the bits: -0.0 below +0.0),
// ties to the lower position; a short row (lengths[r] <= k; top_k: k == d) is FlashInfer's: its positions in
// order, then -1. FlashInfer returns the same set in some order wherever the k-th value of a row is not tied;
// where it is, its choice among the tied entries may differ (the multiset of selected values is the same).
// Device-side rules are checked here: lengths in [0, max_len], row_to_batch in [0, batch), offsets + lengths - 1
// within int32.

/// indices i32 [rows, k], values [rows, k] (any float dtype): the top k = indices.size(1) <= d of input [rows, d].
void top_k(const TensorView& input, const TensorView& indices, const TensorView& values);
/// output_page_table i32 [rows, k]: src_page_table[row_to_batch[r] (or r)][p] at the selected positions p.
void top_k_page_table_transform(const TensorView& input, const TensorView& lengths, const TensorView& src_page_table,
                                const TensorView& output_page_table, OptionalTensor row_to_batch = nullptr);
/// output_indices i32 [rows, k]: offsets[r] + p at the selected positions p.
void top_k_ragged_transform(const TensorView& input, const TensorView& offsets, const TensorView& lengths,
                            const TensorView& output_indices);

}  // namespace flashcpp::reference
