// The attention plan core shared by batch prefill (prefill.cpp) and batch decode (decode.cpp; its tensor-core path
// runs FlashInfer's batch-prefill modules), defined in attention_plan.cpp, and the checks and packing helpers of
// FlashInfer's attention entry points.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "flashcpp/attention.hpp"
#include "ops/common.hpp"

namespace flashcpp::ops {

/// mask_mode codes (FlashInfer MaskMode).
inline constexpr int64_t kMaskNone = 0, kMaskCausal = 1;
/// Python passes reciprocals of rope_scale = 1 and rope_theta = 1e4; unused without in-kernel RoPE.
inline constexpr double kRopeRcpScale = 1.0, kRopeRcpTheta = 1e-4;

/// 16-bit q == kv == o with head dims FlashInfer has an fa3 (sm90) batch-prefill variant for.
bool fa3_variant_exists(const jit::AttentionSpec& v);
/// Resolves automatic/fa2/fa3 for a batch-prefill variant (validates an explicit fa3 request). The device's compute
/// capability comes from device_facts(); where it is unknown (no such device, or -1 in a test's pretended facts)
/// automatic picks fa2 and an explicit fa3 is not refused for the device.
bool choose_fa3(const Validator& v, AttentionBackend backend, const jit::AttentionSpec& var, bool ragged_hnd,
                int device_id);

/// What a batch attention plan was made for (prefill, or decode on either path); its runs compare against it.
struct AttentionPlanCore {
  ResolvedModule mod;  // fns: plan, ragged_run, paged_run
  std::string uri;
  bool fa3 = false;
  ffi::Array plan_info;
  Workspace ws;                  // as given by the caller
  TensorView float_ws, int_ws;   // as passed to FlashInfer (u8 views; int may exclude a reserved tail)
  Device device;
  KvStorage storage = KvStorage::paged;
  int64_t batch = 0, total_q = 0, kv_total = 0, max_page_index = -1;
  int64_t num_qo_heads = 0, num_kv_heads = 0, head_dim_qk = 0, head_dim_vo = 0, page_size = 1;
  jit::AttentionSpec variant;  ///< the module's variant (backend fa3 when `fa3`)
  KvLayout layout = KvLayout::nhd;
  int64_t mask_mode = kMaskNone;
  int64_t window_left = -1;
  double logits_soft_cap = 0, sm_scale = 1;
  bool enable_pdl = false, enable_cuda_graph = false;
};

/// Validates the workspace (device buffers on one CUDA device, pinned host buffer >= int buffer).
void check_workspace(const Validator& v, const Workspace& ws, int64_t reserved_int_bytes);

/// fa2's split-KV controls (batch prefill, and batch decode on the tensor-core path): fixed_split_size -1 (off) or
/// > 0; neither for fa3 (`fa3`: the plan's backend).
void check_split_options(const Validator& v, int64_t fixed_split_size, bool disable_split_kv, bool fa3);

struct AttentionPlanRequest {
  const TensorView* qo_indptr;        // host
  const TensorView* kv_indptr;        // host
  std::vector<int32_t> kv_len_arr;    // tokens per request
  int64_t kv_total = 0;               // kv_indptr[-1]
  int64_t max_page_index = -1;
  int64_t fixed_split_size = -1;
  bool disable_split_kv = false;
  bool causal = false;
  int64_t reserved_int_bytes = 0;     // tail of the int workspace kept out of FlashInfer's reach
};

/// Calls the module's plan (fa2: 19 args, fa3: 16) and fills `core.plan_info`. `core` carries the
/// module, workspace, geometry and flags already.
void run_attention_plan(AttentionPlanCore& core, const AttentionPlanRequest& req, const Validator& v, cudaStream_t stream);

/// Validated paged run (fa2 27 args / fa3 24) of a core; `qo_indptr` is a device int32 [batch + 1].
void run_paged_attention(const AttentionPlanCore& core, const Validator& v, const TensorView& q, const PagedKvCache& kv,
                       const TensorView& qo_indptr, const TensorView& out, OptionalTensor lse, cudaStream_t stream);

/// A run's q, out and lse against the plan: device, dtypes, shapes [total_q, heads, head dim], 32-bit strides.
void check_run_io(const AttentionPlanCore& core, const Validator& v, const TensorView& q, const TensorView& out,
                  OptionalTensor lse);

/// FlashInfer's batch-prefill `ragged_run` / `paged_run`, fa2 or fa3 as planned: the workspaces and plan info, then
/// `inputs` (q and the KV: ragged k, v, qo_indptr, kv_indptr; paged k_cache, v_cache, qo_indptr, indptr, indices,
/// last_page_len), out, lse and the flags both backends take; the backends differ only in their tail (fa3: four
/// optional tensors and scale_v; fa2: six optional tensors and the RoPE constants). Arguments must be validated.
template <class... Inputs>
void invoke_batch_run(const AttentionPlanCore& core, ffi::abi::SafeCall fn, cudaStream_t stream,
                      const TensorView& out, OptionalTensor lse, const Inputs&... inputs) {
  const int64_t layout = static_cast<int64_t>(core.layout);
  auto run = [&](auto... tail) {
    ffi::invoke(fn, ffi::StreamBinding{core.device, stream}, nullptr, core.float_ws, core.int_ws, core.plan_info,
                inputs..., out, lse, core.mask_mode, layout, core.window_left, core.enable_pdl, tail...);
  };
  if (core.fa3)
    run(nullptr, nullptr, nullptr, nullptr, core.logits_soft_cap, core.sm_scale, 1.0, int64_t{0});
  else
    run(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, core.logits_soft_cap, core.sm_scale, kRopeRcpScale,
        kRopeRcpTheta, int64_t{0});
}

/// Overlap rule of a plan's run: out, lse and the workspace views the run uses share no byte with `inputs`
/// nor with each other.
void check_run_overlap(const AttentionPlanCore& core, const Validator& v, const TensorView& out, OptionalTensor lse,
                       std::initializer_list<Validator::Named> inputs);
/// Overlap rule of plan creation: the three workspace buffers against each other and the host arrays.
void check_plan_overlap(const Validator& v, const Workspace& ws, std::initializer_list<Validator::Named> host_arrays);
/// Overlap rule of single prefill/decode: out, lse and a non-empty tmp against q, k, v.
void check_single_overlap(const Validator& v, const TensorView& out, OptionalTensor lse, const TensorView& tmp,
                          const TensorView& q, const TensorView& k, const TensorView& vv);

/// A batch plan's dtypes and layout: q f16 or bf16, kv equal to q, o (q's when unset) f16 or bf16, layout nhd or
/// hnd. Returns o's dtype.
inline DType check_plan_dtypes_and_layout(const Validator& v, DType q, DType kv, std::optional<DType> o,
                                          KvLayout layout) {
  if (q != DType::f16 && q != DType::bf16) v.fail("q_dtype", "must be f16 or bf16");
  if (kv != q) v.fail("kv_dtype", "must equal q_dtype");
  const DType o_dtype = o.value_or(q);
  if (o_dtype != DType::f16 && o_dtype != DType::bf16) v.fail("o_dtype", "must be f16 or bf16");
  if (layout != KvLayout::nhd && layout != KvLayout::hnd) v.fail("layout", "must be nhd or hnd");
  return o_dtype;
}

/// Strides are passed to FlashInfer's kernels as 32-bit values.
void check_strides_32bit(const Validator& v, const TensorView& t, const char* arg);

/// A run's paged cache against what its plan was made for (`core`: a decode or prefill plan core): the
/// planned KV dtype, layout, page size, num_kv_heads and head_dim, 32-bit strides, at least the planned number
/// of page ids, and the largest planned page id inside the cache. Each failure names the planned value.
template <class PlanCore>
PagedGeometry check_planned_paged_cache(const Validator& v, const PagedKvCache& kv, const TensorView& q,
                                        const PlanCore& core) {
  const PagedGeometry g = check_paged_cache(v, kv, q, "q", core.batch);
  v.dtype(kv.k_cache, "k_cache", {core.variant.kv});
  if (kv.layout != core.layout) v.fail("layout", "must be the planned layout");
  if (g.page_size != core.page_size)
    v.fail("k_cache", kv.k_cache, "must have the planned page size " + std::to_string(core.page_size));
  if (g.num_kv_heads != core.num_kv_heads)
    v.fail("k_cache", kv.k_cache, "must have the planned num_kv_heads " + std::to_string(core.num_kv_heads));
  if (g.head_dim != core.head_dim_qk)
    v.fail("k_cache", kv.k_cache, "must have the planned head_dim " + std::to_string(core.head_dim_qk));
  check_strides_32bit(v, kv.k_cache, "k_cache");
  if (kv.indices.size(0) < core.kv_total)
    v.fail("indices", kv.indices, "must hold at least the planned " + std::to_string(core.kv_total) + " page ids");
  if (core.max_page_index >= g.num_pages)
    v.fail("indices", "holds page id " + std::to_string(core.max_page_index) + " (planned) but the cache has " +
                          std::to_string(g.num_pages) + " pages");
  return g;
}

}  // namespace flashcpp::ops

namespace flashcpp::ops {
/// Host page-table checks shared by prefill and decode plans; fills kv_len_arr, kv_total, max_page_index.
void check_host_page_table(const Validator& v, const TensorView& kv_indptr, const TensorView& last_page_len,
                           OptionalTensor kv_indices, int64_t batch, int64_t page_size, AttentionPlanRequest& req);
/// Validates k/v of a single-request op (rank, dtype, layout shapes); returns kv_len.
int64_t check_single_kv(const Validator& v, const TensorView& q, const TensorView& k, const TensorView& vv,
                        KvLayout layout, int64_t num_kv_heads_unused, int64_t head_dim_qk, int64_t head_dim_vo,
                        bool require_contiguous);
/// Validates `tmp` (empty, or 1-D CUDA with >= need bytes) and fills its argument.
void check_tmp(const Validator& v, const TensorView& tmp, int64_t need, const TensorView& q, ffi::TensorArg& arg);
/// FlashInfer fa2 single prefill `run` (15 args); arguments must be validated.
void call_single_prefill(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& vv,
                         const TensorView& out, OptionalTensor lse, ffi::TensorArg& tmp_arg, int64_t mask_mode,
                         KvLayout layout, int64_t window_left, double cap, double sm_scale, bool f16qk,
                         cudaStream_t stream);
}  // namespace flashcpp::ops
