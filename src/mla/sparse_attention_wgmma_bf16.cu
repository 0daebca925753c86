// Instantiations of the wgmma sparse-attention kernel over bf16 KV: sparse prefill (d_qk 576 and 512), and the split-KV
// work items of dense decode over a bf16 cache (d_qk 576).
#include "mla/sparse_attention_wgmma.cuh"

namespace flashcpp::mla::kernels {

bool launch_sparse_attention_wgmma_bf16(const SparseAttentionParams& p, cudaStream_t stream) {
  if (p.d_qk == 576 && p.sched != nullptr) return wgmma::launch<wgmma::Config<576, false>, true>(p, stream);
  if (p.d_qk == 576) return wgmma::launch<wgmma::Config<576, false>, false>(p, stream);
  if (p.d_qk == 512 && p.sched == nullptr) return wgmma::launch<wgmma::Config<512, false>, false>(p, stream);
  return false;
}

}  // namespace flashcpp::mla::kernels
