// The one way a command-line value is read: every option of every command is added through these helpers, which
// attach a CLI11 Validator that checks the text strictly and names the rule in the usage error (exit status 2):
//   integers  decimal digits with an optional '-' (signed types only): no empty string, no '+', spaces, hex or octal,
//             no overflow, within [lo, hi] or one of a set;
//   reals     a finite decimal number within its range;
//   words     one of a fixed set; texts (paths, names, filters) not empty.
// CLI11's own checks are looser (an empty value skips IsMember and converts to 0; "-5" reads as 2^64 - 5 for an
// unsigned option; strtoll's base 0 reads "010" as 8), so an integer's validator is a transform that also rewrites the
// accepted text to its canonical decimal form before CLI11 converts it (a check may not modify the text).
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace flashcpp::cli {

namespace detail {
template <class T>
std::optional<T> parse_integer(std::string_view s) {
  T v{};
  if (s.empty() || s.front() == '+') return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);  // base 10; '-' only for signed T
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}
inline std::optional<double> parse_real(std::string_view s) {
  double v = 0;
  if (s.empty() || s.front() == '+') return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}
template <class T>
std::string join(const std::vector<T>& values) {
  std::string out;
  for (const T& v : values) {
    if (!out.empty()) out += ", ";
    if constexpr (std::is_arithmetic_v<T>) out += std::to_string(v);
    else out += v;
  }
  return out;
}
inline std::string got(const std::string& s) { return "; got '" + s + "'"; }
}  // namespace detail

/// Decimal integers in [lo, hi].
template <class T>
CLI::Validator integer_in(T lo, T hi) {
  static_assert(std::is_integral_v<T>);
  const std::string rule = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        const auto v = detail::parse_integer<T>(s);
        if (!v || *v < lo || *v > hi) return "must be " + rule + detail::got(s);
        s = std::to_string(*v);
        return {};
      },
      "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}
/// Decimal integers of a set.
template <class T>
CLI::Validator integer_of(std::vector<T> allowed) {
  static_assert(std::is_integral_v<T>);
  const std::string set = detail::join(allowed);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        const auto v = detail::parse_integer<T>(s);
        for (const T& a : allowed)
          if (v && *v == a) {
            s = std::to_string(*v);
            return {};
          }
        return "must be one of " + set + detail::got(s);
      },
      "{" + set + "}");
}
/// Finite reals in (lo, hi] (`lo_open`) or [lo, hi].
inline CLI::Validator real_in(double lo, double hi, bool lo_open = false) {
  const auto number = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  const std::string rule = std::string("a finite number in ") + (lo_open ? "(" : "[") + number(lo) + ", " + number(hi) + "]";
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        const auto v = detail::parse_real(s);
        if (!v || (lo_open ? *v <= lo : *v < lo) || *v > hi) return "must be " + rule + detail::got(s);
        return {};
      },
      std::string(lo_open ? "(" : "[") + number(lo) + ", " + number(hi) + "]");
}
/// Words of a set (exact, case-sensitive).
inline CLI::Validator word_of(std::vector<std::string> allowed) {
  const std::string set = detail::join(allowed);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        for (const auto& a : allowed)
          if (s == a) return {};
        return "must be one of " + set + detail::got(s);
      },
      "{" + set + "}");
}
/// Any text but the empty one (paths, module names, filters).
inline CLI::Validator non_empty() {
  return CLI::Validator([](std::string& s) -> std::string { return s.empty() ? "must not be empty" : ""; }, "");
}

/// An integer option (one value, or a list of them: each value checked) in [lo, hi].
template <class V, class T>
CLI::Option* add_integer(CLI::App& cmd, const std::string& name, V& value, const std::string& help, T lo, T hi) {
  return cmd.add_option(name, value, help)->transform(integer_in<T>(lo, hi));  // transform: it may rewrite the text
}
/// An integer option whose value is one of `allowed`.
template <class V, class T>
CLI::Option* add_integer_of(CLI::App& cmd, const std::string& name, V& value, const std::string& help,
                            std::vector<T> allowed) {
  return cmd.add_option(name, value, help)->transform(integer_of<T>(std::move(allowed)));
}
/// A real option in (lo, hi] (lo_open) or [lo, hi].
inline CLI::Option* add_real(CLI::App& cmd, const std::string& name, double& value, const std::string& help, double lo,
                             double hi, bool lo_open = false) {
  return cmd.add_option(name, value, help)->check(real_in(lo, hi, lo_open));
}
/// A word option whose value is one of `allowed`.
inline CLI::Option* add_word(CLI::App& cmd, const std::string& name, std::string& value, const std::string& help,
                             std::vector<std::string> allowed) {
  return cmd.add_option(name, value, help)->check(word_of(std::move(allowed)));
}
/// A text option (one value or a list): not empty.
template <class V>
CLI::Option* add_text(CLI::App& cmd, const std::string& name, V& value, const std::string& help) {
  return cmd.add_option(name, value, help)->check(non_empty());
}

}  // namespace flashcpp::cli
