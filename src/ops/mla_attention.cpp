// Batch MLA paged attention: validation, URI selection, plan/run packing (facts sheet A.9, A.11, B.4).
#include "flashcpp/mla_attention.hpp"

#include <cmath>
#include <mutex>

#include "core/check.hpp"
#include "ffi/ffi.hpp"
#include "ops/common.hpp"
#include "runtime/runtime_internal.hpp"

namespace flashcpp {

namespace {
constexpr const char* kPlanOp = "batch_mla_plan";
constexpr const char* kRunOp = "batch_mla_run";
constexpr int64_t kMaskNonCausal = 0, kMaskCausal = 1;

MlaBackend resolve_backend(MlaBackend requested, int device) {
  if (requested == MlaBackend::fa2) return requested;
  const DeviceFacts& f = device_facts(device);
  if (requested == MlaBackend::automatic) return f.cc_major == 9 ? MlaBackend::sm90 : MlaBackend::fa2;
  if (f.cc_major != 9)
    throw Error(ErrorCode::unsupported, std::string(kPlanOp) + ": backend sm90 needs compute capability 9.x; device " +
                                            std::to_string(device) + " is " + std::to_string(f.cc_major) + "." +
                                            std::to_string(f.cc_minor) + " (use MlaBackend::fa2 or automatic)");
  return requested;
}

TensorView as_cpu(TensorView t) {
  t.device = Device::cpu();
  return t;
}

void validate_workspace(const Validator& v, const Workspace& ws) {
  const TensorView& fw = ws.float_buffer;
  const TensorView& iw = ws.int_buffer;
  const TensorView& pw = ws.pinned_int_buffer;
  // Names as in flashcpp::Workspace.
  v.defined(fw, "float_buffer").on_cuda(fw, "float_buffer").dtype(fw, "float_buffer", {DType::u8})
      .rank(fw, "float_buffer", 1).contiguous(fw, "float_buffer");
  ops::check_device_id(v, fw.device.id, "float_buffer");  // the plan's device
  v.require(fw.numel() > 0, "float_buffer", "must not be empty");
  v.defined(iw, "int_buffer").on_cuda(iw, "int_buffer").dtype(iw, "int_buffer", {DType::u8})
      .rank(iw, "int_buffer", 1).contiguous(iw, "int_buffer").same_device(iw, "int_buffer", fw, "float_buffer");
  v.require(iw.numel() > 0, "int_buffer", "must not be empty");
  v.defined(pw, "pinned_int_buffer").on_host(pw, "pinned_int_buffer")
      .dtype(pw, "pinned_int_buffer", {DType::u8}).rank(pw, "pinned_int_buffer", 1)
      .contiguous(pw, "pinned_int_buffer").min_bytes(pw, "pinned_int_buffer", iw.numel());
  v.require(pw.data != nullptr, "pinned_int_buffer", "must not be null");
}
}  // namespace

std::string batch_mla_uri(DType q, DType kv, DType o, MlaBackend backend) {
  if (backend == MlaBackend::automatic)
    throw Error(ErrorCode::invalid_argument, "batch_mla_uri: argument 'backend' must be fa2 or sm90, not automatic");
  std::string uri = "batch_mla_attention_dtype_q_" + std::string(dtype_name(q)) + "_dtype_kv_" +
                    std::string(dtype_name(kv)) + "_dtype_o_" + std::string(dtype_name(o)) +
                    "_dtype_idx_i32_head_dim_ckv_" + std::to_string(kMlaHeadDimCkv) + "_head_dim_kpe_" +
                    std::to_string(kMlaHeadDimKpe) + "_profiler_False";
  if (backend == MlaBackend::sm90) uri += "_sm90";
  return uri;
}

struct BatchMlaPlan::State {
  std::shared_ptr<ffi::ModuleLibrary> module;
  ffi::abi::SafeCall run_fn = nullptr;
  ffi::Array plan_info;
  BatchMlaConfig config;
  Workspace workspace;
  std::string uri;
  Device device;
  int64_t batch = 0, total_q = 0, total_pages = 0;
  double sm_scale = 0.0;
};

BatchMlaPlan::BatchMlaPlan(std::unique_ptr<State> s) : s_(std::move(s)) {}
BatchMlaPlan::BatchMlaPlan(BatchMlaPlan&&) noexcept = default;
BatchMlaPlan& BatchMlaPlan::operator=(BatchMlaPlan&&) noexcept = default;
BatchMlaPlan::~BatchMlaPlan() = default;

BatchMlaPlan BatchMlaPlan::create(const Runtime& rt, const Workspace& ws, const TensorView& qo_indptr_host,
                                  const TensorView& kv_indptr_host, const TensorView& kv_len_host,
                                  const BatchMlaConfig& cfg, cudaStream_t stream) {
  const Validator v(kPlanOp);
  v.in_range(cfg.num_heads, "config.num_heads", 1, 1 << 16);
  v.in_range(cfg.page_size, "config.page_size", 1, 1 << 20);
  v.require(cfg.q_dtype == DType::f16 || cfg.q_dtype == DType::bf16, "config.q_dtype",
            "must be f16 or bf16; got " + std::string(dtype_name(cfg.q_dtype)));
  v.require(cfg.kv_dtype == cfg.q_dtype, "config.kv_dtype",
            "must equal config.q_dtype (" + std::string(dtype_name(cfg.q_dtype)) + "); got " +
                std::string(dtype_name(cfg.kv_dtype)));
  if (cfg.sm_scale) v.positive(*cfg.sm_scale, "config.sm_scale");
  validate_workspace(v, ws);

  // Host index arrays: kv_len decides the batch size (as FlashInfer's plan does).
  v.on_host(kv_len_host, "kv_len_host").dtype(kv_len_host, "kv_len_host", {DType::i32}).rank(kv_len_host, "kv_len_host", 1)
      .contiguous(kv_len_host, "kv_len_host");
  const int64_t batch = kv_len_host.size(0);
  v.require(batch >= 1, "kv_len_host", "must have at least one request");
  v.require(kv_len_host.data != nullptr, "kv_len_host", "must not be null");
  v.require(qo_indptr_host.data != nullptr, "qo_indptr_host", "must not be null");
  v.require(kv_indptr_host.data != nullptr, "kv_indptr_host", "must not be null");
  v.indptr(qo_indptr_host, "qo_indptr_host", batch + 1);
  v.indptr(kv_indptr_host, "kv_indptr_host", batch + 1);
  const int32_t* qo = qo_indptr_host.data_as<const int32_t>();
  const int32_t* kvp = kv_indptr_host.data_as<const int32_t>();
  const int32_t* kvl = kv_len_host.data_as<const int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pages = kvp[b + 1] - kvp[b];
    const int64_t len = kvl[b];
    const std::string at = "entry " + std::to_string(b);
    if (len < 0) v.fail("kv_len_host", at + " is " + std::to_string(len) + "; lengths must be >= 0");
    if (len > pages * cfg.page_size)
      v.fail("kv_len_host", at + " is " + std::to_string(len) + " tokens but request " + std::to_string(b) + " has " +
                                std::to_string(pages) + " pages of " + std::to_string(cfg.page_size) + " tokens");
    const int64_t qlen = qo[b + 1] - qo[b];
    if (cfg.causal && len < qlen)
      v.fail("kv_len_host", at + " is " + std::to_string(len) + ", fewer than the request's " + std::to_string(qlen) +
                                " query rows; a causal plan needs kv_len >= qo_len");
  }

  // Planning writes the three workspace buffers.
  v.no_overlap({{&ws.float_buffer, "float_buffer"}, {&ws.int_buffer, "int_buffer"},
                {&ws.pinned_int_buffer, "pinned_int_buffer"}},
               {{&qo_indptr_host, "qo_indptr_host"}, {&kv_indptr_host, "kv_indptr_host"}, {&kv_len_host, "kv_len_host"}});

  const Device device = ws.float_buffer.device;
  auto st = std::make_unique<State>();
  st->config = cfg;
  st->config.backend = resolve_backend(cfg.backend, device.id);
  st->workspace = ws;
  st->device = device;
  st->batch = batch;
  st->total_q = qo[batch];
  st->total_pages = kvp[batch];
  st->sm_scale = cfg.sm_scale ? *cfg.sm_scale : 1.0 / std::sqrt(double(kMlaHeadDimCkv + kMlaHeadDimKpe));
  st->uri = batch_mla_uri(cfg.q_dtype, cfg.kv_dtype, cfg.q_dtype, st->config.backend);
  st->module = load_module(rt, st->uri);
  const ffi::abi::SafeCall plan_fn = st->module->function("plan");
  st->run_fn = st->module->function("run");

  // Host arrays go as kDLCPU tensors (what FlashInfer's Python passes for pinned and host memory).
  ffi::Any result;
  ffi::invoke(plan_fn, ffi::StreamBinding{device, stream}, &result, ws.float_buffer, ws.int_buffer,
              as_cpu(ws.pinned_int_buffer), as_cpu(qo_indptr_host), as_cpu(kv_indptr_host), as_cpu(kv_len_host),
              cfg.num_heads, kMlaHeadDimCkv, cfg.causal);
  st->plan_info = ffi::Array(result.take_object());
  return BatchMlaPlan(std::move(st));
}

void BatchMlaPlan::run(const TensorView& q_nope, const TensorView& q_pe, const TensorView& ckv, const TensorView& kpe,
                       const TensorView& kv_indices, const TensorView& out, OptionalTensor lse,
                       cudaStream_t stream) const {
  const Validator v(kRunOp);
  ops::check_plan_alive(v, s_.get());
  const State& s = *s_;
  const int64_t n = s.total_q, H = s.config.num_heads, P = s.config.page_size;
  const TensorView& ref = s.workspace.float_buffer;
  auto dense_tensor = [&](const TensorView& t, const char* name, DType dt, std::initializer_list<int64_t> shape) {
    v.defined(t, name).on_cuda(t, name).same_device(t, name, ref, "workspace.float_buffer (the plan's device)");
    v.dtype(t, name, {dt}).shape(t, name, shape).last_dim_contiguous(t, name).no_negative_strides(t, name);
    v.aligned(t, name, 16);
    for (int d = 0; d + 1 < t.rank; ++d)
      if (t.stride(d) % 8 != 0) v.fail(name, t, "must have strides that are multiples of 8 elements (16 bytes)");
  };
  dense_tensor(q_nope, "q_nope", s.config.q_dtype, {n, H, kMlaHeadDimCkv});
  dense_tensor(q_pe, "q_pe", s.config.q_dtype, {n, H, kMlaHeadDimKpe});
  dense_tensor(ckv, "ckv_cache", s.config.kv_dtype, {-1, P, kMlaHeadDimCkv});
  dense_tensor(kpe, "kpe_cache", s.config.kv_dtype, {ckv.rank == 3 ? ckv.size(0) : -1, P, kMlaHeadDimKpe});
  dense_tensor(out, "out", s.config.q_dtype, {n, H, kMlaHeadDimCkv});
  v.defined(kv_indices, "kv_indices").on_cuda(kv_indices, "kv_indices")
      .same_device(kv_indices, "kv_indices", ref, "workspace.float_buffer (the plan's device)")
      .dtype(kv_indices, "kv_indices", {DType::i32}).rank(kv_indices, "kv_indices", 1).contiguous(kv_indices, "kv_indices");
  if (kv_indices.size(0) < s.total_pages)
    v.fail("kv_indices", kv_indices, "must hold at least " + std::to_string(s.total_pages) +
                                         " page ids (kv_indptr[batch] of the plan)");
  if (lse) {
    v.defined(*lse, "lse").on_cuda(*lse, "lse").same_device(*lse, "lse", ref, "workspace.float_buffer (the plan's device)")
        .dtype(*lse, "lse", {DType::f32}).shape(*lse, "lse", {n, H}).contiguous(*lse, "lse");
  }
  // A run writes out, lse and the float workspace and reads the plan from the int workspace.
  v.no_overlap({{&out, "out"}, {lse, "lse"}, {&s.workspace.float_buffer, "workspace.float_buffer"},
                {&s.workspace.int_buffer, "workspace.int_buffer"}},
               {{&q_nope, "q_nope"}, {&q_pe, "q_pe"}, {&ckv, "ckv_cache"}, {&kpe, "kpe_cache"},
                {&kv_indices, "kv_indices"}});

  ffi::invoke(s.run_fn, ffi::StreamBinding{s.device, stream}, nullptr, s.workspace.float_buffer,
              s.workspace.int_buffer, s.plan_info, q_nope, q_pe, ckv, kpe, kv_indices, out, lse,
              s.config.causal ? kMaskCausal : kMaskNonCausal, H, P, s.sm_scale, s.config.return_lse_base_on_e);
}

int64_t BatchMlaPlan::batch_size() const { return s_->batch; }
int64_t BatchMlaPlan::total_q_rows() const { return s_->total_q; }
int64_t BatchMlaPlan::total_pages() const { return s_->total_pages; }
MlaBackend BatchMlaPlan::backend() const { return s_->config.backend; }
const std::string& BatchMlaPlan::uri() const { return s_->uri; }
const BatchMlaConfig& BatchMlaPlan::config() const { return s_->config; }
std::vector<int64_t> BatchMlaPlan::plan_info() const { return s_->plan_info.to_int64(); }

}  // namespace flashcpp
