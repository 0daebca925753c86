// Module sources after the explicit directories: FlashInfer's prebuilt jit-cache wheel (artifacts), then
// modules built from the pinned sources (jit): already built ones always, new builds as the policy allows.
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>

#include "flashcpp/artifacts.hpp"
#include "flashcpp/jit.hpp"
#include "runtime/runtime_internal.hpp"

namespace flashcpp {
namespace fs = std::filesystem;

namespace {
std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// Download progress as log lines: the start and the end at info, the ticks (at most one a second) at debug.
artifacts::ProgressFn download_log(const LogFn& log) {
  struct State {
    std::mutex mu;
    std::map<std::string, double> last_tick;  // per file: seconds of the last line
  };
  auto st = std::make_shared<State>();
  return [log, st](const artifacts::Progress& p) {
    const std::string what(p.what);
    const std::string total = p.total ? mib(p.total) : std::string("? MiB");
    std::unique_lock lk(st->mu);
    auto it = st->last_tick.find(what);
    if (p.finished) {
      if (it != st->last_tick.end()) st->last_tick.erase(it);
      lk.unlock();
      char rate[64];
      std::snprintf(rate, sizeof(rate), "%.1f s, %.1f MiB/s", p.seconds, p.bytes_per_second / (1 << 20));
      log(LogLevel::info, "downloaded " + what + ": " + mib(p.done) + " in " + rate);
      return;
    }
    if (it == st->last_tick.end()) {
      st->last_tick[what] = p.seconds;
      lk.unlock();
      log(LogLevel::info, "downloading " + what + " (" + total + ")");
      return;
    }
    if (p.seconds - it->second < 1.0) return;
    it->second = p.seconds;
    lk.unlock();
    log(LogLevel::debug, "downloading " + what + ": " + mib(p.done) + " of " + total);
  };
}

jit::BuildOptions builder_options(const artifacts::Settings& cfg, const LogFn& log) {
  jit::BuildOptions b = jit::BuildOptions::from_env();
  b.progress = [log](const std::string& line) { log(LogLevel::debug, "build: " + line); };
  // Sources and headers from the pinned wheels, wherever the artifacts layer finds them.
  if (!std::getenv("FLASHCPP_FLASHINFER_DIR")) {
    try {
      b.flashinfer_data_dir = artifacts::resolve_flashinfer_sources(cfg);
    } catch (const Error&) {
    }
  }
  if (!std::getenv("FLASHCPP_TVM_FFI_INCLUDE")) {
    try {
      b.tvm_ffi_include_dir = artifacts::resolve_tvm_ffi_include_dir(cfg);
    } catch (const Error&) {
    }
  }
  return b;
}
}  // namespace

std::vector<ModuleSource> default_module_sources(const RuntimeOptions& options, const LogFn& log) {
  std::vector<ModuleSource> sources;
  if (!options.use_artifacts) return sources;
  auto cfg = std::make_shared<artifacts::Settings>(artifacts::Settings::from_env());
  cfg->notice = [log](const std::string& line) { log(LogLevel::info, line); };
  cfg->progress = download_log(log);
  const JitPolicy policy = options.jit;
  auto built = [cfg, policy, log](const std::string& uri) -> std::optional<fs::path> {
    const jit::BuildOptions b = builder_options(*cfg, log);
    if (auto p = jit::cached_module(b, uri)) return p;
    std::string why_not;
    if (policy == JitPolicy::off) return std::nullopt;
    if (!jit::can_build(b, &why_not)) {
      log(LogLevel::debug, "module " + uri + ": cannot be built here: " + why_not);
      return std::nullopt;
    }
    log(LogLevel::info, "module " + uri + ": building from the pinned FlashInfer sources (nvcc; this can take minutes)");
    const auto t0 = std::chrono::steady_clock::now();
    fs::path p = jit::build_module(b, uri);
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%.1f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    log(LogLevel::info, "module " + uri + ": built in " + secs + ": " + p.string());
    return p;
  };
  auto prebuilt = [cfg, policy, log](const std::string& uri) -> std::optional<fs::path> {
    try {
      auto p = artifacts::resolve_prebuilt_module(*cfg, uri);
      if (p) log(LogLevel::info, "module " + uri + ": prebuilt " + p->string());
      else log(LogLevel::debug, "module " + uri + ": not in the prebuilt jit-cache" + std::string(cfg->offline ? " (or not cached, offline)" : ""));
      return p;
    } catch (const Error& e) {
      // No network or no such member: fall through to the builder when it may build. A cached module that
      // differs from its record is reported, not quietly replaced by a build.
      if (policy == JitPolicy::off || e.code() == ErrorCode::untrusted) throw;
      log(LogLevel::info, "module " + uri + ": the prebuilt jit-cache cannot be had (" + e.message() + "); trying a build");
      return std::nullopt;
    }
  };
  if (policy == JitPolicy::force) {
    sources.push_back(built);
  } else {
    // A module built ahead of time (`flashcpp build`) is used before a multi-GB prebuilt wheel is fetched.
    sources.push_back([cfg, log](const std::string& uri) {
      auto p = jit::cached_module(builder_options(*cfg, log), uri);
      if (p) log(LogLevel::info, "module " + uri + ": built earlier " + p->string());
      return p;
    });
    sources.push_back(prebuilt);
    sources.push_back(built);
  }
  return sources;
}

fs::path default_tvm_ffi_library() { return artifacts::resolve_tvm_ffi_library(artifacts::Settings::from_env()); }

std::string module_help(const std::string& uri, const RuntimeOptions& options) {
  std::string why;
  const jit::BuildOptions b = builder_options(artifacts::Settings::from_env(), [](LogLevel, const std::string&) {});
  const bool buildable = jit::can_build(b, &why);
  std::string help = "Build it ahead of time with `flashcpp build --uri " + uri + "`";
  if (!buildable) help += " (not possible here: " + why + ")";
  if (options.jit == JitPolicy::off) help += ", or set FLASHCPP_JIT=auto to build it on first use";
  help += "; or fetch the prebuilt jit-cache with `flashcpp fetch --module " + uri +
          "` (needs network), or put <dir>/" + uri + "/" + uri + ".so under a directory listed in FLASHCPP_MODULE_PATH.";
  return help;
}

}  // namespace flashcpp
