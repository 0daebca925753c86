// The float64 reference backend against known values and an independent naive computation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "flashcpp/error.hpp"
#include "flashcpp/reference.hpp"

namespace flashcpp::testing {
namespace {

namespace ref = flashcpp::reference;

TensorView host(std::vector<double>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::f64, Device::cpu(), shape);
}
TensorView host_i32(std::vector<int32_t>& v) {
  return TensorView::contiguous(v.data(), DType::i32, Device::cpu(), {static_cast<int64_t>(v.size())});
}
std::vector<double> random_vec(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

TEST(Reference, HalfAndBf16ConversionsRoundToNearestEven) {
  EXPECT_EQ(ref::float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(ref::float_to_half(-2.0f), 0xC000);
  EXPECT_EQ(ref::float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(ref::float_to_half(65520.0f), 0x7C00);  // rounds up to inf
  EXPECT_EQ(ref::float_to_half(1.0f + 1.0f / 2048), 0x3C00);  // tie -> even
  EXPECT_EQ(ref::float_to_half(1.0f + 3.0f / 2048), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(ref::float_to_half(6e-8f), 0x0001);   // subnormal
  EXPECT_EQ(ref::float_to_half(2e-8f), 0x0000);
  EXPECT_FLOAT_EQ(ref::half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_FLOAT_EQ(ref::half_to_float(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isinf(ref::half_to_float(0x7C00)));
  EXPECT_TRUE(std::isnan(ref::half_to_float(0x7E00)));
  EXPECT_EQ(ref::float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(ref::float_to_bf16(1.00390625f), 0x3F80);  // tie -> even
  EXPECT_EQ(ref::float_to_bf16(1.01171875f), 0x3F82);  // tie -> even (up)
  EXPECT_FLOAT_EQ(ref::bf16_to_float(0x4049), 3.140625f);
  for (float f : {0.1f, -7.25f, 1000.5f, 3e-5f}) {
    EXPECT_NEAR(ref::half_to_float(ref::float_to_half(f)), f, std::fabs(f) * 1e-3);
    EXPECT_NEAR(ref::bf16_to_float(ref::float_to_bf16(f)), f, std::fabs(f) * 8e-3);
  }
}

TEST(Reference, RmsnormKnownValues) {
  std::vector<double> x = {3, 4, 1, -1}, w = {0.5, 2}, out(4);
  ref::rmsnorm(host(out, {2, 2}), host(x, {2, 2}), host(w, {2}), {.eps = 1e-6});
  const double r0 = std::sqrt(12.5 + 1e-6), r1 = std::sqrt(1.0 + 1e-6);
  EXPECT_DOUBLE_EQ(out[0], 3 / r0 * 0.5);
  EXPECT_DOUBLE_EQ(out[1], 4 / r0 * 2);
  EXPECT_DOUBLE_EQ(out[2], 1 / r1 * 0.5);
  EXPECT_DOUBLE_EQ(out[3], -1 / r1 * 2);
  ref::gemma_rmsnorm(host(out, {2, 2}), host(x, {2, 2}), host(w, {2}), {.eps = 1e-6});
  EXPECT_DOUBLE_EQ(out[1], 4 / r0 * 3);
}

TEST(Reference, QkRmsnormNormalisesEveryHeadOfAStridedView) {
  // [tokens 2, heads 2, dim 2] inside a buffer with a padded token stride of 6.
  std::vector<double> buf = {3, 4, 0, 2, 99, 99, 1, 1, 6, 8, 99, 99}, w = {1, 1}, out(8);
  const auto in = TensorView::strided(buf.data(), DType::f64, Device::cpu(), {2, 2, 2}, {6, 2, 1});
  ref::fused_qk_rmsnorm(host(out, {2, 2, 2}), in, host(w, {2}), {.eps = 1e-12});
  EXPECT_NEAR(out[0], 3 / std::sqrt(12.5), 1e-12);
  EXPECT_NEAR(out[3], 2 / std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(out[4], 1.0, 1e-9);
  EXPECT_NEAR(out[7], 8 / std::sqrt(50.0), 1e-12);
}

TEST(Reference, FusedAddRmsnormUpdatesResidualAndInput) {
  std::vector<double> x = {1, 2}, res = {2, 2}, w = {1, 1};
  ref::fused_add_rmsnorm(host(x, {1, 2}), host(res, {1, 2}), host(w, {2}), {.eps = 0.5});
  EXPECT_DOUBLE_EQ(res[0], 3);
  EXPECT_DOUBLE_EQ(res[1], 4);
  EXPECT_DOUBLE_EQ(x[0], 3 / std::sqrt(12.5 + 0.5));
  EXPECT_DOUBLE_EQ(x[1], 4 / std::sqrt(12.5 + 0.5));
}

TEST(Reference, NormRejectsDeviceMemoryAndBadShapes) {
  std::vector<double> x(4), w(2), out(4);
  auto dev = host(x, {2, 2});
  dev.device = Device::cuda(0);
  EXPECT_THROW(ref::rmsnorm(host(out, {2, 2}), dev, host(w, {2})), Error);
  EXPECT_THROW(ref::rmsnorm(host(out, {2, 2}), host(x, {2, 2}), host(w, {1})), Error);
  EXPECT_THROW(ref::rmsnorm(host(out, {2, 2}), host(x, {2, 2}), host(w, {2}), {.eps = -1}), Error);
}

TEST(Reference, AppendPlacesTokensThroughThePageTable) {
  // 2 requests, page size 2, 1 head, dim 2; request 0 owns pages {3, 1}, request 1 owns page {0}.
  std::vector<double> kc(4 * 2 * 1 * 2, 0.0), vc(kc.size(), 0.0);
  std::vector<int32_t> indices = {3, 1, 0}, indptr = {0, 2, 3}, last = {1, 2};
  PagedKvCache c{TensorView::contiguous(kc.data(), DType::f64, Device::cpu(), {4, 2, 1, 2}),
                 TensorView::contiguous(vc.data(), DType::f64, Device::cpu(), {4, 2, 1, 2}), host_i32(indices),
                 host_i32(indptr), host_i32(last), KvLayout::nhd};
  std::vector<double> k = {1, 2, 3, 4, 5, 6}, v = {-1, -2, -3, -4, -5, -6};
  std::vector<int32_t> bi = {0, 0, 1}, pos = {0, 2, 1};
  ref::append_paged_kv_cache(host(k, {3, 1, 2}), host(v, {3, 1, 2}), host_i32(bi), host_i32(pos), c);
  // token 0 -> page 3 slot 0; token 1 (pos 2) -> page 1 slot 0; token 2 -> page 0 slot 1.
  EXPECT_EQ(kc[(3 * 2 + 0) * 2 + 0], 1);
  EXPECT_EQ(kc[(3 * 2 + 0) * 2 + 1], 2);
  EXPECT_EQ(kc[(1 * 2 + 0) * 2 + 0], 3);
  EXPECT_EQ(vc[(0 * 2 + 1) * 2 + 1], -6);
  EXPECT_EQ(kc[(2 * 2 + 0) * 2 + 0], 0);  // page 2 untouched
  pos = {0, 4, 1};  // beyond request 0's two pages
  EXPECT_THROW(ref::append_paged_kv_cache(host(k, {3, 1, 2}), host(v, {3, 1, 2}), host_i32(bi), host_i32(pos), c),
               Error);
}

TEST(Reference, AttentionKnownValues) {
  // One head, dim 2, two keys: scores q.k * scale = {0, ln 3} -> weights {1/4, 3/4}.
  std::vector<double> q = {std::log(3.0), 0}, k = {0, 5, 1, 7}, v = {4, 0, 0, 8}, out(2), lse(1);
  SinglePrefillOptions o;
  o.sm_scale = 1.0;
  const TensorView lse_view = host(lse, {1, 1});
  ref::single_prefill(host(q, {1, 1, 2}), host(k, {2, 1, 2}), host(v, {2, 1, 2}), host(out, {1, 1, 2}), &lse_view, o);
  EXPECT_NEAR(out[0], 1.0, 1e-12);
  EXPECT_NEAR(out[1], 6.0, 1e-12);
  EXPECT_NEAR(lse[0], std::log2(4.0), 1e-12);  // log2(e^0 + e^ln3)

  // Causal: the first of two queries (right-aligned to two keys) sees only key 0.
  std::vector<double> q2 = {0, 0, 0, 0}, out2(4);
  o.causal = true;
  ref::single_prefill(host(q2, {2, 1, 2}), host(k, {2, 1, 2}), host(v, {2, 1, 2}), host(out2, {2, 1, 2}), nullptr, o);
  EXPECT_NEAR(out2[0], 4, 1e-12);
  EXPECT_NEAR(out2[1], 0, 1e-12);
  EXPECT_NEAR(out2[2], 2, 1e-12);  // both keys, equal scores
  EXPECT_NEAR(out2[3], 4, 1e-12);
  // Sliding window of 0 (a left bound only): query 0 sees keys 0 and 1, query 1 only key 1.
  o.causal = false;
  o.window_left = 0;
  ref::single_prefill(host(q2, {2, 1, 2}), host(k, {2, 1, 2}), host(v, {2, 1, 2}), host(out2, {2, 1, 2}), nullptr, o);
  EXPECT_NEAR(out2[0], 2, 1e-12);
  EXPECT_NEAR(out2[1], 4, 1e-12);
  EXPECT_NEAR(out2[2], 0, 1e-12);
  EXPECT_NEAR(out2[3], 8, 1e-12);
  // Soft cap 1: scores become tanh(s), weights softmax(0, tanh(ln 3)).
  o.window_left = -1;
  o.logits_soft_cap = 1.0;
  ref::single_prefill(host(q, {1, 1, 2}), host(k, {2, 1, 2}), host(v, {2, 1, 2}), host(out, {1, 1, 2}), nullptr, o);
  const double w1 = std::exp(std::tanh(std::log(3.0))) / (1 + std::exp(std::tanh(std::log(3.0))));
  EXPECT_NEAR(out[1], 8 * w1, 1e-12);
}

TEST(Reference, GqaMapsQueryHeadsToTheirKvHead) {
  // 4 query heads over 2 kv heads: heads 0,1 read kv head 0 (v = 1), heads 2,3 kv head 1 (v = 2).
  std::vector<double> q(4 * 2, 0.3), k(3 * 2 * 2, 0.1), v(3 * 2 * 2), out(4 * 2);
  for (int j = 0; j < 3; ++j)
    for (int h = 0; h < 2; ++h)
      for (int d = 0; d < 2; ++d) v[static_cast<size_t>((j * 2 + h) * 2 + d)] = h + 1;
  ref::single_prefill(host(q, {1, 4, 2}), host(k, {3, 2, 2}), host(v, {3, 2, 2}), host(out, {1, 4, 2}), nullptr, {});
  EXPECT_NEAR(out[0], 1, 1e-12);
  EXPECT_NEAR(out[3], 1, 1e-12);
  EXPECT_NEAR(out[4], 2, 1e-12);
  EXPECT_NEAR(out[7], 2, 1e-12);
}

// An independent, deliberately plain computation: exp without max subtraction, long double sums.
void naive_attention(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                     int qo, int kv, int hq, int hkv, int d, bool causal, double scale, std::vector<double>& out) {
  out.assign(static_cast<size_t>(qo * hq * d), 0.0);
  for (int i = 0; i < qo; ++i)
    for (int h = 0; h < hq; ++h) {
      const int kh = h / (hq / hkv);
      long double denom = 0;
      std::vector<long double> acc(static_cast<size_t>(d), 0);
      for (int j = 0; j < kv; ++j) {
        if (causal && j > i + kv - qo) continue;
        long double s = 0;
        for (int e = 0; e < d; ++e) s += q[static_cast<size_t>((i * hq + h) * d + e)] * k[static_cast<size_t>((j * hkv + kh) * d + e)];
        const long double p = std::exp(s * scale);
        denom += p;
        for (int e = 0; e < d; ++e) acc[static_cast<size_t>(e)] += p * v[static_cast<size_t>((j * hkv + kh) * d + e)];
      }
      for (int e = 0; e < d; ++e) out[static_cast<size_t>((i * hq + h) * d + e)] = static_cast<double>(acc[static_cast<size_t>(e)] / denom);
    }
}

TEST(Reference, SinglePrefillMatchesNaiveAndHndMatchesNhd) {
  const int qo = 5, kv = 9, hq = 4, hkv = 2, d = 8;
  auto q = random_vec(qo * hq * d, 1), k = random_vec(kv * hkv * d, 2), v = random_vec(kv * hkv * d, 3);
  std::vector<double> want, out(q.size()), out_hnd(q.size());
  naive_attention(q, k, v, qo, kv, hq, hkv, d, true, 0.3, want);
  SinglePrefillOptions o;
  o.causal = true;
  o.sm_scale = 0.3;
  ref::single_prefill(host(q, {qo, hq, d}), host(k, {kv, hkv, d}), host(v, {kv, hkv, d}), host(out, {qo, hq, d}),
                      nullptr, o);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-12) << i;
  // The same keys stored HND ([H_kv, kv_len, D]).
  std::vector<double> kt(k.size()), vt(v.size());
  for (int j = 0; j < kv; ++j)
    for (int h = 0; h < hkv; ++h)
      for (int e = 0; e < d; ++e) {
        kt[static_cast<size_t>((h * kv + j) * d + e)] = k[static_cast<size_t>((j * hkv + h) * d + e)];
        vt[static_cast<size_t>((h * kv + j) * d + e)] = v[static_cast<size_t>((j * hkv + h) * d + e)];
      }
  o.layout = KvLayout::hnd;
  ref::single_prefill(host(q, {qo, hq, d}), host(kt, {hkv, kv, d}), host(vt, {hkv, kv, d}), host(out_hnd, {qo, hq, d}),
                      nullptr, o);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out_hnd[i], want[i], 1e-12) << i;
}

TEST(Reference, PagedRaggedAndDecodeAgree) {
  // Two requests (kv 5 and 3 tokens, q 2 and 1 tokens) stored ragged and in scrambled pages of 2.
  const int hq = 2, hkv = 1, d = 4, ps = 2;
  auto q = random_vec(3 * hq * d, 4), k = random_vec(8 * hkv * d, 5), v = random_vec(8 * hkv * d, 6);
  std::vector<int32_t> qo_indptr = {0, 2, 3}, kv_indptr = {0, 5, 8};
  std::vector<double> ragged(q.size()), paged(q.size()), lse_r(3 * hq), lse_p(3 * hq);
  BatchPrefillConfig c;
  c.causal = true;
  const TensorView lr = host(lse_r, {3, hq}), lp = host(lse_p, {3, hq});
  ref::batch_prefill_ragged(host(q, {3, hq, d}), host(k, {8, hkv, d}), host(v, {8, hkv, d}), host_i32(qo_indptr),
                            host_i32(kv_indptr), host(ragged, {3, hq, d}), &lr, c);
  // Pages: request 0 -> {4, 0, 2} (5 tokens, last page 1), request 1 -> {1, 3} (3 tokens, last 1).
  std::vector<int32_t> pages = {4, 0, 2, 1, 3}, page_indptr = {0, 3, 5}, last = {1, 1};
  std::vector<double> kc(5 * ps * hkv * d, 0.0), vc(kc.size(), 0.0);
  auto put = [&](int token_start, int n, const std::vector<int32_t>& ids) {
    for (int t = 0; t < n; ++t)
      for (int e = 0; e < d; ++e) {
        const size_t dst = static_cast<size_t>((ids[static_cast<size_t>(t / ps)] * ps + t % ps) * d + e);
        kc[dst] = k[static_cast<size_t>((token_start + t) * d + e)];
        vc[dst] = v[static_cast<size_t>((token_start + t) * d + e)];
      }
  };
  put(0, 5, {4, 0, 2});
  put(5, 3, {1, 3});
  PagedKvCache cache{TensorView::contiguous(kc.data(), DType::f64, Device::cpu(), {5, ps, hkv, d}),
                     TensorView::contiguous(vc.data(), DType::f64, Device::cpu(), {5, ps, hkv, d}), host_i32(pages),
                     host_i32(page_indptr), host_i32(last), KvLayout::nhd};
  ref::batch_prefill_paged(host(q, {3, hq, d}), cache, host_i32(qo_indptr), host(paged, {3, hq, d}), &lp, c);
  for (size_t i = 0; i < q.size(); ++i) ASSERT_NEAR(paged[i], ragged[i], 1e-12) << i;
  for (size_t i = 0; i < lse_r.size(); ++i) ASSERT_NEAR(lse_p[i], lse_r[i], 1e-12) << i;

  // Decode of the last query of each request equals the prefill rows 1 and 2 (causal: they see all keys).
  std::vector<double> qd(2 * hq * d), outd(qd.size());
  std::copy(q.begin() + hq * d, q.end(), qd.begin());
  BatchDecodeConfig dc;
  ref::batch_decode(host(qd, {2, hq, d}), cache, host(outd, {2, hq, d}), nullptr, dc);
  for (size_t i = 0; i < outd.size(); ++i) ASSERT_NEAR(outd[i], ragged[static_cast<size_t>(hq * d) + i], 1e-12) << i;
}

TEST(Reference, EmptyRequestsGiveZeroOutputAndMinusInfinityLse) {
  std::vector<double> q(2 * 1 * 2, 0.5), k(2 * 1 * 2, 0.5), v(2 * 1 * 2, 1.0), out(q.size(), 7.0), lse(2, 7.0);
  std::vector<int32_t> qo = {0, 2, 2}, kvp = {0, 0, 2};  // request 0: 2 queries, no keys; request 1: empty
  const TensorView l = host(lse, {2, 1});
  ref::batch_prefill_ragged(host(q, {2, 1, 2}), host(k, {2, 1, 2}), host(v, {2, 1, 2}), host_i32(qo), host_i32(kvp),
                            host(out, {2, 1, 2}), &l, BatchPrefillConfig{});
  for (double x : out) EXPECT_EQ(x, 0.0);
  for (double x : lse) EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
}

TEST(Reference, StoresRoundToTheOutputDtype) {
  std::vector<double> q = {1, 0}, k = {1, 0}, v = {1.0 / 3.0, 0}, lse(1);
  std::vector<uint16_t> out(2);
  const auto o = TensorView::contiguous(out.data(), DType::bf16, Device::cpu(), {1, 1, 2});
  ref::single_prefill(host(q, {1, 1, 2}), host(k, {1, 1, 2}), host(v, {1, 1, 2}), o, nullptr, {});
  EXPECT_EQ(out[0], ref::float_to_bf16(1.0f / 3.0f));
}

}  // namespace
}  // namespace flashcpp::testing
