/* A shared object whose constructor leaves a marker file (the path in FLASHCPP_TEST_MARKER): the trust tests
   show that a refused load never ran any of its code, and that a trusted one does. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void leave_marker(void) {
  const char* path = getenv("FLASHCPP_TEST_MARKER");
  if (!path || !*path) return;
  FILE* f = fopen(path, "w");
  if (f) {
    fputs("constructor ran\n", f);
    fclose(f);
  }
}

int flashcpp_marker_module_answer(void) { return 42; }
