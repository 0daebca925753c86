// Validation matrix: every rule of every sparse-MLA entry point has a failing case that names the
// argument, and a failing call writes nothing. The tensors live on "cuda:1000", a device that never
// exists, so a fully valid call gets past validation and stops at the device lookup: nothing can launch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "flashcpp/error.hpp"
#include "flashcpp/mla.hpp"

namespace {

using namespace flashcpp;
namespace mla = flashcpp::mla;

constexpr int kFakeDevice = 1000;
const Device kDev = Device::cuda(kFakeDevice);

// A fake, 256-byte aligned device address (never dereferenced).
void* fake(uintptr_t slot) { return reinterpret_cast<void*>(uintptr_t{1} << 40 | slot << 24); }

// Runs `fn`; returns the Error it throws (fails the test if it throws nothing or something else).
Error expect_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception: " << e.what();
    return Error(ErrorCode::internal, "unexpected");
  }
  ADD_FAILURE() << "no error thrown";
  return Error(ErrorCode::internal, "none");
}

// The baseline passes validation: the only complaint is the unknown device.
void expect_passes_validation(const std::function<void()>& fn) {
  const Error e = expect_error(fn);
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(e.message().find("device id 1000"), std::string::npos) << e.what();
}

void expect_rule(const std::function<void()>& fn, const std::string& op, const std::string& arg,
                 const std::string& case_name) {
  const Error e = expect_error(fn);
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << case_name << ": " << e.what();
  const std::string want = op + ": argument '" + arg + "'";
  EXPECT_NE(e.message().find(want), std::string::npos) << case_name << ": expected \"" << want << "\" in: " << e.what();
}

// ---------------------------------------------------------------------------------------------------
// Prefill

struct PrefillArgs {
  int64_t s_q = 4, h_q = 64, d_qk = 576, s_kv = 300, topk = 128;
  TensorView q = TensorView::contiguous(fake(1), DType::bf16, kDev, {s_q, h_q, d_qk});
  TensorView kv = TensorView::contiguous(fake(2), DType::bf16, kDev, {s_kv, 1, d_qk});
  TensorView indices = TensorView::contiguous(fake(3), DType::i32, kDev, {s_q, 1, topk});
  TensorView out = TensorView::contiguous(fake(4), DType::bf16, kDev, {s_q, h_q, 512});
  TensorView max_logits = TensorView::contiguous(fake(5), DType::f32, kDev, {s_q, h_q});
  TensorView lse = TensorView::contiguous(fake(6), DType::f32, kDev, {s_q, h_q});
  TensorView sink = TensorView::contiguous(fake(7), DType::f32, kDev, {h_q});
  TensorView len = TensorView::contiguous(fake(8), DType::i32, kDev, {s_q});
  bool use_sink = true, use_len = true, use_ml = true;
  mla::SparsePrefillOptions params{.sm_scale = 0.05};
  void call() {
    mla::sparse_prefill({.q = q,
                         .kv = kv,
                         .indices = indices,
                         .attn_sink = use_sink ? &sink : nullptr,
                         .topk_length = use_len ? &len : nullptr,
                         .out = out,
                         .max_logits = use_ml ? &max_logits : nullptr,
                         .lse = lse},
                        params, nullptr);
  }
};

TEST(MlaValidation, PrefillBaselinePassesValidation) {
  PrefillArgs a;
  expect_passes_validation([&] { a.call(); });
  a.use_sink = a.use_len = a.use_ml = false;
  expect_passes_validation([&] { a.call(); });
  a.params.sm_scale.reset();  // unset: the default 1/sqrt(d_qk); only a set value must be finite and > 0
  expect_passes_validation([&] { a.call(); });
  a.q = TensorView::contiguous(fake(1), DType::bf16, kDev, {0, 64, 576});  // s_q = 0 is valid
  a.indices = TensorView::contiguous(fake(3), DType::i32, kDev, {0, 1, 128});
  a.out = TensorView::contiguous(fake(4), DType::bf16, kDev, {0, 64, 512});
  a.lse = TensorView::contiguous(fake(6), DType::f32, kDev, {0, 64});
  expect_passes_validation([&] { a.call(); });
  PrefillArgs odd;  // other head counts and d_qk 512 are accepted
  odd.q = TensorView::contiguous(fake(1), DType::bf16, kDev, {4, 3, 512});
  odd.kv = TensorView::contiguous(fake(2), DType::bf16, kDev, {300, 1, 512});
  odd.out = TensorView::contiguous(fake(4), DType::bf16, kDev, {4, 3, 512});
  odd.lse = TensorView::contiguous(fake(6), DType::f32, kDev, {4, 3});
  odd.max_logits = TensorView::contiguous(fake(5), DType::f32, kDev, {4, 3});
  odd.sink = TensorView::contiguous(fake(7), DType::f32, kDev, {3});
  expect_passes_validation([&] { odd.call(); });
}

TEST(MlaValidation, PrefillEveryRuleFails) {
  const std::string op = "mla::sparse_prefill";
  struct Case {
    const char* name;
    const char* arg;
    std::function<void(PrefillArgs&)> mutate;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Case> cases = {
      {"sm_scale zero", "sm_scale", [](PrefillArgs& a) { a.params.sm_scale = 0; }},
      {"sm_scale negative", "sm_scale", [](PrefillArgs& a) { a.params.sm_scale = -1; }},
      {"sm_scale nan", "sm_scale", [nan](PrefillArgs& a) { a.params.sm_scale = nan; }},
      {"sm_scale inf", "sm_scale", [](PrefillArgs& a) { a.params.sm_scale = INFINITY; }},
      {"d_v 576", "d_v", [](PrefillArgs& a) { a.params.d_v = 576; }},
      {"q dtype", "q", [](PrefillArgs& a) { a.q.dtype = DType::f16; }},
      {"q rank", "q", [](PrefillArgs& a) { a.q = TensorView::contiguous(fake(1), DType::bf16, kDev, {4, 64, 1, 576}); }},
      {"q null", "q", [](PrefillArgs& a) { a.q.data = nullptr; }},
      {"q on cpu", "q", [](PrefillArgs& a) { a.q.device = Device::cpu(); }},
      {"q d_qk 128", "q", [](PrefillArgs& a) { a.q.shape[2] = 128; }},
      {"q h_q 0", "q", [](PrefillArgs& a) { a.q.shape[1] = 0; }},
      {"q h_q 2048", "q", [](PrefillArgs& a) { a.q.shape[1] = 2048; }},
      {"q last dim strided", "q", [](PrefillArgs& a) { a.q.strides[2] = 2; }},
      {"q negative stride", "q", [](PrefillArgs& a) { a.q.strides[0] = -576 * 64; }},
      {"q misaligned", "q", [](PrefillArgs& a) { a.q.data = static_cast<char*>(a.q.data) + 2; }},
      {"q stride not 16 B", "q", [](PrefillArgs& a) { a.q.strides[1] = 580; }},
      {"kv dtype", "kv", [](PrefillArgs& a) { a.kv.dtype = DType::f32; }},
      {"kv rank", "kv", [](PrefillArgs& a) { a.kv = TensorView::contiguous(fake(2), DType::bf16, kDev, {300, 576}); }},
      {"kv h_kv 2", "kv", [](PrefillArgs& a) { a.kv.shape[1] = 2; }},
      {"kv d_qk mismatch", "kv", [](PrefillArgs& a) { a.kv.shape[2] = 512; }},
      {"kv other device", "kv", [](PrefillArgs& a) { a.kv.device = Device::cuda(kFakeDevice + 1); }},
      {"kv last dim strided", "kv", [](PrefillArgs& a) { a.kv.strides[2] = 3; }},
      {"kv misaligned", "kv", [](PrefillArgs& a) { a.kv.data = static_cast<char*>(a.kv.data) + 8; }},
      {"kv null", "kv", [](PrefillArgs& a) { a.kv.data = nullptr; }},
      {"indices dtype i64", "indices", [](PrefillArgs& a) { a.indices.dtype = DType::i64; }},
      {"indices rank", "indices", [](PrefillArgs& a) { a.indices = TensorView::contiguous(fake(3), DType::i32, kDev, {4, 128}); }},
      {"indices s_q mismatch", "indices", [](PrefillArgs& a) { a.indices.shape[0] = 5; }},
      {"indices h_kv 2", "indices", [](PrefillArgs& a) { a.indices.shape[1] = 2; }},
      {"topk 100", "indices", [](PrefillArgs& a) { a.indices.shape[2] = 100; }},
      {"topk 0", "indices", [](PrefillArgs& a) { a.indices.shape[2] = 0; }},
      {"topk 32", "indices", [](PrefillArgs& a) { a.indices.shape[2] = 32; }},
      {"indices last dim strided", "indices", [](PrefillArgs& a) { a.indices.strides[2] = 2; }},
      {"indices on host", "indices", [](PrefillArgs& a) { a.indices.device = Device::cuda_host(); }},
      {"indices misaligned", "indices", [](PrefillArgs& a) { a.indices.data = static_cast<char*>(a.indices.data) + 1; }},
      {"out dtype", "out", [](PrefillArgs& a) { a.out.dtype = DType::f32; }},
      {"out d_v", "out", [](PrefillArgs& a) { a.out.shape[2] = 576; }},
      {"out h_q", "out", [](PrefillArgs& a) { a.out.shape[1] = 128; }},
      {"out other device", "out", [](PrefillArgs& a) { a.out.device = Device::cuda(3); }},
      {"out last dim strided", "out", [](PrefillArgs& a) { a.out.strides[2] = 2; }},
      {"out null", "out", [](PrefillArgs& a) { a.out.data = nullptr; }},
      {"lse dtype", "lse", [](PrefillArgs& a) { a.lse.dtype = DType::bf16; }},
      {"lse shape", "lse", [](PrefillArgs& a) { a.lse.shape[1] = 63; }},
      {"lse rank", "lse", [](PrefillArgs& a) { a.lse = TensorView::contiguous(fake(6), DType::f32, kDev, {4, 64, 1}); }},
      {"max_logits shape", "max_logits", [](PrefillArgs& a) { a.max_logits.shape[0] = 3; }},
      {"max_logits dtype", "max_logits", [](PrefillArgs& a) { a.max_logits.dtype = DType::f16; }},
      {"attn_sink len", "attn_sink", [](PrefillArgs& a) { a.sink.shape[0] = 128; }},
      {"attn_sink dtype", "attn_sink", [](PrefillArgs& a) { a.sink.dtype = DType::bf16; }},
      {"attn_sink strided", "attn_sink", [](PrefillArgs& a) { a.sink.strides[0] = 2; }},
      {"attn_sink device", "attn_sink", [](PrefillArgs& a) { a.sink.device = Device::cpu(); }},
      {"topk_length len", "topk_length", [](PrefillArgs& a) { a.len.shape[0] = 1; }},
      {"topk_length dtype", "topk_length", [](PrefillArgs& a) { a.len.dtype = DType::i64; }},
      {"topk_length null", "topk_length", [](PrefillArgs& a) { a.len.data = nullptr; }},
  };
  for (const auto& c : cases) {
    PrefillArgs a;
    c.mutate(a);
    expect_rule([&] { a.call(); }, op, c.arg, c.name);
  }
}

// ---------------------------------------------------------------------------------------------------
// Decode plan sizes and run

TEST(MlaValidation, DecodePlanConfigRules) {
  const std::string op = "mla::decode_plan";
  const mla::DecodeConfig good{.batch = 2, .s_q = 1, .h_q = 128, .d_qk = 576, .topk = 2048, .num_sms = 0};
  EXPECT_NO_THROW((void)mla::decode_plan_sizes(good, 132));
  struct Case {
    const char* name;
    const char* arg;
    std::function<void(mla::DecodeConfig&)> mutate;
  };
  const std::vector<Case> cases = {
      {"batch 0", "batch", [](mla::DecodeConfig& c) { c.batch = 0; }},
      {"s_q 0", "s_q", [](mla::DecodeConfig& c) { c.s_q = 0; }},
      {"s_q huge", "s_q", [](mla::DecodeConfig& c) { c.s_q = 70000; }},
      {"h_q 0", "h_q", [](mla::DecodeConfig& c) { c.h_q = 0; }},
      {"d_qk 128", "d_qk", [](mla::DecodeConfig& c) { c.d_qk = 128; }},
      {"extra pool on the V3.2 cache", "extra_topk", [](mla::DecodeConfig& c) { c.extra_topk = 512; }},
      {"extra_topk 100", "extra_topk", [](mla::DecodeConfig& c) { c.d_qk = 512, c.extra_topk = 100; }},
      {"extra_topk -64", "extra_topk", [](mla::DecodeConfig& c) { c.d_qk = 512, c.extra_topk = -64; }},
      {"topk + extra_topk past int32", "extra_topk",
       [](mla::DecodeConfig& c) { c.d_qk = 512, c.topk = 2147483584, c.extra_topk = 64; }},
      {"topk 96", "topk", [](mla::DecodeConfig& c) { c.topk = 96; }},
      {"topk -64", "topk", [](mla::DecodeConfig& c) { c.topk = -64; }},
      {"num_sms negative", "num_sms", [](mla::DecodeConfig& c) { c.num_sms = -1; }},
      {"num_sms past the cap", "num_sms", [](mla::DecodeConfig& c) { c.num_sms = 4097; }},
      {"num_sms INT_MAX", "num_sms", [](mla::DecodeConfig& c) { c.num_sms = 2147483647; }},
  };
  for (const auto& c : cases) {
    mla::DecodeConfig cfg = good;
    c.mutate(cfg);
    expect_rule([&] { (void)mla::decode_plan_sizes(cfg, 132); }, op, c.arg, c.name);
  }
  // The V4 cache: d_qk 512, with or without an extra pool.
  mla::DecodeConfig v4 = good;
  v4.d_qk = 512;
  EXPECT_NO_THROW((void)mla::decode_plan_sizes(v4, 132));
  v4.extra_topk = 1024;
  EXPECT_NO_THROW((void)mla::decode_plan_sizes(v4, 132));
  expect_rule([&] { (void)mla::decode_plan_sizes(good, 0); }, op, "num_sms", "no SM count");
  expect_rule([&] { (void)mla::decode_plan_sizes(good, 1 << 20); }, op, "num_sms", "SM count past the cap");
}

TEST(MlaValidation, DecodePlanSizesFollowTheShape) {
  // Small batch: split over SM parts (132 SMs, 2 head groups of 64, s_q 1 -> 66 parts).
  auto s = mla::decode_plan_sizes({.batch = 2, .s_q = 1, .h_q = 128, .topk = 2048}, 132);
  EXPECT_TRUE(s.split);
  EXPECT_EQ(s.num_sm_parts, 66);
  EXPECT_EQ(s.sched_meta_elems, 66 * 8);
  EXPECT_EQ(s.num_splits_elems, 3);
  EXPECT_EQ(s.lse_accum_elems, (2 + 66) * 1 * 128);
  EXPECT_EQ(s.o_accum_elems, (2 + 66) * 1 * 128 * 256);  // bf16 rows, two to an f32 element
  // Enough independent CTAs (b * s_q * head groups >= 2/3 of the SMs): no split, no buffers.
  s = mla::decode_plan_sizes({.batch = 64, .s_q = 2, .h_q = 128, .topk = 2048}, 132);
  EXPECT_FALSE(s.split);
  EXPECT_EQ(s.o_accum_elems, 0);
  s = mla::decode_plan_sizes({.batch = 22, .s_q = 2, .h_q = 128, .topk = 2048}, 132);  // 88 CTAs
  EXPECT_FALSE(s.split);
  s = mla::decode_plan_sizes({.batch = 21, .s_q = 2, .h_q = 128, .topk = 2048}, 132);  // 84 CTAs
  EXPECT_TRUE(s.split);
  EXPECT_EQ(s.num_sm_parts, 33);
  // config.num_sms overrides the argument.
  s = mla::decode_plan_sizes({.batch = 1, .s_q = 1, .h_q = 64, .topk = 128, .num_sms = 10}, 132);
  EXPECT_EQ(s.num_sm_parts, 10);
  // V4 with h_q 33..64 splits for the 32-head cluster (two CTAs per token: 132 / (2 * 2) parts at s_q 2); the
  // V3.2 cache keeps one CTA of 64 heads (132 / 2).
  s = mla::decode_plan_sizes({.batch = 2, .s_q = 2, .h_q = 64, .d_qk = 512, .topk = 128, .extra_topk = 512}, 132);
  EXPECT_TRUE(s.split);
  EXPECT_EQ(s.num_sm_parts, 33);
  s = mla::decode_plan_sizes({.batch = 2, .s_q = 2, .h_q = 64, .d_qk = 576, .topk = 2048}, 132);
  EXPECT_EQ(s.num_sm_parts, 66);
  // Unsplit where two CTAs per token fill 1/3 of the SMs: 22 tokens (44 CTAs), not 20; and at every larger count.
  s = mla::decode_plan_sizes({.batch = 11, .s_q = 2, .h_q = 64, .d_qk = 512, .topk = 128, .extra_topk = 512}, 132);
  EXPECT_FALSE(s.split);
  s = mla::decode_plan_sizes({.batch = 10, .s_q = 2, .h_q = 64, .d_qk = 512, .topk = 128, .extra_topk = 512}, 132);
  EXPECT_TRUE(s.split);
  EXPECT_EQ(s.num_sm_parts, 33);
  for (int b : {16, 40, 64, 256}) {
    s = mla::decode_plan_sizes({.batch = b, .s_q = 2, .h_q = 64, .d_qk = 512, .topk = 128, .extra_topk = 512}, 132);
    EXPECT_FALSE(s.split) << "b " << b;
    EXPECT_EQ(s.head_requests, 0) << "b " << b;
  }
}

// A short last wave of the unsplit grid (at most two thirds full) where a token's work is long (>= 2048 slots): the
// full waves' requests run unsplit, the rest split.
TEST(MlaValidation, DecodePlanSplitsOnlyAShortLastWave) {
  // h_q 64 (one CTA a token, 132 a wave), b 148 = 296 tokens: two waves and 32; V3.2 and V4 pages alike.
  for (int d_qk : {576, 512}) {
    const auto s = mla::decode_plan_sizes({.batch = 148, .s_q = 2, .h_q = 64, .d_qk = d_qk, .topk = 16384}, 132);
    EXPECT_TRUE(s.split) << "d_qk " << d_qk;
    EXPECT_EQ(s.head_requests, 132) << "d_qk " << d_qk;
    const int64_t parts = d_qk == 512 ? 33 : 66;  // V4 h_q 64 splits as the 32-head cluster
    EXPECT_EQ(s.num_sm_parts, parts) << "d_qk " << d_qk;
    EXPECT_EQ(s.num_splits_elems, 148 - 132 + 1) << "d_qk " << d_qk;
    EXPECT_EQ(s.lse_accum_elems, (148 - 132 + parts) * 2 * 64) << "d_qk " << d_qk;
  }
  // h_q 128 (a 2-CTA cluster a token, 66 a wave): V3.2 b 74 = 148 tokens, two waves and 16; topk 16384 b 148 = 296,
  // four waves and 32.
  auto s = mla::decode_plan_sizes({.batch = 74, .s_q = 2, .h_q = 128, .topk = 2048}, 132);
  EXPECT_TRUE(s.split);
  EXPECT_EQ(s.head_requests, 66);
  EXPECT_EQ(s.num_splits_elems, 9);
  s = mla::decode_plan_sizes({.batch = 148, .s_q = 2, .h_q = 128, .d_qk = 512, .topk = 16384}, 132);
  EXPECT_TRUE(s.split);
  EXPECT_EQ(s.head_requests, 132);
  // A last wave over two thirds full keeps the plain grid: V3.2 h_q 128 b 128 (256 tokens: 3 waves and 58 of 66).
  s = mla::decode_plan_sizes({.batch = 128, .s_q = 2, .h_q = 128, .topk = 2048}, 132);
  EXPECT_FALSE(s.split);
  // Short tokens never split only the tail. V4's production shapes (128 + 512 or 1024 slots) split the whole batch
  // in CTAs of 64 heads where the unsplit grid's last of at most three rounds is at most a quarter full, and such a
  // plan runs unsplit when given lengths: h_q 64 b 74 (148 tokens: a round of 132 and 16), b 148 (296: two and 32);
  // h_q 128 b 74 (148 tokens, 66 a round: two and 16). h_q 128 b 148 (five rounds, the last 32 of 66) stays whole.
  for (auto [b, h_q, extra, parts] : {std::tuple{74, 64, 512, 66}, std::tuple{148, 64, 512, 66},
                                      std::tuple{74, 128, 1024, 33}}) {
    s = mla::decode_plan_sizes({.batch = b, .s_q = 2, .h_q = h_q, .d_qk = 512, .topk = 128, .extra_topk = extra}, 132);
    EXPECT_TRUE(s.split) << "b " << b << " h_q " << h_q;
    EXPECT_EQ(s.head_requests, 0) << "b " << b << " h_q " << h_q;
    EXPECT_EQ(s.split_group_heads, 64) << "b " << b << " h_q " << h_q;
    EXPECT_EQ(s.num_sm_parts, parts) << "b " << b << " h_q " << h_q;
    EXPECT_TRUE(s.unsplit_with_lengths) << "b " << b << " h_q " << h_q;
    EXPECT_EQ(s.lse_accum_elems, (b + parts) * 2 * h_q) << "b " << b << " h_q " << h_q;
  }
  s = mla::decode_plan_sizes({.batch = 148, .s_q = 2, .h_q = 128, .d_qk = 512, .topk = 128, .extra_topk = 1024}, 132);
  EXPECT_FALSE(s.split);
  EXPECT_EQ(s.head_requests, 0);
  // The V3.2 cache's tail split keeps its schedule's default CTAs and runs split with lengths too.
  s = mla::decode_plan_sizes({.batch = 74, .s_q = 2, .h_q = 128, .topk = 2048}, 132);
  EXPECT_EQ(s.split_group_heads, 64);
  EXPECT_FALSE(s.unsplit_with_lengths);
  // h_q past 128 (the mma.sync kernel) keeps the plain grid.
  s = mla::decode_plan_sizes({.batch = 100, .s_q = 2, .h_q = 192, .topk = 2048}, 132);
  EXPECT_EQ(s.head_requests, 0);
}

struct DecodeArgs {
  int64_t b = 2, s_q = 2, h_q = 64, topk = 128, nb = 10, bs = 53;
  mla::DecodeConfig cfg{.batch = 2, .s_q = 2, .h_q = 64, .d_qk = 576, .topk = 128, .num_sms = 132};
  mla::DecodePlanSizes sizes = mla::decode_plan_sizes(cfg, 132);
  TensorView q = TensorView::contiguous(fake(1), DType::bf16, kDev, {b, s_q, h_q, 576});
  TensorView kv = TensorView::contiguous(fake(2), DType::u8, kDev, {nb, bs, 1, 656});
  TensorView indices = TensorView::contiguous(fake(3), DType::i32, kDev, {b, s_q, topk});
  TensorView out = TensorView::contiguous(fake(4), DType::bf16, kDev, {b, s_q, h_q, 512});
  // FlashMLA's lse layout [b, h_q, s_q] seen as [b, s_q, h_q].
  TensorView lse = TensorView::strided(fake(5), DType::f32, kDev, {b, s_q, h_q}, {h_q * s_q, 1, s_q});
  TensorView sink = TensorView::contiguous(fake(6), DType::f32, kDev, {h_q});
  TensorView len = TensorView::contiguous(fake(7), DType::i32, kDev, {b});
  mla::DecodeWorkspace ws{cfg,
                          TensorView::contiguous(fake(8), DType::i32, kDev, {sizes.num_sm_parts, 8}),
                          TensorView::contiguous(fake(9), DType::i32, kDev, {b + 1}),
                          TensorView::contiguous(fake(10), DType::f32, kDev, {sizes.lse_accum_elems}),
                          TensorView::contiguous(fake(11), DType::f32, kDev, {sizes.o_accum_elems})};
  mla::SparseDecodeOptions params{.sm_scale = 0.04};
  mla::SparseDecodeTensors tensors() {
    return {.q = q, .kv_cache = kv, .indices = indices, .topk_length = &len, .attn_sink = &sink, .out = out, .lse = lse};
  }
  void call() { mla::sparse_decode(tensors(), ws, params, nullptr); }
};

TEST(MlaValidation, DecodeBaselinePassesValidation) {
  DecodeArgs a;
  ASSERT_TRUE(a.sizes.split);
  expect_passes_validation([&] { a.call(); });
  a.kv.dtype = DType::e4m3;
  expect_passes_validation([&] { a.call(); });
  a.params.sm_scale.reset();  // unset: the default 1/sqrt(576)
  expect_passes_validation([&] { a.call(); });
  // A padded block stride (FlashMLA's tests allocate block_size + 1 rows per block).
  a.kv = TensorView::strided(fake(2), DType::i8, kDev, {10, 53, 1, 656}, {54 * 656, 656, 656, 1});
  expect_passes_validation([&] { a.call(); });
  expect_passes_validation([&] { mla::decode_plan(a.ws, kFakeDevice, nullptr); });
}

TEST(MlaValidation, DecodeEveryRuleFails) {
  const std::string op = "mla::sparse_decode";
  struct Case {
    const char* name;
    const char* arg;
    std::function<void(DecodeArgs&)> mutate;
  };
  const std::vector<Case> cases = {
      {"sm_scale 0", "sm_scale", [](DecodeArgs& a) { a.params.sm_scale = 0; }},
      {"d_v", "d_v", [](DecodeArgs& a) { a.params.d_v = 256; }},
      {"q dtype", "q", [](DecodeArgs& a) { a.q.dtype = DType::e4m3; }},
      {"q rank", "q", [](DecodeArgs& a) { a.q = TensorView::contiguous(fake(1), DType::bf16, kDev, {4, 64, 576}); }},
      {"q d_qk 512", "q", [](DecodeArgs& a) { a.q.shape[3] = 512; }},
      {"q misaligned", "q", [](DecodeArgs& a) { a.q.data = static_cast<char*>(a.q.data) + 4; }},
      {"kv dtype bf16", "kv_cache", [](DecodeArgs& a) { a.kv.dtype = DType::bf16; }},
      {"kv bytes 584", "kv_cache", [](DecodeArgs& a) { a.kv.shape[3] = 584; }},
      {"kv h_kv", "kv_cache", [](DecodeArgs& a) { a.kv.shape[2] = 2; }},
      {"kv block size 0", "kv_cache", [](DecodeArgs& a) { a.kv.shape[1] = 0; }},
      {"kv slot stride", "kv_cache", [](DecodeArgs& a) { a.kv.strides[1] = 672; }},
      {"kv block stride", "kv_cache", [](DecodeArgs& a) { a.kv.strides[0] = 53 * 656 + 4; }},
      {"kv misaligned", "kv_cache", [](DecodeArgs& a) { a.kv.data = static_cast<char*>(a.kv.data) + 8; }},
      {"kv other device", "kv_cache", [](DecodeArgs& a) { a.kv.device = Device::cuda(0); }},
      {"kv rank", "kv_cache", [](DecodeArgs& a) { a.kv = TensorView::contiguous(fake(2), DType::u8, kDev, {530, 656}); }},
      {"indices batch", "indices", [](DecodeArgs& a) { a.indices.shape[0] = 3; }},
      {"indices s_q", "indices", [](DecodeArgs& a) { a.indices.shape[1] = 1; }},
      {"indices topk", "indices", [](DecodeArgs& a) { a.indices.shape[2] = 100; }},
      {"indices dtype", "indices", [](DecodeArgs& a) { a.indices.dtype = DType::u32; }},
      {"out shape", "out", [](DecodeArgs& a) { a.out.shape[3] = 576; }},
      {"out dtype", "out", [](DecodeArgs& a) { a.out.dtype = DType::f16; }},
      {"lse shape", "lse", [](DecodeArgs& a) { a.lse.shape[2] = 128; }},
      {"lse dtype", "lse", [](DecodeArgs& a) { a.lse.dtype = DType::f64; }},
      {"attn_sink", "attn_sink", [](DecodeArgs& a) { a.sink.shape[0] = 65; }},
      {"topk_length per token", "topk_length", [](DecodeArgs& a) { a.len.shape[0] = 4; }},
      {"ws planned for another topk", "ws", [](DecodeArgs& a) { a.ws.config.topk = 256; }},
      {"ws planned for another batch", "ws", [](DecodeArgs& a) { a.ws.config.batch = 3; }},
      {"sched_meta parts", "sched_meta", [](DecodeArgs& a) { a.ws.sched_meta.shape[0] -= 1; }},
      {"sched_meta dtype", "sched_meta", [](DecodeArgs& a) { a.ws.sched_meta.dtype = DType::u32; }},
      {"num_splits len", "num_splits", [](DecodeArgs& a) { a.ws.num_splits.shape[0] = 2; }},
      {"lse_accum small", "lse_accum", [](DecodeArgs& a) { a.ws.lse_accum.shape[0] -= 1; }},
      {"o_accum small", "o_accum", [](DecodeArgs& a) { a.ws.o_accum.shape[0] -= 1; }},
      {"o_accum misaligned", "o_accum", [](DecodeArgs& a) { a.ws.o_accum.data = static_cast<char*>(a.ws.o_accum.data) + 4; }},
      {"o_accum dtype", "o_accum", [](DecodeArgs& a) { a.ws.o_accum.dtype = DType::bf16; }},
  };
  for (const auto& c : cases) {
    DecodeArgs a;
    c.mutate(a);
    expect_rule([&] { a.call(); }, op, c.arg, c.name);
  }
  // The plan step validates its buffers too.
  DecodeArgs a;
  a.ws.num_splits.shape[0] = 7;
  expect_rule([&] { mla::decode_plan(a.ws, kFakeDevice, nullptr); }, "mla::decode_plan", "num_splits", "plan num_splits");
}

// The V3.2 cache has no extra pool: sparse_decode refuses each extra_* member of the shared bundle, naming it.
TEST(MlaValidation, DecodeV32RefusesTheExtraPool) {
  DecodeArgs a;
  const TensorView extra = TensorView::contiguous(fake(20), DType::i32, kDev, {a.b, a.s_q, 64});
  using T = mla::SparseDecodeTensors;
  for (const auto& [member, arg] : {std::pair{&T::extra_kv_cache, "extra_kv_cache"},
                                    std::pair{&T::extra_indices, "extra_indices"},
                                    std::pair{&T::extra_topk_length, "extra_topk_length"}}) {
    T t = a.tensors();
    t.*member = &extra;
    const Error e = expect_error([&] { mla::sparse_decode(t, a.ws, a.params, nullptr); });
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(e.message().find(std::string("mla::sparse_decode: argument '") + arg + "' must be nullptr"),
              std::string::npos)
        << e.what();
  }
}

// Dense decode (bf16 cache or V3.2 FP8 rows, block table, lengths).
struct DenseArgs {
  int64_t b = 3, s_q = 2, h_q = 64, nb = 40, bs = 64, mb = 5;
  mla::DenseDecodeConfig cfg{.batch = 3, .s_q = 2, .h_q = 64, .block_size = 64, .max_blocks = 5, .causal = true,
                             .num_sms = 132};
  mla::DenseDecodePlanSizes sizes = mla::dense_decode_plan_sizes(cfg, 132);
  TensorView q = TensorView::contiguous(fake(1), DType::bf16, kDev, {b, s_q, h_q, 576});
  TensorView kv = TensorView::contiguous(fake(2), DType::bf16, kDev, {nb, bs, 1, 576});
  TensorView table = TensorView::contiguous(fake(3), DType::i32, kDev, {b, mb});
  TensorView lengths = TensorView::contiguous(fake(4), DType::i32, kDev, {b});
  TensorView out = TensorView::contiguous(fake(5), DType::bf16, kDev, {b, s_q, h_q, 512});
  TensorView lse = TensorView::strided(fake(6), DType::f32, kDev, {b, s_q, h_q}, {h_q * s_q, 1, s_q});
  TensorView sink = TensorView::contiguous(fake(7), DType::f32, kDev, {h_q});
  mla::DenseDecodeWorkspace ws{cfg,
                               TensorView::contiguous(fake(8), DType::i32, kDev, {sizes.num_sm_parts, 8}),
                               TensorView::contiguous(fake(9), DType::i32, kDev, {sizes.num_splits_elems}),
                               TensorView::contiguous(fake(10), DType::f32, kDev, {sizes.lse_accum_elems}),
                               TensorView::contiguous(fake(11), DType::f32, kDev, {sizes.o_accum_elems}),  // 9 MiB
                               TensorView::contiguous(fake(14), DType::i32, kDev, {sizes.indices_elems}),
                               TensorView::contiguous(fake(15), DType::i32, kDev, {sizes.token_lengths_elems})};
  mla::DenseDecodeOptions options{.sm_scale = 0.04};
  void call() {
    mla::dense_decode({.q = q, .kv_cache = kv, .attn_sink = &sink, .out = out, .lse = lse}, ws, options, nullptr);
  }
  void plan() { mla::dense_decode_plan(ws, table, lengths, nullptr); }
};

TEST(MlaValidation, DenseDecodeSizesFollowTheShape) {
  const auto s = mla::dense_decode_plan_sizes({.batch = 128, .s_q = 2, .h_q = 128, .block_size = 64, .max_blocks = 70}, 132);
  EXPECT_EQ(s.num_sm_parts, 33);  // FlashMLA's num_sm_parts: 132 / (2 tokens x 2 CTAs of 64 heads)
  EXPECT_EQ(s.capacity, 70 * 64);
  EXPECT_EQ(s.sched_meta_elems, 33 * 8);
  EXPECT_EQ(s.num_splits_elems, 129);
  EXPECT_EQ(s.lse_accum_elems, (128 + 33) * 2 * 128);
  EXPECT_EQ(s.o_accum_elems, s.lse_accum_elems * 256);
  EXPECT_EQ(s.indices_elems, 128 * 70 * 64);
  EXPECT_EQ(s.token_lengths_elems, 256);
  // Slots round up to whole 64-slot tiles; one part at least.
  const auto t = mla::dense_decode_plan_sizes({.batch = 1, .s_q = 4, .h_q = 1024, .block_size = 3, .max_blocks = 7}, 8);
  EXPECT_EQ(t.capacity, 64);
  EXPECT_EQ(t.num_sm_parts, 1);
  for (const auto& [cfg, arg] : std::vector<std::pair<mla::DenseDecodeConfig, const char*>>{
           {{.batch = 0, .h_q = 1, .block_size = 1, .max_blocks = 1}, "batch"},
           {{.batch = 1, .s_q = 0, .h_q = 1, .block_size = 1, .max_blocks = 1}, "s_q"},
           {{.batch = 1, .h_q = 1025, .block_size = 1, .max_blocks = 1}, "h_q"},
           {{.batch = 1, .h_q = 1, .block_size = 0, .max_blocks = 1}, "block_size"},
           {{.batch = 1, .h_q = 1, .block_size = 64, .max_blocks = 0}, "max_blocks"},
           {{.batch = 1, .h_q = 1, .block_size = 64, .max_blocks = 1 << 25}, "max_blocks"},
           {{.batch = 1, .h_q = 1, .block_size = 1, .max_blocks = 1, .num_sms = -1}, "num_sms"}})
    expect_rule([&] { (void)mla::dense_decode_plan_sizes(cfg, 132); }, "mla::dense_decode_plan_sizes", arg, arg);
}

TEST(MlaValidation, DenseDecodeBaselinePassesValidation) {
  DenseArgs a;
  expect_passes_validation([&] { a.call(); });
  expect_passes_validation([&] { a.plan(); });
  a.options.sm_scale.reset();
  a.ws.config.causal = false;
  expect_passes_validation([&] { a.call(); });
  // Padded tokens (640 elements apart); the V3.2 FP8 rows with a padded block stride.
  a.kv = TensorView::strided(fake(2), DType::bf16, kDev, {40, 64, 1, 576}, {64 * 640, 640, 640, 1});
  expect_passes_validation([&] { a.call(); });
  a.kv = TensorView::strided(fake(2), DType::e4m3, kDev, {40, 64, 1, 656}, {65 * 656, 656, 656, 1});
  expect_passes_validation([&] { a.call(); });
  // A block table with padded rows.
  a.table = TensorView::strided(fake(3), DType::i32, kDev, {3, 5}, {8, 1});
  expect_passes_validation([&] { a.plan(); });
  // fp16 q, cache and out.
  DenseArgs h;
  h.q.dtype = h.kv.dtype = h.out.dtype = DType::f16;
  expect_passes_validation([&] { h.call(); });
}

TEST(MlaValidation, DenseDecodeEveryRuleFails) {
  const std::string op = "mla::dense_decode";
  struct Case {
    const char* name;
    const char* arg;
    std::function<void(DenseArgs&)> mutate;
  };
  const std::vector<Case> cases = {
      {"sm_scale 0", "sm_scale", [](DenseArgs& a) { a.options.sm_scale = 0; }},
      {"q dtype", "q", [](DenseArgs& a) { a.q.dtype = DType::f32; }},
      {"q fp16, cache bf16", "kv_cache", [](DenseArgs& a) { a.q.dtype = DType::f16; }},
      {"q fp16, the FP8 cache", "q",
       [](DenseArgs& a) {
         a.q.dtype = a.out.dtype = DType::f16;
         a.kv = TensorView::contiguous(fake(2), DType::u8, kDev, {40, 64, 1, 656});
       }},
      {"out fp16, q bf16", "out", [](DenseArgs& a) { a.out.dtype = DType::f16; }},
      {"out bf16, q and cache fp16", "out", [](DenseArgs& a) { a.q.dtype = a.kv.dtype = DType::f16; }},
      {"q d_qk 512", "q", [](DenseArgs& a) { a.q.shape[3] = 512; }},
      {"q misaligned", "q", [](DenseArgs& a) { a.q.data = static_cast<char*>(a.q.data) + 4; }},
      {"kv dtype f16", "kv_cache", [](DenseArgs& a) { a.kv.dtype = DType::f16; }},
      {"kv bf16 656", "kv_cache", [](DenseArgs& a) { a.kv.shape[3] = 656; }},
      {"kv fp8 576", "kv_cache", [](DenseArgs& a) { a.kv.dtype = DType::u8; }},
      {"kv h_kv 2", "kv_cache", [](DenseArgs& a) { a.kv.shape[2] = 2; }},
      {"kv token stride", "kv_cache", [](DenseArgs& a) { a.kv.strides[1] = 580; }},
      {"kv page stride padded", "kv_cache", [](DenseArgs& a) { a.kv.strides[0] = 65 * 576; }},
      {"kv misaligned", "kv_cache", [](DenseArgs& a) { a.kv.data = static_cast<char*>(a.kv.data) + 8; }},
      {"kv other device", "kv_cache", [](DenseArgs& a) { a.kv.device = Device::cuda(0); }},
      {"kv fp8 slot stride", "kv_cache",
       [](DenseArgs& a) { a.kv = TensorView::strided(fake(2), DType::u8, kDev, {40, 64, 1, 656}, {64 * 672, 672, 656, 1}); }},
      {"kv fp8 block stride", "kv_cache",
       [](DenseArgs& a) { a.kv = TensorView::strided(fake(2), DType::u8, kDev, {40, 64, 1, 656}, {64 * 656 + 4, 656, 656, 1}); }},
      {"kv tokens past int32", "kv_cache",
       [](DenseArgs& a) { a.kv = TensorView::contiguous(fake(2), DType::u8, kDev, {int64_t{1} << 26, 64, 1, 656}); }},
      {"out shape", "out", [](DenseArgs& a) { a.out.shape[3] = 576; }},
      {"lse shape", "lse", [](DenseArgs& a) { a.lse.shape[2] = 65; }},
      {"attn_sink", "attn_sink", [](DenseArgs& a) { a.sink.shape[0] = 65; }},
      {"ws for another batch", "ws", [](DenseArgs& a) { a.ws.config.batch = 4; }},
      {"ws for another block size", "ws", [](DenseArgs& a) { a.ws.config.block_size = 32; }},
      {"sched_meta parts", "sched_meta", [](DenseArgs& a) { a.ws.sched_meta.shape[0] -= 1; }},
      {"num_splits len", "num_splits", [](DenseArgs& a) { a.ws.num_splits.shape[0] = 3; }},
      {"lse_accum small", "lse_accum", [](DenseArgs& a) { a.ws.lse_accum.shape[0] -= 1; }},
      {"o_accum dtype", "o_accum", [](DenseArgs& a) { a.ws.o_accum.dtype = DType::bf16; }},
      {"indices small", "indices", [](DenseArgs& a) { a.ws.indices.shape[0] -= 1; }},
      {"indices misaligned", "indices", [](DenseArgs& a) { a.ws.indices.data = static_cast<char*>(a.ws.indices.data) + 4; }},
      {"token_lengths small", "token_lengths", [](DenseArgs& a) { a.ws.token_lengths.shape[0] = 5; }},
      {"indices overlaps out", "out", [](DenseArgs& a) { a.ws.indices.data = a.out.data; }},
      {"out overlaps q", "out", [](DenseArgs& a) { a.out.data = a.q.data; }},
  };
  for (const auto& c : cases) {
    DenseArgs a;
    c.mutate(a);
    expect_rule([&] { a.call(); }, op, c.arg, c.name);
  }
  // The plan's own rules.
  const std::vector<Case> plan_cases = {
      {"block_table batch", "block_table", [](DenseArgs& a) { a.table.shape[0] = 2; }},
      {"block_table columns", "block_table", [](DenseArgs& a) { a.table.shape[1] = 6; }},
      {"block_table dtype", "block_table", [](DenseArgs& a) { a.table.dtype = DType::i64; }},
      {"block_table last dim", "block_table",
       [](DenseArgs& a) { a.table = TensorView::strided(fake(3), DType::i32, kDev, {3, 5}, {1, 3}); }},
      {"cache_seqlens len", "cache_seqlens", [](DenseArgs& a) { a.lengths.shape[0] = 4; }},
      {"cache_seqlens dtype", "cache_seqlens", [](DenseArgs& a) { a.lengths.dtype = DType::u32; }},
      {"cache_seqlens other device", "cache_seqlens", [](DenseArgs& a) { a.lengths.device = Device::cuda(0); }},
      {"indices small", "indices", [](DenseArgs& a) { a.ws.indices.shape[0] -= 1; }},
      {"sched_meta overlaps the block table", "sched_meta", [](DenseArgs& a) { a.ws.sched_meta.data = a.table.data; }},
      {"ws config", "batch", [](DenseArgs& a) { a.ws.config.batch = 0; }},
  };
  for (const auto& c : plan_cases) {
    DenseArgs a;
    c.mutate(a);
    expect_rule([&] { a.plan(); }, "mla::dense_decode_plan", c.arg, c.name);
  }
}

// V4 decode (d_qk 512, 584-byte pages, optional extra pool).
struct DecodeV4Args {
  int64_t b = 2, s_q = 2, h_q = 64, topk = 128, extra_topk = 512, nb = 10, bs = 61, xnb = 40, xbs = 64;
  int64_t page = 61 * 584 + 8, xpage = 64 * 584;  // 35632 = 2227 * 16; 37376 = 2336 * 16
  mla::DecodeConfig cfg{.batch = 2, .s_q = 2, .h_q = 64, .d_qk = 512, .topk = 128, .extra_topk = 512, .num_sms = 132};
  mla::DecodePlanSizes sizes = mla::decode_plan_sizes(cfg, 132);
  TensorView q = TensorView::contiguous(fake(1), DType::bf16, kDev, {b, s_q, h_q, 512});
  TensorView kv = TensorView::strided(fake(2), DType::u8, kDev, {nb, bs, 1, 584}, {page, 584, 584, 1});
  TensorView indices = TensorView::contiguous(fake(3), DType::i32, kDev, {b, s_q, topk});
  TensorView out = TensorView::contiguous(fake(4), DType::bf16, kDev, {b, s_q, h_q, 512});
  TensorView lse = TensorView::strided(fake(5), DType::f32, kDev, {b, s_q, h_q}, {h_q * s_q, 1, s_q});
  TensorView sink = TensorView::contiguous(fake(6), DType::f32, kDev, {h_q});
  TensorView len = TensorView::contiguous(fake(7), DType::i32, kDev, {b});
  TensorView xkv = TensorView::strided(fake(20), DType::e4m3, kDev, {xnb, xbs, 1, 584}, {xpage, 584, 584, 1});
  TensorView xindices = TensorView::contiguous(fake(21), DType::i32, kDev, {b, s_q, extra_topk});
  TensorView xlen = TensorView::contiguous(fake(22), DType::i32, kDev, {b});
  mla::DecodeWorkspace ws{cfg,
                          TensorView::contiguous(fake(8), DType::i32, kDev, {sizes.num_sm_parts, 8}),
                          TensorView::contiguous(fake(9), DType::i32, kDev, {b + 1}),
                          TensorView::contiguous(fake(10), DType::f32, kDev, {sizes.lse_accum_elems}),
                          TensorView::contiguous(fake(11), DType::f32, kDev, {sizes.o_accum_elems})};
  mla::SparseDecodeOptions params{.sm_scale = 0.04};
  bool with_extra = true, with_extra_indices = true, with_extra_len = true;
  void call() {
    mla::sparse_decode_v4({.q = q,
                           .kv_cache = kv,
                           .indices = indices,
                           .topk_length = &len,
                           .attn_sink = &sink,
                           .out = out,
                           .lse = lse,
                           .extra_kv_cache = with_extra ? &xkv : nullptr,
                           .extra_indices = with_extra_indices ? &xindices : nullptr,
                           .extra_topk_length = with_extra_len ? &xlen : nullptr},
                          ws, params, nullptr);
  }
};

TEST(MlaValidation, DecodeV4BaselinePassesValidation) {
  DecodeV4Args a;
  ASSERT_TRUE(a.sizes.split);
  expect_passes_validation([&] { a.call(); });
  // Without the extra pool, planned without it.
  a.with_extra = a.with_extra_indices = a.with_extra_len = false;
  a.ws.config.extra_topk = 0;
  expect_passes_validation([&] { a.call(); });
}

// FlashMLA's test tensors are padded views (kernelkit's non_contiguousify: every dim one longer, the last one 128
// longer), so their requests are not evenly spaced: q, indices and out are taken as they are, no copy.
TensorView flashmla_padded(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  std::vector<int64_t> sh(shape), st(sh.size(), 1);
  for (size_t d = sh.size() - 1; d-- > 0;) st[d] = st[d + 1] * (sh[d + 1] + (d + 1 == sh.size() - 1 ? 128 : 1));
  return TensorView::strided(data, dtype, kDev, sh, st);
}

TEST(MlaValidation, DecodeTakesFlashMlaPaddedViews) {
  DecodeArgs a;
  a.q = flashmla_padded(fake(1), DType::bf16, {a.b, a.s_q, a.h_q, 576});
  a.indices = flashmla_padded(fake(3), DType::i32, {a.b, a.s_q, a.topk});
  a.out = flashmla_padded(fake(4), DType::bf16, {a.b, a.s_q, a.h_q, 512});
  ASSERT_NE(a.q.stride(0), a.q.stride(1) * a.s_q);
  expect_passes_validation([&] { a.call(); });
  DecodeV4Args v;
  v.q = flashmla_padded(fake(1), DType::bf16, {v.b, v.s_q, v.h_q, 512});
  v.indices = flashmla_padded(fake(3), DType::i32, {v.b, v.s_q, v.topk});
  v.xindices = flashmla_padded(fake(21), DType::i32, {v.b, v.s_q, v.extra_topk});
  v.out = flashmla_padded(fake(4), DType::bf16, {v.b, v.s_q, v.h_q, 512});
  expect_passes_validation([&] { v.call(); });
}

TEST(MlaValidation, DecodeV4EveryRuleFails) {
  const std::string op = "mla::sparse_decode_v4";
  struct Case {
    const char* arg;
    const char* rule;
    std::function<void(DecodeV4Args&)> mutate;
  };
  const std::vector<Case> cases = {
      {"sm_scale", "finite and > 0", [](DecodeV4Args& a) { a.params.sm_scale = 0; }},
      {"q", "d_qk (dim 3) 512 (the V4 FP8 cache)", [](DecodeV4Args& a) { a.q.shape[3] = 576; }},
      {"kv_cache", "584 bytes per token", [](DecodeV4Args& a) { a.kv.shape[3] = 656; }},
      {"kv_cache", "stride 584 in dim 1", [](DecodeV4Args& a) { a.kv.strides[1] = 576; }},
      {"kv_cache", "multiple of 16 bytes; got 35640", [](DecodeV4Args& a) { a.kv.strides[0] += 8; }},
      {"kv_cache", "at least block_size * 584 = 35624 bytes", [](DecodeV4Args& a) { a.kv.strides[0] = 35616; }},
      {"kv_cache", "block_size (dim 1) >= 1", [](DecodeV4Args& a) { a.kv.shape[1] = 0; }},
      {"kv_cache", "aligned to 16 bytes", [](DecodeV4Args& a) { a.kv.data = static_cast<char*>(a.kv.data) + 8; }},
      {"kv_cache", "must have dtype", [](DecodeV4Args& a) { a.kv.dtype = DType::bf16; }},
      {"extra_kv_cache", "stride 584 in dim 1", [](DecodeV4Args& a) { a.xkv.strides[1] = 592; }},
      {"extra_kv_cache", "must be on the device of 'q'", [](DecodeV4Args& a) { a.xkv.device = Device::cuda(0); }},
      {"extra_indices", "must be given together with extra_kv_cache", [](DecodeV4Args& a) { a.with_extra_indices = false; }},
      {"extra_kv_cache", "must be given together with extra_indices", [](DecodeV4Args& a) { a.with_extra = false; }},
      {"extra_topk_length", "only be given with the extra pool",
       [](DecodeV4Args& a) { a.with_extra = a.with_extra_indices = false; }},
      {"extra_indices", "size 2 in dim 0", [](DecodeV4Args& a) { a.xindices.shape[0] = 3; }},
      {"extra_indices", "positive multiple of 64", [](DecodeV4Args& a) { a.xindices.shape[2] = 500; }},
      {"extra_indices", "must have dtype", [](DecodeV4Args& a) { a.xindices.dtype = DType::u32; }},
      {"extra_topk_length", "size 2 in dim 0", [](DecodeV4Args& a) { a.xlen.shape[0] = 4; }},
      {"topk_length", "size 2 in dim 0", [](DecodeV4Args& a) { a.len.shape[0] = 4; }},
      {"ws", "extra_topk 512; the tensors give", [](DecodeV4Args& a) { a.xindices.shape[2] = 1024; }},
      {"ws", "d_qk 576", [](DecodeV4Args& a) { a.ws.config.d_qk = 576, a.ws.config.extra_topk = 0; }},
  };
  for (const auto& c : cases) {
    DecodeV4Args a;
    c.mutate(a);
    const Error e = expect_error([&] { a.call(); });
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << c.rule << ": " << e.what();
    EXPECT_NE(e.message().find(op + ": argument '" + c.arg + "'"), std::string::npos) << c.rule << ": " << e.what();
    EXPECT_NE(e.message().find(c.rule), std::string::npos) << "expected \"" << c.rule << "\" in: " << e.what();
  }
  // An output over the extra pool's indices is refused like one over the main pool's.
  {
    DecodeV4Args a;
    a.out.data = a.xindices.data;
    const Error e = expect_error([&] { a.call(); });
    EXPECT_NE(e.message().find(op + ": argument 'out' must not overlap 'extra_indices'"), std::string::npos) << e.what();
  }
  // The V3.2 entry refuses a V4 plan, and the V4 entry a V3.2 plan, naming the planned shape.
  DecodeArgs v32;
  v32.ws.config.d_qk = 512;
  expect_rule([&] { v32.call(); }, "mla::sparse_decode", "ws", "V4 plan on the V3.2 entry");
}

// ---------------------------------------------------------------------------------------------------
// Quantizer: host tensors, so "nothing written on failure" is observable.

// A host quantizer reads and writes its arrays right away: a host view's extent is bounded (a stride of 2^61 in a
// [2, 576] view passes every other rule and would be dereferenced), and a data pointer near the top of the address
// space whose extent wraps is refused.
TEST(MlaValidation, HostQuantizerViewsAreBounded) {
  std::vector<uint16_t> kv(2 * 576, 0x3c00);
  std::vector<uint8_t> out(2 * 656, 0);
  const auto host_out = TensorView::contiguous(out.data(), DType::u8, Device::cpu(), {2, 656});
  auto wide = TensorView::strided(kv.data(), DType::bf16, Device::cpu(), {2, 576}, {int64_t{1} << 61, 1});
  const Error e = expect_error([&] { mla::quantize_kv_cache_fp8(wide, host_out, nullptr); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(e.message().find("argument 'kv' must span at most"), std::string::npos) << e.what();
  auto top = TensorView::contiguous(reinterpret_cast<void*>(UINTPTR_MAX - 1023), DType::u8, Device::cpu(), {2, 656});
  const Error t = expect_error([&] {
    mla::quantize_kv_cache_fp8(TensorView::contiguous(kv.data(), DType::bf16, Device::cpu(), {2, 576}), top, nullptr);
  });
  EXPECT_NE(t.message().find("argument 'out' must lie inside the address space"), std::string::npos) << t.what();
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; }));
}

TEST(MlaValidation, QuantizerRulesAndNothingWrittenOnFailure) {
  std::vector<uint16_t> src(2 * 3 * 576, 0x3f80);  // 1.0
  std::vector<uint8_t> dst(2 * 3 * 656, 0xEE);
  const TensorView good_src = TensorView::contiguous(src.data(), DType::bf16, Device::cpu(), {2, 3, 1, 576});
  const TensorView good_dst = TensorView::contiguous(dst.data(), DType::u8, Device::cpu(), {2, 3, 1, 656});
  const std::string op = "mla::quantize_kv_cache_fp8";
  struct Case {
    const char* name;
    const char* arg;
    std::function<void(TensorView&, TensorView&)> mutate;
  };
  const std::vector<Case> cases = {
      {"src dtype", "kv", [](TensorView& s, TensorView&) { s.dtype = DType::f16; }},
      {"src last dim", "kv", [](TensorView& s, TensorView&) { s.shape[3] = 512; }},
      {"src rank 1", "kv", [](TensorView& s, TensorView&) { s = TensorView::contiguous(s.data, DType::bf16, Device::cpu(), {576}); }},
      {"src strided", "kv", [](TensorView& s, TensorView&) { s.strides[3] = 2; }},
      {"src null", "kv", [](TensorView& s, TensorView&) { s.data = nullptr; }},
      // [2^58, 1, 1, 576] with null data: the element count wraps to 0 without the extent check.
      {"src count wraps", "kv", [](TensorView& s, TensorView&) {
         s = TensorView::contiguous(nullptr, DType::bf16, Device::cpu(), {int64_t{1} << 58, 1, 1, 576});
       }},
      {"dst dtype", "out", [](TensorView&, TensorView& d) { d.dtype = DType::bf16; }},
      {"dst bytes", "out", [](TensorView&, TensorView& d) { d.shape[3] = 584; }},
      {"dst leading", "out", [](TensorView&, TensorView& d) { d.shape[1] = 4; }},
      {"dst rank", "out", [](TensorView&, TensorView& d) { d = TensorView::contiguous(d.data, DType::u8, Device::cpu(), {6, 656}); }},
      {"dst on cuda", "out", [](TensorView&, TensorView& d) { d.device = kDev; }},
      {"dst strided", "out", [](TensorView&, TensorView& d) { d.strides[3] = 2; }},
  };
  for (const auto& c : cases) {
    TensorView s = good_src, d = good_dst;
    c.mutate(s, d);
    expect_rule([&] { mla::quantize_kv_cache_fp8(s, d, nullptr); }, op, c.arg, c.name);
    for (uint8_t byte : dst) ASSERT_EQ(byte, 0xEE) << c.name << ": output written on a failed call";
  }
  // Source on a device, destination on the host.
  TensorView s = good_src;
  s.device = kDev;
  expect_rule([&] { mla::quantize_kv_cache_fp8(s, good_dst, nullptr); }, op, "out", "mixed devices");
  // And the good call writes every byte.
  mla::quantize_kv_cache_fp8(good_src, good_dst, nullptr);
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(dst[static_cast<size_t>(r * 656)], 0x78) << "1.0 with scale 2^-8 is 256 = e4m3 0x78";
    float scale;
    std::memcpy(&scale, dst.data() + r * 656 + 512, 4);
    EXPECT_EQ(scale, std::exp2(-8.f));
  }
}

// The dequantizers: every rule fails naming the argument and the rule, and nothing is written; on a GPU (fake device
// tensors: refused before any CUDA call) the vector layout rules too.
TEST(MlaValidation, DequantizerRulesAndNothingWrittenOnFailure) {
  constexpr int64_t kPage = 3 * 584 + 8;  // 1760 = 110 * 16
  alignas(16) static uint8_t rows[2 * 3 * 656], pages[2 * kPage];
  alignas(16) static uint16_t out[2 * 3 * 576];
  std::fill(std::begin(out), std::end(out), uint16_t{0xEEEE});
  const TensorView rows_ok = TensorView::contiguous(rows, DType::u8, Device::cpu(), {2, 3, 1, 656});
  const TensorView out_ok = TensorView::contiguous(out, DType::bf16, Device::cpu(), {2, 3, 1, 576});
  const TensorView pages_ok = TensorView::strided(pages, DType::u8, Device::cpu(), {2, 3, 1, 584}, {kPage, 584, 584, 1});
  const TensorView out4_ok = TensorView::contiguous(out, DType::bf16, Device::cpu(), {2, 3, 1, 512});
  struct Case {
    bool v4;
    const char* arg;
    const char* rule;
    std::function<void(TensorView&, TensorView&)> mutate;
  };
  auto on_gpu = [](TensorView& c, TensorView& o) { c.device = kDev, o.device = kDev; };
  const std::vector<Case> cases = {
      {false, "cache", "must have dtype", [](TensorView& c, TensorView&) { c.dtype = DType::bf16; }},
      {false, "cache", "656 bytes per token", [](TensorView& c, TensorView&) { c.shape[3] = 584; }},
      {false, "cache", "rank 2, 3 or 4", [](TensorView& c, TensorView&) { c = TensorView::contiguous(c.data, DType::u8, Device::cpu(), {656}); }},
      {false, "cache", "stride 1 in its last dim", [](TensorView& c, TensorView&) { c.strides[3] = 2; }},
      {false, "out", "must have dtype", [](TensorView&, TensorView& o) { o.dtype = DType::f16; }},
      {false, "out", "576 values per token", [](TensorView&, TensorView& o) { o.shape[3] = 512; }},
      {false, "out", "cache's leading dims", [](TensorView&, TensorView& o) { o.shape[1] = 2; }},
      {false, "out", "must be in host memory", [](TensorView&, TensorView& o) { o.device = kDev; }},
      {false, "cache", "multiples of 16 bytes on a GPU; dim 0 has 1976",
       [&](TensorView& c, TensorView& o) { on_gpu(c, o), c.strides[0] = 1976; }},
      {false, "out", "multiples of 8 values on a GPU; dim 1 has 580",
       [&](TensorView& c, TensorView& o) { on_gpu(c, o), o.strides[1] = 580, o.strides[0] = 1744; }},
      {false, "out", "aligned", [&](TensorView& c, TensorView& o) { on_gpu(c, o), o.data = out + 1; }},
      {true, "cache", "stride 584 in dim 1", [](TensorView& c, TensorView&) { c.strides[1] = 576; }},
      {true, "cache", "multiple of 16 bytes; got 1768", [](TensorView& c, TensorView&) { c.strides[0] = kPage + 8; }},
      {true, "out", "512 values per token", [](TensorView&, TensorView& o) { o.shape[3] = 576; }},
      {true, "out", "cache.size(1) (block_size)", [](TensorView&, TensorView& o) { o.shape[1] = 2; }},
      {true, "out", "multiples of 8 values on a GPU; dim 1 has 516",
       [&](TensorView& c, TensorView& o) { on_gpu(c, o), o.strides[1] = 516, o.strides[0] = 1552; }},
      {true, "cache", "aligned", [&](TensorView& c, TensorView& o) { on_gpu(c, o), c.data = pages + 8; }},
  };
  for (const auto& c : cases) {
    TensorView cache = c.v4 ? pages_ok : rows_ok, o = c.v4 ? out4_ok : out_ok;
    c.mutate(cache, o);
    const std::string op = c.v4 ? "mla::dequantize_kv_cache_fp8_v4" : "mla::dequantize_kv_cache_fp8";
    const Error e = expect_error([&] {
      c.v4 ? mla::dequantize_kv_cache_fp8_v4(cache, o, nullptr) : mla::dequantize_kv_cache_fp8(cache, o, nullptr);
    });
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << c.rule << ": " << e.what();
    EXPECT_NE(e.message().find(op + ": argument '" + c.arg + "'"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find(c.rule), std::string::npos) << "expected \"" << c.rule << "\" in: " << e.what();
    for (uint16_t v : out) ASSERT_EQ(v, 0xEEEE) << c.rule << ": output written on a failed call";
  }
}

// The V4 quantizer: every rule fails with the argument and the rule named, and nothing is written.
TEST(MlaValidation, QuantizerV4RulesAndNothingWrittenOnFailure) {
  constexpr int64_t kPage = 3 * 584 + 8;  // 1760 = 110 * 16
  std::vector<uint16_t> src(2 * 3 * 512, 0x3f80);  // 1.0
  std::vector<uint8_t> dst(2 * kPage, 0xEE);
  const TensorView good_src = TensorView::contiguous(src.data(), DType::bf16, Device::cpu(), {2, 3, 1, 512});
  const TensorView good_dst =
      TensorView::strided(dst.data(), DType::u8, Device::cpu(), {2, 3, 1, 584}, {kPage, 584, 584, 1});
  const std::string op = "mla::quantize_kv_cache_fp8_v4";
  struct Case {
    const char* arg;
    const char* rule;
    std::function<void(TensorView&, TensorView&)> mutate;
  };
  const std::vector<Case> cases = {
      {"kv", "must have dtype", [](TensorView& s, TensorView&) { s.dtype = DType::f16; }},
      {"kv", "512 values per token", [](TensorView& s, TensorView&) { s.shape[3] = 576; }},
      {"kv", "h_kv", [](TensorView& s, TensorView&) { s.shape[2] = 2; }},
      {"kv", "rank 4", [](TensorView& s, TensorView&) { s = TensorView::contiguous(s.data, DType::bf16, Device::cpu(), {6, 512}); }},
      {"kv", "stride 1 in its last dim", [](TensorView& s, TensorView&) { s.strides[3] = 2; }},
      {"kv", "must not be null", [](TensorView& s, TensorView&) { s.data = nullptr; }},
      {"out", "must have dtype", [](TensorView&, TensorView& d) { d.dtype = DType::bf16; }},
      {"out", "584 bytes per token", [](TensorView&, TensorView& d) { d.shape[3] = 656; }},
      {"out", "kv.size(1) (block_size)", [](TensorView&, TensorView& d) { d.shape[1] = 2; }},
      {"out", "kv.size(0) (num_blocks)", [](TensorView&, TensorView& d) { d.shape[0] = 1; }},
      {"out", "stride 584 in dim 1", [](TensorView&, TensorView& d) { d.strides[1] = 576; }},
      {"out", "multiple of 16 bytes; got 1768", [](TensorView&, TensorView& d) { d.strides[0] = kPage + 8; }},
      {"out", "at least block_size * 584 = 1752 bytes (pages must not overlap); got 1744",
       [](TensorView&, TensorView& d) { d.strides[0] = kPage - 16; }},
      {"out", "must be in host memory", [](TensorView&, TensorView& d) { d.device = kDev; }},
  };
  for (const auto& c : cases) {
    TensorView s = good_src, d = good_dst;
    c.mutate(s, d);
    const Error e = expect_error([&] { mla::quantize_kv_cache_fp8_v4(s, d, nullptr); });
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << c.rule << ": " << e.what();
    EXPECT_NE(e.message().find(op + ": argument '" + c.arg + "'"), std::string::npos) << e.what();
    EXPECT_NE(e.message().find(c.rule), std::string::npos) << "expected \"" << c.rule << "\" in: " << e.what();
    for (uint8_t byte : dst) ASSERT_EQ(byte, 0xEE) << c.rule << ": output written on a failed call";
  }
  // The good call writes every data byte: 1.0 has scale 2^-8 (e8m0 119) and code 0x78; the RoPE bf16 is copied.
  mla::quantize_kv_cache_fp8_v4(good_src, good_dst, nullptr);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 3; ++t) {
      const uint8_t* page = dst.data() + b * kPage;
      EXPECT_EQ(page[t * 576], 0x78);
      EXPECT_EQ(page[t * 576 + 447], 0x78);
      EXPECT_EQ(page[t * 576 + 448], 0x80);
      EXPECT_EQ(page[t * 576 + 449], 0x3f);
      for (int i = 0; i < 7; ++i) EXPECT_EQ(page[3 * 576 + t * 8 + i], 119);
      EXPECT_EQ(page[3 * 576 + t * 8 + 7], 0);
    }
  for (int b = 0; b < 2; ++b)
    for (int64_t i = 3 * 584; i < kPage; ++i) EXPECT_EQ(dst[static_cast<size_t>(b * kPage + i)], 0xEE) << "page padding";
}

// ---------------------------------------------------------------------------------------------------
// Overlap: an output shares no byte with any input nor another output (checked before the device).

void expect_overlap(const std::function<void()>& fn, const std::string& op, const std::string& fragment) {
  const Error e = expect_error(fn);
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  EXPECT_NE(e.message().find(op + ": argument " + fragment), std::string::npos)
      << "expected \"" << fragment << "\" in: " << e.what();
}

TEST(MlaValidation, OverlappingOutputsAreRefused) {
  const std::string prefill = "mla::sparse_prefill";
  {
    PrefillArgs a;  // q == kv == out: one buffer for everything
    a.q.data = a.kv.data = a.out.data;
    expect_overlap([&] { a.call(); }, prefill, "'out' must not overlap 'q'");
  }
  {
    PrefillArgs a;
    a.out.data = static_cast<char*>(a.q.data) + 16;
    expect_overlap([&] { a.call(); }, prefill, "'out' must not overlap 'q' (an output shares no byte with another "
                                               "argument; its data starts 16 bytes after the data of 'q')");
  }
  {
    PrefillArgs a;
    a.max_logits = a.lse;
    expect_overlap([&] { a.call(); }, prefill, "'lse' must not overlap 'max_logits'");
  }
  {
    PrefillArgs a;
    a.sink.data = static_cast<char*>(a.lse.data) + 64;
    expect_overlap([&] { a.call(); }, prefill, "'lse' must not overlap 'attn_sink'");
  }
  {
    PrefillArgs a;
    a.indices.data = static_cast<char*>(a.out.data) + 1024;
    expect_overlap([&] { a.call(); }, prefill, "'out' must not overlap 'indices'");
  }
  {
    // out rows interleaved with q's rows in one buffer (q in the first 576 values of each 1088, out after
    // them): the byte ranges cross, the elements do not.
    PrefillArgs a;
    a.q = TensorView::strided(fake(1), DType::bf16, kDev, {4, 64, 576}, {64 * 1088, 1088, 1});
    a.out = TensorView::strided(static_cast<char*>(fake(1)) + 576 * 2, DType::bf16, kDev, {4, 64, 512},
                                {64 * 1088, 1088, 1});
    expect_passes_validation([&] { a.call(); });
    a.out.data = static_cast<char*>(a.out.data) - 16;
    expect_overlap([&] { a.call(); }, prefill, "'out' must not overlap 'q'");
  }

  const std::string decode = "mla::sparse_decode";
  {
    DecodeArgs a;
    a.out.data = a.kv.data;
    expect_overlap([&] { a.call(); }, decode, "'out' must not overlap 'kv_cache'");
  }
  {
    DecodeArgs a;
    a.lse.data = a.q.data;
    expect_overlap([&] { a.call(); }, decode, "'lse' must not overlap 'q'");
  }
  {
    DecodeArgs a;
    a.ws.o_accum.data = a.ws.lse_accum.data;
    expect_overlap([&] { a.call(); }, decode, "'lse_accum' must not overlap 'o_accum'");
  }
  {
    DecodeArgs a;
    a.ws.sched_meta.data = static_cast<char*>(a.ws.o_accum.data) + 4096;
    expect_overlap([&] { a.call(); }, decode, "'o_accum' must not overlap 'sched_meta'");
  }
  {
    DecodeArgs a;
    a.ws.num_splits.data = static_cast<char*>(a.out.data) + 64;
    expect_overlap([&] { a.call(); }, decode, "'out' must not overlap 'num_splits'");
  }
  {
    DecodeArgs a;
    a.ws.num_splits.data = a.ws.sched_meta.data;
    expect_overlap([&] { mla::decode_plan(a.ws, kFakeDevice, nullptr); }, "mla::decode_plan",
                   "'num_splits' must not overlap 'sched_meta'");
  }

  // The quantizer in place (host): refused, and the source is left as it was.
  std::vector<uint16_t> src(2 * 576 + 2 * 656, 0x3f80);
  const TensorView kv = TensorView::contiguous(src.data(), DType::bf16, Device::cpu(), {2, 576});
  const TensorView out = TensorView::contiguous(src.data(), DType::u8, Device::cpu(), {2, 656});
  expect_overlap([&] { mla::quantize_kv_cache_fp8(kv, out, nullptr); }, "mla::quantize_kv_cache_fp8",
                 "'out' must not overlap 'kv'");
  for (uint16_t v : src) ASSERT_EQ(v, 0x3f80) << "written on a failed call";
  const TensorView after = TensorView::contiguous(src.data() + 2 * 576, DType::u8, Device::cpu(), {2, 656});
  mla::quantize_kv_cache_fp8(kv, after, nullptr);  // right behind the source: fine
}

// Without a usable device a valid call never launches: it reports the device.
TEST(MlaValidation, UnknownDeviceIsReported) {
  EXPECT_THROW((void)mla::device_support(kFakeDevice), Error);
  EXPECT_THROW((void)mla::device_support(-1), Error);
}

}  // namespace
