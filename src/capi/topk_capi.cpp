// C ABI of the DSA top-k ops (include/flashcpp/c/topk.h).
#include "flashcpp/c/topk.h"

#include "capi/capi.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/topk.hpp"

static_assert(FLASHCPP_TOP_K_ROW_STATES_BYTES == flashcpp::kTopKRowStatesBytes);

using namespace flashcpp;
using capi::default_runtime;
using capi::guard;
using capi::optional;
using capi::to_view;

extern "C" {

flashcpp_status flashcpp_top_k(const flashcpp_tensor* input, const flashcpp_tensor* indices,
                               const flashcpp_tensor* values, const flashcpp_tensor* row_states, void* stream) {
  constexpr const char* op = "top_k";
  return guard([&] {
    TensorView rs;
    top_k(*default_runtime(), to_view(input, op, "input"), to_view(indices, op, "indices"),
          to_view(values, op, "values"), optional(row_states, op, "row_states", rs),
          static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_top_k_page_table_transform(const flashcpp_tensor* input, const flashcpp_tensor* lengths,
                                                    const flashcpp_tensor* src_page_table,
                                                    const flashcpp_tensor* row_to_batch,
                                                    const flashcpp_tensor* output_page_table,
                                                    const flashcpp_tensor* row_states, void* stream) {
  constexpr const char* op = "top_k_page_table_transform";
  return guard([&] {
    TensorView rb, rs;
    const OptionalTensor r2b = optional(row_to_batch, op, "row_to_batch", rb);
    const OptionalTensor states = optional(row_states, op, "row_states", rs);
    top_k_page_table_transform(*default_runtime(), to_view(input, op, "input"), to_view(lengths, op, "lengths"),
                               to_view(src_page_table, op, "src_page_table"),
                               to_view(output_page_table, op, "output_page_table"), r2b, states,
                               static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_top_k_ragged_transform(const flashcpp_tensor* input, const flashcpp_tensor* offsets,
                                                const flashcpp_tensor* lengths, const flashcpp_tensor* output_indices,
                                                const flashcpp_tensor* row_states, void* stream) {
  constexpr const char* op = "top_k_ragged_transform";
  return guard([&] {
    TensorView rs;
    top_k_ragged_transform(*default_runtime(), to_view(input, op, "input"), to_view(offsets, op, "offsets"),
                           to_view(lengths, op, "lengths"), to_view(output_indices, op, "output_indices"),
                           optional(row_states, op, "row_states", rs), static_cast<cudaStream_t>(stream));
  });
}

}  // extern "C"
