// The C ABI of the FlashInfer ops: statuses, the last-error text, and that arguments reach the module
// (the recording stand-in) exactly as through the C++ API.
#include <cstdlib>

#include "flashcpp/flashcpp.h"
#include "ops/ops_fixture.hpp"
#include "support/c_tensor.hpp"

extern "C" int flashcpp_ops_header_is_c(void);

namespace flashcpp::testing {
namespace {

class OpsCapi : public OpsFixture {
 protected:
  static void SetUpTestSuite() {
    OpsFixture::SetUpTestSuite();
    // The C ABI's runtime is created from the environment on first use.
    ::setenv("FLASHCPP_TVM_FFI_LIB", FLASHCPP_TVM_FFI_LIB, 1);
    ::setenv("FLASHCPP_MODULE_PATH", dir_.c_str(), 1);
    ::setenv("FLASHCPP_JIT", "off", 1);
  }
};

TEST_F(OpsCapi, HeaderIsValidC) { EXPECT_EQ(flashcpp_ops_header_is_c(), -3); }

TEST_F(OpsCapi, RmsnormReachesTheModuleAndReportsValidationErrors) {
  auto in = dev(DType::bf16, {4, 256}), out = dev(DType::bf16, {4, 256}), w = dev(DType::bf16, {256});
  const auto ci = to_c(in), co = to_c(out), cw = to_c(w);
  ASSERT_EQ(flashcpp_rmsnorm(&co, &ci, &cw, 0.0, 1, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  EXPECT_EQ(split(lines(recorded()).at(0)).at(4), F(1e-6));  // eps 0 -> default
  auto bad = to_c(dev(DType::bf16, {255}));
  EXPECT_EQ(flashcpp_rmsnorm(&co, &ci, &bad, 1e-5, 0, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("rmsnorm: argument 'weight' must have size 256"), std::string::npos)
      << flashcpp_last_error();
  EXPECT_EQ(flashcpp_rmsnorm(&co, nullptr, &cw, 1e-5, 0, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_EQ(recorded(), "");
}

TEST_F(OpsCapi, BatchDecodePlanRunDestroy) {
  link("batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False");
  void* pinned = std::aligned_alloc(256, 1 << 20);
  const auto f = to_c(dev(DType::u8, {1 << 20})), i = to_c(dev(DType::u8, {1 << 20}));
  const auto p = to_c(TensorView::contiguous(pinned, DType::u8, Device::cuda_host(), {1 << 20}));
  const auto ws = c_struct<flashcpp_workspace>(&f, &i, &p);
  auto indptr = host_i32({0, 2, 3}), last = host_i32({4, 16});
  const auto ci = to_c(indptr), cl = to_c(last);
  flashcpp_batch_decode_config c;
  flashcpp_batch_decode_config_init(&c);
  c.num_qo_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.page_size = 16;
  c.backend = FLASHCPP_DECODE_CUDA_CORES;
  flashcpp_batch_decode_plan* plan = nullptr;
  ASSERT_EQ(flashcpp_batch_decode_plan_create(&c, &ws, &ci, &cl, nullptr, nullptr, &plan), FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(flashcpp_batch_decode_uses_tensor_cores(plan), 0);
  (void)recorded();
  const auto q = to_c(dev(DType::bf16, {2, 32, 128})), o = to_c(dev(DType::bf16, {2, 32, 128}));
  const auto kc = to_c(dev(DType::bf16, {3, 16, 8, 128})), idx = to_c(dev(DType::i32, {3}));
  const auto ptr = to_c(dev(DType::i32, {3})), lp = to_c(dev(DType::i32, {2}));
  auto cache = c_struct<flashcpp_paged_kv_cache>(&kc, &kc, &idx, &ptr, &lp, FLASHCPP_KV_NHD);
  ASSERT_EQ(flashcpp_batch_decode_run(plan, &q, &cache, &o, nullptr, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  EXPECT_EQ(split(lines(recorded()).at(0)).size(), 20u);  // name + 19 arguments
  cache.layout = 7;
  EXPECT_EQ(flashcpp_batch_decode_run(plan, &q, &cache, &o, nullptr, nullptr), FLASHCPP_INVALID_ARGUMENT);
  c.num_kv_heads = 7;
  flashcpp_batch_decode_plan* bad = nullptr;
  EXPECT_EQ(flashcpp_batch_decode_plan_create(&c, &ws, &ci, &cl, nullptr, nullptr, &bad), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_EQ(bad, nullptr);
  flashcpp_batch_decode_plan_destroy(plan);
  flashcpp_batch_decode_plan_destroy(nullptr);
  std::free(pinned);
}

}  // namespace
}  // namespace flashcpp::testing
