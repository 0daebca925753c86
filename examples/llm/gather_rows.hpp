// out[i, :] = table[rows[i], :] for bf16 rows of `width` elements: the token embedding lookup, and the pick of the
// rows whose logits a step computes. rows: int32 [n] on the device, each in [0, table rows) (the engine checks them
// on the host before it uploads them).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashcpp::llm {

cudaError_t launch_gather_rows(const uint16_t* table, const int32_t* rows, int64_t n, int64_t width, uint16_t* out,
                               cudaStream_t stream);

}  // namespace flashcpp::llm
