#include "decode_linear.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <mutex>

namespace flashcpp::llm {
namespace {

constexpr int kWarps = 4;  // output-row pairs per block
constexpr int kMaxT = static_cast<int>(kDecodeLinearMaxTokens);

template <class T> __device__ float to_f32(T v);
template <> __device__ float to_f32(__half v) { return __half2float(v); }
template <> __device__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ T from_f32(float v);
template <> __device__ __half from_f32(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 from_f32(float v) { return __float2bfloat16_rn(v); }

template <class T> __device__ float at(const uint16_t* p, int64_t i) { return to_f32(reinterpret_cast<const T*>(p)[i]); }
template <class T> __device__ void put(uint16_t* p, int64_t i, float v) { reinterpret_cast<T*>(p)[i] = from_f32<T>(v); }

template <class T> __device__ void unpack8(const uint4& v, float* f) {
  const T* h = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int j = 0; j < 8; ++j) f[j] = to_f32(h[j]);
}

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

// The two rows a warp computes for pair `pair`: a gate row and its up row, else adjacent rows (a RoPE pair).
template <DecodeEpilogue E> __device__ void pair_rows(const DecodeLinearParams& p, int64_t pair, int64_t& r0, int64_t& r1) {
  if constexpr (E == DecodeEpilogue::silu_and_mul) {
    r0 = pair;
    r1 = pair + p.rows / 2;
  } else {
    r0 = 2 * pair;
    r1 = 2 * pair + 1;
  }
}

// Phases: (1) this warp's two weight rows into registers (before the previous kernel is waited for); (2) x, or its
// RMSNorm, into shared memory as f32; (3) the dot products of every token, reduced across the warp; (4) the epilogue,
// lane t for token t.
template <class T, DecodeEpilogue E, int kChunks>
__global__ void __launch_bounds__(kWarps * 32) decode_linear_kernel(const DecodeLinearParams p) {
  extern __shared__ float xs[];  // [tokens][k]
  __shared__ float inv_rms[kMaxT];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k = p.k, pairs = p.rows / 2;
  const int t_n = static_cast<int>(p.tokens);
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool active = pair < pairs;
  int64_t r0 = 0, r1 = 0;
  if (active) pair_rows<E>(p, pair, r0, r1);

  // (1) weights: chunk c of a row is 8 elements at (c * 32 + lane) * 8.
  uint4 w0[kChunks], w1[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t e = (static_cast<int64_t>(c) * 32 + lane) * 8;
    if (active && e < k) {
      w0[c] = __ldg(reinterpret_cast<const uint4*>(p.w + r0 * k + e));
      w1[c] = __ldg(reinterpret_cast<const uint4*>(p.w + r1 * k + e));
    }
  }
  wait_for_previous_kernel();

  // (2) x' into shared memory.
  const int64_t vecs = p.tokens * k / 8;
  for (int64_t v = threadIdx.x; v < vecs; v += blockDim.x) {
    float f[8];
    unpack8<T>(reinterpret_cast<const uint4*>(p.x)[v], f);
#pragma unroll
    for (int j = 0; j < 8; ++j) xs[v * 8 + j] = f[j];
  }
  __syncthreads();
  if (p.norm_w != nullptr) {
    for (int t = warp; t < t_n; t += kWarps) {
      float ss = 0.f;
      for (int64_t i = lane; i < k; i += 32) ss += xs[t * k + i] * xs[t * k + i];
#pragma unroll
      for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (lane == 0) inv_rms[t] = rsqrtf(ss / static_cast<float>(k) + p.eps);
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < p.tokens * k; i += blockDim.x)
      xs[i] *= inv_rms[i / k] * at<T>(p.norm_w, i % k);
    __syncthreads();
  }
  let_next_kernel_launch();
  if (!active) return;

  // (3) dot products.
  float a0[kMaxT], a1[kMaxT];
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) a0[t] = a1[t] = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t e = (static_cast<int64_t>(c) * 32 + lane) * 8;
    if (e >= k) break;
    float f0[8], f1[8];
    unpack8<T>(w0[c], f0);
    unpack8<T>(w1[c], f1);
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) {
      if (t >= t_n) break;
      const float4 xa = *reinterpret_cast<const float4*>(xs + t * k + e);
      const float4 xb = *reinterpret_cast<const float4*>(xs + t * k + e + 4);
      const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        a0[t] = fmaf(f0[j], xv[j], a0[t]);
        a1[t] = fmaf(f1[j], xv[j], a1[t]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) {
    if (t >= t_n) break;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      a0[t] += __shfl_xor_sync(0xffffffffu, a0[t], o);
      a1[t] += __shfl_xor_sync(0xffffffffu, a1[t], o);
    }
  }

  // (4) epilogue: lane t writes token t (every lane holds every sum after the xor reduction).
  float y0 = 0.f, y1 = 0.f;
#pragma unroll
  for (int t = 0; t < kMaxT; ++t)
    if (t == lane) {
      y0 = a0[t];
      y1 = a1[t];
    }
  if (lane >= t_n) return;
  const int64_t t = lane;
  if constexpr (E == DecodeEpilogue::store_f32) {
    p.out_f32[t * p.rows + r0] = y0;
    p.out_f32[t * p.rows + r1] = y1;
  } else if constexpr (E == DecodeEpilogue::add_residual) {
    put<T>(p.residual, t * p.rows + r0, at<T>(p.residual, t * p.rows + r0) + y0);
    put<T>(p.residual, t * p.rows + r1, at<T>(p.residual, t * p.rows + r1) + y1);
  } else if constexpr (E == DecodeEpilogue::silu_and_mul) {
    put<T>(p.act, t * (p.rows / 2) + r0, y0 / (1.f + __expf(-y0)) * y1);
  } else {
    const int64_t d = p.head_dim, q_rows = p.heads * d, k_rows = p.kv_heads * d;
    const int32_t pos = p.positions[t];
    const int64_t dim = r0 % d;  // even: the pair is (dim, dim + 1)
    if (r0 < q_rows + k_rows) {  // q or k: rotate
      const float freq = exp2f(-static_cast<float>(dim) / static_cast<float>(d) * log2f(p.rope_theta));
      float s, c;
      sincosf(static_cast<float>(pos) * freq, &s, &c);
      const float x0 = y0, x1 = y1;
      y0 = x0 * c - x1 * s;
      y1 = x1 * c + x0 * s;
    }
    if (r0 < q_rows) {
      put<T>(p.q_out, t * p.q_stride + r0, y0);
      put<T>(p.q_out, t * p.q_stride + r1, y1);
    } else {
      const bool is_k = r0 < q_rows + k_rows;
      const int64_t kv_head = (r0 - q_rows - (is_k ? 0 : k_rows)) / d;
      const int32_t b = p.batch_indices[t];
      const int64_t page = p.kv_indices[p.kv_indptr[b] + pos / p.page_size];
      const int64_t at_slot = ((page * p.page_size + pos % p.page_size) * p.kv_heads + kv_head) * d + dim;
      uint16_t* cache = is_k ? p.k_cache : p.v_cache;
      put<T>(cache, at_slot, y0);
      put<T>(cache, at_slot + 1, y1);
    }
  }
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
