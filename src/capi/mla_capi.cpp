// C ABI for sparse MLA: converts the C structs to TensorViews and calls the C++ API under capi::guard().
#include "flashcpp/c/mla.h"

#include <string>

#include "capi/capi.hpp"
#include "flashcpp/mla.hpp"

namespace {

using flashcpp::TensorView;
using flashcpp::capi::require_non_null;
namespace mla = flashcpp::mla;

mla::DecodeConfig to_config(const flashcpp_mla_decode_config* c) {
  mla::DecodeConfig d;
  d.batch = c->batch;
  d.s_q = c->s_q;
  d.h_q = c->h_q;
  d.d_qk = c->d_qk;
  d.topk = c->topk;
  d.num_sms = c->num_sms;
  d.extra_topk = c->extra_topk;
  return d;
}

// The bytes of a size-prefixed struct the library knows of `T` that the caller's `struct_size` covers;
// a caller built against a newer header (a larger struct) is refused rather than having fields ignored.
template <class T>
void check_struct_size(uint32_t struct_size, size_t first_version_size, const char* op, const char* name) {
  if (struct_size < first_version_size || struct_size > sizeof(T))
    throw flashcpp::Error(flashcpp::ErrorCode::invalid_argument,
                          std::string(op) + ": argument '" + name + "' has struct_size " + std::to_string(struct_size) +
                              "; it must be in [" + std::to_string(first_version_size) + ", " +
                              std::to_string(sizeof(T)) + "] (set it to sizeof, or use the _INIT initializer)");
}

// The device rule every decode entry shares: q (a CUDA tensor) on config->device_id.
void check_config_device(const flashcpp_mla_decode_config* config, const TensorView& q, const char* op) {
  if (q.device.type == flashcpp::DeviceType::cuda && q.device.id != config->device_id)
    throw flashcpp::Error(flashcpp::ErrorCode::invalid_argument,
                          std::string(op) + ": argument 'q' must be on config->device_id (" +
                              std::to_string(config->device_id) + "); got " + q.describe());
}

// The plan buffers of a decode workspace (each optional: NULL when the plan is not split).
void plan_buffers(mla::DecodeWorkspace& ws, const flashcpp_tensor* sched_meta, const flashcpp_tensor* num_splits,
                  const flashcpp_tensor* lse_accum, const flashcpp_tensor* o_accum, const char* op) {
  flashcpp::capi::to_optional_view(sched_meta, op, "sched_meta", ws.sched_meta);
  flashcpp::capi::to_optional_view(num_splits, op, "num_splits", ws.num_splits);
  flashcpp::capi::to_optional_view(lse_accum, op, "lse_accum", ws.lse_accum);
  flashcpp::capi::to_optional_view(o_accum, op, "o_accum", ws.o_accum);
}

void fill_sizes(const mla::DecodePlanSizes& s, flashcpp_mla_decode_plan_sizes* out) {
  flashcpp_mla_decode_plan_sizes r{};
  r.num_sm_parts = s.num_sm_parts;
  r.split = s.split ? 1 : 0;
  r.sched_meta_elems = s.sched_meta_elems;
  r.num_splits_elems = s.num_splits_elems;
  r.lse_accum_elems = s.lse_accum_elems;
  r.o_accum_elems = s.o_accum_elems;
  *out = r;
}

}  // namespace

extern "C" {

flashcpp_status flashcpp_mla_get_device_info(int32_t device_id, flashcpp_mla_device_info* info) {
  return flashcpp::capi::guard([&] {
    require_non_null(info, "flashcpp_mla_get_device_info", "info");
    const mla::MlaDeviceSupport s = mla::device_support(device_id);
    flashcpp_mla_device_info r{};
    r.device_id = s.device_id;
    r.cc_major = s.cc_major;
    r.cc_minor = s.cc_minor;
    r.sm_count = s.sm_count;
    r.sparse_supported = s.sparse_supported ? 1 : 0;
    r.hopper_kernel = s.hopper_kernel ? 1 : 0;
    *info = r;
  });
}

flashcpp_status flashcpp_mla_sparse_prefill(const flashcpp_tensor* q, const flashcpp_tensor* kv,
                                            const flashcpp_tensor* indices, const flashcpp_tensor* attn_sink,
                                            const flashcpp_tensor* topk_length, const flashcpp_tensor* out,
                                            const flashcpp_tensor* max_logits, const flashcpp_tensor* lse,
                                            const flashcpp_mla_prefill_params* params, void* stream) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_sparse_prefill";
    require_non_null(params, op, "params");
    const TensorView qv = flashcpp::capi::to_view(q, op, "q");
    const TensorView kvv = flashcpp::capi::to_view(kv, op, "kv");
    const TensorView iv = flashcpp::capi::to_view(indices, op, "indices");
    const TensorView ov = flashcpp::capi::to_view(out, op, "out");
    const TensorView lv = flashcpp::capi::to_view(lse, op, "lse");
    TensorView sink, len, ml;
    mla::SparsePrefillParams p;
    p.sm_scale = params->sm_scale;
    p.d_v = params->d_v;
    if (flashcpp::capi::to_optional_view(attn_sink, op, "attn_sink", sink)) p.attn_sink = &sink;
    if (flashcpp::capi::to_optional_view(topk_length, op, "topk_length", len)) p.topk_length = &len;
    const bool has_ml = flashcpp::capi::to_optional_view(max_logits, op, "max_logits", ml);
    mla::sparse_prefill(qv, kvv, iv, ov, has_ml ? &ml : nullptr, lv, p, static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_mla_decode_plan(const flashcpp_mla_decode_config* config, const flashcpp_tensor* sched_meta,
                                         const flashcpp_tensor* num_splits, flashcpp_mla_decode_plan_sizes* sizes,
                                         void* stream) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_decode_plan";
    require_non_null(config, op, "config");
    const mla::DecodeConfig c = to_config(config);
    (void)mla::decode_plan_sizes(c, 1);  // validates the config before anything touches the device
    if ((sched_meta == nullptr) != (num_splits == nullptr))
      throw flashcpp::Error(flashcpp::ErrorCode::invalid_argument,
                            std::string(op) + ": arguments 'sched_meta' and 'num_splits' must both be NULL (size query) "
                                              "or both be given");
    if (sched_meta == nullptr) {
      // Size query: no device work. num_sms comes from the config, or the device when it is 0.
      mla::DecodePlanSizes s;
      if (c.num_sms > 0) {
        s = mla::decode_plan_sizes(c, c.num_sms);
      } else {
        s = mla::decode_plan_sizes(c, mla::device_support(config->device_id).sm_count);
      }
      if (sizes != nullptr) fill_sizes(s, sizes);
      return;
    }
    mla::DecodeWorkspace ws;
    ws.config = c;
    ws.sched_meta = flashcpp::capi::to_view(sched_meta, op, "sched_meta");
    ws.num_splits = flashcpp::capi::to_view(num_splits, op, "num_splits");
    const int n = c.num_sms > 0 ? c.num_sms : mla::device_support(config->device_id).sm_count;
    const mla::DecodePlanSizes s = mla::decode_plan_sizes(c, n);
    mla::decode_plan(ws, config->device_id, static_cast<cudaStream_t>(stream));
    if (sizes != nullptr) fill_sizes(s, sizes);
  });
}

flashcpp_status flashcpp_mla_sparse_decode(const flashcpp_mla_decode_config* config, const flashcpp_tensor* q,
                                           const flashcpp_tensor* kv_cache, const flashcpp_tensor* indices,
                                           const flashcpp_tensor* attn_sink, const flashcpp_tensor* topk_length,
                                           const flashcpp_tensor* out, const flashcpp_tensor* lse,
                                           const flashcpp_tensor* sched_meta, const flashcpp_tensor* num_splits,
                                           const flashcpp_tensor* lse_accum, const flashcpp_tensor* o_accum,
                                           const flashcpp_mla_decode_params* params, void* stream) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_sparse_decode";
    require_non_null(config, op, "config");
    require_non_null(params, op, "params");
    const TensorView qv = flashcpp::capi::to_view(q, op, "q");
    const TensorView kvv = flashcpp::capi::to_view(kv_cache, op, "kv_cache");
    const TensorView iv = flashcpp::capi::to_view(indices, op, "indices");
    const TensorView ov = flashcpp::capi::to_view(out, op, "out");
    const TensorView lv = flashcpp::capi::to_view(lse, op, "lse");
    mla::DecodeWorkspace ws;
    ws.config = to_config(config);
    plan_buffers(ws, sched_meta, num_splits, lse_accum, o_accum, op);
    TensorView sink, len;
    mla::SparseDecodeParams p;
    p.sm_scale = params->sm_scale;
    p.d_v = params->d_v;
    if (flashcpp::capi::to_optional_view(attn_sink, op, "attn_sink", sink)) p.attn_sink = &sink;
    if (flashcpp::capi::to_optional_view(topk_length, op, "topk_length", len)) p.topk_length = &len;
    check_config_device(config, qv, op);
    mla::sparse_decode(qv, kvv, iv, ov, lv, ws, p, static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_mla_sparse_decode_v4(const flashcpp_mla_decode_config* config,
                                              const flashcpp_mla_decode_v4_tensors* tensors,
                                              const flashcpp_mla_decode_v4_params* params, void* stream) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_sparse_decode_v4";
    require_non_null(config, op, "config");
    require_non_null(tensors, op, "tensors");
    require_non_null(params, op, "params");
    check_struct_size<flashcpp_mla_decode_v4_params>(params->struct_size, sizeof(flashcpp_mla_decode_v4_params), op,
                                                     "params");
    const flashcpp_mla_decode_v4_tensors& t = *tensors;
    const TensorView qv = flashcpp::capi::to_view(t.q, op, "tensors.q");
    const TensorView kvv = flashcpp::capi::to_view(t.kv_cache, op, "tensors.kv_cache");
    const TensorView iv = flashcpp::capi::to_view(t.indices, op, "tensors.indices");
    const TensorView ov = flashcpp::capi::to_view(t.out, op, "tensors.out");
    const TensorView lv = flashcpp::capi::to_view(t.lse, op, "tensors.lse");
    mla::DecodeWorkspace ws;
    ws.config = to_config(config);
    plan_buffers(ws, t.sched_meta, t.num_splits, t.lse_accum, t.o_accum, op);
    TensorView sink, len, extra_kv, extra_idx, extra_len;
    mla::SparseDecodeV4Params p;
    p.sm_scale = params->sm_scale;
    p.d_v = params->d_v;
    if (flashcpp::capi::to_optional_view(t.attn_sink, op, "tensors.attn_sink", sink)) p.attn_sink = &sink;
    if (flashcpp::capi::to_optional_view(t.topk_length, op, "tensors.topk_length", len)) p.topk_length = &len;
    if (flashcpp::capi::to_optional_view(t.extra_kv_cache, op, "tensors.extra_kv_cache", extra_kv))
      p.extra_kv_cache = &extra_kv;
    if (flashcpp::capi::to_optional_view(t.extra_indices, op, "tensors.extra_indices", extra_idx))
      p.extra_indices = &extra_idx;
    if (flashcpp::capi::to_optional_view(t.extra_topk_length, op, "tensors.extra_topk_length", extra_len))
      p.extra_topk_length = &extra_len;
    check_config_device(config, qv, op);
    mla::sparse_decode_v4(qv, kvv, iv, ov, lv, ws, p, static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_mla_quantize_kv_cache_fp8(const flashcpp_tensor* kv, const flashcpp_tensor* out,
                                                   void* stream) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_quantize_kv_cache_fp8";
    mla::quantize_kv_cache_fp8(flashcpp::capi::to_view(kv, op, "kv"), flashcpp::capi::to_view(out, op, "out"),
                               static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_mla_quantize_kv_cache_fp8_v4(const flashcpp_tensor* kv, const flashcpp_tensor* out,
                                                      void* stream) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_quantize_kv_cache_fp8_v4";
    mla::quantize_kv_cache_fp8_v4(flashcpp::capi::to_view(kv, op, "kv"), flashcpp::capi::to_view(out, op, "out"),
                                  static_cast<cudaStream_t>(stream));
  });
}

}  // extern "C"
