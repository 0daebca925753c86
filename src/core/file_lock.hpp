// Cross-process exclusive file locks, shared by the artifacts cache and the jit builder. The holder writes
// its PID and what it is doing into the lock file, so that a waiter can say whom it waits for, report it after
// a few seconds, and give up after a limit with an error naming the holder.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace flashcpp {

/// How long a FileLock::acquire waits, and whom it tells while waiting.
struct LockWait {
  double timeout_s = 6 * 3600.0;  ///< then Error(io_error) naming the holder; must be > 0
  double report_after_s = 5;      ///< then `report` is called once with a line naming the holder
  std::function<void(const std::string&)> report;  ///< empty: the line goes to stderr
  std::string timeout_setting;    ///< what configures timeout_s, named in the error (e.g. "FLASHCPP_LOCK_TIMEOUT")
};

/// An exclusive advisory lock (flock) on a file, created if missing (mode 0644). flock belongs to the open
/// file description, so a second FileLock on the same file excludes other threads of this process as well as
/// other processes; the kernel drops it when the holder exits, however it exits. Moves, never copies.
class FileLock {
 public:
  FileLock() = default;  ///< holds nothing
  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock& operator=(FileLock&& o) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() { release(); }

  /// Waits until the lock is held, then records "pid <pid>, <what>" in the file. After wait.report_after_s it
  /// reports the holder once; after wait.timeout_s it throws Error(io_error) naming the lock file, the holder
  /// and wait.timeout_setting. io_error also when the file cannot be opened or locked.
  static FileLock acquire(const std::filesystem::path& file, std::string_view what, const LockWait& wait);
  /// Does not wait: std::nullopt when another holder has the lock.
  static std::optional<FileLock> try_acquire(const std::filesystem::path& file, std::string_view what);
  /// The holder recorded in `file`: "pid 123 (downloading x.whl, for 12 s)", or "an unknown holder".
  static std::string describe_holder(const std::filesystem::path& file);

  bool held() const noexcept { return fd_ >= 0; }
  /// Clears the record and drops the lock (idempotent).
  void release() noexcept;

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace flashcpp
