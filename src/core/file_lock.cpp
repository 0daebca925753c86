// FileLock: flock with a holder record, a bounded wait and a report of whom a waiter waits for.
#include "core/file_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "flashcpp/error.hpp"

namespace flashcpp {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

int open_lock_file(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    throw_error(ErrorCode::io_error, "cannot open lock file '" + file.string() + "': " + std::strerror(errno));
  return fd;
}

// true = locked; false = another holder has it (only when !blocking).
bool lock_fd(int fd, const fs::path& file, bool blocking) {
  while (::flock(fd, LOCK_EX | (blocking ? 0 : LOCK_NB)) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    if (!blocking && err == EWOULDBLOCK) return false;
    ::close(fd);
    throw_error(ErrorCode::io_error, "cannot lock '" + file.string() + "': " + std::strerror(err));
  }
  return true;
}

// "pid=<pid> since=<unix seconds> <what>\n", replacing any earlier record. Best effort: the record only
// informs waiters; the lock itself is the flock.
void write_record(int fd, std::string_view what) {
  std::string rec = "pid=" + std::to_string(::getpid()) + " since=" + std::to_string(std::time(nullptr)) + " ";
  rec.append(what.substr(0, 400));
  for (char& c : rec)
    if (c == '\n' || c == '\r') c = ' ';
  rec += '\n';
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t n = ::pwrite(fd, rec.data(), rec.size(), 0);
  }
}

std::string describe_record(int fd) {
  char buf[512];
  ssize_t n;
  do {
    n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return "an unknown holder";
  buf[n] = 0;
  long long pid = 0, since = 0;
  int consumed = 0;
  if (std::sscanf(buf, "pid=%lld since=%lld %n", &pid, &since, &consumed) != 2 || pid <= 0 || consumed <= 0)
    return "an unknown holder";
  std::string what(buf + consumed);
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  const long long age = std::max<long long>(0, static_cast<long long>(std::time(nullptr)) - since);
  return "pid " + std::to_string(pid) + " (" + (what.empty() ? std::string("busy") : what) + ", for " +
         std::to_string(age) + " s)";
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

}  // namespace

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void FileLock::release() noexcept {
  if (fd_ < 0) return;
  // Clear the record while still holding the lock, so a stale PID is never reported.
  [[maybe_unused]] const int rc = ::ftruncate(fd_, 0);
  ::close(fd_);  // closing the last descriptor of the open file description drops the flock
  fd_ = -1;
}

FileLock FileLock::acquire(const fs::path& file, std::string_view what, const LockWait& wait) {
  if (!(wait.timeout_s > 0))
    throw_error(ErrorCode::invalid_argument, "FileLock::acquire: argument 'wait.timeout_s' must be > 0");
  const int fd = open_lock_file(file);
  const auto start = Clock::now();
  bool reported = false;
  auto sleep = std::chrono::milliseconds(5);
  while (!lock_fd(fd, file, false)) {
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited >= wait.timeout_s) {
      const std::string holder = describe_record(fd);
      ::close(fd);
      throw_error(ErrorCode::io_error, "gave up waiting for the lock '" + file.string() + "' after " +
                                           seconds_text(wait.timeout_s) +
                                           (wait.timeout_setting.empty() ? std::string() : " (" + wait.timeout_setting + ")") +
                                           ": it is held by " + holder);
    }
    if (!reported && waited >= wait.report_after_s) {
      reported = true;
      const std::string line = "waiting for the lock '" + file.string() + "', held by " + describe_record(fd) +
                               "; giving up after " + seconds_text(wait.timeout_s) +
                               (wait.timeout_setting.empty() ? std::string() : " (" + wait.timeout_setting + ")");
      if (wait.report) {
        try {
          wait.report(line);
        } catch (...) {
          // A report is informational; a throwing callback must not leak the descriptor or end the wait.
        }
      } else {
        std::fprintf(stderr, "flashcpp: %s\n", line.c_str());
      }
    }
    // Poll: flock has no timed wait. Back off to 100 ms so a long wait costs nothing noticeable.
    const double left = wait.timeout_s - waited;
    std::this_thread::sleep_for(std::min<Clock::duration>(
        sleep, std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(left, 0.001)))));
    sleep = std::min(sleep * 2, std::chrono::milliseconds(100));
  }
  write_record(fd, what);
  return FileLock(fd);
}

std::optional<FileLock> FileLock::try_acquire(const fs::path& file, std::string_view what) {
  const int fd = open_lock_file(file);
  if (!lock_fd(fd, file, false)) {
    ::close(fd);
    return std::nullopt;
  }
  write_record(fd, what);
  return FileLock(fd);
}

std::string FileLock::describe_holder(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "an unknown holder";
  std::string s = describe_record(fd);
  ::close(fd);
  return s;
}

}  // namespace flashcpp
