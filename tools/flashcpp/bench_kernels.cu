// The bare-launch floor for `flashcpp bench`: an empty kernel launched through cudaLaunchKernel.
#include <cuda_runtime_api.h>

namespace flashcpp::cli {

__global__ void empty_kernel() {}

cudaError_t launch_empty_kernel(cudaStream_t stream) {
  return cudaLaunchKernel(reinterpret_cast<const void*>(&empty_kernel), dim3(1), dim3(1), nullptr, 0, stream);
}

}  // namespace flashcpp::cli
