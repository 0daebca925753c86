// Runs the C-language checks of the sparse-MLA C ABI (mla_capi_c.c, compiled as C).
#include <gtest/gtest.h>

#include "ops/common.hpp"

extern "C" int mla_c_abi_status_codes(char* msg, size_t msg_len);

TEST(MlaCApi, StatusCodesAndLastError) {
  // One pretended visible device (the test-hooks seam): the size queries on device 0 are answered without a GPU,
  // those on device 1000 refused. Tensors stay on device 1000, which our kernels' device lookup refuses.
  flashcpp::set_visible_devices_for_testing(1);
  char msg[1024] = {0};
  EXPECT_EQ(mla_c_abi_status_codes(msg, sizeof msg), 0) << msg;
  flashcpp::set_visible_devices_for_testing(-1);
}
