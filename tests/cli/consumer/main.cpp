// A program outside the flashcpp tree that finds the installed package with find_package(flashcpp): the C++ and
// C APIs, DLPack in, the versions, and a Runtime that loads the libtvm_ffi installed beside libflashcpp.
#include <flashcpp/flashcpp.h>
#include <flashcpp/flashcpp.hpp>

#include <cstdio>
#include <cstring>

int main() {
  // Through the installed <dlpack/dlpack.h>: bf16 [0, 4] on the CPU.
  int64_t shape[2] = {0, 4};
  DLTensor dl{};
  dl.device = {kDLCPU, 0};
  dl.ndim = 2;
  dl.dtype = {kDLBfloat, 16, 1};
  dl.shape = shape;
  const auto t = flashcpp::TensorView::from_dlpack(dl);
  const std::string d = t.describe();
  std::printf("%s, C ABI version %u\n", d.c_str(), flashcpp_abi_version());
  std::printf("version: %s\n", flashcpp::version_string());
  const auto rt = flashcpp::Runtime::create();
  std::printf("libtvm_ffi: %s (%s)\n", rt->tvm_ffi_library().c_str(), rt->tvm_ffi_version().c_str());
  const bool same_line = std::strcmp(flashcpp::version_string(), flashcpp_version()) == 0;
  return d == "bf16[0, 4] cpu" && flashcpp_abi_version() == FLASHCPP_C_ABI_VERSION &&
                 flashcpp::version().c_abi == FLASHCPP_C_ABI_VERSION && same_line
             ? 0
             : 1;
}
