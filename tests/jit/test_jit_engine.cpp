// The build engine against a fake CUDA toolkit (a shell-script nvcc and host compiler that log each
// invocation and write placeholder outputs): publication, cache hits, concurrent builders, failures.
// The real FlashInfer sources are generated (they must exist); nothing is really compiled.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "ffi/trust.hpp"
#include "jit/jit.hpp"

namespace fs = std::filesystem;
using namespace flashcpp;
using namespace flashcpp::jit;

namespace {

fs::path g_root;

void write_script(const fs::path& p, const std::string& body) {
  std::ofstream(p) << body;
  ::chmod(p.c_str(), 0755);
}

// Installed before any test runs: toolchain() is discovered once per process from CUDA_HOME / CXX.
class FakeToolkit : public ::testing::Environment {
 public:
  void SetUp() override {
    g_root = fs::temp_directory_path() / ("flashcpp-jit-engine-" + std::to_string(::getpid()));
    fs::remove_all(g_root);
    fs::create_directories(g_root / "cuda" / "bin");
    write_script(g_root / "cuda" / "bin" / "nvcc",
                 "#!/bin/sh\n"
                 "if [ \"$1\" = \"--version\" ]; then\n"
                 "  echo 'Cuda compilation tools, release 13.0, V13.0.88'; echo 'Build fake_13.0'; exit 0\n"
                 "fi\n"
                 "out=''; src=''\n"
                 "while [ $# -gt 0 ]; do\n"
                 "  case \"$1\" in -o) out=\"$2\"; shift;; -c) src=\"$2\"; shift;; esac; shift\n"
                 "done\n"
                 "echo \"nvcc $(basename \"$src\")\" >> \"$FAKE_TOOL_LOG\"\n"
                 "if [ -n \"$FAKE_NVCC_FAIL\" ] && [ \"$(basename \"$src\")\" = \"$FAKE_NVCC_FAIL\" ]; then\n"
                 "  echo 'fake.cu(1): error: FAKE ERROR LINE' >&2; exit 2\n"
                 "fi\n"
                 "sleep \"${FAKE_NVCC_SLEEP:-0.3}\"\n"
                 "echo \"object of $src\" > \"$out\"\n");
    write_script(g_root / "c++",
                 "#!/bin/sh\n"
                 "out=''\n"
                 "while [ $# -gt 0 ]; do case \"$1\" in -o) out=\"$2\"; shift;; esac; shift; done\n"
                 "echo link >> \"$FAKE_TOOL_LOG\"\n"
                 "sleep 0.2\n"
                 "echo fake-shared-object > \"$out\"\n");
    ::setenv("CUDA_HOME", (g_root / "cuda").c_str(), 1);
    ::setenv("CXX", (g_root / "c++").c_str(), 1);
    ::unsetenv("CC");
    ::setenv("FAKE_TOOL_LOG", (g_root / "tools.log").c_str(), 1);
  }
  void TearDown() override { fs::remove_all(g_root); }
};
const auto* const g_env = ::testing::AddGlobalTestEnvironment(new FakeToolkit);

std::vector<std::string> tool_log() {
  std::ifstream in(g_root / "tools.log");
  std::vector<std::string> lines;
  std::string l;
  while (std::getline(in, l)) lines.push_back(l);
  return lines;
}

size_t count(const std::vector<std::string>& lines, const std::string& prefix) {
  size_t n = 0;
  for (const auto& l : lines) n += l.rfind(prefix, 0) == 0;
  return n;
}

BuildOptions options(const std::string& cache_name) {
  BuildOptions o = BuildOptions::from_env();
  o.cache_dir = g_root / cache_name;
  o.cuda_archs = {"9.0a"};
  o.jobs = 2;
  return o;
}

bool have_sources(std::string* why) { return can_build(options("probe"), why); }

}  // namespace

TEST(JitEngine, BuildsPublishesAndHitsTheCache) {
  std::string why;
  if (!have_sources(&why)) GTEST_SKIP() << why;
  fs::remove(g_root / "tools.log");
  BuildOptions o = options("cache1");
  std::vector<std::string> progress;
  o.progress = [&](const std::string& line) { progress.push_back(line); };
  EXPECT_FALSE(cached_module(o, "page"));

  const fs::path so = build_module(o, "page");
  EXPECT_EQ(so, module_root(o) / "page" / "page.so");
  EXPECT_EQ(so.parent_path().parent_path().parent_path(), o.cache_dir / "jit");
  std::ifstream in(so);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "fake-shared-object");
  auto log = tool_log();
  EXPECT_EQ(count(log, "nvcc page.cu"), 1u);
  EXPECT_EQ(count(log, "nvcc flashinfer_page_binding.cu"), 1u);
  EXPECT_EQ(count(log, "link"), 1u);
  EXPECT_GE(progress.size(), 3u);  // generation, two compiles, publication
  // No temporary files are left next to the published module: only it and its SHA-256 record.
  std::set<std::string> entries;
  for (const auto& e : fs::directory_iterator(so.parent_path())) entries.insert(e.path().filename().string());
  EXPECT_EQ(entries, (std::set<std::string>{"page.so", "page.so.sha256"}));

  // Cache hit: no compiler runs, well under a second.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(build_module(o, "page"), so);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 1.0);
  EXPECT_EQ(tool_log().size(), log.size());
  EXPECT_EQ(cached_module(o, "page"), so);

  // A different architecture set is a different cache key: it builds again, elsewhere.
  BuildOptions o2 = o;
  o2.cuda_archs = {"9.0a", "8.0"};
  EXPECT_FALSE(cached_module(o2, "page"));
  EXPECT_NE(module_root(o2), module_root(o));
}

TEST(JitEngine, ConcurrentBuildersProduceOneModule) {
  std::string why;
  if (!have_sources(&why)) GTEST_SKIP() << why;
  fs::remove(g_root / "tools.log");
  const BuildOptions o = options("cache2");
  // Two threads and a second process race for the same URI.
  fs::path a, b;
  const pid_t child = ::fork();  // before any thread starts
  if (child == 0) {
    int rc = 1;
    try {
      rc = build_module(o, "norm") == module_root(o) / "norm" / "norm.so" ? 0 : 1;
    } catch (...) {
      rc = 2;
    }
    std::_Exit(rc);
  }
  std::thread t1([&] { a = build_module(o, "norm"); });
  std::thread t2([&] { b = build_module(o, "norm"); });
  t1.join();
  t2.join();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(fs::is_regular_file(a));
  const auto log = tool_log();
  EXPECT_EQ(count(log, "nvcc norm.cu"), 1u);  // compiled once, not three times
  EXPECT_EQ(count(log, "nvcc flashinfer_norm_binding.cu"), 1u);
  EXPECT_EQ(count(log, "link"), 1u);
}

TEST(JitEngine, BuilderHeldByAnotherProcessIsReportedAndTimesOut) {
  std::string why;
  if (!have_sources(&why)) GTEST_SKIP() << why;
  BuildOptions o = options("cache-lock");
  const fs::path lock_file = module_root(o) / ".locks" / "page.lock";
  // The other builder: a child process whose (fake) compiler takes 20 s, in its own process group so the
  // test can end it and its compilers together.
  const pid_t child = ::fork();  // before any thread starts
  if (child == 0) {
    ::setpgid(0, 0);
    ::setenv("FAKE_NVCC_SLEEP", "20", 1);
    try {
      build_module(o, "page");
    } catch (...) {
    }
    std::_Exit(0);
  }
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  } reap{child};
  const std::string record = "pid=" + std::to_string(child) + " ";
  auto read_lock = [&] {
    std::ifstream in(lock_file);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const auto t0 = std::chrono::steady_clock::now();
  while (read_lock().find(record) == std::string::npos &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(read_lock().find(record), std::string::npos) << read_lock();

  std::vector<std::string> progress;
  o.progress = [&](const std::string& line) { progress.push_back(line); };
  o.lock_timeout_s = 1;
  o.lock_report_after_s = 0.2;
  const auto t1 = std::chrono::steady_clock::now();
  const auto results = build_modules(o, {"page"});
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 5.0);
  ASSERT_EQ(results.size(), 1u);
  ASSERT_TRUE(results[0].error.has_value());
  EXPECT_EQ(results[0].error->code(), ErrorCode::io_error);
  const std::string holder = "pid " + std::to_string(child) + " (building page";
  EXPECT_NE(std::string(results[0].error->what()).find(holder), std::string::npos) << results[0].error->what();
  EXPECT_NE(std::string(results[0].error->what()).find("FLASHCPP_LOCK_TIMEOUT"), std::string::npos);
  size_t reports = 0;
  for (const auto& l : progress) reports += l.find("waiting for the lock") != std::string::npos && l.find(holder) != std::string::npos;
  EXPECT_EQ(reports, 1u);
  EXPECT_FALSE(cached_module(o, "page"));
}

TEST(JitEngine, SharedPoolBuildsSeveralModulesAndReportsCached) {
  std::string why;
  if (!have_sources(&why)) GTEST_SKIP() << why;
  fs::remove(g_root / "tools.log");
  const BuildOptions o = options("cache3");
  build_module(o, "norm");
  AttentionSpec a;
  const std::string decode = batch_decode_uri(a);
  const auto results = build_modules(o, {"norm", "page", decode, "page", "no_such_module"});
  ASSERT_EQ(results.size(), 4u);  // the duplicate is dropped
  EXPECT_EQ(results[0].uri, "norm");
  EXPECT_TRUE(results[0].cached);
  EXPECT_FALSE(results[1].cached);
  EXPECT_FALSE(results[1].error.has_value());
  EXPECT_FALSE(results[2].error.has_value());
  EXPECT_TRUE(fs::is_regular_file(results[2].path));
  EXPECT_GT(results[2].bytes, 0u);
  ASSERT_TRUE(results[3].error.has_value());
  EXPECT_EQ(results[3].error->code(), ErrorCode::invalid_argument);
  // Generated sources sit in the build directory; copies of csrc files next to the rendered config.
  const fs::path gen = module_root(o) / ".build" / decode / "generated";
  EXPECT_TRUE(fs::is_regular_file(gen / "batch_decode_config.inc"));
  EXPECT_TRUE(fs::is_regular_file(gen / "batch_decode_jit_binding.cu"));
  const auto log = tool_log();
  EXPECT_EQ(count(log, "nvcc batch_decode_kernel.cu"), 1u);
  EXPECT_EQ(count(log, "link"), 3u);  // norm (first call), page, decode
}

TEST(JitEngine, CompileFailureCarriesTheLogTailAndPublishesNothing) {
  std::string why;
  if (!have_sources(&why)) GTEST_SKIP() << why;
  ::setenv("FAKE_NVCC_FAIL", "flashinfer_page_binding.cu", 1);
  const BuildOptions o = options("cache4");
  try {
    build_module(o, "page");
    ADD_FAILURE() << "expected a build failure";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(e.message().find("FAKE ERROR LINE"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("flashinfer_page_binding.cu"), std::string::npos);
    EXPECT_NE(e.message().find("status 2"), std::string::npos);
  }
  EXPECT_FALSE(cached_module(o, "page"));
  // The objects that did compile are reused by the next attempt.
  ::unsetenv("FAKE_NVCC_FAIL");
  fs::remove(g_root / "tools.log");
  EXPECT_TRUE(fs::is_regular_file(build_module(o, "page")));
  const auto log = tool_log();
  EXPECT_EQ(count(log, "nvcc page.cu"), 0u);
  EXPECT_EQ(count(log, "nvcc flashinfer_page_binding.cu"), 1u);
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

TEST(JitEngine, PublishedModuleIsRecordedWithFixedModesAndASwapIsRefused) {
  std::string why;
  if (!have_sources(&why)) GTEST_SKIP() << why;
  const mode_t saved = ::umask(0);  // the fake linker writes its output 0666 under this umask
  BuildOptions o = options("cache-trust");
  const fs::path so = build_module(o, "norm");
  ::umask(saved);
  EXPECT_EQ(mode_of(o.cache_dir), 0700u);
  EXPECT_EQ(mode_of(o.cache_dir / "jit"), 0755u);
  EXPECT_EQ(mode_of(so.parent_path()), 0755u);
  EXPECT_EQ(mode_of(so), 0755u);
  EXPECT_EQ(mode_of(module_root(o) / ".build"), 0700u);  // what the compilers write, only we can edit
  EXPECT_EQ(mode_of(module_root(o) / "KEY.txt"), 0644u);
  EXPECT_EQ(ffi::check_module_record(so), ffi::RecordCheck::matches);
  EXPECT_NO_THROW(ffi::require_trusted_file(so, "module"));

  // Swapped after it was recorded: cached_module and build_module refuse it instead of returning it.
  const fs::path swap = so.string() + ".swap";
  std::ofstream(swap) << "another shared object\n";
  fs::rename(swap, so);
  for (int i = 0; i < 2; ++i) {
    try {
      if (i == 0) cached_module(o, "norm");
      else build_module(o, "norm");
      ADD_FAILURE() << "a swapped module was returned";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::untrusted) << e.what();
      EXPECT_NE(e.message().find("recorded when flashcpp extracted or built it"), std::string::npos) << e.what();
    }
  }

  // Without a record (an older flashcpp's module) it is not a cache hit: it is built again and recorded.
  fs::remove(ffi::module_record_path(so));
  EXPECT_FALSE(cached_module(o, "norm"));
  fs::remove(g_root / "tools.log");
  EXPECT_EQ(build_module(o, "norm"), so);
  EXPECT_EQ(count(tool_log(), "link"), 1u);
  EXPECT_EQ(ffi::check_module_record(so), ffi::RecordCheck::matches);
}

TEST(JitEngine, UnknownUriIsAnInvalidArgument) {
  std::string why;
  if (!have_sources(&why)) GTEST_SKIP() << why;
  try {
    build_module(options("cache5"), "fused_moe_90");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.message().find("build-fused-moe.sh"), std::string::npos);
  }
}
