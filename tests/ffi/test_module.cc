// A TVM-FFI module built with the real tvm-ffi headers (like FlashInfer's modules: exported
// `__tvm_ffi_<name>` functions, libtvm_ffi not linked). Used by the ffi tests and the call benchmark.
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <sstream>
#include <string>

namespace ffi = tvm::ffi;

namespace {
int64_t echo_int(int64_t v) { return v; }
bool echo_bool(bool v) { return v; }
double echo_float(double v) { return v; }
void* echo_ptr(void* p) { return p; }
ffi::String echo_dtype(DLDataType t) {
  return std::to_string(t.code) + ":" + std::to_string(t.bits) + ":" + std::to_string(t.lanes);
}
int64_t echo_device(DLDevice d) { return static_cast<int64_t>(d.device_type) * 100 + d.device_id; }
ffi::String echo_string(ffi::String s) { return s; }

// "dtype shape strides device byte_offset" of a DLTensor seen through TensorView.
ffi::String tensor_info(ffi::TensorView t) {
  std::ostringstream os;
  os << static_cast<int>(t.dtype().code) << ":" << static_cast<int>(t.dtype().bits) << " [";
  for (int i = 0; i < t.ndim(); ++i) os << (i ? "," : "") << t.size(i);
  os << "] [";
  for (int i = 0; i < t.ndim(); ++i) os << (i ? "," : "") << t.stride(i);
  os << "] " << static_cast<int>(t.device().device_type) << ":" << t.device().device_id << " "
     << t.byte_offset();
  return os.str();
}

// Sum of a strided 2-D float32 CPU tensor.
double sum2d_f32(ffi::TensorView t) {
  TVM_FFI_ICHECK_EQ(t.ndim(), 2);
  const float* p = static_cast<const float*>(t.data_ptr());
  double s = 0;
  for (int64_t i = 0; i < t.size(0); ++i)
    for (int64_t j = 0; j < t.size(1); ++j) s += p[i * t.stride(0) + j * t.stride(1)];
  return s;
}

bool has_tensor(ffi::Optional<ffi::TensorView> t) { return t.has_value(); }
int64_t tensor_object_numel(ffi::Tensor t) { return t.numel(); }
ffi::Array<int64_t> iota(int64_t n) {
  ffi::Array<int64_t> a;
  for (int64_t i = 0; i < n; ++i) a.push_back(i * 10);
  return a;
}
int64_t array_sum(ffi::Array<int64_t> a) {
  int64_t s = 0;
  for (int64_t v : a) s += v;
  return s;
}
int64_t tensor_array_numel(ffi::Array<ffi::Tensor> a) {
  int64_t s = 0;
  for (const auto& t : a) s += t.numel();
  return s;
}
ffi::Any identity(ffi::Any v) { return v; }
void throw_value_error(ffi::String msg) { TVM_FFI_THROW(ValueError) << "callee says: " << std::string(msg); }
void* current_stream(int64_t device_type, int64_t device_id) {
  return TVMFFIEnvGetStream(static_cast<int32_t>(device_type), static_cast<int32_t>(device_id));
}
void stream_then_throw(int64_t device_type, int64_t device_id) {
  TVM_FFI_THROW(RuntimeError) << "stream was " << TVMFFIEnvGetStream(static_cast<int32_t>(device_type),
                                                                     static_cast<int32_t>(device_id));
}
// Allocates through the environment allocator (what FlashInfer's MoE runner does) and reports numel.
int64_t env_alloc_numel(int64_t n) {
  DLTensor proto{};
  int64_t shape[1] = {n};
  proto.device = DLDevice{kDLCPU, 0};
  proto.ndim = 1;
  proto.dtype = DLDataType{kDLFloat, 32, 1};
  proto.shape = shape;
  TVMFFIObjectHandle out = nullptr;
  TVM_FFI_CHECK_SAFE_CALL(TVMFFIEnvTensorAlloc(&proto, &out));
  ffi::Tensor t = ffi::details::ObjectUnsafe::ObjectRefFromObjectPtr<ffi::Tensor>(
      ffi::details::ObjectUnsafe::ObjectPtrFromOwned<ffi::Object>(static_cast<TVMFFIObject*>(out)));
  static_cast<float*>(t.data_ptr())[n - 1] = 1.0f;  // the memory must be writable
  return t.numel();
}
// The benchmark's callee: five tensors and three scalars, trivial body.
int64_t five_tensors_three_scalars(ffi::TensorView a, ffi::TensorView b, ffi::TensorView c, ffi::TensorView d,
                                   ffi::TensorView e, int64_t i, double f, bool flag) {
  return a.ndim() + b.ndim() + c.ndim() + d.ndim() + e.ndim() + i + static_cast<int64_t>(f) + flag;
}
}  // namespace

// The shape of CUTLASS's device::Universal one-time setup flag: a function-local static of a class
// template member, which g++ emits as a GNU-unique symbol of the module's .dynsym (the ModuleLibrary
// symbol test finds and clears it from outside, as gdn.cpp does for FlashInfer's GDN module).
namespace flashcpp_test {
template <class Kernel>
struct OnceSetup {
  static bool is_initialized(bool set = false) {
    static bool initialized = false;
    if (set) initialized = true;
    return initialized;
  }
};
}  // namespace flashcpp_test

namespace {
// Returns whether the setup had already run, then marks it done.
bool once_setup() {
  const bool before = flashcpp_test::OnceSetup<int>::is_initialized();
  flashcpp_test::OnceSetup<int>::is_initialized(true);
  return before;
}
}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(once_setup, once_setup);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(echo_int, echo_int);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(echo_bool, echo_bool);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(echo_float, echo_float);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(echo_ptr, echo_ptr);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(echo_dtype, echo_dtype);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(echo_device, echo_device);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(echo_string, echo_string);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tensor_info, tensor_info);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(sum2d_f32, sum2d_f32);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(has_tensor, has_tensor);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tensor_object_numel, tensor_object_numel);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(iota, iota);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(array_sum, array_sum);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(tensor_array_numel, tensor_array_numel);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(identity, identity);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(throw_value_error, throw_value_error);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(current_stream, current_stream);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(stream_then_throw, stream_then_throw);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(env_alloc_numel, env_alloc_numel);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(five_tensors_three_scalars, five_tensors_three_scalars);

// Modules built against tvm-ffi <= 0.1.8 can return -2 with no error object; and a broken callee may
// return nonzero without raising. Both must still be decoded into clear errors.
extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_return_minus2(void*, const TVMFFIAny*, int32_t, TVMFFIAny*) { return -2; }
extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_return_minus1_silently(void*, const TVMFFIAny*, int32_t, TVMFFIAny*) {
  return -1;
}
