#include "flashcpp/version.hpp"

#include "flashcpp/artifacts_manifest.hpp"
#include "flashcpp/c/common.h"
#include "flashcpp/version_config.hpp"

namespace flashcpp {

const VersionInfo& version() noexcept {
  static constexpr VersionInfo v{generated::kLibraryVersion, FLASHCPP_C_ABI_VERSION,
                                 artifacts::generated::kFlashInferVersion, generated::kTvmFfiVersion,
                                 generated::kCudaVersion};
  return v;
}

const char* version_string() noexcept { return generated::kVersionLine; }

}  // namespace flashcpp

extern "C" const char* flashcpp_version(void) { return flashcpp::version_string(); }
