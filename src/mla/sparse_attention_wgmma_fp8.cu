// Instantiations of the wgmma sparse-attention kernel over the FP8 caches (sparse decode): whole requests, and split-KV
// work items of the decode schedule. Which one runs, with how many heads per CTA, is the launch plan's
// (launch_plan.hpp, choose):
//   * V3.2 rows: one CTA tile by tile for h_q <= 64, raw bytes a whole tile ahead (as V4's); for h_q 65..128 the two
//     head groups as a 2-CTA cluster sharing the dequantization, with two raw buffers (H200, 2026-12-01, b 128: 599 us
//     against 642 us with one).
//   * DeepSeek V4 pages (d_qk 512, main and extra pool): one CTA of 64 heads tile by tile, raw bytes a whole tile
//     ahead (H200, 2026-12-01, h_q 64 b 64 / 128 / 148: 51.6 / 102.3 / 144.3 us; two tiles per iteration 59.1 / 119.8,
//     the 32-head cluster at b 148 156.4); a 2-CTA cluster for h_q 65..128, and for h_q 33..64 as two CTAs of 32 heads
//     with a split schedule (b 2: 15.5 against 18.2 us alone) or where all the tokens' clusters fit at once.
#include "mla/launch_plan.hpp"
#include "mla/sparse_attention_wgmma.cuh"

#include <cstdint>

namespace flashcpp::mla::kernels {
namespace {
using V32Alone = wgmma::Traits<576, true, 1, 2>;
using V32Pair = wgmma::Traits<576, true, 2, 2>;
using V4Alone = wgmma::Traits<512, true, 1, 2>;
using V4Pair = wgmma::Traits<512, true, 2, 2>;

template <class C>
bool launch_variant(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream) {
  if (p.d_qk != C::kDqk) return false;
  return plan.split ? wgmma::launch<C, true>(p, stream, plan.group_heads)
                    : wgmma::launch<C, false>(p, stream, plan.group_heads);
}
}  // namespace

bool launch_sparse_attention_wgmma_fp8(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream) {
  const bool v4 = p.kv_format == KvFormat::fp8_v4;
  switch (plan.variant) {
    case WgmmaVariant::v32_alone: return !v4 && launch_variant<V32Alone>(plan, p, stream);
    case WgmmaVariant::v32_pair: return !v4 && launch_variant<V32Pair>(plan, p, stream);
    case WgmmaVariant::v4_alone: return v4 && launch_variant<V4Alone>(plan, p, stream);
    case WgmmaVariant::v4_pair: return v4 && launch_variant<V4Pair>(plan, p, stream);
    default: return false;
  }
}

int64_t wgmma_v4_pair_cluster_slots(int device) { return wgmma::resident_ctas<V4Pair, false>(device) / 2; }

}  // namespace flashcpp::mla::kernels
