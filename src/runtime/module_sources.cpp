// Module sources beyond explicit directories: the prebuilt artifacts and the module builder.
// (Wired to the artifacts and jit layers once they land; until then only explicit directories and
// FLASHCPP_TVM_FFI_LIB / the build tree's pinned wheel are used.)
#include <cstdlib>

#include "runtime/runtime_internal.hpp"

#ifndef FLASHCPP_DEFAULT_DEPS_DIR
#define FLASHCPP_DEFAULT_DEPS_DIR ""
#endif

namespace flashcpp {
namespace fs = std::filesystem;

std::vector<ModuleSource> default_module_sources(const RuntimeOptions&) { return {}; }

fs::path default_tvm_ffi_library() {
  fs::path p = fs::path(FLASHCPP_DEFAULT_DEPS_DIR) / "apache_tvm_ffi/tvm_ffi/lib/libtvm_ffi.so";
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return p;
  throw Error(ErrorCode::not_found, "libtvm_ffi.so not found; set FLASHCPP_TVM_FFI_LIB to its path");
}

std::string module_help(const std::string& uri, const RuntimeOptions&) {
  return "Build it with `flashcpp build --uri " + uri + "`, or put <dir>/" + uri + "/" + uri +
         ".so in a directory listed in FLASHCPP_MODULE_PATH.";
}

}  // namespace flashcpp
