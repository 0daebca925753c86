// Instantiations of the wgmma sparse-attention kernel over the DeepSeek V3.2 FP8 cache (sparse decode):
// whole requests, and split-KV work items of the decode schedule; alone (64 heads) or as a 2-CTA cluster
// (h_q 65..128). DeepSeek V4 pages (d_qk 512, main and extra pool) the same two ways.
#include "mla/sparse_attention_wgmma.cuh"

namespace flashcpp::mla::kernels {

bool launch_sparse_attention_wgmma_fp8(const SparseAttentionParams& p, cudaStream_t stream) {
  using Alone = wgmma::Config<576, true, 1>;
  // h_q 65..128: the two head groups share the dequantization; two raw buffers (measured on the H200,
  // 2026-12-01, b 128: 599 us against 642 us with one).
  using Pair = wgmma::Config<576, true, 2, 2>;
  if (p.kv_format == KvFormat::fp8_v4) {
    using V4 = wgmma::Config<512, true, 1>;
    using V4Pair = wgmma::Config<512, true, 2, 2>;
    const bool pair = p.h_q > V4::kHeads && p.h_q <= 2 * V4::kHeads;
    if (p.sched != nullptr) return pair ? wgmma::launch<V4Pair, true>(p, stream) : wgmma::launch<V4, true>(p, stream);
    return pair ? wgmma::launch<V4Pair, false>(p, stream) : wgmma::launch<V4, false>(p, stream);
  }
  if (p.d_qk != 576) return false;
  const bool pair = p.h_q > Alone::kHeads && p.h_q <= 2 * Alone::kHeads;
  if (p.sched != nullptr) return pair ? wgmma::launch<Pair, true>(p, stream) : wgmma::launch<Alone, true>(p, stream);
  return pair ? wgmma::launch<Pair, false>(p, stream) : wgmma::launch<Alone, false>(p, stream);
}

}  // namespace flashcpp::mla::kernels
