// The schedule kernel of sparse decode plans (sparse_attention_kernel.hpp, launch_decode_schedule): one thread
// writes the split-KV schedule of requests of one size (mla/decode_schedule.hpp).
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

}  // namespace

void launch_decode_schedule(void* sched, int32_t* num_splits, int batch, int topk, int num_parts,
                            cudaStream_t stream) {
  decode_schedule_kernel<<<1, 1, 0, stream>>>(static_cast<sched::PartMeta*>(sched), num_splits, batch, topk,
                                               num_parts);
}

}  // namespace flashcpp::mla::kernels
