/* flashcpp C ABI: DLPack in. Any framework's tensor (PyTorch, JAX, CuPy, TVM-FFI, ...) exported as a DLTensor
 * becomes the flashcpp_tensor every C entry point takes. */
#ifndef FLASHCPP_C_DLPACK_H_
#define FLASHCPP_C_DLPACK_H_
#include <dlpack/dlpack.h>

#include "flashcpp/c/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *out with a view of *src: nothing is copied or owned (the producer keeps the memory alive while
 * flashcpp uses it; for a DLManagedTensor pass &managed->dl_tensor). out->data is src->data +
 * src->byte_offset; NULL strides mean compact row-major; the rules are TensorView::from_dlpack's
 * (flashcpp/tensor.hpp):
 *   device.device_type kDLCPU, kDLCUDA (device_id >= 0) or kDLCUDAHost, else FLASHCPP_UNSUPPORTED;
 *   dtype lanes 1 with kDLBfloat 16, kDLFloat 16/32/64, kDLFloat8_e4m3fn 8, kDLFloat8_e5m2 8, kDLInt or
 *   kDLUInt 8/16/32/64, kDLBool 8, else FLASHCPP_UNSUPPORTED;
 *   ndim in [0, FLASHCPP_MAX_RANK], shape not NULL when ndim > 0, no negative size, compact strides that fit
 *   in int64, data not NULL when the tensor has elements, else FLASHCPP_INVALID_ARGUMENT.
 * On failure flashcpp_last_error() names the DLTensor field and the value received, and *out is untouched.
 * src or out NULL is FLASHCPP_INVALID_ARGUMENT. */
flashcpp_status flashcpp_tensor_from_dlpack(const DLTensor* src, flashcpp_tensor* out);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_DLPACK_H_ */
