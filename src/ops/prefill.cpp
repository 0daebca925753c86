// Single prefill (fa2) and batch prefill plans (fa2 / fa3): validation, module choice and argument
// packing for FlashInfer's prefill modules (facts sheet §A.4, §A.6, §A.7, §A.11, §E).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>

#include "flashcpp/attention.hpp"
#include "ops/attention_internal.hpp"
#include "ops/test_hooks.hpp"

namespace flashcpp {
namespace ops {

// -------------------------------------------------------------------------------------------------
// Shared pieces

bool fa3_variant_exists(const AttentionVariant& v) {
  const bool sixteen = v.q == DType::f16 || v.q == DType::bf16;
  const bool dims = (v.head_dim_qk == v.head_dim_vo &&
                     (v.head_dim_qk == 64 || v.head_dim_qk == 128 || v.head_dim_qk == 256)) ||
                    (v.head_dim_qk == 192 && v.head_dim_vo == 128);
  return sixteen && v.kv == v.q && v.o == v.q && dims && !v.use_fp16_qk_reduction;
}

int device_cc_major(int id) noexcept {
  if (const TestOverrides* t = test_overrides())
    if (const int o = t->cc_major.load(std::memory_order_relaxed); o != -100) return o;
  if (id < 0 || id >= cuda_device_count()) return -1;
  try {
    return device_info(id).cc_major;
  } catch (...) {
    return -1;
  }
}

bool choose_fa3(const Validator& v, AttentionBackend backend, const AttentionVariant& var, bool ragged_hnd,
                int device_id) {
  switch (backend) {
    case AttentionBackend::fa2: return false;
    case AttentionBackend::fa3: {
      if (!fa3_variant_exists(var))
        v.fail("backend", "fa3 needs q, kv and o of one 16-bit dtype and head dims 64, 128, 256 or 192/128");
      if (ragged_hnd) v.fail("backend", "fa3 reads ragged k/v as NHD only; use layout nhd or backend fa2");
      const int cc = device_cc_major(device_id);
      if (cc >= 0 && cc != 9)
        throw Error(ErrorCode::unsupported, std::string(v.op()) + ": backend fa3 needs a compute capability 9.x GPU; "
                                                                   "device " + std::to_string(device_id) +
                                                                   " has " + std::to_string(cc) + ".x");
      return true;
    }
    case AttentionBackend::automatic: break;
  }
  return !ragged_hnd && fa3_variant_exists(var) && device_cc_major(device_id) == 9;
}

void check_strides_32bit(const Validator& v, const TensorView& t, const char* arg) {
  for (int i = 0; i < t.rank; ++i)
    if (t.strides[i] > int64_t{0x7fffffff}) v.fail(arg, t, "must have strides below 2^31 elements");
}

void check_workspace(const Validator& v, const Workspace& ws, int64_t reserved_int_bytes) {
  check_cuda_tensor(v, ws.float_buffer, "workspace.float_buffer");
  v.rank(ws.float_buffer, "workspace.float_buffer", 1).contiguous(ws.float_buffer, "workspace.float_buffer");
  check_device_buffer(v, ws.int_buffer, "workspace.int_buffer", ws.float_buffer, "workspace.float_buffer");
  v.defined(ws.pinned_int_buffer, "workspace.pinned_int_buffer")
      .on_host(ws.pinned_int_buffer, "workspace.pinned_int_buffer")
      .rank(ws.pinned_int_buffer, "workspace.pinned_int_buffer", 1)
      .contiguous(ws.pinned_int_buffer, "workspace.pinned_int_buffer");
  v.min_bytes(ws.float_buffer, "workspace.float_buffer", 1);
  v.min_bytes(ws.int_buffer, "workspace.int_buffer", reserved_int_bytes + 4096);
  v.aligned(ws.float_buffer, "workspace.float_buffer", 256).aligned(ws.int_buffer, "workspace.int_buffer", 256);
  v.aligned(ws.pinned_int_buffer, "workspace.pinned_int_buffer", 256);
  const int64_t int_bytes = ws.int_buffer.numel() * dtype_size(ws.int_buffer.dtype);
  v.min_bytes(ws.pinned_int_buffer, "workspace.pinned_int_buffer", int_bytes);
}

void check_plan_overlap(const Validator& v, const Workspace& ws, std::initializer_list<Validator::Named> host_arrays) {
  // Planning writes all three buffers (FlashInfer fills the pinned one from the host arrays, then copies it).
  v.no_overlap({{&ws.float_buffer, "workspace.float_buffer"}, {&ws.int_buffer, "workspace.int_buffer"},
                {&ws.pinned_int_buffer, "workspace.pinned_int_buffer"}},
               host_arrays);
}

static TensorView bytes_view(const TensorView& t, int64_t bytes) {
  return TensorView::contiguous(t.data, DType::u8, t.device, {bytes});
}

void run_prefill_plan(PrefillPlanCore& core, const PrefillPlanRequest& req, const Validator& v, cudaStream_t stream) {
  const int64_t int_bytes = core.ws.int_buffer.numel() * dtype_size(core.ws.int_buffer.dtype);
  core.float_ws = bytes_view(core.ws.float_buffer, core.ws.float_buffer.numel() * dtype_size(core.ws.float_buffer.dtype));
  core.int_ws = bytes_view(core.ws.int_buffer, int_bytes - req.reserved_int_bytes);
  const TensorView pinned = as_cpu(bytes_view(core.ws.pinned_int_buffer, int_bytes - req.reserved_int_bytes));
  const TensorView kv_len_view = TensorView::contiguous(const_cast<int32_t*>(req.kv_len_arr.data()), DType::i32,
                                                        Device::cpu(), {static_cast<int64_t>(req.kv_len_arr.size())});
  const ffi::StreamBinding binding{core.device, stream};
  ffi::Any result;
  if (core.fa3)  // fa3 `plan`: 16 arguments
    ffi::invoke(core.mod.fns[0], binding, &result, core.float_ws, core.int_ws, pinned, as_cpu(*req.qo_indptr),
                as_cpu(*req.kv_indptr), kv_len_view, core.total_q, core.batch, core.num_qo_heads, core.num_kv_heads,
                core.page_size, core.enable_cuda_graph, core.head_dim_qk, core.head_dim_vo, req.causal,
                core.window_left);
  else  // fa2 `plan`: 19 arguments (split-KV controls)
    ffi::invoke(core.mod.fns[0], binding, &result, core.float_ws, core.int_ws, pinned, as_cpu(*req.qo_indptr),
                as_cpu(*req.kv_indptr), kv_len_view, core.total_q, core.batch, core.num_qo_heads, core.num_kv_heads,
                core.page_size, core.enable_cuda_graph, core.head_dim_qk, core.head_dim_vo, req.causal,
                core.window_left, req.fixed_split_size, req.disable_split_kv, int64_t{0});
  if (result.type_index() < ffi::abi::kStaticObjectBegin)
    throw Error(ErrorCode::ffi_error, std::string(v.op()) + ": FlashInfer's plan returned no plan-info array");
  core.plan_info = ffi::Array(result.take_object());
  const int64_t expected = core.fa3 ? 9 : 15;
  if (core.plan_info.size() != expected)
    throw Error(ErrorCode::ffi_error, std::string(v.op()) + ": FlashInfer's plan returned " +
                                          std::to_string(core.plan_info.size()) + " plan-info entries; expected " +
                                          std::to_string(expected) + " (module " + core.uri + ")");
}

// Validates q/out/lse of a run against the plan.
static void check_run_io(const PrefillPlanCore& core, const Validator& v, const TensorView& q, const TensorView& out,
                         OptionalTensor lse) {
  check_cuda_tensor(v, q, "q");
  if (!(q.device == core.device))
    v.fail("q", q, "must be on the planned device cuda:" + std::to_string(core.device.id));
  v.rank(q, "q", 3).dtype(q, "q", {core.variant.q}).last_dim_contiguous(q, "q");
  v.shape(q, "q", {core.total_q, core.num_qo_heads, core.head_dim_qk});
  check_strides_32bit(v, q, "q");
  check_same_device(v, out, "out", q, "q");
  v.rank(out, "out", 3).dtype(out, "out", {core.variant.o}).contiguous(out, "out");
  v.shape(out, "out", {core.total_q, core.num_qo_heads, core.head_dim_vo});
  check_strides_32bit(v, out, "out");
  if (lse) {
    check_same_device(v, *lse, "lse", q, "q");
    v.dtype(*lse, "lse", {DType::f32}).shape(*lse, "lse", {core.total_q, core.num_qo_heads}).contiguous(*lse, "lse");
  }
}

void check_run_overlap(const PrefillPlanCore& core, const Validator& v, const TensorView& out, OptionalTensor lse,
                       std::initializer_list<Validator::Named> inputs) {
  // A run writes out, lse and the float workspace and reads the plan from the int workspace: none of them
  // may share a byte with another argument.
  v.no_overlap({{&out, "out"}, {lse, "lse"}, {&core.float_ws, "workspace.float_buffer"},
                {&core.int_ws, "workspace.int_buffer"}},
               inputs);
}

void run_prefill_paged(const PrefillPlanCore& core, const Validator& v, const TensorView& q, const PagedKvCache& kv,
                       const TensorView& qo_indptr, const TensorView& out, OptionalTensor lse, cudaStream_t stream) {
  if (core.storage != KvStorage::paged) v.fail("plan", "was made for ragged KV; call run_ragged");
  check_run_io(core, v, q, out, lse);
  check_planned_paged_cache(v, kv, q, core);
  check_device_index_array(v, qo_indptr, "qo_indptr", core.batch + 1, q, "q");
  check_run_overlap(core, v, out, lse,
                    {{&q, "q"}, {&kv.k_cache, "k_cache"}, {&kv.v_cache, "v_cache"}, {&kv.indices, "indices"},
                     {&kv.indptr, "indptr"}, {&kv.last_page_len, "last_page_len"}, {&qo_indptr, "qo_indptr"}});
  if (core.total_q == 0) return;

  const ffi::StreamBinding binding{core.device, stream};
  const int64_t layout = static_cast<int64_t>(core.layout);
  if (core.fa3)  // fa3 `paged_run`: 24 arguments
    ffi::invoke(core.mod.fns[2], binding, nullptr, core.float_ws, core.int_ws, core.plan_info, q, kv.k_cache,
                kv.v_cache, qo_indptr, kv.indptr, kv.indices, kv.last_page_len, out, lse, core.mask_mode, layout,
                core.window_left, core.enable_pdl, nullptr, nullptr, nullptr, nullptr, core.logits_soft_cap,
                core.sm_scale, 1.0, int64_t{0});
  else  // fa2 `paged_run`: 27 arguments
    ffi::invoke(core.mod.fns[2], binding, nullptr, core.float_ws, core.int_ws, core.plan_info, q, kv.k_cache,
                kv.v_cache, qo_indptr, kv.indptr, kv.indices, kv.last_page_len, out, lse, core.mask_mode, layout,
                core.window_left, core.enable_pdl, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                core.logits_soft_cap, core.sm_scale, kRopeRcpScale, kRopeRcpTheta, int64_t{0});
}

}  // namespace ops

// -------------------------------------------------------------------------------------------------
// Single prefill

namespace {

// FlashInfer's single prefill and decode CTAs have at least 128 threads (4 warps; decode: max(128, bdx*bdy))
// and an SM holds at most 2048 threads: at most 16 CTAs of them are resident per SM, which bounds the
// number of KV chunks the kernels' occupancy-based split can choose.
constexpr int64_t kMaxCtasPerSm = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// SM count of a device, 0 without one; read once per device (the per-call path takes no lock).
int64_t sm_count_or_zero(int device_id) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> cache{};  // 0: not read yet, -1: no such device
  if (device_id < 0 || device_id >= kMaxDevices) return 0;
  int n = cache[static_cast<size_t>(device_id)].load(std::memory_order_relaxed);
  if (n == 0) {
    n = -1;
    if (device_id < cuda_device_count()) {
      try {
        n = device_info(device_id).sm_count;
      } catch (...) {
        n = -1;
      }
    }
    cache[static_cast<size_t>(device_id)].store(n, std::memory_order_relaxed);
  }
  return n > 0 ? n : 0;
}

}  // namespace

int64_t single_prefill_tmp_bytes(int64_t qo_len, int64_t kv_len, int64_t num_qo_heads, int64_t num_kv_heads,
                                 int64_t head_dim_vo, DType o_dtype, int device_id) {
  if (qo_len <= 0 || kv_len <= 0 || num_kv_heads <= 0 || num_qo_heads <= 0) return 0;
  int64_t chunks = ceil_div(kv_len, 256);
  if (const int64_t sms = sm_count_or_zero(device_id); sms > 0) {
    const int64_t group = std::max<int64_t>(1, num_qo_heads / num_kv_heads);
    const int64_t tiles = num_kv_heads * ceil_div(qo_len * group, 128);
    chunks = std::min(chunks, sms * kMaxCtasPerSm / tiles);
  }
  if (chunks <= 1) return 0;
  return chunks * qo_len * num_qo_heads * (head_dim_vo * dtype_size(o_dtype) + 4);
}

int64_t single_decode_tmp_bytes(int64_t kv_len, int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim,
                                DType o_dtype, int device_id) {
  if (kv_len <= 256 || num_kv_heads <= 0 || num_qo_heads <= 0) return 0;
  int64_t chunks = ceil_div(kv_len, 256);
  if (const int64_t sms = sm_count_or_zero(device_id); sms > 0)
    chunks = std::min(chunks, sms * kMaxCtasPerSm / num_kv_heads);
  if (chunks <= 1) return 0;
  return chunks * num_qo_heads * (head_dim * dtype_size(o_dtype) + 4);
}

namespace ops {

/// Validates k/v of a single-request op; returns kv_len.
int64_t check_single_kv(const Validator& v, const TensorView& q, const TensorView& k, const TensorView& vv,
                        KvLayout layout, int64_t num_kv_heads_unused, int64_t head_dim_qk, int64_t head_dim_vo,
                        bool require_contiguous) {
  (void)num_kv_heads_unused;
  check_same_device(v, k, "k", q, "q");
  check_same_device(v, vv, "v", q, "q");
  if (layout != KvLayout::nhd && layout != KvLayout::hnd)
    v.fail("layout", "must be nhd or hnd; got " + std::to_string(static_cast<int64_t>(layout)));
  v.rank(k, "k", 3).same_dtype(k, "k", q, "q").last_dim_contiguous(k, "k");
  v.rank(vv, "v", 3).same_dtype(vv, "v", q, "q").last_dim_contiguous(vv, "v");
  if (require_contiguous) v.contiguous(k, "k").contiguous(vv, "v");
  const int64_t kv_len = layout == KvLayout::nhd ? k.size(0) : k.size(1);
  const int64_t hkv = layout == KvLayout::nhd ? k.size(1) : k.size(0);
  v.dim(k, "k", 2, head_dim_qk, "q.size(-1)");
  if (layout == KvLayout::nhd) v.shape(vv, "v", {kv_len, hkv, head_dim_vo});
  else v.shape(vv, "v", {hkv, kv_len, head_dim_vo});
  v.require(kv_len >= 1, "k", "must hold at least one token");
  check_strides_32bit(v, k, "k");
  check_strides_32bit(v, vv, "v");
  return kv_len;
}

/// Validates `tmp` (empty, or a 1-D CUDA buffer of at least `need` bytes) and fills its argument.
void check_tmp(const Validator& v, const TensorView& tmp, int64_t need, const TensorView& q, ffi::TensorArg& arg) {
  if (tmp.data == nullptr || tmp.numel() == 0) {
    // No scratch: pass a null-data empty buffer so the kernel never splits the KV sequence.
    arg.set(TensorView::contiguous(nullptr, DType::u8, q.device, {0}));
    return;
  }
  check_device_buffer(v, tmp, "tmp", q, "q");
  v.aligned(tmp, "tmp", 16);
  if (tmp.numel() * dtype_size(tmp.dtype) < need)
    v.fail("tmp", tmp, "must hold at least " + std::to_string(need) +
                           " bytes (single_*_tmp_bytes), or be empty to disable KV splitting");
  arg.set(tmp);
}

void check_single_overlap(const Validator& v, const TensorView& out, OptionalTensor lse, const TensorView& tmp,
                          const TensorView& q, const TensorView& k, const TensorView& vv) {
  const bool scratch = tmp.data != nullptr && tmp.numel() != 0;  // as check_tmp decides
  v.no_overlap({{&out, "out"}, {lse, "lse"}, {scratch ? &tmp : nullptr, "tmp"}}, {{&q, "q"}, {&k, "k"}, {&vv, "v"}});
}

/// Packs and calls FlashInfer's fa2 single prefill `run` (15 args). Shapes must be validated.
void call_single_prefill(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& vv,
                         const TensorView& out, OptionalTensor lse, ffi::TensorArg& tmp_arg, int64_t mask_mode,
                         KvLayout layout, int64_t window_left, double cap, double sm_scale, bool f16qk,
                         cudaStream_t stream) {
  AttentionVariant var;
  var.q = q.dtype;
  var.kv = k.dtype;
  var.o = out.dtype;
  var.head_dim_qk = q.size(-1);
  var.head_dim_vo = out.size(-1);
  var.use_sliding_window = window_left >= 0;
  var.use_logits_soft_cap = cap > 0;
  var.use_fp16_qk_reduction = f16qk;
  const auto mod = resolve_module(rt, module_key(ModuleFamily::single_prefill, var),
                                  [&] { return single_prefill_uri(var, false); }, {"run"});
  ffi::invoke(mod.fns[0], binding_for(q, stream), nullptr, q, k, vv, tmp_arg, out, lse, mask_mode,
              static_cast<int64_t>(layout), window_left, nullptr, nullptr, cap, sm_scale, kRopeRcpScale, kRopeRcpTheta);
}

}  // namespace ops

void single_prefill(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, OptionalTensor lse, const TensorView& tmp,
                    const SinglePrefillOptions& o, cudaStream_t stream) {
  const Validator val("single_prefill");
  ops::check_cuda_tensor(val, q, "q");
  val.rank(q, "q", 3).dtype(q, "q", {DType::f16, DType::bf16}).last_dim_contiguous(q, "q");
  ops::check_strides_32bit(val, q, "q");
  const int64_t qo_len = q.size(0), hq = q.size(1), dqk = q.size(2);
  ops::check_same_device(val, out, "out", q, "q");
  val.rank(out, "out", 3).dtype(out, "out", {DType::f16, DType::bf16}).contiguous(out, "out");
  ops::check_strides_32bit(val, out, "out");
  const int64_t dvo = out.size(2);
  val.shape(out, "out", {qo_len, hq, -1});
  const int64_t kv_len = ops::check_single_kv(val, q, k, v, o.layout, 0, dqk, dvo, false);
  const int64_t hkv = o.layout == KvLayout::nhd ? k.size(1) : k.size(0);
  ops::check_heads(val, hq, hkv, "q.size(1)", "num_kv_heads");
  if (lse) {
    ops::check_same_device(val, *lse, "lse", q, "q");
    val.dtype(*lse, "lse", {DType::f32}).shape(*lse, "lse", {qo_len, hq}).contiguous(*lse, "lse");
  }
  ops::check_window_and_cap(val, o.window_left, o.logits_soft_cap);
  const double sm_scale = ops::resolve_sm_scale(val, o.sm_scale, dqk);
  if (o.use_fp16_qk_reduction && q.dtype != DType::f16)
    val.fail("use_fp16_qk_reduction", "needs f16 q");
  ffi::TensorArg tmp_arg;
  ops::check_tmp(val, tmp, single_prefill_tmp_bytes(qo_len, kv_len, hq, hkv, dvo, out.dtype, q.device.id), q,
                 tmp_arg);
  ops::check_single_overlap(val, out, lse, tmp, q, k, v);
  if (qo_len == 0) return;
  ops::call_single_prefill(rt, q, k, v, out, lse, tmp_arg, o.causal ? ops::kMaskCausal : ops::kMaskNone, o.layout,
                           o.window_left, o.logits_soft_cap, sm_scale, o.use_fp16_qk_reduction, stream);
}

// -------------------------------------------------------------------------------------------------
// Batch prefill plan

struct BatchPrefillPlan::State {
  ops::PrefillPlanCore core;
};

BatchPrefillPlan::BatchPrefillPlan(std::unique_ptr<State> s) : s_(std::move(s)) {}
BatchPrefillPlan::BatchPrefillPlan(BatchPrefillPlan&&) noexcept = default;
BatchPrefillPlan& BatchPrefillPlan::operator=(BatchPrefillPlan&&) noexcept = default;
BatchPrefillPlan::~BatchPrefillPlan() = default;

namespace ops {

/// Host page table checks shared by prefill and decode plans; fills kv_len_arr, kv_total, max_page_index.
void check_host_page_table(const Validator& v, const TensorView& kv_indptr, const TensorView& last_page_len,
                           OptionalTensor kv_indices, int64_t batch, int64_t page_size, PrefillPlanRequest& req) {
  v.indptr(kv_indptr, "kv_indptr", batch + 1);
  v.on_host(last_page_len, "kv_last_page_len").dtype(last_page_len, "kv_last_page_len", {DType::i32});
  v.rank(last_page_len, "kv_last_page_len", 1).dim(last_page_len, "kv_last_page_len", 0, batch, "batch size");
  v.contiguous(last_page_len, "kv_last_page_len");
  req.kv_len_arr.resize(static_cast<size_t>(batch));
  const TensorView lens =
      TensorView::contiguous(req.kv_len_arr.data(), DType::i32, Device::cpu(), {batch});
  paged_kv_lengths(v, kv_indptr, last_page_len, page_size, lens);
  req.kv_total = kv_indptr.data_as<const int32_t>()[batch];
  if (kv_indices) {
    v.on_host(*kv_indices, "kv_indices").dtype(*kv_indices, "kv_indices", {DType::i32});
    v.rank(*kv_indices, "kv_indices", 1).contiguous(*kv_indices, "kv_indices");
    if (kv_indices->size(0) < req.kv_total)
      v.fail("kv_indices", *kv_indices, "must hold at least kv_indptr[batch] = " + std::to_string(req.kv_total) +
                                            " page ids");
    const TensorView used = TensorView::contiguous(kv_indices->data, DType::i32, kv_indices->device, {req.kv_total});
    v.values_in_range(used, "kv_indices", 0, int64_t{1} << 31);
    const auto* p = kv_indices->data_as<const int32_t>();
    req.max_page_index = req.kv_total > 0 ? *std::max_element(p, p + req.kv_total) : -1;
  }
}

}  // namespace ops

BatchPrefillPlan BatchPrefillPlan::create(const Runtime& rt, const Workspace& ws, const PrefillIndptrs& ip,
                                          const BatchPrefillConfig& c, cudaStream_t stream) {
  const Validator v("BatchPrefillPlan::create");
  ops::check_workspace(v, ws, 0);
  ops::check_heads(v, c.num_qo_heads, c.num_kv_heads, "num_qo_heads", "num_kv_heads");
  const int64_t dvo = c.head_dim_vo == 0 ? c.head_dim_qk : c.head_dim_vo;
  v.in_range(c.head_dim_qk, "head_dim_qk", 16, 512).divisible(c.head_dim_qk, "head_dim_qk", 16, "16");
  v.in_range(dvo, "head_dim_vo", 16, 512).divisible(dvo, "head_dim_vo", 16, "16");
  const DType o_dtype = ops::check_plan_dtypes_and_layout(v, c.q_dtype, c.kv_dtype, c.o_dtype, c.layout);
  ops::check_window_and_cap(v, c.window_left, c.logits_soft_cap);
  const double sm_scale = ops::resolve_sm_scale(v, c.sm_scale, c.head_dim_qk);
  if (c.fixed_split_size < -1 || c.fixed_split_size == 0)
    v.fail("fixed_split_size", "must be -1 (off) or > 0; got " + std::to_string(c.fixed_split_size));

  const bool paged = c.kv_storage == KvStorage::paged;
  if (paged) {
    v.in_range(c.page_size, "page_size", 1, 1 << 16);
    if (dvo != c.head_dim_qk) v.fail("head_dim_vo", "must equal head_dim_qk for paged KV (one page geometry)");
  }
  v.indptr(ip.qo_indptr, "qo_indptr", -1);
  const int64_t batch = ip.qo_indptr.size(0) - 1;
  v.require(batch >= 1, "qo_indptr", "must have at least two entries (batch >= 1)");
  ops::PrefillPlanRequest req;
  req.qo_indptr = &ip.qo_indptr;
  req.kv_indptr = &ip.kv_indptr;
  req.causal = c.causal;
  req.fixed_split_size = c.fixed_split_size;
  req.disable_split_kv = c.disable_split_kv;
  if (paged) {
    ops::check_host_page_table(v, ip.kv_indptr, ip.kv_last_page_len, ip.kv_indices, batch, c.page_size, req);
  } else {
    v.indptr(ip.kv_indptr, "kv_indptr", batch + 1);
    const auto* p = ip.kv_indptr.data_as<const int32_t>();
    req.kv_len_arr.resize(static_cast<size_t>(batch));
    for (int64_t r = 0; r < batch; ++r) req.kv_len_arr[static_cast<size_t>(r)] = p[r + 1] - p[r];
    req.kv_total = p[batch];
  }
  ops::check_plan_overlap(v, ws, {{&ip.qo_indptr, "qo_indptr"}, {&ip.kv_indptr, "kv_indptr"},
                                  {paged ? &ip.kv_last_page_len : nullptr, "kv_last_page_len"},
                                  {paged ? ip.kv_indices : nullptr, "kv_indices"}});

  auto state = std::make_unique<State>();
  ops::PrefillPlanCore& core = state->core;
  core.ws = ws;
  core.device = ws.float_buffer.device;
  core.storage = c.kv_storage;
  core.batch = batch;
  core.total_q = ip.qo_indptr.data_as<const int32_t>()[batch];
  core.kv_total = req.kv_total;
  core.max_page_index = req.max_page_index;
  core.num_qo_heads = c.num_qo_heads;
  core.num_kv_heads = c.num_kv_heads;
  core.head_dim_qk = c.head_dim_qk;
  core.head_dim_vo = dvo;
  core.page_size = paged ? c.page_size : 1;
  core.variant = ops::AttentionVariant{c.q_dtype, c.kv_dtype, o_dtype, c.head_dim_qk, dvo, c.window_left >= 0,
                                       c.logits_soft_cap > 0, false};
  core.layout = c.layout;
  core.mask_mode = c.causal ? ops::kMaskCausal : ops::kMaskNone;
  core.window_left = c.window_left;
  core.logits_soft_cap = c.logits_soft_cap;
  core.sm_scale = sm_scale;
  core.enable_pdl = c.enable_pdl;
  core.enable_cuda_graph = c.enable_cuda_graph;
  core.fa3 = ops::choose_fa3(v, c.backend, core.variant, !paged && c.layout == KvLayout::hnd, core.device.id);
  if (core.fa3 && (c.fixed_split_size != -1 || c.disable_split_kv))
    v.fail("fixed_split_size", "and disable_split_kv are fa2 options; use backend fa2");
  core.uri = ops::batch_prefill_uri(core.variant, DType::i32, core.fa3);
  core.mod = ops::resolve_module(
      rt, ops::module_key(core.fa3 ? ops::ModuleFamily::batch_prefill_fa3 : ops::ModuleFamily::batch_prefill_fa2, core.variant),
      [&] { return core.uri; }, {"plan", "ragged_run", "paged_run"});
  ops::run_prefill_plan(core, req, v, stream);
  return BatchPrefillPlan(std::move(state));
}

void BatchPrefillPlan::run_ragged(const TensorView& q, const TensorView& k, const TensorView& vv,
                                  const TensorView& qo_indptr, const TensorView& kv_indptr, const TensorView& out,
                                  OptionalTensor lse, cudaStream_t stream) const {
  const Validator v("BatchPrefillPlan::run_ragged");
  ops::check_plan_alive(v, s_.get());
  const ops::PrefillPlanCore& core = s_->core;
  if (core.storage != KvStorage::ragged) v.fail("plan", "was made for paged KV; call run_paged");
  ops::check_run_io(core, v, q, out, lse);
  ops::check_same_device(v, k, "k", q, "q");
  ops::check_same_device(v, vv, "v", q, "q");
  v.rank(k, "k", 3).dtype(k, "k", {core.variant.kv}).last_dim_contiguous(k, "k");
  v.rank(vv, "v", 3).dtype(vv, "v", {core.variant.kv}).last_dim_contiguous(vv, "v");
  if (core.layout == KvLayout::nhd) {
    v.shape(k, "k", {core.kv_total, core.num_kv_heads, core.head_dim_qk});
    v.shape(vv, "v", {core.kv_total, core.num_kv_heads, core.head_dim_vo});
  } else {
    v.shape(k, "k", {core.num_kv_heads, core.kv_total, core.head_dim_qk});
    v.shape(vv, "v", {core.num_kv_heads, core.kv_total, core.head_dim_vo});
  }
  ops::check_strides_32bit(v, k, "k");
  ops::check_strides_32bit(v, vv, "v");
  ops::check_device_index_array(v, qo_indptr, "qo_indptr", core.batch + 1, q, "q");
  ops::check_device_index_array(v, kv_indptr, "kv_indptr", core.batch + 1, q, "q");
  ops::check_run_overlap(core, v, out, lse,
                         {{&q, "q"}, {&k, "k"}, {&vv, "v"}, {&qo_indptr, "qo_indptr"}, {&kv_indptr, "kv_indptr"}});
  if (core.total_q == 0) return;

  const ffi::StreamBinding binding{core.device, stream};
  const int64_t layout = static_cast<int64_t>(core.layout);
  if (core.fa3)  // fa3 `ragged_run`: 22 arguments (4 optional tensors, scale_v_scalar)
    ffi::invoke(core.mod.fns[1], binding, nullptr, core.float_ws, core.int_ws, core.plan_info, q, k, vv, qo_indptr,
                kv_indptr, out, lse, core.mask_mode, layout, core.window_left, core.enable_pdl, nullptr, nullptr,
                nullptr, nullptr, core.logits_soft_cap, core.sm_scale, 1.0, int64_t{0});
  else  // fa2 `ragged_run`: 25 arguments (6 optional tensors, the RoPE constants)
    ffi::invoke(core.mod.fns[1], binding, nullptr, core.float_ws, core.int_ws, core.plan_info, q, k, vv, qo_indptr,
                kv_indptr, out, lse, core.mask_mode, layout, core.window_left, core.enable_pdl, nullptr, nullptr,
                nullptr, nullptr, nullptr, nullptr, core.logits_soft_cap, core.sm_scale, ops::kRopeRcpScale,
                ops::kRopeRcpTheta, int64_t{0});
}

void BatchPrefillPlan::run_paged(const TensorView& q, const PagedKvCache& kv, const TensorView& qo_indptr,
                                 const TensorView& out, OptionalTensor lse, cudaStream_t stream) const {
  const Validator v("BatchPrefillPlan::run_paged");
  ops::check_plan_alive(v, s_.get());
  ops::run_prefill_paged(s_->core, v, q, kv, qo_indptr, out, lse, stream);
}

AttentionBackend BatchPrefillPlan::backend() const {
  return s_->core.fa3 ? AttentionBackend::fa3 : AttentionBackend::fa2;
}
const std::string& BatchPrefillPlan::module_uri() const { return s_->core.uri; }
int64_t BatchPrefillPlan::batch_size() const { return s_->core.batch; }
int64_t BatchPrefillPlan::total_q_tokens() const { return s_->core.total_q; }
std::vector<int64_t> BatchPrefillPlan::plan_info() const { return s_->core.plan_info.to_int64(); }

}  // namespace flashcpp
