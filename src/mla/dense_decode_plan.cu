// The plan kernel of dense MLA decode (mla/dense_decode_kernel.hpp): block 0 builds the split-KV schedule over the
// requests' lengths, the other blocks write each request's slot list and its tokens' lengths.
#include "mla/dense_decode_kernel.hpp"

#include <climits>

namespace flashcpp::mla::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kSlotsPerThread = 4;  // one int4 store
constexpr int kSlotsPerBlock = kThreads * kSlotsPerThread;
// The schedule block builds the schedule in shared memory (its serial loop reads and updates each request's block
// and split counts; in global memory every update costs a round trip: 25-53 us for b 128 on the H200) and copies it
// out, when the requests' counts and the parts' records fit in this much.
constexpr size_t kStagedBytes = 48 * 1024;

FLASHCPP_HD size_t staged_bytes(int batch, int num_parts) {
  return static_cast<size_t>(num_parts) * sizeof(sched::PartMeta) + (2 * static_cast<size_t>(batch) + 1) * sizeof(int32_t);
}

struct StagedBlocks {
  const int32_t* staged;
  FLASHCPP_HD int32_t operator()(int32_t r) const { return staged[r]; }
};
struct GlobalBlocks {
  const DensePlanParams* p;
  __device__ int32_t operator()(int32_t r) const {
    return dense_schedule_blocks(dense_request_length(__ldg(p->cache_seqlens + r), p->max_blocks, p->block_size));
  }
};

__global__ void __launch_bounds__(kThreads) dense_decode_plan_kernel(const DensePlanParams p) {
  if (blockIdx.x == 0) {
    extern __shared__ __align__(16) uint8_t smem[];
    if (staged_bytes(p.batch, p.num_parts) <= kStagedBytes) {
      auto* meta = reinterpret_cast<sched::PartMeta*>(smem);
      auto* num_splits = reinterpret_cast<int32_t*>(meta + p.num_parts);
      int32_t* blocks = num_splits + p.batch + 1;
      for (int r = threadIdx.x; r < p.batch; r += kThreads)
        blocks[r] = dense_schedule_blocks(dense_request_length(__ldg(p.cache_seqlens + r), p.max_blocks, p.block_size));
      __syncthreads();
      if (threadIdx.x == 0) sched::build_schedule_of(p.batch, StagedBlocks{blocks}, p.num_parts, meta, num_splits);
      __syncthreads();
      const auto* words = reinterpret_cast<const int32_t*>(meta);
      auto* out = reinterpret_cast<int32_t*>(p.sched);
      for (int i = threadIdx.x; i < p.num_parts * sched::kMetaInts; i += kThreads) out[i] = words[i];
      for (int i = threadIdx.x; i <= p.batch; i += kThreads) p.num_splits[i] = num_splits[i];
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

cudaError_t launch_dense_decode_plan(const DensePlanParams& p, cudaStream_t stream) {
  const int64_t chunks = (p.capacity + kSlotsPerBlock - 1) / kSlotsPerBlock;
  const int64_t blocks = 1 + static_cast<int64_t>(p.batch) * chunks;
  const size_t need = staged_bytes(p.batch, p.num_parts);
  const size_t smem = need <= kStagedBytes ? need : 0;
  dense_decode_plan_kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashcpp::mla::kernels
