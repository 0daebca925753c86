// Dense MLA decode for Hopper (sm_90a): the split-KV work of dense_decode (include/flashcpp/mla.hpp) over a bf16 or V3.2
// FP8 cache whose block size is a multiple of 64, with the sparse kernels' semantics, schedule, partial rows and combine
// (sparse_attention_kernel.hpp). Traits: dense_decode_wgmma_config.hpp. Chosen by launch_plan.cpp (variants dense_bf16,
// dense_fp8).
//
// Design (the layout of FlashMLA's dense decode kernel, written with our own pieces):
//   * One CTA = one query token x 64 heads over a schedule part's work items; 256 threads = two warpgroups, no producer.
//     A dense tile (64 cached tokens of one block) is 64 consecutive cache rows, so it arrives by the bulk tensor copy
//     engine (TMA): nine 64 x 64 boxes, 128-byte swizzled as wgmma reads them, each completing its own mbarrier, so
//     S = Q K^T starts on the first atom while the others are in flight. A tile whose block id is invalid is copied
//     from outside the tensor (zeros) and masked.
//   * Two tile buffers: even tiles in buffer 0, odd tiles in buffer 1. Warpgroup 0 computes S of the even tile of a
//     pair, warpgroup 1 of the odd one; warpgroup 0 owns O columns 0..255 (V atoms 0..3), warpgroup 1 columns
//     256..511 (atoms 4..7). Per pair (FlashMLA's "seesaw"):
//         wg 0: softmax of S_even with the running max -> P_e, alpha_e;  O_L += P_e V_e,L (P from registers)
//         wg 1: softmax of S_odd after wg 0's max -> P_o, alpha_o;       O_R += P_o V_o,R (registers)
//         wg 0: P_e rescaled to the pair's max, stored;                  O_L += P_o V_o,L (P_o from shared memory)
//         wg 1:                                                          O_R += P_e V_e,R (P_e from shared memory)
//     then each issues the next pair's S GEMM. P of a tile lives in that tile's RoPE atom (dims 512..575), which only
//     its S GEMM reads.
//   * Copies are issued by one thread of the warpgroup that read the atoms last: buffer 0's atoms 0..3 by warpgroup 0
//     after O_L += P_e V_e,L, atoms 4..8 by warpgroup 1 after O_R += P_e V_e,R; buffer 1's atoms 4..7 by warpgroup 1
//     after O_R += P_o V_o,R, atoms 0..3 and the RoPE atom (P_o) by warpgroup 0 after O_L += P_o V_o,L. Warpgroup 0
//     waits on buffer 0's barriers, warpgroup 1 on buffer 1's; each sees the other buffer's data through the barriers
//     that order the pair's steps (the rescale and P exchanges' mbarriers).
//   * Masking: slot s of a tile is valid iff s < the token's length (the plan's token_lengths) and the tile's first
//     index is a cache row. Rows past the length in a tile's last rows may hold anything (NaN): their logits are -inf
//     and their V rows are zeroed in shared memory before any P V reads them.
//   * FP8: a tile arrives as its raw bytes (e4m3 chunks in the V half the warpgroup computing its S reads, scales,
//     RoPE values as bf16 in the RoPE atom) and that warpgroup dequantizes it in place before its S GEMM (rows past
//     the length as zeros); the copies are issued at the same points as bf16's (Traits, "FP8").
//   * Epilogue: the sparse kernel's (write_item_rows): partial rows for split requests, out / lse with the sink for
//     the others, staged through buffer 1. The next work item's Q and first tile (and its second, where buffer 1 is
//     not the staging) are copied while this item's stores run.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <climits>
#include <cstdint>

#include "mla/dense_decode_wgmma_config.hpp"
#include "mla/fp8_v32_dequant.cuh"
#include "mla/launch_plan.hpp"
#include "mla/sm90_kernel_ready.hpp"
#include "mla/sparse_attention_wgmma_consumer.cuh"

namespace flashcpp::mla::kernels::dense {

using namespace wgmma;  // the PTX helpers, softmax pieces and epilogue the sparse wgmma kernel defines
using T = Traits;

struct Params {
  // bf16: the cache as [num_kv, 576] rows, 64 x 64 boxes. FP8: the cache's bytes as [num_blocks, block_size, 656],
  // 64-row x 128-byte boxes (the e4m3 chunks, the RoPE values). Both 128-byte swizzled, as wgmma reads them.
  CUtensorMap kv_map;
  CUtensorMap scale_map;  // FP8: the same bytes, 64-row x 16-byte boxes (the scales), unswizzled
  SparseAttentionParams p;
  float scale_log2;  // sm_scale * log2(e)
  int groups;        // head groups of 64 per token
  int block_size;    // FP8: cache rows per block
};

// Named barriers (bar 1 is wgmma::kBarMax, the epilogue's row-sum exchange).
enum Barrier : int { kWarpgroup0 = 6 };  // (the rescale and P exchanges: Smem::bar_scale, Smem::bar_p)
__device__ __forceinline__ void warpgroup_sync(int w) {
  asm volatile("barrier.sync %0, 128;\n" ::"r"(kWarpgroup0 + w) : "memory");
}
// The whole CTA meets, each warpgroup at its own copy of the item loop: the non-aligned barrier (__syncthreads is
// bar.sync, .aligned, which requires every thread at the same instruction; compute-sanitizer's synccheck stops there).
__device__ __forceinline__ void cta_sync() { asm volatile("barrier.sync 0;\n" ::: "memory"); }

struct Smem {
  uint32_t base;
  __device__ uint32_t q() const { return base + T::kOffQ; }
  __device__ uint32_t tile(int b) const { return base + T::kOffK + b * T::kKBytes; }
  __device__ uint32_t atom(int b, int a) const { return tile(b) + a * T::kAtomBytes; }
  __device__ uint32_t p(int b) const { return atom(b, T::kRopeAtom); }
  __device__ uint32_t scales(int b) const { return base + T::kOffScales + b * T::kTile * T::kScaleRowBytes; }
  __device__ uint32_t bar(int b, int a) const { return base + T::kOffBar + 8 * (b * T::kAtoms + a); }
  // Warpgroup w's new max and rescale factors are in s_max / s_scale (the pair's exchange; parity: the CTA's pair
  // count). Mbarriers rather than named barriers: every thread arrives itself, so its own reads and writes of the
  // slots are ordered before the other warpgroup's, which is the order compute-sanitizer's racecheck follows (with
  // named barriers it reported each slot's next write against the other warpgroup's read).
  __device__ uint32_t bar_scale(int w) const { return base + T::kOffBar + 8 * (T::kNumTileBars + w); }
  // Warpgroup w's P of the pair is in its tile's RoPE atom (the same parity). Mbarriers too: with the P exchanges on
  // named barriers (non-aligned arrive / sync), racecheck reported the bf16 kernel's row sums and running max (7 sites,
  // orders through the CTA barrier), and none with these, though bench/racecheck_barrier_forms finds each form
  // followed on its own.
  __device__ uint32_t bar_p(int w) const { return base + T::kOffBar + 8 * (T::kNumTileBars + 2 + w); }
};

// One box of `map` at (col, row) into shared memory at `dst`, completing its bytes on `bar`. Elements outside the
// tensor (negative rows too) are written as zeros and count.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int col, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

__device__ __forceinline__ float ld_shared_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

// Atoms [A0, A1) of the tile at cache row `row` into buffer `b`.
template <int A0, int A1>
__device__ __forceinline__ void copy_atoms(const CUtensorMap* map, const Smem& sm, int b, int row) {
#pragma unroll
  for (int at = A0; at < A1; ++at) {
    mbar_arrive_expect_tx(sm.bar(b, at), T::kAtomBytes);
    tma_load_2d(sm.atom(b, at), map, at * T::kAtomCols, row, sm.bar(b, at));
  }
}

// The copies of a tile into buffer B (`row`: the cache row of its first slot, -kTile outside the cache: zeros), each
// issued by one thread. A buffer's tile comes in two parts: own_half, the V half that warpgroup B (which computes the
// tile's S) reads, issued by warpgroup B once its P V of the buffer's previous tile is done; and rest, issued by the
// other warpgroup once it has finished reading the buffer. bf16: those atoms, each on its own barrier. FP8: own_half
// is the e4m3 chunks (into the same atoms) and the scales on barrier 0, rest the RoPE values on barrier 1.
template <bool FP8>
struct TileCopies {
  const Params* a;
  Smem sm;
  struct Coords {
    int slot, block;
  };
  __device__ Coords fp8_coords(int row) const {
    return row < 0 ? Coords{-T::kTile, 0} : Coords{row % a->block_size, row / a->block_size};
  }
  template <int B>
  __device__ void own_half(int row) const {
    if constexpr (FP8) {
      const Coords at = fp8_coords(row);
      mbar_arrive_expect_tx(sm.bar(B, 0), T::kFp8Chunks * T::kAtomBytes + T::kTile * T::kScaleRowBytes);
#pragma unroll
      for (int c = 0; c < T::kFp8Chunks; ++c)
        tma_load_3d(sm.atom(B, B * T::kLeftAtoms + c), &a->kv_map, c * T::kFp8ChunkBytes, at.slot, at.block,
                    sm.bar(B, 0));
      tma_load_3d(sm.scales(B), &a->scale_map, T::kFp8ScaleCol, at.slot, at.block, sm.bar(B, 0));
    } else {
      copy_atoms<B * T::kLeftAtoms, (B + 1) * T::kLeftAtoms>(&a->kv_map, sm, B, row);
    }
  }
  template <int B>
  __device__ void rest(int row) const {
    if constexpr (FP8) {
      const Coords at = fp8_coords(row);
      mbar_arrive_expect_tx(sm.bar(B, 1), T::kAtomBytes);
      tma_load_3d(sm.atom(B, T::kRopeAtom), &a->kv_map, T::kFp8RopeCol, at.slot, at.block, sm.bar(B, 1));
    } else if constexpr (B == 0) {
      copy_atoms<T::kLeftAtoms, T::kAtoms>(&a->kv_map, sm, 0, row);
    } else {
      copy_atoms<0, T::kLeftAtoms>(&a->kv_map, sm, 1, row);
      copy_atoms<T::kRopeAtom, T::kAtoms>(&a->kv_map, sm, 1, row);
    }
  }
  // The whole tile (at an item's start, or early in the previous item's epilogue).
  template <int B>
  __device__ void tile(int row) const {
    if constexpr (FP8) {
      own_half<B>(row);
      rest<B>(row);
    } else {
      copy_atoms<0, T::kAtoms>(&a->kv_map, sm, B, row);
    }
  }
};

// The tiles of one work item: item tile j is tile first + j of the token's slot list.
struct ItemTiles {
  const int32_t* slots;  // the token's slot list (the plan's indices)
  int num_kv;            // cache rows (at most 2^31 - 1: the launcher checks)
  int eff, first, n;     // the token's valid slots, the item's first tile, its tile count
  // The tile's first cache row, or -kTile (outside the tensor: zeros) when its block id is invalid.
  __device__ int row(int j) const {
    const int v = __ldg(slots + static_cast<int64_t>(first + j) * T::kTile);
    return v >= 0 && v < num_kv ? v : -T::kTile;
  }
  // Valid slots of tile j (first row `row`): 0 for an invalid block, else up to the token's length.
  __device__ int valid(int j, int row) const {
    const int left = eff - (first + j) * T::kTile;
    return row < 0 ? 0 : (left < T::kTile ? left : T::kTile);
  }
};

// Masks S columns >= nv (-inf), scales it to base 2 and returns rows r0 / r1's max over the tile.
__device__ __forceinline__ void mask_rowmax(float (&s)[32], int nv, int t, float scale_log2, float& mx0, float& mx1) {
  mask_scale_rowmax_by(
      s, [nv, t](int j) { return ColumnPair{8 * j + 2 * t < nv, 8 * j + 2 * t + 1 < nv}; }, scale_log2, mx0, mx1);
}

// Warpgroup W zeroes V rows nv..63 of its half (atoms 4W .. 4W + 3) of buffer b: rows past the token's length may
// hold NaN, and 0 x NaN would reach O. Only a token's last tile is partial, so this runs at most once per item.
template <int W>
__device__ __forceinline__ void zero_v_rows(const Smem& sm, int b, int nv, int idx) {
  const int chunks = (T::kTile - nv) * T::kLeftAtoms * 8;
  for (int c = idx; c < chunks; c += 128) {
    const int r = nv + c / (T::kLeftAtoms * 8), a = W * T::kLeftAtoms + (c / 8) % T::kLeftAtoms;
    sm90::st_shared_v4(sm.atom(b, a) + r * 128 + (c % 8) * 16, make_uint4(0u, 0u, 0u, 0u));
  }
  fence_proxy_async();
  warpgroup_sync(W);
}

// Descriptor `desc` advanced by `bytes` (a multiple of 16), computed where the GEMM issues: the 100-odd distinct
// descriptors of a pair are loop-invariant, and ptxas kept them all, spilling them to local memory (ptxas, CUDA 13.0).
__device__ __forceinline__ uint64_t desc_plus(uint64_t desc, uint32_t bytes) {
  uint64_t d;
  asm volatile("add.s64 %0, %1, %2;\n" : "=l"(d) : "l"(desc), "l"(static_cast<uint64_t>(bytes >> 4)));
  return d;
}

// S (+)= Q K^T over atoms [A0, A1) of buffer b, each once its copy landed (barrier phase `phase`; WAIT false: the
// caller has seen the whole tile, FP8's dequantized one).
template <int A0, int A1, bool FIRST, bool WAIT = true>
__device__ __forceinline__ void qk_atoms(float (&s)[32], uint64_t desc_q, uint64_t desc_k, const Smem& sm, int b,
                                         int phase) {
#pragma unroll
  for (int a = A0; a < A1; ++a) {
    if constexpr (WAIT) {
      mbar_wait(sm.bar(b, a), phase);
      wgmma_fence();  // after each wait, as the first: ptxas otherwise injects its own (and serializes the GEMMs)
    }
#pragma unroll
    for (int ks = 0; ks < T::kAtomCols / 16; ++ks) {
      const uint32_t off = a * T::kAtomBytes + ks * 32;
      wgmma_m64n64k16_ss<T::kF16>(s, desc_plus(desc_q, off), desc_plus(desc_k, off), (FIRST && a == A0 && ks == 0) ? 0 : 1);
    }
  }
}

// O (64 x 256) += P V, P from registers (pf: softmax_numerators' fragments), uncommitted.
__device__ __forceinline__ void pv_registers(float (&o)[128], const uint32_t (&pf)[16], uint64_t desc_v) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t a[4] = {pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3]};
    wgmma_m64n256k16_rs<T::kF16>(o, a, desc_plus(desc_v, kk * 16 * 128));
  }
}
// O += P V, P from shared memory, uncommitted.
__device__ __forceinline__ void pv_shared(float (&o)[128], uint64_t desc_p, uint64_t desc_v) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_m64n256k16_ss<T::kF16>(o, desc_plus(desc_p, kk * 32), desc_plus(desc_v, kk * 16 * 128));
}

// What warpgroup W keeps for the whole CTA: its lane and rows (r0 = 16 warp + g, r1 = r0 + 8; t = lane & 3), the
// descriptors of its GEMMs, and the running max and rescale factors in shared memory.
template <int W, bool FP8>
struct Group {
  TileCopies<FP8> copies;
  float scale_log2;
  Smem sm;
  int idx, t, g, r0, r1;
  bool leader;  // the thread that issues this warpgroup's copies
  float* s_max;    // [64]
  float* s_scale;  // [2][64]: warpgroup 0's factor of the pair, then warpgroup 1's
  // wgmma descriptors, computed where used (kept in registers they pushed the pair's values into local memory).
  __device__ uint64_t desc_q() const { return make_desc(sm.q(), 16, 1024); }
  __device__ uint64_t desc_k(int b) const { return make_desc(sm.tile(b), 16, 1024); }
  __device__ uint64_t desc_v(int b) const { return make_desc(sm.atom(b, W * T::kLeftAtoms), T::kAtomBytes, 1024); }
  __device__ uint64_t desc_p(int b) const { return make_desc(sm.p(b), 16, 1024); }
};

// The rows' running max after a tile whose maxima are mx0 / mx1 (-inf: none): the new max goes to s_max and the factor
// from the old max to it (base 2) to warpgroup W's slot of s_scale; returns the exponent offsets (0 for a row still
// without a valid slot, which keeps (-inf) - (-inf) out) and the factors.
struct MaxStep {
  float mu0, mu1, f0, f1;
};
template <int W, bool FP8>
__device__ __forceinline__ MaxStep advance_max(const Group<W, FP8>& c, float mx0, float mx1) {
  const float old0 = c.s_max[c.r0], old1 = c.s_max[c.r1];
  const float n0 = fmaxf(old0, mx0), n1 = fmaxf(old1, mx1);
  MaxStep m;
  m.mu0 = n0 == -INFINITY ? 0.f : n0;
  m.mu1 = n1 == -INFINITY ? 0.f : n1;
  m.f0 = fast_exp2(old0 - m.mu0);
  m.f1 = fast_exp2(old1 - m.mu1);
  __syncwarp();  // the row's lanes have read the old max
  if (c.t == 0) {
    c.s_max[c.r0] = n0;
    c.s_max[c.r1] = n1;
    c.s_scale[W * T::kHeads + c.r0] = m.f0;
    c.s_scale[W * T::kHeads + c.r1] = m.f1;
  }
  return m;
}

// FP8: warpgroup W dequantizes the tile in its buffer W in place, once both parts landed (barrier 1 also means the
// other warpgroup has finished reading the buffer): e4m3 chunk c (dims 128 c .. 128 c + 127, in atom 4 W + c) to bf16
// atoms 2 c and 2 c + 1, rows from nv on as zeros (they may hold anything, and 0 x NaN would reach O). The two chunks
// whose bf16 atoms hold no raw bytes go first (W 0: chunks 2, 3 to atoms 4..7; W 1: chunks 0, 1 to atoms 0..3); the
// other two are read, the warpgroup meets, then written. Thread layout: 8 threads per 128-byte chunk row (16 e4m3
// each), 16 rows per pass; a quarter warp reads one whole row and writes 8 distinct 16-byte columns of the swizzle
// (threads 4..7 store their upper 8 values first).
template <int W>
__device__ __forceinline__ void dequant_tile(const Group<W, true>& c, int nv, int phase) {
  const Smem& sm = c.sm;
  mbar_wait(sm.bar(W, 0), phase);
  mbar_wait(sm.bar(W, 1), phase);
  const int u = c.idx & 7, r_first = c.idx >> 3;
  const bool upper_first = u >= 4;
  const fp8::E4m3Selectors sel = fp8::e4m3_selectors(upper_first);
  constexpr int kEarly = W == 0 ? 2 : 0, kLate = 2 - kEarly;  // first chunk of each pair
  constexpr int kPasses = T::kTile / 16;
  auto raw_at = [&](int chunk, int r) {
    return sm.atom(W, W * T::kLeftAtoms + chunk) + r * 128 + ((u ^ (r & 7)) << 4);
  };
  auto put = [&](int chunk, int r, uint4 raw) {
    uint4 first = make_uint4(0u, 0u, 0u, 0u), second = first;
    if (r < nv) {
      const float scale = ld_shared_f32(sm.scales(W) + r * T::kScaleRowBytes + chunk * 4);
      if (fp8::e4m3_fast_scale_ok(scale)) {
        fp8::dequant_e4m3x16_fast(raw, fp8::e4m3_fast_scale(scale), sel, first, second);
      } else {
        fp8::dequant_e4m3x16(raw, scale, first, second);
        if (upper_first) {
          const uint4 lo = first;
          first = second;
          second = lo;
        }
      }
    }
    const uint32_t row = sm.atom(W, 2 * chunk + u / 4) + r * 128;
    const int unit = 2 * (u % 4) + (upper_first ? 1 : 0);  // the 16-byte column of `first`; `second` is its pair
    sm90::st_shared_v4(row + ((unit ^ (r & 7)) << 4), first);
    sm90::st_shared_v4(row + (((unit ^ 1) ^ (r & 7)) << 4), second);
  };
#pragma unroll
  for (int i = 0; i < 2 * kPasses; ++i) {
    const int chunk = kEarly + i / kPasses, r = r_first + 16 * (i % kPasses);
    put(chunk, r, sm90::ld_shared_v4(raw_at(chunk, r)));
  }
  uint4 late[2 * kPasses];
#pragma unroll
  for (int i = 0; i < 2 * kPasses; ++i) late[i] = sm90::ld_shared_v4(raw_at(kLate + i / kPasses, r_first + 16 * (i % kPasses)));
  warpgroup_sync(W);  // every raw chunk read before any is overwritten
#pragma unroll
  for (int i = 0; i < 2 * kPasses; ++i) put(kLate + i / kPasses, r_first + 16 * (i % kPasses), late[i]);
  fence_proxy_async();  // the dequantized tile, for the tensor cores (and the other warpgroup's P V after the pair's
  warpgroup_sync(W);    // named barriers)
}

// FP8: S of item tile j, whose copies are in flight into buffer W: the tile dequantized, then the whole S GEMM issued
// and committed (the caller waits).
template <int W>
__device__ __forceinline__ void fp8_tile_s(const Group<W, true>& c, const ItemTiles& it, int j, float (&s)[32],
                                           int& phase) {
  dequant_tile<W>(c, it.valid(j, it.row(j)), phase);
  fence_regs(s);
  wgmma_fence();
  qk_atoms<0, T::kAtoms, true, false>(s, c.desc_q(), c.desc_k(W), c.sm, W, phase);
  wgmma_commit();
  phase ^= 1;
}

// What a pair needs of its tiles: the valid slots of tiles j0 and j0 + 1, and for the copies the leader issues, the
// first rows of tiles j0 + 2 and j0 + 3 where the pair refills its buffers with them.
struct PairTiles {
  int nv0, nv1, next0, next1;
};
template <bool B0_LAST, bool B1_LAST>
__device__ __forceinline__ PairTiles pair_tiles(const ItemTiles& it, int j0, bool leader) {
  PairTiles p{it.valid(j0, it.row(j0)), 0, 0, 0};
  if constexpr (!B0_LAST) p.nv1 = it.valid(j0 + 1, it.row(j0 + 1));
  if constexpr (!B0_LAST && !B1_LAST) {
    if (leader) {
      p.next0 = it.row(j0 + 2);
      if (j0 + 3 < it.n) p.next1 = it.row(j0 + 3);
    }
  }
  return p;
}

// Warpgroup 0, the pair of item tiles j0 (buffer 0) and j0 + 1 (buffer 1). On entry s holds S of tile j0; on return
// S of tile j0 + 2 when there is one. B0_LAST: j0 is the item's last tile; B1_LAST: j0 + 1 is.
template <bool B0_LAST, bool B1_LAST, bool FP8>
__device__ __forceinline__ void pair_wg0(const Group<0, FP8>& c, const ItemTiles& it, int j0, float (&o)[128],
                                         float (&s)[32], float& l0, float& l1, int& phase, int& pairs) {
  const auto [nv0, nv1, next0, next1] = pair_tiles<B0_LAST, B1_LAST>(it, j0, c.leader);
  const int xphase = pairs++ & 1;
  // ---- Softmax of the even tile against the running max.
  float mx0, mx1;
  mask_rowmax(s, nv0, c.t, c.scale_log2, mx0, mx1);
  const auto [mu0, mu1, alpha0, alpha1] = advance_max(c, mx0, mx1);
  uint32_t pf[16];
  float sum0 = 0.f, sum1 = 0.f;
  softmax_numerators<T::kF16, true>(s, mu0, mu1, pf, sum0, sum1);
  l0 = l0 * alpha0 + sum0;
  l1 = l1 * alpha1 + sum1;
  rescale_rows(o, alpha0, alpha1);
  mbar_arrive(c.sm.bar_scale(0));

  // ---- O_L += P_e V_e,L; then buffer 0's atoms 0..3 are free for tile j0 + 2.
  if constexpr (!FP8) {  // FP8's dequantization wrote zeros there
    if (nv0 > 0 && nv0 < T::kTile) zero_v_rows<0>(c.sm, 0, nv0, c.idx);
  }
  fence_regs(o);
  wgmma_fence();
  pv_registers(o, pf, c.desc_v(0));
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(o);

  // ---- Warpgroup 1's max: P_e, O_L and the sums rescaled to it; P_e to buffer 0's RoPE atom for warpgroup 1.
  mbar_wait(c.sm.bar_scale(1), xphase);
  if constexpr (!B0_LAST && !B1_LAST) {
    if (c.leader) c.copies.template own_half<0>(next0);
  }
  const float b0 = c.s_scale[T::kHeads + c.r0], b1 = c.s_scale[T::kHeads + c.r1];
  scaled_p<T::kF16>(s, b0, b1, pf);
  store_p(c.sm.p(0), pf, c.r0, c.g, c.t);
  fence_proxy_async();
  mbar_arrive(c.sm.bar_p(0));
  rescale_rows(o, b0, b1);
  l0 *= b0;
  l1 *= b1;

  // ---- O_L += P_o V_o,L once warpgroup 1 stored P_o.
  if constexpr (!B0_LAST) {
    mbar_wait(c.sm.bar_p(1), xphase);
    if constexpr (!FP8) {
      if (nv1 > 0 && nv1 < T::kTile) zero_v_rows<0>(c.sm, 1, nv1, c.idx);
    }
    fence_regs(o);
    wgmma_fence();
    pv_shared(o, c.desc_p(1), c.desc_v(1));
    wgmma_commit();
  }
  // ---- S of tile j0 + 2: atoms 0..3 (copied first), then 4..8 (copied by warpgroup 1). Between them, once
  // O_L += P_o V_o,L is done, buffer 1's atoms 0..3 and its RoPE atom (P_o) are free for tile j0 + 3. FP8: that
  // copy first (warpgroup 1 waits for it), then the tile's dequantization, then the whole S GEMM.
  if constexpr (!B0_LAST && !B1_LAST && FP8) {
    if (j0 + 3 < it.n) {
      wgmma_wait<0>();
      if (c.leader) c.copies.template rest<1>(next1);
    }
    fp8_tile_s(c, it, j0 + 2, s, phase);
  } else if constexpr (!B0_LAST && !B1_LAST) {
    fence_regs(s);
    wgmma_fence();
    qk_atoms<0, T::kLeftAtoms, true>(s, c.desc_q(), c.desc_k(0), c.sm, 0, phase);
    wgmma_commit();
    if (j0 + 3 < it.n) {
      wgmma_wait<1>();
      if (c.leader) c.copies.template rest<1>(next1);
    }
    qk_atoms<T::kLeftAtoms, T::kAtoms, false>(s, c.desc_q(), c.desc_k(0), c.sm, 0, phase);
    wgmma_commit();
    phase ^= 1;
  }
  wgmma_wait<0>();
  fence_regs(o);
  fence_regs(s);
}

// Warpgroup 1, the same pair. On entry s holds S of tile j0 + 1 (unless B0_LAST: there is none); on return S of tile
// j0 + 3 when there is one. B2_LAST: j0 + 2 is the item's last tile.
template <bool B0_LAST, bool B1_LAST, bool B2_LAST, bool FP8>
__device__ __forceinline__ void pair_wg1(const Group<1, FP8>& c, const ItemTiles& it, int j0, float (&o)[128],
                                         float (&s)[32], float& l0, float& l1, int& phase, int& pairs) {
  const auto [nv0, nv1, next0, next1] = pair_tiles<B0_LAST, B1_LAST>(it, j0, c.leader);
  const int xphase = pairs++ & 1;
  // ---- Softmax of the odd tile after warpgroup 0's max (the pair's max).
  float mx0 = -INFINITY, mx1 = -INFINITY;
  if constexpr (!B0_LAST) mask_rowmax(s, nv1, c.t, c.scale_log2, mx0, mx1);
  mbar_wait(c.sm.bar_scale(0), xphase);
  const auto [mu0, mu1, beta0, beta1] = advance_max(c, mx0, mx1);
  uint32_t pf[16];
  float sum0 = 0.f, sum1 = 0.f;
  if constexpr (!B0_LAST) softmax_numerators<T::kF16>(s, mu0, mu1, pf, sum0, sum1);
  // O_R was at the max before warpgroup 0's step: its factor, then this one.
  const float f0 = beta0 * c.s_scale[c.r0], f1 = beta1 * c.s_scale[c.r1];
  rescale_rows(o, f0, f1);
  l0 = l0 * f0 + sum0;
  l1 = l1 * f1 + sum1;
  mbar_arrive(c.sm.bar_scale(1));

  // ---- P_o to buffer 1's RoPE atom for warpgroup 0; O_R += P_o V_o,R.
  if constexpr (!B0_LAST) {
    store_p(c.sm.p(1), pf, c.r0, c.g, c.t);
    if constexpr (!FP8) {
      if (nv1 > 0 && nv1 < T::kTile) zero_v_rows<1>(c.sm, 1, nv1, c.idx);
    }
    fence_regs(o);
    wgmma_fence();
    pv_registers(o, pf, c.desc_v(1));
    wgmma_commit();
    fence_proxy_async();  // P_o's stores, for warpgroup 0's wgmma
  }
  // ---- O_R += P_e V_e,R once warpgroup 0 stored P_e.
  mbar_wait(c.sm.bar_p(0), xphase);
  if constexpr (!FP8) {
    if (nv0 > 0 && nv0 < T::kTile) zero_v_rows<1>(c.sm, 0, nv0, c.idx);
  }
  if constexpr (B0_LAST) fence_regs(o);  // the rescale above stays before the fence (no GEMM is in flight here)
  wgmma_fence();
  pv_shared(o, c.desc_p(0), c.desc_v(0));
  wgmma_commit();
  mbar_arrive(c.sm.bar_p(1));  // also without P_o (B0_LAST), so that the barrier's parity stays the pair count's
  // ---- Buffer 1's atoms 4..7 free for tile j0 + 3, buffer 0's atoms 4..8 (with P_e) for tile j0 + 2.
  if constexpr (!B0_LAST && !B1_LAST && !B2_LAST) {
    wgmma_wait<1>();
    if (c.leader) c.copies.template own_half<1>(next1);
  }
  if constexpr (!B0_LAST && !B1_LAST) {
    wgmma_wait<0>();
    if (c.leader) c.copies.template rest<0>(next0);
  }
  // ---- S of tile j0 + 3: atoms 4..7 (copied first), then 0..3 and 8 (copied by warpgroup 0). FP8: the tile's
  // dequantization, then the whole S GEMM.
  if constexpr (!B0_LAST && !B1_LAST && !B2_LAST && FP8) {
    fp8_tile_s(c, it, j0 + 3, s, phase);
  } else if constexpr (!B0_LAST && !B1_LAST && !B2_LAST) {
    fence_regs(s);
    wgmma_fence();
    qk_atoms<T::kLeftAtoms, T::kRopeAtom, true>(s, c.desc_q(), c.desc_k(1), c.sm, 1, phase);
    qk_atoms<0, T::kLeftAtoms, false>(s, c.desc_q(), c.desc_k(1), c.sm, 1, phase);
    qk_atoms<T::kRopeAtom, T::kAtoms, false>(s, c.desc_q(), c.desc_k(1), c.sm, 1, phase);
    wgmma_commit();
    phase ^= 1;
  }
  wgmma_wait<0>();
  fence_regs(o);
  fence_regs(s);
}

// The item's tiles for warpgroup W: the first S GEMM, then the pairs (FlashMLA's dispatch on which tile is last).
template <int W, bool FP8>
__device__ __forceinline__ void run_tiles(const Group<W, FP8>& c, const ItemTiles& it, float (&o)[128], float& l0,
                                          float& l1, int& phase, int& pairs) {
  const int n = it.n;
  float s[32];
  if (n <= W) return;
  if constexpr (FP8) dequant_tile<W>(c, it.valid(W, it.row(W)), phase);
  wgmma_fence();
  qk_atoms<0, T::kAtoms, true, !FP8>(s, c.desc_q(), c.desc_k(W), c.sm, W, phase);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(s);
  phase ^= 1;
  int j0 = 0;
  if constexpr (W == 0) {
    for (; j0 < n - 2; j0 += 2) pair_wg0<false, false>(c, it, j0, o, s, l0, l1, phase, pairs);
    if (j0 + 1 < n) pair_wg0<false, true>(c, it, j0, o, s, l0, l1, phase, pairs);
    else pair_wg0<true, false>(c, it, j0, o, s, l0, l1, phase, pairs);
  } else {
    for (; j0 < n - 3; j0 += 2) pair_wg1<false, false, false>(c, it, j0, o, s, l0, l1, phase, pairs);
    if (j0 + 2 < n) {
      pair_wg1<false, false, true>(c, it, j0, o, s, l0, l1, phase, pairs);
      pair_wg1<true, false, false>(c, it, j0 + 2, o, s, l0, l1, phase, pairs);
    } else if (j0 + 1 < n) {
      pair_wg1<false, true, false>(c, it, j0, o, s, l0, l1, phase, pairs);
    }
  }
}

// Warpgroup 1 with a single tile still takes part in the pair's exchange (its softmax over no tile, P_e V_e,R).
template <bool FP8>
__device__ __forceinline__ void single_tile_wg1(const Group<1, FP8>& c, const ItemTiles& it, float (&o)[128],
                                                float& l0, float& l1, int& phase, int& pairs) {
  float s[32];
  pair_wg1<true, false, false>(c, it, 0, o, s, l0, l1, phase, pairs);
}

// Q of the token at position `pos` of `request` (64 heads x 576, zeros past the CTA's heads) into its buffer by every
// thread's cp.async (waited for at the item's start). Not inlined: the two places that start it would double its
// 18-step loop in the code.
__device__ __noinline__ void copy_q_rows(const SparseAttentionParams& p, const Smem& sm, int64_t request, int pos,
                                        HeadRange heads) {
  const __nv_bfloat16* q =
      static_cast<const __nv_bfloat16*>(p.q) + p.request_offset(request, pos, p.q_stride_token, p.q_stride_request);
  constexpr int kChunksPerRow = T::kDqk / 8;
  for (int ch = threadIdx.x; ch < T::kHeads * kChunksPerRow; ch += T::kThreads) {
    const int row = ch / kChunksPerRow, col = ch % kChunksPerRow;
    const bool valid = heads.first + row < heads.end;
    const __nv_bfloat16* src = q + static_cast<int64_t>(valid ? heads.first + row : heads.first) * p.q_stride_head + col * 8;
    sm90::cp_async_16(sm.q() + (col / 8) * T::kAtomBytes + row * 128 + (((col % 8) ^ (row & 7)) << 4), src,
                      valid ? 16 : 0);
  }
}

template <int W, bool FP8>
__device__ __forceinline__ void warpgroup(const Params& a, const Smem& sm, const WorkList<true>& work, HeadRange heads,
                                          float* s_max, float* s_scale, float* s_sum) {
  const SparseAttentionParams& p = a.p;
  [[maybe_unused]] const auto [lane, warp_in_wg, g, t, r0, r1] = consumer_lane();
  const int idx = threadIdx.x & 127;
  const TileCopies<FP8> copies{&a, sm};
  const Group<W, FP8> c{copies, a.scale_log2, sm, idx, t, g, r0, r1, idx == 0, s_max, s_scale};
  const RowSinks sinks = load_row_sinks(p, heads, r0, r1);
  int phase = 0;  // of this warpgroup's buffer's barriers
  int pairs = 0;  // tile pairs so far (both warpgroups take part in each): the rescale exchanges' parity
  auto tiles_of = [&](const WorkItem& w) {
    return ItemTiles{p.indices + p.request_offset(w.request, w.pos, p.indices_stride_token, p.indices_stride_request),
                     static_cast<int>(p.num_kv), w.eff, w.tile_begin, w.n_tiles()};
  };
  // Item tile b (0 or 1) into buffer b (one thread).
  auto copy_tile = [&](const ItemTiles& it, int b) {
    if (threadIdx.x != 0 || it.n <= b) return;
    if (b == 0) copies.template tile<0>(it.row(0));
    else copies.template tile<1>(it.row(1));
  };
  auto copy_q = [&](const WorkItem& w) { copy_q_rows(p, sm, w.request, w.pos, heads); };
  if (work.first > work.last) return;
  WorkItem w = work.item(work.first);
  bool copied_early = false, tile1_copied = false;  // by the previous item's epilogue: Q and tile 0; tile 1
  for (int k = work.first; k <= work.last; ++k) {
    const ItemTiles it = tiles_of(w);
    // ---- Item start: Q and the first tiles (unless the previous item's epilogue started them), the running max.
    if (!copied_early) {
      copy_tile(it, 0);
      copy_q(w);
    }
    if (!tile1_copied) copy_tile(it, 1);
    cp_async_wait_all();
    fence_proxy_async();
    if (threadIdx.x < T::kHeads) s_max[threadIdx.x] = -INFINITY;
    cta_sync();

    float o[128];
    sm90::zero_fill(o);
    float l0 = 0.f, l1 = 0.f;
    if constexpr (W == 1) {
      if (it.n == 1) single_tile_wg1(c, it, o, l0, l1, phase, pairs);
    }
    run_tiles<W>(c, it, o, l0, l1, phase, pairs);

    // ---- Epilogue: the two warpgroups' row sums (after which no GEMM of this item is in flight in either), then the
    // next item's Q and first tile, and its second unless this item's output is staged in buffer 1, so that their
    // copies overlap this item's stores (FlashMLA loads the next Q there too); then O / (l + sink term) or the
    // partial row.
    float* sums = s_sum + ((k - work.first) & 1) * 2 * T::kHeads;  // by item parity (see T::kOffSum)
    combine_row_sums<T, W>(sums, r0, r1, t, l0, l1);
    const float m0 = s_max[r0], m1 = s_max[r1];
    WorkItem next{};
    copied_early = tile1_copied = false;
    if (k < work.last) {
      next = work.item(k + 1);
      const ItemTiles next_tiles = tiles_of(next);
      copy_tile(next_tiles, 0);
      copy_q(next);
      copied_early = true;
      if (w.accum_row >= 0) {  // a partial row: written from registers, buffer 1 stays free
        copy_tile(next_tiles, 1);
        tile1_copied = true;
      }
    }
    const ItemInfo info{w.token, w.accum_row, it.n, w.write_partial ? 1 : 0, static_cast<int32_t>(w.request), w.pos};
    write_item_rows<T, W, /*PARTIAL=*/true, /*STAGED=*/true>(
        p, info, heads, r0, r1, t, o, m0, m1, [&](int h) {
          const int row = h == 0 ? r0 : r1;
          return sums[row] + sums[T::kHeads + row];
        },
        sinks, sm.tile(1) + (W * 4 + warp_in_wg) * T::kStageBytesPerWarp);
    fence_proxy_async();  // the staging's ordinary accesses before the next item's copies into buffer 1
    cta_sync();
    w = next;
  }
}

template <bool FP8>
__global__ void __launch_bounds__(T::kThreads, 1) dense_decode_wgmma_kernel(const __grid_constant__ Params args) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = sm90::smem_addr(smem_raw);
  const uint32_t aligned = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (aligned - raw);
  const Smem sm{aligned};
  float* s_max = reinterpret_cast<float*>(smem + T::kOffMax);
  float* s_scale = reinterpret_cast<float*>(smem + T::kOffScale);
  float* s_sum = reinterpret_cast<float*>(smem + T::kOffSum);

  const int first_head = static_cast<int>(blockIdx.x % args.groups) * T::kHeads;
  const HeadRange heads{first_head, min(first_head + T::kHeads, args.p.h_q)};
  const WorkList<true> work(args.p, blockIdx.x / args.groups);
  if (threadIdx.x == 0) {
    for (int i = 0; i < T::kNumTileBars; ++i) mbar_init(sm.base + T::kOffBar + 8 * i, 1);
    for (int w = 0; w < 2; ++w) {
      mbar_init(sm.bar_scale(w), T::kThreads / 2);
      mbar_init(sm.bar_p(w), T::kThreads / 2);
    }
    fence_proxy_async();  // the initialised barriers, for the copy engine
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&args.kv_map)) : "memory");
    if constexpr (FP8) asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&args.scale_map)) : "memory");
  }
  __syncthreads();
  launch_dependents();  // the combine kernel may be scheduled; it waits for this grid to finish
  if (threadIdx.x < 128) warpgroup<0, FP8>(args, sm, work, heads, s_max, s_scale, s_sum);
  else warpgroup<1, FP8>(args, sm, work, heads, s_max, s_scale, s_sum);
#else
  __trap();  // built for an architecture without wgmma; the launcher never gets here
#endif
}

// The driver's tensor-map encoder, looked up once (null where the driver has none).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace flashcpp::mla::kernels::dense

namespace flashcpp::mla::kernels {

bool dense_decode_tensor_maps_available() { return dense::tensor_map_encoder() != nullptr; }

bool launch_dense_decode_wgmma(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream) {
  using dense::T;
  const bool fp8 = plan.variant == WgmmaVariant::dense_fp8;
  if ((plan.variant != WgmmaVariant::dense_bf16 && !fp8) || !plan.split || p.sched == nullptr ||
      p.kv_format != (fp8 ? KvFormat::fp8_v32 : KvFormat::bf16) || p.d_v != T::kDv ||
      !dense_tiles_fit(p, /*tensor_maps=*/true))
    return false;
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  const auto kernel = fp8 ? dense::dense_decode_wgmma_kernel<true> : dense::dense_decode_wgmma_kernel<false>;
  if (fp8 ? !sm90a_kernel_ready<dense::dense_decode_wgmma_kernel<true>>(device, T::kSmemBytes)
          : !sm90a_kernel_ready<dense::dense_decode_wgmma_kernel<false>>(device, T::kSmemBytes))
    return false;
  if (p.num_tokens == 0) return true;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = dense::tensor_map_encoder();
  if (encode == nullptr) return false;
  dense::Params args{};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  void* kv = const_cast<void*>(p.kv);
  if (fp8) {
    // The cache's bytes as [num_blocks, block_size, 656]: 64-row boxes of the e4m3 chunks and RoPE values (128 bytes,
    // swizzled) and of the scales (16 bytes).
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(T::kFp8RowBytes), static_cast<cuuint64_t>(p.block_size),
                                static_cast<cuuint64_t>(p.num_kv / p.block_size)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(p.kv_slot_stride_bytes),
                                   static_cast<cuuint64_t>(p.kv_block_stride_bytes)};
    const cuuint32_t box[3] = {T::kFp8ChunkBytes, T::kTile, 1}, scale_box[3] = {T::kScaleRowBytes, T::kTile, 1};
    if (encode(&args.kv_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, kv, dims, strides, box, elem_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS ||
        encode(&args.scale_map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, kv, dims, strides, scale_box, elem_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return false;
    args.block_size = static_cast<int>(p.block_size);
  } else {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(T::kDqk), static_cast<cuuint64_t>(p.num_kv)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.kv_row_stride) * 2};
    const cuuint32_t box[2] = {T::kAtomCols, T::kTile};
    if (encode(&args.kv_map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, kv, dims, strides, box, elem_strides,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return false;
  }
  args.p = p;
  args.scale_log2 = p.sm_scale * 1.4426950408889634f;
  args.groups = (p.h_q + T::kHeads - 1) / T::kHeads;
  const int64_t blocks = static_cast<int64_t>(p.num_parts) * p.tokens_per_request * args.groups;
  return launch_grid(kernel, blocks, T::kThreads, T::kSmemBytes, stream, args);
}

}  // namespace flashcpp::mla::kernels
