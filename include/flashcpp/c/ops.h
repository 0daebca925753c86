/* flashcpp C ABI: FlashInfer norm, paged KV append, single/batch prefill and single/batch decode, gated
 * activations, cascade merges and RoPE.
 * Semantics, shapes and validation as in the C++ headers flashcpp/{norm,page,attention,activation,cascade,rope}.hpp.
 * These entry points use the process-wide runtime of the C ABI (created on first use from the
 * FLASHCPP_* environment: FLASHCPP_TVM_FFI_LIB, FLASHCPP_MODULE_PATH, FLASHCPP_JIT). Streams are
 * cudaStream_t passed as void*. Optional tensors are NULL when absent. Scalars documented "0: default"
 * use the C++ default for 0. Every call validates all arguments first: FLASHCPP_INVALID_ARGUMENT means
 * nothing was launched or written; flashcpp_last_error() names the argument and the rule. Outputs
 * (caches, workspaces and scratch included) may share no byte with any other argument. */
#ifndef FLASHCPP_C_OPS_H_
#define FLASHCPP_C_OPS_H_
#include "flashcpp/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- norm (f16/bf16, in the input's dtype) */
/* out, input [tokens, hidden]; weight [hidden]. eps: 0 -> 1e-6. */
flashcpp_status flashcpp_rmsnorm(const flashcpp_tensor* out, const flashcpp_tensor* input, const flashcpp_tensor* weight,
                                 double eps, int32_t enable_pdl, void* stream);
/* out, input [tokens, heads, head_dim]; weight [head_dim]. */
flashcpp_status flashcpp_fused_qk_rmsnorm(const flashcpp_tensor* out, const flashcpp_tensor* input,
                                          const flashcpp_tensor* weight, double eps, int32_t enable_pdl, void* stream);
flashcpp_status flashcpp_gemma_rmsnorm(const flashcpp_tensor* out, const flashcpp_tensor* input,
                                       const flashcpp_tensor* weight, double eps, int32_t enable_pdl, void* stream);
/* In place: residual += input; input = norm(residual) * weight. */
flashcpp_status flashcpp_fused_add_rmsnorm(const flashcpp_tensor* input, const flashcpp_tensor* residual,
                                           const flashcpp_tensor* weight, double eps, int32_t enable_pdl, void* stream);
flashcpp_status flashcpp_gemma_fused_add_rmsnorm(const flashcpp_tensor* input, const flashcpp_tensor* residual,
                                                 const flashcpp_tensor* weight, double eps, int32_t enable_pdl,
                                                 void* stream);

/* ---------------------------------------------------------------- paged KV cache */
typedef enum flashcpp_kv_layout { FLASHCPP_KV_NHD = 0, FLASHCPP_KV_HND = 1 } flashcpp_kv_layout;

/* The paged-cache and workspace bundles begin with their size (since ABI 4.0.0), as every struct the library reads. */
typedef struct flashcpp_paged_kv_cache {
  uint32_t struct_size;                 /* sizeof(flashcpp_paged_kv_cache): set by FLASHCPP_PAGED_KV_CACHE_INIT */
  const flashcpp_tensor* k_cache;       /* NHD [pages, page_size, H_kv, D] | HND [pages, H_kv, page_size, D] */
  const flashcpp_tensor* v_cache;
  const flashcpp_tensor* indices;       /* int32 page ids */
  const flashcpp_tensor* indptr;        /* int32 [batch + 1] */
  const flashcpp_tensor* last_page_len; /* int32 [batch] */
  int32_t layout;                       /* flashcpp_kv_layout */
} flashcpp_paged_kv_cache;
/* No tensors yet, NHD. */
#define FLASHCPP_PAGED_KV_CACHE_INIT \
  {(uint32_t)sizeof(flashcpp_paged_kv_cache), NULL, NULL, NULL, NULL, NULL, FLASHCPP_KV_NHD}

flashcpp_status flashcpp_append_paged_kv_cache(const flashcpp_tensor* append_key, const flashcpp_tensor* append_value,
                                               const flashcpp_tensor* batch_indices, const flashcpp_tensor* positions,
                                               const flashcpp_paged_kv_cache* cache, void* stream);
typedef struct flashcpp_paged_mla_kv_cache {
  uint32_t struct_size;                 /* sizeof(flashcpp_paged_mla_kv_cache): set by FLASHCPP_PAGED_MLA_KV_CACHE_INIT */
  const flashcpp_tensor* ckv_cache;     /* [pages, page_size, 512] */
  const flashcpp_tensor* kpe_cache;     /* [pages, page_size, 64] */
  const flashcpp_tensor* indices;       /* int32 page ids */
  const flashcpp_tensor* indptr;        /* int32 [batch + 1] */
  const flashcpp_tensor* last_page_len; /* int32 [batch] */
} flashcpp_paged_mla_kv_cache;
#define FLASHCPP_PAGED_MLA_KV_CACHE_INIT {(uint32_t)sizeof(flashcpp_paged_mla_kv_cache), NULL, NULL, NULL, NULL, NULL}

flashcpp_status flashcpp_append_paged_mla_kv_cache(const flashcpp_tensor* append_ckv, const flashcpp_tensor* append_kpe,
                                                   const flashcpp_tensor* batch_indices,
                                                   const flashcpp_tensor* positions,
                                                   const flashcpp_paged_mla_kv_cache* cache, void* stream);

/* ---------------------------------------------------------------- attention */
typedef enum flashcpp_attention_backend {
  FLASHCPP_ATTENTION_AUTO = 0, FLASHCPP_ATTENTION_FA2 = 1, FLASHCPP_ATTENTION_FA3 = 2
} flashcpp_attention_backend;
typedef enum flashcpp_decode_backend {
  FLASHCPP_DECODE_AUTO = 0, FLASHCPP_DECODE_CUDA_CORES = 1, FLASHCPP_DECODE_TENSOR_CORES = 2
} flashcpp_decode_backend;

typedef struct flashcpp_attention_options {
  uint32_t struct_size;          /* sizeof(flashcpp_attention_options): set by the initializers */
  int32_t causal;                /* prefill only */
  int32_t layout;                /* flashcpp_kv_layout */
  int64_t window_left;           /* -1: no sliding window */
  double logits_soft_cap;        /* 0: off */
  double sm_scale;               /* 0: 1/sqrt(head_dim_qk) */
  int32_t decode_backend;        /* single decode: flashcpp_decode_backend */
  int32_t use_fp16_qk_reduction; /* single prefill, f16 only */
} flashcpp_attention_options;
#define FLASHCPP_ATTENTION_OPTIONS_INIT {(uint32_t)sizeof(flashcpp_attention_options), 0, 0, -1, 0.0, 0.0, 0, 0}

/* Fills `options` with the defaults (non-causal, NHD, no window, no cap, default scale, automatic). */
void flashcpp_attention_options_init(flashcpp_attention_options* options);

/* tmp: 1-D CUDA scratch (size: single_prefill_tmp_bytes / single_decode_tmp_bytes in flashcpp/attention.hpp)
 * or NULL (never split the KV sequence). lse may be NULL. */
flashcpp_status flashcpp_single_prefill(const flashcpp_tensor* q, const flashcpp_tensor* k, const flashcpp_tensor* v,
                                        const flashcpp_tensor* out, const flashcpp_tensor* lse,
                                        const flashcpp_tensor* tmp, const flashcpp_attention_options* options,
                                        void* stream);
flashcpp_status flashcpp_single_decode(const flashcpp_tensor* q, const flashcpp_tensor* k, const flashcpp_tensor* v,
                                       const flashcpp_tensor* out, const flashcpp_tensor* lse,
                                       const flashcpp_tensor* tmp, const flashcpp_attention_options* options,
                                       void* stream);

typedef struct flashcpp_workspace {
  uint32_t struct_size;                     /* sizeof(flashcpp_workspace): set by FLASHCPP_WORKSPACE_INIT */
  const flashcpp_tensor* float_buffer;      /* CUDA, 1-D */
  const flashcpp_tensor* int_buffer;        /* CUDA, 1-D */
  const flashcpp_tensor* pinned_int_buffer; /* page-locked host, 1-D, >= int_buffer */
} flashcpp_workspace;
#define FLASHCPP_WORKSPACE_INIT {(uint32_t)sizeof(flashcpp_workspace), NULL, NULL, NULL}
/* FlashInfer's recommended workspace sizes (128 MiB float, 8 MiB int). */
void flashcpp_recommended_workspace_bytes(int64_t* float_bytes, int64_t* int_bytes);

typedef enum flashcpp_kv_storage { FLASHCPP_KV_PAGED = 0, FLASHCPP_KV_RAGGED = 1 } flashcpp_kv_storage;

typedef struct flashcpp_batch_prefill_config {
  uint32_t struct_size; /* sizeof(flashcpp_batch_prefill_config): set by the initializers */
  int32_t kv_storage;   /* flashcpp_kv_storage */
  int64_t num_qo_heads, num_kv_heads, head_dim_qk;
  int64_t head_dim_vo; /* 0: head_dim_qk */
  int64_t page_size;   /* paged only */
  int32_t q_dtype, kv_dtype;
  int32_t o_dtype;     /* -1: q_dtype */
  int32_t layout, causal;
  int64_t window_left; /* -1: none */
  double logits_soft_cap, sm_scale;
  int32_t backend;     /* flashcpp_attention_backend */
  int32_t enable_cuda_graph, enable_pdl;
  int64_t fixed_split_size; /* -1: off (fa2 only) */
  int32_t disable_split_kv;
} flashcpp_batch_prefill_config;
/* Paged, bf16 q and KV, o_dtype as q, no window, fixed_split_size off, everything else 0 (automatic). */
#define FLASHCPP_BATCH_PREFILL_CONFIG_INIT \
  {(uint32_t)sizeof(flashcpp_batch_prefill_config), 0, 0, 0, 0, 0, 0, FLASHCPP_BF16, FLASHCPP_BF16, -1, 0, 0, -1, 0.0, 0.0, 0, 0, 0, -1, 0}
void flashcpp_batch_prefill_config_init(flashcpp_batch_prefill_config* config);

typedef struct flashcpp_batch_prefill_plan flashcpp_batch_prefill_plan;
/* Host int32 arrays; kv_last_page_len_host for paged only; kv_indices_host optional (range-checked at run). */
flashcpp_status flashcpp_batch_prefill_plan_create(const flashcpp_batch_prefill_config* config,
                                                   const flashcpp_workspace* workspace,
                                                   const flashcpp_tensor* qo_indptr_host,
                                                   const flashcpp_tensor* kv_indptr_host,
                                                   const flashcpp_tensor* kv_last_page_len_host,
                                                   const flashcpp_tensor* kv_indices_host, void* stream,
                                                   flashcpp_batch_prefill_plan** out_plan);
/* Ragged (unpaged) keys and values of a batch: request i owns rows indptr[i] .. indptr[i + 1] of k and v. */
typedef struct flashcpp_ragged_kv {
  uint32_t struct_size;          /* sizeof(flashcpp_ragged_kv): set by FLASHCPP_RAGGED_KV_INIT (since ABI 4.0.0) */
  const flashcpp_tensor* k;      /* NHD [rows, H_kv, D_qk] | HND [H_kv, rows, D_qk] */
  const flashcpp_tensor* v;      /* same layout, D_vo */
  const flashcpp_tensor* indptr; /* int32 [batch + 1], device */
} flashcpp_ragged_kv;
#define FLASHCPP_RAGGED_KV_INIT {(uint32_t)sizeof(flashcpp_ragged_kv), NULL, NULL, NULL}
flashcpp_status flashcpp_batch_prefill_run_ragged(const flashcpp_batch_prefill_plan* plan, const flashcpp_tensor* q,
                                                  const flashcpp_ragged_kv* kv, const flashcpp_tensor* qo_indptr,
                                                  const flashcpp_tensor* out, const flashcpp_tensor* lse, void* stream);
flashcpp_status flashcpp_batch_prefill_run_paged(const flashcpp_batch_prefill_plan* plan, const flashcpp_tensor* q,
                                                 const flashcpp_paged_kv_cache* cache, const flashcpp_tensor* qo_indptr,
                                                 const flashcpp_tensor* out, const flashcpp_tensor* lse, void* stream);
void flashcpp_batch_prefill_plan_destroy(flashcpp_batch_prefill_plan* plan);

typedef struct flashcpp_batch_decode_config {
  uint32_t struct_size; /* sizeof(flashcpp_batch_decode_config): set by the initializers */
  int64_t num_qo_heads, num_kv_heads, head_dim, page_size;
  int32_t q_dtype, kv_dtype;
  int32_t o_dtype; /* -1: q_dtype */
  int32_t layout;
  int64_t window_left;
  double logits_soft_cap, sm_scale;
  int32_t backend;         /* flashcpp_decode_backend */
  int32_t prefill_backend; /* flashcpp_attention_backend, tensor-core path */
  int32_t enable_cuda_graph, enable_pdl;
  /* Since ABI 4.3.0 (a smaller struct_size reads them as in the initializer): the tensor-core path's split-KV
   * controls, as for batch prefill; a plan on CUDA cores or fa3 refuses them (flashcpp/attention.hpp). */
  int64_t fixed_split_size; /* -1: off */
  int32_t disable_split_kv;
} flashcpp_batch_decode_config;
/* bf16 q and KV, o_dtype as q, no window, fixed_split_size off, everything else 0 (automatic). */
#define FLASHCPP_BATCH_DECODE_CONFIG_INIT \
  {(uint32_t)sizeof(flashcpp_batch_decode_config), 0, 0, 0, 0, FLASHCPP_BF16, FLASHCPP_BF16, -1, 0, -1, 0.0, 0.0, 0, 0, 0, 0, -1, 0}
void flashcpp_batch_decode_config_init(flashcpp_batch_decode_config* config);

typedef struct flashcpp_batch_decode_plan flashcpp_batch_decode_plan;
flashcpp_status flashcpp_batch_decode_plan_create(const flashcpp_batch_decode_config* config,
                                                  const flashcpp_workspace* workspace,
                                                  const flashcpp_tensor* kv_indptr_host,
                                                  const flashcpp_tensor* kv_last_page_len_host,
                                                  const flashcpp_tensor* kv_indices_host, void* stream,
                                                  flashcpp_batch_decode_plan** out_plan);
flashcpp_status flashcpp_batch_decode_run(const flashcpp_batch_decode_plan* plan, const flashcpp_tensor* q,
                                          const flashcpp_paged_kv_cache* cache, const flashcpp_tensor* out,
                                          const flashcpp_tensor* lse, void* stream);
/* 1 when the plan runs the tensor-core (prefill-kernel) path, 0 otherwise (also for NULL). */
int32_t flashcpp_batch_decode_uses_tensor_cores(const flashcpp_batch_decode_plan* plan);
void flashcpp_batch_decode_plan_destroy(flashcpp_batch_decode_plan* plan);

/* ---------------------------------------------------------------- gated activations (since ABI 3.3.0) */
/* out [..., d] = act(input[..., :d]) * input[..., d:]; input [..., 2d], f16/bf16, both contiguous, d a multiple
 * of 8 (flashcpp/activation.hpp). */
flashcpp_status flashcpp_silu_and_mul(const flashcpp_tensor* out, const flashcpp_tensor* input, int32_t enable_pdl,
                                      void* stream);
flashcpp_status flashcpp_gelu_and_mul(const flashcpp_tensor* out, const flashcpp_tensor* input, int32_t enable_pdl,
                                      void* stream);
flashcpp_status flashcpp_gelu_tanh_and_mul(const flashcpp_tensor* out, const flashcpp_tensor* input,
                                           int32_t enable_pdl, void* stream);

/* ---------------------------------------------------------------- cascade merges (since ABI 3.3.0) */
/* Attention states (v, s), s the base-2 log-sum-exp (f32), v f16/bf16; all contiguous (flashcpp/cascade.hpp).
 * v_* [tokens, heads, head_dim], s_* [tokens, heads]. */
flashcpp_status flashcpp_merge_state(const flashcpp_tensor* v_a, const flashcpp_tensor* s_a,
                                     const flashcpp_tensor* v_b, const flashcpp_tensor* s_b,
                                     const flashcpp_tensor* v_merged, const flashcpp_tensor* s_merged, void* stream);
/* In place into (v, s), for the tokens whose mask byte (u8/bool [tokens]; NULL: all) is non-zero. */
flashcpp_status flashcpp_merge_state_in_place(const flashcpp_tensor* v, const flashcpp_tensor* s,
                                              const flashcpp_tensor* v_other, const flashcpp_tensor* s_other,
                                              const flashcpp_tensor* mask, void* stream);
/* v [tokens, index_sets, heads, head_dim], s [tokens, index_sets, heads] -> v_merged, s_merged. */
flashcpp_status flashcpp_merge_states(const flashcpp_tensor* v, const flashcpp_tensor* s,
                                      const flashcpp_tensor* v_merged, const flashcpp_tensor* s_merged, void* stream);

/* ---------------------------------------------------------------- RoPE (since ABI 3.3.0) */
/* q [tokens, H_q, head_dim], k [tokens, H_k, head_dim] f16/bf16 (dims 0-1 may be strided), q_rope/k_rope the same
 * shapes or exactly q/k (in place), pos_ids int32/int64 [tokens] (flashcpp/rope.hpp). rotary_dim 0: head_dim;
 * interleave 0 NeoX halves, 1 GPT-J pairs; rope_scale 0: 1; rope_theta 0: 1e4. */
flashcpp_status flashcpp_apply_rope_pos_ids(const flashcpp_tensor* q, const flashcpp_tensor* k,
                                            const flashcpp_tensor* q_rope, const flashcpp_tensor* k_rope,
                                            const flashcpp_tensor* pos_ids, int64_t rotary_dim, int32_t interleave,
                                            double rope_scale, double rope_theta, void* stream);
/* Llama 3.1 scaling: low_freq_factor 0: 1, high_freq_factor 0: 4, old_context_length 0: 8192. */
flashcpp_status flashcpp_apply_llama31_rope_pos_ids(const flashcpp_tensor* q, const flashcpp_tensor* k,
                                                    const flashcpp_tensor* q_rope, const flashcpp_tensor* k_rope,
                                                    const flashcpp_tensor* pos_ids, int64_t rotary_dim,
                                                    int32_t interleave, double rope_scale, double rope_theta,
                                                    double low_freq_factor, double high_freq_factor,
                                                    double old_context_length, void* stream);
/* cos_sin_cache f32 [max_position, rotary_dim]: cos then sin per row; every pos_ids value a row of it. */
flashcpp_status flashcpp_apply_rope_with_cos_sin_cache(const flashcpp_tensor* q, const flashcpp_tensor* k,
                                                       const flashcpp_tensor* q_rope, const flashcpp_tensor* k_rope,
                                                       const flashcpp_tensor* cos_sin_cache,
                                                       const flashcpp_tensor* pos_ids, int32_t interleave,
                                                       void* stream);
/* since ABI 3.4.0: the ragged batch. Request b's tokens [indptr[b], indptr[b+1]) at positions offsets[b] + 0, 1, ...;
 * indptr [batch + 1] and offsets [batch] on the device, contiguous, both int32 or both int64, their values read on the
 * device only (indptr from 0 or above, never decreasing, at most tokens); rows outside [indptr[0], indptr[batch]) of
 * q_rope/k_rope are not written. Scalars as flashcpp_apply_rope_pos_ids (0: the default). */
flashcpp_status flashcpp_apply_rope(const flashcpp_tensor* q, const flashcpp_tensor* k, const flashcpp_tensor* q_rope,
                                    const flashcpp_tensor* k_rope, const flashcpp_tensor* indptr,
                                    const flashcpp_tensor* offsets, int64_t rotary_dim, int32_t interleave,
                                    double rope_scale, double rope_theta, void* stream);
/* since ABI 3.4.0: scalars as flashcpp_apply_llama31_rope_pos_ids. */
flashcpp_status flashcpp_apply_llama31_rope(const flashcpp_tensor* q, const flashcpp_tensor* k,
                                            const flashcpp_tensor* q_rope, const flashcpp_tensor* k_rope,
                                            const flashcpp_tensor* indptr, const flashcpp_tensor* offsets,
                                            int64_t rotary_dim, int32_t interleave, double rope_scale,
                                            double rope_theta, double low_freq_factor, double high_freq_factor,
                                            double old_context_length, void* stream);

/* since ABI 3.4.0: RoPE + FP8 quantization (flashcpp::rope_quantize_fp8, flashcpp/rope.hpp). q_rope [tokens, H_q,
 * rope_dim], q_nope [tokens, H_q, no_rope_dim]; k_rope [tokens, H_k, rope_dim] and k_nope [tokens, H_k, no_rope_dim], or
 * MLA's k_rope [tokens, rope_dim] and k_nope [tokens, no_rope_dim]; f16/bf16 in, e4m3/e5m2 out (each output the shape
 * of its input, sharing no byte with any argument); cos_sin_cache f32 [max_position, rope_dim] (cos then sin per row);
 * pos_ids int32/int64 [tokens], each a row of the cache (read on the device only). No nope part: q_nope, k_nope,
 * q_nope_out and k_nope_out all NULL; some NULL and some not is refused. */
typedef struct flashcpp_rope_quantize_args {
  uint32_t struct_size; /* sizeof(flashcpp_rope_quantize_args): set by FLASHCPP_ROPE_QUANTIZE_ARGS_INIT */
  const flashcpp_tensor* q_rope;
  const flashcpp_tensor* k_rope;
  const flashcpp_tensor* q_rope_out;
  const flashcpp_tensor* k_rope_out;
  const flashcpp_tensor* q_nope; /* optional, with the other three nope tensors */
  const flashcpp_tensor* k_nope;
  const flashcpp_tensor* q_nope_out;
  const flashcpp_tensor* k_nope_out;
  const flashcpp_tensor* cos_sin_cache;
  const flashcpp_tensor* pos_ids;
  int32_t interleave;    /* 0 NeoX halves (FlashInfer's is_neox), 1 GPT-J pairs */
  int32_t enable_pdl;    /* 0 or 1 */
  double quant_scale_q;  /* q parts are stored as fp8(value x quant_scale_q); finite, > 0, at most FLT_MAX */
  double quant_scale_kv; /* k parts as fp8(value x quant_scale_kv) */
} flashcpp_rope_quantize_args;
/* No tensors yet, NeoX, no PDL, scales 1. */
#define FLASHCPP_ROPE_QUANTIZE_ARGS_INIT                                                                      \
  {(uint32_t)sizeof(flashcpp_rope_quantize_args), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, \
   1.0, 1.0}
flashcpp_status flashcpp_rope_quantize_fp8(const flashcpp_rope_quantize_args* args, void* stream);

/* since ABI 3.6.0: RoPE + FP8 quantization of q, k (and v) appended to a paged cache in one kernel
 * (flashcpp::rope_quantize_append_paged_kv_cache, flashcpp/rope.hpp, for the rules). q_rope [tokens, H_q, rope_dim],
 * q_nope [tokens, H_q, no_rope_dim] (no_rope_dim a multiple of rope_dim) written to q_rope_out / q_nope_out (fp8);
 * GQA/MHA (kv_cache): k_rope [tokens, H_k, rope_dim], k_nope [tokens, H_k, no_rope_dim], v [tokens, H_k, rope_dim +
 * no_rope_dim], fp8 k/v caches of head_dim rope_dim + no_rope_dim; MLA (mla_cache): k_rope [tokens, rope_dim], k_nope
 * [tokens, no_rope_dim], v NULL, fp8 ckv [pages, page_size, no_rope_dim] and kpe [pages, page_size, rope_dim] caches.
 * batch_indices, positions int32 [tokens] (read on the device only). Exactly one of kv_cache and mla_cache. */
typedef struct flashcpp_rope_quantize_append_args {
  uint32_t struct_size; /* sizeof(flashcpp_rope_quantize_append_args): set by FLASHCPP_ROPE_QUANTIZE_APPEND_ARGS_INIT */
  const flashcpp_tensor* q_rope;
  const flashcpp_tensor* k_rope;
  const flashcpp_tensor* q_nope;
  const flashcpp_tensor* k_nope;
  const flashcpp_tensor* v; /* GQA/MHA only; NULL with mla_cache */
  const flashcpp_tensor* q_rope_out;
  const flashcpp_tensor* q_nope_out;
  const flashcpp_tensor* cos_sin_cache;
  const flashcpp_tensor* pos_ids;
  const flashcpp_tensor* batch_indices;
  const flashcpp_tensor* positions;
  const flashcpp_paged_kv_cache* kv_cache;      /* GQA/MHA, or NULL */
  const flashcpp_paged_mla_kv_cache* mla_cache; /* MLA, or NULL */
  int32_t interleave;    /* 0 NeoX halves (FlashInfer's is_neox), 1 GPT-J pairs */
  int32_t enable_pdl;    /* 0 or 1 */
  double quant_scale_q;  /* q parts are stored as fp8(value x quant_scale_q); finite, > 0, at most FLT_MAX */
  double quant_scale_kv; /* k and v as fp8(value x quant_scale_kv) */
} flashcpp_rope_quantize_append_args;
/* No tensors yet, NeoX, no PDL, scales 1. */
#define FLASHCPP_ROPE_QUANTIZE_APPEND_ARGS_INIT                                                                     \
  {(uint32_t)sizeof(flashcpp_rope_quantize_append_args), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
   NULL, NULL, NULL, 0, 0, 1.0, 1.0}
flashcpp_status flashcpp_rope_quantize_append_paged_kv_cache(const flashcpp_rope_quantize_append_args* args,
                                                             void* stream);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_OPS_H_ */
