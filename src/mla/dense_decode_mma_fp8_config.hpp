// Traits of dense MLA decode over the V3.2 FP8 cache for few heads (dense_decode_mma_fp8.cu): tiles, thread roles and
// the shared-memory plan, with the budget checked at compile time.
//
// Why a kernel of its own: with 16 or 32 heads a tile's arithmetic is small and the cache's bytes are the bound, so
// FP8 (656 bytes a token against bf16's 1152) should run up to 1.75x bf16. The wgmma kernels dequantize every row
// to bf16 in shared memory in one producer warpgroup, which at 16 heads is slower than bf16 (docs/PERFORMANCE.md).
// Here the cache's tiles land raw (one bulk copy of 64 x 656 bytes), and every warp converts the e4m3 bytes it
// multiplies, in registers, to fp16 (exact: every e4m3 value is an fp16 value) for warp-level mma.sync:
//   * S = Q K^T with Q (fp16, each head's row scaled by a power of two into fp16's range; staged once an item) as A
//     fragments held in registers, K's B fragments 4 bytes of one row each (Q's columns are permuted to match): each
//     K byte is loaded and converted once, Q is never reloaded. 16 heads: warp w computes its 8 tokens over all 576
//     dims, all 32 of Q's nope fragments in registers (128 of them), each 128-dim scale tile in its own accumulator
//     scaled per token, RoPE in bf16 as stored. 32 heads (twice the fragments: too many registers): split by dims,
//     warp w holds Q's dims [64 w, + 64) for both m-tiles and writes its fp32 partial S of every head and all 64
//     tokens to shared memory; after a third barrier it sums the 8 partials of its 8 tokens (each pair one scale
//     tile, times the token's scale) and adds RoPE.
//   * O += P V: P (fp16, each token's column times its scale over the tile's largest, stored once for each of the
//     four scale tiles by the warp that computed the token's S, which holds its scales) from shared memory; V's B
//     fragments take a byte from four rows each, put together by byte permutes. Each warp owns 64 of V's
//     dims, inside one scale tile, so its O carries one running reference scale.
#pragma once
#include "mla/fp8_v32.hpp"
#include "mla/sparse_attention_wgmma_config.hpp"  // kSmemOptinLimit

namespace flashcpp::mla::kernels::dense_mma {

/// MT m-tiles of 16 heads: h_q <= 16 * MT (MT 1 or 2).
template <int MT>
struct Traits {
  static_assert(MT == 1 || MT == 2, "16 or 32 heads a CTA");
  static constexpr int kMTiles = MT;
  static constexpr int kRows = 16 * MT;  // heads a CTA computes; rows past h_q compute on zero Q, never written
  static constexpr int kTile = 64;       // cached tokens a tile (a schedule block): 64 consecutive rows of one block
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kNope = fp8::kNopeDims;  // 512 = d_v
  static constexpr int kRope = fp8::kRopeDims;  // 64
  static constexpr int kDv = kNope;
  static constexpr int kRowBytes = fp8::kBytesPerToken;  // 656
  static constexpr int kTileBytes = kTile * kRowBytes;   // 41,984: one bulk copy
  static constexpr int kStages = MT == 1 ? 4 : 3;  // 32 heads: the partial S takes a stage's room

  // S: warp w's tokens are [kSTokens * w, + kSTokens) (one n8 block), every m-tile.
  static constexpr int kSTokens = 8;
  static_assert(kSTokens * kWarps == kTile, "the S warps cover the tile's tokens");
  // P V: warp w owns V's dims [64 w, 64 w + 64), all of them in scale tile w / 2.
  static constexpr int kPvDims = kDv / kWarps;

  // Shared memory. Q nope: fp16 [kRows][512], 1024-byte rows; Q RoPE: bf16 [kRows][64]; P: fp16 [kRows][64 tokens].
  // Each row's 16-byte chunk c sits at c ^ (row & 7) (within its 128-byte group), so ldmatrix's 8 rows a phase fall
  // in 8 different bank groups.
  static constexpr int kQNopeRowBytes = kNope * 2;
  static constexpr int kQRopeRowBytes = kRope * 2;
  static constexpr int kPRowBytes = kTile * 2;
  static constexpr int kOffStages = 0;
  // 32 heads, S split by dims: warp w writes its partial S (every m-tile and token, fp32, float4 a lane:
  // [kWarps][MT][8 n8 blocks][32 lanes]) into the region Q's nope dims were staged in.
  static constexpr int kPartialBytes = MT == 1 ? 0 : kWarps * MT * 8 * 32 * 16;
  static constexpr int kQNopeBytes = kRows * kQNopeRowBytes;
  static constexpr int kOffQNope = kOffStages + kStages * kTileBytes;  // also the partial S
  static constexpr int kOffQRope = kOffQNope + (kPartialBytes > kQNopeBytes ? kPartialBytes : kQNopeBytes);
  static constexpr int kOffP = kOffQRope + kRows * kQRopeRowBytes;  // fp16 [4 scale tiles][kRows][kTile]
  static constexpr int kOffInvRef = kOffP + 4 * kRows * kPRowBytes;  // float [4]: 1 / each scale tile's reference
  static constexpr int kOffWarpMax = kOffInvRef + 16;                // float [kWarps][kRows]: S warps' tile maxima
  static constexpr int kOffWarpSum = kOffWarpMax + kWarps * kRows * 4;  // float [kWarps][kRows]: their row sums
  static constexpr int kOffRowScale = kOffWarpSum + kWarps * kRows * 4;  // float [kRows]: sm_scale log2e 2^-e
  static constexpr int kOffValid = kOffRowScale + kRows * 4;  // int [kStages]: each stage's valid rows
  static constexpr int kOffBar = (kOffValid + kStages * 4 + 7) / 8 * 8;  // mbarrier [kStages]: the stage's copy landed
  static constexpr int kSmemBytes = kOffBar + kStages * 8;

  static_assert(kTileBytes % 16 == 0 && kOffQNope % 128 == 0, "bulk copies land on 16-byte aligned stages");
  static_assert(kOffBar % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(kPvDims == 64 && fp8::kTileDims % kPvDims == 0, "a warp's V dims lie in one scale tile");
  static_assert(kRowBytes % 16 == 0 && fp8::kRopeOffset % 16 == 0, "rows and their RoPE values 16-byte aligned");
  static_assert(kSmemBytes <= wgmma::kSmemOptinLimit, "shared-memory plan exceeds the sm_90 opt-in limit");
};

}  // namespace flashcpp::mla::kernels::dense_mma
