/* A C program built with `pkg-config --cflags --libs flashcpp` against an installed (and moved) prefix. */
#include <flashcpp/flashcpp.h>
#include <stdio.h>

int main(void) {
  int64_t shape[1] = {3};
  float data[3] = {0};
  DLTensor dl = {0};
  flashcpp_tensor t;
  dl.data = data;
  dl.device.device_type = kDLCPU;
  dl.ndim = 1;
  dl.dtype.code = kDLFloat;
  dl.dtype.bits = 32;
  dl.dtype.lanes = 1;
  dl.shape = shape;
  printf("pkg-config consumer: %s, C ABI %u\n", flashcpp_version(), flashcpp_abi_version());
  if (flashcpp_tensor_from_dlpack(&dl, &t) != FLASHCPP_SUCCESS || t.dtype != FLASHCPP_F32 || t.strides[0] != 1) return 1;
  return flashcpp_abi_version() == FLASHCPP_C_ABI_VERSION ? 0 : 1;
}
