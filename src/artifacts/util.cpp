// Hashing, file locks, atomic files and environment helpers of the artifacts layer.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "artifacts/internal.hpp"
#include "ffi/trust.hpp"

namespace flashcpp::artifacts::detail {
namespace fs = std::filesystem;

void throw_io(std::string what, const fs::path& p, int err) {
  throw_error(ErrorCode::io_error, what + " '" + p.string() + "': " + std::strerror(err));
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_) throw_error(ErrorCode::internal, "OpenSSL: EVP_MD_CTX_new failed");
  reset();
}
Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }
void Sha256::reset() {
  if (EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1)
    throw_error(ErrorCode::internal, "OpenSSL: EVP_DigestInit_ex(sha256) failed");
}
void Sha256::update(const void* data, size_t n) {
  if (n && EVP_DigestUpdate(ctx_, data, n) != 1) throw_error(ErrorCode::internal, "OpenSSL: EVP_DigestUpdate failed");
}
std::string Sha256::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_, md, &len) != 1) throw_error(ErrorCode::internal, "OpenSSL: EVP_DigestFinal_ex failed");
  static const char* hexd = "0123456789abcdef";
  std::string out(len * 2, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = hexd[md[i] >> 4];
    out[2 * i + 1] = hexd[md[i] & 15];
  }
  return out;
}

namespace {
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

void hash_prefix(Sha256& h, const fs::path& file, std::uint64_t bytes) {
  Fd f{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw_io("cannot open", file, errno);
  std::vector<char> buf(1 << 20);
  while (bytes > 0) {
    const ssize_t n = ::read(f.fd, buf.data(), std::min<std::uint64_t>(bytes, buf.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io("cannot read", file, errno);
    if (n == 0) throw_error(ErrorCode::io_error, "'" + file.string() + "' is shorter than expected");
    h.update(buf.data(), static_cast<size_t>(n));
    bytes -= static_cast<std::uint64_t>(n);
  }
}

// One file hash for the whole library: the one the module records use (ffi/trust.hpp).
std::string sha256_impl(const fs::path& file) { return ffi::file_sha256(file); }

LockWait lock_wait(const Settings& cfg) {
  LockWait w;
  w.timeout_s = cfg.lock_timeout_s;
  w.report_after_s = cfg.lock_report_after_s;
  w.report = cfg.notice;
  w.timeout_setting = "FLASHCPP_LOCK_TIMEOUT";
  return w;
}

std::string temp_suffix() {
  static std::atomic<unsigned> counter{0};
  return ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

void fsync_path(const fs::path& p, bool directory) {
  Fd f{::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC)};
  if (f.fd < 0) {
    if (directory) return;
    throw_io("cannot open", p, errno);
  }
  if (::fsync(f.fd) != 0 && !directory) throw_io("cannot fsync", p, errno);
}

void write_file_atomic(const fs::path& file, std::string_view content) {
  const fs::path tmp = file.string() + temp_suffix();
  {
    Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, ffi::kFileMode)};
    if (f.fd < 0) throw_io("cannot create", tmp, errno);
    try {
      ffi::set_mode(f.fd, ffi::kFileMode, tmp);  // 0644 whatever the umask
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
    size_t off = 0;
    while (off < content.size()) {
      const ssize_t n = ::write(f.fd, content.data() + off, content.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw_io("cannot write", tmp, err);
      }
      off += static_cast<size_t>(n);
    }
    if (::fsync(f.fd) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      throw_io("cannot fsync", tmp, err);
    }
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_io("cannot rename onto", file, err);
  }
}

std::optional<std::string> getenv_str(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

std::string redact_url(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const size_t host_start = scheme + 3;
  const size_t path_start = url.find('/', host_start);
  const size_t at = url.rfind('@', path_start == std::string_view::npos ? url.size() : path_start);
  if (at == std::string_view::npos || at < host_start) return std::string(url);
  return std::string(url.substr(0, host_start)) + "***@" + std::string(url.substr(at + 1));
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

void make_cache_dir(const Settings& cfg, const fs::path& dir) {
  const fs::path rel = dir.lexically_relative(cfg.cache_dir);
  if (!cfg.cache_dir.empty() && !rel.empty() && *rel.begin() != "..")
    ffi::create_directories(cfg.cache_dir, cfg.shared_cache ? ffi::kSharedDirMode : ffi::kPrivateDirMode);
  ffi::create_directories(dir, ffi::kSharedDirMode);
}

namespace {
bool stat_file(const fs::path& p, std::uint64_t& size, std::string& identity) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  size = static_cast<std::uint64_t>(st.st_size);
  identity = ffi::stat_identity(st);
  return true;
}
constexpr std::string_view kStampMagic = "flashcpp-verified-v2";
}  // namespace

bool stamp_matches(const fs::path& wheel, const fs::path& stamp, std::string_view sha256, std::uint64_t expected_size) {
  std::uint64_t size = 0;
  std::string identity;
  if (!stat_file(wheel, size, identity)) return false;
  if (expected_size && size != expected_size) return false;
  char buf[512];
  Fd f{::open(stamp.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return false;
  const ssize_t n = ::read(f.fd, buf, sizeof(buf) - 1);
  if (n <= 0) return false;
  buf[n] = 0;
  std::istringstream in(buf);
  std::string magic, hash, s_identity;
  if (!(in >> magic >> hash)) return false;
  std::getline(in >> std::ws, s_identity);
  return magic == kStampMagic && hash == sha256 && s_identity == identity;
}

void write_stamp(const fs::path& wheel, const fs::path& stamp, std::string_view sha256) {
  std::uint64_t size = 0;
  std::string identity;
  if (!stat_file(wheel, size, identity)) throw_io("cannot stat", wheel, errno ? errno : ENOENT);
  write_file_atomic(stamp, std::string(kStampMagic) + " " + std::string(sha256) + " " + identity + "\n");
}

}  // namespace flashcpp::artifacts::detail

namespace flashcpp::artifacts {
namespace detail {
std::string sha256_impl(const std::filesystem::path& file);
}
std::string sha256_file(const std::filesystem::path& file) { return detail::sha256_impl(file); }
}  // namespace flashcpp::artifacts
