// Internal contract of dense MLA decode (include/flashcpp/mla.hpp, dense_decode_plan / dense_decode): the host
// validates everything, then the plan kernel turns the paged cache's block table and lengths into the sparse
// attention's inputs (once per step), and the sparse decode kernels (sparse_attention_kernel.hpp) run them (per layer). Dense decode is sparse decode over every cached token:
// the same attention, split-KV schedule and combine, one kernel selector.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "mla/decode_schedule.hpp"

namespace flashcpp::mla::kernels {

/// What the plan kernel reads and writes. Request r's token j (j < its length) lives in block
/// block_table[r * block_table_stride + j / block_size], slot j % block_size: its index is block * block_size + slot
/// (the sparse kernels' paged addressing). A negative block id, or one whose index passes 2^31 - 1, gives -1; ids past
/// the cache are masked by the attention's range check (index < num_blocks * block_size), so none is ever read.
struct DensePlanParams {
  const int32_t* block_table = nullptr;  // i32 [batch, max_blocks], last dim contiguous
  int64_t block_table_stride = 0;        // elements between requests
  const int32_t* cache_seqlens = nullptr;  // i32 [batch]: clamped to [0, max_blocks * block_size]
  int batch = 0, s_q = 1, max_blocks = 0, block_size = 0;
  bool causal = false;  // token s of s_q attends to length - (s_q - 1 - s) tokens (FlashMLA's causal mask)

  int32_t* indices = nullptr;   // i32 [batch, capacity]: slot j of request r (only slots below its length written)
  int64_t capacity = 0;         // max_blocks * block_size rounded up to a multiple of 64
  int32_t* token_lengths = nullptr;  // i32 [batch * s_q]: the slots token (r, s) attends

  // The split-KV schedule over the requests' lengths (mla/decode_schedule.hpp), num_parts >= 1.
  sched::PartMeta* sched = nullptr;
  int32_t* num_splits = nullptr;  // [batch + 1]
  int num_parts = 0;
};

/// Request r's length as the kernels use it: cache_seqlens[r] clamped to [0, max_blocks * block_size].
FLASHCPP_HD int64_t dense_request_length(int64_t raw, int max_blocks, int block_size) {
  const int64_t cap = static_cast<int64_t>(max_blocks) * block_size;
  return raw < 0 ? 0 : (raw > cap ? cap : raw);
}

/// The slots token s of a request of `length` tokens attends.
FLASHCPP_HD int64_t dense_token_length(int64_t length, int s_q, int s, bool causal) {
  if (!causal) return length;
  const int64_t n = length - (s_q - 1 - s);
  return n < 0 ? 0 : n;
}

/// Schedule blocks of a request of `length` tokens: every request has at least one (an empty one runs an empty piece,
/// which writes out 0 and lse +inf).
FLASHCPP_HD int32_t dense_schedule_blocks(int64_t length) {
  const int32_t b = sched::blocks_of(static_cast<int32_t>(length));
  return b < 1 ? 1 : b;
}

/// One launch on `stream`: the indices, the token lengths and the schedule. Graph-capturable.
cudaError_t launch_dense_decode_plan(const DensePlanParams& p, cudaStream_t stream);

}  // namespace flashcpp::mla::kernels
