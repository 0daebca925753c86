// Settings::from_env (environment and pip configuration) and the pinned manifest (built-in or a user file).
#include <cstdlib>
#include <sstream>

#include "artifacts/internal.hpp"
#include "core/config_file.hpp"
#include "core/env.hpp"
#include "core/json.hpp"
#include "flashcpp/artifacts_manifest.hpp"

namespace flashcpp::artifacts {
namespace fs = std::filesystem;
using detail::getenv_str;

namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// index-url from a pip configuration file ([global], [download] or [install] section; the last one read wins
// the way pip merges sections for `pip download`).
std::optional<std::string> pip_conf_index_url(const fs::path& file) {
  // A file that is not there is skipped, as pip does; one that is there is read by the rules of every configuration
  // file (a FIFO or device is refused, not waited on).
  std::string text;
  try {
    text = read_config_file(file, "pip configuration file");
  } catch (const Error& e) {
    if (e.code() == ErrorCode::not_found) return std::nullopt;
    if (e.code() == ErrorCode::io_error) return std::nullopt;  // unreadable (permissions): skipped as before
    throw;
  }
  std::istringstream in(text);
  std::string line, section;
  std::optional<std::string> found;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const auto eq = line.find_first_of("=:");
    if (eq == std::string::npos) continue;
    std::string key = trim(line.substr(0, eq));
    for (char& c : key)
      if (c == '_') c = '-';
    if (key != "index-url") continue;
    if (section == "global" || section == "download" || section == "install") {
      std::string v = trim(line.substr(eq + 1));
      if (!v.empty()) found = v;
    }
  }
  return found;
}

std::vector<fs::path> split_paths(const std::string& s) {
  std::vector<fs::path> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ':'))
    if (!item.empty()) out.emplace_back(item);
  return out;
}

}  // namespace

Settings Settings::from_env() {
  Settings c;
  const auto home = getenv_str("HOME");
  if (auto d = env::directory("FLASHCPP_CACHE_DIR"))
    c.cache_dir = *d;
  else if (auto x = getenv_str("XDG_CACHE_HOME"))
    c.cache_dir = fs::path(*x) / "flashcpp";
  else if (home)
    c.cache_dir = fs::path(*home) / ".cache" / "flashcpp";
  else
    throw_error(ErrorCode::invalid_argument,
                "no cache directory: set FLASHCPP_CACHE_DIR (HOME and XDG_CACHE_HOME are not set)");

  if (auto v = getenv_str("FLASHCPP_JIT_CACHE")) c.jit_cache_override = *v;
  if (auto v = getenv_str("FLASHCPP_TVM_FFI")) c.tvm_ffi_override = *v;
  if (auto v = getenv_str("FLASHCPP_FLASHINFER_PYTHON")) c.flashinfer_python_override = *v;

  if (auto v = getenv_str("FLASHCPP_PYTHON_PREFIXES")) c.python_prefixes = split_paths(*v);
  if (auto v = getenv_str("VIRTUAL_ENV")) c.python_prefixes.emplace_back(*v);
  if (auto v = getenv_str("CONDA_PREFIX")) c.python_prefixes.emplace_back(*v);
  // Last resort: the build tree's unpacked pinned wheels, so programs started from a build work offline.
  if (!env::flag("FLASHCPP_NO_BUILD_DEPS") && *generated::kBuildDepsDir)
    c.python_prefixes.emplace_back(generated::kBuildDepsDir);

  c.offline = env::flag("FLASHCPP_OFFLINE", c.offline);
  c.shared_cache = env::flag("FLASHCPP_CACHE_SHARED", c.shared_cache);

  if (auto v = getenv_str("FLASHCPP_INDEX_URL")) {
    c.index_url = *v, c.index_url_source = "FLASHCPP_INDEX_URL";
  } else if (auto p = getenv_str("PIP_INDEX_URL")) {
    c.index_url = *p, c.index_url_source = "PIP_INDEX_URL";
  } else {
    // pip's order of precedence, highest first: PIP_CONFIG_FILE, site (virtualenv), user, global.
    std::vector<fs::path> files;
    if (auto f = getenv_str("PIP_CONFIG_FILE")) files.emplace_back(*f);
    if (auto v = getenv_str("VIRTUAL_ENV")) files.push_back(fs::path(*v) / "pip.conf");
    const auto xdg_config = getenv_str("XDG_CONFIG_HOME");
    if (xdg_config) files.push_back(fs::path(*xdg_config) / "pip" / "pip.conf");
    if (home) {
      if (!xdg_config) files.push_back(fs::path(*home) / ".config" / "pip" / "pip.conf");
      files.push_back(fs::path(*home) / ".pip" / "pip.conf");
    }
    const std::string xdg_dirs = getenv_str("XDG_CONFIG_DIRS").value_or("/etc/xdg");
    for (const auto& d : split_paths(xdg_dirs)) files.push_back(d / "pip" / "pip.conf");
    files.emplace_back("/etc/pip.conf");
    for (const auto& f : files)
      if (auto url = pip_conf_index_url(f)) {
        c.index_url = *url, c.index_url_source = f.string();
        break;
      }
  }

  c.connect_timeout_s = env::seconds("FLASHCPP_CONNECT_TIMEOUT").value_or(c.connect_timeout_s);
  c.stall_timeout_s = env::seconds("FLASHCPP_STALL_TIMEOUT").value_or(c.stall_timeout_s);
  c.max_retries = static_cast<int>(env::integer("FLASHCPP_RETRIES").value_or(c.max_retries));
  c.deadline_s = env::seconds("FLASHCPP_DOWNLOAD_DEADLINE").value_or(c.deadline_s);
  c.min_rate_bytes_per_s = env::bytes("FLASHCPP_MIN_RATE").value_or(c.min_rate_bytes_per_s);
  c.min_rate_window_s = env::seconds("FLASHCPP_MIN_RATE_TIME").value_or(c.min_rate_window_s);
  c.max_wheel_bytes = env::bytes("FLASHCPP_MAX_WHEEL_BYTES").value_or(c.max_wheel_bytes);
  c.min_free_bytes = env::bytes("FLASHCPP_MIN_FREE_BYTES").value_or(c.min_free_bytes);
  c.max_extract_bytes = env::bytes("FLASHCPP_MAX_EXTRACT_BYTES").value_or(c.max_extract_bytes);
  c.max_compression_ratio = env::number("FLASHCPP_MAX_COMPRESSION_RATIO").value_or(c.max_compression_ratio);
  c.lock_timeout_s = env::seconds("FLASHCPP_LOCK_TIMEOUT").value_or(c.lock_timeout_s);
  if (auto v = getenv_str("FLASHCPP_MANIFEST")) c.manifest_file = *v;
  return c;
}

Manifest Settings::manifest() const { return manifest_file.empty() ? Manifest::builtin() : Manifest::load(manifest_file); }

Manifest Manifest::builtin() {
  Manifest m;
  m.cuda_tag = generated::kCudaTag;
  m.arch = generated::kArch;
  m.jit_cache = {"flashinfer_jit_cache", generated::kJitCacheFile, generated::kJitCacheSha256, 0, generated::kJitCacheUrl,
                 "flashinfer-jit-cache"};
  m.tvm_ffi = {"apache_tvm_ffi", generated::kTvmFfiFile, generated::kTvmFfiSha256, generated::kTvmFfiSize, "",
               "apache-tvm-ffi"};
  m.flashinfer_python = {"flashinfer_python", generated::kFlashInferPythonFile, generated::kFlashInferPythonSha256,
                         generated::kFlashInferPythonSize, "", "flashinfer-python"};
  return m;
}

Manifest Manifest::load(const fs::path& file) {
  // A regular file of at most 16 MiB read within 10 s, JSON nested at most 64 deep (core/json.hpp).
  const nlohmann::json j = load_json_file(file, "FLASHCPP_MANIFEST file");
  const auto bad = [&](const std::string& what) -> void {
    throw_error(ErrorCode::invalid_argument, "manifest file '" + file.string() + "': " + what);
  };
  if (!j.is_object()) bad("the top level must be an object");
  Manifest m = builtin();
  // Every value is checked for its type here: nlohmann-json's own type_error would leave the library untyped.
  for (const auto& [key, field] : {std::pair{"cuda_tag", &m.cuda_tag}, std::pair{"arch", &m.arch}}) {
    if (!j.contains(key)) continue;
    if (!j.at(key).is_string()) bad(std::string("'") + key + "' must be a string");
    *field = j.at(key).get<std::string>();
  }
  const std::pair<const char*, WheelPin*> keys[] = {
      {"flashinfer_jit_cache", &m.jit_cache}, {"apache_tvm_ffi", &m.tvm_ffi}, {"flashinfer_python", &m.flashinfer_python}};
  for (const auto& [key, pin] : keys) {
    if (!j.contains(key)) continue;
    const auto& e = j.at(key);
    if (!e.is_object()) bad(std::string("'") + key + "' must be an object");
    try {
      WheelPin p;
      p.name = key;
      p.filename = e.at("filename").get<std::string>();
      p.sha256 = e.at("sha256").get<std::string>();
      // A negative size would otherwise wrap to 2^64 - 1 and a fraction be truncated: only a whole byte count.
      if (e.contains("size") && !e.at("size").is_number_unsigned())
        bad(std::string("'") + key + ".size' must be a non-negative whole number of bytes");
      p.size = e.value("size", std::uint64_t{0});
      p.url = e.value("url", std::string());
      p.project = e.value("project", pin->project);
      if (p.filename.empty() || p.filename.find('/') != std::string::npos || p.filename.size() < 5 ||
          p.filename.substr(p.filename.size() - 4) != ".whl")
        bad(std::string("'") + key + ".filename' must be a .whl file name without '/'");
      if (!detail::is_sha256_hex(p.sha256)) bad(std::string("'") + key + ".sha256' must be 64 lowercase hex digits");
      if (p.url.empty() && p.project.empty()) bad(std::string("'") + key + "' needs a 'url' or a 'project'");
      *pin = std::move(p);
    } catch (const nlohmann::json::exception& ex) {
      bad(std::string("'") + key + "': " + ex.what());
    }
  }
  return m;
}

}  // namespace flashcpp::artifacts
