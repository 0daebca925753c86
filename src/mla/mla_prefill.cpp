// Sparse MLA prefill, host side (include/flashcpp/mla.hpp): validation before anything is launched or written,
// then one launch on the kernel the selector picks.
#include <string>
#include "core/check.hpp"
#include "flashcpp/mla.hpp"
#include "mla/mla_host.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla {
using namespace detail;

// ---------------------------------------------------------------------------------------------------
// Prefill

void sparse_prefill(const SparsePrefillTensors& tensors, const SparsePrefillOptions& options, cudaStream_t stream) {
  const Validator v("mla::sparse_prefill");
  const auto& [q, kv, indices, attn_sink, topk_length, out, max_logits, lse] = tensors;
  if (options.sm_scale) v.positive(*options.sm_scale, "sm_scale");
  if (options.d_v != kDv) v.fail("d_v", "must be 512; got " + std::to_string(options.d_v));

  cuda_tensor(v, q, "q", {DType::bf16}, 3);
  v.last_dim_contiguous(q, "q");
  const int64_t s_q = q.size(0), h_q = q.size(1), d_qk = q.size(2);
  if (d_qk != 512 && d_qk != 576) v.fail("q", q, "must have d_qk (dim 2) 512 or 576");
  if (h_q < 1 || h_q > kMaxHeads) v.fail("q", q, "must have h_q (dim 1) in [1, 1024]");
  if (s_q > INT32_MAX) v.fail("q", q, "must have s_q (dim 0) <= 2^31 - 1");
  vector_aligned(v, q, "q");

  cuda_tensor(v, kv, "kv", {DType::bf16}, 3);
  v.same_device(kv, "kv", q, "q").dim(kv, "kv", 1, 1, "h_kv").dim(kv, "kv", 2, d_qk, "q.size(2)");
  v.last_dim_contiguous(kv, "kv");
  vector_aligned(v, kv, "kv");

  cuda_tensor(v, indices, "indices", {DType::i32}, 3);
  v.same_device(indices, "indices", q, "q").dim(indices, "indices", 0, s_q, "q.size(0)");
  v.dim(indices, "indices", 1, 1, "h_kv").last_dim_contiguous(indices, "indices").aligned(indices, "indices", 4);
  validate_topk(v, indices.size(2), "indices");

  cuda_tensor(v, out, "out", {DType::bf16}, 3);
  v.same_device(out, "out", q, "q").shape(out, "out", {s_q, h_q, kDv}).last_dim_contiguous(out, "out");
  v.aligned(out, "out", 2);
  cuda_tensor(v, lse, "lse", {DType::f32}, 2);
  v.same_device(lse, "lse", q, "q").shape(lse, "lse", {s_q, h_q}).aligned(lse, "lse", 4);
  if (max_logits != nullptr) {
    cuda_tensor(v, *max_logits, "max_logits", {DType::f32}, 2);
    v.same_device(*max_logits, "max_logits", q, "q").shape(*max_logits, "max_logits", {s_q, h_q});
    v.aligned(*max_logits, "max_logits", 4);
  }
  optional_vector(v, attn_sink, "attn_sink", DType::f32, h_q, q, "q.size(1)");
  optional_vector(v, topk_length, "topk_length", DType::i32, s_q, q, "q.size(0)");
  v.no_overlap({{&out, "out"}, {&lse, "lse"}, {max_logits, "max_logits"}},
               {{&q, "q"}, {&kv, "kv"}, {&indices, "indices"}, {attn_sink, "attn_sink"},
                {topk_length, "topk_length"}});

  require_supported("mla::sparse_prefill", q.device.id);
  if (s_q == 0) return;

  kernels::SparseAttentionParams p = attention_params(0, s_q, q, indices, out, lse, attn_sink,
                                                      resolved_sm_scale(options.sm_scale, d_qk));
  p.topk_length = topk_length ? topk_length->data_as<const int32_t>() : nullptr;
  p.tokens_per_length = 1;
  p.kv_format = kernels::KvFormat::bf16;
  p.kv = kv.data;
  p.num_kv = kv.size(0);
  p.kv_row_stride = kv.stride(0);
  if (max_logits != nullptr) {
    p.max_logits = max_logits->data_as<float>();
    p.max_logits_stride_token = max_logits->stride(0);
    p.max_logits_stride_head = max_logits->stride(1);
  }
  DeviceGuard guard(q.device.id);
  run_attention(p, stream, q.device.id);
}

SparsePrefillOutputs sparse_prefill(const TensorView& q, const TensorView& kv, const TensorView& indices,
                                    OptionalTensor attn_sink, OptionalTensor topk_length,
                                    const SparsePrefillOptions& options, cudaStream_t stream) {
  const Validator v("mla::sparse_prefill");
  cuda_tensor(v, q, "q", {DType::bf16}, 3);
  const int64_t s_q = q.size(0), h_q = q.size(1);
  const int dev = q.device.id;
  require_supported("mla::sparse_prefill", dev);  // an unknown device is refused before allocating on it
  SparsePrefillOutputs o;
  o.out = DeviceBuffer(static_cast<size_t>(s_q * h_q * kDv * 2), dev);
  o.max_logits = DeviceBuffer(static_cast<size_t>(s_q * h_q * 4), dev);
  o.lse = DeviceBuffer(static_cast<size_t>(s_q * h_q * 4), dev);
  o.out_view = TensorView::contiguous(o.out.get(), DType::bf16, q.device, {s_q, h_q, kDv});
  o.max_logits_view = TensorView::contiguous(o.max_logits.get(), DType::f32, q.device, {s_q, h_q});
  o.lse_view = TensorView::contiguous(o.lse.get(), DType::f32, q.device, {s_q, h_q});
  sparse_prefill({.q = q, .kv = kv, .indices = indices, .attn_sink = attn_sink, .topk_length = topk_length,
                  .out = o.out_view, .max_logits = &o.max_logits_view, .lse = o.lse_view},
                 options, stream);
  return o;
}

}  // namespace flashcpp::mla
