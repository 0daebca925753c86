// Internal view of the Runtime used by the op layers.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "ffi/ffi.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/runtime.hpp"

namespace flashcpp {

/// A source of module files: returns the .so path for a URI, or nullopt to let the next source try.
using ModuleSource = std::function<std::optional<std::filesystem::path>(const std::string& uri)>;

/// The log a Runtime with `options` writes to: options.log, else the process-wide sink (set_process_log), else
/// stderr up to options.log_level. Never throws (a throwing sink is ignored).
LogFn make_log(const RuntimeOptions& options);
/// The C ABI's flashcpp_set_log_callback: a process-wide sink for every Runtime without its own `log`, the C ABI's
/// default runtime included, consulted at each line (so it may be set before or after that runtime starts). An empty
/// function removes it.
void set_process_log(LogFn fn);

/// The artifacts (prebuilt jit-cache) and jit (module builder) sources, in that order, honouring the
/// policy and reporting through `log`; defined in src/runtime/module_sources.cpp.
std::vector<ModuleSource> default_module_sources(const RuntimeOptions& options, const LogFn& log);
/// libtvm_ffi resolution when no explicit path is given (artifacts layer).
std::filesystem::path default_tvm_ffi_library();
/// How to get a module that no source could provide (message appended to the not_found error).
std::string module_help(const std::string& uri, const RuntimeOptions& options);

struct Runtime::Impl {
  RuntimeOptions options;
  LogFn log;  ///< make_log(options)
  std::vector<ModuleSource> sources;
  mutable std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<ffi::ModuleLibrary>> modules;

  /// Set on a Runtime that could not start (see failed()): every module lookup throws it.
  std::optional<Error> startup_error;

  /// The module for `uri`, loading it on first use (thread-safe). Throws not_found with a help text.
  std::shared_ptr<ffi::ModuleLibrary> module(const std::string& uri);

  /// A Runtime whose creation failed with `error` (an invalid FLASHCPP_* setting, no libtvm_ffi). It throws the
  /// error at its first module lookup, which every op makes after its own argument checks: the C ABI's implicit
  /// runtime reports a caller's bad argument before a bad environment.
  static std::shared_ptr<Runtime> failed(Error error);
};

/// Shorthand used by ops: the module for `uri` of runtime `rt`.
inline std::shared_ptr<ffi::ModuleLibrary> load_module(const Runtime& rt, const std::string& uri) {
  return rt.impl().module(uri);
}

}  // namespace flashcpp
