/* The checks of the tests written in C (compiled as C): in a function `int f(char* msg, size_t msg_len)` that returns
 * 0 on success, CHECK returns the failing line with a message in `msg`; CHECK_ERROR checks a call's status and that
 * flashcpp_last_error() contains `text`. */
#ifndef FLASHCPP_TESTS_SUPPORT_C_CHECK_H_
#define FLASHCPP_TESTS_SUPPORT_C_CHECK_H_
#include <stdio.h>
#include <string.h>

#include "flashcpp/flashcpp.h"

#define CHECK(cond, ...)                   \
  do {                                     \
    if (!(cond)) {                         \
      snprintf(msg, msg_len, __VA_ARGS__); \
      return __LINE__;                     \
    }                                      \
  } while (0)

#define CHECK_ERROR(status, want, text)                                                                 \
  do {                                                                                                  \
    flashcpp_status s_ = (status);                                                                      \
    CHECK(s_ == (want), "%s: got status %d (%s), want %d; last error: %s", #status, (int)s_,          \
          flashcpp_status_name(s_), (int)(want), flashcpp_last_error());                               \
    CHECK(strstr(flashcpp_last_error(), (text)) != NULL, "%s: last error \"%s\" lacks \"%s\"", #status, \
          flashcpp_last_error(), (text));                                                               \
  } while (0)

#endif /* FLASHCPP_TESTS_SUPPORT_C_CHECK_H_ */
