// Configuration of the mma.sync sparse-attention kernel for Hopper (sparse_attention_mma_sm90.cu, V3.2 FP8 decode):
// tiles, thread roles and the shared-memory plan, with the budget checked at compile time.
//
// Design (warp-level tensor cores; every operand goes through shared memory and ldmatrix):
//   * One CTA = one query token x one group of 64 heads (h_q = 128 -> 2 CTAs per token, adjacent in
//     blockIdx.x so that both gather the same KV rows through L2 at about the same time). The 64 heads
//     share the token's KV rows (MQA), which is what makes the problem compute-bound.
//   * 256 threads = 8 warps. Warp w owns rows mw = w & 1 (heads 32*mw .. +32) and the quarter nq = w >> 1:
//       S = Q K^T  (64 x 64 per KV tile): warp computes rows 32*mw.., KV columns 16*nq .. +16
//       O += P V   (64 x 512):            warp computes rows 32*mw.., d_v columns 128*nq .. +128
//     Both GEMMs use mma.sync m16n8k16 bf16 -> f32 with ldmatrix(.trans) fragments.
//   * Loop over topk in tiles of 64 KV rows, two KV buffers: tile j+1 is gathered (ld.global.nc + dequantize +
//     st.shared; the RoPE dims by cp.async) while tile j is computed. Per tile: barrier (A) tile
//     ready, S GEMM, row max exchange through smem, barrier (B), online softmax (base 2, sm_scale*log2e
//     folded in), P (bf16) to smem, barrier (C), PV GEMM.
//   * Masked slots (index < 0, >= num_kv, or slot >= topk_length) are never read: their smem rows are
//     zero-filled (cp.async src-size 0 / explicit zeros) and their logits are -inf, so nothing of a masked
//     row can reach the output.
//
// Shared memory (d_qk = 576; row = 1152 B; every row-major tile uses an XOR swizzle of the 16-byte chunk
// index with (row & 7), so the 8 row addresses of each ldmatrix phase fall in 8 different bank groups):
//   Q      64 x 576 bf16                 73,728 B
//   K/V    2 x 64 x 576 bf16            147,456 B  (V = first 512 columns of the same rows)
//   P      64 x 64 bf16                   8,192 B
//   valid flags 2 x 64 int, row-max 4 x 64 f32, row-sum 4 x 64 f32: 2,560 B
//   total 231,936 B <= 232,448 B (227 KiB opt-in) -> 1 CTA per SM. d_qk = 512: 206,336 B.
//   The epilogue stages the bf16 O tile (64 x 512, 64 KiB) in K buffer 0 for 16-byte coalesced stores.
// Registers per thread (8 warps, __launch_bounds__(256, 1) -> up to 255):
//   O accumulator 32 rows x 128 cols / 32 lanes = 128 f32; S accumulator 32 x 16 / 32 = 16 f32;
//   running max/sum 8; fragments ~16; FP8 prefetch (half a tile row share: 4 x 16 B + scales) 20;
//   addresses/indices ~20. About 210; the ptxas report (docs/MLA.md) shows no spills.
// Shared-memory traffic per 64-row KV tile (the expected limiter of an mma.sync design): S GEMM 8 warps x
// 36 k-steps x 3 ldmatrix.x4 (432 KiB), PV 8 x 4 x 10 ldmatrix.x4 (160 KiB), gather 72 KiB: ~5.3k cycles
// at 128 B/clk against 8.9 MFLOP, i.e. a ceiling near 330 TFLOP/s on 132 SMs at 1.75 GHz.
#pragma once

namespace flashcpp::mla::kernels::mma_sm90 {

inline constexpr int kThreads = 256;      // 8 warps: rows 32 * (warp & 1), S / O column quarter warp >> 1
inline constexpr int kHeadsPerCta = 64;   // one query token x 64 heads a CTA
inline constexpr int kTileKv = 64;        // KV rows a tile (one decode schedule block)
inline constexpr int kDv = 512;
inline constexpr int kFp8ScaleOffset = 512;  // V3.2 656-byte rows: 512 e4m3, 4 f32 scales, 64 bf16 RoPE dims
inline constexpr int kFp8RopeOffset = 528;
inline constexpr int kSmemOptinLimit = 232448;  // sm_90 opt-in shared memory per block (227 KiB)

// Shared memory: Q, two K/V tiles (V is the first 512 columns of K's rows), P, the valid flags and the row maxima /
// sums of the four column quarters. Every row-major tile is XOR-swizzled by 16-byte chunk (above).
template <int D_QK>
struct SmemPlan {
  static constexpr int kChunks = D_QK / 8;  // 16-byte chunks per row
  static constexpr int kRowBytes = D_QK * 2;
  static constexpr int kQBytes = kHeadsPerCta * kRowBytes;
  static constexpr int kKBytes = kTileKv * kRowBytes;
  static constexpr int kPRowBytes = kTileKv * 2;  // 128
  static constexpr int kPBytes = kHeadsPerCta * kPRowBytes;
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQBytes;  // two buffers
  static constexpr int kOffP = kOffK + 2 * kKBytes;
  static constexpr int kOffValid = kOffP + kPBytes;       // int [2][64]
  static constexpr int kOffMax = kOffValid + 2 * 64 * 4;  // float [4][64]
  static constexpr int kOffSum = kOffMax + 4 * 64 * 4;    // float [4][64]
  static constexpr int kBytes = kOffSum + 4 * 64 * 4;
  static_assert(D_QK % 64 == 0, "chunks per row must be a multiple of 8 for the swizzle");
  static_assert(kKBytes >= kHeadsPerCta * kDv * 2, "O staging must fit in one K buffer");
  static_assert(kBytes <= kSmemOptinLimit, "exceeds the sm_90 opt-in shared memory per block");
};

}  // namespace flashcpp::mla::kernels::mma_sm90
