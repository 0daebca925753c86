// Sparse MLA attention for Hopper (sm_90a): a warp-specialized wgmma kernel with FlashMLA's semantics
// (sparse_attention_kernel.hpp, docs/MLA.md), for sparse prefill over bf16 KV and sparse decode over the
// DeepSeek V3.2 FP8 cache (split-KV or not). Configuration: sparse_attention_wgmma_config.hpp;
// instantiations: sparse_attention_wgmma_bf16.cu, sparse_attention_wgmma_fp8.cu.
//
// Design (learned from FlashMLA's sm90 kernels and FlashAttention-3; our own schedule):
//   * One CTA = one query token x 64 heads (decode with split-KV: a part of the schedule, walking its
//     (request, tile range) work items); 384 threads = consumer warpgroups 0 and 1 + a producer warpgroup.
//     The producer fills two 64-row KV tiles A and B, each split into a left half (dims 0..255) and a right
//     half (dims 256..d_qk-1); every half has a "full" and an "empty" mbarrier. bf16 KV: cp.async 16 B,
//     zero-filled for masked rows. FP8 KV: 16-byte loads issued before the buffer is free, then
//     dequantized (fp8_v32_dequant.cuh) and stored; RoPE dims by cp.async. Masked rows are never read.
//     DeepSeek V4 pages (d_qk 512, mla/fp8_v4.hpp) take the same path: 448 e4m3 dims with one power-of-two
//     scale per 64 from the page's scale records, RoPE dims 448..511, and a token's slots are its main pool's
//     then its extra pool's, each pool masked by its own length (the producer's load_indices).
//     (Tile A's RoPE atom also holds P_A: how its writes are ordered, see bar_rope_landed.)
//   * FP8 with h_q 65..128 runs as a 2-CTA cluster (the two head groups of a token, which need the same
//     tiles; V4 with h_q 33..64 also, as two groups of 32 heads: KernelArgs::group_heads, the CTA's other
//     rows compute on zero Q and are never written): each CTA's producer dequantizes half of every tile's
//     rows into its own tile, and one thread bulk-copies those rows into the peer's tile (completing
//     transactions on the peer's full barrier); a half-tile is free only when the consumers of both CTAs
//     released it (they arrive on both CTAs' empty barriers).
//     The cluster runs tile by tile (Config::kPerTile, consumer_per_tile): consumer 0 computes S of each whole
//     tile and the softmax, consumer 1 only its half of P V, and the producer holds two raw buffers (a tile's
//     loads are in flight a whole tile ahead). DeepSeek V4 pages run tile by tile alone too (64 heads per CTA;
//     the RoPE atom by cp.async). The rest of this list describes the two-tile iteration of the other
//     configurations (V3.2 alone, bf16 prefill).
//     (docs/MLA.md: measurements and the automatic choice between this kernel and the mma.sync kernel.)
//   * Iteration i handles tiles A = 2i and B = 2i + 1. Consumer 0 computes S_A = Q K_A^T and consumer 1
//     S_B = Q K_B^T (wgmma m64n64k16, both operands in shared memory). They run staggered: consumer 0 takes
//     the running max over tile A and starts its first PV at once, consumer 1 adds tile B's max, and consumer 0
//     rescales P_A and its O to that iteration max (consumer()), so both O halves stay consistent and one
//     consumer's softmax overlaps the other's GEMMs. Consumer 0 owns O columns 0..255 and consumer 1 columns
//     256..511 (128 f32 accumulators per thread each):
//         consumer 0: O_L += P_A V_A[:, 0:256] (P from registers)  then  O_L += P_B V_B[:, 0:256] (P_B from smem)
//         consumer 1: O_R += P_B V_B[:, 256:512] (registers)        then  O_R += P_A V_A[:, 256:512] (smem)
//     (wgmma m64n256k16; V is the same shared-memory tile as K read MN-major, no second copy.)
//   * Release order and refill order match: consumer 0 frees A-left after its first PV and B-left after its
//     second, consumer 1 frees B-right, then A-right; the producer refills A-left, B-right, A-right, B-left,
//     and each consumer's S GEMM reads its tile's early-freed half first. So the next gather overlaps the
//     PV GEMMs and the first half of the next S GEMM.
//   * Shared memory is 128-byte-swizzled column blocks (64 rows x 64 bf16) as wgmma wants them: Q 64 x d_qk,
//     K tiles A and B, P_B (and P_A, which lives in tile A's RoPE block for d_qk 576: the only GEMM that
//     reads RoPE columns is S_A, finished before P_A is written).
//   * Masking: a slot is valid iff its position < topk_length, its tile is in the work item's range and
//     0 <= index < num_kv. Masked rows are zero-filled and their logits set to -inf, so nothing of them
//     reaches the output. Softmax runs in base 2 with sm_scale*log2(e) folded in; lse and max_logits are
//     converted to natural log. An empty row gives out 0, lse +inf, max_logits -inf; a split's partial row
//     is O / l in f32 with lse -inf when empty (the combine kernel finishes it).
//   * Epilogue: the unsplit grid's output goes through Q's buffer, each warp writing its 16 rows as whole
//     512-byte rows with 16-byte stores (write_item_rows); the sink values are loaded when the consumers start.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "mla/decode_schedule.hpp"
#include "mla/fast_divmod.hpp"
#include "mla/fp8_v32_dequant.cuh"
#include "mla/fp8_v4.hpp"
#include "mla/sparse_attention_kernel.hpp"
#include "mla/sparse_attention_wgmma_config.hpp"
#include "mla/sm90_device.cuh"
#include "mla/sm90_kernel_ready.hpp"

namespace flashcpp::mla::kernels::wgmma {

using sm90::cp_async_16, sm90::fast_exp2, sm90::ld_global_nc_v4, sm90::ld_shared_v4, sm90::pack_bf16x2,
    sm90::smem_addr, sm90::st_shared_u32, sm90::st_shared_v4;

struct KernelArgs {
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

// V4 (fp8_v4.hpp): the byte offsets of index `idx`'s token record and scale record in pool `extra`.
__device__ __forceinline__ void v4_record_offsets(const KernelArgs& args, bool extra, int idx, int64_t& token_off,
                                                  int64_t& scale_off) {
  const mla::FastDivmod& d = extra ? args.extra_page : args.page;
  const uint32_t page = d.div(static_cast<uint32_t>(idx));
  const uint32_t slot = static_cast<uint32_t>(idx) - page * d.divisor;
  const int64_t base = static_cast<int64_t>(page) * (extra ? args.p.extra_block_stride_bytes : args.p.kv_block_stride_bytes);
  token_off = base + static_cast<int64_t>(slot) * fp8_v4::kTokenRecordBytes;
  scale_off = base + static_cast<int64_t>(d.divisor) * fp8_v4::kTokenRecordBytes + static_cast<int64_t>(slot) * fp8_v4::kScaleRecordBytes;
}

// Byte offset of FP8 cache row `idx` (0 <= idx < num_kv).
__device__ __forceinline__ int64_t fp8_row_offset(const KernelArgs& args, int idx) {
  const uint32_t page = args.page.div(static_cast<uint32_t>(idx));
  const uint32_t slot = static_cast<uint32_t>(idx) - page * args.page.divisor;
  return static_cast<int64_t>(page) * args.p.kv_block_stride_bytes +
         static_cast<int64_t>(slot) * args.p.kv_slot_stride_bytes;
}

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
  kBarMax = 1, kBarPReadyA = 2, kBarPReadyB = 3, kBarProducerStored = 4, kBarPFree = 5, kBarMaxA = 6, kBarMaxB = 7
};
__device__ __forceinline__ void named_sync(int id) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void named_arrive(int id) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
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
// wgmma instructions (bf16 in, f32 accumulate).
// D[64x64] (+)= A[64x16] (smem, K-major) * B[16x64] (smem, K-major); scale_d = 0 overwrites D.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D[64x256] += A[64x16] (registers, bf16x2 fragments) * B[16x256] (smem, MN-major).
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// D[64x256] += A[64x16] (smem, K-major) * B[16x256] (smem, MN-major).
__device__ __forceinline__ void wgmma_m64n256k16_ss(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}


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
};

// The half of tile t that is loaded (and read by its S GEMM) first: A's left, B's right (see the header).
__host__ __device__ __forceinline__ constexpr int first_half(int t) { return t; }

// Whether a fill of (t, half) ends with a cp.async arrival, and with an ordinary one (valid flags, stores).
template <class C>
__host__ __device__ __forceinline__ constexpr bool fill_has_cp_async(int t, int half) {
  return !C::kFp8 || (half == 1 && !C::kRopeInRegs);
}
template <class C>
__host__ __device__ __forceinline__ constexpr bool fill_has_ordinary(int t, int half) {
  return C::kFp8 || half == first_half(t);
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
  int32_t n_iters;  // tile by tile (Config::kPerTile): the item's tiles
  int32_t write_partial;
  int32_t pad[2];
};
static_assert(sizeof(ItemInfo) == 32);

// V4: a pool's length for `token`: lengths[token / tokens_per_length] clamped to [0, pool_topk], or pool_topk.
__device__ __forceinline__ int v4_pool_length(const SparseAttentionParams& p, const int32_t* lengths, int pool_topk,
                                              int64_t token) {
  if (lengths == nullptr) return pool_topk;
  const int v = __ldg(lengths + token / p.tokens_per_length);
  return v < 0 ? 0 : (v > pool_topk ? pool_topk : v);
}

template <bool SPLIT, bool V4 = false>
struct WorkList {
  static_assert(sched::kBlockSlots == 64, "a schedule block must be one 64-row KV tile");
  const SparseAttentionParams* p;
  int64_t outer;  // blockIdx.x / groups
  int first = 0, last = 0;
  const sched::PartMeta* meta = nullptr;
  int tok_in_req = 0;

  __device__ WorkList(const SparseAttentionParams& params, int64_t outer_index) : p(&params), outer(outer_index) {
    if constexpr (SPLIT) {
      meta = static_cast<const sched::PartMeta*>(p->sched) + outer / p->tokens_per_request;
      tok_in_req = static_cast<int>(outer % p->tokens_per_request);
      const sched::PartMeta m = *meta;
      first = m.begin_req < 0 ? 0 : m.begin_req;
      last = m.end_req < p->num_requests ? m.end_req : p->num_requests - 1;  // empty part: last < first
    }
  }

  __device__ WorkItem item(int k) const {
    WorkItem w;
    int tile_begin = 0, tile_end = INT_MAX;
    w.token = outer;
    if constexpr (SPLIT) {
      const SplitPiece piece = split_piece(*p, *meta, k, sched::blocks_of(p->topk), tok_in_req);
      tile_begin = piece.tile_begin;
      tile_end = piece.tile_end;
      w.token = piece.token;
      w.accum_row = piece.accum_row;
      w.write_partial = piece.write_partial;
    }
    int eff, n_tiles;
    if constexpr (V4) {  // both pools' slots run; each pool's length masks its own (the valid slots are no prefix)
      eff = p->topk;
      w.main_len = v4_pool_length(*p, p->topk_length, p->main_topk, w.token);
      w.extra_len = v4_pool_length(*p, p->extra_topk_length, p->topk - p->main_topk, w.token);
      // Only the tiles with a valid slot: the main pool's first main_tiles, then the extra pool's (a schedule block
      // is one of these tiles; a schedule planned without lengths counts every tile, and its pieces past the valid
      // ones run empty).
      w.main_tiles = sched::blocks_of(w.main_len);
      w.tile_gap = p->main_topk / sched::kBlockSlots - w.main_tiles;
      n_tiles = w.main_tiles + sched::blocks_of(w.extra_len);
    } else {
      eff = effective_topk(*p, w.token);
      n_tiles = sched::blocks_of(eff);
    }
    w.eff = eff;
    w.tile_begin = tile_begin;
    w.tile_end = tile_end < n_tiles ? tile_end : n_tiles;
    return w;
  }
};

// Longest first (KernelArgs::longest_first): the token the CTA of unsplit token slot `outer` runs: the request whose
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
    const int t = WorkList<false, C::kFp8V4>(p, static_cast<int64_t>(r) * per).item(0).n_tiles();
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

// ---------------------------------------------------------------------------------------------------
// Producer warpgroup: per work item Q, then per iteration the halves of tiles A and B in release order.
template <class C, bool SPLIT>
__device__ __forceinline__ void producer(const KernelArgs& args, const Smem<C>& sm, uint8_t* s_valid,
                                         ItemInfo* s_item, const WorkList<SPLIT, C::kFp8V4>& work, HeadRange heads) {
  const SparseAttentionParams& p = args.p;
  const int ptid = threadIdx.x - C::kConsumerThreads;
  const int group = ptid / C::kThreadsPerRow, sub = ptid % C::kThreadsPerRow;
  const int rank = C::kCluster ? static_cast<int>(sm.rank) : 0;
  // Row `row` of a tile or of Q; this thread's 16-byte chunk `chunk` of each 128-byte atom row.
  auto chunk_offset = [](int row, int chunk) { return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4)); };

  int iter = 0;  // iterations before this work item (barrier phases run on across items)
  for (int k = work.first; k <= work.last; ++k) {
    const WorkItem w = work.item(k);
    const int64_t q_row = p.token_offset(w.token, p.q_stride_token, p.q_stride_request);

    // ---- Phase: fill KV tiles.
    const int64_t idx_start = p.token_offset(w.token, p.indices_stride_token, p.indices_stride_request);
    const int32_t* idx_row = p.indices + idx_start;
    const int64_t extra_start =
        C::kFp8V4 ? p.token_offset(w.token, p.extra_indices_stride_token, p.extra_indices_stride_request) : 0;
    // V4: whether tile `tile` of the token's list is in the extra pool (a pool's slot count is a multiple of
    // the tile, so no tile straddles the two).
    auto tile_extra = [&](int tile) {
      if constexpr (C::kFp8V4) return w.real_tile(tile) * C::kTile >= p.main_topk;
      else return false;
    };
    // Index of each of this thread's rows of `tile` as loaded, -1 where its position is masked (past the
    // pool's length or the item's tiles). The range is checked where the row is read (row_valid): a check
    // here would wait for the index load, which is meant to be in flight while the producer works.
    auto load_indices = [&](int tile, int (&idx)[C::kRowsPerThread]) {
      if constexpr (C::kFp8V4) {
        // The tile's pool is the same for all its rows: its index list, the offset at which a slot of the
        // token's whole list (main slots, then extra slots) reads it, and the slot bound its length sets.
        const bool extra = tile_extra(tile);
        const int32_t* list = extra ? p.extra_indices : p.indices;
        const int64_t start = extra ? extra_start - p.main_topk : idx_start;
        const int end = tile < w.tile_end ? (extra ? p.main_topk + w.extra_len : w.main_len) : 0;
        const int first_slot = w.real_tile(tile) * C::kTile;
#pragma unroll
        for (int r = 0; r < C::kRowsPerThread; ++r) {
          const int slot = first_slot + r * C::kRowsPerPass + group;
          idx[r] = slot < end ? __ldg(list + (start + slot)) : -1;
        }
      } else {
#pragma unroll
        for (int r = 0; r < C::kRowsPerThread; ++r) {
          const int slot = tile * C::kTile + r * C::kRowsPerPass + group;
          idx[r] = (tile < w.tile_end && slot < w.eff) ? __ldg(idx_row + slot) : -1;
        }
      }
    };
    // Whether a loaded index is a row of its pool (`extra`: V4's extra pool).
    auto row_valid = [&](int id, bool extra) {
      return id >= 0 && static_cast<int64_t>(id) < (C::kFp8V4 && extra ? p.extra_num_kv : p.num_kv);
    };
    const int n_iters = w.n_iters();
    int idx_cur[2][C::kRowsPerThread], idx_next[2][C::kRowsPerThread];
    // The first tiles' indices go out before Q's 64 KiB of copies, which they would otherwise queue behind: the
    // first KV rows wait for them.
    if (n_iters > 0) {
      load_indices(w.tile_begin, idx_cur[0]);
      load_indices(w.tile_begin + 1, idx_cur[1]);
    }

    // ---- Phase: load Q (64 heads x d_qk; heads past h_q zero-filled) once the last item's S GEMMs are done.
    if (k > work.first) mbar_wait(sm.bar_q_empty(), (k - work.first - 1) & 1);
#pragma unroll
    for (int r = 0; r < C::kRowsPerThread; ++r) {
      const int row = r * C::kRowsPerPass + group;
      const int head = heads.first + row;
      const bool ok = head < heads.end;
      const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(p.q) + q_row +
                                 static_cast<int64_t>(ok ? head : 0) * p.q_stride_head + sub * 8;
#pragma unroll
      for (int a = 0; a < C::kAtoms; ++a)
        cp_async_16(sm.q() + a * C::kAtomBytes + chunk_offset(row, sub), src + a * C::kAtomCols, ok ? 16 : 0);
    }
    // The item is published after the first index loads are issued: its split row reads num_splits, and its
    // publisher's warp would otherwise wait for that load before issuing its own index loads (one more global
    // latency before the first KV rows).
    if (ptid == 0) {
      s_item[(k - work.first) & 1] =
          ItemInfo{w.token, w.accum_row, C::kPerTile ? w.n_tiles() : w.n_iters(), w.write_partial ? 1 : 0, {0, 0}};
      mbar_arrive(sm.bar_q_full());  // publishes the item (release)
    }
    cp_async_arrive(sm.bar_q_full());
    // FP8: raw e4m3 chunks of this thread's dequantized rows (chunks sub + 8 (2 half + j), j < 2) and their
    // two scales (tiles 2 half, 2 half + 1), per raw buffer; masked rows read nothing and dequantize to 0.
    // The scales stay as loaded (V3.2: two floats; V4: the half's word of four e8m0 bytes) until the store:
    // decoding them at the load would wait for it there, with the next half's loads not yet issued.
    using Fp8Scales = std::conditional_t<C::kFp8V4, uint32_t, float2>;
    auto scale_of = [&](const Fp8Scales& s, int j) {  // the scale of chunk j (0, 1) of a row's half
      if constexpr (C::kFp8V4) return fp8_v4::pow2_of_e8m0(static_cast<uint8_t>(s >> (8 * (2 * j + (sub >> 2)))));
      else return j == 0 ? s.x : s.y;
    };
    // The fast dequantization's multiplier for chunk j (fp8::e4m3_fast_scale); clears `ok` where that path
    // cannot take the scale. V4's e8m0 byte e gives it without float arithmetic: 2^(e - 127) * 2^120 is the
    // bf16 with exponent field e + 120, and the fast path takes e <= 133 (scales below 2^7).
    auto fast_scale = [&](const Fp8Scales& s, int j, bool& ok) {
      if constexpr (C::kFp8V4) {
        const uint32_t e = (s >> (8 * (2 * j + (sub >> 2)))) & 0xffu;
        ok = ok && e <= 133u;
        return ((e + 120u) << 7) * 0x10001u;
      } else {
        const float scale = scale_of(s, j);
        ok = ok && fp8::e4m3_fast_scale_ok(scale);
        return fp8::e4m3_fast_scale(scale);
      }
    };
    const uint8_t* cache = static_cast<const uint8_t*>(p.kv);
    uint4 raw[C::kFp8RawBuffers][C::kDequantRowsPerThread][C::kFp8ChunksPerHalf];
    Fp8Scales scale[C::kFp8RawBuffers][C::kDequantRowsPerThread];
    // kRopeInRegs: this thread's 16-byte RoPE piece of each of its rows (right halves only), per raw buffer.
    uint4 rope[C::kFp8RawBuffers][C::kRopeInRegs ? C::kDequantRowsPerThread : 1];
    // Where a row lives: its token record (V3.2: its 656-byte row) and, for V4, its scale record; null where
    // masked. Tile by tile (kPerTile) a tile's right half is loaded right after its left half (the next tile's,
    // a whole tile ahead), so the left half's load keeps its rows' addresses for the right one (row_addr).
    struct RowAddr {
      const uint8_t* rec;
      const uint8_t* scales;  // V4
    };
    auto locate = [&](int id, bool extra) {
      RowAddr a{nullptr, nullptr};
      if (!row_valid(id, extra)) return a;
      if constexpr (C::kFp8V4) {
        int64_t token_off, scale_off;
        v4_record_offsets(args, extra, id, token_off, scale_off);
        const uint8_t* pool = static_cast<const uint8_t*>(extra ? p.extra_kv : p.kv);
        a.rec = pool + token_off;
        a.scales = pool + scale_off;
      } else {
        a.rec = cache + fp8_row_offset(args, id);
      }
      return a;
    };
    // Tile by tile in a cluster the left half's rows' addresses are kept for the right half. Alone the producer holds
    // a whole tile's raw bytes, and the kept addresses made ptxas spill its registers (152) in the load path, 10-20%
    // slower (H200, 2026-12-01, V4 h_q 64 b 64 / 128 / 148: 51.6 / 102.3 / 144.3 us recomputing them, 56.5 / 112.7 /
    // 163.1 keeping them): it locates the rows again.
    constexpr bool kCacheRowAddr = C::kPerTile && C::kCluster;
    RowAddr row_addr[kCacheRowAddr ? C::kDequantRowsPerThread : 1];
    auto load_fp8 = [&](const int (&idx)[C::kRowsPerThread], int half, bool extra,
                        uint4 (&b_raw)[C::kDequantRowsPerThread][C::kFp8ChunksPerHalf],
                        Fp8Scales (&b_scale)[C::kDequantRowsPerThread],
                        uint4 (&b_rope)[C::kRopeInRegs ? C::kDequantRowsPerThread : 1]) {
#pragma unroll
      for (int r = 0; r < C::kDequantRowsPerThread; ++r) {
        // This CTA's rows: all four (alone), or indices 2 rank, 2 rank + 1 (cluster; no dynamic indexing).
        const int id = C::kCluster ? (rank == 0 ? idx[r] : idx[C::kDequantRowsPerThread + r]) : idx[r];
        RowAddr a;
        if (kCacheRowAddr && half == 1) {
          a = row_addr[r];
        } else {
          a = locate(id, extra);
          if (kCacheRowAddr) row_addr[r] = a;
        }
        const bool valid = a.rec != nullptr;
        if constexpr (C::kRopeInRegs) {
          if (half == 1)
            b_rope[r] = valid ? ld_global_nc_v4(a.rec + C::kFp8RopeOffset + 16 * sub) : make_uint4(0, 0, 0, 0);
        }
        if (valid) {
#pragma unroll
          for (int j = 0; j < C::kFp8ChunksPerHalf; ++j) {
            // V4: chunks past the 28 NoPE ones (half 1, j 1, sub >= 4) do not exist.
            const int c = sub + 8 * (2 * half + j);
            b_raw[r][j] = c < C::kFp8NopeChunks ? ld_global_nc_v4(a.rec + 16 * c) : make_uint4(0, 0, 0, 0);
          }
          // V4: chunk c has scale c / 4 = 4 half + 2 j + sub / 4 of the token's 7, in the half's word of the
          // scale record (scale_of, fast_scale). V3.2: the half's two f32 scales.
          if constexpr (C::kFp8V4) b_scale[r] = ld_global_nc_u32(a.scales + 4 * half);
          else b_scale[r] = ld_global_nc_f2(a.rec + C::kFp8ScaleOffset + 8 * half);
        } else {
#pragma unroll
          for (int j = 0; j < C::kFp8ChunksPerHalf; ++j) b_raw[r][j] = make_uint4(0, 0, 0, 0);
          b_scale[r] = Fp8Scales{};  // zero bytes times any finite scale
        }
      }
    };
    // This CTA's rows of a half tile into `tile`: the dequantized e4m3 chunks and, with the peer (kRopeInRegs),
    // the right half's RoPE pieces.
    auto store_rows = [&](uint32_t tile, int half, const uint4 (&b_raw)[C::kDequantRowsPerThread][C::kFp8ChunksPerHalf],
                          const Fp8Scales (&b_scale)[C::kDequantRowsPerThread],
                          const uint4 (&b_rope)[C::kRopeInRegs ? C::kDequantRowsPerThread : 1]) {
      // Threads sub 0..3 and 4..7 write the same chunk positions of two atoms (the same banks): the upper four
      // store their odd chunk (dims 8..15 of the 16) first, so each store instruction is conflict-free. Their
      // selectors put those dims in `first`.
      const bool odd_first = (sub & 4) != 0;
      // Rows are dequantized in batches (kBatch) and their scales checked in groups (kCheckRows): a group takes the
      // fast path or the f32 path (for scales the fast one cannot take) as a whole, each path one straight-line block
      // that also stores. A cluster CTA's two rows are one batch, dequantized before either is stored: independent
      // chunks, which the compiler interleaves. The producer alone dequantizes and stores one row at a time (more
      // would not fit its registers); tile by tile it checks its four rows at once (one branch per half), with one
      // raw buffer (104 registers) one at a time. (Against one branch per batch followed by shared stores: V4 h_q 64
      // b 64 / 148 -5%, h_q 128 b 128 -2%, V3.2 b 64 / 128 -3%; H200, 2026-12-01.)
      constexpr int kRows = C::kDequantRowsPerThread, kChunks = C::kFp8ChunksPerHalf;
      constexpr int kBatch = kRows > 2 ? 1 : kRows;
      constexpr int kCheckRows = C::kPerTile ? kRows : kBatch;
      static_assert(kRows % kCheckRows == 0 && kCheckRows % kBatch == 0, "rows come in whole groups and batches");
      // Row r's dequantized chunks (and, with the peer, its RoPE piece) into the tile.
      auto put_row = [&](int r, const uint4 (&first)[kChunks], const uint4 (&second)[kChunks]) {
        const int row = (rank * kRows + r) * C::kRowsPerPass + group;
#pragma unroll
        for (int j = 0; j < kChunks; ++j) {
          const int c = sub + 8 * (2 * half + j);  // e4m3 chunk: dims 16c .. +16 -> bf16 chunks 2c, 2c + 1
          if constexpr (C::kFp8V4) {
            if (c >= C::kFp8NopeChunks) continue;  // V4 dims 448..511 are the RoPE atom
          }
          const uint32_t atom = tile + (c >> 2) * C::kAtomBytes;
          st_shared_v4(atom + chunk_offset(row, ((2 * c) & 7) + (odd_first ? 1 : 0)), first[j]);
          st_shared_v4(atom + chunk_offset(row, ((2 * c) & 7) + (odd_first ? 0 : 1)), second[j]);
        }
        if constexpr (C::kRopeInRegs) {  // RoPE dims (bf16 in the cache): the last atom
          if (half == 1) st_shared_v4(tile + (C::kAtoms - 1) * C::kAtomBytes + chunk_offset(row, sub), b_rope[r]);
        }
      };
#pragma unroll
      for (int g0 = 0; g0 < kRows; g0 += kCheckRows) {
        uint32_t s2[kCheckRows][kChunks];
        bool fast = true;
#pragma unroll
        for (int r = 0; r < kCheckRows; ++r)
#pragma unroll
          for (int j = 0; j < kChunks; ++j) s2[r][j] = fast_scale(b_scale[g0 + r], j, fast);
        // The group's rows, batch by batch: `dequant(row, j, first, second)` makes chunk j of a row, then the batch
        // is stored. Each path below gets its own copy of this loop.
        auto dequant_and_put = [&](auto dequant) {
#pragma unroll
          for (int b0 = 0; b0 < kCheckRows; b0 += kBatch) {
            uint4 first[kBatch][kChunks], second[kBatch][kChunks];
#pragma unroll
            for (int r = 0; r < kBatch; ++r)
#pragma unroll
              for (int j = 0; j < kChunks; ++j) dequant(g0 + b0 + r, j, first[r][j], second[r][j]);
#pragma unroll
            for (int r = 0; r < kBatch; ++r) put_row(g0 + b0 + r, first[r], second[r]);
          }
        };
        if (fast) {
          const fp8::E4m3Selectors sel = fp8::e4m3_selectors(odd_first);
          dequant_and_put([&](int row, int j, uint4& first, uint4& second) {
            fp8::dequant_e4m3x16_fast(b_raw[row][j], s2[row - g0][j], sel, first, second);
          });
        } else {
          dequant_and_put([&](int row, int j, uint4& first, uint4& second) {
            uint4 lo, hi;
            fp8::dequant_e4m3x16(b_raw[row][j], scale_of(b_scale[row], j), lo, hi);
            first = odd_first ? hi : lo;
            second = odd_first ? lo : hi;
          });
        }
      }
    };
    // Alone, tile by tile: the RoPE atom of tile `tile_no` (bf16 in the cache) by cp.async, every row, once the
    // right half is stored; its arrival on the half's full barrier comes when the copies land.
    auto copy_rope = [&](uint32_t tile, int tile_no, uint32_t full_bar) {
#pragma unroll
      for (int r = 0; r < C::kRowsPerThread; ++r) {
        const RowAddr a = locate(idx_cur[0][r], tile_extra(tile_no));
        const uint8_t* src = a.rec != nullptr ? a.rec + C::kFp8RopeOffset + 16 * sub : cache;
        const uint32_t rope_atom = tile + (C::kAtoms - 1) * C::kAtomBytes;
        cp_async_16(rope_atom + chunk_offset(r * C::kRowsPerPass + group, sub), src, a.rec != nullptr ? 16 : 0);
      }
      cp_async_arrive(full_bar);
    };
    if constexpr (C::kPerTile) {
      // Tile by tile: tile jj's left half, then its right half, into buffer g & 1 (g counts tiles across work
      // items). Raw bytes (buffer = half) are loaded a whole tile ahead: a half's buffer is refilled with the
      // next tile's same half once this one is stored. (One half ahead, the other half's buffer before this half
      // is stored, measured slower for both layouts on the H200: V3.2 b 64 / 128 220.5 / 439.1 against 223.1 /
      // 445.8 us, V4 h_q 128 118.3 / 235.6 against 122.0 / 243.0 us; 2026-12-01.) Indices (idx_cur: tiles jj,
      // jj + 1; idx_next[0]: jj + 2) two tiles ahead.
      const int n_tiles = w.n_tiles();
      if (n_tiles > 0) {
        load_fp8(idx_cur[0], 0, tile_extra(w.tile_begin), raw[0], scale[0], rope[0]);
        load_fp8(idx_cur[0], 1, tile_extra(w.tile_begin), raw[1], scale[1], rope[1]);
      }
      for (int jj = 0; jj < n_tiles; ++jj) {
        const int tile_no = w.tile_begin + jj;
        const int g = iter + jj;
        const int t = g & 1;
        const uint32_t tile = sm.tile(t);
        load_indices(tile_no + 2, idx_next[0]);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          if (g >= 2) mbar_wait(sm.bar_empty(t, half), ((g >> 1) - 1) & 1);
          store_rows(tile, half, raw[half], scale[half], rope[half]);
          if (jj + 1 < n_tiles) load_fp8(idx_cur[1], half, tile_extra(tile_no + 1), raw[half], scale[half], rope[half]);
          if (half == 0 && sub == 0) {
#pragma unroll
            for (int r = 0; r < C::kRowsPerThread; ++r)
              s_valid[t * C::kTile + r * C::kRowsPerPass + group] =
                  row_valid(idx_cur[0][r], tile_extra(tile_no)) ? 1 : 0;
          }
          fence_proxy_async();  // the stores, for the tensor cores (and the bulk copy)
          if constexpr (!C::kRopeInRegs) {
            // After the fence, which waits for this thread's copies in flight (issued before it, they cost 8%: V4 h_q
            // 64 b 64 / 128 / 148 51.8 / 102.4 / 145.1 against 47.4 / 96.7 / 134.1 us, H200, 2026-12-01). The
            // consumers' own fence after the full barrier covers them.
            if (half == 1) copy_rope(tile, tile_no, sm.bar_full(t, half));
          }
          if constexpr (C::kCluster) {
            // This CTA's rows of each atom are one contiguous block (rows 32 rank .. +32): once every producer thread
            // stored its part, one thread sends the blocks to the peer's tile by bulk copies, completing transactions
            // on the peer's full barrier. (16-byte st.async stores from every thread instead measured 27% slower at
            // b 128: their issue cost sat on the producer's path.)
            producer_sync(kBarProducerStored);
            if (ptid == 0) {
              // This CTA's rows of every atom of the half (RoPE included) to the peer's tile.
              constexpr int kBlockBytes = C::kAtomBytes / C::kClusterCtas;
              const uint32_t peer_full = sm.peer(sm.bar_full(t, half));
              for (int a = half == 0 ? 0 : C::kLeftAtoms; a < (half == 0 ? C::kLeftAtoms : C::kAtoms); ++a) {
                const uint32_t block = tile + a * C::kAtomBytes + rank * kBlockBytes;
                bulk_copy_to_peer(sm.peer(block), block, kBlockBytes, peer_full);
              }
              // ... and the valid flags and stores (release); the peer's rows come as transactions.
              mbar_arrive_expect_tx(sm.bar_full(t, half), half == 0 ? C::kPeerBytesLeft : C::kPeerBytesRight);
            } else {
              mbar_arrive(sm.bar_full(t, half));
            }
          } else {
            mbar_arrive(sm.bar_full(t, half));  // publishes the stores and valid flags (release)
          }
        }
#pragma unroll
        for (int r = 0; r < C::kRowsPerThread; ++r) {
          idx_cur[0][r] = idx_cur[1][r];
          idx_cur[1][r] = idx_next[0][r];
        }
      }
      iter += n_tiles;
    } else {
      for (int it = 0; it < n_iters; ++it) {
        if (it + 1 < n_iters) {  // next iteration's indices, in flight while we wait for free buffers
          load_indices(w.tile_begin + 2 * it + 2, idx_next[0]);
          load_indices(w.tile_begin + 2 * it + 3, idx_next[1]);
        }
        const int g_it = iter + it;
#pragma unroll
        for (int step = 0; step < 4; ++step) {  // A-left, B-right, A-right, B-left
          const int t = step & 1;
          const int half = step < 2 ? first_half(t) : 1 - first_half(t);
          const uint32_t tile = sm.tile(t);
          if constexpr (!C::kFp8) {
            if (g_it > 0) mbar_wait(sm.bar_empty(t, half), (g_it - 1) & 1);
            const __nv_bfloat16* kv = static_cast<const __nv_bfloat16*>(p.kv);
            const int a0 = half == 0 ? 0 : C::kLeftAtoms;
            const int a1 = half == 0 ? C::kLeftAtoms : C::kAtoms;
#pragma unroll
            for (int r = 0; r < C::kRowsPerThread; ++r) {
              const int row = r * C::kRowsPerPass + group;
              const int idx = idx_cur[t][r];
              const bool valid = idx >= 0 && static_cast<int64_t>(idx) < p.num_kv;
              const __nv_bfloat16* src = kv + (valid ? static_cast<int64_t>(idx) * p.kv_row_stride : 0) + sub * 8;
#pragma unroll
              for (int a = a0; a < a1; ++a)
                cp_async_16(tile + a * C::kAtomBytes + chunk_offset(row, sub), src + a * C::kAtomCols, valid ? 16 : 0);
              if (step < 2 && sub == 0) s_valid[t * C::kTile + row] = valid ? 1 : 0;
            }
            // Publishes the valid flags (release).
            if (fill_has_ordinary<C>(t, half)) mbar_arrive(sm.bar_full(t, half));
            cp_async_arrive(sm.bar_full(t, half));
          } else {
            // FP8 (V3.2 rows, one CTA, one raw buffer): this step's raw bytes, loaded before the wait for the buffer.
            static_assert(!C::kFp8V4, "V4 pages run tile by tile");
            load_fp8(idx_cur[t], half, false, raw[0], scale[0], rope[0]);
            if (g_it > 0) mbar_wait(sm.bar_empty(t, half), (g_it - 1) & 1);
            store_rows(tile, half, raw[0], scale[0], rope[0]);
#pragma unroll
            for (int r = 0; r < C::kRowsPerThread; ++r) {
              const int row = r * C::kRowsPerPass + group;
              const int idx = idx_cur[t][r];
              const bool valid = row_valid(idx, false);
              if (half == 1) {  // RoPE dims (bf16 in the cache): the last atom, every row
                const uint8_t* rope = cache + (valid ? fp8_row_offset(args, idx) : 0) + C::kFp8RopeOffset + 16 * sub;
                cp_async_16(tile + (C::kAtoms - 1) * C::kAtomBytes + chunk_offset(row, sub), rope, valid ? 16 : 0);
              }
              if (step < 2 && sub == 0) s_valid[t * C::kTile + row] = valid ? 1 : 0;
            }
            fence_proxy_async();  // the dequantized stores, for the tensor cores
            mbar_arrive(sm.bar_full(t, half));  // ... and the valid flags (release)
            if (fill_has_cp_async<C>(t, half)) cp_async_arrive(sm.bar_full(t, half));
          }
        }
        if constexpr (C::kPAInRope) {  // tile A's RoPE copies of this thread have landed (see bar_rope_landed)
          cp_async_wait_all();
          mbar_arrive(sm.bar_rope_landed());
        }
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int r = 0; r < C::kRowsPerThread; ++r) idx_cur[t][r] = idx_next[t][r];
      }
      iter += n_iters;
    }
  }
  if constexpr (C::kCluster) {
    // The cluster's exit: the peer stores into this CTA's tiles (bulk copies, waited for by the consumers here)
    // and arrives on its empty barriers. Once both CTAs' consumers released the last fill of each buffer, the
    // peer has nothing more to do here, and its copies from this CTA's tiles have landed (it released them).
    // This wait replaces a cluster barrier at the exit, whose release had every thread wait for its global
    // stores (the partial rows) first.
    static_assert(C::kPerTile, "the cluster runs tile by tile");
    for (int t = 0; t < 2; ++t) {
      const int fills = (iter - t + 1) / 2;  // fills g = t, t + 2, ... < iter of buffer t
      if (fills <= 0) continue;
      const int last = t + 2 * (fills - 1);
      mbar_wait(sm.bar_empty(t, 0), (last >> 1) & 1);
      mbar_wait(sm.bar_empty(t, 1), (last >> 1) & 1);
    }
  }
  cp_async_wait_all();  // no copy may land after the CTA is gone
}

// S (64 x 64) = Q K_t^T over atoms [A0, A1) of the row (scale_d 0 on the first step when FIRST).
template <class C, int A0, int A1, bool FIRST>
__device__ __forceinline__ void gemm_qk(float (&s)[32], uint64_t desc_q, uint64_t desc_k) {
#pragma unroll
  for (int a = A0; a < A1; ++a)
#pragma unroll
    for (int ks = 0; ks < C::kAtomCols / 16; ++ks) {
      const uint64_t off = static_cast<uint64_t>((a * C::kAtomBytes + ks * 32) >> 4);
      wgmma_m64n64k16_ss(s, desc_q + off, desc_k + off, (FIRST && a == A0 && ks == 0) ? 0 : 1);
    }
}

// ---------------------------------------------------------------------------------------------------
// Consumer pieces shared by both schedules (two tiles per iteration, and tile by tile). A thread holds rows
// r0 = 16 warp + g and r1 = r0 + 8 of the 64, columns 2t, 2t + 1 of each 8-column block (t = lane & 3).

// Masks S (slots whose valid flag is 0 become -inf; `flags` = the tile's flags + 2t), scales it to base 2 and
// returns the two rows' maxima over the tile (reduced over the four lanes of a row).
__device__ __forceinline__ void mask_scale_rowmax(float (&s)[32], const uint8_t* flags, float scale_log2, float& mx0,
                                                  float& mx1) {
  mx0 = -INFINITY;
  mx1 = -INFINITY;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t v = *reinterpret_cast<const uint16_t*>(flags + 8 * j);
    const bool v0 = (v & 0xffu) != 0, v1 = (v >> 8) != 0;
    s[4 * j + 0] = v0 ? s[4 * j + 0] * scale_log2 : -INFINITY;
    s[4 * j + 1] = v1 ? s[4 * j + 1] * scale_log2 : -INFINITY;
    s[4 * j + 2] = v0 ? s[4 * j + 2] * scale_log2 : -INFINITY;
    s[4 * j + 3] = v1 ? s[4 * j + 3] * scale_log2 : -INFINITY;
    mx0 = fmaxf(mx0, fmaxf(s[4 * j + 0], s[4 * j + 1]));
    mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
}

// P = exp2(S - mu) (bf16) as wgmma A fragments: k-step kk covers S columns 16 kk .. +16 (n8 blocks 2 kk,
// 2 kk + 1); adds this thread's part of each row's sum. KEEP: s keeps the f32 numerators (for scaled_p).
template <bool KEEP = false>
__device__ __forceinline__ void softmax_numerators(float (&s)[32], float mu0, float mu1, uint32_t (&pf)[16],
                                                   float& sum0, float& sum1) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    float e[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = fast_exp2(s[8 * kk + i] - ((i & 2) ? mu1 : mu0));
    if constexpr (KEEP) {
#pragma unroll
      for (int i = 0; i < 8; ++i) s[8 * kk + i] = e[i];
    }
    sum0 += e[0] + e[1] + e[4] + e[5];
    sum1 += e[2] + e[3] + e[6] + e[7];
    pf[4 * kk + 0] = pack_bf16x2(e[0], e[1]);  // row r0, columns 16 kk + 2t
    pf[4 * kk + 1] = pack_bf16x2(e[2], e[3]);  // row r1
    pf[4 * kk + 2] = pack_bf16x2(e[4], e[5]);  // row r0, columns 16 kk + 8 + 2t
    pf[4 * kk + 3] = pack_bf16x2(e[6], e[7]);  // row r1
  }
}

// The fragments of P = numerators (softmax_numerators<true>'s s) x b0 (row r0) or b1 (row r1), in pf's layout.
__device__ __forceinline__ void scaled_p(const float (&e)[32], float b0, float b1, uint32_t (&pf)[16]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float b = (j & 1) ? b1 : b0;
    pf[j] = pack_bf16x2(e[2 * j] * b, e[2 * j + 1] * b);
  }
}

// P to shared memory for the other consumer (K-major, 128-byte swizzle: chunk j of row r at j ^ (r & 7)).
__device__ __forceinline__ void store_p(uint32_t p_addr, const uint32_t (&pf)[16], int r0, int r1, int g, int t) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int kk = j >> 1, hi = j & 1;
    st_shared_u32(p_addr + r0 * 128 + ((j ^ g) << 4) + 4 * t, pf[4 * kk + 2 * hi]);
    st_shared_u32(p_addr + r1 * 128 + ((j ^ g) << 4) + 4 * t, pf[4 * kk + 2 * hi + 1]);
  }
}

// A consumer's start of work item `k_in_work` (its index among the CTA's items): waits for the item's Q and
// its published ItemInfo, and clears this thread's O accumulators.
template <class C>
__device__ __forceinline__ ItemInfo begin_item(const Smem<C>& sm, const ItemInfo* s_item, int k_in_work,
                                               float (&o)[128]) {
  mbar_wait(sm.bar_q_full(), k_in_work & 1);
  const ItemInfo w = s_item[k_in_work & 1];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  return w;
}

__device__ __forceinline__ void rescale_rows(float (&o)[128], float alpha0, float alpha1) {
  if (alpha0 != 1.f || alpha1 != 1.f) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j + 0] *= alpha0;
      o[4 * j + 1] *= alpha0;
      o[4 * j + 2] *= alpha1;
      o[4 * j + 3] *= alpha1;
    }
  }
}

// The sink term of rows r0 and r1 (heads first + r0, first + r1): attn_sink in base 2, or -inf without one (its
// exponential adds 0). Loaded once per CTA, at the start, so the epilogue does not wait for it.
struct RowSinks {
  float log2_r0 = -INFINITY, log2_r1 = -INFINITY;
};
__device__ __forceinline__ RowSinks load_row_sinks(const SparseAttentionParams& p, HeadRange heads, int r0, int r1) {
  constexpr float kLog2e = 1.4426950408889634f;
  RowSinks s;
  if (p.attn_sink != nullptr) {
    s.log2_r0 = __ldg(p.attn_sink + (heads.first + r0 < heads.end ? heads.first + r0 : heads.first)) * kLog2e;
    s.log2_r1 = __ldg(p.attn_sink + (heads.first + r1 < heads.end ? heads.first + r1 : heads.first)) * kLog2e;
  }
  return s;
}

// The item's result for this thread's rows of O columns W*256 .. +256: the split's partial row (O / l in f32,
// lse; -inf when empty), or out = O / (l + sink term) with lse and max_logits. `row_sum(h)`: the full row sum
// of row r0 (h 0) or r1 (h 1). `stage` (not 0): 8 KiB of shared memory no one else uses now, through which the
// warp writes its 16 rows of out as whole 512-byte rows (16-byte stores; written directly, a thread's 4-byte
// pieces leave every store half a sector).
template <class C, int W, class RowSum>
__device__ __forceinline__ void write_item_rows(const SparseAttentionParams& p, const ItemInfo& w, HeadRange heads,
                                                int r0, int r1, int t, const float (&o)[128], float m0, float m1,
                                                RowSum row_sum, RowSinks sinks, uint32_t stage) {
  constexpr float kLn2 = 0.6931471805599453f;
  if (w.accum_row >= 0) {
    if (w.write_partial == 0) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = h == 0 ? r0 : r1;
      const int head = heads.first + row;
      if (head >= heads.end) continue;
      const float m = h == 0 ? m0 : m1;
      const float l = row_sum(h);
      const bool empty = m == -INFINITY;
      const float inv = empty ? 0.f : 1.f / l;
      float* dst = p.o_accum + (w.accum_row * p.h_q + head) * C::kDv + W * C::kHalfDv + 2 * t;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
      if (W == 0 && t == 0) p.lse_accum[w.accum_row * p.h_q + head] = empty ? -INFINITY : logf(l) + m * kLn2;
    }
    return;
  }
  __nv_bfloat16* out = static_cast<__nv_bfloat16*>(p.out) +
                       p.token_offset(w.token, p.out_stride_token, p.out_stride_request) + W * C::kHalfDv;
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = h == 0 ? r0 : r1;
    const int head = heads.first + row;
    const float m = h == 0 ? m0 : m1;
    const float l = row_sum(h);
    const bool empty = m == -INFINITY;
    const float denom = l + fast_exp2((h == 0 ? sinks.log2_r0 : sinks.log2_r1) - m);
    inv[h] = empty ? 0.f : 1.f / denom;
    if (W == 0 && t == 0 && head < heads.end) {
      if (p.lse != nullptr) {
        const int64_t lse_token = p.token_offset(w.token, p.lse_stride_token, p.lse_stride_request);
        p.lse[lse_token + head * p.lse_stride_head] = empty ? INFINITY : logf(l) + m * kLn2;
      }
      if (p.max_logits != nullptr)
        p.max_logits[w.token * p.max_logits_stride_token + head * p.max_logits_stride_head] = empty ? -INFINITY : m * kLn2;
    }
  }
  if (stage != 0) {
    // Row i of the warp's 16 (r0 = 16 warp + g is row g, r1 row g + 8): 512 bytes, 16-byte chunk j at j ^ (i & 7),
    // so the quads' 4-byte stores and the row reads below are free of bank conflicts.
    const int g = r0 & 7, lane = 4 * g + t;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < 32; ++j)
        st_shared_u32(stage + (g + 8 * h) * 512 + ((j ^ g) << 4) + 4 * t,
                      pack_bf16x2(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]));
    __syncwarp();
    const int first_row = r0 - g;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int head = heads.first + first_row + i;
      if (head < heads.end)
        *reinterpret_cast<uint4*>(out + static_cast<int64_t>(head) * p.out_stride_head + 8 * lane) =
            ld_shared_v4(stage + i * 512 + ((lane ^ (i & 7)) << 4));
    }
    __syncwarp();
    return;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = heads.first + (h == 0 ? r0 : r1);
    if (head >= heads.end) continue;
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + static_cast<int64_t>(head) * p.out_stride_head + 2 * t);
#pragma unroll
    for (int j = 0; j < 32; ++j) dst[4 * j] = pack_bf16x2(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
  }
}

// Where warp `warp` of consumer W stages its rows of the output (write_item_rows), or 0: Q's buffer, 8 KiB per warp,
// in the unsplit grid (one work item: no Q is loaded after it, and every S GEMM, Q's only reader, is done when the
// consumers meet before the epilogue). Out's rows allow the 16-byte stores: sparse_attention_sm90_handles takes only
// a 16-byte aligned out with strides in multiples of 8 elements. (Split work writes directly: both paths in one
// instantiation spill the consumers' registers.)
template <class C, bool SPLIT, int W>
__device__ __forceinline__ uint32_t epilogue_stage(const Smem<C>& sm, int warp) {
  static_assert(2 * 4 * 8192 <= C::kQBytes, "the staged output fits Q's buffer");
  if (SPLIT) return 0;
  return sm.q() + (W * 4 + warp) * 8192;
}

// ---------------------------------------------------------------------------------------------------
// Consumer warpgroup W (two tiles per iteration): S of tile W, its softmax, O columns W*256 .. +256. The two
// consumers run staggered (FlashMLA's prefill schedule): consumer 0 takes the running max over tile A alone,
// publishes it and starts P_A V_A-left at once; consumer 1 adds tile B's max and publishes the iteration's max,
// with which consumer 0 rescales P_A (stored for consumer 1), its O and its row sums. So each softmax runs while
// the other consumer's GEMMs keep the tensor cores busy, and consumer 0 issues the next S_A while its
// P_B V_B-left runs. (Both softmaxes after one shared max exchange left the tensor cores idle meanwhile.)
template <class C, bool SPLIT, int W>
__device__ __forceinline__ void consumer(const KernelArgs& args, const Smem<C>& sm, const uint8_t* s_valid,
                                         float* s_max, float* s_sum, const ItemInfo* s_item,
                                         const WorkList<SPLIT, C::kFp8V4>& work, HeadRange heads) {
  constexpr int kOther = 1 - W;
  const SparseAttentionParams& p = args.p;
  const int lane = threadIdx.x & 31, warp_in_wg = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, t = lane & 3;
  const int r0 = warp_in_wg * 16 + g, r1 = r0 + 8;  // this thread's two rows (heads) of the 64

  const uint64_t desc_q = make_desc(sm.q(), 16, 1024);
  const uint64_t desc_k = make_desc(sm.tile(W), 16, 1024);
  const uint64_t desc_v_own = make_desc(sm.tile(W) + W * C::kLeftAtoms * C::kAtomBytes, C::kAtomBytes, 1024);
  const uint64_t desc_v_other = make_desc(sm.tile(kOther) + W * C::kLeftAtoms * C::kAtomBytes, C::kAtomBytes, 1024);
  const uint64_t desc_p_other = make_desc(sm.p_of(kOther), 16, 1024);
  const uint32_t p_own = sm.p_of(W);
  // A half-tile this consumer is done with. GENERIC: this warpgroup also read or wrote some of it with
  // ordinary loads and stores (the valid flags, P_A); then every thread arrives itself, so each of those
  // accesses is ordered before the producer's next writes by its own thread's arrival. That is the order
  // racecheck follows: one arrival per warp after __syncwarp, or after a warpgroup bar.sync, was reported
  // as a race. Otherwise (only the tensor cores read it) one lane per warp arrives: every thread arriving on
  // every release measured 20% slower in prefill. In a cluster one lane per warp also arrives on the peer's
  // barrier (the peer's producer writes its rows into this CTA's tiles, read here only by wgmma).
  const RowSinks sinks = load_row_sinks(p, heads, r0, r1);
  auto release = [&](int tile, int half, auto generic) {
    if (decltype(generic)::value || lane == 0) mbar_arrive(sm.bar_empty(tile, half));
    if constexpr (C::kCluster) {
      __syncwarp();
      if (lane == 0) mbar_arrive_remote(sm.peer(sm.bar_empty(tile, half)));
    }
  };
  // S = Q K_W^T over the tile's early half, then its late half, each once it is full. Consumer 0 overlapping its
  // P_B V_B-left (OVERLAP): that GEMM group is waited for between the halves, and B-left released.
  auto gemm_s = [&](float (&s)[32], int phase, auto overlap) {
    mbar_wait(sm.bar_full(W, first_half(W)), phase);
    fence_proxy_async();
    wgmma_fence();
    if constexpr (W == 0) gemm_qk<C, 0, C::kLeftAtoms, true>(s, desc_q, desc_k);
    else gemm_qk<C, C::kLeftAtoms, C::kAtoms, true>(s, desc_q, desc_k);
    if constexpr (decltype(overlap)::value) {
      wgmma_commit();
      wgmma_wait<1>();
      release(kOther, 1 - first_half(kOther), std::false_type{});  // B-left: P_B V_B-left is done
    }
    mbar_wait(sm.bar_full(W, 1 - first_half(W)), phase);
    fence_proxy_async();
    wgmma_fence();
    if constexpr (W == 0) gemm_qk<C, C::kLeftAtoms, C::kAtoms, false>(s, desc_q, desc_k);
    else gemm_qk<C, 0, C::kLeftAtoms, false>(s, desc_q, desc_k);
    wgmma_commit();
    wgmma_wait<0>();
  };
  // Each consumer publishes its rows' running max in its own slot of s_max ([2][64]): consumer 0's over tile A
  // (kBarMaxA), read by consumer 1; consumer 1's, the iteration's (kBarMaxB), read by consumer 0. (One slot the
  // two wrote in turn was ordered by the barrier chain, but racecheck reported the reuse as a hazard.)
  float* const max_own = s_max + W * C::kHeads;
  const float* const max_other = s_max + kOther * C::kHeads;
  auto publish_max = [&](float n0, float n1, int bar) {
    __syncwarp();  // the warp meets before its t == 0 lanes publish (the one-slot layout needed it; kept as verified)
    if (t == 0) {
      max_own[r0] = n0;
      max_own[r1] = n1;
    }
    named_arrive(bar);
  };

  // O_W += P_other V_other (P from shared memory), uncommitted.
  auto gemm_pv_other = [&](float (&o)[128]) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_m64n256k16_ss(o, desc_p_other + static_cast<uint64_t>((kk * 32) >> 4),
                          desc_v_other + static_cast<uint64_t>((kk * 16 * 128) >> 4));
  };

  int iter = 0;
  for (int k = work.first; k <= work.last; ++k) {
    float o[128];
    const ItemInfo w = begin_item(sm, s_item, k - work.first, o);
    const int n_iters = w.n_iters;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    float s[32];
    if constexpr (W == 0)
      if (n_iters > 0) gemm_s(s, iter & 1, std::false_type{});

    for (int it = 0; it < n_iters; ++it) {
      const int phase = (iter + it) & 1;
      // ---- Phase QK: S = Q K_W^T (consumer 0's was issued in the previous iteration).
      if constexpr (W == 1) gemm_s(s, phase, std::false_type{});
      fence_regs(s);

      // ---- Phase softmax: mask, scale to base 2; consumer 0 on its own, consumer 1 after consumer 0's max.
      float mx0, mx1;
      mask_scale_rowmax(s, s_valid + W * C::kTile + 2 * t, args.scale_log2, mx0, mx1);
      if constexpr (W == 1) {
        named_sync(kBarMaxA);
        mx0 = fmaxf(mx0, max_other[r0]);
        mx1 = fmaxf(mx1, max_other[r1]);
      }
      const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
      const float mu0 = n0 == -INFINITY ? 0.f : n0;  // keeps (-inf) - (-inf) out
      const float mu1 = n1 == -INFINITY ? 0.f : n1;
      const float alpha0 = fast_exp2(m0 - mu0), alpha1 = fast_exp2(m1 - mu1);  // m = -inf -> 0
      m0 = n0;
      m1 = n1;
      uint32_t pf[16];
      float sum0 = 0.f, sum1 = 0.f;
      softmax_numerators<W == 0>(s, mu0, mu1, pf, sum0, sum1);
      l0 = l0 * alpha0 + sum0;
      l1 = l1 * alpha1 + sum1;
      rescale_rows(o, alpha0, alpha1);
      publish_max(n0, n1, W == 0 ? kBarMaxA : kBarMaxB);

      // ---- Phase PV: O_W += P_W V_W (P from registers), then O_W += P_other V_other (P from smem).
      fence_regs(o);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint32_t a[4] = {pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3]};
        wgmma_m64n256k16_rs(o, a, desc_v_own + static_cast<uint64_t>((kk * 16 * 128) >> 4));
      }
      wgmma_commit();
      if constexpr (W == 0) {
        wgmma_wait<0>();  // P_A's registers are rewritten below
        fence_regs(o);
        release(W, first_half(W), std::true_type{});  // A-left: its last reader is done
        // The iteration's max: P_A, O and the row sums rescaled to it (beta 1 for a row with no valid slot yet,
        // whose terms are all 0).
        named_sync(kBarMaxB);
        const float b0 = n0 == -INFINITY ? 1.f : fast_exp2(n0 - max_other[r0]);
        const float b1 = n1 == -INFINITY ? 1.f : fast_exp2(n1 - max_other[r1]);
        m0 = max_other[r0];
        m1 = max_other[r1];
        scaled_p(s, b0, b1, pf);
        // P_A overwrites tile A's RoPE atom: its copies are confirmed landed (bar_rope_landed; complete by now
        // in practice, S_A has read them).
        if constexpr (C::kPAInRope) mbar_wait(sm.bar_rope_landed(), phase);
        store_p(p_own, pf, r0, r1, g, t);
        fence_proxy_async();
        named_arrive(kBarPReadyA);
        // P_A in tile A's RoPE block: the producer's next RoPE copy there also waits for these stores.
        if constexpr (C::kPAInRope) release(0, 1, std::true_type{});
        rescale_rows(o, b0, b1);
        l0 *= b0;
        l1 *= b1;
        named_sync(kBarPReadyB);
        fence_regs(o);
        wgmma_fence();
        gemm_pv_other(o);
        wgmma_commit();
        if (it + 1 < n_iters) {
          gemm_s(s, phase ^ 1, std::true_type{});  // the next S_A, overlapping P_B V_B-left
        } else {
          wgmma_wait<0>();
          release(kOther, 1 - first_half(kOther), std::false_type{});  // B-left
        }
        fence_regs(o);
      } else {
        store_p(p_own, pf, r0, r1, g, t);
        named_sync(kBarPReadyA);
        wgmma_fence();
        gemm_pv_other(o);
        wgmma_commit();
        fence_proxy_async();
        named_arrive(kBarPReadyB);
        wgmma_wait<1>();
        release(W, first_half(W), std::true_type{});  // B-right: its last reader is done
        wgmma_wait<0>();
        fence_regs(o);
        release(kOther, 1 - first_half(kOther), std::false_type{});  // A-right
      }
    }
    iter += n_iters;
    // Q may be reloaded. (Arriving right after the last S GEMM would let the reload overlap the last PV,
    // but a conditional arrival there makes ptxas serialize the wgmma instructions.)
    mbar_arrive(sm.bar_q_empty());

    // ---- Phase epilogue: combine the two consumers' row sums (buffer by item parity: the other consumer
    // may still read the last item's); lse, max_logits; O / (l + sink term), or the partial row.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float* sums = s_sum + ((k - work.first) & 1) * 2 * C::kHeads;
    if (t == 0) {
      sums[W * C::kHeads + r0] = l0;
      sums[W * C::kHeads + r1] = l1;
    }
    named_sync(kBarMax);
    write_item_rows<C, W>(
        p, w, heads, r0, r1, t, o, m0, m1,
        [&](int h) {
          const int row = h == 0 ? r0 : r1;
          return sums[row] + sums[C::kHeads + row];
        },
        sinks, epilogue_stage<C, SPLIT, W>(sm, warp_in_wg));
  }
}

// Tile by tile (Config::kPerTile, the FP8 cluster): consumer 0 (W 0) computes S of every tile over all of
// d_qk, the softmax and O columns 0..255 with P from registers; it publishes P (shared memory) and each row's
// rescale factor, and consumer 1 (W 1) adds P V over O columns 256..511. No row-max exchange is needed: one
// warpgroup owns whole rows of S. P has one buffer (P_B's), free again when consumer 1's P V is done: it
// must not live in a tile's RoPE atom here, because this CTA's rows of that atom are also the source of a
// bulk copy to the peer whose reads nothing here waits for.
template <class C, bool SPLIT, int W>
__device__ __forceinline__ void consumer_per_tile(const KernelArgs& args, const Smem<C>& sm, const uint8_t* s_valid,
                                                  float* s_alpha, float* s_sum, const ItemInfo* s_item,
                                                  const WorkList<SPLIT, C::kFp8V4>& work, HeadRange heads) {
  const SparseAttentionParams& p = args.p;
  const int lane = threadIdx.x & 31, warp_in_wg = (threadIdx.x >> 5) & 3;
  const int g = lane >> 2, quad = lane & 3;
  const int r0 = warp_in_wg * 16 + g, r1 = r0 + 8;  // this thread's two rows (heads) of the 64

  constexpr uint64_t kTileStep = static_cast<uint64_t>(C::kKBytes >> 4);  // descriptor of tile 1 - tile 0
  const uint64_t desc_q = make_desc(sm.q(), 16, 1024);
  const uint64_t desc_k0 = make_desc(sm.tile(0), 16, 1024);
  const uint64_t desc_v0 = make_desc(sm.tile(0) + W * C::kLeftAtoms * C::kAtomBytes, C::kAtomBytes, 1024);
  // A half-tile this warpgroup is done with: every thread arrives (its ordinary reads of the valid flags are
  // ordered by its own arrival) and one lane per warp on the peer's barrier (the peer's producer writes its rows
  // into this CTA's tiles, read here only by wgmma).
  auto release = [&](int buf, int half) {
    mbar_arrive(sm.bar_empty(buf, half));
    if constexpr (C::kCluster) {
      __syncwarp();
      if (lane == 0) mbar_arrive_remote(sm.peer(sm.bar_empty(buf, half)));
    }
  };
  const uint32_t p_smem = sm.p_of(1);
  const RowSinks sinks = load_row_sinks(p, heads, r0, r1);

  int tiles_before = 0;
  for (int k = work.first; k <= work.last; ++k) {
    float o[128];
    const ItemInfo w = begin_item(sm, s_item, k - work.first, o);
    const int n_tiles = w.n_iters;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

    for (int jj = 0; jj < n_tiles; ++jj) {
      const int gt = tiles_before + jj, buf = gt & 1, phase = (gt >> 1) & 1;
      const uint64_t desc_v = desc_v0 + buf * kTileStep;
      float alpha0, alpha1;
      uint32_t pf[16];
      if constexpr (W == 0) {
        // ---- Phase QK: S = Q K^T over the left half, then the right half.
        float s[32];
        const uint64_t desc_k = desc_k0 + buf * kTileStep;
        mbar_wait(sm.bar_full(buf, 0), phase);
        fence_proxy_async();
        wgmma_fence();
        gemm_qk<C, 0, C::kLeftAtoms, true>(s, desc_q, desc_k);
        mbar_wait(sm.bar_full(buf, 1), phase);
        fence_proxy_async();
        gemm_qk<C, C::kLeftAtoms, C::kAtoms, false>(s, desc_q, desc_k);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs(s);

        // ---- Phase softmax: mask, scale to base 2, row max over the four lanes of a row.
        float mx0, mx1;
        mask_scale_rowmax(s, s_valid + buf * C::kTile + 2 * quad, args.scale_log2, mx0, mx1);
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float mu0 = n0 == -INFINITY ? 0.f : n0;  // keeps (-inf) - (-inf) out
        const float mu1 = n1 == -INFINITY ? 0.f : n1;
        alpha0 = fast_exp2(m0 - mu0);  // m = -inf -> 0
        alpha1 = fast_exp2(m1 - mu1);
        m0 = n0;
        m1 = n1;
        float sum0 = 0.f, sum1 = 0.f;
        softmax_numerators(s, mu0, mu1, pf, sum0, sum1);
        l0 = l0 * alpha0 + sum0;
        l1 = l1 * alpha1 + sum1;
        // P (K-major, 128-byte swizzle: chunk j of row r at j ^ (r & 7)) and the rescale factors for consumer 1,
        // once consumer 1's P V of the previous tile is done with the buffer.
        if (gt > 0) named_sync(kBarPFree);
        store_p(p_smem, pf, r0, r1, g, quad);
        if (quad == 0) {
          s_alpha[buf * C::kHeads + r0] = alpha0;
          s_alpha[buf * C::kHeads + r1] = alpha1;
        }
        fence_proxy_async();
        named_arrive(buf == 0 ? kBarPReadyA : kBarPReadyB);
      } else {
        named_sync(buf == 0 ? kBarPReadyA : kBarPReadyB);
        // Its own acquire of the right half (V 256..511, written partly by the peer's bulk copies), not only
        // through consumer 0's.
        mbar_wait(sm.bar_full(buf, 1), phase);
        fence_proxy_async();
        alpha0 = s_alpha[buf * C::kHeads + r0];
        alpha1 = s_alpha[buf * C::kHeads + r1];
      }
      rescale_rows(o, alpha0, alpha1);

      // ---- Phase PV: O_W += P V_W (consumer 0: P from registers; consumer 1: from shared memory).
      fence_regs(o);
      wgmma_fence();
      if constexpr (W == 0) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const uint32_t a[4] = {pf[4 * kk], pf[4 * kk + 1], pf[4 * kk + 2], pf[4 * kk + 3]};
          wgmma_m64n256k16_rs(o, a, desc_v + static_cast<uint64_t>((kk * 16 * 128) >> 4));
        }
      } else {
        const uint64_t desc_p = make_desc(p_smem, 16, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          wgmma_m64n256k16_ss(o, desc_p + static_cast<uint64_t>((kk * 32) >> 4),
                              desc_v + static_cast<uint64_t>((kk * 16 * 128) >> 4));
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
      if constexpr (W == 1) named_arrive(kBarPFree);
      release(buf, W);  // consumer 0: the left half (V 0..255); consumer 1: the right half
      if constexpr (W == 0) release(buf, 1);  // S read it
    }
    tiles_before += n_tiles;
    if constexpr (W == 0) mbar_arrive(sm.bar_q_empty());  // Q may be reloaded

    // ---- Phase epilogue: consumer 0 publishes each row's sum and max (buffer by item parity: consumer 1 may
    // still read the last item's); lse, max_logits; O / (l + sink term), or the partial row.
    float* sums = s_sum + ((k - work.first) & 1) * 2 * C::kHeads;  // [0][row]: l, [1][row]: m
    if constexpr (W == 0) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
      l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
      l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
      l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
      if (quad == 0) {
        sums[r0] = l0;
        sums[r1] = l1;
        sums[C::kHeads + r0] = m0;
        sums[C::kHeads + r1] = m1;
      }
    }
    named_sync(kBarMax);
    if constexpr (W == 1) {
      l0 = sums[r0];
      l1 = sums[r1];
      m0 = sums[C::kHeads + r0];
      m1 = sums[C::kHeads + r1];
    }
    write_item_rows<C, W>(p, w, heads, r0, r1, quad, o, m0, m1, [l0, l1](int h) { return h == 0 ? l0 : l1; }, sinks,
                          epilogue_stage<C, SPLIT, W>(sm, warp_in_wg));
  }
  if constexpr (W == 0) {
    if (tiles_before > 0) named_sync(kBarPFree);  // consumer 1's arrival after the last tile
  }
}

template <class C, bool SPLIT>
__global__ void __launch_bounds__(C::kThreads, 1) sparse_attention_wgmma_kernel(const __grid_constant__ KernelArgs args) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t aligned = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (aligned - raw);
  Smem<C> sm{aligned};
  if constexpr (C::kCluster) {
    sm.rank = cluster_rank();
    sm.peer_base = map_to_rank(aligned, sm.rank ^ 1u);
  }
  uint8_t* s_valid = smem + C::kOffValid;
  float* s_max = reinterpret_cast<float*>(smem + C::kOffMax);
  float* s_sum = reinterpret_cast<float*>(smem + C::kOffSum);
  ItemInfo* s_item = reinterpret_cast<ItemInfo*>(smem + C::kOffItem);

  // blockIdx.x = outer * groups + head group: the head groups of one token are adjacent, so they gather
  // the same KV rows through L2 at about the same time.
  const int first_head = static_cast<int>(blockIdx.x % args.groups) * args.group_heads;
  const HeadRange heads{first_head, min(first_head + args.group_heads, args.p.h_q)};
  int64_t outer = blockIdx.x / args.groups;
  if constexpr (!SPLIT && C::kFp8) {
    // Q's buffer holds the requests' tile counts; its first load comes after the barrier initialisation below.
    if (args.longest_first)
      outer = longest_first_token<C>(args.p, outer, reinterpret_cast<int32_t*>(smem + C::kOffQ));
  }
  const WorkList<SPLIT, C::kFp8V4> work(args.p, outer);

  if (threadIdx.x == 0) {
    mbar_init(sm.bar_q_full(), C::kProducerThreads + 1);  // cp.async arrivals + the item's publisher
    mbar_init(sm.bar_q_empty(), C::kPerTile ? C::kConsumerThreads / 2 : C::kConsumerThreads);  // Q's readers
    if constexpr (C::kPAInRope) mbar_init(sm.bar_rope_landed(), C::kProducerThreads);
    for (int t = 0; t < 2; ++t)
      for (int half = 0; half < 2; ++half) {
        // Arrivals per fill, from every producer thread: a cp.async one (bf16: all copies; FP8: the RoPE
        // dims) and an ordinary one (valid flags on the early half, FP8 stores).
        mbar_init(sm.bar_full(t, half),
                  ((fill_has_cp_async<C>(t, half) ? 1 : 0) + (fill_has_ordinary<C>(t, half) ? 1 : 0)) *
                      C::kProducerThreads);
        const bool pa_writer = C::kPAInRope && t == 0 && half == 1;
        // Releases: the early half by its own consumer, every thread (GENERIC: it read the valid flags); the
        // late half by the other consumer, one lane per warp, and tile A's also by consumer 0, every thread
        // (P_A). In a cluster, each releasing consumer of the peer adds one arrival per warp.
        const int local = half == first_half(t) ? C::kConsumerThreads / 2 : (pa_writer ? C::kConsumerThreads / 2 + 4 : 4);
        if constexpr (C::kPerTile)  // left: consumer 0; right: both (every thread here, a lane per warp there)
          mbar_init(sm.bar_empty(t, half), (half == 0 ? C::kConsumerThreads / 2 + 4 * (C::kClusterCtas - 1)
                                                      : C::kConsumerThreads + 8 * (C::kClusterCtas - 1)));
        else
          mbar_init(sm.bar_empty(t, half), local + (pa_writer ? 8 : 4) * (C::kClusterCtas - 1));
      }
  }
  if constexpr (C::kCluster) {
    fence_mbarrier_init();
    cluster_sync_relaxed();  // the peer's barriers exist before anything arrives on them
  } else {
    __syncthreads();
  }
  launch_dependents();  // the combine kernel (split-KV) may be scheduled; it waits for this grid to finish

  const int wg = threadIdx.x / 128;
  if (wg == 2) {
    reg_dealloc<C::kProducerRegs>();
    producer<C, SPLIT>(args, sm, s_valid, s_item, work, heads);
  } else if constexpr (C::kPerTile) {
    if (wg == 0) {
      reg_alloc<C::kConsumerRegs>();
      consumer_per_tile<C, SPLIT, 0>(args, sm, s_valid, s_max, s_sum, s_item, work, heads);
    } else {
      reg_dealloc<C::kConsumer1Regs>();
      consumer_per_tile<C, SPLIT, 1>(args, sm, s_valid, s_max, s_sum, s_item, work, heads);
    }
  } else {
    reg_alloc<C::kConsumerRegs>();
    if (wg == 0) consumer<C, SPLIT, 0>(args, sm, s_valid, s_max, s_sum, s_item, work, heads);
    else consumer<C, SPLIT, 1>(args, sm, s_valid, s_max, s_sum, s_item, work, heads);
  }
  // Neither CTA of a cluster leaves while the other may still store into its tiles or arrive on its barriers:
  // the producer's last waits (producer()) see to that.
#else
  __trap();  // built for an architecture without wgmma; the launcher never gets here
#endif
}

// ---------------------------------------------------------------------------------------------------
// Host side.
inline bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

// The launch configuration of `blocks` CTAs of instantiation C on `stream`: its threads and shared memory, and
// its cluster shape in `cluster` (the configuration points to it; attached only for cluster instantiations).
template <class C>
cudaLaunchConfig_t launch_config(unsigned blocks, cudaStream_t stream, cudaLaunchAttribute& cluster) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(C::kThreads);
  config.dynamicSmemBytes = C::kSmemBytes;
  config.stream = stream;
  cluster = cudaLaunchAttribute{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = C::kClusterCtas;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = C::kCluster ? 1 : 0;
  return config;
}

// CTAs of instantiation <C, SPLIT> resident at once on `device` (whole clusters; 0 when the device has no code
// for it or the runtime cannot tell). Queried once per (instantiation, device).
template <class C, bool SPLIT>
int64_t resident_ctas(int device) {
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  static int64_t ctas[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) return 0;
  if (!sm90a_kernel_ready<sparse_attention_wgmma_kernel<C, SPLIT>>(device, C::kSmemBytes)) return 0;
  std::call_once(once[device], [device] {
    cudaLaunchAttribute cluster;
    cudaLaunchConfig_t config = launch_config<C>(C::kClusterCtas * 64, nullptr, cluster);
    config.numAttrs = 1;  // the occupancy query counts clusters, of one CTA where C has none
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, sparse_attention_wgmma_kernel<C, SPLIT>, &config) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    ctas[device] = static_cast<int64_t>(clusters) * C::kClusterCtas;
  });
  return ctas[device];
}

// Launches one instantiation; false (nothing launched) when the device has no code for it.
// `group_heads`: heads per CTA (C::kHeads, or fewer: the CTA's other rows compute on zero Q).
template <class C, bool SPLIT>
bool launch(const SparseAttentionParams& p, cudaStream_t stream, int group_heads = C::kHeads) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (!sm90a_kernel_ready<sparse_attention_wgmma_kernel<C, SPLIT>>(device, C::kSmemBytes)) return false;
  if (p.num_tokens == 0) return true;
  KernelArgs args;
  args.p = p;
  args.scale_log2 = p.sm_scale * 1.4426950408889634f;
  if (group_heads < 1 || group_heads > C::kHeads) return false;
  args.group_heads = group_heads;
  args.groups = (p.h_q + group_heads - 1) / group_heads;
  if (C::kFp8) {
    if (p.block_size < 1 || p.block_size > INT32_MAX) return false;
    args.page = mla::FastDivmod(static_cast<uint32_t>(p.block_size));
  }
  if (C::kFp8V4) {  // the extra pool: its own page size; a tile never straddles the two pools
    if (p.extra_block_size < 1 || p.extra_block_size > INT32_MAX || p.main_topk < 0 || p.main_topk > p.topk ||
        p.main_topk % C::kTile != 0 || (p.main_topk < p.topk && (p.extra_kv == nullptr || p.extra_indices == nullptr)))
      return false;
    args.extra_page = mla::FastDivmod(static_cast<uint32_t>(p.extra_block_size));
  }
  // A cluster holds the head groups of one token, so it is used exactly when there are as many groups.
  if (C::kCluster && args.groups != C::kClusterCtas) return false;
  const int64_t outer = SPLIT ? static_cast<int64_t>(p.num_parts) * p.tokens_per_request : p.num_tokens;
  const int64_t blocks = outer * args.groups;
  if (blocks > INT_MAX) return false;
  if constexpr (!SPLIT && C::kFp8) {
    // Lengths that differ per request, and more CTAs than run at once: longest first (LPT), so no round of
    // CTAs ends long after the others.
    const bool lengths = p.topk_length != nullptr || (C::kFp8V4 && p.extra_topk_length != nullptr);
    args.longest_first = lengths && p.num_requests >= 1 && p.num_requests <= kLongestFirstMaxRequests &&
                         sched::blocks_of(p.topk) < kLongestFirstMaxTiles &&
                         p.num_tokens == static_cast<int64_t>(p.num_requests) * p.tokens_per_request &&
                         blocks > resident_ctas<C, SPLIT>(device);
  }
  cudaLaunchAttribute cluster;
  const cudaLaunchConfig_t config = launch_config<C>(static_cast<unsigned>(blocks), stream, cluster);
  return cudaLaunchKernelEx(&config, sparse_attention_wgmma_kernel<C, SPLIT>, args) == cudaSuccess &&
         cudaGetLastError() == cudaSuccess;
}

}  // namespace flashcpp::mla::kernels::wgmma
