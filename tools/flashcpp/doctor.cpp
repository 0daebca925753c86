// `flashcpp doctor`: what this machine offers flashcpp. Exits 0 without a GPU.
#include <cuda_runtime_api.h>

#include <cstdio>

#include <filesystem>
#include <string>

#include "ffi/ffi.hpp"
#include "flashcpp/artifacts.hpp"
#include "flashcpp/commands.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/jit.hpp"

namespace flashcpp::cli {

static void print_cuda() {
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
    std::printf("GPUs:          no GPU found\n");
    return;
  }
  for (int i = 0; i < n; ++i) {
    const DeviceInfo& d = device_info(i);
    std::printf("GPU %d:         %s, %d SMs, compute capability %d.%d, %.1f GiB, L2 %.0f MiB\n", i, d.name.c_str(),
                d.sm_count, d.cc_major, d.cc_minor, d.total_memory / 1073741824.0, d.l2_bytes / 1048576.0);
  }
}

static void print_tvm_ffi(const artifacts::Config& cfg) {
  try {
    const auto path = artifacts::resolve_tvm_ffi_library(cfg);
    const ffi::Library& lib = ffi::Library::load(path);
    std::printf("libtvm_ffi:    %s (version %s)\n", lib.path().c_str(), lib.version_string().c_str());
  } catch (const Error& e) {
    std::printf("libtvm_ffi:    not available: %s\n", e.what());
  }
}

static void print_cache(const artifacts::Config& cfg) {
  std::printf("cache:         %s\n", cfg.cache_dir.c_str());
  try {
    const auto entries = artifacts::cache_list(cfg);
    if (entries.empty()) std::printf("               (no wheels or extracted modules)\n");
    for (const auto& e : entries)
      std::printf("               %-9s %10.1f MiB  %s%s\n", e.kind.c_str(), e.bytes / 1048576.0,
                  e.path.lexically_relative(cfg.cache_dir).c_str(), e.pinned ? "" : "  (not pinned)");
  } catch (const Error& e) {
    std::printf("               cannot list: %s\n", e.what());
  }
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

void add_doctor_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor", "Report the TVM-FFI runtime, CUDA driver/runtime, GPUs and the cache");
  cmd->callback([] {
    const auto cfg = artifacts::Config::from_env();
    print_tvm_ffi(cfg);
    print_cuda();
    print_cache(cfg);
  });
}

}  // namespace flashcpp::cli
