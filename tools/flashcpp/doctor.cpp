// `flashcpp doctor`: what this machine offers flashcpp. Exits 0 without a GPU.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "flashcpp/commands.hpp"
#include "flashcpp/cuda.hpp"

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

void add_doctor_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor", "Report the TVM-FFI runtime, CUDA driver/runtime, GPUs and the cache");
  cmd->callback([] { print_cuda(); });
}

}  // namespace flashcpp::cli
