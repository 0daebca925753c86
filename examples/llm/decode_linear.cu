#include "decode_linear.hpp"

#include "decode_linear_device.cuh"

#include <mutex>

namespace flashcpp::llm {
namespace {

using namespace device;

constexpr int kWarps = 4;  // output-row pairs per block

__device__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ void let_next_kernel_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Phases: (1) this warp's two weight rows into registers (before the previous kernel is waited for); (2) x, or its
// RMSNorm, into shared memory as f32; (3) the dot products of every token, reduced across the warp; (4) the epilogue,
// lane t for token t.
template <class T, DecodeEpilogue E, int kChunks>
__global__ void __launch_bounds__(kWarps * 32) decode_linear_kernel(const DecodeLinearParams p) {
  extern __shared__ float xs[];  // [tokens][k]
  __shared__ float inv_rms[kMaxTokens];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t_n = static_cast<int>(p.tokens);
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool active = pair < p.rows / 2;
  int64_t r0 = 0, r1 = 0;
  RowPair<kChunks> rp;
  if (active) {
    pair_rows<E>(p.rows, pair, r0, r1);
    load_row_pair(p.w, p.k, r0, r1, lane, rp);  // (1)
  }
  wait_for_previous_kernel();
  stage_x<T>(xs, inv_rms, p.x, p.norm_w, p.tokens, p.k, p.eps);  // (2)
  let_next_kernel_launch();
  if (!active) return;
  float y0, y1;
  dot_row_pair<T, kChunks>(rp, xs, p.k, t_n, lane, y0, y1);  // (3)
  if (lane < t_n) apply_epilogue<T, E>(p, lane, r0, r1, y0, y1);  // (4)
}

// x' of the largest step (kDecodeLinearMaxTokens x kDecodeLinearMaxK f32) is 48 KiB, which with the kernel's own
// static shared memory passes the 48 KiB a launch gets without opting in: each kernel opts in to that much dynamic
// shared memory once per device (H200, 2026-12-04: 8-token steps failed with cudaErrorInvalidValue without it).
constexpr int kMaxDynamicSmem = static_cast<int>(kDecodeLinearMaxTokens * kDecodeLinearMaxK * sizeof(float));

template <class T, DecodeEpilogue E>
cudaError_t launch_typed(const DecodeLinearParams& p, cudaStream_t stream) {
  using Kernel = void (*)(DecodeLinearParams);
  static constexpr Kernel kernels[] = {decode_linear_kernel<T, E, 1>, decode_linear_kernel<T, E, 2>,
                                       decode_linear_kernel<T, E, 3>, decode_linear_kernel<T, E, 4>,
                                       decode_linear_kernel<T, E, 5>, decode_linear_kernel<T, E, 6>};
  constexpr int kKernels = static_cast<int>(sizeof(kernels) / sizeof(kernels[0]));
  static_assert(kKernels * 256 == kDecodeLinearMaxK);
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  static cudaError_t optin[kMaxDevices] = {};
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  std::call_once(once[device], [device] {
    for (const Kernel k : kernels) {
      const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxDynamicSmem);
      if (e != cudaSuccess) optin[device] = e;
    }
  });
  if (optin[device] != cudaSuccess) return optin[device];
  const int64_t chunks = (p.k + 255) / 256;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>((p.rows / 2 + kWarps - 1) / kWarps));
  cfg.blockDim = dim3(kWarps * 32);
  cfg.dynamicSmemBytes = static_cast<size_t>(p.tokens * p.k) * sizeof(float);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = p.pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernels[chunks - 1], p);
}

template <class T> cudaError_t launch_epilogue(const DecodeLinearParams& p, cudaStream_t stream) {
  switch (p.epilogue) {
    case DecodeEpilogue::store_f32: return launch_typed<T, DecodeEpilogue::store_f32>(p, stream);
    case DecodeEpilogue::add_residual: return launch_typed<T, DecodeEpilogue::add_residual>(p, stream);
    case DecodeEpilogue::silu_and_mul: return launch_typed<T, DecodeEpilogue::silu_and_mul>(p, stream);
    case DecodeEpilogue::rope_append: return launch_typed<T, DecodeEpilogue::rope_append>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool decode_linear_supports(int64_t tokens, int64_t k) {
  return tokens >= 1 && tokens <= kDecodeLinearMaxTokens && k >= 8 && k <= kDecodeLinearMaxK && k % 8 == 0;
}

cudaError_t launch_decode_linear(const DecodeLinearParams& p, cudaStream_t stream) {
  if (!decode_linear_supports(p.tokens, p.k) || p.rows < 2 || p.rows % 2 != 0 || p.w == nullptr || p.x == nullptr)
    return cudaErrorInvalidValue;
  if (p.epilogue == DecodeEpilogue::rope_append &&
      (p.head_dim % 2 != 0 || p.rows != (p.heads + 2 * p.kv_heads) * p.head_dim || p.page_size < 1))
    return cudaErrorInvalidValue;
  return p.f16 ? launch_epilogue<__half>(p, stream) : launch_epilogue<__nv_bfloat16>(p, stream);
}

}  // namespace flashcpp::llm
