// Instantiations of the wgmma sparse-attention kernel over the DeepSeek V3.2 FP8 cache (sparse decode):
// whole requests, and split-KV work items of the decode schedule.
#include "mla/sparse_attention_wgmma.cuh"

namespace flashcpp::mla::kernels {

bool launch_sparse_attention_wgmma_fp8(const SparseAttentionParams& p, cudaStream_t stream) {
  using C = wgmma::Config<576, true>;
  if (p.d_qk != 576) return false;
  if (p.sched != nullptr) return wgmma::launch<C, true>(p, stream);
  return wgmma::launch<C, false>(p, stream);
}

}  // namespace flashcpp::mla::kernels
