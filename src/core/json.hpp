// JSON from a file a user names, parsed one way: through read_config_file (core/config_file.hpp), with a nesting
// limit. nlohmann-json's parser itself is iterative, but a value nested 100,000 deep still exhausts the stack where it
// is copied or printed; a config or manifest needs a few levels.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/config_file.hpp"
#include "flashcpp/error.hpp"

namespace flashcpp {

inline constexpr int kMaxJsonDepth = 64;

/// `text` as JSON, arrays and objects nested at most `max_depth` deep: invalid_argument naming `what` otherwise (the
/// parse stops at the first level too deep, before anything deeper is built), and for text that is not JSON.
inline nlohmann::json parse_json(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth) {
  struct TooDeep {};
  const auto limit = [max_depth](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    using E = nlohmann::json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= max_depth) throw TooDeep{};
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), limit);
  } catch (const TooDeep&) {
    throw_error(ErrorCode::invalid_argument, std::string(what) + " nests arrays and objects more than " +
                                                 std::to_string(max_depth) + " levels deep");
  } catch (const nlohmann::json::exception& e) {
    throw_error(ErrorCode::invalid_argument, std::string(what) + " is not valid JSON: " + e.what());
  }
}

/// A JSON file: read_config_file's rules (a regular file, at most limits.max_bytes, within the deadline), then
/// parse_json's. Messages name `what` and the file.
inline nlohmann::json load_json_file(const std::filesystem::path& file, std::string_view what,
                                     const ConfigFileLimits& limits = {}) {
  return parse_json(read_config_file(file, what, limits), std::string(what) + " '" + file.string() + "'");
}

}  // namespace flashcpp
