// Probe (thirty-third session): does the L2 hold a working set that every SM gathers from at half its size, as if each
// L2 partition cached the lines its own SMs read? Random 1 KiB rows (eight 128-byte lines, read by L2-only loads)
// gathered by every SM from a buffer of S MiB (mode 0); by each SM from one half of it chosen by a function of its
// %smid (modes 1-7: if the function matches the SMs' partitions, each half stays in one partition and the set fits
// where mode 0's does not); by every SM from the lower half alone (mode 8: S/2 gathered by all, the reference).
// Build: nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o l2probe thirtythird-l2-probe.cu
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>

#define CHECK(x)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

__device__ __forceinline__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
__device__ __forceinline__ uint32_t mix(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16;
  return x;
}
__device__ __forceinline__ int side(int mode, unsigned s, unsigned nsm) {
  switch (mode) {
    case 1: return s & 1;
    case 2: return (s >> 1) & 1;
    case 3: return (s >> 2) & 1;
    case 4: return (s >> 3) & 1;
    case 5: return s >= nsm / 2;
    case 6: return (s >> 4) & 1;
    case 7: return mix(s * 2654435761u) & 1;  // a mapping that matches nothing: affine but wrong
    default: return 0;
  }
}
__device__ __forceinline__ uint4 ld_cg(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// Each warp gathers `iters` x 4 rows; a row is 1 KiB = 64 uint4, two per lane.
__global__ void gather(const uint4* buf, uint32_t rows, int mode, unsigned nsm, int iters, uint32_t* sink) {
  const int lane = threadIdx.x & 31;
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  uint32_t lo = 0, span = rows;
  if (mode >= 1 && mode <= 7) { span = rows / 2; lo = side(mode, smid(), nsm) ? span : 0; }
  if (mode == 8) span = rows / 2;
  uint32_t acc = 0;
  for (int it = 0; it < iters; ++it) {
    uint4 v[8];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const uint32_t row = lo + mix(warp * 7919u + it * 4 + r) % span;
      const uint4* p = buf + static_cast<size_t>(row) * 64;
      v[2 * r] = ld_cg(p + lane);
      v[2 * r + 1] = ld_cg(p + 32 + lane);
    }
#pragma unroll
    for (int r = 0; r < 8; ++r) acc ^= v[r].x ^ v[r].y ^ v[r].z ^ v[r].w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

int main() {
  int dev = 0, nsm = 0, l2 = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("# %s, %d SMs, L2 %d MiB\n", prop.name, nsm, l2 >> 20);
  const size_t max_bytes = size_t{128} << 20;
  uint4* buf = nullptr;
  uint32_t* sink = nullptr;
  CHECK(cudaMalloc(&buf, max_bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(buf, 0x5a, max_bytes));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  const int blocks = nsm * 4, threads = 256, iters = 64;
  const double bytes = double(blocks) * threads / 32 * iters * 4 * 1024;
  const int sizes_mib[] = {8, 16, 20, 24, 28, 32, 40, 48, 56, 64, 96, 128};
  std::printf("%-8s", "MiB");
  for (int m = 0; m <= 8; ++m) std::printf("   mode%d", m);
  std::printf("   (GB/s of gathered rows; modes 1-7 read one half a side, 8 the lower half by all)\n");
  for (int mib : sizes_mib) {
    const uint32_t rows = static_cast<uint32_t>((size_t{static_cast<size_t>(mib)} << 20) / 1024);
    std::printf("%-8d", mib);
    for (int mode = 0; mode <= 8; ++mode) {
      std::vector<float> ms;
      for (int rep = 0; rep < 7; ++rep) {
        CHECK(cudaEventRecord(a));
        gather<<<blocks, threads>>>(buf, rows, mode, nsm, iters, sink);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float t = 0;
        CHECK(cudaEventElapsedTime(&t, a, b));
        if (rep >= 2) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      std::printf(" %7.0f", bytes / (ms[ms.size() / 2] * 1e-3) / 1e9);
    }
    std::printf("\n");
  }
  return 0;
}
