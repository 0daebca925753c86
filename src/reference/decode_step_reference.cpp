// float64 references of the gated activations and the cascade merges (flashcpp/activation.hpp, cascade.hpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/reference_util.hpp"

namespace flashcpp::reference {
namespace {

// Element offset of row `row` of t: the row-major index over every dim but the last, through t's strides.
int64_t row_offset(const TensorView& t, int64_t row) {
  int64_t off = 0;
  for (int d = t.rank - 2; d >= 0; --d) {
    off += (row % t.shape[d]) * t.strides[d];
    row /= t.shape[d];
  }
  return off;
}

template <class Act>
void act_and_mul(const char* op, const TensorView& out, const TensorView& input, Act act) {
  const Validator v(op);
  detail::check_host_float(v, input, "input");
  detail::check_host_float(v, out, "out");
  v.require(input.rank >= 1, "input", "must have at least one dim");
  v.rank(out, "out", input.rank);
  for (int i = 0; i + 1 < input.rank; ++i) v.dim(out, "out", i, input.shape[i], "input's");
  const int64_t width = input.shape[input.rank - 1];
  v.require(width % 2 == 0, "input", "must have an even last dim (the gate and up halves)");
  const int64_t d = width / 2;
  v.dim(out, "out", out.rank - 1, d, "input.size(-1) / 2");
  const int64_t rows = width == 0 ? 0 : input.numel() / width;
  const int64_t si = input.strides[input.rank - 1], so = out.strides[out.rank - 1];
  detail::parallel_for(rows, [&](int64_t r) {
    const int64_t in = row_offset(input, r), o = row_offset(out, r);
    for (int64_t i = 0; i < d; ++i) store(out, o + i * so, act(load(input, in + i * si)) * load(input, in + (d + i) * si));
  });
}

constexpr double kSqrt2OverPi = 0.7978845608028654;

// One state pair: (v, s) <- merge((va, sa), (vb, sb)) over one head's row of `d` values (doubles).
void merge_pair(double sa, double sb, const double* va, const double* vb, int64_t d, double* v, double& s) {
  const double m = std::max(sa, sb);
  const double wa = std::exp2(sa - m), wb = std::exp2(sb - m);
  for (int64_t i = 0; i < d; ++i) v[i] = (wa * va[i] + wb * vb[i]) / (wa + wb);
  s = m + std::log2(wa + wb);
}

void check_state(const Validator& v, const TensorView& values, const char* varg, const TensorView& lse,
                 const char* sarg, int rank) {
  detail::check_host_float(v, values, varg);
  v.rank(values, varg, rank);
  detail::check_host_float(v, lse, sarg);
  v.rank(lse, sarg, rank - 1);
  for (int i = 0; i + 1 < rank; ++i) v.dim(lse, sarg, i, values.shape[i], varg);
}

void check_like(const Validator& v, const TensorView& t, const char* arg, const TensorView& ref, const char* ref_arg) {
  detail::check_host_float(v, t, arg);
  v.same_shape(t, arg, ref, ref_arg);
}

// Row (token, head) of a [tokens, heads, d] view into dst.
void load_head(const TensorView& t, int64_t token, int64_t head, double* dst) {
  detail::load_row(t, offset_of(t, {token, head, 0}), t.shape[2], dst);
}
void store_head(const TensorView& t, int64_t token, int64_t head, const double* src) {
  const int64_t off = offset_of(t, {token, head, 0});
  for (int64_t i = 0; i < t.shape[2]; ++i) store(t, off + i * t.strides[2], src[i]);
}

}  // namespace

void silu_and_mul(const TensorView& out, const TensorView& input) {
  act_and_mul("reference::silu_and_mul", out, input, [](double x) { return x / (1.0 + std::exp(-x)); });
}
void gelu_and_mul(const TensorView& out, const TensorView& input) {
  act_and_mul("reference::gelu_and_mul", out, input, [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); });
}
void gelu_tanh_and_mul(const TensorView& out, const TensorView& input) {
  act_and_mul("reference::gelu_tanh_and_mul", out, input,
              [](double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x))); });
}

void merge_state(const TensorView& v_a, const TensorView& s_a, const TensorView& v_b, const TensorView& s_b,
                 const TensorView& v_merged, const TensorView& s_merged) {
  const Validator v("reference::merge_state");
  check_state(v, v_a, "v_a", s_a, "s_a", 3);
  check_like(v, v_b, "v_b", v_a, "v_a");
  check_like(v, s_b, "s_b", s_a, "s_a");
  check_like(v, v_merged, "v_merged", v_a, "v_a");
  check_like(v, s_merged, "s_merged", s_a, "s_a");
  const int64_t tokens = v_a.shape[0], heads = v_a.shape[1], d = v_a.shape[2];
  detail::parallel_for(tokens, [&](int64_t t) {
    std::vector<double> a(static_cast<size_t>(d)), b(a), m(a);
    for (int64_t h = 0; h < heads; ++h) {
      load_head(v_a, t, h, a.data());
      load_head(v_b, t, h, b.data());
      double s = 0;
      merge_pair(load(s_a, offset_of(s_a, {t, h})), load(s_b, offset_of(s_b, {t, h})), a.data(), b.data(), d,
                 m.data(), s);
      store_head(v_merged, t, h, m.data());
      store(s_merged, offset_of(s_merged, {t, h}), s);
    }
  });
}

void merge_state_in_place(const TensorView& v, const TensorView& s, const TensorView& v_other,
                          const TensorView& s_other, const TensorView* mask) {
  const Validator val("reference::merge_state_in_place");
  check_state(val, v, "v", s, "s", 3);
  check_like(val, v_other, "v_other", v, "v");
  check_like(val, s_other, "s_other", s, "s");
  if (mask) {
    val.defined(*mask, "mask").on_host(*mask, "mask").dtype(*mask, "mask", {DType::u8, DType::boolean});
    val.rank(*mask, "mask", 1).dim(*mask, "mask", 0, v.shape[0], "v.size(0)");
  }
  const int64_t tokens = v.shape[0], heads = v.shape[1], d = v.shape[2];
  detail::parallel_for(tokens, [&](int64_t t) {
    if (mask && static_cast<const uint8_t*>(mask->data)[t * mask->strides[0]] == 0) return;
    std::vector<double> a(static_cast<size_t>(d)), b(a), m(a);
    for (int64_t h = 0; h < heads; ++h) {
      load_head(v, t, h, a.data());
      load_head(v_other, t, h, b.data());
      double sm = 0;
      merge_pair(load(s, offset_of(s, {t, h})), load(s_other, offset_of(s_other, {t, h})), a.data(), b.data(), d,
                 m.data(), sm);
      store_head(v, t, h, m.data());
      store(s, offset_of(s, {t, h}), sm);
    }
  });
}

void merge_states(const TensorView& v, const TensorView& s, const TensorView& v_merged, const TensorView& s_merged) {
  const Validator val("reference::merge_states");
  check_state(val, v, "v", s, "s", 4);
  const int64_t tokens = v.shape[0], sets = v.shape[1], heads = v.shape[2], d = v.shape[3];
  val.require(sets >= 1, "v", "must have at least one index set (dim 1)");
  detail::check_host_float(val, v_merged, "v_merged");
  val.shape(v_merged, "v_merged", {tokens, heads, d});
  detail::check_host_float(val, s_merged, "s_merged");
  val.shape(s_merged, "s_merged", {tokens, heads});
  detail::parallel_for(tokens, [&](int64_t t) {
    std::vector<double> acc(static_cast<size_t>(d)), row(acc), next(acc);
    for (int64_t h = 0; h < heads; ++h) {
      detail::load_row(v, offset_of(v, {t, 0, h, 0}), d, acc.data());
      double sa = load(s, offset_of(s, {t, 0, h}));
      for (int64_t k = 1; k < sets; ++k) {
        detail::load_row(v, offset_of(v, {t, k, h, 0}), d, row.data());
        merge_pair(sa, load(s, offset_of(s, {t, k, h})), acc.data(), row.data(), d, next.data(), sa);
        acc.swap(next);
      }
      store_head(v_merged, t, h, acc.data());
      store(s_merged, offset_of(s_merged, {t, h}), sa);
    }
  });
}

}  // namespace flashcpp::reference
