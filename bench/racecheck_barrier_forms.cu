// Which barrier forms does compute-sanitizer's racecheck follow? A probe for the wgmma kernels' role-split code, where
// each warpgroup runs its own copy of the code and so meets the other at different instructions (the non-aligned
// `barrier.sync` form, which synccheck requires there). Two warpgroups of one CTA: warpgroup 0 writes a shared slot,
// warpgroup 1 reads another thread's slot (read-after-write), warpgroup 0 writes it again (write-after-read), four
// rounds, one kernel per barrier form. The program checks the sums; the verdict is racecheck's report per kernel:
//   compute-sanitizer --tool racecheck build/bench/racecheck_barrier_forms
// Verdict on an H100 (CUDA 13.0, 2026-12-05, docs/PERFORMANCE.md): every form is followed but the aligned arrive /
// sync pair (kernel 4, bar.arrive then bar.sync: a hazard each round); kernels 6-8 are clean too.
#include <cuda_runtime.h>

#include <cstdio>

namespace {

enum Form : int { kAligned, kNonAlignedCounted, kNonAlignedCta };

template <int FORM>
__device__ __forceinline__ void meet(int id) {
  if constexpr (FORM == kAligned) asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
  if constexpr (FORM == kNonAlignedCounted) asm volatile("barrier.sync %0, 256;\n" ::"r"(id) : "memory");
  if constexpr (FORM == kNonAlignedCta) asm volatile("barrier.sync %0;\n" ::"r"(id) : "memory");
}

constexpr int kRounds = 4;
constexpr float kWant = kRounds * (kRounds + 1) / 2;  // 1 + 2 + ... + kRounds

// Both warpgroups meet twice per round: after the write (RAW edge) and after the read (WAR edge).
template <int FORM, int ID>
__global__ void __launch_bounds__(256) meet_twice(float* out) {
  __shared__ float slot[128];
  const int w = threadIdx.x / 128, i = threadIdx.x % 128;
  float acc = 0.f;
  if (w == 0) {
    for (int r = 0; r < kRounds; ++r) {
      slot[i] = r + 1.f;
      meet<FORM>(ID);
      meet<FORM>(ID);
    }
  } else {
    for (int r = 0; r < kRounds; ++r) {
      meet<FORM>(ID);
      acc += slot[127 - i];
      meet<FORM>(ID);
    }
  }
  out[threadIdx.x] = acc;
}

// The producer-consumer form of the kernels' exchanges: the writer arrives after writing (barrier 1), the reader
// syncs there; the reader arrives after reading (barrier 2), the writer syncs there before its next write.
template <bool ALIGNED>
__global__ void __launch_bounds__(256) arrive_then_sync(float* out) {
  __shared__ float slot[128];
  const int w = threadIdx.x / 128, i = threadIdx.x % 128;
  float acc = 0.f;
  for (int r = 0; r < kRounds; ++r) {
    if (w == 0) {
      if (r > 0) {
        if (ALIGNED) asm volatile("bar.sync 2, 256;\n" ::: "memory");
        else asm volatile("barrier.sync 2, 256;\n" ::: "memory");
      }
      slot[i] = r + 1.f;
      if (ALIGNED) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
      else asm volatile("barrier.arrive 1, 256;\n" ::: "memory");
    } else {
      if (ALIGNED) asm volatile("bar.sync 1, 256;\n" ::: "memory");
      else asm volatile("barrier.sync 1, 256;\n" ::: "memory");
      acc += slot[127 - i];
      if (r + 1 < kRounds) {
        if (ALIGNED) asm volatile("bar.arrive 2, 256;\n" ::: "memory");
        else asm volatile("barrier.arrive 2, 256;\n" ::: "memory");
      }
    }
  }
  out[threadIdx.x] = acc;
}

// The row-sum exchange of the dense tiles kernel (removed 2026-12-07): one lane in four writes its rows' sums, both
// warpgroups meet at the non-aligned counted barrier, every thread reads both halves; double-buffered by round parity,
// the whole CTA meeting at the end of each round (the non-aligned barrier 0). With MIXED, the warpgroups also hand a
// slot over by the non-aligned arrive / sync pair on barrier 4 each round (as that kernel's P exchange did): does its
// presence change what racecheck makes of the other barriers? WARPGROUP_BARRIERS: each warpgroup also meets on a
// barrier of its own every round (the FP8 dequantization's form).
template <bool MIXED, bool WARPGROUP_BARRIERS = false>
__global__ void __launch_bounds__(256) row_sum_exchange(float* out) {
  __shared__ float sums[2][2][32];
  __shared__ float handed[128];
  const int w = threadIdx.x / 128, i = threadIdx.x % 128, t = i % 4, row = i / 4;
  float acc = 0.f;
  for (int r = 0; r < kRounds; ++r) {
    float* s = &sums[r & 1][0][0];
    if (t == 0) s[w * 32 + row] = r + 1.f;
    asm volatile("barrier.sync 1, 256;\n" ::: "memory");
    if (MIXED) {
      if (w == 0) {
        handed[i] = r + 1.f;
        asm volatile("barrier.arrive 4, 256;\n" ::: "memory");
      } else {
        asm volatile("barrier.sync 4, 256;\n" ::: "memory");
        acc += handed[127 - i] - (r + 1.f);  // adds 0
      }
    }
    if (WARPGROUP_BARRIERS) {  // each warpgroup meets on its own barrier, 128 threads (the FP8 dequantization's form)
      if (w == 0) asm volatile("barrier.sync 6, 128;\n" ::: "memory");
      else asm volatile("barrier.sync 7, 128;\n" ::: "memory");
    }
    acc += 0.5f * (s[row] + s[32 + row]);
    asm volatile("barrier.sync 0;\n" ::: "memory");
  }
  out[threadIdx.x] = acc;
}

}  // namespace

int main() {
  struct Probe {
    const char* form;
    void (*kernel)(float*);
  };
  const Probe probes[] = {
      {"bar.sync 1, 256 (aligned)", meet_twice<kAligned, 1>},
      {"barrier.sync 1, 256 (non-aligned)", meet_twice<kNonAlignedCounted, 1>},
      {"barrier.sync 0 (non-aligned, whole CTA)", meet_twice<kNonAlignedCta, 0>},
      {"bar.sync 0 (aligned, __syncthreads)", meet_twice<kAligned, 0>},
      {"bar.arrive / bar.sync pair (aligned)", arrive_then_sync<true>},
      {"barrier.arrive / barrier.sync pair (non-aligned)", arrive_then_sync<false>},
      {"row sums by barrier.sync 1, 256, buffers by barrier.sync 0 (the dense epilogue)", row_sum_exchange<false>},
      {"the same, with a barrier.arrive / barrier.sync pair on barrier 4 each round", row_sum_exchange<true>},
      {"the same, with each warpgroup also meeting on its own barrier (barrier.sync 6 / 7, 128)",
       row_sum_exchange<false, true>},
  };
  float* out = nullptr;
  if (cudaError_t e = cudaMalloc(&out, 256 * sizeof(float)); e != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc: %s\n", cudaGetErrorString(e));
    return 1;
  }
  int failed = 0;
  for (int k = 0; k < static_cast<int>(sizeof(probes) / sizeof(probes[0])); ++k) {
    probes[k].kernel<<<1, 256>>>(out);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    float host[256] = {};
    if (e == cudaSuccess) e = cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
    const bool ok = e == cudaSuccess && host[200] == kWant;
    failed += ok ? 0 : 1;
    std::printf("kernel %d, %s: %s, reader sum %g (want %g)\n", k, probes[k].form,
                e == cudaSuccess ? "ran" : cudaGetErrorString(e), host[200], kWant);
  }
  cudaFree(out);
  return failed == 0 ? 0 : 1;
}
