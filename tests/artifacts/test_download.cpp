// Downloads against the loopback server: cold fetch, warm start, resume, hash mismatch, HTTP errors, stalls,
// redirects, truncated cache, and N processes racing on a cold cache.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "artifacts/fixture.hpp"

extern char** environ;

namespace flashcpp::testing {
namespace {

using namespace flashcpp::artifacts;
using Clock = std::chrono::steady_clock;

TEST_F(ArtifactsTest, ColdFetchResolvesLibraryIncludeAndSources) {
  std::vector<Progress> seen;
  cfg.progress = [&](const Progress& p) { seen.push_back(p); };
  const fs::path lib = resolve_tvm_ffi_library(cfg);
  EXPECT_EQ(lib.filename(), "libtvm_ffi.so");
  EXPECT_EQ(read_file(lib), lib_bytes);
  EXPECT_TRUE(lib.string().rfind(cfg.cache_dir.string(), 0) == 0) << lib;
  const fs::path inc = resolve_tvm_ffi_include_dir(cfg);
  EXPECT_EQ(read_file(inc / "tvm/ffi/c_api.h"), "// c_api\n");
  EXPECT_EQ(read_file(inc / "dlpack/dlpack.h"), "// dlpack\n");
  const fs::path src = resolve_flashinfer_sources(cfg);
  EXPECT_EQ(read_file(src / "include/flashinfer/norm.cuh"), "// norm\n");
  EXPECT_EQ(read_file(src / "spdlog/include/spdlog/spdlog.h"), "// spdlog\n");
  const auto norm = resolve_prebuilt_module(cfg, "norm");
  ASSERT_TRUE(norm.has_value());
  EXPECT_EQ(norm->parent_path().filename(), "norm");
  EXPECT_EQ(read_file(*norm), norm_bytes);
  // One download per wheel, one index page per indexed wheel.
  EXPECT_EQ(server.requests(file_path(tvm)), 1);
  EXPECT_EQ(server.requests(file_path(fip)), 1);
  EXPECT_EQ(server.requests(jit_path()), 1);
  EXPECT_EQ(server.requests("/simple/apache-tvm-ffi/"), 1);
  EXPECT_EQ(read_file(cached_wheel_path(cfg, cfg.manifest().tvm_ffi)), tvm.bytes);
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().finished);
  EXPECT_GT(seen.back().done, 0u);
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(ArtifactsTest, WarmStartNeedsNoNetwork) {
  const fs::path lib = resolve_tvm_ffi_library(cfg);
  ASSERT_TRUE(resolve_prebuilt_module(cfg, "norm"));
  server.stop();
  cfg.offline = true;
  EXPECT_EQ(resolve_tvm_ffi_library(cfg), lib);
  // Re-extraction from the cached, stamped wheel works without the network too.
  fs::remove_all(cfg.cache_dir / "extract");
  EXPECT_EQ(read_file(resolve_tvm_ffi_library(cfg)), lib_bytes);
  const auto page = resolve_prebuilt_module(cfg, "page");
  ASSERT_TRUE(page.has_value());
  EXPECT_EQ(read_file(*page).size(), 1000u);
  // Online but with the server gone: the warm cache still answers.
  cfg.offline = false;
  EXPECT_EQ(resolve_tvm_ffi_library(cfg), lib);
}

TEST_F(ArtifactsTest, StampIsNotReTrustedAfterAnEditAndVerifyFindsCorruption) {
  const WheelPin pin = cfg.manifest().tvm_ffi;
  const fs::path wheel = ensure_wheel(cfg, pin);
  // A warm start trusts the stamp: no re-hash, no request.
  EXPECT_EQ(ensure_wheel(cfg, pin), wheel);
  EXPECT_EQ(server.requests(file_path(tvm)), 1);
  // Flip one byte and put size and mtime back: the ctime moved, so the stamp no longer vouches for the
  // file; it is re-hashed, found corrupt and downloaded again.
  auto flip_keeping_size_and_mtime = [&] {
    const auto mtime = fs::last_write_time(wheel);
    ::usleep(20000);  // past the file system's timestamp granularity (a clock tick)
    {
      std::fstream f(wheel, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(100);
      f.put('\x5a' ^ tvm.bytes[100]);
    }
    fs::last_write_time(wheel, mtime);
  };
  flip_keeping_size_and_mtime();
  EXPECT_EQ(read_file(ensure_wheel(cfg, pin)), tvm.bytes);
  EXPECT_EQ(server.requests(file_path(tvm)), 2);
  // `cache verify` re-hashes every wheel, finds the corruption and removes it; the next resolve downloads it.
  flip_keeping_size_and_mtime();
  const auto report = cache_verify(cfg);
  ASSERT_EQ(report.size(), 1u);
  EXPECT_FALSE(report[0].verified);
  EXPECT_FALSE(fs::exists(wheel));
  EXPECT_EQ(read_file(ensure_wheel(cfg, pin)), tvm.bytes);
  EXPECT_EQ(server.requests(file_path(tvm)), 3);
}

TEST_F(ArtifactsTest, ResumesAfterConnectionCutMidFile) {
  Route r{tvm.bytes};
  r.cut_after = tvm.bytes.size() / 2;
  r.cut_times = 1;
  server.set(file_path(tvm), r);
  EXPECT_EQ(read_file(resolve_tvm_ffi_library(cfg)), lib_bytes);
  const auto ranges = server.ranges(file_path(tvm));
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0], "");
  EXPECT_EQ(ranges[1], "bytes=" + std::to_string(tvm.bytes.size() / 2) + "-");
  EXPECT_EQ(server.bytes_sent(file_path(tvm)), tvm.bytes.size());  // nothing was sent twice
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(ArtifactsTest, ResumesPartialFileLeftByAnEarlierRun) {
  Route r{tvm.bytes};
  r.cut_after = 200000;
  r.cut_times = 1;
  server.set(file_path(tvm), r);
  cfg.max_retries = 0;
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "partial file is kept");
  const fs::path part = cached_wheel_path(cfg, cfg.manifest().tvm_ffi).string() + ".part";
  ASSERT_TRUE(fs::exists(part));
  EXPECT_EQ(fs::file_size(part), 200000u);
  EXPECT_EQ(read_file(resolve_tvm_ffi_library(cfg)), lib_bytes);
  EXPECT_EQ(server.ranges(file_path(tvm)).back(), "bytes=200000-");
  EXPECT_FALSE(fs::exists(part));
}

TEST_F(ArtifactsTest, ServerIgnoringRangeRestartsFromZero) {
  Route r{tvm.bytes};
  r.cut_after = 150000;
  r.cut_times = 1;
  r.honor_range = false;
  server.set(file_path(tvm), r);
  EXPECT_EQ(read_file(resolve_tvm_ffi_library(cfg)), lib_bytes);
  // Cut; a ranged retry answered with the whole file (refused by libcurl); then one full download.
  const auto ranges = server.ranges(file_path(tvm));
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[1], "bytes=150000-");
  EXPECT_EQ(ranges[2], "");
}

TEST_F(ArtifactsTest, WrongHashIsRejectedAndNotPublished) {
  write_manifest(std::string(64, 'a'));
  serve_index(tvm, "apache-tvm-ffi", std::string(64, 'a'));  // the index agrees with the (wrong) pin
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), integrity_error, "does not match its pin");
  const fs::path wheel = cached_wheel_path(cfg, cfg.manifest().tvm_ffi);
  EXPECT_FALSE(fs::exists(wheel));
  EXPECT_FALSE(fs::exists(wheel.parent_path() / ".verified"));
  EXPECT_TRUE(leftovers().empty());
  EXPECT_FALSE(fs::exists(cfg.cache_dir / "extract"));
  // The index listing a different hash than the pin is refused before any download.
  server.set("/simple/flashinfer-python/", Route{"<a href=\"/files/" + fip.filename + "#sha256=" + std::string(64, 'b') +
                                                 "\">" + fip.filename + "</a>", "", 200, "", "text/html"});
  EXPECT_THROW_CODE(resolve_flashinfer_sources(cfg), integrity_error, "not the pinned");
  EXPECT_EQ(server.requests(file_path(fip)), 0);
}

TEST_F(ArtifactsTest, WrongSizeIsRejected) {
  write_manifest("", tvm.bytes.size() - 10);
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), integrity_error, "more than the pinned");
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(ArtifactsTest, Http404IsAClearErrorAndNotRetried) {
  server.set(file_path(tvm), Route{"", "", 404});
  const auto t0 = Clock::now();
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "HTTP 404 (not found)");
  EXPECT_EQ(server.requests(file_path(tvm)), 1);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, server.url(file_path(tvm)));
}

TEST_F(ArtifactsTest, Http500IsRetriedThenAClearError) {
  server.set(file_path(tvm), Route{"", "", 500});
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "HTTP 500");
  EXPECT_EQ(server.requests(file_path(tvm)), cfg.max_retries + 1);
  // A transient 500 followed by success is invisible to the caller.
  server.set("/simple/apache-tvm-ffi/", Route{"", "", 500});
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "index page");
}

TEST_F(ArtifactsTest, StalledServerTimesOut) {
  Route r{tvm.bytes};
  r.stall = true;
  r.stall_after = 1000;
  server.set(file_path(tvm), r);
  cfg.max_retries = 1;
  const auto t0 = Clock::now();
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "stalled");
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(s, 2 * (cfg.stall_timeout_s + 1) + 1.0);  // two attempts of ~stall_timeout each
  EXPECT_GE(s, cfg.stall_timeout_s);
  EXPECT_EQ(server.requests(file_path(tvm)), 2);
  // The second attempt resumed after the 1000 bytes the first one received.
  EXPECT_EQ(server.ranges(file_path(tvm)).back(), "bytes=1000-");
}

TEST_F(ArtifactsTest, ConnectionRefusedIsAClearErrorAndNotRetried) {
  const std::string dead = server.url("/");
  server.stop();
  cfg.max_retries = 3;
  cfg.retry_backoff_s = 1.0;  // one retry would take at least a second
  cfg.index_url = dead + "simple/";
  const auto t0 = Clock::now();
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "cannot be reached");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.9);
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "not retried");
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "FLASHCPP_TVM_FFI=<path to the " + tvm.filename);
}

// A pinned URL on a port nobody listens on: one attempt, the ways out named, no empty .part file left behind.
TEST_F(ArtifactsTest, UnreachableJitCacheNamesTheWaysOutAndLeavesNoPartFile) {
  HttpServer gone;
  const std::string dead = gone.url("/jit.whl");
  gone.stop();
  write_manifest("", 0, dead);
  cfg.max_retries = 3;
  cfg.retry_backoff_s = 1.0;
  const auto t0 = Clock::now();
  try {
    (void)resolve_prebuilt_module(cfg, "norm");
    ADD_FAILURE() << "expected a network_error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::network_error) << e.what();
    const std::string m = e.what();
    for (const char* want : {"cannot be reached", "not retried", "FLASHCPP_OFFLINE=1", "`flashcpp build`",
                             "FLASHCPP_JIT_CACHE=<path to the", "--skip-jit-cache"})
      EXPECT_NE(m.find(want), std::string::npos) << "missing '" << want << "' in: " << m;
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.9);
  EXPECT_TRUE(leftovers().empty());
  for (const auto& e : cache_list(cfg)) EXPECT_NE(e.kind, "partial") << e.path;
}

TEST_F(ArtifactsTest, FailedFirstAttemptLeavesNoEmptyPartFile) {
  server.set(file_path(tvm), Route{"", "", 404});
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "HTTP 404");
  EXPECT_TRUE(leftovers().empty());
  server.set(file_path(tvm), Route{"", "", 503});
  cfg.max_retries = 1;
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), network_error, "after 2 attempt(s)");
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(ArtifactsTest, EmptyPartFileIsNotListedButPruned) {
  const fs::path dir = cfg.cache_dir / "wheels" / std::string(64, 'a');
  fs::create_directories(dir);
  std::ofstream(dir / "old.whl.part").flush();
  std::ofstream(dir / "half.whl.part") << "bytes to resume";
  int partial = 0;
  for (const auto& e : cache_list(cfg)) {
    EXPECT_NE(e.path.filename(), "old.whl.part");
    partial += e.kind == "partial";
  }
  EXPECT_EQ(partial, 1);
  (void)cache_prune(cfg, false, false);
  EXPECT_FALSE(fs::exists(dir / "old.whl.part"));
  EXPECT_FALSE(fs::exists(dir / "half.whl.part"));
}

TEST_F(ArtifactsTest, OfflineErrorSaysNotCachedAndNamesTheWaysOut) {
  cfg.offline = true;
  EXPECT_THROW_CODE(resolve_tvm_ffi_library(cfg), not_found, "not cached (offline)");
  EXPECT_THROW_CODE(ensure_wheel(cfg, cfg.manifest().jit_cache), not_found, "`flashcpp build`");
  EXPECT_THROW_CODE(ensure_wheel(cfg, cfg.manifest().jit_cache), not_found, "FLASHCPP_JIT_CACHE=<path to the");
  EXPECT_THROW_CODE(ensure_wheel(cfg, cfg.manifest().jit_cache), not_found, "--skip-jit-cache");
  EXPECT_EQ(server.requests(jit_path()), 0);
}

TEST_F(ArtifactsTest, RedirectIsFollowed) {
  server.set("/redirect/jit.whl", Route{"", "", 302, server.url(jit_path())});
  server.set("/redirect/relative.whl", Route{"", "", 307, "/redirect/jit.whl"});
  write_manifest("", 0, server.url("/redirect/relative.whl"));
  const auto norm = resolve_prebuilt_module(cfg, "norm");
  ASSERT_TRUE(norm.has_value());
  EXPECT_EQ(read_file(*norm), norm_bytes);
  EXPECT_EQ(server.requests("/redirect/relative.whl"), 1);
  EXPECT_EQ(server.requests("/redirect/jit.whl"), 1);
  EXPECT_EQ(server.requests(jit_path()), 1);
}

TEST_F(ArtifactsTest, TruncatedCachedWheelIsFetchedAgain) {
  const WheelPin pin = cfg.manifest().jit_cache;
  ASSERT_TRUE(resolve_prebuilt_module(cfg, "norm"));
  const fs::path wheel = cached_wheel_path(cfg, pin);
  fs::resize_file(wheel, jit.bytes.size() / 3);
  // The next member needs the wheel: its stamp no longer matches, the hash fails, it is fetched again.
  const auto page = resolve_prebuilt_module(cfg, "page");
  ASSERT_TRUE(page.has_value());
  EXPECT_EQ(server.requests(jit_path()), 2);
  EXPECT_EQ(read_file(wheel), jit.bytes);
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(ArtifactsTest, EightProcessesShareOneDownload) {
  Route slow{tvm.bytes};
  slow.delay_ms = 300;  // all eight are waiting while the first one downloads
  server.set(file_path(tvm), slow);
  Route slow_jit{jit.bytes};
  slow_jit.delay_ms = 300;
  server.set(jit_path(), slow_jit);
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int i = 0; i < 8; ++i) outs.push_back((tmp / ("out" + std::to_string(i))).string());
  for (int i = 0; i < 8; ++i) {
    std::vector<std::string> args = {FLASHCPP_RACE_HELPER, cfg.cache_dir.string(), cfg.manifest_file.string(),
                                     cfg.index_url, outs[i]};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, FLASHCPP_RACE_HELPER, nullptr, nullptr, argv.data(), environ), 0);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(server.requests(file_path(tvm)), 1);
  EXPECT_EQ(server.requests(jit_path()), 1);
  EXPECT_EQ(server.requests("/simple/apache-tvm-ffi/"), 1);
  const std::string first = read_file(outs[0]);
  ASSERT_FALSE(first.empty());
  for (const auto& o : outs) EXPECT_EQ(read_file(o), first);
  std::istringstream lines(first);
  std::string lib, norm;
  std::getline(lines, lib);
  std::getline(lines, norm);
  EXPECT_EQ(read_file(lib), lib_bytes);
  EXPECT_EQ(read_file(norm), norm_bytes);
  EXPECT_TRUE(leftovers().empty());
}

}  // namespace
}  // namespace flashcpp::testing
