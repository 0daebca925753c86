// Fuzzes the module URI parser (jit::parse_uri): any string parses to the spec that spells it back exactly, or
// to nothing; no exception, no sanitizer report.
#include <cstdint>
#include <cstdlib>

#include "fuzz_support.hpp"
#include "jit/jit.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  const std::string uri(flashcpp::fuzz::as_text(data, size));
  const auto spec = flashcpp::jit::parse_uri(uri);
  if (spec && spec->uri() != uri) std::abort();
  return 0;
}
