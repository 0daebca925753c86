// flashcpp::Runtime: where FlashInfer kernel modules come from, loaded once per process.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace flashcpp {

/// How modules missing from every prebuilt source are handled (FLASHCPP_JIT).
enum class JitPolicy {
  automatic,  ///< build from the pinned FlashInfer sources when no prebuilt module exists (default)
  off,        ///< never build; a missing module is an error that says how to get it
  force,      ///< always build (ignore prebuilt modules)
};

/// How much of module acquisition is reported (FLASHCPP_LOG).
enum class LogLevel {
  off = 0,    ///< nothing
  info = 1,   ///< each download, extraction and build started and finished, each module found
  debug = 2,  ///< also download progress and every build step (each compile, the link)
};
/// One line about module acquisition, with its level.
using LogFn = std::function<void(LogLevel, const std::string&)>;

struct RuntimeOptions {
  /// libtvm_ffi.so to load; empty: FLASHCPP_TVM_FFI_LIB, else the artifacts resolution.
  std::filesystem::path tvm_ffi_library;
  /// Directories searched first for `<dir>/<uri>/<uri>.so` (FLASHCPP_MODULE_PATH, ':'-separated).
  std::vector<std::filesystem::path> module_dirs;
  /// Consult the prebuilt jit-cache artifacts and the module builder after module_dirs.
  bool use_artifacts = true;
  JitPolicy jit = JitPolicy::automatic;
  /// Receives every info and debug line of module acquisition (downloads with their progress, lock waits,
  /// extractions, builds with their steps), one line at a time, from the thread whose call triggered it (an op's
  /// first call with a module, or prepare()) or the builder's threads. It should not call back into the Runtime;
  /// what it throws is ignored. Empty: the lines up to `log_level`
  /// go to stderr, prefixed "flashcpp: ".
  LogFn log;
  /// What reaches stderr when `log` is empty (FLASHCPP_LOG: off, info or debug; default off).
  LogLevel log_level = LogLevel::off;
  /// Reads FLASHCPP_TVM_FFI_LIB, FLASHCPP_MODULE_PATH, FLASHCPP_JIT (auto, off or force) and FLASHCPP_LOG (off, info
  /// or debug): another value is an invalid_argument error naming the variable.
  static RuntimeOptions from_env();
};

/// Owns the loaded TVM-FFI runtime and the FlashInfer modules loaded so far (by URI). Thread-safe.
/// Cheap to create when warm; modules load lazily on first use and stay loaded for the Runtime's life.
class Runtime {
 public:
  static std::shared_ptr<Runtime> create(RuntimeOptions options = RuntimeOptions::from_env());
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const RuntimeOptions& options() const;
  /// Path of the loaded libtvm_ffi and its version ("0.1.9").
  std::filesystem::path tvm_ffi_library() const;
  std::string tvm_ffi_version() const;
  /// Path a module URI resolves to, without loading it; std::nullopt when no source can provide it. Not a pure
  /// lookup: like a first op call it may extract the module from the cached jit-cache wheel, download that wheel
  /// (unless offline) or build the module (JitPolicy automatic or force), which can take minutes; what it does is
  /// reported through the log. prepare() does this up front for a list of modules.
  std::optional<std::filesystem::path> locate_module(const std::string& uri) const;
  /// Fetches or builds and then loads every module in `uris` (FlashInfer module names, as `flashcpp build --uri`
  /// takes them) now, in order, reporting each step through the log, so later op calls find them loaded. Fails
  /// fast: the names are checked first ([A-Za-z0-9_.-], no "..": invalid_argument naming the entry), then the
  /// first module that cannot be had stops the call with its not_found error (what to do included); the ones
  /// before it stay loaded.
  void prepare(const std::vector<std::string>& uris) const;
  /// URIs of the modules loaded so far.
  std::vector<std::string> loaded_modules() const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashcpp
