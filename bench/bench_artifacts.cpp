// Artifacts benchmarks (CPU):
//  * BM_WarmResolve*: what a warm Runtime start costs in the artifacts layer: libtvm_ffi, its headers, the
//    FlashInfer sources and the three fixed modules resolved from a cache that holds a multi-GB jit-cache wheel
//    (a sparse file with a verified stamp; the goal is < 20 ms), each module and libtvm_ffi checked against its
//    SHA-256 record and by the path rule applied before dlopen (ffi/trust.hpp). BM_RehashWheel is what
//    re-hashing that wheel on every start would cost instead; BM_ModuleRecordRehash what the first start after a
//    module's ctime moved costs (a FLASHCPP_BENCH_MODULE_MIB module, default 64, is hashed once).
//  * BM_Download*: cold download of a 1 GiB file over loopback, flashcpp (libcurl + SHA-256 while streaming +
//    fsync + rename) against the curl CLI writing the same file (goal: >= 90% of curl's throughput).
// Sizes: FLASHCPP_BENCH_WHEEL_GIB (default 4), FLASHCPP_BENCH_DOWNLOAD_MIB (default 1024).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "artifacts/http_server.hpp"
#include "artifacts/internal.hpp"
#include "ffi/trust.hpp"
#include "flashcpp/artifacts.hpp"

namespace fs = std::filesystem;
namespace art = flashcpp::artifacts;

extern char** environ;

namespace {

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "flashcpp-bench-XXXXXX").string();
    if (!::mkdtemp(t.data())) std::abort();
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A cache holding a multi-GB (sparse) jit-cache wheel with its verified stamp, the tvm-ffi and flashinfer-python
// wheels' extracted members, and the fixed modules.
struct WarmCache {
  TempDir dir;
  art::Settings cfg;
  fs::path big_wheel;
  WarmCache() {
    const std::string fake_sha(64, 'e');
    cfg.cache_dir = dir.path / "cache";
    const fs::path manifest = dir.path / "manifest.json";
    std::ofstream(manifest) << R"({"flashinfer_jit_cache": {"filename": "flashinfer_jit_cache-bench.whl", "sha256": ")"
                            << fake_sha << R"(", "url": "http://127.0.0.1:9/none.whl"}})";
    cfg.manifest_file = manifest;
    const art::Manifest m = cfg.manifest();
    big_wheel = art::cached_wheel_path(cfg, m.jit_cache);
    fs::create_directories(big_wheel.parent_path());
    {
      const int fd = ::open(big_wheel.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(env_u64("FLASHCPP_BENCH_WHEEL_GIB", 4) << 30)) != 0) std::abort();
      ::close(fd);
    }
    art::detail::write_stamp(big_wheel, big_wheel.parent_path() / ".verified", fake_sha);
    auto touch = [](const fs::path& p) {
      fs::create_directories(p.parent_path());
      std::ofstream(p) << "x";
    };
    const fs::path tvm = cfg.cache_dir / "extract" / m.tvm_ffi.sha256 / "tvm_ffi";
    touch(tvm / "lib" / "libtvm_ffi.so");
    record(tvm / "lib" / "libtvm_ffi.so");
    touch(tvm / "include" / "tvm" / "ffi" / "c_api.h");
    touch(tvm / "include" / "dlpack" / "dlpack.h");
    const fs::path fi = cfg.cache_dir / "extract" / m.flashinfer_python.sha256 / "flashinfer" / "data";
    touch(fi / "include" / "flashinfer" / "norm.cuh");
    touch(fi / "csrc" / "norm.cu");
    for (const char* uri : {"norm", "page", "gdn_prefill_sm90"}) {
      const fs::path so = cfg.cache_dir / "extract" / fake_sha / "flashinfer_jit_cache" / "jit_cache" / uri / (std::string(uri) + ".so");
      touch(so);
      record(so);
    }
  }
  static void record(const fs::path& so) { flashcpp::ffi::write_module_record(so, flashcpp::ffi::file_sha256(so)); }
};

WarmCache& warm_cache() {
  static WarmCache c;
  return c;
}

// Resolution (each module and libtvm_ffi checked against its SHA-256 record) and the path rule checked
// before each dlopen: everything a warm start does on disk before it loads code.
void resolve_everything(const art::Settings& cfg) {
  benchmark::DoNotOptimize(flashcpp::ffi::require_trusted_file(art::resolve_tvm_ffi_library(cfg), "libtvm_ffi"));
  benchmark::DoNotOptimize(art::resolve_tvm_ffi_include_dir(cfg));
  benchmark::DoNotOptimize(art::resolve_flashinfer_sources(cfg));
  for (const char* uri : {"norm", "page", "gdn_prefill_sm90"}) {
    const auto so = art::resolve_prebuilt_module(cfg, uri);
    if (!so) std::abort();
    benchmark::DoNotOptimize(flashcpp::ffi::require_trusted_file(*so, "module"));
  }
}

// Everything a warm start resolves, plus the multi-GB wheel's stamp check.
void BM_WarmResolveFromCache(benchmark::State& state) {
  WarmCache& c = warm_cache();
  const art::Manifest m = c.cfg.manifest();
  for (auto _ : state) {
    resolve_everything(c.cfg);
    benchmark::DoNotOptimize(art::ensure_wheel(c.cfg, m.jit_cache));
  }
  state.counters["wheel_GiB"] = static_cast<double>(fs::file_size(c.big_wheel)) / (1 << 30);
}
BENCHMARK(BM_WarmResolveFromCache)->Unit(benchmark::kMicrosecond);

// The same from Settings::from_env() (environment, pip.conf, build-tree prefix) each time, as a fresh process does.
void BM_WarmResolveFromEnv(benchmark::State& state) {
  WarmCache& c = warm_cache();
  ::setenv("FLASHCPP_CACHE_DIR", c.cfg.cache_dir.c_str(), 1);
  ::setenv("FLASHCPP_MANIFEST", c.cfg.manifest_file.c_str(), 1);
  ::setenv("FLASHCPP_NO_BUILD_DEPS", "1", 1);
  for (auto _ : state) resolve_everything(art::Settings::from_env());
  ::unsetenv("FLASHCPP_CACHE_DIR");
  ::unsetenv("FLASHCPP_MANIFEST");
  ::unsetenv("FLASHCPP_NO_BUILD_DEPS");
}
BENCHMARK(BM_WarmResolveFromEnv)->Unit(benchmark::kMicrosecond);

// What a start would cost if it re-hashed the multi-GB wheel (page-cache resident, sparse: a lower bound).
void BM_RehashWheel(benchmark::State& state) {
  WarmCache& c = warm_cache();
  for (auto _ : state) benchmark::DoNotOptimize(art::sha256_file(c.big_wheel));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * fs::file_size(c.big_wheel)));
}
BENCHMARK(BM_RehashWheel)->Unit(benchmark::kMillisecond)->Iterations(1);

// The first start after a module's ctime moved (copied back, chmod): its record no longer vouches for it by
// identity, so it is hashed once and the record refreshed.
void BM_ModuleRecordRehash(benchmark::State& state) {
  WarmCache& c = warm_cache();
  const fs::path so = c.dir.path / "module.so";
  {
    std::ofstream out(so, std::ios::binary);
    std::vector<char> block(1 << 20, 'm');
    for (std::uint64_t i = 0; i < env_u64("FLASHCPP_BENCH_MODULE_MIB", 64); ++i) out.write(block.data(), block.size());
  }
  WarmCache::record(so);
  for (auto _ : state) {
    state.PauseTiming();
    ::chmod(so.c_str(), 0755);  // moves the ctime
    ::chmod(so.c_str(), 0644);
    state.ResumeTiming();
    benchmark::DoNotOptimize(flashcpp::ffi::check_module_record(so));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * fs::file_size(so)));
}
BENCHMARK(BM_ModuleRecordRehash)->Unit(benchmark::kMillisecond)->Iterations(5);

struct DownloadFixture {
  TempDir dir;
  fs::path source;
  std::string sha;
  flashcpp::testing::HttpServer server;
  DownloadFixture() {
    source = dir.path / "big.bin";
    const std::uint64_t bytes = env_u64("FLASHCPP_BENCH_DOWNLOAD_MIB", 1024) << 20;
    std::ofstream out(source, std::ios::binary);
    std::mt19937_64 rng(7);
    std::vector<std::uint64_t> block(1 << 17);  // 1 MiB
    art::detail::Sha256 h;
    for (std::uint64_t done = 0; done < bytes; done += sizeof(std::uint64_t) * block.size()) {
      for (auto& v : block) v = rng();
      out.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(block.size() * 8));
      h.update(block.data(), block.size() * 8);
    }
    out.close();
    sha = h.hex_digest();
    flashcpp::testing::Route r;
    r.file = source.string();
    server.set("/big.bin", r);
  }
};

DownloadFixture& download_fixture() {
  static DownloadFixture f;
  return f;
}

void BM_DownloadFlashcpp(benchmark::State& state) {
  DownloadFixture& f = download_fixture();
  art::Settings cfg;
  const fs::path dest = f.dir.path / "flashcpp.bin";
  for (auto _ : state) {
    fs::remove(dest);
    art::download_file(cfg, f.server.url("/big.bin"), dest, f.sha, fs::file_size(f.source));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * fs::file_size(f.source)));
  fs::remove(dest);
}
BENCHMARK(BM_DownloadFlashcpp)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

void BM_DownloadCurlCli(benchmark::State& state) {
  DownloadFixture& f = download_fixture();
  const fs::path dest = f.dir.path / "curl.bin";
  const bool fsync_too = state.range(0) != 0;
  for (auto _ : state) {
    fs::remove(dest);
    std::vector<std::string> args = {"curl", "-s", "-f", "-o", dest.string(), f.server.url("/big.bin")};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawnp(&pid, "curl", nullptr, nullptr, argv.data(), environ) != 0) {
      state.SkipWithError("curl CLI not found");
      return;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      state.SkipWithError("curl CLI failed");
      return;
    }
    if (fsync_too) art::detail::fsync_path(dest, false);  // the same durability flashcpp provides
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * fs::file_size(f.source)));
  fs::remove(dest);
}
BENCHMARK(BM_DownloadCurlCli)->Arg(0)->Arg(1)->ArgName("fsync")->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
