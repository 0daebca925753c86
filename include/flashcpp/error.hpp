// flashcpp errors: one exception type carrying a category and a message that says what and why.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace flashcpp {

/// What kind of failure an Error reports. Stable: the C ABI maps these to status codes.
enum class ErrorCode : int {
  invalid_argument = 1,  ///< a caller's argument broke a documented rule (names the argument and the rule)
  unsupported = 2,       ///< valid request the current device/build cannot serve (e.g. non-SM90 GPU)
  not_found = 3,         ///< a module, function, file or artifact is missing
  cuda_error = 4,        ///< the CUDA runtime reported an error
  ffi_error = 5,         ///< a TVM-FFI callee raised an error (kind and message kept)
  io_error = 6,          ///< a file-system operation failed
  network_error = 7,     ///< a download failed (HTTP status, timeout, connection)
  integrity_error = 8,   ///< bytes did not match their pinned SHA-256 or size
  internal = 9,          ///< a flashcpp invariant was broken (a bug)
  untrusted = 10,        ///< a library or module refused before loading: another user could have replaced it, or
                         ///< its bytes differ from those recorded when flashcpp extracted or built it
};

std::string_view to_string(ErrorCode code) noexcept;

/// The one exception type flashcpp throws. `what()` is "<category>: <message>".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message);
  ErrorCode code() const noexcept { return code_; }
  /// The message without the category prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

/// A callee's error decoded from TVM-FFI: kind (e.g. "TypeError", "ValueError"), message, backtrace.
class FfiError : public Error {
 public:
  FfiError(std::string kind, std::string message, std::string backtrace);
  const std::string& kind() const noexcept { return kind_; }
  const std::string& ffi_message() const noexcept { return ffi_message_; }
  const std::string& backtrace() const noexcept { return backtrace_; }

 private:
  std::string kind_, ffi_message_, backtrace_;
};

[[noreturn]] void throw_error(ErrorCode code, std::string message);

}  // namespace flashcpp
