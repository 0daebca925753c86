// Helper process for the racing test: resolves libtvm_ffi and the norm module into a cold cache and writes
// both paths to an output file. Usage: artifacts_race_helper CACHE_DIR MANIFEST INDEX_URL OUT_FILE
#include <cstdio>
#include <fstream>

#include "flashcpp/artifacts.hpp"
#include "flashcpp/error.hpp"

int main(int argc, char** argv) {
  if (argc != 5) return 2;
  try {
    flashcpp::artifacts::Settings cfg;
    cfg.cache_dir = argv[1];
    cfg.manifest_file = argv[2];
    cfg.index_url = argv[3];
    cfg.connect_timeout_s = 5;
    cfg.stall_timeout_s = 5;
    cfg.max_retries = 0;
    const auto lib = flashcpp::artifacts::resolve_tvm_ffi_library(cfg);
    const auto norm = flashcpp::artifacts::resolve_prebuilt_module(cfg, "norm");
    if (!norm) return 3;
    std::ofstream(argv[4]) << lib.string() << "\n" << norm->string() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "race helper: %s\n", e.what());
    return 1;
  }
}
