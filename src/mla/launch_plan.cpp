// The launch plan of sparse MLA (launch_plan.hpp): which kernel, instantiation, head grouping and cluster run a
// problem, and the one launch switch over them.
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/env.hpp"
#include "mla/launch_plan.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::kernels {
namespace {

constexpr int kDv = 512;
constexpr int kFp8RowBytes = 656;

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }
constexpr int kGroupHeads = 64;  // heads per CTA of every wgmma instantiation (the wgmma M)

}  // namespace

bool sparse_attention_sm90_handles(const SparseAttentionParams& p) {
  if (p.sched != nullptr && (p.num_splits == nullptr || p.o_accum == nullptr || p.lse_accum == nullptr ||
                             p.num_parts < 1 || p.num_requests < 1 || p.tokens_per_request < 1))
    return false;
  if (p.tokens_per_request < 1) return false;
  if (p.d_v != kDv || p.h_q < 1 || p.num_tokens < 0 || p.topk < 1) return false;
  // Lengths per token or per request (SparseAttentionParams::length_index), V4's extra pool's likewise.
  if ((p.topk_length != nullptr || p.extra_topk_length != nullptr) && p.tokens_per_length != 1 &&
      p.tokens_per_length != p.tokens_per_request)
    return false;
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
    case KvFormat::f16:  // dense decode (576)
      return p.d_qk == 576 && p.kv_row_stride % 8 == 0;
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
    case SparseKernel::dense_mma_sm90: return "dense_mma_sm90";
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

namespace {
// On by default: 1.31x / 1.10x the gather kernels' speed at 16 / 32 heads on FlashMLA's dense suite (H100,
// 2026-12-07; docs/PERFORMANCE.md, "The few-heads FP8 kernel"); FLASHCPP_MLA_DENSE_KERNEL=gather switches it off.
std::atomic<bool>& dense_fp8_mma_flag() {
  static std::atomic<bool> flag{env::choice("FLASHCPP_MLA_DENSE_KERNEL").value_or("mma") != "gather"};
  return flag;
}
}  // namespace

void set_dense_fp8_mma_kernel(bool on) { dense_fp8_mma_flag().store(on); }
bool dense_fp8_mma_kernel() { return dense_fp8_mma_flag().load(std::memory_order_relaxed); }

bool dense_fp8_mma_fit(const SparseAttentionParams& p) {
  return p.kv_format == KvFormat::fp8_v32 && p.kv_dense_tiles && p.d_qk == 576 && p.d_v == 512 && p.h_q >= 1 &&
         p.h_q <= 32 && p.sched != nullptr && p.kv != nullptr && reinterpret_cast<uintptr_t>(p.kv) % 16 == 0 &&
         p.num_kv >= 1 && p.num_kv <= INT32_MAX && p.block_size >= 64 && p.block_size % 64 == 0 &&
         p.block_size <= INT32_MAX && p.kv_slot_stride_bytes == 656 && p.kv_block_stride_bytes % 16 == 0 &&
         p.kv_block_stride_bytes >= p.block_size * 656;
}

bool multicast_tiles_fit(const SparseAttentionParams& p, bool tensor_maps) {
  return tensor_maps && p.kv_dense_tiles && kv_is_16bit(p.kv_format) && p.d_qk == 576 && p.h_q > kGroupHeads &&
         p.h_q <= 2 * kGroupHeads && p.kv != nullptr && reinterpret_cast<uintptr_t>(p.kv) % 16 == 0 && p.num_kv >= 1 &&
         p.num_kv <= INT32_MAX && p.kv_row_stride >= 576 && p.kv_row_stride % 8 == 0;
}

SparseKernel auto_fp8_kernel(const SparseAttentionParams& p) {
  return p.h_q <= 2 * kGroupHeads ? SparseKernel::wgmma_sm90 : SparseKernel::mma_sm90;
}

namespace {

SparseKernel select_kernel(const SparseAttentionParams& p, bool hopper) {
  if (force_simple_kernel() || !hopper || !sparse_attention_sm90_handles(p)) return SparseKernel::simple;
  if (kv_is_16bit(p.kv_format)) return SparseKernel::wgmma_sm90;
  // V4 pages: the wgmma kernel (its GPU tests passed on the H200, 2026-12-01); the mma.sync kernel has no V4
  // path, so forcing it runs the simple kernel.
  if (p.kv_format == KvFormat::fp8_v4)
    return fp8_decode_kernel() == SparseKernel::mma_sm90 ? SparseKernel::simple : SparseKernel::wgmma_sm90;
  return fp8_decode_kernel().value_or(auto_fp8_kernel(p));
}

// The wgmma instantiation and head grouping for a problem the wgmma kernel takes.
void choose_wgmma(const SparseAttentionParams& p, const KernelSupport& f, LaunchPlan& plan) {
  plan.group_heads = kGroupHeads;
  // A cluster holds the head groups of one token: h_q 65..128 is two groups of 64.
  const bool pair = p.h_q > kGroupHeads && p.h_q <= 2 * kGroupHeads;
  switch (p.kv_format) {
    case KvFormat::bf16:
      plan.variant = p.d_qk == 576 ? WgmmaVariant::bf16_576 : WgmmaVariant::bf16_512;
      // Dense decode over whole tiles at 65..128 heads: the pair cluster (4-6% faster over FlashMLA's dense suite at
      // 128 heads, H200, 2026-12-07; docs/PERFORMANCE.md).
      if (plan.split && multicast_tiles_fit(p, f.tensor_maps)) plan.variant = WgmmaVariant::bf16_576_pair;
      break;
    case KvFormat::f16:
      plan.variant = plan.split && multicast_tiles_fit(p, f.tensor_maps) ? WgmmaVariant::f16_576_pair
                                                                          : WgmmaVariant::f16_576;
      break;
    case KvFormat::fp8_v32:
      plan.variant = pair ? WgmmaVariant::v32_pair : WgmmaVariant::v32_alone;
      break;
    case KvFormat::fp8_v4: {
      plan.variant = pair ? WgmmaVariant::v4_pair : WgmmaVariant::v4_alone;
      constexpr int kHalfHeads = kGroupHeads / 2;
      if (split_decode_group_heads(p.kv_format, p.h_q) != kHalfHeads) break;
      // h_q 33..64: split work runs in the CTAs its schedule was planned for (the 32-head cluster unless the plan
      // said 64: the whole-batch split of a short last round); unsplit work as the cluster where all of the tokens'
      // clusters fit at once, else one CTA of 64 heads per token (unsplit_half_heads_cluster).
      const int split_heads = p.split_group_heads > 0 ? p.split_group_heads : kHalfHeads;
      const bool half = plan.split ? split_heads == kHalfHeads
                                   : unsplit_half_heads_cluster(p.num_tokens, f.v4_half_heads_cluster_slots);
      if (half) {
        plan.variant = WgmmaVariant::v4_pair;
        plan.group_heads = kHalfHeads;
      }
      break;
    }
  }
  plan.cluster_ctas = plan.variant == WgmmaVariant::v32_pair || plan.variant == WgmmaVariant::v4_pair ||
                              plan.variant == WgmmaVariant::bf16_576_pair || plan.variant == WgmmaVariant::f16_576_pair
                          ? 2
                          : 1;
}

}  // namespace

LaunchPlan choose(const SparseAttentionParams& p, const KernelSupport& f) {
  LaunchPlan plan;
  plan.split = p.sched != nullptr;
  plan.kernel = select_kernel(p, f.hopper);
  // Dense decode's FP8 split work with few heads: the kernel that converts the cache's bytes in registers.
  if (plan.kernel == SparseKernel::wgmma_sm90 && plan.split && dense_fp8_mma_kernel() && dense_fp8_mma_fit(p))
    plan.kernel = SparseKernel::dense_mma_sm90;
  if (plan.kernel == SparseKernel::wgmma_sm90) choose_wgmma(p, f, plan);
  return plan;
}

const char* plan_label(const LaunchPlan& plan) {
  if (plan.kernel != SparseKernel::wgmma_sm90) return kernel_name(plan.kernel);
  switch (plan.variant) {
    case WgmmaVariant::bf16_576: return "wgmma_sm90/bf16_576/64h";
    case WgmmaVariant::bf16_512: return "wgmma_sm90/bf16_512/64h";
    case WgmmaVariant::f16_576: return "wgmma_sm90/f16_576/64h";
    case WgmmaVariant::bf16_576_pair: return "wgmma_sm90/bf16_576_pair/64h";
    case WgmmaVariant::f16_576_pair: return "wgmma_sm90/f16_576_pair/64h";
    case WgmmaVariant::v32_alone: return "wgmma_sm90/v32_alone/64h";
    case WgmmaVariant::v32_pair: return "wgmma_sm90/v32_pair/64h";
    case WgmmaVariant::v4_alone: return "wgmma_sm90/v4_alone/64h";
    case WgmmaVariant::v4_pair: return plan.group_heads == 32 ? "wgmma_sm90/v4_pair/32h" : "wgmma_sm90/v4_pair/64h";
    case WgmmaVariant::none: break;
  }
  return kernel_name(plan.kernel);
}

bool launch(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream) {
  if (plan.split != (p.sched != nullptr)) return false;
  switch (plan.kernel) {
    case SparseKernel::simple:
      launch_sparse_attention_simple(p, stream);
      return true;
    case SparseKernel::mma_sm90:
      return launch_sparse_attention_mma_fp8(p, stream);
    case SparseKernel::dense_mma_sm90:
      return launch_dense_decode_mma_fp8(p, stream);
    case SparseKernel::wgmma_sm90: {
      if (plan.variant == WgmmaVariant::f16_576 || plan.variant == WgmmaVariant::f16_576_pair)
        return launch_sparse_attention_wgmma_f16(plan, p, stream);
      const bool bf16 = plan.variant == WgmmaVariant::bf16_576 || plan.variant == WgmmaVariant::bf16_512 ||
                        plan.variant == WgmmaVariant::bf16_576_pair;
      return bf16 ? launch_sparse_attention_wgmma_bf16(plan, p, stream)
                  : launch_sparse_attention_wgmma_fp8(plan, p, stream);
    }
  }
  return false;
}

}  // namespace flashcpp::mla::kernels
