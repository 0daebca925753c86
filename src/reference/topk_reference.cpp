// float64 references of the DSA top-k ops (flashcpp/topk.hpp): one exact selection per row, in descending order
// of FlashInfer's order of values, ties to the lower position.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "reference/reference_util.hpp"

namespace flashcpp::reference {
namespace {

// The IEEE total order of a value as an unsigned key (larger key = ranks higher): what FlashInfer does with the
// input dtype's bits (flip all bits of a negative, the sign bit of a positive). Widening f16/bf16/f32 to double is
// exact and keeps this order (-0.0 below +0.0, NaN by its sign beyond the infinities).
uint64_t order_key(double x) {
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  constexpr uint64_t sign = uint64_t{1} << 63;
  return (bits & sign) ? ~bits : (bits ^ sign);
}

// A host i32 matrix (any strides) of `rows` rows (rows < 0: any) and at least `min_cols` columns.
void check_host_i32_2d(const Validator& v, const TensorView& t, const char* arg, int64_t rows, int64_t min_cols) {
  v.defined(t, arg).on_host(t, arg).dtype(t, arg, {DType::i32}).rank(t, arg, 2).no_negative_strides(t, arg);
  if (rows >= 0) v.dim(t, arg, 0, rows);
  v.require(t.shape[1] >= min_cols, arg, "must have at least " + std::to_string(min_cols) + " columns");
}

int32_t at_i32(const TensorView& t, std::initializer_list<int64_t> index) {
  int32_t x;
  std::memcpy(&x, static_cast<const char*>(t.data) + offset_of(t, index) * 4, 4);
  return x;
}
void put_i32(const TensorView& t, int64_t r, int64_t j, int32_t x) {
  std::memcpy(static_cast<char*>(t.data) + offset_of(t, {r, j}) * 4, &x, 4);
}

// The selected positions of row r of input over its first `len` entries, k of them (-1 past a short row's end).
// A short row (len <= k) is its positions in order, as FlashInfer writes it.
void select_row(const TensorView& input, int64_t r, int64_t len, int64_t k, std::vector<double>& row,
                std::vector<int64_t>& pos) {
  row.resize(static_cast<size_t>(len));
  detail::load_row(input, offset_of(input, {r, 0}), len, row.data());
  pos.assign(static_cast<size_t>(k), -1);
  if (len <= k) {
    std::iota(pos.begin(), pos.begin() + len, int64_t{0});
    return;
  }
  std::vector<int64_t> all(static_cast<size_t>(len));
  std::iota(all.begin(), all.end(), int64_t{0});
  std::partial_sort(all.begin(), all.begin() + k, all.end(), [&](int64_t a, int64_t b) {
    const uint64_t ka = order_key(row[static_cast<size_t>(a)]), kb = order_key(row[static_cast<size_t>(b)]);
    return ka != kb ? ka > kb : a < b;
  });
  std::copy_n(all.begin(), k, pos.begin());
}

// lengths: host i32 [rows], each in [0, max_len] (checked here: the reference reads the rows).
void check_lengths(const Validator& v, const TensorView& lengths, int64_t rows, int64_t max_len) {
  detail::check_host_i32(v, lengths, "lengths", rows);
  v.values_in_range(lengths, "lengths", 0, max_len + 1);
}

}  // namespace

void top_k(const TensorView& input, const TensorView& indices, const TensorView& values) {
  const Validator v("reference::top_k");
  detail::check_host_float(v, input, "input");
  v.rank(input, "input", 2);
  const int64_t rows = input.shape[0], d = input.shape[1];
  check_host_i32_2d(v, indices, "indices", rows, 0);
  const int64_t k = indices.shape[1];
  v.require(k >= 1 && k <= d, "indices", "must have k = size(1) in [1, input.size(1)]");
  detail::check_host_float(v, values, "values");
  v.same_shape(values, "values", indices, "indices");
  detail::parallel_for(rows, [&](int64_t r) {
    std::vector<double> row;
    std::vector<int64_t> pos;
    select_row(input, r, d, k, row, pos);
    for (int64_t j = 0; j < k; ++j) {
      put_i32(indices, r, j, static_cast<int32_t>(pos[static_cast<size_t>(j)]));
      store(values, offset_of(values, {r, j}), row[static_cast<size_t>(pos[static_cast<size_t>(j)])]);
    }
  });
}

void top_k_page_table_transform(const TensorView& input, const TensorView& lengths, const TensorView& src_page_table,
                                const TensorView& output_page_table, OptionalTensor row_to_batch) {
  const Validator v("reference::top_k_page_table_transform");
  detail::check_host_float(v, input, "input");
  v.rank(input, "input", 2);
  const int64_t rows = input.shape[0], max_len = input.shape[1];
  check_lengths(v, lengths, rows, max_len);
  check_host_i32_2d(v, src_page_table, "src_page_table", -1, max_len);
  const int64_t batch = src_page_table.shape[0];
  if (row_to_batch) {
    detail::check_host_i32(v, *row_to_batch, "row_to_batch", rows);
    v.values_in_range(*row_to_batch, "row_to_batch", 0, batch);
  } else {
    v.require(batch >= rows, "src_page_table", "must have a row per input row when row_to_batch is absent");
  }
  check_host_i32_2d(v, output_page_table, "output_page_table", rows, 0);
  const int64_t k = output_page_table.shape[1];
  v.require(k >= 1, "output_page_table", "must have k = size(1) >= 1");
  detail::parallel_for(rows, [&](int64_t r) {
    std::vector<double> row;
    std::vector<int64_t> pos;
    select_row(input, r, at_i32(lengths, {r}), k, row, pos);
    const int64_t b = row_to_batch ? at_i32(*row_to_batch, {r}) : r;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = pos[static_cast<size_t>(j)];
      put_i32(output_page_table, r, j, p < 0 ? -1 : at_i32(src_page_table, {b, p}));
    }
  });
}

void top_k_ragged_transform(const TensorView& input, const TensorView& offsets, const TensorView& lengths,
                            const TensorView& output_indices) {
  const Validator v("reference::top_k_ragged_transform");
  detail::check_host_float(v, input, "input");
  v.rank(input, "input", 2);
  const int64_t rows = input.shape[0], max_len = input.shape[1];
  check_lengths(v, lengths, rows, max_len);
  detail::check_host_i32(v, offsets, "offsets", rows);
  check_host_i32_2d(v, output_indices, "output_indices", rows, 0);
  const int64_t k = output_indices.shape[1];
  v.require(k >= 1, "output_indices", "must have k = size(1) >= 1");
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t last = int64_t{at_i32(offsets, {r})} + at_i32(lengths, {r}) - 1;
    v.require(last <= INT32_MAX, "offsets", "must keep offsets[r] + lengths[r] - 1 within int32");
  }
  detail::parallel_for(rows, [&](int64_t r) {
    std::vector<double> row;
    std::vector<int64_t> pos;
    select_row(input, r, at_i32(lengths, {r}), k, row, pos);
    const int64_t off = at_i32(offsets, {r});
    for (int64_t j = 0; j < k; ++j) {
      const int64_t p = pos[static_cast<size_t>(j)];
      put_i32(output_indices, r, j, p < 0 ? -1 : static_cast<int32_t>(off + p));
    }
  });
}

}  // namespace flashcpp::reference
