// Cascade merges of attention states on FlashInfer's `cascade` module: validated, asynchronous on the caller's
// stream. An attention state is (v, s): v the attention output over some set of keys, s its log-sum-exp in base 2
// (FlashInfer's lse: log2 of the sum of 2^(score * log2 e)). Merging the states of two disjoint key sets gives
// the state over their union: with m = max(s_a, s_b), w_x = 2^(s_x - m),
//   v = (w_a v_a + w_b v_b) / (w_a + w_b),  s = m + log2(w_a + w_b).
// This is the combine of shared-prefix (cascade) attention and of split-KV attention. (Two states with s = -inf
// merge to NaN, as in FlashInfer.)
//
// Validated before anything is launched (Error(invalid_argument) naming the op, the argument and the rule):
// every tensor on one CUDA device and contiguous; v tensors f16 or bf16 and all the same dtype; s tensors f32;
// head_dim (v's last dim) one of 64, 128, 256, 512; heads x (head_dim / vector width) <= 1024 threads, with
// vector width max(8, head_dim / 32) (merge_states with fewer index sets than tokens too: FlashInfer's block
// holds every head of a token); outputs share no byte with another argument. Zero tokens launch nothing.
#pragma once
#include <cuda_runtime_api.h>

#include "flashcpp/tensor.hpp"

namespace flashcpp {

class Runtime;

/// v_a, v_b, v_merged [tokens, heads, head_dim]; s_a, s_b, s_merged f32 [tokens, heads].
void merge_state(const Runtime& rt, const TensorView& v_a, const TensorView& s_a, const TensorView& v_b,
                 const TensorView& s_b, const TensorView& v_merged, const TensorView& s_merged,
                 cudaStream_t stream = nullptr);

/// In place: (v, s) = merge((v, s), (v_other, s_other)) for every token whose mask byte is non-zero (all tokens
/// when `mask` is null). v, v_other [tokens, heads, head_dim]; s, s_other f32 [tokens, heads]; mask u8 or bool
/// [tokens]. v and s are written; v_other, s_other and mask are read and share no byte with them.
void merge_state_in_place(const Runtime& rt, const TensorView& v, const TensorView& s, const TensorView& v_other,
                          const TensorView& s_other, const TensorView* mask = nullptr, cudaStream_t stream = nullptr);

/// Merges every token's `index_sets` states: v [tokens, index_sets, heads, head_dim], s f32 [tokens, index_sets,
/// heads] -> v_merged [tokens, heads, head_dim], s_merged f32 [tokens, heads]. index_sets >= 1.
void merge_states(const Runtime& rt, const TensorView& v, const TensorView& s, const TensorView& v_merged,
                  const TensorView& s_merged, cudaStream_t stream = nullptr);

}  // namespace flashcpp
