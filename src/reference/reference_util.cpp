#include "reference/reference_util.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

namespace flashcpp::reference {

float half_to_float(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_half(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    const float a = std::bit_cast<float>(ax);
    const float scaled = a * 16777216.0f;  // 2^24: units of the smallest subnormal
    const auto r = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t mant_odd = (ax >> 13) & 1u;
  const uint32_t rounded = ax + 0xfffu + mant_odd;  // round to nearest even on the 13 dropped bits
  return static_cast<uint16_t>(sign | (((rounded >> 13) - (112u << 10)) & 0x7fffu));
}

float bf16_to_float(uint16_t b) noexcept { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t float_to_bf16(float f) noexcept {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

namespace {

// An FP8 format: `man` mantissa bits, exponent bias, largest finite value, and whether its all-ones exponent is
// inf/NaN (e5m2, IEEE-like) or holds finite values with S.1111.111 the only NaN (e4m3fn).
struct Fp8Format {
  int man, bias;
  double max;
  bool ieee;
};
constexpr Fp8Format kE4m3{3, 7, 448.0, false};
constexpr Fp8Format kE5m2{2, 15, 57344.0, true};

// Round to nearest even onto the format, saturating to +-max (inf included: __NV_SATFINITE); NaN -> 0x7f.
uint8_t to_fp8(double v, const Fp8Format& f) noexcept {
  if (std::isnan(v)) return 0x7f;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::isinf(v) ? f.max : std::fabs(v);
  const int emin = 1 - f.bias;  // smallest normal exponent
  int e;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  const int exp = std::max(e - 1, emin);
  const double quantum = std::ldexp(1.0, exp - f.man);
  const double r = std::min(std::nearbyint(a / quantum) * quantum, f.max);  // default rounding: nearest even
  if (r == 0) return sign;
  std::frexp(r, &e);
  if (e - 1 < emin) return sign | static_cast<uint8_t>(std::lround(r / std::ldexp(1.0, emin - f.man)));
  const auto man = static_cast<uint8_t>(std::lround((std::ldexp(r, 1 - e) - 1.0) * (1 << f.man)));
  return sign | static_cast<uint8_t>((e - 1 + f.bias) << f.man) | man;
}

double from_fp8(uint8_t b, const Fp8Format& f) noexcept {
  const int exp = (b & 0x7f) >> f.man, man = b & ((1 << f.man) - 1), top = (1 << (7 - f.man)) - 1;
  double r;
  if (f.ieee && exp == top) r = man == 0 ? HUGE_VAL : std::nan("");
  else if (!f.ieee && exp == top && man == (1 << f.man) - 1) r = std::nan("");
  else if (exp == 0) r = std::ldexp(static_cast<double>(man), 1 - f.bias - f.man);
  else r = std::ldexp(static_cast<double>(man | (1 << f.man)), exp - f.bias - f.man);
  return (b & 0x80) ? -r : r;
}

}  // namespace

float e4m3_to_float(uint8_t b) noexcept { return static_cast<float>(from_fp8(b, kE4m3)); }
uint8_t float_to_e4m3(double v) noexcept { return to_fp8(v, kE4m3); }
float e5m2_to_float(uint8_t b) noexcept { return static_cast<float>(from_fp8(b, kE5m2)); }
uint8_t float_to_e5m2(double v) noexcept { return to_fp8(v, kE5m2); }

double load(const TensorView& t, int64_t offset) {
  const char* p = static_cast<const char*>(t.data) + offset * dtype_size(t.dtype);
  switch (t.dtype) {
    case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); return half_to_float(h); }
    case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_float(h); }
    case DType::f32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::f64: { double d; std::memcpy(&d, p, 8); return d; }
    case DType::i32: { int32_t i; std::memcpy(&i, p, 4); return i; }
    case DType::u32: { uint32_t i; std::memcpy(&i, p, 4); return i; }
    case DType::i64: { int64_t i; std::memcpy(&i, p, 8); return static_cast<double>(i); }
    case DType::i8: return static_cast<double>(*reinterpret_cast<const int8_t*>(p));
    case DType::u8: return static_cast<double>(*reinterpret_cast<const uint8_t*>(p));
    case DType::e4m3: return e4m3_to_float(*reinterpret_cast<const uint8_t*>(p));
    case DType::e5m2: return e5m2_to_float(*reinterpret_cast<const uint8_t*>(p));
    default: break;
  }
  throw Error(ErrorCode::invalid_argument,
              "reference: cannot read elements of dtype " + std::string(dtype_name(t.dtype)));
}

void store(const TensorView& t, int64_t offset, double v) {
  char* p = static_cast<char*>(t.data) + offset * dtype_size(t.dtype);
  switch (t.dtype) {
    case DType::f16: { const uint16_t h = float_to_half(static_cast<float>(v)); std::memcpy(p, &h, 2); return; }
    case DType::bf16: { const uint16_t h = float_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); return; }
    case DType::f32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); return; }
    case DType::f64: std::memcpy(p, &v, 8); return;
    case DType::e4m3: *reinterpret_cast<uint8_t*>(p) = float_to_e4m3(v); return;
    case DType::e5m2: *reinterpret_cast<uint8_t*>(p) = float_to_e5m2(v); return;
    default: break;
  }
  throw Error(ErrorCode::invalid_argument,
              "reference: cannot store elements of dtype " + std::string(dtype_name(t.dtype)));
}

int64_t offset_of(const TensorView& t, std::initializer_list<int64_t> index) {
  int64_t off = 0;
  int i = 0;
  for (int64_t x : index) off += x * t.strides[static_cast<size_t>(i++)];
  return off;
}

namespace detail {

void check_host_float(const Validator& v, const TensorView& t, const char* arg) {
  v.defined(t, arg).on_host(t, arg).dtype(t, arg, {DType::f16, DType::bf16, DType::f32, DType::f64});
  v.no_negative_strides(t, arg);
}

void check_host_i32(const Validator& v, const TensorView& t, const char* arg, int64_t len) {
  v.defined(t, arg).on_host(t, arg).dtype(t, arg, {DType::i32}).rank(t, arg, 1).contiguous(t, arg);
  if (len >= 0) v.dim(t, arg, 0, len);
}

void load_row(const TensorView& t, int64_t offset, int64_t n, double* dst) {
  const int64_t s = t.rank > 0 ? t.strides[static_cast<size_t>(t.rank - 1)] : 1;
  const char* base = static_cast<const char*>(t.data);
  // 16-bit rows, converted without the per-element dtype switch of load().
  const auto load16 = [&](auto convert) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, base + (offset + i * s) * 2, 2);
      dst[i] = convert(h);
    }
  };
  switch (t.dtype) {
    case DType::f16:
      load16(half_to_float);
      return;
    case DType::bf16:
      load16(bf16_to_float);
      return;
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = load(t, offset + i * s);
  }
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  parallel_for(n, static_cast<int>(std::max(1u, std::min(std::thread::hardware_concurrency(), 64u))), fn);
}

void parallel_for(int64_t n, int max_threads, const std::function<void(int64_t)>& fn) {
  const int64_t threads = std::min<int64_t>(n, std::max(1, max_threads));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex mu;
  auto worker = [&] {
    for (int64_t i = next++; i < n; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace detail
}  // namespace flashcpp::reference
