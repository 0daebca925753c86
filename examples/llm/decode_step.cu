#include "decode_step.hpp"

#include <cmath>
#include <mutex>

#include "decode_linear_device.cuh"

namespace flashcpp::llm {
namespace {

using namespace device;

constexpr int kWarps = 12;  // 1584 warps on 132 SMs: a gate/up row pair each for SmolLM2's 1536
constexpr int kAhead = 2;   // weight row pairs a warp has in flight
constexpr int kThreads = kWarps * 32;
constexpr int kTokens = static_cast<int>(kDecodeStepMaxTokens);
constexpr int kD = static_cast<int>(kDecodeStepHeadDim);
constexpr int kMaxSplits = static_cast<int>(kDecodeStepMaxSplits);
constexpr int kHiddenChunks = static_cast<int>(kDecodeStepMaxHidden / 256);
constexpr int kFfnChunks = static_cast<int>(kDecodeStepMaxFfn / 256);
constexpr int kRowStride = static_cast<int>(kDecodeStepMaxFfn / 8);  // a weight row's slot, in uint4
constexpr int kSplitStride = kD + 4;  // a split's running max, sum, 2 floats of padding, then its kD outputs
constexpr int kWeightSlotVectors = kWarps * kAhead * 2 * kRowStride;
constexpr int kDynamicSmem = kWeightSlotVectors * 16 + kTokens * static_cast<int>(kDecodeStepMaxFfn) * 4;
static_assert(kDynamicSmem + 8 * 1024 <= 227 * 1024, "weight slots and x' must fit an SM's shared memory");
static_assert(kDecodeStepMaxHidden % 256 == 0 && kDecodeStepMaxFfn % 256 == 0 && kD == 64);
static_assert(kTokens <= kMaxTokens && kDecodeStepMaxFfn <= kDecodeLinearMaxK);
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMergeGroup = 8;
constexpr unsigned kTraceSlots = 6;
// The barrier is polled from the block's last warp: items go to warp 0 first, and a warp's poll (an acquire, which
// invalidates L1) waits for its own loads in flight, such as attention's keys loaded before the barrier.
constexpr int kPollerThread = kThreads - 32;

// Experiment builds only (-DFLASHCPP_DECODE_STEP_PROBE, decode_step_bench): parts of each phase switched off to see
// what a phase's time is made of (outputs wrong by design), and alternatives switched on. Bits: 1 no x staging, 2 no
// weight copies, 4 no dot products or epilogues, 8 no attention work; 16 the barrier polls with relaxed loads and
// fences once it sees the count (acquire), 32 it arrives with a fence and a relaxed add (cooperative groups' form),
// 64 no L2 prefetch of later phases' weights.
// decode_step_set_grid overrides the block count (0: one per SM); decode_step_set_trace, when given a buffer of
// kTraceSlots (6) x phases x blocks u64, has each block's thread 0 write %globaltimer where a phase starts (its
// barrier wait returns), at the phase's marks (below; thread 0's warp) and where the block arrives at its end:
// [phase][start, marks 1-4, end][block]. Marks in a linear phase: 1 the first weights landed, 2 x staged, 3 the first
// row pair's dot products done, 4 its epilogue stored; in attention: 1 q read, 2 the first keys scored, 3 the
// warp's last keys accumulated, 4 its split stored.
#ifdef FLASHCPP_DECODE_STEP_PROBE
__device__ int g_probe = 0;
__device__ unsigned long long* g_trace = nullptr;
__device__ inline bool probe_bit(int bit) { return (g_probe & bit) != 0; }
__device__ inline void trace_event(unsigned event) {
  if (g_trace != nullptr && threadIdx.x == 0) {
    unsigned long long now = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    g_trace[event * gridDim.x + blockIdx.x] = now;
  }
}
int g_grid_override = 0;
#else
__device__ constexpr bool probe_bit(int) { return false; }
__device__ inline void trace_event(unsigned) {}
#endif

// A grid-wide barrier on one counter: a block arrives once per phase (after all its threads' writes, release at GPU
// scope) and waits until every block has arrived as often (acquire). Reads of what other blocks wrote go through L2.
struct GridBarrier {
  unsigned* count;
  unsigned arrived = 0;
  __device__ void arrive() {
    __syncthreads();
    trace_event(arrived * kTraceSlots + kTraceSlots - 1);
    if (threadIdx.x == 0) {
      if (probe_bit(32)) {
        __threadfence();
        atomicAdd(count, 1u);
      } else {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
      }
    }
    ++arrived;
  }
  __device__ void wait() const {
    if (threadIdx.x == kPollerThread) {
      const unsigned target = arrived * gridDim.x;
      unsigned seen = 0;
      if (probe_bit(16)) {
        do {
          asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
        } while (seen < target);
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
      } else {
        do {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
        } while (seen < target);
      }
    }
    __syncthreads();
    trace_event(arrived * kTraceSlots);
  }
  __device__ void mark(unsigned slot) const { trace_event(arrived * kTraceSlots + slot); }
  // After the block's last wait: the block whose arrival completes this count knows every block is past its last
  // wait, and zeroes the counter for the next launch.
  __device__ void retire() const {
    if (threadIdx.x == 0 && atomicAdd(count, 1u) == (arrived + 1) * gridDim.x - 1) atomicExch(count, 0u);
  }
};

// What every phase needs to know of each token, read from the index arrays once at the kernel's start into shared
// memory (global reads after a barrier would miss in L1, which each barrier's acquire invalidates).
struct TokenTable {
  int32_t pos[kTokens];        // position of the token in its sequence: it attends keys 0..pos
  int32_t page_base[kTokens];  // where its sequence's page ids start in kv_indices
  int64_t slot[kTokens];       // the cache slot its key and value go to: page * page_size + pos % page_size
  int32_t written_from[kTokens];  // the least position this step writes in its sequence (the tokens with its page
                                  // list): older keys are inputs of the step, loaded before attention's barrier
};

__device__ inline int64_t global_warps() { return static_cast<int64_t>(gridDim.x) * kWarps; }
// A phase's work items (row pairs, attention splits) go round the blocks first: item i to block i % blocks, so a
// phase of fewer items than warps puts one or two on each SM instead of twelve on a few (whose weight copies,
// shared-memory reads and issue slots would then be the phase's critical path).
__device__ inline int64_t this_warp() { return static_cast<int64_t>(threadIdx.x / 32) * gridDim.x + blockIdx.x; }
__device__ inline bool block_has_item(int64_t items) { return blockIdx.x < items; }

__device__ inline int splits_a_head(const DecodeStepParams& p) {
  return static_cast<int>(decode_step_splits_a_head(global_warps(), p.tokens, p.heads));
}
__device__ inline int64_t split_keys(int64_t len, int splits) { return decode_step_split_keys(len, splits); }

__device__ inline void cp_async16(void* smem, const void* gmem) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending> __device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// Asks the L2 for the rows a warp will fetch first in a later linear phase (its first row pair of w [rows, k]; with
// split_halves the pair is row i and row i + rows / 2, as silu_and_mul pairs them), so that phase's copies find them
// there: issued at least one phase ahead, the DRAM latency of a phase's weights leaves the chain of phases. Lane 0 of
// each warp; a hint with no effect on results.
__device__ inline void prefetch_rows_l2(const uint16_t* w, int64_t rows, int64_t k, bool split_halves) {
  const int64_t pair = this_warp();
  if (threadIdx.x % 32 != 0 || pair >= rows / 2 || probe_bit(64)) return;
  const auto bytes = static_cast<unsigned>(k * 2);
  const uint16_t* r0 = w + (split_halves ? pair : 2 * pair) * k;
  const uint16_t* r1 = w + (split_halves ? pair + rows / 2 : 2 * pair + 1) * k;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r0), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r1), "r"(bytes) : "memory");
}

// Copies row pair `pair` of lp.w (if it exists) into a warp's slot, as SharedRowPair reads it; one commit group.
template <DecodeEpilogue E, int kChunks>
__device__ void fetch_row_pair(const DecodeLinearParams& lp, int64_t pair, uint4* slot, int lane) {
  if (pair < lp.rows / 2 && !probe_bit(2)) {
    int64_t r0 = 0, r1 = 0;
    pair_rows<E>(lp.rows, pair, r0, r1);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t e = (static_cast<int64_t>(c) * 32 + lane) * 8;
      if (e < lp.k) {
        cp_async16(slot + c * 32 + lane, lp.w + r0 * lp.k + e);
        cp_async16(slot + kRowStride + c * 32 + lane, lp.w + r1 * lp.k + e);
      }
    }
  }
  cp_async_commit();
}

// A linear layer as decode_linear_kernel computes it, its pairs spread over the grid's warps (a warp's pairs are
// global_warps() apart). Each warp's weight rows stream into its kAhead shared-memory slots, the first kAhead pairs
// before the barrier (weights do not depend on the step), each later one as soon as its slot is free; the norm's
// weights, if any, into norm_smem with the first (not through L1: every barrier's acquire invalidates it). `stage`
// fills xs given the norm's weights (every thread calls it); blocks without a pair skip it.
template <class T, DecodeEpilogue E, int kChunks, class Stage>
__device__ void linear_phase(const DecodeLinearParams& lp, GridBarrier& bar, float* xs, uint4* weight_slots,
                             uint4* norm_smem, Stage stage) {
  const int lane = threadIdx.x % 32;
  const int64_t pairs = lp.rows / 2, stride = global_warps(), first = this_warp();
  uint4* slots = weight_slots + (threadIdx.x / 32) * kAhead * 2 * kRowStride;
  if (lp.norm_w != nullptr)
    for (int64_t v = threadIdx.x; v * 8 < lp.k; v += blockDim.x) cp_async16(norm_smem + v, lp.norm_w + v * 8);
#pragma unroll
  for (int a = 0; a < kAhead; ++a)
    fetch_row_pair<E, kChunks>(lp, first + a * stride, slots + a * 2 * kRowStride, lane);
  bar.wait();
  if (block_has_item(pairs)) {
    const int t_n = static_cast<int>(lp.tokens);
    // The residual values the first pair's epilogue adds to, read now so that their round trip overlaps the staging.
    float old0 = 0.f, old1 = 0.f;
    if constexpr (E == DecodeEpilogue::add_residual) {
      if (first < pairs && lane < t_n) {
        int64_t r0 = 0, r1 = 0;
        pair_rows<E>(lp.rows, first, r0, r1);
        old0 = at<T>(lp.residual, lane * lp.rows + r0);
        old1 = at<T>(lp.residual, lane * lp.rows + r1);
      }
    }
    cp_async_wait<kAhead - 1>();  // the first group (the norm's weights, the first pair) has landed
    bar.mark(1);
    if (!probe_bit(1)) stage(lp.norm_w != nullptr ? reinterpret_cast<const uint16_t*>(norm_smem) : nullptr);
    bar.mark(2);
    int64_t i = 0;
    for (int64_t pair = probe_bit(4) ? pairs : first; pair < pairs; pair += stride, ++i) {
      cp_async_wait<kAhead - 1>();  // this pair's group (the oldest) has landed
      uint4* slot = slots + (i % kAhead) * 2 * kRowStride;
      int64_t r0 = 0, r1 = 0;
      pair_rows<E>(lp.rows, pair, r0, r1);
      float y0, y1;
      dot_row_pair<T, kChunks, kTokens>(SharedRowPair{slot, kRowStride, lane}, xs, lp.k, t_n, lane, y0, y1);
      if (i == 0) bar.mark(3);
      if (lane < t_n) {
        if constexpr (E == DecodeEpilogue::add_residual) {
          if (i == 0) {
            add_residual_rows<T>(lp, lane, r0, r1, y0, y1, old0, old1);
          } else {
            apply_epilogue<T, E>(lp, lane, r0, r1, y0, y1);
          }
        } else {
          apply_epilogue<T, E>(lp, lane, r0, r1, y0, y1);
        }
      }
      if (i == 0) bar.mark(4);
      fetch_row_pair<E, kChunks>(lp, pair + kAhead * stride, slot, lane);
    }
  }
  cp_async_wait<0>();  // nothing left in flight into the slots the next phase fills
  bar.arrive();
}

// Attention: work items (token, head, split), one a warp. A lane loads one key's K and V rows (together: one round
// trip), scores the key against q in shared memory and puts the V row in the warp's V tile (the warp's weight slots,
// free between linear phases; 16-byte chunks XOR-swizzled by key so neither the stores nor the reads conflict); the
// warp keeps the running max and sum (log2 domain), and lane l accumulates output dims 2l, 2l + 1 from the tile.
template <class T>
__device__ void attention_phase(const DecodeStepParams& p, const DecodeStepLayer& layer, const TokenTable& tokens,
                                GridBarrier& bar, float* q_smem, uint4* weight_slots) {
  const int lane = threadIdx.x % 32;
  float* q = q_smem + (threadIdx.x / 32) * kD;
  uint4* v_tile = weight_slots + (threadIdx.x / 32) * kAhead * 2 * kRowStride;  // [32 keys][kD / 8 chunks]
  static_assert(32 * kD / 8 <= kAhead * 2 * kRowStride, "a warp's V tile fits its weight slots");
  const int64_t heads = p.heads, group = p.heads / p.kv_heads, qkv_rows = (p.heads + 2 * p.kv_heads) * kD;
  const int splits = splits_a_head(p);
  const int64_t items = probe_bit(8) ? 0 : p.tokens * heads * splits;
  const float scale = kLog2e / sqrtf(static_cast<float>(kD));
  // Where item `item`'s keys are, and the cache offset of `key`'s K and V rows.
  auto range_of = [&](int64_t item, int64_t& t, int64_t& h, int64_t& begin, int64_t& end) {
    // 32-bit division (items < 2^31: tokens x heads x splits): 64-bit division is a long subroutine.
    const int i = static_cast<int>(item), hs = static_cast<int>(heads) * splits;
    t = i / hs;
    h = i % hs / splits;
    const int64_t s = i % splits, len = tokens.pos[t] + 1, per = split_keys(len, splits);
    begin = s * per;
    end = begin + per < len ? begin + per : len;
  };
  auto row_of = [&](int64_t t, int64_t h, int64_t key) {
    const int32_t page = __ldg(p.kv_indices + tokens.page_base[t] + key / p.page_size);
    return ((static_cast<int64_t>(page) * p.page_size + key % p.page_size) * p.kv_heads + h / group) * kD;
  };
  uint4 kr[kD / 8], vr[kD / 8];
  auto load_rows = [&](int64_t row) {
#pragma unroll
    for (int c = 0; c < kD / 8; ++c) {
      kr[c] = __ldcg(reinterpret_cast<const uint4*>(layer.k_cache + row) + c);
      vr[c] = __ldcg(reinterpret_cast<const uint4*>(layer.v_cache + row) + c);
    }
  };
  // The page ids of the warp's first item's first keys, and the K and V rows of those the step does not write
  // (every key before the step's positions in that sequence), are inputs of the step: loaded before the barrier,
  // their dependent round trips overlap the qkv phase instead of following it.
  bool first_keys = true, preloaded = false;
  int64_t first_row = 0;
  if (this_warp() < items) {
    int64_t t = 0, h = 0, begin = 0, end = 0;
    range_of(this_warp(), t, h, begin, end);
    const int64_t key = begin + lane;
    if (key < end) {
      first_row = row_of(t, h, key);
      preloaded = key < tokens.written_from[t];
      if (preloaded) load_rows(first_row);
    }
  }
  bar.wait();
  for (int64_t item = this_warp(); item < items; item += global_warps()) {
    int64_t t = 0, h = 0, begin = 0, end = 0;
    range_of(item, t, h, begin, end);
    const bool first_item = first_keys;  // kr, vr or first_row hold this item's first keys
    first_keys = false;
    if (begin >= end) continue;
    // A key this step wrote (its rows are visible after the barrier) is loaded with q, the two round trips together.
    if (first_item && !preloaded && begin + lane < end) load_rows(first_row);
    for (int i = lane; i < kD; i += 32) q[i] = at<T>(p.qkv, t * qkv_rows + h * kD + i) * scale;
    __syncwarp();
    bar.mark(1);
    float m = -INFINITY, l = 0.f, o0 = 0.f, o1 = 0.f;
    for (int64_t key0 = begin; key0 < end; key0 += 32) {
      const int64_t key = key0 + lane;
      const bool valid = key < end;
      float score = -INFINITY;
      if (valid) {
        if (!(key0 == begin && first_item)) load_rows(row_of(t, h, key));
        float acc = 0.f;
#pragma unroll
        for (int c = 0; c < kD / 8; ++c) {
          float f[8];
          unpack8<T>(kr[c], f);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc = fmaf(f[j], q[c * 8 + j], acc);
          v_tile[lane * (kD / 8) + (c ^ (lane & 7))] = vr[c];
        }
        score = acc;
      } else {
#pragma unroll
        for (int c = 0; c < kD / 8; ++c) v_tile[lane * (kD / 8) + c] = make_uint4(0u, 0u, 0u, 0u);  // weight 0
      }
      __syncwarp();
      float top = score;
#pragma unroll
      for (int o = 16; o > 0; o /= 2) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));
      if (key0 == begin) bar.mark(2);
      const float m_new = fmaxf(m, top), rescale = exp2f(m - m_new);
      const float prob = valid ? exp2f(score - m_new) : 0.f;
      float sum = prob;
#pragma unroll
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l = l * rescale + sum;
      o0 *= rescale;
      o1 *= rescale;
      m = m_new;
      const int chunk = lane / 4, word = lane % 4;  // dims 2 lane, 2 lane + 1: 32-bit word `word` of chunk `chunk`
#pragma unroll
      for (int j = 0; j < 32; ++j) {  // keys past the end have weight 0 and zero rows: the sum is unchanged
        const float pj = __shfl_sync(0xffffffffu, prob, j);
        const unsigned v2 = reinterpret_cast<const unsigned*>(&v_tile[j * (kD / 8) + (chunk ^ (j & 7))])[word];
        const T* v = reinterpret_cast<const T*>(&v2);
        o0 = fmaf(pj, to_f32(v[0]), o0);
        o1 = fmaf(pj, to_f32(v[1]), o1);
      }
      __syncwarp();  // the tile is read before the next keys overwrite it
    }
    bar.mark(3);
    float* out = p.attn_split + ((t * heads + h) * kMaxSplits + item % splits) * kSplitStride;
    if (lane == 0) {
      out[0] = m;
      out[1] = l;
    }
    reinterpret_cast<float2*>(out + 4)[lane] = make_float2(o0, o1);
    __syncwarp();
    bar.mark(4);
  }
  bar.arrive();
}

// The o projection's x: each (token, head)'s splits merged in split order, rounded to the 16-bit type. A warp merges
// a (token, head): lane s reads split s's running max and sum, and every lane its two output dims of kMergeGroup
// splits at a time, all issued together (one L2 round trip a group).
template <class T> __device__ void stage_attention(const DecodeStepParams& p, const TokenTable& tokens, float* xs) {
  static_assert(kMaxSplits <= 32 && kD == 64, "a lane a split's max and sum; two output dims a lane");
  const int splits = splits_a_head(p), lane = threadIdx.x % 32;
  const int64_t heads = p.heads;
  for (int64_t pair = threadIdx.x / 32; pair < p.tokens * heads; pair += blockDim.x / 32) {
    const int64_t t = pair / heads;
    const int64_t len = tokens.pos[t] + 1, per = split_keys(len, splits);
    const int used = static_cast<int>((len + per - 1) / per);
    const float* base = p.attn_split + pair * kMaxSplits * kSplitStride;
    const float m_lane = lane < used ? __ldcg(base + lane * kSplitStride) : -INFINITY;  // missing splits weigh 0
    const float l_lane = lane < used ? __ldcg(base + lane * kSplitStride + 1) : 0.f;
    float top = -INFINITY, sum = 0.f, acc0 = 0.f, acc1 = 0.f;
    for (int s0 = 0; s0 < used; s0 += kMergeGroup) {
      float2 o[kMergeGroup];
#pragma unroll
      for (int j = 0; j < kMergeGroup; ++j)
        o[j] = s0 + j < used ? __ldcg(reinterpret_cast<const float2*>(base + (s0 + j) * kSplitStride + 4) + lane)
                             : make_float2(0.f, 0.f);
      float m[kMergeGroup], l[kMergeGroup];
#pragma unroll
      for (int j = 0; j < kMergeGroup; ++j) {
        m[j] = __shfl_sync(0xffffffffu, m_lane, (s0 + j) % 32);
        l[j] = __shfl_sync(0xffffffffu, l_lane, (s0 + j) % 32);
        if (s0 + j >= used) m[j] = -INFINITY, l[j] = 0.f;
      }
      float group_top = top;
#pragma unroll
      for (int j = 0; j < kMergeGroup; ++j) group_top = fmaxf(group_top, m[j]);
      const float rescale = exp2f(top - group_top);
      sum *= rescale;
      acc0 *= rescale;
      acc1 *= rescale;
#pragma unroll
      for (int j = 0; j < kMergeGroup; ++j) {
        const float w = exp2f(m[j] - group_top);  // 0 for the missing splits (m = -inf)
        sum = fmaf(l[j], w, sum);
        acc0 = fmaf(o[j].x, w, acc0);
        acc1 = fmaf(o[j].y, w, acc1);
      }
      top = group_top;
    }
    float* x = xs + pair * kD + 2 * lane;  // [tokens][heads * kD]
    x[0] = to_f32(from_f32<T>(acc0 / sum));
    x[1] = to_f32(from_f32<T>(acc1 / sum));
  }
  __syncthreads();
}

template <class T>
__global__ void __launch_bounds__(kThreads, 1) decode_step_kernel(const DecodeStepParams p) {
  extern __shared__ uint4 smem[];
  uint4* weight_slots = smem;                                      // [kWarps][kAhead][2 rows][kRowStride]
  float* xs = reinterpret_cast<float*>(smem + kWeightSlotVectors);  // [tokens][k] of the phase
  __shared__ float inv_rms[kTokens];
  __shared__ float q_smem[kWarps * kD];
  __shared__ uint4 norm_smem[kDecodeStepMaxHidden / 8];
  __shared__ TokenTable tokens;
  if (threadIdx.x < p.tokens) {
    const int t = static_cast<int>(threadIdx.x);
    const int32_t pos = __ldg(p.positions + t), base = __ldg(p.kv_indptr + __ldg(p.batch_indices + t));
    tokens.pos[t] = pos;
    tokens.page_base[t] = base;
    tokens.slot[t] = static_cast<int64_t>(__ldg(p.kv_indices + base + pos / p.page_size)) * p.page_size +
                     pos % p.page_size;
  }
  __syncthreads();
  if (threadIdx.x < p.tokens) {
    const int t = static_cast<int>(threadIdx.x);
    int32_t least = tokens.pos[t];
    for (int u = 0; u < p.tokens; ++u)
      if (tokens.page_base[u] == tokens.page_base[t] && tokens.pos[u] < least) least = tokens.pos[u];
    tokens.written_from[t] = least;
  }
  __syncthreads();
  GridBarrier bar{p.barrier};
  const int64_t qkv_rows = (p.heads + 2 * p.kv_heads) * kD;
  DecodeLinearParams base;
  base.f16 = p.f16;
  base.tokens = p.tokens;
  base.eps = p.eps;
  for (int64_t li = 0; li < p.layers; ++li) {
    const DecodeStepLayer& layer = p.layer[li];
    DecodeLinearParams qkv = base;
    qkv.epilogue = DecodeEpilogue::rope_append;
    qkv.rows = qkv_rows;
    qkv.k = p.hidden;
    qkv.w = layer.wqkv;
    qkv.x = p.residual;
    qkv.norm_w = layer.attn_norm;
    qkv.q_out = p.qkv;
    qkv.q_stride = qkv_rows;
    qkv.k_cache = layer.k_cache;
    qkv.v_cache = layer.v_cache;
    qkv.heads = p.heads;
    qkv.kv_heads = p.kv_heads;
    qkv.head_dim = kD;
    qkv.page_size = p.page_size;
    qkv.rope_theta = p.rope_theta;
    qkv.token_pos = tokens.pos;  // in place of the index arrays
    qkv.token_slot = tokens.slot;
    prefetch_rows_l2(layer.wo, p.hidden, p.heads * kD, false);  // the o projection's, two phases ahead
    linear_phase<T, DecodeEpilogue::rope_append, kHiddenChunks>(
        qkv, bar, xs, weight_slots, norm_smem,
        [&](const uint16_t* norm) { stage_x<T>(xs, inv_rms, qkv.x, norm, qkv.tokens, qkv.k, qkv.eps); });

    prefetch_rows_l2(layer.w_gate_up, 2 * p.ffn, p.hidden, true);
    attention_phase<T>(p, layer, tokens, bar, q_smem, weight_slots);

    DecodeLinearParams o = base;
    o.epilogue = DecodeEpilogue::add_residual;
    o.rows = p.hidden;
    o.k = p.heads * kD;
    o.w = layer.wo;
    o.residual = p.residual;
    prefetch_rows_l2(layer.w_down, p.hidden, p.ffn, false);
    linear_phase<T, DecodeEpilogue::add_residual, kHiddenChunks>(
        o, bar, xs, weight_slots, norm_smem, [&](const uint16_t*) { stage_attention<T>(p, tokens, xs); });

    DecodeLinearParams gu = base;
    gu.epilogue = DecodeEpilogue::silu_and_mul;
    gu.rows = 2 * p.ffn;
    gu.k = p.hidden;
    gu.w = layer.w_gate_up;
    gu.x = p.residual;
    gu.norm_w = layer.ffn_norm;
    gu.act = p.act;
    if (li + 1 < p.layers) {
      prefetch_rows_l2(p.layer[li + 1].wqkv, qkv_rows, p.hidden, false);
    } else {
      prefetch_rows_l2(p.lm_head, p.vocab, p.hidden, false);
    }
    linear_phase<T, DecodeEpilogue::silu_and_mul, kHiddenChunks>(
        gu, bar, xs, weight_slots, norm_smem,
        [&](const uint16_t* norm) { stage_x<T>(xs, inv_rms, gu.x, norm, gu.tokens, gu.k, gu.eps); });

    DecodeLinearParams down = base;
    down.epilogue = DecodeEpilogue::add_residual;
    down.rows = p.hidden;
    down.k = p.ffn;
    down.w = layer.w_down;
    down.x = p.act;
    down.residual = p.residual;
    linear_phase<T, DecodeEpilogue::add_residual, kFfnChunks>(
        down, bar, xs, weight_slots, norm_smem,
        [&](const uint16_t*) { stage_x<T>(xs, inv_rms, down.x, nullptr, down.tokens, down.k, down.eps); });
  }
  DecodeLinearParams head = base;
  head.epilogue = DecodeEpilogue::store_f32;
  head.rows = p.vocab;
  head.k = p.hidden;
  head.w = p.lm_head;
  head.x = p.residual;
  head.norm_w = p.out_norm;
  head.out_f32 = p.logits;
  linear_phase<T, DecodeEpilogue::store_f32, kHiddenChunks>(
      head, bar, xs, weight_slots, norm_smem,
      [&](const uint16_t* norm) { stage_x<T>(xs, inv_rms, head.x, norm, head.tokens, head.k, head.eps); });
  bar.retire();
}

constexpr int kMaxDevices = 64;

// Blocks of one launch: one per SM, when one fits (the barrier needs every block resident).
template <class T> cudaError_t grid_blocks(int& blocks) {
  static std::once_flag once[kMaxDevices];
  static cudaError_t status[kMaxDevices] = {};
  static int sms[kMaxDevices] = {};
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  std::call_once(once[device], [device] {
    cudaError_t e =
        cudaFuncSetAttribute(decode_step_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kDynamicSmem);
    int per_sm = 0;
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_step_kernel<T>, kThreads, kDynamicSmem);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms[device], cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess && per_sm < 1) e = cudaErrorCooperativeLaunchTooLarge;
    status[device] = e;
  });
  blocks = sms[device];
#ifdef FLASHCPP_DECODE_STEP_PROBE
  if (g_grid_override > 0 && g_grid_override < blocks) blocks = g_grid_override;
#endif
  return status[device];
}

template <class T> cudaError_t launch_typed(const DecodeStepParams& p, cudaStream_t stream) {
  int blocks = 0;
  if (const cudaError_t e = grid_blocks<T>(blocks); e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kDynamicSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, decode_step_kernel<T>, p);
}

}  // namespace

int64_t decode_step_split_floats(int64_t tokens, int64_t heads) { return tokens * heads * kMaxSplits * kSplitStride; }

bool decode_step_supports(int64_t tokens, int64_t hidden, int64_t ffn, int64_t heads, int64_t kv_heads,
                          int64_t head_dim, int64_t vocab) {
  const auto row_ok = [](int64_t k, int64_t most) { return k >= 8 && k <= most && k % 8 == 0; };
  return tokens >= 1 && tokens <= kDecodeStepMaxTokens && head_dim == kDecodeStepHeadDim &&
         row_ok(hidden, kDecodeStepMaxHidden) && row_ok(heads * head_dim, kDecodeStepMaxHidden) &&
         row_ok(ffn, kDecodeStepMaxFfn) && kv_heads >= 1 && heads % kv_heads == 0 && vocab >= 2 && vocab % 2 == 0;
}

#ifdef FLASHCPP_DECODE_STEP_PROBE
cudaError_t decode_step_set_probe(int bits) { return cudaMemcpyToSymbol(g_probe, &bits, sizeof(int)); }
void decode_step_set_grid(int blocks) { g_grid_override = blocks; }
cudaError_t decode_step_set_trace(unsigned long long* buffer) {
  return cudaMemcpyToSymbol(g_trace, &buffer, sizeof(buffer));
}
#endif

cudaError_t decode_step_launch_check(bool f16) {
  int blocks = 0;
  const cudaError_t e = f16 ? grid_blocks<__half>(blocks) : grid_blocks<__nv_bfloat16>(blocks);
  if (e != cudaSuccess) (void)cudaGetLastError();  // a refused attribute or query: reported here, not to a later check
  return e;
}

cudaError_t launch_decode_step(const DecodeStepParams& p, cudaStream_t stream) {
  if (!decode_step_supports(p.tokens, p.hidden, p.ffn, p.heads, p.kv_heads, p.head_dim, p.vocab) || p.layers < 1 ||
      p.page_size < 1 || !p.layer || !p.out_norm || !p.lm_head || !p.residual || !p.qkv || !p.attn_split || !p.act ||
      !p.logits || !p.positions || !p.batch_indices || !p.kv_indptr || !p.kv_indices || !p.barrier)
    return cudaErrorInvalidValue;
  return p.f16 ? launch_typed<__half>(p, stream) : launch_typed<__nv_bfloat16>(p, stream);
}

}  // namespace flashcpp::llm
