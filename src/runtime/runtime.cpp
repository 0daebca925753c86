#include <cstdlib>
#include <sstream>

#include "core/env.hpp"
#include "runtime/runtime_internal.hpp"

namespace flashcpp {
namespace fs = std::filesystem;

static std::vector<fs::path> split_path_list(const char* value) {
  std::vector<fs::path> out;
  if (!value) return out;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ':'))
    if (!item.empty()) out.emplace_back(item);
  return out;
}

RuntimeOptions RuntimeOptions::from_env() {
  RuntimeOptions o;
  if (const char* p = std::getenv("FLASHCPP_TVM_FFI_LIB"); p && *p) o.tvm_ffi_library = p;
  o.module_dirs = split_path_list(std::getenv("FLASHCPP_MODULE_PATH"));
  if (const auto j = env::choice("FLASHCPP_JIT"))
    o.jit = *j == "off" ? JitPolicy::off : *j == "force" ? JitPolicy::force : JitPolicy::automatic;
  return o;
}

std::shared_ptr<ffi::ModuleLibrary> Runtime::Impl::module(const std::string& uri) {
  if (startup_error) throw *startup_error;
  std::lock_guard lock(mu);
  if (auto it = modules.find(uri); it != modules.end()) return it->second;
  for (const auto& source : sources) {
    if (auto path = source(uri)) {
      auto lib = ffi::ModuleLibrary::open(*path);
      modules.emplace(uri, lib);
      return lib;
    }
  }
  throw Error(ErrorCode::not_found, "FlashInfer module '" + uri + "' is not available. " + module_help(uri, options));
}

std::shared_ptr<Runtime> Runtime::Impl::failed(Error error) {
  auto impl = std::make_unique<Impl>();
  impl->startup_error = std::move(error);
  return std::shared_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

std::shared_ptr<Runtime> Runtime::create(RuntimeOptions options) {
  fs::path lib = options.tvm_ffi_library.empty() ? default_tvm_ffi_library() : options.tvm_ffi_library;
  ffi::Library::load(lib);
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  // Explicit module directories first, then the artifacts and the builder.
  if (impl->options.jit != JitPolicy::force) {
    for (const auto& dir : impl->options.module_dirs) {
      impl->sources.push_back([dir](const std::string& uri) -> std::optional<fs::path> {
        fs::path p = dir / uri / (uri + ".so");
        std::error_code ec;
        if (fs::is_regular_file(p, ec)) return p;
        return std::nullopt;
      });
    }
  }
  for (auto& s : default_module_sources(impl->options)) impl->sources.push_back(std::move(s));
  return std::shared_ptr<Runtime>(new Runtime(std::move(impl)));
}

const RuntimeOptions& Runtime::options() const { return impl_->options; }
fs::path Runtime::tvm_ffi_library() const { return ffi::Library::instance().path(); }
std::string Runtime::tvm_ffi_version() const { return ffi::Library::instance().version_string(); }

std::optional<fs::path> Runtime::locate_module(const std::string& uri) const {
  for (const auto& source : impl_->sources)
    if (auto p = source(uri)) return p;
  return std::nullopt;
}

std::vector<std::string> Runtime::loaded_modules() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& [uri, lib] : impl_->modules) out.push_back(uri);
  return out;
}

}  // namespace flashcpp
