// GGUF (version 2 and 3) reader for flashcpp-llm. The file is untrusted input: every offset, count, string
// length, array length and tensor extent is checked against the file's size before it is used, and a broken
// rule throws flashcpp::Error(invalid_argument) naming the field ("gguf: tensor 'blk.0.attn_q.weight': data
// [offset 1234, 5678 bytes] runs past the end of the file (4096 bytes)"). Nothing is read out of bounds,
// whatever the bytes.
//
// Layout (little-endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv_count metadata entries
// (string key, u32 value type, value), tensor_count tensor infos (string name, u32 n_dims, u64 ne[n_dims],
// u32 ggml type, u64 offset), padding to general.alignment (default 32), then the data section. Strings are
// u64 length + bytes (not NUL-terminated). ne[0] is the contiguous dimension (a [rows, cols] PyTorch weight
// is ne = {cols, rows}).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace flashcpp::llm {

/// ggml tensor types this reader knows (their numeric ids are ggml's).
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q8_0 = 8, bf16 = 30 };

/// "f32", "q4_1", ...; "type <id>" for an id the reader does not know.
std::string ggml_type_name(uint32_t type);

/// Bytes of `n` elements of `type` (n a multiple of the type's block size, else invalid_argument naming `what`).
uint64_t ggml_bytes(GgmlType type, uint64_t n, std::string_view what);

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;  ///< ne[0] contiguous; 1..4 dims
  GgmlType type = GgmlType::f32;
  uint64_t offset = 0;       ///< from the start of the data section, a multiple of the alignment
  uint64_t nbytes = 0;       ///< ggml_bytes(type, product of ne)
  uint64_t elements() const;
};

/// One metadata value: a scalar, a string, or an array of one element type (nested arrays are refused).
struct GgufValue {
  using Array = std::variant<std::vector<uint64_t>, std::vector<int64_t>, std::vector<double>, std::vector<bool>,
                             std::vector<std::string>>;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;
  uint32_t type = 0;  ///< GGUF value type id of the scalar (or of the array's elements)
  bool is_array = false;
};

class GgufFile {
 public:
  /// Reads and validates the whole header of `path`; the tensor data is memory-mapped (read-only) and checked
  /// to lie inside the file. io_error when the file cannot be opened or mapped.
  static GgufFile open(const std::string& path);
  /// The same from bytes in memory (tests, the fuzz harness). The bytes are copied.
  static GgufFile parse(std::span<const uint8_t> bytes);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  uint32_t version() const;
  uint64_t alignment() const;

  bool has(std::string_view key) const;
  /// Typed getters: not_found naming the key when absent, invalid_argument naming the key, the type found and
  /// the type wanted when it does not convert. Integers convert between widths and signedness only when the
  /// value fits; floats accept f32 and f64.
  uint64_t get_uint(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  const GgufValue* find(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const;
  /// not_found naming the tensor when absent.
  const GgufTensorInfo& tensor(std::string_view name) const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  /// The tensor's nbytes bytes (inside the file: checked when the file was opened).
  std::span<const uint8_t> tensor_data(const GgufTensorInfo& t) const;

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashcpp::llm
