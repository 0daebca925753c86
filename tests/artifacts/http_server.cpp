#include "artifacts/http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace flashcpp::testing {

HttpServer::HttpServer() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error("HttpServer: socket failed");
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd_, 64) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error("HttpServer: bind/listen failed");
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::set(const std::string& path, Route route) {
  std::lock_guard<std::mutex> g(mu_);
  routes_[path] = std::move(route);
  cuts_done_[path] = 0;
}

int HttpServer::requests(const std::string& path) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = counts_.find(path);
  return it == counts_.end() ? 0 : it->second;
}

std::vector<std::string> HttpServer::ranges(const std::string& path) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = ranges_.find(path);
  return it == ranges_.end() ? std::vector<std::string>{} : it->second;
}

std::uint64_t HttpServer::bytes_sent(const std::string& path) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = sent_.find(path);
  return it == sent_.end() ? 0 : it->second;
}

void HttpServer::stop() {
  if (stopping_.exchange(true)) return;
  cv_.notify_all();
  ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);
    workers.swap(workers_);
  }
  for (auto& t : workers) t.join();
}

bool HttpServer::wait_stopped_ms(int ms) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, std::chrono::milliseconds(ms), [this] { return stopping_.load(); });
}

void HttpServer::accept_loop() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    std::lock_guard<std::mutex> g(mu_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    client_fds_.push_back(fd);
    workers_.emplace_back([this, fd] { serve(fd); });
  }
}

namespace {
bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
std::string header_value(const std::string& req, const std::string& name) {
  std::string lower = req;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  const std::string key = "\r\n" + name + ":";
  const size_t p = lower.find(key);
  if (p == std::string::npos) return {};
  size_t b = p + key.size();
  const size_t e = req.find("\r\n", b);
  while (b < e && req[b] == ' ') ++b;
  return req.substr(b, e - b);
}
}  // namespace

void HttpServer::serve(int fd) {
  struct Closer {
    HttpServer* s;
    int fd;
    ~Closer() {
      std::lock_guard<std::mutex> g(s->mu_);
      s->client_fds_.erase(std::remove(s->client_fds_.begin(), s->client_fds_.end(), fd), s->client_fds_.end());
      ::close(fd);
    }
  } closer{this, fd};
  std::string req;
  char buf[4096];
  while (req.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0 || req.size() > 65536) return;
    req.append(buf, static_cast<size_t>(n));
  }
  const size_t sp1 = req.find(' '), sp2 = req.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) return;
  std::string path = req.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string range = header_value(req, "range");

  Route route;
  bool found = false, cut = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    counts_[path]++;
    ranges_[path].push_back(range);
    auto it = routes_.find(path);
    if (it != routes_.end()) {
      found = true;
      route = it->second;
      int& done = cuts_done_[path];
      if (route.cut_after != UINT64_MAX && (route.cut_times < 0 || done < route.cut_times)) {
        cut = true;
        ++done;
      }
    }
  }
  if (route.delay_ms > 0 && wait_stopped_ms(route.delay_ms)) return;
  auto respond_simple = [&](int status, const std::string& reason, const std::string& extra) {
    const std::string body = reason + "\n";
    const std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Type: text/plain\r\n" + extra +
                             "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    send_all(fd, head.data(), head.size()) && send_all(fd, body.data(), body.size());
  };
  if (!found) return respond_simple(404, "Not Found", "");
  if (route.status == 301 || route.status == 302 || route.status == 307)
    return respond_simple(route.status, "Redirect", "Location: " + route.location + "\r\n");
  if (route.status != 200) return respond_simple(route.status, route.status == 500 ? "Internal Server Error" : "Error", "");

  int file_fd = -1;
  std::uint64_t size = route.body.size();
  if (!route.file.empty()) {
    file_fd = ::open(route.file.c_str(), O_RDONLY | O_CLOEXEC);
    if (file_fd < 0) return respond_simple(500, "Internal Server Error", "");
    struct stat st {};
    ::fstat(file_fd, &st);
    size = static_cast<std::uint64_t>(st.st_size);
  }
  struct FileCloser {
    int fd;
    ~FileCloser() {
      if (fd >= 0) ::close(fd);
    }
  } file_closer{file_fd};

  std::uint64_t start = 0;
  std::string head;
  if (!range.empty() && route.honor_range && range.rfind("bytes=", 0) == 0) {
    start = std::stoull(range.substr(6));
    if (start >= size)
      return respond_simple(416, "Range Not Satisfiable", "Content-Range: bytes */" + std::to_string(size) + "\r\n");
    head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " + std::to_string(start) + "-" + std::to_string(size - 1) +
           "/" + std::to_string(size) + "\r\n";
  } else {
    head = "HTTP/1.1 200 OK\r\n";
  }
  head += "Content-Type: " + route.content_type + "\r\nContent-Length: " + std::to_string(size - start) +
          "\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n";
  if (!send_all(fd, head.data(), head.size())) return;

  std::uint64_t limit = size - start;
  if (cut) limit = std::min(limit, route.cut_after);
  if (route.stall) limit = std::min(limit, route.stall_after);
  std::uint64_t sent = 0;
  bool silent_after = route.stall;
  if (route.drip_ms > 0 && file_fd < 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(route.drip_for_ms);
    while (sent < limit && std::chrono::steady_clock::now() < until) {
      if (!send_all(fd, route.body.data() + start + sent, 1)) break;
      ++sent;
      if (wait_stopped_ms(route.drip_ms)) break;
    }
    silent_after = true;
  } else if (file_fd >= 0) {
    off_t off = static_cast<off_t>(start);
    while (sent < limit && !stopping_) {
      const ssize_t w = ::sendfile(fd, file_fd, &off, std::min<std::uint64_t>(limit - sent, 1 << 24));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      sent += static_cast<std::uint64_t>(w);
    }
  } else if (limit > 0) {
    if (send_all(fd, route.body.data() + start, limit)) sent = limit;
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    sent_[path] += sent;
  }
  if (silent_after) {
    // Go silent but keep the connection open until the client gives up or the server stops.
    while (!stopping_) {
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, 50);
      if (r > 0) {
        char c;
        if (::recv(fd, &c, 1, MSG_DONTWAIT) <= 0) break;  // client closed
      }
    }
    return;
  }
  if (cut) ::shutdown(fd, SHUT_RDWR);
}

}  // namespace flashcpp::testing
