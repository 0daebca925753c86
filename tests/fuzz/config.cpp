// Fuzzes the configuration parsers: the FLASHCPP_* environment table (core/env) and the pip configuration file,
// through Settings::from_env and env::problems: any values give a Settings or invalid_argument naming the variable.
// Input: NUL-separated parts; the first is the pip.conf text, the next ones the values of kVariables in order.
#include <cstdint>
#include <cstdlib>

#include "core/env.hpp"
#include "flashcpp/artifacts.hpp"
#include "flashcpp/error.hpp"
#include "fuzz_support.hpp"

namespace {
const char* const kVariables[] = {
    "FLASHCPP_RETRIES",        "FLASHCPP_CONNECT_TIMEOUT", "FLASHCPP_MIN_RATE",          "FLASHCPP_MAX_COMPRESSION_RATIO",
    "FLASHCPP_OFFLINE",        "FLASHCPP_JIT",             "FLASHCPP_DOWNLOAD_DEADLINE", "FLASHCPP_MAX_WHEEL_BYTES",
    "FLASHCPP_JIT_JOBS",       "FLASHCPP_LOCK_TIMEOUT",    "FLASHCPP_MIN_FREE_BYTES",    "FLASHCPP_MAX_EXTRACT_BYTES",
    "FLASHCPP_STALL_TIMEOUT",  "FLASHCPP_MIN_RATE_TIME",   "FLASHCPP_CACHE_SHARED",      "FLASHCPP_MLA_FP8_KERNEL",
    "FLASHCPP_PYTHON_PREFIXES"};
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto& dir = flashcpp::fuzz::scratch_dir();
  ::setenv("HOME", dir.c_str(), 1);
  ::setenv("FLASHCPP_CACHE_DIR", (dir / "cache").c_str(), 1);
  ::setenv("PIP_CONFIG_FILE", (dir / "pip.conf").c_str(), 1);
  ::setenv("XDG_CONFIG_HOME", (dir / "xdg").c_str(), 1);
  ::setenv("XDG_CONFIG_DIRS", (dir / "xdg-dirs").c_str(), 1);
  for (const char* v : {"FLASHCPP_INDEX_URL", "PIP_INDEX_URL", "VIRTUAL_ENV", "CONDA_PREFIX", "FLASHCPP_MANIFEST"})
    ::unsetenv(v);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  using namespace flashcpp;
  const std::string_view input = fuzz::as_text(data, size);
  size_t start = 0, part = 0;
  for (const char* v : kVariables) ::unsetenv(v);
  while (start <= input.size()) {
    size_t end = input.find('\0', start);
    if (end == std::string_view::npos) end = input.size();
    const std::string value(input.substr(start, end - start));
    if (part == 0)
      fuzz::write_file(fuzz::scratch_dir() / "pip.conf", value);
    else if (part - 1 < std::size(kVariables))
      ::setenv(kVariables[part - 1], value.c_str(), 1);
    ++part, start = end + 1;
  }
  try {
    const artifacts::Settings cfg = artifacts::Settings::from_env();
    if (cfg.max_retries < 0 || !(cfg.connect_timeout_s > 0)) std::abort();  // parsed values obey the table
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument) std::abort();
  }
  (void)env::problems();
  return 0;
}
