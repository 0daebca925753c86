// `flashcpp doctor`: what this machine offers flashcpp, and what is missing or misconfigured.
// Exit status 1 when something needed is missing, untrusted or unusable, or a setting is invalid (each problem says
// what to do); a machine without a GPU is not a failure: the reference backend is what runs there.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tools_internal.hpp"
#include "flashcpp/artifacts.hpp"
#include "flashcpp/commands.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/jit.hpp"

namespace flashcpp::cli {
namespace {

using Problems = std::vector<std::string>;

int print_cuda() {
  int driver = 0, runtime = 0;
  const bool have_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  (void)cudaRuntimeGetVersion(&runtime);
  std::printf("CUDA runtime:  %d.%d\n", runtime / 1000, (runtime % 1000) / 10);
  if (have_driver)
    std::printf("CUDA driver:   %d.%d\n", driver / 1000, (driver % 1000) / 10);
  else
    std::printf("CUDA driver:   not found\n");
  const int n = cuda_device_count();
  if (n == 0) {
    std::printf("GPUs:          no GPU found: the float64 reference backend (flashcpp::reference, `flashcpp demo`) "
                "is what runs here; FlashInfer's and the sparse MLA kernels need a CUDA GPU\n");
    return 0;
  }
  for (int i = 0; i < n; ++i) {
    const DeviceFacts& d = device_facts(i);
    std::printf("GPU %d:         %s, %d SMs, compute capability %d.%d, %.1f GiB, L2 %.0f MiB\n", i, d.name.c_str(),
                d.sm_count, d.cc_major, d.cc_minor, d.total_memory / 1073741824.0, d.l2_bytes / 1048576.0);
  }
  return n;
}

// The pins: built in, or FLASHCPP_MANIFEST's file, which must be usable (a regular file of valid, shallow JSON).
bool print_manifest(const artifacts::Settings& cfg, Problems& problems) {
  if (cfg.manifest_file.empty()) return true;
  try {
    (void)cfg.manifest();
    std::printf("manifest:      %s (FLASHCPP_MANIFEST)\n", cfg.manifest_file.c_str());
    return true;
  } catch (const Error& e) {
    std::printf("manifest:      unusable: %s\n", e.what());
    problems.push_back(e.message() + "; fix the file or unset FLASHCPP_MANIFEST (then the built-in pins apply)");
    return false;
  }
}

void print_tvm_ffi(const artifacts::Settings& cfg, bool gpu, Problems& problems) {
  try {
    const auto path = artifacts::resolve_tvm_ffi_library(cfg);
    const ffi::Library& lib = ffi::Library::load(path);
    std::printf("libtvm_ffi:    %s (version %s)\n", lib.path().c_str(), lib.version_string().c_str());
  } catch (const Error& e) {
    std::printf("libtvm_ffi:    not available: %s\n", e.what());
    // Only the GPU ops load it: without a GPU the reference backend runs and needs none, so a missing one is a problem
    // only with a GPU. One that is there but refused (untrusted) or cannot be loaded is a problem everywhere.
    if (e.code() == ErrorCode::untrusted)
      problems.push_back("libtvm_ffi is untrusted and will not be loaded: " + e.message());
    else if (e.code() != ErrorCode::not_found)
      problems.push_back("libtvm_ffi cannot be used: " + e.message() + "; remove it and run `flashcpp fetch "
                         "--skip-jit-cache`, or set FLASHCPP_TVM_FFI_LIB to a working libtvm_ffi.so");
    else if (gpu)
      problems.push_back("libtvm_ffi is not available (the FlashInfer ops need it): run `flashcpp fetch "
                         "--skip-jit-cache` with network access, or set FLASHCPP_TVM_FFI_LIB to a libtvm_ffi.so");
  }
}

void print_cache(const artifacts::Settings& cfg, Problems& problems) {
  std::printf("cache:         %s\n", cfg.cache_dir.c_str());
  try {
    const auto entries = artifacts::cache_list(cfg);
    if (entries.empty()) std::printf("               (no wheels or extracted modules)\n");
    for (const auto& e : entries)
      std::printf("               %-9s %10.1f MiB  %s%s\n", e.kind.c_str(), e.bytes / 1048576.0,
                  e.path.lexically_relative(cfg.cache_dir).c_str(), e.pinned ? "" : "  (not pinned)");
  } catch (const Error& e) {
    std::printf("               cannot list: %s\n", e.what());
    problems.push_back("the cache " + cfg.cache_dir.string() + " cannot be read: " + e.message() +
                       "; set FLASHCPP_CACHE_DIR to a directory you can write");
  }
}

void print_builder() {
  const jit::BuildOptions b = jit::BuildOptions::from_env();
  std::string why;
  const bool can = jit::can_build(b, &why);
  std::printf("module builder: %s\n", can ? "available (nvcc and pinned FlashInfer sources found)" : ("unavailable: " + why).c_str());
  if (!can) return;
  try {
    std::error_code ec;
    const auto root = jit::module_root(b);
    int built = 0;
    if (std::filesystem::is_directory(root, ec))
      for (const auto& d : std::filesystem::directory_iterator(root, ec))
        if (d.is_directory()) ++built;
    std::printf("built modules: %d under %s\n", built, root.c_str());
  } catch (const Error& e) {
    std::printf("built modules: unknown: %s\n", e.what());
  }
}

int run_doctor() {
  Problems problems = env::problems();  // every FLASHCPP_* setting with a fixed form, checked first
  for (const auto& p : problems) std::printf("environment:   %s\n", p.c_str());
  std::optional<artifacts::Settings> cfg;
  try {
    cfg = artifacts::Settings::from_env();
  } catch (const Error& e) {
    if (std::find(problems.begin(), problems.end(), e.message()) == problems.end()) problems.push_back(e.message());
  }
  const bool gpu = print_cuda() > 0;
  if (cfg && print_manifest(*cfg, problems)) {  // what follows resolves through the manifest's pins
    print_tvm_ffi(*cfg, gpu, problems);
    print_cache(*cfg, problems);
  }
  if (problems.empty()) print_builder();  // reads the same settings; reported once above when invalid
  if (problems.empty()) {
    std::printf("\ndoctor: no problems found%s\n", gpu ? "" : " (reference backend only: no GPU)");
    return kExitOk;
  }
  std::printf("\ndoctor: %zu problem(s):\n", problems.size());
  for (const auto& p : problems) std::printf("  - %s\n", p.c_str());
  return kExitFailure;
}

}  // namespace

void check_environment() {
  const Problems problems = env::problems();
  if (problems.empty()) return;
  std::string all;
  for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
  throw Error(ErrorCode::invalid_argument, all + " (`flashcpp doctor` checks every setting)");
}

void add_doctor_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor", "Report the TVM-FFI runtime, CUDA driver/runtime, GPUs and the cache; "
                                           "exit status 1 when something needed is missing, untrusted, unusable or misconfigured");
  cmd->callback([] {
    if (const int rc = run_doctor(); rc != kExitOk) throw CLI::RuntimeError(rc);
  });
}

}  // namespace flashcpp::cli
