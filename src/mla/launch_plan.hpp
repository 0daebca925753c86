// How a sparse attention problem runs, decided in one place: choose(params, kernel support) returns the whole
// launch plan (kernel, wgmma instantiation, heads per CTA, cluster shape, split or not) and launch(plan, params)
// runs exactly that plan. Dispatch (mla.cpp), the benchmarks' kernel labels and the tests all take their decisions
// from choose(), so none of them can plan for one kernel while another runs; the instantiation files only
// instantiate (sparse_attention_wgmma_bf16.cu / _f16.cu / _fp8.cu switch on the plan's variant). The decode planner's
// split rule shares split_decode_group_heads() with choose() (the plan sizes are a function of the config alone, so
// the planner cannot see a device).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::kernels {

/// What the MLA kernels can do on a device, all the choice depends on about it, read once per device (kernel_support
/// below; the device's own facts are core's query).
struct KernelSupport {
  int device_id = -1;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  bool sparse_supported = false;  ///< some kernel runs here (SM >= 8.0, code in the build, enough shared memory)
  bool hopper = false;            ///< the sm_90a kernels can run here (compute capability 9.0)
  /// Whole 2-CTA clusters of the unsplit V4 32-head instantiation (v4_pair at 32 heads) resident at once; 0 where
  /// none fits or the device is not Hopper (then unsplit V4 h_q 33..64 runs one CTA of 64 heads per token).
  int64_t v4_half_heads_cluster_slots = 0;
  /// The driver encodes tensor maps (the 16-bit pair cluster's whole-tile copies, multicast_tiles_fit); Hopper only.
  bool tensor_maps = false;
};

/// What the kernels can do on `device_id`, read once per device, thread-safe (mla.cpp; throws invalid_argument for an
/// unknown id).
const KernelSupport& kernel_support(int device_id);

/// The wgmma kernel's instantiations (sparse_attention_wgmma_config.hpp, Traits<D_QK, FP8, CLUSTER, RAW>).
enum class WgmmaVariant : int {
  none = 0,   ///< another kernel runs
  bf16_576,   ///< Traits<576, false>: sparse prefill with d_qk 576, and dense decode's split work
  bf16_512,   ///< Traits<512, false>: sparse prefill with d_qk 512 (unsplit only)
  f16_576,    ///< Traits<576, false, 1, 1, true>: dense decode over an fp16 cache (fp16 q and out), split or not
  bf16_576_pair,  ///< Traits<576, false, 2>: dense decode's split work over whole tiles (multicast_tiles_fit), h_q
                  ///< 65..128: a token's two head groups as a 2-CTA cluster, each whole tile multicast to both by TMA
  f16_576_pair,   ///< Traits<576, false, 2, 1, true>: the same over an fp16 cache
  v32_alone,  ///< Traits<576, true, 1, 2>: V3.2 FP8 decode, h_q <= 64, one CTA tile by tile
  v32_pair,   ///< Traits<576, true, 2, 2>: V3.2 FP8 decode, h_q 65..128, the two head groups as a 2-CTA cluster
  v4_alone,   ///< Traits<512, true, 1, 2>: V4 pages, one CTA of 64 heads tile by tile
  v4_pair,    ///< Traits<512, true, 2, 2>: V4 pages, a 2-CTA cluster (h_q 65..128, or 33..64 as two CTAs of 32 heads)
};

/// Whether dense decode's split work in `p` can run as the 16-bit pair cluster (bf16_576_pair / f16_576_pair): a
/// 16-bit cache of whole tiles (kv_dense_tiles) with d_qk 576, h_q 65..128 (two head groups of 64), a 16-byte aligned
/// cache whose row stride is a multiple of 16 bytes and whose rows an int32 counts, and a driver that encodes tensor
/// maps. The chooser's condition; the launcher refuses the rest (nothing launched).
bool multicast_tiles_fit(const SparseAttentionParams& p, bool tensor_maps);

/// The whole decision for one problem. For the wgmma kernel: its instantiation, the heads each CTA computes
/// (64, or 32 for V4's half-heads cluster; the CTA's other rows compute on zero Q and are never written) and the
/// CTAs per cluster. `split`: split-KV work items through the schedule (params.sched), then the combine.
struct LaunchPlan {
  SparseKernel kernel = SparseKernel::simple;
  WgmmaVariant variant = WgmmaVariant::none;
  bool split = false;
  int group_heads = 0;   ///< wgmma: heads per CTA
  int cluster_ctas = 1;  ///< wgmma: CTAs per cluster (1 or 2)
  friend bool operator==(const LaunchPlan&, const LaunchPlan&) = default;
};

/// The plan for `p` on a device whose kernel support is `f`: the simple kernel when forced (set_force_simple_kernel),
/// when the Hopper kernels cannot run there (!f.hopper) or do not handle the problem (sparse_attention_sm90_handles);
/// otherwise the wgmma kernel for bf16 and fp16 KV and, for the FP8 cache, fp8_decode_kernel() or else auto_fp8_kernel(p),
/// with the wgmma instantiation, head grouping and cluster each format and head count take (docs/MLA.md).
LaunchPlan choose(const SparseAttentionParams& p, const KernelSupport& f);

/// The name a benchmark line carries for a plan: the kernel, and for wgmma its variant and heads per CTA
/// ("wgmma_sm90/v4_pair/32h").
const char* plan_label(const LaunchPlan& plan);

/// Launches `plan` for `p` on the current device. False, launching nothing, when the device has no code for it
/// (a Hopper kernel on another GPU, or not enough shared memory) or the plan does not fit `p`; launch errors are
/// left in cudaGetLastError.
bool launch(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream);

/// Kernel entry points, called only through launch(): each runs the plan's variant and nothing else.
bool launch_sparse_attention_wgmma_bf16(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream);
bool launch_sparse_attention_wgmma_f16(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream);
bool launch_sparse_attention_wgmma_fp8(const LaunchPlan& plan, const SparseAttentionParams& p, cudaStream_t stream);
bool launch_sparse_attention_mma_fp8(const SparseAttentionParams& p, cudaStream_t stream);
bool launch_dense_decode_mma_fp8(const SparseAttentionParams& p, cudaStream_t stream);

/// Whether dense decode's split work in `p` fits the few-heads FP8 kernel (dense_decode_mma_fp8.cu): the V3.2 cache
/// as whole tiles (kv_dense_tiles, block size a multiple of 64, rows of exactly 656 bytes so that a tile is one bulk
/// copy, a 16-byte aligned cache and block stride), d_qk 576 / d_v 512, h_q 1..32, a schedule. The chooser's
/// condition for SparseKernel::dense_mma_sm90 (with dense_fp8_mma_kernel()), and the launcher's.
bool dense_fp8_mma_fit(const SparseAttentionParams& p);

/// Whether dense decode's FP8 split work with h_q <= 32 runs the few-heads kernel (SparseKernel::dense_mma_sm90,
/// where dense_fp8_mma_fit) instead of the gather kernels: on unless FLASHCPP_MLA_DENSE_KERNEL=gather; for
/// benchmarks and tests.
void set_dense_fp8_mma_kernel(bool on);
bool dense_fp8_mma_kernel();

/// Whole clusters of the unsplit v4_pair instantiation resident at once on `device` (0 without code for it there).
/// Queried by kernel_support once per device.
int64_t wgmma_v4_pair_cluster_slots(int device);

}  // namespace flashcpp::mla::kernels
