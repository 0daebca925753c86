#include "reference/mla_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "flashcpp/error.hpp"
#include "flashcpp/reference.hpp"

namespace flashcpp::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double bf16_at(const TensorView& t, int64_t off) {
  uint16_t h;
  std::memcpy(&h, static_cast<const char*>(t.data) + off * 2, 2);
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// A 16-bit float element of `t`: fp16 when t is f16, else bf16.
double half_at(const TensorView& t, int64_t off) {
  if (t.dtype != DType::f16) return bf16_at(t, off);
  uint16_t h;
  std::memcpy(&h, static_cast<const char*>(t.data) + off * 2, 2);
  return half_to_float(h);
}
template <class T>
T value_at(const TensorView& t, int64_t off) {
  T v;
  std::memcpy(&v, static_cast<const char*>(t.data) + off * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

void require_host(const TensorView& t, const char* name) {
  if (!t.device.is_host() || (t.data == nullptr && t.numel() != 0))
    throw Error(ErrorCode::invalid_argument, std::string("mla reference: '") + name + "' must be a host tensor");
}

// The outputs of one token: out[h_q * d_v], lse[h_q], max_logits[h_q], magnitude[h_q * d_v].
struct TokenOutputs {
  double *out, *lse, *max_logits, *magnitude;
};

// One token's attention in float64: rows[j] (d_qk values) for the valid slots, q per head; sink may be null.
// magnitude gets sum_j w_j |v_j| with the weights w_j of out.
void attend(const std::vector<std::vector<double>>& rows, const std::vector<double>& q /* h_q * d_qk */,
            int64_t h_q, int64_t d_qk, int64_t d_v, const float* sink, double sm_scale, const TokenOutputs& to) {
  std::vector<double> s(rows.size());
  for (int64_t h = 0; h < h_q; ++h) {
    double* o = to.out + h * d_v;
    double* mag = to.magnitude + h * d_v;
    std::fill(o, o + d_v, 0.0);
    std::fill(mag, mag + d_v, 0.0);
    if (rows.empty()) {
      to.lse[h] = kInf;
      to.max_logits[h] = -kInf;
      continue;
    }
    const double* qh = q.data() + h * d_qk;
    double m = -kInf;
    for (size_t j = 0; j < rows.size(); ++j) {
      double d = 0;
      for (int64_t c = 0; c < d_qk; ++c) d += qh[c] * rows[j][static_cast<size_t>(c)];
      s[j] = d * sm_scale;
      m = std::max(m, s[j]);
    }
    double sum = 0;
    for (double v : s) sum += std::exp(v - m);
    const double row_lse = m + std::log(sum);
    double lse_o = row_lse;
    if (sink != nullptr) {
      const double sk = sink[h];
      if (sk == kInf) lse_o = kInf;
      else if (sk != -kInf) {
        const double hi = std::max(row_lse, sk);
        lse_o = hi + std::log(std::exp(row_lse - hi) + std::exp(sk - hi));
      }
    }
    if (lse_o != kInf) {
      for (size_t j = 0; j < rows.size(); ++j) {
        const double w = std::exp(s[j] - lse_o);
        for (int64_t c = 0; c < d_v; ++c) {
          o[c] += w * rows[j][static_cast<size_t>(c)];
          mag[c] += w * std::fabs(rows[j][static_cast<size_t>(c)]);
        }
      }
    }
    to.lse[h] = row_lse;
    to.max_logits[h] = m;
  }
}

std::vector<int64_t> all_or(std::span<const int64_t> tokens, int64_t n) {
  std::vector<int64_t> v(tokens.begin(), tokens.end());
  if (v.empty()) {
    v.resize(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), 0);
  }
  for (int64_t t : v)
    if (t < 0 || t >= n) throw Error(ErrorCode::invalid_argument, "mla reference: token out of range");
  return v;
}

std::vector<float> sink_values(OptionalTensor attn_sink, int64_t h_q) {
  std::vector<float> v;
  if (attn_sink == nullptr) return v;
  require_host(*attn_sink, "attn_sink");
  for (int64_t h = 0; h < h_q; ++h) v.push_back(value_at<float>(*attn_sink, h * attn_sink->stride(0)));
  return v;
}

// A result for `rows` query tokens of h_q heads, zero-filled.
MlaReferenceResult sized_result(int64_t rows, int64_t h_q, int64_t d_v) {
  MlaReferenceResult r;
  r.rows = rows;
  r.h_q = h_q;
  r.d_v = d_v;
  r.out.resize(static_cast<size_t>(rows * h_q * d_v));
  r.out_magnitude.resize(r.out.size());
  r.lse.resize(static_cast<size_t>(rows * h_q));
  r.max_logits.resize(static_cast<size_t>(rows * h_q));
  return r;
}

// Query token i's slices of r.
TokenOutputs token_outputs(MlaReferenceResult& r, int64_t i) {
  const auto o = static_cast<size_t>(i * r.h_q * r.d_v), l = static_cast<size_t>(i * r.h_q);
  return {&r.out[o], &r.lse[l], &r.max_logits[l], &r.out_magnitude[o]};
}

// Decode query token (bi, si) of q [b, s_q, h_q, d_qk] as h_q * d_qk doubles.
void load_decode_query(const TensorView& q, int64_t bi, int64_t si, std::vector<double>& qv) {
  const int64_t h_q = q.size(2), d_qk = q.size(3);
  for (int64_t h = 0; h < h_q; ++h)
    for (int64_t c = 0; c < d_qk; ++c)
      qv[static_cast<size_t>(h * d_qk + c)] = half_at(q, bi * q.stride(0) + si * q.stride(1) + h * q.stride(2) + c * q.stride(3));
}

// The power-of-two scale of a tile whose largest magnitude is `amax`, as FlashMLA computes it: amax / 448
// in f32, at least 1e-4, rounded up to a power of two.
float pow2_scale_of(double amax) {
  float s = static_cast<float>(amax) / 448.f;
  s = std::max(s, 1e-4f);
  return static_cast<float>(std::exp2(std::ceil(std::log2(static_cast<double>(s)))));
}

// The e4m3 code nearest to v by exhaustive search; ties go to the code with an even mantissa (round half
// to even); zero keeps the sign, as a float conversion does.
uint8_t nearest_e4m3(double v) {
  static const std::vector<std::pair<double, uint8_t>> codes = [] {
    std::vector<std::pair<double, uint8_t>> c;  // every finite code with its value, +0 only
    for (int i = 0; i < 256; ++i) {
      const double x = e4m3_value(static_cast<uint8_t>(i));
      if (!std::isnan(x) && i != 0x80) c.emplace_back(x, static_cast<uint8_t>(i));
    }
    return c;
  }();
  double best_err = kInf;
  uint8_t best = 0;
  for (const auto& [cv, cc] : codes) {
    const double err = std::fabs(cv - v);
    if (err < best_err || (err == best_err && (cc & 1) == 0)) {
      best_err = err;
      best = cc;
    }
  }
  if (std::signbit(v) && best == 0) best = 0x80;
  return best;
}

}  // namespace

double e4m3_value(uint8_t code) {
  const int sign = code & 0x80 ? -1 : 1;
  const int exp = (code >> 3) & 0xf, man = code & 7;
  if (exp == 15 && man == 7) return std::numeric_limits<double>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(man / 8.0, -6);
  return sign * std::ldexp(1.0 + man / 8.0, exp - 7);
}

namespace {
// The 64 RoPE values of a cache row, stored as bf16 (unaligned bytes), as doubles.
void load_bf16_rope(const uint8_t* src, double* dst) {
  for (int i = 0; i < 64; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = bf16_to_float(h);
  }
}
}  // namespace

std::vector<double> mla_dequantize_v32_row(const uint8_t* row) {
  std::vector<double> v(576);
  float scales[4];
  std::memcpy(scales, row + 512, 16);
  for (int i = 0; i < 512; ++i) v[static_cast<size_t>(i)] = e4m3_value(row[i]) * static_cast<double>(scales[i / 128]);
  load_bf16_rope(row + 528, &v[512]);
  return v;
}

MlaReferenceResult mla_sparse_prefill_reference(const TensorView& q, const TensorView& kv, const TensorView& indices,
                                                OptionalTensor attn_sink, OptionalTensor topk_length, double sm_scale,
                                                int d_v, std::span<const int64_t> tokens) {
  require_host(q, "q");
  require_host(kv, "kv");
  require_host(indices, "indices");
  const int64_t s_q = q.size(0), h_q = q.size(1), d_qk = q.size(2), s_kv = kv.size(0), topk = indices.size(2);
  const auto rows_wanted = all_or(tokens, s_q);
  const auto sink = sink_values(attn_sink, h_q);
  if (topk_length) require_host(*topk_length, "topk_length");

  MlaReferenceResult r = sized_result(static_cast<int64_t>(rows_wanted.size()), h_q, d_v);
  std::vector<double> qv(static_cast<size_t>(h_q * d_qk));
  for (int64_t i = 0; i < r.rows; ++i) {
    const int64_t t = rows_wanted[static_cast<size_t>(i)];
    int64_t len = topk;
    if (topk_length) len = std::clamp<int64_t>(value_at<int32_t>(*topk_length, t * topk_length->stride(0)), 0, topk);
    std::vector<std::vector<double>> rows;
    for (int64_t j = 0; j < len; ++j) {
      const int64_t idx = value_at<int32_t>(indices, t * indices.stride(0) + j * indices.stride(2));
      if (idx < 0 || idx >= s_kv) continue;
      std::vector<double> row(static_cast<size_t>(d_qk));
      for (int64_t c = 0; c < d_qk; ++c) row[static_cast<size_t>(c)] = bf16_at(kv, idx * kv.stride(0) + c * kv.stride(2));
      rows.push_back(std::move(row));
    }
    for (int64_t h = 0; h < h_q; ++h)
      for (int64_t c = 0; c < d_qk; ++c)
        qv[static_cast<size_t>(h * d_qk + c)] = bf16_at(q, t * q.stride(0) + h * q.stride(1) + c * q.stride(2));
    attend(rows, qv, h_q, d_qk, d_v, sink.empty() ? nullptr : sink.data(), sm_scale, token_outputs(r, i));
  }
  return r;
}

namespace {

// The decode references' common loop: for each wanted token (b * s_q + s) of q [b, s_q, h_q, d_qk], the rows
// rows_of(b, s) gathers (the token's valid KV rows, in slot order), attended in float64.
MlaReferenceResult decode_reference(const TensorView& q, OptionalTensor attn_sink, double sm_scale,
                                    std::span<const int64_t> tokens,
                                    const std::function<void(int64_t, int64_t, std::vector<std::vector<double>>&)>& rows_of) {
  const int64_t b = q.size(0), s_q = q.size(1), h_q = q.size(2), d_qk = q.size(3);
  const auto rows_wanted = all_or(tokens, b * s_q);
  const auto sink = sink_values(attn_sink, h_q);
  constexpr int64_t d_v = 512;
  MlaReferenceResult r = sized_result(static_cast<int64_t>(rows_wanted.size()), h_q, d_v);
  std::vector<double> qv(static_cast<size_t>(h_q * d_qk));
  for (int64_t i = 0; i < r.rows; ++i) {
    const int64_t t = rows_wanted[static_cast<size_t>(i)];
    std::vector<std::vector<double>> rows;
    rows_of(t / s_q, t % s_q, rows);
    load_decode_query(q, t / s_q, t % s_q, qv);
    attend(rows, qv, h_q, d_qk, d_v, sink.empty() ? nullptr : sink.data(), sm_scale, token_outputs(r, i));
  }
  return r;
}

}  // namespace

MlaReferenceResult mla_sparse_decode_reference(const TensorView& q, const TensorView& kv_cache,
                                               const TensorView& indices, OptionalTensor attn_sink,
                                               OptionalTensor topk_length, double sm_scale,
                                               std::span<const int64_t> tokens) {
  require_host(q, "q");
  require_host(kv_cache, "kv_cache");
  require_host(indices, "indices");
  if (topk_length) require_host(*topk_length, "topk_length");
  const int64_t topk = indices.size(2), num_blocks = kv_cache.size(0), block_size = kv_cache.size(1);
  const auto* cache = static_cast<const uint8_t*>(kv_cache.data);
  return decode_reference(q, attn_sink, sm_scale, tokens, [&](int64_t bi, int64_t si, std::vector<std::vector<double>>& rows) {
    int64_t len = topk;
    if (topk_length) len = std::clamp<int64_t>(value_at<int32_t>(*topk_length, bi * topk_length->stride(0)), 0, topk);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t idx =
          value_at<int32_t>(indices, bi * indices.stride(0) + si * indices.stride(1) + j * indices.stride(2));
      if (idx < 0 || idx >= num_blocks * block_size) continue;
      const int64_t blk = idx / block_size, slot = idx % block_size;
      rows.push_back(mla_dequantize_v32_row(cache + blk * kv_cache.stride(0) + slot * kv_cache.stride(1)));
    }
  });
}

MlaReferenceResult mla_dense_decode_reference(const TensorView& q, const TensorView& kv_cache,
                                              const TensorView& block_table, const TensorView& cache_seqlens,
                                              bool causal, OptionalTensor attn_sink, double sm_scale,
                                              std::span<const int64_t> tokens) {
  require_host(q, "q");
  require_host(kv_cache, "kv_cache");
  require_host(block_table, "block_table");
  require_host(cache_seqlens, "cache_seqlens");
  const int64_t s_q = q.size(1), d_qk = q.size(3);
  const int64_t num_blocks = kv_cache.size(0), block_size = kv_cache.size(1), max_blocks = block_table.size(1);
  const bool fp8 = kv_cache.dtype != DType::bf16 && kv_cache.dtype != DType::f16;
  return decode_reference(q, attn_sink, sm_scale, tokens, [&](int64_t bi, int64_t si, std::vector<std::vector<double>>& rows) {
    int64_t len = std::clamp<int64_t>(value_at<int32_t>(cache_seqlens, bi * cache_seqlens.stride(0)), 0,
                                      max_blocks * block_size);
    if (causal) len = std::max<int64_t>(len - (s_q - 1 - si), 0);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t blk = value_at<int32_t>(block_table, bi * block_table.stride(0) + (j / block_size) * block_table.stride(1));
      if (blk < 0 || blk >= num_blocks) continue;
      const int64_t off = blk * kv_cache.stride(0) + (j % block_size) * kv_cache.stride(1);
      if (fp8) {
        rows.push_back(mla_dequantize_v32_row(static_cast<const uint8_t*>(kv_cache.data) + off));
      } else {
        std::vector<double> row(static_cast<size_t>(d_qk));
        for (int64_t c = 0; c < d_qk; ++c) row[static_cast<size_t>(c)] = half_at(kv_cache, off + c * kv_cache.stride(3));
        rows.push_back(std::move(row));
      }
    }
  });
}

std::vector<uint8_t> mla_quantize_v32_reference(const TensorView& kv) {
  require_host(kv, "kv");
  if (kv.rank < 1 || kv.size(-1) != 576) throw Error(ErrorCode::invalid_argument, "mla reference: kv must be [..., 576]");
  const int lead = kv.rank - 1;
  int64_t rows = 1;
  for (int d = 0; d < lead; ++d) rows *= kv.size(d);
  std::vector<uint8_t> out(static_cast<size_t>(rows * 656));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, off = 0;
    for (int d = lead - 1; d >= 0; --d) {
      off += (rem % kv.size(d)) * kv.stride(d);
      rem /= kv.size(d);
    }
    uint8_t* dst = out.data() + r * 656;
    auto x = [&](int c) { return bf16_at(kv, off + c * kv.stride(lead)); };
    for (int t = 0; t < 4; ++t) {
      double amax = 0;
      for (int c = 0; c < 128; ++c) amax = std::max(amax, std::fabs(x(t * 128 + c)));
      const float scale = pow2_scale_of(amax);
      std::memcpy(dst + 512 + t * 4, &scale, 4);
      for (int c = 0; c < 128; ++c) dst[t * 128 + c] = nearest_e4m3(x(t * 128 + c) / scale);
    }
    for (int c = 0; c < 64; ++c) {
      uint16_t h;
      std::memcpy(&h, static_cast<const char*>(kv.data) + (off + (512 + c) * kv.stride(lead)) * 2, 2);
      std::memcpy(dst + 528 + 2 * c, &h, 2);
    }
  }
  return out;
}

std::vector<double> mla_dequantize_v4_token(const uint8_t* page, int64_t block_size, int64_t slot) {
  std::vector<double> v(512);
  const uint8_t* record = page + slot * 576;
  const uint8_t* scales = page + block_size * 576 + slot * 8;
  for (int i = 0; i < 448; ++i) {
    const uint8_t e = scales[i / 64];
    const double scale = e == 0xff ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, e - 127);
    v[static_cast<size_t>(i)] = e4m3_value(record[i]) * scale;
  }
  load_bf16_rope(record + 448, &v[448]);
  return v;
}

std::vector<uint8_t> mla_quantize_v4_reference(const TensorView& kv, int64_t page_bytes) {
  require_host(kv, "kv");
  if (kv.rank != 4 || kv.size(2) != 1 || kv.size(3) != 512)
    throw Error(ErrorCode::invalid_argument, "mla reference: kv must be [num_blocks, block_size, 1, 512]");
  const int64_t num_blocks = kv.size(0), block_size = kv.size(1);
  if (page_bytes < block_size * 584) throw Error(ErrorCode::invalid_argument, "mla reference: page_bytes too small");
  std::vector<uint8_t> out(static_cast<size_t>(num_blocks * page_bytes), 0);
  for (int64_t b = 0; b < num_blocks; ++b) {
    uint8_t* page = out.data() + b * page_bytes;
    for (int64_t t = 0; t < block_size; ++t) {
      const int64_t off = b * kv.stride(0) + t * kv.stride(1);
      auto x = [&](int c) { return bf16_at(kv, off + c * kv.stride(3)); };
      uint8_t* record = page + t * 576;
      uint8_t* scales = page + block_size * 576 + t * 8;
      for (int tile = 0; tile < 7; ++tile) {
        double amax = 0;
        for (int c = 0; c < 64; ++c) amax = std::max(amax, std::fabs(x(tile * 64 + c)));
        const float scale = pow2_scale_of(amax);
        int exponent = 0;
        std::frexp(static_cast<double>(scale), &exponent);  // scale = 2^(exponent - 1)
        scales[tile] = static_cast<uint8_t>(exponent - 1 + 127);
        for (int c = 0; c < 64; ++c) record[tile * 64 + c] = nearest_e4m3(x(tile * 64 + c) / scale);
      }
      for (int c = 0; c < 64; ++c) {
        uint16_t h;
        std::memcpy(&h, static_cast<const char*>(kv.data) + (off + (448 + c) * kv.stride(3)) * 2, 2);
        std::memcpy(record + 448 + 2 * c, &h, 2);
      }
    }
  }
  return out;
}

MlaReferenceResult mla_sparse_decode_v4_reference(const TensorView& q, const MlaV4Pool& main, const MlaV4Pool* extra,
                                                  OptionalTensor attn_sink, double sm_scale,
                                                  std::span<const int64_t> tokens) {
  require_host(q, "q");
  if (q.size(3) != 512) throw Error(ErrorCode::invalid_argument, "mla reference: V4 q must have d_qk 512");
  std::vector<const MlaV4Pool*> pools = {&main};
  if (extra != nullptr) pools.push_back(extra);
  for (const MlaV4Pool* pool : pools) {
    require_host(pool->cache, "cache");
    require_host(pool->indices, "indices");
    if (pool->topk_length) require_host(*pool->topk_length, "topk_length");
  }
  // Both pools' valid rows: one softmax over their union.
  return decode_reference(q, attn_sink, sm_scale, tokens, [&](int64_t bi, int64_t si, std::vector<std::vector<double>>& rows) {
    for (const MlaV4Pool* pool : pools) {
      const TensorView& idx = pool->indices;
      const int64_t topk = idx.size(2), num_blocks = pool->cache.size(0), block_size = pool->cache.size(1);
      int64_t len = topk;
      if (pool->topk_length)
        len = std::clamp<int64_t>(value_at<int32_t>(*pool->topk_length, bi * pool->topk_length->stride(0)), 0, topk);
      const auto* base = static_cast<const uint8_t*>(pool->cache.data);
      for (int64_t j = 0; j < len; ++j) {
        const int64_t index = value_at<int32_t>(idx, bi * idx.stride(0) + si * idx.stride(1) + j * idx.stride(2));
        if (index < 0 || index >= num_blocks * block_size) continue;
        rows.push_back(mla_dequantize_v4_token(base + (index / block_size) * pool->cache.stride(0), block_size,
                                               index % block_size));
      }
    }
  });
}

}  // namespace flashcpp::reference
