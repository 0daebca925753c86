// Test wheels: zip files written with libzip, members stored (uncompressed) so sizes are predictable, unless
// a member asks for deflate.
#pragma once
#include <sys/stat.h>
#include <zip.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "artifacts/internal.hpp"

namespace flashcpp::testing {

struct WheelMember {
  std::string name;
  std::string data;
  bool symlink = false;
  bool deflate = false;  ///< compressed (a zip bomb); stored otherwise
};

inline std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const auto v = rng();
    for (size_t j = 0; j < 8 && i + j < n; ++j) s[i + j] = static_cast<char>(v >> (8 * j));
  }
  return s;
}

/// Writes a wheel and returns its bytes.
inline std::string make_wheel(const std::filesystem::path& file, const std::vector<WheelMember>& members) {
  int err = 0;
  zip_t* z = zip_open(file.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  if (!z) throw std::runtime_error("make_wheel: zip_open failed");
  for (const auto& m : members) {
    zip_source_t* src = zip_source_buffer(z, m.data.data(), m.data.size(), 0);
    const zip_int64_t idx = zip_file_add(z, m.name.c_str(), src, ZIP_FL_ENC_UTF_8 | ZIP_FL_OVERWRITE);
    if (idx < 0) {
      zip_source_free(src);
      zip_discard(z);
      throw std::runtime_error("make_wheel: zip_file_add failed for " + m.name);
    }
    zip_set_file_compression(z, static_cast<zip_uint64_t>(idx), m.deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, m.deflate ? 9 : 0);
    const zip_uint32_t mode = m.symlink ? (S_IFLNK | 0777) : (S_IFREG | 0644);
    zip_file_set_external_attributes(z, static_cast<zip_uint64_t>(idx), 0, ZIP_OPSYS_UNIX, mode << 16);
  }
  if (zip_close(z) != 0) {
    zip_discard(z);
    throw std::runtime_error("make_wheel: zip_close failed");
  }
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::string sha256_hex(const std::string& data) {
  artifacts::detail::Sha256 h;
  h.update(data.data(), data.size());
  return h.hex_digest();
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace flashcpp::testing
