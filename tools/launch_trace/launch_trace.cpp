// flashcpp_launch_trace: an LD_PRELOAD diagnostic for multi-GPU launch problems inside modules we do not
// build (FlashInfer's). It logs, to stderr, every cudaFuncSetAttribute and cudaLaunchKernelExC call with
// the calling thread's current device, the stream's device, the grid, block and dynamic shared memory
// asked for, the kernel's dynamic shared-memory limit on the current device, and the result; then it
// returns exactly what the CUDA runtime returned. Only calls that reach the shared libcudart through its
// dynamic symbols are seen (modules linked with -lcudart, as flashcpp builds them).
//
//   LD_PRELOAD=build/tools/launch_trace/libflashcpp_launch_trace.so flashcpp bench-mla-gdn-moe --op gdn --device 1
//
// This is how the GDN multi-GPU failure was diagnosed (docs/MULTI_GPU.md). Not for production runs: every
// traced call costs a few extra runtime queries.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>

namespace {

template <class Fn>
Fn next_symbol(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}

int current_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) (void)cudaGetLastError();
  return d;
}

}  // namespace

extern "C" cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  using Fn = cudaError_t (*)(const void*, cudaFuncAttribute, int);
  static const Fn real = next_symbol<Fn>("cudaFuncSetAttribute");
  const int device = current_device();
  const cudaError_t result = real ? real(func, attr, value) : cudaErrorNotSupported;
  std::fprintf(stderr, "[trace] cudaFuncSetAttribute func=%p device=%d attr=%d value=%d -> %s\n", func, device,
               static_cast<int>(attr), value, cudaGetErrorName(result));
  return result;
}

extern "C" cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  using Fn = cudaError_t (*)(const cudaLaunchConfig_t*, const void*, void**);
  static const Fn real = next_symbol<Fn>("cudaLaunchKernelExC");
  const int device = current_device();
  int stream_device = -1;
  cudaFuncAttributes attributes{};
  if (config != nullptr) {
    if (cudaStreamGetDevice(config->stream, &stream_device) != cudaSuccess) (void)cudaGetLastError();
  }
  if (cudaFuncGetAttributes(&attributes, func) != cudaSuccess) (void)cudaGetLastError();
  const cudaError_t result = real ? real(config, func, args) : cudaErrorNotSupported;
  if (config == nullptr) {
    std::fprintf(stderr, "[trace] cudaLaunchKernelExC func=%p config=null -> %s\n", func, cudaGetErrorName(result));
    return result;
  }
  std::fprintf(stderr,
               "[trace] cudaLaunchKernelExC func=%p device=%d stream_device=%d grid=%u,%u,%u block=%u,%u,%u "
               "dynamic_smem=%zu max_dynamic_smem=%d attrs=%u -> %s\n",
               func, device, stream_device, config->gridDim.x, config->gridDim.y, config->gridDim.z,
               config->blockDim.x, config->blockDim.y, config->blockDim.z, config->dynamicSmemBytes,
               attributes.maxDynamicSharedSizeBytes, config->numAttrs, cudaGetErrorName(result));
  for (unsigned i = 0; i < config->numAttrs && config->attrs != nullptr; ++i) {
    const cudaLaunchAttribute& a = config->attrs[i];
    if (a.id == cudaLaunchAttributeClusterDimension)
      std::fprintf(stderr, "[trace]   cluster=%u,%u,%u\n", a.val.clusterDim.x, a.val.clusterDim.y, a.val.clusterDim.z);
    else
      std::fprintf(stderr, "[trace]   attribute id=%d\n", static_cast<int>(a.id));
  }
  return result;
}
