#include "core/check.hpp"

#include <algorithm>
#include <array>
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
  if (t.numel() == 0) return *this;
  if (t.data == nullptr) fail(arg, t, "must not be null");
  // Every element's address exists: the lowest (negative strides reach below data) and the highest byte, in
  // 128 bits, inside the address space; and data aligned to the element size (no kernel or host loop may do a
  // misaligned access).
  const size_t elem = dtype_size(t.dtype);
  if (reinterpret_cast<uintptr_t>(t.data) % elem != 0)
    fail(arg, t, "must have a data pointer aligned to its element size (" + std::to_string(elem) + " bytes)");
  __int128 low = 0, high = 0;  // byte offsets of the first and last byte of the elements, from data
  for (int i = 0; i < t.rank; ++i) {
    const __int128 span = static_cast<__int128>(t.shape[i] - 1) * t.strides[i] * static_cast<__int128>(elem);
    (span < 0 ? low : high) += span;
  }
  high += static_cast<__int128>(elem) - 1;
  const __int128 base = static_cast<__int128>(reinterpret_cast<uintptr_t>(t.data));
  if (base + low < 0 || base + high > static_cast<__int128>(UINTPTR_MAX))
    fail(arg, t, "must lie inside the address space (its data pointer plus the byte extent of its elements wraps)");
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
  defined(t, arg);  // host arrays are read right here by the validation that follows
  // That the array lies in one allocation cannot be checked; its extent can be bounded (a stride of 2^61 in a
  // [2, 576] view passes every other rule and would be dereferenced).
  if (t.nbytes() > TensorView::kMaxHostBytes)
    fail(arg, t, "must span at most " + std::to_string(TensorView::kMaxHostBytes) + " bytes (2^40) in host memory");
  return *this;
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

namespace {

using i128 = __int128;

enum class Overlap { none, some, unknown };

// One dim of either view in the byte difference of two elements: c * step with an integer c in [lo, hi].
struct Term {
  i128 step, lo, hi;
};

i128 floor_div(i128 a, i128 d) { return a >= 0 ? a / d : -((-a + d - 1) / d); }  // d > 0
i128 ceil_div(i128 a, i128 d) { return -floor_div(-a, d); }

bool same_memory_space(const TensorView& a, const TensorView& b) {
  return (a.device.is_host() && b.device.is_host()) || a.device == b.device;
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.rank != b.rank || !(a.device == b.device)) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i] || (a.shape[i] > 1 && a.strides[i] != b.strides[i])) return false;
  return true;
}

// Whether some byte lies in an element of both views (both non-empty, extents known to fit in int64).
// Elements at addresses x of a and y of b share a byte iff x - y lies in [-(size_a - 1), size_b - 1], and
// x - y = (data_a - data_b) + sum over a's dims of i * stride * size - sum over b's dims of j * stride * size.
// The search picks the coefficients largest step first and keeps only those whose remaining reach can
// still hit that window; dims of equal step are merged first (identical layouts become one term per dim),
// so nested layouts leave a few candidates per dim. Past a node budget the answer is unknown.
Overlap views_overlap(const TensorView& a, const TensorView& b) {
  std::array<Term, 2 * TensorView::kMaxRank> terms{};
  size_t n = 0;
  auto add = [&](const TensorView& t, int sign) {
    const i128 size = dtype_size(t.dtype);
    for (int i = 0; i < t.rank; ++i) {
      if (t.shape[i] <= 1 || t.strides[i] == 0) continue;
      const i128 s = i128{t.strides[i]} * size * sign, m = t.shape[i] - 1;
      const Term term{s < 0 ? -s : s, s < 0 ? -m : 0, s < 0 ? 0 : m};
      auto same = std::find_if(terms.begin(), terms.begin() + n, [&](const Term& x) { return x.step == term.step; });
      if (same != terms.begin() + n) {
        same->lo += term.lo;
        same->hi += term.hi;
      } else {
        terms[n++] = term;
      }
    }
  };
  add(a, 1);
  add(b, -1);
  std::sort(terms.begin(), terms.begin() + n, [](const Term& x, const Term& y) { return x.step > y.step; });
  std::array<i128, 2 * TensorView::kMaxRank + 1> rest_lo{}, rest_hi{};  // reach of terms k..n-1
  for (size_t k = n; k-- > 0;) {
    rest_lo[k] = rest_lo[k + 1] + terms[k].lo * terms[k].step;
    rest_hi[k] = rest_hi[k + 1] + terms[k].hi * terms[k].step;
  }
  const i128 win_lo = 1 - i128{dtype_size(a.dtype)}, win_hi = i128{dtype_size(b.dtype)} - 1;
  const i128 start = static_cast<i128>(reinterpret_cast<uintptr_t>(a.data)) -
                     static_cast<i128>(reinterpret_cast<uintptr_t>(b.data));
  int budget = 1 << 12;
  auto search = [&](auto& self, size_t k, i128 x) -> Overlap {
    if (x + rest_hi[k] < win_lo || x + rest_lo[k] > win_hi) return Overlap::none;
    if (k == n) return Overlap::some;
    const Term& t = terms[k];
    const i128 c_lo = std::max(t.lo, ceil_div(win_lo - x - rest_hi[k + 1], t.step));
    const i128 c_hi = std::min(t.hi, floor_div(win_hi - x - rest_lo[k + 1], t.step));
    bool unknown = false;
    for (i128 c = c_lo; c <= c_hi; ++c) {
      if (--budget < 0) return Overlap::unknown;
      const Overlap r = self(self, k + 1, x + c * t.step);
      if (r == Overlap::some) return r;
      unknown = unknown || r == Overlap::unknown;
    }
    return unknown ? Overlap::unknown : Overlap::none;
  };
  return search(search, 0, start);
}

bool has_elements(const TensorView& t) {
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] == 0) return false;
  return true;
}

// The byte range of a non-empty view (extent known to fit in int64): its elements' lowest and highest byte.
struct ByteRange {
  i128 lo = 0, hi = 0;
};
ByteRange byte_range(const TensorView& t) {
  const i128 elem = dtype_size(t.dtype);
  ByteRange r;
  r.lo = r.hi = static_cast<i128>(reinterpret_cast<uintptr_t>(t.data));
  for (int i = 0; i < t.rank; ++i) {
    const i128 span = i128{t.shape[i] - 1} * t.strides[i] * elem;
    (span < 0 ? r.lo : r.hi) += span;
  }
  r.hi += elem - 1;
  return r;
}
// Byte ranges that do not meet share no byte, whatever the strides: the common case (separate allocations),
// settled without views_overlap's search, which is left to views that interleave or nest.
bool apart(const ByteRange& a, const ByteRange& b) { return a.hi < b.lo || b.hi < a.lo; }

}  // namespace

const Validator& Validator::disjoint(const TensorView& out, std::string_view out_arg, const TensorView& other,
                                     std::string_view other_arg, InPlace in_place) const {
  for (const auto& [t, arg] : {std::pair{&out, out_arg}, std::pair{&other, other_arg}})
    if (!t->extent_fits())
      fail(arg, *t, "must have non-negative sizes and an element count and byte extent that fit in int64");
  if (!has_elements(out) || !has_elements(other) || !same_memory_space(out, other)) return *this;
  if (apart(byte_range(out), byte_range(other))) return *this;
  if (in_place == InPlace::allowed && same_view(out, other)) return *this;
  const Overlap o = views_overlap(out, other);
  if (o == Overlap::none) return *this;
  const std::string exact = in_place == InPlace::allowed ? " unless it is exactly that view (in place)" : "";
  if (o == Overlap::unknown)
    fail(out_arg, out, "must be provably disjoint from '" + std::string(other_arg) + "'" + exact +
                           ": their elements interleave in a way the overlap check could not settle");
  const int64_t delta = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out.data) -
                                             reinterpret_cast<uintptr_t>(other.data));
  const std::string where = delta == 0 ? "at the data address of '" + std::string(other_arg) + "'"
                                       : std::to_string(delta < 0 ? -delta : delta) + " bytes " +
                                             (delta < 0 ? "before" : "after") + " the data of '" +
                                             std::string(other_arg) + "'";
  fail(out_arg, out, "must not overlap '" + std::string(other_arg) + "'" + exact +
                         " (an output shares no byte with another argument; its data starts " + where + ")");
}

const Validator& Validator::no_overlap(std::initializer_list<Named> outputs, std::initializer_list<Named> inputs) const {
  // Every call of an op checks each output against each input (46 pairs for a split V4 decode): each view's byte
  // range is computed once, and a pair whose views are non-empty, on one device and apart is settled by two
  // comparisons; any other pair goes to disjoint(), which refuses it (or finds it disjoint) exactly as it would
  // alone, in the same order. (4.3 us of a split V4 decode call's host time went here, 2026-12-06.)
  constexpr size_t kMaxViews = 32;
  struct Known {
    bool simple = false;  // extent fits, non-empty: `range` holds
    ByteRange range;
  };
  std::array<Known, kMaxViews> known{};
  const size_t count = outputs.size() + inputs.size();
  if (count <= kMaxViews) {
    size_t i = 0;
    for (const auto* list : {&outputs, &inputs})
      for (const Named& n : *list) {
        Known& k = known[i++];
        k.simple = n.t != nullptr && n.t->extent_fits() && has_elements(*n.t);
        if (k.simple) k.range = byte_range(*n.t);
      }
  }
  auto check = [&](const Named& a, size_t ia, const Named& b, size_t ib) {
    if (count <= kMaxViews && known[ia].simple && known[ib].simple && same_memory_space(*a.t, *b.t) &&
        apart(known[ia].range, known[ib].range))
      return;
    disjoint(*a.t, a.arg, *b.t, b.arg);
  };
  size_t io = 0;
  for (auto out = outputs.begin(); out != outputs.end(); ++out, ++io) {
    if (out->t == nullptr) continue;
    size_t iother = io + 1;
    for (auto other = out + 1; other != outputs.end(); ++other, ++iother)
      if (other->t != nullptr) check(*out, io, *other, iother);
    size_t iin = outputs.size();
    for (const Named& in : inputs) {
      if (in.t != nullptr) check(*out, io, in, iin);
      ++iin;
    }
  }
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
