// Instantiations of the wgmma sparse-attention kernel over the DeepSeek V3.2 FP8 cache (sparse decode):
// whole requests, and split-KV work items of the decode schedule; alone (64 heads) or as a 2-CTA cluster
// (h_q 65..128). DeepSeek V4 pages (d_qk 512, main and extra pool) the same two ways, and h_q 33..64 also as a
// cluster of two 32-head CTAs.
#include "mla/sparse_attention_wgmma.cuh"

#include <cstdint>

namespace flashcpp::mla::kernels {

bool launch_sparse_attention_wgmma_fp8(const SparseAttentionParams& p, cudaStream_t stream) {
  using Alone = wgmma::Config<576, true, 1>;
  // h_q 65..128: the two head groups share the dequantization; two raw buffers (measured on the H200,
  // 2026-12-01, b 128: 599 us against 642 us with one).
  using Pair = wgmma::Config<576, true, 2, 2>;
  if (p.kv_format == KvFormat::fp8_v4) {
    using V4 = wgmma::Config<512, true, 1>;
    using V4Pair = wgmma::Config<512, true, 2, 2>;
    const bool split = p.sched != nullptr;
    constexpr int kHalfHeads = V4Pair::kHeads / 2;
    if (split_decode_group_heads(p.kv_format, p.h_q) == kHalfHeads) {
      // h_q 33..64: a cluster of two CTAs of 32 heads (each computes 64 rows, half on zero Q, and dequantizes half
      // of every tile) or one CTA of 64 heads; with a schedule always the cluster (b 2: 16.8 against 27.9 us).
      bool pair = split;
      if (!split) {
        int device = -1;
        if (cudaGetDevice(&device) != cudaSuccess) {
          (void)cudaGetLastError();
          return false;
        }
        pair = unsplit_half_heads_cluster(p.num_tokens, wgmma::resident_ctas<V4Pair, false>(device) / 2,
                                          wgmma::resident_ctas<V4, false>(device));
      }
      if (pair && split) return wgmma::launch<V4Pair, true>(p, stream, kHalfHeads);
      if (pair) return wgmma::launch<V4Pair, false>(p, stream, kHalfHeads);
      return split ? wgmma::launch<V4, true>(p, stream) : wgmma::launch<V4, false>(p, stream);
    }
    const bool pair = p.h_q > V4::kHeads && p.h_q <= 2 * V4::kHeads;
    if (split) return pair ? wgmma::launch<V4Pair, true>(p, stream) : wgmma::launch<V4, true>(p, stream);
    return pair ? wgmma::launch<V4Pair, false>(p, stream) : wgmma::launch<V4, false>(p, stream);
  }
  if (p.d_qk != 576) return false;
  const bool pair = p.h_q > Alone::kHeads && p.h_q <= 2 * Alone::kHeads;
  if (p.sched != nullptr) return pair ? wgmma::launch<Pair, true>(p, stream) : wgmma::launch<Alone, true>(p, stream);
  return pair ? wgmma::launch<Pair, false>(p, stream) : wgmma::launch<Alone, false>(p, stream);
}

}  // namespace flashcpp::mla::kernels
