// float64 references of the gated activations, the cascade merges and RoPE (flashcpp/activation.hpp, cascade.hpp,
// rope.hpp), RoPE + FP8 quantization included.
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

// Token t's position: false when t is not rotated (a ragged batch's uncovered row: left as it is).
using PositionFn = std::function<bool(int64_t t, int64_t& pos)>;

PositionFn positions_of(const TensorView& pos_ids) {
  return [&pos_ids](int64_t t, int64_t& pos) {
    pos = static_cast<int64_t>(load(pos_ids, t * pos_ids.strides[0]));
    return true;
  };
}

// One head's row x (d values) rotated in place over its first rotary_dim dims by the angles c, s (index p < half).
void rotate_row(std::vector<double>& row, int64_t rotary_dim, bool interleave, const std::vector<double>& c,
                const std::vector<double>& s) {
  const int64_t half = rotary_dim / 2;
  const std::vector<double> x(row.begin(), row.begin() + rotary_dim);
  for (int64_t j = 0; j < rotary_dim; ++j) {
    const bool first = interleave ? j % 2 == 0 : j < half;
    const int64_t p = interleave ? j / 2 : j % half;
    const int64_t partner = interleave ? (first ? j + 1 : j - 1) : (first ? j + half : j - half);
    row[j] = x[j] * c[p] + (first ? -x[partner] : x[partner]) * s[p];
  }
}

// Rotates every head of x into out (which may be x) by its token's position; dims past rotary_dim are copied.
void rotate(const TensorView& x, const TensorView& out, const PositionFn& position, int64_t rotary_dim,
            bool interleave, const AngleFn& angle) {
  const int64_t tokens = x.shape[0], heads = x.shape[1], d = x.shape[2], half = rotary_dim / 2;
  detail::parallel_for(tokens, [&](int64_t t) {
    int64_t pos = 0;
    if (!position(t, pos)) return;
    std::vector<double> row(static_cast<size_t>(d)), c(static_cast<size_t>(half)), s(c);
    for (int64_t p = 0; p < half; ++p) angle(pos, p, c[p], s[p]);
    for (int64_t h = 0; h < heads; ++h) {
      detail::load_row(x, offset_of(x, {t, h, 0}), d, row.data());
      rotate_row(row, rotary_dim, interleave, c, s);
      const int64_t off = offset_of(out, {t, h, 0}), so = out.strides[2];
      for (int64_t j = 0; j < d; ++j) store(out, off + j * so, row[j]);
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

// The angle function of the computed frequencies (Llama 3.1's blend when smooth_a or smooth_b is not 0).
AngleFn computed_angles(int64_t rd, const RopeOptions& o, double smooth_a, double smooth_b) {
  return [rd, o, smooth_a, smooth_b](int64_t pos, int64_t p, double& c, double& s) {
    const double a = static_cast<double>(pos) * frequency(p, rd, o, smooth_a, smooth_b);
    c = std::cos(a);
    s = std::sin(a);
  };
}

void rope_pos_ids(const char* op, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                  const TensorView& k_rope, const TensorView& pos_ids, const RopeOptions& o, double smooth_a,
                  double smooth_b) {
  const Validator v(op);
  const int64_t rd = o.rotary_dim == 0 ? q.shape[2] : o.rotary_dim;
  check_rope(v, q, k, q_rope, k_rope, pos_ids, rd);
  v.positive(o.rope_scale, "rope_scale").positive(o.rope_theta, "rope_theta");
  const AngleFn angle = computed_angles(rd, o, smooth_a, smooth_b);
  rotate(q, q_rope, positions_of(pos_ids), rd, o.interleave, angle);
  rotate(k, k_rope, positions_of(pos_ids), rd, o.interleave, angle);
}

// Host index array of int32 or int64, rank 1, `len` entries.
void check_host_index(const Validator& v, const TensorView& t, const char* arg, int64_t len) {
  v.defined(t, arg).on_host(t, arg).dtype(t, arg, {DType::i32, DType::i64}).rank(t, arg, 1).dim(t, arg, 0, len);
}

void rope_ragged(const char* op, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                 const TensorView& k_rope, const TensorView& indptr, const TensorView& offsets, const RopeOptions& o,
                 double smooth_a, double smooth_b) {
  const Validator v(op);
  const int64_t rd = o.rotary_dim == 0 ? (q.rank == 3 ? q.shape[2] : 0) : o.rotary_dim;
  v.defined(offsets, "offsets").on_host(offsets, "offsets").rank(offsets, "offsets", 1);
  const int64_t batch = offsets.shape[0];
  check_host_index(v, offsets, "offsets", batch);
  check_host_index(v, indptr, "indptr", batch + 1);
  // check_rope's pos_ids rules do not apply: give it a stand-in of q.size(0) positions.
  detail::check_host_float(v, q, "q");
  v.rank(q, "q", 3);
  const int64_t tokens = q.shape[0];
  int64_t zero = 0;
  TensorView stand_in = TensorView::strided(&zero, DType::i64, Device::cpu(), {tokens}, {0});
  check_rope(v, q, k, q_rope, k_rope, stand_in, rd);
  v.positive(o.rope_scale, "rope_scale").positive(o.rope_theta, "rope_theta");
  // Each token's position (-1: not covered), from the request whose range holds it.
  std::vector<int64_t> pos(static_cast<size_t>(tokens), -1);
  std::vector<char> covered(static_cast<size_t>(tokens), 0);
  int64_t prev = 0;
  for (int64_t b = 0; b <= batch; ++b) {
    const auto at = static_cast<int64_t>(load(indptr, b * indptr.strides[0]));
    if (at < prev || at > tokens)
      v.fail("indptr", "must start at 0 or above, never decrease and end at most at q.size(0) (" +
                           std::to_string(tokens) + "); got " + std::to_string(at) + " at " + std::to_string(b));
    if (b > 0) {
      const auto first = static_cast<int64_t>(load(offsets, (b - 1) * offsets.strides[0]));
      for (int64_t t = prev; t < at; ++t) {
        pos[static_cast<size_t>(t)] = first + (t - prev);
        covered[static_cast<size_t>(t)] = 1;
      }
    }
    prev = at;
  }
  const PositionFn position = [&](int64_t t, int64_t& p) {
    p = pos[static_cast<size_t>(t)];
    return covered[static_cast<size_t>(t)] != 0;
  };
  const AngleFn angle = computed_angles(rd, o, smooth_a, smooth_b);
  rotate(q, q_rope, position, rd, o.interleave, angle);
  rotate(k, k_rope, position, rd, o.interleave, angle);
}

// Llama 3.1's blend coefficients: wavelength 2 pi / f against old_context_length / factor, as a linear blend in f
// (FlashInfer's smooth_a/b).
void llama31_blend(const Validator& v, const Llama31RopeScaling& s, double& smooth_a, double& smooth_b) {
  v.require(s.high_freq_factor > s.low_freq_factor && s.low_freq_factor > 0, "high_freq_factor",
            "must be above low_freq_factor, which must be > 0");
  smooth_a = s.old_context_length / (2 * M_PI * s.high_freq_factor - 2 * M_PI * s.low_freq_factor);
  smooth_b = -1.0 / (s.high_freq_factor / s.low_freq_factor - 1.0);
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
  double smooth_a = 0, smooth_b = 0;
  llama31_blend(v, s, smooth_a, smooth_b);
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
  rotate(q, q_rope, positions_of(pos_ids), rd, interleave, angle);
  rotate(k, k_rope, positions_of(pos_ids), rd, interleave, angle);
}

void apply_rope(const TensorView& q, const TensorView& k, const TensorView& q_rope, const TensorView& k_rope,
                const TensorView& indptr, const TensorView& offsets, const RopeOptions& options) {
  rope_ragged("reference::apply_rope", q, k, q_rope, k_rope, indptr, offsets, options, 0.0, 0.0);
}

void apply_llama31_rope(const TensorView& q, const TensorView& k, const TensorView& q_rope, const TensorView& k_rope,
                        const TensorView& indptr, const TensorView& offsets, const RopeOptions& options,
                        const Llama31RopeScaling& s) {
  const Validator v("reference::apply_llama31_rope");
  double smooth_a = 0, smooth_b = 0;
  llama31_blend(v, s, smooth_a, smooth_b);
  rope_ragged("reference::apply_llama31_rope", q, k, q_rope, k_rope, indptr, offsets, options, smooth_a, smooth_b);
}

namespace {

// Element (t, h, j) of a rope_quantize part: rank 3 [tokens, heads, d], or rank 2 [tokens, d] (MLA's one head).
int64_t part_offset(const TensorView& x, int64_t t, int64_t h, int64_t j) {
  return x.rank == 3 ? t * x.strides[0] + h * x.strides[1] + j * x.strides[2] : t * x.strides[0] + j * x.strides[1];
}

void check_host_out(const Validator& v, const TensorView& t, const char* arg, const TensorView& in,
                    const char* in_arg) {
  v.defined(t, arg).on_host(t, arg);
  v.dtype(t, arg, {DType::e4m3, DType::e5m2, DType::f16, DType::bf16, DType::f32, DType::f64});
  v.no_negative_strides(t, arg).same_shape(t, arg, in, in_arg);
}

}  // namespace

void rope_quantize_fp8(const RopeQuantizeTensors& a, const RopeQuantizeOptions& o) {
  const Validator v("reference::rope_quantize_fp8");
  const TensorView &q_rope = a.q_rope, &k_rope = a.k_rope, &q_rope_out = a.q_rope_out, &k_rope_out = a.k_rope_out;
  const TensorView &cos_sin_cache = a.cos_sin_cache, &pos_ids = a.pos_ids;
  detail::check_host_float(v, q_rope, "q_rope");
  v.rank(q_rope, "q_rope", 3);
  const int64_t tokens = q_rope.shape[0], h_q = q_rope.shape[1], rope_dim = q_rope.shape[2];
  detail::check_host_float(v, k_rope, "k_rope");
  v.require(k_rope.rank == 2 || k_rope.rank == 3, "k_rope", "must have rank 3 or 2 (MLA)");
  const int k_rank = k_rope.rank;
  const int64_t h_k = k_rank == 3 ? k_rope.shape[1] : 1;
  const int given = (a.q_nope != nullptr) + (a.k_nope != nullptr) + (a.q_nope_out != nullptr) + (a.k_nope_out != nullptr);
  v.require(given == 0 || given == 4, "q_nope", "must be given with k_nope, q_nope_out and k_nope_out, or none");
  double unused = 0;
  const TensorView none_q = TensorView::contiguous(&unused, DType::f64, Device::cpu(), {tokens, h_q, 0});
  const TensorView none_k = k_rank == 3 ? TensorView::contiguous(&unused, DType::f64, Device::cpu(), {tokens, h_k, 0})
                                        : TensorView::contiguous(&unused, DType::f64, Device::cpu(), {tokens, 0});
  const TensorView& q_nope = given ? *a.q_nope : none_q;
  const TensorView& k_nope = given ? *a.k_nope : none_k;
  const TensorView& q_nope_out = given ? *a.q_nope_out : none_q;
  const TensorView& k_nope_out = given ? *a.k_nope_out : none_k;
  v.dim(k_rope, "k_rope", 0, tokens, "q_rope.size(0)").dim(k_rope, "k_rope", k_rank - 1, rope_dim, "q_rope.size(2)");
  detail::check_host_float(v, q_nope, "q_nope");
  v.rank(q_nope, "q_nope", 3).dim(q_nope, "q_nope", 0, tokens, "q_rope.size(0)").dim(q_nope, "q_nope", 1, h_q, "H_q");
  const int64_t no_rope_dim = q_nope.shape[2];
  detail::check_host_float(v, k_nope, "k_nope");
  v.rank(k_nope, "k_nope", k_rank).dim(k_nope, "k_nope", 0, tokens, "q_rope.size(0)");
  if (k_rank == 3) v.dim(k_nope, "k_nope", 1, h_k, "k_rope.size(1)");
  v.dim(k_nope, "k_nope", k_rank - 1, no_rope_dim, "q_nope.size(2)");
  check_host_out(v, q_rope_out, "q_rope_out", q_rope, "q_rope");
  check_host_out(v, k_rope_out, "k_rope_out", k_rope, "k_rope");
  check_host_out(v, q_nope_out, "q_nope_out", q_nope, "q_nope");
  check_host_out(v, k_nope_out, "k_nope_out", k_nope, "k_nope");
  v.require(rope_dim >= 2 && rope_dim % 2 == 0, "q_rope", "must have an even rope_dim (size(2)) of at least 2");
  detail::check_host_float(v, cos_sin_cache, "cos_sin_cache");
  v.rank(cos_sin_cache, "cos_sin_cache", 2).dim(cos_sin_cache, "cos_sin_cache", 1, rope_dim, "rope_dim");
  v.defined(pos_ids, "pos_ids").on_host(pos_ids, "pos_ids").dtype(pos_ids, "pos_ids", {DType::i32, DType::i64});
  v.rank(pos_ids, "pos_ids", 1).dim(pos_ids, "pos_ids", 0, tokens, "q_rope.size(0)");
  v.finite(o.quant_scale_q, "quant_scale_q").finite(o.quant_scale_kv, "quant_scale_kv");
  const int64_t rows = cos_sin_cache.shape[0], half = rope_dim / 2;
  for (int64_t t = 0; t < tokens; ++t) {
    const double pos = load(pos_ids, t * pos_ids.strides[0]);
    if (pos < 0 || pos >= static_cast<double>(rows))
      v.fail("pos_ids", "must hold rows of cos_sin_cache ([0, " + std::to_string(rows) + ")); got " +
                            std::to_string(static_cast<int64_t>(pos)) + " at " + std::to_string(t));
  }
  detail::parallel_for(tokens, [&](int64_t t) {
    const auto pos = static_cast<int64_t>(load(pos_ids, t * pos_ids.strides[0]));
    std::vector<double> c(static_cast<size_t>(half)), s(c), row(static_cast<size_t>(rope_dim));
    for (int64_t p = 0; p < half; ++p) {
      c[p] = load(cos_sin_cache, offset_of(cos_sin_cache, {pos, p}));
      s[p] = load(cos_sin_cache, offset_of(cos_sin_cache, {pos, half + p}));
    }
    // [rope in, rope out, nope in, nope out, heads, scale] for q, then k.
    for (const auto& [ri, ro, ni, no, heads, scale] :
         {std::tuple{&q_rope, &q_rope_out, &q_nope, &q_nope_out, h_q, o.quant_scale_q},
          std::tuple{&k_rope, &k_rope_out, &k_nope, &k_nope_out, h_k, o.quant_scale_kv}}) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t j = 0; j < rope_dim; ++j) row[j] = load(*ri, part_offset(*ri, t, h, j));
        rotate_row(row, rope_dim, o.interleave, c, s);
        for (int64_t j = 0; j < rope_dim; ++j) store(*ro, part_offset(*ro, t, h, j), row[j] * scale);
        for (int64_t j = 0; j < no_rope_dim; ++j)
          store(*no, part_offset(*no, t, h, j), load(*ni, part_offset(*ni, t, h, j)) * scale);
      }
    }
  });
}

void rope_quantize_append_paged_kv_cache(const RopeQuantizeAppendTensors& a, const RopeQuantizeOptions& o) {
  const Validator v("reference::rope_quantize_append_paged_kv_cache");
  v.require((a.kv_cache != nullptr) != (a.mla_cache != nullptr), "kv_cache",
            "must be given for GQA/MHA, or mla_cache for MLA: exactly one of the two");
  const bool mla = a.mla_cache != nullptr;
  v.rank(a.k_rope, "k_rope", mla ? 2 : 3).rank(a.q_nope, "q_nope", 3);
  const int64_t tokens = a.k_rope.shape[0], rope_dim = a.k_rope.shape[a.k_rope.rank - 1];
  const int64_t h_k = mla ? 1 : a.k_rope.shape[1], no_rope_dim = a.q_nope.shape[2];
  const TensorView& cache = mla ? a.mla_cache->ckv_cache : a.kv_cache->k_cache;
  v.defined(cache, mla ? "ckv_cache" : "k_cache").on_host(cache, mla ? "ckv_cache" : "k_cache");
  // k's two parts rounded into the cache's dtype, then appended as they are.
  const DType dt = cache.dtype;
  const int64_t es = dtype_size(dt);
  std::vector<uint8_t> kr_bytes(static_cast<size_t>(tokens * h_k * rope_dim * es));
  std::vector<uint8_t> kn_bytes(static_cast<size_t>(tokens * h_k * no_rope_dim * es));
  const TensorView k_rope_q = mla ? TensorView::contiguous(kr_bytes.data(), dt, Device::cpu(), {tokens, rope_dim})
                                  : TensorView::contiguous(kr_bytes.data(), dt, Device::cpu(), {tokens, h_k, rope_dim});
  const TensorView k_nope_q = mla ? TensorView::contiguous(kn_bytes.data(), dt, Device::cpu(), {tokens, no_rope_dim})
                                  : TensorView::contiguous(kn_bytes.data(), dt, Device::cpu(), {tokens, h_k, no_rope_dim});
  RopeQuantizeTensors q{a.q_rope, a.k_rope, a.q_rope_out, k_rope_q, &a.q_nope, &a.k_nope, &a.q_nope_out, &k_nope_q,
                     a.cos_sin_cache, a.pos_ids};
  rope_quantize_fp8(q, o);
  if (mla) {
    append_paged_mla_kv_cache(k_nope_q, k_rope_q, a.batch_indices, a.positions, *a.mla_cache);
    return;
  }
  v.require(a.v != nullptr, "v", "must be given with kv_cache");
  const TensorView& val = *a.v;
  const int64_t d = rope_dim + no_rope_dim;
  detail::check_host_float(v, val, "v");
  v.shape(val, "v", {tokens, h_k, d});
  std::vector<uint8_t> key_bytes(static_cast<size_t>(tokens * h_k * d * es)), value_bytes(key_bytes.size());
  const TensorView key = TensorView::contiguous(key_bytes.data(), dt, Device::cpu(), {tokens, h_k, d});
  const TensorView value = TensorView::contiguous(value_bytes.data(), dt, Device::cpu(), {tokens, h_k, d});
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < h_k; ++h) {
      // The cached k is [RoPE(k_rope) | k_nope], both already rounded: copied, not rounded again.
      uint8_t* row = key_bytes.data() + ((t * h_k + h) * d) * es;
      std::copy_n(kr_bytes.data() + ((t * h_k + h) * rope_dim) * es, rope_dim * es, row);
      std::copy_n(kn_bytes.data() + ((t * h_k + h) * no_rope_dim) * es, no_rope_dim * es, row + rope_dim * es);
      for (int64_t j = 0; j < d; ++j)
        store(value, offset_of(value, {t, h, j}), load(val, offset_of(val, {t, h, j})) * o.quant_scale_kv);
    }
  append_paged_kv_cache(key, value, a.batch_indices, a.positions, *a.kv_cache);
}

}  // namespace flashcpp::reference
