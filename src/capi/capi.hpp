// Plumbing shared by every C ABI entry point: exception -> status translation with a thread-local
// last-error message, and flashcpp_tensor -> TensorView conversion (validated).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "capi/struct_sizes.hpp"
#include "flashcpp/c/common.h"
#include "flashcpp/c/gdn.h"
#include "flashcpp/c/mla.h"
#include "flashcpp/c/mla_attention.h"
#include "flashcpp/c/moe.h"
#include "flashcpp/c/ops.h"
#include "flashcpp/c/sampling.h"
#include "flashcpp/error.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/tensor.hpp"

// Internal to libflashcpp: the C entry points (flashcpp_*) are the ABI, none of this is exported. Everything declared
// from here to the pop has hidden visibility, and a definition takes its declaration's.
#pragma GCC visibility push(hidden)
namespace flashcpp::capi {

void set_last_error(std::string message) noexcept;
void clear_last_error() noexcept;
flashcpp_status status_of(ErrorCode code) noexcept;

/// Runs `fn` and turns any exception into a status; on success clears nothing (last error keeps the
/// previous failure, as errno does).
template <class Fn>
flashcpp_status guard(Fn&& fn) noexcept {
  try {
    std::forward<Fn>(fn)();
    return FLASHCPP_SUCCESS;
  } catch (const Error& e) {
    set_last_error(e.what());
    return status_of(e.code());
  } catch (const std::bad_alloc&) {
    set_last_error("out of host memory");
    return FLASHCPP_INTERNAL;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return FLASHCPP_INTERNAL;
  } catch (...) {
    set_last_error("internal error: unknown exception");
    return FLASHCPP_INTERNAL;
  }
}

/// The C ABI's one process-wide Runtime, created from the environment on first use (thread-safe). When it
/// cannot start, a Runtime that throws the reason at its first module lookup (after the op's argument checks).
std::shared_ptr<const Runtime> default_runtime();

/// Throws invalid_argument "<op>: argument '<name>' must not be NULL" when `p` is NULL.
void require_non_null(const void* p, const char* op, const char* name);

/// A C sm_scale field as the C++ option: 0 selects the default (1/sqrt of the op's q·k head dimension), any
/// other value is passed on (and validated by the op: finite and > 0). common.h documents the rule once.
inline std::optional<double> sm_scale_of(double c_value) {
  return c_value == 0.0 ? std::nullopt : std::optional<double>(c_value);
}

/// Converts and checks a C tensor (rank, dtype and device codes). `name` is used in messages.
TensorView to_view(const flashcpp_tensor* t, const char* op, const char* name);
/// Like to_view, but a null pointer means "absent" and yields nullptr-like empty optional.
bool to_optional_view(const flashcpp_tensor* t, const char* op, const char* name, TensorView& out);
/// An optional tensor argument: NULL -> nullptr; otherwise converted into `slot`, and &slot.
inline const TensorView* optional(const flashcpp_tensor* t, const char* op, const char* name, TensorView& slot) {
  return to_optional_view(t, op, name, slot) ? &slot : nullptr;
}
/// A flashcpp_dtype code as DType; invalid_argument naming `name` for an unknown code.
DType dtype_of(int32_t code, const char* op, const char* name);
/// An int32_t on/off argument or field (common.h: 0 or 1); invalid_argument naming `name` for any other value.
bool flag_of(int32_t value, const char* op, const char* name);
/// A CUDA device id given outside any tensor (the MLA decode plan's config->device_id, its size query included): a
/// visible device, [0, visible count), as every op checks its tensors' ids; invalid_argument naming `name` otherwise.
void require_device_id(int64_t device_id, const char* op, const char* name);

}  // namespace flashcpp::capi
#pragma GCC visibility pop

// Every size-prefixed C struct, with its first published size: the smallest struct_size read_struct accepts
// (struct_sizes.hpp). Each struct's layout is unchanged since it first began with its size (the FlashInfer ops'
// in C ABI 3.0.0, 2648276; batch MLA, GDN, MoE and the sparse MLA config and options in 3.0.0 too, 5481221 and
// 20d1b9e; the dense MLA decode structs in 3.2.0; the bundles of tensors in 4.0.0), so each first size is today's
// sizeof but for the fused MoE config, which grew auto_tune in 3.4.0 (its first size ends before it), and the batch
// decode config, which grew fixed_split_size and disable_split_kv in 4.3.0; sparse MLA
// decode's extra_topk predates the struct's size field (966e687, C ABI 2.x). A field appended in a MINOR release
// keeps the entry's first size and adds its default to the struct's *_INIT.
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_attention_options, sizeof(flashcpp_attention_options),
                           FLASHCPP_ATTENTION_OPTIONS_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_batch_prefill_config, sizeof(flashcpp_batch_prefill_config),
                           FLASHCPP_BATCH_PREFILL_CONFIG_INIT);
// fixed_split_size and disable_split_kv were appended in C ABI 4.3.0: the first published size ends before them.
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_batch_decode_config, offsetof(flashcpp_batch_decode_config, fixed_split_size),
                           FLASHCPP_BATCH_DECODE_CONFIG_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_batch_mla_config, sizeof(flashcpp_batch_mla_config), FLASHCPP_BATCH_MLA_CONFIG_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_gdn_prefill_args, sizeof(flashcpp_gdn_prefill_args), FLASHCPP_GDN_PREFILL_ARGS_INIT);
// auto_tune was appended in C ABI 3.4.0: the first published size ends at device.
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_fused_moe_config, offsetof(flashcpp_fused_moe_config, auto_tune),
                           FLASHCPP_FUSED_MOE_CONFIG_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_fused_moe_args, sizeof(flashcpp_fused_moe_args), FLASHCPP_FUSED_MOE_ARGS_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_mla_options, sizeof(flashcpp_mla_options), FLASHCPP_MLA_OPTIONS_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_mla_decode_config, sizeof(flashcpp_mla_decode_config),
                           FLASHCPP_MLA_DECODE_CONFIG_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_mla_dense_decode_config, sizeof(flashcpp_mla_dense_decode_config),
                           FLASHCPP_MLA_DENSE_DECODE_CONFIG_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_mla_dense_decode_options, sizeof(flashcpp_mla_dense_decode_options),
                           FLASHCPP_MLA_DENSE_DECODE_OPTIONS_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_sampling_options, sizeof(flashcpp_sampling_options),
                           FLASHCPP_SAMPLING_OPTIONS_INIT);  // C ABI 3.4.0
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_rope_quantize_args, sizeof(flashcpp_rope_quantize_args),
                           FLASHCPP_ROPE_QUANTIZE_ARGS_INIT);  // C ABI 3.4.0
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_rope_quantize_append_args, sizeof(flashcpp_rope_quantize_append_args),
                           FLASHCPP_ROPE_QUANTIZE_APPEND_ARGS_INIT);  // C ABI 3.6.0
// The bundles of tensors, size-prefixed since C ABI 4.0.0.
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_mla_prefill_tensors, sizeof(flashcpp_mla_prefill_tensors),
                           FLASHCPP_MLA_PREFILL_TENSORS_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_mla_decode_tensors, sizeof(flashcpp_mla_decode_tensors),
                           FLASHCPP_MLA_DECODE_TENSORS_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_mla_dense_decode_workspace, sizeof(flashcpp_mla_dense_decode_workspace),
                           FLASHCPP_MLA_DENSE_DECODE_WORKSPACE_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_mla_dense_decode_tensors, sizeof(flashcpp_mla_dense_decode_tensors),
                           FLASHCPP_MLA_DENSE_DECODE_TENSORS_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_batch_mla_cache, sizeof(flashcpp_batch_mla_cache), FLASHCPP_BATCH_MLA_CACHE_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_paged_kv_cache, sizeof(flashcpp_paged_kv_cache), FLASHCPP_PAGED_KV_CACHE_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_paged_mla_kv_cache, sizeof(flashcpp_paged_mla_kv_cache),
                           FLASHCPP_PAGED_MLA_KV_CACHE_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_workspace, sizeof(flashcpp_workspace), FLASHCPP_WORKSPACE_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_ragged_kv, sizeof(flashcpp_ragged_kv), FLASHCPP_RAGGED_KV_INIT);
FLASHCPP_CAPI_STRUCT_SIZES(flashcpp_sampling_workspace, sizeof(flashcpp_sampling_workspace),
                           FLASHCPP_SAMPLING_WORKSPACE_INIT);
