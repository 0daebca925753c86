// C ABI of module acquisition: the process-wide log callback and Runtime::prepare on the default runtime.
#include <string>
#include <vector>

#include "capi/capi.hpp"
#include "flashcpp/c/runtime.h"
#include "runtime/runtime_internal.hpp"

using namespace flashcpp;

extern "C" {

flashcpp_status flashcpp_set_log_callback(flashcpp_log_fn fn, void* user) {
  return capi::guard([&] {
    if (fn == nullptr) return set_process_log({});
    set_process_log([fn, user](LogLevel level, const std::string& line) {
      fn(static_cast<int32_t>(level), line.c_str(), user);
    });
  });
}

flashcpp_status flashcpp_prepare(const char* const* uris, int32_t count) {
  return capi::guard([&] {
    if (count < 0)
      throw Error(ErrorCode::invalid_argument, "flashcpp_prepare: argument 'count' must be >= 0; got " + std::to_string(count));
    if (count > 0 && uris == nullptr)
      throw Error(ErrorCode::invalid_argument, "flashcpp_prepare: argument 'uris' must not be NULL when 'count' > 0");
    std::vector<std::string> list;
    for (int32_t i = 0; i < count; ++i) {
      if (uris[i] == nullptr)
        throw Error(ErrorCode::invalid_argument, "flashcpp_prepare: argument 'uris[" + std::to_string(i) + "]' must not be NULL");
      list.emplace_back(uris[i]);
    }
    capi::default_runtime()->prepare(list);
  });
}

}  // extern "C"
