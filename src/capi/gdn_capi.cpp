// C ABI of GDN prefill (include/flashcpp/c/gdn.h).
#include "flashcpp/c/gdn.h"

#include "capi/capi.hpp"
#include "flashcpp/gdn.hpp"
#include "flashcpp/runtime.hpp"

using namespace flashcpp;
using capi::default_runtime;
using capi::optional;

extern "C" {

flashcpp_status flashcpp_gdn_prefill(const flashcpp_gdn_prefill_args* a, void* stream) {
  return capi::guard([&] {
    const char* op = "flashcpp_gdn_prefill";
    const flashcpp_gdn_prefill_args args = capi::read_struct(a, op, "args");
    TensorView cu_host, state, alpha, beta, ws;
    const GdnPrefillTensors g{.output = capi::to_view(args.output, op, "output"),
                           .output_state = capi::to_view(args.output_state, op, "output_state"),
                           .q = capi::to_view(args.q, op, "q"),
                           .k = capi::to_view(args.k, op, "k"),
                           .v = capi::to_view(args.v, op, "v"),
                           .cu_seqlens = capi::to_view(args.cu_seqlens, op, "cu_seqlens"),
                           .cu_seqlens_host = optional(args.cu_seqlens_host, op, "cu_seqlens_host", cu_host),
                           .input_state = optional(args.input_state, op, "input_state", state),
                           .alpha = optional(args.alpha, op, "alpha", alpha),
                           .beta = optional(args.beta, op, "beta", beta),
                           .workspace = optional(args.workspace, op, "workspace", ws)};
    gdn_prefill(*default_runtime(), g, {.scale = capi::sm_scale_of(args.scale)}, static_cast<cudaStream_t>(stream));
  });
}

flashcpp_status flashcpp_gdn_prefill_workspace_bytes(int32_t device, int64_t* out) {
  return capi::guard([&] {
    capi::require_non_null(out, "flashcpp_gdn_prefill_workspace_bytes", "out_bytes");
    *out = gdn_prefill_workspace_bytes(device);
  });
}

}  // extern "C"
