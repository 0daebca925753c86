// A program outside the flashcpp tree that finds the installed package with find_package(flashcpp).
#include <flashcpp/flashcpp.h>
#include <flashcpp/flashcpp.hpp>

#include <cstdio>
#include <cstring>

int main() {
  const auto t = flashcpp::TensorView::contiguous(nullptr, flashcpp::DType::bf16, flashcpp::Device::cpu(), {0, 4});
  const std::string d = t.describe();
  std::printf("%s, C ABI version %u\n", d.c_str(), flashcpp_abi_version());
  return d == "bf16[0, 4] cpu" && flashcpp_abi_version() == FLASHCPP_C_ABI_VERSION ? 0 : 1;
}
