// The Hopper (sm_90a) entry point of the sparse MLA kernels: checks that the warp-specialized wgmma kernel
// (sparse_attention_wgmma.cuh) handles the problem, then launches its bf16 (prefill) or FP8 (decode)
// instantiation.
#include <cstdint>

#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::kernels {
namespace {

constexpr int kDv = 512;
constexpr int kFp8RowBytes = 656;

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

bool sparse_attention_sm90_handles(const SparseAttentionParams& p) {
  if (p.sched != nullptr && (p.num_splits == nullptr || p.o_accum == nullptr || p.lse_accum == nullptr ||
                             p.num_parts < 1 || p.num_requests < 1 || p.tokens_per_request < 1))
    return false;
  if (p.lse_stride_request >= 0 && p.tokens_per_request < 1) return false;
  if (p.d_v != kDv || p.h_q < 1 || p.num_tokens < 0 || p.topk < 1) return false;
  if (p.topk_length != nullptr && p.tokens_per_length < 1) return false;
  if (p.q == nullptr || p.indices == nullptr || p.out == nullptr || (p.num_kv > 0 && p.kv == nullptr)) return false;
  // 16-byte vector access: Q rows, KV rows and O rows start on 16-byte boundaries.
  if (!aligned16(p.q) || p.q_stride_token % 8 != 0 || p.q_stride_head % 8 != 0) return false;
  if (!aligned16(p.out) || p.out_stride_token % 8 != 0 || p.out_stride_head % 8 != 0) return false;
  if (!aligned16(p.kv)) return false;
  switch (p.kv_format) {
    case KvFormat::bf16:  // prefill: never split
      return p.sched == nullptr && (p.d_qk == 576 || p.d_qk == 512) && p.kv_row_stride % 8 == 0;
    case KvFormat::fp8_v32:
      return p.d_qk == 576 && p.block_size >= 1 && p.kv_block_stride_bytes % 16 == 0 &&
             p.kv_slot_stride_bytes % 16 == 0 && p.kv_slot_stride_bytes >= kFp8RowBytes;
  }
  return false;
}

bool launch_sparse_attention_sm90(const SparseAttentionParams& p, cudaStream_t stream) {
  if (!sparse_attention_sm90_handles(p)) return false;
  return p.kv_format == KvFormat::bf16 ? launch_sparse_attention_wgmma_bf16(p, stream)
                                       : launch_sparse_attention_wgmma_fp8(p, stream);
}

}  // namespace flashcpp::mla::kernels
