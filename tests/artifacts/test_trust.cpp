// The cache no other user can poison: exact modes whatever the umask, SHA-256 records of extracted modules
// checked before they are loaded (a swapped module is refused through the Runtime and never runs), a legacy
// module without a record extracted again, and a hostile cache root refused at load.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "artifacts/fixture.hpp"
#include "ffi/ffi.hpp"
#include "ffi/trust.hpp"
#include "runtime/runtime_internal.hpp"

namespace flashcpp::testing {
namespace {

using namespace flashcpp::artifacts;

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Sets the umask for one scope.
struct Umask {
  mode_t old;
  explicit Umask(mode_t m) : old(::umask(m)) {}
  ~Umask() { ::umask(old); }
};

class CacheTrustTest : public ArtifactsTest {
 protected:
  // Everything a Runtime start extracts: libtvm_ffi, headers, FlashInfer sources, a module.
  void populate() {
    lib = resolve_tvm_ffi_library(cfg);
    include = resolve_tvm_ffi_include_dir(cfg);
    sources = resolve_flashinfer_sources(cfg);
    auto p = resolve_prebuilt_module(cfg, "norm");
    ASSERT_TRUE(p.has_value());
    norm = *p;
  }
  // Points Settings::from_env() (what the Runtime reads) at this test's cache, offline.
  void use_env() {
    ::setenv("FLASHCPP_CACHE_DIR", cfg.cache_dir.c_str(), 1);
    ::setenv("FLASHCPP_MANIFEST", cfg.manifest_file.c_str(), 1);
    ::setenv("FLASHCPP_OFFLINE", "1", 1);
    ::setenv("FLASHCPP_NO_BUILD_DEPS", "1", 1);
  }
  void TearDown() override {
    for (const char* v : {"FLASHCPP_CACHE_DIR", "FLASHCPP_MANIFEST", "FLASHCPP_OFFLINE", "FLASHCPP_NO_BUILD_DEPS",
                          "FLASHCPP_TEST_MARKER"})
      ::unsetenv(v);
    ArtifactsTest::TearDown();
  }
  fs::path lib, include, sources, norm;
};

TEST_F(CacheTrustTest, ModesAreFixedWhateverTheUmask) {
  for (const mode_t umask : {mode_t{0}, mode_t{077}}) {
    SCOPED_TRACE("umask " + std::to_string(umask));
    Umask scoped(umask);
    cfg.cache_dir = tmp / ("home-" + std::to_string(umask)) / ".cache" / "flashcpp";
    populate();
    // The root and the parents it needed: 0700. Below it: directories 0755, files 0644, shared objects 0755.
    EXPECT_EQ(mode_of(cfg.cache_dir), 0700u);
    EXPECT_EQ(mode_of(cfg.cache_dir.parent_path()), 0700u);
    EXPECT_EQ(mode_of(cfg.cache_dir / "extract"), 0755u);
    EXPECT_EQ(mode_of(lib.parent_path()), 0755u);
    EXPECT_EQ(mode_of(lib), 0755u);
    EXPECT_EQ(mode_of(norm), 0755u);
    EXPECT_EQ(mode_of(ffi::module_record_path(norm)), 0644u);
    EXPECT_EQ(mode_of(include / "tvm" / "ffi" / "c_api.h"), 0644u);
    EXPECT_EQ(mode_of(sources / "csrc"), 0755u);
    EXPECT_EQ(mode_of(sources / "csrc" / "norm.cu"), 0644u);
    const fs::path wheel = cached_wheel_path(cfg, cfg.manifest().tvm_ffi);
    EXPECT_EQ(mode_of(wheel.parent_path()), 0755u);
    EXPECT_EQ(mode_of(wheel), 0644u);
    EXPECT_EQ(mode_of(wheel.parent_path() / ".verified"), 0644u);
    // And what was extracted passes the load rule.
    EXPECT_NO_THROW(ffi::require_trusted_file(norm, "module"));
  }
}

TEST_F(CacheTrustTest, SharedCacheRootIsReadableByAll) {
  Umask scoped(077);
  cfg.shared_cache = true;
  populate();
  EXPECT_EQ(mode_of(cfg.cache_dir), 0755u);
  ::setenv("FLASHCPP_CACHE_SHARED", "1", 1);
  EXPECT_TRUE(Settings::from_env().shared_cache);
  ::unsetenv("FLASHCPP_CACHE_SHARED");
  EXPECT_FALSE(Settings::from_env().shared_cache);
}

TEST_F(CacheTrustTest, ExtractedModulesAreRecorded) {
  populate();
  EXPECT_EQ(ffi::check_module_record(norm), ffi::RecordCheck::matches);
  EXPECT_EQ(ffi::check_module_record(lib), ffi::RecordCheck::matches);
  EXPECT_NE(read_file(ffi::module_record_path(norm)).find(sha256_hex(norm_bytes)), std::string::npos);
}

TEST_F(CacheTrustTest, SwappedModuleIsRefusedThroughTheRuntimeAndNeverRuns) {
  populate();
  // Another module's bytes renamed over the extracted one after it was recorded.
  const fs::path swap = norm.string() + ".swap";
  fs::copy_file(FLASHCPP_MARKER_MODULE, swap);
  fs::rename(swap, norm);
  EXPECT_THROW_CODE(resolve_prebuilt_module(cfg, "norm"), untrusted, "recorded when flashcpp extracted or built it");

  const fs::path marker = tmp / "constructor-ran";
  ::setenv("FLASHCPP_TEST_MARKER", marker.c_str(), 1);
  use_env();
  RuntimeOptions o;
  o.tvm_ffi_library = FLASHCPP_TVM_FFI_LIB;
  o.jit = JitPolicy::off;
  auto rt = Runtime::create(o);
  EXPECT_THROW_CODE(load_module(*rt, "norm"), untrusted, "The rule: a cached module is loaded only with the bytes");
  EXPECT_FALSE(fs::exists(marker)) << "the swapped module's constructor ran";
  // Automatic jit falls through to a build for a missing module, not for a refused one.
  o.jit = JitPolicy::automatic;
  auto rt_auto = Runtime::create(o);
  EXPECT_THROW_CODE(load_module(*rt_auto, "norm"), untrusted, "refusing to load module");
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(CacheTrustTest, ModuleWithoutARecordIsExtractedAgain) {
  populate();
  // What an older flashcpp left: a module and no record (here with other bytes, as if edited since).
  fs::remove(ffi::module_record_path(norm));
  std::ofstream(norm, std::ios::binary | std::ios::trunc) << "not the pinned module";
  cfg.offline = true;  // from the cached, verified wheel
  EXPECT_EQ(resolve_prebuilt_module(cfg, "norm"), norm);
  EXPECT_EQ(read_file(norm), norm_bytes);
  EXPECT_EQ(ffi::check_module_record(norm), ffi::RecordCheck::matches);
}

TEST_F(CacheTrustTest, HostileCacheRootIsRefusedAtLoad) {
  populate();
  ASSERT_EQ(::chmod(cfg.cache_dir.c_str(), 0777), 0);  // e.g. made by someone with umask 000
  EXPECT_THROW_CODE(ffi::Library::load(lib), untrusted,
                    "directory '" + cfg.cache_dir.string() + "' is writable by group and others (mode 0777)");
  ASSERT_EQ(::chmod(cfg.cache_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(lib.parent_path().c_str(), 0775), 0);
  EXPECT_THROW_CODE(ffi::Library::load(lib), untrusted,
                    "directory '" + lib.parent_path().string() + "' is writable by group (mode 0775)");
}

}  // namespace
}  // namespace flashcpp::testing
