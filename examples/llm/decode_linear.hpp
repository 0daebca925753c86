// The linear layers of a small decode step (at most kDecodeLinearMaxTokens tokens), each one kernel with the ops
// around it fused: y[t, r] = sum_i x'[t, i] * w[r, i] (f32 accumulation), where x' is x or, with a norm, the RMSNorm of
// x (x * rsqrt(mean(x^2) + eps) * norm_w, in f32, never rounded to 16 bits), and the epilogue is one of
//   store_f32     out_f32[t, r] = y                                              (the LM head: logits)
//   add_residual  residual[t, r] += y, rounded once                              (o and down projections)
//   silu_and_mul  act[t, j] = silu(y[t, j]) * y[t, ffn + j], j < ffn = rows / 2  (gate/up; w holds gate rows, then up)
//   rope_append   the fused q/k/v projection: q rows RoPE-rotated into q_out, k rows rotated and v rows written into
//                 the paged caches at each token's position (GPT-J pairs (2i, 2i + 1), theta_i = rope_theta^(-2i/d))
// In cuBLAS plus FlashInfer terms a layer's decode step runs 10 kernels (two norms, four GEMMs, RoPE, the KV append,
// SiLU-and-mul, attention); with these it runs 5 (four of these and attention). One warp computes two output rows
// (a RoPE pair, or a gate row and its up row) for every token; weights are read once, before the kernel waits for the
// previous one (programmatic dependent launch), since they do not depend on it.
//
// Types: w, x, norm_w, residual, act, q_out and the caches hold 16-bit floats of one type (f16 or bf16). Layouts are
// row-major and contiguous: w [rows, k], x [tokens, k], out_f32 / residual [tokens, rows]; q_out rows are q_stride
// apart (the q part of a [tokens, qkv rows] buffer); caches [pages, page_size, kv_heads, head_dim] (NHD). Device
// indices (int32): positions [tokens], batch_indices [tokens], kv_indptr [batch + 1], kv_indices (page ids) — the
// paged-cache arrays FlashInfer's append takes. The engine validates shapes and indices on the host; the launcher
// checks the kernel's own limits (tokens, k, rows) and returns cudaErrorInvalidValue past them.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashcpp::llm {

inline constexpr int64_t kDecodeLinearMaxTokens = 8;
/// x' of 8 tokens in f32: 48 KiB of dynamic shared memory, which the launcher opts in to (with the kernel's static
/// shared memory it passes the 48 KiB a launch gets by default).
inline constexpr int64_t kDecodeLinearMaxK = 1536;

enum class DecodeEpilogue { store_f32, add_residual, silu_and_mul, rope_append };

struct DecodeLinearParams {
  DecodeEpilogue epilogue = DecodeEpilogue::store_f32;
  bool f16 = true;  ///< the 16-bit type: f16, else bf16
  int64_t tokens = 0, rows = 0, k = 0;
  const uint16_t* w = nullptr;
  const uint16_t* x = nullptr;
  const uint16_t* norm_w = nullptr;  ///< RMSNorm of x first when set
  float eps = 1e-5f;
  float* out_f32 = nullptr;       ///< store_f32
  uint16_t* residual = nullptr;   ///< add_residual
  uint16_t* act = nullptr;        ///< silu_and_mul
  // rope_append: rows = (heads + 2 * kv_heads) * head_dim
  uint16_t* q_out = nullptr;
  int64_t q_stride = 0;
  uint16_t *k_cache = nullptr, *v_cache = nullptr;
  const int32_t *positions = nullptr, *batch_indices = nullptr, *kv_indptr = nullptr, *kv_indices = nullptr;
  int64_t heads = 0, kv_heads = 0, head_dim = 0, page_size = 0;
  /// rope_append, optional (the persistent decode step's shared-memory copies): each token's position and cache slot
  /// (page * page_size + position % page_size), read there instead of derived from the index arrays above.
  const int32_t* token_pos = nullptr;
  const int64_t* token_slot = nullptr;
  float rope_theta = 10000.f;
  bool pdl = false;  ///< launch as a programmatic dependent of the previous kernel
};

/// True when `launch_decode_linear` takes a step of `tokens` tokens over inputs of k features (k % 8 == 0).
bool decode_linear_supports(int64_t tokens, int64_t k);
cudaError_t launch_decode_linear(const DecodeLinearParams& p, cudaStream_t stream);

}  // namespace flashcpp::llm
