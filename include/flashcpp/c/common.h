/* flashcpp C ABI: status codes, the thread-local last error, and the plain tensor struct.
 * No exception crosses this boundary; every function returns a flashcpp_status. */
#ifndef FLASHCPP_C_COMMON_H_
#define FLASHCPP_C_COMMON_H_
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The C ABI version, MAJOR.MINOR.PATCH. The ABI only grows: a MINOR release may add functions, status and
 * enum values, and fields at the end of structs that begin with their own size; a PATCH release changes no
 * declaration; only a MAJOR release may change or remove anything (2.0.0: the status codes became the C++
 * ErrorCode values one to one; 3.0.0: every struct of scalars begins with its size, functions of more than
 * six tensors take structs of named tensors, sparse MLA's scalars are flashcpp_mla_options and its sm_scale 0
 * selects the default; 3.1.0: flashcpp_fused_moe_tune, _tactics, _set_tactics; 3.2.0:
 * flashcpp_mla_dense_decode, _dense_decode_sizes_for; 3.3.0: the gated activations flashcpp_silu_and_mul,
 * _gelu_and_mul, _gelu_tanh_and_mul, the cascade merges flashcpp_merge_state, _merge_state_in_place,
 * _merge_states, and RoPE: flashcpp_apply_rope_pos_ids, _apply_llama31_rope_pos_ids, _apply_rope_with_cos_sin_cache;
 * 3.4.0: the sampler, flashcpp/c/sampling.h: flashcpp_softmax, the samplers from probs and logits, top-k, top-p,
 * min-p and fused top-k + top-p, the renorm and mask helpers, flashcpp_sampling_options; and DSA top-k,
 * flashcpp/c/topk.h: flashcpp_top_k, _top_k_page_table_transform, _top_k_ragged_transform; and RoPE's ragged batch
 * and FP8 quantization: flashcpp_apply_rope, _apply_llama31_rope, _rope_quantize_fp8, flashcpp_rope_quantize_args;
 * 3.5.0: flashcpp_mla_decode_plan_by_lengths; 3.6.0: flashcpp_rope_quantize_append_paged_kv_cache,
 * flashcpp_rope_quantize_append_args; 4.0.0: the bundles of tensors begin with their size too and have an *_INIT
 * initializer: flashcpp_mla_prefill_tensors, _mla_decode_tensors, _mla_dense_decode_workspace,
 * _mla_dense_decode_tensors, _batch_mla_cache, _paged_kv_cache, _paged_mla_kv_cache, _workspace, _ragged_kv,
 * _sampling_workspace, so every struct the library reads can grow in a MINOR release); 4.1.0: the FP8 cache
 * dequantizers flashcpp_mla_dequantize_kv_cache_fp8, _dequantize_kv_cache_fp8_v4; 4.2.0: dense MLA decode over an
 * fp16 cache with fp16 q and out, flashcpp_mla_dense_decode; 4.3.0: the batch decode config's split-KV controls,
 * flashcpp_batch_decode_config.fixed_split_size and .disable_split_kv).
 * FLASHCPP_C_ABI_VERSION packs the three as MAJOR * 10000 + MINOR * 100 + PATCH; flashcpp_abi_version() returns the
 * loaded library's, so a caller can check it is at least the one it was compiled with and of the same MAJOR.
 *
 * Every struct the library reads (of scalars, or a bundle of tensors), but the flashcpp_tensor below, begins with
 * `uint32_t struct_size` and has an *_INIT initializer (the FlashInfer ops' configs also an *_init function) that
 * sets it to the sizeof of the header the caller is compiled with. The library accepts any struct_size from the
 * struct's first published size (its sizeof in the first release where it began with its size: 3.0.0 or later
 * for the structs of scalars, 4.0.0 for the bundles; for every struct so far but the fused MoE config, today's
 * sizeof) up to the library's own sizeof: it reads the caller's first struct_size bytes, never more, and every
 * field past them takes its *_INIT value, so a caller compiled against an older header keeps working with a newer
 * library. A NULL struct, or a struct_size above the library's sizeof (a caller compiled against a newer header
 * than the library's) or below the first published size, is refused with FLASHCPP_INVALID_ARGUMENT naming the
 * argument, the size received and the accepted range. flashcpp_tensor's layout is fixed within a MAJOR release,
 * as are the structs the library only writes (flashcpp_mla_device_info, the plan and workspace sizes).
 * sm_scale (the softmax scale applied to q.k), in every struct that has one: 0 selects the default, 1/sqrt of
 * the op's q.k head dimension (the C++ API's unset std::optional); any other value must be finite and > 0. */
#define FLASHCPP_C_ABI_VERSION_MAJOR 4u
#define FLASHCPP_C_ABI_VERSION_MINOR 3u
#define FLASHCPP_C_ABI_VERSION_PATCH 0u
#define FLASHCPP_C_ABI_VERSION \
  (FLASHCPP_C_ABI_VERSION_MAJOR * 10000u + FLASHCPP_C_ABI_VERSION_MINOR * 100u + FLASHCPP_C_ABI_VERSION_PATCH)

/* Outcomes, numbered as flashcpp::ErrorCode (include/flashcpp/error.hpp) one to one. */
typedef enum flashcpp_status {
  FLASHCPP_SUCCESS = 0,
  FLASHCPP_INVALID_ARGUMENT = 1, /* an argument broke a documented rule; nothing was launched or written */
  FLASHCPP_UNSUPPORTED = 2,      /* a valid request the device (its architecture) or this build cannot serve */
  FLASHCPP_NOT_FOUND = 3,        /* a module, function, file or artifact is missing */
  FLASHCPP_CUDA_ERROR = 4,       /* the CUDA runtime reported an error */
  FLASHCPP_FFI_ERROR = 5,        /* a FlashInfer kernel module raised an error */
  FLASHCPP_IO_ERROR = 6,         /* a file-system operation failed */
  FLASHCPP_NETWORK_ERROR = 7,    /* a download failed (HTTP status, timeout, connection) */
  FLASHCPP_INTEGRITY_ERROR = 8,  /* bytes did not match their pinned SHA-256 or size */
  FLASHCPP_INTERNAL = 9,         /* a flashcpp bug or an unexpected failure */
  FLASHCPP_UNTRUSTED = 10        /* a library or module refused before loading (writable by others, or changed) */
} flashcpp_status;

/* DLPack-compatible codes. */
typedef enum flashcpp_dtype {
  FLASHCPP_F16 = 0, FLASHCPP_BF16 = 1, FLASHCPP_F32 = 2, FLASHCPP_F64 = 3, FLASHCPP_E4M3 = 4,
  FLASHCPP_E5M2 = 5, FLASHCPP_I8 = 6, FLASHCPP_U8 = 7, FLASHCPP_I16 = 8, FLASHCPP_U16 = 9,
  FLASHCPP_I32 = 10, FLASHCPP_U32 = 11, FLASHCPP_I64 = 12, FLASHCPP_U64 = 13, FLASHCPP_BOOL = 14
} flashcpp_dtype;

typedef enum flashcpp_device_type { FLASHCPP_CPU = 1, FLASHCPP_CUDA = 2, FLASHCPP_CUDA_HOST = 3 } flashcpp_device_type;

#define FLASHCPP_MAX_RANK 6

/* A non-owning tensor: strides in elements (never NULL-equivalent: fill all `rank` entries).
 *
 * Every tensor argument of every function is checked before anything is launched, read or written, and refused
 * with FLASHCPP_INVALID_ARGUMENT naming the argument and the rule unless:
 *   codes     rank is in [0, FLASHCPP_MAX_RANK], dtype a flashcpp_dtype, device_type a flashcpp_device_type, and a
 *             CUDA tensor's device_id a visible CUDA device, [0, device count);
 *   extent    every size is >= 0; the element count and the byte extent (the bytes from the lowest to the highest
 *             addressed element: sum over dims of (size - 1) * |stride| elements, plus one element) fit in int64;
 *   address   when it has elements, data is not NULL and every element's address lies inside the address space:
 *             data plus the extent, for either stride sign, neither passes 2^64 nor goes below 0 (checked in
 *             128-bit arithmetic, so no pointer wraps);
 *   alignment data is aligned to the element size (a bf16 tensor at an odd address is refused); where a kernel's
 *             vector loads or FlashInfer need more, the message names the requirement: e.g. up to 16 bytes for the
 *             norms' rows, 16 for GDN's tensors and the sparse MLA caches and plan buffers, 256 for FlashInfer's
 *             workspaces;
 *   host      an array the library reads or writes in host memory (indptr and length arrays of plans, GDN's
 *             cu_seqlens_host, the host quantizers' tensors, the page-locked workspace) spans at most 2^40 bytes.
 *             That it lies in one allocation of that extent cannot be checked: the caller promises it;
 *   outputs   an output (caches, workspaces and scratch included) shares no byte with any other argument.
 * The op's own rules (shapes, dtypes, contiguity, devices matching) follow these.
 *
 * Codes and flags outside their documented set are refused likewise: an enum field or argument (layout, backend,
 * quantization, dtype codes; o_dtype -1 or a flashcpp_dtype) has only the values its header lists, and every int32_t
 * on/off field or argument (causal, enable_pdl, enable_cuda_graph, ...) is 0 or 1. A device id given outside any
 * tensor (a config's device_id, a runner's device, a size query's device) must be a visible CUDA device as well. */
typedef struct flashcpp_tensor {
  void* data;
  int32_t dtype;       /* flashcpp_dtype */
  int32_t device_type; /* flashcpp_device_type */
  int32_t device_id;
  int32_t rank;
  int64_t shape[FLASHCPP_MAX_RANK];
  int64_t strides[FLASHCPP_MAX_RANK];
} flashcpp_tensor;

/* The message of the last failed call on this thread ("" if none). Valid until the next failing call. */
const char* flashcpp_last_error(void);
/* FLASHCPP_C_ABI_VERSION of the loaded library (MAJOR * 10000 + MINOR * 100 + PATCH). */
uint32_t flashcpp_abi_version(void);
/* The loaded library in one static line: "flashcpp 0.1.0 (C ABI 4.1.0, FlashInfer 0.6.3, TVM-FFI 0.1.9, built with
 * CUDA 13.0.88)": its version, the C ABI version, the pinned FlashInfer and TVM-FFI, the CUDA it was built with. */
const char* flashcpp_version(void);
/* A short, static name for a status ("invalid argument", ...). */
const char* flashcpp_status_name(flashcpp_status status);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_COMMON_H_ */
