// C ABI of batch MLA (plan/run) (include/flashcpp/c/mla_attention.h).
#include "flashcpp/c/mla_attention.h"

#include <memory>

#include "capi/capi.hpp"
#include "flashcpp/mla_attention.hpp"
#include "flashcpp/runtime.hpp"

struct flashcpp_batch_mla_plan {
  flashcpp::BatchMlaPlan plan;
};

using namespace flashcpp;
using capi::default_runtime;
using capi::dtype_of;
using capi::optional;

extern "C" {

flashcpp_status flashcpp_batch_mla_plan_create(const flashcpp_batch_mla_config* c, const flashcpp_tensor* fw,
                                               const flashcpp_tensor* iw, const flashcpp_tensor* pw,
                                               const flashcpp_tensor* qo, const flashcpp_tensor* kvp,
                                               const flashcpp_tensor* kvl, void* stream,
                                               flashcpp_batch_mla_plan** out) {
  return capi::guard([&] {
    const char* op = "flashcpp_batch_mla_plan_create";
    const flashcpp_batch_mla_config config = capi::read_struct(c, op, "config");
    capi::require_non_null(out, op, "out_plan");
    *out = nullptr;
    BatchMlaConfig cfg;
    cfg.num_heads = config.num_heads;
    cfg.page_size = config.page_size;
    cfg.q_dtype = dtype_of(config.q_dtype, op, "config.q_dtype");
    cfg.kv_dtype = dtype_of(config.kv_dtype, op, "config.kv_dtype");
    cfg.causal = capi::flag_of(config.causal, op, "config.causal");
    cfg.return_lse_base_on_e = capi::flag_of(config.return_lse_base_on_e, op, "config.return_lse_base_on_e");
    if (config.backend < FLASHCPP_MLA_AUTO || config.backend > FLASHCPP_MLA_SM90)
      throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument 'config.backend' must be 0, 1 or 2");
    cfg.backend = static_cast<MlaBackend>(config.backend);
    cfg.sm_scale = capi::sm_scale_of(config.sm_scale);
    Workspace ws{capi::to_view(fw, op, "float_workspace"), capi::to_view(iw, op, "int_workspace"),
                 capi::to_view(pw, op, "pinned_int_workspace")};
    auto plan = BatchMlaPlan::create(*default_runtime(), ws, capi::to_view(qo, op, "qo_indptr_host"),
                                     capi::to_view(kvp, op, "kv_indptr_host"), capi::to_view(kvl, op, "kv_len_host"),
                                     cfg, static_cast<cudaStream_t>(stream));
    *out = new flashcpp_batch_mla_plan{std::move(plan)};
  });
}

flashcpp_status flashcpp_batch_mla_run(const flashcpp_batch_mla_plan* p, const flashcpp_tensor* q_nope,
                                       const flashcpp_tensor* q_pe, const flashcpp_batch_mla_cache* cache,
                                       const flashcpp_tensor* o, const flashcpp_tensor* lse, void* stream) {
  return capi::guard([&] {
    const char* op = "flashcpp_batch_mla_run";
    capi::require_non_null(p, op, "plan");
    const flashcpp_batch_mla_cache c = capi::read_struct(cache, op, "cache");
    TensorView lse_slot;
    p->plan.run(capi::to_view(q_nope, op, "q_nope"), capi::to_view(q_pe, op, "q_pe"),
                capi::to_view(c.ckv_cache, op, "cache.ckv_cache"), capi::to_view(c.kpe_cache, op, "cache.kpe_cache"),
                capi::to_view(c.kv_indices, op, "cache.kv_indices"), capi::to_view(o, op, "out"),
                optional(lse, op, "lse", lse_slot), static_cast<cudaStream_t>(stream));
  });
}

void flashcpp_batch_mla_plan_destroy(flashcpp_batch_mla_plan* p) { delete p; }

}  // extern "C"
