/* flashcpp C ABI: sparse MLA (DeepSeek V3.2 / V4 attention) and dense MLA decode, with FlashMLA's semantics.
 * See include/flashcpp/mla.hpp for the shapes, dtypes, layouts and the rules each call validates.
 * Every function validates all of its arguments before it launches anything or writes any output; on
 * failure it returns a status and flashcpp_last_error() names the argument and the broken rule.
 * Outputs (out, lse, max_logits, the plan buffers) may share no byte with any other argument.
 * Launches are asynchronous on `stream` (a cudaStream_t; NULL = the legacy default stream). */
#ifndef FLASHCPP_C_MLA_H_
#define FLASHCPP_C_MLA_H_
#include <stddef.h>
#include <stdint.h>

#include "flashcpp/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHCPP_MLA_FP8_BYTES_PER_TOKEN 656
#define FLASHCPP_MLA_SCHED_META_INTS 8

typedef struct flashcpp_mla_device_info {
  int32_t device_id;
  int32_t cc_major, cc_minor;
  int32_t sm_count;
  int32_t sparse_supported; /* 1: the sparse MLA kernels can run on this device with this build */
  int32_t hopper_kernel;    /* 1: SM 9.0, the fast Hopper kernel is tried first */
} flashcpp_mla_device_info;

/* Facts about `device_id`. FLASHCPP_INVALID_ARGUMENT for an unknown device or a NULL `info`. */
flashcpp_status flashcpp_mla_get_device_info(int32_t device_id, flashcpp_mla_device_info* info);

/* Per-call scalars of sparse prefill and decode. Each begins with its own size, so later versions can add
 * fields at the end: start from FLASHCPP_MLA_OPTIONS_INIT (or set struct_size = sizeof(flashcpp_mla_options)). */
typedef struct flashcpp_mla_options {
  uint32_t struct_size;
  float sm_scale; /* 0: 1/sqrt(d_qk) of q; else finite and > 0 */
  int32_t d_v;    /* must be 512 */
} flashcpp_mla_options;
#define FLASHCPP_MLA_OPTIONS_INIT {(uint32_t)sizeof(flashcpp_mla_options), 0.0f, 512}

/* The tensors of a sparse prefill (NULL for an absent optional one). Since ABI 4.0.0 it begins with its size. */
typedef struct flashcpp_mla_prefill_tensors {
  uint32_t struct_size;               /* sizeof(flashcpp_mla_prefill_tensors): set by FLASHCPP_MLA_PREFILL_TENSORS_INIT */
  const flashcpp_tensor* q;           /* bf16 [s_q, h_q, d_qk] */
  const flashcpp_tensor* kv;          /* bf16 [s_kv, 1, d_qk] */
  const flashcpp_tensor* indices;     /* i32 [s_q, 1, topk] */
  const flashcpp_tensor* attn_sink;   /* f32 [h_q] or NULL */
  const flashcpp_tensor* topk_length; /* i32 [s_q] or NULL */
  const flashcpp_tensor* out;         /* bf16 [s_q, h_q, 512] */
  const flashcpp_tensor* max_logits;  /* f32 [s_q, h_q] or NULL */
  const flashcpp_tensor* lse;         /* f32 [s_q, h_q] */
} flashcpp_mla_prefill_tensors;
/* No tensors yet. */
#define FLASHCPP_MLA_PREFILL_TENSORS_INIT \
  {(uint32_t)sizeof(flashcpp_mla_prefill_tensors), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL}

/* Sparse prefill (flashcpp/mla.hpp, sparse_prefill). */
flashcpp_status flashcpp_mla_sparse_prefill(const flashcpp_mla_prefill_tensors* tensors,
                                            const flashcpp_mla_options* options, void* stream);

typedef struct flashcpp_mla_decode_config {
  uint32_t struct_size;                /* sizeof(flashcpp_mla_decode_config): set by FLASHCPP_MLA_DECODE_CONFIG_INIT */
  int32_t batch, s_q, h_q, d_qk, topk; /* d_qk 576 (V3.2 cache) or 512 (V4); topk a positive multiple of 64 */
  int32_t num_sms;                     /* 0: the SM count of `device_id` */
  int32_t device_id;                   /* a visible CUDA device, in the size query too */
  int32_t extra_topk;                  /* V4 only: the extra pool's topk, 0 (none) or a positive multiple of 64 */
} flashcpp_mla_decode_config;
/* d_qk 576 (V3.2), the device's SM count, device 0, no extra pool; set batch, s_q, h_q and topk. */
#define FLASHCPP_MLA_DECODE_CONFIG_INIT {(uint32_t)sizeof(flashcpp_mla_decode_config), 0, 0, 0, 576, 0, 0, 0, 0}

typedef struct flashcpp_mla_decode_plan_sizes {
  int32_t num_sm_parts; /* 0 when not split */
  int32_t split;        /* 0: run needs no plan buffers (pass NULL) */
  int64_t sched_meta_elems, num_splits_elems, lse_accum_elems, o_accum_elems; /* i32, i32, f32, f32 (opaque: bf16
                                                                                 partial rows, two to an element) */
} flashcpp_mla_decode_plan_sizes;

/* Decode plan. With sched_meta == num_splits == NULL: only computes `sizes` (no device work; config->device_id
 * must still name a visible CUDA device, so without a GPU every size query is FLASHCPP_INVALID_ARGUMENT; the C++
 * mla::decode_plan_sizes takes an SM count and no device).
 * Otherwise writes the split-KV schedule into the caller's buffers on `stream` (sched_meta i32
 * [num_sm_parts, 8], num_splits i32 [num_splits_elems]: batch + 1, or fewer where only the requests of a short
 * last wave are split; both contiguous on config->device_id) and fills `sizes`.
 * This schedule depends only on the config, so one plan serves every step of that shape (CUDA-graph safe).
 * `sizes` (may be NULL) is written only on success. */
flashcpp_status flashcpp_mla_decode_plan(const flashcpp_mla_decode_config* config, const flashcpp_tensor* sched_meta,
                                         const flashcpp_tensor* num_splits, flashcpp_mla_decode_plan_sizes* sizes,
                                         void* stream);

/* flashcpp_mla_decode_plan with the step's lengths (since ABI 3.5.0): the split schedule balanced by the tiles each
 * request runs (flashcpp/mla.hpp, DecodePlanLengths). topk_length and extra_topk_length: the i32 [batch] tensors the
 * step's runs pass (contiguous, on config->device_id; either may be NULL; extra_topk_length only for a V4 config
 * with an extra pool). Results never depend on them: a run with other lengths is exact, only less balanced. Plan
 * again when a step's lengths change. Both buffers NULL: the size query, as flashcpp_mla_decode_plan. */
flashcpp_status flashcpp_mla_decode_plan_by_lengths(const flashcpp_mla_decode_config* config,
                                                    const flashcpp_tensor* sched_meta, const flashcpp_tensor* num_splits,
                                                    const flashcpp_tensor* topk_length,
                                                    const flashcpp_tensor* extra_topk_length,
                                                    flashcpp_mla_decode_plan_sizes* sizes, void* stream);

/* The tensors of a sparse decode (NULL for an absent optional one). Shapes and rules: flashcpp/mla.hpp,
 * sparse_decode (the V3.2 cache) and sparse_decode_v4 (the V4 cache, with its extra pool). Since ABI 4.0.0 it begins
 * with its size. */
typedef struct flashcpp_mla_decode_tensors {
  uint32_t struct_size;                     /* sizeof(flashcpp_mla_decode_tensors): FLASHCPP_MLA_DECODE_TENSORS_INIT */
  const flashcpp_tensor* q;                 /* bf16 [b, s_q, h_q, 576 (V3.2) or 512 (V4)] */
  const flashcpp_tensor* kv_cache;          /* V3.2: u8/i8/e4m3 [num_blocks, block_size, 1, 656];
                                               V4 pages: [num_blocks, block_size, 1, 584] */
  const flashcpp_tensor* indices;           /* i32 [b, s_q, topk] */
  const flashcpp_tensor* topk_length;       /* i32 [b] or NULL */
  const flashcpp_tensor* attn_sink;         /* f32 [h_q] or NULL */
  const flashcpp_tensor* out;               /* bf16 [b, s_q, h_q, 512] (any strides) */
  const flashcpp_tensor* lse;               /* f32 [b, s_q, h_q] (any strides) */
  const flashcpp_tensor* sched_meta;        /* the plan buffers, NULL when the plan is not split: from */
  const flashcpp_tensor* num_splits;        /*   flashcpp_mla_decode_plan with the same config; lse_accum and */
  const flashcpp_tensor* lse_accum;         /*   o_accum f32 with at least the planned element counts, */
  const flashcpp_tensor* o_accum;           /*   16-byte aligned */
  const flashcpp_tensor* extra_kv_cache;    /* V4 only: the extra pool's pages, or NULL */
  const flashcpp_tensor* extra_indices;     /* V4 only: i32 [b, s_q, extra_topk]; given iff extra_kv_cache is */
  const flashcpp_tensor* extra_topk_length; /* V4 only: i32 [b] or NULL (extra pool only) */
} flashcpp_mla_decode_tensors;
/* No tensors yet. */
#define FLASHCPP_MLA_DECODE_TENSORS_INIT                                                                          \
  {(uint32_t)sizeof(flashcpp_mla_decode_tensors), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
   NULL, NULL, NULL}

/* Sparse decode over the V3.2 FP8 cache; the extra_* members must be NULL. */
flashcpp_status flashcpp_mla_sparse_decode(const flashcpp_mla_decode_config* config,
                                           const flashcpp_mla_decode_tensors* tensors,
                                           const flashcpp_mla_options* options, void* stream);

/* Sparse decode over the DeepSeek V4 FP8 cache (FlashMLA's "MODEL1"), with an optional extra pool attended
 * in the same softmax. `config` with d_qk 512 and extra_topk (0 without the extra pool). */
flashcpp_status flashcpp_mla_sparse_decode_v4(const flashcpp_mla_decode_config* config,
                                              const flashcpp_mla_decode_tensors* tensors,
                                              const flashcpp_mla_options* options, void* stream);

/* Dense decode (flashcpp/mla.hpp, dense_decode_plan / dense_decode): every cached token of each request attended,
 * over a bf16 or (since ABI 4.2.0) fp16 paged cache, or the V3.2 FP8 rows. Plan once per decode step (the
 * schedule, slot lists and token lengths, built on the device from that step's block table and lengths), then run
 * each layer on it; both asynchronous and CUDA-graph safe. Since ABI 3.2.0. */
typedef struct flashcpp_mla_dense_decode_config {
  uint32_t struct_size;          /* sizeof(flashcpp_mla_dense_decode_config): FLASHCPP_MLA_DENSE_DECODE_CONFIG_INIT */
  int32_t batch, s_q, h_q;       /* s_q in [1, 65535], h_q in [1, 1024] */
  int32_t block_size;            /* tokens per cache block (kv_cache dim 1), >= 1 */
  int32_t max_blocks;            /* block_table dim 1, >= 1 */
  int32_t causal;                /* 0 or 1: token s of s_q sees cache_seqlens - (s_q - 1 - s) tokens */
  int32_t num_sms;               /* 0: the SM count of `device_id` */
  int32_t device_id;             /* a visible CUDA device, in the size query too */
} flashcpp_mla_dense_decode_config;
#define FLASHCPP_MLA_DENSE_DECODE_CONFIG_INIT {(uint32_t)sizeof(flashcpp_mla_dense_decode_config), 0, 1, 0, 0, 0, 0, 0, 0}

/* Element counts of the workspace buffers (all contiguous on config->device_id): sched_meta i32 [num_sm_parts, 8],
 * num_splits i32, lse_accum f32, o_accum f32, indices i32, token_lengths i32 (all but num_splits 16-byte aligned). */
typedef struct flashcpp_mla_dense_decode_sizes {
  int32_t num_sm_parts, reserved;
  int64_t sched_meta_elems, num_splits_elems, lse_accum_elems, o_accum_elems, indices_elems, token_lengths_elems;
} flashcpp_mla_dense_decode_sizes;

/* Fills `sizes` (not NULL) for `config`; no device work. Since ABI 3.2.0. */
flashcpp_status flashcpp_mla_dense_decode_sizes_for(const flashcpp_mla_dense_decode_config* config,
                                                    flashcpp_mla_dense_decode_sizes* sizes);

/* The workspace (all members required): the plan writes sched_meta, num_splits, indices and token_lengths, each run
 * lse_accum and o_accum. Since ABI 4.0.0 it begins with its size. */
typedef struct flashcpp_mla_dense_decode_workspace {
  uint32_t struct_size; /* sizeof(flashcpp_mla_dense_decode_workspace): FLASHCPP_MLA_DENSE_DECODE_WORKSPACE_INIT */
  const flashcpp_tensor* sched_meta;
  const flashcpp_tensor* num_splits;
  const flashcpp_tensor* lse_accum;
  const flashcpp_tensor* o_accum;
  const flashcpp_tensor* indices;
  const flashcpp_tensor* token_lengths;
} flashcpp_mla_dense_decode_workspace;
/* No tensors yet. */
#define FLASHCPP_MLA_DENSE_DECODE_WORKSPACE_INIT \
  {(uint32_t)sizeof(flashcpp_mla_dense_decode_workspace), NULL, NULL, NULL, NULL, NULL, NULL}

/* Plans one decode step on `stream`: block_table i32 [batch, max_blocks] (last dim contiguous), cache_seqlens i32
 * [batch] (contiguous). Since ABI 3.2.0. */
flashcpp_status flashcpp_mla_dense_decode_plan(const flashcpp_mla_dense_decode_config* config,
                                               const flashcpp_tensor* block_table, const flashcpp_tensor* cache_seqlens,
                                               const flashcpp_mla_dense_decode_workspace* workspace, void* stream);

/* Per-call scalars of dense decode. */
typedef struct flashcpp_mla_dense_decode_options {
  uint32_t struct_size;
  float sm_scale; /* 0: 1/sqrt(576); else finite and > 0 */
} flashcpp_mla_dense_decode_options;
#define FLASHCPP_MLA_DENSE_DECODE_OPTIONS_INIT {(uint32_t)sizeof(flashcpp_mla_dense_decode_options), 0.0f}

/* The tensors of a dense decode (NULL only for attn_sink). Shapes and rules: flashcpp/mla.hpp, dense_decode. Since
 * ABI 4.0.0 it begins with its size. */
typedef struct flashcpp_mla_dense_decode_tensors {
  uint32_t struct_size;              /* sizeof(flashcpp_mla_dense_decode_tensors): FLASHCPP_MLA_DENSE_DECODE_TENSORS_INIT */
  const flashcpp_tensor* q;          /* bf16 or fp16 [b, s_q, h_q, 576] */
  const flashcpp_tensor* kv_cache;   /* q's dtype [num_blocks, block_size, 1, 576]; bf16 q: or u8/i8/e4m3 [.., 656] */
  const flashcpp_tensor* attn_sink;  /* f32 [h_q] or NULL */
  const flashcpp_tensor* out;        /* q's dtype [b, s_q, h_q, 512] (any strides) */
  const flashcpp_tensor* lse;        /* f32 [b, s_q, h_q] (any strides) */
} flashcpp_mla_dense_decode_tensors;
/* No tensors yet. */
#define FLASHCPP_MLA_DENSE_DECODE_TENSORS_INIT {(uint32_t)sizeof(flashcpp_mla_dense_decode_tensors), NULL, NULL, NULL, NULL, NULL}

/* Dense decode of one layer on `stream`, over the step planned in `workspace`. Since ABI 3.2.0. */
flashcpp_status flashcpp_mla_dense_decode(const flashcpp_mla_dense_decode_config* config,
                                          const flashcpp_mla_dense_decode_tensors* tensors,
                                          const flashcpp_mla_dense_decode_workspace* workspace,
                                          const flashcpp_mla_dense_decode_options* options, void* stream);

/* Quantizes bf16 [..., 576] into the V3.2 656-byte layout out u8/i8/e4m3 [..., 656] (FlashMLA's bytes).
 * Both tensors on one CUDA device (asynchronous), or both in host memory (runs on the calling thread). */
flashcpp_status flashcpp_mla_quantize_kv_cache_fp8(const flashcpp_tensor* kv, const flashcpp_tensor* out, void* stream);

/* Quantizes bf16 pages kv [num_blocks, block_size, 1, 512] into the DeepSeek V4 layout (FlashMLA's "MODEL1",
 * 584 bytes per token: per page block_size 576-byte token records, then block_size 8-byte scale records).
 * out u8/i8/e4m3 [num_blocks, block_size, 1, 584] with stride(1) 584 and a page stride (stride(0)) that is a
 * multiple of 16 and at least block_size * 584 bytes. Same devices and stream rules as the V3.2 quantizer. */
flashcpp_status flashcpp_mla_quantize_kv_cache_fp8_v4(const flashcpp_tensor* kv, const flashcpp_tensor* out,
                                                      void* stream);

/* The inverses (since ABI 4.1.0; flashcpp/mla.hpp, dequantize_kv_cache_fp8 / _v4): the V3.2 rows cache u8/i8/e4m3
 * [..., 656] back to bf16 out [..., 576], or the V4 pages cache [num_blocks, block_size, 1, 584] (the page rules of
 * the V4 quantizer's out) back to bf16 out [num_blocks, block_size, 1, 512]; exact. Both tensors in host memory, or
 * both on one CUDA device (asynchronous; there cache data and leading strides are 16-byte multiples, out's data
 * 16-byte aligned with strides that are multiples of 8 values). */
flashcpp_status flashcpp_mla_dequantize_kv_cache_fp8(const flashcpp_tensor* cache, const flashcpp_tensor* out,
                                                     void* stream);
flashcpp_status flashcpp_mla_dequantize_kv_cache_fp8_v4(const flashcpp_tensor* cache, const flashcpp_tensor* out,
                                                        void* stream);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_MLA_H_ */
