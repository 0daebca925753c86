// The combine kernel of split-KV decode (sparse_attention_kernel.hpp, launch_sparse_attention_combine): finishes the
// split requests' partial rows into out and lse.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "mla/simple_device.cuh"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::kernels {
namespace {

constexpr int kDv = 512;

// Combine: grid (tokens, ceil(h_q / HEADS), CHUNKS), one warp per (head, 512 / CHUNKS columns); lane owns
// 16 / CHUNKS columns of each split row, 4 bf16 (8 bytes) at a time. Launched as a programmatic dependent of the
// attention kernel: everything after the wait sees its results. Its time is the latency of dependent reads, so each warp keeps BATCH
// split rows in flight (issued with its lse loads, and each row consumed is replaced by the one BATCH further on),
// and only rows that exist are loaded. combine_shape() picks (CHUNKS, BATCH): whole rows and two in flight where
// tokens x heads alone fill the GPU (few splits each), column chunks and deep batches for few tokens with tens of
// splits (H200, 2026-12-01, FlashMLA's suite: V3.2 b 16, two splits a row, 23 us with 4 chunks x 16 rows at 122
// registers, 2 CTAs an SM; FlashMLA's whole-row combine 8 us).
// F16: out in fp16 (KvFormat::f16), else bf16.
template <int CHUNKS, int BATCH, int HEADS, bool F16>  // HEADS: warps (heads) per CTA
__global__ void __launch_bounds__(HEADS * 32) sparse_attention_combine_kernel(const SparseAttentionParams p) {
  static_assert(kDv % (CHUNKS * 128) == 0 && 32 % BATCH == 0, "lanes own whole 4-value groups; batches tile 32 splits");
  constexpr int kVecs = kDv / CHUNKS / 128;  // 4-value groups of one split row per lane
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int head = static_cast<int>(blockIdx.y) * HEADS + warp;
  if (head >= p.h_q) return;
  const int col = static_cast<int>(blockIdx.z) * (kDv / CHUNKS) + lane * 4;
  // The token's request and position, one 32-bit division (the grid's x is the token); every offset below is
  // taken from the two (SparseAttentionParams::request_offset).
  const unsigned per = static_cast<unsigned>(p.tokens_per_request);
  const int r = static_cast<int>(per <= 1 ? blockIdx.x : blockIdx.x / per);
  const int tok_in_req = static_cast<int>(blockIdx.x - static_cast<unsigned>(r) * (per <= 1 ? 1u : per));
  // The split counts come from the plan, which completed before the attention kernel started: read while that
  // kernel still runs, so only the loads of its results wait for it.
  const int split0 = p.num_splits[r];
  const int n = p.num_splits[r + 1] - split0;
  if (n <= 1) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  auto row_of = [&](int k) { return static_cast<int64_t>(split0 + k) * p.tokens_per_request + tok_in_req; };
  auto lse_of = [&](int k) { return k < n ? p.lse_accum[row_of(k) * p.h_q + head] : -INFINITY; };
  uint2 v[BATCH][kVecs];  // 4 bf16 each, widened where used (the loads stay in flight)
  auto load_row = [&](int k, uint2 (&dst)[kVecs]) {
    const uint16_t* row = p.o_accum + (row_of(k) * p.h_q + head) * kDv + col;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) dst[i] = *reinterpret_cast<const uint2*>(row + i * 128);
  };

  // Issued together: this lane's first lse and the first batch of rows (the weights come later).
  const float lse_first = lse_of(lane);
#pragma unroll
  for (int u = 0; u < BATCH; ++u)
    if (u < n) load_row(u, v[u]);

  float mx = lse_first;
  for (int k = lane + 32; k < n; k += 32) mx = fmaxf(mx, lse_of(k));
  mx = warp_max(mx);
  float sum = mx == -INFINITY ? 0.f : expf(lse_first - mx);
  if (mx != -INFINITY)
    for (int k = lane + 32; k < n; k += 32) sum += expf(lse_of(k) - mx);
  sum = warp_sum(sum);
  const float lse = mx == -INFINITY ? -INFINITY : mx + logf(sum);
  // g: the log-normaliser of the output, including the sink.
  float g = lse;
  if (p.attn_sink != nullptr) {
    const float sink = p.attn_sink[head];
    if (sink == INFINITY) g = INFINITY;
    else if (lse == -INFINITY) g = sink;
    else if (sink != -INFINITY) {
      const float hi = fmaxf(lse, sink);
      g = hi + logf(expf(lse - hi) + expf(sink - hi));
    }
  }
  float4 o[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) o[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (g != -INFINITY && g != INFINITY) {
    // Lane j holds the weight of split k0 + j (k0 a multiple of 32).
    float wk = lse_first == -INFINITY ? 0.f : expf(lse_first - g);
    for (int k0 = 0; k0 < n; k0 += BATCH) {
      if (k0 > 0 && k0 % 32 == 0) {
        const float lk = lse_of(k0 + lane);
        wk = lk == -INFINITY ? 0.f : expf(lk - g);
      }
#pragma unroll
      for (int u = 0; u < BATCH; ++u) {
        const int k = k0 + u;
        if (k >= n) break;  // warp-uniform
        const float w = __shfl_sync(0xffffffffu, wk, k & 31);
        if (w != 0.f) {  // an empty split (weight 0) adds nothing, whatever its row holds
#pragma unroll
          for (int i = 0; i < kVecs; ++i) {
            o[i].x = fmaf(w, __uint_as_float(v[u][i].x << 16), o[i].x);
            o[i].y = fmaf(w, __uint_as_float(v[u][i].x & 0xffff0000u), o[i].y);
            o[i].z = fmaf(w, __uint_as_float(v[u][i].y << 16), o[i].z);
            o[i].w = fmaf(w, __uint_as_float(v[u][i].y & 0xffff0000u), o[i].w);
          }
        }
        if (k + BATCH < n) load_row(k + BATCH, v[u]);
      }
    }
  }
  // The 4 values at partial-row position col (16c + 4t) are columns 16c + 2t, +1 and 16c + 8 + 2t, +1.
  auto* out = static_cast<uint16_t*>(p.out) +
              p.request_offset(r, tok_in_req, p.out_stride_token, p.out_stride_request) + head * p.out_stride_head +
              (col & ~15) + ((col & 15) >> 1);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    store_16bit_pair<F16>(out + i * 128, o[i].x, o[i].y);
    store_16bit_pair<F16>(out + i * 128 + 8, o[i].z, o[i].w);
  }
  if (lane == 0 && blockIdx.z == 0)
    p.lse[p.request_offset(r, tok_in_req, p.lse_stride_token, p.lse_stride_request) +
          static_cast<int64_t>(head) * p.lse_stride_head] = lse == -INFINITY ? INFINITY : lse;
}

}  // namespace

CombineShape combine_shape(int64_t rows, int num_parts, int num_requests) {
  // Splits a request expects: its share of the parts, plus one where the greedy fill cuts at a part's edge.
  const int64_t splits = (num_requests > 0 ? num_parts / num_requests : num_parts) + 1;
  constexpr int64_t kFullGpuRows = 4096;  // warps of whole rows that fill 132 SMs about once (32 an SM)
  if (rows >= kFullGpuRows && splits <= 4) return {1, 2};
  if (rows >= kFullGpuRows / 4 && splits <= 8) return {2, 4};
  return {4, splits <= 8 ? 8 : 16};
}

template <int CHUNKS, int BATCH, int HEADS, bool F16>
cudaError_t launch_combine_of(const SparseAttentionParams& p, cudaStream_t stream, bool programmatic) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>((p.h_q + HEADS - 1) / HEADS), CHUNKS);
  config.blockDim = dim3(HEADS * 32);
  config.stream = stream;
  // Programmatic dependent launch: scheduled while the attention kernel drains (griddepcontrol.wait in the
  // kernel orders every read after it), which saves the launch gap between the two on small batches.
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &pdl;
  config.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&config, sparse_attention_combine_kernel<CHUNKS, BATCH, HEADS, F16>, p);
}

template <int CHUNKS, int BATCH, int HEADS>
cudaError_t launch_combine(const SparseAttentionParams& p, cudaStream_t stream, bool programmatic) {
  return p.kv_format == KvFormat::f16 ? launch_combine_of<CHUNKS, BATCH, HEADS, true>(p, stream, programmatic)
                                      : launch_combine_of<CHUNKS, BATCH, HEADS, false>(p, stream, programmatic);
}

cudaError_t launch_sparse_attention_combine(const SparseAttentionParams& p, cudaStream_t stream, bool programmatic) {
  const CombineShape shape = combine_shape(static_cast<int64_t>(p.num_tokens) * p.h_q, p.num_parts, p.num_requests);
  // Blocks of 4 heads for the whole-row shapes (more blocks to spread), of 8 for the chunked ones (the 2026-12-01
  // shape, which a b 1 / 2 combine ran about 1 us faster than blocks of 4).
  if (shape.chunks == 1) return launch_combine<1, 2, 4>(p, stream, programmatic);
  if (shape.chunks == 2) return launch_combine<2, 4, 4>(p, stream, programmatic);
  if (shape.batch == 8) return launch_combine<4, 8, 8>(p, stream, programmatic);
  return launch_combine<4, 16, 8>(p, stream, programmatic);
}

}  // namespace flashcpp::mla::kernels
