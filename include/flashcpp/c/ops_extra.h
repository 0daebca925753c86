/* flashcpp C ABI: batch MLA paged attention (plan/run), GDN prefill (SM90) and the CUTLASS fused MoE.
 * Semantics, shapes and validation as in the C++ headers flashcpp/{mla_attention,gdn,moe}.hpp.
 * These entry points use the process-wide default runtime (created on first use from the FLASHCPP_*
 * environment: FLASHCPP_TVM_FFI_LIB, FLASHCPP_MODULE_PATH, FLASHCPP_JIT). Streams are cudaStream_t
 * passed as void*. Optional tensors are NULL when absent. */
#ifndef FLASHCPP_C_OPS_EXTRA_H_
#define FLASHCPP_C_OPS_EXTRA_H_
#include "flashcpp/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- batch MLA */
typedef struct flashcpp_batch_mla_plan flashcpp_batch_mla_plan;

typedef enum flashcpp_mla_backend { FLASHCPP_MLA_AUTO = 0, FLASHCPP_MLA_FA2 = 1, FLASHCPP_MLA_SM90 = 2 } flashcpp_mla_backend;

typedef struct flashcpp_batch_mla_config {
  int64_t num_heads;
  int64_t page_size;
  int32_t q_dtype;              /* flashcpp_dtype: FLASHCPP_F16 or FLASHCPP_BF16 */
  int32_t kv_dtype;             /* must equal q_dtype */
  int32_t causal;               /* 0 or 1 */
  int32_t return_lse_base_on_e; /* 0: log2 LSE (FlashInfer's default), 1: natural log */
  int32_t backend;              /* flashcpp_mla_backend */
  double sm_scale;              /* 0: 1/sqrt(512 + 64); else finite and > 0 */
} flashcpp_batch_mla_config;

/* Plans a batch (host int32 arrays; pinned_int_workspace in page-locked host memory). */
flashcpp_status flashcpp_batch_mla_plan_create(const flashcpp_batch_mla_config* config,
                                               const flashcpp_tensor* float_workspace,
                                               const flashcpp_tensor* int_workspace,
                                               const flashcpp_tensor* pinned_int_workspace,
                                               const flashcpp_tensor* qo_indptr_host,
                                               const flashcpp_tensor* kv_indptr_host,
                                               const flashcpp_tensor* kv_len_host, void* stream,
                                               flashcpp_batch_mla_plan** out_plan);
/* Runs a plan; lse may be NULL. A run that does not match the plan is refused (FLASHCPP_INVALID_ARGUMENT). */
flashcpp_status flashcpp_batch_mla_run(const flashcpp_batch_mla_plan* plan, const flashcpp_tensor* q_nope,
                                       const flashcpp_tensor* q_pe, const flashcpp_tensor* ckv_cache,
                                       const flashcpp_tensor* kpe_cache, const flashcpp_tensor* kv_indices,
                                       const flashcpp_tensor* out, const flashcpp_tensor* lse, void* stream);
void flashcpp_batch_mla_plan_destroy(flashcpp_batch_mla_plan* plan);

/* ---------------------------------------------------------------- GDN prefill (SM90) */
typedef struct flashcpp_gdn_prefill_args {
  const flashcpp_tensor* output;          /* [T, Hsab, D] */
  const flashcpp_tensor* output_state;    /* [N, Hsab, D, D] f32 */
  const flashcpp_tensor* q;               /* [T, Hq, D] f16/bf16 */
  const flashcpp_tensor* k;
  const flashcpp_tensor* v;
  const flashcpp_tensor* cu_seqlens;      /* i64 [N+1] device */
  const flashcpp_tensor* cu_seqlens_host; /* optional i64 [N+1] host copy, validated when given */
  const flashcpp_tensor* input_state;     /* optional */
  const flashcpp_tensor* alpha;           /* optional f32 [T, Hsab] */
  const flashcpp_tensor* beta;            /* optional f32 [T, Hsab] */
  const flashcpp_tensor* workspace;       /* optional u8, >= flashcpp_gdn_prefill_workspace_bytes */
  double scale;                           /* 0: 1/sqrt(D) */
} flashcpp_gdn_prefill_args;

flashcpp_status flashcpp_gdn_prefill(const flashcpp_gdn_prefill_args* args, void* stream);
flashcpp_status flashcpp_gdn_prefill_workspace_bytes(int32_t device, int64_t* out_bytes);

/* ---------------------------------------------------------------- fused MoE */
typedef struct flashcpp_fused_moe_runner flashcpp_fused_moe_runner;

typedef enum flashcpp_moe_quantization {
  FLASHCPP_MOE_NONE = 0, FLASHCPP_MOE_FP8_PER_TENSOR = 1, FLASHCPP_MOE_DEEPSEEK_FP8_BLOCK_SCALE = 2
} flashcpp_moe_quantization;
typedef enum flashcpp_moe_backend {
  FLASHCPP_MOE_AUTO = 0, FLASHCPP_MOE_SM90 = 1, FLASHCPP_MOE_SM100 = 2, FLASHCPP_MOE_SM103 = 3, FLASHCPP_MOE_SM120 = 4
} flashcpp_moe_backend;

typedef struct flashcpp_fused_moe_config {
  int32_t activation_dtype; /* flashcpp_dtype */
  int32_t weight_dtype;
  int32_t output_dtype;
  int32_t quantization;     /* flashcpp_moe_quantization */
  int32_t backend;          /* flashcpp_moe_backend */
  int32_t device;
} flashcpp_fused_moe_config;

typedef struct flashcpp_fused_moe_args {
  const flashcpp_tensor* output;
  const flashcpp_tensor* input;
  const flashcpp_tensor* token_selected_experts;
  const flashcpp_tensor* token_final_scales;
  const flashcpp_tensor* fc1_weights;
  const flashcpp_tensor* fc2_weights;
  const flashcpp_tensor* fc1_bias;          /* optional */
  const flashcpp_tensor* fc2_bias;          /* optional */
  const flashcpp_tensor* fc1_dequant;       /* fp8 per-tensor */
  const flashcpp_tensor* fc2_quant;
  const flashcpp_tensor* fc2_dequant;
  const flashcpp_tensor* fc1_input_dequant;
  const flashcpp_tensor* fc1_block_scales;  /* DeepSeek FP8 block scale */
  const flashcpp_tensor* fc2_block_scales;
  int64_t activation;                       /* FlashInfer ActivationType: gelu 0, relu 1, silu 2, swiglu 3, geglu 4, relu2 6, identity 7 */
  int64_t tp_size, tp_rank, ep_size, ep_rank;
  int32_t enable_pdl;
} flashcpp_fused_moe_args;

/* Creates the runner once (FlashInfer's `init`); reuse it for every call with this configuration. */
flashcpp_status flashcpp_fused_moe_runner_create(const flashcpp_fused_moe_config* config,
                                                 flashcpp_fused_moe_runner** out_runner);
flashcpp_status flashcpp_fused_moe_run(const flashcpp_fused_moe_runner* runner, const flashcpp_fused_moe_args* args,
                                       void* stream);
void flashcpp_fused_moe_runner_destroy(flashcpp_fused_moe_runner* runner);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_OPS_EXTRA_H_ */
