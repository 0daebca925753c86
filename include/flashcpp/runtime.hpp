// flashcpp::Runtime: where FlashInfer kernel modules come from, loaded once per process.
#pragma once
#include <filesystem>
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

struct RuntimeOptions {
  /// libtvm_ffi.so to load; empty: FLASHCPP_TVM_FFI_LIB, else the artifacts resolution.
  std::filesystem::path tvm_ffi_library;
  /// Directories searched first for `<dir>/<uri>/<uri>.so` (FLASHCPP_MODULE_PATH, ':'-separated).
  std::vector<std::filesystem::path> module_dirs;
  /// Consult the prebuilt jit-cache artifacts and the module builder after module_dirs.
  bool use_artifacts = true;
  JitPolicy jit = JitPolicy::automatic;
  /// Reads FLASHCPP_TVM_FFI_LIB, FLASHCPP_MODULE_PATH, FLASHCPP_JIT (auto, off or force: anything else is an
  /// invalid_argument error naming the variable).
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
  /// Path a module URI resolves to (loads nothing); std::nullopt when it cannot be had.
  std::optional<std::filesystem::path> locate_module(const std::string& uri) const;
  /// URIs of the modules loaded so far.
  std::vector<std::string> loaded_modules() const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashcpp
