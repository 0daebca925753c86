// Device pieces of the fused decode linear layers (decode_linear.hpp), shared by the one-kernel-per-layer path
// (decode_linear.cu) and the persistent decode step (decode_step.cu), so both compute the same sums in the same order:
// a warp holds two weight rows in registers (chunk c of a row is 8 values at (c * 32 + lane) * 8), dots them with x'
// (f32 in shared memory, [tokens][k]) for every token, reduces across the warp, and lane t applies the epilogue to
// token t. Activations that another block may have written (x, the residual, the caches) are read through L2
// (ld.global.cg): inside one persistent kernel the L1 of another SM may hold a stale copy. The index arrays (positions,
// pages) and the weights are written before the kernel starts and only read, so they take the read-only path.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "decode_linear.hpp"

namespace flashcpp::llm::device {

inline constexpr int kMaxTokens = static_cast<int>(kDecodeLinearMaxTokens);

template <class T> __device__ inline float to_f32(T v);
template <> __device__ inline float to_f32(__half v) { return __half2float(v); }
template <> __device__ inline float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ inline T from_f32(float v);
template <> __device__ inline __half from_f32(float v) { return __float2half_rn(v); }
template <> __device__ inline __nv_bfloat16 from_f32(float v) { return __float2bfloat16_rn(v); }

/// The 16-bit value at p[i] as f32, read through L2.
template <class T> __device__ inline float at(const uint16_t* p, int64_t i) {
  const unsigned short bits = __ldcg(reinterpret_cast<const unsigned short*>(p) + i);
  return to_f32(*reinterpret_cast<const T*>(&bits));
}
template <class T> __device__ inline void put(uint16_t* p, int64_t i, float v) {
  reinterpret_cast<T*>(p)[i] = from_f32<T>(v);
}

template <class T> __device__ inline void unpack8(const uint4& v, float* f) {
  const T* h = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int j = 0; j < 8; ++j) f[j] = to_f32(h[j]);
}

// The two rows a warp computes for pair `pair`: a gate row and its up row, else adjacent rows (a RoPE pair).
template <DecodeEpilogue E> __device__ inline void pair_rows(int64_t rows, int64_t pair, int64_t& r0, int64_t& r1) {
  if constexpr (E == DecodeEpilogue::silu_and_mul) {
    r0 = pair;
    r1 = pair + rows / 2;
  } else {
    r0 = 2 * pair;
    r1 = 2 * pair + 1;
  }
}

/// Two weight rows of k values (k <= kChunks * 256), as the warp's lanes hold them in registers.
template <int kChunks> struct RowPair {
  uint4 w0[kChunks], w1[kChunks];
  __device__ uint4 row0(int c) const { return w0[c]; }
  __device__ uint4 row1(int c) const { return w1[c]; }
};

/// Two weight rows staged in shared memory in the same order: the lane's chunk c of row 0 at base[c * 32 + lane], of
/// row 1 at base[row_stride + c * 32 + lane] (uint4 units); each lane reads only what it copied there.
struct SharedRowPair {
  const uint4* base;
  int row_stride, lane;
  __device__ uint4 row0(int c) const { return base[c * 32 + lane]; }
  __device__ uint4 row1(int c) const { return base[row_stride + c * 32 + lane]; }
};

/// Loads rows r0 and r1 of w [rows, k] (weights: read-only for the kernel's whole life, so through the read-only path).
template <int kChunks>
__device__ inline void load_row_pair(const uint16_t* w, int64_t k, int64_t r0, int64_t r1, int lane,
                                     RowPair<kChunks>& rp) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t e = (static_cast<int64_t>(c) * 32 + lane) * 8;
    if (e < k) {
      rp.w0[c] = __ldg(reinterpret_cast<const uint4*>(w + r0 * k + e));
      rp.w1[c] = __ldg(reinterpret_cast<const uint4*>(w + r1 * k + e));
    }
  }
}

/// x [tokens, k] (16-bit) into xs as f32, or its RMSNorm with norm_w when set. Every thread of the block calls it.
template <class T>
__device__ inline void stage_x(float* xs, float* inv_rms, const uint16_t* x, const uint16_t* norm_w, int64_t tokens,
                               int64_t k, float eps) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int64_t vecs = tokens * k / 8;
  for (int64_t v = threadIdx.x; v < vecs; v += blockDim.x) {
    float f[8];
    unpack8<T>(__ldcg(reinterpret_cast<const uint4*>(x) + v), f);
#pragma unroll
    for (int j = 0; j < 8; ++j) xs[v * 8 + j] = f[j];
  }
  __syncthreads();
  if (norm_w == nullptr) return;
  // 32-bit indices (k <= kDecodeLinearMaxK) and unrolled loops: a row's sum of squares is a chain of dependent adds,
  // and its shared-memory reads should be in flight together, not one per add.
  const int n = static_cast<int>(k);
  for (int t = warp; t < tokens; t += warps) {
    const float* row = xs + t * n;
    float ss = 0.f;
#pragma unroll 8
    for (int i = lane; i < n; i += 32) ss += row[i] * row[i];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) inv_rms[t] = rsqrtf(ss / static_cast<float>(k) + eps);
  }
  __syncthreads();
  for (int t = 0; t < tokens; ++t) {
    const float r = inv_rms[t];
    for (int d = threadIdx.x; d < n; d += blockDim.x) {
      const float w = to_f32(reinterpret_cast<const T*>(norm_w)[d]);
      xs[t * n + d] *= r * w;
    }
  }
  __syncthreads();
}

/// The dot products of a row pair with every token's x', reduced across the warp: lane t < tokens gets token t's
/// (y0, y1). tokens <= kTokens.
template <class T, int kChunks, int kTokens = kMaxTokens, class Rows>
__device__ inline void dot_row_pair(const Rows& rp, const float* xs, int64_t k, int tokens, int lane,
                                    float& y0, float& y1) {
  float a0[kTokens], a1[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) a0[t] = a1[t] = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t e = (static_cast<int64_t>(c) * 32 + lane) * 8;
    if (e >= k) break;
    float f0[8], f1[8];
    unpack8<T>(rp.row0(c), f0);
    unpack8<T>(rp.row1(c), f1);
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t >= tokens) break;
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
  for (int t = 0; t < kTokens; ++t) {
    if (t >= tokens) break;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      a0[t] += __shfl_xor_sync(0xffffffffu, a0[t], o);
      a1[t] += __shfl_xor_sync(0xffffffffu, a1[t], o);
    }
  }
  y0 = y1 = 0.f;
#pragma unroll
  for (int t = 0; t < kTokens; ++t)
    if (t == lane) {
      y0 = a0[t];
      y1 = a1[t];
    }
}

/// add_residual with the residual's two values already read (old0, old1): each sum rounded once.
template <class T>
__device__ inline void add_residual_rows(const DecodeLinearParams& p, int64_t t, int64_t r0, int64_t r1, float y0,
                                         float y1, float old0, float old1) {
  put<T>(p.residual, t * p.rows + r0, old0 + y0);
  put<T>(p.residual, t * p.rows + r1, old1 + y1);
}

/// Token t's results (y0, y1) for rows r0, r1 through epilogue E (decode_linear.hpp says what each does).
template <class T, DecodeEpilogue E>
__device__ inline void apply_epilogue(const DecodeLinearParams& p, int64_t t, int64_t r0, int64_t r1, float y0,
                                      float y1) {
  if constexpr (E == DecodeEpilogue::store_f32) {
    p.out_f32[t * p.rows + r0] = y0;
    p.out_f32[t * p.rows + r1] = y1;
  } else if constexpr (E == DecodeEpilogue::add_residual) {
    add_residual_rows<T>(p, t, r0, r1, y0, y1, at<T>(p.residual, t * p.rows + r0), at<T>(p.residual, t * p.rows + r1));
  } else if constexpr (E == DecodeEpilogue::silu_and_mul) {
    put<T>(p.act, t * (p.rows / 2) + r0, y0 / (1.f + __expf(-y0)) * y1);
  } else {
    const int64_t d = p.head_dim, q_rows = p.heads * d, k_rows = p.kv_heads * d;
    const int32_t pos = p.token_pos != nullptr ? p.token_pos[t] : __ldg(p.positions + t);
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
      int64_t slot = 0;
      if (p.token_slot != nullptr) {
        slot = p.token_slot[t];
      } else {
        const int32_t b = __ldg(p.batch_indices + t);
        slot = __ldg(p.kv_indices + __ldg(p.kv_indptr + b) + pos / p.page_size) * p.page_size + pos % p.page_size;
      }
      const int64_t at_slot = (slot * p.kv_heads + kv_head) * d + dim;
      uint16_t* cache = is_k ? p.k_cache : p.v_cache;
      put<T>(cache, at_slot, y0);
      put<T>(cache, at_slot + 1, y1);
    }
  }
}

}  // namespace flashcpp::llm::device
