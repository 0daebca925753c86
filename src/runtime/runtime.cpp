#include <cstdio>
#include <cstdlib>
#include <mutex>
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
  if (const auto l = env::choice("FLASHCPP_LOG"))
    o.log_level = *l == "debug" ? LogLevel::debug : *l == "info" ? LogLevel::info : LogLevel::off;
  return o;
}

namespace {
std::mutex g_process_log_mu;
std::shared_ptr<const LogFn> g_process_log;  // replaced whole, so a line in flight keeps the sink it started with

std::shared_ptr<const LogFn> process_log() {
  std::lock_guard lock(g_process_log_mu);
  return g_process_log;
}
}  // namespace

void set_process_log(LogFn fn) {
  auto next = fn ? std::make_shared<const LogFn>(std::move(fn)) : nullptr;
  std::lock_guard lock(g_process_log_mu);
  g_process_log = std::move(next);
}

LogFn make_log(const RuntimeOptions& options) {
  const LogFn own = options.log;
  const LogLevel level = options.log_level;
  return [own, level](LogLevel l, const std::string& line) noexcept {
    try {
      if (own) return own(l, line);
      if (auto sink = process_log()) return (*sink)(l, line);
      if (l != LogLevel::off && l <= level) std::fprintf(stderr, "flashcpp: %s\n", line.c_str());
    } catch (...) {  // a log line never turns into a failed op
    }
  };
}

std::shared_ptr<ffi::ModuleLibrary> Runtime::Impl::module(const std::string& uri) {
  if (startup_error) throw *startup_error;
  std::lock_guard lock(mu);
  if (auto it = modules.find(uri); it != modules.end()) return it->second;
  for (const auto& source : sources) {
    if (auto path = source(uri)) {
      log(LogLevel::debug, "module " + uri + ": loading " + path->string());
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
  impl->log = [](LogLevel, const std::string&) {};
  return std::shared_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

std::shared_ptr<Runtime> Runtime::create(RuntimeOptions options) {
  fs::path lib = options.tvm_ffi_library.empty() ? default_tvm_ffi_library() : options.tvm_ffi_library;
  ffi::Library::load(lib);
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->log = make_log(impl->options);
  // Explicit module directories first, then the artifacts and the builder.
  if (impl->options.jit != JitPolicy::force) {
    for (const auto& dir : impl->options.module_dirs) {
      impl->sources.push_back([dir, log = impl->log](const std::string& uri) -> std::optional<fs::path> {
        fs::path p = dir / uri / (uri + ".so");
        std::error_code ec;
        if (fs::is_regular_file(p, ec)) {
          log(LogLevel::info, "module " + uri + ": " + p.string() + " (module directory)");
          return p;
        }
        return std::nullopt;
      });
    }
  }
  for (auto& s : default_module_sources(impl->options, impl->log)) impl->sources.push_back(std::move(s));
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

void Runtime::prepare(const std::vector<std::string>& uris) const {
  if (impl_->startup_error) throw *impl_->startup_error;
  for (size_t i = 0; i < uris.size(); ++i) {  // every name checked before anything is fetched or built
    const std::string& u = uris[i];
    bool ok = !u.empty() && u.size() <= 255 && u.find("..") == std::string::npos;
    for (char c : u)
      ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.');
    if (!ok)
      throw Error(ErrorCode::invalid_argument, "Runtime::prepare: argument 'uris[" + std::to_string(i) +
                                                   "]' must be a module name of [A-Za-z0-9_.-] without '..'; got '" + u + "'");
  }
  for (size_t i = 0; i < uris.size(); ++i) {
    impl_->log(LogLevel::info, "prepare: module " + std::to_string(i + 1) + " of " + std::to_string(uris.size()) + ": " + uris[i]);
    (void)impl_->module(uris[i]);
  }
  impl_->log(LogLevel::info, "prepare: " + std::to_string(uris.size()) + " module(s) ready");
}

std::vector<std::string> Runtime::loaded_modules() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& [uri, lib] : impl_->modules) out.push_back(uri);
  return out;
}

}  // namespace flashcpp
