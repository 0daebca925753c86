/* flashcpp C ABI: DSA top-k (FlashInfer's topk module): plain top-k, and top-k mapped through a token page table or
 * shifted by per-row offsets, whose results feed sparse MLA's indices.
 * Semantics, shapes and validation as in the C++ header flashcpp/topk.hpp: results are unordered sets (compare them
 * as sets), k is the output's width, rows whose length is <= k hold their positions in order and then -1.
 * These entry points use the process-wide runtime of the C ABI (created on first use from the FLASHCPP_*
 * environment: FLASHCPP_TVM_FFI_LIB, FLASHCPP_MODULE_PATH, FLASHCPP_JIT). Streams are cudaStream_t passed as
 * void*. Optional tensors are NULL when absent. Every call validates all arguments first:
 * FLASHCPP_INVALID_ARGUMENT means nothing was launched or written; flashcpp_last_error() names the argument and
 * the rule. Outputs (the row states included) may share no byte with any other argument.
 *
 * row_states: FlashInfer's multi-CTA workspace, 1-D CUDA, at least FLASHCPP_TOP_K_ROW_STATES_BYTES, zero-filled
 * before its first use (each launch leaves it ready for the next), never used by two launches that may run at the
 * same time. NULL is accepted only for rows of at most 1024 x gcd(16 / element bytes, max_len) elements. */
#ifndef FLASHCPP_C_TOPK_H_
#define FLASHCPP_C_TOPK_H_
#include "flashcpp/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The least size of the row-states workspace in bytes (1 MiB, as FlashInfer's Python API allocates). */
#define FLASHCPP_TOP_K_ROW_STATES_BYTES (1 << 20)

/* since ABI 3.4.0 */
/* input f32/f16/bf16 [rows, d] -> indices int32 [rows, k], values [rows, k] in input's dtype; 1 <= k <= d. */
flashcpp_status flashcpp_top_k(const flashcpp_tensor* input, const flashcpp_tensor* indices,
                               const flashcpp_tensor* values, const flashcpp_tensor* row_states, void* stream);

/* since ABI 3.4.0 */
/* input [rows, max_len], lengths int32 [rows], src_page_table int32 [batch, >= max_len], row_to_batch int32 [rows]
 * (NULL: row r uses table row r) -> output_page_table int32 [rows, k]:
 * src_page_table[row_to_batch[r]][p] at the selected positions p of input[r][0 .. lengths[r]), then -1. */
flashcpp_status flashcpp_top_k_page_table_transform(const flashcpp_tensor* input, const flashcpp_tensor* lengths,
                                                    const flashcpp_tensor* src_page_table,
                                                    const flashcpp_tensor* row_to_batch,
                                                    const flashcpp_tensor* output_page_table,
                                                    const flashcpp_tensor* row_states, void* stream);

/* since ABI 3.4.0 */
/* input [rows, max_len], offsets int32 [rows], lengths int32 [rows] -> output_indices int32 [rows, k]:
 * offsets[r] + p at the selected positions p of input[r][0 .. lengths[r]), then -1. */
flashcpp_status flashcpp_top_k_ragged_transform(const flashcpp_tensor* input, const flashcpp_tensor* offsets,
                                                const flashcpp_tensor* lengths, const flashcpp_tensor* output_indices,
                                                const flashcpp_tensor* row_states, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_TOPK_H_ */
