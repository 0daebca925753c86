// libcurl downloads: resumable (Range), retried with back-off, connect and stall timeouts, a minimum rate and
// an overall deadline per file, a size bound and a free-space check, progress, SHA-256 while streaming, fsync
// and atomic rename.
// The libcurl plumbing it shares with index-page fetches is http.hpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "artifacts/http.hpp"
#include "artifacts/internal.hpp"
#include "ffi/trust.hpp"

namespace flashcpp::artifacts {
namespace fs = std::filesystem;
using namespace detail;

namespace {

std::string bytes_text(std::uint64_t n) {
  char buf[64];
  if (n >= (std::uint64_t{1} << 30))
    std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(n) / (1 << 30));
  else
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(n) / (1 << 20));
  return std::to_string(n) + " bytes (" + buf + ")";
}

// Empty when `dir` has room for `bytes` more and cfg.min_free_bytes besides; else why not.
std::string free_space_shortfall(const Settings& cfg, const fs::path& dir, std::uint64_t bytes) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return {};  // unknown: a full disk still fails the write (ENOSPC)
  std::uint64_t free_bytes = 0, need = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(st.f_bavail), static_cast<std::uint64_t>(st.f_frsize), &free_bytes))
    free_bytes = UINT64_MAX;
  if (__builtin_add_overflow(bytes, cfg.min_free_bytes, &need)) need = UINT64_MAX;
  if (free_bytes >= need) return {};
  return "not enough free disk space in '" + dir.string() + "': it needs " + bytes_text(bytes) + " and " +
         bytes_text(cfg.min_free_bytes) + " kept free (FLASHCPP_MIN_FREE_BYTES), but only " + bytes_text(free_bytes) +
         " are free";
}

// One download attempt's sink, a two-stage pipeline: libcurl's thread only copies received bytes into a
// free buffer; a worker thread hashes each full buffer and appends it to the .part file, so hashing and disk
// writes overlap the network. (Starting writeback early with sync_file_range was measured slower here.)
class Sink {
 public:
  static constexpr size_t kBufferBytes = size_t{4} << 20;
  static constexpr int kBuffers = 4;

  // `limit`: the pinned size, or the configured bound when the pin gives none (`exact` false). Then the free
  // space is checked against the announced length on the first data.
  Sink(int fd, Sha256& hash, std::uint64_t offset, std::uint64_t limit, bool exact, const Settings& cfg, fs::path dir)
      : fd_(fd), hash_(hash), offset_(offset), limit_(limit), exact_(exact), cfg_(cfg), dir_(std::move(dir)) {
    for (int i = 0; i < kBuffers; ++i) free_.push_back(std::make_unique<Buffer>());
    worker_ = std::thread([this] { work(); });
  }
  ~Sink() { finish(); }

  CURL* curl = nullptr;
  bool restart_from_zero = false;  // the server ignored the Range request: rewritten from byte 0
  bool oversize = false;
  std::string no_space;  // why the announced length does not fit on the disk
  std::uint64_t offset() const { return offset_; }
  std::uint64_t received() const { return received_; }
  int write_errno() {
    std::lock_guard<std::mutex> g(mu_);
    return errno_;
  }

  size_t on_data(const char* data, size_t n) {
    if (!checked_status_) {
      checked_status_ = true;
      long status = 0;
      curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
      if (offset_ > 0 && status == 200) {  // nothing is queued yet in this attempt
        restart_from_zero = true;
        if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) != 0) return fail(errno);
        offset_ = 0;
        hash_.reset();
      }
      curl_off_t announced = -1;  // what this response says it will send
      curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced);
      if (announced >= 0) {
        std::uint64_t total = 0;
        if (__builtin_add_overflow(offset_, static_cast<std::uint64_t>(announced), &total) || total > limit_) {
          oversize = true;  // refused before a byte is written
          return 0;
        }
        if (!exact_) {
          no_space = free_space_shortfall(cfg_, dir_, static_cast<std::uint64_t>(announced));
          if (!no_space.empty()) return 0;
        }
      }
    }
    if (offset_ + received_ + n > limit_) {
      oversize = true;
      return 0;
    }
    size_t done = 0;
    while (done < n) {
      if (!cur_ && !(cur_ = take_free())) return 0;  // worker failed
      const size_t k = std::min(n - done, kBufferBytes - cur_->used);
      std::memcpy(cur_->data.get() + cur_->used, data + done, k);
      cur_->used += k;
      done += k;
      if (cur_->used == kBufferBytes) submit();
    }
    received_ += n;
    return n;
  }

  // Hands over the last partial buffer and waits until the worker has hashed and written everything.
  void finish() {
    if (!worker_.joinable()) return;
    if (cur_ && cur_->used) submit();
    {
      std::lock_guard<std::mutex> g(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

 private:
  struct Buffer {
    std::unique_ptr<char[]> data{new char[kBufferBytes]};
    size_t used = 0;
  };

  size_t fail(int err) {
    std::lock_guard<std::mutex> g(mu_);
    errno_ = err;
    return 0;
  }
  std::unique_ptr<Buffer> take_free() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return !free_.empty() || errno_; });
    if (errno_) return nullptr;
    auto b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void submit() {
    {
      std::lock_guard<std::mutex> g(mu_);
      full_.push_back(std::move(cur_));
    }
    cv_.notify_all();
  }
  void work() {
    for (;;) {
      std::unique_ptr<Buffer> b;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [this] { return !full_.empty() || closing_; });
        if (full_.empty()) return;
        b = std::move(full_.front());
        full_.pop_front();
      }
      bool ok;
      {
        std::lock_guard<std::mutex> g(mu_);
        ok = errno_ == 0;
      }
      if (ok) {
        hash_.update(b->data.get(), b->used);
        size_t off = 0;
        while (off < b->used) {
          const ssize_t w = ::write(fd_, b->data.get() + off, b->used - off);
          if (w < 0 && errno == EINTR) continue;
          if (w < 0) {
            fail(errno);
            break;
          }
          off += static_cast<size_t>(w);
        }
      }
      b->used = 0;
      {
        std::lock_guard<std::mutex> g(mu_);
        free_.push_back(std::move(b));
      }
      cv_.notify_all();
    }
  }

  int fd_;
  Sha256& hash_;
  std::uint64_t offset_;
  std::uint64_t limit_;
  bool exact_;
  const Settings& cfg_;
  fs::path dir_;
  std::uint64_t received_ = 0;
  bool checked_status_ = false;
  std::unique_ptr<Buffer> cur_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Buffer>> free_;
  std::deque<std::unique_ptr<Buffer>> full_;
  bool closing_ = false;
  int errno_ = 0;
  std::thread worker_;
};

size_t sink_write(char* data, size_t size, size_t nmemb, void* user) {
  return static_cast<Sink*>(user)->on_data(data, size * nmemb);
}

struct ProgressState {
  const Settings* cfg;
  StallWatch* stall;
  std::string what;
  std::uint64_t total = 0;
  std::uint64_t base = 0;  // resumed prefix
  Clock::time_point start;
  Clock::time_point last{};
};

int progress_cb(void* user, curl_off_t /*dltotal*/, curl_off_t dlnow, curl_off_t, curl_off_t) {
  auto* p = static_cast<ProgressState*>(user);
  if (p->stall->check(dlnow)) return 1;
  if (!p->cfg->progress) return 0;
  const auto now = Clock::now();
  if (now - p->last < std::chrono::milliseconds(100)) return 0;
  p->last = now;
  Progress pr;
  pr.what = p->what;
  pr.done = p->base + static_cast<std::uint64_t>(dlnow);
  pr.total = p->total;
  pr.seconds = std::chrono::duration<double>(now - p->start).count();
  pr.bytes_per_second = pr.seconds > 0 ? static_cast<double>(dlnow) / pr.seconds : 0;
  try {
    p->cfg->progress(pr);
  } catch (...) {
    return 1;  // a throwing callback aborts the transfer
  }
  return 0;
}

std::uint64_t file_size_or_zero(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0;
}

// However download_file ends, an empty .part file does not stay behind (a partial file with bytes is kept: the
// next attempt resumes it).
struct EmptyPartRemover {
  const fs::path& part;
  ~EmptyPartRemover() {
    struct stat st {};
    if (::stat(part.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0) ::unlink(part.c_str());
  }
};

std::string kept_text(const fs::path& part) {
  const std::uint64_t n = file_size_or_zero(part);
  return n ? "; the partial file is kept (" + std::to_string(n) + " bytes) and the next attempt resumes it" : "";
}

// What download_file publishes: its pin, its part file and destination, and their names in messages.
struct Target {
  const Settings& cfg;
  const fs::path& part;
  const fs::path& dest;
  const std::string& what;
  const std::string& shown;  // the URL with any credentials redacted
  std::string_view expected_sha256;
  std::uint64_t expected_size;
};

// A complete transfer of `size` bytes hashing to `got`: checked against the pin (the part file removed when it does
// not match), made durable and renamed onto the destination; fd is closed (and set to -1).
void publish_download(const Target& t, int& fd, std::uint64_t size, const std::string& got, Clock::time_point start,
                      DownloadResult& result) {
  if ((t.expected_size && size != t.expected_size) || got != t.expected_sha256) {
    ::unlink(t.part.c_str());
    throw_error(ErrorCode::integrity_error,
                "downloaded " + t.what + " from " + t.shown + " does not match its pin: sha256 " + got + " (" +
                    std::to_string(size) + " bytes), expected " + std::string(t.expected_sha256) +
                    (t.expected_size ? " (" + std::to_string(t.expected_size) + " bytes)" : std::string()) +
                    "; the file was not kept");
  }
  if (::fsync(fd) != 0) throw_io("cannot fsync", t.part, errno);
  ::close(fd);
  fd = -1;
  if (::rename(t.part.c_str(), t.dest.c_str()) != 0) throw_io("cannot rename onto", t.dest, errno);
  fsync_path(t.dest.parent_path(), true);
  result.bytes = size;
  if (t.cfg.progress) {
    Progress pr;
    pr.what = t.what;
    pr.done = pr.total = size;
    pr.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    pr.bytes_per_second = pr.seconds > 0 ? static_cast<double>(result.transferred) / pr.seconds : 0;
    pr.finished = true;
    t.cfg.progress(pr);
  }
}

}  // namespace

DownloadResult download_file(const Settings& cfg, const std::string& url, const fs::path& dest,
                             std::string_view expected_sha256, std::uint64_t expected_size) {
  global_init();
  if (!is_sha256_hex(expected_sha256))
    throw_error(ErrorCode::invalid_argument, "download_file: argument 'expected_sha256' must be 64 lowercase hex digits");
  if (!(cfg.deadline_s > 0) || !(cfg.min_rate_window_s > 0))
    throw_error(ErrorCode::invalid_argument, "download_file: Settings::deadline_s and Settings::min_rate_window_s must be > 0 seconds");
  const fs::path part = dest.string() + ".part";
  const std::string shown = redact_url(url);
  const std::string what = dest.filename().string();
  // Without a pinned size the configured bound stands in, so a hostile server cannot fill the disk.
  const std::uint64_t limit = expected_size ? expected_size : cfg.max_wheel_bytes;
  DownloadResult result;
  Sha256 hash;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.deadline_s));
  std::string last_error;
  bool restarted_once = false;
  const EmptyPartRemover remove_empty_part{part};

  for (int attempt = 0;; ++attempt) {
    result.attempts = attempt + 1;
    const double time_left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (time_left <= 0)
      throw_error(ErrorCode::network_error, "downloading " + what + " from " + shown + " " + deadline_text(cfg) +
                                                " (last error: " + last_error + ")" + kept_text(part));
    std::uint64_t have = file_size_or_zero(part);
    if (have > limit) have = 0;
    if (expected_size) {  // refused before a request when the pin says how much is coming
      if (auto why = free_space_shortfall(cfg, dest.parent_path(), expected_size - have); !why.empty())
        throw_error(ErrorCode::io_error, "downloading " + what + ": " + why);
    }
    hash.reset();
    int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, ffi::kFileMode);
    if (fd < 0) throw_io("cannot create", part, errno);
    struct FdGuard {
      int& fd;
      ~FdGuard() {
        if (fd >= 0) ::close(fd);
      }
    } guard{fd};
    ffi::set_mode(fd, ffi::kFileMode, part);  // 0644 whatever the umask
    if (have > 0) {
      try {
        hash_prefix(hash, part, have);
      } catch (const Error&) {
        have = 0;
        hash.reset();
      }
    }
    if (::ftruncate(fd, static_cast<off_t>(have)) != 0 || ::lseek(fd, static_cast<off_t>(have), SEEK_SET) < 0)
      throw_io("cannot prepare", part, errno);

    bool complete_already = expected_size && have == expected_size;
    CURLcode rc = CURLE_OK;
    long status = 0;
    char errbuf[CURL_ERROR_SIZE] = {0};
    StallWatch stall{cfg.stall_timeout_s};
    Timeout timeout = Timeout::none;
    Sink sink(fd, hash, have, limit, expected_size != 0, cfg, dest.parent_path());
    if (!complete_already) {
      CurlHandle c;
      if (!c.h) throw_error(ErrorCode::internal, "curl_easy_init failed");
      sink.curl = c.h;
      apply_common(c.h, cfg, url, time_left);
      curl_easy_setopt(c.h, CURLOPT_ERRORBUFFER, errbuf);
      curl_easy_setopt(c.h, CURLOPT_BUFFERSIZE, 512L * 1024);
      curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, sink_write);
      curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &sink);
      if (have > 0) curl_easy_setopt(c.h, CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(have));
      ProgressState ps{&cfg, &stall, what, expected_size, have, Clock::now()};
      curl_easy_setopt(c.h, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, progress_cb);
      curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, &ps);
      rc = curl_easy_perform(c.h);
      curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &status);
      timeout = classify_timeout(c.h, rc, deadline);
      sink.finish();  // everything received is hashed and in the file (kept for the next attempt)
      if (sink.restart_from_zero) have = 0;
      result.transferred += sink.received();
      if (have > 0 && sink.received() > 0) result.resumed = true;
    }
    sink.finish();

    if (const int err = sink.write_errno()) throw_io("cannot write", part, err);
    if (sink.oversize) {
      ::unlink(part.c_str());
      throw_error(ErrorCode::integrity_error,
                  "downloading " + what + " from " + shown + ": the server sent or announced more than " +
                      (expected_size ? "the pinned " + std::to_string(expected_size) + " bytes"
                                     : "the limit of " + std::to_string(limit) +
                                           " bytes for a wheel whose pin gives no size (FLASHCPP_MAX_WHEEL_BYTES)") +
                      "; the partial file was removed");
    }
    if (!sink.no_space.empty()) throw_error(ErrorCode::io_error, "downloading " + what + " from " + shown + ": " + sink.no_space);
    const bool range_refused = (rc == CURLE_HTTP_RETURNED_ERROR && status == 416) || rc == CURLE_RANGE_ERROR;
    if (range_refused && have > 0 && !restarted_once) {
      // The server cannot continue our partial file (no Range support, or it does not fit): start from zero
      // once, immediately; this is not a transient failure.
      restarted_once = true;
      if (::ftruncate(fd, 0) != 0) throw_io("cannot truncate", part, errno);
      --attempt;
      continue;
    }
    if (rc == CURLE_OK) {
      publish_download({cfg, part, dest, what, shown, expected_sha256, expected_size}, fd,
                       sink.offset() + sink.received(), hash.hex_digest(), start, result);
      return result;
    }
    last_error = describe_failure(rc, status, errbuf, cfg, stall.stalled, timeout);
    if (timeout == Timeout::deadline)
      throw_error(ErrorCode::network_error, "downloading " + what + " from " + shown + " " + deadline_text(cfg) + " (" +
                                                std::to_string(sink.offset() + sink.received()) + " bytes so far)" +
                                                kept_text(part));
    const bool transient =
        stall.stalled || (rc == CURLE_HTTP_RETURNED_ERROR ? transient_http(status) : transient_curl(rc));
    if (unreachable_curl(rc))
      throw_error(ErrorCode::network_error, "downloading " + what + " from " + shown + " failed: " + last_error + kUnreachable);
    if (!transient) {
      throw_error(ErrorCode::network_error, "downloading " + what + " from " + shown + " failed: " + last_error + " (not retried)");
    }
    if (attempt >= cfg.max_retries) {
      throw_error(ErrorCode::network_error, "downloading " + what + " from " + shown + " failed after " +
                                                std::to_string(attempt + 1) + " attempt(s): " + last_error + kept_text(part));
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backoff_seconds(cfg, attempt))),
        std::max<Clock::duration>(deadline - Clock::now(), Clock::duration::zero())));
  }
}

}  // namespace flashcpp::artifacts
