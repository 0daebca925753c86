// The batch attention plan core that batch prefill and the tensor-core path of batch decode share (FlashInfer's
// batch-prefill modules): backend choice, workspace and host page-table checks, `plan`, and the validated paged run.
#include <algorithm>
#include <string>

#include "ops/attention_plan.hpp"

namespace flashcpp::ops {

// -------------------------------------------------------------------------------------------------
// Backend choice, workspace and plan checks

bool fa3_variant_exists(const jit::AttentionSpec& v) {
  const bool sixteen = v.q == DType::f16 || v.q == DType::bf16;
  const bool dims = (v.head_dim_qk == v.head_dim_vo &&
                     (v.head_dim_qk == 64 || v.head_dim_qk == 128 || v.head_dim_qk == 256)) ||
                    (v.head_dim_qk == 192 && v.head_dim_vo == 128);
  return sixteen && v.kv == v.q && v.o == v.q && dims && !v.use_fp16_qk_reduction;
}

namespace {
// Compute capability major of device `id`, or -1 when it is unknown (no such device).
int device_cc_major(int id) noexcept {
  try {
    return device_facts(id).cc_major;
  } catch (...) {
    return -1;
  }
}
}  // namespace

bool choose_fa3(const Validator& v, AttentionBackend backend, const jit::AttentionSpec& var, bool ragged_hnd,
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

void check_split_options(const Validator& v, int64_t fixed_split_size, bool disable_split_kv, bool fa3) {
  if (fixed_split_size < -1 || fixed_split_size == 0)
    v.fail("fixed_split_size", "must be -1 (off) or > 0; got " + std::to_string(fixed_split_size));
  if (fa3 && (fixed_split_size != -1 || disable_split_kv))
    v.fail("fixed_split_size", "and disable_split_kv are fa2 options; use backend fa2");
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

void run_attention_plan(AttentionPlanCore& core, const AttentionPlanRequest& req, const Validator& v, cudaStream_t stream) {
  const int64_t int_bytes = core.ws.int_buffer.numel() * dtype_size(core.ws.int_buffer.dtype);
  core.float_ws = bytes_view(core.ws.float_buffer, core.ws.float_buffer.numel() * dtype_size(core.ws.float_buffer.dtype));
  core.int_ws = bytes_view(core.ws.int_buffer, int_bytes - req.reserved_int_bytes);
  const TensorView pinned = as_cpu(bytes_view(core.ws.pinned_int_buffer, int_bytes - req.reserved_int_bytes));
  const TensorView kv_len_view = TensorView::contiguous(const_cast<int32_t*>(req.kv_len_arr.data()), DType::i32,
                                                        Device::cpu(), {static_cast<int64_t>(req.kv_len_arr.size())});
  ffi::Any result;
  // FlashInfer's `plan`: 16 arguments both backends take, then fa2's split-KV controls (19 in all).
  auto plan = [&](auto... fa2_tail) {
    ffi::invoke(core.mod.fns[0], ffi::StreamBinding{core.device, stream}, &result, core.float_ws, core.int_ws, pinned,
                as_cpu(*req.qo_indptr), as_cpu(*req.kv_indptr), kv_len_view, core.total_q, core.batch,
                core.num_qo_heads, core.num_kv_heads, core.page_size, core.enable_cuda_graph, core.head_dim_qk,
                core.head_dim_vo, req.causal, core.window_left, fa2_tail...);
  };
  if (core.fa3)
    plan();
  else
    plan(req.fixed_split_size, req.disable_split_kv, int64_t{0});
  if (result.type_index() < ffi::abi::kStaticObjectBegin)
    throw Error(ErrorCode::ffi_error, std::string(v.op()) + ": FlashInfer's plan returned no plan-info array");
  core.plan_info = ffi::Array(result.take_object());
  const int64_t expected = core.fa3 ? 9 : 15;
  if (core.plan_info.size() != expected)
    throw Error(ErrorCode::ffi_error, std::string(v.op()) + ": FlashInfer's plan returned " +
                                          std::to_string(core.plan_info.size()) + " plan-info entries; expected " +
                                          std::to_string(expected) + " (module " + core.uri + ")");
}

void check_run_io(const AttentionPlanCore& core, const Validator& v, const TensorView& q, const TensorView& out,
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

void check_run_overlap(const AttentionPlanCore& core, const Validator& v, const TensorView& out, OptionalTensor lse,
                       std::initializer_list<Validator::Named> inputs) {
  // A run writes out, lse and the float workspace and reads the plan from the int workspace: none of them
  // may share a byte with another argument.
  v.no_overlap({{&out, "out"}, {lse, "lse"}, {&core.float_ws, "workspace.float_buffer"},
                {&core.int_ws, "workspace.int_buffer"}},
               inputs);
}

void run_paged_attention(const AttentionPlanCore& core, const Validator& v, const TensorView& q, const PagedKvCache& kv,
                       const TensorView& qo_indptr, const TensorView& out, OptionalTensor lse, cudaStream_t stream) {
  if (core.storage != KvStorage::paged) v.fail("plan", "was made for ragged KV; call run_ragged");
  check_run_io(core, v, q, out, lse);
  check_planned_paged_cache(v, kv, q, core);
  check_device_index_array(v, qo_indptr, "qo_indptr", core.batch + 1, q, "q");
  check_run_overlap(core, v, out, lse,
                    {{&q, "q"}, {&kv.k_cache, "k_cache"}, {&kv.v_cache, "v_cache"}, {&kv.indices, "indices"},
                     {&kv.indptr, "indptr"}, {&kv.last_page_len, "last_page_len"}, {&qo_indptr, "qo_indptr"}});
  if (core.total_q == 0) return;

  // `paged_run`: fa3 24 arguments, fa2 27.
  invoke_batch_run(core, core.mod.fns[2], stream, out, lse, q, kv.k_cache, kv.v_cache, qo_indptr, kv.indptr,
                   kv.indices, kv.last_page_len);
}

// -------------------------------------------------------------------------------------------------
// Host page table

/// Host page table checks shared by prefill and decode plans; fills kv_len_arr, kv_total, max_page_index.
void check_host_page_table(const Validator& v, const TensorView& kv_indptr, const TensorView& last_page_len,
                           OptionalTensor kv_indices, int64_t batch, int64_t page_size, AttentionPlanRequest& req) {
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

}  // namespace flashcpp::ops
