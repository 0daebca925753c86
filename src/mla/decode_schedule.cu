// The schedule kernels of sparse decode plans (sparse_attention_kernel.hpp, launch_decode_schedule and
// launch_decode_schedule_by_lengths): one thread writes the split-KV schedule (mla/decode_schedule.hpp) of requests of
// one size, or of the block counts their lengths give.
#include <cuda_runtime.h>

#include <cstdint>

#include "mla/decode_schedule.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::kernels {
namespace {

__global__ void decode_schedule_kernel(sched::PartMeta* meta, int32_t* num_splits, int batch, int topk,
                                       int num_parts) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    sched::build_schedule(batch, nullptr, sched::blocks_of(topk), num_parts, meta, num_splits);
}

static_assert(kScheduleLengthsMaxRequests * sizeof(int32_t) <= 48 * 1024, "the block counts fit the dynamic shared memory a launch gets without opt-in");

// Every thread puts block counts of requests into shared memory, then one thread runs the schedule over them.
__global__ void __launch_bounds__(1024) decode_schedule_by_lengths_kernel(sched::PartMeta* meta, int32_t* num_splits,
                                                                         int batch, ScheduleLengths l, int num_parts) {
  extern __shared__ int32_t blocks[];
  for (int r = threadIdx.x; r < batch; r += blockDim.x) {
    const int req = l.first_request + r;
    const int32_t main_len = l.topk_length != nullptr ? __ldg(l.topk_length + req) : l.main_topk;
    const int32_t extra_len = l.extra_topk_length != nullptr ? __ldg(l.extra_topk_length + req) : l.extra_topk;
    blocks[r] = schedule_request_blocks(l, main_len, extra_len);
  }
  __syncthreads();
  if (threadIdx.x == 0) sched::build_schedule(batch, blocks, 0, num_parts, meta, num_splits);
}

}  // namespace

void launch_decode_schedule_by_lengths(void* sched, int32_t* num_splits, int batch, const ScheduleLengths& lengths,
                                       int num_parts, cudaStream_t stream) {
  const int threads = batch < 1024 ? (batch + 31) / 32 * 32 : 1024;
  const size_t smem = static_cast<size_t>(batch) * sizeof(int32_t);  // <= 48 KiB (kScheduleLengthsMaxRequests)
  decode_schedule_by_lengths_kernel<<<1, threads, smem, stream>>>(static_cast<sched::PartMeta*>(sched), num_splits,
                                                                  batch, lengths, num_parts);
}

void launch_decode_schedule(void* sched, int32_t* num_splits, int batch, int topk, int num_parts,
                            cudaStream_t stream) {
  decode_schedule_kernel<<<1, 1, 0, stream>>>(static_cast<sched::PartMeta*>(sched), num_splits, batch, topk,
                                               num_parts);
}

}  // namespace flashcpp::mla::kernels
