// Sparse MLA on the GPU against the float64 CPU reference and FlashMLA's golden outputs.
// Outputs are poisoned (0xFF = NaN) before every launch; inputs are fresh random non-zero data; unused
// KV rows are NaN so that any read of a masked row shows up in the output.
//
// Tolerance (kernel vs float64 reference): FlashMLA's rule, element abs 8e-4 or rel 3.01/128 (or within the
// error bound of P rounded to bf16, see expect_close) plus cosine difference <= 1e-5, for at least 99.9% of
// the elements, and every element within abs 4e-3 or rel 3.01/128 (FlashMLA's own kernel needs that looser
// bound against float64 on the golden cases, because it rounds P to bf16; a kernel that does the same may
// too). lse / max_logits: abs 1e-6 or rel 2.01/65536, infinities exact. Runs each case through the
// dispatched kernel (the Hopper kernel where it applies) and through the simple kernel.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "flashcpp/cuda.hpp"
#include "flashcpp/mla.hpp"
#include "mla/launch_plan.hpp"
#include "mla/mla_test_support.hpp"
#include "mla/sparse_attention_kernel.hpp"
#include "reference/mla_reference.hpp"
#include "support/gpu.hpp"

namespace {

using namespace flashcpp;
using namespace flashcpp::mla_test;
namespace mla = flashcpp::mla;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int32_t kInvalid[] = {std::numeric_limits<int32_t>::min(), -123456, -1, 114514, 2147480000,
                                std::numeric_limits<int32_t>::max()};

template <class T>
struct Dev {
  DeviceBuffer buf;
  size_t n = 0;
  explicit Dev(size_t count) : buf(std::max<size_t>(count, 1) * sizeof(T), 0), n(count) {}
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { upload(h); }
  void upload(const std::vector<T>& h) {
    cuda_check(::flashcpp::testing::upload_bytes(buf.get(), h.data(), h.size() * sizeof(T)), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    cuda_check(cudaMemcpy(h.data(), buf.get(), n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
  void poison() { cuda_check(::flashcpp::testing::fill_bytes(buf.get(), ::flashcpp::testing::kPoisonByte, std::max<size_t>(n, 1) * sizeof(T)), "poison"); }
  T* get() const { return buf.as<T>(); }
};

constexpr uint16_t kPoisonBf16 = static_cast<uint16_t>(::flashcpp::testing::kPoisonByte * 0x101);  // poisoned element

TensorView dview(void* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(p, t, Device::cuda(0), shape);
}
TensorView hview(const void* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(const_cast<void*>(p), t, Device::cpu(), shape);
}

// The first k entries of perm become a uniform random sample without replacement (O(k)).
void partial_shuffle(std::vector<int32_t>& perm, int64_t k, std::mt19937& rng) {
  const int64_t n = static_cast<int64_t>(perm.size());
  for (int64_t j = 0; j < std::min(k, n); ++j)
    std::swap(perm[static_cast<size_t>(j)], perm[static_cast<size_t>(std::uniform_int_distribution<int64_t>(j, n - 1)(rng))]);
}

// FlashMLA's test tensors (kernelkit's non_contiguousify): storage with every dim one longer and the last one 128
// longer, viewed at the original shape, so requests, tokens and heads are all unevenly spaced.
struct PaddedLayout {
  std::vector<int64_t> shape, strides;
  int64_t storage = 0;  // elements
  explicit PaddedLayout(std::vector<int64_t> s) : shape(std::move(s)), strides(shape.size(), 1) {
    const size_t r = shape.size();
    for (size_t d = r - 1; d-- > 0;) strides[d] = strides[d + 1] * (shape[d + 1] + (d + 1 == r - 1 ? 128 : 1));
    storage = strides[0] * (shape[0] + 1);
  }
  // Storage offset of compact (row-major) element i.
  int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      off += (i % shape[d]) * strides[d];
      i /= shape[d];
    }
    return off;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t v : shape) n *= v;
    return n;
  }
  template <class T>
  std::vector<T> scatter(const std::vector<T>& compact, T fill) const {
    std::vector<T> out(static_cast<size_t>(storage), fill);
    for (int64_t i = 0; i < numel(); ++i) out[static_cast<size_t>(offset(i))] = compact[static_cast<size_t>(i)];
    return out;
  }
  // The view's elements, compact; `outside` counts storage elements outside the view that are not `fill`.
  template <class T>
  std::vector<T> gather(const std::vector<T>& padded, T fill, int64_t& outside) const {
    std::vector<T> out(static_cast<size_t>(numel()));
    std::vector<char> in_view(static_cast<size_t>(storage), 0);
    for (int64_t i = 0; i < numel(); ++i) {
      out[static_cast<size_t>(i)] = padded[static_cast<size_t>(offset(i))];
      in_view[static_cast<size_t>(offset(i))] = 1;
    }
    outside = 0;
    for (int64_t j = 0; j < storage; ++j) outside += !in_view[static_cast<size_t>(j)] && padded[static_cast<size_t>(j)] != fill;
    return out;
  }
  TensorView view(void* data, DType dtype) const { return TensorView::strided(data, dtype, Device::cuda(0), shape, strides); }
};

// Reference in parallel over the wanted rows.
template <class Fn>
reference::MlaReferenceResult parallel_reference(const std::vector<int64_t>& rows, Fn&& fn) {
  const size_t workers = std::max<size_t>(1, std::min<size_t>(rows.size(), std::thread::hardware_concurrency()));
  std::vector<reference::MlaReferenceResult> parts(workers);
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      std::vector<int64_t> mine;
      for (size_t i = w; i < rows.size(); i += workers) mine.push_back(rows[i]);
      parts[w] = fn(mine);
    });
  for (auto& t : threads) t.join();
  reference::MlaReferenceResult r;
  r.rows = static_cast<int64_t>(rows.size());
  r.h_q = parts[0].h_q;
  r.d_v = parts[0].d_v;
  r.out.resize(static_cast<size_t>(r.rows * r.h_q * r.d_v));
  r.out_magnitude.resize(r.out.size());
  r.lse.resize(static_cast<size_t>(r.rows * r.h_q));
  r.max_logits.resize(r.lse.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& p = parts[i % workers];
    const size_t k = i / workers;
    std::copy_n(p.out.begin() + static_cast<int64_t>(k * r.h_q * r.d_v), r.h_q * r.d_v, r.out.begin() + static_cast<int64_t>(i * r.h_q * r.d_v));
    std::copy_n(p.out_magnitude.begin() + static_cast<int64_t>(k * r.h_q * r.d_v), r.h_q * r.d_v,
                r.out_magnitude.begin() + static_cast<int64_t>(i * r.h_q * r.d_v));
    std::copy_n(p.lse.begin() + static_cast<int64_t>(k * r.h_q), r.h_q, r.lse.begin() + static_cast<int64_t>(i * r.h_q));
    std::copy_n(p.max_logits.begin() + static_cast<int64_t>(k * r.h_q), r.h_q, r.max_logits.begin() + static_cast<int64_t>(i * r.h_q));
  }
  return r;
}

std::vector<int64_t> sample_rows(int64_t n, int64_t max_rows, std::mt19937& rng) {
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  if (n <= max_rows) return all;
  std::shuffle(all.begin() + 1, all.end() - 1, rng);
  std::vector<int64_t> r = {0, n - 1};  // always the first and the last row
  r.insert(r.end(), all.begin() + 1, all.begin() + (max_rows - 1));
  return r;
}

// Kernel rows `rows` of out [*, h_q, 512] bf16 / lse [*, h_q] vs the reference.
void expect_close(const std::vector<uint16_t>& out, const std::vector<float>& lse, const std::vector<float>* max_logits,
                  const std::vector<int64_t>& rows, const reference::MlaReferenceResult& ref, int64_t h_q,
                  const std::string& what, int64_t lse_row_stride = -1, int64_t lse_head_stride = 1, bool f16 = false) {
  if (lse_row_stride < 0) lse_row_stride = h_q;
  std::vector<double> got_out, got_lse, got_ml;
  for (int64_t r : rows) {
    for (int64_t i = 0; i < h_q * 512; ++i) {
      const uint16_t bits = out[static_cast<size_t>(r * h_q * 512 + i)];
      got_out.push_back(f16 ? reference::half_to_float(bits) : bf16_bits_to_float(bits));
    }
    for (int64_t h = 0; h < h_q; ++h) {
      got_lse.push_back(lse[static_cast<size_t>(r * lse_row_stride + h * lse_head_stride)]);
      if (max_logits) got_ml.push_back((*max_logits)[static_cast<size_t>(r * h_q + h)]);
    }
  }
  const auto loose = compare(got_out, ref.out, 4e-3, kOutRelTol, kOutCosDiffTol, what + " out");
  EXPECT_TRUE(loose.ok) << loose.message;
  // Strict: an element also passes within 2^-8 (m + |ref|), m = ref.out_magnitude = sum_j p_j |v_j| (the
  // weights of out). The Hopper kernels (as FlashMLA) round P to bf16 before the PV product: 8 significant
  // bits, a relative error of at most 2^-8 per term p_j v_j, so at most 2^-8 m in all; rounding out to bf16
  // adds at most 2^-8 |out| (f32 accumulation is far below both). Where the terms cancel (few valid slots,
  // |out| << m) the first exceeds abs 8e-4 on whole rows, in a small case on more than the 0.1% allowance
  // (V4 random pools, b 5 h_q 20: 63 of 51200 elements, |d| up to 2^-8.2 m). fp16 (P and out with 11 significant
  // bits, 2^-11 each) within 2^-10: a kernel that rounded P or out to bf16 would not pass.
  ASSERT_EQ(ref.out_magnitude.size(), ref.out.size());
  std::vector<double> bound(ref.out.size());
  for (size_t i = 0; i < bound.size(); ++i)
    bound[i] = std::ldexp(ref.out_magnitude[i] + std::fabs(ref.out[i]), f16 ? -10 : -8);
  const auto strict = compare(got_out, ref.out, kOutAbsTol, kOutRelTol, kOutCosDiffTol, what + " out (strict)", bound);
  EXPECT_LE(strict.failures, static_cast<int64_t>(0.001 * static_cast<double>(got_out.size()))) << strict.message;
  const auto l = compare(got_lse, ref.lse, kLseAbsTol, kLseRelTol, 1.0, what + " lse");
  EXPECT_TRUE(l.ok) << l.message;
  if (max_logits) {
    const auto m = compare(got_ml, ref.max_logits, kLseAbsTol, kLseRelTol, 1.0, what + " max_logits");
    EXPECT_TRUE(m.ok) << m.message;
  }
}

struct ForceSimple {
  explicit ForceSimple(bool on) : prev(mla::kernels::force_simple_kernel()) { mla::kernels::set_force_simple_kernel(on); }
  ~ForceSimple() { mla::kernels::set_force_simple_kernel(prev); }
  bool prev;
};
// The FP8 decode kernel forced (FLASHCPP_MLA_FP8_KERNEL's switch), for a scope.
struct Fp8DecodeKernel {
  explicit Fp8DecodeKernel(mla::kernels::SparseKernel k) : prev(mla::kernels::fp8_decode_kernel()) {
    mla::kernels::set_fp8_decode_kernel(k);
  }
  ~Fp8DecodeKernel() { mla::kernels::set_fp8_decode_kernel(prev); }
  std::optional<mla::kernels::SparseKernel> prev;
};
// Dense decode's FP8 work with up to 32 heads on the few-heads kernel (FLASHCPP_MLA_DENSE_KERNEL=mma), for a scope.
struct DenseFp8FewHeads {
  explicit DenseFp8FewHeads(bool on) : prev(mla::kernels::dense_fp8_mma_kernel()) {
    mla::kernels::set_dense_fp8_mma_kernel(on);
  }
  ~DenseFp8FewHeads() { mla::kernels::set_dense_fp8_mma_kernel(prev); }
  bool prev;
};

// ---------------------------------------------------------------------------------------------------
// Prefill

struct PrefillCase {
  int64_t s_q, h_q, d_qk, s_kv, topk;
  bool sink = false, topk_len = false, invalid_mix = true;
  int64_t max_ref_rows = 12;
  bool strided = false;  // q and out with padded head and token strides (padding NaN / poison, never touched)
  int64_t out_pad = 64;   // strided: elements of padding after each out row and token
};

void run_prefill_case(const PrefillCase& c, uint32_t seed) {
  SCOPED_TRACE("s_q " + std::to_string(c.s_q) + " h_q " + std::to_string(c.h_q) + " d_qk " + std::to_string(c.d_qk) +
               " s_kv " + std::to_string(c.s_kv) + " topk " + std::to_string(c.topk) + (c.sink ? " sink" : "") +
               (c.topk_len ? " topk_length" : ""));
  std::mt19937 rng(seed);
  auto q = random_bf16(static_cast<size_t>(c.s_q * c.h_q * c.d_qk), rng);
  auto kv = random_bf16(static_cast<size_t>(c.s_kv * c.d_qk), rng);
  std::vector<int32_t> idx(static_cast<size_t>(c.s_q * c.topk));
  std::vector<int32_t> len(static_cast<size_t>(c.s_q), static_cast<int32_t>(c.topk));
  std::vector<char> used(static_cast<size_t>(c.s_kv), 0);
  std::vector<int32_t> perm(static_cast<size_t>(c.s_kv));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t t = 0; t < c.s_q; ++t) {
    partial_shuffle(perm, c.topk, rng);
    if (c.topk_len) len[static_cast<size_t>(t)] = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(c.topk))(rng);
    for (int64_t j = 0; j < c.topk; ++j) {
      int32_t v = j < c.s_kv ? perm[static_cast<size_t>(j)] : kInvalid[j % 6];
      if (c.invalid_mix && std::uniform_int_distribution<int>(0, 9)(rng) == 0) v = kInvalid[(t + j) % 6];
      if (c.invalid_mix && std::uniform_int_distribution<int>(0, 30)(rng) == 0) v = static_cast<int32_t>(c.s_kv);  // just past
      idx[static_cast<size_t>(t * c.topk + j)] = v;
      if (v >= 0 && v < c.s_kv && j < len[static_cast<size_t>(t)]) used[static_cast<size_t>(v)] = 1;
    }
  }
  if (c.s_q > 2)  // one all-invalid row
    for (int64_t j = 0; j < c.topk; ++j) idx[static_cast<size_t>(1 * c.topk + j)] = kInvalid[j % 6];
  // Rows no valid slot uses are NaN: reading one would poison the output.
  for (int64_t r = 0; r < c.s_kv; ++r)
    if (!used[static_cast<size_t>(r)])
      for (int64_t d = 0; d < c.d_qk; ++d) kv[static_cast<size_t>(r * c.d_qk + d)] = 0x7fc0;
  std::vector<float> sink(static_cast<size_t>(c.h_q));
  std::normal_distribution<float> nd;
  for (auto& s : sink) s = nd(rng);
  if (c.h_q > 2) sink[0] = INFINITY, sink[1] = -INFINITY;
  // The strided cases leave sm_scale unset: the op's default, 1/sqrt(d_qk), which the reference is given.
  const bool default_scale = c.strided;
  const double sm_scale = (default_scale ? 1.0 : 4.0) / std::sqrt(static_cast<double>(c.d_qk));

  // Strides of q and out as the device sees them (the padding of a strided case is NaN in q).
  const int64_t q_head = c.strided ? c.d_qk + 64 : c.d_qk, q_tok = c.strided ? c.h_q * q_head + 64 : c.h_q * q_head;
  const int64_t o_head = c.strided ? 512 + c.out_pad : 512;
  const int64_t o_tok = c.strided ? c.h_q * o_head + c.out_pad : c.h_q * o_head;
  std::vector<uint16_t> q_dev(static_cast<size_t>(c.s_q * q_tok), 0x7fc0);
  for (int64_t t = 0; t < c.s_q; ++t)
    for (int64_t h = 0; h < c.h_q; ++h)
      std::copy_n(q.begin() + (t * c.h_q + h) * c.d_qk, c.d_qk, q_dev.begin() + t * q_tok + h * q_head);
  Dev<uint16_t> dq(q_dev), dkv(kv), dout(static_cast<size_t>(c.s_q * o_tok));
  Dev<int32_t> didx(idx), dlen(len);
  Dev<float> dsink(sink), dlse(static_cast<size_t>(c.s_q * c.h_q)), dml(static_cast<size_t>(c.s_q * c.h_q));
  const auto qv = TensorView::strided(dq.get(), DType::bf16, Device::cuda(0), {c.s_q, c.h_q, c.d_qk}, {q_tok, q_head, 1});
  const auto kvv = dview(dkv.get(), DType::bf16, {c.s_kv, 1, c.d_qk});
  const auto iv = dview(didx.get(), DType::i32, {c.s_q, 1, c.topk});
  const auto ov = TensorView::strided(dout.get(), DType::bf16, Device::cuda(0), {c.s_q, c.h_q, 512}, {o_tok, o_head, 1});
  const auto lv = dview(dlse.get(), DType::f32, {c.s_q, c.h_q});
  const auto mv = dview(dml.get(), DType::f32, {c.s_q, c.h_q});
  const auto sv = dview(dsink.get(), DType::f32, {c.h_q});
  const auto lenv = dview(dlen.get(), DType::i32, {c.s_q});
  mla::SparsePrefillOptions params;
  if (!default_scale) params.sm_scale = sm_scale;
  const mla::SparsePrefillTensors tensors{.q = qv,
                                          .kv = kvv,
                                          .indices = iv,
                                          .attn_sink = c.sink ? &sv : nullptr,
                                          .topk_length = c.topk_len ? &lenv : nullptr,
                                          .out = ov,
                                          .max_logits = &mv,
                                          .lse = lv};

  const auto rows = sample_rows(c.s_q, c.max_ref_rows, rng);
  const auto hq = hview(q.data(), DType::bf16, {c.s_q, c.h_q, c.d_qk});
  const auto hkv = hview(kv.data(), DType::bf16, {c.s_kv, 1, c.d_qk});
  const auto hi = hview(idx.data(), DType::i32, {c.s_q, 1, c.topk});
  const auto hs = hview(sink.data(), DType::f32, {c.h_q});
  const auto hl = hview(len.data(), DType::i32, {c.s_q});
  const auto ref = parallel_reference(rows, [&](const std::vector<int64_t>& rr) {
    return reference::mla_sparse_prefill_reference(hq, hkv, hi, c.sink ? &hs : nullptr, c.topk_len ? &hl : nullptr,
                                                   sm_scale, 512, rr);
  });
  for (bool simple : {false, true}) {
    ForceSimple fs(simple);
    dout.poison();
    dlse.poison();
    dml.poison();
    mla::sparse_prefill(tensors, params, nullptr);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    const auto out_dev = dout.download();
    std::vector<uint16_t> out(static_cast<size_t>(c.s_q * c.h_q * 512));
    size_t touched_padding = 0;
    for (int64_t t = 0; t < c.s_q; ++t)
      for (int64_t h = 0; h < c.h_q; ++h) {
        std::copy_n(out_dev.begin() + t * o_tok + h * o_head, 512, out.begin() + (t * c.h_q + h) * 512);
        for (int64_t i = 512; i < (h + 1 < c.h_q ? o_head : o_tok - h * o_head); ++i)
          touched_padding += out_dev[static_cast<size_t>(t * o_tok + h * o_head + i)] != kPoisonBf16;
      }
    EXPECT_EQ(touched_padding, 0u) << "the kernel wrote between the rows of a strided out";
    const auto lse = dlse.download(), ml = dml.download();
    expect_close(out, lse, &ml, rows, ref, c.h_q, simple ? "simple" : "dispatched");
  }
}

TEST(MlaGpuPrefill, GoldenCases) {
  FLASHCPP_REQUIRE_GPU();
  FLASHCPP_REQUIRE_GOLDEN(dir);
  for (const auto& name : golden_case_names(dir, "prefill_")) {
    SCOPED_TRACE(name);
    const GoldenCase g = load_golden(dir, name);
    const GoldenTensor &q = g.inputs.at("q"), &kv = g.inputs.at("kv"), &idx = g.inputs.at("indices");
    const int64_t s_q = q.shape[0], h_q = q.shape[1], d_qk = q.shape[2], s_kv = kv.shape[0], topk = idx.shape[2];
    Dev<uint8_t> dq(q.bytes), dkv(kv.bytes), didx(idx.bytes), dout(static_cast<size_t>(s_q * h_q * 512 * 2));
    Dev<float> dlse(static_cast<size_t>(s_q * h_q)), dml(static_cast<size_t>(s_q * h_q));
    std::optional<Dev<uint8_t>> dsink, dlen;
    TensorView sv, lenv;
    const mla::SparsePrefillOptions params{.sm_scale = g.params.at("sm_scale").get<double>()};
    mla::SparsePrefillTensors tensors;
    if (g.has_input("attn_sink")) {
      dsink.emplace(g.inputs.at("attn_sink").bytes);
      sv = dview(dsink->get(), DType::f32, {h_q});
      tensors.attn_sink = &sv;
    }
    if (g.has_input("topk_length")) {
      dlen.emplace(g.inputs.at("topk_length").bytes);
      lenv = dview(dlen->get(), DType::i32, {s_q});
      tensors.topk_length = &lenv;
    }
    TensorView sink_h, len_h;
    if (g.has_input("attn_sink")) sink_h = g.inputs.at("attn_sink").view();
    if (g.has_input("topk_length")) len_h = g.inputs.at("topk_length").view();
    const auto ref = reference::mla_sparse_prefill_reference(q.view(), kv.view(), idx.view(),
                                                             tensors.attn_sink ? &sink_h : nullptr,
                                                             tensors.topk_length ? &len_h : nullptr, *params.sm_scale);
    std::vector<int64_t> rows(static_cast<size_t>(s_q));
    std::iota(rows.begin(), rows.end(), 0);
    for (bool simple : {false, true}) {
      ForceSimple fs(simple);
      dout.poison();
      dlse.poison();
      dml.poison();
      const auto mv = dview(dml.get(), DType::f32, {s_q, h_q});
      tensors.q = dview(dq.get(), DType::bf16, {s_q, h_q, d_qk});
      tensors.kv = dview(dkv.get(), DType::bf16, {s_kv, 1, d_qk});
      tensors.indices = dview(didx.get(), DType::i32, {s_q, 1, topk});
      tensors.out = dview(dout.get(), DType::bf16, {s_q, h_q, 512});
      tensors.max_logits = &mv;
      tensors.lse = dview(dlse.get(), DType::f32, {s_q, h_q});
      mla::sparse_prefill(tensors, params, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      const auto raw = dout.download();
      std::vector<uint16_t> out(raw.size() / 2);
      std::memcpy(out.data(), raw.data(), raw.size());
      const auto lse = dlse.download(), ml = dml.download();
      expect_close(out, lse, &ml, rows, ref, h_q, simple ? "simple" : "dispatched");
      // And against FlashMLA's own output, with the golden policy.
      std::vector<double> got, want;
      for (size_t i = 0; i < out.size(); ++i) {
        got.push_back(bf16_bits_to_float(out[i]));
        want.push_back(bf16_bits_to_float(g.outputs.at("out").at<uint16_t>(static_cast<int64_t>(i))));
      }
      const auto vs = compare(got, want, 4e-3, kOutRelTol, kOutCosDiffTol, "out vs FlashMLA");
      EXPECT_TRUE(vs.ok) << vs.message;
    }
  }
}

TEST(MlaGpuPrefill, Sweep) {
  FLASHCPP_REQUIRE_GPU();
  uint32_t seed = 100;
  const std::pair<int64_t, int64_t> kv_topk[] = {{128, 128}, {1521, 512}, {95, 128}, {3000, 2048}, {1592, 2048}};
  for (int64_t h_q : {64, 128})
    for (int64_t d_qk : {512, 576})
      for (auto [s_kv, topk] : kv_topk)
        for (int64_t s_q : {1, 62, 213}) {
          if (topk == 2048 && s_q == 62) continue;  // keep the budget
          PrefillCase c{s_q, h_q, d_qk, s_kv, topk};
          c.sink = (seed % 2) == 0;
          c.topk_len = (seed % 3) == 0;
          c.max_ref_rows = topk >= 2048 ? 6 : 12;
          run_prefill_case(c, seed++);
        }
}

TEST(MlaGpuPrefill, LargeAndOddShapes) {
  FLASHCPP_REQUIRE_GPU();
  run_prefill_case({4096, 128, 576, 131072, 2048, true, false, true, 6}, 7);  // the benchmark shape
  run_prefill_case({4096, 64, 512, 8192, 512, false, true, true, 6}, 8);
  run_prefill_case({70, 20, 576, 700, 256, true, true, true, 8}, 9);      // 20 heads: no padding needed
  run_prefill_case({9, 1, 512, 64, 64, false, false, true, 9}, 10);       // one head, s_kv == topk
  run_prefill_case({5, 130, 576, 32, 2048, true, true, true, 5}, 11);     // s_kv << topk: mostly invalid
}

// More query tokens than CTAs resident at once (66 token slots at 128 heads on 132 SMs, 132 at 64 heads), every row
// checked: a kernel that runs several tokens per CTA (one round of CTAs) must get every later token right, with
// lengths that differ per token (topk_length) and the sink.
TEST(MlaGpuPrefill, MoreTokensThanResidentSlots) {
  FLASHCPP_REQUIRE_GPU();
  uint32_t seed = 40;
  for (int64_t h_q : {128, 64})
    for (int64_t d_qk : {576, 512}) {
      PrefillCase c{300, h_q, d_qk, 1000, 128, true, true};
      c.max_ref_rows = c.s_q;
      run_prefill_case(c, seed++);
    }
}

TEST(MlaGpuPrefill, StridedQueryAndOutput) {
  FLASHCPP_REQUIRE_GPU();
  for (int64_t d_qk : {576, 512}) {
    PrefillCase c{37, 128, d_qk, 3000, 512, true, true};
    c.strided = true;
    run_prefill_case(c, 12 + static_cast<uint32_t>(d_qk));
    PrefillCase one{1, 64, d_qk, 100, 64};  // s_q 1, topk 64 (one tile: the second of the pair is masked)
    one.strided = true;
    run_prefill_case(one, 13 + static_cast<uint32_t>(d_qk));
    // Out rows 4 bytes off 16-byte alignment: the Hopper kernels decline them (their epilogue stores 16-byte
    // pieces), the dispatched op still writes the right rows and nothing between them.
    PrefillCase odd{19, 128, d_qk, 2000, 512, true, false};
    odd.strided = true;
    odd.out_pad = 2;
    run_prefill_case(odd, 14 + static_cast<uint32_t>(d_qk));
  }
}

// ---------------------------------------------------------------------------------------------------
// Quantizer

TEST(MlaGpuQuantize, MatchesFlashMlaBytesAndHostPath) {
  FLASHCPP_REQUIRE_GPU();
  FLASHCPP_REQUIRE_GOLDEN(dir);
  for (const auto& name : golden_case_names(dir, "decode_")) {
    SCOPED_TRACE(name);
    const GoldenCase g = load_golden(dir, name);
    const GoldenTensor& src = g.inputs.at("kv_bf16_before_quant");
    const GoldenTensor& want = g.inputs.at("k_cache_fp8");
    Dev<uint8_t> dsrc(src.bytes), ddst(want.bytes.size());
    ddst.poison();
    mla::quantize_kv_cache_fp8(dview(dsrc.get(), DType::bf16, {src.shape[0], src.shape[1], 1, 576}),
                               dview(ddst.get(), DType::u8, {src.shape[0], src.shape[1], 1, 656}), nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const auto got = ddst.download();
    ASSERT_EQ(got, want.bytes);
  }
  // Random strided input: device bytes == host bytes.
  std::mt19937 rng(3);
  const int64_t rows = 1000;
  auto src = random_bf16(static_cast<size_t>(rows * 640), rng, 3.0);
  std::vector<uint8_t> host(static_cast<size_t>(rows * 656));
  const auto hs = TensorView::strided(src.data(), DType::bf16, Device::cpu(), {rows, 576}, {640, 1});
  mla::quantize_kv_cache_fp8(hs, hview(host.data(), DType::u8, {rows, 656}), nullptr);
  Dev<uint16_t> dsrc(src);
  Dev<uint8_t> ddst(host.size());
  ddst.poison();
  mla::quantize_kv_cache_fp8(TensorView::strided(dsrc.get(), DType::bf16, Device::cuda(0), {rows, 576}, {640, 1}),
                             dview(ddst.get(), DType::u8, {rows, 656}), nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_EQ(ddst.download(), host);
}

// The V4 ("MODEL1") quantizer on the device: FlashMLA's bytes on the golden case, the host path's bytes on random
// strided input with padded pages; pad bytes 0 and page padding untouched (still poisoned).
TEST(MlaGpuQuantize, V4MatchesFlashMlaBytesAndHostPath) {
  FLASHCPP_REQUIRE_GPU();
  const auto found = golden_dir_with("model1_quantize");
  if (!found) GTEST_SKIP() << "no model1_quantize golden case (they live in the project's shared data)";
  const auto& dir = *found;
  auto pages = [](void* p, Device dev, int64_t nb, int64_t bs, int64_t page) {
    return TensorView::strided(p, DType::u8, dev, {nb, bs, 1, 584}, {page, 584, 584, 1});
  };
  for (const auto& name : golden_case_names(dir, "model1_quantize")) {
    SCOPED_TRACE(name);
    const GoldenCase g = load_golden(dir, name);
    const GoldenTensor& src = g.inputs.at("kv");
    const GoldenTensor& want = g.outputs.at("k_cache_fp8");
    const int64_t nb = src.shape[0], bs = src.shape[1], page = want.shape[1];
    Dev<uint8_t> dsrc(src.bytes), ddst(want.bytes.size());
    ddst.poison();
    mla::quantize_kv_cache_fp8_v4(dview(dsrc.get(), DType::bf16, {nb, bs, 1, 512}),
                                  pages(ddst.get(), Device::cuda(0), nb, bs, page), nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const auto got = ddst.download();
    for (int64_t i = 0; i < nb * page; ++i) {
      const int64_t off = i % page, scale_part = off - bs * 576;
      const size_t k = static_cast<size_t>(i);
      if (off >= bs * 584) ASSERT_EQ(got[k], ::flashcpp::testing::kPoisonByte) << "page padding byte " << i;
      else if (scale_part >= 0 && scale_part % 8 == 7) ASSERT_EQ(got[k], 0) << "pad byte " << i;
      else ASSERT_EQ(got[k], want.bytes[k]) << "byte " << i;
    }
  }
  std::mt19937 rng(4);
  const int64_t nb = 37, bs = 61, tok_stride = 520, page = 35712;
  auto src = random_bf16(static_cast<size_t>(nb * bs * tok_stride), rng, 3.0);
  std::vector<uint8_t> host(static_cast<size_t>(nb * page), static_cast<uint8_t>(::flashcpp::testing::kPoisonByte));
  const auto hs = TensorView::strided(src.data(), DType::bf16, Device::cpu(), {nb, bs, 1, 512}, {bs * tok_stride, tok_stride, 512, 1});
  mla::quantize_kv_cache_fp8_v4(hs, pages(host.data(), Device::cpu(), nb, bs, page), nullptr);
  Dev<uint16_t> dsrc(src);
  Dev<uint8_t> ddst(host.size());
  ddst.poison();
  mla::quantize_kv_cache_fp8_v4(TensorView::strided(dsrc.get(), DType::bf16, Device::cuda(0), {nb, bs, 1, 512},
                                                    {bs * tok_stride, tok_stride, 512, 1}),
                                pages(ddst.get(), Device::cuda(0), nb, bs, page), nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_EQ(ddst.download(), host);
}

// The dequantizers on the device: the host path's bytes (which the CPU tests prove equal to the reference
// dequantization) on random caches quantized from random bf16, V3.2 rows under a padded output, V4 padded pages;
// the output's padding untouched (still poisoned).
TEST(MlaGpuQuantize, DequantizersMatchHostPath) {
  FLASHCPP_REQUIRE_GPU();
  std::mt19937 rng(5);
  {
    const int64_t rows = 3001, out_tok = 584;  // out: 8 values of padding per token
    auto src = random_bf16(static_cast<size_t>(rows * 576), rng, 3.0);
    std::vector<uint8_t> cache(static_cast<size_t>(rows * 656));
    mla::quantize_kv_cache_fp8(hview(src.data(), DType::bf16, {rows, 576}), hview(cache.data(), DType::u8, {rows, 656}),
                               nullptr);
    std::vector<uint16_t> host(static_cast<size_t>(rows * out_tok), 0x5a5a);
    const auto out_view = [&](void* p, Device d) {
      return TensorView::strided(p, DType::bf16, d, {rows, 576}, {out_tok, 1});
    };
    mla::dequantize_kv_cache_fp8(hview(cache.data(), DType::u8, {rows, 656}), out_view(host.data(), Device::cpu()),
                                 nullptr);
    Dev<uint8_t> dcache(cache);
    Dev<uint16_t> dout(host.size());
    dout.poison();
    mla::dequantize_kv_cache_fp8(dview(dcache.get(), DType::u8, {rows, 656}), out_view(dout.get(), Device::cuda(0)),
                                 nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const auto got = dout.download();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < out_tok; ++c) {
        const size_t k = static_cast<size_t>(r * out_tok + c);
        if (c < 576) ASSERT_EQ(got[k], host[k]) << "row " << r << " dim " << c;
        else ASSERT_EQ(got[k], kPoisonBf16) << "padding of row " << r;
      }
  }
  {
    const int64_t nb = 37, bs = 61, page = 35632;  // 61 * 584 = 35624 bytes, padded to 2227 * 16
    auto src = random_bf16(static_cast<size_t>(nb * bs * 512), rng, 3.0);
    std::vector<uint8_t> pages(static_cast<size_t>(nb * page));
    const auto page_view = [&](void* p, Device d) {
      return TensorView::strided(p, DType::u8, d, {nb, bs, 1, 584}, {page, 584, 584, 1});
    };
    mla::quantize_kv_cache_fp8_v4(hview(src.data(), DType::bf16, {nb, bs, 1, 512}), page_view(pages.data(), Device::cpu()),
                                  nullptr);
    std::vector<uint16_t> host(src.size());
    mla::dequantize_kv_cache_fp8_v4(page_view(pages.data(), Device::cpu()), hview(host.data(), DType::bf16, {nb, bs, 1, 512}),
                                    nullptr);
    Dev<uint8_t> dpages(pages);
    Dev<uint16_t> dout(host.size());
    dout.poison();
    mla::dequantize_kv_cache_fp8_v4(page_view(dpages.get(), Device::cuda(0)), dview(dout.get(), DType::bf16, {nb, bs, 1, 512}),
                                    nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    ASSERT_EQ(dout.download(), host);
  }
}

// ---------------------------------------------------------------------------------------------------
// Decode

struct DecodeCase {
  int64_t b, s_q, h_q, topk, block_size;
  int num_sms = 0;  // 0: the device's
  bool sink = false, topk_len = false;
  int64_t max_ref_rows = 8;
  bool padded = false;  // q, indices and out as FlashMLA's padded views (PaddedLayout)
};

void run_decode_case(const DecodeCase& c, uint32_t seed, bool graph = false) {
  SCOPED_TRACE("b " + std::to_string(c.b) + " s_q " + std::to_string(c.s_q) + " h_q " + std::to_string(c.h_q) +
               " topk " + std::to_string(c.topk) + " block " + std::to_string(c.block_size) + " num_sms " +
               std::to_string(c.num_sms) + (c.sink ? " sink" : "") + (c.topk_len ? " topk_length" : "") +
               (c.padded ? " padded views" : "") + (graph ? " graph" : ""));
  std::mt19937 rng(seed);
  // Cache: per request about topk * 1.3 tokens in random blocks, plus a block-padded layout (block stride
  // block_size + 1 rows). Every token no valid slot uses is 0xFF (NaN payload and scales).
  const int64_t tokens_per_req = c.topk + c.topk / 3 + 7;
  const int64_t num_blocks = c.b * ((tokens_per_req + c.block_size - 1) / c.block_size) + 3;
  const int64_t block_stride = (c.block_size + 1) * 656;
  std::vector<uint16_t> kv_src = random_bf16(static_cast<size_t>(num_blocks * c.block_size * 576), rng);
  std::vector<uint8_t> packed(static_cast<size_t>(num_blocks * c.block_size * 656));
  mla::quantize_kv_cache_fp8(hview(kv_src.data(), DType::bf16, {num_blocks * c.block_size, 576}),
                             hview(packed.data(), DType::u8, {num_blocks * c.block_size, 656}), nullptr);
  const int64_t slots = num_blocks * c.block_size;
  std::vector<int32_t> idx(static_cast<size_t>(c.b * c.s_q * c.topk));
  std::vector<int32_t> len(static_cast<size_t>(c.b), static_cast<int32_t>(c.topk));
  std::vector<char> used(static_cast<size_t>(slots), 0);
  std::vector<int32_t> perm(static_cast<size_t>(slots));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t r = 0; r < c.b; ++r) {
    if (c.topk_len) len[static_cast<size_t>(r)] = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(c.topk))(rng);
    for (int64_t s = 0; s < c.s_q; ++s) {
      partial_shuffle(perm, c.topk, rng);
      for (int64_t j = 0; j < c.topk; ++j) {
        int32_t v = perm[static_cast<size_t>(j)];
        const int k = std::uniform_int_distribution<int>(0, 11)(rng);
        if (k == 0) v = -1;
        if (k == 1) v = kInvalid[j % 6];
        if (k == 2) v = static_cast<int32_t>(slots);
        idx[static_cast<size_t>((r * c.s_q + s) * c.topk + j)] = v;
        if (v >= 0 && v < slots && j < len[static_cast<size_t>(r)]) used[static_cast<size_t>(v)] = 1;
      }
    }
  }
  if (c.b * c.s_q > 2)  // one all-invalid token
    for (int64_t j = 0; j < c.topk; ++j) idx[static_cast<size_t>(1 * c.topk + j)] = -1;
  std::vector<uint8_t> cache(static_cast<size_t>(num_blocks * block_stride), 0xFF);
  for (int64_t t = 0; t < slots; ++t)
    if (used[static_cast<size_t>(t)])
      std::memcpy(&cache[static_cast<size_t>((t / c.block_size) * block_stride + (t % c.block_size) * 656)],
                  &packed[static_cast<size_t>(t * 656)], 656);
  auto q = random_bf16(static_cast<size_t>(c.b * c.s_q * c.h_q * 576), rng, 1.0);
  std::vector<float> sink(static_cast<size_t>(c.h_q));
  std::normal_distribution<float> nd;
  for (auto& s : sink) s = nd(rng);
  if (c.h_q > 2) sink[0] = INFINITY, sink[1] = -INFINITY;
  const double sm_scale = std::pow(576.0, -0.55);

  // Padded views: NaN between q's rows and index 0 (a valid row) between the index rows, so reading either
  // shows in the output; out's padding stays poisoned.
  const PaddedLayout q_layout({c.b, c.s_q, c.h_q, 576}), idx_layout({c.b, c.s_q, c.topk}),
      out_layout({c.b, c.s_q, c.h_q, 512});
  Dev<uint16_t> dq(c.padded ? q_layout.scatter<uint16_t>(q, 0x7fc0) : q);
  Dev<uint16_t> dout(static_cast<size_t>(c.padded ? out_layout.storage : c.b * c.s_q * c.h_q * 512));
  Dev<uint8_t> dcache(cache);
  Dev<int32_t> didx(c.padded ? idx_layout.scatter<int32_t>(idx, 0) : idx), dlen(len);
  Dev<float> dsink(sink), dlse(static_cast<size_t>(c.b * c.s_q * c.h_q));
  const auto qv = c.padded ? q_layout.view(dq.get(), DType::bf16) : dview(dq.get(), DType::bf16, {c.b, c.s_q, c.h_q, 576});
  const auto cv = TensorView::strided(dcache.get(), DType::u8, Device::cuda(0), {num_blocks, c.block_size, 1, 656},
                                      {block_stride, 656, 656, 1});
  const auto iv = c.padded ? idx_layout.view(didx.get(), DType::i32) : dview(didx.get(), DType::i32, {c.b, c.s_q, c.topk});
  const auto ov =
      c.padded ? out_layout.view(dout.get(), DType::bf16) : dview(dout.get(), DType::bf16, {c.b, c.s_q, c.h_q, 512});
  // FlashMLA's lse layout [b, h_q, s_q], seen as [b, s_q, h_q].
  const auto lv = TensorView::strided(dlse.get(), DType::f32, Device::cuda(0), {c.b, c.s_q, c.h_q},
                                      {c.h_q * c.s_q, 1, c.s_q});
  const auto sv = dview(dsink.get(), DType::f32, {c.h_q});
  const auto lenv = dview(dlen.get(), DType::i32, {c.b});
  const mla::SparseDecodeOptions params{.sm_scale = sm_scale};
  const mla::SparseDecodeTensors tensors{.q = qv,
                                         .kv_cache = cv,
                                         .indices = iv,
                                         .topk_length = c.topk_len ? &lenv : nullptr,
                                         .attn_sink = c.sink ? &sv : nullptr,
                                         .out = ov,
                                         .lse = lv};

  const auto rows = sample_rows(c.b * c.s_q, c.max_ref_rows, rng);
  // The reference reads the same cache (host copy, same strides).
  const auto hc = TensorView::strided(cache.data(), DType::u8, Device::cpu(), {num_blocks, c.block_size, 1, 656},
                                      {block_stride, 656, 656, 1});
  const auto hq = hview(q.data(), DType::bf16, {c.b, c.s_q, c.h_q, 576});
  const auto hi = hview(idx.data(), DType::i32, {c.b, c.s_q, c.topk});
  const auto hs = hview(sink.data(), DType::f32, {c.h_q});
  const auto hl = hview(len.data(), DType::i32, {c.b});
  const auto ref = parallel_reference(rows, [&](const std::vector<int64_t>& rr) {
    return reference::mla_sparse_decode_reference(hq, hc, hi, c.sink ? &hs : nullptr, c.topk_len ? &hl : nullptr,
                                                  sm_scale, rr);
  });

  Stream stream(0);
  const mla::DecodeConfig cfg{.batch = static_cast<int>(c.b), .s_q = static_cast<int>(c.s_q),
                              .h_q = static_cast<int>(c.h_q), .d_qk = 576, .topk = static_cast<int>(c.topk),
                              .num_sms = c.num_sms};
  // Every other case with lengths is planned by them (DecodePlanLengths), the rest by the shape alone; and a quarter
  // of those without lengths by lengths the run does not have: such a run still attends every slot (each request's
  // last piece runs to its end, DecodePlanLengths).
  const bool by_lengths = c.topk_len ? seed % 4 == 0 : seed % 4 == 1;
  std::vector<int32_t> other_len(len.size());
  for (auto& l : other_len) l = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(c.topk))(rng);
  Dev<int32_t> dother_len(other_len);
  const auto other_lenv = dview(dother_len.get(), DType::i32, {c.b});
  const mla::DecodePlan plan = mla::DecodePlan::create(
      cfg, 0, stream,
      by_lengths ? mla::DecodePlanLengths{c.topk_len ? &lenv : &other_lenv, nullptr} : mla::DecodePlanLengths{});
  SCOPED_TRACE(by_lengths ? (c.topk_len ? "planned by its lengths" : "planned by lengths it runs without")
                          : "planned by the shape");
  auto check = [&](const char* what) {
    CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<uint16_t> out = dout.download();
    if (c.padded) {
      int64_t touched = 0;
      out = out_layout.gather<uint16_t>(out, kPoisonBf16, touched);
      EXPECT_EQ(touched, 0) << what << ": the kernel wrote into the padding of a padded out";
    }
    const auto lse = dlse.download();
    // lse of (row = b * s_q + s, head h) lives at b * h_q * s_q + h * s_q + s.
    std::vector<float> lse_rows(static_cast<size_t>(c.b * c.s_q * c.h_q));
    for (int64_t r = 0; r < c.b * c.s_q; ++r)
      for (int64_t h = 0; h < c.h_q; ++h)
        lse_rows[static_cast<size_t>(r * c.h_q + h)] = lse[static_cast<size_t>((r / c.s_q) * c.h_q * c.s_q + h * c.s_q + r % c.s_q)];
    expect_close(out, lse_rows, nullptr, rows, ref, c.h_q, what);
  };
  if (!graph) {
    for (bool simple : {false, true}) {
      ForceSimple fs(simple);
      dout.poison();
      dlse.poison();
      plan.run(tensors, params, stream);
      check(simple ? "simple" : "dispatched");
    }
    return;
  }
  // CUDA graph: capture run once, replay it several times (outputs poisoned before each replay). One
  // eager run first, so that one-time setup (kernel attributes) happens outside the capture.
  plan.run(tensors, params, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  plan.run(tensors, params, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &g));
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 3; ++rep) {
    dout.poison();
    dlse.poison();
    CUDA_OK(cudaGraphLaunch(ge, stream));
    check("graph replay");
  }
  CUDA_OK(cudaGraphExecDestroy(ge));
  CUDA_OK(cudaGraphDestroy(g));
}

TEST(MlaGpuDecode, GoldenCases) {
  FLASHCPP_REQUIRE_GPU();
  FLASHCPP_REQUIRE_GOLDEN(dir);
  for (const auto& name : golden_case_names(dir, "decode_")) {
    SCOPED_TRACE(name);
    const GoldenCase g = load_golden(dir, name);
    const int64_t b = g.params.at("b"), s_q = g.params.at("s_q"), h_q = g.params.at("h_q"), topk = g.params.at("topk");
    const int64_t nb = g.params.at("num_blocks"), bs = g.params.at("block_size");
    const double sm_scale = g.params.at("sm_scale");
    Dev<uint8_t> dq(g.inputs.at("q").bytes), dc(g.inputs.at("k_cache_fp8").bytes), di(g.inputs.at("indices").bytes);
    Dev<uint16_t> dout(static_cast<size_t>(b * s_q * h_q * 512));
    Dev<float> dlse(static_cast<size_t>(b * s_q * h_q));
    std::optional<Dev<uint8_t>> dsink;
    TensorView sv, sink_h;
    const mla::SparseDecodeOptions params{.sm_scale = sm_scale};
    mla::SparseDecodeTensors tensors;
    if (g.has_input("attn_sink")) {
      dsink.emplace(g.inputs.at("attn_sink").bytes);
      sv = dview(dsink->get(), DType::f32, {h_q});
      sink_h = g.inputs.at("attn_sink").view();
      tensors.attn_sink = &sv;
    }
    const auto ref = reference::mla_sparse_decode_reference(g.inputs.at("q").view(), g.inputs.at("k_cache_fp8").view(),
                                                            g.inputs.at("indices").view(),
                                                            tensors.attn_sink ? &sink_h : nullptr, nullptr, sm_scale);
    std::vector<int64_t> rows(static_cast<size_t>(b * s_q));
    std::iota(rows.begin(), rows.end(), 0);
    for (int num_sms : {0, 5}) {  // the device's split and a tiny-SM split that cuts requests
      const mla::DecodePlan plan = mla::DecodePlan::create(
          {.batch = int(b), .s_q = int(s_q), .h_q = int(h_q), .d_qk = 576, .topk = int(topk), .num_sms = num_sms}, 0, nullptr);
      dout.poison();
      dlse.poison();
      tensors.q = dview(dq.get(), DType::bf16, {b, s_q, h_q, 576});
      tensors.kv_cache = dview(dc.get(), DType::u8, {nb, bs, 1, 656});
      tensors.indices = dview(di.get(), DType::i32, {b, s_q, topk});
      tensors.out = dview(dout.get(), DType::bf16, {b, s_q, h_q, 512});
      tensors.lse = TensorView::strided(dlse.get(), DType::f32, Device::cuda(0), {b, s_q, h_q}, {h_q * s_q, 1, s_q});
      plan.run(tensors, params, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      const auto out = dout.download();
      const auto lse = dlse.download();
      // Golden lse is [b, h_q, s_q], the same layout we wrote.
      std::vector<float> lse_rows;
      std::vector<double> got_lse, want_lse;
      for (int64_t r = 0; r < b * s_q; ++r)
        for (int64_t h = 0; h < h_q; ++h) {
          const size_t at = static_cast<size_t>((r / s_q) * h_q * s_q + h * s_q + r % s_q);
          lse_rows.push_back(lse[at]);
          got_lse.push_back(lse[at]);
          want_lse.push_back(g.outputs.at("lse_b_hq_sq").at<float>(static_cast<int64_t>(at)));
        }
      expect_close(out, lse_rows, nullptr, rows, ref, h_q, "num_sms " + std::to_string(num_sms));
      const auto l = compare(got_lse, want_lse, kLseAbsTol, kLseRelTol, 1.0, "lse vs FlashMLA");
      EXPECT_TRUE(l.ok) << l.message;
      std::vector<double> got, want;
      for (size_t i = 0; i < out.size(); ++i) {
        got.push_back(bf16_bits_to_float(out[i]));
        want.push_back(bf16_bits_to_float(g.outputs.at("out").at<uint16_t>(static_cast<int64_t>(i))));
      }
      const auto vs = compare(got, want, 4e-3, kOutRelTol, kOutCosDiffTol, "out vs FlashMLA");
      EXPECT_TRUE(vs.ok) << vs.message;
    }
  }
}

TEST(MlaGpuDecode, Sweep) {
  FLASHCPP_REQUIRE_GPU();
  uint32_t seed = 500;
  for (int64_t b : {1, 2, 64, 128})
    for (int64_t s_q : {1, 2}) {
      const int64_t topk = b >= 64 ? 512 : 2048;
      run_decode_case({b, s_q, 128, topk, 64, 0, (seed % 2) == 0, (seed % 3) == 0, 6}, seed);
      ++seed;
    }
  run_decode_case({3, 2, 64, 576, 61, 0, true, true, 6}, seed++);   // odd block size
  run_decode_case({4, 1, 64, 64, 2, 0, false, false, 4}, seed++);   // block size 2
  run_decode_case({74, 2, 128, 2048, 64, 0, true, false, 6}, seed++);
  run_decode_case({64, 2, 128, 1024, 53, 7, true, true, 8}, seed++);  // forced split over 7 parts
  run_decode_case({5, 3, 20, 128, 64, 0, true, true, 8}, seed++);    // 20 heads
}

// FlashMLA's own test tensors are padded views (every dim one longer, the last 128 longer): taken as they are on
// every decode path: the split plan, the unsplit grid, s_q 1 and 3, h_q 64 (one wgmma CTA a token) and 128 (the
// 2-CTA cluster), and the simple kernel (run_decode_case runs both).
TEST(MlaGpuDecode, FlashMlaPaddedViews) {
  FLASHCPP_REQUIRE_GPU();
  uint32_t seed = 700;
  for (int64_t h_q : {64, 128}) {
    run_decode_case({2, 2, h_q, 2048, 64, 0, true, false, 4, true}, seed++);    // split
    run_decode_case({96, 2, h_q, 512, 64, 0, true, true, 6, true}, seed++);     // unsplit
    run_decode_case({7, 3, h_q, 576, 61, 5, false, true, 6, true}, seed++);     // forced split, s_q 3
    run_decode_case({4, 1, h_q, 128, 2, 0, true, false, 4, true}, seed++);      // s_q 1
  }
  run_decode_case({3, 2, 128, 1024, 64, 0, true, true, 4, true}, seed++, /*graph=*/true);
}

// The mma.sync kernel (FP8 V3.2 with more than 128 heads, or FLASHCPP_MLA_FP8_KERNEL=mma) on the paths that write
// partial rows for the combine and the one that does not: split, split forced over 5 SMs with s_q 3 and lengths,
// unsplit; h_q 64 and 128.
TEST(MlaGpuDecode, MmaKernelSplitAndUnsplit) {
  FLASHCPP_REQUIRE_GPU();
  const Fp8DecodeKernel mma(mla::kernels::SparseKernel::mma_sm90);
  uint32_t seed = 760;
  for (int64_t h_q : {64, 128}) {
    run_decode_case({2, 2, h_q, 2048, 64, 0, true, false, 4}, seed++);  // split
    run_decode_case({7, 3, h_q, 576, 61, 5, false, true, 6}, seed++);   // forced split, s_q 3
    run_decode_case({96, 2, h_q, 512, 64, 0, true, true, 6}, seed++);   // unsplit
  }
}

// FlashMLA's correctness and corner-case grids for the V3.2 cache (tests/test_flash_mla_sparse_decoding.py,
// gen_testcase, d_qk 576), in our own cases: its (topk, block size) pairs, b 4 / 74 / 321, s_q 1 / 3, h_q 64 / 128,
// attn_sink on (b 321 with topk 64 and 576 only); the corners (topk 64 over blocks of 61, 576 over 53; s_q 3) with per-request lengths (zero-length
// requests among them) and the sink on and off. Each case also has an all-invalid token and invalid indices of every
// kind (run_decode_case), runs the dispatched kernel and the simple one, and is checked on 8 sampled rows against
// the float64 reference.
TEST(MlaGpuDecode, FlashMlaCorrectnessGrid) {
  FLASHCPP_REQUIRE_GPU();
  uint32_t seed = 1000;
  for (auto [topk, block] : {std::pair<int64_t, int64_t>{64, 2}, {64, 64}, {64, 69}, {576, 2}, {576, 61}, {2048, 2},
                             {2048, 64}, {2048, 576}})
    for (int64_t b : {4, 74, 321})
      for (int64_t s_q : {1, 3})
        for (int64_t h_q : {64, 128}) {
          if (b == 321 && topk == 2048) continue;  // a 500M-value host cache per case; b 74 covers topk 2048
          run_decode_case({b, s_q, h_q, topk, block, 0, true, false, 8}, seed++);
        }
  for (auto [topk, block] : {std::pair<int64_t, int64_t>{64, 61}, {576, 53}})
    for (int64_t b : {4, 74, 321})
      for (int64_t h_q : {64, 128})
        for (bool sink : {true, false}) run_decode_case({b, 3, h_q, topk, block, 0, sink, true, 8}, seed++);
}

// Plans whose unsplit grid would end on a short last wave: the full waves' requests run unsplit, the rest split
// (DecodePlanSizes::head_requests), with the split requests' tensors offset past the head; s_q 2 and 1, padded
// views, topk_length (offset too), and a graph.
TEST(MlaGpuDecode, ShortLastWaveSplitsOnlyTheTail) {
  FLASHCPP_REQUIRE_GPU();
  const int sms = mla::device_support(0).sm_count;
  // h_q 128: a 2-CTA cluster a token, sms / 2 tokens a wave; two waves and a few tokens.
  const int64_t wave = sms / 2;
  for (int64_t s_q : {2, 1}) {
    const int64_t b = (2 * wave + 4) / s_q;
    const auto sizes = mla::decode_plan_sizes({.batch = int(b), .s_q = int(s_q), .h_q = 128, .topk = 2048}, sms);
    ASSERT_TRUE(sizes.split) << "b " << b;
    ASSERT_GT(sizes.head_requests, 0) << "b " << b;
    run_decode_case({b, s_q, 128, 2048, 64, 0, true, true, 6, s_q == 2}, 800 + static_cast<uint32_t>(s_q));
  }
  // h_q 64: one CTA a token, sms tokens a wave.
  run_decode_case({(sms + 6) / 2, 2, 64, 2048, 64, 0, true, true, 6, true}, 803);
  run_decode_case({(2 * wave + 4) / 2, 2, 128, 2048, 64, 0, true, false, 4, true}, 804, /*graph=*/true);
}

TEST(MlaGpuDecode, CudaGraphReplay) {
  FLASHCPP_REQUIRE_GPU();
  run_decode_case({2, 2, 128, 2048, 64, 0, true, true, 4}, 900, /*graph=*/true);  // split plan
  run_decode_case({64, 2, 128, 512, 64, 0, true, false, 4}, 901, /*graph=*/true);  // unsplit plan
}

// ---------------------------------------------------------------------------------------------------
// Dense decode (every cached token; bf16 and fp16 caches and the V3.2 FP8 rows)

struct DenseCase {
  int64_t b, s_q, h_q, s_k;  // s_k: every request's length, or their mean when varlen
  bool varlen = false, causal = false, zero_lengths = false, fp8 = false;
  bool f16 = false;  // q, the cache and out in fp16 (not with fp8)
  int64_t block_size = 64;
  bool sink = false;
  int num_sms = 0;
  bool padded_rows = false;  // bf16: tokens 640 elements apart (pages of block_size of them)
  int64_t max_ref_rows = 6;
  bool bad_blocks = false;  // every fifth block of the table invalid (negative, or past the cache): masked
  std::vector<int32_t> lengths = {};  // the requests' lengths, cycled (instead of s_k and varlen)
};

// FlashMLA's generator (tests/test_flash_mla_dense_decoding.py): lengths normal(s_k, s_k / 2), at least s_q, some 0
// when asked; a random permutation of the blocks as the block table, the entries past a request's blocks invalid
// (2147480000), and every cached token past its request's length NaN (bf16) or 0xFF bytes (FP8), so a read of one
// shows in the output. `graph`: capture one run, then replay it with new lengths and a new block table.
void run_dense_case(const DenseCase& c, uint32_t seed, bool graph = false) {
  SCOPED_TRACE("dense b " + std::to_string(c.b) + " s_q " + std::to_string(c.s_q) + " h_q " + std::to_string(c.h_q) +
               " s_k " + std::to_string(c.s_k) + (c.varlen ? " varlen" : "") + (c.causal ? " causal" : "") +
               (c.zero_lengths ? " zero lengths" : "") + (c.fp8 ? " fp8" : c.f16 ? " fp16" : " bf16") + " block " +
               std::to_string(c.block_size) + (c.sink ? " sink" : "") + " num_sms " + std::to_string(c.num_sms) +
               (c.padded_rows ? " padded rows" : "") + (graph ? " graph" : ""));
  ASSERT_FALSE(c.fp8 && c.f16) << "the FP8 cache takes a bf16 q";
  const DType half = c.f16 ? DType::f16 : DType::bf16;  // q, a 16-bit cache and out
  auto random_half = [&](size_t n, std::mt19937& g, double scale) {
    return c.f16 ? random_f16(n, g, scale) : random_bf16(n, g, scale);
  };
  std::mt19937 rng(seed);
  auto draw_lengths = [&] {
    std::vector<int32_t> len(static_cast<size_t>(c.b), static_cast<int32_t>(c.s_k));
    if (!c.lengths.empty()) {
      for (size_t r = 0; r < len.size(); ++r) len[r] = c.lengths[r % c.lengths.size()];
      return len;
    }
    std::normal_distribution<double> nd(static_cast<double>(c.s_k), static_cast<double>(c.s_k) / 2);
    for (auto& l : len) {
      if (c.varlen) l = static_cast<int32_t>(std::max<double>(nd(rng), static_cast<double>(c.s_q)));
      if (c.zero_lengths && std::uniform_int_distribution<int>(0, 1)(rng) == 0) l = 0;
    }
    return len;
  };
  std::vector<int32_t> len = draw_lengths();
  const int64_t max_len = *std::max_element(len.begin(), len.end());
  // FlashMLA's padding of the longest request to 256; a graph case leaves room for the replays' lengths (up to twice
  // the mean).
  const int64_t cap_len = std::max<int64_t>((std::max<int64_t>(max_len, graph ? 2 * c.s_k + c.s_q : 1) + 255) / 256 * 256, 256);
  const int64_t max_blocks = (cap_len + c.block_size - 1) / c.block_size;
  const int64_t num_blocks = c.b * max_blocks;
  const int64_t row = c.fp8 ? 656 : 576;                            // bytes (FP8) or 16-bit elements per token
  const int64_t row_stride = !c.fp8 && c.padded_rows ? 640 : row;   // between tokens
  // FP8 pages padded by a token (FlashMLA's tests); bf16 pages of block_size rows.
  const int64_t page = c.fp8 ? (c.block_size + 1) * row : c.block_size * row_stride;
  auto kv_rows = random_half(static_cast<size_t>(num_blocks * c.block_size * 576), rng, 0.1);
  std::vector<uint8_t> packed;
  if (c.fp8) {
    packed.resize(static_cast<size_t>(num_blocks * c.block_size * 656));
    mla::quantize_kv_cache_fp8(hview(kv_rows.data(), DType::bf16, {num_blocks * c.block_size, 576}),
                               hview(packed.data(), DType::u8, {num_blocks * c.block_size, 656}), nullptr);
  }
  // The cache as bytes: token t of block k at k * page + t * row (elements of its dtype).
  const size_t elem = c.fp8 ? 1 : 2;
  std::vector<uint8_t> cache(static_cast<size_t>(num_blocks * page) * elem, 0xFF);
  std::vector<int32_t> table(static_cast<size_t>(c.b * max_blocks));
  auto fill = [&](bool nan_past_lengths) {
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::fill(cache.begin(), cache.end(), uint8_t{0xFF});
    for (int64_t r = 0; r < c.b; ++r) {
      const int64_t l = len[static_cast<size_t>(r)], used = (l + c.block_size - 1) / c.block_size;
      for (int64_t k = 0; k < max_blocks; ++k) {
        const int32_t blk = perm[static_cast<size_t>(r * max_blocks + k)];
        table[static_cast<size_t>(r * max_blocks + k)] = k < used ? blk : 2147480000;
        for (int64_t t = 0; t < c.block_size; ++t) {
          if (nan_past_lengths && k * c.block_size + t >= l) continue;  // stays 0xFF: NaN
          const int64_t src = static_cast<int64_t>(blk) * c.block_size + t;
          std::memcpy(&cache[static_cast<size_t>((blk * page + t * row_stride) * static_cast<int64_t>(elem))],
                      c.fp8 ? static_cast<const void*>(&packed[static_cast<size_t>(src * 656)])
                            : static_cast<const void*>(&kv_rows[static_cast<size_t>(src * 576)]),
                      static_cast<size_t>(row) * elem);
        }
      }
    }
  };
  // A graph replay gets new lengths over the same cache: every token is valid data there.
  fill(/*nan_past_lengths=*/!graph);
  if (c.bad_blocks)  // at even and odd tiles, and as some requests' first or last block
    for (int64_t r = 0; r < c.b; ++r) {
      const int64_t used = (len[static_cast<size_t>(r)] + c.block_size - 1) / c.block_size;
      for (int64_t k = 2; k < max_blocks; k += 5)
        table[static_cast<size_t>(r * max_blocks + k)] = (k / 5) % 2 == 0 ? -1 : static_cast<int32_t>(num_blocks + 7);
      if (r % 2 == 1) table[static_cast<size_t>(r * max_blocks)] = -1;
      if (r % 3 == 0 && used > 0) table[static_cast<size_t>(r * max_blocks + used - 1)] = static_cast<int32_t>(num_blocks);
    }
  auto q = random_half(static_cast<size_t>(c.b * c.s_q * c.h_q * 576), rng, 1.0);
  std::vector<float> sink(static_cast<size_t>(c.h_q));
  std::normal_distribution<float> snd;
  for (auto& x : sink) x = snd(rng);
  const double sm_scale = std::pow(576.0, -0.5);

  const DType kv_dtype = c.fp8 ? DType::u8 : half;
  Dev<uint16_t> dq(q), dout(static_cast<size_t>(c.b * c.s_q * c.h_q * 512));
  Dev<uint8_t> dcache(cache);
  Dev<int32_t> dtable(table), dlen(len);
  Dev<float> dsink(sink), dlse(static_cast<size_t>(c.b * c.s_q * c.h_q));
  const auto qv = dview(dq.get(), half, {c.b, c.s_q, c.h_q, 576});
  const auto cv = TensorView::strided(dcache.get(), kv_dtype, Device::cuda(0), {num_blocks, c.block_size, 1, row},
                                      {page, row_stride, row_stride, 1});
  const auto tv = dview(dtable.get(), DType::i32, {c.b, max_blocks});
  const auto lenv = dview(dlen.get(), DType::i32, {c.b});
  const auto ov = dview(dout.get(), half, {c.b, c.s_q, c.h_q, 512});
  // FlashMLA's lse layout [b, h_q, s_q], seen as [b, s_q, h_q].
  const auto lv = TensorView::strided(dlse.get(), DType::f32, Device::cuda(0), {c.b, c.s_q, c.h_q},
                                      {c.h_q * c.s_q, 1, c.s_q});
  const auto sv = dview(dsink.get(), DType::f32, {c.h_q});
  const mla::DenseDecodeOptions opts{.sm_scale = sm_scale};
  const mla::DenseDecodeTensors tensors{.q = qv, .kv_cache = cv, .attn_sink = c.sink ? &sv : nullptr, .out = ov, .lse = lv};

  const auto hq = hview(q.data(), half, {c.b, c.s_q, c.h_q, 576});
  const auto hs = hview(sink.data(), DType::f32, {c.h_q});
  auto reference_for = [&](const std::vector<int64_t>& rows) {
    const auto hc = TensorView::strided(cache.data(), kv_dtype, Device::cpu(), {num_blocks, c.block_size, 1, row},
                                        {page, row_stride, row_stride, 1});
    const auto ht = hview(table.data(), DType::i32, {c.b, max_blocks});
    const auto hl = hview(len.data(), DType::i32, {c.b});
    return parallel_reference(rows, [&](const std::vector<int64_t>& rr) {
      return reference::mla_dense_decode_reference(hq, hc, ht, hl, c.causal, c.sink ? &hs : nullptr, sm_scale, rr);
    });
  };
  std::vector<int64_t> rows = sample_rows(c.b * c.s_q, c.max_ref_rows, rng);
  if (c.zero_lengths)  // a token of an empty request is among the checked rows
    for (int64_t r = 0; r < c.b; ++r)
      if (len[static_cast<size_t>(r)] == 0) {
        rows.push_back(r * c.s_q);
        break;
      }
  auto ref = reference_for(rows);

  const mla::DenseDecodePlan plan = mla::DenseDecodePlan::create(
      {.batch = int(c.b), .s_q = int(c.s_q), .h_q = int(c.h_q), .block_size = int(c.block_size),
       .max_blocks = int(max_blocks), .causal = c.causal, .num_sms = c.num_sms},
      0);
  Stream stream(0);
  // A decode step: the plan, then a layer (a second layer's run on the same plan, as an engine runs them).
  auto step = [&] {
    plan.plan(tv, lenv, stream);
    plan.run(tensors, opts, stream);
  };
  auto check = [&](const char* what) {
    CUDA_OK(cudaStreamSynchronize(stream));
    const std::vector<uint16_t> out = dout.download();
    const auto lse = dlse.download();
    std::vector<float> lse_rows(static_cast<size_t>(c.b * c.s_q * c.h_q));
    for (int64_t r = 0; r < c.b * c.s_q; ++r)
      for (int64_t h = 0; h < c.h_q; ++h)
        lse_rows[static_cast<size_t>(r * c.h_q + h)] = lse[static_cast<size_t>((r / c.s_q) * c.h_q * c.s_q + h * c.s_q + r % c.s_q)];
    expect_close(out, lse_rows, nullptr, rows, ref, c.h_q, what, -1, 1, c.f16);
  };
  // The kernels: the dispatched one (whole tiles, a block size that is a multiple of 64, at 65..128 16-bit heads as the
  // pair cluster, FP8 with up to 32 heads on the few-heads kernel, the rest gathered by the plan's indices), then the
  // simple one.
  if (!graph) {
    for (const char* kernel : {"dispatched", "simple"}) {
      ForceSimple fs(std::string(kernel) == "simple");
      dout.poison();
      dlse.poison();
      step();
      check(kernel);
      dout.poison();  // the step's next layer: the same plan again
      dlse.poison();
      plan.run(tensors, opts, stream);
      check((std::string(kernel) + ", second layer").c_str());
    }
    return;
  }
  step();  // one-time setup outside the capture
  CUDA_OK(cudaStreamSynchronize(stream));
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  step();
  CUDA_OK(cudaStreamEndCapture(stream, &g));
  CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 3; ++rep) {
    if (rep > 0) {  // the next step: new lengths (up to twice the mean), a new block table, the same buffers
      len = draw_lengths();
      for (auto& l : len) l = static_cast<int32_t>(std::min<int64_t>(l, cap_len));
      fill(/*nan_past_lengths=*/true);
      dcache.upload(cache);
      dtable.upload(table);
      dlen.upload(len);
      ref = reference_for(rows);
    }
    dout.poison();
    dlse.poison();
    CUDA_OK(cudaGraphLaunch(ge, stream));
    check("graph replay");
  }
  CUDA_OK(cudaGraphExecDestroy(ge));
  CUDA_OK(cudaGraphDestroy(g));
}

// FlashMLA's dense decoding grid (tests/test_flash_mla_dense_decoding.py, h_kv 1): every h_q of it (1, 3, 9, 63, 64,
// 126, 128) at every s_q (1, 2, 4) and s_k (20, 140, 4096), with its batch sizes (1, 2, 6, 64) and varlen / causal
// taken in turn; each case on the bf16 cache and on the FP8 rows, the dispatched kernel and the simple one.
TEST(MlaGpuDenseDecode, FlashMlaCorrectnessGrid) {
  FLASHCPP_REQUIRE_GPU();
  uint32_t seed = 3000;
  int turn = 0;
  for (int64_t h_q : {1, 3, 9, 63, 64, 126, 128})
    for (int64_t s_q : {1, 2, 4})
      for (int64_t s_k : {20, 140, 4096}) {
        const int64_t b = std::array<int64_t, 4>{1, 2, 6, 64}[static_cast<size_t>(turn % 4)];
        const bool varlen = (turn / 4) % 2 == 1, causal = turn % 3 != 0;
        for (bool fp8 : {false, true})
          run_dense_case({.b = b, .s_q = s_q, .h_q = h_q, .s_k = s_k, .varlen = varlen, .causal = causal, .fp8 = fp8,
                          .sink = turn % 5 == 0},
                         seed++);
        ++turn;
      }
}

// FlashMLA's corner cases: b 128, s_q 2, varlen around 4096 with about half the requests empty; and our own: odd block
// sizes, padded bf16 rows, a tiny SM count that cuts requests into many splits, 256 heads.
TEST(MlaGpuDenseDecode, CornerCases) {
  FLASHCPP_REQUIRE_GPU();
  uint32_t seed = 3500;
  for (int64_t h_q : {1, 63, 128})
    for (bool causal : {false, true})
      for (bool fp8 : {false, true})
        run_dense_case({.b = 128, .s_q = 2, .h_q = h_q, .s_k = 4096, .varlen = true, .causal = causal,
                        .zero_lengths = true, .fp8 = fp8},
                       seed++);
  run_dense_case({.b = 3, .s_q = 3, .h_q = 20, .s_k = 700, .varlen = true, .causal = true, .block_size = 61, .sink = true},
                 seed++);
  run_dense_case({.b = 5, .s_q = 1, .h_q = 128, .s_k = 300, .varlen = true, .fp8 = true, .block_size = 2}, seed++);
  run_dense_case({.b = 4, .s_q = 2, .h_q = 64, .s_k = 900, .varlen = true, .block_size = 16, .padded_rows = true}, seed++);
  run_dense_case({.b = 7, .s_q = 2, .h_q = 128, .s_k = 2000, .varlen = true, .causal = true, .fp8 = true, .num_sms = 5},
                 seed++);
  run_dense_case({.b = 2, .s_q = 1, .h_q = 256, .s_k = 1000, .varlen = true, .sink = true}, seed++);
  // Whole 64-row tiles (block sizes that are multiples of 64: the pair cluster at 128 bf16 heads on Hopper): block 128
  // with padded rows and many splits; invalid blocks inside the lengths (bf16 and FP8); 20 heads with the sink.
  run_dense_case({.b = 7, .s_q = 2, .h_q = 128, .s_k = 2000, .varlen = true, .causal = true, .block_size = 128,
                  .num_sms = 5, .padded_rows = true},
                 seed++);
  run_dense_case({.b = 6, .s_q = 1, .h_q = 64, .s_k = 1200, .varlen = true, .bad_blocks = true}, seed++);
  run_dense_case({.b = 6, .s_q = 2, .h_q = 128, .s_k = 1200, .varlen = true, .causal = true, .fp8 = true,
                  .bad_blocks = true},
                 seed++);
  run_dense_case({.b = 3, .s_q = 3, .h_q = 20, .s_k = 700, .varlen = true, .causal = true, .sink = true}, seed++);
}

// Every tile count a work item can have (0..6 tiles, the last full or partial), in requests cut at different places by
// part counts of 3, 17 and the device's, so that items of every length follow each other in one CTA; causal and not,
// one and two head groups, both caches; every row against the reference.
TEST(MlaGpuDenseDecode, EveryTileCountAndCut) {
  FLASHCPP_REQUIRE_GPU();
  const std::vector<int32_t> lengths = {0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 320, 383, 384, 2};
  uint32_t seed = 3700;
  for (bool fp8 : {false, true})
    for (int num_sms : {3, 17, 0})
      for (int64_t h_q : {64, 128})
        for (int64_t s_q : {1, 2})
          run_dense_case({.b = static_cast<int64_t>(lengths.size()), .s_q = s_q, .h_q = h_q, .s_k = 200,
                          .causal = s_q == 2, .fp8 = fp8, .sink = h_q == 128, .num_sms = num_sms, .max_ref_rows = 64,
                          .lengths = lengths},
                         seed++);
}

// The fp16 cache (fp16 q and out): FlashMLA's grid of heads and query tokens over short and long caches, varlen,
// causal and the sink in turn; its corner case of half the requests empty; our odd block sizes, padded rows, a small
// SM count (many splits) and whole 64-row tiles (the fp16 pair cluster at 128 heads); the graph replay is in
// CudaGraphReplayWithNewLengths. Each on the dispatched kernel and the simple one, against the float64 reference within
// fp16's bounds.
TEST(MlaGpuDenseDecode, Fp16Cache) {
  FLASHCPP_REQUIRE_GPU();
  uint32_t seed = 3800;
  int turn = 0;
  for (int64_t h_q : {1, 3, 9, 63, 64, 126, 128})
    for (int64_t s_q : {1, 2, 4}) {
      const int64_t b = std::array<int64_t, 4>{1, 2, 6, 64}[static_cast<size_t>(turn % 4)];
      run_dense_case({.b = b, .s_q = s_q, .h_q = h_q, .s_k = turn % 2 == 0 ? 140 : 4096, .varlen = (turn / 4) % 2 == 1,
                      .causal = turn % 3 != 0, .f16 = true, .sink = turn % 5 == 0},
                     seed++);
      ++turn;
    }
  run_dense_case({.b = 128, .s_q = 2, .h_q = 128, .s_k = 4096, .varlen = true, .causal = true, .zero_lengths = true,
                  .f16 = true},
                 seed++);
  run_dense_case({.b = 3, .s_q = 3, .h_q = 20, .s_k = 700, .varlen = true, .causal = true, .f16 = true,
                  .block_size = 61, .sink = true},
                 seed++);
  run_dense_case({.b = 4, .s_q = 2, .h_q = 64, .s_k = 900, .varlen = true, .f16 = true, .block_size = 16,
                  .padded_rows = true},
                 seed++);
  run_dense_case({.b = 7, .s_q = 2, .h_q = 128, .s_k = 2000, .varlen = true, .causal = true, .f16 = true,
                  .block_size = 128, .num_sms = 5, .padded_rows = true, .bad_blocks = true},
                 seed++);
}

// The few-heads FP8 kernel (dense_decode_mma_fp8.cu): one and two m-tiles of heads (1, 9, 16 / 17, 24, 32), every
// tile count an item can have in requests cut by 3 parts and by the device's, causal s_q 2, the sink; FlashMLA's long
// varlen caches with empty requests; invalid blocks inside the lengths; a graph replay with new lengths.
TEST(MlaGpuDenseDecode, FewHeadsFp8Kernel) {
  FLASHCPP_REQUIRE_GPU();
  DenseFp8FewHeads on(true);
  const std::vector<int32_t> lengths = {0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 320, 383, 384, 2};
  uint32_t seed = 3900;
  for (int num_sms : {3, 0})
    for (int64_t h_q : {1, 9, 16, 17, 24, 32})
      for (int64_t s_q : {1, 2})
        run_dense_case({.b = static_cast<int64_t>(lengths.size()), .s_q = s_q, .h_q = h_q, .s_k = 200,
                        .causal = s_q == 2, .fp8 = true, .sink = h_q % 2 == 1, .num_sms = num_sms, .max_ref_rows = 64,
                        .lengths = lengths},
                       seed++);
  for (int64_t h_q : {16, 32})
    for (bool causal : {false, true})
      run_dense_case({.b = 64, .s_q = 2, .h_q = h_q, .s_k = 4096, .varlen = true, .causal = causal,
                      .zero_lengths = true, .fp8 = true, .max_ref_rows = 12},
                     seed++);
  run_dense_case({.b = 6, .s_q = 1, .h_q = 24, .s_k = 1200, .varlen = true, .fp8 = true, .block_size = 128,
                  .sink = true, .bad_blocks = true},
                 seed++);
  run_dense_case({.b = 9, .s_q = 1, .h_q = 16, .s_k = 1500, .varlen = true, .fp8 = true}, seed++, /*graph=*/true);
  run_dense_case({.b = 9, .s_q = 2, .h_q = 32, .s_k = 1500, .varlen = true, .causal = true, .fp8 = true}, seed++,
                 /*graph=*/true);
}

// A few small cases of the few-heads FP8 kernel for compute-sanitizer (memcheck, racecheck), where the whole test
// above takes too long: split items of every tile count at 3 parts, one and two m-tiles, causal s_q 2, the sink.
TEST(MlaGpuDenseDecode, FewHeadsFp8KernelSanitizerCases) {
  FLASHCPP_REQUIRE_GPU();
  DenseFp8FewHeads on(true);
  uint32_t seed = 3950;
  for (int64_t h_q : {16, 32})
    run_dense_case({.b = 4, .s_q = 2, .h_q = h_q, .s_k = 200, .causal = true, .fp8 = true, .sink = true, .num_sms = 3,
                    .max_ref_rows = 16, .lengths = {0, 65, 130, 257}},
                   seed++);
}

// Capture one run, replay it with new lengths and block tables in the same buffers (the plan is graph-safe): bf16
// (whole tiles multicast to the pair of head groups), the FP8 rows and fp16 (its pair).
TEST(MlaGpuDenseDecode, CudaGraphReplayWithNewLengths) {
  FLASHCPP_REQUIRE_GPU();
  run_dense_case({.b = 9, .s_q = 2, .h_q = 128, .s_k = 1500, .varlen = true, .causal = true}, 3603, /*graph=*/true);
  run_dense_case({.b = 9, .s_q = 1, .h_q = 64, .s_k = 1500, .varlen = true, .fp8 = true}, 3601, /*graph=*/true);
  run_dense_case({.b = 9, .s_q = 2, .h_q = 128, .s_k = 1500, .varlen = true, .causal = true, .f16 = true}, 3602,
                 /*graph=*/true);
}

// ---------------------------------------------------------------------------------------------------
// DeepSeek V4 decode (584-byte pages, extra pool, per-pool lengths)

// One V4 pool on the device plus its host views for the reference.
struct V4DevicePool {
  int64_t nb = 0, bs = 0, page = 0, topk = 0;
  std::vector<uint8_t> pages;
  std::vector<int32_t> idx, len;
  std::optional<Dev<uint8_t>> dpages;
  std::optional<Dev<int32_t>> didx, dlen;
  TensorView dcache() const {
    return TensorView::strided(dpages->get(), DType::u8, Device::cuda(0), {nb, bs, 1, 584}, {page, 584, 584, 1});
  }
  TensorView hcache() const {
    return TensorView::strided(const_cast<uint8_t*>(pages.data()), DType::u8, Device::cpu(), {nb, bs, 1, 584},
                               {page, 584, 584, 1});
  }
  void upload() {
    dpages.emplace(pages);
    didx.emplace(idx);
    if (!len.empty()) dlen.emplace(len);
  }
};

// Runs sparse_decode_v4 for the split plans of `num_sms` in {0, 5} and compares out / lse with the reference; with
// lengths, also on plans made by the run's lengths and by other lengths (DecodePlanLengths).
// `padded`: q, both pools' indices and out as FlashMLA's padded views (PaddedLayout).
void run_v4_decode(const std::vector<uint16_t>& q, int64_t b, int64_t s_q, int64_t h_q, V4DevicePool& main,
                   V4DevicePool* extra, const std::vector<float>& sink, double sm_scale, const std::string& what,
                   const std::vector<uint16_t>* golden_out = nullptr, bool padded = false) {
  const PaddedLayout q_layout({b, s_q, h_q, 512}), out_layout({b, s_q, h_q, 512}), idx_layout({b, s_q, main.topk}),
      xidx_layout({b, s_q, extra ? extra->topk : 64});
  main.upload();
  if (extra) extra->upload();
  // Padded index storage: 0 (a valid row) between the rows, so reading it shows in the output.
  std::optional<Dev<int32_t>> pidx, pxidx;
  if (padded) {
    pidx.emplace(idx_layout.scatter<int32_t>(main.idx, 0));
    if (extra) pxidx.emplace(xidx_layout.scatter<int32_t>(extra->idx, 0));
  }
  Dev<uint16_t> dq(padded ? q_layout.scatter<uint16_t>(q, 0x7fc0) : q);
  Dev<uint16_t> dout(static_cast<size_t>(padded ? out_layout.storage : b * s_q * h_q * 512));
  Dev<float> dlse(static_cast<size_t>(b * s_q * h_q));
  std::optional<Dev<float>> dsink;
  TensorView sink_d, sink_h, len_d, len_h, xlen_d, xlen_h, xidx_d, xcache_d;
  const mla::SparseDecodeOptions params{.sm_scale = sm_scale};
  mla::SparseDecodeTensors tensors;  // the optional tensors here, the rest per plan below
  if (!sink.empty()) {
    dsink.emplace(sink);
    sink_d = dview(dsink->get(), DType::f32, {h_q});
    sink_h = hview(sink.data(), DType::f32, {h_q});
    tensors.attn_sink = &sink_d;
  }
  reference::MlaV4Pool hmain{main.hcache(), hview(main.idx.data(), DType::i32, {b, s_q, main.topk})}, hextra;
  if (!main.len.empty()) {
    len_d = dview(main.dlen->get(), DType::i32, {b});
    len_h = hview(main.len.data(), DType::i32, {b});
    tensors.topk_length = &len_d;
    hmain.topk_length = &len_h;
  }
  if (extra) {
    xcache_d = extra->dcache();
    xidx_d = padded ? xidx_layout.view(pxidx->get(), DType::i32) : dview(extra->didx->get(), DType::i32, {b, s_q, extra->topk});
    tensors.extra_kv_cache = &xcache_d;
    tensors.extra_indices = &xidx_d;
    hextra = {extra->hcache(), hview(extra->idx.data(), DType::i32, {b, s_q, extra->topk})};
    if (!extra->len.empty()) {
      xlen_d = dview(extra->dlen->get(), DType::i32, {b});
      xlen_h = hview(extra->len.data(), DType::i32, {b});
      tensors.extra_topk_length = &xlen_d;
      hextra.topk_length = &xlen_h;
    }
  }
  const auto ref = reference::mla_sparse_decode_v4_reference(hview(q.data(), DType::bf16, {b, s_q, h_q, 512}), hmain,
                                                             extra ? &hextra : nullptr, sink.empty() ? nullptr : &sink_h,
                                                             sm_scale);
  std::vector<int64_t> rows(static_cast<size_t>(b * s_q));
  std::iota(rows.begin(), rows.end(), 0);
  // With lengths the plans are also made by them: the run's own, and stale ones (each request planned with another
  // request's lengths, as a step that runs before it plans again), which must give the same results.
  const bool lengths = tensors.topk_length != nullptr || tensors.extra_topk_length != nullptr;
  std::vector<int32_t> stale_main(main.len.rbegin(), main.len.rend());
  std::vector<int32_t> stale_extra;
  if (extra) stale_extra.assign(extra->len.rbegin(), extra->len.rend());
  std::optional<Dev<int32_t>> dstale_main, dstale_extra;
  TensorView stale_main_d, stale_extra_d;
  if (!stale_main.empty()) {
    dstale_main.emplace(stale_main);
    stale_main_d = dview(dstale_main->get(), DType::i32, {b});
  }
  if (!stale_extra.empty()) {
    dstale_extra.emplace(stale_extra);
    stale_extra_d = dview(dstale_extra->get(), DType::i32, {b});
  }
  enum class Planned { by_shape, by_lengths, by_stale_lengths };
  struct PlanCase {
    Planned planned;
    int num_sms;
  };
  for (const PlanCase pc : {PlanCase{Planned::by_shape, 0}, PlanCase{Planned::by_shape, 5},
                            PlanCase{Planned::by_lengths, 0}, PlanCase{Planned::by_lengths, 5},
                            PlanCase{Planned::by_stale_lengths, 0}, PlanCase{Planned::by_stale_lengths, 5}}) {
    const Planned planned = pc.planned;
    const int num_sms = pc.num_sms;
    if (planned != Planned::by_shape && !lengths) continue;
    mla::DecodePlanLengths plan_lengths;
    if (planned == Planned::by_lengths) plan_lengths = {tensors.topk_length, tensors.extra_topk_length};
    if (planned == Planned::by_stale_lengths)
      plan_lengths = {tensors.topk_length ? &stale_main_d : nullptr, tensors.extra_topk_length ? &stale_extra_d : nullptr};
    const mla::DecodePlan plan = mla::DecodePlan::create({.batch = int(b), .s_q = int(s_q), .h_q = int(h_q), .d_qk = 512,
                                                          .topk = int(main.topk), .extra_topk = extra ? int(extra->topk) : 0,
                                                          .num_sms = num_sms},
                                                         0, nullptr, plan_lengths);
    dout.poison();
    dlse.poison();
    // lse written in FlashMLA's [b, h_q, s_q] layout.
    const TensorView qv = padded ? q_layout.view(dq.get(), DType::bf16) : dview(dq.get(), DType::bf16, {b, s_q, h_q, 512});
    const TensorView iv =
        padded ? idx_layout.view(pidx->get(), DType::i32) : dview(main.didx->get(), DType::i32, {b, s_q, main.topk});
    const TensorView ov =
        padded ? out_layout.view(dout.get(), DType::bf16) : dview(dout.get(), DType::bf16, {b, s_q, h_q, 512});
    tensors.q = qv;
    tensors.kv_cache = main.dcache();
    tensors.indices = iv;
    tensors.out = ov;
    tensors.lse = TensorView::strided(dlse.get(), DType::f32, Device::cuda(0), {b, s_q, h_q}, {h_q * s_q, 1, s_q});
    plan.run(tensors, params, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> out = dout.download();
    if (padded) {
      int64_t touched = 0;
      out = out_layout.gather<uint16_t>(out, kPoisonBf16, touched);
      EXPECT_EQ(touched, 0) << what << ": the kernel wrote into the padding of a padded out";
    }
    const auto lse = dlse.download();
    std::vector<float> lse_rows;
    for (int64_t r = 0; r < b * s_q; ++r)
      for (int64_t h = 0; h < h_q; ++h) lse_rows.push_back(lse[static_cast<size_t>((r / s_q) * h_q * s_q + h * s_q + r % s_q)]);
    const std::string tag = what + ", num_sms " + std::to_string(num_sms) + (plan.sizes().split ? " (split)" : "") +
                            (planned == Planned::by_lengths         ? ", planned by its lengths"
                             : planned == Planned::by_stale_lengths ? ", planned by other lengths"
                                                                    : "");
    expect_close(out, lse_rows, nullptr, rows, ref, h_q, tag);
    if (golden_out != nullptr) {
      std::vector<double> got, want;
      for (size_t i = 0; i < out.size(); ++i) {
        got.push_back(bf16_bits_to_float(out[i]));
        want.push_back(bf16_bits_to_float((*golden_out)[i]));
      }
      const auto vs = compare(got, want, 4e-3, kOutRelTol, kOutCosDiffTol, tag + " out vs FlashMLA");
      EXPECT_TRUE(vs.ok) << vs.message;
    }
  }
}

TEST(MlaGpuDecodeV4, GoldenCases) {
  FLASHCPP_REQUIRE_GPU();
  const auto found = golden_dir_with("model1_decode");
  if (!found) GTEST_SKIP() << "no model1_decode golden case (they live in the project's shared data)";
  const auto& dir = *found;
  const auto names = golden_case_names(dir, "model1_decode");
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const GoldenCase g = load_golden(dir, name);
    const auto& p = g.params;
    const int64_t b = p.at("b"), s_q = p.at("s_q"), h_q = p.at("h_q");
    V4DevicePool main, extra;
    main.nb = p.at("num_blocks"), main.bs = p.at("block_size"), main.page = p.at("block_stride_bytes");
    main.topk = p.at("topk");
    main.pages = g.inputs.at("k_cache_fp8").bytes;
    main.idx = g.inputs.at("indices").as_vector<int32_t>();
    if (g.has_input("topk_length")) main.len = g.inputs.at("topk_length").as_vector<int32_t>();
    const bool has_extra = g.has_input("extra_k_cache_fp8");
    if (has_extra) {
      extra.nb = p.at("extra_num_blocks"), extra.bs = p.at("extra_block_size");
      extra.page = p.at("extra_block_stride_bytes"), extra.topk = p.at("extra_topk");
      extra.pages = g.inputs.at("extra_k_cache_fp8").bytes;
      extra.idx = g.inputs.at("extra_indices").as_vector<int32_t>();
      if (g.has_input("extra_topk_length")) extra.len = g.inputs.at("extra_topk_length").as_vector<int32_t>();
    }
    std::vector<float> sink;
    if (g.has_input("attn_sink")) sink = g.inputs.at("attn_sink").as_vector<float>();
    const auto golden_out = g.outputs.at("out").as_vector<uint16_t>();
    run_v4_decode(g.inputs.at("q").as_vector<uint16_t>(), b, s_q, h_q, main, has_extra ? &extra : nullptr, sink,
                  p.at("sm_scale").get<double>(), name, &golden_out);
  }
}

// A random V4 pool of nb pages of bs tokens: NaN in every unreferenced row, invalid indices of every kind, per-request
// lengths (0, partial, past topk) when `lengths`.
V4DevicePool make_v4_pool(int64_t nb, int64_t bs, int64_t b, int64_t s_q, int64_t topk, bool lengths, std::mt19937& rng) {
  V4DevicePool pool;
  pool.nb = nb, pool.bs = bs, pool.topk = topk, pool.page = ((bs * 584 + 15) / 16) * 16 + 16;
  const int64_t n = nb * bs;
  auto kv = random_bf16(static_cast<size_t>(n * 512), rng, 1.0);
  std::vector<int32_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  pool.idx.resize(static_cast<size_t>(b * s_q * topk));
  std::vector<char> used(static_cast<size_t>(n), 0);
  for (int64_t t = 0; t < b * s_q; ++t) {
    partial_shuffle(perm, std::min(topk, n), rng);
    for (int64_t j = 0; j < topk; ++j) {
      int32_t v = j < n ? perm[static_cast<size_t>(j)] : -1;
      if (j % 7 == 3) v = kInvalid[(t + j) % 6];
      if (j % 11 == 5) v = static_cast<int32_t>(n);  // one past the pool
      pool.idx[static_cast<size_t>(t * topk + j)] = v;
      if (v >= 0 && v < n) used[static_cast<size_t>(v)] = 1;
    }
  }
  for (int64_t r = 0; r < n; ++r)  // rows no index references hold NaN: they must never reach the output
    if (!used[static_cast<size_t>(r)])
      for (int c = 0; c < 512; ++c) kv[static_cast<size_t>(r * 512 + c)] = 0x7fc0;
  pool.pages.assign(static_cast<size_t>(nb * pool.page), 0xAB);
  mla::quantize_kv_cache_fp8_v4(hview(kv.data(), DType::bf16, {nb, bs, 1, 512}),
                                TensorView::strided(pool.pages.data(), DType::u8, Device::cpu(), {nb, bs, 1, 584},
                                                    {pool.page, 584, 584, 1}),
                                nullptr);
  if (lengths) {
    pool.len.resize(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) pool.len[static_cast<size_t>(i)] = static_cast<int32_t>((i % 3 == 0) ? 0 : (i % 3 == 1) ? topk / 2 + 1 : topk + 100);
  }
  return pool;
}

// Random pools: NaN in every unreferenced row, invalid indices of every kind in both pools, per-pool lengths
// (0, partial, past topk), any h_q, odd page sizes.
TEST(MlaGpuDecodeV4, RandomPoolsWithInvalidIndicesAndNaNRows) {
  FLASHCPP_REQUIRE_GPU();
  std::mt19937 rng(77);
  auto make_pool = [&](int64_t nb, int64_t bs, int64_t b, int64_t s_q, int64_t topk, bool lengths) {
    return make_v4_pool(nb, bs, b, s_q, topk, lengths, rng);
  };
  struct Shape {
    int64_t b, s_q, h_q, topk, nb, bs, extra_topk, xnb, xbs;
    bool lengths, sink;
  };
  for (const Shape& sh : {Shape{3, 2, 64, 128, 9, 61, 512, 40, 64, true, true},
                          Shape{5, 1, 20, 64, 4, 53, 0, 0, 0, true, false},
                          Shape{16, 2, 128, 128, 300, 64, 1024, 600, 64, false, true},
                          Shape{2, 2, 128, 256, 20, 256, 128, 500, 2, true, true},
                          // Enough tokens for the unsplit grid (no schedule): h_q 64 as one CTA per token (140
                          // tokens) and as the 32-head cluster (30 tokens, all clusters at once), h_q 128 as the
                          // cluster of its two head groups (46 tokens).
                          Shape{70, 2, 64, 64, 40, 64, 128, 30, 61, true, true},
                          Shape{15, 2, 64, 128, 30, 64, 64, 20, 37, true, false},
                          Shape{23, 2, 128, 64, 30, 64, 128, 25, 53, false, true},
                          // Long tokens (2048 slots) over a short last wave (140 tokens, 132 a wave on the H200):
                          // the full wave's requests unsplit, the rest split (DecodePlanSizes::head_requests).
                          Shape{70, 2, 16, 1024, 40, 64, 1024, 50, 61, true, true},
                          // Short tokens over a short last round (140 tokens at h_q 64, 74 at h_q 128, on 132 SMs):
                          // without lengths the whole batch split in CTAs of 64 heads; with lengths (the h_q 64
                          // shape above) the same plan runs unsplit (DecodePlanSizes::unsplit_with_lengths).
                          Shape{70, 2, 64, 64, 40, 64, 128, 30, 61, false, true},
                          Shape{37, 2, 128, 64, 30, 64, 128, 25, 53, false, false}}) {
    V4DevicePool main = make_pool(sh.nb, sh.bs, sh.b, sh.s_q, sh.topk, sh.lengths);
    std::optional<V4DevicePool> extra;
    if (sh.extra_topk > 0) extra = make_pool(sh.xnb, sh.xbs, sh.b, sh.s_q, sh.extra_topk, sh.lengths);
    std::vector<float> sink;
    if (sh.sink) {
      std::normal_distribution<float> nd(0.f, 1.f);
      for (int64_t h = 0; h < sh.h_q; ++h) sink.push_back(h == 0 ? INFINITY : h == 1 ? -INFINITY : nd(rng));
    }
    const auto q = random_bf16(static_cast<size_t>(sh.b * sh.s_q * sh.h_q * 512), rng, 1.0);
    const std::string what =
        "b " + std::to_string(sh.b) + " h_q " + std::to_string(sh.h_q) + " extra " + std::to_string(sh.extra_topk);
    run_v4_decode(q, sh.b, sh.s_q, sh.h_q, main, extra ? &*extra : nullptr, sink, 0.0442, what);
    // The same problem through FlashMLA's padded views of q, both index lists and out.
    run_v4_decode(q, sh.b, sh.s_q, sh.h_q, main, extra ? &*extra : nullptr, sink, 0.0442, what + " padded views",
                  nullptr, /*padded=*/true);
  }
}

// FlashMLA's correctness grid for V4 pages (gen_testcase, d_qk 512), in our own cases: main pools of its (topk, page
// size) pairs, no extra pool or one of its pairs, per-pool lengths off and on (zero-length requests among them),
// s_q 1 / 3, h_q 64 / 128, attn_sink on with +-inf heads, and an all-invalid token, at b 4 (the whole reference) and
// at b 74 over short pools (its unsplit, split and 64-head split plans).
TEST(MlaGpuDecodeV4, FlashMlaCorrectnessGrid) {
  FLASHCPP_REQUIRE_GPU();
  std::mt19937 rng(1234);
  struct Pool {
    int64_t topk, bs;
  };
  auto pages = [](const Pool& p) { return (2 * p.topk + 64 + p.bs - 1) / p.bs; };  // room for distinct indices
  auto run = [&](int64_t b, int64_t s_q, int64_t h_q, Pool mp, std::optional<Pool> xp, bool lengths) {
    V4DevicePool main = make_v4_pool(pages(mp), mp.bs, b, s_q, mp.topk, lengths, rng);
    std::optional<V4DevicePool> extra;
    if (xp) extra = make_v4_pool(pages(*xp), xp->bs, b, s_q, xp->topk, lengths, rng);
    if (b * s_q > 2) {  // token 1 attends nothing in either pool
      std::fill_n(main.idx.begin() + main.topk, main.topk, -1);
      if (extra) std::fill_n(extra->idx.begin() + extra->topk, extra->topk, -1);
    }
    std::vector<float> sink;
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int64_t h = 0; h < h_q; ++h) sink.push_back(h == 0 ? INFINITY : h == 1 ? -INFINITY : nd(rng));
    const auto q = random_bf16(static_cast<size_t>(b * s_q * h_q * 512), rng, 1.0);
    const std::string what = "b " + std::to_string(b) + " s_q " + std::to_string(s_q) + " h_q " + std::to_string(h_q) +
                             " topk " + std::to_string(mp.topk) + "/" + std::to_string(mp.bs) +
                             (xp ? " extra " + std::to_string(xp->topk) + "/" + std::to_string(xp->bs) : "") +
                             (lengths ? " lengths" : "");
    run_v4_decode(q, b, s_q, h_q, main, extra ? &*extra : nullptr, sink, std::pow(512.0, -0.55), what);
  };
  int k = 0;
  for (Pool mp : {Pool{64, 2}, Pool{576, 61}, Pool{2048, 64}})
    for (std::optional<Pool> xp : {std::optional<Pool>{}, std::optional<Pool>{Pool{64, 69}}, std::optional<Pool>{Pool{576, 2}}})
      for (int64_t s_q : {1, 3})
        for (int64_t h_q : {64, 128}) run(4, s_q, h_q, mp, xp, (k++ % 2) == 1);
  for (int64_t h_q : {64, 128})
    for (bool lengths : {false, true}) run(74, 1, h_q, Pool{64, 64}, Pool{64, 69}, lengths);
}

TEST(MlaGpu, DeviceSupportOnThisGpu) {
  FLASHCPP_REQUIRE_GPU();
  const auto s = mla::device_support(0);
  EXPECT_TRUE(s.sparse_supported) << "cc " << s.cc_major << "." << s.cc_minor;
  EXPECT_GT(s.sm_count, 0);
}

}  // namespace
