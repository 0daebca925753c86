// Argument packing per op against FlashInfer v0.6.3's export signatures (facts sheet §A.1-§A.8): the
// recording stand-in logs what each export receives; every position, type and value is compared.
#include <cmath>
#include <cstdlib>

#include "ops/ops_fixture.hpp"

namespace flashcpp::testing {
namespace {

class OpsPacking : public OpsFixture {
 protected:
  static std::string plan_array(int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? ",i:" : "i:") + std::to_string(100 + i);
    return s + "]";
  }
  struct HostWorkspace {
    void* pinned = nullptr;
    Workspace ws;
    explicit HostWorkspace(int64_t float_bytes = 1 << 20, int64_t int_bytes = 1 << 20) {
      pinned = std::aligned_alloc(256, static_cast<size_t>(int_bytes));
      ws.float_buffer = dev(DType::u8, {float_bytes});
      ws.int_buffer = dev(DType::u8, {int_bytes});
      ws.pinned_int_buffer = TensorView::contiguous(pinned, DType::u8, Device::cuda_host(), {int_bytes});
    }
    ~HostWorkspace() { std::free(pinned); }
  };
};

TEST_F(OpsPacking, Rmsnorm2dAndQk3dShareTheRmsnormExport) {
  auto in = dev(DType::bf16, {4, 256}), out = dev(DType::bf16, {4, 256}), w = dev(DType::bf16, {256});
  rmsnorm(rt(), out, in, w, {.eps = 1e-5, .enable_pdl = true});
  expect_args(one_call("rmsnorm"), {T(out), T(in), T(w), F(1e-5), B(true)});

  // 3-D q/k slice of a fused qkv tensor: strides of dims 0 and 1 pass through unchanged.
  auto qk = dev_strided(DType::f16, {3, 8, 128}, {6144, 128, 1}), qo = dev(DType::f16, {3, 8, 128});
  auto w2 = dev(DType::f16, {128});
  fused_qk_rmsnorm(rt(), qo, qk, w2, {}, nullptr);
  expect_args(one_call("rmsnorm"), {T(qo), T(qk), T(w2), F(1e-6), B(false)});
}

TEST_F(OpsPacking, GemmaAndFusedAddNorms) {
  auto in = dev(DType::f16, {2, 64}), res = dev(DType::f16, {2, 64}), out = dev(DType::f16, {2, 64});
  auto w = dev(DType::f16, {64});
  gemma_rmsnorm(rt(), out, in, w, {.eps = 1e-3});
  expect_args(one_call("gemma_rmsnorm"), {T(out), T(in), T(w), F(1e-3), B(false)});
  fused_add_rmsnorm(rt(), in, res, w, {.eps = 2e-6, .enable_pdl = true});
  expect_args(one_call("fused_add_rmsnorm"), {T(in), T(res), T(w), F(2e-6), B(true)});
  gemma_fused_add_rmsnorm(rt(), in, res, w);
  expect_args(one_call("gemma_fused_add_rmsnorm"), {T(in), T(res), T(w), F(1e-6), B(false)});
}

TEST_F(OpsPacking, EmptyNormLaunchesNothing) {
  auto in = dev(DType::bf16, {0, 256}), out = dev(DType::bf16, {0, 256}), w = dev(DType::bf16, {256});
  rmsnorm(rt(), out, in, w);
  EXPECT_EQ(recorded(), "");
}

TEST_F(OpsPacking, AppendPagedKvCacheNhdAndHnd) {
  link("page");
  for (KvLayout layout : {KvLayout::nhd, KvLayout::hnd}) {
    PagedKvCache c;
    c.layout = layout;
    c.k_cache = layout == KvLayout::nhd ? dev(DType::bf16, {10, 16, 4, 128}) : dev(DType::bf16, {10, 4, 16, 128});
    c.v_cache = dev(DType::bf16, {c.k_cache.shape[0], c.k_cache.shape[1], c.k_cache.shape[2], 128});
    c.indices = dev(DType::i32, {10});
    c.indptr = dev(DType::i32, {3});
    c.last_page_len = dev(DType::i32, {2});
    auto k = dev_strided(DType::bf16, {5, 4, 128}, {1536, 128, 1}), v = dev(DType::bf16, {5, 4, 128});
    auto bi = dev(DType::i32, {5}), pos = dev(DType::i32, {5});
    append_paged_kv_cache(rt(), k, v, bi, pos, c);
    expect_args(one_call("append_paged_kv_cache"),
                {T(k), T(v), T(bi), T(pos), T(c.k_cache), T(c.v_cache), T(c.indices), T(c.indptr), T(c.last_page_len),
                 I(layout == KvLayout::nhd ? 0 : 1)});
  }
}

TEST_F(OpsPacking, AppendPagedMlaKvCache) {
  link("page");
  PagedMlaKvCache c;
  c.ckv_cache = dev(DType::bf16, {8, 64, 512});
  c.kpe_cache = dev(DType::bf16, {8, 64, 64});
  c.indices = dev(DType::i32, {8});
  c.indptr = dev(DType::i32, {2});
  c.last_page_len = dev(DType::i32, {1});
  auto ckv = dev(DType::bf16, {3, 512}), kpe = dev(DType::bf16, {3, 64});
  auto bi = dev(DType::i32, {3}), pos = dev(DType::i32, {3});
  append_paged_mla_kv_cache(rt(), ckv, kpe, bi, pos, c);
  expect_args(one_call("append_paged_mla_kv_cache"), {T(ckv), T(kpe), T(bi), T(pos), T(c.ckv_cache), T(c.kpe_cache),
                                                      T(c.indices), T(c.indptr), T(c.last_page_len)});
}

TEST_F(OpsPacking, SinglePrefillUriAndFifteenArguments) {
  link("single_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_head_dim_qk_128_head_dim_vo_128_"
       "posenc_0_use_swa_True_use_logits_cap_True_f16qk_False");
  auto q = dev(DType::bf16, {7, 32, 128}), k = dev(DType::bf16, {8, 300, 128}), v = dev(DType::bf16, {8, 300, 128});
  auto o = dev(DType::bf16, {7, 32, 128}), lse = dev(DType::f32, {7, 32}), tmp = dev(DType::u8, {32 << 20});
  SinglePrefillOptions opt;
  opt.causal = true;
  opt.layout = KvLayout::hnd;
  opt.window_left = 64;
  opt.logits_soft_cap = 30.0;
  opt.sm_scale = 0.125;
  single_prefill(rt(), q, k, v, o, &lse, tmp, opt);
  expect_args(one_call("run"), {T(q), T(k), T(v), T(tmp), T(o), T(lse), I(1), I(1), I(64), "None", "None", F(30.0),
                                F(0.125), F(1.0), F(1e-4)});
}

TEST_F(OpsPacking, SinglePrefillDefaultsAndEmptyTmp) {
  link("single_prefill_with_kv_cache_dtype_q_f16_dtype_kv_f16_dtype_o_f16_head_dim_qk_64_head_dim_vo_64_"
       "posenc_0_use_swa_False_use_logits_cap_False_f16qk_True");
  auto q = dev(DType::f16, {5, 4, 64}), k = dev(DType::f16, {9, 2, 64}), v = dev(DType::f16, {9, 2, 64});
  auto o = dev(DType::f16, {5, 4, 64});
  const TensorView no_tmp;
  single_prefill(rt(), q, k, v, o, nullptr, no_tmp, {.use_fp16_qk_reduction = true});
  // An empty tmp reaches FlashInfer as a null-data [0] buffer (it then never splits the KV sequence).
  const TensorView null_tmp = TensorView::contiguous(nullptr, DType::u8, Device::cuda(0), {0});
  expect_args(one_call("run"), {T(q), T(k), T(v), T(null_tmp), T(o), "None", I(0), I(0), I(-1), "None", "None",
                                F(0.0), F(1.0 / 8.0), F(1.0), F(1e-4)});
}

TEST_F(OpsPacking, SingleDecodeCudaCoresThirteenArguments) {
  link("single_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_head_dim_qk_128_head_dim_vo_128_"
       "posenc_0_use_swa_False_use_logits_cap_False");
  auto q = dev(DType::bf16, {32, 128}), k = dev(DType::bf16, {4096, 8, 128}), v = dev(DType::bf16, {4096, 8, 128});
  auto o = dev(DType::bf16, {32, 128}), lse = dev(DType::f32, {32}), tmp = dev(DType::u8, {32 << 20});
  single_decode(rt(), q, k, v, o, &lse, tmp, {.backend = DecodeBackend::cuda_cores});
  expect_args(one_call("run"), {T(q), T(k), T(v), T(tmp), T(o), T(lse), I(0), I(-1), "None", F(0.0),
                                F(1.0 / std::sqrt(128.0)), F(1.0), F(1e-4)});
}

TEST_F(OpsPacking, SingleDecodeGroupSixteenTakesTheTensorCorePath) {
  link("single_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_head_dim_qk_128_head_dim_vo_128_"
       "posenc_0_use_swa_False_use_logits_cap_False_f16qk_False");
  auto q = dev(DType::bf16, {32, 128}), k = dev(DType::bf16, {100, 2, 128}), v = dev(DType::bf16, {100, 2, 128});
  auto o = dev(DType::bf16, {32, 128}), tmp = dev(DType::u8, {32 << 20});
  single_decode(rt(), q, k, v, o, nullptr, tmp, {});
  const auto q3 = TensorView::contiguous(q.data, DType::bf16, q.device, {1, 32, 128});
  const auto o3 = TensorView::contiguous(o.data, DType::bf16, o.device, {1, 32, 128});
  expect_args(one_call("run"), {T(q3), T(k), T(v), T(tmp), T(o3), "None", I(0), I(0), I(-1), "None", "None", F(0.0),
                                F(1.0 / std::sqrt(128.0)), F(1.0), F(1e-4)});
}

TEST_F(OpsPacking, BatchPrefillFa2PagedPlanAndRun) {
  link("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False");
  HostWorkspace hw;
  PrefillIndptrs ip;
  ip.qo_indptr = host_i32({0, 3, 5});
  ip.kv_indptr = host_i32({0, 2, 3});
  ip.kv_last_page_len = host_i32({5, 16});
  BatchPrefillConfig c;
  c.num_qo_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim_qk = 128;
  c.page_size = 16;
  c.causal = true;
  c.backend = AttentionBackend::fa2;
  auto plan = BatchPrefillPlan::create(rt(), hw.ws, ip, c);
  EXPECT_EQ(plan.backend(), AttentionBackend::fa2);
  auto a = one_call("plan");
  ASSERT_EQ(a.size(), 20u);
  expect_args(a, {bytes(hw.ws.float_buffer, 1 << 20), bytes(hw.ws.int_buffer, 1 << 20),
                  bytes(hw.ws.pinned_int_buffer, 1 << 20, true), T(ip.qo_indptr, true), T(ip.kv_indptr, true), "",
                  I(5), I(2), I(32), I(8), I(16), B(false), I(128), I(128), B(true), I(-1), I(-1), B(false), I(0)});
  // kv_len_arr: (pages - 1) * page_size + last_page_len per request, on the host.
  EXPECT_EQ(a[6].rfind("T(0.32;[2];[1];1:0;@", 0), 0u) << a[6];
  EXPECT_NE(a[6].find(";{21,16})"), std::string::npos) << a[6];
  EXPECT_EQ(plan.plan_info().size(), 15u);

  PagedKvCache kv;
  kv.k_cache = dev(DType::bf16, {4, 16, 8, 128});
  kv.v_cache = dev(DType::bf16, {4, 16, 8, 128});
  kv.indices = dev(DType::i32, {3});
  kv.indptr = dev(DType::i32, {3});
  kv.last_page_len = dev(DType::i32, {2});
  auto q = dev(DType::bf16, {5, 32, 128}), o = dev(DType::bf16, {5, 32, 128}), qo = dev(DType::i32, {3});
  auto lse = dev(DType::f32, {5, 32});
  plan.run_paged(q, kv, qo, o, &lse);
  expect_args(one_call("paged_run"),
              {bytes(hw.ws.float_buffer, 1 << 20), bytes(hw.ws.int_buffer, 1 << 20), plan_array(15), T(q), T(kv.k_cache),
               T(kv.v_cache), T(qo), T(kv.indptr), T(kv.indices), T(kv.last_page_len), T(o), T(lse), I(1), I(0), I(-1),
               B(false), "None", "None", "None", "None", "None", "None", F(0.0), F(1.0 / std::sqrt(128.0)), F(1.0),
               F(1e-4), I(0)});
}

TEST_F(OpsPacking, BatchPrefillFa2RaggedPlanAndRun) {
  link("batch_prefill_with_kv_cache_dtype_q_f16_dtype_kv_f16_dtype_o_f16_dtype_idx_i32_head_dim_qk_192_"
       "head_dim_vo_128_posenc_0_use_swa_True_use_logits_cap_False_f16qk_False");
  HostWorkspace hw;
  PrefillIndptrs ip;
  ip.qo_indptr = host_i32({0, 2, 6});
  ip.kv_indptr = host_i32({0, 10, 14});
  BatchPrefillConfig c;
  c.kv_storage = KvStorage::ragged;
  c.num_qo_heads = 16;
  c.num_kv_heads = 16;
  c.head_dim_qk = 192;
  c.head_dim_vo = 128;
  c.q_dtype = c.kv_dtype = DType::f16;
  c.window_left = 128;
  c.layout = KvLayout::hnd;
  c.sm_scale = 0.07;
  c.enable_pdl = true;
  c.enable_cuda_graph = true;
  c.fixed_split_size = 256;
  c.disable_split_kv = true;
  auto plan = BatchPrefillPlan::create(rt(), hw.ws, ip, c);
  auto a = one_call("plan");
  expect_args(a, {"", "", "", T(ip.qo_indptr, true), T(ip.kv_indptr, true), "", I(6), I(2), I(16), I(16), I(1),
                  B(true), I(192), I(128), B(false), I(128), I(256), B(true), I(0)});
  EXPECT_NE(a[6].find(";{10,4})"), std::string::npos) << a[6];

  auto q = dev(DType::f16, {6, 16, 192}), k = dev(DType::f16, {16, 14, 192}), v = dev(DType::f16, {16, 14, 128});
  auto o = dev(DType::f16, {6, 16, 128}), qo = dev(DType::i32, {3}), kvp = dev(DType::i32, {3});
  plan.run_ragged(q, k, v, qo, kvp, o);
  expect_args(one_call("ragged_run"),
              {"", "", plan_array(15), T(q), T(k), T(v), T(qo), T(kvp), T(o), "None", I(0), I(1), I(128), B(true),
               "None", "None", "None", "None", "None", "None", F(0.0), F(0.07), F(1.0), F(1e-4), I(0)});
}

TEST_F(OpsPacking, BatchPrefillFa3PlanSixteenAndRunsTwentyFourAndTwentyTwo) {
  const std::string uri =
      "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
      "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_True_f16qk_False_sm90";
  link(uri);
  set_device_facts_for_testing(&hopper_device_facts);  // automatic picks fa3 on Hopper
  HostWorkspace hw;
  PrefillIndptrs ip;
  ip.qo_indptr = host_i32({0, 4});
  ip.kv_indptr = host_i32({0, 2});
  ip.kv_last_page_len = host_i32({1});
  BatchPrefillConfig c;
  c.num_qo_heads = 8;
  c.num_kv_heads = 8;
  c.head_dim_qk = 128;
  c.page_size = 8;
  c.logits_soft_cap = 50.0;
  auto plan = BatchPrefillPlan::create(rt(), hw.ws, ip, c);
  EXPECT_EQ(plan.backend(), AttentionBackend::fa3);
  EXPECT_EQ(plan.module_uri(), uri);
  auto a = one_call("plan");
  expect_args(a, {"", "", "", T(ip.qo_indptr, true), T(ip.kv_indptr, true), "", I(4), I(1), I(8), I(8), I(8),
                  B(false), I(128), I(128), B(false), I(-1)});
  EXPECT_NE(a[6].find(";{9})"), std::string::npos) << a[6];
  EXPECT_EQ(plan.plan_info().size(), 9u);

  PagedKvCache kv;
  kv.k_cache = dev(DType::bf16, {2, 8, 8, 128});
  kv.v_cache = dev(DType::bf16, {2, 8, 8, 128});
  kv.indices = dev(DType::i32, {2});
  kv.indptr = dev(DType::i32, {2});
  kv.last_page_len = dev(DType::i32, {1});
  auto q = dev(DType::bf16, {4, 8, 128}), o = dev(DType::bf16, {4, 8, 128}), qo = dev(DType::i32, {2});
  plan.run_paged(q, kv, qo, o);
  expect_args(one_call("paged_run"),
              {"", "", plan_array(9), T(q), T(kv.k_cache), T(kv.v_cache), T(qo), T(kv.indptr), T(kv.indices),
               T(kv.last_page_len), T(o), "None", I(0), I(0), I(-1), B(false), "None", "None", "None", "None",
               F(50.0), F(1.0 / std::sqrt(128.0)), F(1.0), I(0)});

  c.kv_storage = KvStorage::ragged;
  ip.kv_indptr = host_i32({0, 9});
  auto ragged = BatchPrefillPlan::create(rt(), hw.ws, ip, c);
  (void)recorded();
  auto k = dev(DType::bf16, {9, 8, 128}), v = dev(DType::bf16, {9, 8, 128}), kvp = dev(DType::i32, {2});
  ragged.run_ragged(q, k, v, qo, kvp, o);
  expect_args(one_call("ragged_run"), {"", "", plan_array(9), T(q), T(k), T(v), T(qo), T(kvp), T(o), "None", I(0),
                                       I(0), I(-1), B(false), "None", "None", "None", "None", F(50.0),
                                       F(1.0 / std::sqrt(128.0)), F(1.0), I(0)});
}

TEST_F(OpsPacking, AutomaticBackendUsesFa2ForRaggedHndAndMixedDtypes) {
  link("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False");
  link("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_f16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False");
  set_device_facts_for_testing(&hopper_device_facts);
  HostWorkspace hw;
  PrefillIndptrs ip;
  ip.qo_indptr = host_i32({0, 4});
  ip.kv_indptr = host_i32({0, 4});
  BatchPrefillConfig c;
  c.kv_storage = KvStorage::ragged;
  c.num_qo_heads = c.num_kv_heads = 4;
  c.head_dim_qk = 128;
  c.layout = KvLayout::hnd;
  EXPECT_EQ(BatchPrefillPlan::create(rt(), hw.ws, ip, c).backend(), AttentionBackend::fa2);
  c.layout = KvLayout::nhd;
  c.o_dtype = DType::f16;
  EXPECT_EQ(BatchPrefillPlan::create(rt(), hw.ws, ip, c).backend(), AttentionBackend::fa2);
  c.backend = AttentionBackend::fa3;
  EXPECT_INVALID(BatchPrefillPlan::create(rt(), hw.ws, ip, c), "fa3 needs q, kv and o of one 16-bit dtype");
}

TEST_F(OpsPacking, BatchDecodeCudaCoresPlanFifteenAndRunNineteen) {
  link("batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False");
  HostWorkspace hw;
  DecodeIndptrs ip;
  ip.kv_indptr = host_i32({0, 256, 256, 300});
  ip.kv_last_page_len = host_i32({16, 0, 7});
  std::vector<int32_t> ids(300);
  for (int i = 0; i < 300; ++i) ids[static_cast<size_t>(i)] = 299 - i;
  auto host_ids = host_i32(ids);
  ip.kv_indices = &host_ids;
  BatchDecodeConfig c;
  c.num_qo_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.page_size = 16;
  c.backend = DecodeBackend::cuda_cores;
  auto plan = BatchDecodePlan::create(rt(), hw.ws, ip, c);
  EXPECT_FALSE(plan.uses_tensor_cores());
  const auto empty_q = TensorView::contiguous(nullptr, DType::bf16, Device::cpu(), {0});
  expect_args(one_call("plan"),
              {bytes(hw.ws.float_buffer, 1 << 20), bytes(hw.ws.int_buffer, 1 << 20),
               bytes(hw.ws.pinned_int_buffer, 1 << 20, true), T(ip.kv_indptr, true), I(3), I(32), I(8), I(16),
               B(false), I(-1), F(0.0), I(128), I(128), T(empty_q), T(empty_q)});
  EXPECT_EQ(plan.plan_info().size(), 10u);

  PagedKvCache kv;
  kv.k_cache = dev(DType::bf16, {300, 16, 8, 128});
  kv.v_cache = dev(DType::bf16, {300, 16, 8, 128});
  kv.indices = dev(DType::i32, {300});
  kv.indptr = dev(DType::i32, {4});
  kv.last_page_len = dev(DType::i32, {3});
  auto q = dev(DType::bf16, {3, 32, 128}), o = dev(DType::bf16, {3, 32, 128}), lse = dev(DType::f32, {3, 32});
  plan.run(q, kv, o, &lse);
  expect_args(one_call("run"), {bytes(hw.ws.float_buffer, 1 << 20), bytes(hw.ws.int_buffer, 1 << 20), plan_array(10),
                                T(q), T(kv.k_cache), T(kv.v_cache), T(kv.indptr), T(kv.indices), T(kv.last_page_len),
                                T(o), T(lse), I(0), I(-1), B(false), "None", F(0.0), F(1.0 / std::sqrt(128.0)),
                                F(1.0), F(1e-4)});
  // The planned page ids reach 299: a cache of 299 pages is refused before anything runs.
  kv.k_cache = dev(DType::bf16, {299, 16, 8, 128});
  kv.v_cache = dev(DType::bf16, {299, 16, 8, 128});
  EXPECT_INVALID(plan.run(q, kv, o, &lse), "holds page id 299");
  EXPECT_EQ(recorded(), "");
}

TEST_F(OpsPacking, BatchDecodeTensorCorePathPlansThePrefillModuleWithAnArangeQueryIndptr) {
  link("batch_prefill_with_kv_cache_dtype_q_f16_dtype_kv_f16_dtype_o_f16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False");
  HostWorkspace hw;
  DecodeIndptrs ip;
  ip.kv_indptr = host_i32({0, 3, 5});
  ip.kv_last_page_len = host_i32({2, 16});
  BatchDecodeConfig c;
  c.num_qo_heads = 64;
  c.num_kv_heads = 8;  // group 8 > 4: tensor cores
  c.head_dim = 128;
  c.page_size = 16;
  c.q_dtype = c.kv_dtype = DType::f16;
  // Without a GPU the plan's own H2D copy of the query indptr fails after FlashInfer's plan ran.
  try {
    (void)BatchDecodePlan::create(rt(), hw.ws, ip, c);
    ADD_FAILURE() << "expected the H2D copy to fail without a GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::cuda_error) << e.what();
  }
  auto a = one_call("plan");
  // The int workspace given to FlashInfer excludes the 256-byte tail that holds the query indptr.
  expect_args(a, {bytes(hw.ws.float_buffer, 1 << 20), bytes(hw.ws.int_buffer, (1 << 20) - 256),
                  bytes(hw.ws.pinned_int_buffer, (1 << 20) - 256, true), "", T(ip.kv_indptr, true), "", I(2), I(2),
                  I(64), I(8), I(16), B(false), I(128), I(128), B(false), I(-1), I(-1), B(false), I(0)});
  EXPECT_NE(a[4].find(";{0,1,2})"), std::string::npos) << a[4];
  EXPECT_NE(a[6].find(";{34,32})"), std::string::npos) << a[6];
  const auto* tail = reinterpret_cast<const int32_t*>(static_cast<char*>(hw.pinned) + (1 << 20) - 256);
  EXPECT_EQ(tail[0], 0);
  EXPECT_EQ(tail[1], 1);
  EXPECT_EQ(tail[2], 2);
}

TEST_F(OpsPacking, PlanInfoOfTheWrongLengthIsRefused) {
  link("batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False");
  HostWorkspace hw;
  DecodeIndptrs ip;
  ip.kv_indptr = host_i32({0, 1});
  ip.kv_last_page_len = host_i32({1});
  BatchDecodeConfig c;
  c.num_qo_heads = c.num_kv_heads = 8;
  c.head_dim = 128;
  c.page_size = 16;
  set_plan_entries(3);
  try {
    (void)BatchDecodePlan::create(rt(), hw.ws, ip, c);
    ADD_FAILURE() << "expected ffi_error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::ffi_error);
    EXPECT_NE(std::string(e.what()).find("3 plan-info entries"), std::string::npos) << e.what();
  }
}

TEST_F(OpsPacking, MissingModuleIsNotFoundNamingTheUri) {
  auto q = dev(DType::bf16, {1, 4, 256}), k = dev(DType::bf16, {4, 4, 256}), v = dev(DType::bf16, {4, 4, 256});
  auto o = dev(DType::bf16, {1, 4, 256});
  try {
    single_prefill(rt(), q, k, v, o, nullptr, TensorView{}, {});
    ADD_FAILURE() << "expected not_found";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_NE(std::string(e.what()).find("single_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_"
                                         "head_dim_qk_256_head_dim_vo_256_posenc_0_use_swa_False_use_logits_cap_"
                                         "False_f16qk_False"),
              std::string::npos)
        << e.what();
  }
}

TEST(OpsUri, MatchFlashInferNaming) {
  jit::AttentionSpec v{.q = DType::f16, .kv = DType::f16, .o = DType::f16, .head_dim_qk = 64, .head_dim_vo = 64,
                       .use_sliding_window = true};
  EXPECT_EQ(jit::batch_decode_uri(v),
            "batch_decode_with_kv_cache_dtype_q_f16_dtype_kv_f16_dtype_o_f16_dtype_idx_i32_head_dim_qk_64_head_dim_vo_"
            "64_posenc_0_use_swa_True_use_logits_cap_False");
  EXPECT_EQ(jit::single_decode_uri(v),
            "single_decode_with_kv_cache_dtype_q_f16_dtype_kv_f16_dtype_o_f16_head_dim_qk_64_head_dim_vo_64_posenc_0_"
            "use_swa_True_use_logits_cap_False");
  v = {.backend = jit::Backend::fa3, .head_dim_qk = 192, .head_dim_vo = 128, .use_logits_soft_cap = true};
  EXPECT_EQ(jit::batch_prefill_uri(v),
            "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_192_head_"
            "dim_vo_128_posenc_0_use_swa_False_use_logits_cap_True_f16qk_False_sm90");
}

TEST(OpsBackend, DecodeTensorCoreRuleFollowsFlashInfersWrapper) {
  EXPECT_TRUE(decode_uses_tensor_cores(32, 8, DecodeBackend::automatic));    // group 4 (measured faster)
  EXPECT_FALSE(decode_uses_tensor_cores(32, 32, DecodeBackend::automatic));  // group 1
  EXPECT_FALSE(decode_uses_tensor_cores(24, 8, DecodeBackend::automatic));   // group 3
  EXPECT_TRUE(decode_uses_tensor_cores(64, 8, DecodeBackend::automatic));    // group 8 > 4
  EXPECT_TRUE(decode_uses_tensor_cores(48, 8, DecodeBackend::automatic));    // group 6: no decode kernel
  EXPECT_TRUE(decode_uses_tensor_cores(32, 8, DecodeBackend::tensor_cores));
  EXPECT_FALSE(decode_uses_tensor_cores(64, 8, DecodeBackend::cuda_cores));
}

}  // namespace
}  // namespace flashcpp::testing
