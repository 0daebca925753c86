// The C ABI against bad pointers: every exported function of include/flashcpp/c/*.h gets NULL tensors,
// tensors with NULL data (host arrays included), NULL out-params and NULL handles. Each case runs in a
// forked child that reports its status and last error through a pipe, so a crash (or a sanitizer abort)
// fails that case instead of the test run.
#include <cstdlib>
#include <functional>
#include <string>
#include <tuple>

#include "flashcpp/flashcpp.h"
#include "ops/ops_fixture.hpp"
#include "support/c_tensor.hpp"
#include "support/forked_call.hpp"

namespace flashcpp::testing {
namespace {

flashcpp_tensor null_data(flashcpp_tensor t) {
  t.data = nullptr;
  return t;
}

using forked::Outcome, forked::run_forked;

struct Probe {
  std::string name;
  std::function<flashcpp_status()> call;
  flashcpp_status expected;  // FLASHCPP_SUCCESS for the void functions, which only have to survive
  std::string fragment;      // in the last error for a failure
};

class CapiProbe : public OpsFixture {
 protected:
  static void SetUpTestSuite() {
    OpsFixture::SetUpTestSuite();
    ::setenv("FLASHCPP_TVM_FFI_LIB", FLASHCPP_TVM_FFI_LIB, 1);
    ::setenv("FLASHCPP_MODULE_PATH", dir_.c_str(), 1);
    ::setenv("FLASHCPP_JIT", "off", 1);
  }
  static void expect_all(const std::vector<Probe>& probes) {
    for (const Probe& p : probes) {
      const Outcome o = run_forked(p.call);
      ASSERT_TRUE(o.returned) << p.name << ": the call did not return (signal " << o.signal << ")";
      EXPECT_EQ(o.status, p.expected) << p.name << ": " << o.message;
      if (p.expected != FLASHCPP_SUCCESS)
        EXPECT_NE(o.message.find(p.fragment), std::string::npos) << p.name << ": \"" << p.fragment << "\" not in \""
                                                                 << o.message << "\"";
    }
  }
};

constexpr flashcpp_status kInvalid = FLASHCPP_INVALID_ARGUMENT;

TEST_F(CapiProbe, NormsAndAppendsSurviveNullPointers) {
  const auto in = to_c(dev(DType::bf16, {4, 256})), out = to_c(dev(DType::bf16, {4, 256})), w = to_c(dev(DType::bf16, {256}));
  const auto in3 = to_c(dev(DType::bf16, {4, 2, 128})), out3 = to_c(dev(DType::bf16, {4, 2, 128}));
  const auto w3 = to_c(dev(DType::bf16, {128}));
  using NormFn = flashcpp_status (*)(const flashcpp_tensor*, const flashcpp_tensor*, const flashcpp_tensor*, double,
                                     int32_t, void*);
  const std::vector<std::tuple<const char*, NormFn, bool>> norms = {
      {"rmsnorm", flashcpp_rmsnorm, false}, {"fused_qk_rmsnorm", flashcpp_fused_qk_rmsnorm, true},
      {"gemma_rmsnorm", flashcpp_gemma_rmsnorm, false}, {"fused_add_rmsnorm", flashcpp_fused_add_rmsnorm, false},
      {"gemma_fused_add_rmsnorm", flashcpp_gemma_fused_add_rmsnorm, false}};
  std::vector<Probe> probes;
  for (const auto& [name, fn, qk] : norms) {
    const flashcpp_tensor *a = qk ? &out3 : &out, *b = qk ? &in3 : &in, *c = qk ? &w3 : &w;
    const auto na = null_data(*a), nb = null_data(*b), nc = null_data(*c);
    const std::string n = name;
    probes.push_back({n + " first NULL", [=] { return fn(nullptr, b, c, 0, 0, nullptr); }, kInvalid, "must not be NULL"});
    probes.push_back({n + " second NULL", [=] { return fn(a, nullptr, c, 0, 0, nullptr); }, kInvalid, "must not be NULL"});
    probes.push_back({n + " weight NULL", [=] { return fn(a, b, nullptr, 0, 0, nullptr); }, kInvalid, "'weight'"});
    probes.push_back({n + " first data NULL", [=] { return fn(&na, b, c, 0, 0, nullptr); }, kInvalid, "must not be null"});
    probes.push_back({n + " second data NULL", [=] { return fn(a, &nb, c, 0, 0, nullptr); }, kInvalid, "must not be null"});
    probes.push_back({n + " weight data NULL", [=] { return fn(a, b, &nc, 0, 0, nullptr); }, kInvalid,
                      "'weight' must not be null"});
  }

  const auto k = to_c(dev(DType::bf16, {5, 4, 128})), v = to_c(dev(DType::bf16, {5, 4, 128}));
  const auto bi = to_c(dev(DType::i32, {5})), pos = to_c(dev(DType::i32, {5}));
  const auto kc = to_c(dev(DType::bf16, {10, 16, 4, 128})), vc = to_c(dev(DType::bf16, {10, 16, 4, 128}));
  const auto idx = to_c(dev(DType::i32, {10})), ptr = to_c(dev(DType::i32, {3})), last = to_c(dev(DType::i32, {2}));
  const auto cache = c_struct<flashcpp_paged_kv_cache>(&kc, &vc, &idx, &ptr, &last, FLASHCPP_KV_NHD);
  probes.push_back({"append cache NULL",
                    [=] { return flashcpp_append_paged_kv_cache(&k, &v, &bi, &pos, nullptr, nullptr); }, kInvalid,
                    "'cache' must not be NULL"});
  probes.push_back({"append key NULL",
                    [=] { return flashcpp_append_paged_kv_cache(nullptr, &v, &bi, &pos, &cache, nullptr); }, kInvalid,
                    "'append_key' must not be NULL"});
  for (int field = 0; field < 5; ++field) {
    probes.push_back({"append cache field " + std::to_string(field) + " NULL",
                      [=] {
                        flashcpp_paged_kv_cache c = cache;
                        const flashcpp_tensor** f[] = {&c.k_cache, &c.v_cache, &c.indices, &c.indptr, &c.last_page_len};
                        *f[field] = nullptr;
                        return flashcpp_append_paged_kv_cache(&k, &v, &bi, &pos, &c, nullptr);
                      },
                      kInvalid, "must not be NULL"});
  }
  const auto nk = null_data(k), nidx = null_data(idx);
  probes.push_back({"append key data NULL",
                    [=] { return flashcpp_append_paged_kv_cache(&nk, &v, &bi, &pos, &cache, nullptr); }, kInvalid,
                    "'append_key' must not be null"});
  probes.push_back({"append indices data NULL",
                    [=] {
                      flashcpp_paged_kv_cache c = cache;
                      c.indices = &nidx;
                      return flashcpp_append_paged_kv_cache(&k, &v, &bi, &pos, &c, nullptr);
                    },
                    kInvalid, "'indices' must not be null"});

  const auto ckv = to_c(dev(DType::bf16, {3, 512})), kpe = to_c(dev(DType::bf16, {3, 64}));
  const auto bi3 = to_c(dev(DType::i32, {3})), pos3 = to_c(dev(DType::i32, {3}));
  const auto ckvc = to_c(dev(DType::bf16, {8, 64, 512})), kpec = to_c(dev(DType::bf16, {8, 64, 64}));
  const auto midx = to_c(dev(DType::i32, {8})), mptr = to_c(dev(DType::i32, {2})), mlast = to_c(dev(DType::i32, {1}));
  for (int arg = 0; arg < 10; ++arg) {
    probes.push_back({"append mla arg " + std::to_string(arg) + " NULL",
                      [=] {
                        const flashcpp_tensor* a[] = {&ckv, &kpe, &bi3, &pos3, &ckvc, &kpec, &midx, &mptr, &mlast};
                        if (arg < 9) a[arg] = nullptr;
                        const auto cache = c_struct<flashcpp_paged_mla_kv_cache>(a[4], a[5], a[6], a[7], a[8]);
                        return flashcpp_append_paged_mla_kv_cache(a[0], a[1], a[2], a[3], arg == 9 ? nullptr : &cache,
                                                                  nullptr);
                      },
                      kInvalid, "must not be NULL"});
  }
  expect_all(probes);
}

TEST_F(CapiProbe, AttentionEntryPointsSurviveNullPointersAndNullHostArrays) {
  link("single_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_head_dim_qk_128_head_dim_vo_128_"
       "posenc_0_use_swa_False_use_logits_cap_False_f16qk_False");
  link("batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False");
  link("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False");
  std::vector<Probe> probes;
  probes.push_back({"attention_options_init NULL", [] { flashcpp_attention_options_init(nullptr); return FLASHCPP_SUCCESS; },
                    FLASHCPP_SUCCESS, ""});
  probes.push_back({"recommended_workspace_bytes NULL",
                    [] { flashcpp_recommended_workspace_bytes(nullptr, nullptr); return FLASHCPP_SUCCESS; },
                    FLASHCPP_SUCCESS, ""});
  probes.push_back({"batch_prefill_config_init NULL",
                    [] { flashcpp_batch_prefill_config_init(nullptr); return FLASHCPP_SUCCESS; }, FLASHCPP_SUCCESS, ""});
  probes.push_back({"batch_decode_config_init NULL",
                    [] { flashcpp_batch_decode_config_init(nullptr); return FLASHCPP_SUCCESS; }, FLASHCPP_SUCCESS, ""});
  probes.push_back({"plan destroys NULL",
                    [] {
                      flashcpp_batch_prefill_plan_destroy(nullptr);
                      flashcpp_batch_decode_plan_destroy(nullptr);
                      flashcpp_batch_mla_plan_destroy(nullptr);
                      flashcpp_fused_moe_runner_destroy(nullptr);
                      return flashcpp_batch_decode_uses_tensor_cores(nullptr) == 0 ? FLASHCPP_SUCCESS : FLASHCPP_INTERNAL;
                    },
                    FLASHCPP_SUCCESS, ""});
  probes.push_back({"status_name unknown",
                    [] { return flashcpp_status_name(static_cast<flashcpp_status>(99)) != nullptr &&
                                        flashcpp_abi_version() == FLASHCPP_C_ABI_VERSION
                                    ? FLASHCPP_SUCCESS
                                    : FLASHCPP_INTERNAL; },
                    FLASHCPP_SUCCESS, ""});

  // Single prefill / decode.
  const auto q = to_c(dev(DType::bf16, {7, 32, 128})), k = to_c(dev(DType::bf16, {300, 8, 128}));
  const auto v = to_c(dev(DType::bf16, {300, 8, 128})), o = to_c(dev(DType::bf16, {7, 32, 128}));
  flashcpp_attention_options opt;
  flashcpp_attention_options_init(&opt);
  for (int which = 0; which < 2; ++which) {
    auto fn = which == 0 ? flashcpp_single_prefill : flashcpp_single_decode;
    const std::string n = which == 0 ? "single_prefill" : "single_decode";
    probes.push_back({n + " options NULL", [=] { return fn(&q, &k, &v, &o, nullptr, nullptr, nullptr, nullptr); },
                      kInvalid, "'options' must not be NULL"});
    flashcpp_attention_options small = opt;
    small.struct_size = 8;  // a caller built against another header
    probes.push_back({n + " options struct_size", [=] { return fn(&q, &k, &v, &o, nullptr, nullptr, &small, nullptr); },
                      kInvalid, "argument 'options' has struct_size 8; it is smaller than the struct's first published size: "
                      "struct_size must be in [" + std::to_string(sizeof opt) + ", " + std::to_string(sizeof opt) + "]"});
    for (int arg = 0; arg < 4; ++arg)
      probes.push_back({n + " tensor " + std::to_string(arg) + " NULL",
                        [=] {
                          const flashcpp_tensor* a[] = {&q, &k, &v, &o};
                          a[arg] = nullptr;
                          return fn(a[0], a[1], a[2], a[3], nullptr, nullptr, &opt, nullptr);
                        },
                        kInvalid, "must not be NULL"});
    const auto nq = null_data(q);
    probes.push_back({n + " q data NULL", [=] { return fn(&nq, &k, &v, &o, nullptr, nullptr, &opt, nullptr); }, kInvalid,
                      "'q' must not be null"});
  }

  // Batch plans: a valid workspace, then each host array NULL or with NULL data.
  void* pinned = std::aligned_alloc(256, 1 << 20);
  const auto fw = to_c(dev(DType::u8, {1 << 20})), iw = to_c(dev(DType::u8, {1 << 20}));
  const auto pw = to_c(TensorView::contiguous(pinned, DType::u8, Device::cuda_host(), {1 << 20}));
  const auto ws = c_struct<flashcpp_workspace>(&fw, &iw, &pw);
  const auto qo_h = to_c(host_i32({0, 3, 5})), kv_h = to_c(host_i32({0, 2, 3})), last_h = to_c(host_i32({5, 16}));
  const auto idx_h = to_c(host_i32({0, 1, 2}));
  flashcpp_batch_prefill_config pc;
  flashcpp_batch_prefill_config_init(&pc);
  pc.num_qo_heads = 32;
  pc.num_kv_heads = 8;
  pc.head_dim_qk = 128;
  pc.page_size = 16;
  pc.backend = FLASHCPP_ATTENTION_FA2;
  auto prefill_create = [=](const flashcpp_batch_prefill_config* c, const flashcpp_workspace* w, const flashcpp_tensor* qo,
                            const flashcpp_tensor* kv, const flashcpp_tensor* last, const flashcpp_tensor* idx,
                            bool out_param) {
    flashcpp_batch_prefill_plan* plan = nullptr;
    const flashcpp_status s = flashcpp_batch_prefill_plan_create(c, w, qo, kv, last, idx, nullptr, out_param ? &plan : nullptr);
    flashcpp_batch_prefill_plan_destroy(plan);
    return s;
  };
  const auto nqo = null_data(qo_h), nkv = null_data(kv_h), nlast = null_data(last_h), nidx = null_data(idx_h);
  const auto nfw = null_data(fw), npw = null_data(pw);
  const auto ws_null_float = c_struct<flashcpp_workspace>(&nfw, &iw, &pw);
  const auto ws_null_pinned = c_struct<flashcpp_workspace>(&fw, &iw, &npw);
  const auto ws_missing = c_struct<flashcpp_workspace>(nullptr, &iw, &pw);
  const std::vector<std::tuple<std::string, std::function<flashcpp_status()>, std::string>> prefill_cases = {
      {"baseline", [=] { return prefill_create(&pc, &ws, &qo_h, &kv_h, &last_h, &idx_h, true); }, ""},
      {"config NULL", [=] { return prefill_create(nullptr, &ws, &qo_h, &kv_h, &last_h, &idx_h, true); }, "'config'"},
      {"config struct_size", [=] {
         flashcpp_batch_prefill_config larger = pc;
         larger.struct_size = sizeof pc + 8;
         return prefill_create(&larger, &ws, &qo_h, &kv_h, &last_h, &idx_h, true);
       }, "argument 'config' has struct_size " + std::to_string(sizeof pc + 8)},
      {"workspace NULL", [=] { return prefill_create(&pc, nullptr, &qo_h, &kv_h, &last_h, &idx_h, true); }, "'workspace'"},
      {"workspace.float_buffer NULL", [=] { return prefill_create(&pc, &ws_missing, &qo_h, &kv_h, &last_h, &idx_h, true); },
       "'workspace.float_buffer' must not be NULL"},
      {"float data NULL", [=] { return prefill_create(&pc, &ws_null_float, &qo_h, &kv_h, &last_h, &idx_h, true); },
       "'workspace.float_buffer' must not be null"},
      {"pinned data NULL", [=] { return prefill_create(&pc, &ws_null_pinned, &qo_h, &kv_h, &last_h, &idx_h, true); },
       "'workspace.pinned_int_buffer' must not be null"},
      {"out_plan NULL", [=] { return prefill_create(&pc, &ws, &qo_h, &kv_h, &last_h, &idx_h, false); }, "'out_plan'"},
      {"qo_indptr NULL", [=] { return prefill_create(&pc, &ws, nullptr, &kv_h, &last_h, &idx_h, true); }, "qo_indptr"},
      {"qo_indptr data NULL", [=] { return prefill_create(&pc, &ws, &nqo, &kv_h, &last_h, &idx_h, true); },
       "'qo_indptr' must not be null"},
      {"kv_indptr data NULL", [=] { return prefill_create(&pc, &ws, &qo_h, &nkv, &last_h, &idx_h, true); },
       "'kv_indptr' must not be null"},
      {"kv_last_page_len NULL", [=] { return prefill_create(&pc, &ws, &qo_h, &kv_h, nullptr, &idx_h, true); },
       "kv_last_page_len"},
      {"kv_last_page_len data NULL", [=] { return prefill_create(&pc, &ws, &qo_h, &kv_h, &nlast, &idx_h, true); },
       "'kv_last_page_len' must not be null"},
      {"kv_indices data NULL", [=] { return prefill_create(&pc, &ws, &qo_h, &kv_h, &last_h, &nidx, true); },
       "'kv_indices' must not be null"},
  };
  for (const auto& [n, fn, frag] : prefill_cases)
    probes.push_back({"batch_prefill_plan_create " + n, fn, frag.empty() ? FLASHCPP_SUCCESS : kInvalid, frag});

  flashcpp_batch_decode_config dc;
  flashcpp_batch_decode_config_init(&dc);
  dc.num_qo_heads = 32;
  dc.num_kv_heads = 8;
  dc.head_dim = 128;
  dc.page_size = 16;
  dc.backend = FLASHCPP_DECODE_CUDA_CORES;
  auto decode_create = [=](const flashcpp_batch_decode_config* c, const flashcpp_tensor* kv, const flashcpp_tensor* last,
                           const flashcpp_tensor* idx, bool out_param) {
    flashcpp_batch_decode_plan* plan = nullptr;
    const flashcpp_status s = flashcpp_batch_decode_plan_create(c, &ws, kv, last, idx, nullptr, out_param ? &plan : nullptr);
    flashcpp_batch_decode_plan_destroy(plan);
    return s;
  };
  const std::vector<std::tuple<std::string, std::function<flashcpp_status()>, std::string>> decode_cases = {
      {"baseline", [=] { return decode_create(&dc, &kv_h, &last_h, &idx_h, true); }, ""},
      {"config NULL", [=] { return decode_create(nullptr, &kv_h, &last_h, &idx_h, true); }, "'config'"},
      {"config struct_size", [=] {
         flashcpp_batch_decode_config zeroed = dc;
         zeroed.struct_size = 0;
         return decode_create(&zeroed, &kv_h, &last_h, &idx_h, true);
       }, "argument 'config' has struct_size 0"},
      {"out_plan NULL", [=] { return decode_create(&dc, &kv_h, &last_h, &idx_h, false); }, "'out_plan'"},
      {"o_dtype -2 (only -1 means as q)", [=] {
         flashcpp_batch_decode_config odd = dc;
         odd.o_dtype = -2;
         return decode_create(&odd, &kv_h, &last_h, &idx_h, true);
       }, "argument 'o_dtype' has an unknown value -2"},
      {"kv_indptr NULL", [=] { return decode_create(&dc, nullptr, &last_h, &idx_h, true); }, "kv_indptr"},
      {"kv_indptr data NULL", [=] { return decode_create(&dc, &nkv, &last_h, &idx_h, true); }, "'kv_indptr' must not be null"},
      {"kv_last_page_len data NULL", [=] { return decode_create(&dc, &kv_h, &nlast, &idx_h, true); },
       "'kv_last_page_len' must not be null"},
      {"kv_indices data NULL", [=] { return decode_create(&dc, &kv_h, &last_h, &nidx, true); },
       "'kv_indices' must not be null"},
  };
  for (const auto& [n, fn, frag] : decode_cases)
    probes.push_back({"batch_decode_plan_create " + n, fn, frag.empty() ? FLASHCPP_SUCCESS : kInvalid, frag});

  // Runs: NULL handles, and a live plan with NULL tensors, a NULL cache and tensors with NULL data.
  flashcpp_batch_prefill_plan* pplan = nullptr;
  ASSERT_EQ(flashcpp_batch_prefill_plan_create(&pc, &ws, &qo_h, &kv_h, &last_h, &idx_h, nullptr, &pplan), FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  flashcpp_batch_decode_plan* dplan = nullptr;
  ASSERT_EQ(flashcpp_batch_decode_plan_create(&dc, &ws, &kv_h, &last_h, &idx_h, nullptr, &dplan), FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  const auto bq = to_c(dev(DType::bf16, {5, 32, 128})), bo = to_c(dev(DType::bf16, {5, 32, 128}));
  const auto dq = to_c(dev(DType::bf16, {2, 32, 128})), dout = to_c(dev(DType::bf16, {2, 32, 128}));
  const auto kc = to_c(dev(DType::bf16, {3, 16, 8, 128})), vc = to_c(dev(DType::bf16, {3, 16, 8, 128}));
  const auto pidx = to_c(dev(DType::i32, {3})), pptr = to_c(dev(DType::i32, {3})), plast = to_c(dev(DType::i32, {2}));
  const auto qo_d = to_c(dev(DType::i32, {3}));
  const auto cache = c_struct<flashcpp_paged_kv_cache>(&kc, &vc, &pidx, &pptr, &plast, FLASHCPP_KV_NHD);
  const auto nbq = null_data(bq);
  probes.push_back({"run_paged plan NULL",
                    [=] { return flashcpp_batch_prefill_run_paged(nullptr, &bq, &cache, &qo_d, &bo, nullptr, nullptr); },
                    kInvalid, "'plan' must not be NULL"});
  probes.push_back({"run_paged cache NULL",
                    [=] { return flashcpp_batch_prefill_run_paged(pplan, &bq, nullptr, &qo_d, &bo, nullptr, nullptr); },
                    kInvalid, "'cache' must not be NULL"});
  probes.push_back({"run_paged q NULL",
                    [=] { return flashcpp_batch_prefill_run_paged(pplan, nullptr, &cache, &qo_d, &bo, nullptr, nullptr); },
                    kInvalid, "'q' must not be NULL"});
  probes.push_back({"run_paged qo_indptr NULL",
                    [=] { return flashcpp_batch_prefill_run_paged(pplan, &bq, &cache, nullptr, &bo, nullptr, nullptr); },
                    kInvalid, "'qo_indptr' must not be NULL"});
  probes.push_back({"run_paged q data NULL",
                    [=] { return flashcpp_batch_prefill_run_paged(pplan, &nbq, &cache, &qo_d, &bo, nullptr, nullptr); },
                    kInvalid, "'q' must not be null"});
  probes.push_back({"run_ragged plan NULL",
                    [=] {
                      const auto kv = c_struct<flashcpp_ragged_kv>(&kc, &vc, &qo_d);
                      return flashcpp_batch_prefill_run_ragged(nullptr, &bq, &kv, &qo_d, &bo, nullptr, nullptr);
                    },
                    kInvalid, "'plan' must not be NULL"});
  probes.push_back({"run_ragged k NULL",
                    [=] {
                      const auto kv = c_struct<flashcpp_ragged_kv>(nullptr, &vc, &qo_d);
                      return flashcpp_batch_prefill_run_ragged(pplan, &bq, &kv, &qo_d, &bo, nullptr, nullptr);
                    },
                    kInvalid, "'kv.k' must not be NULL"});
  probes.push_back({"run_ragged kv NULL",
                    [=] { return flashcpp_batch_prefill_run_ragged(pplan, &bq, nullptr, &qo_d, &bo, nullptr, nullptr); },
                    kInvalid, "'kv' must not be NULL"});
  probes.push_back({"decode_run plan NULL",
                    [=] { return flashcpp_batch_decode_run(nullptr, &dq, &cache, &dout, nullptr, nullptr); }, kInvalid,
                    "'plan' must not be NULL"});
  probes.push_back({"decode_run cache NULL",
                    [=] { return flashcpp_batch_decode_run(dplan, &dq, nullptr, &dout, nullptr, nullptr); }, kInvalid,
                    "'cache' must not be NULL"});
  probes.push_back({"decode_run out NULL",
                    [=] { return flashcpp_batch_decode_run(dplan, &dq, &cache, nullptr, nullptr, nullptr); }, kInvalid,
                    "'out' must not be NULL"});
  expect_all(probes);
  flashcpp_batch_prefill_plan_destroy(pplan);
  flashcpp_batch_decode_plan_destroy(dplan);
  std::free(pinned);
}

TEST_F(CapiProbe, MlaGdnAndMoeEntryPointsSurviveNullPointers) {
  std::vector<Probe> probes;
  // Sparse MLA (no runtime needed).
  const auto q = to_c(dev(DType::bf16, {4, 64, 576})), kv = to_c(dev(DType::bf16, {300, 1, 576}));
  const auto idx = to_c(dev(DType::i32, {4, 1, 128})), out = to_c(dev(DType::bf16, {4, 64, 512}));
  const auto lse = to_c(dev(DType::f32, {4, 64}));
  flashcpp_mla_options pp = FLASHCPP_MLA_OPTIONS_INIT;
  pp.sm_scale = 0.05f;
  probes.push_back({"mla_get_device_info NULL", [] { return flashcpp_mla_get_device_info(0, nullptr); }, kInvalid,
                    "'info' must not be NULL"});
  // Prefill: each required member of its tensors struct NULL in turn, and the structs NULL.
  for (int member = 0; member < 5; ++member)
    probes.push_back({"mla_sparse_prefill tensor " + std::to_string(member) + " NULL",
                      [=] {
                        flashcpp_mla_prefill_tensors t = FLASHCPP_MLA_PREFILL_TENSORS_INIT;
                        t.q = &q;
                        t.kv = &kv;
                        t.indices = &idx;
                        t.out = &out;
                        t.lse = &lse;
                        const flashcpp_tensor** m[] = {&t.q, &t.kv, &t.indices, &t.out, &t.lse};
                        *m[member] = nullptr;
                        return flashcpp_mla_sparse_prefill(&t, &pp, nullptr);
                      },
                      kInvalid, "must not be NULL"});
  probes.push_back({"mla_sparse_prefill tensors NULL", [=] { return flashcpp_mla_sparse_prefill(nullptr, &pp, nullptr); },
                    kInvalid, "'tensors' must not be NULL"});
  probes.push_back({"mla_sparse_prefill params NULL",
                    [=] {
                      const auto t =
                          c_struct<flashcpp_mla_prefill_tensors>(&q, &kv, &idx, nullptr, nullptr, &out, nullptr, &lse);
                      return flashcpp_mla_sparse_prefill(&t, nullptr, nullptr);
                    },
                    kInvalid, "'options' must not be NULL"});
  flashcpp_mla_decode_config dc = FLASHCPP_MLA_DECODE_CONFIG_INIT;
  dc.batch = 2;
  dc.s_q = 1;
  dc.h_q = 64;
  dc.d_qk = 576;
  dc.topk = 128;
  dc.num_sms = 132;
  probes.push_back({"mla_decode_plan config NULL",
                    [] { return flashcpp_mla_decode_plan(nullptr, nullptr, nullptr, nullptr, nullptr); }, kInvalid,
                    "'config' must not be NULL"});
  probes.push_back({"mla_decode_plan config struct_size",
                    [=] {
                      flashcpp_mla_decode_config zeroed = dc;
                      zeroed.struct_size = 0;  // a zero-initialized struct, not started from the initializer
                      return flashcpp_mla_decode_plan(&zeroed, nullptr, nullptr, nullptr, nullptr);
                    },
                    kInvalid, "argument 'config' has struct_size 0"});
  probes.push_back({"mla_decode_plan sizes NULL (allowed)",
                    [=] { return flashcpp_mla_decode_plan(&dc, nullptr, nullptr, nullptr, nullptr); }, FLASHCPP_SUCCESS, ""});
  probes.push_back({"mla_decode_plan size query with device_id -1",  // num_sms set: the device is never asked
                    [=] {
                      flashcpp_mla_decode_config bad = dc;
                      bad.device_id = -1;
                      flashcpp_mla_decode_plan_sizes sizes;
                      return flashcpp_mla_decode_plan(&bad, nullptr, nullptr, &sizes, nullptr);
                    },
                    kInvalid, "argument 'config.device_id' must be a visible CUDA device; device id -1 is outside [0, 64)"});
  // Decode (V3.2 and V4 share the structs): the structs NULL, then each required tensor NULL in turn.
  flashcpp_mla_decode_config dc4 = dc;
  dc4.d_qk = 512;
  flashcpp_mla_options dp = FLASHCPP_MLA_OPTIONS_INIT;
  dp.sm_scale = 0.04f;
  using DecodeEntry = flashcpp_status (*)(const flashcpp_mla_decode_config*, const flashcpp_mla_decode_tensors*,
                                          const flashcpp_mla_options*, void*);
  for (const auto& [name, entry, config] : {std::tuple{"mla_sparse_decode", DecodeEntry{&flashcpp_mla_sparse_decode}, dc},
                                            std::tuple{"mla_sparse_decode_v4", DecodeEntry{&flashcpp_mla_sparse_decode_v4}, dc4}}) {
    const std::string n = name;
    probes.push_back({n + " config NULL",
                      [=] {
                        const flashcpp_mla_decode_tensors t = FLASHCPP_MLA_DECODE_TENSORS_INIT;
                        return entry(nullptr, &t, &dp, nullptr);
                      },
                      kInvalid, "'config' must not be NULL"});
    probes.push_back({n + " tensors NULL", [=] { return entry(&config, nullptr, &dp, nullptr); }, kInvalid,
                      "'tensors' must not be NULL"});
    probes.push_back({n + " params NULL",
                      [=] {
                        const flashcpp_mla_decode_tensors t = FLASHCPP_MLA_DECODE_TENSORS_INIT;
                        return entry(&config, &t, nullptr, nullptr);
                      },
                      kInvalid, "'options' must not be NULL"});
    for (int member = 0; member < 5; ++member)
      probes.push_back({n + " required tensor NULL",
                        [=] {
                          flashcpp_mla_decode_tensors t = FLASHCPP_MLA_DECODE_TENSORS_INIT;
                          t.q = &q;
                          t.kv_cache = &kv;
                          t.indices = &idx;
                          t.out = &out;
                          t.lse = &lse;
                          const flashcpp_tensor** m[] = {&t.q, &t.kv_cache, &t.indices, &t.out, &t.lse};
                          *m[member] = nullptr;
                          return entry(&config, &t, &dp, nullptr);
                        },
                        kInvalid, "must not be NULL"});
  }
  std::vector<uint16_t> src(2 * 576, 0x3f80);
  std::vector<uint8_t> dst(2 * 656);
  const auto hs = to_c(TensorView::contiguous(src.data(), DType::bf16, Device::cpu(), {2, 576}));
  const auto hd = to_c(TensorView::contiguous(dst.data(), DType::u8, Device::cpu(), {2, 656}));
  const auto nhs = null_data(hs), nhd = null_data(hd);
  probes.push_back({"quantize kv NULL", [=] { return flashcpp_mla_quantize_kv_cache_fp8(nullptr, &hd, nullptr); },
                    kInvalid, "'kv' must not be NULL"});
  probes.push_back({"quantize out NULL", [=] { return flashcpp_mla_quantize_kv_cache_fp8(&hs, nullptr, nullptr); },
                    kInvalid, "'out' must not be NULL"});
  probes.push_back({"quantize host kv data NULL", [=] { return flashcpp_mla_quantize_kv_cache_fp8(&nhs, &hd, nullptr); },
                    kInvalid, "'kv' must not be null"});
  probes.push_back({"quantize host out data NULL", [=] { return flashcpp_mla_quantize_kv_cache_fp8(&hs, &nhd, nullptr); },
                    kInvalid, "'out' must not be null"});
  // The V4 quantizer: pages [2, 3, 1, 584] from bf16 [2, 3, 1, 512].
  std::vector<uint16_t> src4(2 * 3 * 512, 0x3f80);
  std::vector<uint8_t> dst4(2 * 3 * 584);
  const auto hs4 = to_c(TensorView::contiguous(src4.data(), DType::bf16, Device::cpu(), {2, 3, 1, 512}));
  const auto hd4 = to_c(TensorView::contiguous(dst4.data(), DType::u8, Device::cpu(), {2, 3, 1, 584}));
  const auto nhs4 = null_data(hs4), nhd4 = null_data(hd4);
  probes.push_back({"quantize v4 kv NULL", [=] { return flashcpp_mla_quantize_kv_cache_fp8_v4(nullptr, &hd4, nullptr); },
                    kInvalid, "'kv' must not be NULL"});
  probes.push_back({"quantize v4 out NULL", [=] { return flashcpp_mla_quantize_kv_cache_fp8_v4(&hs4, nullptr, nullptr); },
                    kInvalid, "'out' must not be NULL"});
  probes.push_back({"quantize v4 host kv data NULL",
                    [=] { return flashcpp_mla_quantize_kv_cache_fp8_v4(&nhs4, &hd4, nullptr); }, kInvalid,
                    "'kv' must not be null"});
  probes.push_back({"quantize v4 host out data NULL",
                    [=] { return flashcpp_mla_quantize_kv_cache_fp8_v4(&hs4, &nhd4, nullptr); }, kInvalid,
                    "'out' must not be null"});
  probes.push_back({"tensor_from_dlpack NULL", [] {
                      flashcpp_tensor t{};
                      return flashcpp_tensor_from_dlpack(nullptr, &t);
                    },
                    kInvalid, "NULL"});
  probes.push_back({"tensor_from_dlpack out NULL", [] {
                      int64_t shape[1] = {4};
                      float data[4] = {};
                      DLTensor d{};
                      d.data = data;
                      d.device = {kDLCPU, 0};
                      d.ndim = 1;
                      d.dtype = {kDLFloat, 32, 1};
                      d.shape = shape;
                      return flashcpp_tensor_from_dlpack(&d, nullptr);
                    },
                    kInvalid, "NULL"});
  probes.push_back({"prepare uris NULL", [] { return flashcpp_prepare(nullptr, 2); }, kInvalid, "NULL"});

  // Batch MLA plan: every pointer NULL in turn, the host arrays also with NULL data.
  std::vector<uint8_t> pinned(1024);
  const auto fw = to_c(dev(DType::u8, {1 << 20})), iw = to_c(dev(DType::u8, {1024}));
  const auto pw = to_c(TensorView::contiguous(pinned.data(), DType::u8, Device::cuda_host(), {1024}));
  const auto qo_h = to_c(host_i32({0, 3, 4})), kvp_h = to_c(host_i32({0, 2, 3})), kvl_h = to_c(host_i32({70, 5}));
  flashcpp_batch_mla_config mc = FLASHCPP_BATCH_MLA_CONFIG_INIT;
  mc.num_heads = 16;
  mc.page_size = 64;
  mc.backend = FLASHCPP_MLA_FA2;
  for (int arg = 0; arg < 8; ++arg)
    probes.push_back({"batch_mla_plan_create pointer " + std::to_string(arg) + " NULL",
                      [=] {
                        const flashcpp_tensor* t[] = {&fw, &iw, &pw, &qo_h, &kvp_h, &kvl_h};
                        flashcpp_batch_mla_plan* plan = nullptr;
                        if (arg < 6) t[arg] = nullptr;
                        const flashcpp_status s = flashcpp_batch_mla_plan_create(
                            arg == 6 ? nullptr : &mc, t[0], t[1], t[2], t[3], t[4], t[5], nullptr, arg == 7 ? nullptr : &plan);
                        flashcpp_batch_mla_plan_destroy(plan);
                        return s;
                      },
                      kInvalid, "must not be NULL"});
  for (int arg = 3; arg < 6; ++arg)
    probes.push_back({"batch_mla_plan_create host array " + std::to_string(arg) + " data NULL",
                      [=] {
                        flashcpp_tensor t[] = {fw, iw, pw, qo_h, kvp_h, kvl_h};
                        t[arg].data = nullptr;
                        flashcpp_batch_mla_plan* plan = nullptr;
                        const flashcpp_status s =
                            flashcpp_batch_mla_plan_create(&mc, &t[0], &t[1], &t[2], &t[3], &t[4], &t[5], nullptr, &plan);
                        flashcpp_batch_mla_plan_destroy(plan);
                        return s;
                      },
                      kInvalid, "must not be null"});
  probes.push_back({"batch_mla_plan_create config struct_size",
                    [=] {
                      flashcpp_batch_mla_config c = mc;
                      c.struct_size = sizeof mc + 16;  // a caller built against a newer header
                      flashcpp_batch_mla_plan* plan = nullptr;
                      return flashcpp_batch_mla_plan_create(&c, &fw, &iw, &pw, &qo_h, &kvp_h, &kvl_h, nullptr, &plan);
                    },
                    kInvalid, "argument 'config' has struct_size " + std::to_string(sizeof mc + 16)});
  probes.push_back({"batch_mla_run plan NULL",
                    [=] {
                      const auto cache = c_struct<flashcpp_batch_mla_cache>(&kv, &kv, &idx);
                      return flashcpp_batch_mla_run(nullptr, &q, &q, &cache, &out, nullptr, nullptr);
                    },
                    kInvalid, "'plan' must not be NULL"});

  // GDN: NULL args, each required tensor NULL, the host cu_seqlens with NULL data.
  const auto gq = to_c(dev(DType::bf16, {8, 4, 128})), gk = to_c(dev(DType::bf16, {8, 2, 128}));
  const auto gv = to_c(dev(DType::bf16, {8, 2, 128})), go = to_c(dev(DType::bf16, {8, 4, 128}));
  const auto gs = to_c(dev(DType::f32, {2, 4, 128, 128})), gcu = to_c(dev(DType::i64, {3}));
  std::vector<int64_t> cu{0, 3, 8};
  const auto gcu_h = to_c(TensorView::contiguous(cu.data(), DType::i64, Device::cpu(), {3}));
  const flashcpp_gdn_prefill_args ga{sizeof(flashcpp_gdn_prefill_args), &go, &gs, &gq, &gk, &gv, &gcu, &gcu_h,
                                     nullptr, nullptr, nullptr, nullptr, 0.0};
  probes.push_back({"gdn_prefill args NULL", [] { return flashcpp_gdn_prefill(nullptr, nullptr); }, kInvalid,
                    "'args' must not be NULL"});
  for (int field = 0; field < 6; ++field)
    probes.push_back({"gdn_prefill tensor " + std::to_string(field) + " NULL",
                      [=] {
                        flashcpp_gdn_prefill_args a = ga;
                        const flashcpp_tensor** f[] = {&a.output, &a.output_state, &a.q, &a.k, &a.v, &a.cu_seqlens};
                        *f[field] = nullptr;
                        return flashcpp_gdn_prefill(&a, nullptr);
                      },
                      kInvalid, "must not be NULL"});
  const auto ncu_h = null_data(gcu_h);
  probes.push_back({"gdn_prefill cu_seqlens_host data NULL",
                    [=] {
                      flashcpp_gdn_prefill_args a = ga;
                      a.cu_seqlens_host = &ncu_h;
                      return flashcpp_gdn_prefill(&a, nullptr);
                    },
                    kInvalid, "'cu_seqlens_host' must not be null"});
  probes.push_back({"gdn_prefill args struct_size",
                    [=] {
                      flashcpp_gdn_prefill_args a = ga;
                      a.struct_size = 8;
                      return flashcpp_gdn_prefill(&a, nullptr);
                    },
                    kInvalid, "argument 'args' has struct_size 8"});
  probes.push_back({"gdn_prefill_workspace_bytes NULL", [] { return flashcpp_gdn_prefill_workspace_bytes(0, nullptr); },
                    kInvalid, "'out_bytes' must not be NULL"});

  // Fused MoE: NULL config, out-param, runner and args.
  const flashcpp_fused_moe_config moe = FLASHCPP_FUSED_MOE_CONFIG_INIT;
  probes.push_back({"fused_moe_runner_create config struct_size",
                    [=] {
                      flashcpp_fused_moe_config c = moe;
                      c.struct_size = offsetof(flashcpp_fused_moe_config, auto_tune) - 4;  // below the first size
                      flashcpp_fused_moe_runner* r = nullptr;
                      return flashcpp_fused_moe_runner_create(&c, &r);
                    },
                    kInvalid, "argument 'config' has struct_size " +
                                  std::to_string(offsetof(flashcpp_fused_moe_config, auto_tune) - 4)});
  probes.push_back({"fused_moe_runner_create config NULL",
                    [] {
                      flashcpp_fused_moe_runner* r = nullptr;
                      return flashcpp_fused_moe_runner_create(nullptr, &r);
                    },
                    kInvalid, "'config' must not be NULL"});
  probes.push_back({"fused_moe_runner_create out NULL", [=] { return flashcpp_fused_moe_runner_create(&moe, nullptr); },
                    kInvalid, "'out_runner' must not be NULL"});
  probes.push_back({"fused_moe_run runner NULL", [] { return flashcpp_fused_moe_run(nullptr, nullptr, nullptr); },
                    kInvalid, "'runner' must not be NULL"});
  probes.push_back({"fused_moe_tune runner NULL",
                    [] { return flashcpp_fused_moe_tune(nullptr, nullptr, nullptr, nullptr, nullptr); }, kInvalid,
                    "'runner' must not be NULL"});
  probes.push_back({"fused_moe_tactics runner NULL",
                    [] {
                      int64_t g1 = 0, g2 = 0;
                      return flashcpp_fused_moe_tactics(nullptr, 1, &g1, &g2);
                    },
                    kInvalid, "'runner' must not be NULL"});
  probes.push_back({"fused_moe_set_tactics runner NULL", [] { return flashcpp_fused_moe_set_tactics(nullptr, 1, -1, -1); },
                    kInvalid, "'runner' must not be NULL"});
  expect_all(probes);
}

}  // namespace
}  // namespace flashcpp::testing
