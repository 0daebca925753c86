// Runs the C-language checks of the sparse-MLA C ABI (mla_capi_c.c, compiled as C).
#include <gtest/gtest.h>

extern "C" int mla_c_abi_status_codes(char* msg, size_t msg_len);

TEST(MlaCApi, StatusCodesAndLastError) {
  char msg[1024] = {0};
  EXPECT_EQ(mla_c_abi_status_codes(msg, sizeof msg), 0) << msg;
}
