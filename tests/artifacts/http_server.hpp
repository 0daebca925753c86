// A small HTTP/1.1 server on 127.0.0.1 for the artifacts tests and benchmarks: serves bodies from memory or a
// file, honours Range requests, and can cut a connection mid-body, stall, drip bytes slowly, redirect, or answer
// with an error.
// One thread per connection; every response closes its connection. stop() (or the destructor) ends everything.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace flashcpp::testing {

struct Route {
  std::string body;            ///< served when `file` is empty
  std::string file;            ///< serve this file's bytes (sendfile) instead of `body`
  int status = 200;            ///< 200, or an error status served with a short text body
  std::string location;        ///< with status 301/302/307: the Location header
  std::string content_type = "application/octet-stream";
  bool honor_range = true;     ///< answer "Range: bytes=N-" with 206
  std::uint64_t cut_after = UINT64_MAX;  ///< close the connection after this many body bytes...
  int cut_times = 0;           ///< ...for this many requests (then serve normally); -1 = always
  bool stall = false;          ///< send headers and `stall_after` bytes, then go silent until stop()
  std::uint64_t stall_after = 0;
  int delay_ms = 0;            ///< wait before answering (makes concurrent clients overlap)
  int drip_ms = 0;             ///< send the body one byte every drip_ms (defeats a stall timeout)...
  int drip_for_ms = 0;         ///< ...for this long, then go silent as with `stall`
};

class HttpServer {
 public:
  HttpServer();  ///< listens on 127.0.0.1 with an ephemeral port
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const { return port_; }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  void set(const std::string& path, Route route);
  /// Requests seen for `path` (every attempt, including cut and ranged ones).
  int requests(const std::string& path) const;
  /// The Range header of each request for `path` ("" when absent), in arrival order.
  std::vector<std::string> ranges(const std::string& path) const;
  /// Body bytes sent for `path`, over all requests.
  std::uint64_t bytes_sent(const std::string& path) const;
  void stop();

 private:
  void accept_loop();
  void serve(int fd);
  bool wait_stopped_ms(int ms);  ///< true when stopped

  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Route> routes_;
  std::map<std::string, int> counts_;
  std::map<std::string, std::vector<std::string>> ranges_;
  std::map<std::string, std::uint64_t> sent_;
  std::map<std::string, int> cuts_done_;
  std::vector<std::thread> workers_;
  std::vector<int> client_fds_;
};

}  // namespace flashcpp::testing
