// Dense MLA decode over the V3.2 FP8 cache for up to 32 heads, on Hopper (sm_90a): the split-KV work of dense_decode
// (include/flashcpp/mla.hpp) with the sparse kernels' semantics, schedule, partial rows and combine
// (sparse_attention_kernel.hpp). Design and shared-memory plan: dense_decode_mma_fp8_config.hpp. Chosen by
// launch_plan.cpp (SparseKernel::dense_mma_sm90).
//
// One CTA = one query token (all its heads) over a schedule part's work items; 8 warps, no producer warp: thread 0
// issues each tile's bulk copy kStages tiles ahead, across the part's items. Per tile:
//   wait for its copy; warp w: S of tokens [8 w, + 8) (16 heads: over all dims, Q's nope fragments held in registers
//   since the item began; 32 heads: every warp's partial S over its 64 dims, Q's fragments of them in registers, to
//   shared memory, barrier 3, then the partials summed per scale tile), times each token's scale, plus RoPE, masked
//   and scaled, its row maxima published; barrier 1 (and thread 0 refills the stage the previous tile freed); every
//   warp: the new running max and the rescale, P of its tokens to shared memory (once a scale tile, times each
//   token's scale over the tile's reference) and its row sums; barrier 2; every warp: O += P V over its 64 dims.
// Masking: slot s of a tile is valid iff s < the token's length and the tile's first index is a cache row whose 64
// rows lie in one block (anything else: the tile is not copied and all of it is masked). Invalid slots' logits are
// -inf and their V bytes and scales are replaced by zeros before any product (the stage may hold anything there).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "mla/dense_decode_mma_fp8_config.hpp"
#include "mla/launch_plan.hpp"
#include "mla/sm90_kernel_ready.hpp"
#include "mla/sparse_attention_wgmma_device.cuh"  // WorkList, mbarriers

namespace flashcpp::mla::kernels::dense_mma {
namespace {

using wgmma::mbar_arrive, wgmma::mbar_arrive_expect_tx, wgmma::mbar_init, wgmma::mbar_wait, wgmma::WorkItem;
using sm90::fast_exp2, sm90::ldmatrix_x4, sm90::mma_bf16, sm90::mma_f16;

struct Params {
  SparseAttentionParams p;
  float scale_log2;  // sm_scale * log2(e)
};

// ---------------------------------------------------------------------------------------------------
// PTX helpers.
// The low (HI false) or high 16 bits of `two`, two e4m3 values (lower byte first), as fp16x2: exact.
template <bool HI>
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {
  uint32_t r;
  // The half taken by a register split in PTX: ptxas then reads it in place (a 16-bit shift first cost one
  // instruction a conversion).
  if constexpr (HI)
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}\n" : "=r"(r) : "r"(two));
  else
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}\n" : "=r"(r) : "r"(two));
  return r;
}
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint2 ld_shared_v2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ float ld_shared_f32(uint32_t addr) { return __uint_as_float(ld_shared_u32(addr)); }
__device__ __forceinline__ void st_shared_v2(uint32_t addr, uint32_t a, uint32_t b) {
  asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(addr), "r"(a), "r"(b) : "memory");
}
// All 256 threads meet (each warp at the same code: the aligned form).
__device__ __forceinline__ void cta_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
// `bytes` from global `src` into shared `dst` by the bulk-copy engine, completing them on `bar`.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// Q's permuted columns. Within each 16-dim block, the K fragment of thread t (column slots 2t, 2t + 1, 2t + 8, 2t + 9
// of mma's k) is one 4-byte load of dims 4t .. 4t + 3, so slot 2t + e holds dim 4t + e and slot 2t + 8 + e holds dim
// 4t + 2 + e. Of the 8 dims of a 16-byte half h of a block, dims {0, 1, 4, 5} + 8h go to slots 4h .. 4h + 3 and dims
// {2, 3, 6, 7} + 8h to slots 8 + 4h .. 8 + 4h + 3.

template <int MT>
struct Kernel {
  using T = Traits<MT>;
  // 16 heads: S by tokens with all of Q's nope fragments in registers; 32 heads (too few registers): S split by dims.
  static constexpr bool kQInRegisters = MT == 1;
  const Params& a;
  uint32_t base;  // shared memory
  int warp, lane, g, t;

  __device__ uint32_t stage(int s) const { return base + T::kOffStages + s * T::kTileBytes; }
  __device__ uint32_t bar(int s) const { return base + T::kOffBar + 8 * s; }
  __device__ uint32_t valid_slot(int s) const { return base + T::kOffValid + 4 * s; }
  __device__ uint32_t q_nope(int row, int chunk) const {
    return base + T::kOffQNope + row * T::kQNopeRowBytes + ((chunk ^ (row & 7)) << 4);
  }
  // Writer w's partial S of m-tile mt, n8 block nb, this lane's float4.
  __device__ uint32_t partial_s(int w, int mt, int nb) const {
    return base + T::kOffQNope + (((w * MT + mt) * 8 + nb) * 32 + lane) * 16;
  }
  __device__ uint32_t q_rope(int row, int chunk) const {
    return base + T::kOffQRope + row * T::kQRopeRowBytes + ((chunk ^ (row & 7)) << 4);
  }
  // P of scale tile c: P times each token's scale of the tile over the tile's largest (what warps 2c, 2c + 1 multiply).
  __device__ uint32_t p_at(int c, int row, int chunk) const {
    return base + T::kOffP + (c * T::kRows + row) * T::kPRowBytes + ((chunk ^ (row & 7)) << 4);
  }
  __device__ uint32_t inv_ref(int c) const { return base + T::kOffInvRef + 4 * c; }
  __device__ uint32_t warp_max(int w, int row) const { return base + T::kOffWarpMax + 4 * (w * T::kRows + row); }
  __device__ uint32_t warp_sum(int w, int row) const { return base + T::kOffWarpSum + 4 * (w * T::kRows + row); }
  __device__ uint32_t row_scale(int row) const { return base + T::kOffRowScale + 4 * row; }

  // ---- The producer (thread 0). The first index of tile j of item w (loaded a tile ahead of its copy: thread 0's warp
  // waits for it at the barrier that follows, which every warp then waits for).
  __device__ int tile_index(const WorkItem& w, int j) const {
    const SparseAttentionParams& p = a.p;
    const int32_t* slots =
        p.indices + p.request_offset(w.request, w.pos, p.indices_stride_token, p.indices_stride_request);
    return __ldg(slots + static_cast<int64_t>(w.tile_begin + j) * T::kTile);
  }
  // Tile j of item w, whose first index is v, into stage s, with its valid rows in valid_slot(s).
  __device__ void issue_tile(const WorkItem& w, int j, int v, int s) const {
    const SparseAttentionParams& p = a.p;
    const int tile = w.tile_begin + j;
    const unsigned bs = static_cast<unsigned>(p.block_size);
    const unsigned block = static_cast<unsigned>(v) / bs, slot = static_cast<unsigned>(v) - block * bs;
    // A cache row whose tile of 64 rows lies in its block (the plan writes tile-aligned rows; anything else is masked).
    const bool row_ok = v >= 0 && v < p.num_kv && slot + T::kTile <= bs;
    const int left = w.eff - tile * T::kTile;
    const int nv = row_ok ? (left < T::kTile ? (left < 0 ? 0 : left) : T::kTile) : 0;
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(valid_slot(s)), "r"(nv) : "memory");
    if (nv > 0) {
      mbar_arrive_expect_tx(bar(s), T::kTileBytes);
      const uint8_t* src = static_cast<const uint8_t*>(p.kv) + static_cast<int64_t>(block) * p.kv_block_stride_bytes +
                           static_cast<int64_t>(slot) * T::kRowBytes;
      bulk_copy(stage(s), src, T::kTileBytes, bar(s));
    } else {
      mbar_arrive(bar(s));  // nothing to copy: the stage's phase completes with the arrival alone
    }
  }

  // ---- Q of the item's token: every head's row scaled by 2^e (e: its largest magnitude into [2^13, 2^14)), the
  // 512 nope dims as fp16 in permuted columns, the 64 RoPE dims as bf16; rows past h_q zero. Warp w takes rows w,
  // w + 8, ...; lane L the 8-dim chunks L and L + 32 (nope) and, for L < 8, chunk 64 + L (RoPE).
  __device__ void stage_q(const WorkItem& w) const {
    const SparseAttentionParams& p = a.p;
    const __nv_bfloat16* q =
        static_cast<const __nv_bfloat16*>(p.q) + p.request_offset(w.request, w.pos, p.q_stride_token, p.q_stride_request);
#pragma unroll
    for (int i = 0; i < T::kRows / T::kWarps; ++i) {
      const int row = warp + T::kWarps * i;
      const bool live = row < p.h_q;
      const __nv_bfloat16* src = q + static_cast<int64_t>(live ? row : 0) * p.q_stride_head;
      uint4 c[3] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
      if (live) {
        c[0] = sm90::ld_global_nc_v4(src + 8 * lane);
        c[1] = sm90::ld_global_nc_v4(src + 8 * (lane + 32));
        if (lane < 8) c[2] = sm90::ld_global_nc_v4(src + 8 * (lane + 64));
      }
      float mx = 0.f;
#pragma unroll
      for (int k = 0; k < 3; ++k) {
        const uint32_t u[4] = {c[k].x, c[k].y, c[k].z, c[k].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          mx = fmaxf(mx, fabsf(__uint_as_float(u[e] << 16)));
          mx = fmaxf(mx, fabsf(__uint_as_float(u[e] & 0xffff0000u)));
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      // 2^e with e = 13 - floor(log2(mx)), clamped so that 2^e and 2^-e are normal floats (mx 0, tiny or not finite: 1).
      const int ex = static_cast<int>((__float_as_uint(mx) >> 23) & 0xffu) - 127;
      int e = (mx > 0.f && mx <= 3.0e38f) ? 13 - ex : 0;
      e = e < -100 ? -100 : (e > 100 ? 100 : e);
      const float up = __uint_as_float(static_cast<uint32_t>(127 + e) << 23);
      const float down = __uint_as_float(static_cast<uint32_t>(127 - e) << 23);
      if (lane == 0) asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(row_scale(row)), "f"(a.scale_log2 * down) : "memory");
      // Nope chunk k (dims 8k .. 8k + 7) is half h = k & 1 of block k >> 1.
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int chunk = lane + 32 * k, blk = chunk >> 1, h = chunk & 1;
        const uint32_t u[4] = {c[k].x, c[k].y, c[k].z, c[k].w};
        float f[8];
#pragma unroll
        for (int e2 = 0; e2 < 4; ++e2) {
          f[2 * e2] = __uint_as_float(u[e2] << 16) * up;
          f[2 * e2 + 1] = __uint_as_float(u[e2] & 0xffff0000u) * up;
        }
        // dims {0, 1, 4, 5} -> slots 4h..4h+3 (16-dim column 16 blk + 4h), dims {2, 3, 6, 7} -> slots 8 + 4h ..
        const int col0 = 16 * blk + 4 * h, col1 = 16 * blk + 8 + 4 * h;
        st_shared_v2(q_nope(row, col0 >> 3) + (col0 & 7) * 2, sm90::pack_f16x2(f[0], f[1]), sm90::pack_f16x2(f[4], f[5]));
        st_shared_v2(q_nope(row, col1 >> 3) + (col1 & 7) * 2, sm90::pack_f16x2(f[2], f[3]), sm90::pack_f16x2(f[6], f[7]));
      }
      if (lane < 8) {
        const uint32_t u[4] = {c[2].x, c[2].y, c[2].z, c[2].w};
        uint32_t r[4];
#pragma unroll
        for (int e2 = 0; e2 < 4; ++e2)
          r[e2] = sm90::pack_bf16x2(__uint_as_float(u[e2] << 16) * up, __uint_as_float(u[e2] & 0xffff0000u) * up);
        sm90::st_shared_v4(q_rope(row, lane), make_uint4(r[0], r[1], r[2], r[3]));
      }
    }
  }

  // ---- S split by dims (32 heads). This warp's partial S over its dims [64 warp, + 64) (16-dim blocks 4 warp ..
  // 4 warp + 3, all inside scale tile warp / 2), every m-tile and all 64 tokens, unscaled, into shared memory.
  __device__ void gemm_s_partial(uint32_t st, const uint32_t (&qf)[MT][4][4]) const {
    float acc[MT][8][4];
    sm90::zero_fill(acc);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const uint32_t w4 = ld_shared_u32(st + (8 * nb + g) * T::kRowBytes + 16 * (4 * warp + kk) + 4 * t);
        const uint32_t b0 = e4m3x2_to_f16x2<false>(w4), b1 = e4m3x2_to_f16x2<true>(w4);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_f16(acc[mt][nb], qf[mt][kk], b0, b1);
      }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nb = 0; nb < 8; ++nb)
        sm90::st_shared_v4(partial_s(warp, mt, nb),
                           make_uint4(__float_as_uint(acc[mt][nb][0]), __float_as_uint(acc[mt][nb][1]),
                                      __float_as_uint(acc[mt][nb][2]), __float_as_uint(acc[mt][nb][3])));
  }

  // The four scale tiles' scales of the thread's S columns 2t, 2t + 1: tokens tb + 2t (k0) and tb + 2t + 1 (k1).
  __device__ void token_scales(float (&k0)[4], float (&k1)[4], uint32_t st, int tb) const {
    const uint32_t r0 = st + (tb + 2 * t) * T::kRowBytes + fp8::kScaleOffset;
    const uint4 sc0 = sm90::ld_shared_v4(r0), sc1 = sm90::ld_shared_v4(r0 + T::kRowBytes);
    k0[0] = __uint_as_float(sc0.x), k0[1] = __uint_as_float(sc0.y), k0[2] = __uint_as_float(sc0.z);
    k0[3] = __uint_as_float(sc0.w);
    k1[0] = __uint_as_float(sc1.x), k1[1] = __uint_as_float(sc1.y), k1[2] = __uint_as_float(sc1.z);
    k1[3] = __uint_as_float(sc1.w);
  }

  // ---- S of this warp's tokens tb .. tb + 7 over all dims (16 heads), Q's nope fragments in registers (qa: its 16-dim
  // blocks; RoPE's from shared memory): the four scale tiles each in its own accumulator, then scaled per token, plus
  // RoPE.
  template <int NQ>
  __device__ void gemm_s_tokens(float (&s)[MT][4], float (&k0)[4], float (&k1)[4], uint32_t st, int tb,
                                const uint32_t (&qa)[NQ][4]) const {
    static_assert(NQ == 32 && MT == 1, "all 32 nope blocks of one m-tile");
    float acc[5][4];
    sm90::zero_fill(acc);
    const uint32_t krow = st + (tb + g) * T::kRowBytes;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int ks = 8 * c + kk;
        const uint32_t w4 = ld_shared_u32(krow + 16 * ks + 4 * t);
        mma_f16(acc[c], qa[ks], e4m3x2_to_f16x2<false>(w4), e4m3x2_to_f16x2<true>(w4));
      }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t at = krow + fp8::kRopeOffset + 2 * (16 * kk + 2 * t);
      uint32_t af[4];
      ldmatrix_x4(af, q_rope(lane & 15, 2 * kk + (lane >> 4)));
      mma_bf16(acc[4], af, ld_shared_u32(at), ld_shared_u32(at + 16));
    }
    token_scales(k0, k1, st, tb);
    float v0 = acc[4][0], v1 = acc[4][1], v2 = acc[4][2], v3 = acc[4][3];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      v0 = fmaf(acc[c][0], k0[c], v0);
      v1 = fmaf(acc[c][1], k1[c], v1);
      v2 = fmaf(acc[c][2], k0[c], v2);
      v3 = fmaf(acc[c][3], k1[c], v3);
    }
    s[0][0] = v0;
    s[0][1] = v1;
    s[0][2] = v2;
    s[0][3] = v3;
  }

  // ---- S of this warp's tokens (tb .. tb + 7, every m-tile): the 8 partials of its n8 block, each pair of writers
  // (one scale tile) times the token's scale, plus RoPE (bf16, computed here).
  __device__ void reduce_s(float (&s)[MT][4], float (&k0)[4], float (&k1)[4], uint32_t st, int tb) const {
    float acc[MT][4];
    sm90::zero_fill(acc);
    const int ahalf = lane >> 4;
    const uint32_t krow = st + (tb + g) * T::kRowBytes;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t at = krow + fp8::kRopeOffset + 2 * (16 * kk + 2 * t);
      const uint32_t r0 = ld_shared_u32(at), r1 = ld_shared_u32(at + 16);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t af[4];
        ldmatrix_x4(af, q_rope(16 * mt + (lane & 15), 2 * kk + ahalf));
        mma_bf16(acc[mt], af, r0, r1);
      }
    }
    token_scales(k0, k1, st, tb);
    const int nb = tb / 8;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float v0 = acc[mt][0], v1 = acc[mt][1], v2 = acc[mt][2], v3 = acc[mt][3];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const uint4 x = sm90::ld_shared_v4(partial_s(2 * c, mt, nb));
        const uint4 y = sm90::ld_shared_v4(partial_s(2 * c + 1, mt, nb));
        v0 = fmaf(__uint_as_float(x.x) + __uint_as_float(y.x), k0[c], v0);
        v1 = fmaf(__uint_as_float(x.y) + __uint_as_float(y.y), k1[c], v1);
        v2 = fmaf(__uint_as_float(x.z) + __uint_as_float(y.z), k0[c], v2);
        v3 = fmaf(__uint_as_float(x.w) + __uint_as_float(y.w), k1[c], v3);
      }
      s[mt][0] = v0;
      s[mt][1] = v1;
      s[mt][2] = v2;
      s[mt][3] = v3;
    }
  }

  // ---- O += P V over this warp's 64 dims (scale tile `ctile`), tokens masked past nv: V's fragment for n8 block j
  // (B column g = dim 64 warp + 8 g + j) and k-step kk takes byte j of rows 16 kk + {2t, 2t + 1} (b0) and
  // {2t + 8, 2t + 9} (b1); P's A fragment is scaled per token by `f` (fp16x2 pairs: tokens 2t, 2t + 1 and 2t + 8, 2t + 9
  // of each k-step).
  __device__ void load_v(uint32_t (&b0)[4][8], uint32_t (&b1)[4][8], uint32_t st, int nv) const {
    const uint32_t vcol = st + 64 * warp + 8 * g;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int tk = 16 * kk + 2 * t;
      uint2 v[4];
      const int toks[4] = {tk, tk + 1, tk + 8, tk + 9};
#pragma unroll
      for (int q = 0; q < 4; ++q) v[q] = ld_shared_v2(vcol + toks[q] * T::kRowBytes);
      if (nv < T::kTile) {  // rows past the length (or a masked tile) may hold NaN: zeros (a partial tile only)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (toks[q] >= nv) v[q] = make_uint2(0u, 0u);
      }
#pragma unroll
      for (int hw = 0; hw < 2; ++hw) {
        const uint32_t x0 = hw == 0 ? v[0].x : v[0].y, x1 = hw == 0 ? v[1].x : v[1].y;
        const uint32_t y0 = hw == 0 ? v[2].x : v[2].y, y1 = hw == 0 ? v[3].x : v[3].y;
        const uint32_t xlo = __byte_perm(x0, x1, 0x5140), xhi = __byte_perm(x0, x1, 0x7362);
        const uint32_t ylo = __byte_perm(y0, y1, 0x5140), yhi = __byte_perm(y0, y1, 0x7362);
        b0[kk][4 * hw + 0] = e4m3x2_to_f16x2<false>(xlo);
        b0[kk][4 * hw + 1] = e4m3x2_to_f16x2<true>(xlo);
        b0[kk][4 * hw + 2] = e4m3x2_to_f16x2<false>(xhi);
        b0[kk][4 * hw + 3] = e4m3x2_to_f16x2<true>(xhi);
        b1[kk][4 * hw + 0] = e4m3x2_to_f16x2<false>(ylo);
        b1[kk][4 * hw + 1] = e4m3x2_to_f16x2<true>(ylo);
        b1[kk][4 * hw + 2] = e4m3x2_to_f16x2<false>(yhi);
        b1[kk][4 * hw + 3] = e4m3x2_to_f16x2<true>(yhi);
      }
    }
  }
  // O += P V with V's fragments from load_v, P of this warp's scale tile.
  __device__ void gemm_pv(float (&o)[MT][8][4], const uint32_t (&b0)[4][8], const uint32_t (&b1)[4][8]) const {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t af[4];
        ldmatrix_x4(af, p_at(warp / 2, 16 * mt + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
        for (int j = 0; j < 8; ++j) mma_f16(o[mt][j], af, b0[kk][j], b1[kk][j]);
      }
    }
  }

  // ---- The item's result for this warp's dims of rows 16 mt + g (+8): a partial row or out, lse.
  __device__ void write_rows(const WorkItem& w, const float (&o)[MT][8][4], const float (&m)[MT][2], float ref) const {
    const SparseAttentionParams& p = a.p;
    constexpr float kLn2 = 0.6931471805599453f, kLog2e = 1.4426950408889634f;
    const bool partial = w.accum_row >= 0;
    if (partial && !w.write_partial) return;
    const int64_t out_off = p.request_offset(w.request, w.pos, p.out_stride_token, p.out_stride_request);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 16 * mt + g + 8 * h;
        if (row >= p.h_q) continue;
        float l = 0.f;
#pragma unroll
        for (int i = 0; i < T::kWarps; ++i) l += ld_shared_f32(warp_sum(i, row));
        const float mx = m[mt][h];
        const bool empty = mx == -INFINITY;
        float denom = l;
        if (!partial && p.attn_sink != nullptr) denom += fast_exp2(__ldg(p.attn_sink + row) * kLog2e - mx);
        const float inv = empty ? 0.f : ref / denom;
        // The thread's 16 dims 64 warp + 16 t + d: d = j from o[.][j][2h], d = 8 + j from o[.][j][2h + 1].
        uint32_t wd[8];
        if (partial) {  // the partial rows' layout: dims 2a, 2a + 1 at 4a, dims 8 + 2a, +1 at 4a + 2
#pragma unroll
          for (int a2 = 0; a2 < 4; ++a2) {
            wd[2 * a2] = sm90::pack_bf16x2(o[mt][2 * a2][2 * h] * inv, o[mt][2 * a2 + 1][2 * h] * inv);
            wd[2 * a2 + 1] = sm90::pack_bf16x2(o[mt][2 * a2][2 * h + 1] * inv, o[mt][2 * a2 + 1][2 * h + 1] * inv);
          }
          uint16_t* dst = p.o_accum + (w.accum_row * p.h_q + row) * T::kDv + 64 * warp + 16 * t;
          const uint64_t keep = sm90::l2_policy_evict_last();
          sm90::st_global_v4_hint(dst, make_uint4(wd[0], wd[1], wd[2], wd[3]), keep);
          sm90::st_global_v4_hint(dst + 8, make_uint4(wd[4], wd[5], wd[6], wd[7]), keep);
          if (warp == 0 && t == 0) p.lse_accum[w.accum_row * p.h_q + row] = empty ? -INFINITY : logf(l) + mx * kLn2;
        } else {
#pragma unroll
          for (int a2 = 0; a2 < 4; ++a2) {
            wd[a2] = sm90::pack_bf16x2(o[mt][2 * a2][2 * h] * inv, o[mt][2 * a2 + 1][2 * h] * inv);
            wd[4 + a2] = sm90::pack_bf16x2(o[mt][2 * a2][2 * h + 1] * inv, o[mt][2 * a2 + 1][2 * h + 1] * inv);
          }
          uint16_t* dst = static_cast<uint16_t*>(p.out) + out_off + row * p.out_stride_head + 64 * warp + 16 * t;
          const uint64_t first = sm90::l2_policy_evict_first();
          sm90::st_global_v4_hint(dst, make_uint4(wd[0], wd[1], wd[2], wd[3]), first);
          sm90::st_global_v4_hint(dst + 8, make_uint4(wd[4], wd[5], wd[6], wd[7]), first);
          if (warp == 0 && t == 0) {
            if (p.lse != nullptr)
              p.lse[p.request_offset(w.request, w.pos, p.lse_stride_token, p.lse_stride_request) +
                    row * p.lse_stride_head] = empty ? INFINITY : logf(l) + mx * kLn2;
            if (p.max_logits != nullptr)
              p.max_logits[w.token * p.max_logits_stride_token + row * p.max_logits_stride_head] =
                  empty ? -INFINITY : mx * kLn2;
          }
        }
      }
  }

  __device__ void run() const {
    const SparseAttentionParams& p = a.p;
    const wgmma::WorkList<true> work(p, blockIdx.x);
    if (work.first > work.last) return;
    const int tb = T::kSTokens * warp;  // S: the warp's first token
    const int ctile = warp / 2;                                // P V: the scale tile of this warp's dims

    // Producer cursor (thread 0): the next tile to copy across the part's items, and its first index (pv).
    int pk = work.first, pj = 0, issued = 0, pv = 0;
    WorkItem pw{};
    auto settle = [&]() {  // the cursor onto a tile that exists (or past the last item), its index loading
      while (pk <= work.last && pj >= pw.n_tiles()) {
        if (++pk <= work.last) pw = work.item(pk);
        pj = 0;
      }
      if (pk <= work.last) pv = tile_index(pw, pj);
    };
    auto produce = [&]() {
      if (pk > work.last) return;
      issue_tile(pw, pj, pv, issued % T::kStages);
      ++issued;
      ++pj;
      settle();
    };
    if (threadIdx.x == 0) {
      pw = work.item(pk);
      settle();
      for (int i = 0; i < T::kStages; ++i) produce();
    }

    int consumed = 0;  // tiles of the part consumed so far: the stage and its phase
    for (int k = work.first; k <= work.last; ++k) {
      const WorkItem w = work.item(k);
      const int n = w.n_tiles();
      cta_sync(0);  // the previous item's readers of Q and of the row sums are done
      stage_q(w);
      cta_sync(0);
      uint32_t qf[MT][4][4];  // Q's fragments of this warp's dims, every m-tile
      uint32_t qa[kQInRegisters ? 32 : 1][4];  // or all of Q's nope fragments (one m-tile)
      if constexpr (kQInRegisters) {
#pragma unroll
        for (int ks = 0; ks < 32; ++ks) ldmatrix_x4(qa[ks], q_nope(lane & 15, 2 * ks + (lane >> 4)));
      } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kk = 0; kk < 4; ++kk)
            ldmatrix_x4(qf[mt][kk], q_nope(16 * mt + (lane & 15), 2 * (4 * warp + kk) + (lane >> 4)));
      }
      cta_sync(0);  // every warp holds its fragments: the region takes the partial S from here on
      float rs[MT][2];  // S rows 16 mt + g (+8): sm_scale log2e 2^-e
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        rs[mt][0] = ld_shared_f32(row_scale(16 * mt + g));
        rs[mt][1] = ld_shared_f32(row_scale(16 * mt + g + 8));
      }
      float m[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY;
      float l[MT][2];  // this thread's share of S rows' sums
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) l[mt][0] = l[mt][1] = 0.f;
      float o[MT][8][4];
      sm90::zero_fill(o);
      float ref = 1.f;  // O's reference scale: O true = o * ref

      for (int j = 0; j < n; ++j, ++consumed) {
        const int sidx = consumed % T::kStages;
        mbar_wait(bar(sidx), (consumed / T::kStages) & 1);
        const uint32_t st = stage(sidx);
        const int nv = static_cast<int>(ld_shared_u32(valid_slot(sidx)));

        // S, masked and in base 2; the warp's row maxima over its tokens.
        float s[MT][4];
        float k0[4], k1[4];  // the scales of the thread's tokens tb + 2t (+1), zero past the length
        uint32_t vb0[4][8], vb1[4][8];
        if constexpr (kQInRegisters) {
          gemm_s_tokens(s, k0, k1, st, tb, qa);
        } else {
          gemm_s_partial(st, qf);
          cta_sync(3);  // every partial S written (the previous tile's readers are past barrier 1)
          reduce_s(s, k0, k1, st, tb);
        }
        {
          const int tok = tb + 2 * t;
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            k0[c] = tok < nv ? k0[c] : 0.f;
            k1[c] = tok + 1 < nv ? k1[c] : 0.f;
          }
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            s[mt][0] = tok < nv ? s[mt][0] * rs[mt][0] : -INFINITY;
            s[mt][1] = tok + 1 < nv ? s[mt][1] * rs[mt][0] : -INFINITY;
            s[mt][2] = tok < nv ? s[mt][2] * rs[mt][1] : -INFINITY;
            s[mt][3] = tok + 1 < nv ? s[mt][3] * rs[mt][1] : -INFINITY;
            float mx0 = fmaxf(s[mt][0], s[mt][1]), mx1 = fmaxf(s[mt][2], s[mt][3]);
#pragma unroll
            for (int o2 = 1; o2 < 4; o2 <<= 1) {
              mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
              mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
            }
            if (t == 0) {
              asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(warp_max(warp, 16 * mt + g)), "f"(mx0) : "memory");
              asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(warp_max(warp, 16 * mt + g + 8)), "f"(mx1) : "memory");
            }
          }
        }

        // The reference of this warp's scale tile: its largest valid token scale (published by one of its two warps).
        const uint32_t scol = st + fp8::kScaleOffset + 4 * ctile;
        float sc_a = lane < nv ? ld_shared_f32(scol + lane * T::kRowBytes) : 0.f;
        float sc_b = lane + 32 < nv ? ld_shared_f32(scol + (lane + 32) * T::kRowBytes) : 0.f;
        float r = fmaxf(sc_a, sc_b);
#pragma unroll
        for (int o2 = 16; o2 > 0; o2 >>= 1) r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, o2));
        if (!(r > 0.f) || !(r <= 3.0e38f)) r = 1.f;
        const float inv_r = 1.f / r;
        if ((warp & 1) == 0 && lane == 0)
          asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(inv_ref(ctile)), "f"(inv_r) : "memory");

        cta_sync(1);  // every warp's maxima published; every warp is past its P V of the previous tile
        if (threadIdx.x == 0 && consumed >= 1) produce();  // into the stage the previous tile freed

        // The running max of every row this thread holds in O (all warps compute the same values).
        float alpha[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = 16 * mt + g + 8 * h;
            float tmax = -INFINITY;
#pragma unroll
            for (int i = 0; i < T::kWarps; ++i) tmax = fmaxf(tmax, ld_shared_f32(warp_max(i, row)));
            const float mn = fmaxf(m[mt][h], tmax);
            alpha[mt][h] = mn == -INFINITY ? 1.f : fast_exp2(m[mt][h] - mn);
            m[mt][h] = mn;
          }

        // P of this warp's tokens to shared memory, once a scale tile: fp16 P times the token's scale over the tile's
        // reference (at most 1); its share of the row sums.
        float kc0[4], kc1[4];
        {
          const uint4 ir = sm90::ld_shared_v4(inv_ref(0));
          const float irf[4] = {__uint_as_float(ir.x), __uint_as_float(ir.y), __uint_as_float(ir.z),
                                __uint_as_float(ir.w)};
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            kc0[c] = k0[c] * irf[c];
            kc1[c] = k1[c] * irf[c];
          }
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const float mu0 = m[mt][0] == -INFINITY ? 0.f : m[mt][0];
          const float mu1 = m[mt][1] == -INFINITY ? 0.f : m[mt][1];
          const float p0 = fast_exp2(s[mt][0] - mu0), p1 = fast_exp2(s[mt][1] - mu0);
          const float p2 = fast_exp2(s[mt][2] - mu1), p3 = fast_exp2(s[mt][3] - mu1);
          const int row0 = 16 * mt + g;
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            sm90::st_shared_u32(p_at(c, row0, warp) + 4 * t, sm90::pack_f16x2(p0 * kc0[c], p1 * kc1[c]));
            sm90::st_shared_u32(p_at(c, row0 + 8, warp) + 4 * t, sm90::pack_f16x2(p2 * kc0[c], p3 * kc1[c]));
          }
          l[mt][0] = l[mt][0] * alpha[mt][0] + (p0 + p1);
          l[mt][1] = l[mt][1] * alpha[mt][1] + (p2 + p3);
        }
        // O rescaled to the new max and to this tile's reference scale.
        const float rescale = ref * inv_r;
        bool same = rescale == 1.f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) same = same && alpha[mt][0] == 1.f && alpha[mt][1] == 1.f;
        if (!__all_sync(0xffffffffu, same)) {  // once the running max and the reference settle, a no-op: skipped
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const float a0 = alpha[mt][0] * rescale, a1 = alpha[mt][1] * rescale;
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) {
              o[mt][jj][0] *= a0;
              o[mt][jj][1] *= a0;
              o[mt][jj][2] *= a1;
              o[mt][jj][3] *= a1;
            }
          }
        }
        ref = r;

        if constexpr (!kQInRegisters) load_v(vb0, vb1, st, nv);  // before the barrier: V is in since the copy's wait
        cta_sync(2);  // P is complete
        if constexpr (kQInRegisters) load_v(vb0, vb1, st, nv);  // after: Q's fragments hold the registers
        gemm_pv(o, vb0, vb1);
      }

      // ---- Epilogue: the warps' row sums, then every warp writes its dims.
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float l0 = l[mt][0], l1 = l[mt][1];
#pragma unroll
        for (int o2 = 1; o2 < 4; o2 <<= 1) {
          l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
          l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
        }
        if (t == 0) {
          asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(warp_sum(warp, 16 * mt + g)), "f"(l0) : "memory");
          asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(warp_sum(warp, 16 * mt + g + 8)), "f"(l1) : "memory");
        }
      }
      cta_sync(0);
      write_rows(w, o, m, ref);
    }
  }
};

template <int MT>
__global__ void __launch_bounds__(Traits<MT>::kThreads, 1) dense_decode_mma_fp8_kernel(const __grid_constant__ Params args) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Traits<MT>;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  const uint32_t base = sm90::smem_addr(smem_raw);
  if (threadIdx.x == 0) {
    for (int s = 0; s < T::kStages; ++s) mbar_init(base + T::kOffBar + 8 * s, 1);
    wgmma::fence_proxy_async();  // the initialised barriers, for the copy engine
  }
  __syncthreads();
  wgmma::launch_dependents();  // the combine kernel may be scheduled; it waits for this grid to finish
  const int lane = threadIdx.x & 31;
  const Kernel<MT> k{args, base, static_cast<int>(threadIdx.x >> 5), lane, lane >> 2, lane & 3};
  k.run();
#else
  __trap();  // built for an architecture without these instructions; the launcher never gets here
#endif
}

template <int MT>
bool launch_mt(const SparseAttentionParams& p, cudaStream_t stream) {
  using T = Traits<MT>;
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (!sm90a_kernel_ready<dense_decode_mma_fp8_kernel<MT>>(device, T::kSmemBytes)) return false;
  if (p.num_tokens == 0) return true;
  Params args{};
  args.p = p;
  args.scale_log2 = p.sm_scale * 1.4426950408889634f;
  const int64_t blocks = static_cast<int64_t>(p.num_parts) * p.tokens_per_request;
  return launch_grid(dense_decode_mma_fp8_kernel<MT>, blocks, T::kThreads, T::kSmemBytes, stream, args);
}

}  // namespace
}  // namespace flashcpp::mla::kernels::dense_mma

namespace flashcpp::mla::kernels {

bool launch_dense_decode_mma_fp8(const SparseAttentionParams& p, cudaStream_t stream) {
  if (p.sched == nullptr || !dense_fp8_mma_fit(p)) return false;
  return p.h_q <= 16 ? dense_mma::launch_mt<1>(p, stream) : dense_mma::launch_mt<2>(p, stream);
}

}  // namespace flashcpp::mla::kernels
