#include "flashcpp/version.hpp"

#include "flashcpp/version_config.hpp"

namespace flashcpp {

const VersionInfo& version() noexcept {
  static constexpr VersionInfo v{generated::kLibraryVersion, generated::kCAbiVersion, generated::kFlashInferVersion,
                                 generated::kTvmFfiVersion, generated::kCudaVersion};
  return v;
}

const char* version_string() noexcept { return generated::kVersionLine; }

}  // namespace flashcpp
