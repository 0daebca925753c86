// `flashcpp build`: build FlashInfer modules ahead of time from the pinned FlashInfer sources.
//   flashcpp build --uri URI [--uri URI ...] | --defaults | --list | --print-root
//                  [--arch 9.0a] [--jobs N] [--cache-dir DIR] [--quiet]
#include <cstdio>

#include "flashcpp/commands.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/jit.hpp"

namespace flashcpp::cli {

void add_build_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("build", "Build FlashInfer kernel modules from the pinned FlashInfer sources (nvcc, offline)");
  struct Args {
    std::vector<std::string> uris;
    bool defaults = false, list = false, quiet = false, print_root = false;
    std::vector<std::string> archs;
    int jobs = -1;
    std::string cache_dir;
  };
  auto args = std::make_shared<Args>();
  add_text(*cmd, "--uri", args->uris, "Module URI (FlashInfer's name, e.g. norm, page, batch_decode_with_kv_cache_...)");
  cmd->add_flag("--defaults", args->defaults, "Build the default module set (flashcpp::jit::default_uris())");
  cmd->add_flag("--list", args->list, "Print the default module set and exit");
  add_text(*cmd, "--arch", args->archs, "CUDA architectures, FLASHINFER_CUDA_ARCH_LIST style (default 9.0a)")
      ->delimiter(',');
  add_integer(*cmd, "--jobs,-j", args->jobs,
              "Parallel compiler processes, 0: all cores (default: FLASHCPP_JIT_JOBS or all cores)", 0, 4096);
  add_text(*cmd, "--cache-dir", args->cache_dir, "Cache directory (default: FLASHCPP_CACHE_DIR or ~/.cache/flashcpp)");
  cmd->add_flag("--quiet,-q", args->quiet, "Print only the summary");
  cmd->add_flag("--print-root", args->print_root,
                "Print the directory modules of this configuration are published in (<cache>/jit/<key>) and exit");
  cmd->callback(checked([args] {
    if (args->list) {
      for (const auto& u : jit::default_uris()) std::printf("%s\n", u.c_str());
      return;
    }
    if (args->print_root) {
      jit::BuildOptions o = jit::BuildOptions::from_env();
      if (!args->archs.empty()) o.cuda_archs = args->archs;
      if (!args->cache_dir.empty()) o.cache_dir = args->cache_dir;
      std::printf("%s\n", jit::module_root(o).string().c_str());
      return;
    }
    std::vector<std::string> uris = args->uris;
    if (args->defaults)
      for (const auto& u : jit::default_uris()) uris.push_back(u);
    if (uris.empty()) throw Error(ErrorCode::invalid_argument, "build: give --uri URI (repeatable), --defaults or --list");
    jit::BuildOptions o = jit::BuildOptions::from_env();
    if (!args->archs.empty()) o.cuda_archs = args->archs;
    if (args->jobs >= 0) o.jobs = args->jobs;
    if (!args->cache_dir.empty()) o.cache_dir = args->cache_dir;
    if (!args->quiet)
      o.progress = [](const std::string& line) {
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
      };
    std::string why;
    if (!jit::can_build(o, &why)) throw Error(ErrorCode::unsupported, "build: cannot build modules here: " + why);
    const auto results = jit::build_modules(o, uris);
    int failed = 0;
    std::printf("\n%-7s %10s %8s %10s  %s\n", "status", "size(KiB)", "wall(s)", "compile(s)", "module");
    for (const auto& r : results) {
      const char* status = r.error ? "FAILED" : r.cached ? "cached" : "built";
      std::printf("%-7s %10ju %8.1f %10.1f  %s\n", status, r.bytes / 1024, r.seconds, r.compile_seconds, r.uri.c_str());
      if (r.error) ++failed;
    }
    for (const auto& r : results)
      if (r.error) std::fprintf(stderr, "\n%s: %s\n", r.uri.c_str(), r.error->what());
    if (!results.empty() && !results.front().path.empty())
      std::printf("\nmodules: %s\n", results.front().path.parent_path().parent_path().string().c_str());
    if (failed) {
      // An unknown URI is a usage error; a module that does not compile is a failure.
      bool usage = false;
      for (const auto& r : results) usage = usage || (r.error && r.error->code() == ErrorCode::invalid_argument);
      std::fprintf(stderr, "flashcpp: build: %d module(s) failed\n", failed);
      throw CLI::RuntimeError(usage ? kExitUsage : kExitFailure);
    }
  }));
}

}  // namespace flashcpp::cli
