// Probe: how fast can 64-row tiles of 576-wide bf16 KV rows (1152 B) be gathered by index into 128-byte-swizzled
// shared memory (the sparse kernels' tile layout), and does TMA with 1-row boxes (unicast, or multicast to the two
// head-group CTAs of a token in a 2-CTA cluster) land the rows where the swizzle puts them?
// Modes (gather, below): 0 cp.async 16 B (the kernels' gather today), 1 TMA 1-row boxes, 2 TMA 1-row boxes multicast
// (each CTA of the pair issues half of the rows for both), 3 each CTA of the pair gathers half by cp.async and sends it
// to the other by bulk copies. No math: the tile rate alone. Verifies the last tile of every CTA.
// Built as bench/probe_gather_multicast (CMake); run: probe_gather_multicast [tokens (1024)] [modes ("0123")].
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "mla/sparse_attention_wgmma_device.cuh"

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

constexpr int kCols = 576, kBlocks = 9, kRows = 64, kTopk = 2048, kTiles = kTopk / kRows;
constexpr int kStageBytes = kRows * kCols * 2;  // 73728
constexpr int kStages = 2, kThreads = 128;
constexpr int kSmem = kStages * kStageBytes + 1024 + 64;

__device__ __forceinline__ uint16_t pattern(int row, int col) {
  uint32_t h = static_cast<uint32_t>(row) * 2654435761u ^ static_cast<uint32_t>(col) * 40503u;
  return static_cast<uint16_t>(h ^ (h >> 16));
}

__global__ void fill(uint16_t* kv, int n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < int64_t(n) * kCols) kv[i] = pattern(int(i / kCols), int(i % kCols));
}

using flashcpp::mla::kernels::wgmma::bulk_copy_to_peer, flashcpp::mla::kernels::wgmma::cluster_rank,
    flashcpp::mla::kernels::wgmma::cluster_sync_relaxed, flashcpp::mla::kernels::wgmma::cp_async_arrive,
    flashcpp::mla::kernels::wgmma::fence_proxy_async,
    flashcpp::mla::kernels::wgmma::fence_mbarrier_init, flashcpp::mla::kernels::wgmma::map_to_rank,
    flashcpp::mla::kernels::wgmma::mbar_arrive, flashcpp::mla::kernels::wgmma::mbar_arrive_expect_tx,
    flashcpp::mla::kernels::wgmma::mbar_arrive_remote, flashcpp::mla::kernels::wgmma::mbar_init,
    flashcpp::mla::kernels::wgmma::mbar_wait, flashcpp::mla::kernels::wgmma::smem_addr;

// One 64-column box of row `row` into `dst` (a row's 128-byte line in a swizzled atom), its bytes completing `bar`:
// in this CTA alone (mask 0), or at the same offset in each CTA of `mask`.
__device__ __forceinline__ void tma_row(uint32_t dst, const CUtensorMap* map, int col, int row, uint32_t bar,
                                        uint16_t mask) {
  if (mask == 0)
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
            "r"(dst),
        "l"(map), "r"(col), "r"(row), "r"(bar)
        : "memory");
  else
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
        "[%1, {%2, %3}], [%4], %5;" ::"r"(dst),
        "l"(map), "r"(col), "r"(row), "r"(bar), "h"(mask)
        : "memory");
}

// Count the last tile's mismatches against the swizzled placement of rows idx[0..63].
__device__ void verify(const uint8_t* stage, const int* idx, unsigned long long* errors) {
  unsigned long long bad = 0;
  for (int e = threadIdx.x; e < kRows * kCols; e += blockDim.x) {
    const int r = e / kCols, c = e % kCols, k = c / 64, chunk = (c % 64) / 8, within = c % 8;
    const uint16_t got = *reinterpret_cast<const uint16_t*>(stage + k * 8192 + r * 128 + ((chunk ^ (r % 8)) * 16) +
                                                            within * 2);
    if (got != pattern(idx[r], c)) ++bad;
  }
  if (bad) atomicAdd(errors, bad);
}

// Modes: 0 cp.async, 1 TMA row boxes, 2 TMA row boxes multicast to the 2-CTA cluster, 3 cp.async of this CTA's half
// of the rows and then a bulk copy of that half (one 4 KiB block per atom) into the peer's tile. Every mode keeps two
// tiles in flight: tile t is issued before tile t - 1 is waited for (mode 3: t - 1 forwarded, t - 2 waited for).
template <int MODE>
__global__ void __launch_bounds__(kThreads, 1)
    gather(const __grid_constant__ CUtensorMap map, const uint16_t* kv, const int* indices,
           unsigned long long* errors) {
  constexpr bool kCluster = MODE >= 2;
  extern __shared__ uint8_t raw[];
  uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(base + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  uint64_t* gathered = empty + kStages;  // mode 3: this CTA's own rows landed
  const int token = blockIdx.x / 2;  // the two head-group CTAs of a token gather the same rows
  const int* idx = indices + int64_t(token) * kTopk;
  const uint32_t rank = kCluster ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_addr(&full[s]), 1);
      mbar_init(smem_addr(&empty[s]), kCluster ? 2 : 1);
      mbar_init(smem_addr(&gathered[s]), kThreads);
    }
    fence_mbarrier_init();
  }
  if (kCluster) cluster_sync_relaxed();
  else __syncthreads();
  const uint32_t stage0 = smem_addr(base);
  auto stage = [&](int t) { return stage0 + (t % kStages) * kStageBytes; };
  auto bar = [&](uint64_t* b, int t) { return smem_addr(&b[t % kStages]); };
  // cp.async of rows [r0, r0 + rows) of tile t, 8 threads a row and atom: a warp instruction covers 4 rows' lines.
  auto copy_rows = [&](int t, int r0, int rows) {
    const int* ti = idx + t * kRows;
    for (int flat = threadIdx.x; flat < rows * kBlocks * 8; flat += kThreads) {
      const int r = r0 + (flat / 8) % rows, k = flat / (8 * rows), c = flat % 8;
      const void* src = kv + int64_t(ti[r]) * kCols + k * 64 + c * 8;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(stage(t) + k * 8192 + r * 128 + ((c ^ (r % 8)) * 16)),
                   "l"(src)
                   : "memory");
    }
  };
  // Tile t waited for and its stage released (by both CTAs of a cluster).
  auto consume = [&](int t) {
    if (MODE == 0) {
      if (t + 1 < kTiles) asm volatile("cp.async.wait_group 1;" ::: "memory");
      else asm volatile("cp.async.wait_group 0;" ::: "memory");
    } else {
      mbar_wait(bar(full, t), (t / kStages) & 1);
      if (MODE == 3) mbar_wait(bar(gathered, t), (t / kStages) & 1);
    }
    __syncthreads();
    if (MODE != 0 && threadIdx.x == 0) {
      if (kCluster) {
        mbar_arrive_remote(map_to_rank(bar(empty, t), 0));
        mbar_arrive_remote(map_to_rank(bar(empty, t), 1));
      } else {
        mbar_arrive(bar(empty, t));
      }
    }
  };
  auto issue = [&](int t) {
    if (MODE != 0 && t >= kStages) mbar_wait(bar(empty, t), ((t / kStages) - 1) & 1);
    if (MODE == 0) {
      copy_rows(t, 0, kRows);
      asm volatile("cp.async.commit_group;" ::: "memory");
    } else if (MODE == 3) {
      if (threadIdx.x == 0) mbar_arrive_expect_tx(bar(full, t), kStageBytes / 2);  // the peer's half
      copy_rows(t, rank * (kRows / 2), kRows / 2);
      cp_async_arrive(bar(gathered, t));
    } else {
      if (threadIdx.x == 0) mbar_arrive_expect_tx(bar(full, t), kStageBytes);
      if (threadIdx.x < 32) {
        const int rows = MODE == 2 ? kRows / 2 : kRows, r0 = MODE == 2 ? rank * (kRows / 2) : 0;
        for (int q = threadIdx.x; q < rows * kBlocks; q += 32) {
          const int r = r0 + q / kBlocks, k = q % kBlocks;
          tma_row(stage(t) + k * 8192 + r * 128, &map, k * 64, idx[t * kRows + r], bar(full, t), MODE == 2 ? 0b11 : 0);
        }
      }
    }
  };
  // Mode 3: this CTA's rows of tile t, once landed, to the peer's tile (one block of 32 rows per atom).
  auto forward = [&](int t) {
    if (threadIdx.x != 0) return;
    mbar_wait(bar(gathered, t), (t / kStages) & 1);
    fence_proxy_async();  // the cp.async writes, read next by the bulk-copy engine
    const uint32_t peer = rank ^ 1u, peer_full = map_to_rank(bar(full, t), peer);
    for (int k = 0; k < kBlocks; ++k) {
      const uint32_t block = stage(t) + k * 8192 + rank * 4096;
      bulk_copy_to_peer(map_to_rank(block, peer), block, 4096, peer_full);
    }
  };
  if (MODE == 3) {
    for (int t = 0; t < kTiles + 2; ++t) {
      if (t >= 2) consume(t - 2);
      if (t < kTiles) issue(t);
      if (t >= 1 && t <= kTiles) forward(t - 1);
    }
  } else {
    for (int t = 0; t <= kTiles; ++t) {
      if (t < kTiles) issue(t);
      if (t >= 1) consume(t - 1);
    }
  }
  verify(base + ((kTiles - 1) % kStages) * kStageBytes, idx + (kTiles - 1) * kRows, errors);
  if (kCluster) cluster_sync_relaxed();  // no CTA exits while its peer may still copy into it or arrive on its barriers
}

constexpr const char* kModeNames[] = {"cp.async", "tma_rows", "tma_rows_multicast", "cp.async_half_bulk_to_peer"};

int main(int argc, char** argv) {
  const int tokens = argc > 1 ? std::atoi(argv[1]) : 1024;
  const std::string modes = argc > 2 ? argv[2] : "0123";  // which modes run (a faulting mode ends the process)
  std::vector<int> kv_rows = {8192, 32768, 131072};
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                         cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || encode == nullptr) {
    std::printf("the driver has no tensor-map encoder\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  CHECK(cudaFuncSetAttribute(gather<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaFuncSetAttribute(gather<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaFuncSetAttribute(gather<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaFuncSetAttribute(gather<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  unsigned long long* errors;
  CHECK(cudaMalloc(&errors, sizeof(unsigned long long)));
  unsigned long long total_bad = 0;
  for (int n : kv_rows) {
    uint16_t* kv;
    int* indices;
    CHECK(cudaMalloc(&kv, size_t(n) * kCols * 2));
    CHECK(cudaMalloc(&indices, size_t(tokens) * kTopk * 4));
    fill<<<(int64_t(n) * kCols + 255) / 256, 256>>>(kv, n);
    std::mt19937 rng(n);
    std::vector<int> h(size_t(tokens) * kTopk);
    for (auto& v : h) v = int(rng() % uint32_t(n));
    CHECK(cudaMemcpy(indices, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    CUtensorMap map{};
    const cuuint64_t dims[2] = {kCols, cuuint64_t(n)};
    const cuuint64_t strides[1] = {kCols * 2};
    const cuuint32_t box[2] = {64, 1}, es[2] = {1, 1};
    if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, kv, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) !=
        CUDA_SUCCESS) {
      std::printf("tensor map encode failed\n");
      return 1;
    }
    for (int mode = 0; mode < 4; ++mode) {
      if (modes.find(char('0' + mode)) == std::string::npos) continue;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(tokens * 2);
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = kSmem;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = 2;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = mode >= 2 ? 1 : 0;
      auto launch = [&] {
        if (mode == 0) CHECK(cudaLaunchKernelEx(&cfg, gather<0>, map, kv, indices, errors));
        if (mode == 1) CHECK(cudaLaunchKernelEx(&cfg, gather<1>, map, kv, indices, errors));
        if (mode == 2) CHECK(cudaLaunchKernelEx(&cfg, gather<2>, map, kv, indices, errors));
        if (mode == 3) CHECK(cudaLaunchKernelEx(&cfg, gather<3>, map, kv, indices, errors));
      };
      if (mode == 2 && n == kv_rows[0]) {
        int clusters = 0;
        CHECK(cudaOccupancyMaxActiveClusters(&clusters, gather<2>, &cfg));
        std::printf("max active 2-CTA clusters at 1 CTA an SM: %d\n", clusters);
      }
      CHECK(cudaMemset(errors, 0, 8));
      for (int w = 0; w < 3; ++w) launch();
      CHECK(cudaDeviceSynchronize());
      std::vector<float> ms;
      cudaEvent_t a, b;
      CHECK(cudaEventCreate(&a));
      CHECK(cudaEventCreate(&b));
      for (int rep = 0; rep < 9; ++rep) {
        CHECK(cudaEventRecord(a));
        launch();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float t = 0;
        CHECK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
      }
      CHECK(cudaEventDestroy(a));
      CHECK(cudaEventDestroy(b));
      std::sort(ms.begin(), ms.end());
      unsigned long long bad = 0;
      CHECK(cudaMemcpy(&bad, errors, 8, cudaMemcpyDeviceToHost));
      total_bad += bad;
      const double delivered = double(tokens) * 2 * kTiles * kStageBytes;
      std::printf(
          "PROBE {\"kv_rows\": %d, \"mode\": \"%s\", \"us\": %.1f, \"smem_fill_TBps\": %.3f, \"l2_read_TBps\": %.3f, "
          "\"mismatches\": %llu}\n",
          n, kModeNames[mode], ms[4] * 1e3, delivered / (ms[4] * 1e-3) / 1e12,
          delivered / (mode >= 2 ? 2 : 1) / (ms[4] * 1e-3) / 1e12, bad);
    }
    CHECK(cudaFree(kv));
    CHECK(cudaFree(indices));
  }
  CHECK(cudaFree(errors));
  return total_bad == 0 ? 0 : 2;  // a mode that put rows elsewhere than the swizzle says fails the run
}
