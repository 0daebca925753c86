#include "ops/common.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>

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

ModuleKey module_key(ModuleFamily family, const jit::AttentionSpec& v, uint8_t extra) {
  ModuleKey k;
  k.a = uint64_t{static_cast<uint8_t>(family)} | uint64_t{static_cast<uint8_t>(v.q)} << 8 | uint64_t{static_cast<uint8_t>(v.kv)} << 16 |
        uint64_t{static_cast<uint8_t>(v.o)} << 24 | uint64_t{extra} << 32 |
        uint64_t{v.use_sliding_window} << 40 | uint64_t{v.use_logits_soft_cap} << 41 |
        uint64_t{v.use_fp16_qk_reduction} << 42;
  k.b = static_cast<uint32_t>(v.head_dim_qk) | uint64_t{static_cast<uint32_t>(v.head_dim_vo)} << 32;
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

}  // namespace flashcpp::ops
