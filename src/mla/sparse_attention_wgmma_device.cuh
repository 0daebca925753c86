// Device pieces of the wgmma sparse-attention kernel (sparse_attention_wgmma.cuh): kernel arguments, PTX helpers
// (barriers, clusters, wgmma), the shared-memory plan (Smem) and the work lists.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "mla/decode_schedule.hpp"
#include "mla/fast_divmod.hpp"
#include "mla/sparse_attention_kernel.hpp"
#include "mla/sparse_attention_wgmma_config.hpp"
#include "mla/sm90_device.cuh"

namespace flashcpp::mla::kernels::wgmma {

using sm90::cp_async_16, sm90::cp_async_16_hint, sm90::fast_exp2, sm90::l2_policy_evict_first,
    sm90::l2_policy_evict_last, sm90::ld_global_nc_v4, sm90::ld_shared_v4, sm90::pack_16x2, sm90::pack_bf16x2,
    sm90::smem_addr, sm90::st_global_v2_hint, sm90::st_global_v4_hint, sm90::st_shared_v4, sm90::stmatrix_x4;

struct KernelParams {
  SparseAttentionParams p;
  float scale_log2;   // sm_scale * log2(e)
  int groups;         // head groups per token: ceil(h_q / group_heads)
  int group_heads;    // heads per CTA: 64, or 32 (h_q 33..64 as a cluster of two CTAs, each computing 64 rows)
  mla::FastDivmod page;  // FP8 cache: index -> (page, slot) by block_size
  mla::FastDivmod extra_page;  // V4: the extra pool's index -> (page, slot) by extra_block_size
  // Unsplit FP8 grids whose requests' lengths differ and that take more than one round of CTAs: CTA i runs the
  // request with the i-th most tiles (longest first, ties by index), so the rounds end together.
  int longest_first = 0;
};
// The valid flag of every slot of a whole dense tile in the pair cluster (Traits::kTmaRows; any nonzero flag marks a
// valid slot): its consumers then skip the mask (tile_row_max).
constexpr uint8_t kWholeTileFlag = 2;

// The 16-bit pair cluster's (Traits::kTmaRows) parameters: also the cache as [num_kv rows, d_qk] for TMA, in boxes of
// 64 rows x 64 columns (a tile's atom), 128-byte swizzled. Only those instantiations take it, so the others' parameter
// block and code stay as they were.
struct TmaRowsKernelParams : KernelParams {
  CUtensorMap kv_rows;
};
template <class C>
using KernelParamsOf = std::conditional_t<C::kTmaRows, TmaRowsKernelParams, KernelParams>;

// ---------------------------------------------------------------------------------------------------
// PTX helpers (those both Hopper kernels use are in sm90_device.cuh).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Arrives on `bar` once all of this thread's earlier cp.async copies have landed (counts as one arrival).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Spins until the phase with `parity` of `bar` completed (acquire, CTA scope). Also for phases the peer CTA
// of a cluster completes: its writes into this CTA arrive as transactions on the barrier, which makes them
// visible to the waiters (as for multicast TMA in CUTLASS's cluster pipelines); its arrivals on an empty
// barrier follow its own wgmma waits. Cluster-scope acquire (and release on the remote arrivals) measured
// 10% slower at b 128 (H200, 2026-12-01).
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Arrives and adds `bytes` to the transactions the current phase waits for (stores the peer will make).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// ---------------------------------------------------------------------------------------------------
// Clusters (2 CTAs: the two head groups of one token).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// The address of the same shared-memory location in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t map_to_rank(uint32_t addr, uint32_t rank) {
  uint32_t d;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(d) : "r"(addr), "r"(rank));
  return d;
}
// Arrival on a barrier of another CTA of the cluster (the default semantics, as CUTLASS's cluster barriers).
__device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_bar) : "memory");
}
// `bytes` of this CTA's shared memory at `src` into another CTA's at `cluster_dst` by the bulk-copy engine;
// completes `bytes` of `cluster_bar`'s transactions there. The source must be visible to the async proxy.
__device__ __forceinline__ void bulk_copy_to_peer(uint32_t cluster_dst, uint32_t src, uint32_t bytes, uint32_t cluster_bar) {
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   cluster_dst),
               "r"(src), "r"(bytes), "r"(cluster_bar)
               : "memory");
}
// One box of `map` at (col, row) into `dst` of both CTAs of the cluster (the same offset in each), completing its
// bytes on `bar` in each.
__device__ __forceinline__ void tma_row_to_cluster(uint32_t dst, const CUtensorMap* map, int col, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(map), "r"(col), "r"(row), "r"(bar), "h"(static_cast<uint16_t>(0b11))
      : "memory");
}
// The prologue's cluster barrier: the barriers' initialisation is released by fence_mbarrier_init, so the arrival
// itself orders nothing (a release arrival would also wait for the schedule loads in flight).
__device__ __forceinline__ void cluster_sync_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Programmatic dependent launch: the combine kernel may be scheduled (it waits for this grid's results).
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
// Named barriers among the 256 consumer threads (id 0 is __syncthreads).
enum NamedBarrier : int {
  kBarMax = 1, kBarPReadyA = 2, kBarPReadyB = 3, kBarProducerStored = 4, kBarPFree = 5
};
__device__ __forceinline__ void named_sync(int id) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void named_arrive(int id) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}
// The same meeting where the two warpgroups reach it at different instructions (each runs its own copy of the code):
// the non-aligned form (bar.sync is barrier.sync.aligned, which wants every thread at one instruction; synccheck
// reports the aligned form there).
__device__ __forceinline__ void named_sync_unaligned(int id) {
  asm volatile("barrier.sync %0, 256;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void named_arrive_unaligned(int id) {
  asm volatile("barrier.arrive %0, 256;\n" ::"r"(id) : "memory");
}
// Among the 128 producer threads.
__device__ __forceinline__ void producer_sync(int id) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}
// Generic-proxy shared-memory writes (cp.async, st.shared) made visible to the tensor cores' async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins accumulator registers at this point of the program (no read or write moves across it).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int Regs>
__device__ __forceinline__ void reg_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
}
template <int Regs>
__device__ __forceinline__ void reg_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
}

__device__ __forceinline__ uint32_t ld_global_nc_u32(const void* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ float2 ld_global_nc_f2(const void* p) {
  float2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "l"(p));
  return v;
}

// wgmma shared-memory matrix descriptor for 128-byte-swizzled layouts: start address, leading and
// stride byte offsets (all >> 4), layout type 1 (128B swizzle) in bits 62-63.
//   K-major (rows of 64 bf16 along K, 8-row groups `sbo` apart): lbo unused (1).
//   MN-major (rows along K of 64 bf16 along MN): lbo = distance between 64-column MN blocks, sbo = between
//   8-row K groups.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}

// ---------------------------------------------------------------------------------------------------
// wgmma instructions (bf16 in, or fp16 where F16; f32 accumulate). One asm body per shape; the macro splices the input
// type ("bf16" or "f16") into the instruction.
#define FLASHCPP_WGMMA_M64N64K16_SS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))
// D[64x64] (+)= A[64x16] (smem, K-major) * B[16x64] (smem, K-major); scale_d = 0 overwrites D.
template <bool F16 = false>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (F16) {
    FLASHCPP_WGMMA_M64N64K16_SS("f16");
  } else {
    FLASHCPP_WGMMA_M64N64K16_SS("bf16");
  }
}
#undef FLASHCPP_WGMMA_M64N64K16_SS

// D[64x64] (+)= A[64x16] (registers, bf16x2 / f16x2 fragments, mma.sync's A layout per warp) * B[16x64] (smem,
// K-major); scale_d = 0 overwrites D.
#define FLASHCPP_WGMMA_M64N64K16_RS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))
template <bool F16 = false>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  if constexpr (F16) {
    FLASHCPP_WGMMA_M64N64K16_RS("f16");
  } else {
    FLASHCPP_WGMMA_M64N64K16_RS("bf16");
  }
}
#undef FLASHCPP_WGMMA_M64N64K16_RS

#define FLASHCPP_WGMMA_M64N256K16_RS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
// D[64x256] += A[64x16] (registers, bf16x2 / f16x2 fragments) * B[16x256] (smem, MN-major).
template <bool F16 = false>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (F16) {
    FLASHCPP_WGMMA_M64N256K16_RS("f16");
  } else {
    FLASHCPP_WGMMA_M64N256K16_RS("bf16");
  }
}
#undef FLASHCPP_WGMMA_M64N256K16_RS

#define FLASHCPP_WGMMA_M64N256K16_SS(TYPE) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 1;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
      : "l"(desc_a), "l"(desc_b), "r"(1))
// D[64x256] += A[64x16] (smem, K-major) * B[16x256] (smem, MN-major).
template <bool F16 = false>
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (F16) {
    FLASHCPP_WGMMA_M64N256K16_SS("f16");
  } else {
    FLASHCPP_WGMMA_M64N256K16_SS("bf16");
  }
}
#undef FLASHCPP_WGMMA_M64N256K16_SS

// Shared-memory addresses of one CTA, from the 1024-byte aligned base.
template <class C>
struct Smem {
  uint32_t base;
  uint32_t peer_base = 0;  // in a cluster: the same base in the peer CTA (a shared::cluster address)
  uint32_t rank = 0;       // this CTA's rank in the cluster (0 alone)
  // The peer CTA's copy of a location of this CTA's shared memory (cluster only).
  __device__ uint32_t peer(uint32_t addr) const { return addr - base + peer_base; }
  __device__ uint32_t q() const { return base + C::kOffQ; }
  __device__ uint32_t tile(int t) const { return base + C::kOffK + t * C::kKBytes; }
  __device__ uint32_t p_of(int t) const { return base + (t == 0 ? C::kOffPA : C::kOffPB); }
  // Barriers: Q full, Q empty; full[tile][half]; empty[tile][half] (half 0 = left = dims 0..255).
  __device__ uint32_t bar_q_full() const { return base + C::kOffBar; }
  __device__ uint32_t bar_q_empty() const { return base + C::kOffBar + 8; }
  __device__ uint32_t bar_full(int t, int half) const { return base + C::kOffBar + 8 * (2 + 2 * t + half); }
  __device__ uint32_t bar_empty(int t, int half) const { return base + C::kOffBar + 8 * (6 + 2 * t + half); }
  // Tile A's RoPE atom also holds P_A (kPAInRope): consumer 0 stores P_A there once S_A is done, so the
  // producer's cp.async copies into it must be ordered before those stores by an arrival of the thread that
  // made them (the order compute-sanitizer's racecheck follows; it does not follow cp.async.mbarrier.arrive).
  // After each iteration's four fills every producer thread waits for its copies (cp.async.wait_all) and
  // arrives here; consumer 0 waits for it before storing P_A. The wait costs the producer nothing: its next
  // fill needs A-left free, which happens only after S_A and S_B have read those copies. (Loading the atom
  // with ordinary loads and stores instead, published by the fill's own arrival, measured 8% slower.)
  __device__ uint32_t bar_rope_landed() const { return base + C::kOffBar + 8 * 10; }
  // Two tiles per iteration: consumer w's running max is published in its slot of s_max (every thread of consumer
  // w arrives, count 128; the other consumer waits with the iteration's parity). An mbarrier rather than a named
  // barrier because each thread's arrival orders its own accesses before the waiter's, which is the order
  // compute-sanitizer's racecheck follows: with bar.arrive / bar.sync it reported consumer 1's next write of its
  // slot against consumer 0's read (8 hazard sites in the bf16 prefill kernels); no cost measured in either suite.
  __device__ uint32_t bar_max(int w) const { return base + C::kOffBar + 8 * (11 + w); }
};

// The half of tile t that is loaded (and read by its S GEMM) first: A's left, B's right (see sparse_attention_wgmma.cuh).
__host__ __device__ __forceinline__ constexpr int first_half(int t) { return t; }

// Whether a fill of (t, half) ends with a cp.async arrival, and with an ordinary one (valid flags, stores).
// Whole dense tiles by multicast TMA (kTmaRows) make the same arrivals (the cp.async one with no copies pending).
template <class C>
__host__ __device__ __forceinline__ constexpr bool fill_has_cp_async(int t, int half) {
  return !C::kFp8 || (half == 1 && !C::kRopeInRegs);
}
template <class C>
__host__ __device__ __forceinline__ constexpr bool fill_has_ordinary(int t, int half) {
  return C::kFp8 || half == first_half(t);
}
// Adds `bytes` to the barrier's expected transaction count without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// The heads a CTA computes and writes: [first, end). Its rows past end - first compute on zero-filled Q.
struct HeadRange {
  int first, end;
};

// ---------------------------------------------------------------------------------------------------
// Work items. Unsplit: one item, the CTA's token over all its tiles. Split-KV (decode): the items of
// schedule part blockIdx / groups / tokens_per_request, one per request, each over the part's tile range.
struct WorkItem {
  int64_t token = 0;
  int64_t request = 0;  // token = request * tokens_per_request + pos: offsets and lengths need no division
  int pos = 0;
  int eff = 0;                // valid slots of the token (topk_length applied; V4: all topk slots)
  int main_len = 0, extra_len = 0;  // V4: each pool's valid slots (its length applied)
  int tile_begin = 0, tile_end = 0;
  int64_t accum_row = -1;     // >= 0: a split request's partial row; -1: the final output
  bool write_partial = false; // accum_row is inside the accumulators
  // V4: the item runs only tiles that hold a valid slot, the main pool's first main_tiles and then the extra
  // pool's, so item tile t is tile real_tile(t) of the token's list (tile_gap: the main pool's tiles past its
  // length, skipped). V3.2's valid slots are a prefix: its tiles run as they are.
  int main_tiles = INT_MAX, tile_gap = 0;
  __device__ int n_iters() const { return tile_end > tile_begin ? (tile_end - tile_begin + 1) / 2 : 0; }
  __device__ int n_tiles() const { return tile_end > tile_begin ? tile_end - tile_begin : 0; }
  __device__ int real_tile(int t) const { return t < main_tiles ? t : t + tile_gap; }
};

// What the consumers need of a work item, published by the producer with the item's Q (consumers read no
// global memory for it: a branchy global read in their path made ptxas serialize the wgmma instructions).
struct alignas(16) ItemInfo {
  int64_t token;
  int64_t accum_row;
  int32_t n_iters;  // tile by tile (Traits::kPerTile): the item's tiles
  int32_t write_partial;
  int32_t request, pos;  // the token's request and position (num_tokens is an int, so both fit)
};
static_assert(sizeof(ItemInfo) == 32);

// V4: a pool's length for the token whose entry is `length_index`: lengths[length_index] clamped to [0, pool_topk],
// or pool_topk.
__device__ __forceinline__ int v4_pool_length(const int32_t* lengths, int pool_topk, int64_t length_index) {
  if (lengths == nullptr) return pool_topk;
  const int v = __ldg(lengths + length_index);
  return v < 0 ? 0 : (v > pool_topk ? pool_topk : v);
}

// Whether an instantiation takes its item's offsets and lengths from the token's request and position (no
// division; SparseAttentionParams::request_offset) or from the token as before: every one but the prefill kernels
// (bf16 or fp16, unsplit), whose main loops ptxas schedules about 3% slower around the request arithmetic (V3.2 and
// V4 h_q 128 prefill, H100, 2026-12-06) while they gain nothing from it (one item a CTA, one token per request).
template <class C, bool SPLIT>
inline constexpr bool kByRequest = SPLIT || C::kFp8;

// The element offset of an item's token in a per-token tensor, the one rule kByRequest chooses between: from its
// request and position, or from the token.
template <bool BY_REQUEST>
__device__ __forceinline__ int64_t item_offset(const SparseAttentionParams& p, int64_t token, int64_t request, int pos,
                                               int64_t stride_token, int64_t stride_request) {
  if constexpr (BY_REQUEST) return p.request_offset(request, pos, stride_token, stride_request);
  else return p.token_offset(token, stride_token, stride_request);
}

template <bool SPLIT, bool V4 = false, bool BY_REQUEST = true>
struct WorkList {
  static_assert(SPLIT ? BY_REQUEST : true, "split pieces come by request");
  static_assert(sched::kBlockSlots == 64, "a schedule block must be one 64-row KV tile");
  const SparseAttentionParams* p;
  int64_t outer;  // blockIdx.x / groups
  int first = 0, last = 0;
  // The part's metadata, read once at entry as two 16-byte loads: item() then needs no global read before its
  // index loads but num_splits (whose address depends on the request alone), where re-reading fields through a
  // pointer after the prologue's barriers chained three dependent loads.
  sched::PartMeta meta{};
  int tok_in_req = 0;

  __device__ WorkList(const SparseAttentionParams& params, int64_t outer_index) : p(&params), outer(outer_index) {
    if constexpr (SPLIT) {
      static_assert(sizeof(sched::PartMeta) == 32, "two 16-byte loads");
      // 32-bit: outer < num_parts * tokens_per_request (a grid dimension), and a 64-bit division puts its check and
      // slow path on every CTA's way to its first load.
      const unsigned o = static_cast<unsigned>(outer), per = static_cast<unsigned>(p->tokens_per_request);
      const unsigned part = per == 1 ? o : o / per;
      const int4* src = reinterpret_cast<const int4*>(static_cast<const sched::PartMeta*>(p->sched) + part);
      const int4 lo = src[0], hi = src[1];
      meta = sched::PartMeta{lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      tok_in_req = static_cast<int>(o - part * per);
      first = meta.begin_req < 0 ? 0 : meta.begin_req;
      last = meta.end_req < p->num_requests ? meta.end_req : p->num_requests - 1;  // empty part: last < first
    }
  }

  __device__ WorkItem item(int k) const {
    WorkItem w;
    int tile_begin = 0, tile_end = INT_MAX;
    w.token = outer;
    if constexpr (SPLIT) {
      const SplitPiece piece = split_piece(*p, meta, k, sched::blocks_of(p->topk), tok_in_req);
      tile_begin = piece.tile_begin;
      tile_end = piece.tile_end;
      w.token = piece.token;
      w.request = k;
      w.pos = tok_in_req;
      w.accum_row = piece.accum_row;
      w.write_partial = piece.write_partial;
    } else if constexpr (BY_REQUEST) {
      // The grid's token (< num_tokens, an int): one 32-bit division for the whole item.
      const unsigned t = static_cast<unsigned>(outer), per = static_cast<unsigned>(p->tokens_per_request);
      const unsigned request = per <= 1 ? t : t / per;
      w.request = request;
      w.pos = static_cast<int>(t - request * (per <= 1 ? 1u : per));
    }
    const int64_t length_index = BY_REQUEST ? p->length_index(w.token, w.request) : w.token / p->tokens_per_length;
    int eff, n_tiles;
    if constexpr (V4) {  // both pools' slots run; each pool's length masks its own (the valid slots are no prefix)
      eff = p->topk;
      w.main_len = v4_pool_length(p->topk_length, p->main_topk, length_index);
      w.extra_len = v4_pool_length(p->extra_topk_length, p->topk - p->main_topk, length_index);
      // Only the tiles with a valid slot: the main pool's first main_tiles, then the extra pool's (a schedule block
      // is one of these tiles; a schedule planned without lengths counts every tile, and its pieces past the valid
      // ones run empty).
      w.main_tiles = sched::blocks_of(w.main_len);
      w.tile_gap = p->main_topk / sched::kBlockSlots - w.main_tiles;
      n_tiles = w.main_tiles + sched::blocks_of(w.extra_len);
    } else {
      eff = effective_topk(*p, length_index);
      n_tiles = sched::blocks_of(eff);
    }
    w.eff = eff;
    w.tile_begin = tile_begin;
    w.tile_end = tile_end < n_tiles ? tile_end : n_tiles;
    return w;
  }
};

// The work list of instantiation C.
template <class C, bool SPLIT>
using WorkListOf = WorkList<SPLIT, C::kFp8V4, kByRequest<C, SPLIT>>;

// Longest first (KernelParams::longest_first): the token the CTA of unsplit token slot `outer` runs: the request whose
// rank by tiles (more first, ties by index) is outer / s_q; the same in both CTAs of a cluster. A counting rank, in
// `scratch` (Q's buffer, which no other phase uses yet): every thread adds its requests' tile counts to a histogram;
// warp 0 finds the bin holding the wanted rank (requests in bins above it rank first) and the rank within the bin; then
// a block-wide scan finds that request among the bin's by index. About five barriers whatever the batch; the pairwise
// rank this replaces cost each CTA O(num_requests^2 / threads) shared-memory reads before its first Q load (about
// 1.5 us at 256 requests, paid once per round of CTAs). The host enables it for up to kLongestFirstMaxRequests
// requests of at most kLongestFirstMaxTiles - 1 tiles.
inline constexpr int kLongestFirstMaxRequests = 1024;
inline constexpr int kLongestFirstMaxTiles = 1024;  // histogram bins: tile counts 0 .. kLongestFirstMaxTiles - 1
template <class C>
__device__ int64_t longest_first_token(const SparseAttentionParams& p, int64_t outer, int32_t* scratch) {
  constexpr int kWarps = C::kThreads / 32;
  static_assert((kLongestFirstMaxRequests + kLongestFirstMaxTiles + kWarps + 3) * 4 <= C::kQBytes,
                "the tile counts, the histogram and the scan fit Q's buffer");
  int32_t* tiles = scratch;                                   // [num_requests]
  int32_t* hist = scratch + kLongestFirstMaxRequests;         // [bins]
  int32_t* warp_total = hist + kLongestFirstMaxTiles;         // [kWarps]
  int32_t* s_pick = warp_total + kWarps;                      // the bin, then its rank within the bin; then the request
  const int n = p.num_requests, per = p.tokens_per_request;
  const int bins = sched::blocks_of(p.topk) + 1;
  const int want = static_cast<int>(outer / per);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int b = tid; b < bins; b += C::kThreads) hist[b] = 0;
  __syncthreads();
  for (int r = tid; r < n; r += C::kThreads) {
    const int t = WorkListOf<C, false>(p, static_cast<int64_t>(r) * per).item(0).n_tiles();
    tiles[r] = t;
    atomicAdd(&hist[t], 1);
  }
  __syncthreads();
  if (warp == 0) {
    // Lane l sums bins [hi - (l + 1) c, hi - l c) from the top (hi = bins), so lower lanes hold more tiles.
    const int c = (bins + 31) / 32;
    const int top = bins - lane * c, bottom = max(top - c, 0);
    int sum = 0;
    for (int b = top - 1; b >= bottom; --b) sum += hist[b];
    int above = sum;  // inclusive scan over lanes, then exclusive
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, above, o);
      if (lane >= o) above += v;
    }
    above -= sum;
    if (want >= above && want < above + sum) {
      for (int b = top - 1; b >= bottom; --b) {
        if (want < above + hist[b]) {
          s_pick[0] = b;
          s_pick[1] = want - above;
          break;
        }
        above += hist[b];
      }
    }
  }
  __syncthreads();
  const int bin = s_pick[0], k = s_pick[1];
  // Thread i looks at requests [i chunk, (i + 1) chunk): its matches, scanned across the block.
  const int chunk = (n + C::kThreads - 1) / C::kThreads;
  const int first = min(tid * chunk, n), last = min(first + chunk, n);
  int mine = 0;
  for (int r = first; r < last; ++r) mine += tiles[r] == bin;
  int incl = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  int before = incl - mine;
  for (int w = 0; w < warp; ++w) before += warp_total[w];
  if (k >= before && k < before + mine) {
    int seen = before;
    for (int r = first; r < last; ++r) {
      if (tiles[r] != bin) continue;
      if (seen == k) {
        s_pick[2] = r;
        break;
      }
      ++seen;
    }
  }
  __syncthreads();
  const int64_t token = static_cast<int64_t>(s_pick[2]) * per + outer % per;
  __syncthreads();  // every thread has read the pick before the memory is used again
  return token;
}

}  // namespace flashcpp::mla::kernels::wgmma
