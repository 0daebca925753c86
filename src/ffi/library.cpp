// Loading libtvm_ffi (once per process) and FlashInfer module shared objects.
#include <dlfcn.h>
#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>

#include "ffi/ffi.hpp"
#include "ffi/trust.hpp"

namespace flashcpp::ffi {
namespace fs = std::filesystem;

namespace {
std::mutex g_mu;
// Written once under g_mu, read lock-free on every call (api() is on the hot path). Never freed:
// libtvm_ffi stays loaded for the process's life.
std::atomic<Library*> g_library{nullptr};

bool same_file(const fs::path& a, const fs::path& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return a == b;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

template <class Fn>
void resolve(void* handle, const char* name, Fn& out, bool required, const fs::path& path) {
  out = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (!out && required)
    throw Error(ErrorCode::not_found, path.string() + " does not export " + name + "; is it a TVM-FFI 0.1.x libtvm_ffi?");
}

// The file that defines `symbol` in the process, if any (a libtvm_ffi linked in or loaded by someone else).
std::optional<fs::path> loaded_provider(const char* symbol) {
  void* sym = ::dlsym(RTLD_DEFAULT, symbol);
  if (!sym) return std::nullopt;
  Dl_info info{};
  if (::dladdr(sym, &info) == 0 || !info.dli_fname) return std::nullopt;
  return fs::path(info.dli_fname);
}
// dlopen of the checked file `trusted` (the caller's `shown` path in messages); not_found with dlerror's reason.
void* open_or_throw(const fs::path& trusted, int flags, const char* what, const fs::path& shown) {
  void* handle = ::dlopen(trusted.c_str(), flags);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    throw Error(ErrorCode::not_found,
                std::string("cannot load ") + what + " '" + shown.string() + "': " + (err ? err : "unknown error"));
  }
  return handle;
}
}  // namespace

struct LibraryLoader {
  static Library* load(const fs::path& path, const fs::path& trusted) {
    std::error_code ec;
    // Refuse a second, different runtime even when it was loaded behind our back.
    if (auto existing = loaded_provider("TVMFFIGetVersion"); existing && !same_file(*existing, path))
      throw Error(ErrorCode::invalid_argument, "a different libtvm_ffi is already loaded in this process ('" +
                                                   existing->string() + "'); refusing to load '" + path.string() +
                                                   "' (two TVM-FFI runtimes in one process corrupt each other)");
    void* handle = open_or_throw(trusted, RTLD_NOW | RTLD_GLOBAL, "libtvm_ffi", path);
    auto lib = std::unique_ptr<Library>(new Library());
    lib->handle_ = handle;
    lib->path_ = fs::absolute(path, ec);
    abi::Api& a = lib->api_;
#define FLASHCPP_RESOLVE_REQUIRED(NAME, TYPE) resolve(handle, "TVMFFI" #NAME, a.NAME, true, path);
    FLASHCPP_TVMFFI_REQUIRED_ENTRY_POINTS(FLASHCPP_RESOLVE_REQUIRED)
#undef FLASHCPP_RESOLVE_REQUIRED
    resolve(handle, "TVMFFIStringFromByteArray", a.StringFromByteArray, false, path);
    a.GetVersion(&lib->version_);
    if (lib->version_.major != 0 || lib->version_.minor != 1) {
      const std::string v = lib->version_string();
      ::dlclose(handle);
      throw Error(ErrorCode::unsupported, "libtvm_ffi '" + path.string() + "' is version " + v +
                                              "; flashcpp and FlashInfer 0.6.3 need a 0.1.x release");
    }
    return lib.release();
  }
};

const Library& Library::load(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw Error(ErrorCode::not_found, "libtvm_ffi not found at '" + path.string() + "'");
  // Before anything is loaded: a library another user could have replaced is never opened.
  const fs::path trusted = require_trusted_file(path, "libtvm_ffi");
  std::lock_guard lock(g_mu);
  if (Library* lib = g_library.load(std::memory_order_acquire)) {
    if (!same_file(lib->path_, path))
      throw Error(ErrorCode::invalid_argument, "libtvm_ffi '" + lib->path_.string() +
                                                   "' is already loaded; refusing a second, different one ('" +
                                                   path.string() + "')");
    return *lib;
  }
  Library* lib = LibraryLoader::load(path, trusted);
  g_library.store(lib, std::memory_order_release);
  return *lib;
}

const Library& Library::instance() {
  if (const Library* l = loaded()) return *l;
  throw Error(ErrorCode::not_found, "libtvm_ffi is not loaded; create a flashcpp::Runtime first");
}

const Library* Library::loaded() noexcept { return g_library.load(std::memory_order_acquire); }

std::string Library::version_string() const {
  return std::to_string(version_.major) + "." + std::to_string(version_.minor) + "." + std::to_string(version_.patch);
}

std::shared_ptr<ModuleLibrary> ModuleLibrary::open(const fs::path& path) {
  (void)Library::instance();  // the module's TVMFFI* symbols resolve against the global libtvm_ffi
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error(ErrorCode::not_found, "module file '" + path.string() + "' not found");
  const fs::path trusted = require_trusted_file(path, "module");
  void* handle = open_or_throw(trusted, RTLD_LAZY | RTLD_LOCAL, "module", path);
  auto m = std::shared_ptr<ModuleLibrary>(new ModuleLibrary());
  m->handle_ = handle;
  m->path_ = path;
  return m;
}

ModuleLibrary::~ModuleLibrary() {
  if (handle_) ::dlclose(handle_);
}

abi::SafeCall ModuleLibrary::find_function(std::string_view name) const noexcept {
  std::string sym = "__tvm_ffi_";
  sym.append(name);
  return reinterpret_cast<abi::SafeCall>(::dlsym(handle_, sym.c_str()));
}

abi::SafeCall ModuleLibrary::function(std::string_view name) const {
  if (auto f = find_function(name)) return f;
  throw Error(ErrorCode::not_found,
              "module '" + path_.string() + "' does not export __tvm_ffi_" + std::string(name));
}

void* ModuleLibrary::find_symbol(const std::string& name) const noexcept { return ::dlsym(handle_, name.c_str()); }

}  // namespace flashcpp::ffi
