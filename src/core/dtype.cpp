#include "flashcpp/dtype.hpp"

namespace flashcpp {
namespace {
struct DTypeRow {
  DType t;
  std::string_view name;
  uint8_t code;
  int size;
};
// DLPack codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6, kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12.
constexpr DTypeRow kRows[] = {
    {DType::f16, "f16", 2, 2},   {DType::bf16, "bf16", 4, 2}, {DType::f32, "f32", 2, 4},
    {DType::f64, "f64", 2, 8},   {DType::e4m3, "e4m3", 10, 1}, {DType::e5m2, "e5m2", 12, 1},
    {DType::i8, "i8", 0, 1},     {DType::u8, "u8", 1, 1},     {DType::i16, "i16", 0, 2},
    {DType::u16, "u16", 1, 2},   {DType::i32, "i32", 0, 4},   {DType::u32, "u32", 1, 4},
    {DType::i64, "i64", 0, 8},   {DType::u64, "u64", 1, 8},   {DType::boolean, "bool", 6, 1},
};
const DTypeRow& row(DType t) { return kRows[static_cast<int>(t)]; }
}  // namespace

std::string_view dtype_name(DType t) noexcept { return row(t).name; }
int dtype_size(DType t) noexcept { return row(t).size; }
uint8_t dtype_dlpack_code(DType t) noexcept { return row(t).code; }

std::optional<DType> dtype_from_dlpack(uint8_t code, uint8_t bits, uint16_t lanes) noexcept {
  if (lanes != 1) return std::nullopt;
  for (const auto& r : kRows)
    if (r.code == code && r.size * 8 == bits) return r.t;
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (const auto& r : kRows)
    if (r.name == name) return r.t;
  return std::nullopt;
}

std::string_view device_type_name(DeviceType t) noexcept {
  switch (t) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return "cuda";
    case DeviceType::cuda_host: return "cuda_host";
  }
  return "unknown";
}

}  // namespace flashcpp
