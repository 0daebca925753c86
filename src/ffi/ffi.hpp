// flashcpp's TVM-FFI layer: loading libtvm_ffi, packing arguments, owning objects, decoding errors,
// and the one call path every FlashInfer entry point goes through.
//
//   ffi::Library::instance()                   libtvm_ffi, loaded once per process (RTLD_GLOBAL)
//   ffi::ModuleLibrary::open(path)             a FlashInfer module .so (RTLD_LOCAL), exported functions
//   ffi::Arg / ffi::TensorArg                  borrowed argument values packed on the caller's stack
//   ffi::ObjectRef / Array / Function / Module owned objects with correct IncRef/DecRef
//   ffi::call(fn, args, binding)               sets the thread's stream for the device, calls, restores,
//                                              and throws FfiError with kind, message and backtrace
#pragma once
#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ffi/abi.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp::ffi {

// ---------------------------------------------------------------------------------------------
// libtvm_ffi

/// The process's one libtvm_ffi. Loading is thread-safe and happens once; a second load of a
/// different file is refused (two TVM-FFI runtimes in one process corrupt each other's type table).
class Library {
 public:
  /// Loads `path` (RTLD_NOW | RTLD_GLOBAL) if nothing is loaded yet; if the same file (same inode)
  /// is already loaded, returns it; if a different libtvm_ffi is loaded, throws invalid_argument.
  /// Also adopts a libtvm_ffi the process already has (linked in, or dlopened by someone else).
  /// Before loading, `path` must pass require_trusted_file (ffi/trust.hpp): Error(untrusted) otherwise.
  static const Library& load(const std::filesystem::path& path);
  /// The loaded library; throws not_found if none is loaded (the Runtime loads it).
  static const Library& instance();
  /// The loaded library, or nullptr.
  static const Library* loaded() noexcept;

  const abi::Api& api() const { return api_; }
  const std::filesystem::path& path() const { return path_; }
  abi::Version version() const { return version_; }
  std::string version_string() const;

 private:
  Library() = default;
  void* handle_ = nullptr;
  std::filesystem::path path_;
  abi::Version version_{};
  abi::Api api_{};
  friend struct LibraryLoader;
};

inline const abi::Api& api() { return Library::instance().api(); }

// ---------------------------------------------------------------------------------------------
// Objects

/// An owned reference to a TVM-FFI object (one strong count).
class ObjectRef {
 public:
  ObjectRef() = default;
  /// Takes ownership of one strong reference (e.g. from a call result).
  static ObjectRef adopt(void* obj) { ObjectRef r; r.obj_ = obj; return r; }
  /// Adds a strong reference to a borrowed object.
  static ObjectRef borrow(void* obj);
  ObjectRef(const ObjectRef& o);
  ObjectRef(ObjectRef&& o) noexcept : obj_(o.obj_) { o.obj_ = nullptr; }
  ObjectRef& operator=(ObjectRef o) noexcept { std::swap(obj_, o.obj_); return *this; }
  ~ObjectRef();

  void* get() const { return obj_; }
  explicit operator bool() const { return obj_ != nullptr; }
  int32_t type_index() const { return obj_ ? abi::object_type_index(obj_) : abi::kNone; }
  /// Gives up ownership without a DecRef.
  void* release() { void* o = obj_; obj_ = nullptr; return o; }

 protected:
  void* obj_ = nullptr;
};

/// An owned call result. Holds an object reference when the result is an object.
class Any {
 public:
  Any() { raw_.type_index = abi::kNone; raw_.zero_padding = 0; raw_.v_int64 = 0; }
  Any(const Any&) = delete;
  Any& operator=(const Any&) = delete;
  Any(Any&& o) noexcept : raw_(o.raw_) { o.raw_.type_index = abi::kNone; }
  ~Any();

  abi::Any* raw() { return &raw_; }
  int32_t type_index() const { return raw_.type_index; }
  bool is_none() const { return raw_.type_index == abi::kNone; }
  /// Typed reads; each throws ffi_error naming what was expected and what came back.
  int64_t as_int() const;
  bool as_bool() const;
  double as_float() const;
  void* as_opaque_ptr() const;
  std::string as_string() const;
  /// Moves the owned object out (type_index >= 64), leaving None behind.
  ObjectRef take_object();

 private:
  abi::Any raw_;
};

/// Reads an Array object.
class Array : public ObjectRef {
 public:
  Array() = default;
  explicit Array(ObjectRef o);  // checks the type index (Array or List)
  int64_t size() const;
  const abi::Any& at(int64_t i) const;
  /// Every element as int64 (plan-info arrays); throws if an element is not Int/Bool.
  std::vector<int64_t> to_int64() const;
  /// Builds Array<int64> through the global "ffi.Array".
  static Array from_int64(std::span<const int64_t> values);
  /// Builds Array<Tensor> (e.g. MoE quant_scales) through the global "ffi.Array".
  static Array from_objects(std::span<const ObjectRef> objects);
};

/// A callable Function object.
class Function : public ObjectRef {
 public:
  Function() = default;
  explicit Function(ObjectRef o);  // checks the type index
  /// A global function ("ffi.ModuleGetFunction", ...); throws not_found when absent.
  static Function global(std::string_view name);
  static std::optional<Function> find_global(std::string_view name);
};

/// A Module object (e.g. FlashInfer's FusedMoeRunner): methods via the global "ffi.ModuleGetFunction".
class Module : public ObjectRef {
 public:
  Module() = default;
  explicit Module(ObjectRef o);  // checks the type index
  /// The method `name`; throws not_found naming the method when the module does not have it.
  Function method(std::string_view name, bool query_imports = false) const;
};

/// A Tensor object (type index 70) created from DLPack, for parameters typed `ffi::Tensor`
/// (FlashInfer's optional extras, MoE quant_scales). It borrows the view's memory: the memory must
/// outlive the object; the object owns copies of the shape and strides.
class TensorObject : public ObjectRef {
 public:
  static TensorObject from_view(const TensorView& view);
};

// ---------------------------------------------------------------------------------------------
// Arguments

/// DLPack encoding of a TensorView: strides always set, byte_offset 0, data at the first element.
DLDataType to_dl_dtype(DType t);
DLDevice to_dl_device(Device d);

/// A DLTensor with its own shape/strides storage; lives on the caller's stack for one call.
struct TensorArg {
  // Deliberately not zero-initialised: set() writes every field the callee reads (hot path).
  DLTensor dl;
  int64_t shape[TensorView::kMaxRank];
  int64_t strides[TensorView::kMaxRank];
  TensorArg() : dl{} {}
  explicit TensorArg(const TensorView& v) { set(v); }
  TensorArg(const TensorArg&) = delete;  // dl points into this object
  TensorArg& operator=(const TensorArg&) = delete;
  void set(const TensorView& v);
};

/// A borrowed argument value (16 bytes). Build with the implicit constructors; tensors via TensorArg.
struct Arg {
  abi::Any raw;
  Arg() : Arg(nullptr) {}
  Arg(std::nullptr_t) { raw.type_index = abi::kNone; raw.zero_padding = 0; raw.v_int64 = 0; }
  Arg(bool v) { raw.type_index = abi::kBool; raw.zero_padding = 0; raw.v_int64 = v ? 1 : 0; }
  Arg(int v) : Arg(static_cast<int64_t>(v)) {}
  Arg(int64_t v) { raw.type_index = abi::kInt; raw.zero_padding = 0; raw.v_int64 = v; }
  Arg(double v) { raw.type_index = abi::kFloat; raw.zero_padding = 0; raw.v_float64 = v; }
  Arg(const char* s) { raw.type_index = abi::kRawStr; raw.zero_padding = 0; raw.v_c_str = s; }
  Arg(TensorArg& t) { raw.type_index = abi::kDLTensorPtr; raw.zero_padding = 0; raw.v_ptr = &t.dl; }
  Arg(TensorArg* t) : Arg(nullptr) { if (t) { raw.type_index = abi::kDLTensorPtr; raw.v_ptr = &t->dl; } }
  Arg(const ObjectRef& o) : Arg(nullptr) { if (o) { raw.type_index = o.type_index(); raw.v_obj = o.get(); } }
  static Arg opaque_ptr(void* p) { Arg a; if (p) { a.raw.type_index = abi::kOpaquePtr; a.raw.v_ptr = p; } return a; }
  static Arg dtype(DType t) { Arg a; a.raw.type_index = abi::kDataType; a.raw.v_int64 = 0; a.raw.v_dtype = to_dl_dtype(t); return a; }
  static Arg device(Device d) { Arg a; a.raw.type_index = abi::kDevice; a.raw.v_device = to_dl_device(d); return a; }
};
static_assert(sizeof(Arg) == sizeof(abi::Any));

// ---------------------------------------------------------------------------------------------
// Calling

/// Which (device, stream) a call runs on: `call` sets the calling thread's TVM-FFI stream for the
/// device before the call and restores the previous one after, also when the call fails.
struct StreamBinding {
  Device device;             // kDLCUDA device of the call's tensors
  cudaStream_t stream = nullptr;
};

/// Calls an exported function (`__tvm_ffi_<name>`). Throws FfiError on failure.
void call(abi::SafeCall fn, std::span<const Arg> args, Any* result, const StreamBinding* binding);
/// Calls a Function object.
void call(const Function& fn, std::span<const Arg> args, Any* result, const StreamBinding* binding);

/// How ffi::invoke packs one value (below).
namespace detail {
template <class T>
struct Packed {
  Arg arg;
  explicit Packed(const T& v) : arg(v) {}
  Arg get() const { return arg; }
};
template <>
struct Packed<TensorView> {
  TensorArg t;
  explicit Packed(const TensorView& v) : t(v) {}
  Arg get() { return Arg(t); }
};
template <>
struct Packed<TensorArg> {  // already packed by the caller (a scratch tensor the op built)
  TensorArg* t;
  explicit Packed(TensorArg& v) : t(&v) {}
  Arg get() { return Arg(*t); }
};
template <>
struct Packed<OptionalTensor> {
  TensorArg t;
  bool present;
  explicit Packed(OptionalTensor v) : present(v != nullptr) {
    if (present) t.set(*v);
  }
  Arg get() { return present ? Arg(t) : Arg(nullptr); }
};
}  // namespace detail

/// The one way ops call a module function: packs each value itself (a TensorView as a borrowed DLTensor, an
/// OptionalTensor as one or None, scalars, strings and objects as they are), binds `binding`'s stream for the
/// call and decodes a failure (FfiError). Nothing is allocated.
/// Callee: abi::SafeCall (an exported function) or Function.
template <class Callee, class... Ts>
void invoke(const Callee& fn, const StreamBinding& binding, Any* result, Ts&&... values) {
  std::tuple<detail::Packed<std::remove_cvref_t<Ts>>...> packed(values...);
  std::apply(
      [&](auto&... p) {
        const Arg args[] = {p.get()...};
        call(fn, args, result, &binding);
      },
      packed);
}

/// Decodes the error a failed call left (return code `rc`) into an FfiError and throws it.
[[noreturn]] void throw_last_error(int rc, std::string_view callee);

/// RAII: sets the thread's TVM-FFI stream for a device, restores the previous one on destruction.
class StreamScope {
 public:
  StreamScope(Device device, cudaStream_t stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;
  /// Restores now and reports a failure (the destructor restores silently).
  void restore();

 private:
  int32_t device_type_ = 0, device_id_ = 0;
  void* previous_ = nullptr;
  bool active_ = false;
};

// ---------------------------------------------------------------------------------------------
// Modules (shared objects)

/// A FlashInfer-style module .so, dlopened RTLD_LAZY | RTLD_LOCAL after libtvm_ffi is loaded.
/// Kept alive by shared_ptr for as long as any function or object from it may be used.
class ModuleLibrary {
 public:
  /// Throws not_found (no file), untrusted (the file or a directory on its path breaks the rule of
  /// require_trusted_file in ffi/trust.hpp: nothing is loaded) or not_found (dlopen failed).
  static std::shared_ptr<ModuleLibrary> open(const std::filesystem::path& path);
  ~ModuleLibrary();
  /// `__tvm_ffi_<name>`; throws not_found naming the module and the symbol.
  abi::SafeCall function(std::string_view name) const;
  /// nullptr when absent.
  abi::SafeCall find_function(std::string_view name) const noexcept;
  const std::filesystem::path& path() const { return path_; }

  /// The address of a symbol as this module resolves it (`dlsym`); nullptr when absent. (Names of a
  /// module's own symbols: core/elf_symbols.hpp.)
  void* find_symbol(const std::string& name) const noexcept;

 private:
  ModuleLibrary() = default;
  void* handle_ = nullptr;
  std::filesystem::path path_;
};

// ---------------------------------------------------------------------------------------------
// Tensor allocation hook

/// Registers flashcpp's DLPack allocator (stream-ordered, pooled: cudaMallocAsync on the thread's
/// TVM-FFI stream for the device) with libtvm_ffi, for modules that allocate (FlashInfer's MoE runner).
/// Idempotent and thread-safe. CPU prototypes are served with aligned host memory.
void install_tensor_allocator();
/// Allocation statistics of that allocator (for tests and benchmarks).
struct AllocatorStats {
  uint64_t device_allocations = 0, device_frees = 0, host_allocations = 0, host_frees = 0;
};
AllocatorStats allocator_stats();

}  // namespace flashcpp::ffi
