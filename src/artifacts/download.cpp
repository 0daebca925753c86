// libcurl downloads: resumable (Range), retried with back-off, connect and stall timeouts, progress,
// SHA-256 while streaming, fsync and atomic rename.
#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "artifacts/internal.hpp"
#include "ffi/trust.hpp"

namespace flashcpp::artifacts {
namespace fs = std::filesystem;
using namespace detail;

namespace {

using Clock = std::chrono::steady_clock;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw_error(ErrorCode::internal, "curl_global_init failed");
  });
}

struct CurlHandle {
  CURL* h = curl_easy_init();
  curl_slist* headers = nullptr;
  ~CurlHandle() {
    curl_slist_free_all(headers);
    if (h) curl_easy_cleanup(h);
  }
};

bool transient_http(long status) { return status == 408 || status == 429 || status >= 500; }

bool transient_curl(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

std::string http_reason(long s) {
  switch (s) {
    case 401: return " (unauthorized)";
    case 403: return " (forbidden)";
    case 404: return " (not found)";
    case 408: return " (request timeout)";
    case 416: return " (range not satisfiable)";
    case 429: return " (too many requests)";
    case 500: return " (internal server error)";
    case 502: return " (bad gateway)";
    case 503: return " (service unavailable)";
    case 504: return " (gateway timeout)";
    default: return "";
  }
}

// Stall detection in the transfer-info callback (libcurl's LOW_SPEED averages over several seconds, which
// makes a short stall timeout imprecise). libcurl calls it at least about once per second while idle.
struct StallWatch {
  double timeout_s;
  curl_off_t last_now = -1;
  Clock::time_point last_change = Clock::now();
  bool stalled = false;
  bool check(curl_off_t now_bytes) {  // true = abort
    const auto t = Clock::now();
    if (now_bytes != last_now) {
      last_now = now_bytes;
      last_change = t;
      return false;
    }
    if (std::chrono::duration<double>(t - last_change).count() > timeout_s) stalled = true;
    return stalled;
  }
};

void apply_common(CURL* h, const Config& cfg, const std::string& url) {
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::ceil(cfg.connect_timeout_s * 1000)));
  curl_easy_setopt(h, CURLOPT_USERAGENT, "flashcpp-artifacts/1");
  curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "identity");
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
}

double backoff_seconds(const Config& cfg, int retry) {
  return std::min(30.0, cfg.retry_backoff_s * std::pow(2.0, retry));
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

std::string describe_failure(CURLcode rc, long status, const char* errbuf, const Config& cfg, bool stalled) {
  if (stalled) return "stalled: no data for " + seconds_text(cfg.stall_timeout_s) + " (FLASHCPP_STALL_TIMEOUT)";
  if (rc == CURLE_HTTP_RETURNED_ERROR) return "HTTP " + std::to_string(status) + http_reason(status);
  if (rc == CURLE_OPERATION_TIMEDOUT)
    return "connect timed out after " + seconds_text(cfg.connect_timeout_s) + " (FLASHCPP_CONNECT_TIMEOUT)";
  std::string s = curl_easy_strerror(rc);
  if (errbuf && *errbuf) s += std::string(": ") + errbuf;
  return s;
}

// One download attempt's sink, a two-stage pipeline: libcurl's thread only copies received bytes into a
// free buffer; a worker thread hashes each full buffer and appends it to the .part file, so hashing and disk
// writes overlap the network. (Starting writeback early with sync_file_range was measured slower here.)
class Sink {
 public:
  static constexpr size_t kBufferBytes = size_t{4} << 20;
  static constexpr int kBuffers = 4;

  Sink(int fd, Sha256& hash, std::uint64_t offset, std::uint64_t expected_size)
      : fd_(fd), hash_(hash), offset_(offset), expected_size_(expected_size) {
    for (int i = 0; i < kBuffers; ++i) free_.push_back(std::make_unique<Buffer>());
    worker_ = std::thread([this] { work(); });
  }
  ~Sink() { finish(); }

  CURL* curl = nullptr;
  bool restart_from_zero = false;  // the server ignored the Range request: rewritten from byte 0
  bool oversize = false;
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
    }
    if (expected_size_ && offset_ + received_ + n > expected_size_) {
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
  std::uint64_t expected_size_;
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
  const Config* cfg;
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

}  // namespace

DownloadResult download_file(const Config& cfg, const std::string& url, const fs::path& dest,
                             std::string_view expected_sha256, std::uint64_t expected_size) {
  global_init();
  if (!is_sha256_hex(expected_sha256))
    throw_error(ErrorCode::invalid_argument, "download_file: argument 'expected_sha256' must be 64 lowercase hex digits");
  const fs::path part = dest.string() + ".part";
  const std::string shown = redact_url(url);
  const std::string what = dest.filename().string();
  DownloadResult result;
  Sha256 hash;
  const auto start = Clock::now();
  std::string last_error;
  bool restarted_once = false;

  for (int attempt = 0;; ++attempt) {
    result.attempts = attempt + 1;
    std::uint64_t have = file_size_or_zero(part);
    if (expected_size && have > expected_size) have = 0;
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
    Sink sink(fd, hash, have, expected_size);
    if (!complete_already) {
      CurlHandle c;
      if (!c.h) throw_error(ErrorCode::internal, "curl_easy_init failed");
      sink.curl = c.h;
      apply_common(c.h, cfg, url);
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
      sink.finish();  // everything received is hashed and in the file (kept for the next attempt)
      if (sink.restart_from_zero) have = 0;
      result.transferred += sink.received();
      if (have > 0 && sink.received() > 0) result.resumed = true;
    }
    sink.finish();

    if (const int err = sink.write_errno()) throw_io("cannot write", part, err);
    if (sink.oversize) {
      ::unlink(part.c_str());
      throw_error(ErrorCode::integrity_error, "downloading " + what + " from " + shown + ": the server sent more than the pinned " +
                                                  std::to_string(expected_size) + " bytes; the partial file was removed");
    }
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
      const std::uint64_t size = sink.offset() + sink.received();
      const std::string got = hash.hex_digest();
      if ((expected_size && size != expected_size) || got != expected_sha256) {
        ::unlink(part.c_str());
        throw_error(ErrorCode::integrity_error,
                    "downloaded " + what + " from " + shown + " does not match its pin: sha256 " + got + " (" +
                        std::to_string(size) + " bytes), expected " + std::string(expected_sha256) +
                        (expected_size ? " (" + std::to_string(expected_size) + " bytes)" : std::string()) +
                        "; the file was not kept");
      }
      if (::fsync(fd) != 0) throw_io("cannot fsync", part, errno);
      ::close(fd);
      fd = -1;
      if (::rename(part.c_str(), dest.c_str()) != 0) throw_io("cannot rename onto", dest, errno);
      fsync_path(dest.parent_path(), true);
      result.bytes = size;
      if (cfg.progress) {
        Progress pr;
        pr.what = what;
        pr.done = pr.total = size;
        pr.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        pr.bytes_per_second = pr.seconds > 0 ? static_cast<double>(result.transferred) / pr.seconds : 0;
        pr.finished = true;
        cfg.progress(pr);
      }
      return result;
    }
    last_error = describe_failure(rc, status, errbuf, cfg, stall.stalled);
    const bool transient =
        stall.stalled || (rc == CURLE_HTTP_RETURNED_ERROR ? transient_http(status) : transient_curl(rc));
    if (!transient) {
      throw_error(ErrorCode::network_error, "downloading " + what + " from " + shown + " failed: " + last_error + " (not retried)");
    }
    if (attempt >= cfg.max_retries) {
      throw_error(ErrorCode::network_error, "downloading " + what + " from " + shown + " failed after " +
                                                std::to_string(attempt + 1) + " attempt(s): " + last_error +
                                                "; the partial file is kept and the next attempt resumes it");
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff_seconds(cfg, attempt)));
  }
}

namespace detail {

namespace {
int stall_only_cb(void* user, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t) {
  return static_cast<StallWatch*>(user)->check(dlnow) ? 1 : 0;
}

size_t text_write(char* data, size_t size, size_t nmemb, void* user) {
  auto* s = static_cast<std::string*>(user);
  if (s->size() + size * nmemb > (std::size_t{64} << 20)) return 0;  // an index page is not 64 MiB
  s->append(data, size * nmemb);
  return size * nmemb;
}
}  // namespace

std::string http_get_text(const Config& cfg, const std::string& url, std::string* effective_url) {
  global_init();
  const std::string shown = redact_url(url);
  for (int attempt = 0;; ++attempt) {
    CurlHandle c;
    if (!c.h) throw_error(ErrorCode::internal, "curl_easy_init failed");
    std::string body;
    char errbuf[CURL_ERROR_SIZE] = {0};
    apply_common(c.h, cfg, url);
    curl_easy_setopt(c.h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, text_write);
    curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &body);
    StallWatch stall{cfg.stall_timeout_s};
    curl_easy_setopt(c.h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, stall_only_cb);
    curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, &stall);
    c.headers = curl_slist_append(c.headers, "Accept: text/html");
    curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.headers);
    const CURLcode rc = curl_easy_perform(c.h);
    long status = 0;
    curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OK) {
      if (effective_url) {
        char* eff = nullptr;
        curl_easy_getinfo(c.h, CURLINFO_EFFECTIVE_URL, &eff);
        *effective_url = eff ? eff : url;
      }
      return body;
    }
    const std::string err = describe_failure(rc, status, errbuf, cfg, stall.stalled);
    const bool transient =
        stall.stalled || (rc == CURLE_HTTP_RETURNED_ERROR ? transient_http(status) : transient_curl(rc));
    if (!transient || attempt >= cfg.max_retries)
      throw_error(ErrorCode::network_error, "fetching index page " + shown + " failed after " +
                                                std::to_string(attempt + 1) + " attempt(s): " + err);
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff_seconds(cfg, attempt)));
  }
}

}  // namespace detail
}  // namespace flashcpp::artifacts
