#include "core/env.hpp"

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "flashcpp/error.hpp"

namespace flashcpp::env {
namespace fs = std::filesystem;

namespace {

enum class Kind { choice, integer, seconds, number, bytes, directory };

struct Rule {
  const char* name;
  Kind kind;
  std::array<std::string_view, 3> values{};  // choice: the accepted values (empty slots unused)
  double lo = 0, hi = 0;                     // integer, number, bytes: [lo, hi]; seconds: (lo, hi]
};

constexpr Rule kRules[] = {
    {"FLASHCPP_JIT", Kind::choice, {"auto", "off", "force"}},
    {"FLASHCPP_LOG", Kind::choice, {"off", "info", "debug"}},
    {"FLASHCPP_OFFLINE", Kind::choice, {"0", "1"}},
    {"FLASHCPP_NO_BUILD_DEPS", Kind::choice, {"0", "1"}},
    {"FLASHCPP_MLA_FORCE_SIMPLE", Kind::choice, {"0", "1"}},
    {"FLASHCPP_MLA_FP8_KERNEL", Kind::choice, {"auto", "mma", "wgmma"}},
    {"FLASHCPP_MLA_DENSE_KERNEL", Kind::choice, {"mma", "gather"}},
    {"FLASHCPP_MLA_TAIL_SPLIT", Kind::choice, {"auto", "off"}},
    {"FLASHCPP_MLA_SPLIT", Kind::choice, {"auto", "always", "off"}},
    {"FLASHCPP_RETRIES", Kind::integer, {}, 0, 100},
    {"FLASHCPP_JIT_JOBS", Kind::integer, {}, 0, 4096},
    {"FLASHCPP_CACHE_SHARED", Kind::choice, {"0", "1"}},
    {"FLASHCPP_CONNECT_TIMEOUT", Kind::seconds, {}, 0, 86400},
    {"FLASHCPP_STALL_TIMEOUT", Kind::seconds, {}, 0, 86400},
    {"FLASHCPP_DOWNLOAD_DEADLINE", Kind::seconds, {}, 0, 86400},
    {"FLASHCPP_MIN_RATE_TIME", Kind::seconds, {}, 0, 86400},
    {"FLASHCPP_LOCK_TIMEOUT", Kind::seconds, {}, 0, 86400},
    {"FLASHCPP_MIN_RATE", Kind::bytes, {}, 0, 0x1p50},
    {"FLASHCPP_MAX_WHEEL_BYTES", Kind::bytes, {}, 1, 0x1p50},
    {"FLASHCPP_MIN_FREE_BYTES", Kind::bytes, {}, 0, 0x1p50},
    {"FLASHCPP_MAX_EXTRACT_BYTES", Kind::bytes, {}, 1, 0x1p50},
    {"FLASHCPP_MAX_COMPRESSION_RATIO", Kind::number, {}, 1, 1e6},
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

namespace {
// A real-valued setting: seconds lie in (lo, hi], other numbers in [lo, hi]; NaN is never in range.
std::optional<double> real(const char* name, Kind kind) {
  const Rule& r = rule(name, kind);
  const auto v = get(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  const bool above_lo = kind == Kind::seconds ? d > r.lo : d >= r.lo;
  if (end == v->c_str() || *end != '\0' || !above_lo || !(d <= r.hi))
    fail(r,
         kind == Kind::seconds ? "a number of seconds in (" + integer_text(r.lo) + ", " + integer_text(r.hi) + "]"
                               : "a number in [" + integer_text(r.lo) + ", " + std::to_string(r.hi) + "]",
         *v);
  return d;
}
}  // namespace

std::optional<double> seconds(const char* name) { return real(name, Kind::seconds); }

std::optional<double> number(const char* name) { return real(name, Kind::number); }

std::optional<std::uint64_t> bytes(const char* name) {
  const Rule& r = rule(name, Kind::bytes);
  const auto v = get(name);
  if (!v) return std::nullopt;
  const auto lo = static_cast<std::uint64_t>(r.lo), hi = static_cast<std::uint64_t>(r.hi);
  const auto bad = [&] { fail(r, "a byte count in [" + std::to_string(lo) + ", 2^50], optionally with a K/M/G/T suffix", *v); };
  std::uint64_t n = 0;
  size_t i = 0;
  for (; i < v->size() && (*v)[i] >= '0' && (*v)[i] <= '9'; ++i) {
    n = n * 10 + static_cast<std::uint64_t>((*v)[i] - '0');
    if (n > hi) bad();
  }
  if (i == 0) bad();
  int shift = 0;
  if (i + 1 == v->size()) {
    switch ((*v)[i]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      default: bad();
    }
  } else if (i != v->size()) {
    bad();
  }
  if (n > (hi >> shift)) bad();
  n <<= shift;
  if (n < lo) bad();
  return n;
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
        case Kind::number: (void)number(r.name); break;
        case Kind::bytes: (void)bytes(r.name); break;
        case Kind::directory: (void)directory(r.name); break;
      }
    } catch (const Error& e) {
      out.push_back(e.message());
    }
  }
  return out;
}

}  // namespace flashcpp::env
