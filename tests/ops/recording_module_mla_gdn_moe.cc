// A stand-in for FlashInfer's batch_mla, gdn_prefill_sm90 and fused_moe modules, built like them (tvm-ffi
// headers, libtvm_ffi resolved at load time). Every export records the arguments exactly as they
// arrived (type index, tensor dtype/shape/strides/device/pointer, array contents) so tests can check
// flashcpp's packing order and types without a GPU. `recorded()` returns and clears the log: one line
// per call, "name|arg0|arg1|...".
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
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

void describe_dl(std::ostringstream& os, const DLTensor* t) {
  os << int(t->dtype.code) << "." << int(t->dtype.bits) << ";[";
  for (int i = 0; i < t->ndim; ++i) os << (i ? "," : "") << t->shape[i];
  os << "];[";
  for (int i = 0; i < t->ndim; ++i) os << (i ? "," : "") << (t->strides ? t->strides[i] : -999);
  char ptr[32];
  std::snprintf(ptr, sizeof(ptr), "%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(t->data)));
  os << "];" << int(t->device.device_type) << ":" << t->device.device_id << ";@" << ptr;
}

void describe(std::ostringstream& os, const TVMFFIAny& a) {
  switch (a.type_index) {
    case kTVMFFINone: os << "None"; return;
    case kTVMFFIInt: os << "i:" << a.v_int64; return;
    case kTVMFFIBool: os << "b:" << a.v_int64; return;
    case kTVMFFIFloat: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.9g", a.v_float64);
      os << "f:" << buf;
      return;
    }
    case kTVMFFIDataType: os << "dt:" << int(a.v_dtype.code) << "." << int(a.v_dtype.bits); return;
    case kTVMFFIDLTensorPtr: os << "T("; describe_dl(os, static_cast<const DLTensor*>(a.v_ptr)); os << ")"; return;
    case kTVMFFIRawStr: os << "s:" << a.v_c_str; return;
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
  } else if (a.type_index == kTVMFFISmallStr || a.type_index == kTVMFFIStr) {
    os << "s:" << view.cast<ffi::String>().c_str();
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

/// The runner FlashInfer's fused_moe `init` returns: a Module whose methods record their arguments. It offers
/// no GEMM tactic candidates (both counts 0), so tuning only prepares the profiler, once per GEMM.
class RecordingRunner : public ffi::ModuleObj {
 public:
  const char* kind() const final { return "fused_moe_runner"; }
  ffi::Optional<ffi::Function> GetFunction(const ffi::String& name) final {
    if (name == "get_gemm1_tactic_count" || name == "get_gemm2_tactic_count")
      return ffi::Function::FromPacked([](ffi::PackedArgs, ffi::Any* rv) { *rv = int64_t{0}; });
    if (name != "run_moe" && name != "run_gemm_profile") return std::nullopt;
    const std::string n = name;
    return ffi::Function::FromPacked([n](ffi::PackedArgs args, ffi::Any* rv) {
      record(n.c_str(), reinterpret_cast<const TVMFFIAny*>(args.data()), args.size());
    });
  }
};
}  // namespace

extern "C" {
// batch_mla: plan returns an 18-entry plan info (100, 101, ...); run returns nothing.
TVM_FFI_DLL_EXPORT int __tvm_ffi_plan(void*, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  record("plan", args, n);
  ffi::Array<int64_t> info;
  for (int64_t i = 0; i < 18; ++i) info.push_back(100 + i);
  ffi::Any any = info;
  *result = ffi::details::AnyUnsafe::MoveAnyToTVMFFIAny(std::move(any));
  return 0;
}
TVM_FFI_DLL_EXPORT int __tvm_ffi_run(void*, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  record("run", args, n);
  return ok_none(result);
}
TVM_FFI_DLL_EXPORT int __tvm_ffi_gdn_prefill(void*, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  record("gdn_prefill", args, n);
  return ok_none(result);
}
TVM_FFI_DLL_EXPORT int __tvm_ffi_set_deepgemm_jit_include_dirs(void*, const TVMFFIAny* args, int32_t n,
                                                               TVMFFIAny* result) {
  record("set_deepgemm_jit_include_dirs", args, n);
  return ok_none(result);
}
TVM_FFI_DLL_EXPORT int __tvm_ffi_init(void*, const TVMFFIAny* args, int32_t n, TVMFFIAny* result) {
  record("init", args, n);
  ffi::Any any = ffi::Module(ffi::make_object<RecordingRunner>());
  *result = ffi::details::AnyUnsafe::MoveAnyToTVMFFIAny(std::move(any));
  return 0;
}
}

namespace {
ffi::String recorded() {
  std::lock_guard lock(g_mu);
  std::string out;
  out.swap(g_log);
  return out;
}
}  // namespace
TVM_FFI_DLL_EXPORT_TYPED_FUNC(recorded, recorded);
