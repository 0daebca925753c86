#include "core/env.hpp"

#include <array>
#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "flashcpp/error.hpp"

namespace flashcpp::env {
namespace fs = std::filesystem;

namespace {

enum class Kind { choice, integer, seconds, directory };

struct Rule {
  const char* name;
  Kind kind;
  std::array<std::string_view, 3> values{};  // choice: the accepted values (empty slots unused)
  double lo = 0, hi = 0;                     // integer: [lo, hi]; seconds: (lo, hi]
};

constexpr Rule kRules[] = {
    {"FLASHCPP_JIT", Kind::choice, {"auto", "off", "force"}},
    {"FLASHCPP_OFFLINE", Kind::choice, {"0", "1"}},
    {"FLASHCPP_NO_BUILD_DEPS", Kind::choice, {"0", "1"}},
    {"FLASHCPP_MLA_FORCE_SIMPLE", Kind::choice, {"0", "1"}},
    {"FLASHCPP_MLA_FP8_KERNEL", Kind::choice, {"mma", "wgmma"}},
    {"FLASHCPP_RETRIES", Kind::integer, {}, 0, 100},
    {"FLASHCPP_JIT_JOBS", Kind::integer, {}, 0, 4096},
    {"FLASHCPP_CONNECT_TIMEOUT", Kind::seconds, {}, 0, 86400},
    {"FLASHCPP_STALL_TIMEOUT", Kind::seconds, {}, 0, 86400},
    {"FLASHCPP_CACHE_DIR", Kind::directory},
};

const Rule& rule(const char* name, Kind kind) {
  for (const Rule& r : kRules)
    if (std::string_view(r.name) == name && r.kind == kind) return r;
  throw Error(ErrorCode::internal, std::string("no rule for environment variable ") + name);
}

[[noreturn]] void fail(const Rule& r, const std::string& must, const std::string& got) {
  throw Error(ErrorCode::invalid_argument,
              std::string("environment variable ") + r.name + " must be " + must + "; got '" + got + "'");
}

std::string integer_text(double v) { return std::to_string(static_cast<long>(v)); }

}  // namespace

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::string> choice(const char* name) {
  const Rule& r = rule(name, Kind::choice);
  auto v = get(name);
  if (!v) return v;
  std::string allowed;
  for (std::string_view a : r.values) {
    if (a.empty()) continue;
    if (*v == a) return v;
    allowed += (allowed.empty() ? "" : ", ") + std::string(a);
  }
  fail(r, "one of " + allowed, *v);
}

bool flag(const char* name, bool fallback) {
  const auto v = choice(name);
  return v ? *v == "1" : fallback;
}

std::optional<long> integer(const char* name) {
  const Rule& r = rule(name, Kind::integer);
  const auto v = get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v->c_str(), &end, 10);
  if (end == v->c_str() || *end != '\0' || errno != 0 || n < r.lo || n > r.hi)
    fail(r, "an integer in [" + integer_text(r.lo) + ", " + integer_text(r.hi) + "]", *v);
  return n;
}

std::optional<double> seconds(const char* name) {
  const Rule& r = rule(name, Kind::seconds);
  const auto v = get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || !(d > r.lo) || !(d <= r.hi))
    fail(r, "a number of seconds in (" + integer_text(r.lo) + ", " + integer_text(r.hi) + "]", *v);
  return d;
}

std::optional<fs::path> directory(const char* name) {
  const Rule& r = rule(name, Kind::directory);
  const auto v = get(name);
  if (!v) return std::nullopt;
  std::error_code ec;
  const auto st = fs::status(*v, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    fail(r, "a directory (created when missing), not a file or anything else", *v);
  return fs::path(*v);
}

std::vector<std::string> problems() {
  std::vector<std::string> out;
  for (const Rule& r : kRules) {
    try {
      switch (r.kind) {
        case Kind::choice: (void)choice(r.name); break;
        case Kind::integer: (void)integer(r.name); break;
        case Kind::seconds: (void)seconds(r.name); break;
        case Kind::directory: (void)directory(r.name); break;
      }
    } catch (const Error& e) {
      out.push_back(e.message());
    }
  }
  return out;
}

}  // namespace flashcpp::env
