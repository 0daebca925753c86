// Sparse MLA attention for Hopper (sm_90a): a warp-specialized wgmma kernel with FlashMLA's semantics
// (sparse_attention_kernel.hpp, docs/MLA.md), for sparse prefill over bf16 KV and sparse decode over the
// DeepSeek V3.2 FP8 cache (split-KV or not), and dense decode's split work over 16-bit caches. Traits:
// sparse_attention_wgmma_config.hpp; instantiations: sparse_attention_wgmma_{bf16,f16,fp8}.cu. This file holds the kernel
// entry and the host launch; its pieces: sparse_attention_wgmma_device.cuh (PTX helpers, Smem, work lists),
// sparse_attention_wgmma_producer.cuh and sparse_attention_wgmma_consumer.cuh (with the epilogue).
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
//     tiles; V4 with h_q 33..64 also, as two groups of 32 heads: KernelParams::group_heads, the CTA's other
//     rows compute on zero Q and are never written): each CTA's producer dequantizes half of every tile's
//     rows into its own tile, and one thread bulk-copies those rows into the peer's tile (completing
//     transactions on the peer's full barrier); a half-tile is free only when the consumers of both CTAs
//     released it (they arrive on both CTAs' empty barriers).
//     The cluster runs tile by tile (Traits::kPerTile, consumer_per_tile): consumer 0 computes S of each whole
//     tile and the softmax, consumer 1 only its half of P V, and the producer holds two raw buffers (a tile's
//     loads are in flight a whole tile ahead). DeepSeek V4 pages run tile by tile alone too (64 heads per CTA;
//     the RoPE atom by cp.async). The rest of this list describes the two-tile iteration of the other
//     configurations (V3.2 alone, bf16 prefill).
//     (docs/MLA.md: measurements and the automatic choice between this kernel and the mma.sync kernel.)
//   * 16-bit dense decode over whole tiles with h_q 65..128 runs as a 2-CTA cluster too (Traits::kTmaRows, the
//     two-tile iteration): a tile of 64 consecutive cache rows within the token's length comes by TMA as 64 x 64
//     boxes, each CTA issuing half of a half tile's atoms multicast into both CTAs' tiles, so each tile crosses
//     the L2 once a token instead of once a head group; other tiles are gathered by each CTA alone. The empty
//     barriers count both CTAs' consumers, as in the FP8 cluster.
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
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <climits>
#include <cstdint>
#include <mutex>

#include "mla/decode_schedule.hpp"
#include "mla/fast_divmod.hpp"
#include "mla/sparse_attention_kernel.hpp"
#include "mla/sparse_attention_wgmma_config.hpp"
#include "mla/sparse_attention_wgmma_consumer.cuh"
#include "mla/sparse_attention_wgmma_device.cuh"
#include "mla/sparse_attention_wgmma_producer.cuh"
#include "mla/sm90_kernel_ready.hpp"
#include "mla/tensor_map.hpp"

namespace flashcpp::mla::kernels::wgmma {

template <class C, bool SPLIT>
__global__ void __launch_bounds__(C::kThreads, 1) sparse_attention_wgmma_kernel(const __grid_constant__ KernelParamsOf<C> args) {
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
  // A cluster's CTAs are its token's head groups (the launcher checks groups == kClusterCtas): shifts, not a division.
  const unsigned groups = C::kCluster ? static_cast<unsigned>(C::kClusterCtas) : static_cast<unsigned>(args.groups);
  const int first_head = static_cast<int>(blockIdx.x % groups) * args.group_heads;
  const HeadRange heads{first_head, min(first_head + args.group_heads, args.p.h_q)};
  int64_t outer = blockIdx.x / groups;
  if constexpr (!SPLIT && C::kFp8) {
    // Q's buffer holds the requests' tile counts; its first load comes after the barrier initialisation below.
    if (args.longest_first)
      outer = longest_first_token<C>(args.p, outer, reinterpret_cast<int32_t*>(smem + C::kOffQ));
  }
  const WorkListOf<C, SPLIT> work(args.p, outer);

  if (threadIdx.x == 0) {
    mbar_init(sm.bar_q_full(), C::kProducerThreads + 1);  // cp.async arrivals + the item's publisher
    mbar_init(sm.bar_q_empty(), C::kPerTile ? C::kConsumerThreads / 2 : C::kConsumerThreads);  // Q's readers
    if constexpr (C::kPAInRope) mbar_init(sm.bar_rope_landed(), C::kProducerThreads);
    if constexpr (!C::kPerTile)
      for (int w = 0; w < 2; ++w) mbar_init(sm.bar_max(w), C::kConsumerThreads / 2);
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
  KernelParamsOf<C> args;
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
  if constexpr (C::kTmaRows) {
    // The cache as rows for TMA: [num_kv, d_qk] 16-bit elements, a row's stride in bytes a multiple of 16.
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    const int64_t stride_bytes = p.kv_row_stride * 2;
    if (encode == nullptr || p.num_kv < 1 || p.num_kv > INT32_MAX || stride_bytes % 16 != 0 || !aligned16(p.kv))
      return false;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(C::kDqk), static_cast<cuuint64_t>(p.num_kv)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride_bytes)};
    const cuuint32_t box[2] = {C::kAtomCols, C::kTile}, elem_strides[2] = {1, 1};
    if (encode(&args.kv_rows, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(p.kv), dims, strides, box,
               elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return false;
  }
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
