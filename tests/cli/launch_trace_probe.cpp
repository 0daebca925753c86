// Test probe for tools/launch_trace (flashcpp_launch_trace): calls the two traced functions (no GPU needed: they fail) and
// prints what they returned, so the test can check the trace forwards the runtime's result unchanged.
#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  static int not_a_kernel = 0;
  const cudaError_t set = cudaFuncSetAttribute(&not_a_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 4096);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(3, 2, 1);
  config.blockDim = dim3(128, 1, 1);
  config.dynamicSmemBytes = 512;
  const cudaError_t launch = cudaLaunchKernelExC(&config, &not_a_kernel, nullptr);
  std::printf("probe: cudaFuncSetAttribute returned %s, cudaLaunchKernelExC returned %s\n", cudaGetErrorName(set),
              cudaGetErrorName(launch));
  return set == cudaSuccess || launch == cudaSuccess ? 1 : 0;  // neither can succeed on a fake kernel
}
