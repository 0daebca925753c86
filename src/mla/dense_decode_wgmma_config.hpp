// Traits of the dense MLA decode kernel for Hopper (dense_decode_wgmma.cu): tiles, thread roles and the shared-memory
// plan, with the budget checked at compile time. Two instantiations, for caches whose block size is a multiple of 64
// (so every 64-token tile of a request is 64 consecutive rows of one block): bf16 rows of 576 values (512 latent + 64
// RoPE), and the V3.2 FP8 rows of 656 bytes (mla/fp8_v32.hpp), dequantized in shared memory.
#pragma once
#include <cstdint>

#include "mla/sparse_attention_wgmma_config.hpp"  // kSmemOptinLimit

namespace flashcpp::mla::kernels::dense {

struct Traits {
  // One CTA = one query token x 64 heads (the wgmma M) over a split-KV part's work items, as the sparse kernel.
  static constexpr int kDqk = 576;
  static constexpr int kDv = 512;
  static constexpr bool kF16 = false;  // bf16 q, tiles, P and out (fp16 caches run the sparse kernel's gathers)
  static constexpr int kHeads = 64;
  static constexpr int kTile = 64;                        // cached tokens per tile (a schedule block)
  static constexpr int kAtomCols = 64;                    // bf16 columns of one 128-byte swizzle atom
  static constexpr int kAtoms = kDqk / kAtomCols;         // 9
  static constexpr int kAtomBytes = kTile * 128;          // one 64-row x 128-byte column block (one TMA box)
  static constexpr int kLeftAtoms = 4;                    // V dims 0..255: warpgroup 0's O columns
  static constexpr int kHalfDv = kDv / 2;
  static constexpr int kRopeAtom = kAtoms - 1;            // dims 512..575: only S = Q K^T reads them

  // Roles: two warpgroups and no producer. Each owns half of O's columns; they take the tiles of a pair in turn
  // (warpgroup 0 computes S of the even tile, warpgroup 1 of the odd one) and exchange P and the row rescale factors
  // through shared memory (FlashMLA's "seesaw" schedule). One thread of each issues the bulk tensor copies of the
  // atoms its warpgroup has finished reading.
  static constexpr int kThreads = 256;

  // Shared memory (offsets from a 1024-byte aligned base; swizzled atoms must be 1024-aligned). Q and two K tiles take
  // 216 KiB; P of each tile lives in that tile's RoPE atom, free once its S GEMM is done (there is no room for two
  // more 8 KiB buffers).
  static constexpr int kQBytes = kAtoms * kAtomBytes;
  static constexpr int kKBytes = kAtoms * kAtomBytes;
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQBytes;             // tiles 0 (even) and 1 (odd)
  static constexpr int kOffScales = kOffK + 2 * kKBytes;   // FP8: f32 [2][64][4], each buffer's rows' scales
  static constexpr int kScaleRowBytes = 16;
  static constexpr int kOffMax = kOffScales + 2 * kTile * kScaleRowBytes;  // float [64]: the rows' running max (base 2)
  static constexpr int kOffScale = kOffMax + kHeads * 4;    // float [2][64]: each warpgroup's rescale factors
  // float [2 (work-item parity)][2][64]: row sums in the epilogue (by parity, a buffer's reuse is an item's pairs away)
  static constexpr int kOffSum = kOffScale + 2 * kHeads * 4;
  // mbarriers: [2][kAtoms], one per atom of each tile (count 1, the copy's transactions), then the two rescale
  // exchanges and the two P exchanges (count 128: every thread of the publishing warpgroup)
  static constexpr int kOffBar = kOffSum + 4 * kHeads * 4;
  static constexpr int kNumTileBars = 2 * kAtoms;
  static constexpr int kNumBars = kNumTileBars + 4;
  static constexpr int kUsedBytes = kOffBar + kNumBars * 8;
  static constexpr int kAlignSlack = 1024;                  // the dynamic base is aligned up in the kernel
  static constexpr int kSmemBytes = kUsedBytes + kAlignSlack;

  // FP8 (656-byte rows: 512 e4m3 in chunks of 128 dims with one f32 scale each, the scales, 64 bf16 RoPE values). A
  // tile's e4m3 chunks land as four 64 x 128-byte boxes in the V half of its buffer that the warpgroup computing its S
  // reads (buffer 0: atoms 0..3, buffer 1: atoms 4..7), with its scales in kOffScales (barrier 0 of the buffer; that
  // warpgroup issues them once its own P V is done); its RoPE values land as bf16 in the RoPE atom (barrier 1, issued
  // by the other warpgroup once it has finished reading the buffer). That warpgroup then dequantizes the tile in place.
  static constexpr int kFp8RowBytes = 656;
  static constexpr int kFp8ChunkBytes = 128;
  static constexpr int kFp8Chunks = 4;
  static constexpr int kFp8ScaleCol = 512;
  static constexpr int kFp8RopeCol = 528;

  // The epilogue stages each warp's 16 output rows (8 KiB) in tile buffer 1, free by then (buffer 0 is already
  // receiving the next work item's first tile).
  static constexpr int kStageBytesPerWarp = 8192;

  static_assert(kOffK % 1024 == 0 && kKBytes % 1024 == 0, "swizzled buffers need 1024-B alignment");
  static_assert(kOffBar % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(kOffScales % 128 == 0, "bulk tensor copies land on 128-byte aligned shared memory");
  static_assert(kFp8Chunks * kFp8ChunkBytes == kDv && kFp8ChunkBytes == 128 && kFp8Chunks == kLeftAtoms,
                "a buffer's V half holds a tile's e4m3 chunks, one 128-byte box row each");
  static_assert(kKBytes >= (kThreads / 32) * kStageBytesPerWarp, "the staged output fits a tile buffer");
  static_assert(kLeftAtoms * kAtomCols == kHalfDv && (kRopeAtom - kLeftAtoms) * kAtomCols == kHalfDv,
                "atoms 0..3 hold V's left half, 4..7 its right half");
  static_assert(kSmemBytes <= wgmma::kSmemOptinLimit, "shared-memory plan exceeds the sm_90 opt-in limit");
};

}  // namespace flashcpp::mla::kernels::dense
