// float64 references of the RMSNorm family.
#include <cmath>
#include <vector>

#include "reference/reference_util.hpp"

namespace flashcpp::reference {
namespace {

void check_norm(const Validator& v, const TensorView& out, const char* out_arg, const TensorView& input,
                const TensorView& weight, int rank, const RmsNormOptions& o) {
  detail::check_host_float(v, input, "input");
  v.rank(input, "input", rank);
  detail::check_host_float(v, out, out_arg);
  v.same_shape(out, out_arg, input, "input");
  detail::check_host_float(v, weight, "weight");
  v.rank(weight, "weight", 1).dim(weight, "weight", 0, input.size(-1), "input.size(-1)");
  v.positive(o.eps, "eps");
}

// Normalises every row (the last dim) of a 2-D or 3-D view; `weight_bias` is 1 for the Gemma form.
void norm_rows(const TensorView& out, const TensorView& input, const TensorView& weight, double eps,
               double weight_bias) {
  const int64_t d = input.size(-1);
  const int64_t rows = input.numel() / (d == 0 ? 1 : d);
  const int64_t inner = input.rank == 3 ? input.size(1) : 1;
  std::vector<double> w(static_cast<size_t>(d));
  detail::load_row(weight, 0, d, w.data());
  detail::parallel_for((rows + 255) / 256, [&](int64_t block) {
    std::vector<double> x(static_cast<size_t>(d));
    for (int64_t r = block * 256; r < std::min(rows, (block + 1) * 256); ++r) {
      const int64_t a = r / inner, b = r % inner;
      const int64_t in_off = a * input.strides[0] + (input.rank == 3 ? b * input.strides[1] : 0);
      const int64_t out_off = a * out.strides[0] + (out.rank == 3 ? b * out.strides[1] : 0);
      detail::load_row(input, in_off, d, x.data());
      double ss = 0;
      for (double e : x) ss += e * e;
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
      const int64_t so = out.strides[static_cast<size_t>(out.rank - 1)];
      for (int64_t i = 0; i < d; ++i) store(out, out_off + i * so, x[i] * inv * (w[i] + weight_bias));
    }
  });
}

void fused_add(const char* op, const TensorView& input, const TensorView& residual, const TensorView& weight,
               const RmsNormOptions& o, double weight_bias) {
  const Validator v(op);
  check_norm(v, residual, "residual", input, weight, 2, o);
  const int64_t rows = input.size(0), d = input.size(1);
  std::vector<double> w(static_cast<size_t>(d));
  detail::load_row(weight, 0, d, w.data());
  detail::parallel_for(rows, [&](int64_t r) {
    std::vector<double> x(static_cast<size_t>(d)), res(static_cast<size_t>(d));
    detail::load_row(input, r * input.strides[0], d, x.data());
    detail::load_row(residual, r * residual.strides[0], d, res.data());
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) {
      x[i] += res[i];
      ss += x[i] * x[i];
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + o.eps);
    for (int64_t i = 0; i < d; ++i) {
      store(residual, r * residual.strides[0] + i * residual.strides[1], x[i]);
      store(input, r * input.strides[0] + i * input.strides[1], x[i] * inv * (w[i] + weight_bias));
    }
  });
}

}  // namespace

void rmsnorm(const TensorView& out, const TensorView& input, const TensorView& weight, const RmsNormOptions& o) {
  const Validator v("reference::rmsnorm");
  check_norm(v, out, "out", input, weight, 2, o);
  norm_rows(out, input, weight, o.eps, 0.0);
}

void fused_qk_rmsnorm(const TensorView& out, const TensorView& input, const TensorView& weight,
                      const RmsNormOptions& o) {
  const Validator v("reference::fused_qk_rmsnorm");
  check_norm(v, out, "out", input, weight, 3, o);
  norm_rows(out, input, weight, o.eps, 0.0);
}

void gemma_rmsnorm(const TensorView& out, const TensorView& input, const TensorView& weight,
                   const RmsNormOptions& o) {
  const Validator v("reference::gemma_rmsnorm");
  check_norm(v, out, "out", input, weight, 2, o);
  norm_rows(out, input, weight, o.eps, 1.0);
}

void fused_add_rmsnorm(const TensorView& input, const TensorView& residual, const TensorView& weight,
                       const RmsNormOptions& o) {
  fused_add("reference::fused_add_rmsnorm", input, residual, weight, o, 0.0);
}

void gemma_fused_add_rmsnorm(const TensorView& input, const TensorView& residual, const TensorView& weight,
                             const RmsNormOptions& o) {
  fused_add("reference::gemma_fused_add_rmsnorm", input, residual, weight, o, 1.0);
}

}  // namespace flashcpp::reference
