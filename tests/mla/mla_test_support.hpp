// Test support for sparse MLA: the FlashMLA golden cases (tests/data/flashmla-golden.tar.xz), random inputs,
// bf16 helpers and FlashMLA-style comparisons. Header-only; used by the CPU (label mla) and GPU tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "flashcpp/reference.hpp"
#include "flashcpp/tensor.hpp"
#include "mla/fp8_v32.hpp"

namespace flashcpp::mla_test {

// ---------------------------------------------------------------------------------------------------
// Golden data

/// The golden directory: $FLASHCPP_GOLDEN_DIR when set, else the repository's copy (tests/data/README.md),
/// which CMake unpacks into the build tree.
inline std::optional<std::filesystem::path> golden_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* env = std::getenv("FLASHCPP_GOLDEN_DIR"); env != nullptr && *env != '\0')
    return fs::is_directory(env, ec) ? std::optional<fs::path>(env) : std::nullopt;
  const fs::path in_repo = FLASHCPP_GOLDEN_DEFAULT_DIR;
  if (fs::is_directory(in_repo, ec)) return in_repo;
  return std::nullopt;
}

#define FLASHCPP_REQUIRE_GOLDEN(dir_var)                                                                  \
  auto dir_var##_opt = ::flashcpp::mla_test::golden_dir();                                                 \
  if (!dir_var##_opt)                                                                                      \
    GTEST_SKIP() << "FlashMLA golden data not found: $FLASHCPP_GOLDEN_DIR, or the repository's copy "      \
                    "unpacked by CMake into " FLASHCPP_GOLDEN_DEFAULT_DIR;                                 \
  const std::filesystem::path dir_var = *dir_var##_opt

struct GoldenTensor {
  std::string dtype;  // bf16 f32 i32 u8
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  DType flashcpp_dtype() const {
    if (dtype == "bf16") return DType::bf16;
    if (dtype == "f32") return DType::f32;
    if (dtype == "i32") return DType::i32;
    return DType::u8;
  }
  /// A contiguous host view (the bytes stay owned by this object).
  TensorView view() const {
    return TensorView::contiguous(const_cast<uint8_t*>(bytes.data()), flashcpp_dtype(), Device::cpu(),
                                  std::span<const int64_t>(shape));
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  template <class T>
  T at(int64_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return v;
  }
  /// The elements as a vector of T (T must match the dtype's size).
  template <class T>
  std::vector<T> as_vector() const {
    std::vector<T> v(static_cast<size_t>(numel()));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
    return v;
  }
  /// bf16 elements as doubles (exact).
  std::vector<double> bf16_values() const {
    std::vector<double> v(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) v[static_cast<size_t>(i)] = mla::fp8::bf16_to_float(at<uint16_t>(i));
    return v;
  }
};

/// FlashMLA's decode lse [b, h_q, s_q] as the references' rows [b * s_q, h_q].
inline std::vector<double> lse_rows_of_b_hq_sq(const GoldenTensor& lse) {
  const int64_t b = lse.shape[0], h_q = lse.shape[1], s_q = lse.shape[2];
  std::vector<double> v;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si < s_q; ++si)
      for (int64_t h = 0; h < h_q; ++h) v.push_back(lse.at<float>((bi * h_q + h) * s_q + si));
  return v;
}

struct GoldenCase {
  std::string name, op;
  nlohmann::json params;
  std::map<std::string, GoldenTensor> inputs, outputs;
  bool has_input(const std::string& n) const { return inputs.count(n) != 0; }
};

inline std::vector<std::string> golden_case_names(const std::filesystem::path& dir, const std::string& op_prefix) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind(op_prefix, 0) == 0)
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// The first golden directory that holds cases named `prefix*`: golden_dir(), else the project's shared data
/// beside the checkout (<source>/../shared/data/flashmla-golden). The repository copy leaves out the DeepSeek
/// V4 ("model1_*") cases for size (16 MB of incompressible FP8 pages); the shared data has them.
inline std::optional<std::filesystem::path> golden_dir_with(const std::string& prefix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> candidates;
  if (auto d = golden_dir()) candidates.push_back(*d);
  candidates.push_back(fs::path(FLASHCPP_SOURCE_DIR) / ".." / "shared" / "data" / "flashmla-golden");
  for (const auto& d : candidates)
    if (fs::is_directory(d, ec) && !golden_case_names(d, prefix).empty()) return d;
  return std::nullopt;
}

inline GoldenCase load_golden(const std::filesystem::path& dir, const std::string& name) {
  GoldenCase c;
  c.name = name;
  std::ifstream mf(dir / name / "manifest.json");
  if (!mf) throw std::runtime_error("cannot open manifest of golden case " + name);
  const nlohmann::json m = nlohmann::json::parse(mf);
  c.op = m.at("op").get<std::string>();
  c.params = m.at("params");
  auto load = [&](const nlohmann::json& section, std::map<std::string, GoldenTensor>& into) {
    for (const auto& [key, t] : section.items()) {
      GoldenTensor g;
      g.dtype = t.at("dtype").get<std::string>();
      g.shape = t.at("shape").get<std::vector<int64_t>>();
      std::ifstream f(dir / name / t.at("file").get<std::string>(), std::ios::binary);
      if (!f) throw std::runtime_error("cannot open " + t.at("file").get<std::string>() + " of " + name);
      g.bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
      const int64_t elem = g.dtype == "bf16" ? 2 : (g.dtype == "u8" ? 1 : 4);
      if (static_cast<int64_t>(g.bytes.size()) != g.numel() * elem)
        throw std::runtime_error("golden tensor " + key + " of " + name + " has the wrong size");
      into.emplace(key, std::move(g));
    }
  };
  load(m.at("inputs"), c.inputs);
  load(m.at("outputs"), c.outputs);
  return c;
}

// ---------------------------------------------------------------------------------------------------
// bf16 and random data

inline float bf16_bits_to_float(uint16_t h) { return mla::fp8::bf16_to_float(h); }
inline uint16_t float_to_bf16_bits(float f) { return mla::fp8::float_to_bf16(f); }

/// FlashMLA's test data: randn / 10 + U(-0.05, 0.05), clamped to [-10, 10], as 16-bit float bits (`to_bits`). The
/// normal variate is the (scaled) sum of four uniforms from a xorshift generator seeded by `rng`: fast enough for
/// the 300M-element GPU test inputs, and as good as randn for this purpose.
template <class ToBits>
std::vector<uint16_t> random_16bit(size_t n, std::mt19937& rng, double scale, ToBits to_bits) {
  uint64_t x = (static_cast<uint64_t>(rng()) << 32) | rng() | 1u;
  auto uniform = [&x] {  // [0, 1)
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return static_cast<float>(x >> 40) * (1.f / 16777216.f);
  };
  std::vector<uint16_t> v(n);
  const float s = static_cast<float>(scale) * 1.7320508f;  // sum of 4 U(0,1) has variance 1/3
  for (auto& e : v) {
    const float normal = (uniform() + uniform() + uniform() + uniform() - 2.f) * s;
    e = to_bits(std::clamp(normal + (uniform() - 0.5f) * 0.1f, -10.f, 10.f));
  }
  return v;
}
inline std::vector<uint16_t> random_bf16(size_t n, std::mt19937& rng, double scale = 0.1) {
  return random_16bit(n, rng, scale, float_to_bf16_bits);
}
/// As fp16 bits, drawn in f32 (all 11 significant bits used, not bf16 values widened).
inline std::vector<uint16_t> random_f16(size_t n, std::mt19937& rng, double scale = 0.1) {
  return random_16bit(n, rng, scale, [](float f) { return reference::float_to_half(f); });
}

// ---------------------------------------------------------------------------------------------------
// Comparisons (FlashMLA's kernelkit check_is_allclose: inf/NaN positions equal, per element abs or rel,
// plus a global cosine check)

struct CompareResult {
  bool ok = true;
  int64_t failures = 0;
  double max_abs = 0, cos_diff = 0;
  std::string message;
};

/// got[i] vs ref[i]: non-finite values must match exactly; finite ones pass if |d| <= abs_tol or
/// |d| / |ref| <= rel_tol, or |d| <= abs_tol_each[i] when abs_tol_each is given (a bound per element);
/// globally 1 - 2 sum(ab) / sum(a^2 + b^2) <= cos_diff_tol.
inline CompareResult compare(std::span<const double> got, std::span<const double> ref, double abs_tol, double rel_tol,
                             double cos_diff_tol, const std::string& what, std::span<const double> abs_tol_each = {}) {
  CompareResult r;
  std::ostringstream msg;
  double sab = 0, saa = 0;
  if (got.size() != ref.size() || (!abs_tol_each.empty() && abs_tol_each.size() != ref.size())) {
    r.ok = false;
    r.message = what + ": size mismatch";
    return r;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = ref[i];
    if (!std::isfinite(a) || !std::isfinite(b)) {
      const bool same = (std::isnan(a) && std::isnan(b)) || a == b;
      if (!same) {
        if (r.failures++ < 5) msg << "\n  " << what << "[" << i << "]: got " << a << ", expected " << b;
      }
      continue;
    }
    const double d = std::fabs(a - b);
    r.max_abs = std::max(r.max_abs, d);
    if (!(d <= abs_tol || d <= rel_tol * std::fabs(b) || (!abs_tol_each.empty() && d <= abs_tol_each[i]))) {
      if (r.failures++ < 5) {
        msg << "\n  " << what << "[" << i << "]: got " << a << ", expected " << b << " (|d| " << d;
        if (!abs_tol_each.empty()) msg << ", own bound " << abs_tol_each[i];
        msg << ")";
      }
    }
    sab += a * b;
    saa += a * a + b * b;
  }
  r.cos_diff = saa > 0 ? 1.0 - 2.0 * sab / saa : 0.0;
  if (r.cos_diff > cos_diff_tol) msg << "\n  " << what << ": cosine difference " << r.cos_diff << " > " << cos_diff_tol;
  r.ok = r.failures == 0 && r.cos_diff <= cos_diff_tol;
  std::ostringstream head;
  head << what << ": " << r.failures << " of " << got.size() << " elements out of tolerance (abs " << abs_tol
       << " or rel " << rel_tol << (abs_tol_each.empty() ? "" : " or the element's own bound") << "), max |d| "
       << r.max_abs << ", cos diff " << r.cos_diff;
  r.message = head.str() + msg.str();
  return r;
}

/// A float64 reference's out_magnitude bounds its out: |out[i]| <= magnitude[i] (sum_j p_j |v_j| against
/// sum_j p_j v_j; exact in floating point too, as both sum the same products' magnitudes in the same order).
inline void expect_out_within_magnitude(std::span<const double> out, std::span<const double> magnitude) {
  ASSERT_EQ(out.size(), magnitude.size());
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_LE(std::fabs(out[i]), magnitude[i]) << "element " << i;
}

// FlashMLA's tolerances (tests/test_flash_mla_sparse_prefill.py): out abs 8e-4 or rel 3.01/128, cosine
// difference 7e-6 (~ cosine >= 0.99999); lse / max_logits abs 1e-6 or rel 2.01/65536.
inline constexpr double kOutAbsTol = 8e-4;
inline constexpr double kOutRelTol = 3.01 / 128;
inline constexpr double kOutCosDiffTol = 1e-5;
inline constexpr double kLseAbsTol = 1e-6;
inline constexpr double kLseRelTol = 2.01 / 65536;

}  // namespace flashcpp::mla_test
