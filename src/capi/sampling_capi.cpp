// C ABI of the sampler (include/flashcpp/c/sampling.h).
#include "flashcpp/c/sampling.h"

#include "capi/capi.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/sampling.hpp"

namespace flashcpp::capi {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

SamplingOptions options_of(const flashcpp_sampling_options* c, const char* op) {
  const auto o = read_struct(c, op, "options");
  return {.deterministic = flag_of(o.deterministic, op, "options.deterministic"),
          .philox_seed = o.philox_seed,
          .philox_offset = o.philox_offset};
}

// The scalar, or the per-row tensor when one is given (slot holds its view for the call).
SamplingParam param_of(const flashcpp_tensor* per_row, double value, const char* op, const char* name,
                       TensorView& slot) {
  if (const TensorView* t = optional(per_row, op, name, slot)) return SamplingParam(*t);
  return SamplingParam(value);
}
TopKParam top_k_of(const flashcpp_tensor* per_row, int64_t value, const char* op, const char* name, TensorView& slot) {
  if (const TensorView* t = optional(per_row, op, name, slot)) return TopKParam(*t);
  return TopKParam(value);
}

// A sampler's C entry under guard: its input (`input_name` in messages), samples, optional row_indices and options,
// converted alike for every sampler; `run` gets them with the runtime and the stream, and adds the sampler's own
// parameters.
template <class Run>
flashcpp_status sample(const char* op, const flashcpp_tensor* input, const char* input_name,
                       const flashcpp_tensor* samples, const flashcpp_tensor* row_indices,
                       const flashcpp_sampling_options* options, void* stream, Run run) {
  return guard([&] {
    TensorView idx;
    run(*default_runtime(), to_view(input, op, input_name), to_view(samples, op, "samples"),
        optional(row_indices, op, "row_indices", idx), options_of(options, op), as_stream(stream));
  });
}

}  // namespace
}  // namespace flashcpp::capi

using namespace flashcpp;
using namespace flashcpp::capi;

extern "C" {

int64_t flashcpp_softmax_workspace_bytes(int64_t rows, int64_t vocab) { return softmax_workspace_bytes(rows, vocab); }
int64_t flashcpp_sampling_row_states_bytes(void) { return kSamplingRowStatesBytes; }

flashcpp_status flashcpp_softmax(const flashcpp_tensor* workspace, const flashcpp_tensor* logits,
                                 const flashcpp_tensor* probs, const flashcpp_tensor* temperature_per_row,
                                 double temperature, int32_t enable_pdl, void* stream) {
  constexpr const char* op = "softmax";
  return guard([&] {
    TensorView t;
    softmax(*default_runtime(), to_view(workspace, op, "workspace"), to_view(logits, op, "logits"),
            to_view(probs, op, "probs"), param_of(temperature_per_row, temperature, op, "temperature_per_row", t),
            SoftmaxOptions{.enable_pdl = flag_of(enable_pdl, op, "enable_pdl")}, as_stream(stream));
  });
}

// sampling_from_probs / sampling_from_logits: (input, samples, row_indices, options, stream).
#define FLASHCPP_PLAIN_SAMPLER(NAME, INPUT)                                                                     \
  flashcpp_status flashcpp_##NAME(const flashcpp_tensor* input, const flashcpp_tensor* samples,                 \
                                  const flashcpp_tensor* row_indices, const flashcpp_sampling_options* options, \
                                  void* stream) {                                                               \
    return sample(#NAME, input, INPUT, samples, row_indices, options, stream,                                   \
                  [](auto& rt, auto in, auto out, auto idx, auto o, auto s) { NAME(rt, in, out, idx, o, s); }); \
  }
FLASHCPP_PLAIN_SAMPLER(sampling_from_probs, "probs")
FLASHCPP_PLAIN_SAMPLER(sampling_from_logits, "logits")
#undef FLASHCPP_PLAIN_SAMPLER

// top_k / top_p / min_p sampling: (probs, samples, per_row, value, row_indices, options, stream); PARAM_OF makes the
// C++ parameter of VALUE's type from the per-row tensor or the value.
#define FLASHCPP_ONE_PARAM_SAMPLER(NAME, VALUE, PARAM_OF, PARAM)                                                  \
  flashcpp_status flashcpp_##NAME(const flashcpp_tensor* probs, const flashcpp_tensor* samples,                   \
                                  const flashcpp_tensor* per_row, VALUE value, const flashcpp_tensor* row_indices, \
                                  const flashcpp_sampling_options* options, void* stream) {                       \
    return sample(#NAME, probs, "probs", samples, row_indices, options, stream,                                   \
                  [&](auto& rt, auto in, auto out, auto idx, auto o, auto s) {                                    \
                    TensorView p;                                                                                 \
                    NAME(rt, in, out, PARAM_OF(per_row, value, #NAME, PARAM "_per_row", p), idx, o, s);           \
                  });                                                                                             \
  }
FLASHCPP_ONE_PARAM_SAMPLER(top_k_sampling_from_probs, int64_t, top_k_of, "top_k")
FLASHCPP_ONE_PARAM_SAMPLER(top_p_sampling_from_probs, double, param_of, "top_p")
FLASHCPP_ONE_PARAM_SAMPLER(min_p_sampling_from_probs, double, param_of, "min_p")
#undef FLASHCPP_ONE_PARAM_SAMPLER

flashcpp_status flashcpp_top_k_top_p_sampling_from_probs(const flashcpp_tensor* probs, const flashcpp_tensor* samples,
                                                         const flashcpp_tensor* top_k_per_row, int64_t top_k,
                                                         const flashcpp_tensor* top_p_per_row, double top_p,
                                                         const flashcpp_tensor* row_indices,
                                                         const flashcpp_sampling_options* options, void* stream) {
  constexpr const char* op = "top_k_top_p_sampling_from_probs";
  return sample(op, probs, "probs", samples, row_indices, options, stream,
                [&](auto& rt, auto in, auto out, auto idx, auto o, auto s) {
                  TensorView k, p;
                  top_k_top_p_sampling_from_probs(rt, in, out,
                                                  top_k_of(top_k_per_row, top_k, op, "top_k_per_row", k),
                                                  param_of(top_p_per_row, top_p, op, "top_p_per_row", p), idx, o, s);
                });
}

flashcpp_status flashcpp_top_k_top_p_sampling_from_logits(
    const flashcpp_sampling_workspace* workspace, const flashcpp_tensor* logits, const flashcpp_tensor* probs,
    const flashcpp_tensor* samples, const flashcpp_tensor* top_k_per_row, int64_t top_k,
    const flashcpp_tensor* top_p_per_row, double top_p, int32_t order, const flashcpp_tensor* row_indices,
    const flashcpp_sampling_options* options, void* stream) {
  constexpr const char* op = "top_k_top_p_sampling_from_logits";
  return guard([&] {
    const flashcpp_sampling_workspace w = read_struct(workspace, op, "workspace");
    if (order != FLASHCPP_TOP_K_FIRST && order != FLASHCPP_TOP_K_TOP_P_JOINT)
      throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument 'order' must be FLASHCPP_TOP_K_FIRST (0) "
                                                                 "or FLASHCPP_TOP_K_TOP_P_JOINT (1); got " +
                                                   std::to_string(order));
    const SamplingWorkspace ws{to_view(w.softmax_buffer, op, "workspace.softmax_buffer"),
                               to_view(w.row_states, op, "workspace.row_states")};
    TensorView k, p, idx;
    top_k_top_p_sampling_from_logits(
        *default_runtime(), ws, to_view(logits, op, "logits"), to_view(probs, op, "probs"),
        to_view(samples, op, "samples"), top_k_of(top_k_per_row, top_k, op, "top_k_per_row", k),
        param_of(top_p_per_row, top_p, op, "top_p_per_row", p),
        order == FLASHCPP_TOP_K_FIRST ? TopKTopPOrder::top_k_first : TopKTopPOrder::joint,
        optional(row_indices, op, "row_indices", idx), options_of(options, op), as_stream(stream));
  });
}

flashcpp_status flashcpp_top_p_renorm_probs(const flashcpp_tensor* probs, const flashcpp_tensor* renorm,
                                            const flashcpp_tensor* top_p_per_row, double top_p, void* stream) {
  constexpr const char* op = "top_p_renorm_probs";
  return guard([&] {
    TensorView p;
    top_p_renorm_probs(*default_runtime(), to_view(probs, op, "probs"), to_view(renorm, op, "renorm"),
                       param_of(top_p_per_row, top_p, op, "top_p_per_row", p), as_stream(stream));
  });
}

// top_k_renorm_probs / top_k_mask_logits: (input, output, top_k_per_row, top_k, row_states, stream).
#define FLASHCPP_TOP_K_FILTER(NAME, INPUT, OUTPUT)                                                                 \
  flashcpp_status flashcpp_##NAME(const flashcpp_tensor* input, const flashcpp_tensor* output,                     \
                                  const flashcpp_tensor* top_k_per_row, int64_t top_k,                             \
                                  const flashcpp_tensor* row_states, void* stream) {                               \
    return guard([&] {                                                                                             \
      TensorView k;                                                                                                \
      NAME(*default_runtime(), to_view(input, #NAME, INPUT), to_view(output, #NAME, OUTPUT),                       \
           top_k_of(top_k_per_row, top_k, #NAME, "top_k_per_row", k), to_view(row_states, #NAME, "row_states"),    \
           as_stream(stream));                                                                                     \
    });                                                                                                            \
  }
FLASHCPP_TOP_K_FILTER(top_k_renorm_probs, "probs", "renorm")
FLASHCPP_TOP_K_FILTER(top_k_mask_logits, "logits", "masked")
#undef FLASHCPP_TOP_K_FILTER

}  // extern "C"
