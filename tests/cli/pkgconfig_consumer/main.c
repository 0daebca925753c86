/* A C program built with `pkg-config --cflags --libs flashcpp` against an installed (and moved) prefix. */
#include <flashcpp/flashcpp.h>
#include <stdio.h>

int main(void) {
  printf("pkg-config consumer: %s, C ABI %u\n", flashcpp_version(), flashcpp_abi_version());
  return flashcpp_abi_version() == FLASHCPP_C_ABI_VERSION ? 0 : 1;
}
