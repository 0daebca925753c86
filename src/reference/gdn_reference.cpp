#include "reference/gdn_reference.hpp"

#include <algorithm>
#include <cmath>

#include "reference/mla_attention_reference.hpp"
#include "reference/reference_util.hpp"

namespace flashcpp::reference {

void gdn_prefill_reference(const GdnReferenceInputs& in, std::vector<double>& out, std::vector<double>& state,
                           int threads) {
  const int64_t T = in.q.size(0), Hq = in.q.size(1), D = in.q.size(2), Hk = in.k.size(1), Hv = in.v.size(1);
  const int64_t Hsab = std::max(Hq, Hv), N = static_cast<int64_t>(in.cu_seqlens.size()) - 1;
  const int64_t q_group = Hsab / Hq, k_group = Hsab / Hk, v_group = Hsab / Hv;
  const double scale = in.scale > 0 ? in.scale : 1.0 / std::sqrt(static_cast<double>(D));
  out.assign(static_cast<size_t>(T * Hsab * D), 0.0);
  state.assign(static_cast<size_t>(N * Hsab * D * D), 0.0);
  detail::parallel_for(N * Hsab, threads, [&](int64_t item) {
    const int64_t n = item / Hsab, h = item % Hsab, hq = h / q_group, hk = h / k_group, hv = h / v_group;
    double* S = &state[static_cast<size_t>((n * Hsab + h) * D * D)];  // S[v * D + k]
    if (in.input_state)
      for (int64_t a = 0; a < D; ++a)
        for (int64_t b = 0; b < D; ++b) S[a * D + b] = at(*in.input_state, {n, h, a, b});
    std::vector<double> q(D), k(D), v(D), u(D);
    for (int64_t t = in.cu_seqlens[n]; t < in.cu_seqlens[n + 1]; ++t) {
      for (int64_t d = 0; d < D; ++d) {
        q[d] = at(in.q, {t, hq, d});
        k[d] = at(in.k, {t, hk, d});
        v[d] = at(in.v, {t, hv, d});
      }
      const double alpha = in.alpha ? at(*in.alpha, {t, h}) : 1.0;
      const double beta = in.beta ? at(*in.beta, {t, h}) : 1.0;
      for (int64_t i = 0; i < D * D; ++i) S[i] *= alpha;
      for (int64_t a = 0; a < D; ++a) {  // u = beta (v - S k)
        double sk = 0;
        for (int64_t b = 0; b < D; ++b) sk += S[a * D + b] * k[b];
        u[a] = beta * (v[a] - sk);
      }
      for (int64_t a = 0; a < D; ++a)
        for (int64_t b = 0; b < D; ++b) S[a * D + b] += u[a] * k[b];
      double* o = &out[static_cast<size_t>((t * Hsab + h) * D)];
      for (int64_t a = 0; a < D; ++a) {
        double acc = 0;
        for (int64_t b = 0; b < D; ++b) acc += S[a * D + b] * q[b];
        o[a] = scale * acc;
      }
    }
  });
}

}  // namespace flashcpp::reference
