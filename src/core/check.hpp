// The one validation vocabulary. Every op validates all of its arguments with a Validator before it
// launches anything; the first broken rule throws Error(invalid_argument) whose message names the op,
// the argument and the rule, and shows what was passed:
//   "rmsnorm: argument 'weight' must have size 4096 in dim 0 (= input.size(1)); got bf16[4095] cuda:0"
#pragma once
#include <cmath>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "flashcpp/error.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp {

class Validator {
 public:
  explicit Validator(std::string_view op) : op_(op) {}

  /// Fails with "<op>: argument '<arg>' <rule>".
  [[noreturn]] void fail(std::string_view arg, std::string_view rule) const;
  /// Fails with the tensor's description appended: "...; got bf16[2, 3] cuda:0".
  [[noreturn]] void fail(std::string_view arg, const TensorView& t, std::string_view rule) const;

  void require(bool ok, std::string_view arg, std::string_view rule) const {
    if (!ok) fail(arg, rule);
  }

  // Tensors.
  const Validator& defined(const TensorView& t, std::string_view arg) const;
  const Validator& dtype(const TensorView& t, std::string_view arg, std::initializer_list<DType> allowed) const;
  const Validator& same_dtype(const TensorView& t, std::string_view arg, const TensorView& ref,
                              std::string_view ref_arg) const;
  const Validator& rank(const TensorView& t, std::string_view arg, int rank) const;
  /// Size of one dim; `what` explains where the expected value comes from ("input.size(1)").
  const Validator& dim(const TensorView& t, std::string_view arg, int d, int64_t expected,
                       std::string_view what = {}) const;
  /// Full shape; -1 in `expected` matches any size.
  const Validator& shape(const TensorView& t, std::string_view arg, std::initializer_list<int64_t> expected) const;
  const Validator& same_shape(const TensorView& t, std::string_view arg, const TensorView& ref,
                              std::string_view ref_arg) const;
  const Validator& same_strides(const TensorView& t, std::string_view arg, const TensorView& ref,
                                std::string_view ref_arg) const;
  const Validator& contiguous(const TensorView& t, std::string_view arg) const;
  const Validator& last_dim_contiguous(const TensorView& t, std::string_view arg) const;
  /// Strides non-negative and no two elements alias (checked for views whose dims are sorted by stride).
  const Validator& no_negative_strides(const TensorView& t, std::string_view arg) const;
  const Validator& on_cuda(const TensorView& t, std::string_view arg) const;
  /// In host memory, with data (a host array is read by the checks that follow: null data with elements is
  /// refused here, before any read).
  const Validator& on_host(const TensorView& t, std::string_view arg) const;
  const Validator& same_device(const TensorView& t, std::string_view arg, const TensorView& ref,
                               std::string_view ref_arg) const;
  const Validator& aligned(const TensorView& t, std::string_view arg, size_t bytes) const;
  /// At least `bytes` bytes (1-D buffers such as workspaces).
  const Validator& min_bytes(const TensorView& t, std::string_view arg, int64_t bytes) const;

  // Overlap. Two views overlap when some byte lies in an element of each: views whose byte ranges cross
  // but whose elements interleave (the k and v halves of one [pages, 2, ...] cache, slices of a fused qkv
  // tensor) do not. Views on different devices never overlap (host memory counts as one device). Each
  // view's extent is checked to fit in int64 first (the rule refuses it otherwise) and addresses are
  // computed in 128 bits, so no arithmetic here can overflow.

  /// An argument of the overlap rule; a null `t` is an absent optional argument and is skipped.
  struct Named {
    const TensorView* t;
    std::string_view arg;
  };
  /// Exact in place: whether `out` may be the very view `other` (same data, dtype, shape and strides).
  enum class InPlace { refused, allowed };
  /// `out` (written by the op) shares no byte with `other`; with InPlace::allowed it may instead be
  /// exactly `other`, never a partial overlap of it.
  const Validator& disjoint(const TensorView& out, std::string_view out_arg, const TensorView& other,
                            std::string_view other_arg, InPlace in_place = InPlace::refused) const;
  /// The rule every op applies once its arguments are otherwise valid: each output shares no byte with
  /// any input nor with any other output.
  const Validator& no_overlap(std::initializer_list<Named> outputs, std::initializer_list<Named> inputs) const;

  // Scalars.
  const Validator& finite(double v, std::string_view arg) const;
  const Validator& positive(double v, std::string_view arg) const;
  const Validator& in_range(int64_t v, std::string_view arg, int64_t lo, int64_t hi) const;  // [lo, hi]
  const Validator& divisible(int64_t v, std::string_view arg, int64_t by, std::string_view by_what) const;
  const Validator& one_of(int64_t v, std::string_view arg, std::initializer_list<int64_t> allowed) const;

  // Host index arrays (int32 on the host): starts at 0, never decreases, ends at `last` (if >= 0).
  const Validator& indptr(const TensorView& t, std::string_view arg, int64_t expected_len, int64_t last = -1) const;
  /// Every value of a host int32 array in [lo, hi).
  const Validator& values_in_range(const TensorView& t, std::string_view arg, int64_t lo, int64_t hi) const;

  std::string_view op() const { return op_; }

 private:
  std::string_view op_;
};

}  // namespace flashcpp
