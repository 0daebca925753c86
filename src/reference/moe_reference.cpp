#include "reference/moe_reference.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"
#include "reference/mla_attention_reference.hpp"
#include "reference/reference_util.hpp"

namespace flashcpp::reference {

double moe_activation(MoeActivation a, double x) noexcept {
  switch (a) {
    case MoeActivation::gelu:
    case MoeActivation::geglu:  // tanh approximation, as TensorRT-LLM's GELU functor
      return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case MoeActivation::relu: return std::max(x, 0.0);
    case MoeActivation::silu:
    case MoeActivation::swiglu: return x / (1.0 + std::exp(-x));
    case MoeActivation::relu2: return x > 0 ? x * x : 0.0;
    case MoeActivation::identity: return x;
  }
  return x;
}

namespace {
/// Per 128-wide block of `v`: scale = amax / 448, v = e4m3(v / scale) · scale.
void quantize_blocks_e4m3(std::vector<double>& v) {
  for (size_t b0 = 0; b0 < v.size(); b0 += 128) {
    const size_t b1 = std::min(v.size(), b0 + 128);
    double amax = 0;
    for (size_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float scale = amax > 0 ? static_cast<float>(amax) / 448.0f : 1.0f;
    for (size_t i = b0; i < b1; ++i) v[i] = round_through(DType::e4m3, static_cast<float>(v[i]) / scale) * scale;
  }
}
}  // namespace

void fused_moe_reference(const FusedMoeConfig& c, const FusedMoeTensors& a, const FusedMoeOptions& opts,
                         std::vector<double>& out, int threads) {
  const int64_t T = a.input.size(0), H = a.input.size(1), K = a.token_selected_experts.size(1);
  const int64_t E = a.fc2_weights.size(0), I = a.fc2_weights.size(2);
  const bool gated = moe_activation_is_gated(opts.activation);
  const int64_t N1 = gated ? 2 * I : I;
  // The reference reads host memory by these shapes: make sure they agree before reading anything.
  const Validator v("fused_moe_reference");
  v.rank(a.input, "input", 2).rank(a.token_selected_experts, "token_selected_experts", 2)
      .dim(a.token_selected_experts, "token_selected_experts", 0, T, "input.size(0)")
      .rank(a.fc2_weights, "fc2_weights", 3).dim(a.fc2_weights, "fc2_weights", 1, H, "input.size(1)")
      .shape(a.fc1_weights, "fc1_weights", {E, N1, H})
      .shape(a.token_final_scales, "token_final_scales", {T, K});
  const bool fp8 = c.quantization == MoeQuantization::fp8_per_tensor;
  const bool ds = c.quantization == MoeQuantization::deepseek_fp8_block_scale;
  const int64_t expert_base = opts.ep_rank * E;  // experts of this rank: [ep_rank·E, (ep_rank+1)·E)
  out.assign(static_cast<size_t>(T * H), 0.0);
  // The fc2 input dtype: what the kernel stores the activation in.
  const DType act_store = fp8 ? DType::e4m3 : (ds ? DType::bf16 : c.activation_dtype);

  // Row r of expert e's weights times x; in DeepSeek's FP8 mode summed per 128-column block and scaled by that
  // block's (row / 128, column / 128) scale.
  const auto weight_row_dot = [&](const TensorView& w, OptionalTensor block_scales, int64_t e, int64_t r,
                                  const std::vector<double>& x) {
    const int64_t cols = w.size(2);
    double s = 0;
    if (ds) {
      for (int64_t kb = 0; kb < cols; kb += 128) {
        double part = 0;
        for (int64_t d = kb; d < std::min(cols, kb + 128); ++d) part += at(w, {e, r, d}) * x[d];
        s += part * at(*block_scales, {e, r / 128, kb / 128});
      }
    } else {
      for (int64_t d = 0; d < cols; ++d) s += at(w, {e, r, d}) * x[d];
    }
    return s;
  };

  detail::parallel_for(T, threads, [&](int64_t t) {
    std::vector<double> x(static_cast<size_t>(H)), h(static_cast<size_t>(N1)), act(static_cast<size_t>(I));
    for (int64_t d = 0; d < H; ++d) x[d] = at(a.input, {t, d});
    if (ds) quantize_blocks_e4m3(x);
    double* o = &out[static_cast<size_t>(t * H)];
    std::vector<double> acc(static_cast<size_t>(H), 0.0);
    for (int64_t kk = 0; kk < K; ++kk) {
      const int64_t e = static_cast<int64_t>(at(a.token_selected_experts, {t, kk})) - expert_base;
      if (e < 0 || e >= E) continue;  // another rank's expert
      const double w = at(a.token_final_scales, {t, kk});
      for (int64_t r = 0; r < N1; ++r) {
        double s = weight_row_dot(a.fc1_weights, a.fc1_block_scales, e, r, x);
        if (fp8) s *= at(*a.fc1_dequant, {e});
        if (a.fc1_bias) s += at(*a.fc1_bias, {e, r});
        h[r] = round_through(c.output_dtype, s);
      }
      const double q2 = fp8 ? (a.fc2_quant->rank == 0 ? at(*a.fc2_quant, {}) : at(*a.fc2_quant, {e})) : 1.0;
      for (int64_t i = 0; i < I; ++i) {
        const double v =
            gated ? moe_activation(opts.activation, h[I + i]) * h[i] : moe_activation(opts.activation, h[i]);
        act[i] = round_through(act_store, static_cast<float>(v * q2));
      }
      if (ds) quantize_blocks_e4m3(act);
      for (int64_t r = 0; r < H; ++r) {
        double s = weight_row_dot(a.fc2_weights, a.fc2_block_scales, e, r, act);
        if (fp8) s *= at(*a.fc2_dequant, {e});
        if (a.fc2_bias) s += at(*a.fc2_bias, {e, r});
        acc[r] += w * round_through(c.output_dtype, s);
      }
    }
    for (int64_t r = 0; r < H; ++r) o[r] = acc[r];
  });
}

}  // namespace flashcpp::reference
