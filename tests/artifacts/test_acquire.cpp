// Module acquisition a program can see and control: the Runtime's log receives the download and module lines
// (from the loopback server), Runtime::prepare fails fast, the C ABI's log callback and prepare, FLASHCPP_LOG.
#include <stdlib.h>

#include <fstream>

#include "artifacts/fixture.hpp"
#include "flashcpp/flashcpp.h"
#include "flashcpp/runtime.hpp"
#include "runtime/runtime_internal.hpp"

namespace flashcpp::testing {
namespace {

using namespace flashcpp::artifacts;

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool any_line(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

class AcquireTest : public ArtifactsTest {
 protected:
  void SetUp() override {
    ArtifactsTest::SetUp();
    // A jit-cache wheel whose "norm" is a loadable shared object.
    jit = build(jit.filename, {{"flashinfer_jit_cache/__init__.py", ""},
                               {"flashinfer_jit_cache/jit_cache/norm/norm.so", file_bytes(FLASHCPP_MARKER_MODULE)}});
    server.set(jit_path(), Route{jit.bytes});
    write_manifest();
    // What the Runtime reads: this test's cache and manifest, downloads from the loopback server only.
    ::setenv("FLASHCPP_CACHE_DIR", cfg.cache_dir.c_str(), 1);
    ::setenv("FLASHCPP_MANIFEST", cfg.manifest_file.c_str(), 1);
    ::setenv("FLASHCPP_INDEX_URL", cfg.index_url.c_str(), 1);
    ::setenv("FLASHCPP_OFFLINE", "0", 1);
    ::setenv("FLASHCPP_NO_BUILD_DEPS", "1", 1);
  }
  void TearDown() override {
    set_process_log({});
    for (const char* v : {"FLASHCPP_CACHE_DIR", "FLASHCPP_MANIFEST", "FLASHCPP_INDEX_URL", "FLASHCPP_OFFLINE",
                          "FLASHCPP_NO_BUILD_DEPS", "FLASHCPP_LOG"})
      ::unsetenv(v);
    ArtifactsTest::TearDown();
  }
  RuntimeOptions options() const {
    RuntimeOptions o;
    o.tvm_ffi_library = FLASHCPP_TVM_FFI_LIB;
    o.jit = JitPolicy::off;
    return o;
  }
};

TEST_F(AcquireTest, LogReceivesTheDownloadAndModuleLines) {
  std::vector<std::string> info, debug;
  RuntimeOptions o = options();
  o.log = [&](LogLevel l, const std::string& line) { (l == LogLevel::info ? info : debug).push_back(line); };
  auto rt = Runtime::create(o);
  rt->prepare({"norm"});
  EXPECT_TRUE(any_line(info, "downloading " + jit.filename)) << joined(info);
  EXPECT_TRUE(any_line(info, "downloaded " + jit.filename)) << joined(info);
  EXPECT_TRUE(any_line(info, "module norm: prebuilt")) << joined(info);
  EXPECT_TRUE(any_line(info, "prepare: module 1 of 1: norm")) << joined(info);
  EXPECT_TRUE(any_line(debug, "module norm: loading")) << joined(debug);
  EXPECT_EQ(rt->loaded_modules(), std::vector<std::string>{"norm"});
  EXPECT_EQ(server.requests(jit_path()), 1);
}

TEST_F(AcquireTest, PrepareChecksEveryNameBeforeFetchingAnything) {
  auto rt = Runtime::create(options());
  EXPECT_THROW_CODE(rt->prepare({"norm", "../evil"}), invalid_argument, "uris[1]");
  EXPECT_EQ(server.requests(jit_path()), 0);
  EXPECT_TRUE(rt->loaded_modules().empty());
}

TEST_F(AcquireTest, PrepareStopsAtTheFirstModuleThatCannotBeHad) {
  auto rt = Runtime::create(options());
  EXPECT_THROW_CODE(rt->prepare({"not_in_the_wheel", "norm"}), not_found, "'not_in_the_wheel' is not available");
  EXPECT_TRUE(rt->loaded_modules().empty());  // norm, after it, was not tried
}

struct CLines {
  std::vector<std::pair<int, std::string>> lines;
};
extern "C" void collect_line(int32_t level, const char* message, void* user) {
  static_cast<CLines*>(user)->lines.emplace_back(level, message);
}

TEST_F(AcquireTest, CLogCallbackReceivesTheLinesOfARuntimeWithoutItsOwnLog) {
  CLines got;
  ASSERT_EQ(flashcpp_set_log_callback(collect_line, &got), FLASHCPP_SUCCESS);
  auto rt = Runtime::create(options());
  rt->prepare({"norm"});
  bool downloading = false, module = false;
  for (const auto& [level, line] : got.lines) {
    downloading |= level == FLASHCPP_LOG_INFO && line.find("downloading " + jit.filename) != std::string::npos;
    module |= level == FLASHCPP_LOG_INFO && line.find("module norm: prebuilt") != std::string::npos;
  }
  EXPECT_TRUE(downloading);
  EXPECT_TRUE(module);
  // Removed: nothing more reaches it.
  ASSERT_EQ(flashcpp_set_log_callback(nullptr, nullptr), FLASHCPP_SUCCESS);
  const size_t before = got.lines.size();
  Runtime::create(options())->prepare({"norm"});
  EXPECT_EQ(got.lines.size(), before);
}

TEST_F(AcquireTest, CPrepareValidatesItsArguments) {
  EXPECT_EQ(flashcpp_prepare(nullptr, 1), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("'uris'"), std::string::npos) << flashcpp_last_error();
  EXPECT_EQ(flashcpp_prepare(nullptr, -1), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("'count'"), std::string::npos) << flashcpp_last_error();
  const char* uris[] = {"norm", nullptr};
  EXPECT_EQ(flashcpp_prepare(uris, 2), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("'uris[1]'"), std::string::npos) << flashcpp_last_error();
  EXPECT_EQ(server.requests(jit_path()), 0);
}

TEST_F(AcquireTest, FlashcppLogIsOffInfoOrDebugAndPrintsToStderr) {
  EXPECT_EQ(RuntimeOptions::from_env().log_level, LogLevel::off);
  ::setenv("FLASHCPP_LOG", "debug", 1);
  EXPECT_EQ(RuntimeOptions::from_env().log_level, LogLevel::debug);
  ::setenv("FLASHCPP_LOG", "verbose", 1);
  EXPECT_THROW_CODE(RuntimeOptions::from_env(), invalid_argument, "FLASHCPP_LOG must be one of off, info, debug; got 'verbose'");
  ::setenv("FLASHCPP_LOG", "info", 1);
  RuntimeOptions o = options();
  o.log_level = RuntimeOptions::from_env().log_level;
  EXPECT_EQ(o.log_level, LogLevel::info);
  auto rt = Runtime::create(o);
  ::testing::internal::CaptureStderr();
  rt->prepare({"norm"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("flashcpp: downloading " + jit.filename), std::string::npos) << err;
  EXPECT_EQ(err.find("module norm: loading"), std::string::npos) << err;  // a debug line
}

}  // namespace
}  // namespace flashcpp::testing
