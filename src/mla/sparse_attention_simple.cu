// The simple sparse attention kernels: correct for every shape the API accepts, on any SM >= 8.0 this
// build has code for. CUDA cores only (fp32 FMA), one CTA per (token, 16 heads), KV gathered 64 slots
// at a time into shared memory; and its split-KV decode variant (persistent over a schedule). The combine is in
// sparse_attention_combine.cu, the schedule kernel in decode_schedule.cu, the quantizers in kv_quantize.cu.
//
// NaN safety: a masked slot (index out of range, or past topk_length) is never read from global memory;
// its shared-memory row is zero-filled and its probability is exactly 0, so nothing from an unused KV
// row can reach the output.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "mla/decode_schedule.hpp"
#include "mla/fp8_v32.hpp"
#include "mla/fp8_v4.hpp"
#include "mla/simple_device.cuh"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::kernels {
namespace {

constexpr int kHeads = 16;    // heads per CTA
constexpr int kTile = 64;     // topk slots per tile
constexpr int kThreads = 256;
constexpr int kMaxDqk = 576;
constexpr int kDv = 512;
constexpr int kKvPitch = kMaxDqk + 8;  // bf16 per smem row: +16 B keeps 16-B loads of 8 rows conflict-free
static_assert(kThreads * 2 == kDv, "each thread owns two output columns");
static_assert(kThreads == kTile * (kHeads / 4), "score phase: one slot x four heads per thread");

struct Smem {
  uint16_t kv[kTile][kKvPitch];  // bf16 (KvFormat::f16: fp16) bits of the gathered (dequantized) K/V rows; 0: masked
  uint16_t q[kHeads][kMaxDqk];   // the CTA's query heads, in the same type
  float p[kTile][kHeads];        // scores, then probabilities
  float m[kHeads], l[kHeads], alpha[kHeads];
  int64_t row_off[kTile];        // byte offset of each slot's KV row; -1 when masked
  int64_t scale_off[kTile];      // fp8_v4: byte offset of the slot's scale record
  uint8_t row_pool[kTile];       // fp8_v4: 0 main pool, 1 extra pool
};

// The low / high 16-bit value of a word as float: fp16 (F16) or bf16.
template <bool F16>
__device__ __forceinline__ float lo16(uint32_t w) {
  if constexpr (F16) return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
  else return __uint_as_float(w << 16);
}
template <bool F16>
__device__ __forceinline__ float hi16(uint32_t w) {
  if constexpr (F16) return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
  else return __uint_as_float(w & 0xffff0000u);
}

// Byte offset of KV row `idx`, or -1 when the index is masked.
__device__ __forceinline__ int64_t kv_row_offset(const SparseAttentionParams& p, int32_t idx) {
  if (idx < 0 || static_cast<int64_t>(idx) >= p.num_kv) return -1;
  if (kv_is_16bit(p.kv_format)) return static_cast<int64_t>(idx) * p.kv_row_stride * 2;
  const int64_t block = idx / p.block_size, slot = idx % p.block_size;
  return block * p.kv_block_stride_bytes + slot * p.kv_slot_stride_bytes;
}

// fp8_v4: where slot `slot` of `token`'s list lives. Sets row_off (token record; -1 when masked), scale_off and
// pool. A slot is valid iff it is below its pool's length and its index lies inside its pool.
__device__ __forceinline__ void v4_slot(const SparseAttentionParams& p, int64_t token, int slot, int64_t& row_off,
                                        int64_t& scale_off, uint8_t& pool) {
  const bool extra = slot >= p.main_topk;
  const int local = extra ? slot - p.main_topk : slot;
  const int pool_topk = extra ? p.topk - p.main_topk : p.main_topk;
  const int32_t* lengths = extra ? p.extra_topk_length : p.topk_length;
  int len = pool_topk;
  if (lengths != nullptr) {
    const int v = lengths[token / p.tokens_per_length];
    len = v < 0 ? 0 : (v > pool_topk ? pool_topk : v);
  }
  pool = extra ? 1 : 0;
  row_off = -1;
  scale_off = 0;
  if (local >= len) return;
  const int64_t row = extra ? p.token_offset(token, p.extra_indices_stride_token, p.extra_indices_stride_request)
                            : p.token_offset(token, p.indices_stride_token, p.indices_stride_request);
  const int32_t idx = __ldg((extra ? p.extra_indices : p.indices) + row + local);
  const int64_t num_kv = extra ? p.extra_num_kv : p.num_kv;
  if (idx < 0 || static_cast<int64_t>(idx) >= num_kv) return;
  const int64_t bs = extra ? p.extra_block_size : p.block_size;
  const int64_t page = (idx / bs) * (extra ? p.extra_block_stride_bytes : p.kv_block_stride_bytes);
  row_off = page + fp8_v4::token_record_offset(idx % bs);
  scale_off = page + fp8_v4::scale_record_offset(bs, idx % bs);
}

// Gathers one tile's rows into s.kv (row_off must be ready).
__device__ void load_kv_tile(const SparseAttentionParams& p, Smem& s) {
  const auto* base = static_cast<const unsigned char*>(p.kv);
  if (p.kv_format == KvFormat::fp8_v4) {
    // 28 units of 16 fp8 values (a unit never straddles a 64-value tile) + 8 units of 8 bf16 RoPE values.
    constexpr int kFp8Units = fp8_v4::kNopeDims / 16, kUnits = kFp8Units + fp8_v4::kRopeDims / 8;
    for (int i = threadIdx.x; i < kTile * kUnits; i += kThreads) {
      const int row = i / kUnits, u = i % kUnits;
      const int64_t off = s.row_off[row];
      const auto* pool = static_cast<const unsigned char*>(s.row_pool[row] ? p.extra_kv : p.kv);
      if (u < kFp8Units) {
        uint4 out0 = make_uint4(0, 0, 0, 0), out1 = make_uint4(0, 0, 0, 0);
        if (off >= 0) {
          const uint4 raw = __ldg(reinterpret_cast<const uint4*>(pool + off) + u);
          dequant_fp8x16(raw, fp8_v4::pow2_of_e8m0(__ldg(pool + s.scale_off[row] + u / 4)), out0, out1);
        }
        *reinterpret_cast<uint4*>(&s.kv[row][u * 16]) = out0;
        *reinterpret_cast<uint4*>(&s.kv[row][u * 16 + 8]) = out1;
      } else {
        const int c = u - kFp8Units;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (off >= 0) v = __ldg(reinterpret_cast<const uint4*>(pool + off + fp8_v4::kRopeOffset) + c);
        *reinterpret_cast<uint4*>(&s.kv[row][fp8_v4::kNopeDims + c * 8]) = v;
      }
    }
    return;
  }
  if (kv_is_16bit(p.kv_format)) {
    const int chunks = p.d_qk / 8;  // 16-B chunks per row
    for (int i = threadIdx.x; i < kTile * chunks; i += kThreads) {
      const int row = i / chunks, c = i % chunks;
      const int64_t off = s.row_off[row];
      uint4 v = make_uint4(0, 0, 0, 0);
      if (off >= 0) v = __ldg(reinterpret_cast<const uint4*>(base + off) + c);
      *reinterpret_cast<uint4*>(&s.kv[row][c * 8]) = v;
    }
  } else {
    // 32 units of 16 fp8 values + 8 units of 8 bf16 RoPE values per row.
    for (int i = threadIdx.x; i < kTile * 40; i += kThreads) {
      const int row = i / 40, u = i % 40;
      const int64_t off = s.row_off[row];
      if (u < 32) {
        uint4 out0 = make_uint4(0, 0, 0, 0), out1 = make_uint4(0, 0, 0, 0);
        if (off >= 0) {
          const uint4 raw = __ldg(reinterpret_cast<const uint4*>(base + off) + u);
          dequant_fp8x16(raw, __ldg(reinterpret_cast<const float*>(base + off + fp8::kScaleOffset) + u / 8), out0, out1);
        }
        *reinterpret_cast<uint4*>(&s.kv[row][u * 16]) = out0;
        *reinterpret_cast<uint4*>(&s.kv[row][u * 16 + 8]) = out1;
      } else {
        const int c = u - 32;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (off >= 0) v = __ldg(reinterpret_cast<const uint4*>(base + off + fp8::kRopeOffset) + c);
        *reinterpret_cast<uint4*>(&s.kv[row][fp8::kNopeDims + c * 8]) = v;
      }
    }
  }
}

// Attention of one token's heads [head0, head0 + 16) over slots [slot_begin, slot_end) of its topk; q and the rows
// in fp16 (F16: KvFormat::f16) or bf16.
// On return acc holds the unnormalized output columns (2 tid, 2 tid + 1) and s.m / s.l the running max
// (scaled logits, natural units) and sum for each head (-inf / 0 when no slot was valid).
template <bool F16>
__device__ void attend(const SparseAttentionParams& p, Smem& s, int64_t token, int head0, int slot_begin,
                       int slot_end, float (&acc)[kHeads][2]) {
  const int tid = threadIdx.x;
  __syncthreads();  // the previous user of s (an epilogue) is done
  {
    const int chunks = p.d_qk / 8;
    const auto* qbase = static_cast<const uint16_t*>(p.q) + p.token_offset(token, p.q_stride_token, p.q_stride_request);
    for (int i = tid; i < kHeads * chunks; i += kThreads) {
      const int h = i / chunks, c = i % chunks;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (head0 + h < p.h_q)
        v = __ldg(reinterpret_cast<const uint4*>(qbase + static_cast<int64_t>(head0 + h) * p.q_stride_head) + c);
      *reinterpret_cast<uint4*>(&s.q[h][c * 8]) = v;
    }
  }
  if (tid < kHeads) {
    s.m[tid] = -INFINITY;
    s.l[tid] = 0.f;
  }
#pragma unroll
  for (int h = 0; h < kHeads; ++h) acc[h][0] = acc[h][1] = 0.f;

  // fp8_v4 masks by each pool's length slot by slot (the valid slots are not one prefix of the list).
  const bool v4 = p.kv_format == KvFormat::fp8_v4;
  const int len = v4 ? p.topk : effective_topk(p, token / p.tokens_per_length);
  const int end = slot_end < len ? slot_end : len;
  const int32_t* idx_row = p.indices + p.token_offset(token, p.indices_stride_token, p.indices_stride_request);
  const float scale = p.sm_scale;

  for (int tile = slot_begin; tile < end; tile += kTile) {
    __syncthreads();  // previous tile fully consumed (and q / m / l initialised)
    if (tid < kTile) {
      const int slot = tile + tid;
      if (v4) {
        s.row_off[tid] = -1;
        s.row_pool[tid] = 0;
        if (slot < end) v4_slot(p, token, slot, s.row_off[tid], s.scale_off[tid], s.row_pool[tid]);
      } else {
        s.row_off[tid] = slot < end ? kv_row_offset(p, __ldg(idx_row + slot)) : -1;
      }
    }
    __syncthreads();
    load_kv_tile(p, s);
    __syncthreads();

    // Scores: thread = (slot j, heads 4 hq .. 4 hq + 3).
    {
      const int j = tid & (kTile - 1), hq = tid >> 6;
      float dot[4] = {0.f, 0.f, 0.f, 0.f};
      for (int c = 0; c < p.d_qk; c += 8) {
        const uint4 k = *reinterpret_cast<const uint4*>(&s.kv[j][c]);
        const float kf[8] = {lo16<F16>(k.x), hi16<F16>(k.x), lo16<F16>(k.y), hi16<F16>(k.y),
                             lo16<F16>(k.z), hi16<F16>(k.z), lo16<F16>(k.w), hi16<F16>(k.w)};
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          const uint4 q = *reinterpret_cast<const uint4*>(&s.q[hq * 4 + h][c]);
          float d = dot[h];
          d = fmaf(lo16<F16>(q.x), kf[0], d);
          d = fmaf(hi16<F16>(q.x), kf[1], d);
          d = fmaf(lo16<F16>(q.y), kf[2], d);
          d = fmaf(hi16<F16>(q.y), kf[3], d);
          d = fmaf(lo16<F16>(q.z), kf[4], d);
          d = fmaf(hi16<F16>(q.z), kf[5], d);
          d = fmaf(lo16<F16>(q.w), kf[6], d);
          d = fmaf(hi16<F16>(q.w), kf[7], d);
          dot[h] = d;
        }
      }
      const bool valid = s.row_off[j] >= 0;
#pragma unroll
      for (int h = 0; h < 4; ++h) s.p[j][hq * 4 + h] = valid ? dot[h] * scale : -INFINITY;
    }
    __syncthreads();

    // Online softmax: warp w owns heads 2w and 2w + 1.
    {
      const int warp = tid >> 5, lane = tid & 31;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int h = warp * 2 + hh;
        const float s0 = s.p[lane][h], s1 = s.p[lane + 32][h];
        const float tile_max = warp_max(fmaxf(s0, s1));
        const float m_old = s.m[h];
        const float m_new = fmaxf(m_old, tile_max);
        float alpha = 1.f, p0 = 0.f, p1 = 0.f;
        if (m_new != -INFINITY) {
          alpha = expf(m_old - m_new);  // 0 when m_old is -inf
          p0 = s0 == -INFINITY ? 0.f : expf(s0 - m_new);
          p1 = s1 == -INFINITY ? 0.f : expf(s1 - m_new);
        }
        const float sum = warp_sum(p0 + p1);
        s.p[lane][h] = p0;
        s.p[lane + 32][h] = p1;
        __syncwarp();
        if (lane == 0) {
          s.l[h] = s.l[h] * alpha + sum;
          s.m[h] = m_new;
          s.alpha[h] = alpha;
        }
      }
    }
    __syncthreads();

    // O = alpha * O + P V, columns 2 tid and 2 tid + 1.
    {
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        acc[h][0] *= s.alpha[h];
        acc[h][1] *= s.alpha[h];
      }
      const int n = end - tile < kTile ? end - tile : kTile;
      for (int j = 0; j < n; ++j) {
        const uint32_t v = *reinterpret_cast<const uint32_t*>(&s.kv[j][2 * tid]);
        const float v0 = lo16<F16>(v), v1 = hi16<F16>(v);
        const float4* prow = reinterpret_cast<const float4*>(&s.p[j][0]);
#pragma unroll
        for (int g = 0; g < kHeads / 4; ++g) {
          const float4 pv = prow[g];
          acc[g * 4 + 0][0] = fmaf(pv.x, v0, acc[g * 4 + 0][0]);
          acc[g * 4 + 0][1] = fmaf(pv.x, v1, acc[g * 4 + 0][1]);
          acc[g * 4 + 1][0] = fmaf(pv.y, v0, acc[g * 4 + 1][0]);
          acc[g * 4 + 1][1] = fmaf(pv.y, v1, acc[g * 4 + 1][1]);
          acc[g * 4 + 2][0] = fmaf(pv.z, v0, acc[g * 4 + 2][0]);
          acc[g * 4 + 2][1] = fmaf(pv.z, v1, acc[g * 4 + 2][1]);
          acc[g * 4 + 3][0] = fmaf(pv.w, v0, acc[g * 4 + 3][0]);
          acc[g * 4 + 3][1] = fmaf(pv.w, v1, acc[g * 4 + 3][1]);
        }
      }
    }
  }
  __syncthreads();  // s.m / s.l final for the epilogue
}

// Epilogue of a work item. Final (PARTIAL false), at token `row`: out = acc / (l + exp(sink - m)),
// lse = m + ln l, max_logits = m; an empty row gives out 0, lse +inf, max_logits -inf. PARTIAL, at
// accumulator row `row`: o_accum = acc / l (0 if empty), lse_accum = m + ln l (-inf if empty), no sink
// (the combine kernel folds it in).
template <bool PARTIAL, bool F16>
__device__ void store_rows(const SparseAttentionParams& p, const Smem& s, int64_t row, int head0,
                           const float (&acc)[kHeads][2]) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    const int head = head0 + h;
    if (head >= p.h_q) break;
    const float l = s.l[h], m = s.m[h];
    float denom = l;
    if (!PARTIAL && p.attn_sink != nullptr) denom += expf(p.attn_sink[head] - m);  // +inf sink -> inv 0
    const float inv = l > 0.f ? 1.f / denom : 0.f;
    if constexpr (PARTIAL) {
      // Columns 2 tid, +1 at their place in the partial row's layout (16c + 2t + 8s -> 16c + 4t + 2s).
      const int c = 2 * tid, pos = (c & ~15) + 4 * ((c & 7) >> 1) + ((c & 8) >> 2);
      store_bf16_pair(reinterpret_cast<__nv_bfloat16*>(p.o_accum + (row * p.h_q + head) * kDv + pos),
                      acc[h][0] * inv, acc[h][1] * inv);
    } else {
      auto* out = static_cast<uint16_t*>(p.out) + p.token_offset(row, p.out_stride_token, p.out_stride_request) +
                  head * p.out_stride_head;
      store_16bit_pair<F16>(out + 2 * tid, acc[h][0] * inv, acc[h][1] * inv);
    }
  }
  if (tid < kHeads && head0 + tid < p.h_q) {
    const int head = head0 + tid;
    const float l = s.l[tid], m = s.m[tid];
    const bool empty = !(l > 0.f);
    if constexpr (PARTIAL) {
      p.lse_accum[row * p.h_q + head] = empty ? -INFINITY : m + logf(l);
    } else {
      p.lse[lse_offset(p, row, head)] = empty ? INFINITY : m + logf(l);
      if (p.max_logits != nullptr)
        p.max_logits[row * p.max_logits_stride_token + head * p.max_logits_stride_head] = empty ? -INFINITY : m;
    }
  }
}

template <bool F16>
__global__ void __launch_bounds__(kThreads) sparse_attention_simple_kernel(const SparseAttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int64_t token = blockIdx.x;
  const int head0 = static_cast<int>(blockIdx.y) * kHeads;
  float acc[kHeads][2];
  attend<F16>(p, s, token, head0, 0, p.topk, acc);
  store_rows<false, F16>(p, s, token, head0, acc);
}

// Split-KV decode: grid (num_parts, tokens_per_request, head groups).
template <bool F16>
__global__ void __launch_bounds__(kThreads) sparse_attention_split_kernel(const SparseAttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const auto* metas = static_cast<const sched::PartMeta*>(p.sched);
  const sched::PartMeta meta = metas[blockIdx.x];
  const int tok_in_req = static_cast<int>(blockIdx.y);
  const int head0 = static_cast<int>(blockIdx.z) * kHeads;
  const int nb = sched::blocks_of(p.topk);
  const int first = meta.begin_req < 0 ? 0 : meta.begin_req;
  const int last = meta.end_req < p.num_requests ? meta.end_req : p.num_requests - 1;
  float acc[kHeads][2];
  for (int r = first; r <= last; ++r) {
    const SplitPiece piece = split_piece(p, meta, r, nb, tok_in_req);
    const int slot_end = piece.tile_end * sched::kBlockSlots < p.topk ? piece.tile_end * sched::kBlockSlots : p.topk;
    attend<F16>(p, s, piece.token, head0, piece.tile_begin * sched::kBlockSlots, slot_end, acc);
    if (piece.accum_row < 0) {
      store_rows<false, F16>(p, s, piece.token, head0, acc);
    } else if (piece.write_partial) {
      store_rows<true, F16>(p, s, piece.accum_row, head0, acc);
    }
  }
}

// Opts the kernels into > 48 KB of dynamic shared memory, once per device.
void prepare_smem() {
  static thread_local int prepared_for = -1;  // cheap fast path; the attribute is per device
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return;
  if (prepared_for == dev) return;
  const int bytes = static_cast<int>(sizeof(Smem));
  for (const void* kernel : {reinterpret_cast<const void*>(sparse_attention_simple_kernel<false>),
                             reinterpret_cast<const void*>(sparse_attention_simple_kernel<true>),
                             reinterpret_cast<const void*>(sparse_attention_split_kernel<false>),
                             reinterpret_cast<const void*>(sparse_attention_split_kernel<true>)})
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  prepared_for = dev;
}

}  // namespace

int sparse_attention_simple_smem_bytes() { return static_cast<int>(sizeof(Smem)); }

bool sparse_attention_simple_available() {
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, sparse_attention_simple_kernel<false>);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

void launch_sparse_attention_simple(const SparseAttentionParams& p, cudaStream_t stream) {
  prepare_smem();
  const unsigned head_groups = static_cast<unsigned>((p.h_q + kHeads - 1) / kHeads);
  const bool f16 = p.kv_format == KvFormat::f16;
  if (p.sched == nullptr) {
    dim3 grid(static_cast<unsigned>(p.num_tokens), head_groups);
    auto* kernel = f16 ? sparse_attention_simple_kernel<true> : sparse_attention_simple_kernel<false>;
    kernel<<<grid, kThreads, sizeof(Smem), stream>>>(p);
  } else {
    dim3 grid(static_cast<unsigned>(p.num_parts), static_cast<unsigned>(p.tokens_per_request), head_groups);
    auto* kernel = f16 ? sparse_attention_split_kernel<true> : sparse_attention_split_kernel<false>;
    kernel<<<grid, kThreads, sizeof(Smem), stream>>>(p);
  }
}

}  // namespace flashcpp::mla::kernels
