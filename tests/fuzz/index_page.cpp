// Fuzzes the PEP 503 project-page parser: any page yields the wheel's URL, nothing, or integrity_error (the page
// lists the pinned file with another sha256); no other exception, no sanitizer report.
// Input: the first line is the URL the page was served from (what relative links resolve against), the rest the page.
#include <cstdint>
#include <cstdlib>

#include "artifacts/internal.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  using namespace flashcpp;
  static const artifacts::WheelPin pin = [] {
    artifacts::WheelPin p;
    p.name = "apache_tvm_ffi";
    p.filename = "demo_pkg-1.0-py3-none-any.whl";
    p.sha256 = std::string(64, 'a');
    p.project = "demo-pkg";
    return p;
  }();
  const std::string page = "https://index.example/simple/demo-pkg/";
  const std::string input(fuzz::as_text(data, size));
  const size_t nl = input.find('\n');
  const std::string base = nl == std::string::npos ? page : input.substr(0, nl);
  const std::string html = nl == std::string::npos ? input : input.substr(nl + 1);
  try {
    (void)artifacts::detail::find_wheel_in_index(html, page, base, pin);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::integrity_error) std::abort();
  }
  return 0;
}
