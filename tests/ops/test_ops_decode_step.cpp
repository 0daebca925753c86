// The decode-step ops without a GPU: gated activations, cascade merges and RoPE. Argument packing against FlashInfer
// 0.6.3's exports (the recording stand-in logs what each receives), the validation rules (each refusal names the
// argument and the rule, and nothing reaches the module), the C ABI entries, and the float64 references against
// values computed independently here.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "flashcpp/activation.hpp"
#include "flashcpp/cascade.hpp"
#include "flashcpp/flashcpp.h"
#include "flashcpp/reference.hpp"
#include "flashcpp/rope.hpp"
#include "ops/ops_fixture.hpp"
#include "support/c_tensor.hpp"

namespace flashcpp::testing {
namespace {

class DecodeStepOps : public OpsFixture {
 protected:
  void SetUp() override {
    OpsFixture::SetUp();
    for (const char* uri : {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "cascade", "rope"}) link(uri);
    (void)recorded();
  }
  void expect_nothing_called() { EXPECT_EQ(recorded(), ""); }
};

// ---------------------------------------------------------------------------------------------------------------
// Packing

TEST_F(DecodeStepOps, EachActivationReachesItsOwnModuleExport) {
  auto in = dev(DType::bf16, {3, 5, 512}), out = dev(DType::bf16, {3, 5, 256});
  silu_and_mul(rt(), out, in, {.enable_pdl = true});
  expect_args(one_call("silu_and_mul"), {T(out), T(in), B(true)});
  auto in16 = dev(DType::f16, {7, 128}), out16 = dev(DType::f16, {7, 64});
  gelu_and_mul(rt(), out16, in16);
  expect_args(one_call("gelu_and_mul"), {T(out16), T(in16), B(false)});
  gelu_tanh_and_mul(rt(), out16, in16);
  expect_args(one_call("gelu_tanh_and_mul"), {T(out16), T(in16), B(false)});
}

TEST_F(DecodeStepOps, EmptyInputsLaunchNothing) {
  silu_and_mul(rt(), dev(DType::bf16, {0, 64}), dev(DType::bf16, {0, 128}));
  merge_state(rt(), dev(DType::bf16, {0, 8, 128}), dev(DType::f32, {0, 8}), dev(DType::bf16, {0, 8, 128}),
              dev(DType::f32, {0, 8}), dev(DType::bf16, {0, 8, 128}), dev(DType::f32, {0, 8}));
  expect_nothing_called();
}

TEST_F(DecodeStepOps, CascadeMergesPassTheirTensorsInFlashInfersOrder) {
  auto va = dev(DType::bf16, {9, 32, 128}), vb = dev(DType::bf16, {9, 32, 128}), vm = dev(DType::bf16, {9, 32, 128});
  auto sa = dev(DType::f32, {9, 32}), sb = dev(DType::f32, {9, 32}), sm = dev(DType::f32, {9, 32});
  merge_state(rt(), va, sa, vb, sb, vm, sm);
  expect_args(one_call("merge_state"), {T(va), T(sa), T(vb), T(sb), T(vm), T(sm)});

  auto mask = dev(DType::u8, {9});
  merge_state_in_place(rt(), va, sa, vb, sb, &mask);
  expect_args(one_call("merge_state_in_place"), {T(va), T(sa), T(vb), T(sb), T(mask)});
  merge_state_in_place(rt(), va, sa, vb, sb);
  expect_args(one_call("merge_state_in_place"), {T(va), T(sa), T(vb), T(sb), "None"});

  auto v4 = dev(DType::f16, {5, 3, 16, 64}), s3 = dev(DType::f32, {5, 3, 16});
  auto vo = dev(DType::f16, {5, 16, 64}), so = dev(DType::f32, {5, 16});
  merge_states(rt(), v4, s3, vo, so);
  expect_args(one_call("merge_states"), {T(v4), T(s3), T(vo), T(so)});
}

TEST_F(DecodeStepOps, RopeOpsPassFlashInfersArguments) {
  // q and k as slices of one fused qkv row [tokens, (32 + 8 + 8) x 128]: dims 0 and 1 strided, disjoint elements.
  auto qkv = dev(DType::bf16, {5, 48 * 128});
  const auto base = static_cast<uint16_t*>(qkv.data);
  const TensorView q = TensorView::strided(base, DType::bf16, qkv.device, {5, 32, 128}, {48 * 128, 128, 1});
  const TensorView k = TensorView::strided(base + 32 * 128, DType::bf16, qkv.device, {5, 8, 128}, {48 * 128, 128, 1});
  auto pos = dev(DType::i32, {5});
  apply_rope_pos_ids(rt(), q, k, q, k, pos, {.rotary_dim = 64, .interleave = true, .rope_scale = 2, .rope_theta = 5e5});
  expect_args(one_call("apply_rope_pos_ids"), {T(q), T(k), T(q), T(k), T(pos), I(64), B(true), F(2), F(5e5)});

  auto qo = dev(DType::bf16, {5, 32, 128}), ko = dev(DType::bf16, {5, 8, 128}), pos64 = dev(DType::i64, {5});
  apply_llama31_rope_pos_ids(rt(), q, k, qo, ko, pos64, {.rope_scale = 8, .rope_theta = 5e5}, {});
  expect_args(one_call("apply_llama31_rope_pos_ids"),
              {T(q), T(k), T(qo), T(ko), T(pos64), I(128), B(false), F(8), F(5e5), F(1), F(4), F(8192)});

  auto cache = dev(DType::f32, {4096, 128});
  apply_rope_with_cos_sin_cache(rt(), q, k, qo, ko, cache, pos, false);
  expect_args(one_call("apply_rope_pos_ids_cos_sin_cache"), {T(q), T(k), T(qo), T(ko), T(cache), T(pos), B(false)});
}

// ---------------------------------------------------------------------------------------------------------------
// Validation: each refusal names the argument and the rule; nothing reaches the module.

TEST_F(DecodeStepOps, ActivationRulesAreCheckedBeforeTheCall) {
  auto in = dev(DType::bf16, {4, 256}), out = dev(DType::bf16, {4, 128});
  EXPECT_INVALID(silu_and_mul(rt(), dev(DType::bf16, {4, 64}), in), "silu_and_mul: argument 'out' must have size 128 in dim 1");
  EXPECT_INVALID(silu_and_mul(rt(), dev(DType::f16, {4, 128}), in), "argument 'out'");
  EXPECT_INVALID(silu_and_mul(rt(), dev(DType::f32, {4, 64}), dev(DType::f32, {4, 128})), "argument 'input'");
  EXPECT_INVALID(gelu_and_mul(rt(), dev(DType::bf16, {4, 12}), dev(DType::bf16, {4, 24})),
                 "gelu_and_mul: argument 'input' must have a last dim (2d) that is a positive multiple of 16");
  EXPECT_INVALID(silu_and_mul(rt(), dev(DType::bf16, {3, 128}), in), "argument 'out' must have size 4 in dim 0");
  // Strided rows (a slice of a wider tensor): FlashInfer's kernel takes no row stride.
  auto strided = dev_strided(DType::bf16, {4, 256}, {512, 1});
  EXPECT_INVALID(silu_and_mul(rt(), out, strided), "argument 'input' must be contiguous");
  // out aliasing input (in place is not what the kernel does: it reads both halves after writing).
  TensorView alias = TensorView::contiguous(in.data, DType::bf16, in.device, {4, 128});
  EXPECT_INVALID(silu_and_mul(rt(), alias, in), "'out'");
  TensorView misaligned = in;
  misaligned.data = static_cast<char*>(in.data) + 2;
  EXPECT_INVALID(silu_and_mul(rt(), out, misaligned), "argument 'input'");
  EXPECT_INVALID(silu_and_mul(rt(), out, TensorView::contiguous(in.data, DType::bf16, Device::cpu(), {4, 256})),
                 "argument 'input'");
  expect_nothing_called();
}

TEST_F(DecodeStepOps, CascadeRulesAreCheckedBeforeTheCall) {
  auto va = dev(DType::bf16, {9, 32, 128}), vb = dev(DType::bf16, {9, 32, 128}), vm = dev(DType::bf16, {9, 32, 128});
  auto sa = dev(DType::f32, {9, 32}), sb = dev(DType::f32, {9, 32}), sm = dev(DType::f32, {9, 32});
  EXPECT_INVALID(merge_state(rt(), dev(DType::bf16, {9, 32, 96}), sa, vb, sb, vm, sm),
                 "merge_state: argument 'v_a.size(-1) (head_dim)' must be one of [64, 128, 256, 512]; got 96");
  EXPECT_INVALID(merge_state(rt(), va, dev(DType::bf16, {9, 32}), vb, sb, vm, sm), "argument 's_a'");
  EXPECT_INVALID(merge_state(rt(), va, dev(DType::f32, {9, 31}), vb, sb, vm, sm), "argument 's_a' must have size 32 in dim 1");
  EXPECT_INVALID(merge_state(rt(), va, sa, dev(DType::f16, {9, 32, 128}), sb, vm, sm), "argument 'v_b'");
  EXPECT_INVALID(merge_state(rt(), va, sa, vb, sb, vm, sa), "'s_merged'");  // the output is an input
  // 128 heads x 16 threads (head_dim 128) is more than FlashInfer's 1024-thread block.
  auto big = dev(DType::bf16, {2, 128, 128}), bigs = dev(DType::f32, {2, 128});
  EXPECT_INVALID(merge_state(rt(), big, bigs, dev(DType::bf16, {2, 128, 128}), dev(DType::f32, {2, 128}),
                             dev(DType::bf16, {2, 128, 128}), dev(DType::f32, {2, 128})),
                 "argument 'v_a' must have at most 64 heads for head_dim 128");
  auto mask16 = dev(DType::i32, {9});
  EXPECT_INVALID(merge_state_in_place(rt(), va, sa, vb, sb, &mask16), "argument 'mask'");
  auto mask_short = dev(DType::u8, {8});
  EXPECT_INVALID(merge_state_in_place(rt(), va, sa, vb, sb, &mask_short), "argument 'mask' must have size 9 in dim 0");
  EXPECT_INVALID(merge_state_in_place(rt(), va, sa, va, sb), "'v'");  // v_other is v
  auto v4 = dev(DType::f16, {5, 3, 16, 64}), s3 = dev(DType::f32, {5, 3, 16});
  EXPECT_INVALID(merge_states(rt(), v4, s3, dev(DType::f16, {5, 3, 64}), dev(DType::f32, {5, 16})),
                 "argument 'v_merged' must have shape");
  EXPECT_INVALID(merge_states(rt(), dev(DType::f16, {5, 0, 16, 64}), dev(DType::f32, {5, 0, 16}),
                              dev(DType::f16, {5, 16, 64}), dev(DType::f32, {5, 16})),
                 "must have at least one index set");
  // As many index sets as tokens: one block per (token, head), so 128 heads of 128 pass there.
  auto many = dev(DType::bf16, {2, 2, 128, 128}), many_s = dev(DType::f32, {2, 2, 128});
  merge_states(rt(), many, many_s, dev(DType::bf16, {2, 128, 128}), dev(DType::f32, {2, 128}));
  EXPECT_EQ(lines(recorded()).size(), 1u);
  expect_nothing_called();
}

TEST_F(DecodeStepOps, RopeRulesAreCheckedBeforeTheCall) {
  auto q = dev(DType::bf16, {5, 32, 128}), k = dev(DType::bf16, {5, 8, 128}), pos = dev(DType::i32, {5});
  auto qo = dev(DType::bf16, {5, 32, 128}), ko = dev(DType::bf16, {5, 8, 128});
  EXPECT_INVALID(apply_rope_pos_ids(rt(), q, k, qo, ko, pos, {.rotary_dim = 24}),
                 "apply_rope_pos_ids: argument 'rotary_dim' must be a multiple of 16");
  apply_rope_pos_ids(rt(), q, k, qo, ko, pos, {.rotary_dim = 24 + 8, .interleave = false});  // 32: whole halves
  EXPECT_EQ(lines(recorded()).size(), 1u);
  EXPECT_INVALID(apply_rope_pos_ids(rt(), q, k, qo, ko, pos, {.rotary_dim = 256}), "'rotary_dim'");
  EXPECT_INVALID(apply_rope_pos_ids(rt(), dev(DType::bf16, {5, 32, 96}), dev(DType::bf16, {5, 8, 96}),
                                    dev(DType::bf16, {5, 32, 96}), dev(DType::bf16, {5, 8, 96}), pos),
                 "argument 'q.size(2) (head_dim)' must be one of [64, 128, 256, 512]; got 96");
  EXPECT_INVALID(apply_rope_pos_ids(rt(), q, k, qo, ko, dev(DType::i32, {4})), "argument 'pos_ids' must have size 5");
  EXPECT_INVALID(apply_rope_pos_ids(rt(), q, k, qo, ko, dev(DType::f32, {5})), "argument 'pos_ids'");
  EXPECT_INVALID(apply_rope_pos_ids(rt(), q, dev(DType::f16, {5, 8, 128}), qo, ko, pos), "argument 'k'");
  EXPECT_INVALID(apply_rope_pos_ids(rt(), q, k, qo, dev(DType::bf16, {5, 4, 128}), pos), "argument 'k_rope'");
  EXPECT_INVALID(apply_rope_pos_ids(rt(), q, k, qo, ko, pos, {.rope_theta = 0}), "argument 'rope_theta'");
  // q_rope overlapping q without being it: half a head off.
  TensorView shifted = q;
  shifted.data = static_cast<uint16_t*>(q.data) + 64;
  EXPECT_INVALID(apply_rope_pos_ids(rt(), q, k, shifted, ko, pos), "'q_rope'");
  // Strides that break the kernel's 16-byte vectors.
  EXPECT_INVALID(apply_rope_pos_ids(rt(), dev_strided(DType::bf16, {5, 32, 128}, {4100, 128, 1}), k, qo, ko, pos),
                 "argument 'q' must have strides in dims 0 and 1 that are multiples of 8 elements");
  EXPECT_INVALID(apply_llama31_rope_pos_ids(rt(), q, k, qo, ko, pos, {}, {.low_freq_factor = 4, .high_freq_factor = 4}),
                 "argument 'high_freq_factor' must be above low_freq_factor");
  EXPECT_INVALID(apply_rope_with_cos_sin_cache(rt(), q, k, qo, ko, dev(DType::bf16, {64, 128}), pos),
                 "argument 'cos_sin_cache'");
  EXPECT_INVALID(apply_rope_with_cos_sin_cache(rt(), q, k, qo, ko, dev(DType::f32, {64, 136}), pos),
                 "argument 'cos_sin_cache.size(1) (rotary_dim)'");
  expect_nothing_called();
}

TEST_F(DecodeStepOps, CAbiEntriesReachTheModulesAndReportErrors) {
  ::setenv("FLASHCPP_TVM_FFI_LIB", FLASHCPP_TVM_FFI_LIB, 1);
  ::setenv("FLASHCPP_MODULE_PATH", dir_.c_str(), 1);
  ::setenv("FLASHCPP_JIT", "off", 1);
  auto in = dev(DType::bf16, {4, 256}), out = dev(DType::bf16, {4, 128});
  const auto ci = to_c(in), co = to_c(out);
  ASSERT_EQ(flashcpp_gelu_tanh_and_mul(&co, &ci, 1, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  expect_args(one_call("gelu_tanh_and_mul"), {T(out), T(in), B(true)});
  EXPECT_EQ(flashcpp_silu_and_mul(&co, &ci, 2, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("enable_pdl"), std::string::npos) << flashcpp_last_error();

  auto va = dev(DType::bf16, {9, 8, 64}), vm = dev(DType::bf16, {9, 8, 64}), sa = dev(DType::f32, {9, 8});
  auto sm = dev(DType::f32, {9, 8}), vb = dev(DType::bf16, {9, 8, 64}), sb = dev(DType::f32, {9, 8});
  const auto cva = to_c(va), cvb = to_c(vb), cvm = to_c(vm), csa = to_c(sa), csb = to_c(sb), csm = to_c(sm);
  ASSERT_EQ(flashcpp_merge_state(&cva, &csa, &cvb, &csb, &cvm, &csm, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  expect_args(one_call("merge_state"), {T(va), T(sa), T(vb), T(sb), T(vm), T(sm)});
  ASSERT_EQ(flashcpp_merge_state_in_place(&cvm, &csm, &cva, &csa, nullptr, nullptr), FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  expect_args(one_call("merge_state_in_place"), {T(vm), T(sm), T(va), T(sa), "None"});
  EXPECT_EQ(flashcpp_merge_states(&cva, &csa, &cvm, &csm, nullptr), FLASHCPP_INVALID_ARGUMENT);  // v is rank 3
  EXPECT_NE(std::string(flashcpp_last_error()).find("merge_states: argument 'v'"), std::string::npos)
      << flashcpp_last_error();
  expect_nothing_called();
}

// ---------------------------------------------------------------------------------------------------------------
// The float64 references against values computed here

TEST(DecodeStepReference, ActivationsMatchTheirFormulas) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<double> u(-4, 4);
  HostF64 in({3, 2, 8}), out({3, 2, 4});
  for (double& x : in.data) x = u(gen);
  struct Case {
    void (*fn)(const TensorView&, const TensorView&);
    double (*act)(double);
  } cases[] = {
      {reference::silu_and_mul, [](double x) { return x / (1 + std::exp(-x)); }},
      {reference::gelu_and_mul, [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }},
      {reference::gelu_tanh_and_mul,
       [](double x) { return x / (1 + std::exp(-2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }},
  };
  for (const auto& c : cases) {
    c.fn(out.view(), in.view());
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t i = 0; i < 4; ++i)
        EXPECT_NEAR(out.data[r * 4 + i], c.act(in.data[r * 8 + i]) * in.data[r * 8 + 4 + i], 1e-12) << r << " " << i;
  }
  // Strided rows: the even rows of a [6, 8] tensor.
  HostF64 wide({6, 8}), half({3, 4});
  for (double& x : wide.data) x = u(gen);
  const TensorView even = TensorView::strided(wide.data.data(), DType::f64, Device::cpu(), {3, 8}, {16, 1});
  reference::silu_and_mul(half.view(), even);
  const double x = wide.data[2 * 8 + 1], y = wide.data[2 * 8 + 5];
  EXPECT_NEAR(half.data[1 * 4 + 1], x / (1 + std::exp(-x)) * y, 1e-12);
}

TEST(DecodeStepReference, MergingTwoHalvesGivesTheAttentionOverTheWhole) {
  // Softmax attention of one query over 10 scores split 4 + 6: merging the halves' states must give the whole's.
  std::mt19937 gen(5);
  std::normal_distribution<double> n(0, 2);
  const int64_t keys = 10, d = 3;
  std::vector<double> score(keys), val(keys * d);
  for (double& x : score) x = n(gen);
  for (double& x : val) x = n(gen);
  auto state = [&](int64_t lo, int64_t hi, double* v, double& s) {
    double sum = 0;
    for (int64_t k = lo; k < hi; ++k) sum += std::exp(score[k]);
    for (int64_t i = 0; i < d; ++i) {
      v[i] = 0;
      for (int64_t k = lo; k < hi; ++k) v[i] += std::exp(score[k]) / sum * val[k * d + i];
    }
    s = std::log2(sum);  // base-2 log-sum-exp
  };
  HostF64 va({1, 1, d}), vb({1, 1, d}), vm({1, 1, d}), vw({1, 1, d}), sa({1, 1}), sb({1, 1}), sm({1, 1}), sw({1, 1});
  state(0, 4, va.data.data(), sa.data[0]);
  state(4, keys, vb.data.data(), sb.data[0]);
  state(0, keys, vw.data.data(), sw.data[0]);
  reference::merge_state(va.view(), sa.view(), vb.view(), sb.view(), vm.view(), sm.view());
  for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(vm.data[i], vw.data[i], 1e-12);
  EXPECT_NEAR(sm.data[0], sw.data[0], 1e-12);

  // merge_states over three sets (2 + 3 + 5 keys) gives the same; in place with a mask of 0 changes nothing.
  HostF64 v3({1, 3, 1, d}), s3({1, 3, 1});
  const int64_t cut[] = {0, 2, 5, keys};
  for (int k = 0; k < 3; ++k) state(cut[k], cut[k + 1], &v3.data[k * d], s3.data[k]);
  reference::merge_states(v3.view(), s3.view(), vm.view(), sm.view());
  for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(vm.data[i], vw.data[i], 1e-12);
  EXPECT_NEAR(sm.data[0], sw.data[0], 1e-12);
  uint8_t zero = 0, one = 1;
  const TensorView m0 = TensorView::contiguous(&zero, DType::u8, Device::cpu(), {1});
  const TensorView m1 = TensorView::contiguous(&one, DType::u8, Device::cpu(), {1});
  const std::vector<double> before = va.data;
  reference::merge_state_in_place(va.view(), sa.view(), vb.view(), sb.view(), &m0);
  EXPECT_EQ(va.data, before);
  reference::merge_state_in_place(va.view(), sa.view(), vb.view(), sb.view(), &m1);
  for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(va.data[i], vw.data[i], 1e-12);
  EXPECT_NEAR(sa.data[0], sw.data[0], 1e-12);
}

TEST(DecodeStepReference, RopeRotatesPairsByPositionAndCopiesTheRest) {
  // One token, one q head and one k head of 8 dims, rotary_dim 4, position 3, theta 100, scale 2.
  HostF64 q({1, 1, 8}), k({1, 1, 8}), qo({1, 1, 8}), ko({1, 1, 8});
  for (int i = 0; i < 8; ++i) {
    q.data[i] = 1.0 + i;
    k.data[i] = -0.5 * i;
  }
  int32_t pos = 3;
  const TensorView p = TensorView::contiguous(&pos, DType::i32, Device::cpu(), {1});
  for (bool interleave : {false, true}) {
    reference::apply_rope_pos_ids(q.view(), k.view(), qo.view(), ko.view(), p,
                                  {.rotary_dim = 4, .interleave = interleave, .rope_scale = 2, .rope_theta = 100});
    for (int i = 0; i < 4; ++i) {
      const int pi = interleave ? i / 2 : i % 2;                         // frequency index
      const int partner = interleave ? (i ^ 1) : (i < 2 ? i + 2 : i - 2);
      const bool first = interleave ? i % 2 == 0 : i < 2;
      const double a = 3.0 * std::pow(100.0, -2.0 * pi / 4) / 2;
      const double want = q.data[i] * std::cos(a) + (first ? -1 : 1) * q.data[partner] * std::sin(a);
      EXPECT_NEAR(qo.data[i], want, 1e-12) << interleave << " " << i;
    }
    for (int i = 4; i < 8; ++i) EXPECT_EQ(qo.data[i], q.data[i]);  // past rotary_dim: copied
  }
  // A rotation keeps each pair's norm, and the cos/sin cache of the same angles gives the same result.
  reference::apply_rope_pos_ids(q.view(), k.view(), qo.view(), ko.view(), p, {.rotary_dim = 4, .rope_theta = 100});
  EXPECT_NEAR(std::hypot(qo.data[0], qo.data[2]), std::hypot(q.data[0], q.data[2]), 1e-12);
  HostF64 cache({4, 4}), qc({1, 1, 8}), kc({1, 1, 8});
  for (int r = 0; r < 4; ++r)
    for (int pi = 0; pi < 2; ++pi) {
      const double a = r * std::pow(100.0, -2.0 * pi / 4);
      cache.data[r * 4 + pi] = std::cos(a);
      cache.data[r * 4 + 2 + pi] = std::sin(a);
    }
  reference::apply_rope_with_cos_sin_cache(q.view(), k.view(), qc.view(), kc.view(), cache.view(), p);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(qc.data[i], qo.data[i], 1e-12);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(kc.data[i], ko.data[i], 1e-12);
  int32_t far = 4;
  const TensorView pf = TensorView::contiguous(&far, DType::i32, Device::cpu(), {1});
  EXPECT_THROW(reference::apply_rope_with_cos_sin_cache(q.view(), k.view(), qc.view(), kc.view(), cache.view(), pf),
               Error);
  // Llama 3.1: a high frequency (short wavelength) is kept, a low one divided by the scale.
  HostF64 big_q({1, 1, 128}), big_k({1, 1, 128}), big_o({1, 1, 128}), big_ko({1, 1, 128}), plain({1, 1, 128});
  for (int i = 0; i < 128; ++i) big_q.data[i] = std::sin(0.1 * i);
  int32_t pos7 = 7;
  const TensorView p7 = TensorView::contiguous(&pos7, DType::i32, Device::cpu(), {1});
  reference::apply_llama31_rope_pos_ids(big_q.view(), big_k.view(), big_o.view(), big_ko.view(), p7,
                                        {.rope_scale = 8, .rope_theta = 5e5});
  reference::apply_rope_pos_ids(big_q.view(), big_k.view(), plain.view(), big_ko.view(), p7, {.rope_theta = 5e5});
  EXPECT_NEAR(big_o.data[0], plain.data[0], 1e-12);  // p 0: frequency 1, wavelength 2 pi: unscaled
  reference::apply_rope_pos_ids(big_q.view(), big_k.view(), plain.view(), big_ko.view(), p7,
                                {.rope_scale = 8, .rope_theta = 5e5});
  EXPECT_NEAR(big_o.data[63], plain.data[63], 1e-12);  // p 63: wavelength far above 8192: divided by 8
}

}  // namespace
}  // namespace flashcpp::testing
