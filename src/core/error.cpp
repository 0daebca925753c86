#include "flashcpp/error.hpp"

namespace flashcpp {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::not_found: return "not found";
    case ErrorCode::cuda_error: return "CUDA error";
    case ErrorCode::ffi_error: return "FFI error";
    case ErrorCode::io_error: return "I/O error";
    case ErrorCode::network_error: return "network error";
    case ErrorCode::integrity_error: return "integrity error";
    case ErrorCode::internal: return "internal error";
    case ErrorCode::untrusted: return "untrusted file";
  }
  return "error";
}

Error::Error(ErrorCode code, std::string message)
    : std::runtime_error(std::string(to_string(code)) + ": " + message), code_(code), message_(std::move(message)) {}

FfiError::FfiError(std::string kind, std::string message, std::string backtrace)
    : Error(ErrorCode::ffi_error, kind + ": " + message),
      kind_(std::move(kind)),
      ffi_message_(std::move(message)),
      backtrace_(std::move(backtrace)) {}

void throw_error(ErrorCode code, std::string message) { throw Error(code, std::move(message)); }

}  // namespace flashcpp
