// The plan kernel of dense MLA decode (mla/dense_decode_kernel.hpp): block 0 builds the split-KV schedule over the
// requests' lengths, the other blocks write each request's slot list and its tokens' lengths.
#include "mla/dense_decode_kernel.hpp"

#include <climits>

namespace flashcpp::mla::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kSlotsPerThread = 4;  // one int4 store
constexpr int kSlotsPerBlock = kThreads * kSlotsPerThread;
// Requests whose block counts the schedule block stages in shared memory (its serial loop then reads them there);
// beyond this it reads the lengths from global memory.
constexpr int kStagedRequests = 12288;  // 48 KiB

struct StagedBlocks {
  const int32_t* staged;
  FLASHCPP_HD int32_t operator()(int32_t r) const { return staged[r]; }
};
struct GlobalBlocks {
  const DensePrepareParams* p;
  __device__ int32_t operator()(int32_t r) const {
    return dense_schedule_blocks(dense_request_length(__ldg(p->cache_seqlens + r), p->max_blocks, p->block_size));
  }
};

__global__ void __launch_bounds__(kThreads) dense_decode_plan_kernel(const DensePrepareParams p) {
  extern __shared__ int32_t staged[];
  if (blockIdx.x == 0) {
    if (p.batch <= kStagedRequests) {
      for (int r = threadIdx.x; r < p.batch; r += kThreads)
        staged[r] = dense_schedule_blocks(dense_request_length(__ldg(p.cache_seqlens + r), p.max_blocks, p.block_size));
      __syncthreads();
      if (threadIdx.x == 0) sched::build_schedule_of(p.batch, StagedBlocks{staged}, p.num_parts, p.sched, p.num_splits);
    } else if (threadIdx.x == 0) {
      sched::build_schedule_of(p.batch, GlobalBlocks{&p}, p.num_parts, p.sched, p.num_splits);
    }
    return;
  }
  const int64_t chunks = (p.capacity + kSlotsPerBlock - 1) / kSlotsPerBlock;
  const int64_t item = blockIdx.x - 1;
  const int r = static_cast<int>(item / chunks);
  const int64_t chunk = item % chunks;
  const int64_t length = dense_request_length(__ldg(p.cache_seqlens + r), p.max_blocks, p.block_size);
  if (chunk == 0)
    for (int s = threadIdx.x; s < p.s_q; s += kThreads)
      p.token_lengths[static_cast<int64_t>(r) * p.s_q + s] = static_cast<int32_t>(dense_token_length(length, p.s_q, s, p.causal));
  const int64_t first = chunk * kSlotsPerBlock + threadIdx.x * kSlotsPerThread;
  if (first >= length) return;  // slots past the length are never read (the kernels mask them by the token lengths)
  const int32_t* table = p.block_table + static_cast<int64_t>(r) * p.block_table_stride;
  int32_t v[kSlotsPerThread];
#pragma unroll
  for (int i = 0; i < kSlotsPerThread; ++i) {
    const int64_t j = first + i;
    v[i] = -1;
    if (j < length) {
      const int64_t block = __ldg(table + j / p.block_size);
      const int64_t index = block * p.block_size + j % p.block_size;
      if (block >= 0 && index <= INT32_MAX) v[i] = static_cast<int32_t>(index);
    }
  }
  *reinterpret_cast<int4*>(p.indices + static_cast<int64_t>(r) * p.capacity + first) = make_int4(v[0], v[1], v[2], v[3]);
}

}  // namespace

cudaError_t launch_dense_decode_plan(const DensePrepareParams& p, cudaStream_t stream) {
  const int64_t chunks = (p.capacity + kSlotsPerBlock - 1) / kSlotsPerBlock;
  const int64_t blocks = 1 + static_cast<int64_t>(p.batch) * chunks;
  const size_t smem = p.batch <= kStagedRequests ? static_cast<size_t>(p.batch) * sizeof(int32_t) : 0;
  dense_decode_plan_kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashcpp::mla::kernels
