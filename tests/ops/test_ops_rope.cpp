// RoPE over a ragged batch (apply_rope, apply_llama31_rope) and RoPE + FP8 quantization (rope_quantize_fp8) without
// a GPU: argument packing against FlashInfer 0.6.3's exports (the recording stand-in logs what each receives), the
// validation rules (each refusal names the argument and the rule, and nothing reaches the module), the C ABI entries,
// the FP8 codecs, and the float64 references against values computed independently here.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "flashcpp/flashcpp.h"
#include "flashcpp/reference.hpp"
#include "flashcpp/rope.hpp"
#include "ops/ops_fixture.hpp"
#include "support/c_tensor.hpp"

namespace flashcpp::testing {
namespace {

// DeepSeek MLA's split at `tokens` tokens: q [tokens, 128, 512 + 64] sliced into q_nope (the first 512) and q_rope (the
// last 64), k one latent head [tokens, 64] + [tokens, 512], e4m3 outputs contiguous.
struct MlaViews {
  TensorView q, q_nope, q_rope, k_rope, k_nope, q_rope_out, q_nope_out, k_rope_out, k_nope_out, cache, pos;
  RopeQuantizeTensors args() const {
    return {.q_rope = q_rope, .k_rope = k_rope, .q_rope_out = q_rope_out, .k_rope_out = k_rope_out,
            .q_nope = &q_nope, .k_nope = &k_nope, .q_nope_out = &q_nope_out, .k_nope_out = &k_nope_out,
            .cos_sin_cache = cache, .pos_ids = pos};
  }
};

class RopeOps : public OpsFixture {
 protected:
  void SetUp() override {
    OpsFixture::SetUp();
    link("rope");
    (void)recorded();
  }
  void expect_nothing_called() { EXPECT_EQ(recorded(), ""); }
  static MlaViews mla_views(int64_t tokens, DType out = DType::e4m3) {
    MlaViews m;
    m.q = dev(DType::bf16, {tokens, 128, 576});
    m.q_nope = TensorView::strided(m.q.data, DType::bf16, m.q.device, {tokens, 128, 512}, {128 * 576, 576, 1});
    m.q_rope = TensorView::strided(static_cast<uint16_t*>(m.q.data) + 512, DType::bf16, m.q.device, {tokens, 128, 64},
                                   {128 * 576, 576, 1});
    m.k_rope = dev(DType::bf16, {tokens, 64});
    m.k_nope = dev(DType::bf16, {tokens, 512});
    m.q_rope_out = dev(out, {tokens, 128, 64});
    m.q_nope_out = dev(out, {tokens, 128, 512});
    m.k_rope_out = dev(out, {tokens, 64});
    m.k_nope_out = dev(out, {tokens, 512});
    m.cache = dev(DType::f32, {4096, 64});
    m.pos = dev(DType::i64, {tokens});
    return m;
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Packing

TEST_F(RopeOps, RaggedRopeOpsPassFlashInfersArguments) {
  auto q = dev(DType::bf16, {7, 32, 128}), k = dev(DType::bf16, {7, 8, 128});
  auto qo = dev(DType::bf16, {7, 32, 128}), ko = dev(DType::bf16, {7, 8, 128});
  auto indptr = dev(DType::i32, {3}), offsets = dev(DType::i32, {2});
  apply_rope(rt(), q, k, qo, ko, indptr, offsets, {.rotary_dim = 64, .interleave = true, .rope_scale = 2, .rope_theta = 5e5});
  expect_args(one_call("apply_rope"),
              {T(q), T(k), T(qo), T(ko), T(indptr), T(offsets), I(64), B(true), F(2), F(5e5)});
  apply_rope(rt(), q, k, q, k, indptr, offsets);  // in place, the defaults: rotary_dim = head_dim
  expect_args(one_call("apply_rope"),
              {T(q), T(k), T(q), T(k), T(indptr), T(offsets), I(128), B(false), F(1), F(1e4)});

  auto indptr64 = dev(DType::i64, {3}), offsets64 = dev(DType::i64, {2});
  apply_llama31_rope(rt(), q, k, qo, ko, indptr64, offsets64, {.rope_scale = 8, .rope_theta = 5e5},
                     {.low_freq_factor = 2, .high_freq_factor = 3, .old_context_length = 4096});
  expect_args(one_call("apply_llama31_rope"), {T(q), T(k), T(qo), T(ko), T(indptr64), T(offsets64), I(128), B(false),
                                               F(8), F(5e5), F(2), F(3), F(4096)});
  // q and k as slices of one fused qkv row.
  auto qkv = dev(DType::f16, {7, 48 * 64});
  auto qs = TensorView::strided(qkv.data, DType::f16, qkv.device, {7, 32, 64}, {48 * 64, 64, 1});
  auto ks = TensorView::strided(static_cast<uint16_t*>(qkv.data) + 32 * 64, DType::f16, qkv.device, {7, 8, 64},
                                {48 * 64, 64, 1});
  apply_rope(rt(), qs, ks, qs, ks, indptr, offsets);
  expect_args(one_call("apply_rope"), {T(qs), T(ks), T(qs), T(ks), T(indptr), T(offsets), I(64), B(false), F(1), F(1e4)});
}

TEST_F(RopeOps, RopeQuantizePassesFlashInfersArguments) {
  // GQA: k rank 3, e5m2 out, interleave, both scales and PDL.
  auto qr = dev(DType::f16, {5, 32, 64}), kr = dev(DType::f16, {5, 8, 64});
  auto qn = dev(DType::f16, {5, 32, 64}), kn = dev(DType::f16, {5, 8, 64});
  auto qro = dev(DType::e5m2, {5, 32, 64}), kro = dev(DType::e5m2, {5, 8, 64});
  auto qno = dev(DType::e5m2, {5, 32, 64}), kno = dev(DType::e5m2, {5, 8, 64});
  auto cache = dev(DType::f32, {100, 64}), pos = dev(DType::i32, {5});
  rope_quantize_fp8(rt(), {qr, kr, qro, kro, &qn, &kn, &qno, &kno, cache, pos},
                    {.interleave = true, .quant_scale_q = 0.5, .quant_scale_kv = 2, .enable_pdl = true});
  expect_args(one_call("rope_quantize"), {T(qr), T(kr), T(qn), T(kn), T(qro), T(kro), T(qno), T(kno), T(cache), T(pos),
                                          F(0.5), F(2), B(true), B(true)});

  // DeepSeek MLA: strided q slices, k rank 2, the defaults (NeoX, scales 1, no PDL).
  const MlaViews m = mla_views(9);
  rope_quantize_fp8(rt(), m.args());
  expect_args(one_call("rope_quantize"),
              {T(m.q_rope), T(m.k_rope), T(m.q_nope), T(m.k_nope), T(m.q_rope_out), T(m.k_rope_out), T(m.q_nope_out),
               T(m.k_nope_out), T(m.cache), T(m.pos), F(1), F(1), B(false), B(false)});

  // No nope part: FlashInfer gets views of last dim 0 (as its Python API makes for None), of q's and k's ranks.
  rope_quantize_fp8(rt(), {.q_rope = qr, .k_rope = kr, .q_rope_out = qro, .k_rope_out = kro, .cos_sin_cache = cache,
                           .pos_ids = pos});
  const auto got = one_call("rope_quantize");
  ASSERT_EQ(got.size(), 15u);
  EXPECT_EQ(got[3].substr(0, got[3].find(';', got[3].find(';') + 1)), "T(2.16;[5,32,0]");  // q_nope: f16 [5, 32, 0]
  EXPECT_EQ(got[4].substr(0, got[4].find(';', got[4].find(';') + 1)), "T(2.16;[5,8,0]");
  EXPECT_EQ(got[7].substr(0, got[7].find(';', got[7].find(';') + 1)), "T(12.8;[5,32,0]");  // q_nope_out: e5m2
  EXPECT_EQ(got[8].substr(0, got[8].find(';', got[8].find(';') + 1)), "T(12.8;[5,8,0]");
  // MLA without nope: k's empty parts are rank 2.
  rope_quantize_fp8(rt(), {.q_rope = m.q_rope, .k_rope = m.k_rope, .q_rope_out = m.q_rope_out,
                           .k_rope_out = m.k_rope_out, .cos_sin_cache = m.cache, .pos_ids = m.pos});
  const auto mla = one_call("rope_quantize");
  ASSERT_EQ(mla.size(), 15u);
  EXPECT_EQ(mla[4].substr(0, mla[4].find(';', mla[4].find(';') + 1)), "T(4.16;[9,0]");
}

TEST_F(RopeOps, EmptyBatchesLaunchNothing) {
  auto q = dev(DType::bf16, {0, 4, 64}), k = dev(DType::bf16, {0, 1, 64});
  apply_rope(rt(), q, k, q, k, dev(DType::i32, {1}), dev(DType::i32, {0}));
  auto q7 = dev(DType::bf16, {7, 4, 64}), k7 = dev(DType::bf16, {7, 1, 64});
  apply_llama31_rope(rt(), q7, k7, q7, k7, dev(DType::i32, {1}), dev(DType::i32, {0}), {});  // no request
  MlaViews m = mla_views(0);
  rope_quantize_fp8(rt(), m.args());
  expect_nothing_called();
}

// ---------------------------------------------------------------------------------------------------------------
// Validation: each refusal names the op, the argument and the rule, and nothing reaches the module

TEST_F(RopeOps, RaggedRulesAreCheckedBeforeTheCall) {
  auto q = dev(DType::bf16, {5, 32, 128}), k = dev(DType::bf16, {5, 8, 128});
  auto qo = dev(DType::bf16, {5, 32, 128}), ko = dev(DType::bf16, {5, 8, 128});
  auto indptr = dev(DType::i32, {3}), offsets = dev(DType::i32, {2});
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, ko, indptr, dev(DType::i64, {2})),
                 "apply_rope: argument 'offsets' must have the dtype of 'indptr' (i32)");
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, ko, dev(DType::f32, {3}), dev(DType::f32, {2})),
                 "apply_rope: argument 'indptr' must have dtype");
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, ko, dev(DType::i32, {2}), offsets),
                 "apply_rope: argument 'indptr' must have size 3 in dim 0 (= offsets.size(0) + 1)");
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, ko, dev(DType::i32, {3, 1}), offsets), "argument 'indptr' must have rank 1");
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, ko, dev_strided(DType::i32, {3}, {2}), offsets),
                 "argument 'indptr' must be contiguous");
  int32_t host[3] = {0, 2, 5};
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, ko, TensorView::contiguous(host, DType::i32, Device::cpu(), {3}), offsets),
                 "argument 'indptr'");
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, ko, indptr, dev(DType::i32, {2}, 1)), "argument 'offsets'");  // device 1
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, ko, indptr, offsets, {.rotary_dim = 24}),
                 "apply_rope: argument 'rotary_dim' must be a multiple of 16");
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, ko, indptr, offsets, {.rope_scale = -1}), "argument 'rope_scale'");
  EXPECT_INVALID(apply_rope(rt(), dev(DType::bf16, {5, 32, 96}), dev(DType::bf16, {5, 8, 96}),
                            dev(DType::bf16, {5, 32, 96}), dev(DType::bf16, {5, 8, 96}), indptr, offsets),
                 "argument 'q.size(2) (head_dim)' must be one of [64, 128, 256, 512]; got 96");
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, dev(DType::f16, {5, 8, 128}), indptr, offsets), "argument 'k_rope'");
  // One block per (request, head) in grid x: batch x 40 heads must stay below 2^31.
  const int64_t most = int64_t{0x7fffffff} / 40;
  apply_rope(rt(), q, k, qo, ko, dev(DType::i32, {most + 1}), dev(DType::i32, {most}));
  EXPECT_EQ(lines(recorded()).size(), 1u);
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, ko, dev(DType::i32, {most + 2}), dev(DType::i32, {most + 1})),
                 "argument 'offsets' must have fewer than 2^31 / (H_q + H_k) = 53687091 requests");
  // An output onto an index array, an output half a head off its input.
  TensorView onto = ko;
  onto.data = indptr.data;
  EXPECT_INVALID(apply_rope(rt(), q, k, qo, onto, indptr, offsets), "argument 'k_rope'");
  TensorView shifted = q;
  shifted.data = static_cast<uint16_t*>(q.data) + 64;
  EXPECT_INVALID(apply_rope(rt(), q, k, shifted, ko, indptr, offsets), "'q_rope'");
  EXPECT_INVALID(apply_llama31_rope(rt(), q, k, qo, ko, indptr, offsets, {}, {.low_freq_factor = 4, .high_freq_factor = 4}),
                 "apply_llama31_rope: argument 'high_freq_factor' must be above low_freq_factor (4.000000)");
  EXPECT_INVALID(apply_llama31_rope(rt(), q, k, qo, ko, indptr, offsets, {}, {.old_context_length = 0}),
                 "argument 'old_context_length' must be finite and > 0");
  expect_nothing_called();
}

TEST_F(RopeOps, RopeQuantizeRulesAreCheckedBeforeTheCall) {
  const MlaViews m = mla_views(6);
  auto with = [&](auto edit, RopeQuantizeOptions o = {}) {
    RopeQuantizeTensors a = m.args();
    edit(a);
    rope_quantize_fp8(rt(), a, o);
  };
  auto same = [](RopeQuantizeTensors&) {};
  const TensorView bf16_out = dev(DType::bf16, {6, 128, 64}), e5m2_k = dev(DType::e5m2, {6, 64});
  EXPECT_INVALID(with([&](auto& a) { a.q_rope_out = bf16_out; }),
                 "rope_quantize_fp8: argument 'q_rope_out' must have dtype e4m3 or e5m2");
  EXPECT_INVALID(with([&](auto& a) { a.k_rope_out = e5m2_k; }), "argument 'k_rope_out'");  // not q_rope_out's dtype
  const TensorView f16_k = dev(DType::f16, {6, 64});
  EXPECT_INVALID(with([&](auto& a) { a.k_rope = f16_k; }), "argument 'k_rope'");  // not q_rope's dtype
  const TensorView f32_q = dev(DType::f32, {6, 128, 64});
  EXPECT_INVALID(with([&](auto& a) { a.q_rope = f32_q; }), "argument 'q_rope' must have dtype f16 or bf16");
  const TensorView k4 = dev(DType::bf16, {6, 1, 1, 64});
  EXPECT_INVALID(with([&](auto& a) { a.k_rope = k4; }),
                 "argument 'k_rope' must have rank 3 ([tokens, H_k, rope_dim]) or 2 (MLA: [tokens, rope_dim])");
  const TensorView k_nope3 = dev(DType::bf16, {6, 1, 512});
  EXPECT_INVALID(with([&](auto& a) { a.k_nope = &k_nope3; }), "argument 'k_nope' must have rank 2");
  const TensorView short_nope = dev_strided(DType::bf16, {6, 500}, {512, 1});
  EXPECT_INVALID(with([&](auto& a) { a.k_nope = &short_nope; }),
                 "argument 'k_nope' must have size 512 in dim 1 (= q_nope.size(2))");
  const TensorView wrong_out = dev(DType::e4m3, {6, 128, 500});
  EXPECT_INVALID(with([&](auto& a) { a.q_nope_out = &wrong_out; }), "argument 'q_nope_out'");
  EXPECT_INVALID(with([&](auto& a) { a.k_nope_out = nullptr; }),
                 "argument 'q_nope' must be given with k_nope, q_nope_out and k_nope_out, or all four absent");
  // rope_dim: a multiple of 32 for NeoX (each 16-element vector in one half), of 16 with interleave.
  const TensorView q48 = dev(DType::bf16, {6, 128, 48}), k48 = dev(DType::bf16, {6, 48});
  const TensorView q48o = dev(DType::e4m3, {6, 128, 48}), k48o = dev(DType::e4m3, {6, 48});
  const TensorView cache48 = dev(DType::f32, {64, 48});
  auto rope48 = [&](auto& a) {
    a.q_rope = q48, a.k_rope = k48, a.q_rope_out = q48o, a.k_rope_out = k48o, a.cos_sin_cache = cache48;
  };
  EXPECT_INVALID(with(rope48), "argument 'q_rope.size(2) (rope_dim)' must be a multiple of 32 (the kernel's 16-element "
                               "vectors, in each half) in [32, 16384]; got 48");
  with(rope48, {.interleave = true});
  EXPECT_EQ(lines(recorded()).size(), 1u);
  EXPECT_INVALID(with([&](auto& a) { a.cos_sin_cache = cache48; }),
                 "argument 'cos_sin_cache' must have size 64 in dim 1 (= q_rope.size(2) (rope_dim))");
  const TensorView cache_bf16 = dev(DType::bf16, {64, 64});
  EXPECT_INVALID(with([&](auto& a) { a.cos_sin_cache = cache_bf16; }), "argument 'cos_sin_cache' must have dtype f32");
  const TensorView pos_short = dev(DType::i32, {5}), pos_f = dev(DType::f32, {6});
  EXPECT_INVALID(with([&](auto& a) { a.pos_ids = pos_short; }), "argument 'pos_ids' must have size 6");
  EXPECT_INVALID(with([&](auto& a) { a.pos_ids = pos_f; }), "argument 'pos_ids' must have dtype");
  // fp8 outputs move 16-byte vectors: strides before the last dim multiples of 16 elements; inputs of 8.
  const TensorView out_8 = dev_strided(DType::e4m3, {6, 128, 64}, {128 * 72, 72, 1});
  EXPECT_INVALID(with([&](auto& a) { a.q_rope_out = out_8; }),
                 "argument 'q_rope_out' must have strides before the last dim that are multiples of 16 elements");
  const TensorView in_4 = dev_strided(DType::bf16, {6, 64}, {68, 1});
  EXPECT_INVALID(with([&](auto& a) { a.k_rope = in_4; }),
                 "argument 'k_rope' must have strides before the last dim that are multiples of 8 elements");
  const TensorView in_far = dev_strided(DType::bf16, {6, 64}, {int64_t{1} << 32, 1});
  EXPECT_INVALID(with([&](auto& a) { a.k_rope = in_far; }), "argument 'k_rope' must have strides below 2^32 elements");
  TensorView unaligned = m.k_rope_out;
  unaligned.data = static_cast<uint8_t*>(unaligned.data) + 8;
  EXPECT_INVALID(with([&](auto& a) { a.k_rope_out = unaligned; }), "argument 'k_rope_out' must have a data pointer aligned to 16 bytes");
  // The grid's y: (H_q + H_k) x (1 + ceil(no_rope_dim / rope_dim)) blocks.
  const TensorView qr_many = dev(DType::bf16, {6, 2000, 16}), qn_many = dev(DType::bf16, {6, 2000, 512});
  const TensorView qro_many = dev(DType::e4m3, {6, 2000, 16}), qno_many = dev(DType::e4m3, {6, 2000, 512});
  const TensorView kr16 = dev(DType::bf16, {6, 16}), kro16 = dev(DType::e4m3, {6, 16}), cache16 = dev(DType::f32, {8, 16});
  EXPECT_INVALID(with([&](auto& a) {
                   a.q_rope = qr_many, a.q_nope = &qn_many, a.q_rope_out = qro_many, a.q_nope_out = &qno_many;
                   a.k_rope = kr16, a.k_rope_out = kro16, a.cos_sin_cache = cache16;
                 }, {.interleave = true}),
                 "argument 'q_nope' must give (H_q + H_k) x (1 + ceil(no_rope_dim / rope_dim)) <= 65535 blocks");
  // int32 positions index the cache in 32-bit arithmetic.
  const TensorView huge_cache = dev(DType::f32, {(int64_t{1} << 26) + 1, 64}), pos32 = dev(DType::i32, {6});
  EXPECT_INVALID(with([&](auto& a) { a.cos_sin_cache = huge_cache, a.pos_ids = pos32; }),
                 "argument 'cos_sin_cache' must have at most 2^32 elements with int32 pos_ids");
  with([&](auto& a) { a.cos_sin_cache = huge_cache; });  // int64 positions: fine
  EXPECT_EQ(lines(recorded()).size(), 1u);
  for (double bad : {0.0, -1.0, std::nan(""), double(INFINITY)})
    EXPECT_INVALID(with(same, {.quant_scale_q = bad}), "argument 'quant_scale_q' must be finite and > 0");
  EXPECT_INVALID(with(same, {.quant_scale_kv = 1e39}), "argument 'quant_scale_kv' must be at most FLT_MAX");
  // No output may share a byte with any argument (fp8 outputs are never in place).
  TensorView onto_input = m.k_nope_out;
  onto_input.data = m.k_nope.data;
  EXPECT_INVALID(with([&](auto& a) { a.k_nope_out = &onto_input; }), "argument 'k_nope_out'");
  TensorView onto_output = m.k_rope_out;
  onto_output.data = m.q_rope_out.data;
  EXPECT_INVALID(with([&](auto& a) { a.k_rope_out = onto_output; }), "argument 'q_rope_out'");
  expect_nothing_called();
}

// ---------------------------------------------------------------------------------------------------------------
// C ABI

TEST_F(RopeOps, CAbiEntriesReachTheModuleAndReportErrors) {
  ::setenv("FLASHCPP_TVM_FFI_LIB", FLASHCPP_TVM_FFI_LIB, 1);
  ::setenv("FLASHCPP_MODULE_PATH", dir_.c_str(), 1);
  ::setenv("FLASHCPP_JIT", "off", 1);
  auto q = dev(DType::bf16, {5, 4, 128}), k = dev(DType::bf16, {5, 2, 128});
  auto qo = dev(DType::bf16, {5, 4, 128}), ko = dev(DType::bf16, {5, 2, 128});
  auto indptr = dev(DType::i64, {3}), offsets = dev(DType::i64, {2});
  const auto cq = to_c(q), ck = to_c(k), cqo = to_c(qo), cko = to_c(ko), ci = to_c(indptr), cof = to_c(offsets);
  ASSERT_EQ(flashcpp_apply_rope(&cq, &ck, &cqo, &cko, &ci, &cof, 64, 1, 0, 0, nullptr), FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  expect_args(one_call("apply_rope"), {T(q), T(k), T(qo), T(ko), T(indptr), T(offsets), I(64), B(true), F(1), F(1e4)});
  ASSERT_EQ(flashcpp_apply_llama31_rope(&cq, &ck, &cqo, &cko, &ci, &cof, 0, 0, 8, 5e5, 0, 0, 0, nullptr),
            FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  expect_args(one_call("apply_llama31_rope"), {T(q), T(k), T(qo), T(ko), T(indptr), T(offsets), I(128), B(false), F(8),
                                               F(5e5), F(1), F(4), F(8192)});
  EXPECT_EQ(flashcpp_apply_rope(&cq, &ck, &cqo, &cko, &ci, nullptr, 0, 0, 0, 0, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("apply_rope: argument 'offsets'"), std::string::npos)
      << flashcpp_last_error();
  EXPECT_EQ(flashcpp_apply_llama31_rope(&cq, &ck, &cqo, &cko, &ci, &cof, 0, 2, 0, 0, 0, 0, 0, nullptr),
            FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("interleave"), std::string::npos) << flashcpp_last_error();

  const MlaViews m = mla_views(3);
  const auto c_qr = to_c(m.q_rope), c_kr = to_c(m.k_rope), c_qn = to_c(m.q_nope), c_kn = to_c(m.k_nope);
  const auto c_qro = to_c(m.q_rope_out), c_kro = to_c(m.k_rope_out), c_qno = to_c(m.q_nope_out);
  const auto c_kno = to_c(m.k_nope_out), c_cache = to_c(m.cache), c_pos = to_c(m.pos);
  flashcpp_rope_quantize_args a = FLASHCPP_ROPE_QUANTIZE_ARGS_INIT;
  a.q_rope = &c_qr, a.k_rope = &c_kr, a.q_rope_out = &c_qro, a.k_rope_out = &c_kro;
  a.q_nope = &c_qn, a.k_nope = &c_kn, a.q_nope_out = &c_qno, a.k_nope_out = &c_kno;
  a.cos_sin_cache = &c_cache, a.pos_ids = &c_pos;
  a.quant_scale_kv = 0.25;
  a.enable_pdl = 1;
  ASSERT_EQ(flashcpp_rope_quantize_fp8(&a, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  expect_args(one_call("rope_quantize"),
              {T(m.q_rope), T(m.k_rope), T(m.q_nope), T(m.k_nope), T(m.q_rope_out), T(m.k_rope_out), T(m.q_nope_out),
               T(m.k_nope_out), T(m.cache), T(m.pos), F(1), F(0.25), B(false), B(true)});
  flashcpp_rope_quantize_args none = a;  // no nope part: all four NULL
  none.q_nope = none.k_nope = none.q_nope_out = none.k_nope_out = nullptr;
  ASSERT_EQ(flashcpp_rope_quantize_fp8(&none, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  EXPECT_EQ(lines(recorded()).size(), 1u);
  flashcpp_rope_quantize_args some = a;
  some.k_nope = nullptr;
  EXPECT_EQ(flashcpp_rope_quantize_fp8(&some, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("rope_quantize_fp8: argument 'q_nope' must be given with"),
            std::string::npos)
      << flashcpp_last_error();
  flashcpp_rope_quantize_args big = a;
  big.struct_size = sizeof(a) + 8;
  EXPECT_EQ(flashcpp_rope_quantize_fp8(&big, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("argument 'args' has struct_size"), std::string::npos)
      << flashcpp_last_error();
  EXPECT_EQ(flashcpp_rope_quantize_fp8(nullptr, nullptr), FLASHCPP_INVALID_ARGUMENT);
  expect_nothing_called();
}

// ---------------------------------------------------------------------------------------------------------------
// FP8 codecs (round to nearest even, saturating) against values worked out by hand

TEST(RopeReference, Fp8CodecsRoundToNearestEvenAndSaturate) {
  using reference::e4m3_to_float, reference::float_to_e4m3, reference::e5m2_to_float, reference::float_to_e5m2;
  // e4m3fn: 1 = 0.0111.000; 448 = 0.1111.110 (the largest finite); 2^-9 the smallest subnormal.
  EXPECT_EQ(float_to_e4m3(1.0), 0x38);
  EXPECT_EQ(float_to_e4m3(-1.0), 0xb8);
  EXPECT_EQ(float_to_e4m3(448.0), 0x7e);
  EXPECT_EQ(float_to_e4m3(500.0), 0x7e);       // beyond the largest finite: saturates
  EXPECT_EQ(float_to_e4m3(1e30), 0x7e);
  EXPECT_EQ(float_to_e4m3(-INFINITY), 0xfe);  // inf too (satfinite)
  EXPECT_EQ(float_to_e4m3(std::nan("")), 0x7f);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0, -9)), 0x01);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0, -11)), 0x00);  // a quarter of the smallest subnormal: rounds to 0
  EXPECT_EQ(float_to_e4m3(3 * std::ldexp(1.0, -11)), 0x01);
  EXPECT_EQ(float_to_e4m3(1.0625), 0x38);  // the tie between 1 (mantissa 000) and 1.125 (001): even
  EXPECT_EQ(float_to_e4m3(1.1875), 0x3a);  // between 1.125 (001) and 1.25 (010): even
  EXPECT_EQ(float_to_e4m3(1.05), 0x38);
  EXPECT_EQ(float_to_e4m3(1.05 + 0.0625), 0x39);
  EXPECT_EQ(float_to_e4m3(15.5), 0x58);  // the tie between 15 (0.1010.111, 0x57) and 16 (0.1011.000): even
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x78), 256.0f);  // exponent 1111 holds finite values in e4m3fn
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  // e5m2: 1 = 0.01111.00; 57344 = 0.11110.11; 0.11111.00 is inf.
  EXPECT_EQ(float_to_e5m2(1.0), 0x3c);
  EXPECT_EQ(float_to_e5m2(57344.0), 0x7b);
  EXPECT_EQ(float_to_e5m2(1e6), 0x7b);
  EXPECT_EQ(float_to_e5m2(INFINITY), 0x7b);
  EXPECT_EQ(float_to_e5m2(std::ldexp(1.0, -16)), 0x01);
  EXPECT_EQ(float_to_e5m2(1.125), 0x3c);  // the tie between 1 (00) and 1.25 (01): even
  EXPECT_EQ(float_to_e5m2(1.375), 0x3e);  // between 1.25 (01) and 1.5 (10): even
  EXPECT_EQ(e5m2_to_float(0x7c), INFINITY);
  EXPECT_TRUE(std::isnan(e5m2_to_float(0x7d)));
  // Every finite code decodes and encodes back to itself.
  for (int c = 0; c < 256; ++c) {
    const auto b = static_cast<uint8_t>(c);
    if (!std::isnan(e4m3_to_float(b))) EXPECT_EQ(float_to_e4m3(e4m3_to_float(b)), b) << c;
    if (std::isfinite(e5m2_to_float(b))) EXPECT_EQ(float_to_e5m2(e5m2_to_float(b)), b) << c;
  }
  // reference::store and load go through them.
  uint8_t cell = 0;
  const TensorView t = TensorView::contiguous(&cell, DType::e4m3, Device::cpu(), {1});
  reference::store(t, 0, 1000.0);
  EXPECT_EQ(cell, 0x7e);
  EXPECT_EQ(reference::load(t, 0), 448.0);
}

// ---------------------------------------------------------------------------------------------------------------
// The float64 references against values computed here

TEST(RopeReference, RaggedRopeRotatesEachRequestFromItsOffsetAndLeavesOtherRows) {
  // 6 tokens, 2 q heads and 1 k head of 64; requests [1, 3) from position 10 and [3, 5) from 0: tokens 0 and 5 are
  // outside every request.
  HostF64 q({6, 2, 64}), k({6, 1, 64}), qo({6, 2, 64}), ko({6, 1, 64});
  for (size_t i = 0; i < q.data.size(); ++i) q.data[i] = std::sin(0.37 * static_cast<double>(i) + 0.1);
  for (size_t i = 0; i < k.data.size(); ++i) k.data[i] = std::cos(0.21 * static_cast<double>(i));
  for (bool llama : {false, true})
    for (bool i64 : {false, true}) {
      std::fill(qo.data.begin(), qo.data.end(), -7.0);
      std::fill(ko.data.begin(), ko.data.end(), -7.0);
      const int64_t ip[3] = {1, 3, 5}, of[2] = {10, 0};
      const int32_t ip32[3] = {1, 3, 5}, of32[2] = {10, 0};
      const TensorView indptr = i64 ? TensorView::contiguous(const_cast<int64_t*>(ip), DType::i64, Device::cpu(), {3})
                                    : TensorView::contiguous(const_cast<int32_t*>(ip32), DType::i32, Device::cpu(), {3});
      const TensorView offsets = i64 ? TensorView::contiguous(const_cast<int64_t*>(of), DType::i64, Device::cpu(), {2})
                                     : TensorView::contiguous(const_cast<int32_t*>(of32), DType::i32, Device::cpu(), {2});
      const RopeOptions o{.rotary_dim = 32, .interleave = i64, .rope_scale = 8, .rope_theta = 5e5};
      if (llama) reference::apply_llama31_rope(q.view(), k.view(), qo.view(), ko.view(), indptr, offsets, o);
      else reference::apply_rope(q.view(), k.view(), qo.view(), ko.view(), indptr, offsets, o);
      // The same rotation through pos_ids {_, 10, 11, 0, 1, _}.
      const int32_t pos[6] = {0, 10, 11, 0, 1, 0};
      HostF64 qp({6, 2, 64}), kp({6, 1, 64});
      const TensorView p = TensorView::contiguous(const_cast<int32_t*>(pos), DType::i32, Device::cpu(), {6});
      if (llama) reference::apply_llama31_rope_pos_ids(q.view(), k.view(), qp.view(), kp.view(), p, o);
      else reference::apply_rope_pos_ids(q.view(), k.view(), qp.view(), kp.view(), p, o);
      for (int64_t t = 0; t < 6; ++t)
        for (int64_t j = 0; j < 128; ++j) {
          const double want = (t == 0 || t == 5) ? -7.0 : qp.data[t * 128 + j];
          ASSERT_EQ(qo.data[t * 128 + j], want) << llama << i64 << " token " << t << " dim " << j;
          if (j < 64) ASSERT_EQ(ko.data[t * 64 + j], (t == 0 || t == 5) ? -7.0 : kp.data[t * 64 + j]);
        }
      // Position 10 really rotates: token 1's first pair differs from its input.
      EXPECT_GT(std::fabs(qo.data[128] - q.data[128]), 1e-6);
    }
  // By hand: request 0 from position 3 (one token, one head of 64 dims, NeoX over all 64, theta 100).
  HostF64 q1({1, 1, 64}), o1({1, 1, 64});
  for (int i = 0; i < 64; ++i) q1.data[i] = 1.0 + 0.01 * i;
  const int32_t ip[2] = {0, 1}, of[1] = {3};
  reference::apply_rope(q1.view(), q1.view(), o1.view(), o1.view(),
                        TensorView::contiguous(const_cast<int32_t*>(ip), DType::i32, Device::cpu(), {2}),
                        TensorView::contiguous(const_cast<int32_t*>(of), DType::i32, Device::cpu(), {1}),
                        {.rope_theta = 100});
  const double a = 3.0 * std::pow(100.0, -2.0 * 5 / 64);  // dim 5 pairs with dim 37, frequency index 5
  EXPECT_NEAR(o1.data[5], q1.data[5] * std::cos(a) - q1.data[37] * std::sin(a), 1e-12);
  EXPECT_NEAR(o1.data[37], q1.data[37] * std::cos(a) + q1.data[5] * std::sin(a), 1e-12);
  // indptr past the tokens, or decreasing, is refused.
  const int32_t bad[3] = {0, 4, 7}, down[3] = {0, 4, 2}, two[2] = {0, 0};
  for (const int32_t* b : {bad, down})
    EXPECT_THROW(reference::apply_rope(q.view(), k.view(), qo.view(), ko.view(),
                                       TensorView::contiguous(const_cast<int32_t*>(b), DType::i32, Device::cpu(), {3}),
                                       TensorView::contiguous(const_cast<int32_t*>(two), DType::i32, Device::cpu(), {2})),
                 Error);
}

// A host cos/sin table of `rows` positions over rope_dim rd: row r holds cos(r f_p) for p < rd / 2, then sin(r f_p), with
// f_p = theta^(-2p / rd).
HostF64 cos_sin_table(int64_t rows, int64_t rd, double theta) {
  HostF64 cache({rows, rd});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t p = 0; p < rd / 2; ++p) {
      const double a = static_cast<double>(r) * std::pow(theta, -2.0 * static_cast<double>(p) / static_cast<double>(rd));
      cache.data[r * rd + p] = std::cos(a);
      cache.data[r * rd + rd / 2 + p] = std::sin(a);
    }
  return cache;
}

TEST(RopeReference, RopeQuantizeRotatesScalesAndRoundsOnce) {
  // 3 tokens, H_q 2, rope_dim 8, no_rope_dim 5; k with one head as rank 3 (GQA) and as rank 2 (MLA) must agree.
  const int64_t n = 3, hq = 2, rd = 8, nd = 5, rows = 4;
  HostF64 qr({n, hq, rd}), qn({n, hq, nd}), kr({n, 1, rd}), kn({n, 1, nd}), cache = cos_sin_table(rows, rd, 100.0);
  for (size_t i = 0; i < qr.data.size(); ++i) qr.data[i] = std::sin(0.7 * static_cast<double>(i) + 0.3);
  for (size_t i = 0; i < qn.data.size(); ++i) qn.data[i] = std::cos(0.9 * static_cast<double>(i));
  for (size_t i = 0; i < kr.data.size(); ++i) kr.data[i] = std::sin(1.3 * static_cast<double>(i) - 0.2);
  for (size_t i = 0; i < kn.data.size(); ++i) kn.data[i] = 0.25 * static_cast<double>(i) - 1.0;
  const int64_t pos[3] = {2, 0, 3};
  const TensorView pv = TensorView::contiguous(const_cast<int64_t*>(pos), DType::i64, Device::cpu(), {3});
  // The expected value of element j of a rotary row x at position `at`.
  auto rotated = [&](const double* x, int64_t at, int64_t j, bool interleave) {
    const int64_t half = rd / 2;
    const bool first = interleave ? j % 2 == 0 : j < half;
    const int64_t p = interleave ? j / 2 : j % half;
    const int64_t partner = interleave ? (first ? j + 1 : j - 1) : (first ? j + half : j - half);
    const double a = static_cast<double>(at) * std::pow(100.0, -2.0 * static_cast<double>(p) / rd);
    return x[j] * std::cos(a) + (first ? -1.0 : 1.0) * x[partner] * std::sin(a);
  };
  for (bool interleave : {false, true}) {
    const RopeQuantizeOptions o{.interleave = interleave, .quant_scale_q = 0.5, .quant_scale_kv = 4};
    HostF64 qro({n, hq, rd}), qno({n, hq, nd}), kro({n, 1, rd}), kno({n, 1, nd});
    TensorView vqn = qn.view(), vkn = kn.view(), vqno = qno.view(), vkno = kno.view();
    reference::rope_quantize_fp8({qr.view(), kr.view(), qro.view(), kro.view(), &vqn, &vkn, &vqno, &vkno, cache.view(), pv},
                                 o);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t j = 0; j < rd; ++j)
          EXPECT_NEAR(qro.data[(t * hq + h) * rd + j], 0.5 * rotated(&qr.data[(t * hq + h) * rd], pos[t], j, interleave),
                      1e-12);
      for (int64_t j = 0; j < rd; ++j)
        EXPECT_NEAR(kro.data[t * rd + j], 4 * rotated(&kr.data[t * rd], pos[t], j, interleave), 1e-12);
    }
    for (size_t i = 0; i < qno.data.size(); ++i) EXPECT_EQ(qno.data[i], 0.5 * qn.data[i]);
    for (size_t i = 0; i < kno.data.size(); ++i) EXPECT_EQ(kno.data[i], 4 * kn.data[i]);

    // e4m3 outputs (k rank 2, MLA's layout): the exact values rounded once.
    std::vector<uint8_t> q8(qro.data.size()), k8(kro.data.size()), qn8(qno.data.size()), kn8(kno.data.size());
    auto u8 = [](std::vector<uint8_t>& v, DType t, std::initializer_list<int64_t> shape) {
      return TensorView::contiguous(v.data(), t, Device::cpu(), shape);
    };
    const TensorView kr2 = TensorView::contiguous(kr.data.data(), DType::f64, Device::cpu(), {n, rd});
    const TensorView kn2 = TensorView::contiguous(kn.data.data(), DType::f64, Device::cpu(), {n, nd});
    const TensorView q8v = u8(q8, DType::e4m3, {n, hq, rd}), k8v = u8(k8, DType::e4m3, {n, rd});
    const TensorView qn8v = u8(qn8, DType::e4m3, {n, hq, nd}), kn8v = u8(kn8, DType::e4m3, {n, nd});
    reference::rope_quantize_fp8({qr.view(), kr2, q8v, k8v, &vqn, &kn2, &qn8v, &kn8v, cache.view(), pv}, o);
    for (size_t i = 0; i < q8.size(); ++i) EXPECT_EQ(q8[i], reference::float_to_e4m3(qro.data[i])) << i;
    for (size_t i = 0; i < k8.size(); ++i) EXPECT_EQ(k8[i], reference::float_to_e4m3(kro.data[i])) << i;
    for (size_t i = 0; i < qn8.size(); ++i) EXPECT_EQ(qn8[i], reference::float_to_e4m3(qno.data[i])) << i;
    for (size_t i = 0; i < kn8.size(); ++i) EXPECT_EQ(kn8[i], reference::float_to_e4m3(kno.data[i])) << i;
  }
  // A scale that takes values past 448 saturates them; no nope part at all is fine.
  std::vector<uint8_t> q8(static_cast<size_t>(n * hq * rd)), k8(static_cast<size_t>(n * rd));
  const TensorView q8v = TensorView::contiguous(q8.data(), DType::e4m3, Device::cpu(), {n, hq, rd});
  const TensorView k8v = TensorView::contiguous(k8.data(), DType::e4m3, Device::cpu(), {n, 1, rd});
  reference::rope_quantize_fp8({.q_rope = qr.view(), .k_rope = kr.view(), .q_rope_out = q8v, .k_rope_out = k8v,
                                .cos_sin_cache = cache.view(), .pos_ids = pv},
                               {.quant_scale_q = 1e4, .quant_scale_kv = 1e4});
  int saturated = 0;
  for (uint8_t b : q8) saturated += (b & 0x7f) == 0x7e;
  EXPECT_GT(saturated, 20);
  for (uint8_t b : q8) EXPECT_NE(b & 0x7f, 0x7f);  // never NaN
  // A position outside the cache is refused.
  const int64_t far[3] = {0, 4, 1};
  EXPECT_THROW(reference::rope_quantize_fp8({.q_rope = qr.view(), .k_rope = kr.view(), .q_rope_out = q8v,
                                             .k_rope_out = k8v, .cos_sin_cache = cache.view(),
                                             .pos_ids = TensorView::contiguous(const_cast<int64_t*>(far), DType::i64,
                                                                               Device::cpu(), {3})}),
               Error);
}

// ---------------------------------------------------------------------------------------------------------------
// rope_quantize_append_paged_kv_cache

// A GQA step (5 tokens, H_q 8, H_k 2, rope 64 + nope 128) appending to an NHD fp8 cache of 4 pages of 16, and a
// DeepSeek MLA step (3 tokens, H_q 16, one latent head, 64 + 512) appending to ckv/kpe caches of 3 pages of 64.
struct AppendViews {
  TensorView qr, kr, qn, kn, v, qro, qno, cs, pos, bi, positions;
  PagedKvCache kv;
  PagedMlaKvCache mla;
  RopeQuantizeAppendTensors gqa() const {
    return {.q_rope = qr, .k_rope = kr, .q_nope = qn, .k_nope = kn, .v = &v, .q_rope_out = qro, .q_nope_out = qno,
            .cos_sin_cache = cs, .pos_ids = pos, .batch_indices = bi, .positions = positions, .kv_cache = &kv};
  }
};

class RopeAppendOps : public RopeOps {
 protected:
  static AppendViews gqa_views(DType out = DType::e4m3) {
    AppendViews a;
    a.qr = dev(DType::bf16, {5, 8, 64}), a.kr = dev(DType::bf16, {5, 2, 64});
    a.qn = dev(DType::bf16, {5, 8, 128}), a.kn = dev(DType::bf16, {5, 2, 128});
    a.v = dev(DType::bf16, {5, 2, 192});
    a.qro = dev(out, {5, 8, 64}), a.qno = dev(out, {5, 8, 128});
    a.cs = dev(DType::f32, {100, 64}), a.pos = dev(DType::i32, {5});
    a.bi = dev(DType::i32, {5}), a.positions = dev(DType::i32, {5});
    a.kv = {dev(out, {4, 16, 2, 192}), dev(out, {4, 16, 2, 192}), dev(DType::i32, {4}), dev(DType::i32, {3}),
            dev(DType::i32, {2}), KvLayout::nhd};
    return a;
  }
  struct Mla {
    TensorView qr, kr, qn, kn, qro, qno, cs, pos, bi, positions;
    PagedMlaKvCache cache;
    RopeQuantizeAppendTensors args() const {
      return {.q_rope = qr, .k_rope = kr, .q_nope = qn, .k_nope = kn, .q_rope_out = qro, .q_nope_out = qno,
              .cos_sin_cache = cs, .pos_ids = pos, .batch_indices = bi, .positions = positions, .mla_cache = &cache};
    }
  };
  static Mla mla_append_views() {
    Mla m;
    m.qr = dev(DType::bf16, {3, 16, 64}), m.kr = dev(DType::bf16, {3, 64});
    m.qn = dev(DType::bf16, {3, 16, 512}), m.kn = dev(DType::bf16, {3, 512});
    m.qro = dev(DType::e4m3, {3, 16, 64}), m.qno = dev(DType::e4m3, {3, 16, 512});
    m.cs = dev(DType::f32, {4096, 64}), m.pos = dev(DType::i64, {3});
    m.bi = dev(DType::i32, {3}), m.positions = dev(DType::i32, {3});
    m.cache = {dev(DType::e4m3, {3, 64, 512}), dev(DType::e4m3, {3, 64, 64}), dev(DType::i32, {3}), dev(DType::i32, {3}),
               dev(DType::i32, {2})};
    return m;
  }
};

TEST_F(RopeAppendOps, PassesFlashInfersArgumentsForBothCaches) {
  // GQA/MHA: the k/v caches, no MLA caches (tensors without data), the cache's layout code and page size.
  AppendViews g = gqa_views(DType::e5m2);
  g.kv.layout = KvLayout::hnd;
  g.kv.k_cache = dev(DType::e5m2, {4, 2, 16, 192}), g.kv.v_cache = dev(DType::e5m2, {4, 2, 16, 192});
  rope_quantize_append_paged_kv_cache(rt(), g.gqa(), {.interleave = true, .quant_scale_q = 0.5, .quant_scale_kv = 2});
  const TensorView no_mla = TensorView::contiguous(nullptr, DType::e5m2, g.qr.device, {0, 1, 16});
  expect_args(one_call("rope_quantize_append_paged_kv_cache"),
              {T(g.qr), T(g.kr), T(g.qn), T(g.kn), T(g.v), T(g.qro), T(g.qno), T(g.cs), T(g.pos), T(g.kv.k_cache),
               T(g.kv.v_cache), T(no_mla), T(no_mla), T(g.kv.indices), T(g.kv.indptr), T(g.bi), T(g.positions), I(1),
               I(16), F(0.5), F(2), B(true), B(false)});
  // MLA: k's rank-2 parts as one head ([tokens, 1, d]), no v (a view without elements), no k/v caches.
  const Mla m = mla_append_views();
  rope_quantize_append_paged_kv_cache(rt(), m.args(), {.enable_pdl = true});
  auto one_head = [](const TensorView& t) {
    return TensorView::strided(t.data, t.dtype, t.device, {t.shape[0], 1, t.shape[1]}, {t.strides[0], t.shape[1], 1});
  };
  const TensorView no_v = TensorView::contiguous(nullptr, DType::bf16, m.qr.device, {0, 1, 576});
  const TensorView no_kv = TensorView::contiguous(nullptr, DType::e4m3, m.qr.device, {0, 1, 1, 16});
  expect_args(one_call("rope_quantize_append_paged_kv_cache"),
              {T(m.qr), T(one_head(m.kr)), T(m.qn), T(one_head(m.kn)), T(no_v), T(m.qro), T(m.qno), T(m.cs), T(m.pos),
               T(no_kv), T(no_kv), T(m.cache.ckv_cache), T(m.cache.kpe_cache), T(m.cache.indices), T(m.cache.indptr),
               T(m.bi), T(m.positions), I(0), I(64), F(1), F(1), B(false), B(true)});
  // No token: nothing launched.
  AppendViews empty = gqa_views();
  empty.qr = dev(DType::bf16, {0, 8, 64}), empty.kr = dev(DType::bf16, {0, 2, 64});
  empty.qn = dev(DType::bf16, {0, 8, 128}), empty.kn = dev(DType::bf16, {0, 2, 128}), empty.v = dev(DType::bf16, {0, 2, 192});
  empty.qro = dev(DType::e4m3, {0, 8, 64}), empty.qno = dev(DType::e4m3, {0, 8, 128});
  empty.pos = dev(DType::i32, {0}), empty.bi = dev(DType::i32, {0}), empty.positions = dev(DType::i32, {0});
  rope_quantize_append_paged_kv_cache(rt(), empty.gqa());
  expect_nothing_called();
}

TEST_F(RopeAppendOps, RulesAreCheckedBeforeTheCall) {
  const AppendViews g = gqa_views();
  auto with = [&](auto edit, RopeQuantizeOptions o = {}) {
    AppendViews c = g;
    RopeQuantizeAppendTensors a = c.gqa();
    edit(a, c);
    rope_quantize_append_paged_kv_cache(rt(), a, o);
  };
  const char* op = "rope_quantize_append_paged_kv_cache: ";
  const Mla m = mla_append_views();
  EXPECT_INVALID(with([&](auto& a, auto&) { a.mla_cache = &m.cache; }),
                 std::string(op) + "argument 'kv_cache' must be given for GQA/MHA, or mla_cache for MLA: exactly one "
                                   "of the two");
  EXPECT_INVALID(with([&](auto& a, auto&) { a.kv_cache = nullptr; }), "exactly one of the two");
  EXPECT_INVALID(with([&](auto& a, auto&) { a.v = nullptr; }), "argument 'v' must be given with kv_cache");
  const TensorView k2 = dev(DType::bf16, {5, 64});
  EXPECT_INVALID(with([&](auto& a, auto&) { a.k_rope = k2; }),
                 "argument 'k_rope' must have rank 3 with kv_cache ([tokens, H_k, rope_dim])");
  // The nope parts move in rope_dim-wide chunks.
  const TensorView qn96 = dev(DType::bf16, {5, 8, 96}), kn96 = dev(DType::bf16, {5, 2, 96});
  const TensorView qno96 = dev(DType::e4m3, {5, 8, 96});
  EXPECT_INVALID(with([&](auto& a, auto&) { a.q_nope = qn96, a.k_nope = kn96, a.q_nope_out = qno96; }),
                 "argument 'q_nope.size(2) (no_rope_dim)' must be a multiple of rope_dim 64");
  // The cache: q_rope_out's dtype, H_k heads, head_dim rope + nope, 16-element page strides.
  const TensorView e5 = dev(DType::e5m2, {4, 16, 2, 192});
  EXPECT_INVALID(with([&](auto&, auto& c) { c.kv.k_cache = e5, c.kv.v_cache = e5; }),
                 "argument 'k_cache' must have the dtype of 'q_rope_out'");
  const TensorView three_heads = dev(DType::e4m3, {4, 16, 3, 192});
  EXPECT_INVALID(with([&](auto&, auto& c) { c.kv.k_cache = three_heads, c.kv.v_cache = three_heads; }),
                 "argument 'k_cache' must have H_k 2 heads");
  const TensorView d256 = dev(DType::e4m3, {4, 16, 2, 256});
  EXPECT_INVALID(with([&](auto&, auto& c) { c.kv.k_cache = d256, c.kv.v_cache = d256; }),
                 "must have head_dim rope_dim + no_rope_dim = 192");
  const TensorView odd_pages = dev_strided(DType::e4m3, {4, 16, 2, 192}, {16 * 392, 392, 196, 1});
  EXPECT_INVALID(with([&](auto&, auto& c) { c.kv.k_cache = odd_pages, c.kv.v_cache = odd_pages; }),
                 "argument 'k_cache' must have strides that are multiples of 16 elements");
  const TensorView v_short = dev(DType::bf16, {5, 2, 128});
  EXPECT_INVALID(with([&](auto& a, auto&) { a.v = &v_short; }), "argument 'v'");
  const TensorView bi_i64 = dev(DType::i64, {5}), pos4 = dev(DType::i32, {4});
  EXPECT_INVALID(with([&](auto& a, auto&) { a.batch_indices = bi_i64; }), "argument 'batch_indices'");
  EXPECT_INVALID(with([&](auto& a, auto&) { a.positions = pos4; }), "argument 'positions'");
  EXPECT_INVALID(with([](auto&, auto&) {}, {.quant_scale_kv = 0}), "argument 'quant_scale_kv' must be finite and > 0");
  const TensorView q48 = dev(DType::bf16, {5, 8, 48}), k48 = dev(DType::bf16, {5, 2, 48});
  EXPECT_INVALID(with([&](auto& a, auto&) { a.q_rope = q48, a.k_rope = k48; }),
                 "argument 'q_rope.size(2) (rope_dim)' must be a multiple of 32");
  // Outputs onto inputs, onto the page table, or onto each other.
  TensorView onto_v = g.qno;
  onto_v.data = g.v.data;
  EXPECT_INVALID(with([&](auto& a, auto&) { a.q_nope_out = onto_v; }), "argument 'q_nope_out'");
  EXPECT_INVALID(with([&](auto&, auto& c) { c.kv.v_cache.data = c.kv.indices.data; }), "'v_cache'");
  EXPECT_INVALID(with([&](auto& a, auto& c) { a.q_rope_out.data = c.kv.k_cache.data; }), "'q_rope_out'");
  // MLA: rank-2 k parts, no v, ckv/kpe widths no_rope_dim and rope_dim over the same pages.
  auto with_mla = [&](auto edit) {
    Mla c = m;
    RopeQuantizeAppendTensors a = c.args();
    edit(a, c);
    rope_quantize_append_paged_kv_cache(rt(), a);
  };
  EXPECT_INVALID(with_mla([&](auto& a, auto&) { a.v = &g.v; }), "argument 'v' must be absent with mla_cache");
  const TensorView qn0 = dev(DType::bf16, {3, 16, 0}), kn0 = dev(DType::bf16, {3, 0}), qno0 = dev(DType::e4m3, {3, 16, 0});
  EXPECT_INVALID(with_mla([&](auto& a, auto&) { a.q_nope = qn0, a.k_nope = kn0, a.q_nope_out = qno0; }),
                 "argument 'q_nope.size(2) (no_rope_dim)' must be at least rope_dim with mla_cache");
  const TensorView k3 = dev(DType::bf16, {3, 1, 64});
  EXPECT_INVALID(with_mla([&](auto& a, auto&) { a.k_rope = k3; }), "argument 'k_rope' must have rank 2 with mla_cache");
  const TensorView kpe32 = dev(DType::e4m3, {3, 64, 32}), ckv_pages = dev(DType::e4m3, {2, 64, 512});
  EXPECT_INVALID(with_mla([&](auto&, auto& c) { c.cache.kpe_cache = kpe32; }), "argument 'kpe_cache'");
  EXPECT_INVALID(with_mla([&](auto&, auto& c) { c.cache.ckv_cache = ckv_pages; }), "argument 'kpe_cache'");
  const TensorView ckv_bf16 = dev(DType::bf16, {3, 64, 512});
  EXPECT_INVALID(with_mla([&](auto&, auto& c) { c.cache.ckv_cache = ckv_bf16; }),
                 "argument 'ckv_cache' must have the dtype of 'q_rope_out'");
  const TensorView indptr_long = dev(DType::i32, {4});
  EXPECT_INVALID(with_mla([&](auto&, auto& c) { c.cache.indptr = indptr_long; }), "argument 'indptr'");
  expect_nothing_called();
}

TEST_F(RopeAppendOps, CAbiEntryReachesTheModuleAndReportsErrors) {
  ::setenv("FLASHCPP_TVM_FFI_LIB", FLASHCPP_TVM_FFI_LIB, 1);
  ::setenv("FLASHCPP_MODULE_PATH", dir_.c_str(), 1);
  ::setenv("FLASHCPP_JIT", "off", 1);
  const Mla m = mla_append_views();
  const auto c_qr = to_c(m.qr), c_kr = to_c(m.kr), c_qn = to_c(m.qn), c_kn = to_c(m.kn), c_qro = to_c(m.qro);
  const auto c_qno = to_c(m.qno), c_cs = to_c(m.cs), c_pos = to_c(m.pos), c_bi = to_c(m.bi), c_p = to_c(m.positions);
  const auto c_ckv = to_c(m.cache.ckv_cache), c_kpe = to_c(m.cache.kpe_cache), c_ind = to_c(m.cache.indices);
  const auto c_iptr = to_c(m.cache.indptr), c_lpl = to_c(m.cache.last_page_len);
  const auto cache = c_struct<flashcpp_paged_mla_kv_cache>(&c_ckv, &c_kpe, &c_ind, &c_iptr, &c_lpl);
  flashcpp_rope_quantize_append_args a = FLASHCPP_ROPE_QUANTIZE_APPEND_ARGS_INIT;
  a.q_rope = &c_qr, a.k_rope = &c_kr, a.q_nope = &c_qn, a.k_nope = &c_kn, a.q_rope_out = &c_qro, a.q_nope_out = &c_qno;
  a.cos_sin_cache = &c_cs, a.pos_ids = &c_pos, a.batch_indices = &c_bi, a.positions = &c_p, a.mla_cache = &cache;
  a.quant_scale_q = 0.125;
  ASSERT_EQ(flashcpp_rope_quantize_append_paged_kv_cache(&a, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  const auto got = one_call("rope_quantize_append_paged_kv_cache");
  ASSERT_EQ(got.size(), 24u);  // the call's marker, then its 23 arguments
  EXPECT_EQ(got[12], T(m.cache.ckv_cache));
  EXPECT_EQ(got[20], F(0.125));
  flashcpp_rope_quantize_append_args both = a;  // a GQA cache as well
  const auto c_kc = to_c(m.cache.ckv_cache);
  const auto kv = c_struct<flashcpp_paged_kv_cache>(&c_kc, &c_kc, &c_ind, &c_iptr, &c_lpl, FLASHCPP_KV_NHD);
  both.kv_cache = &kv;
  EXPECT_EQ(flashcpp_rope_quantize_append_paged_kv_cache(&both, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("exactly one of the two"), std::string::npos) << flashcpp_last_error();
  flashcpp_rope_quantize_append_args bad_flag = a;
  bad_flag.interleave = 3;
  EXPECT_EQ(flashcpp_rope_quantize_append_paged_kv_cache(&bad_flag, nullptr), FLASHCPP_INVALID_ARGUMENT);
  flashcpp_rope_quantize_append_args big = a;
  big.struct_size = sizeof(a) + 8;
  EXPECT_EQ(flashcpp_rope_quantize_append_paged_kv_cache(&big, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("argument 'args' has struct_size"), std::string::npos)
      << flashcpp_last_error();
  flashcpp_rope_quantize_append_args no_q = a;
  no_q.q_rope = nullptr;
  EXPECT_EQ(flashcpp_rope_quantize_append_paged_kv_cache(&no_q, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_EQ(flashcpp_rope_quantize_append_paged_kv_cache(nullptr, nullptr), FLASHCPP_INVALID_ARGUMENT);
  expect_nothing_called();
}

TEST(RopeReference, RopeQuantizeAppendWritesQAndTheCacheSlots) {
  // 3 tokens, H_q 2, rope_dim 8, no_rope_dim 8, pos_ids {2, 0, 3}; two requests over pages of 4: request 0 owns pages
  // {2, 0}, request 1 page {1}; token 0 -> request 0 position 5 (page 0, entry 1), token 1 -> request 1 position 2
  // (page 1, entry 2), token 2 -> request 0 position 0 (page 2, entry 0). Caches in f64 (the exact values) and e4m3.
  const int64_t n = 3, hq = 2, rd = 8, nd = 8, d = rd + nd, rows = 4, page = 4, pages = 3;
  HostF64 qr({n, hq, rd}), qn({n, hq, nd}), cache = cos_sin_table(rows, rd, 100.0);
  for (size_t i = 0; i < qr.data.size(); ++i) qr.data[i] = std::sin(0.7 * static_cast<double>(i) + 0.3);
  for (size_t i = 0; i < qn.data.size(); ++i) qn.data[i] = std::cos(0.9 * static_cast<double>(i));
  const int64_t pos[3] = {2, 0, 3};
  const int32_t bi[3] = {0, 1, 0}, at[3] = {5, 2, 0}, indices[3] = {2, 0, 1}, indptr[3] = {0, 2, 3}, last[2] = {2, 3};
  auto i32 = [](const int32_t* p, int64_t len) {
    return TensorView::contiguous(const_cast<int32_t*>(p), DType::i32, Device::cpu(), {len});
  };
  const TensorView pv = TensorView::contiguous(const_cast<int64_t*>(pos), DType::i64, Device::cpu(), {3});
  const int64_t slot_page[3] = {0, 1, 2}, slot_entry[3] = {1, 2, 0};
  for (int64_t h_k : {int64_t{2}, int64_t{0}}) {  // GQA with 2 kv heads; 0: MLA
    const bool mla = h_k == 0;
    const int64_t hk = mla ? 1 : h_k;
    HostF64 kr(mla ? std::vector<int64_t>{n, rd} : std::vector<int64_t>{n, hk, rd});
    HostF64 kn(mla ? std::vector<int64_t>{n, nd} : std::vector<int64_t>{n, hk, nd});
    HostF64 val({n, hk, d});
    for (size_t i = 0; i < kr.data.size(); ++i) kr.data[i] = std::sin(1.3 * static_cast<double>(i) - 0.2);
    for (size_t i = 0; i < kn.data.size(); ++i) kn.data[i] = 0.25 * static_cast<double>(i) - 1.0;
    for (size_t i = 0; i < val.data.size(); ++i) val.data[i] = 0.1 * static_cast<double>(i) - 2.0;
    for (DType dt : {DType::f64, DType::e4m3}) {
      const RopeQuantizeOptions o{.quant_scale_q = 0.5, .quant_scale_kv = 4};
      // The expected q outputs and k parts: rope_quantize_fp8's reference (tested above) into dt.
      const int64_t es = dtype_size(dt);
      std::vector<uint8_t> qro(static_cast<size_t>(n * hq * rd * es)), qno(static_cast<size_t>(n * hq * nd * es));
      std::vector<uint8_t> kro(static_cast<size_t>(n * hk * rd * es)), kno(static_cast<size_t>(n * hk * nd * es));
      std::vector<uint8_t> qro2(qro.size()), qno2(qno.size());
      auto view = [&](std::vector<uint8_t>& b, std::vector<int64_t> shape) {
        return TensorView::contiguous(b.data(), dt, Device::cpu(), std::span<const int64_t>(shape));
      };
      const TensorView qrov = view(qro, {n, hq, rd}), qnov = view(qno, {n, hq, nd});
      const TensorView krov = mla ? view(kro, {n, rd}) : view(kro, {n, hk, rd});
      const TensorView knov = mla ? view(kno, {n, nd}) : view(kno, {n, hk, nd});
      TensorView vqn = qn.view(), vkn = kn.view();
      reference::rope_quantize_fp8({qr.view(), kr.view(), qrov, krov, &vqn, &vkn, &qnov, &knov, cache.view(), pv}, o);
      // The op under test, the caches filled with a marker first.
      std::vector<uint8_t> kc(static_cast<size_t>(pages * page * hk * d * es), 0x55), vc(kc.size(), 0x55);
      std::vector<uint8_t> ckv(static_cast<size_t>(pages * page * nd * es), 0x55), kpe(static_cast<size_t>(pages * page * rd * es), 0x55);
      const PagedKvCache kv{view(kc, {pages, page, hk, d}), view(vc, {pages, page, hk, d}), i32(indices, 3),
                            i32(indptr, 3), i32(last, 2), KvLayout::nhd};
      const PagedMlaKvCache ml{view(ckv, {pages, page, nd}), view(kpe, {pages, page, rd}), i32(indices, 3),
                               i32(indptr, 3), i32(last, 2)};
      const TensorView vv = val.view();
      RopeQuantizeAppendTensors a{.q_rope = qr.view(), .k_rope = kr.view(), .q_nope = qn.view(), .k_nope = kn.view(),
                               .v = mla ? nullptr : &vv, .q_rope_out = view(qro2, {n, hq, rd}),
                               .q_nope_out = view(qno2, {n, hq, nd}), .cos_sin_cache = cache.view(), .pos_ids = pv,
                               .batch_indices = i32(bi, 3), .positions = i32(at, 3)};
      if (mla) a.mla_cache = &ml;
      else a.kv_cache = &kv;
      reference::rope_quantize_append_paged_kv_cache(a, o);
      EXPECT_EQ(qro2, qro) << mla << int(dt);
      EXPECT_EQ(qno2, qno) << mla << int(dt);
      // Each token's k (and v) in its slot, byte for byte; every other slot untouched.
      auto bytes_at = [&](const std::vector<uint8_t>& b, int64_t elem) { return b[static_cast<size_t>(elem * es)]; };
      std::vector<bool> written(static_cast<size_t>(pages * page), false);
      for (int64_t t = 0; t < n; ++t) {
        const int64_t slot = slot_page[t] * page + slot_entry[t];
        written[static_cast<size_t>(slot)] = true;
        for (int64_t h = 0; h < hk; ++h) {
          for (int64_t j = 0; j < d; ++j) {
            const bool rope = j < rd;
            const int64_t src = rope ? (t * hk + h) * rd + j : (t * hk + h) * nd + (j - rd);
            const std::vector<uint8_t>& part = rope ? kro : kno;
            if (mla) {
              const std::vector<uint8_t>& dst = rope ? kpe : ckv;
              const int64_t at_elem = rope ? slot * rd + j : slot * nd + (j - rd);
              ASSERT_TRUE(std::equal(part.begin() + src * es, part.begin() + (src + 1) * es, dst.begin() + at_elem * es))
                  << "MLA token " << t << " dim " << j;
            } else {
              const int64_t at_elem = (slot * hk + h) * d + j;
              ASSERT_TRUE(std::equal(part.begin() + src * es, part.begin() + (src + 1) * es, kc.begin() + at_elem * es))
                  << "GQA k token " << t << " head " << h << " dim " << j;
              const double want_v = 4 * val.data[static_cast<size_t>((t * hk + h) * d + j)];
              const double got_v = reference::load(kv.v_cache, at_elem);
              if (dt == DType::f64) ASSERT_EQ(got_v, want_v);
              else ASSERT_EQ(bytes_at(vc, at_elem), reference::float_to_e4m3(want_v));
            }
          }
        }
      }
      for (int64_t slot = 0; slot < pages * page; ++slot) {
        if (written[static_cast<size_t>(slot)]) continue;
        const std::vector<uint8_t>& probe = mla ? ckv : kc;
        const int64_t width = mla ? nd : hk * d;
        for (int64_t e = 0; e < width * es; ++e) ASSERT_EQ(probe[static_cast<size_t>(slot * width * es + e)], 0x55);
      }
    }
  }
  // A slot outside its request's pages is refused (request 1 owns one page of 4: position 4 is past it).
  HostF64 kr({n, 1, rd}), kn({n, 1, nd}), val({n, 1, d}), qro({n, hq, rd}), qno({n, hq, nd});
  HostF64 kc({pages, page, 1, d}), vc({pages, page, 1, d});
  const int32_t far[3] = {5, 4, 0};
  const PagedKvCache kv{kc.view(), vc.view(), i32(indices, 3), i32(indptr, 3), i32(last, 2), KvLayout::nhd};
  const TensorView vv = val.view();
  EXPECT_THROW(reference::rope_quantize_append_paged_kv_cache(
                   {.q_rope = qr.view(), .k_rope = kr.view(), .q_nope = qn.view(), .k_nope = kn.view(), .v = &vv,
                    .q_rope_out = qro.view(), .q_nope_out = qno.view(), .cos_sin_cache = cache.view(), .pos_ids = pv,
                    .batch_indices = i32(bi, 3), .positions = i32(far, 3), .kv_cache = &kv}),
               Error);
}

}  // namespace
}  // namespace flashcpp::testing
