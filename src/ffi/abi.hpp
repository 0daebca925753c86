// Our own description of the TVM-FFI C ABI (tvm-ffi 0.1.x): value layouts, type indices and the
// function signatures we resolve from libtvm_ffi at run time. flashcpp never includes tvm-ffi's headers;
// the static_asserts below and tests/ffi pin these layouts against the real library.
#pragma once
#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace flashcpp::ffi::abi {

enum TypeIndex : int32_t {
  kNone = 0, kInt = 1, kBool = 2, kFloat = 3, kOpaquePtr = 4, kDataType = 5, kDevice = 6, kDLTensorPtr = 7,
  kRawStr = 8, kByteArrayPtr = 9, kObjectRValueRef = 10, kSmallStr = 11, kSmallBytes = 12,
  kStaticObjectBegin = 64, kObject = 64, kStr = 65, kBytes = 66, kError = 67, kFunction = 68, kShape = 69,
  kTensor = 70, kArray = 71, kMap = 72, kModule = 73,
};

/// TVMFFIAny: 16 bytes; call arguments are borrowed views, results are owned.
struct Any {
  int32_t type_index;
  uint32_t zero_padding;  // small_str_len for small strings
  union {
    int64_t v_int64;
    double v_float64;
    void* v_ptr;
    const char* v_c_str;
    void* v_obj;
    DLDataType v_dtype;
    DLDevice v_device;
    char v_bytes[8];
    uint64_t v_uint64;
  };
};
static_assert(sizeof(Any) == 16 && alignof(Any) == 8);
static_assert(offsetof(Any, v_int64) == 8);

/// Object header (24 bytes): strong count in the low 32 bits of combined_ref_count.
struct ObjectHeader {
  uint64_t combined_ref_count;
  int32_t type_index;
  uint32_t padding;
  void (*deleter)(void* self, int flags);
};
static_assert(sizeof(ObjectHeader) == 24);

struct ByteArray {
  const char* data;
  size_t size;
};
/// Error cell, right after the header: kind, message, backtrace (most recent first), then more fields.
struct ErrorCell {
  ByteArray kind;
  ByteArray message;
  ByteArray backtrace;
};
/// Array / List cell: `data` points to `size` owned Anys.
struct SeqCell {
  Any* data;
  int64_t size;
  int64_t capacity;
  void (*data_deleter)(void*);
};
struct Version {
  uint32_t major, minor, patch;
};

inline void* cell(void* obj) { return static_cast<char*>(obj) + sizeof(ObjectHeader); }
inline int32_t object_type_index(void* obj) { return static_cast<ObjectHeader*>(obj)->type_index; }
inline uint32_t strong_count(void* obj) {
  return static_cast<uint32_t>(static_cast<ObjectHeader*>(obj)->combined_ref_count & 0xffffffffu);
}

using SafeCall = int (*)(void* handle, const Any* args, int32_t num_args, Any* result);
using DLPackAllocator = int (*)(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                                void (*set_error)(void* error_ctx, const char* kind, const char* message));

/// The libtvm_ffi entry points flashcpp requires, each once as X(name, type): the symbol "TVMFFI" + name, held in
/// Api's member `name` (library.cpp resolves them all, in this order, with dlsym).
#define FLASHCPP_TVMFFI_REQUIRED_ENTRY_POINTS(X)                                                              \
  X(GetVersion, void (*)(Version*))                                                                           \
  X(ObjectIncRef, int (*)(void*))                                                                             \
  X(ObjectDecRef, int (*)(void*))                                                                             \
  X(ErrorMoveFromRaised, void (*)(void** out))                                                                \
  X(ErrorSetRaisedFromCStr, void (*)(const char* kind, const char* message))                                  \
  X(FunctionGetGlobal, int (*)(const ByteArray* name, void** out))                                            \
  X(FunctionCall, int (*)(void* func, Any* args, int32_t num_args, Any* result))                              \
  X(FunctionCreate, int (*)(void* self, SafeCall safe_call, void (*deleter)(void*), void** out))              \
  X(EnvSetStream, int (*)(int32_t device_type, int32_t device_id, void* stream, void** out_original))         \
  X(EnvGetStream, void* (*)(int32_t device_type, int32_t device_id))                                          \
  X(EnvSetDLPackManagedTensorAllocator,                                                                       \
    int (*)(DLPackAllocator allocator, int write_to_global_context, DLPackAllocator* out_original))            \
  X(TensorFromDLPackVersioned,                                                                                \
    int (*)(DLManagedTensorVersioned* from, int32_t require_alignment, int32_t require_contiguous, void** out))

/// The libtvm_ffi entry points flashcpp uses, resolved once with dlsym.
struct Api {
#define FLASHCPP_TVMFFI_MEMBER(NAME, TYPE) std::type_identity_t<TYPE> NAME;
  FLASHCPP_TVMFFI_REQUIRED_ENTRY_POINTS(FLASHCPP_TVMFFI_MEMBER)
#undef FLASHCPP_TVMFFI_MEMBER
  int (*StringFromByteArray)(const ByteArray* input, Any* out);  // optional (may be null)
};

}  // namespace flashcpp::ffi::abi
