// flashcpp's environment variables, parsed strictly: a value outside a variable's documented form is an
// invalid_argument error naming the variable, the accepted values and what was received, never a silent default.
// The rules live in one table (env.cpp), so every layer and `flashcpp doctor` apply the same ones.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace flashcpp::env {

/// The value of `name` when set and non-empty (no rule applied).
std::optional<std::string> get(const char* name);
/// A variable with a fixed set of values (FLASHCPP_JIT, FLASHCPP_MLA_FP8_KERNEL, ...): nullopt when unset or empty.
std::optional<std::string> choice(const char* name);
/// A 0/1 switch (FLASHCPP_OFFLINE, FLASHCPP_NO_BUILD_DEPS, ...): `fallback` when unset or empty.
bool flag(const char* name, bool fallback = false);
/// An integer within the variable's range (FLASHCPP_RETRIES, FLASHCPP_JIT_JOBS).
std::optional<long> integer(const char* name);
/// A positive number of seconds within the variable's range (FLASHCPP_CONNECT_TIMEOUT, FLASHCPP_STALL_TIMEOUT).
std::optional<double> seconds(const char* name);
/// A number within the variable's range (FLASHCPP_MAX_COMPRESSION_RATIO).
std::optional<double> number(const char* name);
/// A byte count within the variable's range, digits with an optional binary suffix K, M, G or T
/// (FLASHCPP_MIN_RATE, FLASHCPP_MAX_WHEEL_BYTES, ...).
std::optional<std::uint64_t> bytes(const char* name);
/// A directory (FLASHCPP_CACHE_DIR): may not exist yet, but must not name a file or anything else.
std::optional<std::filesystem::path> directory(const char* name);

/// Every variable in the table that breaks its rule, one message each (what `flashcpp doctor` reports).
std::vector<std::string> problems();

}  // namespace flashcpp::env
