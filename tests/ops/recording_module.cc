// A stand-in for FlashInfer's norm, page, single/batch prefill, single/batch decode, activation, cascade, rope,
// sampling and topk modules, built like them (tvm-ffi headers, libtvm_ffi resolved at load time), exporting the same
// names. Every call is appended to a log, one line per call: "name|arg0|arg1|...", each argument as it arrived:
//   None, i:<int>, b:<bool>, f:<double>, T(<code>.<bits>;[shape];[strides];<devtype>:<id>;@<hex ptr>) for a
//   raw DLTensor*, O(...) for a Tensor object, [a,b,...] for an Array.
// `recorded()` returns and clears the log. `plan` returns an Array<int64> of 100, 101, ... whose length
// follows FlashInfer's per family (decided by the argument count: 19 -> fa2 prefill 15, 16 -> fa3
// prefill 9, 15 -> decode 10) unless `set_plan_entries(n)` forced another length (n < 0: automatic).
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cstdio>
#include <mutex>
#include <sstream>
#include <string>

namespace ffi = tvm::ffi;

namespace {
std::mutex g_mu;
std::string g_log;
int64_t g_plan_entries = -1;

void describe_dl(std::ostringstream& os, const DLTensor* t) {
  os << int(t->dtype.code) << "." << int(t->dtype.bits) << ";[";
  for (int i = 0; i < t->ndim; ++i) os << (i ? "," : "") << t->shape[i];
  os << "];[";
  for (int i = 0; i < t->ndim; ++i) os << (i ? "," : "") << (t->strides ? t->strides[i] : -999);
  char ptr[32];
  std::snprintf(ptr, sizeof(ptr), "%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(t->data)));
  os << "];" << int(t->device.device_type) << ":" << t->device.device_id << ";@" << ptr;
  // Small host int32 arrays (plan inputs such as indptr and kv_len_arr): their values too.
  int64_t numel = 1;
  for (int i = 0; i < t->ndim; ++i) numel *= t->shape[i];
  if (t->device.device_type == kDLCPU && t->dtype.code == kDLInt && t->dtype.bits == 32 && t->data && numel <= 64) {
    os << ";{";
    for (int64_t i = 0; i < numel; ++i) os << (i ? "," : "") << static_cast<const int32_t*>(t->data)[i];
    os << "}";
  }
}

void describe(std::ostringstream& os, const TVMFFIAny& a) {
  switch (a.type_index) {
    case kTVMFFINone: os << "None"; return;
    case kTVMFFIInt: os << "i:" << a.v_int64; return;
    case kTVMFFIBool: os << "b:" << a.v_int64; return;
    case kTVMFFIFloat: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.17g", a.v_float64);
      os << "f:" << buf;
      return;
    }
    case kTVMFFIDLTensorPtr: os << "T("; describe_dl(os, static_cast<const DLTensor*>(a.v_ptr)); os << ")"; return;
    default: break;
  }
  const ffi::AnyView view = *reinterpret_cast<const ffi::AnyView*>(&a);
  if (a.type_index == kTVMFFITensor) {
    ffi::Tensor t = view.cast<ffi::Tensor>();
    os << "O(";
    describe_dl(os, t.GetDLTensorPtr());
    os << ")";
  } else if (a.type_index == kTVMFFIArray) {
    ffi::Array<ffi::Any> arr = view.cast<ffi::Array<ffi::Any>>();
    os << "[";
    for (size_t i = 0; i < arr.size(); ++i) {
      if (i) os << ",";
      ffi::Any e = arr[i];
      describe(os, *reinterpret_cast<const TVMFFIAny*>(&e));
    }
    os << "]";
  } else {
    os << "obj:" << a.type_index;
  }
}

void record(const char* name, const TVMFFIAny* args, int32_t n) {
  std::ostringstream os;
  os << name;
  for (int32_t i = 0; i < n; ++i) {
    os << "|";
    describe(os, args[i]);
  }
  os << "\n";
  std::lock_guard lock(g_mu);
  g_log += os.str();
}

int ok_none(TVMFFIAny* result) {
  result->type_index = kTVMFFINone;
  result->zero_padding = 0;
  result->v_int64 = 0;
  return 0;
}
}  // namespace

#define RECORDING_EXPORT(name)                                                                       \
  extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_##name(void*, const TVMFFIAny* args, int32_t n,       \
                                                     TVMFFIAny* result) {                          \
    record(#name, args, n);                                                                          \
    return ok_none(result);                                                                          \
  }

RECORDING_EXPORT(rmsnorm)
RECORDING_EXPORT(fused_add_rmsnorm)
RECORDING_EXPORT(gemma_rmsnorm)
RECORDING_EXPORT(gemma_fused_add_rmsnorm)
RECORDING_EXPORT(append_paged_kv_cache)
RECORDING_EXPORT(append_paged_mla_kv_cache)
RECORDING_EXPORT(run)
RECORDING_EXPORT(ragged_run)
RECORDING_EXPORT(paged_run)
RECORDING_EXPORT(silu_and_mul)
RECORDING_EXPORT(gelu_and_mul)
RECORDING_EXPORT(gelu_tanh_and_mul)
RECORDING_EXPORT(softmax)
RECORDING_EXPORT(sampling_from_probs)
RECORDING_EXPORT(sampling_from_logits)
RECORDING_EXPORT(top_k_sampling_from_probs)
RECORDING_EXPORT(top_p_sampling_from_probs)
RECORDING_EXPORT(min_p_sampling_from_probs)
RECORDING_EXPORT(top_k_top_p_sampling_from_probs)
RECORDING_EXPORT(top_p_renorm_probs)
RECORDING_EXPORT(top_k_renorm_probs)
RECORDING_EXPORT(top_k_mask_logits)
RECORDING_EXPORT(merge_state)
RECORDING_EXPORT(merge_state_in_place)
RECORDING_EXPORT(merge_states)
RECORDING_EXPORT(apply_rope_pos_ids)
RECORDING_EXPORT(apply_llama31_rope_pos_ids)
RECORDING_EXPORT(apply_rope_pos_ids_cos_sin_cache)
RECORDING_EXPORT(apply_rope)
RECORDING_EXPORT(apply_llama31_rope)
RECORDING_EXPORT(rope_quantize)
RECORDING_EXPORT(rope_quantize_append_paged_kv_cache)
RECORDING_EXPORT(radix_topk)
RECORDING_EXPORT(radix_topk_page_table_transform)
RECORDING_EXPORT(radix_topk_ragged_transform)

extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_plan(void*, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  record("plan", args, n);
  int64_t entries = g_plan_entries;
  if (entries < 0) entries = n == 19 ? 15 : n == 16 ? 9 : n == 15 ? 10 : 1;
  ffi::Array<int64_t> info;
  for (int64_t i = 0; i < entries; ++i) info.push_back(100 + i);
  ffi::Any any = info;
  *result = ffi::details::AnyUnsafe::MoveAnyToTVMFFIAny(std::move(any));
  return 0;
}

namespace {
ffi::String recorded() {
  std::lock_guard lock(g_mu);
  std::string out;
  out.swap(g_log);
  return out;
}
void set_plan_entries(int64_t n) { g_plan_entries = n; }
}  // namespace
TVM_FFI_DLL_EXPORT_TYPED_FUNC(recorded, recorded);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(set_plan_entries, set_plan_entries);
