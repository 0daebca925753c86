// jit layer without a compiler: FlashInfer 0.6.3 URIs, parsing, the template renderer, the generated
// sources of representative variants, and the compiler flags.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "jit/jit.hpp"

namespace fs = std::filesystem;
using namespace flashcpp;
using namespace flashcpp::jit;

namespace {

BuildOptions test_options() {
  BuildOptions o = BuildOptions::from_env();
  o.cuda_archs = {"9.0a"};
  return o;
}

fs::path data_dir() { return test_options().flashinfer_data_dir; }

bool have_sources() {
  std::error_code ec;
  return fs::is_regular_file(data_dir() / "csrc" / "batch_decode_customize_config.jinja", ec);
}

const GeneratedFile& file(const ModulePlan& p, const std::string& name) {
  for (const auto& f : p.files)
    if (f.name == name) return f;
  throw std::runtime_error("plan has no file " + name);
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::vector<std::string> names(const std::vector<fs::path>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(p.filename().string());
  return out;
}

Toolchain fake_toolchain(const std::string& version = "13.0") {
  Toolchain tc;
  tc.cuda_home = "/opt/cuda";
  tc.nvcc = "/opt/cuda/bin/nvcc";
  tc.cxx = "c++";
  tc.nvcc_version = version;
  tc.nvcc_version_full = "Build cuda_" + version;
  return tc;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// URIs: expected strings spelled as FlashInfer 0.6.3's get_*_uri functions spell them.

struct UriCase {
  std::string expected;
  std::string actual;
};

TEST(JitUri, MatchesFlashInferScheme) {
  AttentionSpec bf16_128;  // defaults: bf16, i32, 128/128, posenc 0, no swa/cap/f16qk
  AttentionSpec fa3 = bf16_128;
  fa3.backend = Backend::fa3;

  AttentionSpec f16_e4m3_256;
  f16_e4m3_256.q = f16_e4m3_256.o = DType::f16;
  f16_e4m3_256.kv = DType::e4m3;
  f16_e4m3_256.head_dim_qk = f16_e4m3_256.head_dim_vo = 256;
  f16_e4m3_256.use_sliding_window = true;
  f16_e4m3_256.use_logits_soft_cap = true;

  AttentionSpec alibi64;
  alibi64.q = alibi64.kv = alibi64.o = DType::f16;
  alibi64.head_dim_qk = alibi64.head_dim_vo = 64;
  alibi64.pos_encoding = 2;
  alibi64.use_sliding_window = true;

  AttentionSpec fa3_192;
  fa3_192.backend = Backend::fa3;
  fa3_192.head_dim_qk = 192;
  fa3_192.idx = DType::i64;
  fa3_192.use_fp16_qk_reduction = true;

  AttentionSpec fp8_fa3;
  fp8_fa3.backend = Backend::fa3;
  fp8_fa3.q = fp8_fa3.kv = DType::e4m3;
  fp8_fa3.o = DType::bf16;

  MlaSpec mla;
  mla.q = mla.kv = mla.o = DType::f16;
  MlaSpec mla_sm90 = mla;
  mla_sm90.backend = Backend::fa3;
  mla_sm90.profiler = true;

  const std::vector<UriCase> cases = {
      {"norm", norm_uri()},
      {"page", page_uri()},
      {"gdn_prefill_sm90", gdn_prefill_sm90_uri()},
      // The example in the reference facts (tvm-ffi-and-flashinfer.md §C.3).
      {"batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False_sm90",
       batch_prefill_uri(fa3)},
      {"batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False",
       batch_prefill_uri(bf16_128)},
      {"batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i64_head_dim_qk_192_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_True_sm90",
       batch_prefill_uri(fa3_192)},
      {"batch_prefill_with_kv_cache_dtype_q_e4m3_dtype_kv_e4m3_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False_sm90",
       batch_prefill_uri(fp8_fa3)},
      {"single_prefill_with_kv_cache_dtype_q_f16_dtype_kv_e4m3_dtype_o_f16_head_dim_qk_256_head_dim_vo_256_"
       "posenc_0_use_swa_True_use_logits_cap_True_f16qk_False",
       single_prefill_uri(f16_e4m3_256)},
      {"single_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_head_dim_qk_128_head_dim_vo_128_"
       "posenc_0_use_swa_False_use_logits_cap_False_f16qk_False_sm90",
       single_prefill_uri(fa3)},
      {"single_decode_with_kv_cache_dtype_q_f16_dtype_kv_f16_dtype_o_f16_head_dim_qk_64_head_dim_vo_64_posenc_2_"
       "use_swa_True_use_logits_cap_False",
       single_decode_uri(alibi64)},
      {"batch_decode_with_kv_cache_dtype_q_f16_dtype_kv_e4m3_dtype_o_f16_dtype_idx_i32_head_dim_qk_256_"
       "head_dim_vo_256_posenc_0_use_swa_True_use_logits_cap_True",
       batch_decode_uri(f16_e4m3_256)},
      {"batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False",
       batch_decode_uri(bf16_128)},
      // The MLA URIs of the prebuilt jit-cache (flashinfer-0.6.3.md §C).
      {"batch_mla_attention_dtype_q_f16_dtype_kv_f16_dtype_o_f16_dtype_idx_i32_head_dim_ckv_512_head_dim_kpe_64_"
       "profiler_False",
       batch_mla_uri(mla)},
      {"batch_mla_attention_dtype_q_f16_dtype_kv_f16_dtype_o_f16_dtype_idx_i32_head_dim_ckv_512_head_dim_kpe_64_"
       "profiler_True_sm90",
       batch_mla_uri(mla_sm90)},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(c.actual, c.expected);
    auto parsed = parse_uri(c.expected);
    ASSERT_TRUE(parsed.has_value()) << c.expected;
    EXPECT_EQ(parsed->uri(), c.expected);
  }
  // Parsing recovers the fields, not just the string.
  auto p = parse_uri(cases[5].expected);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->family, Family::batch_prefill);
  EXPECT_EQ(p->attention.backend, Backend::fa3);
  EXPECT_EQ(p->attention.idx, DType::i64);
  EXPECT_EQ(p->attention.head_dim_qk, 192);
  EXPECT_EQ(p->attention.head_dim_vo, 128);
  EXPECT_TRUE(p->attention.use_fp16_qk_reduction);
  auto d = parse_uri(cases[9].expected);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->family, Family::single_decode);
  EXPECT_EQ(d->attention.pos_encoding, 2);
  EXPECT_TRUE(d->attention.use_sliding_window);
  EXPECT_FALSE(d->attention.use_logits_soft_cap);
  auto m = parse_uri(cases[13].expected);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->family, Family::batch_mla);
  EXPECT_EQ(m->mla.backend, Backend::fa3);
  EXPECT_TRUE(m->mla.profiler);
  EXPECT_EQ(m->mla.head_dim_ckv, 512);
}

TEST(JitUri, DtypesOutsideFlashInfersMapAreRejected) {
  AttentionSpec a;
  a.q = DType::f32;
  EXPECT_THROW(batch_decode_uri(a), Error);
}

TEST(JitUri, ParseRejectsWhatFlashInferWouldNotSpell) {
  const std::string decode =
      "batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_head_dim_vo_"
      "128_posenc_0_use_swa_False_use_logits_cap_False";
  ASSERT_TRUE(parse_uri(decode));
  for (const std::string& bad : std::vector<std::string>{
           std::string(""), std::string("norm_"), std::string("fused_moe_90"), std::string("Norm"),
           decode + "_f16qk_False",           // decode URIs have no f16qk
           decode + "_sm90",                   // and no fa3 variant
           decode.substr(0, decode.size() - 5) + "false",  // Python bools are capitalised
           "single_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
           "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False",  // single families have no idx
           "batch_decode_with_kv_cache_dtype_q_f32_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
           "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False",  // f32 has no URI name
           "batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_0128_"
           "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False",  // leading zero
       })
    EXPECT_FALSE(parse_uri(bad)) << bad;
}

TEST(JitUri, DefaultsRoundTripAndCoverTheRequiredFamilies) {
  const auto uris = default_uris();
  std::set<std::string> unique(uris.begin(), uris.end());
  EXPECT_EQ(unique.size(), uris.size());
  std::map<std::string, int> per_family;
  int sm90 = 0;
  for (const auto& u : uris) {
    auto p = parse_uri(u);
    ASSERT_TRUE(p) << u;
    EXPECT_EQ(p->uri(), u);
    per_family[std::string(family_name(p->family))]++;
    if (u.size() > 5 && u.substr(u.size() - 5) == "_sm90") ++sm90;
  }
  EXPECT_EQ(per_family["norm"], 1);
  EXPECT_EQ(per_family["page"], 1);
  EXPECT_EQ(per_family["gdn_prefill_sm90"], 1);
  EXPECT_EQ(per_family["batch_prefill"], 4);   // {bf16, f16} x {fa2, fa3}
  EXPECT_EQ(per_family["single_prefill"], 4);
  EXPECT_EQ(per_family["single_decode"], 2);
  EXPECT_EQ(per_family["batch_decode"], 2);
  EXPECT_EQ(per_family["batch_mla"], 4);
  for (const char* misc : {"rope", "cascade", "sampling", "topk"}) EXPECT_EQ(per_family[misc], 1) << misc;
  EXPECT_EQ(per_family["act_and_mul"], 3);  // silu, gelu, gelu_tanh
  EXPECT_EQ(uris.size(), 26u);
  EXPECT_EQ(sm90, 7);  // 6 attention modules + gdn_prefill_sm90
}

// ---------------------------------------------------------------------------------------------
// Template renderer

TEST(JitTemplate, SubstitutesVariablesAndLoopsLikeJinja) {
  EXPECT_EQ(render_template("a {{ x }} b {{y}}\n", {{"x", "1"}, {"y", "two"}}), "a 1 b two");  // trailing \n dropped
  EXPECT_EQ(render_template("x\n\n", {}), "x\n");  // only one trailing newline is dropped
  EXPECT_EQ(render_template("{% for t in [16, 64, 128] %}\nT={{t}} {{ n }};\n{% endfor %}\nend", {{"n", "N"}}),
            "\nT=16 N;\n\nT=64 N;\n\nT=128 N;\n\nend");
  EXPECT_EQ(render_template("{% for s in [\"true\", 'false'] %}[{{ s }}]{% endfor %}", {}), "[true][false]");
  EXPECT_EQ(render_template("{% for a in [1, 2] %}{% for b in [3, 4] %}{{a}}{{b}} {% endfor %}{% endfor %}", {}),
            "13 14 23 24 ");
  // The loop variable shadows an outer variable only inside the loop.
  EXPECT_EQ(render_template("{{v}}{% for v in [9] %}{{v}}{% endfor %}{{v}}", {{"v", "0"}}), "090");
  // C++ braces are text.
  EXPECT_EQ(render_template("struct A { int x{1}; };", {}), "struct A { int x{1}; };");
}

TEST(JitTemplate, RejectsWhatItDoesNotImplement) {
  EXPECT_THROW(render_template("{{ missing }}", {}), Error);
  EXPECT_THROW(render_template("{{ a.b }}", {{"a", "1"}}), Error);
  EXPECT_THROW(render_template("{% if x %}y{% endif %}", {{"x", "1"}}), Error);
  EXPECT_THROW(render_template("{% for a in [1] %}x", {}), Error);
  EXPECT_THROW(render_template("{% endfor %}", {}), Error);
  EXPECT_THROW(render_template("{# c #}", {}), Error);
  EXPECT_THROW(render_template("{{- x }}", {{"x", "1"}}), Error);
  EXPECT_THROW(render_template("{{ x ", {{"x", "1"}}), Error);
}

TEST(JitTemplate, EveryFlashInferTemplateWeUseRendersCompletely) {
  if (!have_sources()) GTEST_SKIP() << "FlashInfer sources not found (scripts/deps.sh)";
  for (const auto& uri : default_uris()) {
    const ModulePlan plan = plan_module(uri, data_dir(), "/gen/" + uri);
    for (const auto& f : plan.files) {
      EXPECT_FALSE(contains(f.content, "{{")) << uri << " " << f.name;
      EXPECT_FALSE(contains(f.content, "{%")) << uri << " " << f.name;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Generated sources

TEST(JitGenerate, BatchDecodeVariant) {
  if (!have_sources()) GTEST_SKIP() << "FlashInfer sources not found (scripts/deps.sh)";
  AttentionSpec a;
  a.q = a.o = DType::bf16;
  a.kv = DType::e4m3;
  a.idx = DType::i32;
  a.head_dim_qk = a.head_dim_vo = 128;
  a.use_logits_soft_cap = true;
  const std::string uri = batch_decode_uri(a);
  const ModulePlan plan = plan_module(uri, data_dir(), "/gen/x");
  EXPECT_EQ(plan.uri, uri);
  EXPECT_EQ(names(plan.sources),
            (std::vector<std::string>{"batch_decode_kernel.cu", "batch_decode.cu", "batch_decode_jit_binding.cu"}));
  EXPECT_EQ(plan.sources[0], fs::path("/gen/x/batch_decode_kernel.cu"));
  EXPECT_TRUE(plan.extra_cuda_flags.empty());

  const std::string& cfg = file(plan, "batch_decode_config.inc").content;
  EXPECT_TRUE(contains(cfg, "using DTypeQ = nv_bfloat16;"));
  EXPECT_TRUE(contains(cfg, "using DTypeKV = __nv_fp8_e4m3;"));
  EXPECT_TRUE(contains(cfg, "using DTypeO = nv_bfloat16;"));
  EXPECT_TRUE(contains(cfg, "using IdType = int32_t;"));
  EXPECT_TRUE(contains(cfg, "constexpr int HEAD_DIM_QK = 128;"));
  EXPECT_TRUE(contains(cfg, "constexpr auto USE_LOGITS_SOFT_CAP = true;"));
  EXPECT_TRUE(contains(cfg, "constexpr auto USE_SLIDING_WINDOW = false;"));
  EXPECT_TRUE(contains(cfg, "constexpr auto POS_ENCODING_MODE = PosEncodingMode::kNone;"));
  EXPECT_TRUE(contains(cfg, "using AttentionVariant = DefaultAttention<false, false, true, false>;"));
  EXPECT_TRUE(contains(cfg, "#define ADDITIONAL_FUNC_PARAMS , Optional<ffi::Tensor> maybe_alibi_slopes, double "
                            "logits_soft_cap, double sm_scale, double rope_rcp_scale, double rope_rcp_theta\n"));
  EXPECT_TRUE(contains(cfg, "#define ADDITIONAL_PARAMS_SETTER params.maybe_alibi_slopes = maybe_alibi_slopes ? "
                            "static_cast<float*>(maybe_alibi_slopes.value().data_ptr()): nullptr; \\\n"
                            "params.logits_soft_cap = logits_soft_cap; \\\n"));
  EXPECT_TRUE(contains(cfg, "  float* maybe_alibi_slopes;\ndouble logits_soft_cap;\ndouble sm_scale;\n"));
  EXPECT_TRUE(contains(cfg, "#include<flashinfer/attention/variants.cuh>"));

  const std::string& kernel = file(plan, "batch_decode_kernel.cu").content;
  EXPECT_TRUE(contains(kernel, "#include \"batch_decode_config.inc\""));
  EXPECT_TRUE(contains(kernel, "BatchDecodeWithPagedKVCacheDispatched<128, PosEncodingMode::kNone, "
                               "DefaultAttention<false, false, true, false>, Params>("));
  EXPECT_TRUE(contains(kernel, "Params params, nv_bfloat16* tmp_v,"));
  // Copied verbatim from csrc.
  std::ifstream in(data_dir() / "csrc" / "batch_decode_jit_binding.cu", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(file(plan, "batch_decode_jit_binding.cu").content, ss.str());
}

TEST(JitGenerate, BatchPrefillFa2Variant) {
  if (!have_sources()) GTEST_SKIP() << "FlashInfer sources not found (scripts/deps.sh)";
  AttentionSpec a;
  a.q = a.kv = a.o = DType::f16;
  a.idx = DType::i64;
  a.head_dim_qk = a.head_dim_vo = 64;
  a.pos_encoding = 2;
  a.use_sliding_window = true;
  const ModulePlan plan = plan_module(batch_prefill_uri(a), data_dir(), "/gen/p");
  EXPECT_EQ(names(plan.sources),
            (std::vector<std::string>{"batch_prefill_paged_kernel_mask_0.cu", "batch_prefill_ragged_kernel_mask_0.cu",
                                      "batch_prefill_paged_kernel_mask_1.cu", "batch_prefill_ragged_kernel_mask_1.cu",
                                      "batch_prefill_paged_kernel_mask_2.cu", "batch_prefill_ragged_kernel_mask_2.cu",
                                      "batch_prefill_paged_kernel_mask_3.cu", "batch_prefill_ragged_kernel_mask_3.cu",
                                      "batch_prefill.cu", "batch_prefill_jit_binding.cu"}));
  EXPECT_TRUE(plan.extra_cuda_flags.empty());
  const std::string& cfg = file(plan, "batch_prefill_config.inc").content;
  EXPECT_TRUE(contains(cfg, "using DTypeQ = half;"));
  EXPECT_TRUE(contains(cfg, "using IdType = int64_t;"));
  EXPECT_TRUE(contains(cfg, "constexpr bool USE_FP16_QK_REDUCTION = false;"));
  EXPECT_TRUE(contains(cfg, "constexpr auto POS_ENCODING_MODE = PosEncodingMode::kALiBi;"));
  EXPECT_TRUE(contains(cfg, "using AttentionVariant = DefaultAttention<use_custom_mask, true, false, true>;"));
  // maybe_mask_indptr stays int32_t whatever the index type (FlashInfer 0.6.3).
  EXPECT_TRUE(contains(cfg, "int32_t* maybe_mask_indptr;"));
  EXPECT_TRUE(contains(cfg, ", Optional<ffi::Tensor> maybe_max_item_len_ptr, double logits_soft_cap"));
  EXPECT_TRUE(contains(cfg, "int64_t token_pos_in_items_len;"));
  EXPECT_TRUE(contains(cfg, "params.token_pos_in_items_len = token_pos_in_items_len;"));
  const std::string& paged1 = file(plan, "batch_prefill_paged_kernel_mask_1.cu").content;
  EXPECT_TRUE(contains(paged1, "constexpr auto use_custom_mask = MaskMode::kCausal == MaskMode::kCustom;"));
  for (const char* tile : {"/*CTA_TILE_Q=*/16, 64, 64,", "/*CTA_TILE_Q=*/64, 64, 64,", "/*CTA_TILE_Q=*/128, 64, 64,"})
    EXPECT_TRUE(contains(paged1, tile)) << tile;
  EXPECT_TRUE(contains(paged1, "PosEncodingMode::kALiBi, false, MaskMode::kCausal,"));
  EXPECT_TRUE(contains(paged1, "PagedParams>(PagedParams params, half* tmp_v"));
  EXPECT_TRUE(contains(file(plan, "batch_prefill_ragged_kernel_mask_3.cu").content, "MaskMode::kMultiItemScoring"));
}

TEST(JitGenerate, BatchPrefillFa3AndFp8Variants) {
  if (!have_sources()) GTEST_SKIP() << "FlashInfer sources not found (scripts/deps.sh)";
  AttentionSpec a;
  a.backend = Backend::fa3;
  a.use_logits_soft_cap = true;
  const ModulePlan plan = plan_module(batch_prefill_uri(a), data_dir(), "/gen/f");
  EXPECT_EQ(plan.sources.size(), 10u);
  EXPECT_EQ(plan.sources[8].filename(), "batch_prefill_sm90.cu");
  EXPECT_EQ(plan.sources[9].filename(), "batch_prefill_sm90_jit_binding.cu");
  EXPECT_EQ(plan.extra_cuda_flags,
            (std::vector<std::string>{"-gencode=arch=compute_90a,code=sm_90a", "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED",
                                      "-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1"}));
  const std::string& cfg = file(plan, "batch_prefill_sm90_config.inc").content;
  EXPECT_TRUE(contains(cfg, "using DTypeQ = cutlass_dtype_t<nv_bfloat16>;"));
  EXPECT_TRUE(contains(cfg, "using IdType = cutlass_dtype_t<int32_t>;"));
  EXPECT_TRUE(contains(cfg, "using AttentionVariant = DefaultAttention<true>;"));
  EXPECT_TRUE(contains(cfg, "params.additional_params.maybe_scale_v = maybe_scale_v ? static_cast<float*>"));
  EXPECT_TRUE(contains(cfg, "#include<flashinfer/attention/hopper/variants.cuh>"));
  const std::string& paged = file(plan, "batch_prefill_paged_sm90_kernel_mask_0.cu").content;
  EXPECT_TRUE(contains(paged, "/*SAME_SCHEDULER_FOR_ALL_HEADS=*/true"));
  EXPECT_TRUE(contains(paged, "/*SAME_SCHEDULER_FOR_ALL_HEADS=*/false"));

  AttentionSpec f8 = a;
  f8.q = f8.kv = DType::e4m3;
  f8.o = DType::f16;
  const ModulePlan p8 = plan_module(batch_prefill_uri(f8), data_dir(), "/gen/f8");
  EXPECT_EQ(p8.sources[8].filename(), "batch_prefill_fp8_sm90.cu");
  EXPECT_TRUE(contains(file(p8, "batch_prefill_paged_sm90_kernel_mask_2.cu").content,
                       "BatchFP8PrefillWithPagedKVCacheDispatched"));
  EXPECT_TRUE(contains(file(p8, "batch_prefill_sm90_config.inc").content,
                       "using AttentionVariant = DefaultFP8Attention;"));

  // FlashInfer's generator refuses fp8 q on fa2 and fp8 output.
  AttentionSpec bad = f8;
  bad.backend = Backend::fa2;
  EXPECT_THROW(plan_module(batch_prefill_uri(bad), data_dir(), "/gen/b"), Error);
  AttentionSpec bad_o = a;
  bad_o.o = DType::e4m3;
  EXPECT_THROW(plan_module(batch_prefill_uri(bad_o), data_dir(), "/gen/b"), Error);
}

TEST(JitGenerate, FixedSourceModulesAndGdn) {
  if (!have_sources()) GTEST_SKIP() << "FlashInfer sources not found (scripts/deps.sh)";
  const ModulePlan norm = plan_module("norm", data_dir(), "/gen/norm");
  EXPECT_TRUE(norm.files.empty());
  ASSERT_EQ(norm.sources.size(), 2u);
  EXPECT_EQ(norm.sources[0], data_dir() / "csrc" / "norm.cu");
  EXPECT_EQ(norm.sources[1], data_dir() / "csrc" / "flashinfer_norm_binding.cu");
  EXPECT_EQ(norm.extra_cuda_flags, (std::vector<std::string>{"-DENABLE_BF16", "-DENABLE_FP8"}));
  const ModulePlan page = plan_module("page", data_dir(), "/gen/page");
  EXPECT_EQ(names(page.sources), (std::vector<std::string>{"page.cu", "flashinfer_page_binding.cu"}));

  const ModulePlan gdn = plan_module("gdn_prefill_sm90", data_dir(), "/gen/gdn");
  ASSERT_EQ(gdn.sources.size(), 34u);
  EXPECT_EQ(gdn.sources[0].filename(), "gdn_prefill_kernel_half_g0b0a0i0.cu");
  EXPECT_EQ(gdn.sources[1].filename(), "gdn_prefill_kernel_half_g0b0a0i1.cu");  // last flag fastest
  EXPECT_EQ(gdn.sources[15].filename(), "gdn_prefill_kernel_half_g1b1a1i1.cu");
  EXPECT_EQ(gdn.sources[16].filename(), "gdn_prefill_kernel_bf16_g0b0a0i0.cu");
  EXPECT_EQ(gdn.sources[32].filename(), "gdn_prefill_launcher.cu");
  EXPECT_EQ(gdn.sources[33].filename(), "prefill_kernel_delta_rule_sm90.cu");
  const std::string& k = file(gdn, "gdn_prefill_kernel_bf16_g1b0a1i0.cu").content;
  EXPECT_TRUE(contains(k, "launch_delta_rule_prefill_kernel_gbai<true, false, true, false, cutlass::arch::Sm90, "
                          "nv_bfloat16, nv_bfloat16, float>("));
  EXPECT_NE(std::find(gdn.extra_cuda_flags.begin(), gdn.extra_cuda_flags.end(), "-std=c++20"),
            gdn.extra_cuda_flags.end());

  MlaSpec m;
  m.backend = Backend::fa3;
  const ModulePlan mla = plan_module(batch_mla_uri(m), data_dir(), "/gen/mla");
  EXPECT_EQ(names(mla.sources), (std::vector<std::string>{"batch_mla_sm90_plan.cu", "batch_mla_sm90_run.cu",
                                                          "batch_mla_sm90_binding.cu"}));
  EXPECT_TRUE(contains(file(mla, "batch_mla_sm90_config.inc").content, "constexpr int HEAD_DIM_CKV = 512;"));
  EXPECT_TRUE(contains(file(mla, "batch_mla_sm90_config.inc").content, "using IdType = int32_t;"));

  EXPECT_THROW(plan_module("fused_moe_90", data_dir(), "/gen/x"), Error);
}

TEST(JitGenerate, MissingSourcesSayWhatToSet) {
  try {
    plan_module("norm", "/nonexistent/flashinfer/data", "/gen/x");
    FAIL() << "expected not_found";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_TRUE(contains(e.message(), "FLASHCPP_FLASHINFER_DIR")) << e.message();
  }
  BuildOptions o = test_options();
  o.flashinfer_data_dir = "/nonexistent";
  std::string why;
  EXPECT_FALSE(can_build(o, &why));
  EXPECT_FALSE(why.empty());
}

// ---------------------------------------------------------------------------------------------
// Flags, cache key, options

TEST(JitFlags, FollowFlashInfersRecipe) {
  BuildOptions o = test_options();
  o.cuda_archs = {"9.0a", "8.0"};
  const Toolchain tc = fake_toolchain();
  const auto plain = device_flags(o, {"-DENABLE_BF16"}, tc);
  auto has = [](const std::vector<std::string>& v, const std::string& f) {
    return std::find(v.begin(), v.end(), f) != v.end();
  };
  auto pos = [](const std::vector<std::string>& v, const std::string& f) {
    return std::find(v.begin(), v.end(), f) - v.begin();
  };
  EXPECT_TRUE(has(plain, "-gencode=arch=compute_80,code=sm_80"));
  EXPECT_TRUE(has(plain, "-gencode=arch=compute_90a,code=sm_90a"));
  EXPECT_TRUE(has(plain, "-std=c++17"));
  EXPECT_TRUE(has(plain, "--threads=1"));
  EXPECT_TRUE(has(plain, "-use_fast_math"));
  EXPECT_TRUE(has(plain, "-static-global-template-stub=false"));
  EXPECT_TRUE(has(plain, "--expt-relaxed-constexpr"));
  EXPECT_TRUE(has(plain, "-DFLASHINFER_ENABLE_FP8_E8M0"));
  EXPECT_LT(pos(plain, "-O3"), pos(plain, "-DENABLE_BF16"));  // module flags come last
  // A module with its own -gencode drops the global arch flags; its -std replaces c++17.
  const auto own = device_flags(o, {"-gencode=arch=compute_90a,code=sm_90a", "-std=c++20"}, tc);
  EXPECT_FALSE(has(own, "-gencode=arch=compute_80,code=sm_80"));
  EXPECT_FALSE(has(own, "-std=c++17"));
  EXPECT_TRUE(has(own, "-std=c++20"));
  EXPECT_TRUE(has(own, "-DFLASHINFER_ENABLE_FP4_E2M1"));
  // CUDA < 12.8 has no -static-global-template-stub.
  EXPECT_FALSE(has(device_flags(o, {}, fake_toolchain("12.6")), "-static-global-template-stub=false"));

  const auto common = common_flags(o, tc);
  EXPECT_TRUE(has(common, (o.flashinfer_data_dir / "cutlass" / "tools" / "util" / "include").string()));
  EXPECT_TRUE(has(common, o.tvm_ffi_include_dir.string()));
  EXPECT_TRUE(has(common, "/opt/cuda/include/cccl"));
  EXPECT_TRUE(has(host_flags({}), "-fPIC"));

  o.cuda_archs = {"nine"};
  EXPECT_THROW(device_flags(o, {}, tc), Error);
  o.cuda_archs = {};
  EXPECT_THROW(device_flags(o, {}, tc), Error);
}

TEST(JitFlags, CacheKeyTracksArchAndCompiler) {
  BuildOptions o = test_options();
  const std::string k = cache_key(o, fake_toolchain());
  EXPECT_EQ(k.size(), 16u);
  EXPECT_EQ(k, cache_key(o, fake_toolchain()));
  EXPECT_NE(k, cache_key(o, fake_toolchain("13.1")));
  BuildOptions o2 = o;
  o2.cuda_archs = {"9.0a", "10.0a"};
  EXPECT_NE(k, cache_key(o2, fake_toolchain()));
  o2.cuda_archs = {"9.0a", "9.0a"};  // duplicates do not matter
  EXPECT_EQ(k, cache_key(o2, fake_toolchain()));
  BuildOptions o3 = o;
  o3.cache_dir = "/elsewhere";  // the directory is not part of the key
  EXPECT_EQ(k, cache_key(o3, fake_toolchain()));
}

TEST(JitOptions, FromEnvironment) {
  ::setenv("FLASHCPP_CUDA_ARCH_LIST", "9.0a 8.0,10.0a", 1);
  ::setenv("FLASHCPP_JIT_JOBS", "3", 1);
  ::setenv("FLASHCPP_CACHE_DIR", "/tmp/flashcpp-jit-env-test", 1);
  BuildOptions o = BuildOptions::from_env();
  EXPECT_EQ(o.cuda_archs, (std::vector<std::string>{"9.0a", "8.0", "10.0a"}));
  EXPECT_EQ(o.jobs, 3);
  EXPECT_EQ(o.cache_dir, fs::path("/tmp/flashcpp-jit-env-test"));
  ::setenv("FLASHCPP_JIT_JOBS", "many", 1);
  EXPECT_THROW(BuildOptions::from_env(), Error);
  ::unsetenv("FLASHCPP_JIT_JOBS");
  ::unsetenv("FLASHCPP_CUDA_ARCH_LIST");
  ::unsetenv("FLASHCPP_CACHE_DIR");
  EXPECT_EQ(BuildOptions::from_env().cuda_archs, (std::vector<std::string>{"9.0a"}));
}

// Builders in several threads of one process publish the same files (KEY.txt, generated sources) at
// once: every write must succeed, the file must hold one writer's whole content, and no temporary file
// may be left behind. (A temporary name shared by the threads of a process once made this fail.)
TEST(JitFiles, WriteIfDifferentFromManyThreadsAtOnce) {
  const fs::path dir = fs::temp_directory_path() / ("flashcpp-jit-wid-mt-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const fs::path f = dir / "KEY.txt";
  const std::string a(4096, 'a'), b(4096, 'b');
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        try {
          (void)write_if_different(f, (t + i) % 2 ? a : b);
        } catch (const Error&) {
          ++errors;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  std::ifstream in(f, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(got == a || got == b) << "torn content of " << got.size() << " bytes";
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1) << "temporary files left behind";
  fs::remove_all(dir);
}

TEST(JitFiles, WriteIfDifferentKeepsTimestamps) {
  const fs::path dir = fs::temp_directory_path() / ("flashcpp-jit-wid-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const fs::path f = dir / "sub" / "a.inc";
  EXPECT_TRUE(write_if_different(f, "hello"));
  const auto t0 = fs::last_write_time(f);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(write_if_different(f, "hello"));
  EXPECT_EQ(fs::last_write_time(f), t0);
  EXPECT_TRUE(write_if_different(f, "hellO"));
  std::ifstream in(f);
  std::string s;
  std::getline(in, s);
  EXPECT_EQ(s, "hellO");
  fs::remove_all(dir);
}
