#include "core/config_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "flashcpp/error.hpp"

namespace flashcpp {

std::string read_config_file(const std::filesystem::path& file, std::string_view what, const ConfigFileLimits& limits) {
  const std::string name = std::string(what) + " '" + file.string() + "'";
  const auto start = std::chrono::steady_clock::now();
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; the type is checked before any read.
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    throw_error(err == ENOENT || err == ENOTDIR ? ErrorCode::not_found : ErrorCode::io_error,
                name + " cannot be read: " + std::strerror(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_error(ErrorCode::io_error, name + " cannot be read: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw_error(ErrorCode::invalid_argument,
                name + " must be a regular file (not a " +
                    (S_ISFIFO(st.st_mode) ? "FIFO" : S_ISDIR(st.st_mode) ? "directory" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "device" : S_ISSOCK(st.st_mode) ? "socket" : "special file") + ")");
  const auto too_large = [&] {
    throw_error(ErrorCode::invalid_argument,
                name + " must be at most " + std::to_string(limits.max_bytes) + " bytes (a configuration file)");
  };
  if (static_cast<std::uint64_t>(st.st_size) > limits.max_bytes) too_large();
  // Back to blocking reads of the regular file; the size may still change while it is read (or /proc report 0).
  (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string text;
  char buf[65536];
  for (;;) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limits.deadline_s)
      throw_error(ErrorCode::io_error, name + " was not read within " + std::to_string(limits.deadline_s) + " s");
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_error(ErrorCode::io_error, name + " cannot be read: " + std::strerror(errno));
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > limits.max_bytes) too_large();
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace flashcpp
