// The kernel selector of sparse MLA (sparse_attention_kernel.hpp): which kernel runs a problem, and the
// one launch switch over the kernels.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/env.hpp"
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
  if (p.tokens_per_request < 1) return false;
  if (p.d_v != kDv || p.h_q < 1 || p.num_tokens < 0 || p.topk < 1) return false;
  if (p.topk_length != nullptr && p.tokens_per_length < 1) return false;
  if (p.q == nullptr || p.indices == nullptr || p.out == nullptr || (p.num_kv > 0 && p.kv == nullptr)) return false;
  // 16-byte vector access: Q rows, KV rows and O rows start on 16-byte boundaries.
  const bool by_request = p.tokens_per_request > 1;
  if (!aligned16(p.q) || p.q_stride_token % 8 != 0 || p.q_stride_head % 8 != 0) return false;
  if (!aligned16(p.out) || p.out_stride_token % 8 != 0 || p.out_stride_head % 8 != 0) return false;
  if (by_request && (p.q_stride_request % 8 != 0 || p.out_stride_request % 8 != 0)) return false;
  if (!aligned16(p.kv)) return false;
  switch (p.kv_format) {
    case KvFormat::bf16:  // prefill (d_qk 576 or 512) unsplit; dense decode (576) split
      return (p.d_qk == 576 || (p.d_qk == 512 && p.sched == nullptr)) && p.kv_row_stride % 8 == 0;
    case KvFormat::fp8_v32:
      return p.d_qk == 576 && p.block_size >= 1 && p.kv_block_stride_bytes % 16 == 0 &&
             p.kv_slot_stride_bytes % 16 == 0 && p.kv_slot_stride_bytes >= kFp8RowBytes;
    case KvFormat::fp8_v4:  // both pools: pages of 16-byte multiples, pool slot counts of whole 64-row tiles
      return p.d_qk == 512 && p.block_size >= 1 && p.kv_block_stride_bytes % 16 == 0 && p.main_topk >= 0 &&
             p.main_topk <= p.topk && p.main_topk % 64 == 0 &&
             (p.main_topk == p.topk ||
              (p.extra_kv != nullptr && aligned16(p.extra_kv) && p.extra_indices != nullptr &&
               p.extra_block_size >= 1 && p.extra_block_stride_bytes % 16 == 0));
  }
  return false;
}

namespace {
// The forced FP8 decode kernel, or -1 for the automatic choice.
std::atomic<int>& fp8_kernel_flag() {
  static std::atomic<int> flag{[] {
    const std::string v = env::choice("FLASHCPP_MLA_FP8_KERNEL").value_or("auto");
    return v == "wgmma" ? static_cast<int>(SparseKernel::wgmma_sm90)
                        : (v == "mma" ? static_cast<int>(SparseKernel::mma_sm90) : -1);
  }()};
  return flag;
}
}  // namespace

const char* kernel_name(SparseKernel k) {
  switch (k) {
    case SparseKernel::simple: return "simple";
    case SparseKernel::mma_sm90: return "mma_sm90";
    case SparseKernel::wgmma_sm90: return "wgmma_sm90";
  }
  return "unknown";
}

void set_fp8_decode_kernel(std::optional<SparseKernel> k) {
  fp8_kernel_flag().store(k == SparseKernel::wgmma_sm90 ? static_cast<int>(SparseKernel::wgmma_sm90)
                                                        : (k.has_value() ? static_cast<int>(SparseKernel::mma_sm90) : -1));
}
std::optional<SparseKernel> fp8_decode_kernel() {
  const int v = fp8_kernel_flag().load(std::memory_order_relaxed);
  if (v < 0) return std::nullopt;
  return static_cast<SparseKernel>(v);
}

SparseKernel auto_fp8_kernel(const SparseAttentionParams& p) {
  constexpr int kGroupHeads = 64;
  return p.h_q <= 2 * kGroupHeads ? SparseKernel::wgmma_sm90 : SparseKernel::mma_sm90;
}

SparseKernel select_kernel(const SparseAttentionParams& p, bool hopper) {
  if (force_simple_kernel() || !hopper || !sparse_attention_sm90_handles(p)) return SparseKernel::simple;
  if (p.kv_format == KvFormat::bf16) return SparseKernel::wgmma_sm90;
  // V4 pages: the wgmma kernel (its GPU tests passed on the H200, 2026-12-01); the mma.sync kernel has no V4
  // path, so forcing it runs the simple kernel.
  if (p.kv_format == KvFormat::fp8_v4)
    return fp8_decode_kernel() == SparseKernel::mma_sm90 ? SparseKernel::simple : SparseKernel::wgmma_sm90;
  return fp8_decode_kernel().value_or(auto_fp8_kernel(p));
}

bool launch_kernel(SparseKernel k, const SparseAttentionParams& p, cudaStream_t stream) {
  switch (k) {
    case SparseKernel::simple:
      launch_sparse_attention_simple(p, stream);
      return true;
    case SparseKernel::mma_sm90:
      return launch_sparse_attention_mma_fp8(p, stream);
    case SparseKernel::wgmma_sm90:
      return p.kv_format == KvFormat::bf16 ? launch_sparse_attention_wgmma_bf16(p, stream)
                                           : launch_sparse_attention_wgmma_fp8(p, stream);
  }
  return false;
}

bool launch_sparse_attention_sm90(const SparseAttentionParams& p, cudaStream_t stream) {
  const SparseKernel k = select_kernel(p, /*hopper=*/true);
  return k != SparseKernel::simple && launch_kernel(k, p, stream);
}

}  // namespace flashcpp::mla::kernels
