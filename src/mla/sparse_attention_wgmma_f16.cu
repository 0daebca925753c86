// Instantiations of the wgmma sparse-attention kernel over fp16 KV: the split-KV work items of dense decode over an
// fp16 cache (d_qk 576; q and out fp16), alone or, over whole tiles at 65..128 heads, as a 2-CTA cluster. Their own
// translation unit so that they compile beside the bf16 ones. Which one runs is the launch plan's (launch_plan.hpp).
#include "mla/launch_plan.hpp"
#include "mla/sparse_attention_wgmma.cuh"

namespace flashcpp::mla::kernels {

bool launch_sparse_attention_wgmma_f16(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream) {
  using F576 = wgmma::Traits<576, false, 1, 1, /*F16=*/true>;
  using F576Pair = wgmma::Traits<576, false, 2, 1, /*F16=*/true>;
  // Dense decode always runs through its schedule (dense_decode.cpp), so only the split instantiations exist.
  if (p.kv_format != KvFormat::f16 || p.d_qk != F576::kDqk || !plan.split) return false;
  switch (plan.variant) {
    case WgmmaVariant::f16_576: return wgmma::launch<F576, true>(p, stream, plan.group_heads);
    case WgmmaVariant::f16_576_pair: return wgmma::launch<F576Pair, true>(p, stream, plan.group_heads);
    default: return false;
  }
}

}  // namespace flashcpp::mla::kernels
