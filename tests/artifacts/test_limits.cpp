// Bounds on downloads, extraction and lock waits: a slow-drip server hits the minimum rate and the deadline,
// a pin without a size is bounded by the configured limit, a download that does not fit on the disk is refused
// before it starts, zip bombs are refused by ratio and by total, and a lock held by another process is
// reported with its PID and given up on.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "artifacts/fixture.hpp"

extern char** environ;

namespace flashcpp::testing {
namespace {

using namespace flashcpp::artifacts;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One byte every 0.5 s: never silent for the 1 s stall timeout, yet far too slow to finish.
Route drip(const std::string& body) {
  Route r{body};
  r.drip_ms = 500;
  r.drip_for_ms = 8000;
  return r;
}

TEST_F(ArtifactsTest, SlowDripServerFailsTheMinimumRate) {
  server.set(file_path(tvm), drip(tvm.bytes));
  cfg.stall_timeout_s = 1;
  cfg.min_rate_bytes_per_s = 100;
  cfg.min_rate_window_s = 2;
  cfg.max_retries = 0;
  const auto t0 = Clock::now();
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "too slow: under 100 bytes/s for 2 s (FLASHCPP_MIN_RATE");
  EXPECT_LT(seconds_since(t0), 6.0);
  EXPECT_EQ(server.requests(file_path(tvm)), 1);
}

TEST_F(ArtifactsTest, SlowDripServerHitsTheDeadline) {
  server.set(file_path(tvm), drip(tvm.bytes));
  cfg.stall_timeout_s = 1;
  cfg.min_rate_bytes_per_s = 0;  // only the deadline is left to stop it
  cfg.deadline_s = 2;
  cfg.max_retries = 3;
  const auto t0 = Clock::now();
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "download deadline of 2 s (FLASHCPP_DOWNLOAD_DEADLINE)");
  const double s = seconds_since(t0);
  EXPECT_GE(s, 1.5);
  EXPECT_LT(s, 4.0);
  EXPECT_EQ(server.requests(file_path(tvm)), 1);  // a deadline is not retried
}

TEST_F(ArtifactsTest, PinWithoutSizeIsBoundedByTheConfiguredLimit) {
  ASSERT_EQ(cfg.manifest().jit_cache.size, 0u);  // the fixture pins the jit cache without a size
  cfg.max_wheel_bytes = jit.bytes.size() - 1;
  EXPECT_THROW_CODE(resolve_prebuilt_module(cfg, "norm"), integrity_error, "FLASHCPP_MAX_WHEEL_BYTES");
  EXPECT_FALSE(fs::exists(cached_wheel_path(cfg, cfg.manifest().jit_cache)));
  EXPECT_TRUE(leftovers().empty());
  // The same through download_file directly, with no size given at all.
  EXPECT_THROW_CODE(download_file(cfg, server.url(jit_path()), tmp / "direct.whl", jit.sha256), integrity_error,
                    "more than the limit of");
  EXPECT_FALSE(fs::exists(tmp / "direct.whl.part"));
  cfg.max_wheel_bytes = jit.bytes.size();
  EXPECT_TRUE(resolve_prebuilt_module(cfg, "norm").has_value());
}

TEST_F(ArtifactsTest, DownloadThatDoesNotFitOnTheDiskIsRefused) {
  cfg.min_free_bytes = std::uint64_t{1} << 60;  // more than any disk has free
  // A pinned size: refused before any request.
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), io_error, "not enough free disk space");
  EXPECT_EQ(server.requests(file_path(tvm)), 0);
  // No pinned size: refused on the announced length, before a byte is written.
  try {
    resolve_prebuilt_module(cfg, "norm");
    ADD_FAILURE() << "expected io_error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io_error) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("needs " + std::to_string(jit.bytes.size()) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("FLASHCPP_MIN_FREE_BYTES"), std::string::npos) << m;
    EXPECT_NE(m.find("are free"), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(cached_wheel_path(cfg, cfg.manifest().jit_cache)));
  cfg.min_free_bytes = 0;
  EXPECT_TRUE(resolve_prebuilt_module(cfg, "norm").has_value());
}

// Nothing under `dest` but the lock file: no member, no staging tree, no temporary.
void expect_nothing_extracted(const fs::path& dest) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dest, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    EXPECT_EQ(it->path().filename(), ".lock") << it->path();
}

TEST_F(ArtifactsTest, ZipBombIsRefusedByCompressionRatio) {
  const TestWheel bomb = build("bomb-1.0-py3-none-any.whl", {{"pkg/__init__.py", ""},
                                                             {"pkg/small.txt", std::string(1000, 'a'), false, true},
                                                             {"pkg/zeros.bin", std::string(16u << 20, '\0'), false, true}});
  ASSERT_LT(bomb.bytes.size(), 200u * 1024);  // 16 MiB in a few KiB
  EXPECT_THROW_CODE(extract_from_wheel(cfg, bomb.local, "pkg", tmp / "dest"), integrity_error,
                    "(FLASHCPP_MAX_COMPRESSION_RATIO)");
  expect_nothing_extracted(tmp / "dest");
  // The small, highly compressible member alone is fine: the ratio applies above 1 MiB.
  EXPECT_EQ(read_file(extract_from_wheel(cfg, bomb.local, "pkg/small.txt", tmp / "dest")), std::string(1000, 'a'));
  cfg.max_compression_ratio = 1e6;
  EXPECT_EQ(fs::file_size(extract_from_wheel(cfg, bomb.local, "pkg/zeros.bin", tmp / "dest2")), 16u << 20);
}

TEST_F(ArtifactsTest, ExtractionIsBoundedInTotalBytes) {
  const TestWheel many = build("many-1.0-py3-none-any.whl", {{"pkg/a.bin", random_bytes(400 * 1024, 4)},
                                                             {"pkg/b.bin", random_bytes(400 * 1024, 5)},
                                                             {"pkg/c.bin", random_bytes(400 * 1024, 6)}});
  cfg.max_extract_bytes = 1000 * 1024;  // each member fits, all three do not
  EXPECT_THROW_CODE(extract_from_wheel(cfg, many.local, "pkg", tmp / "dest"), integrity_error,
                    "(FLASHCPP_MAX_EXTRACT_BYTES)");
  expect_nothing_extracted(tmp / "dest");
  EXPECT_TRUE(fs::exists(extract_from_wheel(cfg, many.local, "pkg/a.bin", tmp / "dest")));
  cfg.max_extract_bytes = 1200 * 1024;
  EXPECT_TRUE(fs::exists(extract_from_wheel(cfg, many.local, "pkg", tmp / "dest2") / "c.bin"));
}

TEST_F(ArtifactsTest, LockHeldByAnotherProcessIsReportedAndTimesOut) {
  // The helper fetches libtvm_ffi into the cold cache and holds the wheel's lock while the server delays it.
  Route slow{tvm.bytes};
  slow.delay_ms = 6000;
  server.set(file_path(tvm), slow);
  const WheelPin pin = cfg.manifest().tvm_ffi;
  const fs::path lock_file = cached_wheel_path(cfg, pin).parent_path() / ".lock";
  std::vector<std::string> args = {FLASHCPP_RACE_HELPER, cfg.cache_dir.string(), cfg.manifest_file.string(),
                                   cfg.index_url, (tmp / "out").string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, FLASHCPP_RACE_HELPER, nullptr, nullptr, argv.data(), environ), 0);
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  } reap{pid};
  const auto t0 = Clock::now();
  while (read_file(lock_file).find("pid=") == std::string::npos && seconds_since(t0) < 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(read_file(lock_file).find("pid=" + std::to_string(pid) + " "), std::string::npos) << read_file(lock_file);

  std::vector<std::string> notices;
  cfg.lock_timeout_s = 1;
  cfg.lock_report_after_s = 0.2;
  cfg.notice = [&](const std::string& line) { notices.push_back(line); };
  const std::string holder = "pid " + std::to_string(pid) + " (fetching " + pin.filename;
  const auto t1 = Clock::now();
  EXPECT_THROW_CODE(ensure_wheel(cfg, pin), io_error, holder);
  const double waited = seconds_since(t1);
  EXPECT_GE(waited, 1.0);
  EXPECT_LT(waited, 3.0);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find(holder), std::string::npos) << notices[0];
  EXPECT_NE(notices[0].find("FLASHCPP_LOCK_TIMEOUT"), std::string::npos) << notices[0];
  EXPECT_FALSE(fs::exists(cached_wheel_path(cfg, pin)));
}

}  // namespace
}  // namespace flashcpp::testing
