// Instantiations of the wgmma sparse-attention kernel over the DeepSeek V3.2 FP8 cache (sparse decode):
// whole requests, and split-KV work items of the decode schedule; alone (64 heads) or as a 2-CTA cluster
// (h_q 65..128). DeepSeek V4 pages (d_qk 512, main and extra pool) tile by tile: one CTA of 64 heads, or a
// 2-CTA cluster for h_q 65..128 and for h_q 33..64 (two CTAs of 32 heads) with a split schedule or few tokens.
#include "mla/sparse_attention_wgmma.cuh"

#include <cstdint>

namespace flashcpp::mla::kernels {

bool launch_sparse_attention_wgmma_fp8(const SparseAttentionParams& p, cudaStream_t stream) {
  // h_q <= 64: one CTA tile by tile, raw bytes a whole tile ahead (as V4's).
  using Alone = wgmma::Config<576, true, 1, 2>;
  // h_q 65..128: the two head groups share the dequantization; two raw buffers (measured on the H200,
  // 2026-12-01, b 128: 599 us against 642 us with one).
  using Pair = wgmma::Config<576, true, 2, 2>;
  if (p.kv_format == KvFormat::fp8_v4) {
    // One CTA tile by tile, raw bytes a whole tile ahead (H200, 2026-12-01, h_q 64 b 64 / 128 / 148: 51.6 / 102.3 /
    // 144.3 us; two tiles per iteration 59.1 / 119.8, the 32-head cluster at b 148 156.4).
    using V4Tile = wgmma::Config<512, true, 1, 2>;
    using V4Pair = wgmma::Config<512, true, 2, 2>;
    constexpr int kHalfHeads = V4Pair::kHeads / 2;
    const bool split = p.sched != nullptr;
    // Split work runs in the CTAs the schedule was planned for: the 32-head cluster, or CTAs of 64 heads.
    const int split_heads = p.split_group_heads > 0 ? p.split_group_heads : split_decode_group_heads(p.kv_format, p.h_q);
    if (split_decode_group_heads(p.kv_format, p.h_q) == kHalfHeads && !(split && split_heads == V4Tile::kHeads)) {
      // h_q 33..64: split work as the 32-head cluster (b 2: 15.5 against 18.2 us alone); without a schedule the
      // cluster where all of its CTAs fit at once.
      if (split) return wgmma::launch<V4Pair, true>(p, stream, kHalfHeads);
      int device = -1;
      if (cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
      if (unsplit_half_heads_cluster(p.num_tokens, wgmma::resident_ctas<V4Pair, false>(device) / 2))
        return wgmma::launch<V4Pair, false>(p, stream, kHalfHeads);
      return wgmma::launch<V4Tile, false>(p, stream);
    }
    const bool pair = p.h_q > V4Tile::kHeads && p.h_q <= 2 * V4Tile::kHeads;
    if (split) return pair ? wgmma::launch<V4Pair, true>(p, stream) : wgmma::launch<V4Tile, true>(p, stream);
    return pair ? wgmma::launch<V4Pair, false>(p, stream) : wgmma::launch<V4Tile, false>(p, stream);
  }
  if (p.d_qk != 576) return false;
  const bool pair = p.h_q > Alone::kHeads && p.h_q <= 2 * Alone::kHeads;
  if (p.sched != nullptr) return pair ? wgmma::launch<Pair, true>(p, stream) : wgmma::launch<Alone, true>(p, stream);
  return pair ? wgmma::launch<Pair, false>(p, stream) : wgmma::launch<Alone, false>(p, stream);
}

}  // namespace flashcpp::mla::kernels
