#include "core/check.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace flashcpp {

static std::string list(std::initializer_list<int64_t> v) {
  std::string s = "[";
  bool first = true;
  for (int64_t x : v) {
    if (!first) s += ", ";
    s += x < 0 ? std::string("*") : std::to_string(x);
    first = false;
  }
  return s + "]";
}

void Validator::fail(std::string_view arg, std::string_view rule) const {
  throw Error(ErrorCode::invalid_argument,
              std::string(op_) + ": argument '" + std::string(arg) + "' " + std::string(rule));
}

void Validator::fail(std::string_view arg, const TensorView& t, std::string_view rule) const {
  fail(arg, std::string(rule) + "; got " + t.describe());
}

const Validator& Validator::defined(const TensorView& t, std::string_view arg) const {
  if (t.rank < 0 || t.rank > TensorView::kMaxRank)
    fail(arg, "must have rank in [0, " + std::to_string(TensorView::kMaxRank) + "]; got " + std::to_string(t.rank));
  if (!t.extent_fits())
    fail(arg, t, "must have non-negative sizes and an element count and byte extent that fit in int64");
  if (t.data == nullptr && t.numel() != 0) fail(arg, t, "must not be null");
  return *this;
}

const Validator& Validator::dtype(const TensorView& t, std::string_view arg,
                                  std::initializer_list<DType> allowed) const {
  if (std::find(allowed.begin(), allowed.end(), t.dtype) != allowed.end()) return *this;
  std::string names;
  for (DType d : allowed) names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  fail(arg, t, "must have dtype " + names);
}

const Validator& Validator::same_dtype(const TensorView& t, std::string_view arg, const TensorView& ref,
                                       std::string_view ref_arg) const {
  if (t.dtype != ref.dtype)
    fail(arg, t, "must have the dtype of '" + std::string(ref_arg) + "' (" + std::string(dtype_name(ref.dtype)) + ")");
  return *this;
}

const Validator& Validator::rank(const TensorView& t, std::string_view arg, int r) const {
  if (t.rank != r) fail(arg, t, "must have rank " + std::to_string(r));
  return *this;
}

const Validator& Validator::dim(const TensorView& t, std::string_view arg, int d, int64_t expected,
                                std::string_view what) const {
  if (d >= t.rank || t.shape[d] != expected) {
    std::string rule = "must have size " + std::to_string(expected) + " in dim " + std::to_string(d);
    if (!what.empty()) rule += " (= " + std::string(what) + ")";
    fail(arg, t, rule);
  }
  return *this;
}

const Validator& Validator::shape(const TensorView& t, std::string_view arg,
                                  std::initializer_list<int64_t> expected) const {
  bool ok = t.rank == static_cast<int>(expected.size());
  int i = 0;
  for (int64_t e : expected) {
    if (!ok) break;
    if (e >= 0 && t.shape[i] != e) ok = false;
    ++i;
  }
  if (!ok) fail(arg, t, "must have shape " + list(expected));
  return *this;
}

const Validator& Validator::same_shape(const TensorView& t, std::string_view arg, const TensorView& ref,
                                       std::string_view ref_arg) const {
  bool ok = t.rank == ref.rank;
  for (int i = 0; ok && i < t.rank; ++i) ok = t.shape[i] == ref.shape[i];
  if (!ok) fail(arg, t, "must have the shape of '" + std::string(ref_arg) + "' (" + ref.describe() + ")");
  return *this;
}

const Validator& Validator::same_strides(const TensorView& t, std::string_view arg, const TensorView& ref,
                                         std::string_view ref_arg) const {
  bool ok = t.rank == ref.rank;
  for (int i = 0; ok && i < t.rank; ++i) ok = t.strides[i] == ref.strides[i];
  if (!ok) fail(arg, t, "must have the same strides as '" + std::string(ref_arg) + "'");
  return *this;
}

const Validator& Validator::contiguous(const TensorView& t, std::string_view arg) const {
  if (!t.is_contiguous()) fail(arg, t, "must be contiguous (row-major, no gaps)");
  return *this;
}

const Validator& Validator::last_dim_contiguous(const TensorView& t, std::string_view arg) const {
  if (!t.last_dim_contiguous()) fail(arg, t, "must have stride 1 in its last dim");
  return *this;
}

const Validator& Validator::no_negative_strides(const TensorView& t, std::string_view arg) const {
  for (int i = 0; i < t.rank; ++i)
    if (t.strides[i] < 0) fail(arg, t, "must not have negative strides");
  return *this;
}

const Validator& Validator::on_cuda(const TensorView& t, std::string_view arg) const {
  if (t.device.type != DeviceType::cuda) fail(arg, t, "must be in CUDA device memory");
  if (t.device.id < 0) fail(arg, t, "must have a device id >= 0");
  return *this;
}

const Validator& Validator::on_host(const TensorView& t, std::string_view arg) const {
  if (!t.device.is_host()) fail(arg, t, "must be in host memory (cpu or cuda_host)");
  return defined(t, arg);  // host arrays are read right here by the validation that follows
}

const Validator& Validator::same_device(const TensorView& t, std::string_view arg, const TensorView& ref,
                                        std::string_view ref_arg) const {
  if (!(t.device == ref.device))
    fail(arg, t, "must be on the device of '" + std::string(ref_arg) + "' (" + ref.describe() + ")");
  return *this;
}

const Validator& Validator::aligned(const TensorView& t, std::string_view arg, size_t bytes) const {
  if (reinterpret_cast<uintptr_t>(t.data) % bytes != 0)
    fail(arg, t, "must have a data pointer aligned to " + std::to_string(bytes) + " bytes");
  return *this;
}

const Validator& Validator::min_bytes(const TensorView& t, std::string_view arg, int64_t bytes) const {
  if (t.numel() * dtype_size(t.dtype) < bytes) fail(arg, t, "must hold at least " + std::to_string(bytes) + " bytes");
  return *this;
}

const Validator& Validator::finite(double v, std::string_view arg) const {
  if (!std::isfinite(v)) fail(arg, "must be finite; got " + std::to_string(v));
  return *this;
}

const Validator& Validator::positive(double v, std::string_view arg) const {
  if (!(std::isfinite(v) && v > 0)) fail(arg, "must be finite and > 0; got " + std::to_string(v));
  return *this;
}

const Validator& Validator::in_range(int64_t v, std::string_view arg, int64_t lo, int64_t hi) const {
  if (v < lo || v > hi)
    fail(arg, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]; got " + std::to_string(v));
  return *this;
}

const Validator& Validator::divisible(int64_t v, std::string_view arg, int64_t by, std::string_view by_what) const {
  if (by == 0 || v % by != 0)
    fail(arg, "(" + std::to_string(v) + ") must be divisible by " + std::string(by_what) + " (" + std::to_string(by) + ")");
  return *this;
}

const Validator& Validator::one_of(int64_t v, std::string_view arg, std::initializer_list<int64_t> allowed) const {
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    fail(arg, "must be one of " + list(allowed) + "; got " + std::to_string(v));
  return *this;
}

const Validator& Validator::indptr(const TensorView& t, std::string_view arg, int64_t expected_len,
                                   int64_t last) const {
  on_host(t, arg).dtype(t, arg, {DType::i32}).rank(t, arg, 1).contiguous(t, arg);
  if (expected_len >= 0) dim(t, arg, 0, expected_len);
  if (t.shape[0] == 0) fail(arg, t, "must have at least one entry");
  const int32_t* p = t.data_as<const int32_t>();
  if (p[0] != 0) fail(arg, "must start at 0; got " + std::to_string(p[0]));
  for (int64_t i = 1; i < t.shape[0]; ++i)
    if (p[i] < p[i - 1])
      fail(arg, "must never decrease; entry " + std::to_string(i) + " is " + std::to_string(p[i]) + " after " +
                    std::to_string(p[i - 1]));
  if (last >= 0 && p[t.shape[0] - 1] != last)
    fail(arg, "must end at " + std::to_string(last) + "; got " + std::to_string(p[t.shape[0] - 1]));
  return *this;
}

const Validator& Validator::values_in_range(const TensorView& t, std::string_view arg, int64_t lo,
                                            int64_t hi) const {
  on_host(t, arg).dtype(t, arg, {DType::i32}).contiguous(t, arg);
  const int32_t* p = t.data_as<const int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (p[i] < lo || p[i] >= hi)
      fail(arg, "entry " + std::to_string(i) + " is " + std::to_string(p[i]) + ", outside [" + std::to_string(lo) +
                    ", " + std::to_string(hi) + ")");
  return *this;
}

}  // namespace flashcpp
