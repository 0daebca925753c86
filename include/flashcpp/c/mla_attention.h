/* flashcpp C ABI: FlashInfer batch MLA paged attention (plan/run).
 * Semantics, shapes and validation as in the C++ header flashcpp/mla_attention.hpp.
 * These entry points use the process-wide default runtime (created on first use from the FLASHCPP_*
 * environment: FLASHCPP_TVM_FFI_LIB, FLASHCPP_MODULE_PATH, FLASHCPP_JIT). Streams are cudaStream_t
 * passed as void*. Optional tensors are NULL when absent. */
#ifndef FLASHCPP_C_MLA_ATTENTION_H_
#define FLASHCPP_C_MLA_ATTENTION_H_
#include "flashcpp/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flashcpp_batch_mla_plan flashcpp_batch_mla_plan;

typedef enum flashcpp_mla_backend { FLASHCPP_MLA_AUTO = 0, FLASHCPP_MLA_FA2 = 1, FLASHCPP_MLA_SM90 = 2 } flashcpp_mla_backend;

typedef struct flashcpp_batch_mla_config {
  uint32_t struct_size;         /* sizeof(flashcpp_batch_mla_config): set by FLASHCPP_BATCH_MLA_CONFIG_INIT */
  int64_t num_heads;
  int64_t page_size;
  int32_t q_dtype;              /* flashcpp_dtype: FLASHCPP_F16 or FLASHCPP_BF16 */
  int32_t kv_dtype;             /* must equal q_dtype */
  int32_t causal;               /* 0 or 1 */
  int32_t return_lse_base_on_e; /* 0: log2 LSE (FlashInfer's default), 1: natural log */
  int32_t backend;              /* flashcpp_mla_backend */
  double sm_scale;              /* 0: 1/sqrt(512 + 64); else finite and > 0 */
} flashcpp_batch_mla_config;
/* bf16, not causal, log2 LSE, automatic backend, default scale; set num_heads and page_size. */
#define FLASHCPP_BATCH_MLA_CONFIG_INIT {(uint32_t)sizeof(flashcpp_batch_mla_config), 0, 0, FLASHCPP_BF16, FLASHCPP_BF16, 0, 0, 0, 0.0}

/* Plans a batch (host int32 arrays; pinned_int_workspace in page-locked host memory). */
flashcpp_status flashcpp_batch_mla_plan_create(const flashcpp_batch_mla_config* config,
                                               const flashcpp_tensor* float_workspace,
                                               const flashcpp_tensor* int_workspace,
                                               const flashcpp_tensor* pinned_int_workspace,
                                               const flashcpp_tensor* qo_indptr_host,
                                               const flashcpp_tensor* kv_indptr_host,
                                               const flashcpp_tensor* kv_len_host, void* stream,
                                               flashcpp_batch_mla_plan** out_plan);
/* The paged latent cache a batch MLA run reads. Since ABI 4.0.0 it begins with its size. */
typedef struct flashcpp_batch_mla_cache {
  uint32_t struct_size;              /* sizeof(flashcpp_batch_mla_cache): set by FLASHCPP_BATCH_MLA_CACHE_INIT */
  const flashcpp_tensor* ckv_cache;  /* [pages, page_size, 512] */
  const flashcpp_tensor* kpe_cache;  /* [pages, page_size, 64] */
  const flashcpp_tensor* kv_indices; /* int32 page ids, in the plan's kv_indptr order */
} flashcpp_batch_mla_cache;
/* No tensors yet. */
#define FLASHCPP_BATCH_MLA_CACHE_INIT {(uint32_t)sizeof(flashcpp_batch_mla_cache), NULL, NULL, NULL}
/* Runs a plan; lse may be NULL. A run that does not match the plan is refused (FLASHCPP_INVALID_ARGUMENT). */
flashcpp_status flashcpp_batch_mla_run(const flashcpp_batch_mla_plan* plan, const flashcpp_tensor* q_nope,
                                       const flashcpp_tensor* q_pe, const flashcpp_batch_mla_cache* cache,
                                       const flashcpp_tensor* out, const flashcpp_tensor* lse, void* stream);
void flashcpp_batch_mla_plan_destroy(flashcpp_batch_mla_plan* plan);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_MLA_ATTENTION_H_ */
