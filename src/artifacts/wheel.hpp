// Internal: wheel extraction that reports a missing member instead of throwing.
#pragma once
#include <filesystem>
#include <string_view>

#include "flashcpp/artifacts.hpp"

namespace flashcpp::artifacts::detail {
/// As extract_from_wheel, but returns false (nothing written) when no member matches `prefix`.
bool try_extract_from_wheel(const Settings& cfg, const std::filesystem::path& wheel, std::string_view prefix,
                            const std::filesystem::path& dest_root, std::filesystem::path& out_path);
/// True when `target` was published by an extraction: a directory, or a file whose SHA-256 record
/// (ffi/trust.hpp) matches. Throws Error(untrusted) for a file that differs from its record.
bool extracted_member_ready(const std::filesystem::path& target);
}  // namespace flashcpp::artifacts::detail
