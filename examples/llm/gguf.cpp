// GGUF reader (gguf.hpp). Every read goes through Reader, which checks the bytes it needs against the file's
// size first; every count is bounded by the bytes left before anything is allocated for it, so a hostile header
// can neither read out of bounds nor make the reader allocate more than a small multiple of the file's size.
#include "gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>

#include "flashcpp/error.hpp"

static_assert(std::endian::native == std::endian::little, "the GGUF reader reads little-endian fields in place");

namespace flashcpp::llm {
namespace {

[[noreturn]] void fail(std::string message) {
  throw_error(ErrorCode::invalid_argument, "gguf: " + std::move(message));
}

// GGUF value type ids (ggml's gguf_type).
enum ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12,
};

std::string value_type_name(uint32_t type) {
  static const char* const names[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
  if (type < std::size(names)) return names[type];
  return "value type " + std::to_string(type);
}

std::string describe(const GgufValue& value) {
  return value.is_array ? "array of " + value_type_name(value.type) : value_type_name(value.type);
}

/// Bytes one scalar of `type` takes; 0 for strings (variable) and types that are not scalars.
uint64_t scalar_size(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

struct BlockLayout {
  uint64_t values;  ///< elements per block
  uint64_t bytes;   ///< bytes per block
};

bool supported_type(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::f32: case GgmlType::f16: case GgmlType::q4_0: case GgmlType::q4_1: case GgmlType::q8_0:
    case GgmlType::bf16: return true;
  }
  return false;
}

BlockLayout block_layout(GgmlType type) {
  switch (type) {
    case GgmlType::f32: return {1, 4};
    case GgmlType::f16: return {1, 2};
    case GgmlType::bf16: return {1, 2};
    case GgmlType::q4_0: return {32, 2 + 16};
    case GgmlType::q4_1: return {32, 2 + 2 + 16};
    case GgmlType::q8_0: return {32, 2 + 32};
  }
  return {0, 0};
}

/// Bounds-checked little-endian cursor over the file's bytes.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }
  uint64_t size() const { return bytes_.size(); }

  /// Fails naming `field` unless `n` more bytes are there.
  void need(uint64_t n, const std::function<std::string()>& field) const {
    if (n > left())
      fail(field() + " at offset " + std::to_string(pos_) + " needs " + std::to_string(n) + " bytes, the file has " +
           std::to_string(bytes_.size()) + " bytes");
  }

  template <class T>
  T read(const std::function<std::string()>& field) {
    need(sizeof(T), field);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(const std::function<std::string()>& field) {
    const uint64_t length = read<uint64_t>([&] { return field() + "'s length"; });
    if (length > left())
      fail(field() + ": string length " + std::to_string(length) + " at offset " + std::to_string(pos_ - 8) +
           " runs past the end of the file (" + std::to_string(bytes_.size()) + " bytes)");
    std::string text(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return text;
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

bool read_bool(Reader& reader, const std::function<std::string()>& field) {
  const uint8_t byte = reader.read<uint8_t>(field);
  if (byte > 1) fail(field() + ": bool value " + std::to_string(byte) + " is neither 0 nor 1");
  return byte == 1;
}

/// One scalar of `type` (not a string or array) into the variant alternative for its kind.
void read_scalar(Reader& reader, uint32_t type, std::variant<uint64_t, int64_t, double, bool>& out,
                 const std::function<std::string()>& field) {
  switch (type) {
    case kU8: out = uint64_t{reader.read<uint8_t>(field)}; break;
    case kU16: out = uint64_t{reader.read<uint16_t>(field)}; break;
    case kU32: out = uint64_t{reader.read<uint32_t>(field)}; break;
    case kU64: out = reader.read<uint64_t>(field); break;
    case kI8: out = int64_t{reader.read<int8_t>(field)}; break;
    case kI16: out = int64_t{reader.read<int16_t>(field)}; break;
    case kI32: out = int64_t{reader.read<int32_t>(field)}; break;
    case kI64: out = reader.read<int64_t>(field); break;
    case kF32: out = double{reader.read<float>(field)}; break;
    case kF64: out = reader.read<double>(field); break;
    case kBool: out = read_bool(reader, field); break;
    default: fail(field() + ": unknown value type " + std::to_string(type));
  }
}

template <class T>
std::vector<T> read_scalar_array(Reader& reader, uint32_t type, uint64_t count,
                                 const std::function<std::string()>& field) {
  std::vector<T> values;
  values.reserve(count);  // count * scalar_size(type) <= bytes left: checked by the caller
  std::variant<uint64_t, int64_t, double, bool> one;
  for (uint64_t i = 0; i < count; ++i) {
    read_scalar(reader, type, one, [&] { return field() + "[" + std::to_string(i) + "]"; });
    values.push_back(std::get<T>(one));
  }
  return values;
}

GgufValue read_value(Reader& reader, uint32_t type, const std::string& key) {
  const auto field = [&] { return "metadata '" + key + "'"; };
  GgufValue value;
  value.type = type;
  if (type == kString) {
    value.v = reader.read_string(field);
    return value;
  }
  if (type != kArray) {
    if (scalar_size(type) == 0) fail(field() + ": unknown value type " + std::to_string(type));
    std::variant<uint64_t, int64_t, double, bool> scalar;
    read_scalar(reader, type, scalar, field);
    std::visit([&](auto x) { value.v = x; }, scalar);
    return value;
  }
  value.is_array = true;
  value.type = reader.read<uint32_t>([&] { return field() + ": array element type"; });
  const uint64_t count = reader.read<uint64_t>([&] { return field() + ": array length"; });
  if (value.type == kArray) fail(field() + ": nested arrays (an array of arrays) are not supported");
  // The smallest element: a scalar's size, or a string's 8-byte length. Refuse a count the rest of the file cannot
  // hold before reserving memory for it.
  const uint64_t min_element = value.type == kString ? 8 : scalar_size(value.type);
  if (min_element == 0) fail(field() + ": unknown array element type " + std::to_string(value.type));
  if (count > reader.left() / min_element)
    fail(field() + ": array length " + std::to_string(count) + " of " + value_type_name(value.type) +
         " needs at least " + (count > std::numeric_limits<uint64_t>::max() / min_element
                                   ? std::string("more than 2^64")
                                   : std::to_string(count * min_element)) +
         " bytes, " + std::to_string(reader.left()) + " are left in the file");
  const auto element = [&] { return field(); };
  switch (value.type) {
    case kString: {
      std::vector<std::string> strings;
      strings.reserve(count);
      for (uint64_t i = 0; i < count; ++i)
        strings.push_back(reader.read_string([&] { return field() + "[" + std::to_string(i) + "]"; }));
      value.v = GgufValue::Array{std::move(strings)};
      break;
    }
    case kU8: case kU16: case kU32: case kU64:
      value.v = GgufValue::Array{read_scalar_array<uint64_t>(reader, value.type, count, element)};
      break;
    case kI8: case kI16: case kI32: case kI64:
      value.v = GgufValue::Array{read_scalar_array<int64_t>(reader, value.type, count, element)};
      break;
    case kF32: case kF64:
      value.v = GgufValue::Array{read_scalar_array<double>(reader, value.type, count, element)};
      break;
    case kBool:
      value.v = GgufValue::Array{read_scalar_array<bool>(reader, value.type, count, element)};
      break;
  }
  return value;
}

/// A read-only mapping of a whole file, unmapped when dropped.
struct Mapping {
  void* address = nullptr;
  size_t size = 0;
  Mapping(void* a, size_t n) : address(a), size(n) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(address, size); }
};

}  // namespace

std::string ggml_type_name(uint32_t type) {
  if (!supported_type(type)) return "type " + std::to_string(type);
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::f32: return "f32";
    case GgmlType::f16: return "f16";
    case GgmlType::q4_0: return "q4_0";
    case GgmlType::q4_1: return "q4_1";
    case GgmlType::q8_0: return "q8_0";
    case GgmlType::bf16: return "bf16";
  }
  return "type " + std::to_string(type);
}

uint64_t ggml_bytes(GgmlType type, uint64_t n, std::string_view what) {
  if (!supported_type(static_cast<uint32_t>(type)))
    throw_error(ErrorCode::invalid_argument,
                std::string(what) + ": ggml " + ggml_type_name(static_cast<uint32_t>(type)) + " is not supported");
  const BlockLayout layout = block_layout(type);
  if (n % layout.values != 0)
    throw_error(ErrorCode::invalid_argument, std::string(what) + ": " + std::to_string(n) + " elements are not a " +
                                                 "multiple of " + ggml_type_name(static_cast<uint32_t>(type)) +
                                                 "'s block of " + std::to_string(layout.values));
  const uint64_t blocks = n / layout.values;
  if (blocks > std::numeric_limits<uint64_t>::max() / layout.bytes)
    throw_error(ErrorCode::invalid_argument, std::string(what) + ": " + std::to_string(n) + " elements of " +
                                                 ggml_type_name(static_cast<uint32_t>(type)) +
                                                 " take more than 2^64 bytes");
  return blocks * layout.bytes;
}

uint64_t GgufTensorInfo::elements() const {
  uint64_t product = 1;
  for (uint64_t extent : ne) {
    if (extent != 0 && product > std::numeric_limits<uint64_t>::max() / extent)
      throw_error(ErrorCode::invalid_argument, "gguf: tensor '" + name + "': element count overflows 64 bits");
    product *= extent;
  }
  return product;
}

struct GgufFile::Impl {
  // The file's bytes: a read-only mapping (open) or a private copy (parse).
  std::unique_ptr<Mapping> mapping;
  std::vector<uint8_t> copy;
  std::span<const uint8_t> bytes;
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  ///< file offset of the data section
  std::map<std::string, GgufValue, std::less<>> metadata;
  std::vector<GgufTensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;

  void parse_header();
};

void GgufFile::Impl::parse_header() {
  Reader reader(bytes);
  reader.need(4, [] { return std::string("magic"); });
  if (std::memcmp(bytes.data(), "GGUF", 4) != 0) {
    char shown[5] = {};
    std::memcpy(shown, bytes.data(), 4);
    for (char& c : std::span(shown, 4))
      if (c < 0x20 || c > 0x7e) c = '?';
    fail(std::string("magic is '") + shown + "', not 'GGUF' (not a GGUF file)");
  }
  reader.read<uint32_t>([] { return std::string("magic"); });
  version = reader.read<uint32_t>([] { return std::string("version"); });
  if (version != 2 && version != 3)
    fail("version " + std::to_string(version) + " is not supported (2 and 3 are; a big-endian file shows a byte-" +
         "swapped version)");
  const uint64_t tensor_count = reader.read<uint64_t>([] { return std::string("tensor_count"); });
  const uint64_t kv_count = reader.read<uint64_t>([] { return std::string("kv_count"); });

  // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 (the smallest value) bytes; each tensor info
  // at least 8 (name length) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset).
  constexpr uint64_t kMinEntry = 8 + 4 + 1, kMinTensorInfo = 8 + 4 + 8 + 4 + 8;
  if (kv_count > reader.left() / kMinEntry)
    fail("kv_count " + std::to_string(kv_count) + " cannot fit in the " + std::to_string(reader.left()) +
         " bytes left in the file (an entry takes at least " + std::to_string(kMinEntry) + ")");
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = reader.read_string([&] { return "key of metadata entry " + std::to_string(i); });
    if (metadata.count(key) != 0) fail("metadata key '" + key + "' appears twice");
    const uint32_t type = reader.read<uint32_t>([&] { return "metadata '" + key + "': value type"; });
    GgufValue value = read_value(reader, type, key);
    metadata.emplace(std::move(key), std::move(value));
  }

  if (auto it = metadata.find("general.alignment"); it != metadata.end()) {
    if (it->second.is_array || it->second.type != kU32)
      fail("metadata 'general.alignment' is " + describe(it->second) + ", not u32");
    alignment = std::get<uint64_t>(it->second.v);
    if (alignment == 0 || !std::has_single_bit(alignment))
      fail("metadata 'general.alignment' is " + std::to_string(alignment) + ", not a power of two");
  }

  if (tensor_count > reader.left() / kMinTensorInfo)
    fail("tensor_count " + std::to_string(tensor_count) + " cannot fit in the " + std::to_string(reader.left()) +
         " bytes left in the file (a tensor info takes at least " + std::to_string(kMinTensorInfo) + ")");
  tensors.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo info;
    info.name = reader.read_string([&] { return "name of tensor " + std::to_string(i); });
    const auto field = [&] { return "tensor '" + info.name + "'"; };
    if (tensor_index.count(info.name) != 0) fail(field() + " appears twice");
    const uint32_t n_dims = reader.read<uint32_t>([&] { return field() + ": n_dims"; });
    if (n_dims < 1 || n_dims > 4) fail(field() + ": n_dims " + std::to_string(n_dims) + " is not in 1..4");
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t extent = reader.read<uint64_t>([&] { return field() + ": ne[" + std::to_string(d) + "]"; });
      if (extent == 0) fail(field() + ": ne[" + std::to_string(d) + "] is 0");
      // ggml holds ne and the element count as int64.
      if (extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / elements)
        fail(field() + ": ne[" + std::to_string(d) + "] " + std::to_string(extent) + " makes the element count " +
             "overflow int64 (product so far " + std::to_string(elements) + ")");
      elements *= extent;
      info.ne.push_back(extent);
    }
    const uint32_t type = reader.read<uint32_t>([&] { return field() + ": type"; });
    if (!supported_type(type))
      fail(field() + ": ggml type " + std::to_string(type) +
           " is not supported (f32, f16, bf16, q4_0, q4_1, q8_0 are)");
    info.type = static_cast<GgmlType>(type);
    const BlockLayout layout = block_layout(info.type);
    if (info.ne[0] % layout.values != 0)
      fail(field() + ": ne[0] " + std::to_string(info.ne[0]) + " is not a multiple of " + ggml_type_name(type) +
           "'s block of " + std::to_string(layout.values));
    info.nbytes = ggml_bytes(info.type, elements, "gguf: " + field());
    info.offset = reader.read<uint64_t>([&] { return field() + ": offset"; });
    if (info.offset % alignment != 0)
      fail(field() + ": data offset " + std::to_string(info.offset) + " is not a multiple of the alignment " +
           std::to_string(alignment));
    tensor_index.emplace(info.name, tensors.size());
    tensors.push_back(std::move(info));
  }

  // The data section starts at the next multiple of the alignment (a header without tensors needs no padding).
  const uint64_t header_end = reader.pos();
  const uint64_t padding = (alignment - header_end % alignment) % alignment;
  data_offset = header_end + padding;  // header_end <= file size, so no overflow for any real size
  if (!tensors.empty() && data_offset > bytes.size())
    fail("the data section starts at offset " + std::to_string(data_offset) + " (header " +
         std::to_string(header_end) + " bytes, alignment " + std::to_string(alignment) +
         ") past the end of the file (" + std::to_string(bytes.size()) + " bytes)");
  const uint64_t data_size = bytes.size() - std::min<uint64_t>(data_offset, bytes.size());
  for (const GgufTensorInfo& t : tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail("tensor '" + t.name + "': data [offset " + std::to_string(t.offset) + ", " + std::to_string(t.nbytes) +
           " bytes] from the data section at " + std::to_string(data_offset) + " runs past the end of the file (" +
           std::to_string(bytes.size()) + " bytes)");
  }
  // No two tensors may share bytes.
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const GgufTensorInfo& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (b.offset < a.offset + a.nbytes)  // a's extent is inside the file: no overflow
      fail("tensor '" + b.name + "': data [offset " + std::to_string(b.offset) + ", " + std::to_string(b.nbytes) +
           " bytes] overlaps tensor '" + a.name + "' [offset " + std::to_string(a.offset) + ", " +
           std::to_string(a.nbytes) + " bytes]");
  }
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::parse(std::span<const uint8_t> bytes) {
  auto impl = std::make_unique<Impl>();
  impl->copy.assign(bytes.begin(), bytes.end());
  impl->bytes = impl->copy;
  impl->parse_header();
  return GgufFile(std::move(impl));
}

GgufFile GgufFile::open(const std::string& path) {
  const auto io_fail = [&](const char* what) {
    const int err = errno;
    throw_error(ErrorCode::io_error, "gguf: cannot " + std::string(what) + " '" + path + "': " + std::strerror(err));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_fail("open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    io_fail("stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw_error(ErrorCode::io_error, "gguf: '" + path + "' is not a regular file");
  }
  auto impl = std::make_unique<Impl>();
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > 0) {
    // The mapping outlives the descriptor. A file truncated by someone else while mapped would fault on access;
    // the model files are ours to keep unchanged while they are read.
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      errno = err;
      io_fail("memory-map");
    }
    impl->mapping = std::make_unique<Mapping>(map, size);
    impl->bytes = {static_cast<const uint8_t*>(map), size};
  }
  ::close(fd);
  impl->parse_header();
  return GgufFile(std::move(impl));
}

uint32_t GgufFile::version() const { return impl_->version; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }

bool GgufFile::has(std::string_view key) const { return impl_->metadata.find(key) != impl_->metadata.end(); }

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = impl_->metadata.find(key);
  return it == impl_->metadata.end() ? nullptr : &it->second;
}

namespace {

const GgufValue& require(const GgufFile& file, std::string_view key) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) throw_error(ErrorCode::not_found, "gguf: metadata key '" + std::string(key) + "' is absent");
  return *value;
}

[[noreturn]] void wrong_type(std::string_view key, const GgufValue& value, std::string_view wanted) {
  fail("metadata '" + std::string(key) + "' is " + describe(value) + ", not " + std::string(wanted));
}

bool is_integer_type(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kU16: case kI16: case kU32: case kI32: case kU64: case kI64: return true;
    default: return false;
  }
}

}  // namespace

uint64_t GgufFile::get_uint(std::string_view key) const {
  const GgufValue& value = require(*this, key);
  if (value.is_array || !is_integer_type(value.type)) wrong_type(key, value, "an unsigned integer");
  if (const auto* u = std::get_if<uint64_t>(&value.v)) return *u;
  const int64_t i = std::get<int64_t>(value.v);
  if (i < 0) fail("metadata '" + std::string(key) + "' is " + describe(value) + " " + std::to_string(i) +
                  ", which does not fit an unsigned integer");
  return static_cast<uint64_t>(i);
}

int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& value = require(*this, key);
  if (value.is_array || !is_integer_type(value.type)) wrong_type(key, value, "an integer");
  if (const auto* i = std::get_if<int64_t>(&value.v)) return *i;
  const uint64_t u = std::get<uint64_t>(value.v);
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail("metadata '" + std::string(key) + "' is " + describe(value) + " " + std::to_string(u) +
         ", which does not fit int64");
  return static_cast<int64_t>(u);
}

double GgufFile::get_float(std::string_view key) const {
  const GgufValue& value = require(*this, key);
  if (value.is_array || (value.type != kF32 && value.type != kF64)) wrong_type(key, value, "f32 or f64");
  return std::get<double>(value.v);
}

bool GgufFile::get_bool(std::string_view key) const {
  const GgufValue& value = require(*this, key);
  if (value.is_array || value.type != kBool) wrong_type(key, value, "bool");
  return std::get<bool>(value.v);
}

const std::string& GgufFile::get_string(std::string_view key) const {
  const GgufValue& value = require(*this, key);
  if (value.is_array || value.type != kString) wrong_type(key, value, "string");
  return std::get<std::string>(value.v);
}

const std::vector<std::string>& GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& value = require(*this, key);
  if (!value.is_array || value.type != kString) wrong_type(key, value, "array of string");
  return std::get<std::vector<std::string>>(std::get<GgufValue::Array>(value.v));
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& value = require(*this, key);
  if (!value.is_array || !is_integer_type(value.type)) wrong_type(key, value, "array of integers");
  const auto& array = std::get<GgufValue::Array>(value.v);
  if (const auto* signed_values = std::get_if<std::vector<int64_t>>(&array)) return *signed_values;
  const auto& unsigned_values = std::get<std::vector<uint64_t>>(array);
  std::vector<int64_t> out;
  out.reserve(unsigned_values.size());
  for (size_t i = 0; i < unsigned_values.size(); ++i) {
    if (unsigned_values[i] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("metadata '" + std::string(key) + "'[" + std::to_string(i) + "] is " + std::to_string(unsigned_values[i]) +
           ", which does not fit int64");
    out.push_back(static_cast<int64_t>(unsigned_values[i]));
  }
  return out;
}

const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo* info = find_tensor(name);
  if (info == nullptr) throw_error(ErrorCode::not_found, "gguf: tensor '" + std::string(name) + "' is absent");
  return *info;
}

std::span<const uint8_t> GgufFile::tensor_data(const GgufTensorInfo& t) const {
  // The extents of this file's tensors were checked when it was opened; check again for an info from elsewhere.
  const std::span<const uint8_t> bytes = impl_->bytes;
  const uint64_t data_size = bytes.size() - std::min<uint64_t>(impl_->data_offset, bytes.size());
  if (t.offset > data_size || t.nbytes > data_size - t.offset)
    fail("tensor '" + t.name + "': data [offset " + std::to_string(t.offset) + ", " + std::to_string(t.nbytes) +
         " bytes] is not inside this file's data section (" + std::to_string(data_size) + " bytes)");
  return bytes.subspan(impl_->data_offset + t.offset, t.nbytes);
}

}  // namespace flashcpp::llm
