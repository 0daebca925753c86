// Rotary position embedding (RoPE) on FlashInfer's `rope` module: validated, asynchronous on the caller's stream.
//
// Every op rotates the first rotary_dim dims of each head of q and k by its token's position and copies the rest:
//   NeoX layout (interleave false): dim j pairs with j +- rotary_dim/2, frequency index p = j mod (rotary_dim/2);
//   GPT-J layout (interleave true): dims 2i and 2i+1 pair, p = floor(j / 2);
//   x'[j] = x[j] cos(a) - x[partner] sin(a) for the first of a pair, x[j] cos(a) + x[partner] sin(a) for the second,
//   with a = pos * f_p and f_p = rope_theta^(-2p / rotary_dim) / rope_scale (Llama 3.1: f_p blended between f_p and
//   f_p / rope_scale by wavelength, as its scaling defines), or cos(a), sin(a) read from a cos/sin cache.
// FlashInfer computes in float (fast sin/cos) and rounds to q's dtype on store.
//
// Tensors: q [tokens, H_q, head_dim], k [tokens, H_k, head_dim], f16 or bf16 (both the same), dims 0 and 1 may be
// strided (slices of a fused qkv tensor), last dim contiguous; q_rope and k_rope the same shapes and dtype (strides
// their own), or exactly q and k (in place). A token's position comes from pos_ids (int32 or int64 [tokens],
// contiguous) or, for the ragged ops, from indptr and offsets: request b owns tokens [indptr[b], indptr[b+1]) at
// positions offsets[b], offsets[b] + 1, ... (indptr [batch + 1] and offsets [batch] on the device, contiguous, both
// int32 or both int64).
// Validated before anything is launched (Error(invalid_argument) naming the op, the argument and the rule): one
// CUDA device; head_dim 64, 128, 256 or 512; rotary_dim even, at most head_dim, a multiple of the kernel's vector
// (v = max(8, head_dim / 32) elements; NeoX: of 2v, so each vector lies in one half); rows and strides on 16-byte
// boundaries; tokens < 2^31; pos_ids ops: H_q + H_k <= 65535; ragged ops: batch x (H_q + H_k) < 2^31 (one block per
// request and head); rope_scale and rope_theta finite and > 0; outputs share no byte with an input or each other
// unless exactly in place. The positions themselves live on the device and are not read here: with a cos/sin cache
// every pos_ids value must be a row of it ([0, cache rows)); for the ragged ops indptr must start at 0 or above,
// never decrease and end at most at tokens, and offsets[b] + (tokens of b) must fit in int32. The ragged ops write
// only the rows [indptr[0], indptr[batch]) of q_rope and k_rope; other rows keep what they held.
//
// rope_quantize_fp8 (FlashInfer's rope_quantize, the input step of DeepSeek MLA and of FP8 attention) takes q and k
// already split into their rotary part (rope_dim wide) and the rest (nope, no_rope_dim wide), rotates the rotary parts
// with a cos/sin cache and writes every part as FP8 in one pass (see RopeQuantizeTensors).
// rope_quantize_append_paged_kv_cache (FlashInfer's function of that name) does the same for q and appends the FP8 k
// (and, for GQA/MHA, v) straight into a paged KV cache: a decode step's attention input in one kernel.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashcpp/page.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp {

class Runtime;

struct RopeOptions {
  int64_t rotary_dim = 0;  ///< dims rotated per head (0: head_dim); the rest are copied
  bool interleave = false;  ///< true: GPT-J pairs (2i, 2i+1); false: NeoX halves (i, i + rotary_dim/2)
  double rope_scale = 1.0;  ///< positions are divided by it (linear position interpolation)
  double rope_theta = 1e4;
};

/// Llama 3.1's frequency scaling (with RopeOptions::rope_scale its factor, 8 for Llama 3.1, and rope_theta 5e5):
/// wavelengths above old_context_length / low_freq_factor are scaled, below old_context_length / high_freq_factor
/// kept, blended between. Requires 0 < low_freq_factor < high_freq_factor and old_context_length > 0.
struct Llama31RopeScaling {
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double old_context_length = 8192.0;
};

/// q_rope, k_rope = RoPE(q, k) at pos_ids[token].
void apply_rope_pos_ids(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                        const TensorView& k_rope, const TensorView& pos_ids, const RopeOptions& options = {},
                        cudaStream_t stream = nullptr);

/// The same with Llama 3.1's scaled frequencies.
void apply_llama31_rope_pos_ids(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                                const TensorView& k_rope, const TensorView& pos_ids, const RopeOptions& options,
                                const Llama31RopeScaling& scaling = {}, cudaStream_t stream = nullptr);

/// vLLM's interface: cos_sin_cache f32 [max_position, rotary_dim] (contiguous, 16-byte aligned), row pos holding
/// cos(pos f_p) for p < rotary_dim/2, then sin(pos f_p); rotary_dim is its width (a multiple of 4 and of the rules
/// above). interleave false is vLLM's is_neox. NOTE: with interleave, FlashInfer's kernel also reads v/2 floats after
/// row pos (16 bytes; 32 at head_dim 512), values it does not use: past the cache's end for its last row.
void apply_rope_with_cos_sin_cache(const Runtime& rt, const TensorView& q, const TensorView& k,
                                   const TensorView& q_rope, const TensorView& k_rope,
                                   const TensorView& cos_sin_cache, const TensorView& pos_ids, bool interleave = false,
                                   cudaStream_t stream = nullptr);

/// q_rope, k_rope = RoPE(q, k) over a ragged batch: request b's tokens [indptr[b], indptr[b+1]) at positions
/// offsets[b] + 0, 1, ... (FlashInfer's apply_rope).
void apply_rope(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                const TensorView& k_rope, const TensorView& indptr, const TensorView& offsets,
                const RopeOptions& options = {}, cudaStream_t stream = nullptr);

/// The same with Llama 3.1's scaled frequencies (FlashInfer's apply_llama31_rope).
void apply_llama31_rope(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                        const TensorView& k_rope, const TensorView& indptr, const TensorView& offsets,
                        const RopeOptions& options, const Llama31RopeScaling& scaling = {},
                        cudaStream_t stream = nullptr);

/// Tensors of one rope_quantize_fp8 call. Inputs f16 or bf16 (all the same), outputs e4m3 or e5m2 (all the same), each
/// output the shape of its input. GQA/MHA: k parts rank 3 [tokens, H_k, d]; MLA (one latent head shared by every q
/// head; DeepSeek: H_q 128, rope_dim 64, no_rope_dim 512): k parts rank 2 [tokens, d].
struct RopeQuantizeTensors {
  TensorView q_rope;      ///< [tokens, H_q, rope_dim]
  TensorView k_rope;      ///< [tokens, H_k, rope_dim] or MLA [tokens, rope_dim]
  TensorView q_rope_out;  ///< fp8, q_rope's shape
  TensorView k_rope_out;  ///< fp8, k_rope's shape
  /// The parts past the rotary dims (no_rope_dim wide, any width >= 0): all four given, or all four absent (no nope
  /// part, as FlashInfer's Python API's None).
  OptionalTensor q_nope = nullptr;      ///< [tokens, H_q, no_rope_dim]
  OptionalTensor k_nope = nullptr;      ///< [tokens, H_k, no_rope_dim] or MLA [tokens, no_rope_dim]
  OptionalTensor q_nope_out = nullptr;  ///< fp8, q_nope's shape
  OptionalTensor k_nope_out = nullptr;  ///< fp8, k_nope's shape
  TensorView cos_sin_cache;  ///< f32 [max_position, rope_dim]: cos(pos f_p) for p < rope_dim/2, then sin(pos f_p)
  TensorView pos_ids;        ///< int32 or int64 [tokens], each a row of cos_sin_cache (read on the device only)
};

struct RopeQuantizeOptions {
  bool interleave = false;      ///< true: GPT-J pairs; false: NeoX halves (FlashInfer's Python default, is_neox true)
  double quant_scale_q = 1.0;   ///< q parts are stored as fp8(value x quant_scale_q)
  double quant_scale_kv = 1.0;  ///< k parts as fp8(value x quant_scale_kv)
  bool enable_pdl = false;      ///< programmatic dependent launch (Hopper and newer)
};

/// RoPE on the rotary parts with the cos/sin cache, then every part multiplied by its scale and rounded to FP8 (round
/// to nearest even, saturating: a value beyond the format's largest finite becomes it, +-448 for e4m3, +-57344 for
/// e5m2; NaN stays NaN), in one kernel (FlashInfer's rope_quantize):
///   q_rope_out = fp8(RoPE(q_rope) x quant_scale_q)   q_nope_out = fp8(q_nope x quant_scale_q)
///   k_rope_out = fp8(RoPE(k_rope) x quant_scale_kv)  k_nope_out = fp8(k_nope x quant_scale_kv)
/// Validated before anything is launched, besides the rules above: rope_dim a multiple of 16 (the kernel's 16-element
/// vectors; NeoX: of 32, so each vector lies in one half) in [16, 16384]; at least one head each;
/// (H_q + H_k) x (1 + ceil(no_rope_dim / rope_dim)) <= 65535 (the kernel's grid y); last dims contiguous, rows
/// 16-byte aligned, inputs' strides before the last dim multiples of 8 elements and outputs' of 16 (16-byte vectors),
/// every such stride below 2^32 (FlashInfer's binding keeps strides in 32 bits); cos_sin_cache contiguous, 16-byte
/// aligned, at most 2^32 elements with int32 pos_ids; quant scales finite, > 0 and at most FLT_MAX (the kernel takes
/// floats); no output shares a byte with any argument. NOTE: with interleave, FlashInfer's kernel also reads the 32
/// bytes after row pos of the cache (values it does not use), past the cache's end for its last row; keep 32 bytes
/// readable after the cache.
void rope_quantize_fp8(const Runtime& rt, const RopeQuantizeTensors& args, const RopeQuantizeOptions& options = {},
                       cudaStream_t stream = nullptr);

/// Tensors of one rope_quantize_append_paged_kv_cache call: q as in rope_quantize_fp8 (written to q_rope_out and
/// q_nope_out), k (and v) appended to a paged cache instead of written out. Inputs f16 or bf16 (all the same); q's
/// outputs and the cache FP8, e4m3 or e5m2 (all the same). Exactly one of kv_cache and mla_cache.
struct RopeQuantizeAppendTensors {
  TensorView q_rope;      ///< [tokens, H_q, rope_dim]
  TensorView k_rope;      ///< GQA/MHA [tokens, H_k, rope_dim]; MLA [tokens, rope_dim] (one latent head)
  TensorView q_nope;      ///< [tokens, H_q, no_rope_dim] (no_rope_dim a multiple of rope_dim, 0 allowed)
  TensorView k_nope;      ///< GQA/MHA [tokens, H_k, no_rope_dim]; MLA [tokens, no_rope_dim]
  OptionalTensor v = nullptr;  ///< GQA/MHA: [tokens, H_k, rope_dim + no_rope_dim]; MLA: absent
  TensorView q_rope_out;  ///< fp8, q_rope's shape
  TensorView q_nope_out;  ///< fp8, q_nope's shape
  TensorView cos_sin_cache;  ///< f32 [max_position, rope_dim]: cos(pos f_p) for p < rope_dim/2, then sin(pos f_p)
  TensorView pos_ids;        ///< int32 or int64 [tokens], each a row of cos_sin_cache (read on the device only)
  TensorView batch_indices;  ///< int32 [tokens]: the request each token is appended to
  TensorView positions;      ///< int32 [tokens]: its position in that request's pages
  /// GQA/MHA: fp8 k/v caches of head_dim rope_dim + no_rope_dim and H_k heads; a token's cached k is
  /// [RoPE(k_rope) | k_nope] x quant_scale_kv, its v is v x quant_scale_kv.
  const PagedKvCache* kv_cache = nullptr;
  /// MLA: fp8 ckv_cache [pages, page_size, no_rope_dim] (k_nope x quant_scale_kv) and kpe_cache [pages, page_size,
  /// rope_dim] (RoPE(k_rope) x quant_scale_kv), any latent widths (not only DeepSeek's 512 and 64).
  const PagedMlaKvCache* mla_cache = nullptr;
};

/// RoPE + FP8 quantization of q (as rope_quantize_fp8: q_rope_out = fp8(RoPE(q_rope) x quant_scale_q), q_nope_out =
/// fp8(q_nope x quant_scale_q)) and of k and v, which are written into the cache at the page slot of positions[i] in
/// request batch_indices[i]: page indices[indptr[b] + positions[i] / page_size], entry positions[i] % page_size (the
/// page table, batch_indices and positions live on the device and are not read here: every slot must lie in the
/// request's pages). One kernel (FlashInfer's rope_quantize_append_paged_kv_cache).
/// Validated before anything is launched, besides rope_quantize_fp8's rules for q, k and the cos/sin cache (rope_dim
/// a multiple of 16, NeoX of 32, in [16, 16384]; 16-byte rows; input strides multiples of 8 elements and output
/// strides of 16, below 2^32; quant scales finite, > 0, at most FLT_MAX): no_rope_dim a multiple of rope_dim (the
/// kernel moves the nope parts in rope_dim-wide chunks), not 0 with mla_cache; the cache as append_paged_kv_cache takes it (k/v caches of
/// identical shape and strides, H_k heads, head_dim rope_dim + no_rope_dim; or ckv/kpe caches of the same pages and
/// page size) with its dtype q_rope_out's, its page strides multiples of 16 elements, 16-byte aligned; the page table
/// int32 (indptr [batch + 1], last_page_len [batch], indices), batch_indices and positions int32 [tokens], contiguous;
/// grid y (H_q + H_k) x (1 + no_rope_dim / rope_dim) + (GQA/MHA) H_k <= 65535; no output (q's, the caches) shares a
/// byte with an input or another output.
void rope_quantize_append_paged_kv_cache(const Runtime& rt, const RopeQuantizeAppendTensors& args,
                                         const RopeQuantizeOptions& options = {}, cudaStream_t stream = nullptr);

}  // namespace flashcpp
