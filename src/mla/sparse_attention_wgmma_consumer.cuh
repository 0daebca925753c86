// The consumer warpgroups of the wgmma sparse-attention kernel (sparse_attention_wgmma.cuh): S GEMMs, softmax,
// P V, both schedules (two tiles per iteration, tile by tile), and the epilogue that writes an item's rows.
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "mla/sparse_attention_wgmma_device.cuh"

namespace flashcpp::mla::kernels::wgmma {

// S (64 x 64) = Q K_t^T over atoms [A0, A1) of the row (scale_d 0 on the first step when FIRST).
template <class C, int A0, int A1, bool FIRST>
__device__ __forceinline__ void gemm_qk(float (&s)[32], uint64_t desc_q, uint64_t desc_k) {
#pragma unroll
  for (int a = A0; a < A1; ++a)
#pragma unroll
    for (int ks = 0; ks < C::kAtomCols / 16; ++ks) {
      const uint64_t off = static_cast<uint64_t>((a * C::kAtomBytes + ks * 32) >> 4);
      wgmma_m64n64k16_ss<C::kF16>(s, desc_q + off, desc_k + off, (FIRST && a == A0 && ks == 0) ? 0 : 1);
    }
}

// The same over atoms [A0, A1) with Q's last atom (kQLastInRegs) from registers (qr: its four k-steps' A fragments):
// 8 KB fewer shared-memory reads per S GEMM, whose A and B both from shared memory take the whole bandwidth.
template <class C, int A0, int A1, bool FIRST>
__device__ __forceinline__ void gemm_qk_last_in_regs(float (&s)[32], uint64_t desc_q, uint64_t desc_k,
                                                     const uint32_t (&qr)[16]) {
#pragma unroll
  for (int a = A0; a < A1; ++a)
#pragma unroll
    for (int ks = 0; ks < C::kAtomCols / 16; ++ks) {
      const uint64_t off = static_cast<uint64_t>((a * C::kAtomBytes + ks * 32) >> 4);
      const int scale_d = (FIRST && a == A0 && ks == 0) ? 0 : 1;
      if (a == C::kAtoms - 1) {
        const uint32_t frag[4] = {qr[4 * ks], qr[4 * ks + 1], qr[4 * ks + 2], qr[4 * ks + 3]};
        wgmma_m64n64k16_rs<C::kF16>(s, frag, desc_k + off, scale_d);
      } else {
        wgmma_m64n64k16_ss<C::kF16>(s, desc_q + off, desc_k + off, scale_d);
      }
    }
}

// Q's last atom as this warp's A fragments (rows 16 warp .. + 15, four k-steps of 16 dims): matrix i of k-step ks
// is rows 8 (i & 1) .. + 7 of the warp's, 16-byte chunk 2 ks + (i >> 1), at chunk ^ (row & 7) (the 128-byte swizzle).
template <class C>
__device__ __forceinline__ void load_q_last(uint32_t (&qr)[16], uint32_t q_base, int warp_in_wg, int lane) {
  const int i = lane >> 3, row = 16 * warp_in_wg + 8 * (i & 1) + (lane & 7);
  const uint32_t row_addr = q_base + (C::kAtoms - 1) * C::kAtomBytes + row * 128;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    uint32_t r[4];
    sm90::ldmatrix_x4(r, row_addr + (((2 * ks + (i >> 1)) ^ (row & 7)) << 4));
#pragma unroll
    for (int j = 0; j < 4; ++j) qr[4 * ks + j] = r[j];
  }
}

// ---------------------------------------------------------------------------------------------------
// Consumer pieces shared by both schedules (two tiles per iteration, and tile by tile). A thread holds rows
// r0 = 16 warp + g and r1 = r0 + 8 of the 64, columns 2t, 2t + 1 of each 8-column block (t = lane & 3).

// Whether this thread's two columns of 8-column block j (2t, 2t + 1) hold valid slots.
struct ColumnPair {
  bool v0, v1;
};

// Masks S (columns the validity `valid(j)` (a ColumnPair) marks invalid become -inf), scales it to base 2 and returns
// the two rows' maxima over the tile (reduced over the four lanes of a row).
// RAW: S stays unscaled (masked slots -inf) and only the maxima are scaled, for exponentials that scale S in their
// FFMA (softmax_numerators<..., RAW>): 32 FMUL a tile fewer. (Measured 2.8% faster in the pair cluster, H100,
// 2026-12-07; FlashMLA's prefill-wide form of it was 3.7% slower in prefill, eighth session, so only the pair uses it.)
template <bool RAW = false, class Valid>
__device__ __forceinline__ void mask_scale_rowmax_by(float (&s)[32], Valid valid, float scale_log2, float& mx0,
                                                     float& mx1) {
  mx0 = -INFINITY;
  mx1 = -INFINITY;
  const float f = RAW ? 1.f : scale_log2;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const auto [v0, v1] = valid(j);
    s[4 * j + 0] = v0 ? s[4 * j + 0] * f : -INFINITY;
    s[4 * j + 1] = v1 ? s[4 * j + 1] * f : -INFINITY;
    s[4 * j + 2] = v0 ? s[4 * j + 2] * f : -INFINITY;
    s[4 * j + 3] = v1 ? s[4 * j + 3] * f : -INFINITY;
    mx0 = fmaxf(mx0, fmaxf(s[4 * j + 0], s[4 * j + 1]));
    mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  if constexpr (RAW) {  // scale_log2 > 0 (validated): the scaled maximum is the maximum of the scaled; -inf stays
    mx0 *= scale_log2;
    mx1 *= scale_log2;
  }
}

// mask_scale_rowmax_by over the tile's valid flags in shared memory (`flags` = the tile's flags + 2t).
template <bool RAW = false>
__device__ __forceinline__ void mask_scale_rowmax(float (&s)[32], const uint8_t* flags, float scale_log2, float& mx0,
                                                  float& mx1) {
  mask_scale_rowmax_by<RAW>(
      s,
      [flags](int j) {
        const uint32_t v = *reinterpret_cast<const uint16_t*>(flags + 8 * j);
        return ColumnPair{(v & 0xffu) != 0, (v >> 8) != 0};
      },
      scale_log2, mx0, mx1);
}

// P = exp2(S - mu) (bf16, fp16 where F16) as wgmma A fragments: k-step kk covers S columns 16 kk .. +16 (n8 blocks
// 2 kk, 2 kk + 1); adds this thread's part of each row's sum. KEEP: s keeps the f32 numerators (for scaled_p).
// RAW: S is unscaled (mask_scale_rowmax_by<true>), each exponent one FFMA, S scale - mu.
template <bool F16, bool KEEP = false, bool RAW = false>
__device__ __forceinline__ void softmax_numerators(float (&s)[32], float mu0, float mu1, uint32_t (&pf)[16],
                                                   float& sum0, float& sum1, float scale = 1.f) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    float e[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float mu = (i & 2) ? mu1 : mu0;
      e[i] = fast_exp2(RAW ? fmaf(s[8 * kk + i], scale, -mu) : s[8 * kk + i] - mu);
    }
    if constexpr (KEEP) {
#pragma unroll
      for (int i = 0; i < 8; ++i) s[8 * kk + i] = e[i];
    }
    sum0 += e[0] + e[1] + e[4] + e[5];
    sum1 += e[2] + e[3] + e[6] + e[7];
    pf[4 * kk + 0] = pack_16x2<F16>(e[0], e[1]);  // row r0, columns 16 kk + 2t
    pf[4 * kk + 1] = pack_16x2<F16>(e[2], e[3]);  // row r1
    pf[4 * kk + 2] = pack_16x2<F16>(e[4], e[5]);  // row r0, columns 16 kk + 8 + 2t
    pf[4 * kk + 3] = pack_16x2<F16>(e[6], e[7]);  // row r1
  }
}

// The fragments of P = numerators (softmax_numerators<true>'s s) x b0 (row r0) or b1 (row r1), in pf's layout.
template <bool F16>
__device__ __forceinline__ void scaled_p(const float (&e)[32], float b0, float b1, uint32_t (&pf)[16]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float b = (j & 1) ? b1 : b0;
    pf[j] = pack_16x2<F16>(e[2 * j] * b, e[2 * j + 1] * b);
  }
}

// P to shared memory for the other consumer (K-major, 128-byte swizzle: chunk j of row r at j ^ (r & 7)).
__device__ __forceinline__ void store_p(uint32_t p_addr, const uint32_t (&pf)[16], int r0, int g, int t) {
  // pf[2c] / pf[2c + 1]: this lane's elements of rows r0 / r0 + 8 in chunk c (columns 8c .. 8c + 7), so registers
  // 4kk .. 4kk + 3 are the 8 x 8 matrices (rows r0, chunk 2kk), (rows r0 + 8, 2kk), (r0, 2kk + 1), (r0 + 8, 2kk + 1):
  // one stmatrix per kk, lane 8i + q giving row q of matrix i (16 32-bit stores before; prefill unchanged, H100).
  const int lane = 4 * g + t, i = lane >> 3, q = lane & 7;
  const int row = r0 - g + (i & 1) * 8 + q;  // row & 7 == q
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int chunk = 2 * kk + (i >> 1);
    stmatrix_x4(p_addr + row * 128 + ((chunk ^ q) << 4), pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3]);
  }
}

// A consumer's start of work item `k_in_work` (its index among the CTA's items): waits for the item's Q and
// its published ItemInfo, and clears this thread's O accumulators.
template <class C>
__device__ __forceinline__ ItemInfo begin_item(const Smem<C>& sm, const ItemInfo* s_item, int k_in_work,
                                               float (&o)[128]) {
  mbar_wait(sm.bar_q_full(), k_in_work & 1);
  const ItemInfo w = s_item[k_in_work & 1];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  return w;
}

// O's rows r0 / r1 times alpha0 / alpha1. ALWAYS: without the test for factors of 1, which saves the multiplies
// where a row's max did not move but branches per thread (the sparse prefill kernels measured 1.2-1.9% faster
// without it; the split, FP8 and dense kernels 1-5% slower, H100, 2026-12-05).
template <bool ALWAYS = false>
__device__ __forceinline__ void rescale_rows(float (&o)[128], float alpha0, float alpha1) {
  if (ALWAYS || alpha0 != 1.f || alpha1 != 1.f) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j + 0] *= alpha0;
      o[4 * j + 1] *= alpha0;
      o[4 * j + 2] *= alpha1;
      o[4 * j + 3] *= alpha1;
    }
  }
}

// The sink term of rows r0 and r1 (heads first + r0, first + r1): attn_sink in base 2, or -inf without one (its
// exponential adds 0). Loaded once per CTA, at the start, so the epilogue does not wait for it.
struct RowSinks {
  float log2_r0 = -INFINITY, log2_r1 = -INFINITY;
};
__device__ __forceinline__ RowSinks load_row_sinks(const SparseAttentionParams& p, HeadRange heads, int r0, int r1) {
  constexpr float kLog2e = 1.4426950408889634f;
  RowSinks s;
  if (p.attn_sink != nullptr) {
    s.log2_r0 = __ldg(p.attn_sink + (heads.first + r0 < heads.end ? heads.first + r0 : heads.first)) * kLog2e;
    s.log2_r1 = __ldg(p.attn_sink + (heads.first + r1 < heads.end ? heads.first + r1 : heads.first)) * kLog2e;
  }
  return s;
}

// The item's result for this thread's rows of O columns W*256 .. +256: the split's partial row (O / l in bf16,
// lse; -inf when empty), or out = O / (l + sink term) with lse and max_logits. `row_sum(h)`: the full row sum
// of row r0 (h 0) or r1 (h 1). The ways an instantiation writes are fixed at compile time, so that none carries code
// it never runs (the unsplit FP8 kernels 11-15% smaller): PARTIAL, items may be split pieces
// (w.accum_row >= 0); STAGED, out goes through `stage`, 8 KiB of shared memory no one else uses now, through which
// the warp writes its 16 rows as whole 512-byte rows (16-byte stores), else each thread writes its pieces directly
// (4-byte stores, each leaving a store half a sector).
template <class C, int W, bool PARTIAL, bool STAGED, class RowSum>
__device__ __forceinline__ void write_item_rows(const SparseAttentionParams& p, const ItemInfo& w, HeadRange heads,
                                                int r0, int r1, int t, const float (&o)[128], float m0, float m1,
                                                RowSum row_sum, RowSinks sinks, uint32_t stage) {
  constexpr float kLn2 = 0.6931471805599453f;
  if (PARTIAL && w.accum_row >= 0) {
    if (w.write_partial == 0) return;
    // The combine reads the partial rows right after this kernel: kept in the L2 ahead of the streamed KV
    // (dense decode 1.2% faster, sparse decode and prefill unchanged; docs/PERFORMANCE.md).
    const uint64_t keep = l2_policy_evict_last();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = h == 0 ? r0 : r1;
      const int head = heads.first + row;
      if (head >= heads.end) continue;
      const float m = h == 0 ? m0 : m1;
      const float l = row_sum(h);
      const bool empty = m == -INFINITY;
      const float inv = empty ? 0.f : 1.f / l;
      // Columns 16q + 2t, +1 and 16q + 8 + 2t, +1 as one 8-byte word at 16q + 4t: a warp's store fills whole sectors.
      uint2* dst = reinterpret_cast<uint2*>(p.o_accum + (w.accum_row * p.h_q + head) * C::kDv + W * C::kHalfDv + 4 * t);
#pragma unroll
      for (int q = 0; q < 16; ++q)
        st_global_v2_hint(dst + 4 * q,
                          make_uint2(pack_bf16x2(o[8 * q + 2 * h] * inv, o[8 * q + 2 * h + 1] * inv),
                                     pack_bf16x2(o[8 * q + 4 + 2 * h] * inv, o[8 * q + 4 + 2 * h + 1] * inv)),
                          keep);
      if (W == 0 && t == 0) p.lse_accum[w.accum_row * p.h_q + head] = empty ? -INFINITY : logf(l) + m * kLn2;
    }
    return;
  }
  // By request and position but in the prefill kernels (kByRequest: PARTIAL is the kernel's SPLIT).
  auto offset = [&](int64_t stride_token, int64_t stride_request) {
    return item_offset<kByRequest<C, PARTIAL>>(p, w.token, w.request, w.pos, stride_token, stride_request);
  };
  uint16_t* out = static_cast<uint16_t*>(p.out) +  // bf16 or fp16 (C::kF16)
                  offset(p.out_stride_token, p.out_stride_request) + W * C::kHalfDv;
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = h == 0 ? r0 : r1;
    const int head = heads.first + row;
    const float m = h == 0 ? m0 : m1;
    const float l = row_sum(h);
    const bool empty = m == -INFINITY;
    const float denom = l + fast_exp2((h == 0 ? sinks.log2_r0 : sinks.log2_r1) - m);
    inv[h] = empty ? 0.f : 1.f / denom;
    if (W == 0 && t == 0 && head < heads.end) {
      if (p.lse != nullptr) {
        const int64_t lse_token = offset(p.lse_stride_token, p.lse_stride_request);
        p.lse[lse_token + head * p.lse_stride_head] = empty ? INFINITY : logf(l) + m * kLn2;
      }
      if (p.max_logits != nullptr)
        p.max_logits[w.token * p.max_logits_stride_token + head * p.max_logits_stride_head] = empty ? -INFINITY : m * kLn2;
    }
  }
  if constexpr (STAGED) {
    // Row i of the warp's 16 (r0 = 16 warp + g is row g, r1 row g + 8): 512 bytes, 16-byte chunk j at j ^ (i & 7),
    // so the row reads below are free of bank conflicts. Written by stmatrix: the 8 x 8 matrix (chunk J, rows 8h ..
    // 8h + 7) is this thread's packed pair of o[4J + 2h], +1; an x4 stores chunks j, j + 1 (j even) of both row halves,
    // lane 8m + q giving row q of matrix m = 2 (J - j) + h. As j is even, row q's chunk J sits at
    // 8 (j >> 3) + ((j & 7) ^ y) with y = (J - j) ^ q, so each lane's address is one of four per-lane offsets plus an
    // immediate (4-byte stores took four integer instructions each for the same layout).
    const int g = r0 & 7, lane = 4 * g + t;
    const int m = lane >> 3, q = lane & 7, y = (m >> 1) ^ q;
    const uint32_t row = stage + (8 * (m & 1) + q) * 512;
    uint32_t at[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) at[c] = row + (((2 * c) ^ y) << 4);
#pragma unroll
    for (int j = 0; j < 32; j += 2)
      stmatrix_x4(at[(j & 7) >> 1] + 128 * (j >> 3),
                  pack_16x2<C::kF16>(o[4 * j + 0] * inv[0], o[4 * j + 1] * inv[0]),
                  pack_16x2<C::kF16>(o[4 * j + 2] * inv[1], o[4 * j + 3] * inv[1]),
                  pack_16x2<C::kF16>(o[4 * j + 4] * inv[0], o[4 * j + 5] * inv[0]),
                  pack_16x2<C::kF16>(o[4 * j + 6] * inv[1], o[4 * j + 7] * inv[1]));
    __syncwarp();
    const int first_row = r0 - g;
    const uint64_t out_policy = l2_policy_evict_first();  // written once: kept out of the KV rows' way
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int head = heads.first + first_row + i;
      if (head < heads.end)
        st_global_v4_hint(out + static_cast<int64_t>(head) * p.out_stride_head + 8 * lane,
                          ld_shared_v4(stage + i * 512 + ((lane ^ (i & 7)) << 4)), out_policy);
    }
    __syncwarp();
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = heads.first + (h == 0 ? r0 : r1);
      if (head >= heads.end) continue;
      uint32_t* dst = reinterpret_cast<uint32_t*>(out + static_cast<int64_t>(head) * p.out_stride_head + 2 * t);
#pragma unroll
      for (int j = 0; j < 32; ++j)
        dst[4 * j] = pack_16x2<C::kF16>(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
    }
  }
}

// Where warp `warp` of consumer W stages its rows of the output (write_item_rows<..., PARTIAL = SPLIT, STAGED =
// !SPLIT>), or 0 (split: written directly; both ways in one instantiation spill the consumers' registers): Q's
// buffer, 8 KiB per warp, in the unsplit grid (one work item: no Q is loaded after it, and every S GEMM, Q's only
// reader, is done when the consumers meet before the epilogue). Out's rows allow the 16-byte stores:
// sparse_attention_sm90_handles takes only a 16-byte aligned out with strides in multiples of 8 elements.
template <class C, bool SPLIT, int W>
__device__ __forceinline__ uint32_t epilogue_stage(const Smem<C>& sm, int warp) {
  static_assert(2 * 4 * 8192 <= C::kQBytes, "the staged output fits Q's buffer");
  if (SPLIT) return 0;
  return sm.q() + (W * 4 + warp) * 8192;
}

// A consumer thread's lane, its warp of the warpgroup and its two rows (heads) of the 64: r0 = 16 warp + g, r1 = r0 + 8
// (g = lane >> 2; t = lane & 3 picks the columns 2t, 2t + 1 of each 8-column block).
struct ConsumerLane {
  int lane, warp_in_wg, g, t, r0, r1;
};
__device__ __forceinline__ ConsumerLane consumer_lane() {
  const int lane = threadIdx.x & 31, warp_in_wg = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  const int r0 = warp_in_wg * 16 + g, r1 = r0 + 8;
  return {lane, warp_in_wg, g, t, r0, r1};
}

// ---------------------------------------------------------------------------------------------------
// Two tiles per iteration: consumer W's fixed operands (TwoTiles), its phases (tile_row_max; consumer 0's
// pv_a_left, share_p_a, pv_b_left; consumer 1's pv_consumer1; combine_row_sums), then consumer() itself.

// What consumer W keeps for the whole CTA (built once by consumer()): its lane and rows (r0 = 16 warp + g,
// r1 = r0 + 8; t = lane & 3), the descriptors of its GEMMs, its P buffer, its and the other consumer's slot of
// s_max; and the steps several phases use (release, gemm_s, publish_max, gemm_pv_other).
template <class C, int W>
struct TwoTiles {
  static constexpr int kOther = 1 - W;
  const Smem<C>& sm;
  int lane, g, t, r0, r1;
  uint64_t desc_q, desc_k, desc_v_own, desc_v_other, desc_p_other;
  uint32_t p_own;
  // Each consumer publishes its rows' running max in its own slot of s_max ([2][64]) and arrives on bar_max(W):
  // consumer 0's over tile A, read by consumer 1; consumer 1's, the iteration's, read by consumer 0. (One slot the
  // two wrote in turn was ordered by the barrier chain, but racecheck reported the reuse as a hazard.)
  float* max_own;
  const float* max_other;

  // A half-tile this consumer is done with. GENERIC: this warpgroup also read or wrote some of it with
  // ordinary loads and stores (the valid flags, P_A); then every thread arrives itself, so each of those
  // accesses is ordered before the producer's next writes by its own thread's arrival. That is the order
  // racecheck follows: one arrival per warp after __syncwarp, or after a warpgroup bar.sync, was reported
  // as a race. Otherwise (only the tensor cores read it) one lane per warp arrives: every thread arriving on
  // every release measured 20% slower in prefill. In a cluster one lane per warp also arrives on the peer's
  // barrier (the peer's producer writes its rows into this CTA's tiles, read here only by wgmma).
  __device__ __forceinline__ void release(int tile, int half, auto generic) const {
    if (decltype(generic)::value || lane == 0) mbar_arrive(sm.bar_empty(tile, half));
    if constexpr (C::kCluster) {
      __syncwarp();
      if (lane == 0) mbar_arrive_remote(sm.peer(sm.bar_empty(tile, half)));
    }
  }

  // S = Q K_W^T over the tile's early half, then its late half, each once it is full. Consumer 0 overlapping its
  // P_B V_B-left (OVERLAP): that GEMM group is waited for between the halves, and B-left released.
  __device__ __forceinline__ void gemm_s(float (&s)[32], int phase, auto overlap, const uint32_t (&qr)[16]) const {
    mbar_wait(sm.bar_full(W, first_half(W)), phase);
    fence_proxy_async();
    wgmma_fence();
    if constexpr (W == 0) gemm_qk<C, 0, C::kLeftAtoms, true>(s, desc_q, desc_k);
    else if constexpr (C::kQLastInRegs) gemm_qk_last_in_regs<C, C::kLeftAtoms, C::kAtoms, true>(s, desc_q, desc_k, qr);
    else gemm_qk<C, C::kLeftAtoms, C::kAtoms, true>(s, desc_q, desc_k);
    if constexpr (decltype(overlap)::value) {
      wgmma_commit();
      wgmma_wait<1>();
      release(kOther, 1 - first_half(kOther), std::false_type{});  // B-left: P_B V_B-left is done
    }
    mbar_wait(sm.bar_full(W, 1 - first_half(W)), phase);
    fence_proxy_async();
    wgmma_fence();
    if constexpr (W == 0 && C::kQLastInRegs) gemm_qk_last_in_regs<C, C::kLeftAtoms, C::kAtoms, false>(s, desc_q, desc_k, qr);
    else if constexpr (W == 0) gemm_qk<C, C::kLeftAtoms, C::kAtoms, false>(s, desc_q, desc_k);
    else gemm_qk<C, 0, C::kLeftAtoms, false>(s, desc_q, desc_k);
    wgmma_commit();
    wgmma_wait<0>();
  }

  // Publishes rows r0, r1 of this consumer's running max (n0, n1): every thread arrives on bar_max(W), so its
  // earlier reads of the other slot are ordered before the other consumer's next write there too.
  __device__ __forceinline__ void publish_max(float n0, float n1) const {
    __syncwarp();  // the warp meets before its t == 0 lanes publish (the one-slot layout needed it; kept as verified)
    if (t == 0) {
      max_own[r0] = n0;
      max_own[r1] = n1;
    }
    mbar_arrive(sm.bar_max(W));
  }

  // O_W += P_other V_other (P from shared memory), uncommitted.
  __device__ __forceinline__ void gemm_pv_other(float (&o)[128]) const {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_m64n256k16_ss<C::kF16>(o, desc_p_other + static_cast<uint64_t>((kk * 32) >> 4),
                          desc_v_other + static_cast<uint64_t>((kk * 16 * 128) >> 4));
  }
};

// The phases below leave the running max and row sums (m0, m1, l0, l1) to consumer(): phases that took them by
// reference changed the machine code (they are promoted to registers later, and ptxas allocated differently).

// S unscaled until the exponentials (mask_scale_rowmax_by<true>): the pair cluster alone.
template <class C>
constexpr bool kRawS = C::kTmaRows;

// Phase softmax, its first step: masks S and scales it to base 2, and returns the rows' max over the tile
// (consumer 1: with consumer 0's over tile A, the iteration's).
// In the pair cluster (kTmaRows) a whole dense tile (its slots flagged kWholeTileFlag) is not masked, as FlashMLA masks
// only a token's last blocks (1.8% faster, H100, 2026-12-07), and S stays unscaled there (kRawS).
template <class C, int W>
__device__ __forceinline__ void tile_row_max(const TwoTiles<C, W>& c, float (&s)[32], const uint8_t* s_valid,
                                             float scale_log2, int phase, float& mx0, float& mx1) {
  const uint8_t* flags = s_valid + W * C::kTile;
  if (C::kTmaRows && flags[0] == kWholeTileFlag)
    mask_scale_rowmax_by<kRawS<C>>(s, [](int) { return ColumnPair{true, true}; }, scale_log2, mx0, mx1);
  else
    mask_scale_rowmax<kRawS<C>>(s, flags + 2 * c.t, scale_log2, mx0, mx1);
  if constexpr (W == 1) {
    mbar_wait(c.sm.bar_max(0), phase);
    mx0 = fmaxf(mx0, c.max_other[c.r0]);
    mx1 = fmaxf(mx1, c.max_other[c.r1]);
  }
}

// O_W += P_W V_W (P from registers), committed.
template <class C, int W>
__device__ __forceinline__ void gemm_pv_own(const TwoTiles<C, W>& c, float (&o)[128], const uint32_t (&pf)[16]) {
  fence_regs(o);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t a[4] = {pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3]};
    wgmma_m64n256k16_rs<C::kF16>(o, a, c.desc_v_own + static_cast<uint64_t>((kk * 16 * 128) >> 4));
  }
  wgmma_commit();
}

// Phase PV, consumer 0's first step: P_A V_A-left, waited for (P_A's registers are rewritten next), and A-left
// released.
template <class C>
__device__ __forceinline__ void pv_a_left(const TwoTiles<C, 0>& c, float (&o)[128], const uint32_t (&pf)[16]) {
  gemm_pv_own(c, o, pf);
  wgmma_wait<0>();  // P_A's registers are rewritten below
  fence_regs(o);
  c.release(0, first_half(0), std::true_type{});  // A-left: its last reader is done
}

// Consumer 0: P_A, rescaled to the iteration's max (b0, b1: row r0's and r1's factor; `s`: the f32 numerators),
// stored for consumer 1 and published.
template <class C>
__device__ __forceinline__ void share_p_a(const TwoTiles<C, 0>& c, const float (&s)[32], uint32_t (&pf)[16], float b0,
                                          float b1, int phase) {
  scaled_p<C::kF16>(s, b0, b1, pf);
  // P_A overwrites tile A's RoPE atom: its copies are confirmed landed (bar_rope_landed; complete by now
  // in practice, S_A has read them).
  if constexpr (C::kPAInRope) mbar_wait(c.sm.bar_rope_landed(), phase);
  store_p(c.p_own, pf, c.r0, c.g, c.t);
  fence_proxy_async();
  named_arrive(kBarPReadyA);
  // P_A in tile A's RoPE block: the producer's next RoPE copy there also waits for these stores.
  if constexpr (C::kPAInRope) c.release(0, 1, std::true_type{});
}

// Consumer 0's last step: P_B V_B-left once consumer 1 stored P_B, overlapped by the next S_A unless iteration `it`
// is the item's last (of n_iters; `phase`: its barrier phase), when B-left is released after it.
template <class C>
__device__ __forceinline__ void pv_b_left(const TwoTiles<C, 0>& c, float (&o)[128], float (&s)[32], int phase, int it,
                                          int n_iters, const uint32_t (&qr)[16]) {
  named_sync(kBarPReadyB);
  fence_regs(o);
  wgmma_fence();
  c.gemm_pv_other(o);
  wgmma_commit();
  if (it + 1 < n_iters) {
    c.gemm_s(s, phase ^ 1, std::true_type{}, qr);  // the next S_A, overlapping P_B V_B-left
  } else {
    wgmma_wait<0>();
    c.release(1, 1 - first_half(1), std::false_type{});  // B-left
  }
  fence_regs(o);
}

// Phase PV, consumer 1: P_B stored for consumer 0, P_B V_B-right, then P_A V_A-right; B-right and A-right released.
// P_B is stored before its own GEMM is issued (FlashMLA's dense decode orders its warpgroup 1 so): prefill 0.4-0.6%
// faster in five runs of both orders, dense decode's pair within noise, outputs identical (H100, 2026-12-07).
template <class C>
__device__ __forceinline__ void pv_consumer1(const TwoTiles<C, 1>& c, float (&o)[128], const uint32_t (&pf)[16]) {
  constexpr int W = 1, kOther = 0;
  store_p(c.p_own, pf, c.r0, c.g, c.t);
  gemm_pv_own(c, o, pf);
  named_sync(kBarPReadyA);
  wgmma_fence();
  c.gemm_pv_other(o);
  wgmma_commit();
  fence_proxy_async();
  named_arrive(kBarPReadyB);
  wgmma_wait<1>();
  c.release(W, first_half(W), std::true_type{});  // B-right: its last reader is done
  wgmma_wait<0>();
  fence_regs(o);
  c.release(kOther, 1 - first_half(kOther), std::false_type{});  // A-right
}

// Phase epilogue, its first step: this consumer's part of rows r0 and r1's sums (l0, l1: this thread's) to `sums`,
// and the two consumers meet, after which each reads both parts. They meet at different instructions (each runs its
// own copy of the code): the non-aligned barrier form (synccheck reports the aligned one there).
template <class C, int W>
__device__ __forceinline__ void combine_row_sums(float* sums, int r0, int r1, int t, float l0, float l1) {
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (t == 0) {
    sums[W * C::kHeads + r0] = l0;
    sums[W * C::kHeads + r1] = l1;
  }
  named_sync_unaligned(kBarMax);
}

// Consumer warpgroup W (two tiles per iteration): S of tile W, its softmax, O columns W*256 .. +256. The two
// consumers run staggered (FlashMLA's prefill schedule): consumer 0 takes the running max over tile A alone,
// publishes it and starts P_A V_A-left at once; consumer 1 adds tile B's max and publishes the iteration's max,
// with which consumer 0 rescales P_A (stored for consumer 1), its O and its row sums. So each softmax runs while
// the other consumer's GEMMs keep the tensor cores busy, and consumer 0 issues the next S_A while its
// P_B V_B-left runs. (Both softmaxes after one shared max exchange left the tensor cores idle meanwhile.)
template <class C, bool SPLIT, int W>
__device__ __forceinline__ void consumer(const KernelParams& args, const Smem<C>& sm, const uint8_t* s_valid,
                                         float* s_max, float* s_sum, const ItemInfo* s_item,
                                         const WorkListOf<C, SPLIT>& work, HeadRange heads) {
  const SparseAttentionParams& p = args.p;
  const auto [lane, warp_in_wg, g, t, r0, r1] = consumer_lane();
  const uint64_t desc_q = make_desc(sm.q(), 16, 1024);
  const uint64_t desc_k = make_desc(sm.tile(W), 16, 1024);
  const uint64_t desc_v_own = make_desc(sm.tile(W) + W * C::kLeftAtoms * C::kAtomBytes, C::kAtomBytes, 1024);
  const uint64_t desc_v_other = make_desc(sm.tile(1 - W) + W * C::kLeftAtoms * C::kAtomBytes, C::kAtomBytes, 1024);
  const uint64_t desc_p_other = make_desc(sm.p_of(1 - W), 16, 1024);
  const uint32_t p_own = sm.p_of(W);
  constexpr bool kRescaleAlways = !SPLIT && !C::kFp8;  // the sparse prefill kernels (see rescale_rows)
  const RowSinks sinks = load_row_sinks(p, heads, r0, r1);
  float* const max_own = s_max + W * C::kHeads;
  const float* const max_other = s_max + (1 - W) * C::kHeads;
  const TwoTiles<C, W> c{sm, lane, g, t, r0, r1, desc_q, desc_k, desc_v_own, desc_v_other, desc_p_other, p_own,
                         max_own, max_other};

  int iter = 0;
  for (int k = work.first; k <= work.last; ++k) {
    float o[128];
    const ItemInfo w = begin_item(sm, s_item, k - work.first, o);
    const int n_iters = w.n_iters;
    uint32_t qr[16];  // Q's last atom (kQLastInRegs; unused otherwise)
    if constexpr (C::kQLastInRegs) load_q_last<C>(qr, sm.q(), warp_in_wg, lane);
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    float s[32];
    if constexpr (W == 0)
      if (n_iters > 0) c.gemm_s(s, iter & 1, std::false_type{}, qr);

    for (int it = 0; it < n_iters; ++it) {
      const int phase = (iter + it) & 1;
      // ---- Phase QK: S = Q K_W^T (consumer 0's was issued in the previous iteration).
      if constexpr (W == 1) c.gemm_s(s, phase, std::false_type{}, qr);
      fence_regs(s);
      // ---- Phase softmax: mask, scale to base 2; consumer 0 on its own, consumer 1 after consumer 0's max.
      float mx0, mx1;
      tile_row_max(c, s, s_valid, args.scale_log2, phase, mx0, mx1);
      const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
      const float mu0 = n0 == -INFINITY ? 0.f : n0;  // keeps (-inf) - (-inf) out
      const float mu1 = n1 == -INFINITY ? 0.f : n1;
      // The other consumer waits for this max: published before this consumer's exponentials and O rescale
      // (FlashMLA publishes after them; this order measured prefill 1% faster, H100, 2026-12-05).
      c.publish_max(n0, n1);
      const float alpha0 = fast_exp2(m0 - mu0), alpha1 = fast_exp2(m1 - mu1);  // m = -inf -> 0
      m0 = n0;
      m1 = n1;
      uint32_t pf[16];
      float sum0 = 0.f, sum1 = 0.f;
      softmax_numerators<C::kF16, W == 0, kRawS<C>>(s, mu0, mu1, pf, sum0, sum1, args.scale_log2);
      l0 = l0 * alpha0 + sum0;
      l1 = l1 * alpha1 + sum1;
      rescale_rows<kRescaleAlways>(o, alpha0, alpha1);

      // ---- Phase PV: O_W += P_W V_W (P from registers), then O_W += P_other V_other (P from smem).
      if constexpr (W == 0) {
        pv_a_left(c, o, pf);
        // The iteration's max: P_A, O and the row sums rescaled to it (beta 1 for a row with no valid slot yet,
        // whose terms are all 0).
        mbar_wait(c.sm.bar_max(1), phase);
        const float b0 = n0 == -INFINITY ? 1.f : fast_exp2(n0 - c.max_other[c.r0]);
        const float b1 = n1 == -INFINITY ? 1.f : fast_exp2(n1 - c.max_other[c.r1]);
        m0 = c.max_other[c.r0];
        m1 = c.max_other[c.r1];
        share_p_a(c, s, pf, b0, b1, phase);
        rescale_rows<kRescaleAlways>(o, b0, b1);
        l0 *= b0;
        l1 *= b1;
        pv_b_left(c, o, s, phase, it, n_iters, qr);
      } else {
        pv_consumer1(c, o, pf);
      }
    }
    iter += n_iters;
    // Q may be reloaded. (Arriving right after the last S GEMM would let the reload overlap the last PV,
    // but a conditional arrival there makes ptxas serialize the wgmma instructions.)
    mbar_arrive(sm.bar_q_empty());
    // ---- Phase epilogue: combine the two consumers' row sums (buffer by item parity: the other consumer
    // may still read the last item's); lse, max_logits; O / (l + sink term), or the partial row.
    float* sums = s_sum + ((k - work.first) & 1) * 2 * C::kHeads;
    combine_row_sums<C, W>(sums, r0, r1, t, l0, l1);
    write_item_rows<C, W, SPLIT, !SPLIT>(
        p, w, heads, r0, r1, t, o, m0, m1,
        [&](int h) {
          const int row = h == 0 ? r0 : r1;
          return sums[row] + sums[C::kHeads + row];
        },
        sinks, epilogue_stage<C, SPLIT, W>(sm, warp_in_wg));
  }
}

// Tile by tile (Traits::kPerTile, the FP8 cluster): consumer 0 (W 0) computes S of every tile over all of
// d_qk, the softmax and O columns 0..255 with P from registers; it publishes P (shared memory) and each row's
// rescale factor, and consumer 1 (W 1) adds P V over O columns 256..511. No row-max exchange is needed: one
// warpgroup owns whole rows of S. P has one buffer (P_B's), free again when consumer 1's P V is done: it
// must not live in a tile's RoPE atom here, because this CTA's rows of that atom are also the source of a
// bulk copy to the peer whose reads nothing here waits for.
template <class C, bool SPLIT, int W>
__device__ __forceinline__ void consumer_per_tile(const KernelParams& args, const Smem<C>& sm, const uint8_t* s_valid,
                                                  float* s_alpha, float* s_sum, const ItemInfo* s_item,
                                                  const WorkListOf<C, SPLIT>& work, HeadRange heads) {
  const SparseAttentionParams& p = args.p;
  const int lane = threadIdx.x & 31, warp_in_wg = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, quad = lane & 3;
  const int r0 = warp_in_wg * 16 + g, r1 = r0 + 8;  // consumer_lane(), spelled out: it moved a register choice here

  constexpr uint64_t kTileStep = static_cast<uint64_t>(C::kKBytes >> 4);  // descriptor of tile 1 - tile 0
  const uint64_t desc_q = make_desc(sm.q(), 16, 1024);
  const uint64_t desc_k0 = make_desc(sm.tile(0), 16, 1024);
  const uint64_t desc_v0 = make_desc(sm.tile(0) + W * C::kLeftAtoms * C::kAtomBytes, C::kAtomBytes, 1024);
  // A half-tile this warpgroup is done with: every thread arrives (its ordinary reads of the valid flags are
  // ordered by its own arrival) and one lane per warp on the peer's barrier (the peer's producer writes its rows
  // into this CTA's tiles, read here only by wgmma).
  auto release = [&](int buf, int half) {
    mbar_arrive(sm.bar_empty(buf, half));
    if constexpr (C::kCluster) {
      __syncwarp();
      if (lane == 0) mbar_arrive_remote(sm.peer(sm.bar_empty(buf, half)));
    }
  };
  const uint32_t p_smem = sm.p_of(1);
  const RowSinks sinks = load_row_sinks(p, heads, r0, r1);

  int tiles_before = 0;
  for (int k = work.first; k <= work.last; ++k) {
    float o[128];
    const ItemInfo w = begin_item(sm, s_item, k - work.first, o);
    const int n_tiles = w.n_iters;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

    for (int jj = 0; jj < n_tiles; ++jj) {
      const int gt = tiles_before + jj, buf = gt & 1, phase = (gt >> 1) & 1;
      const uint64_t desc_v = desc_v0 + buf * kTileStep;
      float alpha0, alpha1;
      uint32_t pf[16];
      if constexpr (W == 0) {
        // ---- Phase QK: S = Q K^T over the left half, then the right half.
        float s[32];
        const uint64_t desc_k = desc_k0 + buf * kTileStep;
        mbar_wait(sm.bar_full(buf, 0), phase);
        fence_proxy_async();
        wgmma_fence();
        gemm_qk<C, 0, C::kLeftAtoms, true>(s, desc_q, desc_k);
        mbar_wait(sm.bar_full(buf, 1), phase);
        fence_proxy_async();
        gemm_qk<C, C::kLeftAtoms, C::kAtoms, false>(s, desc_q, desc_k);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);

        // ---- Phase softmax: mask, scale to base 2, row max over the four lanes of a row.
        float mx0, mx1;
        mask_scale_rowmax(s, s_valid + buf * C::kTile + 2 * quad, args.scale_log2, mx0, mx1);
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float mu0 = n0 == -INFINITY ? 0.f : n0;  // keeps (-inf) - (-inf) out
        const float mu1 = n1 == -INFINITY ? 0.f : n1;
        alpha0 = fast_exp2(m0 - mu0);  // m = -inf -> 0
        alpha1 = fast_exp2(m1 - mu1);
        m0 = n0;
        m1 = n1;
        float sum0 = 0.f, sum1 = 0.f;
        softmax_numerators<C::kF16>(s, mu0, mu1, pf, sum0, sum1);
        l0 = l0 * alpha0 + sum0;
        l1 = l1 * alpha1 + sum1;
        // P (K-major, 128-byte swizzle: chunk j of row r at j ^ (r & 7)) and the rescale factors for consumer 1,
        // once consumer 1's P V of the previous tile is done with the buffer.
        if (gt > 0) named_sync(kBarPFree);
        store_p(p_smem, pf, r0, g, quad);
        if (quad == 0) {
          s_alpha[buf * C::kHeads + r0] = alpha0;
          s_alpha[buf * C::kHeads + r1] = alpha1;
        }
        fence_proxy_async();
        named_arrive(buf == 0 ? kBarPReadyA : kBarPReadyB);
      } else {
        named_sync(buf == 0 ? kBarPReadyA : kBarPReadyB);
        // Its own acquire of the right half (V 256..511, written partly by the peer's bulk copies), not only
        // through consumer 0's.
        mbar_wait(sm.bar_full(buf, 1), phase);
        fence_proxy_async();
        alpha0 = s_alpha[buf * C::kHeads + r0];
        alpha1 = s_alpha[buf * C::kHeads + r1];
      }
      rescale_rows(o, alpha0, alpha1);

      // ---- Phase PV: O_W += P V_W (consumer 0: P from registers; consumer 1: from shared memory).
      fence_regs(o);
      wgmma_fence();
      if constexpr (W == 0) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const uint32_t a[4] = {pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3]};
          wgmma_m64n256k16_rs<C::kF16>(o, a, desc_v + static_cast<uint64_t>((kk * 16 * 128) >> 4));
        }
      } else {
        const uint64_t desc_p = make_desc(p_smem, 16, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          wgmma_m64n256k16_ss<C::kF16>(o, desc_p + static_cast<uint64_t>((kk * 32) >> 4),
                              desc_v + static_cast<uint64_t>((kk * 16 * 128) >> 4));
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
      if constexpr (W == 1) named_arrive(kBarPFree);
      release(buf, W);  // consumer 0: the left half (V 0..255); consumer 1: the right half
      if constexpr (W == 0) release(buf, 1);  // S read it
    }
    tiles_before += n_tiles;
    if constexpr (W == 0) mbar_arrive(sm.bar_q_empty());  // Q may be reloaded

    // ---- Phase epilogue: consumer 0 publishes each row's sum and max (buffer by item parity: consumer 1 may
    // still read the last item's); lse, max_logits; O / (l + sink term), or the partial row.
    float* sums = s_sum + ((k - work.first) & 1) * 2 * C::kHeads;  // [0][row]: l, [1][row]: m
    if constexpr (W == 0) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
      l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
      l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
      l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
      if (quad == 0) {
        sums[r0] = l0;
        sums[r1] = l1;
        sums[C::kHeads + r0] = m0;
        sums[C::kHeads + r1] = m1;
      }
    }
    named_sync_unaligned(kBarMax);  // the two warpgroups meet here at different instructions
    if constexpr (W == 1) {
      l0 = sums[r0];
      l1 = sums[r1];
      m0 = sums[C::kHeads + r0];
      m1 = sums[C::kHeads + r1];
    }
    write_item_rows<C, W, SPLIT, !SPLIT>(p, w, heads, r0, r1, quad, o, m0, m1,
                                         [l0, l1](int h) { return h == 0 ? l0 : l1; }, sinks,
                                         epilogue_stage<C, SPLIT, W>(sm, warp_in_wg));
  }
  if constexpr (W == 0) {
    if (tiles_before > 0) named_sync(kBarPFree);  // consumer 1's arrival after the last tile
  }
}

}  // namespace flashcpp::mla::kernels::wgmma
