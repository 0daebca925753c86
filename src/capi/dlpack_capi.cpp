#include "flashcpp/c/dlpack.h"

#include "capi/capi.hpp"

extern "C" flashcpp_status flashcpp_tensor_from_dlpack(const DLTensor* src, flashcpp_tensor* out) {
  using namespace flashcpp;
  return capi::guard([&] {
    if (src == nullptr) throw_error(ErrorCode::invalid_argument, "flashcpp_tensor_from_dlpack: argument 'src' is NULL");
    if (out == nullptr) throw_error(ErrorCode::invalid_argument, "flashcpp_tensor_from_dlpack: argument 'out' is NULL");
    const TensorView v = TensorView::from_dlpack(*src);
    flashcpp_tensor t{};  // filled whole, then published: a failure leaves *out as it was
    t.data = v.data;
    // flashcpp_dtype and flashcpp_device_type share DType's and DeviceType's values.
    t.dtype = static_cast<int32_t>(v.dtype);
    t.device_type = static_cast<int32_t>(v.device.type);
    t.device_id = v.device.id;
    t.rank = v.rank;
    for (int i = 0; i < v.rank; ++i) {
      t.shape[i] = v.shape[i];
      t.strides[i] = v.strides[i];
    }
    *out = t;
  });
}
