// The producer warpgroup of the wgmma sparse-attention kernel (sparse_attention_wgmma.cuh): Q and the KV tiles
// (bf16 by cp.async; FP8 loaded, dequantized and stored, shared with the peer CTA in a cluster).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "mla/fp8_v32_dequant.cuh"
#include "mla/fp8_v4.hpp"
#include "mla/sparse_attention_wgmma_device.cuh"

namespace flashcpp::mla::kernels::wgmma {

// V4 (fp8_v4.hpp): the byte offsets of index `idx`'s token record and scale record in pool `extra`.
__device__ __forceinline__ void v4_record_offsets(const KernelParams& args, bool extra, int idx, int64_t& token_off,
                                                  int64_t& scale_off) {
  const mla::FastDivmod& d = extra ? args.extra_page : args.page;
  const uint32_t page = d.div(static_cast<uint32_t>(idx));
  const uint32_t slot = static_cast<uint32_t>(idx) - page * d.divisor;
  const int64_t base = static_cast<int64_t>(page) * (extra ? args.p.extra_block_stride_bytes : args.p.kv_block_stride_bytes);
  token_off = base + static_cast<int64_t>(slot) * fp8_v4::kTokenRecordBytes;
  scale_off = base + static_cast<int64_t>(d.divisor) * fp8_v4::kTokenRecordBytes + static_cast<int64_t>(slot) * fp8_v4::kScaleRecordBytes;
}

// Byte offset of FP8 cache row `idx` (0 <= idx < num_kv).
__device__ __forceinline__ int64_t fp8_row_offset(const KernelParams& args, int idx) {
  const uint32_t page = args.page.div(static_cast<uint32_t>(idx));
  const uint32_t slot = static_cast<uint32_t>(idx) - page * args.page.divisor;
  return static_cast<int64_t>(page) * args.p.kv_block_stride_bytes +
         static_cast<int64_t>(slot) * args.p.kv_slot_stride_bytes;
}

// ---------------------------------------------------------------------------------------------------
// Producer warpgroup: per work item Q, then per iteration the halves of tiles A and B in release order. Its FP8
// phases (load_fp8: raw bytes; store_rows: dequantize and store) and their helpers come first; producer() last.

// Row `row` of a tile or of Q; this thread's 16-byte chunk `chunk` of each 128-byte atom row.
__device__ __forceinline__ uint32_t chunk_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// V4: whether tile `tile` of the token's list is in the extra pool (a pool's slot count is a multiple of
// the tile, so no tile straddles the two).
template <class C>
__device__ __forceinline__ bool tile_extra(const SparseAttentionParams& p, const WorkItem& w, int tile) {
  if constexpr (C::kFp8V4) return w.real_tile(tile) * C::kTile >= p.main_topk;
  else return false;
}

// Index of each of this thread's rows of `tile` as loaded, -1 where its position is masked (past the
// pool's length or the item's tiles). The range is checked where the row is read (row_valid): a check
// here would wait for the index load, which is meant to be in flight while the producer works. The item's
// index lists start at idx_start (idx_row) and, for V4's extra pool, extra_start.
template <class C>
__device__ __forceinline__ void load_indices(const SparseAttentionParams& p, const WorkItem& w, int64_t idx_start,
                                             const int32_t* idx_row, int64_t extra_start, int group, int tile,
                                             int (&idx)[C::kRowsPerThread]) {
  if constexpr (C::kFp8V4) {
    // The tile's pool is the same for all its rows: its index list, the offset at which a slot of the
    // token's whole list (main slots, then extra slots) reads it, and the slot bound its length sets.
    const bool extra = tile_extra<C>(p, w, tile);
    const int32_t* list = extra ? p.extra_indices : p.indices;
    const int64_t start = extra ? extra_start - p.main_topk : idx_start;
    const int end = tile < w.tile_end ? (extra ? p.main_topk + w.extra_len : w.main_len) : 0;
    const int first_slot = w.real_tile(tile) * C::kTile;
#pragma unroll
    for (int r = 0; r < C::kRowsPerThread; ++r) {
      const int slot = first_slot + r * C::kRowsPerPass + group;
      idx[r] = slot < end ? __ldg(list + (start + slot)) : -1;
    }
  } else {
#pragma unroll
    for (int r = 0; r < C::kRowsPerThread; ++r) {
      const int slot = tile * C::kTile + r * C::kRowsPerPass + group;
      idx[r] = (tile < w.tile_end && slot < w.eff) ? __ldg(idx_row + slot) : -1;
    }
  }
}

// Whether a loaded index is a row of its pool (`extra`: V4's extra pool).
template <class C>
__device__ __forceinline__ bool row_valid(const SparseAttentionParams& p, int id, bool extra) {
  return id >= 0 && static_cast<int64_t>(id) < (C::kFp8V4 && extra ? p.extra_num_kv : p.num_kv);
}

// FP8: raw e4m3 chunks of this thread's dequantized rows (chunks sub + 8 (2 half + j), j < 2) and their
// two scales (tiles 2 half, 2 half + 1), per raw buffer; masked rows read nothing and dequantize to 0.
// The scales stay as loaded (V3.2: two floats; V4: the half's word of four e8m0 bytes) until the store:
// decoding them at the load would wait for it there, with the next half's loads not yet issued.
template <class C>
using Fp8Scales = std::conditional_t<C::kFp8V4, uint32_t, float2>;
// One raw buffer: a half's chunks, scales and (kRopeInRegs: the right half's) 16-byte RoPE pieces of each row.
template <class C>
using Fp8RawChunks = uint4[C::kDequantRowsPerThread][C::kFp8ChunksPerHalf];
template <class C>
using Fp8RawScales = Fp8Scales<C>[C::kDequantRowsPerThread];
template <class C>
using Fp8RawRope = uint4[C::kRopeInRegs ? C::kDequantRowsPerThread : 1];

// The scale of chunk j (0, 1) of a row's half.
template <class C>
__device__ __forceinline__ float scale_of(const Fp8Scales<C>& s, int j, int sub) {
  if constexpr (C::kFp8V4) return fp8_v4::pow2_of_e8m0(static_cast<uint8_t>(s >> (8 * (2 * j + (sub >> 2)))));
  else return j == 0 ? s.x : s.y;
}
// The fast dequantization's multiplier for chunk j (fp8::e4m3_fast_scale); clears `ok` where that path
// cannot take the scale. V4's e8m0 byte e gives it without float arithmetic: 2^(e - 127) * 2^120 is the
// bf16 with exponent field e + 120, and the fast path takes e <= 133 (scales below 2^7).
template <class C>
__device__ __forceinline__ uint32_t fast_scale(const Fp8Scales<C>& s, int j, int sub, bool& ok) {
  if constexpr (C::kFp8V4) {
    const uint32_t e = (s >> (8 * (2 * j + (sub >> 2)))) & 0xffu;
    ok = ok && e <= 133u;
    return ((e + 120u) << 7) * 0x10001u;
  } else {
    const float scale = scale_of<C>(s, j, sub);
    ok = ok && fp8::e4m3_fast_scale_ok(scale);
    return fp8::e4m3_fast_scale(scale);
  }
}

// Where a row lives: its token record (V3.2: its 656-byte row) and, for V4, its scale record; null where
// masked. Tile by tile (kPerTile) a tile's right half is loaded right after its left half (the next tile's,
// a whole tile ahead), so the left half's load keeps its rows' addresses for the right one (row_addr).
// `cache`: the V3.2 cache (p.kv) as bytes.
struct RowAddr {
  const uint8_t* rec;
  const uint8_t* scales;  // V4
};
template <class C>
__device__ __forceinline__ RowAddr locate(const KernelParams& args, const uint8_t* cache, int id, bool extra) {
  const SparseAttentionParams& p = args.p;
  // Without a branch: a masked row's offsets are computed for row 0 and dropped. An early return made every row's
  // address its own divergent region, where the divisor and the strides came by per-thread constant loads and the
  // four rows' chains ran one after another. Measured (H100, 2026-12-07, with FastDivmod::div branch-free too):
  // sparse decode 3% faster over V3.2 rows, 1.6% over V4 pages, dense FP8 6% slower at 16 / 32 heads.
  const bool valid = row_valid<C>(p, id, extra);
  const int safe = valid ? id : 0;
  RowAddr a{nullptr, nullptr};
  if constexpr (C::kFp8V4) {
    int64_t token_off, scale_off;
    v4_record_offsets(args, extra, safe, token_off, scale_off);
    const uint8_t* pool = static_cast<const uint8_t*>(extra ? p.extra_kv : p.kv);
    a.rec = valid ? pool + token_off : nullptr;
    a.scales = valid ? pool + scale_off : nullptr;
  } else {
    const uint8_t* rec = cache + fp8_row_offset(args, safe);
    a.rec = valid ? rec : nullptr;
  }
  return a;
}
// Tile by tile in a cluster the left half's rows' addresses are kept for the right half. Alone the producer holds
// a whole tile's raw bytes, and the kept addresses made ptxas spill its registers (152) in the load path, 10-20%
// slower (H200, 2026-12-01, V4 h_q 64 b 64 / 128 / 148: 51.6 / 102.3 / 144.3 us recomputing them, 56.5 / 112.7 /
// 163.1 keeping them): it locates the rows again.
template <class C>
inline constexpr bool kCacheRowAddr = C::kPerTile && C::kCluster;
template <class C>
using RowAddrs = RowAddr[kCacheRowAddr<C> ? C::kDequantRowsPerThread : 1];

// This CTA's rows of a half tile (indices `idx`, pool `extra`): their raw chunks and scales, and (kRopeInRegs) the
// right half's RoPE pieces, into one raw buffer.
template <class C>
__device__ __forceinline__ void load_fp8(const KernelParams& args, const uint8_t* cache, int sub, int rank,
                                         RowAddrs<C>& row_addr, const int (&idx)[C::kRowsPerThread], int half,
                                         bool extra, Fp8RawChunks<C>& b_raw, Fp8RawScales<C>& b_scale,
                                         Fp8RawRope<C>& b_rope) {
#pragma unroll
  for (int r = 0; r < C::kDequantRowsPerThread; ++r) {
    // This CTA's rows: all four (alone), or indices 2 rank, 2 rank + 1 (cluster; no dynamic indexing).
    const int id = C::kCluster ? (rank == 0 ? idx[r] : idx[C::kDequantRowsPerThread + r]) : idx[r];
    RowAddr a;
    if (kCacheRowAddr<C> && half == 1) {
      a = row_addr[r];
    } else {
      a = locate<C>(args, cache, id, extra);
      if (kCacheRowAddr<C>) row_addr[r] = a;
    }
    const bool valid = a.rec != nullptr;
    if constexpr (C::kRopeInRegs) {
      if (half == 1)
        b_rope[r] = valid ? ld_global_nc_v4(a.rec + C::kFp8RopeOffset + 16 * sub) : make_uint4(0, 0, 0, 0);
    }
    if (valid) {
#pragma unroll
      for (int j = 0; j < C::kFp8ChunksPerHalf; ++j) {
        // V4: chunks past the 28 NoPE ones (half 1, j 1, sub >= 4) do not exist.
        const int c = sub + 8 * (2 * half + j);
        b_raw[r][j] = c < C::kFp8NopeChunks ? ld_global_nc_v4(a.rec + 16 * c) : make_uint4(0, 0, 0, 0);
      }
      // V4: chunk c has scale c / 4 = 4 half + 2 j + sub / 4 of the token's 7, in the half's word of the
      // scale record (scale_of, fast_scale). V3.2: the half's two f32 scales.
      if constexpr (C::kFp8V4) b_scale[r] = ld_global_nc_u32(a.scales + 4 * half);
      else b_scale[r] = ld_global_nc_f2(a.rec + C::kFp8ScaleOffset + 8 * half);
    } else {
#pragma unroll
      for (int j = 0; j < C::kFp8ChunksPerHalf; ++j) b_raw[r][j] = make_uint4(0, 0, 0, 0);
      b_scale[r] = Fp8Scales<C>{};  // zero bytes times any finite scale
    }
  }
}

// This CTA's rows of a half tile into `tile`: the dequantized e4m3 chunks and, with the peer (kRopeInRegs),
// the right half's RoPE pieces.
template <class C>
__device__ __forceinline__ void store_rows(int group, int sub, int rank, uint32_t tile, int half,
                                           const Fp8RawChunks<C>& b_raw, const Fp8RawScales<C>& b_scale,
                                           const Fp8RawRope<C>& b_rope) {
  // Threads sub 0..3 and 4..7 write the same chunk positions of two atoms (the same banks): the upper four
  // store their odd chunk (dims 8..15 of the 16) first, so each store instruction is conflict-free. Their
  // selectors put those dims in `first`.
  const bool odd_first = (sub & 4) != 0;
  // Rows are dequantized in batches (kBatch) and their scales checked in groups (kCheckRows): a group takes the
  // fast path or the f32 path (for scales the fast one cannot take) as a whole, each path one straight-line block
  // that also stores. A cluster CTA's two rows are one batch, dequantized before either is stored: independent
  // chunks, which the compiler interleaves. The producer alone dequantizes and stores one row at a time (more
  // would not fit its registers); tile by tile it checks its four rows at once (one branch per half), with one
  // raw buffer (104 registers) one at a time. (Against one branch per batch followed by shared stores: V4 h_q 64
  // b 64 / 148 -5%, h_q 128 b 128 -2%, V3.2 b 64 / 128 -3%; H200, 2026-12-01.)
  constexpr int kRows = C::kDequantRowsPerThread, kChunks = C::kFp8ChunksPerHalf;
  constexpr int kBatch = kRows > 2 ? 1 : kRows;
  constexpr int kCheckRows = C::kPerTile ? kRows : kBatch;
  static_assert(kRows % kCheckRows == 0 && kCheckRows % kBatch == 0, "rows come in whole groups and batches");
  // Row r's dequantized chunks (and, with the peer, its RoPE piece) into the tile.
  auto put_row = [&](int r, const uint4 (&first)[kChunks], const uint4 (&second)[kChunks]) {
    const int row = (rank * kRows + r) * C::kRowsPerPass + group;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int c = sub + 8 * (2 * half + j);  // e4m3 chunk: dims 16c .. +16 -> bf16 chunks 2c, 2c + 1
      if constexpr (C::kFp8V4) {
        if (c >= C::kFp8NopeChunks) continue;  // V4 dims 448..511 are the RoPE atom
      }
      const uint32_t atom = tile + (c >> 2) * C::kAtomBytes;
      st_shared_v4(atom + chunk_offset(row, ((2 * c) & 7) + (odd_first ? 1 : 0)), first[j]);
      st_shared_v4(atom + chunk_offset(row, ((2 * c) & 7) + (odd_first ? 0 : 1)), second[j]);
    }
    if constexpr (C::kRopeInRegs) {  // RoPE dims (bf16 in the cache): the last atom
      if (half == 1) st_shared_v4(tile + (C::kAtoms - 1) * C::kAtomBytes + chunk_offset(row, sub), b_rope[r]);
    }
  };
#pragma unroll
  for (int g0 = 0; g0 < kRows; g0 += kCheckRows) {
    uint32_t s2[kCheckRows][kChunks];
    bool fast = true;
#pragma unroll
    for (int r = 0; r < kCheckRows; ++r)
#pragma unroll
      for (int j = 0; j < kChunks; ++j) s2[r][j] = fast_scale<C>(b_scale[g0 + r], j, sub, fast);
    // The group's rows, batch by batch: `dequant(row, j, first, second)` makes chunk j of a row, then the batch
    // is stored. Each path below gets its own copy of this loop.
    auto dequant_and_put = [&](auto dequant) {
#pragma unroll
      for (int b0 = 0; b0 < kCheckRows; b0 += kBatch) {
        uint4 first[kBatch][kChunks], second[kBatch][kChunks];
#pragma unroll
        for (int r = 0; r < kBatch; ++r)
#pragma unroll
          for (int j = 0; j < kChunks; ++j) dequant(g0 + b0 + r, j, first[r][j], second[r][j]);
#pragma unroll
        for (int r = 0; r < kBatch; ++r) put_row(g0 + b0 + r, first[r], second[r]);
      }
    };
    if (fast) {
      const fp8::E4m3Selectors sel = fp8::e4m3_selectors(odd_first);
      dequant_and_put([&](int row, int j, uint4& first, uint4& second) {
        fp8::dequant_e4m3x16_fast(b_raw[row][j], s2[row - g0][j], sel, first, second);
      });
    } else {
      dequant_and_put([&](int row, int j, uint4& first, uint4& second) {
        uint4 lo, hi;
        fp8::dequant_e4m3x16(b_raw[row][j], scale_of<C>(b_scale[row], j, sub), lo, hi);
        first = odd_first ? hi : lo;
        second = odd_first ? lo : hi;
      });
    }
  }
}

// Alone, tile by tile: the RoPE atom of tile `tile_no` (bf16 in the cache) by cp.async, every row (indices `idx`),
// once the right half is stored; its arrival on the half's full barrier comes when the copies land.
template <class C>
__device__ __forceinline__ void copy_rope(const KernelParams& args, const uint8_t* cache, int group, int sub,
                                          const WorkItem& w, const int (&idx)[C::kRowsPerThread], uint32_t tile,
                                          int tile_no, uint32_t full_bar) {
#pragma unroll
  for (int r = 0; r < C::kRowsPerThread; ++r) {
    const RowAddr a = locate<C>(args, cache, idx[r], tile_extra<C>(args.p, w, tile_no));
    const uint8_t* src = a.rec != nullptr ? a.rec + C::kFp8RopeOffset + 16 * sub : cache;
    const uint32_t rope_atom = tile + (C::kAtoms - 1) * C::kAtomBytes;
    cp_async_16(rope_atom + chunk_offset(r * C::kRowsPerPass + group, sub), src, a.rec != nullptr ? 16 : 0);
  }
  cp_async_arrive(full_bar);
}

// Tile by tile: publishes a stored half of tile t (at `tile`) on its full barrier; in a cluster, with this CTA's rows
// sent to the peer's tile first.
template <class C>
__device__ __forceinline__ void publish_half(const Smem<C>& sm, int ptid, int rank, uint32_t tile, int t, int half) {
  if constexpr (C::kCluster) {
    // This CTA's rows of each atom are one contiguous block (rows 32 rank .. +32): once every producer thread
    // stored its part, one thread sends the blocks to the peer's tile by bulk copies, completing transactions
    // on the peer's full barrier. (16-byte st.async stores from every thread instead measured 27% slower at
    // b 128: their issue cost sat on the producer's path.)
    producer_sync(kBarProducerStored);
    if (ptid == 0) {
      // This CTA's valid flags and stores (release; the local consumers fence before their reads), the peer's rows
      // to come as transactions ...
      mbar_arrive_expect_tx(sm.bar_full(t, half), half == 0 ? C::kPeerBytesLeft : C::kPeerBytesRight);
      // ... then every producer thread's stores (ordered before this point by the barrier) for the bulk copies,
      // which read them through the async proxy: the one proxy fence of the half, in the thread that copies.
      fence_proxy_async();
      // This CTA's rows of every atom of the half (RoPE included) to the peer's tile.
      constexpr int kBlockBytes = C::kAtomBytes / C::kClusterCtas;
      const uint32_t peer_full = sm.peer(sm.bar_full(t, half));
      for (int a = half == 0 ? 0 : C::kLeftAtoms; a < (half == 0 ? C::kLeftAtoms : C::kAtoms); ++a) {
        const uint32_t block = tile + a * C::kAtomBytes + rank * kBlockBytes;
        bulk_copy_to_peer(sm.peer(block), block, kBlockBytes, peer_full);
      }
    } else {
      mbar_arrive(sm.bar_full(t, half));
    }
  } else {
    mbar_arrive(sm.bar_full(t, half));  // publishes the stores and valid flags (release)
  }
}

// Tile by tile: tile jj's left half, then its right half, into buffer g & 1 (g counts tiles across work
// items). Raw bytes (buffer = half) are loaded a whole tile ahead: a half's buffer is refilled with the
// next tile's same half once this one is stored. (One half ahead, the other half's buffer before this half
// is stored, measured slower for both layouts on the H200: V3.2 b 64 / 128 220.5 / 439.1 against 223.1 /
// 445.8 us, V4 h_q 128 118.3 / 235.6 against 122.0 / 243.0 us; 2026-12-01.) Indices (idx_cur: tiles jj,
// jj + 1; idx_next[0]: jj + 2) two tiles ahead.
// `iter`: the tiles before this item's.
template <class C>
__device__ __forceinline__ void fill_tile_by_tile(const KernelParams& args, const uint8_t* cache, const Smem<C>& sm,
                                                 int ptid, int group, int sub, int rank, const WorkItem& w, int n_tiles,
                                                 int iter,
                                                 uint8_t* s_valid,
                                                 int64_t idx_start, const int32_t* idx_row, int64_t extra_start,
                                                 int (&idx_cur)[2][C::kRowsPerThread],
                                                 int (&idx_next)[2][C::kRowsPerThread], RowAddrs<C>& row_addr,
                                                 Fp8RawChunks<C> (&raw)[C::kFp8RawBuffers],
                                                 Fp8RawScales<C> (&scale)[C::kFp8RawBuffers],
                                                 Fp8RawRope<C> (&rope)[C::kFp8RawBuffers]) {
  const SparseAttentionParams& p = args.p;
  if (n_tiles > 0) {
    load_fp8<C>(args, cache, sub, rank, row_addr, idx_cur[0], 0, tile_extra<C>(p, w, w.tile_begin), raw[0],
                scale[0], rope[0]);
    load_fp8<C>(args, cache, sub, rank, row_addr, idx_cur[0], 1, tile_extra<C>(p, w, w.tile_begin), raw[1],
                scale[1], rope[1]);
  }
  for (int jj = 0; jj < n_tiles; ++jj) {
    const int tile_no = w.tile_begin + jj;
    const int g = iter + jj;
    const int t = g & 1;
    const uint32_t tile = sm.tile(t);
    load_indices<C>(p, w, idx_start, idx_row, extra_start, group, tile_no + 2, idx_next[0]);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (g >= 2) mbar_wait(sm.bar_empty(t, half), ((g >> 1) - 1) & 1);
      store_rows<C>(group, sub, rank, tile, half, raw[half], scale[half], rope[half]);
      if (jj + 1 < n_tiles)
        load_fp8<C>(args, cache, sub, rank, row_addr, idx_cur[1], half, tile_extra<C>(p, w, tile_no + 1), raw[half],
                    scale[half], rope[half]);
      if (half == 0 && sub == 0) {
#pragma unroll
        for (int r = 0; r < C::kRowsPerThread; ++r)
          s_valid[t * C::kTile + r * C::kRowsPerPass + group] =
              row_valid<C>(p, idx_cur[0][r], tile_extra<C>(p, w, tile_no)) ? 1 : 0;
      }
      // No proxy fence here: the consumers' fence.proxy.async after their full-barrier wait orders these stores
      // (and the RoPE copies) before their wgmma reads (the PTX memory model wants a generic-to-async proxy fence
      // on the causality path from the stores to the reads, in either thread). A fence here compiled to
      // MEMBAR.ALL.CTA, which waited for this thread's loads of the next tile in flight (about 1 us a half tile):
      // without it decode ran 0.990x and dense FP8 0.974x the time (H100, 2026-12-05). In a cluster, the thread
      // that sends the rows to the peer fences once for all (publish_half).
      if constexpr (!C::kRopeInRegs) {
        if (half == 1) copy_rope<C>(args, cache, group, sub, w, idx_cur[0], tile, tile_no, sm.bar_full(t, half));
      }
      publish_half<C>(sm, ptid, rank, tile, t, half);
    }
#pragma unroll
    for (int r = 0; r < C::kRowsPerThread; ++r) {
      idx_cur[0][r] = idx_cur[1][r];
      idx_cur[1][r] = idx_next[0][r];
    }
  }
}

// Dense decode's split work (16-bit, SPLIT, kv_dense_tiles: a tile is 64 consecutive cache rows) asks the L2 for the
// next iteration's two tiles whole, one bulk prefetch each, an iteration ahead of their gathers, where more than one
// CTA reads each tile (h_q > 64 or s_q > 1): the CTA that reaches a tile first then finds it in the L2 instead of
// waiting on DRAM with only the two tile buffers in flight. FlashMLA's dense suite 3.4% faster (s_q 1 5-7%, s_q 2
// 1.5-2.5%; H100, 2026-12-07). Where one CTA reads each tile (16-64 heads at s_q 1) the rows already stream at the
// copy bandwidth and the prefetch cost 2-3%; two iterations ahead measured 2.8% slower than none.
template <class C>
__device__ __forceinline__ void prefetch_dense_tile(const SparseAttentionParams& p, int idx) {
  // The tile's span: 63 row strides and a row (row strides are 16-byte multiples); a view whose rows lie far apart
  // (over 1 MiB a tile) is not worth a prefetch of everything between them.
  const int64_t bytes = ((C::kTile - 1) * p.kv_row_stride + C::kAtoms * C::kAtomCols) * 2;
  if (idx < 0 || static_cast<int64_t>(idx) + C::kTile > p.num_kv || bytes > (int64_t{1} << 20)) return;
  const uint16_t* row = static_cast<const uint16_t*>(p.kv) + static_cast<int64_t>(idx) * p.kv_row_stride;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(row), "r"(static_cast<uint32_t>(bytes))
               : "memory");
}

// Two tiles per iteration (bf16; V3.2 alone with one raw buffer: raw, scale, rope): per iteration the halves of
// tiles A and B in release order; `iter`: the iterations before this item's. Indices one iteration ahead.
template <class C, bool SPLIT = false>
__device__ __forceinline__ void fill_two_tiles(const KernelParamsOf<C>& args, const uint8_t* cache, const Smem<C>& sm,
                                               int group, int sub, int rank, const WorkItem& w, int n_iters, int iter,
                                               uint8_t* s_valid,
                                               int64_t idx_start, const int32_t* idx_row, int64_t extra_start,
                                               int (&idx_cur)[2][C::kRowsPerThread],
                                               int (&idx_next)[2][C::kRowsPerThread], RowAddrs<C>& row_addr,
                                               Fp8RawChunks<C>& raw, Fp8RawScales<C>& scale, Fp8RawRope<C>& rope) {
  const SparseAttentionParams& p = args.p;
  // The thread that loads each tile's first index prefetches dense tiles (prefetch_dense_tile); in the pair cluster
  // only rank 0's, as both CTAs read the same tiles (both asking measured 2% slower, 2-5% at s_q 1, H100, 2026-12-07).
  const bool prefetcher = SPLIT && !C::kFp8 && p.kv_dense_tiles && (p.h_q > C::kHeads || p.tokens_per_request > 1) &&
                          group == 0 && sub == 0 && (!C::kTmaRows || rank == 0);
  for (int it = 0; it < n_iters; ++it) {
    if (it + 1 < n_iters) {  // next iteration's indices, in flight while we wait for free buffers
      load_indices<C>(p, w, idx_start, idx_row, extra_start, group, w.tile_begin + 2 * it + 2, idx_next[0]);
      load_indices<C>(p, w, idx_start, idx_row, extra_start, group, w.tile_begin + 2 * it + 3, idx_next[1]);
    }
    const int g_it = iter + it;
#pragma unroll
    for (int step = 0; step < 4; ++step) {  // A-left, B-right, A-right, B-left
      const int t = step & 1;
      const int half = step < 2 ? first_half(t) : 1 - first_half(t);
      const uint32_t tile = sm.tile(t);
      if constexpr (!C::kFp8) {
        if (g_it > 0) mbar_wait(sm.bar_empty(t, half), (g_it - 1) & 1);
        const uint16_t* kv = static_cast<const uint16_t*>(p.kv);  // bf16 or fp16 (C::kF16), copied as bytes
        const int a0 = half == 0 ? 0 : C::kLeftAtoms;
        const int a1 = half == 0 ? C::kLeftAtoms : C::kAtoms;
        // kTmaRows: a whole dense tile (every slot within the token's length: 64 consecutive cache rows, all valid or
        // all masked, so row 0's index is this thread's first row's minus its group) by TMA boxes multicast to both CTAs
        // of the cluster, each issuing the half's atoms of its parity. Every thread of both CTAs decides alike (one
        // token, one work list, one tile). Other tiles by the gather below.
        bool whole = false;
        int row0 = 0;
        if constexpr (C::kTmaRows) {
          const int tile_no = w.tile_begin + 2 * it + t;
          row0 = idx_cur[t][0] - group;
          whole = p.kv_dense_tiles && (tile_no + 1) * C::kTile <= w.eff && row0 >= 0 &&
                  static_cast<int64_t>(row0) + C::kTile <= p.num_kv;
        }
        if (whole) {
          if constexpr (C::kTmaRows) {
            if (group == 0) {  // one box an atom, from group 0's threads
              const int a = a0 + sub;
              if (a < a1 && (a & 1) == rank)
                tma_row_to_cluster(tile + a * C::kAtomBytes, &args.kv_rows, a * C::kAtomCols, row0,
                                   sm.bar_full(t, half));
              if (sub == 0) mbar_expect_tx(sm.bar_full(t, half), C::kTile * (a1 - a0) * 128);  // both CTAs' boxes
            }
          }
#pragma unroll
          for (int r = 0; r < C::kRowsPerThread; ++r)
            if (step < 2 && sub == 0) s_valid[t * C::kTile + r * C::kRowsPerPass + group] = kWholeTileFlag;
          // The same arrivals as the gather's (its cp.async one with no copies of this fill pending).
          if (fill_has_ordinary<C>(t, half)) mbar_arrive(sm.bar_full(t, half));
          cp_async_arrive(sm.bar_full(t, half));
        } else {
#pragma unroll
          for (int r = 0; r < C::kRowsPerThread; ++r) {
            const int row = r * C::kRowsPerPass + group;
            const int idx = idx_cur[t][r];
            const bool valid = idx >= 0 && static_cast<int64_t>(idx) < p.num_kv;
            const uint16_t* src = kv + (valid ? static_cast<int64_t>(idx) * p.kv_row_stride : 0) + sub * 8;
#pragma unroll
            for (int a = a0; a < a1; ++a)
              cp_async_16(tile + a * C::kAtomBytes + chunk_offset(row, sub), src + a * C::kAtomCols, valid ? 16 : 0);
            if (step < 2 && sub == 0) s_valid[t * C::kTile + row] = valid ? 1 : 0;
          }
          // Publishes the valid flags (release).
          if (fill_has_ordinary<C>(t, half)) mbar_arrive(sm.bar_full(t, half));
          cp_async_arrive(sm.bar_full(t, half));
        }
      } else {
        // FP8 (V3.2 rows, one CTA, one raw buffer): this step's raw bytes, loaded before the wait for the buffer.
        static_assert(!C::kFp8V4, "V4 pages run tile by tile");
        load_fp8<C>(args, cache, sub, rank, row_addr, idx_cur[t], half, false, raw, scale, rope);
        if (g_it > 0) mbar_wait(sm.bar_empty(t, half), (g_it - 1) & 1);
        store_rows<C>(group, sub, rank, tile, half, raw, scale, rope);
#pragma unroll
        for (int r = 0; r < C::kRowsPerThread; ++r) {
          const int row = r * C::kRowsPerPass + group;
          const int idx = idx_cur[t][r];
          const bool valid = row_valid<C>(p, idx, false);
          if (half == 1) {  // RoPE dims (bf16 in the cache): the last atom, every row
            const uint8_t* rope = cache + (valid ? fp8_row_offset(args, idx) : 0) + C::kFp8RopeOffset + 16 * sub;
            cp_async_16(tile + (C::kAtoms - 1) * C::kAtomBytes + chunk_offset(row, sub), rope, valid ? 16 : 0);
          }
          if (step < 2 && sub == 0) s_valid[t * C::kTile + row] = valid ? 1 : 0;
        }
        // The dequantized stores and the valid flags (release); the consumers fence before their wgmma reads (see
        // fill_tile_by_tile).
        mbar_arrive(sm.bar_full(t, half));
        if (fill_has_cp_async<C>(t, half)) cp_async_arrive(sm.bar_full(t, half));
      }
    }
    if constexpr (C::kPAInRope) {  // tile A's RoPE copies of this thread have landed (see bar_rope_landed)
      cp_async_wait_all();
      mbar_arrive(sm.bar_rope_landed());
    }
    if (prefetcher && it + 1 < n_iters) {  // row 0 of each next tile is this thread's (r 0, group 0)
      prefetch_dense_tile<C>(p, idx_next[0][0]);
      prefetch_dense_tile<C>(p, idx_next[1][0]);
    }
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int r = 0; r < C::kRowsPerThread; ++r) idx_cur[t][r] = idx_next[t][r];
  }
}

// The cluster's exit: the peer stores into this CTA's tiles (bulk copies, waited for by the consumers here)
// and arrives on its empty barriers. Once both CTAs' consumers released the last fill of each buffer, the
// peer has nothing more to do here, and its copies from this CTA's tiles have landed (it released them).
// This wait replaces a cluster barrier at the exit, whose release had every thread wait for its global
// stores (the partial rows) first. `iter`: the tiles this CTA filled.
template <class C>
__device__ __forceinline__ void cluster_exit(const Smem<C>& sm, int iter) {
  static_assert(C::kPerTile, "the cluster runs tile by tile");
  for (int t = 0; t < 2; ++t) {
    const int fills = (iter - t + 1) / 2;  // fills g = t, t + 2, ... < iter of buffer t
    if (fills <= 0) continue;
    const int last = t + 2 * (fills - 1);
    mbar_wait(sm.bar_empty(t, 0), (last >> 1) & 1);
    mbar_wait(sm.bar_empty(t, 1), (last >> 1) & 1);
  }
}

// Q (64 heads x d_qk; heads past h_q zero-filled) once the last item's S GEMMs are done, and item k for the
// consumers.
template <class C, bool SPLIT>
__device__ __forceinline__ void load_q(const SparseAttentionParams& p, const Smem<C>& sm,
                                       const WorkListOf<C, SPLIT>& work, int k, const WorkItem& w, int64_t q_row,
                                       HeadRange heads, ItemInfo* s_item, int ptid, int group, int sub) {
  if (k > work.first) mbar_wait(sm.bar_q_empty(), (k - work.first - 1) & 1);
  // Q is read once: its lines go first, so they do not push the KV rows the CTAs gather out of the L2 (with the
  // output's stores likewise: prefill 1%, decode 1.3% faster beside FlashMLA, H100, 2026-12-06).
  const uint64_t q_policy = l2_policy_evict_first();
#pragma unroll
  for (int r = 0; r < C::kRowsPerThread; ++r) {
    const int row = r * C::kRowsPerPass + group;
    const int head = heads.first + row;
    const bool ok = head < heads.end;
    const uint16_t* src = static_cast<const uint16_t*>(p.q) + q_row +  // bf16 or fp16 (C::kF16), copied as bytes
                          static_cast<int64_t>(ok ? head : 0) * p.q_stride_head + sub * 8;
#pragma unroll
    for (int a = 0; a < C::kAtoms; ++a)
      cp_async_16_hint(sm.q() + a * C::kAtomBytes + chunk_offset(row, sub), src + a * C::kAtomCols, ok ? 16 : 0,
                       q_policy);
  }
  // The item is published after the first index loads are issued: its split row reads num_splits, and its
  // publisher's warp would otherwise wait for that load before issuing its own index loads (one more global
  // latency before the first KV rows).
  if (ptid == 0) {
    s_item[(k - work.first) & 1] =
        ItemInfo{w.token, w.accum_row, C::kPerTile ? w.n_tiles() : w.n_iters(), w.write_partial ? 1 : 0,
                 static_cast<int32_t>(w.request), w.pos};
    mbar_arrive(sm.bar_q_full());  // publishes the item (release)
  }
  cp_async_arrive(sm.bar_q_full());
}

// Per work item: the first indices, Q, then the KV tiles (tile by tile, or two tiles per iteration).
template <class C, bool SPLIT>
__device__ __forceinline__ void producer(const KernelParamsOf<C>& args, const Smem<C>& sm, uint8_t* s_valid,
                                         ItemInfo* s_item, const WorkListOf<C, SPLIT>& work, HeadRange heads) {
  const SparseAttentionParams& p = args.p;
  const int ptid = threadIdx.x - C::kConsumerThreads;
  const int group = ptid / C::kThreadsPerRow, sub = ptid % C::kThreadsPerRow;
  const int rank = C::kCluster ? static_cast<int>(sm.rank) : 0;

  int iter = 0;  // iterations before this work item (barrier phases run on across items)
  for (int k = work.first; k <= work.last; ++k) {
    const WorkItem w = work.item(k);
    auto offset = [&](int64_t stride_token, int64_t stride_request) {
      return item_offset<kByRequest<C, SPLIT>>(p, w.token, w.request, w.pos, stride_token, stride_request);
    };
    const int64_t q_row = offset(p.q_stride_token, p.q_stride_request);

    // ---- Phase: fill KV tiles.
    const int64_t idx_start = offset(p.indices_stride_token, p.indices_stride_request);
    const int32_t* idx_row = p.indices + idx_start;
    const int64_t extra_start = C::kFp8V4 ? offset(p.extra_indices_stride_token, p.extra_indices_stride_request) : 0;
    const int n_iters = w.n_iters();
    int idx_cur[2][C::kRowsPerThread], idx_next[2][C::kRowsPerThread];
    // The first tiles' indices go out before Q's 64 KiB of copies, which they would otherwise queue behind: the
    // first KV rows wait for them.
    if (n_iters > 0) {
      load_indices<C>(p, w, idx_start, idx_row, extra_start, group, w.tile_begin, idx_cur[0]);
      load_indices<C>(p, w, idx_start, idx_row, extra_start, group, w.tile_begin + 1, idx_cur[1]);
    }

    // ---- Phase: load Q (64 heads x d_qk; heads past h_q zero-filled) once the last item's S GEMMs are done.
    load_q<C, SPLIT>(p, sm, work, k, w, q_row, heads, s_item, ptid, group, sub);
    const uint8_t* cache = static_cast<const uint8_t*>(p.kv);
    uint4 raw[C::kFp8RawBuffers][C::kDequantRowsPerThread][C::kFp8ChunksPerHalf];
    Fp8Scales<C> scale[C::kFp8RawBuffers][C::kDequantRowsPerThread];
    // kRopeInRegs: this thread's 16-byte RoPE piece of each of its rows (right halves only), per raw buffer.
    uint4 rope[C::kFp8RawBuffers][C::kRopeInRegs ? C::kDequantRowsPerThread : 1];
    RowAddrs<C> row_addr;
    if constexpr (C::kPerTile) {
      const int n_tiles = w.n_tiles();
      fill_tile_by_tile<C>(args, cache, sm, ptid, group, sub, rank, w, n_tiles, iter, s_valid, idx_start, idx_row,
                           extra_start, idx_cur, idx_next, row_addr, raw, scale, rope);
      iter += n_tiles;
    } else {
      fill_two_tiles<C, SPLIT>(args, cache, sm, group, sub, rank, w, n_iters, iter, s_valid, idx_start, idx_row,
                               extra_start, idx_cur, idx_next, row_addr, raw[0], scale[0], rope[0]);
      iter += n_iters;
    }
  }
  if constexpr (C::kTmaRows && C::kCluster) {
    // Neither CTA leaves while the peer's consumers may still arrive on its empty barriers: every fill of both
    // tiles' halves released by both CTAs (the peer's copies into this CTA's tiles landed before its release).
    if (iter > 0)
      for (int t = 0; t < 2; ++t)
        for (int half = 0; half < 2; ++half) mbar_wait(sm.bar_empty(t, half), (iter - 1) & 1);
  } else if constexpr (C::kCluster) {
    cluster_exit<C>(sm, iter);
  }
  cp_async_wait_all();  // no copy may land after the CTA is gone
}

}  // namespace flashcpp::mla::kernels::wgmma
