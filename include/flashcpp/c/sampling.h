/* flashcpp C ABI: the sampler (FlashInfer's `sampling` module; flashcpp/sampling.hpp has the full contract).
 * Since C ABI 3.4.0. probs/logits f32 [rows, vocab], contiguous; samples int32/int64 [batch]; row_indices NULL
 * (batch == rows) or samples' dtype [batch]. A per-request parameter is the scalar, or a device tensor with one
 * value per row when its *_per_row pointer is not NULL (f32; top_k int32, or samples' dtype for the top-k and
 * fused samplers). Every call validates before launching, is asynchronous on `stream` and allocates nothing. */
#ifndef FLASHCPP_C_SAMPLING_H_
#define FLASHCPP_C_SAMPLING_H_
#include "flashcpp/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flashcpp_sampling_options {
  uint32_t struct_size;  /* sizeof(flashcpp_sampling_options): set by the initializer */
  int32_t deterministic; /* 0 or 1 */
  uint64_t philox_seed, philox_offset;
} flashcpp_sampling_options;
/* deterministic, seed 0, offset 0. */
#define FLASHCPP_SAMPLING_OPTIONS_INIT {(uint32_t)sizeof(flashcpp_sampling_options), 1, 0, 0}

/* Caller-owned scratch: softmax_buffer >= flashcpp_softmax_workspace_bytes(rows, vocab); row_states >=
 * flashcpp_sampling_row_states_bytes(), zero-filled before first use (the kernels leave it zero), one launch at a
 * time. Both 1-D on the device of the logits. Since ABI 4.0.0 it begins with its size. */
typedef struct flashcpp_sampling_workspace {
  uint32_t struct_size; /* sizeof(flashcpp_sampling_workspace): set by FLASHCPP_SAMPLING_WORKSPACE_INIT */
  const flashcpp_tensor* softmax_buffer;
  const flashcpp_tensor* row_states;
} flashcpp_sampling_workspace;
#define FLASHCPP_SAMPLING_WORKSPACE_INIT {(uint32_t)sizeof(flashcpp_sampling_workspace), NULL, NULL}

int64_t flashcpp_softmax_workspace_bytes(int64_t rows, int64_t vocab);
int64_t flashcpp_sampling_row_states_bytes(void);

/* probs = softmax(logits / temperature); probs may be exactly logits. */
flashcpp_status flashcpp_softmax(const flashcpp_tensor* workspace, const flashcpp_tensor* logits,
                                 const flashcpp_tensor* probs, const flashcpp_tensor* temperature_per_row,
                                 double temperature, int32_t enable_pdl, void* stream);
flashcpp_status flashcpp_sampling_from_probs(const flashcpp_tensor* probs, const flashcpp_tensor* samples,
                                             const flashcpp_tensor* row_indices,
                                             const flashcpp_sampling_options* options, void* stream);
flashcpp_status flashcpp_sampling_from_logits(const flashcpp_tensor* logits, const flashcpp_tensor* samples,
                                              const flashcpp_tensor* row_indices,
                                              const flashcpp_sampling_options* options, void* stream);
flashcpp_status flashcpp_top_k_sampling_from_probs(const flashcpp_tensor* probs, const flashcpp_tensor* samples,
                                                   const flashcpp_tensor* top_k_per_row, int64_t top_k,
                                                   const flashcpp_tensor* row_indices,
                                                   const flashcpp_sampling_options* options, void* stream);
flashcpp_status flashcpp_top_p_sampling_from_probs(const flashcpp_tensor* probs, const flashcpp_tensor* samples,
                                                   const flashcpp_tensor* top_p_per_row, double top_p,
                                                   const flashcpp_tensor* row_indices,
                                                   const flashcpp_sampling_options* options, void* stream);
flashcpp_status flashcpp_min_p_sampling_from_probs(const flashcpp_tensor* probs, const flashcpp_tensor* samples,
                                                   const flashcpp_tensor* min_p_per_row, double min_p,
                                                   const flashcpp_tensor* row_indices,
                                                   const flashcpp_sampling_options* options, void* stream);
flashcpp_status flashcpp_top_k_top_p_sampling_from_probs(const flashcpp_tensor* probs, const flashcpp_tensor* samples,
                                                         const flashcpp_tensor* top_k_per_row, int64_t top_k,
                                                         const flashcpp_tensor* top_p_per_row, double top_p,
                                                         const flashcpp_tensor* row_indices,
                                                         const flashcpp_sampling_options* options, void* stream);

typedef enum flashcpp_top_k_top_p_order {
  FLASHCPP_TOP_K_FIRST = 0, /* mask to the top-k logits, softmax, top-p sample */
  FLASHCPP_TOP_K_TOP_P_JOINT = 1
} flashcpp_top_k_top_p_order;
/* probs: f32 [rows, vocab] scratch the call writes (the distribution sampled). */
flashcpp_status flashcpp_top_k_top_p_sampling_from_logits(
    const flashcpp_sampling_workspace* workspace, const flashcpp_tensor* logits, const flashcpp_tensor* probs,
    const flashcpp_tensor* samples, const flashcpp_tensor* top_k_per_row, int64_t top_k,
    const flashcpp_tensor* top_p_per_row, double top_p, int32_t order, const flashcpp_tensor* row_indices,
    const flashcpp_sampling_options* options, void* stream);

flashcpp_status flashcpp_top_p_renorm_probs(const flashcpp_tensor* probs, const flashcpp_tensor* renorm,
                                            const flashcpp_tensor* top_p_per_row, double top_p, void* stream);
/* f32, f16 or bf16; top_k_per_row int32. */
flashcpp_status flashcpp_top_k_renorm_probs(const flashcpp_tensor* probs, const flashcpp_tensor* renorm,
                                            const flashcpp_tensor* top_k_per_row, int64_t top_k,
                                            const flashcpp_tensor* row_states, void* stream);
flashcpp_status flashcpp_top_k_mask_logits(const flashcpp_tensor* logits, const flashcpp_tensor* masked,
                                           const flashcpp_tensor* top_k_per_row, int64_t top_k,
                                           const flashcpp_tensor* row_states, void* stream);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_SAMPLING_H_ */
