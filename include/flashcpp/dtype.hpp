// Element types and devices, with their DLPack encodings.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace flashcpp {

/// Element types flashcpp passes to kernels. Values are ours; `dlpack_code/bits` give DLPack's.
enum class DType : uint8_t { f16, bf16, f32, f64, e4m3, e5m2, i8, u8, i16, u16, i32, u32, i64, u64, boolean };

/// Short name used in messages and FlashInfer URIs: "f16", "bf16", "e4m3", "i32", ...
std::string_view dtype_name(DType t) noexcept;
/// Bytes per element.
int dtype_size(DType t) noexcept;
/// DLPack type code (kDLFloat=2, kDLBfloat=4, kDLInt=0, kDLUInt=1, kDLFloat8_e4m3fn=10, ...).
uint8_t dtype_dlpack_code(DType t) noexcept;
inline uint8_t dtype_bits(DType t) noexcept { return static_cast<uint8_t>(dtype_size(t) * 8); }
std::optional<DType> dtype_from_dlpack(uint8_t code, uint8_t bits, uint16_t lanes) noexcept;
std::optional<DType> dtype_from_name(std::string_view name) noexcept;

enum class DeviceType : int32_t { cpu = 1, cuda = 2, cuda_host = 3 };  // DLPack device codes

struct Device {
  DeviceType type = DeviceType::cpu;
  int32_t id = 0;
  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device cuda(int32_t id) { return {DeviceType::cuda, id}; }
  static constexpr Device cuda_host() { return {DeviceType::cuda_host, 0}; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  /// True when the host can dereference the memory (CPU or pinned host).
  bool is_host() const { return type == DeviceType::cpu || type == DeviceType::cuda_host; }
  friend bool operator==(const Device&, const Device&) = default;
};

std::string_view device_type_name(DeviceType t) noexcept;

}  // namespace flashcpp
