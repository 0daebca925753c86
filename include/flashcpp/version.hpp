// What this build of flashcpp is: its version, the C ABI version, the pinned FlashInfer and TVM-FFI versions and
// the CUDA toolkit it was compiled with. The C ABI has the same line as flashcpp_version().
#pragma once
#include <cstdint>

namespace flashcpp {

struct VersionInfo {
  const char* library;     ///< flashcpp's own version, "0.1.0" (the SONAME carries major.minor)
  std::uint32_t c_abi;     ///< FLASHCPP_C_ABI_VERSION of the loaded library (MAJOR * 10000 + MINOR * 100 + PATCH)
  const char* flashinfer;  ///< pinned FlashInfer, "0.6.3" (the jit-cache wheel and the module builder's sources)
  const char* tvm_ffi;     ///< pinned apache-tvm-ffi, "0.1.9"
  const char* cuda;        ///< CUDA toolkit the library was compiled with, "13.0.88"
};

/// The loaded library's versions (static data).
const VersionInfo& version() noexcept;
/// One line: "flashcpp 0.1.0 (C ABI 3.4.0, FlashInfer 0.6.3, TVM-FFI 0.1.9, built with CUDA 13.0.88)".
const char* version_string() noexcept;

}  // namespace flashcpp
