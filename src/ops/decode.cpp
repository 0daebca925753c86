// Single decode and batch decode plans: the CUDA-core decode modules and the tensor-core path through
// the batch-prefill modules, chosen per head configuration as FlashInfer's wrapper does (facts sheet
// §A.5, §A.8, §E "Decode paths").
#include <cstring>

#include "flashcpp/attention.hpp"
#include "ops/attention_plan.hpp"

namespace flashcpp {
namespace {

bool decode_group_supported(int64_t hq, int64_t hkv) {
  const int64_t g = hq / hkv;
  return g == 1 || g == 2 || g == 3 || g == 4 || g == 8;
}

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

}  // namespace

void single_decode(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& out, OptionalTensor lse, const TensorView& tmp, const SingleDecodeOptions& o,
                   cudaStream_t stream) {
  const Validator val("single_decode");
  ops::check_cuda_tensor(val, q, "q");
  val.rank(q, "q", 2).dtype(q, "q", {DType::f16, DType::bf16}).contiguous(q, "q");
  const int64_t hq = q.size(0), d = q.size(1);
  val.in_range(d, "q.size(1)", 16, 512).divisible(d, "q.size(1)", 16, "16");
  ops::check_same_device(val, out, "out", q, "q");
  val.dtype(out, "out", {DType::f16, DType::bf16}).shape(out, "out", {hq, d}).contiguous(out, "out");
  const int64_t kv_len = ops::check_single_kv(val, q, k, v, o.layout, 0, d, d, true);
  const int64_t hkv = o.layout == KvLayout::nhd ? k.size(1) : k.size(0);
  ops::check_heads(val, hq, hkv, "q.size(0)", "num_kv_heads");
  if (lse) {
    ops::check_same_device(val, *lse, "lse", q, "q");
    val.dtype(*lse, "lse", {DType::f32}).shape(*lse, "lse", {hq}).contiguous(*lse, "lse");
  }
  ops::check_window_and_cap(val, o.window_left, o.logits_soft_cap);
  const double sm_scale = ops::resolve_sm_scale(val, o.sm_scale, d);
  const bool tensor_cores = decode_uses_tensor_cores(hq, hkv, o.backend);
  if (!tensor_cores && !decode_group_supported(hq, hkv))
    val.fail("backend", "cuda_cores supports GQA group sizes 1, 2, 3, 4, 8 only; got " + std::to_string(hq / hkv) +
                            " (use tensor_cores or automatic)");
  ffi::TensorArg tmp_arg;
  if (tensor_cores) {
    ops::check_tmp(val, tmp, single_prefill_tmp_bytes(1, kv_len, hq, hkv, d, out.dtype, q.device.id), q, tmp_arg);
    ops::check_single_overlap(val, out, lse, tmp, q, k, v);
    // One query row of FlashInfer's prefill kernel: [1, H_qo, D] views of q/out, [1, H_qo] of lse.
    const TensorView q3 = TensorView::contiguous(q.data, q.dtype, q.device, {1, hq, d});
    const TensorView o3 = TensorView::contiguous(out.data, out.dtype, out.device, {1, hq, d});
    TensorView l2;
    if (lse) l2 = TensorView::contiguous(lse->data, DType::f32, lse->device, {1, hq});
    ops::call_single_prefill(rt, q3, k, v, o3, lse ? &l2 : nullptr, tmp_arg, ops::kMaskNone, o.layout, o.window_left,
                             o.logits_soft_cap, sm_scale, false, stream);
    return;
  }
  ops::check_tmp(val, tmp, single_decode_tmp_bytes(kv_len, hq, hkv, d, out.dtype, q.device.id), q, tmp_arg);
  ops::check_single_overlap(val, out, lse, tmp, q, k, v);
  const jit::AttentionSpec var{.q = q.dtype, .kv = k.dtype, .o = out.dtype, .head_dim_qk = static_cast<int>(d),
                               .head_dim_vo = static_cast<int>(d), .use_sliding_window = o.window_left != -1,
                               .use_logits_soft_cap = o.logits_soft_cap > 0};
  const auto mod = ops::resolve_module(rt, ops::module_key(ops::ModuleFamily::single_decode, var),
                                       [&] { return jit::single_decode_uri(var); }, {"run"});
  ffi::invoke(mod.fns[0], ops::binding_for(q, stream), nullptr, q, k, v, tmp_arg, out, lse,
              static_cast<int64_t>(o.layout), o.window_left, nullptr, o.logits_soft_cap, sm_scale, ops::kRopeRcpScale,
              ops::kRopeRcpTheta);
}

// -------------------------------------------------------------------------------------------------
// Batch decode plan

struct BatchDecodePlan::State {
  bool tensor_cores = false;
  ops::AttentionPlanCore core;  // both paths; on the CUDA-core path mod.fns = {plan, run}
  TensorView qo_arange;       // tensor-core path: device int32 [batch + 1] at the int workspace's tail
};

BatchDecodePlan::BatchDecodePlan(std::unique_ptr<State> s) : s_(std::move(s)) {}
BatchDecodePlan::BatchDecodePlan(BatchDecodePlan&&) noexcept = default;
BatchDecodePlan& BatchDecodePlan::operator=(BatchDecodePlan&&) noexcept = default;
BatchDecodePlan::~BatchDecodePlan() = default;

BatchDecodePlan BatchDecodePlan::create(const Runtime& rt, const Workspace& ws, const DecodeIndptrs& ip,
                                        const BatchDecodeConfig& c, cudaStream_t stream) {
  const Validator v("BatchDecodePlan::create");
  ops::check_heads(v, c.num_qo_heads, c.num_kv_heads, "num_qo_heads", "num_kv_heads");
  v.in_range(c.head_dim, "head_dim", 16, 512).divisible(c.head_dim, "head_dim", 16, "16");
  v.in_range(c.page_size, "page_size", 1, 1 << 16);
  const DType o_dtype = ops::check_plan_dtypes_and_layout(v, c.q_dtype, c.kv_dtype, c.o_dtype, c.layout);
  ops::check_window_and_cap(v, c.window_left, c.logits_soft_cap);
  const double sm_scale = ops::resolve_sm_scale(v, c.sm_scale, c.head_dim);
  const bool tc = decode_uses_tensor_cores(c.num_qo_heads, c.num_kv_heads, c.backend);
  if (!tc && !decode_group_supported(c.num_qo_heads, c.num_kv_heads))
    v.fail("backend", "cuda_cores supports GQA group sizes 1, 2, 3, 4, 8 only; got " +
                          std::to_string(c.num_qo_heads / c.num_kv_heads) + " (use tensor_cores or automatic)");
  ops::check_split_options(v, c.fixed_split_size, c.disable_split_kv, /*fa3=*/false);
  if (!tc && (c.fixed_split_size != -1 || c.disable_split_kv))
    v.fail("fixed_split_size", "and disable_split_kv need the tensor-core path (FlashInfer's decode plan has neither); "
                               "this plan runs on CUDA cores (group size " +
                                   std::to_string(c.num_qo_heads / c.num_kv_heads) + "): use backend tensor_cores");
  v.on_host(ip.kv_last_page_len, "kv_last_page_len").rank(ip.kv_last_page_len, "kv_last_page_len", 1);
  const int64_t batch = ip.kv_last_page_len.size(0);
  v.require(batch >= 1, "kv_last_page_len", "must have at least one entry (batch >= 1)");
  ops::AttentionPlanRequest req;
  ops::check_host_page_table(v, ip.kv_indptr, ip.kv_last_page_len, ip.kv_indices, batch, c.page_size, req);
  const int64_t reserved = tc ? align_up((batch + 1) * 4, 256) : 0;
  ops::check_workspace(v, ws, reserved);
  ops::check_plan_overlap(v, ws, {{&ip.kv_indptr, "kv_indptr"}, {&ip.kv_last_page_len, "kv_last_page_len"},
                                  {ip.kv_indices, "kv_indices"}});

  auto state = std::make_unique<State>();
  state->tensor_cores = tc;
  ops::AttentionPlanCore& core = state->core;
  core.ws = ws;
  core.device = ws.float_buffer.device;
  core.storage = KvStorage::paged;
  core.batch = batch;
  core.total_q = batch;
  core.kv_total = req.kv_total;
  core.max_page_index = req.max_page_index;
  core.num_qo_heads = c.num_qo_heads;
  core.num_kv_heads = c.num_kv_heads;
  core.head_dim_qk = core.head_dim_vo = c.head_dim;
  core.page_size = c.page_size;
  core.variant = jit::AttentionSpec{.q = c.q_dtype, .kv = c.kv_dtype, .o = o_dtype, .head_dim_qk = static_cast<int>(c.head_dim),
                                    .head_dim_vo = static_cast<int>(c.head_dim), .use_sliding_window = c.window_left != -1,
                                    .use_logits_soft_cap = c.logits_soft_cap > 0};
  core.layout = c.layout;
  core.mask_mode = ops::kMaskNone;
  core.window_left = c.window_left;
  core.logits_soft_cap = c.logits_soft_cap;
  core.sm_scale = sm_scale;
  core.enable_pdl = c.enable_pdl;
  core.enable_cuda_graph = c.enable_cuda_graph;

  if (tc) {
    // fa3 is built for long queries: with one query per request it ran at 26% of the copy ceiling on the
    // H200 against 103% for fa2, so the automatic choice for decode is fa2.
    core.fa3 = c.prefill_backend != AttentionBackend::automatic &&
               ops::choose_fa3(v, c.prefill_backend, core.variant, false, core.device.id);
    ops::check_split_options(v, c.fixed_split_size, c.disable_split_kv, core.fa3);
    if (core.fa3) core.variant.backend = jit::Backend::fa3;
    core.uri = jit::batch_prefill_uri(core.variant);
    core.mod = ops::resolve_module(
        rt, ops::module_key(core.fa3 ? ops::ModuleFamily::batch_prefill_fa3 : ops::ModuleFamily::batch_prefill_fa2, core.variant),
        [&] { return core.uri; }, {"plan", "ragged_run", "paged_run"});
    std::vector<int32_t> arange(static_cast<size_t>(batch + 1));
    for (size_t i = 0; i < arange.size(); ++i) arange[i] = static_cast<int32_t>(i);
    const TensorView qo_host = TensorView::contiguous(arange.data(), DType::i32, Device::cpu(), {batch + 1});
    req.qo_indptr = &qo_host;
    req.kv_indptr = &ip.kv_indptr;
    req.causal = false;
    req.reserved_int_bytes = reserved;
    req.fixed_split_size = c.fixed_split_size;
    req.disable_split_kv = c.disable_split_kv;
    ops::run_attention_plan(core, req, v, stream);
    // The query indptr 0..batch lives in the int workspace's reserved tail; its pinned twin is written
    // here and copied on the plan's stream (a later plan writes the same prefix, so reuse is safe).
    const int64_t int_bytes = ws.int_buffer.numel() * dtype_size(ws.int_buffer.dtype);
    auto* pinned_tail = static_cast<char*>(ws.pinned_int_buffer.data) + (int_bytes - reserved);
    auto* device_tail = static_cast<char*>(ws.int_buffer.data) + (int_bytes - reserved);
    std::memcpy(pinned_tail, arange.data(), arange.size() * sizeof(int32_t));
    {
      DeviceGuard guard(core.device.id);
      FLASHCPP_CUDA_CHECK(
          cudaMemcpyAsync(device_tail, pinned_tail, arange.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    }
    state->qo_arange = TensorView::contiguous(device_tail, DType::i32, core.device, {batch + 1});
    return BatchDecodePlan(std::move(state));
  }

  core.uri = jit::batch_decode_uri(core.variant);
  core.mod = ops::resolve_module(rt, ops::module_key(ops::ModuleFamily::batch_decode, core.variant),
                                 [&] { return core.uri; }, {"plan", "run"});
  const int64_t int_bytes = ws.int_buffer.numel() * dtype_size(ws.int_buffer.dtype);
  core.float_ws = TensorView::contiguous(ws.float_buffer.data, DType::u8, core.device,
                                         {ws.float_buffer.numel() * dtype_size(ws.float_buffer.dtype)});
  core.int_ws = TensorView::contiguous(ws.int_buffer.data, DType::u8, core.device, {int_bytes});
  const TensorView pinned = TensorView::contiguous(ws.pinned_int_buffer.data, DType::u8, Device::cpu(), {int_bytes});
  // FlashInfer only reads the dtypes of these two (Python passes 0-element tensors).
  const TensorView empty_q = TensorView::contiguous(nullptr, c.q_dtype, Device::cpu(), {0});
  const TensorView empty_kv = TensorView::contiguous(nullptr, c.kv_dtype, Device::cpu(), {0});
  ffi::Any result;
  ffi::invoke(core.mod.fns[0], ffi::StreamBinding{core.device, stream}, &result, core.float_ws, core.int_ws, pinned,
              ops::as_cpu(ip.kv_indptr), batch, c.num_qo_heads, c.num_kv_heads, c.page_size, c.enable_cuda_graph,
              c.window_left, c.logits_soft_cap, c.head_dim, c.head_dim, empty_q, empty_kv);
  if (result.type_index() < ffi::abi::kStaticObjectBegin)
    throw Error(ErrorCode::ffi_error, "BatchDecodePlan::create: FlashInfer's plan returned no plan-info array");
  core.plan_info = ffi::Array(result.take_object());
  if (core.plan_info.size() != 10)
    throw Error(ErrorCode::ffi_error, "BatchDecodePlan::create: FlashInfer's plan returned " +
                                          std::to_string(core.plan_info.size()) + " plan-info entries; expected 10");
  return BatchDecodePlan(std::move(state));
}

void BatchDecodePlan::run(const TensorView& q, const PagedKvCache& kv, const TensorView& out, OptionalTensor lse,
                          cudaStream_t stream) const {
  const Validator v("BatchDecodePlan::run");
  ops::check_plan_alive(v, s_.get());
  const ops::AttentionPlanCore& core = s_->core;
  if (s_->tensor_cores) {
    ops::run_paged_attention(core, v, q, kv, s_->qo_arange, out, lse, stream);
    return;
  }
  ops::check_run_io(core, v, q, out, lse);  // total_q is the batch: one query per request
  ops::check_planned_paged_cache(v, kv, q, core);
  ops::check_run_overlap(core, v, out, lse,
                         {{&q, "q"}, {&kv.k_cache, "k_cache"}, {&kv.v_cache, "v_cache"}, {&kv.indices, "indices"},
                          {&kv.indptr, "indptr"}, {&kv.last_page_len, "last_page_len"}});

  ffi::invoke(core.mod.fns[1], ffi::StreamBinding{core.device, stream}, nullptr, core.float_ws, core.int_ws,
              core.plan_info, q, kv.k_cache, kv.v_cache, kv.indptr, kv.indices, kv.last_page_len, out, lse,
              static_cast<int64_t>(core.layout), core.window_left, core.enable_pdl, nullptr, core.logits_soft_cap,
              core.sm_scale, ops::kRopeRcpScale, ops::kRopeRcpTheta);
}

bool BatchDecodePlan::uses_tensor_cores() const { return s_->tensor_cores; }
AttentionBackend BatchDecodePlan::prefill_backend() const {
  return s_->core.fa3 ? AttentionBackend::fa3 : AttentionBackend::fa2;
}
const std::string& BatchDecodePlan::module_uri() const { return s_->core.uri; }
int64_t BatchDecodePlan::batch_size() const { return s_->core.batch; }
std::vector<int64_t> BatchDecodePlan::plan_info() const { return s_->core.plan_info.to_int64(); }

}  // namespace flashcpp
