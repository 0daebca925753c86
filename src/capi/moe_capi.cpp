// C ABI of the fused MoE runner (include/flashcpp/c/moe.h).
#include "flashcpp/c/moe.h"

#include <memory>

#include "capi/capi.hpp"
#include "flashcpp/moe.hpp"
#include "flashcpp/runtime.hpp"

struct flashcpp_fused_moe_runner {
  flashcpp::FusedMoeRunner runner;
};

using namespace flashcpp;
using capi::default_runtime;
using capi::dtype_of;
using capi::optional;

namespace {
// The C++ arguments of a run or tune call, from the C struct that holds both: its tensors (`s` holds the optional
// tensors' views for the call) and its scalars.
struct MoeCall {
  FusedMoeTensors tensors;
  FusedMoeOptions options;
};
MoeCall moe_call(const flashcpp_fused_moe_args* a, const char* op, TensorView (&s)[8]) {
  const flashcpp_fused_moe_args args = capi::read_struct(a, op, "args");
  MoeCall c;
  FusedMoeTensors& m = c.tensors;
  m.output = capi::to_view(args.output, op, "output");
  m.input = capi::to_view(args.input, op, "input");
  m.token_selected_experts = capi::to_view(args.token_selected_experts, op, "token_selected_experts");
  m.token_final_scales = capi::to_view(args.token_final_scales, op, "token_final_scales");
  m.fc1_weights = capi::to_view(args.fc1_weights, op, "fc1_weights");
  m.fc2_weights = capi::to_view(args.fc2_weights, op, "fc2_weights");
  m.fc1_bias = optional(args.fc1_bias, op, "fc1_bias", s[0]);
  m.fc2_bias = optional(args.fc2_bias, op, "fc2_bias", s[1]);
  m.fc1_dequant = optional(args.fc1_dequant, op, "fc1_dequant", s[2]);
  m.fc2_quant = optional(args.fc2_quant, op, "fc2_quant", s[3]);
  m.fc2_dequant = optional(args.fc2_dequant, op, "fc2_dequant", s[4]);
  m.fc1_input_dequant = optional(args.fc1_input_dequant, op, "fc1_input_dequant", s[5]);
  m.fc1_block_scales = optional(args.fc1_block_scales, op, "fc1_block_scales", s[6]);
  m.fc2_block_scales = optional(args.fc2_block_scales, op, "fc2_block_scales", s[7]);
  FusedMoeOptions& o = c.options;
  o.activation = static_cast<MoeActivation>(args.activation);
  o.tp_size = args.tp_size;
  o.tp_rank = args.tp_rank;
  o.ep_size = args.ep_size;
  o.ep_rank = args.ep_rank;
  o.enable_pdl = capi::flag_of(args.enable_pdl, op, "enable_pdl");
  return c;
}
}  // namespace

extern "C" {

flashcpp_status flashcpp_fused_moe_runner_create(const flashcpp_fused_moe_config* c, flashcpp_fused_moe_runner** out) {
  return capi::guard([&] {
    const char* op = "flashcpp_fused_moe_runner_create";
    const flashcpp_fused_moe_config config = capi::read_struct(c, op, "config");
    capi::require_non_null(out, op, "out_runner");
    *out = nullptr;
    FusedMoeConfig cfg;
    cfg.activation_dtype = dtype_of(config.activation_dtype, op, "config.activation_dtype");
    cfg.weight_dtype = dtype_of(config.weight_dtype, op, "config.weight_dtype");
    cfg.output_dtype = dtype_of(config.output_dtype, op, "config.output_dtype");
    if (config.quantization < 0 || config.quantization > 2)
      throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument 'config.quantization' must be 0, 1 or 2");
    if (config.backend < 0 || config.backend > 4)
      throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument 'config.backend' must be in [0, 4]");
    cfg.quantization = static_cast<MoeQuantization>(config.quantization);
    cfg.backend = static_cast<MoeBackend>(config.backend);
    cfg.device = config.device;
    cfg.auto_tune = capi::flag_of(config.auto_tune, op, "config.auto_tune");
    *out = new flashcpp_fused_moe_runner{FusedMoeRunner::create(*default_runtime(), cfg)};
  });
}


flashcpp_status flashcpp_fused_moe_run(const flashcpp_fused_moe_runner* r, const flashcpp_fused_moe_args* a,
                                       void* stream) {
  return capi::guard([&] {
    const char* op = "flashcpp_fused_moe_run";
    capi::require_non_null(r, op, "runner");
    TensorView s[8];
    const MoeCall c = moe_call(a, op, s);
    r->runner.run(c.tensors, c.options, static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_fused_moe_tune(flashcpp_fused_moe_runner* r, const flashcpp_fused_moe_args* a, void* stream,
                                        int64_t* out_gemm1, int64_t* out_gemm2) {
  return capi::guard([&] {
    const char* op = "flashcpp_fused_moe_tune";
    capi::require_non_null(r, op, "runner");
    TensorView s[8];
    const MoeCall c = moe_call(a, op, s);
    const MoeTactics t = r->runner.tune(c.tensors, c.options, static_cast<cudaStream_t>(stream));
    if (out_gemm1) *out_gemm1 = t.gemm1;
    if (out_gemm2) *out_gemm2 = t.gemm2;
  });
}

flashcpp_status flashcpp_fused_moe_tactics(const flashcpp_fused_moe_runner* r, int64_t tokens, int64_t* out_gemm1,
                                           int64_t* out_gemm2) {
  return capi::guard([&] {
    const char* op = "flashcpp_fused_moe_tactics";
    capi::require_non_null(r, op, "runner");
    capi::require_non_null(out_gemm1, op, "out_gemm1");
    capi::require_non_null(out_gemm2, op, "out_gemm2");
    const MoeTactics t = r->runner.tactics_for(tokens);
    *out_gemm1 = t.gemm1;
    *out_gemm2 = t.gemm2;
  });
}

flashcpp_status flashcpp_fused_moe_set_tactics(flashcpp_fused_moe_runner* r, int64_t tokens, int64_t gemm1,
                                               int64_t gemm2) {
  return capi::guard([&] {
    capi::require_non_null(r, "flashcpp_fused_moe_set_tactics", "runner");
    r->runner.set_tactics(tokens, MoeTactics{gemm1, gemm2});
  });
}

void flashcpp_fused_moe_runner_destroy(flashcpp_fused_moe_runner* r) { delete r; }

}  // extern "C"
