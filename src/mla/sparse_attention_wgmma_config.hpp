// Configuration of the warp-specialized wgmma sparse-prefill kernel for Hopper (sparse_prefill_sm90.cu):
// tile sizes, thread roles, register split and the shared-memory plan, with the budget checked at compile
// time. The kernel's design is described at the top of sparse_prefill_sm90.cu.
#pragma once
#include <cstdint>

namespace flashcpp::mla::kernels::prefill_sm90 {

inline constexpr int kSmemOptinLimit = 232448;  // sm_90 opt-in shared memory per block (227 KiB)

template <int D_QK>
struct Config {
  static_assert(D_QK == 576 || D_QK == 512, "d_qk is 576 (512 NoPE + 64 RoPE) or 512");

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
  static constexpr int kConsumerRegs = 224;  // O half (128 f32) + S (32 f32) + P fragments + softmax state
  static constexpr int kProducerRegs = 56;
  static_assert(kConsumerRegs * kConsumerThreads + kProducerRegs * kProducerThreads <= 65536,
                "register split exceeds the register file");
  static_assert(kConsumerRegs % 8 == 0 && kProducerRegs % 8 == 0, "setmaxnreg counts are multiples of 8");

  // Gather: 8 producer threads per KV row (one 16-byte chunk of each 128-byte atom row each), 16 rows at
  // once, so a warp's cp.async covers four whole 128-byte lines.
  static constexpr int kThreadsPerRow = 8;
  static constexpr int kRowsPerPass = kProducerThreads / kThreadsPerRow;  // 16
  static constexpr int kRowsPerThread = kTile / kRowsPerPass;              // 4

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
  static constexpr int kOffValid = (kPAInRope ? kOffPB + kPBytes : kOffPA + kPBytes);  // int [2][64]
  static constexpr int kOffMax = kOffValid + 2 * kTile * 4;   // float [2][64]: row max per consumer
  static constexpr int kOffSum = kOffMax + 2 * kHeads * 4;    // float [2][64]: row sum per consumer
  static constexpr int kOffBar = kOffSum + 2 * kHeads * 4;    // mbarriers
  static constexpr int kNumBars = 1 + 4 + 4;                  // Q full; full[tile][half]; empty[tile][half]
  static constexpr int kUsedBytes = kOffBar + kNumBars * 8;
  static constexpr int kAlignSlack = 1024;                    // the dynamic base is aligned up in the kernel
  static constexpr int kSmemBytes = kUsedBytes + kAlignSlack;

  static_assert(kOffK % 1024 == 0 && kOffPB % 1024 == 0 && kOffPA % 1024 == 0, "swizzled buffers need 1024-B alignment");
  static_assert(kHeads * kDv * 2 <= kQBytes + kKBytes, "layout assumption");
  static_assert(kRightAtoms * kAtomCols >= kHalfDv, "the right half must hold consumer 1's V columns");
  static_assert(kSmemBytes <= kSmemOptinLimit, "shared-memory plan exceeds the sm_90 opt-in limit");
};

}  // namespace flashcpp::mla::kernels::prefill_sm90
