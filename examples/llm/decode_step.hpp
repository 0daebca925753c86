// A whole decode step of a Llama-family model in one persistent kernel: every layer's q/k/v projection (attention
// RMSNorm before, RoPE and the paged KV append after), attention, o projection (+ residual), gate/up projection (FFN
// RMSNorm before, SiLU-and-mul after), down projection (+ residual), then the output RMSNorm and the LM head into f32
// logits. The linear layers are decode_linear.hpp's, computed by the same device code (decode_linear_device.cuh) and
// so to the same bits; attention is this kernel's own (below). Where decode_linear.cu runs 5 kernels a layer, each a
// latency chain of a few microseconds for well under a microsecond of weights, this kernel runs the phases back to
// back on one block per SM, separated by a grid-wide barrier, and each warp fetches its next phase's weight rows
// before it waits at the barrier (weights do not depend on the step), so the barrier hides the weights' latency.
//
// Launched cooperatively (all blocks resident, which the barrier needs); a CUDA graph may capture it. The barrier
// counter (one uint32 in device memory, zero before the first launch) is left zero by each launch, so launches that
// share it must be stream-ordered (one engine, one stream).
//
// Attention: token t (of sequence batch_indices[t], at position positions[t]) attends keys 0..positions[t] of its
// sequence's pages (kv_indptr / kv_indices, page_size tokens a page, NHD caches [pages, page_size, kv_heads,
// head_dim]), head h reading kv head h / (heads / kv_heads), scale 1 / sqrt(head_dim), f32 online softmax. Its keys
// are split over up to kDecodeStepMaxSplits warps; each warp keeps a running max, sum and output, and the o
// projection's blocks merge the splits (in a fixed order: the step's result does not depend on timing) and round the
// output to the 16-bit type, as the attention output buffer of the other paths is.
//
// Types and layouts as decode_linear.hpp: 16-bit weights and activations of one type (f16 or bf16), row-major. The
// engine validates shapes and indices on the host; decode_step_supports says which models and steps the kernel takes,
// and the launcher returns cudaErrorInvalidValue for anything else.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashcpp::llm {

inline constexpr int64_t kDecodeStepMaxTokens = 4;  ///< the register budget: 12 warps a block at 168 registers
inline constexpr int64_t kDecodeStepHeadDim = 64;
inline constexpr int64_t kDecodeStepMaxSplits = 32;
inline constexpr int64_t kDecodeStepMaxHidden = 768;  ///< hidden and heads * head_dim: 3 chunks of 256 a row
inline constexpr int64_t kDecodeStepMaxFfn = 1536;    ///< 6 chunks of 256 a row

struct DecodeStepLayer {
  const uint16_t *attn_norm = nullptr, *wqkv = nullptr, *wo = nullptr, *ffn_norm = nullptr, *w_gate_up = nullptr,
                 *w_down = nullptr;
  uint16_t *k_cache = nullptr, *v_cache = nullptr;
};

struct DecodeStepParams {
  bool f16 = true;  ///< the 16-bit type: f16, else bf16
  int64_t tokens = 0, layers = 0, hidden = 0, ffn = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0,
          page_size = 0;
  float eps = 1e-5f, rope_theta = 10000.f;
  const DecodeStepLayer* layer = nullptr;  ///< device array [layers]
  const uint16_t *out_norm = nullptr, *lm_head = nullptr;  ///< [hidden], [vocab, hidden]
  uint16_t* residual = nullptr;  ///< [tokens, hidden]: the embeddings in, the last layer's residual out
  uint16_t* qkv = nullptr;       ///< [tokens, (heads + 2 kv_heads) head_dim] scratch (q rows used)
  float* attn_split = nullptr;   ///< scratch: decode_step_split_floats(tokens, heads) floats
  uint16_t* act = nullptr;       ///< [tokens, ffn] scratch
  float* logits = nullptr;       ///< [tokens, vocab]
  const int32_t *positions = nullptr, *batch_indices = nullptr, *kv_indptr = nullptr, *kv_indices = nullptr;
  unsigned* barrier = nullptr;   ///< one counter: zero before the launch, zero after it
};

#if defined(__CUDACC__)
#define FLASHCPP_LLM_HOST_DEVICE __host__ __device__
#else
#define FLASHCPP_LLM_HOST_DEVICE
#endif

/// How the step splits each token's keys over its `warps` warps (the kernel and its tests use these): at most this
/// many splits a (token, head), 1 to kDecodeStepMaxSplits ...
FLASHCPP_LLM_HOST_DEVICE constexpr int64_t decode_step_splits_a_head(int64_t warps, int64_t tokens, int64_t heads) {
  const int64_t s = warps / (tokens * heads);
  return s < 1 ? 1 : s > kDecodeStepMaxSplits ? kDecodeStepMaxSplits : s;
}
/// ... of this many keys each (a multiple of 32, a key a lane, at least 32): a context of len keys takes
/// ceil(len / keys) of them, each non-empty.
FLASHCPP_LLM_HOST_DEVICE constexpr int64_t decode_step_split_keys(int64_t len, int64_t splits) {
  const int64_t per = (len + splits - 1) / splits;
  return per < 32 ? 32 : (per + 31) / 32 * 32;
}

/// Floats of DecodeStepParams::attn_split for a step of `tokens` tokens and `heads` query heads.
int64_t decode_step_split_floats(int64_t tokens, int64_t heads);
/// True when the kernel takes this model and a step of `tokens` tokens.
bool decode_step_supports(int64_t tokens, int64_t hidden, int64_t ffn, int64_t heads, int64_t kv_heads,
                          int64_t head_dim, int64_t vocab);
/// Whether the step can launch on the current device in this 16-bit type (f16, else bf16): its shared memory granted
/// and one block resident on every SM, which the grid barrier needs. cudaSuccess, else why not (the answer is kept
/// per device; the error is not left pending).
cudaError_t decode_step_launch_check(bool f16);
/// Launches the step on `stream` (blocks: one per SM of the current device).
cudaError_t launch_decode_step(const DecodeStepParams& p, cudaStream_t stream);

}  // namespace flashcpp::llm
