// `flashcpp fetch` (pinned artifacts into the cache, with progress) and `flashcpp cache ls|verify|prune`.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "flashcpp/artifacts.hpp"
#include "flashcpp/commands.hpp"
#include "flashcpp/error.hpp"

namespace flashcpp::cli {
namespace {
namespace art = flashcpp::artifacts;

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string hms(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  else
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", t / 60, t % 60);
  return buf;
}

// A bar redrawn in place on a terminal; plain lines (every 10% or 5 s) otherwise.
art::ProgressFn make_progress() {
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  struct State {
    int last_decile = -1;
    double last_line_s = -100;
  };
  auto st = std::make_shared<State>();
  return [tty, st](const art::Progress& p) {
    const double frac = p.total ? static_cast<double>(p.done) / static_cast<double>(p.total) : 0;
    const double eta = p.total && p.bytes_per_second > 0 ? static_cast<double>(p.total - p.done) / p.bytes_per_second : NAN;
    if (tty) {
      constexpr int width = 30;
      const int fill = p.total ? static_cast<int>(frac * width) : 0;
      std::string bar(static_cast<size_t>(fill), '#');
      bar.resize(width, '-');
      std::fprintf(stderr, "\r%s [%s] %s / %s  %s/s  ETA %s\x1b[K", std::string(p.what).c_str(), bar.c_str(),
                   human_bytes(static_cast<double>(p.done)).c_str(),
                   p.total ? human_bytes(static_cast<double>(p.total)).c_str() : "?",
                   human_bytes(p.bytes_per_second).c_str(), p.finished ? "0:00" : hms(eta).c_str());
      if (p.finished) std::fputc('\n', stderr);
      std::fflush(stderr);
      return;
    }
    const int decile = static_cast<int>(frac * 10);
    if (!p.finished && decile == st->last_decile && p.seconds - st->last_line_s < 5) return;
    st->last_decile = decile;
    st->last_line_s = p.seconds;
    std::fprintf(stderr, "fetch: %s: %s of %s (%.0f%%), %s/s, ETA %s%s\n", std::string(p.what).c_str(),
                 human_bytes(static_cast<double>(p.done)).c_str(),
                 p.total ? human_bytes(static_cast<double>(p.total)).c_str() : "?", frac * 100,
                 human_bytes(p.bytes_per_second).c_str(), p.finished ? "0:00" : hms(eta).c_str(),
                 p.finished ? ", done" : "");
  };
}

struct FetchOptions {
  std::vector<std::string> modules;
  bool skip_jit_cache = false;
  bool offline = false;
};

// Offline, without a cached jit-cache wheel or an override: a module missing from the cache cannot be had now.
bool jit_cache_unavailable_offline(const art::Settings& cfg) {
  return cfg.offline && cfg.jit_cache_override.empty() &&
         !std::filesystem::exists(art::cached_wheel_path(cfg, cfg.manifest().jit_cache));
}

std::string offline_remedies(const art::Settings& cfg) {
  return "set FLASHCPP_OFFLINE=0 (and no --offline) to download it, or, without network, build the modules with "
         "`flashcpp build`, or set FLASHCPP_JIT_CACHE=<path to the " + cfg.manifest().jit_cache.filename +
         " wheel or its unpacked package directory>, or pass --skip-jit-cache to fetch everything else";
}

void run_fetch(const FetchOptions& o) {
  art::Settings cfg = art::Settings::from_env();
  if (o.offline) cfg.offline = true;
  cfg.progress = make_progress();
  if (!o.modules.empty()) {
    int missing = 0, offline_missing = 0;
    for (const auto& uri : o.modules) {
      if (auto p = art::resolve_prebuilt_module(cfg, uri)) {
        std::printf("module %s: %s\n", uri.c_str(), p->c_str());
      } else if (jit_cache_unavailable_offline(cfg)) {
        std::printf("module %s: not cached (offline)\n", uri.c_str());
        ++offline_missing;
      } else {
        std::printf("module %s: not in the pinned jit-cache wheel (build it with `flashcpp build --uri %s`)\n",
                    uri.c_str(), uri.c_str());
        ++missing;
      }
    }
    if (offline_missing)
      throw_error(ErrorCode::not_found, std::to_string(offline_missing) + " module(s) are not cached (offline) and the " +
                                            "jit-cache wheel is not cached either; " + offline_remedies(cfg));
    if (missing) throw_error(ErrorCode::not_found, std::to_string(missing) + " module(s) are not prebuilt");
    return;
  }
  const art::Manifest m = cfg.manifest();
  std::printf("manifest: %s %s, cache %s\n", m.cuda_tag.c_str(), m.arch.c_str(), cfg.cache_dir.c_str());
  std::printf("libtvm_ffi:          %s\n", art::resolve_tvm_ffi_library(cfg).c_str());
  std::printf("tvm-ffi headers:     %s\n", art::resolve_tvm_ffi_include_dir(cfg).c_str());
  std::printf("flashinfer sources:  %s\n", art::resolve_flashinfer_sources(cfg).c_str());
  if (o.skip_jit_cache) return;
  // The fixed modules every Runtime loads; the rest are extracted on first use.
  int offline_missing = 0;
  for (const char* uri : {"norm", "page", "gdn_prefill_sm90"}) {
    auto p = art::resolve_prebuilt_module(cfg, uri);
    const bool offline_miss = !p && jit_cache_unavailable_offline(cfg);
    offline_missing += offline_miss;
    std::printf("module %-13s %s\n", (std::string(uri) + ":").c_str(),
                p ? p->c_str() : offline_miss ? "not cached (offline)" : "(not in the pinned wheel)");
  }
  if (offline_missing)
    throw_error(ErrorCode::not_found, "the jit-cache wheel " + m.jit_cache.filename + " is not cached (offline); " +
                                          offline_remedies(cfg));
}

void run_cache_ls() {
  const art::Settings cfg = art::Settings::from_env();
  std::printf("cache: %s\n", cfg.cache_dir.c_str());
  std::uint64_t total = 0;
  for (const auto& e : art::cache_list(cfg)) {
    total += e.bytes;
    std::string flags = e.pinned ? "pinned" : "unpinned";
    if (e.kind == "wheel") flags += e.verified ? ", verified" : ", not verified";
    std::printf("%-9s %10s  %-22s %s\n", e.kind.c_str(), human_bytes(static_cast<double>(e.bytes)).c_str(), flags.c_str(),
                e.path.lexically_relative(cfg.cache_dir).c_str());
  }
  std::printf("total %s\n", human_bytes(static_cast<double>(total)).c_str());
}

void run_cache_verify() {
  const art::Settings cfg = art::Settings::from_env();
  int bad = 0;
  for (const auto& e : art::cache_verify(cfg)) {
    std::printf("%s  %s\n", e.verified ? "ok     " : "CORRUPT", e.path.lexically_relative(cfg.cache_dir).c_str());
    bad += !e.verified;
  }
  if (bad)
    throw_error(ErrorCode::integrity_error, std::to_string(bad) + " cached wheel(s) did not match their SHA-256 and were removed; "
                                            "`flashcpp fetch` downloads them again");
  std::printf("all cached wheels match their SHA-256\n");
}

void run_cache_prune(bool unpinned, bool everything) {
  const art::Settings cfg = art::Settings::from_env();
  std::uint64_t freed = 0;
  for (const auto& e : art::cache_prune(cfg, unpinned, everything)) {
    freed += e.bytes;
    std::printf("removed %-9s %s\n", e.kind.c_str(), e.path.lexically_relative(cfg.cache_dir).c_str());
  }
  std::printf("freed %s\n", human_bytes(static_cast<double>(freed)).c_str());
}

}  // namespace

void add_fetch_command(CLI::App& app) {
  auto opts = std::make_shared<FetchOptions>();
  auto* cmd = app.add_subcommand("fetch", "Download, verify and cache the pinned artifacts (or only the given modules)");
  add_text(*cmd, "--module", opts->modules, "Prebuilt module URI to extract (repeatable); nothing else is fetched");
  cmd->add_flag("--skip-jit-cache", opts->skip_jit_cache, "Skip the multi-GB flashinfer-jit-cache wheel");
  cmd->add_flag("--offline", opts->offline, "Never download (as FLASHCPP_OFFLINE=1)");
  cmd->callback(checked([opts] { run_fetch(*opts); }));
}

void add_cache_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("cache", "Inspect and maintain the artifact cache");
  cmd->require_subcommand(1);
  cmd->add_subcommand("ls", "List cached wheels, partial downloads and extracted members")->callback(checked(run_cache_ls));
  cmd->add_subcommand("verify", "Re-hash every cached wheel; remove the corrupt ones")->callback(checked(run_cache_verify));
  auto* prune = cmd->add_subcommand("prune", "Remove partial downloads and temporaries (and more, with flags)");
  auto unpinned = std::make_shared<bool>(false);
  auto everything = std::make_shared<bool>(false);
  prune->add_flag("--unpinned", *unpinned, "Also remove wheels and extractions the current manifest does not pin");
  prune->add_flag("--all", *everything, "Remove everything in the cache");
  prune->callback(checked([unpinned, everything] { run_cache_prune(*unpinned, *everything); }));
}

}  // namespace flashcpp::cli
