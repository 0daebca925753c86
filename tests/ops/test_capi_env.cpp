// An invalid FLASHCPP_* setting reaches a C ABI caller at its first op call, after the op's own argument checks
// (never instead of them), and the next call tries again. One process: the C ABI's runtime starts once.
#include <cstdlib>

#include "flashcpp/flashcpp.h"
#include "ops/ops_fixture.hpp"
#include "support/c_tensor.hpp"

namespace flashcpp::testing {
namespace {

class CapiEnvironment : public OpsFixture {
 protected:
  static void SetUpTestSuite() {
    OpsFixture::SetUpTestSuite();
    ::setenv("FLASHCPP_TVM_FFI_LIB", FLASHCPP_TVM_FFI_LIB, 1);
    ::setenv("FLASHCPP_MODULE_PATH", dir_.c_str(), 1);
    ::setenv("FLASHCPP_JIT", "bogus", 1);
  }
  static void TearDownTestSuite() {
    ::unsetenv("FLASHCPP_JIT");
    OpsFixture::TearDownTestSuite();
  }
};

TEST_F(CapiEnvironment, ArgumentErrorFirstThenTheSettingThenARetry) {
  const auto ci = to_c(dev(DType::bf16, {4, 256})), co = to_c(dev(DType::bf16, {4, 256})), cw = to_c(dev(DType::bf16, {256}));
  const auto bad = to_c(dev(DType::bf16, {255}));
  ASSERT_EQ(flashcpp_rmsnorm(&co, &ci, &bad, 1e-5, 0, nullptr), FLASHCPP_INVALID_ARGUMENT);
  const std::string arg_error = flashcpp_last_error();
  EXPECT_NE(arg_error.find("argument 'weight' must have size 256"), std::string::npos) << arg_error;
  EXPECT_EQ(arg_error.find("FLASHCPP_JIT"), std::string::npos) << arg_error;

  ASSERT_EQ(flashcpp_rmsnorm(&co, &ci, &cw, 1e-5, 0, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("environment variable FLASHCPP_JIT must be one of auto, off, force; got 'bogus'"),
            std::string::npos)
      << flashcpp_last_error();
  EXPECT_EQ(recorded(), "");

  ::setenv("FLASHCPP_JIT", "off", 1);  // fixed: the next call starts the runtime and reaches the module
  ASSERT_EQ(flashcpp_rmsnorm(&co, &ci, &cw, 1e-5, 0, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  EXPECT_NE(recorded(), "");
}

TEST_F(CapiEnvironment, CppRuntimeCreateNamesTheSetting) {
  ::setenv("FLASHCPP_JIT", "bogus", 1);
  try {
    (void)Runtime::create();
    ADD_FAILURE() << "Runtime::create accepted FLASHCPP_JIT=bogus";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("FLASHCPP_JIT must be one of auto, off, force; got 'bogus'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace flashcpp::testing
