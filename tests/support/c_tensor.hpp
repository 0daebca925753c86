// Test support: a TensorView as the C ABI's flashcpp_tensor (same data, dtype, device, shape and strides).
#pragma once
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

}  // namespace flashcpp::testing
