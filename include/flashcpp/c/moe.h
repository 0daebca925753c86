/* flashcpp C ABI: the CUTLASS fused MoE.
 * Semantics, shapes and validation as in the C++ header flashcpp/moe.hpp.
 * These entry points use the process-wide default runtime (created on first use from the FLASHCPP_*
 * environment: FLASHCPP_TVM_FFI_LIB, FLASHCPP_MODULE_PATH, FLASHCPP_JIT). Streams are cudaStream_t
 * passed as void*. Optional tensors are NULL when absent. */
#ifndef FLASHCPP_C_MOE_H_
#define FLASHCPP_C_MOE_H_
#include "flashcpp/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flashcpp_fused_moe_runner flashcpp_fused_moe_runner;

typedef enum flashcpp_moe_quantization {
  FLASHCPP_MOE_NONE = 0, FLASHCPP_MOE_FP8_PER_TENSOR = 1, FLASHCPP_MOE_DEEPSEEK_FP8_BLOCK_SCALE = 2
} flashcpp_moe_quantization;
typedef enum flashcpp_moe_backend {
  FLASHCPP_MOE_AUTO = 0, FLASHCPP_MOE_SM90 = 1, FLASHCPP_MOE_SM100 = 2, FLASHCPP_MOE_SM103 = 3, FLASHCPP_MOE_SM120 = 4
} flashcpp_moe_backend;

typedef struct flashcpp_fused_moe_config {
  uint32_t struct_size;     /* sizeof(flashcpp_fused_moe_config): set by FLASHCPP_FUSED_MOE_CONFIG_INIT */
  int32_t activation_dtype; /* flashcpp_dtype */
  int32_t weight_dtype;
  int32_t output_dtype;
  int32_t quantization;     /* flashcpp_moe_quantization */
  int32_t backend;          /* flashcpp_moe_backend */
  int32_t device;
  int32_t auto_tune; /* 0 or 1 (since ABI 3.4.0; a caller's older struct reads 1): flashcpp::FusedMoeConfig */
} flashcpp_fused_moe_config;
/* bf16 activations, weights and output, no quantization, automatic backend, device 0, auto-tuned tactics. */
#define FLASHCPP_FUSED_MOE_CONFIG_INIT \
  {(uint32_t)sizeof(flashcpp_fused_moe_config), FLASHCPP_BF16, FLASHCPP_BF16, FLASHCPP_BF16, 0, 0, 0, 1}

typedef struct flashcpp_fused_moe_args {
  uint32_t struct_size; /* sizeof(flashcpp_fused_moe_args): set by FLASHCPP_FUSED_MOE_ARGS_INIT */
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
/* No tensors yet, swiglu, no tensor or expert parallelism, no PDL. */
#define FLASHCPP_FUSED_MOE_ARGS_INIT                                                                     \
  {(uint32_t)sizeof(flashcpp_fused_moe_args), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
   NULL, NULL, NULL, 3, 1, 0, 1, 0, 0}

/* Creates the runner once (FlashInfer's `init`); reuse it for every call with this configuration. */
flashcpp_status flashcpp_fused_moe_runner_create(const flashcpp_fused_moe_config* config,
                                                 flashcpp_fused_moe_runner** out_runner);
flashcpp_status flashcpp_fused_moe_run(const flashcpp_fused_moe_runner* runner, const flashcpp_fused_moe_args* args,
                                       void* stream);
/* Chooses the runner's GEMM tactics for calls shaped like *args (FusedMoeRunner::tune in flashcpp/moe.hpp):
 * times every candidate of both grouped GEMMs on `stream` and synchronizes it; later runs of the same problem
 * shape (hidden and intermediate sizes, experts, top_k, activation, biases, tp/ep sizes and ranks:
 * MoeProblemShape in flashcpp/moe.hpp) whose token count falls in the same power-of-two bucket use the tactics chosen; runs of
 * other shapes do not. *out_gemm1 / *out_gemm2 (each may be NULL) receive them (-1: the runner's default;
 * DeepSeek FP8 block-scale has only that). Since ABI 3.1.0. */
flashcpp_status flashcpp_fused_moe_tune(flashcpp_fused_moe_runner* runner, const flashcpp_fused_moe_args* args,
                                        void* stream, int64_t* out_gemm1, int64_t* out_gemm2);
/* The shape-independent tactics of the bucket of `tokens` (-1: the runner's default), and setting them (each
 * index -1 or below the runner's candidate count; tokens >= 1 for both): runs of that bucket use them for every shape
 * that flashcpp_fused_moe_tune has not tuned in that bucket; tuned shapes keep their own tactics, which
 * flashcpp_fused_moe_tactics does not report (flashcpp_fused_moe_tune returns them). E.g. restoring the
 * results of flashcpp_fused_moe_tune from an earlier process, for a runner serving one shape on the same
 * module and GPU. (FusedMoeRunner::tactics_for / set_tactics in flashcpp/moe.hpp; the C++ API also has
 * per-shape overloads.) Since ABI 3.1.0. */
flashcpp_status flashcpp_fused_moe_tactics(const flashcpp_fused_moe_runner* runner, int64_t tokens, int64_t* out_gemm1,
                                           int64_t* out_gemm2);
flashcpp_status flashcpp_fused_moe_set_tactics(flashcpp_fused_moe_runner* runner, int64_t tokens, int64_t gemm1,
                                               int64_t gemm2);
void flashcpp_fused_moe_runner_destroy(flashcpp_fused_moe_runner* runner);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_MOE_H_ */
