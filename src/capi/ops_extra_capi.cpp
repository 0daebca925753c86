// C ABI of batch MLA, GDN prefill and the fused MoE (include/flashcpp/c/ops_extra.h).
#include <memory>

#include "capi/capi.hpp"
#include "flashcpp/c/ops_extra.h"
#include "flashcpp/gdn.hpp"
#include "flashcpp/mla_attention.hpp"
#include "flashcpp/moe.hpp"
#include "flashcpp/runtime.hpp"

struct flashcpp_batch_mla_plan {
  flashcpp::BatchMlaPlan plan;
};
struct flashcpp_fused_moe_runner {
  flashcpp::FusedMoeRunner runner;
};

namespace {
using namespace flashcpp;

using capi::default_runtime;

DType dtype_of(int32_t code, const char* op, const char* name) {
  if (code < FLASHCPP_F16 || code > FLASHCPP_BOOL)
    throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument '" + name + "' has an unknown dtype code " +
                                                 std::to_string(code));
  return static_cast<DType>(code);
}

/// Optional tensor: NULL → nullptr; else converted into `slot`.
const TensorView* optional(const flashcpp_tensor* t, const char* op, const char* name, TensorView& slot) {
  return capi::to_optional_view(t, op, name, slot) ? &slot : nullptr;
}
}  // namespace

extern "C" {

flashcpp_status flashcpp_batch_mla_plan_create(const flashcpp_batch_mla_config* c, const flashcpp_tensor* fw,
                                               const flashcpp_tensor* iw, const flashcpp_tensor* pw,
                                               const flashcpp_tensor* qo, const flashcpp_tensor* kvp,
                                               const flashcpp_tensor* kvl, void* stream,
                                               flashcpp_batch_mla_plan** out) {
  return capi::guard([&] {
    const char* op = "flashcpp_batch_mla_plan_create";
    capi::require_non_null(c, op, "config");
    capi::require_non_null(out, op, "out_plan");
    *out = nullptr;
    BatchMlaConfig cfg;
    cfg.num_heads = c->num_heads;
    cfg.page_size = c->page_size;
    cfg.q_dtype = dtype_of(c->q_dtype, op, "config.q_dtype");
    cfg.kv_dtype = dtype_of(c->kv_dtype, op, "config.kv_dtype");
    cfg.causal = c->causal != 0;
    cfg.return_lse_base_on_e = c->return_lse_base_on_e != 0;
    if (c->backend < FLASHCPP_MLA_AUTO || c->backend > FLASHCPP_MLA_SM90)
      throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument 'config.backend' must be 0, 1 or 2");
    cfg.backend = static_cast<MlaBackend>(c->backend);
    if (c->sm_scale != 0.0) cfg.sm_scale = c->sm_scale;
    Workspace ws{capi::to_view(fw, op, "float_workspace"), capi::to_view(iw, op, "int_workspace"),
                 capi::to_view(pw, op, "pinned_int_workspace")};
    auto plan = BatchMlaPlan::create(*default_runtime(), ws, capi::to_view(qo, op, "qo_indptr_host"),
                                     capi::to_view(kvp, op, "kv_indptr_host"), capi::to_view(kvl, op, "kv_len_host"),
                                     cfg, static_cast<cudaStream_t>(stream));
    *out = new flashcpp_batch_mla_plan{std::move(plan)};
  });
}

flashcpp_status flashcpp_batch_mla_run(const flashcpp_batch_mla_plan* p, const flashcpp_tensor* q_nope,
                                       const flashcpp_tensor* q_pe, const flashcpp_tensor* ckv,
                                       const flashcpp_tensor* kpe, const flashcpp_tensor* idx,
                                       const flashcpp_tensor* o, const flashcpp_tensor* lse, void* stream) {
  return capi::guard([&] {
    const char* op = "flashcpp_batch_mla_run";
    capi::require_non_null(p, op, "plan");
    TensorView lse_slot;
    p->plan.run(capi::to_view(q_nope, op, "q_nope"), capi::to_view(q_pe, op, "q_pe"),
                capi::to_view(ckv, op, "ckv_cache"), capi::to_view(kpe, op, "kpe_cache"),
                capi::to_view(idx, op, "kv_indices"), capi::to_view(o, op, "out"), optional(lse, op, "lse", lse_slot),
                static_cast<cudaStream_t>(stream));
  });
}

void flashcpp_batch_mla_plan_destroy(flashcpp_batch_mla_plan* p) { delete p; }

flashcpp_status flashcpp_gdn_prefill(const flashcpp_gdn_prefill_args* a, void* stream) {
  return capi::guard([&] {
    const char* op = "flashcpp_gdn_prefill";
    capi::require_non_null(a, op, "args");
    GdnPrefillArgs g;
    g.output = capi::to_view(a->output, op, "output");
    g.output_state = capi::to_view(a->output_state, op, "output_state");
    g.q = capi::to_view(a->q, op, "q");
    g.k = capi::to_view(a->k, op, "k");
    g.v = capi::to_view(a->v, op, "v");
    g.cu_seqlens = capi::to_view(a->cu_seqlens, op, "cu_seqlens");
    TensorView cu_host, state, alpha, beta, ws;
    g.cu_seqlens_host = optional(a->cu_seqlens_host, op, "cu_seqlens_host", cu_host);
    g.input_state = optional(a->input_state, op, "input_state", state);
    g.alpha = optional(a->alpha, op, "alpha", alpha);
    g.beta = optional(a->beta, op, "beta", beta);
    g.workspace = optional(a->workspace, op, "workspace", ws);
    gdn_prefill(*default_runtime(), g, {.scale = a->scale}, static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_gdn_prefill_workspace_bytes(int32_t device, int64_t* out) {
  return capi::guard([&] {
    capi::require_non_null(out, "flashcpp_gdn_prefill_workspace_bytes", "out_bytes");
    *out = gdn_prefill_workspace_bytes(device);
  });
}

flashcpp_status flashcpp_fused_moe_runner_create(const flashcpp_fused_moe_config* c, flashcpp_fused_moe_runner** out) {
  return capi::guard([&] {
    const char* op = "flashcpp_fused_moe_runner_create";
    capi::require_non_null(c, op, "config");
    capi::require_non_null(out, op, "out_runner");
    *out = nullptr;
    FusedMoeConfig cfg;
    cfg.activation_dtype = dtype_of(c->activation_dtype, op, "config.activation_dtype");
    cfg.weight_dtype = dtype_of(c->weight_dtype, op, "config.weight_dtype");
    cfg.output_dtype = dtype_of(c->output_dtype, op, "config.output_dtype");
    if (c->quantization < 0 || c->quantization > 2)
      throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument 'config.quantization' must be 0, 1 or 2");
    if (c->backend < 0 || c->backend > 4)
      throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument 'config.backend' must be in [0, 4]");
    cfg.quantization = static_cast<MoeQuantization>(c->quantization);
    cfg.backend = static_cast<MoeBackend>(c->backend);
    cfg.device = c->device;
    *out = new flashcpp_fused_moe_runner{FusedMoeRunner::create(*default_runtime(), cfg)};
  });
}

flashcpp_status flashcpp_fused_moe_run(const flashcpp_fused_moe_runner* r, const flashcpp_fused_moe_args* a,
                                       void* stream) {
  return capi::guard([&] {
    const char* op = "flashcpp_fused_moe_run";
    capi::require_non_null(r, op, "runner");
    capi::require_non_null(a, op, "args");
    FusedMoeArgs m;
    m.output = capi::to_view(a->output, op, "output");
    m.input = capi::to_view(a->input, op, "input");
    m.token_selected_experts = capi::to_view(a->token_selected_experts, op, "token_selected_experts");
    m.token_final_scales = capi::to_view(a->token_final_scales, op, "token_final_scales");
    m.fc1_weights = capi::to_view(a->fc1_weights, op, "fc1_weights");
    m.fc2_weights = capi::to_view(a->fc2_weights, op, "fc2_weights");
    TensorView s[8];
    m.fc1_bias = optional(a->fc1_bias, op, "fc1_bias", s[0]);
    m.fc2_bias = optional(a->fc2_bias, op, "fc2_bias", s[1]);
    m.fc1_dequant = optional(a->fc1_dequant, op, "fc1_dequant", s[2]);
    m.fc2_quant = optional(a->fc2_quant, op, "fc2_quant", s[3]);
    m.fc2_dequant = optional(a->fc2_dequant, op, "fc2_dequant", s[4]);
    m.fc1_input_dequant = optional(a->fc1_input_dequant, op, "fc1_input_dequant", s[5]);
    m.fc1_block_scales = optional(a->fc1_block_scales, op, "fc1_block_scales", s[6]);
    m.fc2_block_scales = optional(a->fc2_block_scales, op, "fc2_block_scales", s[7]);
    m.activation = static_cast<MoeActivation>(a->activation);
    m.tp_size = a->tp_size;
    m.tp_rank = a->tp_rank;
    m.ep_size = a->ep_size;
    m.ep_rank = a->ep_rank;
    m.enable_pdl = a->enable_pdl != 0;
    r->runner.run(m, static_cast<cudaStream_t>(stream));
  });
}

void flashcpp_fused_moe_runner_destroy(flashcpp_fused_moe_runner* r) { delete r; }

}  // extern "C"
