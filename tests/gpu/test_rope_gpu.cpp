// RoPE over a ragged batch (apply_rope, apply_llama31_rope), RoPE + FP8 quantization (rope_quantize_fp8) and the same
// appended to a paged cache (rope_quantize_append_paged_kv_cache) on the GPU against the float64 reference. Run with FLASHCPP_GPU_TESTS=1 on a machine whose Runtime finds the `rope` module.
//
// Every test: fresh random inputs (seed printed on failure; never zeros), outputs poisoned with 0xFF (NaN in every
// float and FP8 dtype) before the run, every CUDA status checked. Tolerances:
//   ragged RoPE at positions below 4096: f16 atol/rtol 5e-3, bf16 2e-2 (fast sin/cos of angles up to 4096 rad, one
//   rounding), as OpsGpu.RopeAgainstTheReference; rows outside [indptr[0], indptr[batch]) keep their poison bytes.
//   FP8: each output code is the reference's code (the exact value rounded once to nearest even, saturating) or one of
//   its two neighbours (one e4m3/e5m2 step: the kernel computes in float, so a value within float error of a rounding
//   midpoint may round the other way), never NaN, and at least 99% of the codes are exactly the reference's; cache
//   slots no token is appended to keep their poison bytes exactly.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flashcpp/cuda.hpp"
#include "flashcpp/reference.hpp"
#include "flashcpp/rope.hpp"
#include "flashcpp/runtime.hpp"
#include "support/gpu.hpp"
#include "support/gpu_buffers.hpp"

namespace flashcpp::testing {
namespace {

namespace ref = flashcpp::reference;

/// Integers in [lo, hi) into an int32 or int64 buffer (host and device).
Buf make_index(DType t, const std::vector<int64_t>& v) {
  Buf b = make(t, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::i64) std::memcpy(b.host.data() + 8 * i, &v[i], 8);
    else {
      const auto x = static_cast<int32_t>(v[i]);
      std::memcpy(b.host.data() + 4 * i, &x, 4);
    }
  }
  return b;
}

/// A cos/sin cache of `rows` positions (theta 1e4), with 32 spare device bytes after it (FlashInfer's interleaved
/// kernel reads them for the last row).
Buf make_cache(int64_t rows, int64_t rd) {
  Buf c = make(DType::f32, {rows, rd}, true, 32);
  const TensorView cv = c.host_view();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < rd / 2; ++p) {
      const double a = static_cast<double>(r) * std::pow(1e4, -2.0 * static_cast<double>(p) / static_cast<double>(rd));
      ref::store(cv, r * rd + p, std::cos(a));
      ref::store(cv, r * rd + rd / 2 + p, std::sin(a));
    }
  return c;
}

class RopeGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    FLASHCPP_REQUIRE_GPU();
    seed_ = fresh_seed();
  }
  uint64_t seed_ = 0;
};

// ------------------------------------------------------------------------------------------------ ragged RoPE

TEST_F(RopeGpu, RaggedRopeAgainstTheReference) {
  // 1029 tokens; 7 requests of irregular lengths over [3, 1026): the first 3 and last 3 rows belong to no request.
  const int64_t tokens = 1029, hq = 32, hk = 8, d = 128, width = (hq + 2 * hk) * d;
  const std::vector<int64_t> indptr_v = {3, 4, 200, 201, 650, 900, 1000, 1026};
  const int64_t batch = static_cast<int64_t>(indptr_v.size()) - 1;
  std::mt19937_64 gen(seed_);
  for (DType dt : {DType::bf16, DType::f16})
    for (int variant = 0; variant < 3; ++variant) {  // plain NeoX, partial GPT-J with int64 indices, Llama 3.1
      SCOPED_TRACE(std::string(dtype_name(dt)) + " variant " + std::to_string(variant) + " seed " + std::to_string(seed_));
      const bool interleave = variant == 1;
      const DType idx = variant == 1 ? DType::i64 : DType::i32;
      const int64_t rd = variant == 1 ? 64 : d;
      const double tol = dt == DType::f16 ? 5e-3 : 2e-2;
      Buf qkv = make(dt, {tokens, width}), qo = make(dt, {tokens, hq, d}), ko = make(dt, {tokens, hk, d});
      fill_random(qkv, seed_ + static_cast<uint64_t>(variant));
      upload(qkv);
      poison(qo);
      poison(ko);
      std::vector<int64_t> offsets_v(static_cast<size_t>(batch));
      for (int64_t b = 0; b < batch; ++b) {  // positions offsets[b] + i stay below 4096
        const int64_t len = indptr_v[static_cast<size_t>(b) + 1] - indptr_v[static_cast<size_t>(b)];
        offsets_v[static_cast<size_t>(b)] = static_cast<int64_t>(gen() % static_cast<uint64_t>(4096 - len));
      }
      Buf indptr = make_index(idx, indptr_v), offsets = make_index(idx, offsets_v);
      upload(indptr);
      upload(offsets);
      auto slices = [&](void* base, Device dev) {
        auto* p = static_cast<uint16_t*>(base);
        return std::pair{TensorView::strided(p, dt, dev, {tokens, hq, d}, {width, d, 1}),
                         TensorView::strided(p + hq * d, dt, dev, {tokens, hk, d}, {width, d, 1})};
      };
      const auto [q, k] = slices(qkv.dev.get(), Device::cuda(0));
      const auto [hq_view, hk_view] = slices(qkv.host.data(), Device::cpu());
      const RopeOptions ro{.rotary_dim = rd, .interleave = interleave, .rope_scale = variant == 2 ? 8.0 : 1.0,
                           .rope_theta = variant == 2 ? 5e5 : 1e4};
      if (variant == 2) apply_llama31_rope(runtime(), q, k, qo.dev_view(), ko.dev_view(), indptr.dev_view(), offsets.dev_view(), ro);
      else apply_rope(runtime(), q, k, qo.dev_view(), ko.dev_view(), indptr.dev_view(), offsets.dev_view(), ro);
      download(qo);
      download(ko);
      Buf qw = make(DType::f64, {tokens, hq, d}, false), kw = make(DType::f64, {tokens, hk, d}, false);
      if (variant == 2)
        ref::apply_llama31_rope(hq_view, hk_view, qw.host_view(), kw.host_view(), indptr.host_view(), offsets.host_view(), ro);
      else ref::apply_rope(hq_view, hk_view, qw.host_view(), kw.host_view(), indptr.host_view(), offsets.host_view(), ro);
      for (auto [got, want, heads, name] : {std::tuple{&qo, &qw, hq, "q_rope"}, std::tuple{&ko, &kw, hk, "k_rope"}}) {
        const TensorView g = got->host_view(), w = want->host_view();
        const int64_t row = heads * d;
        int64_t bad = 0, first = -1;
        for (int64_t t = 0; t < tokens; ++t) {
          const bool covered = t >= indptr_v.front() && t < indptr_v.back();
          if (!covered) {  // not written: still the poison bytes
            const size_t at = static_cast<size_t>(t * row) * 2;
            for (size_t i = 0; i < static_cast<size_t>(row) * 2; ++i)
              if (got->host[at + i] != kPoisonByte) {
                ++bad;
                if (first < 0) first = t * row;
                break;
              }
            continue;
          }
          for (int64_t i = t * row; i < (t + 1) * row; ++i) {
            const double a = ref::load(g, i), b = ref::load(w, i);
            if (!(std::fabs(a - b) <= tol + tol * std::fabs(b))) {
              ++bad;
              if (first < 0) first = i;
            }
          }
        }
        EXPECT_EQ(bad, 0) << name << ": " << bad << " elements (or unwritten rows) wrong; first at " << first << " got "
                          << (first >= 0 ? ref::load(g, first) : 0.0) << " want " << (first >= 0 ? ref::load(w, first) : 0.0);
      }
    }
}

// ------------------------------------------------------------------------------------------------ RoPE + FP8

// An FP8 code's place in the order of values: codes of one sign are monotone in their magnitude bits.
int order_of(uint8_t b) { return (b & 0x80) ? -static_cast<int>(b & 0x7f) : static_cast<int>(b & 0x7f); }

/// got (fp8 codes, downloaded) against want (the reference's fp8 codes): within one step, finite, 99% exact.
void expect_fp8_close(const Buf& got, const Buf& want, const std::string& what) {
  ASSERT_EQ(got.host.size(), want.host.size()) << what;
  int64_t exact = 0, bad = 0, first = -1;
  for (size_t i = 0; i < got.host.size(); ++i) {
    const uint8_t g = got.host[i], w = want.host[i];
    const double gv = got.dtype == DType::e4m3 ? ref::e4m3_to_float(g) : ref::e5m2_to_float(g);
    if (g == w) ++exact;
    else if (!std::isfinite(gv) || std::abs(order_of(g) - order_of(w)) > 1) {
      ++bad;
      if (first < 0) first = static_cast<int64_t>(i);
    }
  }
  const auto n = static_cast<int64_t>(got.host.size());
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " codes more than one step from the reference; first at "
                    << first << " got 0x" << std::hex << (first >= 0 ? int(got.host[first]) : 0) << " want 0x"
                    << (first >= 0 ? int(want.host[first]) : 0) << std::dec;
  EXPECT_GE(exact * 100, n * 99) << what << ": only " << exact << " of " << n << " codes exactly the reference's";
}

struct QuantCase {
  const char* name;
  int64_t tokens, hq, hk;  // hk 0: MLA (k rank 2, one latent head)
  int64_t rope_dim, no_rope_dim;
  DType in, out;
  bool interleave;
  double scale_q, scale_kv;
  bool pos64;
};

void run_quant_case(const QuantCase& c, uint64_t seed) {
  SCOPED_TRACE(std::string(c.name) + " seed " + std::to_string(seed));
  const bool mla = c.hk == 0;
  const int64_t n = c.tokens, hk = mla ? 1 : c.hk, rd = c.rope_dim, nd = c.no_rope_dim, head = rd + nd;
  // q and k as FlashInfer's callers hold them: one [tokens, heads, nope + rope] tensor each, split by views.
  Buf q = make(c.in, {n, c.hq, head}), k = make(c.in, mla ? std::vector<int64_t>{n, head} : std::vector<int64_t>{n, hk, head});
  fill_random(q, seed);
  fill_random(k, seed + 1);
  upload(q);
  upload(k);
  const int64_t rows = 4096;
  Buf cache = make_cache(rows, rd);
  upload(cache);
  std::vector<int64_t> pos_v(static_cast<size_t>(n));
  std::mt19937_64 gen(seed + 2);
  for (auto& p : pos_v) p = static_cast<int64_t>(gen() % rows);
  pos_v.back() = rows - 1;  // the cache's last row (the interleaved kernel reads past it)
  Buf pos = make_index(c.pos64 ? DType::i64 : DType::i32, pos_v);
  upload(pos);
  auto split = [&](void* base, Device dev, const Buf& b, int64_t heads, bool rank2) {
    auto* p = static_cast<uint8_t*>(base);
    const size_t es = dtype_size(b.dtype);
    if (rank2)
      return std::pair{TensorView::strided(p + nd * es, b.dtype, dev, {n, rd}, {head, 1}),
                       TensorView::strided(p, b.dtype, dev, {n, nd}, {head, 1})};
    return std::pair{TensorView::strided(p + nd * es, b.dtype, dev, {n, heads, rd}, {heads * head, head, 1}),
                     TensorView::strided(p, b.dtype, dev, {n, heads, nd}, {heads * head, head, 1})};
  };
  const auto [q_rope, q_nope] = split(q.dev.get(), Device::cuda(0), q, c.hq, false);
  const auto [k_rope, k_nope] = split(k.dev.get(), Device::cuda(0), k, hk, mla);
  const auto [hq_rope, hq_nope] = split(q.host.data(), Device::cpu(), q, c.hq, false);
  const auto [hk_rope, hk_nope] = split(k.host.data(), Device::cpu(), k, hk, mla);
  auto kshape = [&](int64_t d) { return mla ? std::vector<int64_t>{n, d} : std::vector<int64_t>{n, hk, d}; };
  Buf qro = make(c.out, {n, c.hq, rd}), qno = make(c.out, {n, c.hq, nd}), kro = make(c.out, kshape(rd)),
      kno = make(c.out, kshape(nd));
  for (Buf* b : {&qro, &qno, &kro, &kno}) poison(*b);
  const TensorView dqno = qno.dev_view(), dkno = kno.dev_view();
  const bool has_nope = nd > 0;
  RopeQuantizeTensors a{.q_rope = q_rope, .k_rope = k_rope, .q_rope_out = qro.dev_view(), .k_rope_out = kro.dev_view(),
                     .cos_sin_cache = cache.dev_view(), .pos_ids = pos.dev_view()};
  if (has_nope) a.q_nope = &q_nope, a.k_nope = &k_nope, a.q_nope_out = &dqno, a.k_nope_out = &dkno;
  const RopeQuantizeOptions o{.interleave = c.interleave, .quant_scale_q = c.scale_q, .quant_scale_kv = c.scale_kv,
                              .enable_pdl = true};
  rope_quantize_fp8(runtime(), a, o);
  for (Buf* b : {&qro, &qno, &kro, &kno}) download(*b);

  Buf wqro = make(c.out, {n, c.hq, rd}, false), wqno = make(c.out, {n, c.hq, nd}, false);
  Buf wkro = make(c.out, kshape(rd), false), wkno = make(c.out, kshape(nd), false);
  const TensorView hqno = wqno.host_view(), hkno = wkno.host_view();
  RopeQuantizeTensors h{.q_rope = hq_rope, .k_rope = hk_rope, .q_rope_out = wqro.host_view(),
                     .k_rope_out = wkro.host_view(), .cos_sin_cache = cache.host_view(), .pos_ids = pos.host_view()};
  if (has_nope) h.q_nope = &hq_nope, h.k_nope = &hk_nope, h.q_nope_out = &hqno, h.k_nope_out = &hkno;
  ref::rope_quantize_fp8(h, o);
  expect_fp8_close(qro, wqro, "q_rope_out");
  expect_fp8_close(kro, wkro, "k_rope_out");
  if (has_nope) {
    expect_fp8_close(qno, wqno, "q_nope_out");
    expect_fp8_close(kno, wkno, "k_nope_out");
  }
  // Beyond the reference: a nope value whose exact product lies past the rounding midpoint above the largest finite
  // (464 for e4m3, 61440 for e5m2) is exactly the saturated code, +-448 or +-57344.
  const double beyond = c.out == DType::e4m3 ? 464.0 : 61440.0;
  const uint8_t top = c.out == DType::e4m3 ? 0x7e : 0x7b;
  int64_t saturated = 0;
  if (has_nope)
    for (int64_t t = 0; t < n; ++t)
      for (int64_t hh = 0; hh < c.hq; ++hh)
        for (int64_t j = 0; j < nd; ++j) {
          const double v = ref::load(hq_nope, ref::offset_of(hq_nope, {t, hh, j})) * c.scale_q;
          if (std::fabs(v) <= beyond) continue;
          ++saturated;
          const uint8_t want = static_cast<uint8_t>(v < 0 ? 0x80 | top : top);
          ASSERT_EQ(qno.host[static_cast<size_t>((t * c.hq + hh) * nd + j)], want) << "q_nope " << t << " " << hh << " " << j;
        }
  if (c.scale_q >= 1e3) EXPECT_GT(saturated * 10, n * c.hq * nd * 9) << "the saturation case saturates too little";
  // The inputs and the cache are untouched.
  Buf cache_back = make(DType::f32, cache.shape, false);
  CUDA_OK(cudaMemcpy(cache_back.host.data(), cache.dev.get(), cache.bytes(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(cache_back.host == cache.host) << "the cache was written";
  Buf q_back = make(c.in, q.shape, false);
  CUDA_OK(cudaMemcpy(q_back.host.data(), q.dev.get(), q.bytes(), cudaMemcpyDeviceToHost));
  EXPECT_TRUE(q_back.host == q.host) << "q was written";
}

TEST_F(RopeGpu, RopeQuantizeFp8AgainstTheReference) {
  const QuantCase cases[] = {
      // name, tokens, H_q, H_k, rope_dim, no_rope_dim, in, out, interleave, scale_q, scale_kv, int64 pos_ids
      {"GQA bf16 -> e4m3 NeoX, head 128 = 64 + 64", 1029, 32, 8, 64, 64, DType::bf16, DType::e4m3, false, 1, 1, false},
      {"GQA f16 -> e5m2 GPT-J, nope 96 (a partial chunk)", 517, 16, 4, 64, 96, DType::f16, DType::e5m2, true, 2, 0.5, true},
      {"MHA bf16 -> e4m3 GPT-J, scale 300 (saturates)", 300, 8, 8, 128, 128, DType::bf16, DType::e4m3, true, 300, 300, false},
      {"GQA bf16 -> e4m3 NeoX, no nope part", 257, 32, 8, 128, 0, DType::bf16, DType::e4m3, false, 1, 1, false},
      {"DeepSeek MLA bf16 -> e4m3: q [n, 128, 64 + 512], k [n, 64 + 512]", 1031, 128, 0, 64, 512, DType::bf16,
       DType::e4m3, false, 1, 1, true},
      {"DeepSeek MLA bf16 -> e4m3 GPT-J, scales 0.25 / 4", 129, 128, 0, 64, 512, DType::bf16, DType::e4m3, true, 0.25, 4,
       false},
  };
  for (const QuantCase& c : cases) run_quant_case(c, seed_);
}

TEST_F(RopeGpu, RopeQuantizeFp8SaturatesAsTheReference) {
  // Scales of 1e4 and 1e6 take nearly every value past the largest finite: those codes must be exactly +-448 (e4m3) or
  // +-57344 (e5m2), as __NV_SATFINITE gives (never inf or NaN).
  const QuantCase e4m3{"saturation e4m3", 64, 4, 1, 64, 64, DType::bf16, DType::e4m3, false, 1e4, 1e4, false};
  const QuantCase e5m2{"saturation e5m2", 64, 4, 1, 64, 64, DType::f16, DType::e5m2, true, 1e6, 1e6, false};
  run_quant_case(e4m3, seed_);
  run_quant_case(e5m2, seed_ + 7);
}

// ------------------------------------------------------------------------------------------------ RoPE + FP8 + append

struct AppendCase {
  const char* name;
  int64_t tokens, hq, hk;  // hk 0: MLA (ckv/kpe caches)
  int64_t rope_dim, no_rope_dim, page_size, batch;
  DType in, out;
  bool interleave, hnd;
  double scale_q, scale_kv;
};

void run_append_case(const AppendCase& c, uint64_t seed) {
  SCOPED_TRACE(std::string(c.name) + " seed " + std::to_string(seed));
  const bool mla = c.hk == 0;
  const int64_t n = c.tokens, hk = mla ? 1 : c.hk, rd = c.rope_dim, nd = c.no_rope_dim, d = rd + nd, ps = c.page_size;
  auto kshape = [&](int64_t w) { return mla ? std::vector<int64_t>{n, w} : std::vector<int64_t>{n, hk, w}; };
  Buf qr = make(c.in, {n, c.hq, rd}), qn = make(c.in, {n, c.hq, nd}), kr = make(c.in, kshape(rd)), kn = make(c.in, kshape(nd));
  Buf v = make(c.in, {n, hk, d});
  uint64_t s = seed;
  for (Buf* b : {&qr, &qn, &kr, &kn, &v}) {
    fill_random(*b, s++);
    upload(*b);
  }
  Buf cache = make_cache(4096, rd);
  upload(cache);
  // The requests: token i goes to request i % batch at that request's next position; its pages are a random
  // permutation of the cache's, one page more than it needs (so some slots stay untouched).
  std::mt19937_64 gen(seed + 9);
  std::vector<int64_t> pos_v(static_cast<size_t>(n)), bi_v(static_cast<size_t>(n)), at_v(static_cast<size_t>(n));
  std::vector<int64_t> count(static_cast<size_t>(c.batch), 0);
  for (int64_t i = 0; i < n; ++i) {
    pos_v[i] = static_cast<int64_t>(gen() % 4096);
    bi_v[i] = i % c.batch;
    at_v[i] = count[static_cast<size_t>(bi_v[i])]++;
  }
  std::vector<int64_t> indptr_v{0}, last_v;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t pages = count[static_cast<size_t>(b)] / ps + 1;
    indptr_v.push_back(indptr_v.back() + pages);
    last_v.push_back(count[static_cast<size_t>(b)] % ps + 1);
  }
  const int64_t num_pages = indptr_v.back();
  std::vector<int64_t> indices_v(static_cast<size_t>(num_pages));
  std::iota(indices_v.begin(), indices_v.end(), 0);
  std::shuffle(indices_v.begin(), indices_v.end(), gen);
  Buf pos = make_index(DType::i32, pos_v), bi = make_index(DType::i32, bi_v), at = make_index(DType::i32, at_v);
  Buf indices = make_index(DType::i32, indices_v), indptr = make_index(DType::i32, indptr_v), last = make_index(DType::i32, last_v);
  for (Buf* b : {&pos, &bi, &at, &indices, &indptr, &last}) upload(*b);
  // The caches, poisoned on the device and on the host alike.
  const std::vector<int64_t> kv_shape = c.hnd ? std::vector<int64_t>{num_pages, hk, ps, d} : std::vector<int64_t>{num_pages, ps, hk, d};
  Buf c0 = mla ? make(c.out, {num_pages, ps, nd}) : make(c.out, kv_shape);
  Buf c1 = mla ? make(c.out, {num_pages, ps, rd}) : make(c.out, kv_shape);
  Buf qro = make(c.out, {n, c.hq, rd}), qno = make(c.out, {n, c.hq, nd});
  for (Buf* b : {&c0, &c1, &qro, &qno}) {
    poison(*b);
    std::fill(b->host.begin(), b->host.end(), kPoisonByte);
  }
  const KvLayout layout = c.hnd ? KvLayout::hnd : KvLayout::nhd;
  const PagedKvCache dkv{c0.dev_view(), c1.dev_view(), indices.dev_view(), indptr.dev_view(), last.dev_view(), layout};
  const PagedMlaKvCache dmla{c0.dev_view(), c1.dev_view(), indices.dev_view(), indptr.dev_view(), last.dev_view()};
  const TensorView dv = v.dev_view();
  RopeQuantizeAppendTensors a{.q_rope = qr.dev_view(), .k_rope = kr.dev_view(), .q_nope = qn.dev_view(),
                           .k_nope = kn.dev_view(), .v = mla ? nullptr : &dv, .q_rope_out = qro.dev_view(),
                           .q_nope_out = qno.dev_view(), .cos_sin_cache = cache.dev_view(), .pos_ids = pos.dev_view(),
                           .batch_indices = bi.dev_view(), .positions = at.dev_view()};
  if (mla) a.mla_cache = &dmla;
  else a.kv_cache = &dkv;
  const RopeQuantizeOptions o{.interleave = c.interleave, .quant_scale_q = c.scale_q, .quant_scale_kv = c.scale_kv,
                              .enable_pdl = true};
  rope_quantize_append_paged_kv_cache(runtime(), a, o);
  // What the GPU wrote, into host-only buffers: c0, c1, qro and qno keep their poisoned host bytes for the reference.
  auto host_twin = [](const Buf& b) { return make(b.dtype, b.shape, false); };
  Buf g0 = host_twin(c0), g1 = host_twin(c1), gqro = host_twin(qro), gqno = host_twin(qno);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaMemcpy(g0.host.data(), c0.dev.get(), c0.bytes(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(g1.host.data(), c1.dev.get(), c1.bytes(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gqro.host.data(), qro.dev.get(), qro.bytes(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(gqno.host.data(), qno.dev.get(), qno.bytes(), cudaMemcpyDeviceToHost));

  const PagedKvCache hkv{c0.host_view(), c1.host_view(), indices.host_view(), indptr.host_view(), last.host_view(), layout};
  const PagedMlaKvCache hmla{c0.host_view(), c1.host_view(), indices.host_view(), indptr.host_view(), last.host_view()};
  const TensorView hv = v.host_view();
  RopeQuantizeAppendTensors h{.q_rope = qr.host_view(), .k_rope = kr.host_view(), .q_nope = qn.host_view(),
                           .k_nope = kn.host_view(), .v = mla ? nullptr : &hv, .q_rope_out = qro.host_view(),
                           .q_nope_out = qno.host_view(), .cos_sin_cache = cache.host_view(), .pos_ids = pos.host_view(),
                           .batch_indices = bi.host_view(), .positions = at.host_view()};
  if (mla) h.mla_cache = &hmla;
  else h.kv_cache = &hkv;
  ref::rope_quantize_append_paged_kv_cache(h, o);
  expect_fp8_close(gqro, qro, "q_rope_out");
  expect_fp8_close(gqno, qno, "q_nope_out");
  expect_fp8_close(g0, c0, mla ? "ckv_cache" : "k_cache");
  expect_fp8_close(g1, c1, mla ? "kpe_cache" : "v_cache");
  // Slots no token was appended to keep their poison byte for byte.
  int64_t untouched = 0;
  for (size_t i = 0; i < c0.host.size(); ++i)
    if (c0.host[i] == kPoisonByte && g0.host[i] == kPoisonByte) ++untouched;
  EXPECT_GT(untouched, 0) << "the case leaves no slot untouched";
}

TEST_F(RopeGpu, RopeQuantizeAppendPagedKvCacheAgainstTheReference) {
  const AppendCase cases[] = {
      // name, tokens, H_q, H_k, rope_dim, no_rope_dim, page size, batch, in, out, interleave, HND, scale_q, scale_kv
      {"GQA bf16 -> e4m3 NeoX NHD, head 128 = 64 + 64, pages of 16", 517, 32, 8, 64, 64, 16, 7, DType::bf16, DType::e4m3,
       false, false, 1, 1},
      {"GQA f16 -> e5m2 GPT-J HND, head 256 = 128 + 128, pages of 64", 300, 16, 2, 128, 128, 64, 3, DType::f16,
       DType::e5m2, true, true, 0.5, 2},
      {"DeepSeek MLA bf16 -> e4m3: q [n, 128, 64 + 512], ckv 512 / kpe 64, pages of 64", 257, 128, 0, 64, 512, 64, 5,
       DType::bf16, DType::e4m3, false, false, 1, 1},
  };
  for (const AppendCase& c : cases) run_append_case(c, seed_);
}

}  // namespace
}  // namespace flashcpp::testing
