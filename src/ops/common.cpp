#include "ops/common.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>

#include "ops/test_hooks.hpp"
#include "runtime/runtime_internal.hpp"

namespace flashcpp::ops {

// -------------------------------------------------------------------------------------------------
// Per-thread module cache

namespace {

struct CacheEntry {
  const Runtime* rt = nullptr;
  ModuleKey key;
  std::weak_ptr<ffi::ModuleLibrary> lib;
  std::array<ffi::abi::SafeCall, kMaxFunctions> fns{};
};

constexpr size_t kCacheEntries = 16;
struct ThreadCache {
  std::array<CacheEntry, kCacheEntries> entries;
  size_t next = 0;
};
thread_local ThreadCache t_cache;

}  // namespace

ModuleKey module_key(ModuleFamily family, const AttentionVariant& v, uint8_t extra) {
  ModuleKey k;
  k.a = uint64_t{static_cast<uint8_t>(family)} | uint64_t{static_cast<uint8_t>(v.q)} << 8 | uint64_t{static_cast<uint8_t>(v.kv)} << 16 |
        uint64_t{static_cast<uint8_t>(v.o)} << 24 | uint64_t{extra} << 32 |
        uint64_t{v.use_sliding_window} << 40 | uint64_t{v.use_logits_soft_cap} << 41 |
        uint64_t{v.use_fp16_qk_reduction} << 42;
  k.b = static_cast<uint64_t>(v.head_dim_qk) | static_cast<uint64_t>(v.head_dim_vo) << 32;
  return k;
}

bool lookup_cached_module(const Runtime& rt, const ModuleKey& key, ResolvedModule& out) {
  for (auto& e : t_cache.entries) {
    if (e.rt != &rt || !(e.key == key)) continue;
    out.lib = e.lib.lock();
    if (!out.lib) {
      e.rt = nullptr;  // the runtime (and its modules) went away
      return false;
    }
    out.fns = e.fns;
    return true;
  }
  return false;
}

void resolve_module_slow(const Runtime& rt, const ModuleKey& key, const std::string& uri,
                         std::span<const char* const> names, ResolvedModule& out) {
  if (names.size() > kMaxFunctions) throw Error(ErrorCode::internal, "too many functions for one module key");
  out.lib = load_module(rt, uri);
  out.fns = {};
  for (size_t i = 0; i < names.size(); ++i) out.fns[i] = out.lib->function(names[i]);
  auto& e = t_cache.entries[t_cache.next];
  t_cache.next = (t_cache.next + 1) % kCacheEntries;
  e.rt = &rt;
  e.key = key;
  e.lib = out.lib;
  e.fns = out.fns;
}

// -------------------------------------------------------------------------------------------------
// Validation helpers

const TestOverrides* test_overrides() noexcept {
  static const TestOverrides* const overrides =
      static_cast<const TestOverrides*>(::dlsym(RTLD_DEFAULT, kTestOverridesSymbol));
  return overrides;
}

int visible_device_count() noexcept {
  if (const TestOverrides* t = test_overrides())
    if (const int n = t->visible_devices.load(std::memory_order_relaxed); n >= 0) return n;
  return cuda_device_count();
}

void check_device_id(const Validator& v, int64_t device_id, const char* arg) {
  const int n = visible_device_count();
  if (device_id < 0 || device_id >= n)
    v.fail(arg, "must be on a visible CUDA device: device id " + std::to_string(device_id) + " is outside [0, " +
                    std::to_string(n) + ") (visible CUDA devices: " + std::to_string(n) + ")");
}

void check_cuda_tensor(const Validator& v, const TensorView& t, const char* arg) {
  v.defined(t, arg).on_cuda(t, arg).no_negative_strides(t, arg);
  const int n = visible_device_count();
  if (t.device.id >= n)
    v.fail(arg, t, "must be on a visible CUDA device: device id " + std::to_string(t.device.id) + " is outside [0, " +
                       std::to_string(n) + ") (visible CUDA devices: " + std::to_string(n) + ")");
}

void check_same_device(const Validator& v, const TensorView& t, const char* arg, const TensorView& ref,
                       const char* ref_arg) {
  check_cuda_tensor(v, t, arg);
  v.same_device(t, arg, ref, ref_arg);
}

void check_device_index_array(const Validator& v, const TensorView& t, const char* arg, int64_t len,
                              const TensorView& ref, const char* ref_arg) {
  check_same_device(v, t, arg, ref, ref_arg);
  v.dtype(t, arg, {DType::i32}).rank(t, arg, 1).contiguous(t, arg);
  if (len >= 0) v.dim(t, arg, 0, len);
}

void check_device_buffer(const Validator& v, const TensorView& t, const char* arg, const TensorView& ref,
                         const char* ref_arg) {
  check_same_device(v, t, arg, ref, ref_arg);
  v.rank(t, arg, 1).contiguous(t, arg);
}

double resolve_sm_scale(const Validator& v, const std::optional<double>& sm_scale, int64_t head_dim) {
  if (sm_scale) {
    v.positive(*sm_scale, "sm_scale");
    return *sm_scale;
  }
  return 1.0 / std::sqrt(static_cast<double>(head_dim));
}

void check_window_and_cap(const Validator& v, int64_t window_left, double logits_soft_cap) {
  if (window_left < -1) v.fail("window_left", "must be -1 (no window) or >= 0; got " + std::to_string(window_left));
  v.finite(logits_soft_cap, "logits_soft_cap");
  if (logits_soft_cap < 0) v.fail("logits_soft_cap", "must be 0 (off) or > 0; got " + std::to_string(logits_soft_cap));
}

void check_heads(const Validator& v, int64_t num_qo_heads, int64_t num_kv_heads, const char* qo_arg,
                 const char* kv_arg) {
  v.in_range(num_qo_heads, qo_arg, 1, 1 << 20).in_range(num_kv_heads, kv_arg, 1, 1 << 20);
  v.divisible(num_qo_heads, qo_arg, num_kv_heads, kv_arg);
}

PagedGeometry check_paged_cache(const Validator& v, const PagedKvCache& kv, const TensorView& ref,
                                const char* ref_arg, int64_t expected_batch) {
  check_same_device(v, kv.k_cache, "k_cache", ref, ref_arg);
  check_same_device(v, kv.v_cache, "v_cache", ref, ref_arg);
  v.rank(kv.k_cache, "k_cache", 4).last_dim_contiguous(kv.k_cache, "k_cache");
  v.same_dtype(kv.v_cache, "v_cache", kv.k_cache, "k_cache");
  v.same_shape(kv.v_cache, "v_cache", kv.k_cache, "k_cache");
  v.same_strides(kv.v_cache, "v_cache", kv.k_cache, "k_cache");
  if (kv.layout != KvLayout::nhd && kv.layout != KvLayout::hnd)
    v.fail("layout", "must be nhd or hnd; got " + std::to_string(static_cast<int64_t>(kv.layout)));
  PagedGeometry g;
  g.num_pages = kv.k_cache.size(0);
  g.page_size = kv.layout == KvLayout::nhd ? kv.k_cache.size(1) : kv.k_cache.size(2);
  g.num_kv_heads = kv.layout == KvLayout::nhd ? kv.k_cache.size(2) : kv.k_cache.size(1);
  g.head_dim = kv.k_cache.size(3);
  if (g.page_size < 1) v.fail("k_cache", kv.k_cache, "must have a page size >= 1");
  v.require(g.num_pages >= 1, "k_cache", "must have at least one page");
  check_device_index_array(v, kv.last_page_len, "last_page_len", expected_batch, ref, ref_arg);
  const int64_t batch = kv.last_page_len.size(0);
  v.require(batch >= 1, "last_page_len", "must have at least one entry (batch >= 1)");
  check_device_index_array(v, kv.indptr, "indptr", batch + 1, ref, ref_arg);
  check_device_index_array(v, kv.indices, "indices", -1, ref, ref_arg);
  return g;
}

// -------------------------------------------------------------------------------------------------
// Workspaces and backend choice (public helpers)

}  // namespace flashcpp::ops

namespace flashcpp {

int64_t recommended_float_workspace_bytes() noexcept { return int64_t{128} << 20; }
int64_t recommended_int_workspace_bytes() noexcept { return int64_t{8} << 20; }

namespace {
// The size, once both are known to be positive: checked before anything is allocated.
size_t workspace_bytes(int64_t bytes, int64_t float_bytes, int64_t int_bytes) {
  if (float_bytes <= 0 || int_bytes <= 0)
    throw Error(ErrorCode::invalid_argument, "OwnedWorkspace: sizes must be > 0; got float_bytes " +
                                                 std::to_string(float_bytes) + ", int_bytes " + std::to_string(int_bytes));
  return static_cast<size_t>(bytes);
}
}  // namespace

OwnedWorkspace::OwnedWorkspace(int device_id, int64_t float_bytes, int64_t int_bytes)
    : float_(workspace_bytes(float_bytes, float_bytes, int_bytes), device_id),
      int_(static_cast<size_t>(int_bytes), device_id),
      pinned_(static_cast<size_t>(int_bytes)) {
  view_.float_buffer = TensorView::contiguous(float_.get(), DType::u8, Device::cuda(device_id), {float_bytes});
  view_.int_buffer = TensorView::contiguous(int_.get(), DType::u8, Device::cuda(device_id), {int_bytes});
  view_.pinned_int_buffer = TensorView::contiguous(pinned_.get(), DType::u8, Device::cuda_host(), {int_bytes});
}

bool decode_uses_tensor_cores(int64_t num_qo_heads, int64_t num_kv_heads, DecodeBackend backend) noexcept {
  switch (backend) {
    case DecodeBackend::cuda_cores: return false;
    case DecodeBackend::tensor_cores: return true;
    case DecodeBackend::automatic: break;
  }
  if (num_kv_heads <= 0 || num_qo_heads % num_kv_heads != 0) return true;
  const int64_t g = num_qo_heads / num_kv_heads;
  // Measured on the H200 (docs/PERFORMANCE.md): at group 4 the tensor-core path (FlashInfer's fa2 prefill
  // module) reads KV at 103% of the copy ceiling against 65% for the CUDA-core decode module.
  return g >= 4 || !(g == 1 || g == 2 || g == 3 || g == 8);
}

}  // namespace flashcpp
