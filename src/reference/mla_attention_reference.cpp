#include "reference/mla_attention_reference.hpp"
#include "reference/reference_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

namespace flashcpp::reference {

// ------------------------------------------------------------------------------- codecs
float e4m3_bits_to_float(uint8_t v) noexcept {
  const int sign = (v >> 7) & 1, exp = (v >> 3) & 0xf, man = v & 7;
  float r;
  if (exp == 15 && man == 7) r = std::numeric_limits<float>::quiet_NaN();
  else if (exp == 0) r = std::ldexp(static_cast<float>(man), -9);
  else r = std::ldexp(static_cast<float>(man | 8), exp - 10);
  return sign ? -r : r;
}

/// Round-to-nearest-even of `x` onto a binary format with `man_bits` mantissa bits, minimum normal
/// exponent `emin`, saturating at `max` (or overflowing to inf when `max` is inf).
static double round_format(double x, int man_bits, int emin, double max) {
  if (std::isnan(x) || x == 0.0) return x;
  const double a = std::fabs(x);
  int e;
  std::frexp(a, &e);  // a = m · 2^e, m in [0.5, 1)
  int exp = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, exp - man_bits);
  double r = std::nearbyint(a / quantum) * quantum;  // default rounding mode: nearest even
  if (r > max) r = max;
  return std::copysign(r, x);
}

uint8_t float_to_e4m3_bits(float f) noexcept {
  if (std::isnan(f)) return 0x7f;
  const double r = round_format(f, 3, -6, 448.0);
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(r);
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);
  const int exp = e - 1;
  if (exp < -6) return sign | static_cast<uint8_t>(std::lround(a / std::ldexp(1.0, -9)));
  const uint8_t man = static_cast<uint8_t>(std::lround((a / std::ldexp(1.0, exp) - 1.0) * 8.0));
  return sign | static_cast<uint8_t>((exp + 7) << 3) | man;
}

double round_through(DType t, double x) noexcept {
  switch (t) {
    case DType::f16: return half_to_float(float_to_half(static_cast<float>(x)));
    case DType::bf16: return bf16_to_float(float_to_bf16(static_cast<float>(x)));
    case DType::e4m3: return e4m3_bits_to_float(float_to_e4m3_bits(static_cast<float>(x)));
    case DType::f32: return static_cast<float>(x);
    default: return x;
  }
}

double load(const void* data, DType t, int64_t i) noexcept {
  switch (t) {
    case DType::f16: return half_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::f64: return static_cast<const double*>(data)[i];
    case DType::e4m3: return e4m3_bits_to_float(static_cast<const uint8_t*>(data)[i]);
    case DType::i32: return static_cast<const int32_t*>(data)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

double at(const TensorView& t, std::initializer_list<int64_t> idx) noexcept {
  int64_t off = 0, d = 0;
  for (int64_t i : idx) off += i * t.strides[static_cast<size_t>(d++)];
  return load(t.data, t.dtype, off);
}

// ------------------------------------------------------------------------------- batch MLA
void batch_mla_reference(const MlaReferenceInputs& in, std::vector<double>& out, std::vector<double>& lse_e,
                         int threads) {
  constexpr int64_t Dc = 512, Dp = 64;
  const int64_t n = in.q_nope.size(0), H = in.q_nope.size(1), page_size = in.ckv_cache.size(1);
  const int64_t batch = static_cast<int64_t>(in.kv_len.size());
  out.assign(static_cast<size_t>(n * H * Dc), 0.0);
  lse_e.assign(static_cast<size_t>(n * H), -std::numeric_limits<double>::infinity());
  // One work item per (request, head).
  detail::parallel_for(batch * H, threads, [&](int64_t item) {
    const int64_t b = item / H, h = item % H;
    const int64_t q0 = in.qo_indptr[b], qlen = in.qo_indptr[b + 1] - q0, klen = in.kv_len[b];
    // Gather this request's KV once (as doubles).
    std::vector<double> ckv(static_cast<size_t>(klen * Dc)), kpe(static_cast<size_t>(klen * Dp));
    for (int64_t j = 0; j < klen; ++j) {
      const int64_t page = in.kv_indices[static_cast<size_t>(in.kv_indptr[b] + j / page_size)], slot = j % page_size;
      for (int64_t d = 0; d < Dc; ++d) ckv[j * Dc + d] = at(in.ckv_cache, {page, slot, d});
      for (int64_t d = 0; d < Dp; ++d) kpe[j * Dp + d] = at(in.kpe_cache, {page, slot, d});
    }
    std::vector<double> qn(Dc), qp(Dp), s(static_cast<size_t>(klen));
    for (int64_t i = 0; i < qlen; ++i) {
      const int64_t row = q0 + i;
      for (int64_t d = 0; d < Dc; ++d) qn[d] = at(in.q_nope, {row, h, d});
      for (int64_t d = 0; d < Dp; ++d) qp[d] = at(in.q_pe, {row, h, d});
      const int64_t visible = in.causal ? std::min(klen, i + klen - qlen + 1) : klen;
      if (visible <= 0) continue;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < Dc; ++d) acc += qn[d] * ckv[j * Dc + d];
        for (int64_t d = 0; d < Dp; ++d) acc += qp[d] * kpe[j * Dp + d];
        s[j] = acc * in.sm_scale;
        mx = std::max(mx, s[j]);
      }
      double denom = 0;
      for (int64_t j = 0; j < visible; ++j) denom += (s[j] = std::exp(s[j] - mx));
      double* o = &out[static_cast<size_t>((row * H + h) * Dc)];
      for (int64_t j = 0; j < visible; ++j) {
        const double p = s[j] / denom;
        for (int64_t d = 0; d < Dc; ++d) o[d] += p * ckv[j * Dc + d];
      }
      lse_e[static_cast<size_t>(row * H + h)] = mx + std::log(denom);
    }
  });
}

}  // namespace flashcpp::reference
