// Fuzzes the manifest parser (Manifest::load, FLASHCPP_MANIFEST): any file gives a manifest or a typed error
// (invalid_argument); no other exception (nlohmann-json's included), no sanitizer report.
#include <cstdint>
#include <cstdlib>

#include "flashcpp/artifacts.hpp"
#include "flashcpp/error.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  using namespace flashcpp;
  const auto file = fuzz::scratch_dir() / "manifest.json";
  fuzz::write_file(file, fuzz::as_text(data, size));
  try {
    const artifacts::Manifest m = artifacts::Manifest::load(file);
    for (const auto* pin : {&m.jit_cache, &m.tvm_ffi, &m.flashinfer_python})
      if (pin->filename.empty() || pin->sha256.size() != 64) std::abort();  // a loaded pin obeys the rules
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument) std::abort();
  }
  return 0;
}
