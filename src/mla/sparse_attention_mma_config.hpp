// Configuration of the mma.sync sparse-attention kernel for Hopper (sparse_attention_mma_sm90.cu, V3.2 FP8 decode):
// tiles, thread roles and the shared-memory plan, with the budget checked at compile time.
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
// sums of the four column quarters. Every row-major tile is XOR-swizzled by 16-byte chunk (docs in the kernel file).
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
