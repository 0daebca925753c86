// Instantiation of the wgmma sparse-attention kernel over fp16 KV: the split-KV work items of dense decode over an
// fp16 cache (d_qk 576; q and out fp16). Its own translation unit so that it compiles beside the bf16 ones. Which one
// runs is the launch plan's (launch_plan.hpp).
#include "mla/launch_plan.hpp"
#include "mla/sparse_attention_wgmma.cuh"

namespace flashcpp::mla::kernels {

bool launch_sparse_attention_wgmma_f16(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream) {
  using F576 = wgmma::Traits<576, false, 1, 1, /*F16=*/true>;
  // Dense decode always runs through its schedule (dense_decode.cpp), so only the split instantiation exists.
  if (p.kv_format != KvFormat::f16 || plan.variant != WgmmaVariant::f16_576 || p.d_qk != F576::kDqk || !plan.split)
    return false;
  return wgmma::launch<F576, true>(p, stream, plan.group_heads);
}

}  // namespace flashcpp::mla::kernels
