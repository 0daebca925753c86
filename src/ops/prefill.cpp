// Single prefill (fa2) and batch prefill plans (fa2 / fa3): validation, module choice and argument
// packing for FlashInfer's prefill modules (facts sheet §A.4, §A.6, §A.7, §A.11, §E).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>

#include "flashcpp/attention.hpp"
#include "ops/attention_plan.hpp"

namespace flashcpp {

// -------------------------------------------------------------------------------------------------
// Single prefill

namespace {

// FlashInfer's single prefill and decode CTAs have at least 128 threads (4 warps; decode: max(128, bdx*bdy))
// and an SM holds at most 2048 threads: at most 16 CTAs of them are resident per SM, which bounds the
// number of KV chunks the kernels' occupancy-based split can choose.
constexpr int64_t kMaxCtasPerSm = 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// SM count of a device, 0 without one (device_facts reads it once per device).
int64_t sm_count_or_zero(int device_id) {
  try {
    return device_facts(device_id).sm_count;
  } catch (...) {
    return 0;
  }
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
  const jit::AttentionSpec var{.q = q.dtype, .kv = k.dtype, .o = out.dtype,
                               .head_dim_qk = static_cast<int>(q.size(-1)), .head_dim_vo = static_cast<int>(out.size(-1)),
                               .use_sliding_window = window_left >= 0, .use_logits_soft_cap = cap > 0,
                               .use_fp16_qk_reduction = f16qk};
  const auto mod = resolve_module(rt, module_key(ModuleFamily::single_prefill, var),
                                  [&] { return jit::single_prefill_uri(var); }, {"run"});
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
  ops::AttentionPlanCore core;
};

BatchPrefillPlan::BatchPrefillPlan(std::unique_ptr<State> s) : s_(std::move(s)) {}
BatchPrefillPlan::BatchPrefillPlan(BatchPrefillPlan&&) noexcept = default;
BatchPrefillPlan& BatchPrefillPlan::operator=(BatchPrefillPlan&&) noexcept = default;
BatchPrefillPlan::~BatchPrefillPlan() = default;


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
  ops::check_split_options(v, c.fixed_split_size, c.disable_split_kv, /*fa3=*/false);

  const bool paged = c.kv_storage == KvStorage::paged;
  if (paged) {
    v.in_range(c.page_size, "page_size", 1, 1 << 16);
    if (dvo != c.head_dim_qk) v.fail("head_dim_vo", "must equal head_dim_qk for paged KV (one page geometry)");
  }
  v.indptr(ip.qo_indptr, "qo_indptr", -1);
  const int64_t batch = ip.qo_indptr.size(0) - 1;
  v.require(batch >= 1, "qo_indptr", "must have at least two entries (batch >= 1)");
  ops::AttentionPlanRequest req;
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
  ops::AttentionPlanCore& core = state->core;
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
  core.variant = jit::AttentionSpec{.q = c.q_dtype, .kv = c.kv_dtype, .o = o_dtype, .head_dim_qk = static_cast<int>(c.head_dim_qk),
                                    .head_dim_vo = static_cast<int>(dvo), .use_sliding_window = c.window_left >= 0,
                                    .use_logits_soft_cap = c.logits_soft_cap > 0};
  core.layout = c.layout;
  core.mask_mode = c.causal ? ops::kMaskCausal : ops::kMaskNone;
  core.window_left = c.window_left;
  core.logits_soft_cap = c.logits_soft_cap;
  core.sm_scale = sm_scale;
  core.enable_pdl = c.enable_pdl;
  core.enable_cuda_graph = c.enable_cuda_graph;
  core.fa3 = ops::choose_fa3(v, c.backend, core.variant, !paged && c.layout == KvLayout::hnd, core.device.id);
  ops::check_split_options(v, c.fixed_split_size, c.disable_split_kv, core.fa3);
  if (core.fa3) core.variant.backend = jit::Backend::fa3;
  core.uri = jit::batch_prefill_uri(core.variant);
  core.mod = ops::resolve_module(
      rt, ops::module_key(core.fa3 ? ops::ModuleFamily::batch_prefill_fa3 : ops::ModuleFamily::batch_prefill_fa2, core.variant),
      [&] { return core.uri; }, {"plan", "ragged_run", "paged_run"});
  ops::run_attention_plan(core, req, v, stream);
  return BatchPrefillPlan(std::move(state));
}

void BatchPrefillPlan::run_ragged(const TensorView& q, const TensorView& k, const TensorView& vv,
                                  const TensorView& qo_indptr, const TensorView& kv_indptr, const TensorView& out,
                                  OptionalTensor lse, cudaStream_t stream) const {
  const Validator v("BatchPrefillPlan::run_ragged");
  ops::check_plan_alive(v, s_.get());
  const ops::AttentionPlanCore& core = s_->core;
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

  // `ragged_run`: fa3 22 arguments, fa2 25.
  ops::invoke_batch_run(core, core.mod.fns[1], stream, out, lse, q, k, vv, qo_indptr, kv_indptr);
}

void BatchPrefillPlan::run_paged(const TensorView& q, const PagedKvCache& kv, const TensorView& qo_indptr,
                                 const TensorView& out, OptionalTensor lse, cudaStream_t stream) const {
  const Validator v("BatchPrefillPlan::run_paged");
  ops::check_plan_alive(v, s_.get());
  ops::run_paged_attention(s_->core, v, q, kv, qo_indptr, out, lse, stream);
}

AttentionBackend BatchPrefillPlan::backend() const {
  return s_->core.fa3 ? AttentionBackend::fa3 : AttentionBackend::fa2;
}
const std::string& BatchPrefillPlan::module_uri() const { return s_->core.uri; }
int64_t BatchPrefillPlan::batch_size() const { return s_->core.batch; }
int64_t BatchPrefillPlan::total_q_tokens() const { return s_->core.total_q; }
std::vector<int64_t> BatchPrefillPlan::plan_info() const { return s_->core.plan_info.to_int64(); }

}  // namespace flashcpp
