// libcurl plumbing shared by every transfer (http.hpp), and the HTTP GET of index pages into memory.
#include "artifacts/http.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <thread>

namespace flashcpp::artifacts::detail {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw_error(ErrorCode::internal, "curl_global_init failed");
  });
}

bool transient_http(long status) { return status == 408 || status == 429 || status >= 500; }

bool unreachable_curl(CURLcode rc) {
  return rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_COULDNT_CONNECT;
}

bool transient_curl(CURLcode rc) {
  switch (rc) {
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

namespace {

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

long milliseconds(double s) { return s > 0 ? static_cast<long>(std::clamp(std::ceil(s * 1000), 1.0, 1e9)) : 1; }

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

}  // namespace

void apply_common(CURL* h, const Settings& cfg, const std::string& url, double time_left_s) {
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, milliseconds(cfg.connect_timeout_s));
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, milliseconds(time_left_s));
  if (cfg.min_rate_bytes_per_s > 0) {  // a server dripping bytes defeats the stall watch, not this
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(std::min<std::uint64_t>(cfg.min_rate_bytes_per_s, LONG_MAX)));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (milliseconds(cfg.min_rate_window_s) + 999) / 1000);
  }
  curl_easy_setopt(h, CURLOPT_USERAGENT, "flashcpp-artifacts/1");
  curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "identity");
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
}

double backoff_seconds(const Settings& cfg, int retry) {
  return std::min(30.0, cfg.retry_backoff_s * std::pow(2.0, retry));
}

Timeout classify_timeout(CURL* h, CURLcode rc, Clock::time_point deadline) {
  if (rc != CURLE_OPERATION_TIMEDOUT) return Timeout::none;
  if (Clock::now() + std::chrono::milliseconds(50) >= deadline) return Timeout::deadline;
  curl_off_t connect_us = 0;
  curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connect_us);
  return connect_us > 0 ? Timeout::too_slow : Timeout::connect;
}

std::string deadline_text(const Settings& cfg) {
  return "did not finish within the download deadline of " + seconds_text(cfg.deadline_s) + " (FLASHCPP_DOWNLOAD_DEADLINE)";
}

std::string describe_failure(CURLcode rc, long status, const char* errbuf, const Settings& cfg, bool stalled,
                             Timeout timeout) {
  if (stalled) return "stalled: no data for " + seconds_text(cfg.stall_timeout_s) + " (FLASHCPP_STALL_TIMEOUT)";
  if (rc == CURLE_HTTP_RETURNED_ERROR) return "HTTP " + std::to_string(status) + http_reason(status);
  if (timeout == Timeout::deadline) return deadline_text(cfg);
  if (timeout == Timeout::too_slow)
    return "too slow: under " + std::to_string(cfg.min_rate_bytes_per_s) + " bytes/s for " +
           seconds_text(std::ceil(cfg.min_rate_window_s)) + " (FLASHCPP_MIN_RATE, FLASHCPP_MIN_RATE_TIME)";
  if (timeout == Timeout::connect)
    return "connect timed out after " + seconds_text(cfg.connect_timeout_s) + " (FLASHCPP_CONNECT_TIMEOUT)";
  std::string s = curl_easy_strerror(rc);
  if (errbuf && *errbuf) s += std::string(": ") + errbuf;
  return s;
}

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

std::string http_get_text(const Settings& cfg, const std::string& url, std::string* effective_url) {
  global_init();
  const std::string shown = redact_url(url);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg.deadline_s));
  for (int attempt = 0;; ++attempt) {
    const double time_left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (time_left <= 0)
      throw_error(ErrorCode::network_error, "fetching index page " + shown + " " + deadline_text(cfg));
    CurlHandle c;
    if (!c.h) throw_error(ErrorCode::internal, "curl_easy_init failed");
    std::string body;
    char errbuf[CURL_ERROR_SIZE] = {0};
    apply_common(c.h, cfg, url, time_left);
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
    const Timeout timeout = classify_timeout(c.h, rc, deadline);
    const std::string err = describe_failure(rc, status, errbuf, cfg, stall.stalled, timeout);
    if (unreachable_curl(rc))
      throw_error(ErrorCode::network_error, "fetching index page " + shown + " failed: " + err + kUnreachable);
    const bool transient = timeout != Timeout::deadline &&
        (stall.stalled || (rc == CURLE_HTTP_RETURNED_ERROR ? transient_http(status) : transient_curl(rc)));
    if (!transient || attempt >= cfg.max_retries)
      throw_error(ErrorCode::network_error, "fetching index page " + shown + " failed after " +
                                                std::to_string(attempt + 1) + " attempt(s): " + err);
    std::this_thread::sleep_for(std::min<Clock::duration>(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backoff_seconds(cfg, attempt))),
        std::max<Clock::duration>(deadline - Clock::now(), Clock::duration::zero())));
  }
}

}  // namespace flashcpp::artifacts::detail
