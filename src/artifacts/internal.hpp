// Internal helpers of the artifacts layer: hashing, file locks, atomic files, environment.
#pragma once
#include <openssl/evp.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "flashcpp/artifacts.hpp"
#include "core/file_lock.hpp"
#include "flashcpp/error.hpp"

namespace flashcpp::artifacts::detail {

/// Streaming SHA-256 (OpenSSL EVP).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void reset();
  void update(const void* data, size_t n);
  std::string hex_digest();  ///< finalises; call reset() to reuse

 private:
  EVP_MD_CTX* ctx_;
};

/// Adds the first `bytes` bytes of `file` to `h` (resume of a partial download).
void hash_prefix(Sha256& h, const std::filesystem::path& file, std::uint64_t bytes);

/// How the cache waits for a lock another process holds: cfg.lock_timeout_s (FLASHCPP_LOCK_TIMEOUT), the
/// holder reported through cfg.notice (else stderr) after cfg.lock_report_after_s.
LockWait lock_wait(const Settings& cfg);

/// Writes `content` to `file` via a temporary in the same directory, fsync, rename.
void write_file_atomic(const std::filesystem::path& file, std::string_view content);
/// fsync of a file or directory path (best effort for directories).
void fsync_path(const std::filesystem::path& p, bool directory);
/// A name unique to this process and call, for temporaries: ".tmp-<pid>-<n>".
std::string temp_suffix();

std::optional<std::string> getenv_str(const char* name);  ///< set and non-empty
std::string redact_url(std::string_view url);              ///< hides user:password@
bool is_sha256_hex(std::string_view s);

/// Creates `dir` with mode 0755 (umask ignored); when it lies in cfg.cache_dir, the cache root is created first,
/// 0700 (0755 with cfg.shared_cache).
void make_cache_dir(const Settings& cfg, const std::filesystem::path& dir);

/// Verified-stamp of a cached wheel: matches when size, mtime, device, inode and ctime are unchanged since it
/// was hashed (size and mtime alone can be put back after an edit; a ctime cannot).
bool stamp_matches(const std::filesystem::path& wheel, const std::filesystem::path& stamp, std::string_view sha256,
                   std::uint64_t expected_size);
void write_stamp(const std::filesystem::path& wheel, const std::filesystem::path& stamp, std::string_view sha256);

/// What a user without network can do instead of downloading `pin` (the variables and commands that exist).
std::string ways_out(const WheelPin& pin);

[[noreturn]] void throw_io(std::string what, const std::filesystem::path& p, int err);

/// The URL of pin.filename on a PEP 503 project page `html` fetched from `page` (`base_url`: where redirects
/// ended, which relative links resolve against); nullopt when the page does not list it. Throws
/// integrity_error when the page lists it with a sha256 fragment other than the pinned one.
std::optional<std::string> find_wheel_in_index(const std::string& html, const std::string& page,
                                               const std::string& base_url, const WheelPin& pin);

/// HTTP GET of a small document into memory (index pages), with the same retries/timeouts as downloads.
std::string http_get_text(const Settings& cfg, const std::string& url, std::string* effective_url);

}  // namespace flashcpp::artifacts::detail
