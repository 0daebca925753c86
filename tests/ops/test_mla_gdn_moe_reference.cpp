// Sanity tests of the float64 references (MLA, GDN, MoE) and their element codecs, against values
// worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "reference/gdn_reference.hpp"
#include "reference/mla_attention_reference.hpp"
#include "reference/moe_reference.hpp"

using namespace flashcpp;
using namespace flashcpp::reference;

namespace {

TensorView host(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::f32, Device::cpu(), shape);
}
TensorView host_i32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::i32, Device::cpu(), shape);
}

TEST(MlaGdnMoeReference, Codecs) {
  EXPECT_EQ(e4m3_bits_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_bits_to_float(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(0x7f)));
  // Every finite e4m3 value round-trips; ties go to even; overflow saturates.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float f = e4m3_bits_to_float(static_cast<uint8_t>(b));
    if (f == 0.0f) continue;
    EXPECT_EQ(float_to_e4m3_bits(f), b) << b;
  }
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(1.0625f)), 1.0f);    // halfway 1 and 1.125 → even (1)
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(1.1875f)), 1.25f);   // halfway 1.125 and 1.25 → even (1.25)
  EXPECT_EQ(e4m3_bits_to_float(float_to_e4m3_bits(1000.0f)), 448.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.00390625f)), 1.0f);  // 1 + 2^-8: tie → even
  EXPECT_EQ(bf16_to_float(float_to_bf16(-3.5f)), -3.5f);
  for (float f : {1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f})
    EXPECT_EQ(half_to_float(float_to_half(f)), f) << f;
  EXPECT_EQ(half_to_float(float_to_half(1.00048828125f)), 1.0f);  // 1 + 2^-11: tie → even
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(70000.0f))));
  EXPECT_EQ(round_through(DType::bf16, 1.00390625), 1.0);
}

// One request, one head; known scores.
TEST(MlaGdnMoeReference, MlaSoftmaxLseAndCausal) {
  const int64_t P = 2, page = 2;
  std::vector<float> qn(512, 0.0f), qp(64, 0.0f), ckv(P * page * 512, 0.0f), kpe(P * page * 64, 0.0f);
  qn[0] = 1.0f;  // score_j = ckv[j][0] · sm_scale
  // Token j sits in page kv_indices[j / 2] = {1, 0}[j / 2], slot j % 2.
  auto put = [&](int64_t page_id, int64_t slot, float c0, float c1) {
    ckv[(page_id * page + slot) * 512 + 0] = c0;
    ckv[(page_id * page + slot) * 512 + 1] = c1;
  };
  put(1, 0, 0.0f, 10.0f);            // token 0
  put(1, 1, std::log(3.0f), 20.0f);  // token 1
  put(0, 0, 0.0f, 30.0f);            // token 2
  std::vector<int32_t> qo{0, 2}, kvp{0, 2}, kvl{3}, idx{1, 0};
  std::vector<float> qn2(2 * 512, 0.0f), qp2(2 * 64, 0.0f);
  qn2[0] = 1.0f;
  qn2[512] = 1.0f;
  MlaReferenceInputs in;
  in.q_nope = host(qn2, {2, 1, 512});
  in.q_pe = host(qp2, {2, 1, 64});
  in.ckv_cache = host(ckv, {P, page, 512});
  in.kpe_cache = host(kpe, {P, page, 64});
  in.qo_indptr = qo;
  in.kv_indptr = kvp;
  in.kv_len = kvl;
  in.kv_indices = idx;
  in.sm_scale = 1.0;
  std::vector<double> out, lse;
  batch_mla_reference(in, out, lse);
  // exp scores: 1, 3, 1 → weights 0.2, 0.6, 0.2.
  EXPECT_NEAR(out[1], 0.2 * 10 + 0.6 * 20 + 0.2 * 30, 1e-9);
  EXPECT_NEAR(lse[0], std::log(5.0), 1e-6);
  in.causal = true;  // row 0 sees tokens 0..1, row 1 sees 0..2
  batch_mla_reference(in, out, lse);
  EXPECT_NEAR(out[1], 0.25 * 10 + 0.75 * 20, 1e-6);
  EXPECT_NEAR(lse[0], std::log(4.0), 1e-6);
  EXPECT_NEAR(out[512 + 1], 20.0, 1e-6);
  EXPECT_NEAR(lse[1], std::log(5.0), 1e-6);
}

TEST(MlaGdnMoeReference, GdnDeltaRuleByHand) {
  // D = 2, one head, one sequence of two tokens.
  std::vector<float> q{1, 0, 0, 1}, k{1, 0, 0, 1}, v{2, 3, 5, 7}, alpha{0.5f, 0.5f}, beta{1.0f, 0.5f};
  std::vector<int64_t> cu{0, 2};
  GdnReferenceInputs in;
  in.q = host(q, {2, 1, 2});
  in.k = host(k, {2, 1, 2});
  in.v = host(v, {2, 1, 2});
  in.cu_seqlens = cu;
  in.scale = 1.0;
  std::vector<double> out, state;
  gdn_prefill_reference(in, out, state);
  // t0: S = v0 k0ᵀ = [[2,0],[3,0]]; o0 = S q0 = (2, 3).
  // t1: S = [[2,0],[3,0]] + (v1 − S k1) k1ᵀ = [[2,5],[3,7]]; o1 = S q1 = (5, 7).
  EXPECT_NEAR(out[0], 2, 1e-12);
  EXPECT_NEAR(out[1], 3, 1e-12);
  EXPECT_NEAR(out[2], 5, 1e-12);
  EXPECT_NEAR(out[3], 7, 1e-12);
  EXPECT_NEAR(state[1], 5, 1e-12);  // S[v=0][k=1]
  // With gates: t0: S = β0 v0 k0ᵀ; t1: S = α1 S + β1 (v1 − α1 S k1) k1ᵀ.
  TensorView a = host(alpha, {2, 1}), b = host(beta, {2, 1});
  in.alpha = &a;
  in.beta = &b;
  gdn_prefill_reference(in, out, state);
  // t1: αS = [[1,0],[1.5,0]], S k1 = 0 → S += 0.5 (5, 7) k1ᵀ = [[1,2.5],[1.5,3.5]]; o1 = (2.5, 3.5).
  EXPECT_NEAR(out[2], 2.5, 1e-12);
  EXPECT_NEAR(out[3], 3.5, 1e-12);
  EXPECT_NEAR(state[0], 1.0, 1e-12);
  EXPECT_NEAR(state[2], 1.5, 1e-12);
  // Default scale is 1/sqrt(D); input state is used.
  std::vector<float> s0{1, 0, 0, 1};
  TensorView s0v = host(s0, {1, 1, 2, 2});
  in.alpha = in.beta = nullptr;
  in.input_state = &s0v;
  in.scale = 0.0;
  gdn_prefill_reference(in, out, state);
  // t0: S = I + (v0 − k0) k0ᵀ = [[2,0],[3,1]]; o0 = S q0 / sqrt 2 = (2, 3)/sqrt 2.
  EXPECT_NEAR(out[0], 2 / std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(out[1], 3 / std::sqrt(2.0), 1e-12);
}

TEST(MlaGdnMoeReference, GdnHeadGrouping) {
  // GVA: Hq = Hk = 1, Hv = 2: both output heads use q/k head 0 and their own v head.
  std::vector<float> q{1, 0}, k{1, 0}, v{1, 2, 3, 4};
  std::vector<int64_t> cu{0, 1};
  GdnReferenceInputs in;
  in.q = host(q, {1, 1, 2});
  in.k = host(k, {1, 1, 2});
  in.v = host(v, {1, 2, 2});
  in.cu_seqlens = cu;
  in.scale = 1.0;
  std::vector<double> out, state;
  gdn_prefill_reference(in, out, state);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_NEAR(out[0], 1, 1e-12);
  EXPECT_NEAR(out[1], 2, 1e-12);
  EXPECT_NEAR(out[2], 3, 1e-12);
  EXPECT_NEAR(out[3], 4, 1e-12);
}

TEST(MlaGdnMoeReference, MoeSwigluGateOrderAndRouting) {
  // 1 token, H = 2, I = 1, 2 experts, top-2 with weights 0.25 / 0.75 (f32 everywhere: no rounding).
  std::vector<float> x{1, 2}, w1{
      // expert 0: rows [linear; gate]
      1, 0, 0, 1,
      // expert 1
      0, 1, 1, 1};
  std::vector<float> w2{1, 2, 3, 4}, scales{0.25f, 0.75f};
  std::vector<int32_t> sel{0, 1};
  FusedMoeConfig c;
  c.activation_dtype = c.weight_dtype = c.output_dtype = DType::f32;
  FusedMoeTensors a;
  a.input = host(x, {1, 2});
  a.token_selected_experts = host_i32(sel, {1, 2});
  a.token_final_scales = host(scales, {1, 2});
  a.fc1_weights = host(w1, {2, 2, 2});
  a.fc2_weights = host(w2, {2, 2, 1});
  FusedMoeOptions o;
  o.activation = MoeActivation::swiglu;
  std::vector<double> out;
  fused_moe_reference(c, a, o, out);
  auto silu = [](double z) { return z / (1 + std::exp(-z)); };
  // expert 0: linear = 1, gate = 2 → a = silu(2)·1; expert 1: linear = 2, gate = 3 → a = silu(3)·2.
  const double a0 = silu(2.0) * 1.0, a1 = silu(3.0) * 2.0;
  EXPECT_NEAR(out[0], 0.25 * 1 * a0 + 0.75 * 3 * a1, 1e-5);
  EXPECT_NEAR(out[1], 0.25 * 2 * a0 + 0.75 * 4 * a1, 1e-5);
  // Expert parallelism: rank 1 of 2 owns experts 2..3, so neither selection counts.
  o.ep_size = 2;
  o.ep_rank = 1;
  fused_moe_reference(c, a, o, out);
  EXPECT_EQ(out[0], 0.0);
}

TEST(MlaGdnMoeReference, MoeFp8PerTensorDequantizesExactly) {
  // e4m3 inputs/weights with byte values chosen by hand; identity activation, 1 expert, top-1.
  std::vector<uint8_t> x{0x38, 0x40};          // 1.0, 2.0
  std::vector<uint8_t> w1{0x38, 0x38};         // fc1 [1, 1, 2]: h = (1 + 2) · fc1_dequant
  std::vector<uint8_t> w2{0x44, 0x44};         // fc2 [1, 2, 1] (experts, hidden, inter): 3.0
  std::vector<float> sc{1.0f}, fc1_dq{0.5f}, fc2_q{2.0f}, fc2_dq{0.25f}, in_dq{1.0f};
  std::vector<int32_t> sel{0};
  FusedMoeConfig c;
  c.quantization = MoeQuantization::fp8_per_tensor;
  c.activation_dtype = c.weight_dtype = DType::e4m3;
  c.output_dtype = DType::bf16;
  FusedMoeTensors a;
  a.input = TensorView::contiguous(x.data(), DType::e4m3, Device::cpu(), {1, 2});
  a.fc1_weights = TensorView::contiguous(w1.data(), DType::e4m3, Device::cpu(), {1, 1, 2});
  a.fc2_weights = TensorView::contiguous(w2.data(), DType::e4m3, Device::cpu(), {1, 2, 1});
  a.token_selected_experts = host_i32(sel, {1, 1});
  a.token_final_scales = host(sc, {1, 1});
  TensorView v1 = host(fc1_dq, {1}), v2 = host(fc2_q, {}), v3 = host(fc2_dq, {1}), v4 = host(in_dq, {});
  a.fc1_dequant = &v1;
  a.fc2_quant = &v2;
  a.fc2_dequant = &v3;
  a.fc1_input_dequant = &v4;
  std::vector<double> out;
  fused_moe_reference(c, a, {.activation = MoeActivation::identity}, out);
  // h = 3·0.5 = 1.5; q = e4m3(1.5·2) = 3; fc2 = 3·3·0.25 = 2.25.
  ASSERT_EQ(out.size(), 2u);
  EXPECT_DOUBLE_EQ(out[0], 2.25);
  EXPECT_DOUBLE_EQ(out[1], 2.25);
}

}  // namespace
