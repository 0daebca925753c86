// Shared machinery of the FlashInfer ops: module/function resolution cached per thread, module URIs,
// the validation helpers every op family uses, and the stream binding of a call.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/check.hpp"
#include "core/test_hooks.hpp"
#include "ffi/ffi.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/jit.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp {
struct PagedKvCache;  // flashcpp/page.hpp: common.hpp serves every family and includes none of their headers
}  // namespace flashcpp

namespace flashcpp::ops {

/// Makes `device` current for a scope when a GPU is present. GDN prefill, the MoE runner and top-k use the
/// current device rather than their tensors' device, so flashcpp switches it for them. Without a GPU
/// there is nothing to switch (and no kernel can run); CPU tests use recording modules.
class CurrentDeviceScope {
 public:
  explicit CurrentDeviceScope(int device) {
    if (cuda_device_count() > 0) guard_.emplace(device);
  }

 private:
  std::optional<DeviceGuard> guard_;
};

// -------------------------------------------------------------------------------------------------
// Module URIs (FlashInfer v0.6.3 naming, facts sheet §B). The lead will replace these with src/jit's.

inline constexpr const char* kNormUri = "norm";
inline constexpr const char* kPageUri = "page";
inline constexpr const char* kRopeUri = "rope";
inline constexpr const char* kCascadeUri = "cascade";
inline constexpr const char* kSamplingUri = "sampling";
inline constexpr const char* kTopkUri = "topk";
// The gated-activation modules are "silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul" (one export each, of that name).

// -------------------------------------------------------------------------------------------------
// Resolved module functions

/// The FlashInfer module families the per-thread cache serves (part of every ModuleKey).
enum class ModuleFamily : uint8_t {
  norm = 1, page = 2, single_prefill = 3, batch_prefill_fa2 = 4, batch_prefill_fa3 = 5, single_decode = 6,
  batch_decode = 7, rope = 8, cascade = 9, sampling = 10, topk = 11,
  act_and_mul = 12,  ///< the activation goes in ModuleKey's `extra`
};

/// Identifies a (module, function set) for the per-thread cache; built from the op family and the
/// variant, never from strings.
struct ModuleKey {
  uint64_t a = 0, b = 0;
  friend bool operator==(const ModuleKey&, const ModuleKey&) = default;
};
ModuleKey module_key(ModuleFamily family, const jit::AttentionSpec& v = {}, uint8_t extra = 0);

inline constexpr size_t kMaxFunctions = 12;  // sampling exports 11
struct ResolvedModule {
  std::shared_ptr<ffi::ModuleLibrary> lib;  ///< keeps the module loaded while its functions are used
  std::array<ffi::abi::SafeCall, kMaxFunctions> fns{};
};

/// Per-thread hit path: no lock, no allocation, no string (the entry holds a weak reference, so a
/// Runtime that went away is never served from the cache).
bool lookup_cached_module(const Runtime& rt, const ModuleKey& key, ResolvedModule& out);
/// Miss path: loads `uri` through the runtime and resolves `names` (throws not_found).
void resolve_module_slow(const Runtime& rt, const ModuleKey& key, const std::string& uri,
                         std::span<const char* const> names, ResolvedModule& out);

template <class UriFn>
ResolvedModule resolve_module(const Runtime& rt, const ModuleKey& key, UriFn&& make_uri,
                              std::initializer_list<const char*> names) {
  ResolvedModule r;
  if (lookup_cached_module(rt, key, r)) return r;
  resolve_module_slow(rt, key, make_uri(), std::span<const char* const>(names.begin(), names.size()), r);
  return r;
}

// -------------------------------------------------------------------------------------------------
// Validation helpers

/// `device_id` must be a visible CUDA device (checked before any CUDA or TVM-FFI call: TVM-FFI sizes its
/// per-thread stream table by the id, and FlashInfer's device guard would fail only inside the call).
void check_device_id(const Validator& v, int64_t device_id, const char* arg);

/// A CUDA tensor argument: defined, on CUDA, on a visible device, no negative strides.
void check_cuda_tensor(const Validator& v, const TensorView& t, const char* arg);
/// The tensor is on the same CUDA device as `ref`.
void check_same_device(const Validator& v, const TensorView& t, const char* arg, const TensorView& ref,
                       const char* ref_arg);
/// 1-D contiguous int32 CUDA index array with `len` entries (len < 0: any).
void check_device_index_array(const Validator& v, const TensorView& t, const char* arg, int64_t len,
                              const TensorView& ref, const char* ref_arg);
/// 1-D CUDA buffer (any dtype, contiguous).
void check_device_buffer(const Validator& v, const TensorView& t, const char* arg, const TensorView& ref,
                         const char* ref_arg);
/// sm_scale: given -> finite and > 0; absent -> 1/sqrt(head_dim).
double resolve_sm_scale(const Validator& v, const std::optional<double>& sm_scale, int64_t head_dim);
void check_window_and_cap(const Validator& v, int64_t window_left, double logits_soft_cap);
/// H_qo > 0, H_kv > 0, H_qo % H_kv == 0.
void check_heads(const Validator& v, int64_t num_qo_heads, int64_t num_kv_heads, const char* qo_arg,
                 const char* kv_arg);

/// The host view relabelled as kDLCPU (what FlashInfer's Python passes for pinned/host arrays).
inline TensorView as_cpu(TensorView t) {
  t.device = Device::cpu();
  return t;
}

/// Stream binding of a call on tensors of `device`.
inline ffi::StreamBinding binding_for(const TensorView& t, cudaStream_t stream) { return {t.device, stream}; }

/// paged_kv_lengths with the caller's Validator (errors name the calling op). Defined in page.cpp.
void paged_kv_lengths(const Validator& v, const TensorView& indptr_host, const TensorView& last_page_len_host,
                      int64_t page_size, const TensorView& out_host);

/// A plan or runner used after it was moved from: invalid_argument "<op>: argument '<what>' was moved from".
inline void check_plan_alive(const Validator& v, const void* state, const char* what = "plan") {
  if (state == nullptr) v.fail(what, "was moved from");
}

/// Paged KV cache geometry read from the cache tensors.
struct PagedGeometry {
  int64_t num_pages = 0, page_size = 0, num_kv_heads = 0, head_dim = 0;
};
/// Validates a paged cache (shapes, strides, dtypes, page table arrays) for `op` against `ref` (device).
/// Defined in page.cpp, beside the page family's paged_kv_lengths.
PagedGeometry check_paged_cache(const Validator& v, const PagedKvCache& kv, const TensorView& ref,
                                const char* ref_arg, int64_t expected_batch);

}  // namespace flashcpp::ops
