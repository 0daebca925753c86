// Instantiations of the wgmma sparse-attention kernel over bf16 KV (sparse prefill): d_qk 576 and 512.
#include "mla/sparse_attention_wgmma.cuh"

namespace flashcpp::mla::kernels {

bool launch_sparse_attention_wgmma_bf16(const SparseAttentionParams& p, cudaStream_t stream) {
  if (p.d_qk == 576) return wgmma::launch<wgmma::Config<576, false>, false>(p, stream);
  if (p.d_qk == 512) return wgmma::launch<wgmma::Config<512, false>, false>(p, stream);
  return false;
}

}  // namespace flashcpp::mla::kernels
