#include "flashcpp/tensor.hpp"

#include <cstdint>
#include <optional>
#include <string>

#include "flashcpp/error.hpp"

namespace flashcpp {

static void check_rank(size_t rank) {
  if (rank > static_cast<size_t>(TensorView::kMaxRank))
    throw_error(ErrorCode::invalid_argument,
                "tensor rank " + std::to_string(rank) + " exceeds the maximum of " + std::to_string(TensorView::kMaxRank));
}

TensorView TensorView::contiguous(void* data, DType dtype, Device device, std::span<const int64_t> shape) {
  check_rank(shape.size());
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.rank = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    if (shape[i] < 0) throw_error(ErrorCode::invalid_argument, "tensor shape has a negative size");
    v.shape[i] = shape[i];
    v.strides[i] = stride;
    // The outermost size needs no stride after it: a view whose element count overflows int64 is still
    // built here so that validation can refuse it by name; only strides themselves must be representable.
    if (i > 0 && __builtin_mul_overflow(stride, shape[i] > 0 ? shape[i] : 1, &stride))
      throw_error(ErrorCode::invalid_argument, "tensor shape has a stride that does not fit in int64");
  }
  return v;
}

TensorView TensorView::strided(void* data, DType dtype, Device device, std::span<const int64_t> shape,
                               std::span<const int64_t> strides) {
  check_rank(shape.size());
  if (strides.size() != shape.size())
    throw_error(ErrorCode::invalid_argument, "tensor strides and shape have different lengths");
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.rank = static_cast<int32_t>(shape.size());
  for (int i = 0; i < v.rank; ++i) {
    if (shape[i] < 0) throw_error(ErrorCode::invalid_argument, "tensor shape has a negative size");
    v.shape[i] = shape[i];
    v.strides[i] = strides[i];
  }
  return v;
}

namespace {
// DLPack's names for its device types (dlpack.h 1.3), for messages about a refused one.
const char* dl_device_type_name(int32_t type) {
  switch (type) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLOpenCL: return "kDLOpenCL";
    case kDLVulkan: return "kDLVulkan";
    case kDLMetal: return "kDLMetal";
    case kDLVPI: return "kDLVPI";
    case kDLROCM: return "kDLROCM";
    case kDLROCMHost: return "kDLROCMHost";
    case kDLExtDev: return "kDLExtDev";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    case kDLOneAPI: return "kDLOneAPI";
    case kDLWebGPU: return "kDLWebGPU";
    case kDLHexagon: return "kDLHexagon";
    case kDLMAIA: return "kDLMAIA";
    case kDLTrn: return "kDLTrn";
  }
  return "unknown";
}

[[noreturn]] void dlpack_fail(ErrorCode code, const std::string& rule) {
  throw_error(code, "from_dlpack: DLTensor." + rule);
}
}  // namespace

TensorView TensorView::from_dlpack(const DLTensor& t) {
  const auto device_type = static_cast<int32_t>(t.device.device_type);
  Device device;
  switch (device_type) {
    case kDLCPU: device = Device::cpu(); break;
    // Host memory is one address space whatever id the producer gave it; flashcpp's host devices have id 0.
    case kDLCUDAHost: device = Device::cuda_host(); break;
    case kDLCUDA:
      if (t.device.device_id < 0)
        dlpack_fail(ErrorCode::invalid_argument,
                    "device.device_id is " + std::to_string(t.device.device_id) + "; a CUDA device id is >= 0");
      device = Device::cuda(t.device.device_id);
      break;
    default:
      dlpack_fail(ErrorCode::unsupported, "device.device_type is " + std::to_string(device_type) + " (" +
                                              dl_device_type_name(device_type) +
                                              "); flashcpp takes kDLCPU (1), kDLCUDA (2) and kDLCUDAHost (3)");
  }
  if (t.dtype.lanes != 1)
    dlpack_fail(ErrorCode::unsupported,
                "dtype.lanes is " + std::to_string(t.dtype.lanes) + "; flashcpp takes scalar types (lanes 1)");
  const std::optional<DType> dtype = dtype_from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes);
  if (!dtype)
    dlpack_fail(ErrorCode::unsupported,
                "dtype is code " + std::to_string(t.dtype.code) + " bits " + std::to_string(t.dtype.bits) +
                    "; flashcpp takes kDLBfloat (4) 16, kDLFloat (2) 16/32/64, kDLFloat8_e4m3fn (10) 8, "
                    "kDLFloat8_e5m2 (12) 8, kDLInt (0) and kDLUInt (1) 8/16/32/64, kDLBool (6) 8");
  if (t.ndim < 0 || t.ndim > kMaxRank)
    dlpack_fail(ErrorCode::invalid_argument,
                "ndim is " + std::to_string(t.ndim) + "; flashcpp takes ranks 0 to " + std::to_string(kMaxRank));
  if (t.ndim > 0 && t.shape == nullptr)
    dlpack_fail(ErrorCode::invalid_argument, "shape is NULL with ndim " + std::to_string(t.ndim));
  const auto rank = static_cast<size_t>(t.ndim);
  bool has_elements = true;
  for (size_t i = 0; i < rank; ++i) {
    if (t.shape[i] < 0)
      dlpack_fail(ErrorCode::invalid_argument,
                  "shape[" + std::to_string(i) + "] is " + std::to_string(t.shape[i]) + "; sizes are >= 0");
    if (t.shape[i] == 0) has_elements = false;
  }
  if (has_elements && t.data == nullptr)
    dlpack_fail(ErrorCode::invalid_argument, "data is NULL for a tensor with elements");
  void* data = t.data;
  if (data != nullptr && t.byte_offset != 0) {
    if (t.byte_offset > UINTPTR_MAX - reinterpret_cast<uintptr_t>(data))
      dlpack_fail(ErrorCode::invalid_argument,
                  "byte_offset " + std::to_string(t.byte_offset) + " goes past the end of the address space");
    data = static_cast<char*>(data) + t.byte_offset;
  }
  const std::span<const int64_t> shape(t.shape, rank);
  try {
    if (t.strides == nullptr) return contiguous(data, *dtype, device, shape);
    return strided(data, *dtype, device, shape, std::span<const int64_t>(t.strides, rank));
  } catch (const Error& e) {
    dlpack_fail(e.code(), "shape: " + e.message());  // compact strides that overflow int64
  }
}

// Both are called on views validation has not seen yet (Validator::defined itself asks for numel): a zero
// size anywhere gives 0 whatever the others are, and a count or extent past int64 saturates to INT64_MAX
// instead of overflowing (validation refuses such views by name: extent_fits).
int64_t TensorView::numel() const {
  for (int i = 0; i < rank; ++i)
    if (shape[i] == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i)
    if (__builtin_mul_overflow(n, shape[i], &n)) return INT64_MAX;
  return n;
}

int64_t TensorView::nbytes() const {
  if (numel() == 0) return 0;
  int64_t last = 0, span = 0, bytes = 0;  // offset of the last element, in elements
  for (int i = 0; i < rank; ++i) {
    const int64_t stride = strides[i] < 0 ? (strides[i] == INT64_MIN ? INT64_MAX : -strides[i]) : strides[i];
    if (__builtin_mul_overflow(shape[i] - 1, stride, &span) || __builtin_add_overflow(last, span, &last))
      return INT64_MAX;
  }
  if (__builtin_add_overflow(last, int64_t{1}, &last) ||
      __builtin_mul_overflow(last, static_cast<int64_t>(dtype_size(dtype)), &bytes))
    return INT64_MAX;
  return bytes;
}

bool TensorView::extent_fits() const {
  int64_t count = 1, last = 0;  // element count; offset of the last element, in elements
  for (int i = 0; i < rank; ++i)
    if (shape[i] < 0) return false;  // every size, also after a zero one
  for (int i = 0; i < rank; ++i)
    if (shape[i] == 0) return true;  // no elements, nothing to address
  for (int i = 0; i < rank; ++i) {
    if (strides[i] == INT64_MIN) return false;  // its magnitude is no int64 (checked before negating it)
    const int64_t stride = strides[i] < 0 ? -strides[i] : strides[i];
    int64_t span = 0;
    if (__builtin_mul_overflow(count, shape[i], &count) || __builtin_mul_overflow(shape[i] - 1, stride, &span) ||
        __builtin_add_overflow(last, span, &last))
      return false;
  }
  int64_t bytes = 0;
  return !__builtin_add_overflow(last, int64_t{1}, &last) &&
         !__builtin_mul_overflow(last, static_cast<int64_t>(dtype_size(dtype)), &bytes) &&
         !__builtin_mul_overflow(count, static_cast<int64_t>(dtype_size(dtype)), &bytes);
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    if (i > 0 && __builtin_mul_overflow(expected, shape[i], &expected)) return false;
  }
  return true;
}

std::string TensorView::describe() const {
  std::string s(dtype_name(dtype));
  s += '[';
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += "] ";
  s += device_type_name(device.type);
  if (device.type == DeviceType::cuda) s += ":" + std::to_string(device.id);
  return s;
}

}  // namespace flashcpp
