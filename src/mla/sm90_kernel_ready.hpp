// Whether a Hopper (sm_90a) kernel can run on a device, and its dynamic shared-memory limit raised there:
// compute capability 9.0, `smem_bytes` of opt-in shared memory, and sm_90a code for the kernel in this
// build. Checked once per (kernel, device), thread-safe; the kernels' launchers call it before each launch.
#pragma once
#include <cuda_runtime_api.h>

#include <climits>
#include <cstdint>
#include <mutex>

namespace flashcpp::mla::kernels {

template <auto Kernel>
bool sm90a_kernel_ready(int device, int smem_bytes) {
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  static bool ready[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) return false;
  std::call_once(once[device], [device, smem_bytes] {
    int major = 0, minor = 0, optin = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (major != 9 || minor != 0 || optin < smem_bytes) return;
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, Kernel) != cudaSuccess ||
        cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // no image for this device in this build, or the attribute was refused
      return;
    }
    if (attr.ptxVersion < 90) return;  // only a pre-Hopper build of the kernel (its body is a trap)
    ready[device] = true;
  });
  return ready[device];
}

/// Launches `kernel(args)` on `blocks` CTAs of `threads` threads with `smem_bytes` of dynamic shared memory on
/// `stream`: false, launching nothing, for a grid outside [1, INT_MAX]; false after a failed launch (its error left in
/// cudaGetLastError).
template <class Args>
bool launch_grid(void (*kernel)(Args), int64_t blocks, int threads, int smem_bytes, cudaStream_t stream,
                 const Args& args) {
  if (blocks < 1 || blocks > INT_MAX) return false;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, kernel, args) == cudaSuccess && cudaGetLastError() == cudaSuccess;
}

}  // namespace flashcpp::mla::kernels
