// Real builds: FlashInfer's norm and page modules compiled from the pinned sources for sm_90a with nvcc,
// then loaded through flashcpp's ffi layer and called with CPU tensors, which must come back as
// FlashInfer's own decoded "must be a CUDA tensor" error. This proves the whole path (generator, flags,
// link without libtvm_ffi, exported __tvm_ffi_* symbols, ABI) with a real FlashInfer binary on a machine
// without a GPU. The module cache lives in the build tree, so the compile happens once per build dir.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>

#include "ffi/ffi.hpp"
#include "jit/jit.hpp"

namespace fs = std::filesystem;
using namespace flashcpp;

namespace {

jit::BuildOptions options() {
  jit::BuildOptions o = jit::BuildOptions::from_env();
  o.cache_dir = fs::path(FLASHCPP_BINARY_DIR) / "jit-test-cache";
  o.cuda_archs = {"9.0a"};
  o.progress = [](const std::string& line) { std::printf("  %s\n", line.c_str()); };
  return o;
}

#define REQUIRE_BUILDER()                                   \
  do {                                                      \
    std::string why;                                        \
    if (!jit::can_build(options(), &why)) GTEST_SKIP() << why; \
  } while (0)

fs::path built(const std::string& uri) {
  // Builds (or finds) both modules in one shared pool the first time any test needs one.
  const auto o = options();
  if (auto p = jit::cached_module(o, uri)) return *p;
  for (const auto& r : jit::build_modules(o, {"norm", "page"}))
    if (r.error) throw *r.error;
  return jit::build_module(o, uri);
}

void load_tvm_ffi() { ffi::Library::load(FLASHCPP_TVM_FFI_LIB); }

}  // namespace

TEST(JitModules, BuildNormAndPageForSm90a) {
  REQUIRE_BUILDER();
  const auto o = options();
  const auto t0 = std::chrono::steady_clock::now();
  const auto results = jit::build_modules(o, {"norm", "page"});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(results.size(), 2u);
  for (const auto& r : results) {
    ASSERT_FALSE(r.error.has_value()) << r.error->what();
    EXPECT_TRUE(fs::is_regular_file(r.path));
    EXPECT_EQ(r.path, jit::module_root(o) / r.uri / (r.uri + ".so"));
    EXPECT_GT(r.bytes, 100u * 1024);  // SASS for sm_90a of every dtype instantiation
    std::printf("  %s: %s, %.1f KiB, %.1f s (%s)\n", r.uri.c_str(), r.path.c_str(), r.bytes / 1024.0, r.seconds,
                r.cached ? "cached" : "built");
  }
  std::printf("  total %.1f s\n", secs);
}

TEST(JitModules, CacheHitSkipsCompilation) {
  REQUIRE_BUILDER();
  const fs::path so = built("norm");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(jit::build_module(options(), "norm"), so);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 1.0);
}

TEST(JitModules, NormLoadsAndReturnsFlashInfersDecodedError) {
  REQUIRE_BUILDER();
  const fs::path so = built("norm");
  load_tvm_ffi();
  auto lib = ffi::ModuleLibrary::open(so);
  for (const char* name : {"rmsnorm", "rmsnorm_quant", "fused_add_rmsnorm", "fused_add_rmsnorm_quant",
                           "gemma_rmsnorm", "gemma_fused_add_rmsnorm", "layernorm"})
    EXPECT_NE(lib->find_function(name), nullptr) << name;
  EXPECT_EQ(lib->find_function("no_such_function"), nullptr);

  std::array<uint16_t, 2 * 8> out{}, in{};
  std::array<uint16_t, 8> weight{};
  ffi::TensorArg t_out(TensorView::contiguous(out.data(), DType::bf16, Device::cpu(), {2, 8}));
  ffi::TensorArg t_in(TensorView::contiguous(in.data(), DType::bf16, Device::cpu(), {2, 8}));
  ffi::TensorArg t_w(TensorView::contiguous(weight.data(), DType::bf16, Device::cpu(), {8}));
  const ffi::Arg args[] = {t_out, t_in, t_w, 1e-6, false};
  ffi::Any result;
  try {
    ffi::call(lib->function("rmsnorm"), args, &result, nullptr);
    FAIL() << "rmsnorm accepted CPU tensors";
  } catch (const FfiError& e) {
    // FlashInfer's CHECK_CUDA (csrc/tvm_ffi_utils.h): "<arg> must be a CUDA tensor".
    EXPECT_NE(e.ffi_message().find("must be a CUDA tensor"), std::string::npos) << e.what();
    EXPECT_FALSE(e.kind().empty());
  }
  // Wrong arity is caught by the module's own typed-export wrapper.
  try {
    ffi::call(lib->function("rmsnorm"), std::span<const ffi::Arg>(args, 3), &result, nullptr);
    FAIL() << "rmsnorm accepted 3 arguments";
  } catch (const FfiError& e) {
    EXPECT_NE(std::string(e.what()).find("argument"), std::string::npos) << e.what();
  }
}

TEST(JitModules, PageLoadsAndReturnsFlashInfersDecodedError) {
  REQUIRE_BUILDER();
  const fs::path so = built("page");
  load_tvm_ffi();
  auto lib = ffi::ModuleLibrary::open(so);
  EXPECT_NE(lib->find_function("append_paged_mla_kv_cache"), nullptr);
  std::array<uint16_t, 2 * 1 * 8> key{}, value{};
  std::array<int32_t, 2> batch_indices{}, positions{};
  std::array<uint16_t, 2 * 4 * 1 * 8> k_cache{}, v_cache{};
  std::array<int32_t, 2> indices{}, indptr{0, 2};
  std::array<int32_t, 1> last_page_len{2};
  ffi::TensorArg t_key(TensorView::contiguous(key.data(), DType::bf16, Device::cpu(), {2, 1, 8}));
  ffi::TensorArg t_value(TensorView::contiguous(value.data(), DType::bf16, Device::cpu(), {2, 1, 8}));
  ffi::TensorArg t_bi(TensorView::contiguous(batch_indices.data(), DType::i32, Device::cpu(), {2}));
  ffi::TensorArg t_pos(TensorView::contiguous(positions.data(), DType::i32, Device::cpu(), {2}));
  ffi::TensorArg t_kc(TensorView::contiguous(k_cache.data(), DType::bf16, Device::cpu(), {2, 4, 1, 8}));
  ffi::TensorArg t_vc(TensorView::contiguous(v_cache.data(), DType::bf16, Device::cpu(), {2, 4, 1, 8}));
  ffi::TensorArg t_idx(TensorView::contiguous(indices.data(), DType::i32, Device::cpu(), {2}));
  ffi::TensorArg t_indptr(TensorView::contiguous(indptr.data(), DType::i32, Device::cpu(), {2}));
  ffi::TensorArg t_last(TensorView::contiguous(last_page_len.data(), DType::i32, Device::cpu(), {1}));
  const ffi::Arg args[] = {t_key, t_value, t_bi, t_pos, t_kc, t_vc, t_idx, t_indptr, t_last, int64_t{0}};
  ffi::Any result;
  try {
    ffi::call(lib->function("append_paged_kv_cache"), args, &result, nullptr);
    FAIL() << "append_paged_kv_cache accepted CPU tensors";
  } catch (const FfiError& e) {
    EXPECT_NE(e.ffi_message().find("must be a CUDA tensor"), std::string::npos) << e.what();
  }
  // Nothing was written.
  for (uint16_t v : k_cache) ASSERT_EQ(v, 0);
}
