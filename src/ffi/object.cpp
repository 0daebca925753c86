// Owned objects, results, argument encodings and the one call path.
#include <cstring>

#include "ffi/ffi.hpp"

namespace flashcpp::ffi {

// ----------------------------------------------------------------------------- errors

namespace {
std::string byte_array(const abi::ByteArray& b) { return b.data ? std::string(b.data, b.size) : std::string(); }

const char* type_name(int32_t t) {
  switch (t) {
    case abi::kNone: return "None";
    case abi::kInt: return "Int";
    case abi::kBool: return "Bool";
    case abi::kFloat: return "Float";
    case abi::kOpaquePtr: return "OpaquePtr";
    case abi::kDataType: return "DataType";
    case abi::kDevice: return "Device";
    case abi::kDLTensorPtr: return "DLTensor*";
    case abi::kRawStr: return "RawStr";
    case abi::kSmallStr: return "SmallStr";
    case abi::kStr: return "String";
    case abi::kError: return "Error";
    case abi::kFunction: return "Function";
    case abi::kShape: return "Shape";
    case abi::kTensor: return "Tensor";
    case abi::kArray: return "Array";
    case abi::kMap: return "Map";
    case abi::kModule: return "Module";
    default: return t >= abi::kStaticObjectBegin ? "Object" : "POD";
  }
}

[[noreturn]] void wrong_type(const char* expected, int32_t got) {
  throw Error(ErrorCode::ffi_error, std::string("expected a result of type ") + expected + ", got " + type_name(got) +
                                        " (type index " + std::to_string(got) + ")");
}
}  // namespace

void throw_last_error(int rc, std::string_view callee) {
  void* err = nullptr;
  api().ErrorMoveFromRaised(&err);
  if (err) {
    std::string kind, message, backtrace;
    if (abi::object_type_index(err) == abi::kError) {
      const auto* cell = static_cast<const abi::ErrorCell*>(abi::cell(err));
      kind = byte_array(cell->kind);
      message = byte_array(cell->message);
      backtrace = byte_array(cell->backtrace);
    } else {
      kind = "UnknownError";
      message = "callee '" + std::string(callee) + "' raised a non-Error object (type index " +
                std::to_string(abi::object_type_index(err)) + ")";
    }
    api().ObjectDecRef(err);
    throw FfiError(std::move(kind), std::move(message), std::move(backtrace));
  }
  if (rc == -2)
    throw FfiError("EnvErrorAlreadySet",
                   "'" + std::string(callee) + "' returned -2: an environment error (e.g. an interrupt) was already set "
                   "(a module built against tvm-ffi <= 0.1.8)", "");
  throw FfiError("UnknownError",
                 "'" + std::string(callee) + "' returned " + std::to_string(rc) + " without raising an error object", "");
}

// ----------------------------------------------------------------------------- ObjectRef / Any

ObjectRef ObjectRef::borrow(void* obj) {
  if (obj) api().ObjectIncRef(obj);
  return adopt(obj);
}
ObjectRef::ObjectRef(const ObjectRef& o) : obj_(o.obj_) {
  if (obj_) api().ObjectIncRef(obj_);
}
ObjectRef::~ObjectRef() {
  if (obj_) api().ObjectDecRef(obj_);
}

Any::~Any() {
  if (raw_.type_index >= abi::kStaticObjectBegin && raw_.v_obj) api().ObjectDecRef(raw_.v_obj);
}

int64_t Any::as_int() const {
  if (raw_.type_index != abi::kInt && raw_.type_index != abi::kBool) wrong_type("Int", raw_.type_index);
  return raw_.v_int64;
}
bool Any::as_bool() const {
  if (raw_.type_index != abi::kInt && raw_.type_index != abi::kBool) wrong_type("Bool", raw_.type_index);
  return raw_.v_int64 != 0;
}
double Any::as_float() const {
  if (raw_.type_index == abi::kFloat) return raw_.v_float64;
  if (raw_.type_index == abi::kInt || raw_.type_index == abi::kBool) return static_cast<double>(raw_.v_int64);
  wrong_type("Float", raw_.type_index);
}
void* Any::as_opaque_ptr() const {
  if (raw_.type_index == abi::kNone) return nullptr;
  if (raw_.type_index != abi::kOpaquePtr) wrong_type("OpaquePtr", raw_.type_index);
  return raw_.v_ptr;
}
std::string Any::as_string() const {
  switch (raw_.type_index) {
    case abi::kSmallStr: return std::string(raw_.v_bytes, raw_.zero_padding);
    case abi::kRawStr: return raw_.v_c_str ? std::string(raw_.v_c_str) : std::string();
    case abi::kStr: return byte_array(*static_cast<const abi::ByteArray*>(abi::cell(raw_.v_obj)));
    default: wrong_type("String", raw_.type_index);
  }
}
ObjectRef Any::take_object() {
  if (raw_.type_index < abi::kStaticObjectBegin) wrong_type("Object", raw_.type_index);
  void* o = raw_.v_obj;
  raw_.type_index = abi::kNone;
  raw_.v_int64 = 0;
  return ObjectRef::adopt(o);
}

// ----------------------------------------------------------------------------- Array / Function / Module

Array::Array(ObjectRef o) : ObjectRef(std::move(o)) {
  const int32_t t = type_index();
  if (t != abi::kArray && t != 75 /* List, tvm-ffi >= 0.1.9 */) wrong_type("Array", t);
}
int64_t Array::size() const { return static_cast<const abi::SeqCell*>(abi::cell(obj_))->size; }
const abi::Any& Array::at(int64_t i) const {
  const auto* seq = static_cast<const abi::SeqCell*>(abi::cell(obj_));
  if (i < 0 || i >= seq->size)
    throw Error(ErrorCode::internal, "Array index " + std::to_string(i) + " out of range " + std::to_string(seq->size));
  return seq->data[i];
}
std::vector<int64_t> Array::to_int64() const {
  const auto* seq = static_cast<const abi::SeqCell*>(abi::cell(obj_));
  std::vector<int64_t> out(static_cast<size_t>(seq->size));
  for (int64_t i = 0; i < seq->size; ++i) {
    const abi::Any& a = seq->data[i];
    if (a.type_index != abi::kInt && a.type_index != abi::kBool) wrong_type("Int (Array element)", a.type_index);
    out[static_cast<size_t>(i)] = a.v_int64;
  }
  return out;
}

namespace {
const Function& array_constructor() {
  static const Function f = Function::global("ffi.Array");
  return f;
}
}  // namespace

Array Array::from_int64(std::span<const int64_t> values) {
  std::vector<Arg> args(values.begin(), values.end());
  Any result;
  call(array_constructor(), args, &result, nullptr);
  return Array(result.take_object());
}

Array Array::from_objects(std::span<const ObjectRef> objects) {
  std::vector<Arg> args;
  args.reserve(objects.size());
  for (const auto& o : objects) args.emplace_back(o);
  Any result;
  call(array_constructor(), args, &result, nullptr);
  return Array(result.take_object());
}

Function::Function(ObjectRef o) : ObjectRef(std::move(o)) {
  if (type_index() != abi::kFunction) wrong_type("Function", type_index());
}

std::optional<Function> Function::find_global(std::string_view name) {
  abi::ByteArray n{name.data(), name.size()};
  void* out = nullptr;
  if (int rc = api().FunctionGetGlobal(&n, &out); rc != 0) throw_last_error(rc, "TVMFFIFunctionGetGlobal");
  if (!out) return std::nullopt;
  return Function(ObjectRef::adopt(out));
}

Function Function::global(std::string_view name) {
  if (auto f = find_global(name)) return *f;
  throw Error(ErrorCode::not_found, "TVM-FFI global function '" + std::string(name) + "' is not registered");
}

Module::Module(ObjectRef o) : ObjectRef(std::move(o)) {
  if (type_index() != abi::kModule) wrong_type("Module", type_index());
}

Function Module::method(std::string_view name, bool query_imports) const {
  static const Function get_function = Function::global("ffi.ModuleGetFunction");
  const std::string n(name);
  Arg args[] = {Arg(static_cast<const ObjectRef&>(*this)), Arg(n.c_str()), Arg(query_imports)};
  Any result;
  call(get_function, args, &result, nullptr);
  if (result.is_none()) throw Error(ErrorCode::not_found, "module has no method '" + n + "'");
  return Function(result.take_object());
}

// ----------------------------------------------------------------------------- tensors

DLDataType to_dl_dtype(DType t) { return DLDataType{dtype_dlpack_code(t), dtype_bits(t), 1}; }
DLDevice to_dl_device(Device d) { return DLDevice{static_cast<DLDeviceType>(d.type), d.id}; }

void TensorArg::set(const TensorView& v) {
  for (int i = 0; i < v.rank; ++i) {
    shape[i] = v.shape[static_cast<size_t>(i)];
    strides[i] = v.strides[static_cast<size_t>(i)];
  }
  dl.data = v.data;
  dl.device = to_dl_device(v.device);
  dl.ndim = v.rank;
  dl.dtype = to_dl_dtype(v.dtype);
  dl.shape = shape;
  dl.strides = strides;
  dl.byte_offset = 0;
}

namespace {
struct ManagedView {
  DLManagedTensorVersioned managed{};
  int64_t shape[TensorView::kMaxRank]{};
  int64_t strides[TensorView::kMaxRank]{};
};
void delete_managed_view(DLManagedTensorVersioned* m) { delete static_cast<ManagedView*>(m->manager_ctx); }
}  // namespace

TensorObject TensorObject::from_view(const TensorView& v) {
  auto* holder = new ManagedView();
  DLManagedTensorVersioned& m = holder->managed;
  m.version.major = DLPACK_MAJOR_VERSION;
  m.version.minor = DLPACK_MINOR_VERSION;
  m.manager_ctx = holder;
  m.deleter = &delete_managed_view;
  m.flags = 0;
  for (int i = 0; i < v.rank; ++i) {
    holder->shape[i] = v.shape[static_cast<size_t>(i)];
    holder->strides[i] = v.strides[static_cast<size_t>(i)];
  }
  m.dl_tensor.data = v.data;
  m.dl_tensor.device = to_dl_device(v.device);
  m.dl_tensor.ndim = v.rank;
  m.dl_tensor.dtype = to_dl_dtype(v.dtype);
  m.dl_tensor.shape = holder->shape;
  m.dl_tensor.strides = holder->strides;
  m.dl_tensor.byte_offset = 0;
  void* out = nullptr;
  if (int rc = api().TensorFromDLPackVersioned(&m, 0, 0, &out); rc != 0) {
    delete holder;
    throw_last_error(rc, "TVMFFITensorFromDLPackVersioned");
  }
  TensorObject t;
  t.obj_ = out;
  return t;
}

// ----------------------------------------------------------------------------- calling

StreamScope::StreamScope(Device device, cudaStream_t stream)
    : device_type_(static_cast<int32_t>(device.type)), device_id_(device.id) {
  if (int rc = api().EnvSetStream(device_type_, device_id_, stream, &previous_); rc != 0)
    throw_last_error(rc, "TVMFFIEnvSetStream");
  active_ = true;
}

void StreamScope::restore() {
  if (!active_) return;
  active_ = false;
  if (int rc = api().EnvSetStream(device_type_, device_id_, previous_, nullptr); rc != 0)
    throw_last_error(rc, "TVMFFIEnvSetStream (restore)");
}

StreamScope::~StreamScope() {
  if (active_) {
    active_ = false;
    if (api().EnvSetStream(device_type_, device_id_, previous_, nullptr) != 0) {
      void* err = nullptr;  // drop the error: a destructor must not throw
      api().ErrorMoveFromRaised(&err);
      if (err) api().ObjectDecRef(err);
    }
  }
}

namespace {
template <class Invoke>
void call_with_binding(Invoke&& invoke, const StreamBinding* binding, std::string_view callee) {
  if (binding == nullptr) {
    if (int rc = invoke(); rc != 0) throw_last_error(rc, callee);
    return;
  }
  // Hot path: the stream set and restore inline (the StreamScope object is for the error path's unwinding).
  const abi::Api& a = api();
  const auto type = static_cast<int32_t>(binding->device.type);
  const int32_t id = binding->device.id;
  void* previous = nullptr;
  if (int rc = a.EnvSetStream(type, id, binding->stream, &previous); rc != 0) throw_last_error(rc, "TVMFFIEnvSetStream");
  if (int rc = invoke(); rc != 0) {
    // Decode the callee's error first (it lives in thread-local storage), then restore the stream.
    try {
      throw_last_error(rc, callee);
    } catch (...) {
      if (a.EnvSetStream(type, id, previous, nullptr) != 0) {
        void* err = nullptr;
        a.ErrorMoveFromRaised(&err);
        if (err) a.ObjectDecRef(err);
      }
      throw;
    }
  }
  if (int rc = a.EnvSetStream(type, id, previous, nullptr); rc != 0) throw_last_error(rc, "TVMFFIEnvSetStream (restore)");
}

void reset(Any* result) {
  abi::Any* raw = result->raw();
  if (raw->type_index >= abi::kStaticObjectBegin && raw->v_obj) api().ObjectDecRef(raw->v_obj);
  raw->type_index = abi::kNone;
  raw->zero_padding = 0;
  raw->v_int64 = 0;
}
}  // namespace

void call(abi::SafeCall fn, std::span<const Arg> args, Any* result, const StreamBinding* binding) {
  Any scratch;
  Any* out = result ? result : &scratch;
  reset(out);
  const auto* raw_args = reinterpret_cast<const abi::Any*>(args.data());
  const auto n = static_cast<int32_t>(args.size());
  call_with_binding([&] { return fn(nullptr, raw_args, n, out->raw()); }, binding, "module function");
}

void call(const Function& fn, std::span<const Arg> args, Any* result, const StreamBinding* binding) {
  Any scratch;
  Any* out = result ? result : &scratch;
  reset(out);
  // TVMFFIFunctionCall takes a non-const argument array; it does not modify borrowed views.
  auto* raw_args = const_cast<abi::Any*>(reinterpret_cast<const abi::Any*>(args.data()));
  const auto n = static_cast<int32_t>(args.size());
  call_with_binding([&] { return api().FunctionCall(fn.get(), raw_args, n, out->raw()); }, binding, "function");
}

}  // namespace flashcpp::ffi
