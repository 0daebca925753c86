// TensorView: the one non-owning tensor description used by every flashcpp API.
#pragma once
#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "flashcpp/dtype.hpp"

namespace flashcpp {

/// A non-owning view of memory as a strided tensor: data pointer, dtype, device, shape, strides.
/// Strides are in elements (as in DLPack) and always set. Rank is at most kMaxRank.
/// A view never frees or copies memory; the caller keeps the memory alive for the call.
/// Every op refuses (invalid_argument, naming the argument) a view with elements whose data is NULL, whose data
/// pointer is not aligned to its element size, whose byte extent does not fit in int64, or whose elements'
/// addresses (data plus the extent, either stride sign) leave the address space; a host-memory argument may span
/// at most kMaxHostBytes.
struct TensorView {
  static constexpr int kMaxRank = 6;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int32_t rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};

  /// Row-major contiguous view. Throws invalid_argument for rank > kMaxRank or negative sizes.
  static TensorView contiguous(void* data, DType dtype, Device device, std::span<const int64_t> shape);
  static TensorView contiguous(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape) {
    return contiguous(data, dtype, device, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  /// Explicitly strided view (strides in elements).
  static TensorView strided(void* data, DType dtype, Device device, std::span<const int64_t> shape,
                            std::span<const int64_t> strides);
  static TensorView strided(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides) {
    return strided(data, dtype, device, std::span<const int64_t>(shape.begin(), shape.size()),
                   std::span<const int64_t>(strides.begin(), strides.size()));
  }

  /// A view of a DLPack tensor: nothing is copied or owned (the producer keeps the memory alive for the
  /// call; for a DLManagedTensor pass its `dl_tensor`). data is `t.data + t.byte_offset`; NULL strides mean
  /// compact row-major. Validated here:
  ///  - device.device_type kDLCPU, kDLCUDA (device_id >= 0) or kDLCUDAHost (the id of host memory is read
  ///    as 0); any other device type is Error(unsupported)
  ///  - dtype lanes 1 and a (code, bits) pair flashcpp has a DType for: kDLBfloat 16 (bf16), kDLFloat
  ///    16/32/64 (f16/f32/f64), kDLFloat8_e4m3fn 8 (e4m3), kDLFloat8_e5m2 8 (e5m2), kDLInt 8/16/32/64,
  ///    kDLUInt 8/16/32/64, kDLBool 8; any other is Error(unsupported)
  ///  - ndim in [0, kMaxRank], shape not NULL when ndim > 0, no negative size, compact strides that fit in
  ///    int64, data not NULL when the tensor has elements, data + byte_offset not past the address space;
  ///    each broken rule is Error(invalid_argument)
  /// Messages name the DLTensor field and the value received ("from_dlpack: DLTensor.dtype.lanes is 4; ...").
  /// Everything else (dtype, shape, strides, alignment, device of each argument) is the op's to check.
  static TensorView from_dlpack(const DLTensor& t);

  /// The largest byte extent a host-memory argument may span (1 TiB): validation refuses larger host views, whose
  /// strides could only reach memory outside any allocation.
  static constexpr int64_t kMaxHostBytes = int64_t{1} << 40;

  bool defined() const { return data != nullptr || numel() == 0; }
  int64_t size(int dim) const { return shape[static_cast<size_t>(dim < 0 ? dim + rank : dim)]; }
  int64_t stride(int dim) const { return strides[static_cast<size_t>(dim < 0 ? dim + rank : dim)]; }
  int64_t numel() const;
  /// Whether the element count and the byte extent (both ends, strides of either sign) fit in int64 and no
  /// size is negative: numel() and nbytes() are meaningful only then. Validation checks it first.
  bool extent_fits() const;
  /// Bytes spanned by the elements (for a contiguous view: numel * element size).
  int64_t nbytes() const;
  bool is_contiguous() const;
  bool last_dim_contiguous() const { return rank == 0 || shape[rank - 1] <= 1 || strides[rank - 1] == 1; }
  /// "bf16[8, 32, 128] cuda:0" — used in error messages.
  std::string describe() const;

  template <class T>
  T* data_as() const { return static_cast<T*>(data); }
};

/// An optional tensor argument: `std::nullopt`-like but without the extra flag in the view.
using OptionalTensor = const TensorView*;

}  // namespace flashcpp
