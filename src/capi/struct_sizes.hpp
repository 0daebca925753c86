// The one reading of a size-prefixed C struct (common.h: a MINOR release may append fields to a struct that
// begins with its own size). A caller compiled against an older header passes a smaller struct_size; this
// library accepts any struct_size from the struct's first published size up to its own sizeof, reads only the
// caller's bytes and takes every field past them from the struct's *_INIT initializer.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "flashcpp/c/common.h"
#include "flashcpp/error.hpp"

#pragma GCC visibility push(hidden)
namespace flashcpp::capi {

/// What the library knows of a size-prefixed C struct T: `first`, its size in the first release that had it
/// (the smallest struct_size accepted), `current` = sizeof(T) (the largest), `init` the initializer's name for
/// messages and `defaults()` its value (what fields past a caller's struct_size read as). Specialised once per
/// struct, in capi.hpp's table (FLASHCPP_CAPI_STRUCT_SIZES); a struct without an entry does not compile.
template <class T>
struct struct_sizes;

/// Throws invalid_argument naming `name`, the struct_size received and the accepted range [first, current]
/// unless first <= struct_size <= current (a size above the library's also names the library's C ABI version).
inline void require_struct_size(uint32_t struct_size, size_t first, size_t current, const char* op, const char* name,
                                const char* init) {
  if (struct_size >= first && struct_size <= current) return;
  const std::string range = "[" + std::to_string(first) + ", " + std::to_string(current) + "]";
  std::string why = std::string(op) + ": argument '" + name + "' has struct_size " + std::to_string(struct_size) + "; ";
  if (struct_size > current)
    why += "this library (C ABI " + std::to_string(FLASHCPP_C_ABI_VERSION_MAJOR) + "." +
           std::to_string(FLASHCPP_C_ABI_VERSION_MINOR) + "." + std::to_string(FLASHCPP_C_ABI_VERSION_PATCH) +
           ") knows sizes up to " + std::to_string(current) + ": struct_size must be in " + range +
           " (a caller built against a newer header needs a library at least as new)";
  else
    why += "it is smaller than the struct's first published size: struct_size must be in " + range;
  throw Error(ErrorCode::invalid_argument, why + " (start from " + init + ")");
}

/// A size-prefixed struct argument, checked and read: non-NULL, struct_size within struct_sizes<T>'s range, and
/// a copy of it in which the first min(struct_size, sizeof(T)) bytes are the caller's and the rest the
/// initializer's defaults (struct_size set to sizeof(T)). Nothing past the caller's struct_size is read. A size
/// between two published sizes (no header produces one) is read the same way: the caller's bytes, then defaults.
template <class T>
T read_struct(const T* s, const char* op, const char* name) {
  using Sizes = struct_sizes<T>;
  static_assert(Sizes::first >= sizeof(uint32_t) && Sizes::first <= Sizes::current && Sizes::current == sizeof(T),
                "a struct's first published size lies in [sizeof(struct_size), sizeof]");
  if (s == nullptr) throw Error(ErrorCode::invalid_argument, std::string(op) + ": argument '" + name + "' must not be NULL");
  uint32_t size = 0;
  std::memcpy(&size, s, sizeof size);  // struct_size, the first member: never more than a caller's struct holds
  require_struct_size(size, Sizes::first, Sizes::current, op, name, Sizes::init);
  T local = Sizes::defaults();
  std::memcpy(static_cast<void*>(&local), static_cast<const void*>(s), std::min<size_t>(size, sizeof(T)));
  local.struct_size = static_cast<uint32_t>(sizeof(T));
  return local;
}

}  // namespace flashcpp::capi
#pragma GCC visibility pop

/// One entry of the table: struct T, its first published size (an expression; sizeof(T) for a struct that
/// never grew) and its *_INIT initializer.
#define FLASHCPP_CAPI_STRUCT_SIZES(T, FIRST, INIT)                     \
  template <>                                                          \
  struct flashcpp::capi::struct_sizes<T> {                             \
    static constexpr size_t first = (FIRST);                           \
    static constexpr size_t current = sizeof(T);                       \
    static constexpr const char* init = #INIT;                         \
    static T defaults() { return T INIT; }                             \
  }
