// Size-prefixed C structs: read_struct (src/capi/struct_sizes.hpp) on a synthetic struct that grew after its
// first release, on the first real one that grew (the fused MoE config: auto_tune, C ABI 3.4.0), on every bundle of
// tensors (size-prefixed since C ABI 4.0.0), and the real entry points from C (capi_struct_sizes_c.c).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "capi/capi.hpp"
#include "capi/struct_sizes.hpp"
#include "flashcpp/error.hpp"
#include "ops/common.hpp"

extern "C" int capi_struct_sizes_c(char* msg, size_t msg_len);

namespace {

// A struct as its first release published it, and as a later MINOR release grew it (two appended fields).
struct growing_v1 {
  uint32_t struct_size;
  int32_t a;
  double b;
};
struct growing {
  uint32_t struct_size;
  int32_t a;
  double b;
  int32_t appended;
  float appended2;
};
#define GROWING_INIT {static_cast<uint32_t>(sizeof(growing)), 7, 0.5, 42, 2.5f}

}  // namespace

FLASHCPP_CAPI_STRUCT_SIZES(growing, sizeof(growing_v1), GROWING_INIT);

namespace {

using flashcpp::capi::read_struct;
static_assert(sizeof(growing_v1) < sizeof(growing), "the synthetic struct grew");

std::string refusal(const growing* g) {
  try {
    (void)read_struct(g, "op", "config");
  } catch (const flashcpp::Error& e) {
    EXPECT_EQ(e.code(), flashcpp::ErrorCode::invalid_argument);
    return e.what();
  }
  ADD_FAILURE() << "struct_size " << g->struct_size << " was accepted";
  return "";
}

TEST(CapiStructSizes, AnOlderCallersStructIsReadAndTheAppendedFieldsDefault) {
  growing_v1 old{static_cast<uint32_t>(sizeof(growing_v1)), 1, 2.0};
  const growing g = read_struct(reinterpret_cast<const growing*>(&old), "op", "config");
  EXPECT_EQ(g.a, 1);
  EXPECT_EQ(g.b, 2.0);
  EXPECT_EQ(g.appended, 42);      // GROWING_INIT's, not whatever follows the caller's struct
  EXPECT_EQ(g.appended2, 2.5f);
  EXPECT_EQ(g.struct_size, sizeof(growing));
}

TEST(CapiStructSizes, AFusedMoeConfigOfC_ABI_3_3ReadsAutoTuneAsOn) {
  // A caller compiled against the 3.3 header: seven int32 fields, no auto_tune. Its bytes end where auto_tune begins.
  struct moe_config_v33 {
    uint32_t struct_size;
    int32_t activation_dtype, weight_dtype, output_dtype, quantization, backend, device;
  };
  static_assert(sizeof(moe_config_v33) == offsetof(flashcpp_fused_moe_config, auto_tune));
  alignas(flashcpp_fused_moe_config) unsigned char bytes[sizeof(flashcpp_fused_moe_config)];
  std::memset(bytes, 0xAB, sizeof bytes);  // past the caller's struct: garbage that must not be read
  const moe_config_v33 old{static_cast<uint32_t>(sizeof(moe_config_v33)), FLASHCPP_F16, FLASHCPP_F16, FLASHCPP_F16,
                           0, 1, 3};
  std::memcpy(bytes, &old, sizeof old);
  const auto c = read_struct(reinterpret_cast<const flashcpp_fused_moe_config*>(bytes), "op", "config");
  EXPECT_EQ(c.activation_dtype, FLASHCPP_F16);
  EXPECT_EQ(c.backend, 1);
  EXPECT_EQ(c.device, 3);
  EXPECT_EQ(c.auto_tune, 1);  // FLASHCPP_FUSED_MOE_CONFIG_INIT's
  flashcpp_fused_moe_config now = FLASHCPP_FUSED_MOE_CONFIG_INIT;
  now.auto_tune = 0;
  EXPECT_EQ(read_struct(&now, "op", "config").auto_tune, 0);
}

TEST(CapiStructSizes, ABatchDecodeConfigOfC_ABI_4_2ReadsTheSplitControlsAsOff) {
  // A caller compiled against the 4.2 header: its struct ends where fixed_split_size begins.
  const size_t old_size = offsetof(flashcpp_batch_decode_config, fixed_split_size);
  alignas(flashcpp_batch_decode_config) unsigned char bytes[sizeof(flashcpp_batch_decode_config)];
  std::memset(bytes, 0xAB, sizeof bytes);  // past the caller's struct: garbage that must not be read
  flashcpp_batch_decode_config old = FLASHCPP_BATCH_DECODE_CONFIG_INIT;
  old.struct_size = static_cast<uint32_t>(old_size);
  old.num_qo_heads = 9;
  old.enable_pdl = 1;
  std::memcpy(bytes, &old, old_size);
  const auto c = read_struct(reinterpret_cast<const flashcpp_batch_decode_config*>(bytes), "op", "config");
  EXPECT_EQ(c.num_qo_heads, 9);
  EXPECT_EQ(c.enable_pdl, 1);
  EXPECT_EQ(c.fixed_split_size, -1);  // FLASHCPP_BATCH_DECODE_CONFIG_INIT's: off
  EXPECT_EQ(c.disable_split_kv, 0);
  flashcpp_batch_decode_config now = FLASHCPP_BATCH_DECODE_CONFIG_INIT;
  now.fixed_split_size = 4;
  now.disable_split_kv = 1;
  EXPECT_EQ(read_struct(&now, "op", "config").fixed_split_size, 4);
  EXPECT_EQ(read_struct(&now, "op", "config").disable_split_kv, 1);
}

TEST(CapiStructSizes, NothingPastTheCallersStructSizeIsRead) {
  // The older caller's struct ends where an unreadable page begins: a read past struct_size would fault.
  const long page = sysconf(_SC_PAGESIZE);
  void* two = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(two, MAP_FAILED);
  char* base = static_cast<char*>(two);
  ASSERT_EQ(mprotect(base + page, page, PROT_NONE), 0);
  auto* old = reinterpret_cast<growing_v1*>(base + page - sizeof(growing_v1));
  *old = growing_v1{static_cast<uint32_t>(sizeof(growing_v1)), -3, 8.0};
  const growing g = read_struct(reinterpret_cast<const growing*>(old), "op", "config");
  EXPECT_EQ(g.a, -3);
  EXPECT_EQ(g.b, 8.0);
  EXPECT_EQ(g.appended, 42);
  munmap(two, 2 * page);
}

TEST(CapiStructSizes, EverySizeInTheRangeReadsExactlyThatManyBytes) {
  growing caller{static_cast<uint32_t>(sizeof(growing)), 5, 6.0, 9, 10.0f};
  growing g = read_struct(&caller, "op", "config");  // the current size: every field the caller's
  EXPECT_EQ(g.appended, 9);
  EXPECT_EQ(g.appended2, 10.0f);
  caller.struct_size = static_cast<uint32_t>(offsetof(growing, appended2));  // a release between: one field more
  g = read_struct(&caller, "op", "config");
  EXPECT_EQ(g.appended, 9);
  EXPECT_EQ(g.appended2, 2.5f);
  EXPECT_EQ(g.struct_size, sizeof(growing));
}

TEST(CapiStructSizes, SizesOutsideTheRangeAreRefusedNamingSizeAndRange) {
  const std::string range = "struct_size must be in [" + std::to_string(sizeof(growing_v1)) + ", " +
                            std::to_string(sizeof(growing)) + "]";
  const std::string abi = "this library (C ABI " + std::to_string(FLASHCPP_C_ABI_VERSION_MAJOR) + "." +
                          std::to_string(FLASHCPP_C_ABI_VERSION_MINOR) + "." +
                          std::to_string(FLASHCPP_C_ABI_VERSION_PATCH) + ") knows sizes up to " +
                          std::to_string(sizeof(growing));
  growing g = GROWING_INIT;
  for (uint32_t size : {uint32_t(sizeof(growing) + 1), uint32_t(sizeof(growing) + 8), UINT32_MAX}) {
    g.struct_size = size;
    const std::string m = refusal(&g);
    EXPECT_NE(m.find("op: argument 'config' has struct_size " + std::to_string(size) + "; "), std::string::npos) << m;
    EXPECT_NE(m.find(abi), std::string::npos) << m;
    EXPECT_NE(m.find(range), std::string::npos) << m;
    EXPECT_NE(m.find("(start from GROWING_INIT)"), std::string::npos) << m;
  }
  for (uint32_t size : {0u, 4u, uint32_t(sizeof(growing_v1) - 1)}) {
    g.struct_size = size;
    const std::string m = refusal(&g);
    EXPECT_NE(m.find("has struct_size " + std::to_string(size) + "; it is smaller than the struct's first published "
                     "size: " + range),
              std::string::npos)
        << m;
  }
  try {
    (void)read_struct(static_cast<const growing*>(nullptr), "op", "config");
    ADD_FAILURE() << "NULL accepted";
  } catch (const flashcpp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("op: argument 'config' must not be NULL"), std::string::npos) << e.what();
  }
}

// The bundles of tensors (C ABI 4.0.0): each read through its table entry, first published size = sizeof.
template <class T>
class CapiBundleSizes : public ::testing::Test {};
using Bundles = ::testing::Types<flashcpp_mla_prefill_tensors, flashcpp_mla_decode_tensors,
                                 flashcpp_mla_dense_decode_workspace, flashcpp_mla_dense_decode_tensors,
                                 flashcpp_batch_mla_cache, flashcpp_paged_kv_cache, flashcpp_paged_mla_kv_cache,
                                 flashcpp_workspace, flashcpp_ragged_kv, flashcpp_sampling_workspace>;
TYPED_TEST_SUITE(CapiBundleSizes, Bundles);

TYPED_TEST(CapiBundleSizes, AcceptedAtItsSizeAndRefusedOutsideIt) {
  using T = TypeParam;
  using Sizes = flashcpp::capi::struct_sizes<T>;
  static_assert(Sizes::first == sizeof(T) && Sizes::current == sizeof(T), "published in 4.0.0, never grown");
  T t = Sizes::defaults();
  ASSERT_EQ(t.struct_size, sizeof(T));
  const flashcpp_tensor any{};
  const flashcpp_tensor* first = &any;  // the first member after struct_size (and its padding): a tensor pointer
  std::memcpy(reinterpret_cast<char*>(&t) + sizeof(void*), &first, sizeof first);
  const T read = read_struct(&t, "op", "tensors");  // the caller's bytes, all of them
  EXPECT_EQ(std::memcmp(&read, &t, sizeof(T)), 0);
  const std::string range = "struct_size must be in [" + std::to_string(sizeof(T)) + ", " + std::to_string(sizeof(T)) + "]";
  for (uint32_t size : {0u, uint32_t(sizeof(T) - 1), uint32_t(sizeof(T) + 1), uint32_t(sizeof(T) + 64)}) {
    t.struct_size = size;
    try {
      (void)read_struct(&t, "op", "tensors");
      ADD_FAILURE() << "struct_size " << size << " accepted";
    } catch (const flashcpp::Error& e) {
      EXPECT_EQ(e.code(), flashcpp::ErrorCode::invalid_argument);
      const std::string m = e.what();
      EXPECT_NE(m.find("op: argument 'tensors' has struct_size " + std::to_string(size) + "; "), std::string::npos) << m;
      EXPECT_NE(m.find(size > sizeof(T) ? "knows sizes up to" : "smaller than the struct's first published size"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find(range), std::string::npos) << m;
      EXPECT_NE(m.find(std::string("(start from ") + Sizes::init + ")"), std::string::npos) << m;
    }
  }
}

TEST(CapiStructSizes, TheCEntryPointsAcceptTheFirstSizeAndRefuseOutsideTheRange) {
  flashcpp::set_visible_devices_for_testing(1);  // device 0's size queries answered without a GPU
  char msg[1024] = {0};
  EXPECT_EQ(capi_struct_sizes_c(msg, sizeof msg), 0) << msg;
  flashcpp::set_visible_devices_for_testing(-1);
}

}  // namespace
