// Raw artifact of the seventeenth session (2026-12-03): nvcc -O2 -gencode arch=compute_90a,code=sm_90a -o store_bench store_bench.cu; run on one H200.
// Output: seventeenth-store-rate-microbenchmark.txt. Not built by the project.
// Per-SM store-rate microbenchmark: 128 KiB of f32 partial rows per CTA (64 rows x 512), three ways.
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); return 1; } } while (0)
__device__ long long g_t[1024][2];
template <int MODE>
__global__ void __launch_bounds__(256, 1) stores(float* out, int fence) {
  extern __shared__ __align__(1024) float sm[];
  float* dst = out + (size_t)blockIdx.x * 64 * 512;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, W = warp >> 2, g = lane >> 2, t = lane & 3;
  const int r0 = (warp & 3) * 16 + g, r1 = r0 + 8;
  float o[128];
  for (int i = 0; i < 128; ++i) o[i] = (float)(i + threadIdx.x);
  __syncthreads();
  long long t0 = clock64();
  if (MODE == 0) {  // the fragment pattern: float2 per (row, j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* d = dst + (h ? r1 : r0) * 512 + W * 256 + 2 * t;
#pragma unroll
      for (int j = 0; j < 32; ++j) *reinterpret_cast<float2*>(d + 8 * j) = make_float2(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
    }
  } else if (MODE == 1) {  // whole lines: each warp 16 B a lane, 512 B contiguous per instruction
    float4* d = reinterpret_cast<float4*>(dst) + warp * 1024;
#pragma unroll
    for (int i = 0; i < 32; ++i) d[i * 32 + lane] = make_float4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]);
  } else {  // staged in shared memory (row stride 516 floats for the fragment writes), then 1 KiB bulk copies per row half
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float* s = sm + (h ? r1 : r0) * 260 + W * 0 + 2 * t;  // per warpgroup region below
      s += W * 64 * 260;
#pragma unroll
      for (int j = 0; j < 32; ++j) *reinterpret_cast<float2*>(s + 8 * j) = make_float2(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncwarp();
    if (lane < 16) {
      const int row = (warp & 3) * 16 + lane;
      const uint32_t src = (uint32_t)__cvta_generic_to_shared(sm + W * 64 * 260 + row * 260);
      float* gd = dst + row * 512 + W * 256;
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 1024;\n" :: "l"(gd), "r"(src) : "memory");
      asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
      if (fence) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
      else asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    }
  }
  if (fence && MODE != 2) __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) { g_t[blockIdx.x][0] = t0; g_t[blockIdx.x][1] = clock64(); }
}
int main() {
  float* out; CK(cudaMalloc(&out, 1024ull * 64 * 512 * 4));
  uint8_t* flush; CK(cudaMalloc(&flush, 256 << 20));
  const int smem = 2 * 64 * 260 * 4;
  CK(cudaFuncSetAttribute(stores<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int ctas : {72, 132}) for (int mode = 0; mode < 3; ++mode) for (int fence = 0; fence < 2; ++fence) {
    std::vector<float> ev; std::vector<double> cyc;
    for (int it = 0; it < 21; ++it) {
      CK(cudaMemset(flush, it, 256 << 20));
      cudaEventRecord(a);
      if (mode == 0) stores<0><<<ctas, 256, 0>>>(out, fence);
      else if (mode == 1) stores<1><<<ctas, 256, 0>>>(out, fence);
      else stores<2><<<ctas, 256, smem>>>(out, fence);
      cudaEventRecord(b); CK(cudaEventSynchronize(b));
      float ms; cudaEventElapsedTime(&ms, a, b); ev.push_back(ms * 1e3f);
      long long h[1024][2]; CK(cudaMemcpyFromSymbol(h, g_t, sizeof(h)));
      std::vector<double> c; for (int i = 0; i < ctas; ++i) c.push_back((double)(h[i][1] - h[i][0]));
      std::sort(c.begin(), c.end()); cyc.push_back(c[c.size() / 2]);
    }
    std::sort(ev.begin(), ev.end()); std::sort(cyc.begin(), cyc.end());
    printf("ctas %3d mode %d (%s) %s: kernel %.2f us, CTA store phase %.0f cycles (median)\n", ctas, mode,
           mode == 0 ? "float2 fragment" : mode == 1 ? "float4 whole lines" : "smem + bulk 1 KiB", fence ? "until done" : "issue only",
           ev[ev.size() / 2], cyc[cyc.size() / 2]);
  }
  return 0;
}
