// C ABI of the FlashInfer norm, page, prefill, decode, activation, cascade and RoPE ops
// (include/flashcpp/c/ops.h).
#include "flashcpp/c/ops.h"

#include <memory>
#include <optional>

#include "capi/capi.hpp"
#include "flashcpp/activation.hpp"
#include "flashcpp/attention.hpp"
#include "flashcpp/cascade.hpp"
#include "flashcpp/norm.hpp"
#include "flashcpp/page.hpp"
#include "flashcpp/rope.hpp"
#include "flashcpp/runtime.hpp"

struct flashcpp_batch_prefill_plan {
  flashcpp::BatchPrefillPlan plan;
};
struct flashcpp_batch_decode_plan {
  flashcpp::BatchDecodePlan plan;
};

namespace flashcpp::capi {
namespace {


cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

RmsNormOptions norm_options(double eps, int32_t pdl, const char* op) {
  RmsNormOptions o;
  if (eps != 0.0) o.eps = eps;
  o.enable_pdl = flag_of(pdl, op, "enable_pdl");
  return o;
}

template <class Fn>
flashcpp_status norm_call(const char* op, const flashcpp_tensor* a, const char* an, const flashcpp_tensor* b,
                          const char* bn, const flashcpp_tensor* w, double eps, int32_t pdl, void* stream, Fn fn) {
  return guard([&] {
    fn(*default_runtime(), to_view(a, op, an), to_view(b, op, bn), to_view(w, op, "weight"),
       norm_options(eps, pdl, op), as_stream(stream));
  });
}

template <class E>
E to_enum(int32_t v, int32_t max, const char* op, const char* what) {
  if (v < 0 || v > max)
    throw Error(ErrorCode::invalid_argument,
                std::string(op) + ": argument '" + what + "' has an unknown value " + std::to_string(v));
  return static_cast<E>(v);
}

// A paged cache argument (`name`: "cache", or the RoPE append's kv_cache / mla_cache).
PagedKvCache to_cache(const flashcpp_paged_kv_cache* cache, const char* op, const char* name = "cache") {
  const flashcpp_paged_kv_cache c = read_struct(cache, op, name);
  PagedKvCache kv;
  kv.k_cache = to_view(c.k_cache, op, "k_cache");
  kv.v_cache = to_view(c.v_cache, op, "v_cache");
  kv.indices = to_view(c.indices, op, "indices");
  kv.indptr = to_view(c.indptr, op, "indptr");
  kv.last_page_len = to_view(c.last_page_len, op, "last_page_len");
  kv.layout = to_enum<KvLayout>(c.layout, 1, op, "cache.layout");
  return kv;
}

// The scalars of the RoPE + FP8 entries.
RopeQuantizeOptions quantize_options(int32_t interleave, int32_t enable_pdl, double quant_scale_q, double quant_scale_kv,
                                     const char* op) {
  RopeQuantizeOptions o;
  o.interleave = flag_of(interleave, op, "interleave");
  o.enable_pdl = flag_of(enable_pdl, op, "enable_pdl");
  o.quant_scale_q = quant_scale_q;
  o.quant_scale_kv = quant_scale_kv;
  return o;
}

PagedMlaKvCache to_mla_cache(const flashcpp_paged_mla_kv_cache* cache, const char* op, const char* name = "cache") {
  const flashcpp_paged_mla_kv_cache c = read_struct(cache, op, name);
  return PagedMlaKvCache{to_view(c.ckv_cache, op, "cache.ckv_cache"), to_view(c.kpe_cache, op, "cache.kpe_cache"),
                         to_view(c.indices, op, "cache.indices"), to_view(c.indptr, op, "cache.indptr"),
                         to_view(c.last_page_len, op, "cache.last_page_len")};
}

Workspace to_workspace(const flashcpp_workspace* workspace, const char* op) {
  const flashcpp_workspace w = read_struct(workspace, op, "workspace");
  return Workspace{to_view(w.float_buffer, op, "workspace.float_buffer"), to_view(w.int_buffer, op, "workspace.int_buffer"),
                   to_view(w.pinned_int_buffer, op, "workspace.pinned_int_buffer")};
}

// The paged-cache appends, alike but for the cache (converted by `cache_of`) and the names of the two new tensors
// (`an`, `bn`, used in messages).
template <class CCache, class Cache, class Fn>
flashcpp_status append_call(const char* op, const flashcpp_tensor* a, const char* an, const flashcpp_tensor* b,
                            const char* bn, const flashcpp_tensor* bi, const flashcpp_tensor* pos, const CCache* cache,
                            Cache (*cache_of)(const CCache*, const char*, const char*), void* stream, Fn fn) {
  return guard([&] {
    fn(*default_runtime(), to_view(a, op, an), to_view(b, op, bn), to_view(bi, op, "batch_indices"),
       to_view(pos, op, "positions"), cache_of(cache, op, "cache"), as_stream(stream));
  });
}



// The RoPE + FP8 entries: the C args read, the tensors both take converted alike (the same names in the C structs
// and the C++ args), `rest` converts the entry's own; then `run` with the scalars as options.
template <class Args, class CArgs, class Rest, class Run>
flashcpp_status rope_quantize_call(const char* op, const CArgs* args, void* stream, Rest rest, Run run) {
  return guard([&] {
    const CArgs c = read_struct(args, op, "args");
    Args a;
    a.q_rope = to_view(c.q_rope, op, "q_rope");
    a.k_rope = to_view(c.k_rope, op, "k_rope");
    a.q_rope_out = to_view(c.q_rope_out, op, "q_rope_out");
    a.cos_sin_cache = to_view(c.cos_sin_cache, op, "cos_sin_cache");
    a.pos_ids = to_view(c.pos_ids, op, "pos_ids");
    rest(a, c, op);
    run(*default_runtime(), a, quantize_options(c.interleave, c.enable_pdl, c.quant_scale_q, c.quant_scale_kv, op),
        as_stream(stream));
  });
}

// The fields batch prefill and decode plan configs share (the same names in the C structs and the C++
// configs): heads, page size, dtypes (o_dtype -1: as q), layout, window, soft cap, scale, graph and PDL.
template <class Config, class CConfig>
void copy_shared_plan_config(Config& c, const CConfig& cc, const char* op) {
  c.num_qo_heads = cc.num_qo_heads;
  c.num_kv_heads = cc.num_kv_heads;
  c.page_size = cc.page_size;
  c.q_dtype = to_enum<DType>(cc.q_dtype, FLASHCPP_BOOL, op, "q_dtype");
  c.kv_dtype = to_enum<DType>(cc.kv_dtype, FLASHCPP_BOOL, op, "kv_dtype");
  // -1 (documented: as q) or a dtype code; any other negative value is refused like an unknown code.
  if (cc.o_dtype != -1) c.o_dtype = to_enum<DType>(cc.o_dtype, FLASHCPP_BOOL, op, "o_dtype");
  c.layout = to_enum<KvLayout>(cc.layout, 1, op, "layout");
  c.window_left = cc.window_left;
  c.logits_soft_cap = cc.logits_soft_cap;
  c.sm_scale = sm_scale_of(cc.sm_scale);
  c.enable_cuda_graph = flag_of(cc.enable_cuda_graph, op, "enable_cuda_graph");
  c.enable_pdl = flag_of(cc.enable_pdl, op, "enable_pdl");
}

// The fields of flashcpp_attention_options only one of the single ops has.
void fill_own_options(SinglePrefillOptions& o, const flashcpp_attention_options& c, const char* op) {
  o.causal = flag_of(c.causal, op, "options.causal");
  o.use_fp16_qk_reduction = flag_of(c.use_fp16_qk_reduction, op, "options.use_fp16_qk_reduction");
}
void fill_own_options(SingleDecodeOptions& o, const flashcpp_attention_options& c, const char* op) {
  o.backend = to_enum<DecodeBackend>(c.decode_backend, 2, op, "decode_backend");
}

// What the single prefill and decode entries share: the options' common fields (then the op's own), the
// tensors (lse and tmp optional), and one call of `run` on the C ABI's Runtime.
template <class Options, class Run>
flashcpp_status single_attention(const char* op, const flashcpp_tensor* q, const flashcpp_tensor* k,
                                 const flashcpp_tensor* v, const flashcpp_tensor* out, const flashcpp_tensor* lse,
                                 const flashcpp_tensor* tmp, const flashcpp_attention_options* options, void* stream,
                                 Run run) {
  return guard([&] {
    const flashcpp_attention_options opts = read_struct(options, op, "options");
    Options o;
    o.layout = to_enum<KvLayout>(opts.layout, 1, op, "layout");
    o.window_left = opts.window_left;
    o.logits_soft_cap = opts.logits_soft_cap;
    o.sm_scale = sm_scale_of(opts.sm_scale);
    fill_own_options(o, opts, op);
    TensorView l, t;
    const bool has_lse = to_optional_view(lse, op, "lse", l);
    // NULL is the documented "no scratch"; a given tmp is a tensor like any other (the C++ API would read one
    // with NULL data as absent).
    if (to_optional_view(tmp, op, "tmp", t) && t.data == nullptr && t.numel() != 0)
      throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument 'tmp' must not be null; got " + t.describe());
    run(*default_runtime(), to_view(q, op, "q"), to_view(k, op, "k"), to_view(v, op, "v"), to_view(out, op, "out"),
        has_lse ? &l : nullptr, t, o, as_stream(stream));
  });
}


// What both plan entries do around building their plan: the config struct read (read_struct) and out_plan
// checked, out_plan NULL until `make(op, config)` has created the plan from the copy.
template <class CPlan, class CConfig, class Make>
flashcpp_status plan_create(const char* op, const CConfig* c_config, CPlan** out_plan, Make make) {
  return guard([&] {
    const CConfig config = read_struct(c_config, op, "config");
    require_non_null(out_plan, op, "out_plan");
    *out_plan = nullptr;
    *out_plan = new CPlan{make(op, config)};
  });
}

// What every run entry of a plan does: the plan present and lse optional, then `run(plan, lse, op)`.
template <class CPlan, class Run>
flashcpp_status plan_run(const char* op, const CPlan* plan, const flashcpp_tensor* lse, Run run) {
  return guard([&] {
    require_non_null(plan, op, "plan");
    TensorView l;
    const OptionalTensor lse_view = optional(lse, op, "lse", l);
    run(plan->plan, lse_view, op);
  });
}

// The C entries' scalars with their documented "0: default" rule.
RopeOptions rope_options(int64_t rotary_dim, int32_t interleave, double scale, double theta, const char* op) {
  RopeOptions o;
  o.rotary_dim = rotary_dim;
  o.interleave = flag_of(interleave, op, "interleave");
  if (scale != 0.0) o.rope_scale = scale;
  if (theta != 0.0) o.rope_theta = theta;
  return o;
}

Llama31RopeScaling llama31_scaling(double low_freq_factor, double high_freq_factor, double old_context_length) {
  Llama31RopeScaling s;
  if (low_freq_factor != 0.0) s.low_freq_factor = low_freq_factor;
  if (high_freq_factor != 0.0) s.high_freq_factor = high_freq_factor;
  if (old_context_length != 0.0) s.old_context_length = old_context_length;
  return s;
}

// The RoPE entries: q and k, rotated into q_rope and k_rope, converted alike; `run` gets them with the runtime and the
// stream and adds the entry's own arguments.
template <class Run>
flashcpp_status rope_call(const char* op, const flashcpp_tensor* q, const flashcpp_tensor* k,
                          const flashcpp_tensor* q_rope, const flashcpp_tensor* k_rope, void* stream, Run run) {
  return guard([&] {
    run(*default_runtime(), to_view(q, op, "q"), to_view(k, op, "k"), to_view(q_rope, op, "q_rope"),
        to_view(k_rope, op, "k_rope"), as_stream(stream));
  });
}

}  // namespace
}  // namespace flashcpp::capi

using namespace flashcpp;
using namespace flashcpp::capi;

extern "C" {

// One C entry per norm, from a table: the C names of the two tensors before the weight (also used in
// messages) and the C++ op of the same name.
#define FLASHCPP_NORM_ENTRY(NAME, A, B)                                                                    \
  flashcpp_status flashcpp_##NAME(const flashcpp_tensor* A, const flashcpp_tensor* B,                      \
                                  const flashcpp_tensor* weight, double eps, int32_t pdl, void* stream) {   \
    return norm_call(#NAME, A, #A, B, #B, weight, eps, pdl, stream,                                         \
                     [](auto& rt, auto x, auto y, auto w, auto o, auto s) { NAME(rt, x, y, w, o, s); });    \
  }
FLASHCPP_NORM_ENTRY(rmsnorm, out, input)
FLASHCPP_NORM_ENTRY(fused_qk_rmsnorm, out, input)
FLASHCPP_NORM_ENTRY(gemma_rmsnorm, out, input)
FLASHCPP_NORM_ENTRY(fused_add_rmsnorm, input, residual)
FLASHCPP_NORM_ENTRY(gemma_fused_add_rmsnorm, input, residual)
#undef FLASHCPP_NORM_ENTRY

flashcpp_status flashcpp_append_paged_kv_cache(const flashcpp_tensor* k, const flashcpp_tensor* v,
                                               const flashcpp_tensor* bi, const flashcpp_tensor* pos,
                                               const flashcpp_paged_kv_cache* cache, void* stream) {
  return append_call("append_paged_kv_cache", k, "append_key", v, "append_value", bi, pos, cache, to_cache, stream,
                     [](auto&&... args) { append_paged_kv_cache(std::forward<decltype(args)>(args)...); });
}

flashcpp_status flashcpp_append_paged_mla_kv_cache(const flashcpp_tensor* ckv, const flashcpp_tensor* kpe,
                                                   const flashcpp_tensor* bi, const flashcpp_tensor* pos,
                                                   const flashcpp_paged_mla_kv_cache* cache, void* stream) {
  return append_call("append_paged_mla_kv_cache", ckv, "append_ckv", kpe, "append_kpe", bi, pos, cache, to_mla_cache,
                     stream, [](auto&&... args) { append_paged_mla_kv_cache(std::forward<decltype(args)>(args)...); });
}

void flashcpp_attention_options_init(flashcpp_attention_options* o) {
  if (!o) return;
  *o = flashcpp_attention_options FLASHCPP_ATTENTION_OPTIONS_INIT;
}

// The two single-request attention entries take the same C arguments: one entry each, from a table of the
// C++ op of the same name and its options type.
#define FLASHCPP_SINGLE_ATTENTION_ENTRY(NAME, OPTIONS)                                                          \
  flashcpp_status flashcpp_##NAME(const flashcpp_tensor* q, const flashcpp_tensor* k, const flashcpp_tensor* v, \
                                  const flashcpp_tensor* out, const flashcpp_tensor* lse,                       \
                                  const flashcpp_tensor* tmp, const flashcpp_attention_options* options,        \
                                  void* stream) {                                                               \
    return single_attention<OPTIONS>(#NAME, q, k, v, out, lse, tmp, options, stream,                            \
                                     [](auto&&... args) { NAME(std::forward<decltype(args)>(args)...); });      \
  }
FLASHCPP_SINGLE_ATTENTION_ENTRY(single_prefill, SinglePrefillOptions)
FLASHCPP_SINGLE_ATTENTION_ENTRY(single_decode, SingleDecodeOptions)
#undef FLASHCPP_SINGLE_ATTENTION_ENTRY

void flashcpp_recommended_workspace_bytes(int64_t* float_bytes, int64_t* int_bytes) {
  if (float_bytes) *float_bytes = recommended_float_workspace_bytes();
  if (int_bytes) *int_bytes = recommended_int_workspace_bytes();
}

void flashcpp_batch_prefill_config_init(flashcpp_batch_prefill_config* c) {
  if (!c) return;
  *c = flashcpp_batch_prefill_config FLASHCPP_BATCH_PREFILL_CONFIG_INIT;
}

flashcpp_status flashcpp_batch_prefill_plan_create(const flashcpp_batch_prefill_config* c_config,
                                                   const flashcpp_workspace* workspace, const flashcpp_tensor* qo,
                                                   const flashcpp_tensor* kv, const flashcpp_tensor* last,
                                                   const flashcpp_tensor* indices, void* stream,
                                                   flashcpp_batch_prefill_plan** out_plan) {
  return plan_create("batch_prefill_plan_create", c_config, out_plan,
                     [&](const char* op, const flashcpp_batch_prefill_config& config) {
    BatchPrefillConfig c;
    c.kv_storage = config.kv_storage == FLASHCPP_KV_RAGGED ? KvStorage::ragged : KvStorage::paged;
    to_enum<KvStorage>(config.kv_storage, 1, op, "kv_storage");
    copy_shared_plan_config(c, config, op);
    c.head_dim_qk = config.head_dim_qk;
    c.head_dim_vo = config.head_dim_vo;
    c.causal = flag_of(config.causal, op, "causal");
    c.backend = to_enum<AttentionBackend>(config.backend, 2, op, "backend");
    c.fixed_split_size = config.fixed_split_size;
    c.disable_split_kv = flag_of(config.disable_split_kv, op, "disable_split_kv");
    PrefillIndptrs ip;
    ip.qo_indptr = to_view(qo, op, "qo_indptr_host");
    ip.kv_indptr = to_view(kv, op, "kv_indptr_host");
    if (c.kv_storage == KvStorage::paged) ip.kv_last_page_len = to_view(last, op, "kv_last_page_len_host");
    TensorView idx;
    ip.kv_indices = optional(indices, op, "kv_indices_host", idx);
    return BatchPrefillPlan::create(*default_runtime(), to_workspace(workspace, op), ip, c, as_stream(stream));
  });
}

flashcpp_status flashcpp_batch_prefill_run_ragged(const flashcpp_batch_prefill_plan* plan, const flashcpp_tensor* q,
                                                  const flashcpp_ragged_kv* kv, const flashcpp_tensor* qo,
                                                  const flashcpp_tensor* out, const flashcpp_tensor* lse, void* stream) {
  return plan_run("batch_prefill_run_ragged", plan, lse, [&](const auto& p, OptionalTensor l, const char* op) {
    const flashcpp_ragged_kv r = read_struct(kv, op, "kv");
    p.run_ragged(to_view(q, op, "q"), to_view(r.k, op, "kv.k"), to_view(r.v, op, "kv.v"),
                 to_view(qo, op, "qo_indptr"), to_view(r.indptr, op, "kv.indptr"), to_view(out, op, "out"), l,
                 as_stream(stream));
  });
}

flashcpp_status flashcpp_batch_prefill_run_paged(const flashcpp_batch_prefill_plan* plan, const flashcpp_tensor* q,
                                                 const flashcpp_paged_kv_cache* cache, const flashcpp_tensor* qo,
                                                 const flashcpp_tensor* out, const flashcpp_tensor* lse, void* stream) {
  return plan_run("batch_prefill_run_paged", plan, lse, [&](const auto& p, OptionalTensor l, const char* op) {
    p.run_paged(to_view(q, op, "q"), to_cache(cache, op), to_view(qo, op, "qo_indptr"), to_view(out, op, "out"), l,
                as_stream(stream));
  });
}

void flashcpp_batch_prefill_plan_destroy(flashcpp_batch_prefill_plan* plan) { delete plan; }

void flashcpp_batch_decode_config_init(flashcpp_batch_decode_config* c) {
  if (!c) return;
  *c = flashcpp_batch_decode_config FLASHCPP_BATCH_DECODE_CONFIG_INIT;
}

flashcpp_status flashcpp_batch_decode_plan_create(const flashcpp_batch_decode_config* c_config,
                                                  const flashcpp_workspace* workspace, const flashcpp_tensor* kv,
                                                  const flashcpp_tensor* last, const flashcpp_tensor* indices,
                                                  void* stream, flashcpp_batch_decode_plan** out_plan) {
  return plan_create("batch_decode_plan_create", c_config, out_plan,
                     [&](const char* op, const flashcpp_batch_decode_config& config) {
    BatchDecodeConfig c;
    copy_shared_plan_config(c, config, op);
    c.head_dim = config.head_dim;
    c.backend = to_enum<DecodeBackend>(config.backend, 2, op, "backend");
    c.prefill_backend = to_enum<AttentionBackend>(config.prefill_backend, 2, op, "prefill_backend");
    c.fixed_split_size = config.fixed_split_size;
    c.disable_split_kv = flag_of(config.disable_split_kv, op, "disable_split_kv");
    DecodeIndptrs ip;
    ip.kv_indptr = to_view(kv, op, "kv_indptr_host");
    ip.kv_last_page_len = to_view(last, op, "kv_last_page_len_host");
    TensorView idx;
    ip.kv_indices = optional(indices, op, "kv_indices_host", idx);
    return BatchDecodePlan::create(*default_runtime(), to_workspace(workspace, op), ip, c, as_stream(stream));
  });
}

flashcpp_status flashcpp_batch_decode_run(const flashcpp_batch_decode_plan* plan, const flashcpp_tensor* q,
                                          const flashcpp_paged_kv_cache* cache, const flashcpp_tensor* out,
                                          const flashcpp_tensor* lse, void* stream) {
  return plan_run("batch_decode_run", plan, lse, [&](const auto& p, OptionalTensor l, const char* op) {
    p.run(to_view(q, op, "q"), to_cache(cache, op), to_view(out, op, "out"), l, as_stream(stream));
  });
}

int32_t flashcpp_batch_decode_uses_tensor_cores(const flashcpp_batch_decode_plan* plan) {
  return plan != nullptr && plan->plan.uses_tensor_cores() ? 1 : 0;
}

void flashcpp_batch_decode_plan_destroy(flashcpp_batch_decode_plan* plan) { delete plan; }

// One C entry per gated activation: (out, input, enable_pdl, stream) onto the C++ op of the same name.
#define FLASHCPP_ACT_ENTRY(NAME)                                                                           \
  flashcpp_status flashcpp_##NAME(const flashcpp_tensor* out, const flashcpp_tensor* input, int32_t pdl,   \
                                  void* stream) {                                                          \
    return guard([&] {                                                                                     \
      NAME(*default_runtime(), to_view(out, #NAME, "out"), to_view(input, #NAME, "input"),                 \
           ActivationOptions{.enable_pdl = flag_of(pdl, #NAME, "enable_pdl")}, as_stream(stream));          \
    });                                                                                                    \
  }
FLASHCPP_ACT_ENTRY(silu_and_mul)
FLASHCPP_ACT_ENTRY(gelu_and_mul)
FLASHCPP_ACT_ENTRY(gelu_tanh_and_mul)
#undef FLASHCPP_ACT_ENTRY

flashcpp_status flashcpp_merge_state(const flashcpp_tensor* v_a, const flashcpp_tensor* s_a,
                                     const flashcpp_tensor* v_b, const flashcpp_tensor* s_b,
                                     const flashcpp_tensor* v_merged, const flashcpp_tensor* s_merged, void* stream) {
  constexpr const char* op = "merge_state";
  return guard([&] {
    merge_state(*default_runtime(), to_view(v_a, op, "v_a"), to_view(s_a, op, "s_a"), to_view(v_b, op, "v_b"),
                to_view(s_b, op, "s_b"), to_view(v_merged, op, "v_merged"), to_view(s_merged, op, "s_merged"),
                as_stream(stream));
  });
}

flashcpp_status flashcpp_merge_state_in_place(const flashcpp_tensor* v, const flashcpp_tensor* s,
                                              const flashcpp_tensor* v_other, const flashcpp_tensor* s_other,
                                              const flashcpp_tensor* mask, void* stream) {
  constexpr const char* op = "merge_state_in_place";
  return guard([&] {
    TensorView m;
    merge_state_in_place(*default_runtime(), to_view(v, op, "v"), to_view(s, op, "s"), to_view(v_other, op, "v_other"),
                         to_view(s_other, op, "s_other"), optional(mask, op, "mask", m), as_stream(stream));
  });
}

flashcpp_status flashcpp_merge_states(const flashcpp_tensor* v, const flashcpp_tensor* s,
                                      const flashcpp_tensor* v_merged, const flashcpp_tensor* s_merged, void* stream) {
  constexpr const char* op = "merge_states";
  return guard([&] {
    merge_states(*default_runtime(), to_view(v, op, "v"), to_view(s, op, "s"), to_view(v_merged, op, "v_merged"),
                 to_view(s_merged, op, "s_merged"), as_stream(stream));
  });
}

flashcpp_status flashcpp_apply_rope_pos_ids(const flashcpp_tensor* q, const flashcpp_tensor* k,
                                            const flashcpp_tensor* q_rope, const flashcpp_tensor* k_rope,
                                            const flashcpp_tensor* pos_ids, int64_t rotary_dim, int32_t interleave,
                                            double rope_scale, double rope_theta, void* stream) {
  constexpr const char* op = "apply_rope_pos_ids";
  return rope_call(op, q, k, q_rope, k_rope, stream, [&](auto& rt, auto qv, auto kv, auto qr, auto kr, auto st) {
    apply_rope_pos_ids(rt, qv, kv, qr, kr, to_view(pos_ids, op, "pos_ids"),
                       rope_options(rotary_dim, interleave, rope_scale, rope_theta, op), st);
  });
}

flashcpp_status flashcpp_apply_llama31_rope_pos_ids(const flashcpp_tensor* q, const flashcpp_tensor* k,
                                                    const flashcpp_tensor* q_rope, const flashcpp_tensor* k_rope,
                                                    const flashcpp_tensor* pos_ids, int64_t rotary_dim,
                                                    int32_t interleave, double rope_scale, double rope_theta,
                                                    double low_freq_factor, double high_freq_factor,
                                                    double old_context_length, void* stream) {
  constexpr const char* op = "apply_llama31_rope_pos_ids";
  return rope_call(op, q, k, q_rope, k_rope, stream, [&](auto& rt, auto qv, auto kv, auto qr, auto kr, auto st) {
    apply_llama31_rope_pos_ids(rt, qv, kv, qr, kr, to_view(pos_ids, op, "pos_ids"),
                               rope_options(rotary_dim, interleave, rope_scale, rope_theta, op),
                               llama31_scaling(low_freq_factor, high_freq_factor, old_context_length), st);
  });
}

flashcpp_status flashcpp_apply_rope_with_cos_sin_cache(const flashcpp_tensor* q, const flashcpp_tensor* k,
                                                       const flashcpp_tensor* q_rope, const flashcpp_tensor* k_rope,
                                                       const flashcpp_tensor* cos_sin_cache,
                                                       const flashcpp_tensor* pos_ids, int32_t interleave,
                                                       void* stream) {
  constexpr const char* op = "apply_rope_with_cos_sin_cache";
  return rope_call(op, q, k, q_rope, k_rope, stream, [&](auto& rt, auto qv, auto kv, auto qr, auto kr, auto st) {
    apply_rope_with_cos_sin_cache(rt, qv, kv, qr, kr, to_view(cos_sin_cache, op, "cos_sin_cache"),
                                  to_view(pos_ids, op, "pos_ids"), flag_of(interleave, op, "interleave"), st);
  });
}

flashcpp_status flashcpp_apply_rope(const flashcpp_tensor* q, const flashcpp_tensor* k, const flashcpp_tensor* q_rope,
                                    const flashcpp_tensor* k_rope, const flashcpp_tensor* indptr,
                                    const flashcpp_tensor* offsets, int64_t rotary_dim, int32_t interleave,
                                    double rope_scale, double rope_theta, void* stream) {
  constexpr const char* op = "apply_rope";
  return rope_call(op, q, k, q_rope, k_rope, stream, [&](auto& rt, auto qv, auto kv, auto qr, auto kr, auto st) {
    apply_rope(rt, qv, kv, qr, kr, to_view(indptr, op, "indptr"), to_view(offsets, op, "offsets"),
               rope_options(rotary_dim, interleave, rope_scale, rope_theta, op), st);
  });
}

flashcpp_status flashcpp_apply_llama31_rope(const flashcpp_tensor* q, const flashcpp_tensor* k,
                                            const flashcpp_tensor* q_rope, const flashcpp_tensor* k_rope,
                                            const flashcpp_tensor* indptr, const flashcpp_tensor* offsets,
                                            int64_t rotary_dim, int32_t interleave, double rope_scale,
                                            double rope_theta, double low_freq_factor, double high_freq_factor,
                                            double old_context_length, void* stream) {
  constexpr const char* op = "apply_llama31_rope";
  return rope_call(op, q, k, q_rope, k_rope, stream, [&](auto& rt, auto qv, auto kv, auto qr, auto kr, auto st) {
    apply_llama31_rope(rt, qv, kv, qr, kr, to_view(indptr, op, "indptr"), to_view(offsets, op, "offsets"),
                       rope_options(rotary_dim, interleave, rope_scale, rope_theta, op),
                       llama31_scaling(low_freq_factor, high_freq_factor, old_context_length), st);
  });
}

flashcpp_status flashcpp_rope_quantize_fp8(const flashcpp_rope_quantize_args* args, void* stream) {
  TensorView qn, kn, qno, kno;
  return rope_quantize_call<RopeQuantizeTensors>("rope_quantize_fp8", args, stream, [&](auto& a, const auto& c, auto op) {
    a.k_rope_out = to_view(c.k_rope_out, op, "k_rope_out");
    a.q_nope = optional(c.q_nope, op, "q_nope", qn);
    a.k_nope = optional(c.k_nope, op, "k_nope", kn);
    a.q_nope_out = optional(c.q_nope_out, op, "q_nope_out", qno);
    a.k_nope_out = optional(c.k_nope_out, op, "k_nope_out", kno);
  }, [](auto&&... x) { rope_quantize_fp8(std::forward<decltype(x)>(x)...); });
}

flashcpp_status flashcpp_rope_quantize_append_paged_kv_cache(const flashcpp_rope_quantize_append_args* args,
                                                             void* stream) {
  TensorView v;
  std::optional<PagedKvCache> kv;
  std::optional<PagedMlaKvCache> mla;
  return rope_quantize_call<RopeQuantizeAppendTensors>(
      "rope_quantize_append_paged_kv_cache", args, stream, [&](auto& a, const auto& c, auto op) {
        a.q_nope = to_view(c.q_nope, op, "q_nope");
        a.k_nope = to_view(c.k_nope, op, "k_nope");
        a.v = optional(c.v, op, "v", v);
        a.q_nope_out = to_view(c.q_nope_out, op, "q_nope_out");
        a.batch_indices = to_view(c.batch_indices, op, "batch_indices");
        a.positions = to_view(c.positions, op, "positions");
        if (c.kv_cache != nullptr) a.kv_cache = &kv.emplace(to_cache(c.kv_cache, op, "kv_cache"));
        if (c.mla_cache != nullptr) a.mla_cache = &mla.emplace(to_mla_cache(c.mla_cache, op, "mla_cache"));
      }, [](auto&&... x) { rope_quantize_append_paged_kv_cache(std::forward<decltype(x)>(x)...); });
}

}  // extern "C"
