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
// their own), or exactly q and k (in place); pos_ids int32 or int64 [tokens], contiguous.
// Validated before anything is launched (Error(invalid_argument) naming the op, the argument and the rule): one
// CUDA device; head_dim 64, 128, 256 or 512; rotary_dim even, at most head_dim, a multiple of the kernel's vector
// (v = max(8, head_dim / 32) elements; NeoX: of 2v, so each vector lies in one half); rows and strides on 16-byte
// boundaries; H_q + H_k <= 65535; tokens < 2^31; rope_scale and rope_theta finite and > 0; outputs share no byte
// with an input or each other unless exactly in place. The positions themselves live on the device and are not
// read here: with a cos/sin cache every pos_ids value must be a row of it ([0, cache rows)).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

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
/// above). interleave false is vLLM's is_neox.
void apply_rope_with_cos_sin_cache(const Runtime& rt, const TensorView& q, const TensorView& k,
                                   const TensorView& q_rope, const TensorView& k_rope,
                                   const TensorView& cos_sin_cache, const TensorView& pos_ids, bool interleave = false,
                                   cudaStream_t stream = nullptr);

}  // namespace flashcpp
