// Internal contract between the sparse-MLA host code (validation, dispatch, scheduling) and the
// attention kernels. Host code validates everything before filling these structs; kernels trust them.
// Semantics follow FlashMLA's current main (see docs/MLA.md): natural-log lse, masked invalid indices,
// empty rows give out 0 / lse +inf / max_logits -inf, attn_sink scales out by exp(lse)/(exp(lse)+exp(sink)).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashcpp::mla::kernels {

/// Where K/V rows come from.
enum class KvFormat : int {
  bf16 = 0,       ///< kv [num_kv, d_qk] bf16, row stride kv_row_stride (elements)
  fp8_v32 = 1,    ///< DeepSeek V3.2 656-byte rows: 512 e4m3, 4 f32 scales (per 128), 64 bf16 rope
};

/// One sparse attention problem over `num_rows` query tokens, each attending (all h_q heads) to
/// its own list of `topk` KV rows. Prefill: a token is a q row (s). Decode: a token is (b, s).
struct SparseAttentionParams {
  // Queries: bf16 [num_tokens, h_q, d_qk], last dim contiguous; strides in elements.
  const void* q = nullptr;
  int64_t q_stride_token = 0, q_stride_head = 0;
  int num_tokens = 0, h_q = 0, d_qk = 576, d_v = 512, topk = 0;

  // Indices: int32 [num_tokens, topk] (stride in elements). An index i is valid iff 0 <= i < num_kv
  // and its slot position < the token's topk_length (when given); everything else is masked, never read.
  const int32_t* indices = nullptr;
  int64_t indices_stride_token = 0;
  // Optional int32 lengths; token t uses topk_length[t / tokens_per_length] (prefill: 1; decode: s_q).
  const int32_t* topk_length = nullptr;
  int tokens_per_length = 1;
  // Optional f32 [h_q].
  const float* attn_sink = nullptr;
  float sm_scale = 0.f;

  // KV source.
  KvFormat kv_format = KvFormat::bf16;
  const void* kv = nullptr;
  int64_t num_kv = 0;             // valid index range [0, num_kv)
  int64_t kv_row_stride = 0;      // bf16: elements between rows
  // fp8_v32 paged cache [num_blocks, block_size, 1, 656]: row r lives at block r / block_size, slot r % block_size.
  int64_t block_size = 0;
  int64_t kv_block_stride_bytes = 0, kv_slot_stride_bytes = 656;

  // Outputs: out bf16 [num_tokens, h_q, d_v] (strides in elements); lse / max_logits f32 [num_tokens, h_q]
  // with element strides (max_logits may be null). 
  void* out = nullptr;
  int64_t out_stride_token = 0, out_stride_head = 0;
  float* lse = nullptr;
  int64_t lse_stride_token = 0, lse_stride_head = 1;
  float* max_logits = nullptr;
  int64_t max_logits_stride_token = 0, max_logits_stride_head = 1;
};

/// Straightforward kernel, correct for every shape the API accepts (any SM >= 8.0). The yardstick.
void launch_sparse_attention_simple(const SparseAttentionParams& p, cudaStream_t stream);

/// Fast Hopper kernel (sm_90a). Returns false, launching nothing, when it does not handle the shape
/// (the caller then uses the simple kernel). Defined in sparse_attention_sm90.cu.
bool launch_sparse_attention_sm90(const SparseAttentionParams& p, cudaStream_t stream);

}  // namespace flashcpp::mla::kernels
