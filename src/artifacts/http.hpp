// libcurl plumbing shared by download.cpp (wheels into files) and http.cpp (index pages into memory): one-time
// initialisation, the handle, the options every transfer sets, the stall watch, and how a failed attempt is
// classified (retried or not) and described.
#pragma once
#include <curl/curl.h>

#include <chrono>
#include <string>

#include "artifacts/internal.hpp"

namespace flashcpp::artifacts::detail {

using Clock = std::chrono::steady_clock;

/// curl_global_init, once per process.
void global_init();

/// An easy handle and its header list, freed together.
struct CurlHandle {
  CURL* h = curl_easy_init();
  curl_slist* headers = nullptr;
  ~CurlHandle() {
    curl_slist_free_all(headers);
    if (h) curl_easy_cleanup(h);
  }
};

/// HTTP statuses worth a retry: 408, 429 and 5xx.
bool transient_http(long status);

/// DNS resolution failed or the connection was refused: this machine is offline or the host is not there. A retry
/// only makes a first op call wait longer, so these fail at once.
bool unreachable_curl(CURLcode rc);
inline constexpr const char* kUnreachable =
    " (the host cannot be reached: no network, no DNS or a refused connection; not retried)";

/// libcurl failures worth a retry (timeouts, broken transfers, TLS handshakes).
bool transient_curl(CURLcode rc);

/// Stall detection in the transfer-info callback (libcurl's LOW_SPEED averages over several seconds, which
/// makes a short stall timeout imprecise). libcurl calls it at least about once per second while idle.
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

/// The options every transfer sets: URL, redirects, timeouts, minimum rate, user agent, http(s) only.
/// `time_left_s`: what remains of this file's deadline; libcurl's total timeout for the attempt.
void apply_common(CURL* h, const Settings& cfg, const std::string& url, double time_left_s);

/// The wait before retry number `retry` (0-based): Settings::retry_backoff_s doubled per retry, at most 30 s.
double backoff_seconds(const Settings& cfg, int retry);

/// Which of libcurl's timers ended an attempt with CURLE_OPERATION_TIMEDOUT.
enum class Timeout { none, deadline, too_slow, connect };

Timeout classify_timeout(CURL* h, CURLcode rc, Clock::time_point deadline);

/// "did not finish within the download deadline of ... (FLASHCPP_DOWNLOAD_DEADLINE)".
std::string deadline_text(const Settings& cfg);

/// One line on why an attempt failed: the stall, the HTTP status, the timer that fired, or libcurl's error.
std::string describe_failure(CURLcode rc, long status, const char* errbuf, const Settings& cfg, bool stalled,
                             Timeout timeout);

}  // namespace flashcpp::artifacts::detail
