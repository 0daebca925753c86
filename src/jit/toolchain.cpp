// The build configuration: BuildOptions from the environment, CUDA toolchain discovery, FlashInfer's
// compiler flags, the cache key they give, and the check of the build inputs. The builder that uses
// them (locks, compiler processes, publication) is build.cpp.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <set>
#include <sstream>

#include "core/env.hpp"
#include "jit/jit.hpp"

#ifndef FLASHCPP_DEFAULT_DEPS_DIR
#define FLASHCPP_DEFAULT_DEPS_DIR ""
#endif

namespace flashcpp::jit {
namespace fs = std::filesystem;

// Bumped whenever the generator or the flag recipe changes in a way that changes the produced modules.
static constexpr std::string_view kGeneratorRevision = "1";

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ' ' || c == ',' || c == ';' || c == '\t') {
      if (!cur.empty()) out.push_back(cur), cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool is_executable(const fs::path& p) { return ::access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p); }

std::optional<fs::path> which(const std::string& name) {
  if (name.find('/') != std::string::npos) return is_executable(name) ? std::optional<fs::path>(name) : std::nullopt;
  std::stringstream ss(env("PATH"));
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    fs::path p = fs::path(dir) / name;
    if (is_executable(p)) return p;
  }
  return std::nullopt;
}

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

fs::path default_cache_dir() {
  if (auto v = flashcpp::env::directory("FLASHCPP_CACHE_DIR")) return *v;
  if (auto v = env("XDG_CACHE_HOME"); !v.empty()) return fs::path(v) / "flashcpp";
  if (auto v = env("HOME"); !v.empty()) return fs::path(v) / ".cache" / "flashcpp";
  return fs::temp_directory_path() / "flashcpp-cache";
}

fs::path resolve_flashinfer_data(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir / "data" / "csrc", ec)) return dir / "data";
  if (fs::is_directory(dir / "flashinfer" / "data" / "csrc", ec)) return dir / "flashinfer" / "data";
  return dir;
}

struct ToolchainState {
  std::optional<Toolchain> tc;
  std::string error;
};

ToolchainState detect_toolchain() {
  ToolchainState st;
  fs::path home;
  std::string source;
  if (auto v = env("CUDA_HOME"); !v.empty()) home = v, source = "CUDA_HOME";
  else if (auto v2 = env("CUDA_PATH"); !v2.empty()) home = v2, source = "CUDA_PATH";
  else if (auto n = which("nvcc")) home = n->parent_path().parent_path(), source = "nvcc on PATH";
  else home = "/usr/local/cuda", source = "the default /usr/local/cuda";
  Toolchain tc;
  tc.cuda_home = home;
  tc.nvcc = home / "bin" / "nvcc";
  if (!is_executable(tc.nvcc)) {
    st.error = "nvcc not found at " + tc.nvcc.string() + " (CUDA toolkit taken from " + source +
               "). Install the CUDA toolkit (13.0 is what flashcpp is tested with) and set CUDA_HOME to it, or put "
               "its bin/ on PATH";
    return st;
  }
  tc.cxx = env("CXX").empty() ? "c++" : env("CXX");
  if (!which(split_list(tc.cxx).empty() ? tc.cxx : split_list(tc.cxx)[0])) {
    st.error = "host compiler '" + tc.cxx + "' not found; install g++ or set CXX";
    return st;
  }
  const std::string cmd = shell_quote(tc.nvcc.string()) + " --version 2>&1";
  std::string banner;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) banner += buf;
    ::pclose(p);
  }
  std::smatch m;
  static const std::regex release_re("release ([0-9]+\\.[0-9]+),");
  if (!std::regex_search(banner, m, release_re)) {
    st.error = "could not read the CUDA version from `" + tc.nvcc.string() + " --version`: " + banner;
    return st;
  }
  tc.nvcc_version = m[1];
  tc.nvcc_version_full = banner;
  while (!tc.nvcc_version_full.empty() && std::isspace(static_cast<unsigned char>(tc.nvcc_version_full.back())))
    tc.nvcc_version_full.pop_back();
  if (auto pos = tc.nvcc_version_full.rfind('\n'); pos != std::string::npos)
    tc.nvcc_version_full = tc.nvcc_version_full.substr(pos + 1);
  st.tc = tc;
  return st;
}

bool version_at_least(const std::string& v, int major, int minor) {
  int a = 0, b = 0;
  if (std::sscanf(v.c_str(), "%d.%d", &a, &b) != 2) return false;
  return a > major || (a == major && b >= minor);
}

// "9.0a" -> "90a"; validates the FLASHINFER_CUDA_ARCH_LIST form major.minor[a|f].
std::string arch_tag(const std::string& arch) {
  static const std::regex re("^([0-9]+)\\.([0-9]+[af]?)$");
  std::smatch m;
  if (!std::regex_match(arch, m, re))
    throw Error(ErrorCode::invalid_argument, "jit: CUDA architecture '" + arch +
                                                 "' is not of the form major.minor[a|f] (e.g. 9.0a, 8.0, 12.0f); check "
                                                 "FLASHCPP_CUDA_ARCH_LIST / BuildOptions::cuda_archs");
  return std::string(m[1]) + std::string(m[2]);
}

std::vector<std::string> sorted_archs(const BuildOptions& o) {
  if (o.cuda_archs.empty())
    throw Error(ErrorCode::invalid_argument, "jit: no CUDA architecture given; set FLASHCPP_CUDA_ARCH_LIST (e.g. \"9.0a\")");
  std::set<std::string> tags;
  for (const auto& a : o.cuda_archs) tags.insert(arch_tag(a));
  bool eligible = false;
  for (const auto& a : o.cuda_archs) {
    int major = std::atoi(a.c_str());
    int minor = std::atoi(a.c_str() + a.find('.') + 1);
    if (major >= 8 || (major == 7 && minor >= 5)) eligible = true;
  }
  if (!eligible) throw Error(ErrorCode::unsupported, "jit: FlashInfer needs at least one architecture >= 7.5");
  return {tags.begin(), tags.end()};
}

}  // namespace

void check_inputs(const BuildOptions& o) {
  std::error_code ec;
  const fs::path& d = o.flashinfer_data_dir;
  if (d.empty() || !fs::is_regular_file(d / "csrc" / "norm.cu", ec) ||
      !fs::is_directory(d / "include" / "flashinfer", ec))
    throw Error(ErrorCode::not_found,
                "jit: FlashInfer 0.6.3 sources not found at '" + d.string() +
                    "' (need csrc/ and include/flashinfer/). Set FLASHCPP_FLASHINFER_DIR to the unpacked "
                    "flashinfer-python 0.6.3 wheel's flashinfer/ (or flashinfer/data/) directory; scripts/deps.sh "
                    "installs it under build/_deps/flashinfer_python");
  if (!fs::is_directory(d / "cutlass" / "include" / "cute", ec) || !fs::is_directory(d / "spdlog" / "include", ec))
    throw Error(ErrorCode::not_found, "jit: FlashInfer data dir '" + d.string() +
                                          "' lacks cutlass/include or spdlog/include (an incomplete flashinfer-python "
                                          "wheel?); set FLASHCPP_FLASHINFER_DIR to a complete one");
  const fs::path& t = o.tvm_ffi_include_dir;
  if (t.empty() || !fs::is_regular_file(t / "tvm" / "ffi" / "c_api.h", ec) ||
      !fs::is_regular_file(t / "dlpack" / "dlpack.h", ec))
    throw Error(ErrorCode::not_found,
                "jit: tvm-ffi headers not found at '" + t.string() +
                    "' (need tvm/ffi/c_api.h and dlpack/dlpack.h). Set FLASHCPP_TVM_FFI_INCLUDE to the apache-tvm-ffi "
                    "wheel's tvm_ffi/include directory; scripts/deps.sh installs it under build/_deps/apache_tvm_ffi");
}

// ---------------------------------------------------------------------------------------------

BuildOptions BuildOptions::from_env() {
  BuildOptions o;
  o.cache_dir = default_cache_dir();
  o.shared_cache = flashcpp::env::flag("FLASHCPP_CACHE_SHARED", o.shared_cache);
  if (auto v = env("FLASHCPP_CUDA_ARCH_LIST"); !v.empty()) o.cuda_archs = split_list(v);
  else if (auto v2 = env("FLASHINFER_CUDA_ARCH_LIST"); !v2.empty()) o.cuda_archs = split_list(v2);
  if (auto n = flashcpp::env::integer("FLASHCPP_JIT_JOBS")) o.jobs = static_cast<int>(*n);
  // The build tree's unpacked wheels, unless FLASHCPP_NO_BUILD_DEPS=1 (as for the artifacts layer).
  const fs::path deps = flashcpp::env::flag("FLASHCPP_NO_BUILD_DEPS") ? fs::path() : fs::path(FLASHCPP_DEFAULT_DEPS_DIR);
  if (auto v = env("FLASHCPP_FLASHINFER_DIR"); !v.empty()) o.flashinfer_data_dir = resolve_flashinfer_data(v);
  else if (!deps.empty()) o.flashinfer_data_dir = deps / "flashinfer_python" / "flashinfer" / "data";
  o.lock_timeout_s = flashcpp::env::seconds("FLASHCPP_LOCK_TIMEOUT").value_or(o.lock_timeout_s);
  if (auto v = env("FLASHCPP_TVM_FFI_INCLUDE"); !v.empty()) o.tvm_ffi_include_dir = v;
  else if (!deps.empty()) o.tvm_ffi_include_dir = deps / "apache_tvm_ffi" / "tvm_ffi" / "include";
  return o;
}

const Toolchain& toolchain() {
  static const ToolchainState state = detect_toolchain();
  if (!state.tc) throw Error(ErrorCode::unsupported, "jit: " + state.error);
  return *state.tc;
}

std::vector<std::string> common_flags(const BuildOptions& o, const Toolchain& tc) {
  // flashinfer/jit/cpp_ext.py build_common_cflags (the Python include dir is not needed).
  std::vector<std::string> f = {"-DPy_LIMITED_API=0x03090000", "-D_GLIBCXX_USE_CXX11_ABI=1"};
  auto isystem = [&](const fs::path& p) {
    f.push_back("-isystem");
    f.push_back(p.string());
  };
  if (tc.cuda_home != "/usr") isystem(tc.cuda_home / "include");
  isystem(tc.cuda_home / "include" / "cccl");
  isystem(o.tvm_ffi_include_dir);  // tvm/ffi/*.h and dlpack/dlpack.h (one directory in the wheel)
  const fs::path& d = o.flashinfer_data_dir;
  isystem(d / "include");
  isystem(d / "csrc");
  isystem(d / "cutlass" / "include");
  isystem(d / "cutlass" / "tools" / "util" / "include");
  isystem(d / "spdlog" / "include");
  return f;
}

std::vector<std::string> device_flags(const BuildOptions& o, const std::vector<std::string>& extra,
                                      const Toolchain& tc) {
  std::vector<std::string> f;
  if (auto cc = env("CC"); !cc.empty()) f.insert(f.end(), {"-ccbin", cc});
  f.push_back("--compiler-options=-fPIC");
  f.push_back("--expt-relaxed-constexpr");
  if (version_at_least(tc.nvcc_version, 12, 8)) f.push_back("-static-global-template-stub=false");
  // Global arch flags (FLASHINFER_CUDA_ARCH_LIST); a module with its own -gencode keeps only the defines.
  const bool module_has_gencode =
      std::any_of(extra.begin(), extra.end(), [](const std::string& s) { return s.rfind("-gencode=", 0) == 0; });
  if (!module_has_gencode)
    for (const auto& tag : sorted_archs(o)) f.push_back("-gencode=arch=compute_" + tag + ",code=sm_" + tag);
  f.push_back("-DFLASHINFER_ENABLE_FP8_E8M0");
  f.push_back("-DFLASHINFER_ENABLE_FP4_E2M1");
  // gen_jit_spec's device flags, then the module's.
  const bool has_std = std::any_of(extra.begin(), extra.end(), [](const std::string& s) { return s.rfind("-std=", 0) == 0; });
  if (!has_std) f.push_back("-std=c++17");
  for (const char* s : {"--threads=1", "-use_fast_math", "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16",
                        "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2", "-DNDEBUG", "-O3"})
    f.push_back(s);
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

std::vector<std::string> host_flags(const std::vector<std::string>& extra) {
  std::vector<std::string> f = {"-fPIC"};
  const bool has_std = std::any_of(extra.begin(), extra.end(), [](const std::string& s) { return s.rfind("-std=", 0) == 0; });
  if (!has_std) f.push_back("-std=c++17");
  f.push_back("-Wno-switch-bool");
  f.push_back("-O3");
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

std::string cache_key(const BuildOptions& o, const Toolchain& tc) {
  std::string k = "flashinfer=" + std::string(kFlashInferVersion) + "\ngenerator=" + std::string(kGeneratorRevision) +
                  "\nnvcc=" + tc.nvcc_version_full + "\ncxx=" + tc.cxx + "\ncc=" + env("CC") + "\narchs=";
  for (const auto& a : sorted_archs(o)) k += a + " ";
  k += "\ndevice=";
  for (const auto& f : device_flags(o, {}, tc)) k += f + " ";
  k += "\nhost=";
  for (const auto& f : host_flags({})) k += f + " ";
  return hex16(fnv1a(k));
}

bool can_build(const BuildOptions& o, std::string* why_not) {
  try {
    toolchain();
    check_inputs(o);
    sorted_archs(o);
    return true;
  } catch (const Error& e) {
    if (why_not) *why_not = e.message();
    return false;
  }
}

}  // namespace flashcpp::jit
