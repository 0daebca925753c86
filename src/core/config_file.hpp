// Small configuration files read from a path a user names (a model's config.json, FLASHCPP_MANIFEST, pip.conf): one
// way to read them, so none can hang a command (a FIFO, a device) or exhaust memory (a huge or endless file).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace flashcpp {

struct ConfigFileLimits {
  std::uint64_t max_bytes = std::uint64_t{16} << 20;  ///< larger files are refused (configs are kilobytes)
  double deadline_s = 10;                             ///< the whole read, checked between reads
};

/// The bytes of `file` (symbolic links followed). It is opened non-blocking, so a FIFO or a device cannot block the
/// open, and must then be a regular file (fstat) of at most limits.max_bytes, read whole within limits.deadline_s.
/// Errors name `what` and the file: not_found when it does not exist, invalid_argument when it is not a regular file
/// or is too large, io_error when it cannot be read or the deadline passes.
std::string read_config_file(const std::filesystem::path& file, std::string_view what, const ConfigFileLimits& limits = {});

}  // namespace flashcpp
