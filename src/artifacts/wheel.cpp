// Path-safe extraction of single wheel members (or one directory of them) with libzip, bounded in total bytes
// and in compression ratio per member, published atomically under a cross-process lock.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "artifacts/internal.hpp"
#include "artifacts/wheel.hpp"
#include "ffi/trust.hpp"

namespace flashcpp::artifacts {
namespace fs = std::filesystem;
using namespace detail;

namespace {

// Members up to this size skip the compression-ratio check.
constexpr std::uint64_t kRatioExemptBytes = std::uint64_t{1} << 20;

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", r);
  return buf;
}

struct Zip {
  zip_t* z = nullptr;
  ~Zip() {
    if (z) zip_discard(z);
  }
};
struct ZipFile {
  zip_file_t* f = nullptr;
  ~ZipFile() {
    if (f) zip_fclose(f);
  }
};

// Why a member name is unsafe to extract, or empty when it is safe.
std::string unsafe_name(std::string_view name) {
  if (name.empty()) return "empty name";
  if (name.front() == '/') return "absolute path";
  if (name.find('\\') != std::string_view::npos) return "backslash in path";
  if (name.size() >= 2 && name[1] == ':') return "drive-letter path";
  if (name.find('\0') != std::string_view::npos) return "NUL in path";
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    if (name.substr(start, end - start) == "..") return "'..' component";
    start = end + 1;
  }
  return {};
}

struct Member {
  zip_uint64_t index;
  std::string name;
  zip_uint64_t size;
  bool executable;
};

// Writes member `m` to `out` with mode 0644 (0755 when executable) whatever the umask; returns its SHA-256.
std::string extract_one(zip_t* z, const Member& m, const fs::path& out, const fs::path& wheel, std::uint64_t max_bytes) {
  ZipFile zf{zip_fopen_index(z, m.index, 0)};
  if (!zf.f)
    throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "': cannot open member '" + m.name +
                                                "': " + zip_strerror(z));
  const mode_t mode = m.executable ? ffi::kExecutableMode : ffi::kFileMode;
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) throw_io("cannot create", out, errno);
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_guard{fd};
  ffi::set_mode(fd, mode, out);
  Sha256 hash;
  std::vector<char> buf(1 << 20);
  std::uint64_t total = 0;
  for (;;) {
    const zip_int64_t n = zip_fread(zf.f, buf.data(), buf.size());
    if (n < 0)  // includes a CRC mismatch at the end of the member
      throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "': reading member '" + m.name +
                                                  "' failed: " + zip_file_strerror(zf.f));
    if (n == 0) break;
    total += static_cast<std::uint64_t>(n);
    if (total > m.size || total > max_bytes)
      throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "': member '" + m.name +
                                                  "' is larger than it declares; refusing it");
    hash.update(buf.data(), static_cast<size_t>(n));
    size_t off = 0;
    while (off < static_cast<size_t>(n)) {
      const ssize_t w = ::write(fd, buf.data() + off, static_cast<size_t>(n) - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throw_io("cannot write", out, errno);
      off += static_cast<size_t>(w);
    }
  }
  if (total != m.size)
    throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "': member '" + m.name + "' is truncated");
  return hash.hex_digest();
}

// Removes a path tree on scope exit unless released.
struct TreeGuard {
  fs::path p;
  ~TreeGuard() {
    if (!p.empty()) {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  }
};

}  // namespace

namespace detail {

bool extracted_member_ready(const fs::path& target) {
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0) return false;
  if (!S_ISREG(st.st_mode)) return true;  // a directory, complete once renamed into place
  return ffi::check_module_record(target) == ffi::RecordCheck::matches;
}

bool try_extract_from_wheel(const Settings& cfg, const fs::path& wheel, std::string_view prefix_in, const fs::path& dest_root,
                            fs::path& out_path) {
  std::string prefix(prefix_in);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.empty() || !unsafe_name(prefix).empty())
    throw_error(ErrorCode::invalid_argument, "extract_from_wheel: argument 'prefix' must be a relative member path; got '" +
                                                 std::string(prefix_in) + "'");
  const fs::path target = dest_root / prefix;
  out_path = target;
  std::error_code ec;
  if (extracted_member_ready(target)) return true;

  make_cache_dir(cfg, dest_root);
  FileLock lock = FileLock::acquire(dest_root / ".lock", "extracting " + prefix + " from " + wheel.filename().string(),
                                    lock_wait(cfg));
  // Another process extracted it while we waited. A file without its record (an older flashcpp's, or one
  // whose extraction stopped before the record) is extracted again, replacing it.
  if (extracted_member_ready(target)) return true;

  int zerr = 0;
  Zip zip{zip_open(wheel.c_str(), ZIP_RDONLY, &zerr)};
  if (!zip.z) {
    zip_error_t e;
    zip_error_init_with_code(&e, zerr);
    std::string msg = zip_error_strerror(&e);
    zip_error_fini(&e);
    throw_error(ErrorCode::integrity_error, "cannot open wheel '" + wheel.string() + "': " + msg);
  }
  const zip_int64_t count = zip_get_num_entries(zip.z, 0);
  std::vector<Member> members;
  std::uint64_t total_bytes = 0;  // declared by the members to extract; extract_one holds each to its declaration
  const std::string dir_prefix = prefix + "/";
  for (zip_int64_t i = 0; i < count; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(zip.z, static_cast<zip_uint64_t>(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME))
      throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "': unreadable entry " + std::to_string(i));
    const std::string name = st.name;
    if (auto why = unsafe_name(name); !why.empty())
      throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "' holds an unsafe member '" + name + "' (" +
                                                  why + "); refusing to extract from it");
    zip_uint8_t opsys = 0;
    zip_uint32_t attr = 0;
    bool executable = false;
    if (zip_file_get_external_attributes(zip.z, static_cast<zip_uint64_t>(i), 0, &opsys, &attr) == 0 &&
        opsys == ZIP_OPSYS_UNIX) {
      const mode_t mode = static_cast<mode_t>(attr >> 16);
      if (S_ISLNK(mode))
        throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "' holds a symlink member '" + name +
                                                    "'; refusing to extract from it");
      executable = (mode & 0111) != 0;
    }
    const bool is_dir = !name.empty() && name.back() == '/';
    if (is_dir) continue;
    if (name == prefix || name.compare(0, dir_prefix.size(), dir_prefix) == 0) {
      const zip_uint64_t size = (st.valid & ZIP_STAT_SIZE) ? st.size : 0;
      if (size > cfg.max_member_bytes)
        throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "': member '" + name + "' declares " +
                                                    std::to_string(size) + " bytes, over the limit of " +
                                                    std::to_string(cfg.max_member_bytes) + "; refusing it");
      // A zip bomb: a small member that expands enormously. Small members are exempt (an empty or tiny file's
      // ratio means nothing); an unknown compressed size counts as 1 byte.
      const zip_uint64_t packed = (st.valid & ZIP_STAT_COMP_SIZE) && st.comp_size > 0 ? st.comp_size : 1;
      const double ratio = static_cast<double>(size) / static_cast<double>(packed);
      if (size > kRatioExemptBytes && ratio > cfg.max_compression_ratio) {
        char r[32];
        std::snprintf(r, sizeof(r), "%.0f", ratio);
        throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "': member '" + name + "' expands from " +
                                                    std::to_string(packed) + " to " + std::to_string(size) +
                                                    " bytes, a compression ratio of " + r + ", over the limit of " +
                                                    ratio_text(cfg.max_compression_ratio) +
                                                    " (FLASHCPP_MAX_COMPRESSION_RATIO); refusing it, nothing was extracted");
      }
      if (__builtin_add_overflow(total_bytes, size, &total_bytes) || total_bytes > cfg.max_extract_bytes)
        throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "': the members under '" + prefix +
                                                    "' declare more than the limit of " + std::to_string(cfg.max_extract_bytes) +
                                                    " bytes for one extraction (FLASHCPP_MAX_EXTRACT_BYTES); refusing them, "
                                                    "nothing was extracted");
      members.push_back({static_cast<zip_uint64_t>(i), name, size, executable || (name.size() > 3 && name.substr(name.size() - 3) == ".so")});
    }
  }
  if (members.empty()) return false;

  if (members.size() == 1 && members[0].name == prefix) {
    make_cache_dir(cfg, target.parent_path());
    const fs::path tmp = target.string() + temp_suffix();
    TreeGuard guard{tmp};
    const std::string sha256 = extract_one(zip.z, members[0], tmp, wheel, cfg.max_member_bytes);
    fsync_path(tmp, false);
    if (::rename(tmp.c_str(), target.c_str()) != 0) throw_io("cannot publish", target, errno);
    guard.p.clear();
    // Recorded after the rename (which moves the ctime); readers that find no record yet wait on the lock.
    ffi::write_module_record(target, sha256);
    fsync_path(target.parent_path(), true);
    return true;
  }

  // A directory: extract into a staging tree, flush it, then publish the directory with one rename.
  const fs::path staging = dest_root / (".staging" + temp_suffix());
  TreeGuard guard{staging};
  for (const Member& m : members) {
    const fs::path out = staging / m.name;
    make_cache_dir(cfg, out.parent_path());
    extract_one(zip.z, m, out, wheel, cfg.max_member_bytes);
  }
  {
    const int dfd = ::open(staging.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::syncfs(dfd);
      ::close(dfd);
    }
  }
  make_cache_dir(cfg, target.parent_path());
  if (::rename((staging / prefix).c_str(), target.c_str()) != 0) throw_io("cannot publish", target, errno);
  fsync_path(target.parent_path(), true);
  return true;
}

}  // namespace detail

fs::path extract_from_wheel(const Settings& cfg, const fs::path& wheel, std::string_view prefix, const fs::path& dest_root) {
  fs::path out;
  if (!detail::try_extract_from_wheel(cfg, wheel, prefix, dest_root, out))
    throw_error(ErrorCode::not_found, "wheel '" + wheel.string() + "' has no member '" + std::string(prefix) + "'");
  return out;
}

}  // namespace flashcpp::artifacts
