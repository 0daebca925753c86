// Fuzzes the template renderer (the Jinja2 subset of FlashInfer's .jinja files): any text renders or gives
// invalid_argument naming the construct; no other exception, no sanitizer report.
#include <cstdint>
#include <cstdlib>

#include "fuzz_support.hpp"
#include "jit/jit.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  using namespace flashcpp;
  static const std::map<std::string, std::string> vars = {
      {"dtype_q", "nv_bfloat16"}, {"head_dim_qk", "128"}, {"use_sliding_window", "false"}, {"empty", ""}};
  try {
    (void)jit::render_template(fuzz::as_text(data, size), vars, "fuzz.jinja");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument) std::abort();
  }
  return 0;
}
