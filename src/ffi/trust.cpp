// The path rule checked before every dlopen, exact modes for created files and directories, and the
// SHA-256 records of extracted and built modules.
#include "ffi/trust.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "flashcpp/error.hpp"

namespace flashcpp::ffi {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void throw_io(const std::string& what, const fs::path& p, int err) {
  throw Error(ErrorCode::io_error, what + " '" + p.string() + "': " + std::strerror(err));
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// Why `p` breaks the rule, or empty when it keeps it.
std::string rule_breach(const fs::path& p, const struct stat& st, bool directory, uid_t me) {
  const std::string kind = directory ? "directory '" : "file '";
  if (st.st_uid != me && st.st_uid != 0)
    return kind + p.string() + "' is owned by uid " + std::to_string(st.st_uid) + ", not by you (uid " +
           std::to_string(me) + ") or root";
  const bool group = (st.st_mode & S_IWGRP) != 0, others = (st.st_mode & S_IWOTH) != 0;
  const bool root_sticky = directory && (st.st_mode & S_ISVTX) != 0 && st.st_uid == 0;
  if ((group || others) && !root_sticky)
    return kind + p.string() + "' is writable by " + (group && others ? "group and others" : group ? "group" : "others") +
           " (mode " + octal_mode(st.st_mode) + ")";
  return {};
}

// The directories that hold `p`, from its parent up to "/".
std::vector<fs::path> ancestors(const fs::path& p) {
  std::vector<fs::path> out;
  for (fs::path d = p.parent_path(); !d.empty(); d = d.parent_path()) {
    out.push_back(d);
    if (d == d.parent_path()) break;
  }
  return out;
}

constexpr std::string_view kRecordMagic = "flashcpp-module-v1";

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

std::string stat_identity(const struct stat& st) {
  std::ostringstream os;
  os << "size=" << st.st_size << " mtime=" << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec << " dev=" << st.st_dev
     << " ino=" << st.st_ino << " ctime=" << st.st_ctim.tv_sec << "." << st.st_ctim.tv_nsec;
  return os.str();
}

fs::path require_trusted_file(const fs::path& file, std::string_view what) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw Error(ErrorCode::not_found, std::string(what) + " '" + file.string() + "' not found (or not a regular file)");
  const uid_t me = ::geteuid();
  auto refuse = [&](const std::string& why) {
    throw Error(ErrorCode::untrusted,
                "refusing to load " + std::string(what) + " '" + file.string() + "': " + why +
                    ". The rule: a library and every directory on its path must be owned by you or root and not be "
                    "writable by group or others (a root-owned sticky directory such as /tmp is accepted), so that no "
                    "other user can replace it. Fix the owner or mode (chmod go-w), or use a directory only you can "
                    "write");
  };
  if (auto why = rule_breach(file, st, false, me); !why.empty()) refuse(why);

  std::unique_ptr<char, decltype(&std::free)> real(::realpath(file.c_str(), nullptr), &std::free);
  if (!real) throw_io("cannot resolve", file, errno);
  const fs::path resolved(real.get());
  std::error_code ec;
  // As given (the directories holding its symbolic links) and as resolved (where the bytes are).
  std::vector<fs::path> dirs = ancestors(fs::absolute(file, ec));
  for (fs::path& d : ancestors(resolved)) dirs.push_back(std::move(d));
  for (const fs::path& d : dirs) {
    struct stat ds {};
    if (::stat(d.c_str(), &ds) != 0) refuse("directory '" + d.string() + "' cannot be checked: " + std::strerror(errno));
    if (auto why = rule_breach(d, ds, true, me); !why.empty()) refuse(why);
  }
  return resolved;
}

void create_directories(const fs::path& dir, mode_t mode) {
  std::vector<fs::path> missing;
  for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) throw Error(ErrorCode::io_error, "cannot create '" + dir.string() + "': '" +
                                                                     p.string() + "' is not a directory");
      break;
    }
    if (errno != ENOENT) throw_io("cannot create", p, errno);
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), mode) == 0) {
      if (::chmod(it->c_str(), mode) != 0) throw_io("cannot set the mode of", *it, errno);  // mkdir applies the umask
    } else if (errno != EEXIST) {
      throw_io("cannot create", *it, errno);
    }
  }
}

void set_mode(int fd, mode_t mode, const fs::path& path) {
  if (::fchmod(fd, mode) != 0) throw_io("cannot set the mode of", path, errno);
}

std::string file_sha256(const fs::path& file) {
  Fd f{::open(file.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw_io("cannot open", file, errno);
  ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw Error(ErrorCode::internal, "OpenSSL: cannot start a SHA-256");
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(f.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io("cannot read", file, errno);
    if (n == 0) break;
    if (EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(n)) != 1)
      throw Error(ErrorCode::internal, "OpenSSL: EVP_DigestUpdate failed");
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md, &len) != 1) throw Error(ErrorCode::internal, "OpenSSL: EVP_DigestFinal_ex failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(len * 2, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

fs::path module_record_path(const fs::path& file) { return fs::path(file.string() + ".sha256"); }

void write_module_record(const fs::path& file, std::string_view sha256) {
  if (!is_sha256_hex(sha256))
    throw Error(ErrorCode::internal, "write_module_record: '" + std::string(sha256) + "' is not a SHA-256");
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) throw_io("cannot stat", file, errno);
  const std::string content = std::string(kRecordMagic) + " " + std::string(sha256) + " " + stat_identity(st) + "\n";
  const fs::path record = module_record_path(file);
  static std::atomic<unsigned> counter{0};
  const fs::path tmp = record.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  {
    Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, kFileMode)};
    if (f.fd < 0) throw_io("cannot create", tmp, errno);
    try {
      set_mode(f.fd, kFileMode, tmp);
      size_t off = 0;
      while (off < content.size()) {
        const ssize_t n = ::write(f.fd, content.data() + off, content.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_io("cannot write", tmp, errno);
        off += static_cast<size_t>(n);
      }
      if (::fsync(f.fd) != 0) throw_io("cannot fsync", tmp, errno);
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  if (::rename(tmp.c_str(), record.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_io("cannot rename onto", record, err);
  }
}

RecordCheck check_module_record(const fs::path& file) {
  const fs::path record = module_record_path(file);
  std::string text;
  {
    Fd f{::open(record.c_str(), O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0) {
      if (errno == ENOENT) return RecordCheck::missing;
      throw_io("cannot read the module record", record, errno);
    }
    char buf[512];
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) throw_io("cannot read the module record", record, errno);
    text.assign(buf, static_cast<size_t>(n));
  }
  std::istringstream in(text);
  std::string magic, recorded_sha, recorded_identity;
  in >> magic >> recorded_sha;
  std::getline(in >> std::ws, recorded_identity);
  if (magic != kRecordMagic || !is_sha256_hex(recorded_sha) || recorded_identity.empty()) return RecordCheck::missing;

  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) throw_io("cannot stat", file, errno);
  if (stat_identity(st) == recorded_identity) return RecordCheck::matches;
  // Touched, copied back or replaced since it was recorded: only its bytes can tell.
  const std::string actual = file_sha256(file);
  if (actual != recorded_sha)
    throw Error(ErrorCode::untrusted,
                "refusing to load module '" + file.string() + "': its SHA-256 is " + actual + ", not the " +
                    recorded_sha + " recorded when flashcpp extracted or built it (" + record.string() +
                    "). The rule: a cached module is loaded only with the bytes recorded for it. Delete the module "
                    "and its record to extract or build it again");
  try {
    write_module_record(file, recorded_sha);  // same bytes: the next start needs no hash
  } catch (const Error&) {
    // A read-only (system-wide) cache: the record stays as it is and the file is hashed again next time.
  }
  return RecordCheck::matches;
}

}  // namespace flashcpp::ffi
