// The sampler without a GPU: argument packing against FlashInfer 0.6.3's `sampling` exports (the recording
// stand-in logs what each receives), the validation rules (each refusal names the argument and the rule, and
// nothing reaches the module), the C ABI entries, and the float64 references against values computed here.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "flashcpp/flashcpp.h"
#include "flashcpp/reference.hpp"
#include "flashcpp/sampling.hpp"
#include "ops/ops_fixture.hpp"
#include "support/c_tensor.hpp"

namespace flashcpp::testing {
namespace {

class SamplingOps : public OpsFixture {
 protected:
  void SetUp() override {
    OpsFixture::SetUp();
    link("sampling");
    (void)recorded();
  }
  void expect_nothing_called() { EXPECT_EQ(recorded(), ""); }
  // The seed and offset as the binding's uint64_t receives them: the int64 bit pattern.
  static std::string U(uint64_t x) { return I(static_cast<int64_t>(x)); }
};

// ---------------------------------------------------------------------------------------------------------------
// Packing

TEST_F(SamplingOps, SoftmaxPassesWorkspaceTemperatureAndPdl) {
  auto ws = dev(DType::u8, {1 << 20}), logits = dev(DType::f32, {4, 32000}), probs = dev(DType::f32, {4, 32000});
  softmax(rt(), ws, logits, probs, 0.7, {.enable_pdl = true});
  expect_args(one_call("softmax"), {T(ws), T(logits), T(probs), "None", F(0.7), B(true)});
  auto temp = dev(DType::f32, {4});
  softmax(rt(), ws, logits, logits, temp);  // exactly in place
  expect_args(one_call("softmax"), {T(ws), T(logits), T(logits), T(temp), F(0), B(false)});
}

TEST_F(SamplingOps, SamplersPassSeedOffsetAndDeterminism) {
  auto probs = dev(DType::f32, {3, 1000}), samples = dev(DType::i32, {3});
  const SamplingOptions o{.deterministic = false, .philox_seed = ~uint64_t{0}, .philox_offset = 96};
  sampling_from_probs(rt(), probs, samples, nullptr, o);
  expect_args(one_call("sampling_from_probs"), {T(probs), T(samples), "None", B(false), U(~uint64_t{0}), I(96)});
  // Row indices: many samples of one distribution.
  auto many = dev(DType::i64, {9}), idx = dev(DType::i64, {9});
  sampling_from_logits(rt(), probs, many, &idx, {.philox_seed = 5});
  expect_args(one_call("sampling_from_logits"), {T(probs), T(many), T(idx), B(true), I(5), I(0)});

  top_k_sampling_from_probs(rt(), probs, samples, 50, nullptr, {.philox_seed = 1, .philox_offset = 2});
  expect_args(one_call("top_k_sampling_from_probs"), {T(probs), T(samples), "None", "None", I(50), B(true), I(1), I(2)});
  auto k = dev(DType::i32, {3});
  top_k_sampling_from_probs(rt(), probs, samples, k);
  expect_args(one_call("top_k_sampling_from_probs"), {T(probs), T(samples), "None", T(k), I(0), B(true), I(0), I(0)});

  top_p_sampling_from_probs(rt(), probs, samples, 0.9);
  expect_args(one_call("top_p_sampling_from_probs"), {T(probs), T(samples), "None", "None", F(0.9), B(true), I(0), I(0)});
  auto p = dev(DType::f32, {3});
  top_p_sampling_from_probs(rt(), probs, many, p, &idx);  // top_p is read per row: any number of samples
  expect_args(one_call("top_p_sampling_from_probs"), {T(probs), T(many), T(idx), T(p), F(0), B(true), I(0), I(0)});

  min_p_sampling_from_probs(rt(), probs, samples, 0.05);
  expect_args(one_call("min_p_sampling_from_probs"), {T(probs), T(samples), "None", "None", F(0.05), B(true), I(0), I(0)});

  // The fused sampler's binding takes a scalar top_k as a double.
  top_k_top_p_sampling_from_probs(rt(), probs, samples, 40, 0.95, nullptr, {.philox_seed = 3});
  expect_args(one_call("top_k_top_p_sampling_from_probs"),
              {T(probs), T(samples), "None", "None", F(40), "None", F(0.95), B(true), I(3), I(0)});
}

TEST_F(SamplingOps, RenormAndMaskPassTheRowStates) {
  auto probs = dev(DType::bf16, {2, 4096}), renorm = dev(DType::bf16, {2, 4096}), rs = dev(DType::u8, {1 << 20});
  top_k_renorm_probs(rt(), probs, renorm, 20, rs);
  expect_args(one_call("top_k_renorm_probs"), {T(probs), T(renorm), "None", I(20), T(rs)});
  auto k = dev(DType::i32, {2});
  top_k_mask_logits(rt(), probs, renorm, k, rs);
  expect_args(one_call("top_k_mask_logits"), {T(probs), T(renorm), T(k), I(0), T(rs)});
  auto pf = dev(DType::f32, {2, 4096}), rf = dev(DType::f32, {2, 4096});
  top_p_renorm_probs(rt(), pf, rf, 0.5);
  expect_args(one_call("top_p_renorm_probs"), {T(pf), T(rf), "None", F(0.5)});
}

TEST_F(SamplingOps, FromLogitsComposesFlashInfersKernels) {
  auto logits = dev(DType::f32, {4, 50000}), probs = dev(DType::f32, {4, 50000}), samples = dev(DType::i32, {4});
  const SamplingWorkspace ws{dev(DType::u8, {1 << 20}), dev(DType::u8, {1 << 20})};
  top_k_top_p_sampling_from_logits(rt(), ws, logits, probs, samples, 64, 0.9, TopKTopPOrder::top_k_first, nullptr,
                                   {.philox_seed = 7, .philox_offset = 128});
  auto calls = lines(recorded());
  ASSERT_EQ(calls.size(), 3u);
  expect_args(split(calls[0]), {T(logits), T(probs), "None", I(64), T(ws.row_states)});       // mask into probs
  expect_args(split(calls[1]), {T(ws.softmax_buffer), T(probs), T(probs), "None", F(1), B(false)});  // in place
  expect_args(split(calls[2]), {T(probs), T(samples), "None", "None", F(0.9), B(true), I(7), I(128)});
  EXPECT_EQ(split(calls[2])[0], "top_p_sampling_from_probs");

  top_k_top_p_sampling_from_logits(rt(), ws, logits, probs, samples, 64, 0.9, TopKTopPOrder::joint);
  calls = lines(recorded());
  ASSERT_EQ(calls.size(), 2u);
  expect_args(split(calls[0]), {T(ws.softmax_buffer), T(logits), T(probs), "None", F(1), B(false)});
  expect_args(split(calls[1]), {T(probs), T(samples), "None", "None", F(64), "None", F(0.9), B(true), I(0), I(0)});
  EXPECT_EQ(split(calls[1])[0], "top_k_top_p_sampling_from_probs");
}

TEST_F(SamplingOps, NothingToSampleLaunchesNothing) {
  auto ws = dev(DType::u8, {1024});
  softmax(rt(), ws, dev(DType::f32, {0, 128}), dev(DType::f32, {0, 128}));
  auto probs = dev(DType::f32, {3, 128}), none = dev(DType::i32, {0}), idx = dev(DType::i32, {0});
  sampling_from_probs(rt(), probs, none, &idx);
  top_p_sampling_from_probs(rt(), probs, none, 0.5, &idx);
  top_k_renorm_probs(rt(), dev(DType::f32, {0, 64}), dev(DType::f32, {0, 64}), 4, dev(DType::u8, {1 << 20}));
  expect_nothing_called();
}

// ---------------------------------------------------------------------------------------------------------------
// Validation

TEST_F(SamplingOps, SoftmaxRulesAreCheckedBeforeTheCall) {
  auto ws = dev(DType::u8, {1 << 20}), logits = dev(DType::f32, {4, 32000}), probs = dev(DType::f32, {4, 32000});
  EXPECT_INVALID(softmax(rt(), ws, logits, probs, 0.0), "softmax: argument 'temperature' must be > 0; got 0");
  EXPECT_INVALID(softmax(rt(), ws, logits, probs, std::numeric_limits<double>::quiet_NaN()), "'temperature'");
  EXPECT_INVALID(softmax(rt(), ws, dev(DType::bf16, {4, 32000}), probs), "argument 'logits'");
  EXPECT_INVALID(softmax(rt(), ws, logits, dev(DType::f32, {4, 31999})), "argument 'probs'");
  auto temp3 = dev(DType::f32, {3});
  EXPECT_INVALID(softmax(rt(), ws, logits, probs, temp3),
                 "argument 'temperature' must have size 4 in dim 0 (= one per row of logits)");
  // 4 rows of 32000 take the vocabulary-split path: 4 slices of 8192 per row, 8 bytes each.
  EXPECT_EQ(softmax_workspace_bytes(4, 32000), 4 * 4 * 8);
  EXPECT_EQ(softmax_workspace_bytes(129, 32000), 0);
  EXPECT_EQ(softmax_workspace_bytes(4, 24575), 0);
  EXPECT_INVALID(softmax(rt(), dev(DType::u8, {127}), logits, probs), "argument 'workspace'");
  softmax(rt(), dev(DType::u8, {128}), logits, probs);  // exactly enough
  EXPECT_EQ(lines(recorded()).size(), 1u);
  // probs overlapping logits without being it.
  TensorView shifted = logits;
  shifted.data = static_cast<float*>(logits.data) + 4;
  EXPECT_INVALID(softmax(rt(), ws, logits, shifted), "'probs'");
  auto strided = dev_strided(DType::f32, {4, 32000}, {32004, 1});
  EXPECT_INVALID(softmax(rt(), ws, strided, probs), "argument 'logits' must be contiguous");
  expect_nothing_called();
}

TEST_F(SamplingOps, SamplerRulesAreCheckedBeforeTheCall) {
  auto probs = dev(DType::f32, {3, 1000}), samples = dev(DType::i32, {3});
  EXPECT_INVALID(sampling_from_probs(rt(), probs, dev(DType::i32, {4})),
                 "sampling_from_probs: argument 'samples' must have one entry per row of probs when row_indices is "
                 "absent (3); got 4");
  EXPECT_INVALID(sampling_from_probs(rt(), probs, dev(DType::f32, {3})), "argument 'samples'");
  EXPECT_INVALID(sampling_from_probs(rt(), dev(DType::f16, {3, 1000}), samples), "argument 'probs'");
  auto idx64 = dev(DType::i64, {3});
  EXPECT_INVALID(sampling_from_probs(rt(), probs, samples, &idx64), "argument 'row_indices'");
  auto idx_short = dev(DType::i32, {2});
  EXPECT_INVALID(sampling_from_probs(rt(), probs, samples, &idx_short), "argument 'row_indices' must have size 3");
  EXPECT_INVALID(top_k_sampling_from_probs(rt(), probs, samples, 0), "argument 'top_k' must be in [1, 2147483647]");
  EXPECT_INVALID(top_p_sampling_from_probs(rt(), probs, samples, 0.0), "argument 'top_p' must be in (0");
  EXPECT_INVALID(top_p_sampling_from_probs(rt(), probs, samples, 1.5), "argument 'top_p' must be in (0, 1]; got 1.5");
  EXPECT_INVALID(min_p_sampling_from_probs(rt(), probs, samples, -0.1), "argument 'min_p' must be in [0");
  // The top-k sampler reads a per-request top_k as the sample index type, by sample.
  auto k64 = dev(DType::i64, {3});
  EXPECT_INVALID(top_k_sampling_from_probs(rt(), probs, samples, k64), "argument 'top_k'");
  auto k = dev(DType::i32, {3}), many = dev(DType::i32, {8}), idx = dev(DType::i32, {8});
  EXPECT_INVALID(top_k_sampling_from_probs(rt(), probs, many, k, &idx),
                 "argument 'top_k' per request is read by sample index, so samples must have one entry per row (3); "
                 "got 8");
  auto minp = dev(DType::f32, {3});
  EXPECT_INVALID(min_p_sampling_from_probs(rt(), probs, many, minp, &idx), "argument 'min_p' per request");
  // The fused sampler: top_k per row in samples' dtype.
  EXPECT_INVALID(top_k_top_p_sampling_from_probs(rt(), probs, dev(DType::i64, {3}), k, 0.9), "argument 'top_k'");
  // samples overlapping probs; misaligned probs; probs on the host.
  TensorView alias = TensorView::contiguous(probs.data, DType::i32, probs.device, {3});
  EXPECT_INVALID(sampling_from_probs(rt(), probs, alias), "'samples'");
  TensorView misaligned = probs;
  misaligned.data = static_cast<char*>(probs.data) + 4;
  EXPECT_INVALID(sampling_from_probs(rt(), misaligned, samples), "argument 'probs'");
  EXPECT_INVALID(sampling_from_probs(rt(), TensorView::contiguous(probs.data, DType::f32, Device::cpu(), {3, 1000}),
                                     samples),
                 "argument 'probs'");
  EXPECT_INVALID(sampling_from_probs(rt(), probs, dev(DType::i32, {3}, 1)), "argument 'samples'");  // another device
  expect_nothing_called();
}

TEST_F(SamplingOps, WorkspaceAndFilterRulesAreCheckedBeforeTheCall) {
  auto probs = dev(DType::f32, {2, 4096}), renorm = dev(DType::f32, {2, 4096});
  EXPECT_INVALID(top_k_renorm_probs(rt(), probs, renorm, 5, dev(DType::u8, {1000})), "argument 'row_states'");
  EXPECT_INVALID(top_k_renorm_probs(rt(), probs, dev(DType::bf16, {2, 4096}), 5, dev(DType::u8, {1 << 20})),
                 "argument 'renorm'");
  EXPECT_INVALID(top_k_mask_logits(rt(), probs, renorm, dev(DType::i64, {2}), dev(DType::u8, {1 << 20})),
                 "argument 'top_k'");
  EXPECT_INVALID(top_p_renorm_probs(rt(), dev(DType::bf16, {2, 4096}), dev(DType::bf16, {2, 4096}), 0.5),
                 "argument 'probs'");
  EXPECT_INVALID(top_k_mask_logits(rt(), probs, probs, 5, dev(DType::u8, {1 << 20})), "'masked'");  // in place

  auto logits = dev(DType::f32, {4, 50000}), p = dev(DType::f32, {4, 50000}), samples = dev(DType::i32, {4});
  const SamplingWorkspace small_rs{dev(DType::u8, {1 << 20}), dev(DType::u8, {4096})};
  EXPECT_INVALID(top_k_top_p_sampling_from_logits(rt(), small_rs, logits, p, samples, 8, 0.9),
                 "argument 'row_states'");
  // joint does not use row_states.
  top_k_top_p_sampling_from_logits(rt(), small_rs, logits, p, samples, 8, 0.9, TopKTopPOrder::joint);
  EXPECT_EQ(lines(recorded()).size(), 2u);
  const SamplingWorkspace small_sm{dev(DType::u8, {100}), dev(DType::u8, {1 << 20})};
  EXPECT_INVALID(top_k_top_p_sampling_from_logits(rt(), small_sm, logits, p, samples, 8, 0.9),
                 "argument 'workspace.softmax_buffer'");
  const SamplingWorkspace ws{dev(DType::u8, {1 << 20}), dev(DType::u8, {1 << 20})};
  EXPECT_INVALID(top_k_top_p_sampling_from_logits(rt(), ws, logits, logits, samples, 8, 0.9), "'probs'");
  EXPECT_INVALID(top_k_top_p_sampling_from_logits(rt(), ws, logits, p, samples, 8, 0.9,
                                                  static_cast<TopKTopPOrder>(7)),
                 "argument 'order'");
  expect_nothing_called();
}

// ---------------------------------------------------------------------------------------------------------------
// C ABI

TEST_F(SamplingOps, CAbiEntriesReachTheModuleAndReportErrors) {
  ::setenv("FLASHCPP_TVM_FFI_LIB", FLASHCPP_TVM_FFI_LIB, 1);
  ::setenv("FLASHCPP_MODULE_PATH", dir_.c_str(), 1);
  ::setenv("FLASHCPP_JIT", "off", 1);
  auto probs = dev(DType::f32, {3, 1000}), samples = dev(DType::i32, {3}), k = dev(DType::i32, {3});
  const auto cp = to_c(probs), cs = to_c(samples), ck = to_c(k);
  flashcpp_sampling_options o = FLASHCPP_SAMPLING_OPTIONS_INIT;
  o.philox_seed = 42;
  o.philox_offset = 4;
  ASSERT_EQ(flashcpp_top_k_sampling_from_probs(&cp, &cs, &ck, 0, nullptr, &o, nullptr), FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  expect_args(one_call("top_k_sampling_from_probs"), {T(probs), T(samples), "None", T(k), I(0), B(true), I(42), I(4)});
  ASSERT_EQ(flashcpp_top_k_top_p_sampling_from_probs(&cp, &cs, nullptr, 20, nullptr, 0.8, nullptr, &o, nullptr),
            FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  expect_args(one_call("top_k_top_p_sampling_from_probs"),
              {T(probs), T(samples), "None", "None", F(20), "None", F(0.8), B(true), I(42), I(4)});
  EXPECT_EQ(flashcpp_sampling_from_probs(&cp, &cs, nullptr, nullptr, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("argument 'options' must not be NULL"), std::string::npos);
  flashcpp_sampling_options big = o;
  big.struct_size = sizeof(o) + 8;
  EXPECT_EQ(flashcpp_sampling_from_probs(&cp, &cs, nullptr, &big, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("FLASHCPP_SAMPLING_OPTIONS_INIT"), std::string::npos)
      << flashcpp_last_error();
  o.deterministic = 2;
  EXPECT_EQ(flashcpp_sampling_from_logits(&cp, &cs, nullptr, &o, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("options.deterministic"), std::string::npos);
  EXPECT_EQ(flashcpp_top_p_sampling_from_probs(&cp, &cs, nullptr, 2.0, nullptr, &big, nullptr),
            FLASHCPP_INVALID_ARGUMENT);

  auto logits = dev(DType::f32, {3, 1000}), scratch = dev(DType::f32, {3, 1000});
  auto sm = dev(DType::u8, {1 << 20}), rs = dev(DType::u8, {1 << 20});
  const auto cl = to_c(logits), cx = to_c(scratch), csm = to_c(sm), crs = to_c(rs);
  const auto ws = c_struct<flashcpp_sampling_workspace>(&csm, &crs);
  o.deterministic = 1;
  ASSERT_EQ(flashcpp_top_k_top_p_sampling_from_logits(&ws, &cl, &cx, &cs, nullptr, 10, nullptr, 0.9,
                                                      FLASHCPP_TOP_K_TOP_P_JOINT, nullptr, &o, nullptr),
            FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  EXPECT_EQ(lines(recorded()).size(), 2u);
  EXPECT_EQ(flashcpp_top_k_top_p_sampling_from_logits(&ws, &cl, &cx, &cs, nullptr, 10, nullptr, 0.9, 2, nullptr, &o,
                                                      nullptr),
            FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("argument 'order'"), std::string::npos);
  ASSERT_EQ(flashcpp_softmax(&csm, &cl, &cx, nullptr, 0.5, 0, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  expect_args(one_call("softmax"), {T(sm), T(logits), T(scratch), "None", F(0.5), B(false)});
  ASSERT_EQ(flashcpp_top_k_mask_logits(&cl, &cx, nullptr, 3, &crs, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  expect_args(one_call("top_k_mask_logits"), {T(logits), T(scratch), "None", I(3), T(rs)});
  EXPECT_EQ(flashcpp_softmax_workspace_bytes(100, 128000), 100 * 16 * 8);
  EXPECT_EQ(flashcpp_sampling_row_states_bytes(), int64_t{1} << 20);
  expect_nothing_called();
}

// ---------------------------------------------------------------------------------------------------------------
// References

struct HostMatrix {
  std::vector<double> data;
  int64_t rows, cols;
  HostMatrix(int64_t r, int64_t c, std::vector<double> v = {}) : data(std::move(v)), rows(r), cols(c) {
    data.resize(static_cast<size_t>(r * c), 0.0);
  }
  TensorView view() { return TensorView::contiguous(data.data(), DType::f64, Device::cpu(), {rows, cols}); }
  double at(int64_t r, int64_t c) const { return data[static_cast<size_t>(r * cols + c)]; }
};

TEST(SamplingReference, SoftmaxMatchesItsFormulaPerRowTemperature) {
  HostMatrix logits(2, 3, {1.0, 2.0, 3.0, -1.0, 0.0, 4.0}), probs(2, 3);
  float temps[2] = {2.0f, 0.5f};
  const TensorView t = TensorView::contiguous(temps, DType::f32, Device::cpu(), {2});
  reference::softmax(logits.view(), probs.view(), t);
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int i = 0; i < 3; ++i) sum += std::exp(logits.at(r, i) / temps[r]);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(probs.at(r, i), std::exp(logits.at(r, i) / temps[r]) / sum, 1e-15);
  }
}

TEST(SamplingReference, FiltersKeepWhatFlashInfersPivotsKeep) {
  // One row, sorted order 3 (0.4), 0 (0.3), 4 (0.15), 1 (0.1), 2 (0.05).
  HostMatrix probs(1, 5, {0.3, 0.1, 0.05, 0.4, 0.15}), out(1, 5);
  reference::top_k_renorm_probs(probs.view(), out.view(), 2);
  EXPECT_NEAR(out.at(0, 3), 0.4 / 0.7, 1e-15);
  EXPECT_NEAR(out.at(0, 0), 0.3 / 0.7, 1e-15);
  EXPECT_EQ(out.at(0, 1) + out.at(0, 2) + out.at(0, 4), 0.0);
  // top_p 0.7: the mass above token 0 is 0.4 < 0.7 (kept), above token 4 it is 0.7 (not below: dropped).
  reference::top_p_renorm_probs(probs.view(), out.view(), 0.7);
  EXPECT_NEAR(out.at(0, 3), 0.4 / 0.7, 1e-15);
  EXPECT_EQ(out.at(0, 4), 0.0);
  reference::top_p_renorm_probs(probs.view(), out.view(), 0.71);  // now token 4 is in the nucleus
  EXPECT_NEAR(out.at(0, 4), 0.15 / 0.85, 1e-15);
  // min_p 0.3: p >= 0.12 survives (0.4, 0.3, 0.15).
  reference::min_p_renorm_probs(probs.view(), out.view(), 0.3);
  EXPECT_NEAR(out.at(0, 4), 0.15 / 0.85, 1e-15);
  EXPECT_EQ(out.at(0, 1), 0.0);
  // Joint: top_k 2 wins over top_p 0.9.
  reference::top_k_top_p_renorm_probs(probs.view(), out.view(), 2, 0.9);
  EXPECT_NEAR(out.at(0, 0), 0.3 / 0.7, 1e-15);
  EXPECT_EQ(out.at(0, 4), 0.0);
  // Ties at the boundary: every tied value has the same count above it, so all survive top_k 2.
  HostMatrix tied(1, 4, {0.4, 0.2, 0.2, 0.2}), tout(1, 4);
  reference::top_k_renorm_probs(tied.view(), tout.view(), 2);
  EXPECT_NEAR(tout.at(0, 1), 0.2, 1e-15);
  HostMatrix logits(1, 4, {2.0, -1.0, 5.0, 0.5}), masked(1, 4);
  int32_t k = 2;
  reference::top_k_mask_logits(logits.view(), masked.view(),
                               TensorView::contiguous(&k, DType::i32, Device::cpu(), {1}));
  EXPECT_EQ(masked.at(0, 0), 2.0);
  EXPECT_EQ(masked.at(0, 2), 5.0);
  EXPECT_EQ(masked.at(0, 1), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(masked.at(0, 3), -std::numeric_limits<double>::infinity());
  HostMatrix wrong(1, 3);
  EXPECT_THROW(reference::top_k_renorm_probs(probs.view(), wrong.view(), 2), Error);
}

}  // namespace
}  // namespace flashcpp::testing
