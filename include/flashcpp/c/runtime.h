/* flashcpp C ABI: module acquisition that a caller can see and control (the default runtime's log, and
 * preparing modules up front). */
#ifndef FLASHCPP_C_RUNTIME_H_
#define FLASHCPP_C_RUNTIME_H_
#include <stdint.h>

#include "flashcpp/c/common.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum flashcpp_log_level {
  FLASHCPP_LOG_INFO = 1,  /* each download, extraction and build started and finished, each module found */
  FLASHCPP_LOG_DEBUG = 2  /* also download progress and every build step */
} flashcpp_log_level;

/* Receives one line (NUL-terminated, valid only during the call) with its flashcpp_log_level and the `user` pointer
 * given to flashcpp_set_log_callback. Called one line at a time, from the thread whose call fetched or built a module
 * (or the module builder's threads); it must not call flashcpp functions. */
typedef void (*flashcpp_log_fn)(int32_t level, const char* message, void* user);

/* Routes the module-acquisition lines of the C ABI's runtime (and of every C++ Runtime without its own log) to `fn`,
 * at every level; it may be set before or after the first op call. `fn` NULL removes it: then FLASHCPP_LOG (off,
 * info or debug) decides what is printed to stderr. Always FLASHCPP_SUCCESS. */
flashcpp_status flashcpp_set_log_callback(flashcpp_log_fn fn, void* user);

/* Fetches or builds and loads the `count` named modules (FlashInfer module names) in the C ABI's runtime now,
 * reporting through the log, so the first op calls find them loaded (Runtime::prepare). Validated: `uris` non-NULL
 * when count > 0, count >= 0, every entry non-NULL and a name of [A-Za-z0-9_.-] without ".."
 * (FLASHCPP_INVALID_ARGUMENT, nothing fetched). Stops at the first module that cannot be had (FLASHCPP_NOT_FOUND,
 * FLASHCPP_IO_ERROR, FLASHCPP_NETWORK_ERROR, FLASHCPP_INTEGRITY_ERROR or FLASHCPP_UNTRUSTED; flashcpp_last_error() names it and what to do). */
flashcpp_status flashcpp_prepare(const char* const* uris, int32_t count);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCPP_C_RUNTIME_H_ */
