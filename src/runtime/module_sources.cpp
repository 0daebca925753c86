// Module sources after the explicit directories: FlashInfer's prebuilt jit-cache wheel (artifacts), then
// modules built from the pinned sources (jit): already built ones always, new builds as the policy allows.
#include "flashcpp/artifacts.hpp"
#include "flashcpp/jit.hpp"
#include "runtime/runtime_internal.hpp"

namespace flashcpp {
namespace fs = std::filesystem;

namespace {
jit::BuildOptions builder_options(const artifacts::Config& cfg) {
  jit::BuildOptions b = jit::BuildOptions::from_env();
  // Sources and headers from the pinned wheels, wherever the artifacts layer finds them.
  if (!std::getenv("FLASHCPP_FLASHINFER_DIR")) {
    try {
      b.flashinfer_data_dir = artifacts::resolve_flashinfer_sources(cfg);
    } catch (const Error&) {
    }
  }
  if (!std::getenv("FLASHCPP_TVM_FFI_INCLUDE")) {
    try {
      b.tvm_ffi_include_dir = artifacts::resolve_tvm_ffi_include_dir(cfg);
    } catch (const Error&) {
    }
  }
  return b;
}
}  // namespace

std::vector<ModuleSource> default_module_sources(const RuntimeOptions& options) {
  std::vector<ModuleSource> sources;
  if (!options.use_artifacts) return sources;
  auto cfg = std::make_shared<artifacts::Config>(artifacts::Config::from_env());
  const JitPolicy policy = options.jit;
  auto built = [cfg, policy](const std::string& uri) -> std::optional<fs::path> {
    const jit::BuildOptions b = builder_options(*cfg);
    if (auto p = jit::cached_module(b, uri)) return p;
    if (policy == JitPolicy::off || !jit::can_build(b, nullptr)) return std::nullopt;
    return jit::build_module(b, uri);
  };
  auto prebuilt = [cfg, policy](const std::string& uri) -> std::optional<fs::path> {
    try {
      return artifacts::resolve_prebuilt_module(*cfg, uri);
    } catch (const Error& e) {
      // No network or no such member: fall through to the builder when it may build. A cached module that
      // differs from its record is reported, not quietly replaced by a build.
      if (policy == JitPolicy::off || e.code() == ErrorCode::untrusted) throw;
      return std::nullopt;
    }
  };
  if (policy == JitPolicy::force) {
    sources.push_back(built);
  } else {
    // A module built ahead of time (`flashcpp build`) is used before a multi-GB prebuilt wheel is fetched.
    sources.push_back([cfg](const std::string& uri) { return jit::cached_module(builder_options(*cfg), uri); });
    sources.push_back(prebuilt);
    sources.push_back(built);
  }
  return sources;
}

fs::path default_tvm_ffi_library() { return artifacts::resolve_tvm_ffi_library(artifacts::Config::from_env()); }

std::string module_help(const std::string& uri, const RuntimeOptions& options) {
  std::string why;
  const jit::BuildOptions b = builder_options(artifacts::Config::from_env());
  const bool buildable = jit::can_build(b, &why);
  std::string help = "Build it ahead of time with `flashcpp build --uri " + uri + "`";
  if (!buildable) help += " (not possible here: " + why + ")";
  if (options.jit == JitPolicy::off) help += ", or set FLASHCPP_JIT=auto to build it on first use";
  help += "; or fetch the prebuilt jit-cache with `flashcpp fetch --module " + uri +
          "` (needs network), or put <dir>/" + uri + "/" + uri + ".so under a directory listed in FLASHCPP_MODULE_PATH.";
  return help;
}

}  // namespace flashcpp
