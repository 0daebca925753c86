// float64 references of the gated activations, the cascade merges and RoPE (flashcpp/activation.hpp, cascade.hpp,
// rope.hpp).
#include <algorithm>
#include <cmath>
#include <functional>
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

// ---------------------------------------------------------------------------------------------------------------
// RoPE

namespace flashcpp::reference {
namespace {

// cos and sin of frequency index p (< rotary_dim / 2) at position pos.
using AngleFn = std::function<void(int64_t pos, int64_t p, double& c, double& s)>;

void check_rope(const Validator& v, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                const TensorView& k_rope, const TensorView& pos_ids, int64_t rotary_dim) {
  detail::check_host_float(v, q, "q");
  v.rank(q, "q", 3);
  detail::check_host_float(v, k, "k");
  v.rank(k, "k", 3).dim(k, "k", 0, q.shape[0], "q.size(0)").dim(k, "k", 2, q.shape[2], "q.size(2)");
  detail::check_host_float(v, q_rope, "q_rope");
  v.same_shape(q_rope, "q_rope", q, "q");
  detail::check_host_float(v, k_rope, "k_rope");
  v.same_shape(k_rope, "k_rope", k, "k");
  v.defined(pos_ids, "pos_ids").on_host(pos_ids, "pos_ids").dtype(pos_ids, "pos_ids", {DType::i32, DType::i64});
  v.rank(pos_ids, "pos_ids", 1).dim(pos_ids, "pos_ids", 0, q.shape[0], "q.size(0)");
  v.require(rotary_dim >= 2 && rotary_dim % 2 == 0 && rotary_dim <= q.shape[2], "rotary_dim",
            "must be even and in [2, head_dim]; got " + std::to_string(rotary_dim));
}

// Rotates every head of x into out (which may be x) by its token's position; dims past rotary_dim are copied.
void rotate(const TensorView& x, const TensorView& out, const TensorView& pos_ids, int64_t rotary_dim, bool interleave,
            const AngleFn& angle) {
  const int64_t tokens = x.shape[0], heads = x.shape[1], d = x.shape[2], half = rotary_dim / 2;
  detail::parallel_for(tokens, [&](int64_t t) {
    const auto pos = static_cast<int64_t>(load(pos_ids, t * pos_ids.strides[0]));
    std::vector<double> row(static_cast<size_t>(d)), c(static_cast<size_t>(half)), s(c);
    for (int64_t p = 0; p < half; ++p) angle(pos, p, c[p], s[p]);
    for (int64_t h = 0; h < heads; ++h) {
      detail::load_row(x, offset_of(x, {t, h, 0}), d, row.data());
      const int64_t off = offset_of(out, {t, h, 0}), so = out.strides[2];
      for (int64_t j = 0; j < d; ++j) {
        double y = row[j];
        if (j < rotary_dim) {
          const bool first = interleave ? j % 2 == 0 : j < half;
          const int64_t p = interleave ? j / 2 : j % half;
          const int64_t partner = interleave ? (first ? j + 1 : j - 1) : (first ? j + half : j - half);
          y = row[j] * c[p] + (first ? -row[partner] : row[partner]) * s[p];
        }
        store(out, off + j * so, y);
      }
    }
  });
}

// f_p = theta^(-2p / rotary_dim), blended with f_p / scale by the Llama 3.1 rule (smooth_a = smooth_b = 0: plain
// division by the scale), as FlashInfer's kernels compute it.
double frequency(int64_t p, int64_t rotary_dim, const RopeOptions& o, double smooth_a, double smooth_b) {
  const double f = std::pow(o.rope_theta, -2.0 * static_cast<double>(p) / static_cast<double>(rotary_dim));
  const double smooth = std::clamp(f * smooth_a + smooth_b, 0.0, 1.0);
  return (1 - smooth) * (f / o.rope_scale) + smooth * f;
}

void rope_pos_ids(const char* op, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                  const TensorView& k_rope, const TensorView& pos_ids, const RopeOptions& o, double smooth_a,
                  double smooth_b) {
  const Validator v(op);
  const int64_t rd = o.rotary_dim == 0 ? q.shape[2] : o.rotary_dim;
  check_rope(v, q, k, q_rope, k_rope, pos_ids, rd);
  v.positive(o.rope_scale, "rope_scale").positive(o.rope_theta, "rope_theta");
  const AngleFn angle = [&](int64_t pos, int64_t p, double& c, double& s) {
    const double a = static_cast<double>(pos) * frequency(p, rd, o, smooth_a, smooth_b);
    c = std::cos(a);
    s = std::sin(a);
  };
  rotate(q, q_rope, pos_ids, rd, o.interleave, angle);
  rotate(k, k_rope, pos_ids, rd, o.interleave, angle);
}

}  // namespace

void apply_rope_pos_ids(const TensorView& q, const TensorView& k, const TensorView& q_rope, const TensorView& k_rope,
                        const TensorView& pos_ids, const RopeOptions& options) {
  rope_pos_ids("reference::apply_rope_pos_ids", q, k, q_rope, k_rope, pos_ids, options, 0.0, 0.0);
}

void apply_llama31_rope_pos_ids(const TensorView& q, const TensorView& k, const TensorView& q_rope,
                                const TensorView& k_rope, const TensorView& pos_ids, const RopeOptions& options,
                                const Llama31RopeScaling& s) {
  const Validator v("reference::apply_llama31_rope_pos_ids");
  v.require(s.high_freq_factor > s.low_freq_factor && s.low_freq_factor > 0, "high_freq_factor",
            "must be above low_freq_factor, which must be > 0");
  // Wavelength 2 pi / f against old_context_length / factor, as a linear blend in f (FlashInfer's smooth_a/b).
  const double smooth_a = s.old_context_length / (2 * M_PI * s.high_freq_factor - 2 * M_PI * s.low_freq_factor);
  const double smooth_b = -1.0 / (s.high_freq_factor / s.low_freq_factor - 1.0);
  rope_pos_ids("reference::apply_llama31_rope_pos_ids", q, k, q_rope, k_rope, pos_ids, options, smooth_a, smooth_b);
}

void apply_rope_with_cos_sin_cache(const TensorView& q, const TensorView& k, const TensorView& q_rope,
                                   const TensorView& k_rope, const TensorView& cos_sin_cache, const TensorView& pos_ids,
                                   bool interleave) {
  const Validator v("reference::apply_rope_with_cos_sin_cache");
  detail::check_host_float(v, cos_sin_cache, "cos_sin_cache");
  v.rank(cos_sin_cache, "cos_sin_cache", 2);
  const int64_t rd = cos_sin_cache.shape[1], rows = cos_sin_cache.shape[0];
  check_rope(v, q, k, q_rope, k_rope, pos_ids, rd);
  for (int64_t t = 0; t < q.shape[0]; ++t) {
    const double pos = load(pos_ids, t * pos_ids.strides[0]);
    if (pos < 0 || pos >= static_cast<double>(rows))
      v.fail("pos_ids", "must hold rows of cos_sin_cache ([0, " + std::to_string(rows) + ")); got " +
                            std::to_string(static_cast<int64_t>(pos)) + " at " + std::to_string(t));
  }
  const AngleFn angle = [&](int64_t pos, int64_t p, double& c, double& s) {
    c = load(cos_sin_cache, offset_of(cos_sin_cache, {pos, p}));
    s = load(cos_sin_cache, offset_of(cos_sin_cache, {pos, rd / 2 + p}));
  };
  rotate(q, q_rope, pos_ids, rd, interleave, angle);
  rotate(k, k_rope, pos_ids, rd, interleave, angle);
}

}  // namespace flashcpp::reference
