// Traits of the warp-specialized wgmma sparse-attention kernel for Hopper
// (sparse_attention_wgmma.cuh): tile sizes, thread roles, register split and the shared-memory plan, with
// the budget checked at compile time. One Traits per instantiation: bf16 KV (prefill) with d_qk 576 or
// 512 (and fp16, d_qk 576: dense decode over an fp16 cache), the DeepSeek V3.2 FP8 cache (decode, d_qk 576) and the
// DeepSeek V4 FP8 pages (decode, d_qk 512).
#pragma once
#include <cstdint>

namespace flashcpp::mla::kernels::wgmma {

inline constexpr int kSmemOptinLimit = 232448;  // sm_90 opt-in shared memory per block (227 KiB)

template <int D_QK, bool FP8, int CLUSTER_CTAS = 1, int RAW_BUFFERS = 1, bool F16 = false>
struct Traits {
  static_assert(D_QK == 576 || D_QK == 512, "d_qk is 576 (512 NoPE + 64 RoPE) or 512");
  static_assert(CLUSTER_CTAS == 1 || (FP8 && CLUSTER_CTAS == 2 && RAW_BUFFERS == 2) ||
                    (!FP8 && CLUSTER_CTAS == 2 && RAW_BUFFERS == 1),
                "a cluster is the two head groups of a token: FP8 tile by tile, or 16-bit dense tiles by multicast TMA");
  static_assert(RAW_BUFFERS == 1 || (FP8 && RAW_BUFFERS == 2),
                "FP8 runs with one raw buffer, or tile by tile with two");
  static_assert(!(F16 && FP8), "fp16 is a 16-bit cache's type; the FP8 caches dequantize to bf16");
  static constexpr int kDqk = D_QK;
  static constexpr bool kFp8 = FP8;
  // Q, the 16-bit K/V rows, P and out in fp16 instead of bf16 (the same layouts, wgmma's .f16 inputs).
  static constexpr bool kF16 = F16;
  static constexpr bool kFp8V4 = FP8 && D_QK == 512;  // DeepSeek V4 pages (mla/fp8_v4.hpp); else V3.2 rows
  static constexpr int kClusterCtas = CLUSTER_CTAS;
  static constexpr bool kCluster = CLUSTER_CTAS > 1;
  // 16-bit dense decode in a cluster (the two head groups of a token): a whole dense tile (64 consecutive cache rows,
  // all within the token's length) comes by TMA as 64 x 64 boxes, each CTA issuing its share of a half's atoms
  // multicast into both CTAs' tiles, so the tile crosses the L2 once a token instead of once a head group; other tiles
  // by the cp.async gather, each CTA its own.
  static constexpr bool kTmaRows = kCluster && !FP8;

  // Tiles. One CTA = one query token x 64 heads (the wgmma M); KV rows come in tiles of 64 (the N of
  // S = Q K^T and the K of O += P V), two tiles (A, B) per iteration.
  static constexpr int kHeads = 64;
  static constexpr int kTile = 64;
  static constexpr int kDv = 512;
  static constexpr int kAtomCols = 64;                    // bf16 columns of one 128-byte swizzle atom
  static constexpr int kAtoms = D_QK / kAtomCols;         // 9 (576) or 8 (512)
  static constexpr int kAtomBytes = kTile * 128;          // one 64-row x 128-byte column block
  static constexpr int kLeftAtoms = 4;                    // dims 0..255: V half of consumer 0
  static constexpr int kRightAtoms = kAtoms - kLeftAtoms; // dims 256..D_QK-1: V half of consumer 1 (+ RoPE)
  static constexpr int kHalfDv = kDv / 2;                 // O columns per consumer warpgroup

  // Roles: two consumer warpgroups (wgmma, softmax) and one producer warpgroup (Q load, KV gather).
  static constexpr int kConsumerThreads = 256;
  static constexpr int kProducerThreads = 128;
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  // The FP8 producer holds a half tile's raw bytes (8 x 16 B per thread) in registers while it waits for
  // the buffer, so it gets more; tile by tile (two raw buffers) 152, taken from consumer 1 (ptxas, CUDA 13.0: no
  // spills there, except one of consumer 0's values in the split instantiation of the CTA alone).
  // FP8 with two raw buffers (always so in a cluster) runs tile by tile (FlashMLA's split of the roles): consumer 0
  // computes S over the whole tile, the softmax and O columns 0..255 (P from registers); consumer 1 only O columns
  // 256..511, with P and the row rescale factors from shared memory. A tile's refill then overlaps the next tile's
  // work, and its raw bytes are loaded a whole tile ahead; with two tiles per iteration (the other configurations)
  // the late half's refill waited for the iteration's end.
  static constexpr bool kPerTile = RAW_BUFFERS > 1;
  // The 16-bit two-tile kernels hold Q's last atom in the consumers' registers for the S GEMM (register-A wgmma): an
  // S GEMM with both operands in shared memory takes all of its bandwidth, which the tile's gather and P V share
  // (about 300 KB a tile against 280 KB of the tensor cores' time at 128 B a clock). Prefill 0.8% and dense decode
  // 0.5% faster in both orders (H100, 2026-12-07; the register split alone: 0.2% / -0.3%).
  static constexpr bool kQLastInRegs = !FP8 && !kPerTile;
  // O half (128 f32) + S (32 f32) + P + softmax (+ Q's last atom, 16, for bf16 / fp16)
  // bf16: 232 / 40, for Q's last atom (216 / 72, FlashMLA's split, left ptxas serializing the wgmma instructions with
  // it; 224 / 56 measured no faster). Without it, 224 / 56 had measured 0.5-0.8% slower in prefill (H100, 2026-12-05).
  // The split decode instantiation's producer spills 20 bytes at 40 (ptxas, CUDA 13.0).
  static constexpr int kConsumerRegs = !FP8 ? 232 : (kPerTile ? 192 : 200);
  static constexpr int kConsumer1Regs = kPerTile ? 160 : kConsumerRegs;  // tile by tile: O half + P address
  static constexpr int kProducerRegs = !FP8 ? 40 : (kPerTile ? 152 : 104);
  // setmaxnreg moves registers only within the CTA's own allocation: __launch_bounds__(kThreads, 1) gives
  // each thread 65536 / kThreads rounded down to a multiple of 8 (168), and the split may not exceed that.
  static constexpr int kLaunchRegs = 65536 / (kConsumerThreads + kProducerThreads) / 8 * 8;
  static_assert((kConsumerRegs + kConsumer1Regs) * (kConsumerThreads / 2) + kProducerRegs * kProducerThreads <=
                    kLaunchRegs * (kConsumerThreads + kProducerThreads),
                "register split exceeds the CTA's allocation (setmaxnreg.inc would wait forever)");
  static_assert(kConsumerRegs % 8 == 0 && kConsumer1Regs % 8 == 0 && kProducerRegs % 8 == 0,
                "setmaxnreg counts are multiples of 8");

  // Gather: 8 producer threads per KV row (one 16-byte chunk of each 128-byte atom row each), 16 rows at
  // once, so a warp's cp.async covers four whole 128-byte lines.
  static constexpr int kThreadsPerRow = 8;
  static constexpr int kRowsPerPass = kProducerThreads / kThreadsPerRow;  // 16
  static constexpr int kRowsPerThread = kTile / kRowsPerPass;              // 4
  // FP8 rows: 512 e4m3 bytes = 32 chunks of 16; a thread dequantizes chunks sub + 8 k of its rows, two in
  // each half (k 0, 1: dims 0..255; k 2, 3: dims 256..511).
  static constexpr int kFp8RowBytes = 656, kFp8ScaleOffset = 512;
  // V4 (token records of 448 e4m3 NoPE dims + 64 bf16 RoPE dims, scales in the page's scale records): the
  // right half's second chunk exists for sub 0..3 only (28 chunks), and the RoPE dims start at byte 448.
  static constexpr int kFp8RopeOffset = kFp8V4 ? 448 : 528;
  static constexpr int kFp8NopeChunks = kFp8V4 ? 28 : 32;  // 16-byte e4m3 chunks of a row
  static constexpr int kFp8ChunksPerHalf = 2;
  // In a cluster each CTA dequantizes the rows of its rank (rank r: rows r*32 .. +32, i.e. rows-per-thread
  // indices r*2, r*2+1) and stores them in both CTAs' tiles; the RoPE dims every CTA loads for all
  // 64 rows itself. The halved register need can pay for a second raw buffer: the loads of the next
  // half-tile in flight while this one is dequantized.
  static constexpr int kDequantRowsPerThread = kRowsPerThread / CLUSTER_CTAS;
  static constexpr int kFp8RawBuffers = RAW_BUFFERS;
  // In a cluster the RoPE dims travel like the dequantized atoms: each CTA loads its rows' RoPE pieces with their
  // e4m3 bytes (a tile ahead, into registers), stores them and sends them to the peer with the dequantized
  // blocks. Alone, the RoPE atom comes by cp.async once the buffer is free (its registers would not fit a
  // producer that holds a whole tile's raw bytes).
  static constexpr bool kRopeInRegs = kCluster && FP8;
  // Bytes a half tile receives from the peer: its rows' dequantized atoms, plus the RoPE atom on the right:
  // 4 atoms left and 5 right for V3.2; V4's right half has 3 dequantized (dims 256..447) and the RoPE atom.
  static constexpr int kPeerBytesLeft = kTile / CLUSTER_CTAS * kLeftAtoms * 128;
  static constexpr int kPeerBytesRight = kTile / CLUSTER_CTAS * (kAtoms - kLeftAtoms - (kRopeInRegs ? 0 : 1)) * 128;

  // Shared memory (offsets from a 1024-byte aligned base; swizzled atoms must be 1024-aligned).
  static constexpr int kQBytes = kAtoms * kAtomBytes;
  static constexpr int kKBytes = kAtoms * kAtomBytes;
  static constexpr int kPBytes = kHeads * kTile * 2;     // P of one tile, bf16, one swizzle atom wide
  static constexpr int kOffQ = 0;
  static constexpr int kOffK = kOffQ + kQBytes;          // tiles A, B
  static constexpr int kOffPB = kOffK + 2 * kKBytes;     // P of tile B (read by consumer 0)
  // P of tile A (read by consumer 1): with d_qk 576 it lives in tile A's RoPE atom, which no GEMM needs
  // once S_A is done (saves 8 KiB, which is what makes d_qk 576 fit); with 512 it has its own buffer.
  static constexpr bool kPAInRope = D_QK == 576;
  static constexpr int kOffPA = kPAInRope ? kOffK + (kAtoms - 1) * kAtomBytes : kOffPB + kPBytes;
  static constexpr int kOffValid = (kPAInRope ? kOffPB + kPBytes : kOffPA + kPBytes);  // uint8 [2][64]
  static constexpr int kOffMax = kOffValid + 2 * kTile;       // float [2][64]: row max per consumer
  static constexpr int kOffSum = kOffMax + 2 * kHeads * 4;    // float [2 (work-item parity)][2][64]: row sums
  static constexpr int kOffItem = kOffSum + 4 * kHeads * 4;   // 2 (work-item parity) x ItemInfo (32 B)
  static constexpr int kOffBar = kOffItem + 2 * 32;           // mbarriers
  // Q full, Q empty; full[tile][half]; empty[tile][half]; RoPE landed; max published[consumer] (two tiles per iteration)
  static constexpr int kNumBars = 2 + 4 + 4 + 1 + 2;
  static constexpr int kUsedBytes = kOffBar + kNumBars * 8;
  static constexpr int kAlignSlack = 1024;                    // the dynamic base is aligned up in the kernel
  static constexpr int kSmemBytes = kUsedBytes + kAlignSlack;

  static_assert(kOffK % 1024 == 0 && kOffPB % 1024 == 0 && kOffPA % 1024 == 0, "swizzled buffers need 1024-B alignment");
  static_assert(kHeads * kDv * 2 <= kQBytes + kKBytes, "layout assumption");
  static_assert(kRightAtoms * kAtomCols >= kHalfDv, "the right half must hold consumer 1's V columns");
  static_assert(!kCluster || !FP8 || kAtoms - 1 == kFp8NopeChunks / 4, "the peer sends every dequantized atom");
  static_assert(kSmemBytes <= kSmemOptinLimit, "shared-memory plan exceeds the sm_90 opt-in limit");
};

}  // namespace flashcpp::mla::kernels::wgmma
