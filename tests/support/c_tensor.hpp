// Test support: a TensorView as the C ABI's flashcpp_tensor (same data, dtype, device, shape and strides), and a
// size-prefixed C struct built in one expression.
#pragma once
#include <cstdint>

#include "flashcpp/flashcpp.h"
#include "flashcpp/tensor.hpp"

namespace flashcpp::testing {

inline flashcpp_tensor to_c(const TensorView& v) {
  flashcpp_tensor t{};
  t.data = v.data;
  t.dtype = static_cast<int32_t>(v.dtype);
  t.device_type = static_cast<int32_t>(v.device.type);
  t.device_id = v.device.id;
  t.rank = v.rank;
  for (int i = 0; i < v.rank; ++i) {
    t.shape[i] = v.shape[i];
    t.strides[i] = v.strides[i];
  }
  return t;
}

/// A struct the C ABI reads (each begins with its size, flashcpp/c/common.h): struct_size = sizeof(T), then `fields`
/// in declaration order, as T's *_INIT would start it.
template <class T, class... Fields>
T c_struct(Fields... fields) {
  return T{static_cast<uint32_t>(sizeof(T)), fields...};
}

}  // namespace flashcpp::testing
