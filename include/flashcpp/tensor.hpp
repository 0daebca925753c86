// TensorView: the one non-owning tensor description used by every flashcpp API.
#pragma once
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
