// A C ABI call in a forked child (tests of the C ABI against hostile input): the child makes the call, writes
// "<status>\n<last error>" into a pipe and leaves with _exit, so a crash or a sanitizer abort fails that case
// instead of the test run.
#pragma once
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "flashcpp/flashcpp.h"

namespace flashcpp::testing::forked {

struct Outcome {
  bool returned = false;  // the child came back from the call and reported
  int signal = 0;         // the signal that ended it, if any
  int exit_code = 0;      // its exit status otherwise (a sanitizer's report exits non-zero)
  int status = -1;
  std::string message;
};

// A child running one call: it writes "<status>\n<last error>" into a pipe and leaves with _exit (no atexit handlers,
// no leak check of its copy of the parent).
struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string text;
};

inline Child start_child(const std::function<flashcpp_status()>& call) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return {};
  }
  if (pid == 0) {
    ::close(fds[0]);
    const int status = call();
    const std::string msg = std::to_string(status) + "\n" + flashcpp_last_error();
    size_t off = 0;
    while (off < msg.size()) {
      const ssize_t n = ::write(fds[1], msg.data() + off, msg.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  return {pid, fds[0], {}};
}

// Reaps a child whose pipe reached end of file.
inline Outcome finish_child(Child& c) {
  ::close(c.fd);
  int wstatus = 0;
  ::waitpid(c.pid, &wstatus, 0);
  Outcome o;
  if (WIFSIGNALED(wstatus)) o.signal = WTERMSIG(wstatus);
  if (WIFEXITED(wstatus)) o.exit_code = WEXITSTATUS(wstatus);
  const size_t nl = c.text.find('\n');
  o.returned = WIFEXITED(wstatus) && o.exit_code == 0 && nl != std::string::npos;
  if (o.returned) {
    o.status = std::atoi(c.text.substr(0, nl).c_str());
    o.message = c.text.substr(nl + 1);
  }
  return o;
}

// Runs every call in its own child, up to `parallel` at a time (a fork is costly under the sanitizers); the outcomes in
// the calls' order.
inline std::vector<Outcome> run_all_forked(const std::vector<std::function<flashcpp_status()>>& calls, size_t parallel) {
  std::vector<Outcome> out(calls.size());
  std::vector<std::pair<size_t, Child>> running;
  size_t next = 0;
  while (next < calls.size() || !running.empty()) {
    while (next < calls.size() && running.size() < parallel) {
      Child c = start_child(calls[next]);
      if (c.pid < 0) {
        out[next++] = Outcome{};  // could not fork: counted as a case that did not return
        continue;
      }
      running.emplace_back(next++, std::move(c));
    }
    if (running.empty()) break;
    std::vector<pollfd> fds;
    for (const auto& [i, c] : running) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) continue;
    for (size_t k = running.size(); k-- > 0;) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Child& c = running[k].second;
      char buf[4096];
      const ssize_t n = ::read(c.fd, buf, sizeof buf);
      if (n > 0) {
        c.text.append(buf, static_cast<size_t>(n));
        continue;
      }
      out[running[k].first] = finish_child(c);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  return out;
}

inline Outcome run_forked(const std::function<flashcpp_status()>& call) { return run_all_forked({call}, 1).front(); }

}  // namespace flashcpp::testing::forked
