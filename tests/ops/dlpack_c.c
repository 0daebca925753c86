/* flashcpp/c/dlpack.h compiles as C and its function is callable from C with a hand-built DLTensor. */
#include "flashcpp/flashcpp.h"

int flashcpp_dlpack_header_is_c(void) {
  float data[6] = {0};
  int64_t shape[2] = {2, 3};
  DLTensor t = {0};
  flashcpp_tensor out;
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 2;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = NULL;
  if (flashcpp_tensor_from_dlpack(&t, &out) != FLASHCPP_SUCCESS) return 0;
  return out.dtype == FLASHCPP_F32 && out.strides[0] == 3 && out.strides[1] == 1 ? 1 : 0;
}
