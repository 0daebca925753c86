// Instantiations of the wgmma sparse-attention kernel over bf16 KV: sparse prefill (d_qk 576 and 512), and the split-KV
// work items of dense decode over a bf16 cache (d_qk 576), alone or, over whole tiles at 65..128 heads, as a 2-CTA
// cluster. Which one runs is the launch plan's (launch_plan.hpp).
#include "mla/launch_plan.hpp"
#include "mla/sparse_attention_wgmma.cuh"

namespace flashcpp::mla::kernels {

bool launch_sparse_attention_wgmma_bf16(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream) {
  using D576 = wgmma::Traits<576, false>;
  using D512 = wgmma::Traits<512, false>;
  using P576 = wgmma::Traits<576, false, 2>;
  if (p.kv_format != KvFormat::bf16) return false;
  switch (plan.variant) {
    case WgmmaVariant::bf16_576:
      if (p.d_qk != D576::kDqk) return false;
      return plan.split ? wgmma::launch<D576, true>(p, stream, plan.group_heads)
                        : wgmma::launch<D576, false>(p, stream, plan.group_heads);
    case WgmmaVariant::bf16_576_pair:  // dense decode's whole tiles multicast to a token's two head groups
      return p.d_qk == P576::kDqk && plan.split && wgmma::launch<P576, true>(p, stream, plan.group_heads);
    case WgmmaVariant::bf16_512:
      return p.d_qk == D512::kDqk && !plan.split && wgmma::launch<D512, false>(p, stream, plan.group_heads);
    default:
      return false;
  }
}

}  // namespace flashcpp::mla::kernels
