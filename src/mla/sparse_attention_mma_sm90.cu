// Sparse MLA FP8 decode for Hopper (sm_90a) on warp-level tensor cores (mma.sync), with FlashMLA's
// semantics (see sparse_attention_kernel.hpp, docs/MLA.md): the DeepSeek V3.2 FP8 cache, split-KV or not.
// The launch plan runs it for V3.2 FP8 decode with more than 128 heads (launch_plan.cpp); the wgmma kernel takes
// the rest, prefill included. Its design, tiles, roles and shared-memory plan: sparse_attention_mma_config.hpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "mla/decode_schedule.hpp"
#include "mla/fast_divmod.hpp"
#include "mla/sm90_device.cuh"
#include "mla/sm90_kernel_ready.hpp"
#include "mla/sparse_attention_kernel.hpp"
#include "mla/sparse_attention_mma_config.hpp"

namespace flashcpp::mla::kernels {
namespace {

using sm90::cp_async_16, sm90::fast_exp2, sm90::ldmatrix_x4, sm90::mma_bf16, sm90::ld_global_nc_v4, sm90::ld_shared_v4, sm90::pack_bf16x2,
    sm90::smem_addr, sm90::st_shared_u32, sm90::st_shared_v4;

using namespace mma_sm90;
static_assert(kTileKv == sched::kBlockSlots, "a schedule block must be one KV tile");

struct KernelParams {
  SparseAttentionParams p;
  float scale_log2;  // sm_scale * log2(e)
  int groups;        // ceil(h_q / 64)
  FastDivmod page;   // index -> (page, slot) by block_size
};

// ---------------------------------------------------------------------------------------------------
// PTX helpers (those both Hopper kernels use are in sm90_device.cuh).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// Two e4m3 (low byte first) -> bf16x2 of (value * scale), product rounded once from f32.
__device__ __forceinline__ uint32_t dequant_e4m3x2(uint32_t two, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return pack_bf16x2(f.x * scale, f.y * scale);
}
// Physical byte offset of logical 16-byte chunk `chunk` of row `row` in a swizzled row-major tile.
__device__ __forceinline__ uint32_t swz(int row, int chunk, int row_bytes) {
  return static_cast<uint32_t>(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}
// f(mt, hf, r, row) for each of this thread's four rows: r = 2 mt + hf -> row 32 mw + 16 mt + 8 hf + g.
template <class F>
__device__ __forceinline__ void for_each_row(int mw, int g, F&& f) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) f(mt, hf, 2 * mt + hf, mw * 32 + mt * 16 + hf * 8 + g);
}
// Row `row`'s sum over the four quarters' partial sums (s_sum: [4][64]).
__device__ __forceinline__ float row_sum(const float* s_sum, int row) {
  return s_sum[row] + s_sum[64 + row] + s_sum[128 + row] + s_sum[192 + row];
}

// ---------------------------------------------------------------------------------------------------
// The tile loop's phases: qk, the mask (in the kernel), row_max, barrier B, softmax_update, barrier C, pv.
// A thread's rows: r = 2 mt + hf -> row 32 mw + 16 mt + 8 hf + g; S columns 16 nq .., O columns 128 nq ...

// S = Q K^T (k = D_QK) from this lane's ldmatrix rows a_row (Q), b_row (K). 64 columns (one swizzle period) an outer
// step; the inner k-steps' swizzled chunk offsets are per lane (the XOR touches only the chunk index's low 3 bits).
template <int D_QK>
__device__ __forceinline__ void qk(float (&s_acc)[2][2][4], uint32_t a_row, uint32_t b_row, int x7, int hi16,
                                   int hi8) {
  constexpr int kRowBytes = SmemPlan<D_QK>::kRowBytes;
  sm90::zero_fill(s_acc);
#pragma unroll 1
  for (int kb = 0; kb < D_QK / 16 / 4; ++kb) {
    const uint32_t a_base = a_row + kb * 128;
    const uint32_t b_base = b_row + kb * 128;
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) {
      uint32_t a0[4], a1[4], b[4];
      ldmatrix_x4(a0, a_base + (((2 * kq + hi16) ^ x7) << 4));
      ldmatrix_x4(a1, a_base + 16 * kRowBytes + (((2 * kq + hi16) ^ x7) << 4));
      ldmatrix_x4(b, b_base + (((2 * kq + hi8) ^ x7) << 4));
      mma_bf16(s_acc[0][0], a0, b[0], b[1]);
      mma_bf16(s_acc[0][1], a0, b[2], b[3]);
      mma_bf16(s_acc[1][0], a1, b[0], b[1]);
      mma_bf16(s_acc[1][1], a1, b[2], b[3]);
    }
  }
}

// The row maxima over this warp's 16 columns to its quarter's slot of s_max ([4][64]).
__device__ __forceinline__ void row_max(const float (&s_acc)[2][2][4], float* s_max, int mw, int nq, int g, int t) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = fmaxf(fmaxf(s_acc[mt][0][2 * hf], s_acc[mt][0][2 * hf + 1]),
                       fmaxf(s_acc[mt][1][2 * hf], s_acc[mt][1][2 * hf + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if (t == 0) s_max[nq * 64 + mw * 32 + mt * 16 + hf * 8 + g] = mx;
    }
}

// Online softmax: the new row maxima (all four quarters'), O and the running sums rescaled (skipped when no row
// of the warp changed its maximum), P (bf16) to smem at sP.
template <int D_QK>
__device__ __forceinline__ void softmax_update(const float (&s_acc)[2][2][4], float (&o_acc)[2][16][4],
                                               float (&m_run)[4], float (&l_run)[4], const float* s_max, uint32_t sP,
                                               int mw, int nq, int g, int t) {
  float alpha[4];
  float m_use[4];
  for_each_row(mw, g, [&](int, int, int r, int row) {
    const float m_new = fmaxf(fmaxf(m_run[r], fmaxf(s_max[row], s_max[64 + row])),
                              fmaxf(s_max[128 + row], s_max[192 + row]));
    m_use[r] = (m_new == -INFINITY) ? 0.f : m_new;  // keeps (-inf) - (-inf) out
    alpha[r] = fast_exp2(m_run[r] - m_use[r]);       // m_run = -inf -> 0
    m_run[r] = m_new;
  });
  const bool rescale = !(alpha[0] == 1.f && alpha[1] == 1.f && alpha[2] == 1.f && alpha[3] == 1.f);
  if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 16; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o_acc[mt][nt][e] *= alpha[2 * mt + (e >> 1)];
  }
  for_each_row(mw, g, [&](int mt, int hf, int r, int row) {
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const float p0 = fast_exp2(s_acc[mt][nt][2 * hf] - m_use[r]);
      const float p1 = fast_exp2(s_acc[mt][nt][2 * hf + 1] - m_use[r]);
      sum += p0 + p1;
      const int chunk = nq * 2 + nt;  // 8 columns per chunk
      st_shared_u32(sP + row * SmemPlan<D_QK>::kPRowBytes + ((chunk ^ g) << 4) + 4 * t, pack_bf16x2(p0, p1));
    }
    l_run[r] = l_run[r] * alpha[r] + sum;
  });
}

// O += P V (k = the tile's 64 rows) from this lane's ldmatrix rows p_row (P), v_row (V: the tile's K buffer).
template <int D_QK>
__device__ __forceinline__ void pv(float (&o_acc)[2][16][4], uint32_t p_row, uint32_t v_row, int nq, int x7,
                                   int hi16) {
  using Plan = SmemPlan<D_QK>;
#pragma unroll 1
  for (int kk = 0; kk < kTileKv / 16; ++kk) {
    uint32_t a0[4], a1[4];
    ldmatrix_x4(a0, p_row + (((2 * kk + hi16) ^ x7) << 4));
    ldmatrix_x4(a1, p_row + 16 * Plan::kPRowBytes + (((2 * kk + hi16) ^ x7) << 4));
    const uint32_t vbase = v_row + kk * 16 * Plan::kRowBytes;
#pragma unroll
    for (int np = 0; np < 8; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vbase + (((nq * 16 + np * 2 + hi16) ^ x7) << 4));
      mma_bf16(o_acc[0][2 * np], a0, b[0], b[1]);
      mma_bf16(o_acc[0][2 * np + 1], a0, b[2], b[3]);
      mma_bf16(o_acc[1][2 * np], a1, b[0], b[1]);
      mma_bf16(o_acc[1][2 * np + 1], a1, b[2], b[3]);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// KV gather: a row's 32 e4m3 chunks (16 values each) are split over its 4 threads (chunks gsub + 4 i, i < 8: scale
// i / 2), in halves (i < 4, i >= 4) so that only 4 are held in registers at a time; the bf16 RoPE part by cp.async.
// Fp8Row: the thread's row between phases, as references (a struct of values changed the machine code).
struct Fp8Row {
  const uint8_t*& row;
  bool& valid;
  float (&scale)[4];
  uint4 (&raw)[4];
};
// Row `grow` of tile buffer `dst` is KV row `idx`: its address, RoPE part, scales and valid flag (s_valid_row).
template <int D_QK>
__device__ __forceinline__ void fp8_begin(Fp8Row& kv, const KernelParams& args, uint32_t dst, int* s_valid_row, int idx,
                                          int grow, int gsub) {
  const SparseAttentionParams& p = args.p;
  kv.valid = idx >= 0 && static_cast<int64_t>(idx) < p.num_kv;
  const uint32_t r = kv.valid ? static_cast<uint32_t>(idx) : 0u;
  const uint32_t page = args.page.div(r), slot = r - page * args.page.divisor;
  kv.row = static_cast<const uint8_t*>(p.kv) + static_cast<int64_t>(page) * p.kv_block_stride_bytes +
           static_cast<int64_t>(slot) * p.kv_slot_stride_bytes;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int rc = gsub + 4 * k;  // rope chunk 0..7 -> bf16 chunk 64 + rc
    cp_async_16(dst + swz(grow, 64 + rc, SmemPlan<D_QK>::kRowBytes), kv.row + kFp8RopeOffset + 16 * rc,
                kv.valid ? 16 : 0);
  }
  if (kv.valid) {
    const float4 s = __ldg(reinterpret_cast<const float4*>(kv.row + kFp8ScaleOffset));
    kv.scale[0] = s.x; kv.scale[1] = s.y; kv.scale[2] = s.z; kv.scale[3] = s.w;
  } else {
    kv.scale[0] = kv.scale[1] = kv.scale[2] = kv.scale[3] = 0.f;
  }
  if (gsub == 0) *s_valid_row = kv.valid ? 1 : 0;
}
// The raw chunks of half `half` (zeros where masked).
__device__ __forceinline__ void fp8_load_half(Fp8Row& kv, int gsub, int half) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = gsub + 4 * (4 * half + i);
    kv.raw[i] = kv.valid ? ld_global_nc_v4(kv.row + 16 * c) : make_uint4(0, 0, 0, 0);
  }
}
// Half `half`, dequantized, into row `grow` of tile buffer `dst`.
template <int D_QK>
__device__ __forceinline__ void fp8_store_half(const Fp8Row& kv, uint32_t dst, int grow, int gsub, int half) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int ii = 4 * half + i;
    const int c = gsub + 4 * ii;  // e4m3 chunk: values 16c .. 16c+15 -> bf16 chunks 2c, 2c+1
    const float s = kv.scale[ii >> 1];
    uint4 lo, hi;
    lo.x = dequant_e4m3x2(kv.raw[i].x, s);
    lo.y = dequant_e4m3x2(kv.raw[i].x >> 16, s);
    lo.z = dequant_e4m3x2(kv.raw[i].y, s);
    lo.w = dequant_e4m3x2(kv.raw[i].y >> 16, s);
    hi.x = dequant_e4m3x2(kv.raw[i].z, s);
    hi.y = dequant_e4m3x2(kv.raw[i].z >> 16, s);
    hi.z = dequant_e4m3x2(kv.raw[i].w, s);
    hi.w = dequant_e4m3x2(kv.raw[i].w >> 16, s);
    st_shared_v4(dst + swz(grow, 2 * c, SmemPlan<D_QK>::kRowBytes), lo);
    st_shared_v4(dst + swz(grow, 2 * c + 1, SmemPlan<D_QK>::kRowBytes), hi);
  }
}
// The whole row at once (the prologue's tile; the tile loop interleaves the steps with its GEMMs).
template <int D_QK>
__device__ __forceinline__ void fp8_gather_row(Fp8Row& kv, const KernelParams& args, uint32_t dst, int* s_valid_row,
                                               int idx, int grow, int gsub) {
  fp8_begin<D_QK>(kv, args, dst, s_valid_row, idx, grow, gsub);
  fp8_load_half(kv, gsub, 0);
  fp8_store_half<D_QK>(kv, dst, grow, gsub, 0);
  fp8_load_half(kv, gsub, 1);
  fp8_store_half<D_QK>(kv, dst, grow, gsub, 1);
}

// Q: this thread's chunks of row `grow` (64 heads x D_QK), rows past h_q zero-filled.
template <int D_QK>
__device__ __forceinline__ void load_q(const SparseAttentionParams& p, int64_t token, int head0, uint32_t sQ, int grow,
                                       int gsub) {
  using Plan = SmemPlan<D_QK>;
  const int head = head0 + grow;
  const bool ok = head < p.h_q;
  const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(p.q) +
                             p.token_offset(token, p.q_stride_token, p.q_stride_request) +
                             static_cast<int64_t>(ok ? head : 0) * p.q_stride_head;
#pragma unroll
  for (int i = 0; i < Plan::kChunks / 4; ++i) {
    const int c = gsub + 4 * i;
    cp_async_16(sQ + swz(grow, c, Plan::kRowBytes), src + c * 8, ok ? 16 : 0);
  }
}

// Split-KV: the combine kernel's partial row, O / l in bf16 (0 when empty; SparseAttentionParams's layout) and
// lse = m + ln l (-inf when empty), no sink (the combine adds it). Straight from registers: a warp's store covers 8
// rows x 32 bytes, whole sectors.
__device__ __forceinline__ void write_partial_row(const SparseAttentionParams& p, const float (&o_acc)[2][16][4],
                                              const float (&m_run)[4], const float* s_sum, int64_t accum_row,
                                              int head0, int mw, int nq, int g, int t) {
  constexpr float kLn2 = 0.6931471805599453f;
  for_each_row(mw, g, [&](int mt, int hf, int r, int row) {
    const int head = head0 + row;
    if (head >= p.h_q) return;
    const float m = m_run[r];
    const bool empty = (m == -INFINITY);
    const float l = row_sum(s_sum, row);
    const float inv = empty ? 0.f : 1.f / l;
    uint2* dst = reinterpret_cast<uint2*>(p.o_accum + (accum_row * p.h_q + head) * kDv + nq * 128 + 4 * t);
#pragma unroll
    for (int q = 0; q < 8; ++q)
      dst[4 * q] = make_uint2(pack_bf16x2(o_acc[mt][2 * q][2 * hf] * inv, o_acc[mt][2 * q][2 * hf + 1] * inv),
                              pack_bf16x2(o_acc[mt][2 * q + 1][2 * hf] * inv, o_acc[mt][2 * q + 1][2 * hf + 1] * inv));
    if (nq == 0 && t == 0) p.lse_accum[accum_row * p.h_q + head] = empty ? -INFINITY : logf(l) + m * kLn2;
  });
}

// The final output: O / (l + the sink's share) in bf16 (0 when empty), staged in K buffer 0 (sK; every warp is
// done with it) so that the stores to global are 16-byte coalesced; the lse and the max logits where asked.
template <int D_QK>
__device__ __forceinline__ void write_output(const SparseAttentionParams& p, const float (&o_acc)[2][16][4],
                                             const float (&m_run)[4], const float* s_sum, uint32_t sK, int64_t token,
                                             int head0, int tid, int mw, int nq, int g, int t) {
  constexpr float kLn2 = 0.6931471805599453f;
  constexpr float kLog2e = 1.4426950408889634f;
  const uint32_t s_stage = sK;  // 64 rows x 1024 B, swizzled
  for_each_row(mw, g, [&](int mt, int hf, int r, int row) {
    const int head = head0 + row;
    const float m = m_run[r];
    const bool empty = (m == -INFINITY);
    const float l = row_sum(s_sum, row);
    float denom = l;
    if (p.attn_sink != nullptr && head < p.h_q) denom += fast_exp2(__ldg(p.attn_sink + head) * kLog2e - m);
    const float inv = empty ? 0.f : 1.f / denom;
    if (nq == 0 && t == 0 && head < p.h_q) {
      if (p.lse != nullptr) {
        const int64_t lse_token = p.token_offset(token, p.lse_stride_token, p.lse_stride_request);
        p.lse[lse_token + head * p.lse_stride_head] = empty ? INFINITY : logf(l) + m * kLn2;
      }
      if (p.max_logits != nullptr)
        p.max_logits[token * p.max_logits_stride_token + head * p.max_logits_stride_head] =
            empty ? -INFINITY : m * kLn2;
    }
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
      const int chunk = nq * 16 + nt;
      const float v0 = empty ? 0.f : o_acc[mt][nt][2 * hf] * inv;
      const float v1 = empty ? 0.f : o_acc[mt][nt][2 * hf + 1] * inv;
      st_shared_u32(s_stage + row * (kDv * 2) + ((chunk ^ g) << 4) + 4 * t, pack_bf16x2(v0, v1));
    }
  });
  __syncthreads();

  __nv_bfloat16* out =
      static_cast<__nv_bfloat16*>(p.out) + p.token_offset(token, p.out_stride_token, p.out_stride_request);
#pragma unroll
  for (int i = 0; i < (kHeadsPerCta * kDv / 8) / kThreads; ++i) {
    const int lin = tid + kThreads * i;
    const int row = lin >> 6, c = lin & 63;
    const int head = head0 + row;
    if (head < p.h_q) {
      const uint4 v = ld_shared_v4(s_stage + swz(row, c, kDv * 2));
      *reinterpret_cast<uint4*>(out + static_cast<int64_t>(head) * p.out_stride_head + c * 8) = v;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Epilogue, its first step: this thread's row sums over its quad, one per quarter nq to s_sum ([4][64]).
__device__ __forceinline__ void publish_row_sums(float (&l_run)[4], float* s_sum, int mw, int nq, int g, int t) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
  if (t == 0) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) s_sum[nq * 64 + mw * 32 + mt * 16 + hf * 8 + g] = l_run[2 * mt + hf];
  }
}

// ---------------------------------------------------------------------------------------------------
// Work items (see the kernel): a split-KV part's requests and each request's piece, else the whole of a token.

// The requests [r_first, r_last] of part `outer / tokens_per_request` (r_last < r_first: none), its metadata (meta)
// and the token of each request it attends for (tok_in_req).
__device__ __forceinline__ void part_requests(const SparseAttentionParams& p, int64_t outer,
                                              const sched::PartMeta*& meta, int& r_first, int& r_last,
                                              int& tok_in_req) {
  meta = static_cast<const sched::PartMeta*>(p.sched) + outer / p.tokens_per_request;
  tok_in_req = static_cast<int>(outer % p.tokens_per_request);
  r_first = meta->begin_req < 0 ? 0 : meta->begin_req;
  r_last = meta->end_req < p.num_requests ? meta->end_req : p.num_requests - 1;  // empty part: r_last < r_first
}

// The work item's token, tiles [tile_begin, tile_end) (the token's own count still to clamp to) and partial row
// (accum_row >= 0, written where write_partial; -1: the final output).
template <bool SPLIT>
__device__ __forceinline__ SplitPiece work_item(const SparseAttentionParams& p, const sched::PartMeta* meta, int req,
                                                int nb, int tok_in_req, int64_t outer) {
  if constexpr (SPLIT) return split_piece(p, *meta, req, nb, tok_in_req);
  return SplitPiece{outer, 0, INT_MAX, -1, false};
}

// A work item's running state: O = 0, row maxima -inf, row sums 0.
__device__ __forceinline__ void init_state(float (&o_acc)[2][16][4], float (&m_run)[4], float (&l_run)[4]) {
  sm90::zero_fill(o_acc);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    m_run[r] = -INFINITY;
    l_run[r] = 0.f;
  }
}

// ---------------------------------------------------------------------------------------------------
// SPLIT: the split-KV decode variant (a separate instantiation, so the unsplit kernel keeps its registers).
template <int D_QK, bool SPLIT>
__global__ void __launch_bounds__(kThreads, 1) sparse_attention_sm90_kernel(const __grid_constant__ KernelParams args) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  using Plan = SmemPlan<D_QK>;
  constexpr int kRowBytes = Plan::kRowBytes;

  extern __shared__ __align__(128) uint8_t smem[];
  const SparseAttentionParams& p = args.p;

  const int tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const int mw = warp & 1;   // 32-row block
  const int nq = warp >> 1;  // quarter: S columns 16*nq.., O columns 128*nq..
  const int g = lane >> 2, t = lane & 3;
  const int x7 = lane & 7;
  const int hi16 = lane >> 4;         // ldmatrix: second 8-column half of A / trans B
  const int hi8 = (lane >> 3) & 1;    // ldmatrix: second k half of non-trans B

  // blockIdx.x = outer * groups + head group (the head groups of one token are adjacent).
  const int head0 = static_cast<int>(blockIdx.x % args.groups) * kHeadsPerCta;
  const int64_t outer = blockIdx.x / args.groups;

  const uint32_t sbase = smem_addr(smem);
  const uint32_t sQ = sbase + Plan::kOffQ;
  const uint32_t sK = sbase + Plan::kOffK;
  const uint32_t sP = sbase + Plan::kOffP;
  int* s_valid = reinterpret_cast<int*>(smem + Plan::kOffValid);
  float* s_max = reinterpret_cast<float*>(smem + Plan::kOffMax);
  float* s_sum = reinterpret_cast<float*>(smem + Plan::kOffSum);

  // ---- Work items. Without a schedule, outer is the token and the CTA attends over all its tiles.
  // With a split-KV schedule (decode), outer = part * tokens_per_request + token of the request: the CTA
  // walks the part's requests, each over the part's range of tiles, and writes either the final output
  // (a request the schedule did not split) or one f32 partial row for the combine kernel.
  constexpr bool split = SPLIT;
  const int nb = sched::blocks_of(p.topk);
  int r_first = 0, r_last = 0, tok_in_req = 0;
  // The part's metadata is read again where it is used (global, L1-resident): holding its fields in
  // registers across the tile loop would spill.
  const sched::PartMeta* meta = nullptr;
  if (split) part_requests(p, outer, meta, r_first, r_last, tok_in_req);
  for (int req = r_first; req <= r_last; ++req) {
    const auto [token, tile_begin, tile_end, accum_row, write_partial] =
        work_item<SPLIT>(p, meta, req, nb, tok_in_req, outer);

    // Effective number of slots for this token, and this item's tiles [j_begin, j_end).
    const int eff = effective_topk(p, token / p.tokens_per_length);
    const int n_tiles = (eff + kTileKv - 1) / kTileKv;
    const int j_begin = tile_begin;
    const int j_end = tile_end < n_tiles ? tile_end : n_tiles;

    // Gather role: 4 threads per row, thread `gsub` takes chunks gsub, gsub + 4, ...
    const int grow = tid >> 2, gsub = tid & 3;
    const int32_t* idx_row = p.indices + p.token_offset(token, p.indices_stride_token, p.indices_stride_request);
    auto load_index = [&](int tile) -> int {
      const int slot = tile * kTileKv + grow;
      return slot < eff ? __ldg(idx_row + slot) : -1;
    };

    load_q<D_QK>(p, token, head0, sQ, grow, gsub);

    // ---- KV gather of this thread's row of a tile into buffer `buf`: fp8_begin, fp8_load_half, fp8_store_half.
    const uint8_t* fp8_row = nullptr;
    bool fp8_valid = false;
    float fp8_scale[4] = {0.f, 0.f, 0.f, 0.f};
    uint4 fp8_raw[4];
    Fp8Row kv{fp8_row, fp8_valid, fp8_scale, fp8_raw};

    // ---- Prologue: tile 0 into buffer 0.
    int idx_next = -1;
    if (j_begin < j_end) {
      fp8_gather_row<D_QK>(kv, args, sK, s_valid + grow, load_index(j_begin), grow, gsub);
      idx_next = load_index(j_begin + 1);
    }
    cp_async_commit();

    // ---- Per-thread state. Rows of this thread: r = 2*mt + hf -> row 32*mw + 16*mt + 8*hf + g.
    float o_acc[2][16][4], m_run[4], l_run[4];
    init_state(o_acc, m_run, l_run);

    const uint32_t a_row = sQ + (mw * 32 + (lane & 15)) * kRowBytes;            // + mt * 16 rows
    const uint32_t b_row_off = (nq * 16 + (lane & 7) + (hi16 << 3)) * kRowBytes;  // in a K buffer
    const uint32_t p_row = sP + (mw * 32 + (lane & 15)) * Plan::kPRowBytes;
    const uint32_t v_row_off = (lane & 15) * kRowBytes;

    for (int j = j_begin; j < j_end; ++j) {
      const int buf = (j - j_begin) & 1;
      cp_async_wait_all();
      __syncthreads();  // (A) tile j visible; everyone is done with tile j-1 (its buffer, sP, s_max).

      const bool has_next = j + 1 < j_end;
      if (has_next) {
        fp8_begin<D_QK>(kv, args, sK + (buf ^ 1) * Plan::kKBytes, s_valid + (buf ^ 1) * kTileKv + grow, idx_next, grow,
                        gsub);
        fp8_load_half(kv, gsub, 0);
      }
      cp_async_commit();
      idx_next = load_index(j + 2);

      const uint32_t kbuf = sK + buf * Plan::kKBytes;
      float s_acc[2][2][4];
      qk<D_QK>(s_acc, a_row, kbuf + b_row_off, x7, hi16, hi8);

      if (has_next) {
        fp8_store_half<D_QK>(kv, sK + (buf ^ 1) * Plan::kKBytes, grow, gsub, 0);
        fp8_load_half(kv, gsub, 1);
      }
      {
        const int* vf = s_valid + buf * kTileKv + nq * 16 + 2 * t;
        const int2 v0 = *reinterpret_cast<const int2*>(vf);
        const int2 v1 = *reinterpret_cast<const int2*>(vf + 8);
        const bool col_ok[2][2] = {{v0.x != 0, v0.y != 0}, {v1.x != 0, v1.y != 0}};
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              s_acc[mt][nt][e] = col_ok[nt][e & 1] ? s_acc[mt][nt][e] * args.scale_log2 : -INFINITY;
      }
      row_max(s_acc, s_max, mw, nq, g, t);
      __syncthreads();  // (B)

      softmax_update<D_QK>(s_acc, o_acc, m_run, l_run, s_max, sP, mw, nq, g, t);
      __syncthreads();  // (C)

      pv<D_QK>(o_acc, p_row, kbuf + v_row_off, nq, x7, hi16);

      if (has_next) fp8_store_half<D_QK>(kv, sK + (buf ^ 1) * Plan::kKBytes, grow, gsub, 1);
    }

    // ---- Epilogue.
    cp_async_wait_all();
    publish_row_sums(l_run, s_sum, mw, nq, g, t);
    __syncthreads();  // s_sum complete; every warp is done reading the K buffers (O staging reuses buffer 0)

    // A split item writes its partial row (where it has one), the others the final output.
    if (accum_row >= 0) {
      if (write_partial) write_partial_row(p, o_acc, m_run, s_sum, accum_row, head0, mw, nq, g, t);
    } else {
      write_output<D_QK>(p, o_acc, m_run, s_sum, sK, token, head0, tid, mw, nq, g, t);
    }
    __syncthreads();  // the next work item reuses every shared buffer
  }  // work items
#else
  __trap();  // built for an architecture this kernel does not support; the launcher never gets here
#endif
}

// ---------------------------------------------------------------------------------------------------
// Host side.
template <int D_QK, bool SPLIT>
bool launch_variant(const SparseAttentionParams& p, cudaStream_t stream) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (!sm90a_kernel_ready<sparse_attention_sm90_kernel<D_QK, SPLIT>>(device, SmemPlan<D_QK>::kBytes))
    return false;
  if (p.num_tokens == 0) return true;
  KernelParams args;
  args.p = p;
  args.scale_log2 = p.sm_scale * 1.4426950408889634f;
  args.groups = (p.h_q + kHeadsPerCta - 1) / kHeadsPerCta;
  if (p.block_size < 1 || p.block_size > INT32_MAX) return false;
  args.page = FastDivmod(static_cast<uint32_t>(p.block_size));
  const int64_t outer = SPLIT ? static_cast<int64_t>(p.num_parts) * p.tokens_per_request : p.num_tokens;
  const int64_t blocks = outer * args.groups;
  if (blocks > INT_MAX) return false;
  sparse_attention_sm90_kernel<D_QK, SPLIT>
      <<<static_cast<unsigned>(blocks), kThreads, SmemPlan<D_QK>::kBytes, stream>>>(args);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace

bool launch_sparse_attention_mma_fp8(const SparseAttentionParams& p, cudaStream_t stream) {
  if (p.kv_format != KvFormat::fp8_v32 || p.d_qk != 576) return false;
  if (p.sched != nullptr) return launch_variant<576, true>(p, stream);
  return launch_variant<576, false>(p, stream);
}

}  // namespace flashcpp::mla::kernels
