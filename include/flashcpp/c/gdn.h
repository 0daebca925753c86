/* flashcpp C ABI: GDN prefill (SM90).
 * Semantics, shapes and validation as in the C++ header flashcpp/gdn.hpp.
 * These entry points use the process-wide default runtime (created on first use from the FLASHCPP_*
 * environment: FLASHCPP_TVM_FFI_LIB, FLASHCPP_MODULE_PATH, FLASHCPP_JIT). Streams are cudaStream_t
 * passed as void*. Optional tensors are NULL when absent. */
#ifndef FLASHCPP_C_GDN_H_
#define FLASHCPP_C_GDN_H_
#include "flashcpp/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct flashcpp_gdn_prefill_args {
  uint32_t struct_size;                   /* sizeof(flashcpp_gdn_prefill_args): set by FLASHCPP_GDN_PREFILL_ARGS_INIT */
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
/* No tensors yet, default scale. */
#define FLASHCPP_GDN_PREFILL_ARGS_INIT \
  {(uint32_t)sizeof(flashcpp_gdn_prefill_args), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0.0}

flashcpp_status flashcpp_gdn_prefill(const flashcpp_gdn_prefill_args* args, void* stream);
/* The workspace bytes GDN prefill needs on `device`, a visible CUDA device (else FLASHCPP_INVALID_ARGUMENT). */
flashcpp_status flashcpp_gdn_prefill_workspace_bytes(int32_t device, int64_t* out_bytes);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_GDN_H_ */
