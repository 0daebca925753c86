// C ABI for sparse MLA: converts the C structs to TensorViews and calls the C++ API under capi::guard().
#include "flashcpp/c/mla.h"

#include <string>
#include <utility>

#include "capi/capi.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/mla.hpp"

namespace {

using flashcpp::TensorView;
using flashcpp::capi::optional;
using flashcpp::capi::require_non_null;
using flashcpp::capi::read_struct;
using flashcpp::capi::to_view;
namespace mla = flashcpp::mla;

mla::DecodeConfig to_config(const flashcpp_mla_decode_config& c) {
  return {.batch = c.batch, .s_q = c.s_q, .h_q = c.h_q, .d_qk = c.d_qk, .topk = c.topk, .extra_topk = c.extra_topk,
          .num_sms = c.num_sms};
}

// The dense decode config of a C call (read_struct's copy), checked: causal 0 or 1.
mla::DenseDecodeConfig dense_config(const flashcpp_mla_dense_decode_config& c, const char* op) {
  if (c.causal != 0 && c.causal != 1)
    throw flashcpp::Error(flashcpp::ErrorCode::invalid_argument,
                          std::string(op) + ": argument 'config.causal' must be 0 or 1; got " + std::to_string(c.causal));
  mla::DenseDecodeConfig d;
  d.batch = c.batch;
  d.s_q = c.s_q;
  d.h_q = c.h_q;
  d.block_size = c.block_size;
  d.max_blocks = c.max_blocks;
  d.causal = c.causal == 1;
  d.num_sms = c.num_sms;
  return d;
}

// The dense decode config and workspace of a C call.
mla::DenseDecodeWorkspace dense_workspace(const flashcpp_mla_dense_decode_config& config,
                                          const flashcpp_mla_dense_decode_workspace* c_workspace, const char* op) {
  mla::DenseDecodeWorkspace ws;
  ws.config = dense_config(config, op);
  const flashcpp_mla_dense_decode_workspace w = read_struct(c_workspace, op, "workspace");
  ws.sched_meta = to_view(w.sched_meta, op, "workspace.sched_meta");
  ws.num_splits = to_view(w.num_splits, op, "workspace.num_splits");
  ws.lse_accum = to_view(w.lse_accum, op, "workspace.lse_accum");
  ws.o_accum = to_view(w.o_accum, op, "workspace.o_accum");
  ws.indices = to_view(w.indices, op, "workspace.indices");
  ws.token_lengths = to_view(w.token_lengths, op, "workspace.token_lengths");
  return ws;
}

// A tensor of a dense call must be on config->device_id.
void on_config_device(const TensorView& t, const flashcpp_mla_dense_decode_config& config, const char* op,
                      const char* arg) {
  if (t.device.type == flashcpp::DeviceType::cuda && t.device.id != config.device_id)
    throw flashcpp::Error(flashcpp::ErrorCode::invalid_argument,
                          std::string(op) + ": argument '" + arg + "' must be on config->device_id (" +
                              std::to_string(config.device_id) + "); got " + t.describe());
}

// What both decode entries take from their C arguments: the C tensor bundle as the C++ one, field for field (NULL ->
// nullptr; the optional tensors' views live in `slots`, so `tensors` is used only while the call is), the options and
// the workspace (config and plan buffers), with q on config->device_id. The V3.2 entry (`v4` false) refuses the extra
// pool before converting anything else of the bundle. `op`: the entry's name, for messages.
struct DecodeCall {
  TensorView slots[5];
  mla::SparseDecodeTensors tensors;
  mla::SparseDecodeOptions options;
  mla::DecodeWorkspace ws;
  DecodeCall(const flashcpp_mla_decode_config* c_config, const flashcpp_mla_decode_tensors* c_tensors,
             const flashcpp_mla_options* c_options, const char* op, bool v4) {
    const flashcpp_mla_decode_config config = read_struct(c_config, op, "config");
    const flashcpp_mla_decode_tensors t = read_struct(c_tensors, op, "tensors");
    const flashcpp_mla_options o = read_struct(c_options, op, "options");
    if (!v4)
      for (const auto& [extra, name] : {std::pair{t.extra_kv_cache, "tensors.extra_kv_cache"},
                                        std::pair{t.extra_indices, "tensors.extra_indices"},
                                        std::pair{t.extra_topk_length, "tensors.extra_topk_length"}})
        if (extra != nullptr)
          throw flashcpp::Error(flashcpp::ErrorCode::invalid_argument,
                                std::string(op) + ": argument '" + name +
                                    "' must be NULL (the V3.2 cache has no extra pool; see "
                                    "flashcpp_mla_sparse_decode_v4)");
    tensors = {.q = to_view(t.q, op, "tensors.q"),
               .kv_cache = to_view(t.kv_cache, op, "tensors.kv_cache"),
               .indices = to_view(t.indices, op, "tensors.indices"),
               .topk_length = optional(t.topk_length, op, "tensors.topk_length", slots[0]),
               .attn_sink = optional(t.attn_sink, op, "tensors.attn_sink", slots[1]),
               .out = to_view(t.out, op, "tensors.out"),
               .lse = to_view(t.lse, op, "tensors.lse"),
               .extra_kv_cache = optional(t.extra_kv_cache, op, "tensors.extra_kv_cache", slots[2]),
               .extra_indices = optional(t.extra_indices, op, "tensors.extra_indices", slots[3]),
               .extra_topk_length = optional(t.extra_topk_length, op, "tensors.extra_topk_length", slots[4])};
    options = {.sm_scale = flashcpp::capi::sm_scale_of(o.sm_scale), .d_v = o.d_v};
    ws.config = to_config(config);
    flashcpp::capi::to_optional_view(t.sched_meta, op, "tensors.sched_meta", ws.sched_meta);
    flashcpp::capi::to_optional_view(t.num_splits, op, "tensors.num_splits", ws.num_splits);
    flashcpp::capi::to_optional_view(t.lse_accum, op, "tensors.lse_accum", ws.lse_accum);
    flashcpp::capi::to_optional_view(t.o_accum, op, "tensors.o_accum", ws.o_accum);
    const TensorView& q = tensors.q;
    if (q.device.type == flashcpp::DeviceType::cuda && q.device.id != config.device_id)
      throw flashcpp::Error(flashcpp::ErrorCode::invalid_argument,
                            std::string(op) + ": argument 'tensors.q' must be on config->device_id (" +
                                std::to_string(config.device_id) + "); got " + q.describe());
  }
  DecodeCall(const DecodeCall&) = delete;  // `tensors` points into `slots`
  DecodeCall& operator=(const DecodeCall&) = delete;
};

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

// Both cache quantizers take (kv, out, stream) alike.
// The cache quantizers and dequantizers: `src` (named src_arg) into `out`.
flashcpp_status convert_entry(void (*convert)(const TensorView&, const TensorView&, cudaStream_t), const char* op,
                              const flashcpp_tensor* src, const char* src_arg, const flashcpp_tensor* out,
                              void* stream) {
  return flashcpp::capi::guard(
      [&] { convert(to_view(src, op, src_arg), to_view(out, op, "out"), static_cast<cudaStream_t>(stream)); });
}

// flashcpp_mla_decode_plan and _decode_plan_by_lengths: the size query (both buffers NULL) or the plan.
flashcpp_status decode_plan_entry(const char* op, const flashcpp_mla_decode_config* c_config,
                                  const flashcpp_tensor* sched_meta, const flashcpp_tensor* num_splits,
                                  const flashcpp_tensor* topk_length, const flashcpp_tensor* extra_topk_length,
                                  flashcpp_mla_decode_plan_sizes* sizes, void* stream) {
  return flashcpp::capi::guard([&] {
    const flashcpp_mla_decode_config config = read_struct(c_config, op, "config");
    const mla::DecodeConfig c = to_config(config);
    (void)mla::decode_plan_sizes(c, 1);  // validates the config before anything touches the device
    // A visible device, checked in the size query too (which with config.num_sms > 0 never asks the device).
    flashcpp::capi::require_device_id(config.device_id, op, "config.device_id");
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
        s = mla::decode_plan_sizes(c, flashcpp::device_facts(config.device_id).sm_count);
      }
      if (sizes != nullptr) fill_sizes(s, sizes);
      return;
    }
    mla::DecodeWorkspace ws;
    ws.config = c;
    ws.sched_meta = flashcpp::capi::to_view(sched_meta, op, "sched_meta");
    ws.num_splits = flashcpp::capi::to_view(num_splits, op, "num_splits");
    TensorView slots[2];
    mla::DecodePlanLengths lengths;
    lengths.topk_length = optional(topk_length, op, "topk_length", slots[0]);
    lengths.extra_topk_length = optional(extra_topk_length, op, "extra_topk_length", slots[1]);
    const int n = c.num_sms > 0 ? c.num_sms : flashcpp::device_facts(config.device_id).sm_count;
    const mla::DecodePlanSizes s = mla::decode_plan_sizes(c, n);
    mla::decode_plan(ws, config.device_id, static_cast<cudaStream_t>(stream), lengths);
    if (sizes != nullptr) fill_sizes(s, sizes);
  });
}

}  // namespace

extern "C" {

flashcpp_status flashcpp_mla_get_device_info(int32_t device_id, flashcpp_mla_device_info* info) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_get_device_info";
    require_non_null(info, op, "info");
    // The machine's own devices (the facts are read from the device), named as the argument.
    if (const int n = flashcpp::cuda_device_count(); device_id < 0 || device_id >= n)
      throw flashcpp::Error(flashcpp::ErrorCode::invalid_argument,
                            std::string(op) + ": argument 'device_id' must be a CUDA device; device id " +
                                std::to_string(device_id) + " is outside [0, " + std::to_string(n) +
                                ") (visible CUDA devices: " + std::to_string(n) + ")");
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

flashcpp_status flashcpp_mla_sparse_prefill(const flashcpp_mla_prefill_tensors* tensors,
                                            const flashcpp_mla_options* options, void* stream) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_sparse_prefill";
    const flashcpp_mla_prefill_tensors t = read_struct(tensors, op, "tensors");
    const flashcpp_mla_options o = read_struct(options, op, "options");
    TensorView slots[3];  // the optional tensors' views
    const mla::SparsePrefillTensors cpp{.q = to_view(t.q, op, "tensors.q"),
                                        .kv = to_view(t.kv, op, "tensors.kv"),
                                        .indices = to_view(t.indices, op, "tensors.indices"),
                                        .attn_sink = optional(t.attn_sink, op, "tensors.attn_sink", slots[0]),
                                        .topk_length = optional(t.topk_length, op, "tensors.topk_length", slots[1]),
                                        .out = to_view(t.out, op, "tensors.out"),
                                        .max_logits = optional(t.max_logits, op, "tensors.max_logits", slots[2]),
                                        .lse = to_view(t.lse, op, "tensors.lse")};
    mla::sparse_prefill(cpp, {.sm_scale = flashcpp::capi::sm_scale_of(o.sm_scale), .d_v = o.d_v},
                        static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_mla_decode_plan(const flashcpp_mla_decode_config* config, const flashcpp_tensor* sched_meta,
                                         const flashcpp_tensor* num_splits, flashcpp_mla_decode_plan_sizes* sizes,
                                         void* stream) {
  return decode_plan_entry("flashcpp_mla_decode_plan", config, sched_meta, num_splits, nullptr, nullptr, sizes, stream);
}

flashcpp_status flashcpp_mla_decode_plan_by_lengths(const flashcpp_mla_decode_config* config,
                                                    const flashcpp_tensor* sched_meta, const flashcpp_tensor* num_splits,
                                                    const flashcpp_tensor* topk_length,
                                                    const flashcpp_tensor* extra_topk_length,
                                                    flashcpp_mla_decode_plan_sizes* sizes, void* stream) {
  return decode_plan_entry("flashcpp_mla_decode_plan_by_lengths", config, sched_meta, num_splits, topk_length,
                           extra_topk_length, sizes, stream);
}

flashcpp_status flashcpp_mla_sparse_decode(const flashcpp_mla_decode_config* config,
                                           const flashcpp_mla_decode_tensors* tensors,
                                           const flashcpp_mla_options* options, void* stream) {
  return flashcpp::capi::guard([&] {
    const DecodeCall c(config, tensors, options, "flashcpp_mla_sparse_decode", /*v4=*/false);
    mla::sparse_decode(c.tensors, c.ws, c.options, static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_mla_sparse_decode_v4(const flashcpp_mla_decode_config* config,
                                              const flashcpp_mla_decode_tensors* tensors,
                                              const flashcpp_mla_options* options, void* stream) {
  return flashcpp::capi::guard([&] {
    const DecodeCall c(config, tensors, options, "flashcpp_mla_sparse_decode_v4", /*v4=*/true);
    mla::sparse_decode_v4(c.tensors, c.ws, c.options, static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_mla_dense_decode_sizes_for(const flashcpp_mla_dense_decode_config* c_config,
                                                    flashcpp_mla_dense_decode_sizes* sizes) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_dense_decode_sizes_for";
    const flashcpp_mla_dense_decode_config config = read_struct(c_config, op, "config");
    const mla::DenseDecodeConfig c = dense_config(config, op);
    require_non_null(sizes, op, "sizes");
    (void)mla::dense_decode_plan_sizes(c, 1);  // validates the config before anything asks the device
    flashcpp::capi::require_device_id(config.device_id, op, "config.device_id");
    const mla::DenseDecodePlanSizes s =
        mla::dense_decode_plan_sizes(c, c.num_sms > 0 ? c.num_sms : flashcpp::device_facts(config.device_id).sm_count);
    *sizes = {.num_sm_parts = s.num_sm_parts,
              .reserved = 0,
              .sched_meta_elems = s.sched_meta_elems,
              .num_splits_elems = s.num_splits_elems,
              .lse_accum_elems = s.lse_accum_elems,
              .o_accum_elems = s.o_accum_elems,
              .indices_elems = s.indices_elems,
              .token_lengths_elems = s.token_lengths_elems};
  });
}

flashcpp_status flashcpp_mla_dense_decode_plan(const flashcpp_mla_dense_decode_config* c_config,
                                               const flashcpp_tensor* block_table, const flashcpp_tensor* cache_seqlens,
                                               const flashcpp_mla_dense_decode_workspace* workspace, void* stream) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_dense_decode_plan";
    const flashcpp_mla_dense_decode_config config = read_struct(c_config, op, "config");
    const mla::DenseDecodeWorkspace ws = dense_workspace(config, workspace, op);
    const TensorView table = to_view(block_table, op, "block_table");
    on_config_device(table, config, op, "block_table");
    mla::dense_decode_plan(ws, table, to_view(cache_seqlens, op, "cache_seqlens"), static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_mla_dense_decode(const flashcpp_mla_dense_decode_config* c_config,
                                          const flashcpp_mla_dense_decode_tensors* tensors,
                                          const flashcpp_mla_dense_decode_workspace* workspace,
                                          const flashcpp_mla_dense_decode_options* options, void* stream) {
  return flashcpp::capi::guard([&] {
    constexpr const char* op = "flashcpp_mla_dense_decode";
    const flashcpp_mla_dense_decode_config config = read_struct(c_config, op, "config");
    const mla::DenseDecodeWorkspace ws = dense_workspace(config, workspace, op);
    const flashcpp_mla_dense_decode_tensors t = read_struct(tensors, op, "tensors");
    const flashcpp_mla_dense_decode_options o = read_struct(options, op, "options");
    const TensorView q = to_view(t.q, op, "tensors.q");
    on_config_device(q, config, op, "tensors.q");
    TensorView sink;
    const mla::DenseDecodeTensors cpp{.q = q,
                                      .kv_cache = to_view(t.kv_cache, op, "tensors.kv_cache"),
                                      .attn_sink = optional(t.attn_sink, op, "tensors.attn_sink", sink),
                                      .out = to_view(t.out, op, "tensors.out"),
                                      .lse = to_view(t.lse, op, "tensors.lse")};
    mla::dense_decode(cpp, ws, {.sm_scale = flashcpp::capi::sm_scale_of(o.sm_scale)},
                      static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_mla_quantize_kv_cache_fp8(const flashcpp_tensor* kv, const flashcpp_tensor* out,
                                                   void* stream) {
  return convert_entry(mla::quantize_kv_cache_fp8, "flashcpp_mla_quantize_kv_cache_fp8", kv, "kv", out, stream);
}

flashcpp_status flashcpp_mla_quantize_kv_cache_fp8_v4(const flashcpp_tensor* kv, const flashcpp_tensor* out,
                                                      void* stream) {
  return convert_entry(mla::quantize_kv_cache_fp8_v4, "flashcpp_mla_quantize_kv_cache_fp8_v4", kv, "kv", out, stream);
}

flashcpp_status flashcpp_mla_dequantize_kv_cache_fp8(const flashcpp_tensor* cache, const flashcpp_tensor* out,
                                                     void* stream) {
  return convert_entry(mla::dequantize_kv_cache_fp8, "flashcpp_mla_dequantize_kv_cache_fp8", cache, "cache", out,
                       stream);
}

flashcpp_status flashcpp_mla_dequantize_kv_cache_fp8_v4(const flashcpp_tensor* cache, const flashcpp_tensor* out,
                                                        void* stream) {
  return convert_entry(mla::dequantize_kv_cache_fp8_v4, "flashcpp_mla_dequantize_kv_cache_fp8_v4", cache, "cache", out,
                       stream);
}

}  // extern "C"
