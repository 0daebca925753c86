// The DSA top-k ops without a GPU: argument packing against FlashInfer 0.6.3's topk exports (the recording stand-in
// logs what each receives), the validation rules (each refusal names the argument and the rule, and nothing reaches
// the module), the C ABI entries, and the float64 references against values computed independently here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "flashcpp/flashcpp.h"
#include "flashcpp/reference.hpp"
#include "flashcpp/topk.hpp"
#include "ops/ops_fixture.hpp"
#include "support/c_tensor.hpp"

namespace flashcpp::testing {
namespace {

class TopkOps : public OpsFixture {
 protected:
  void SetUp() override {
    OpsFixture::SetUp();
    link("topk");
    (void)recorded();
  }
  void expect_nothing_called() { EXPECT_EQ(recorded(), ""); }
  static TensorView row_states() { return dev(DType::u8, {kTopKRowStatesBytes}); }
};

// ---------------------------------------------------------------------------------------------------------------
// Packing

TEST_F(TopkOps, TopKPassesInputOutputsRowStatesAndKFromTheOutputWidth) {
  auto in = dev(DType::f32, {64, 65536}), idx = dev(DType::i32, {64, 2048}), val = dev(DType::f32, {64, 2048});
  auto rs = row_states();
  top_k(rt(), in, idx, val, &rs);
  expect_args(one_call("radix_topk"), {T(in), T(idx), T(val), T(rs), I(2048)});
  // Rows short enough for one CTA on any device need no row states (FlashInfer gets None).
  auto in16 = dev(DType::bf16, {3, 8192}), idx16 = dev(DType::i32, {3, 8192}), val16 = dev(DType::bf16, {3, 8192});
  top_k(rt(), in16, idx16, val16);  // k == d: every column
  expect_args(one_call("radix_topk"), {T(in16), T(idx16), T(val16), "None", I(8192)});
}

TEST_F(TopkOps, PageTableTransformPassesFlashInfersArgumentOrder) {
  // DSA decode: 4 requests x 2 MTP tokens, a token page table wider than max_len (its own row stride).
  auto logits = dev(DType::f32, {8, 8192}), lengths = dev(DType::i32, {8}), r2b = dev(DType::i32, {8});
  auto table = dev(DType::i32, {4, 12000}), out = dev(DType::i32, {8, 2048});
  auto rs = row_states();
  top_k_page_table_transform(rt(), logits, lengths, table, out, &r2b, &rs);
  expect_args(one_call("radix_topk_page_table_transform"),
              {T(logits), T(out), T(table), T(r2b), T(lengths), T(rs), I(2048)});
  // Without row_to_batch (a table row per input row) and without row states (max_len 4096, f16).
  auto l16 = dev(DType::f16, {5, 4096}), len5 = dev(DType::i32, {5}), t5 = dev(DType::i32, {5, 4096});
  auto o5 = dev(DType::i32, {5, 512});
  top_k_page_table_transform(rt(), l16, len5, t5, o5);
  expect_args(one_call("radix_topk_page_table_transform"), {T(l16), T(o5), T(t5), "None", T(len5), "None", I(512)});
}

TEST_F(TopkOps, RaggedTransformPassesFlashInfersArgumentOrder) {
  auto logits = dev(DType::bf16, {7, 65536}), offsets = dev(DType::i32, {7}), lengths = dev(DType::i32, {7});
  auto out = dev(DType::i32, {7, 2048});
  auto rs = row_states();
  top_k_ragged_transform(rt(), logits, offsets, lengths, out, &rs);
  expect_args(one_call("radix_topk_ragged_transform"), {T(logits), T(out), T(offsets), T(lengths), T(rs), I(2048)});
}

TEST_F(TopkOps, TransformsTakeKAboveMaxLenAndZeroRowsLaunchNothing) {
  // k 2048 over 100 positions: every row is short (positions in order, then -1), as in DSA's first decode steps.
  auto logits = dev(DType::f32, {2, 100}), len = dev(DType::i32, {2}), off = dev(DType::i32, {2});
  auto table = dev(DType::i32, {2, 100}), out = dev(DType::i32, {2, 2048});
  top_k_ragged_transform(rt(), logits, off, len, out);
  expect_args(one_call("radix_topk_ragged_transform"), {T(logits), T(out), T(off), T(len), "None", I(2048)});
  top_k_page_table_transform(rt(), logits, len, table, out);
  expect_args(one_call("radix_topk_page_table_transform"), {T(logits), T(out), T(table), "None", T(len), "None", I(2048)});

  // The rules do not depend on the row count: a 65536-wide input needs its row states even with no rows.
  auto rs = row_states();
  top_k(rt(), dev(DType::f32, {0, 65536}), dev(DType::i32, {0, 2048}), dev(DType::f32, {0, 2048}), &rs);
  top_k_page_table_transform(rt(), dev(DType::f32, {0, 65536}), dev(DType::i32, {0}), dev(DType::i32, {0, 65536}),
                             dev(DType::i32, {0, 2048}), nullptr, &rs);
  top_k_ragged_transform(rt(), dev(DType::f32, {0, 4096}), dev(DType::i32, {0}), dev(DType::i32, {0}),
                         dev(DType::i32, {0, 2048}));
  expect_nothing_called();
}

TEST_F(TopkOps, RowStatesMayBeAbsentExactlyWhereNoPathSplitsARow) {
  // One CTA holds 1024 x gcd(16 / element bytes, max_len) elements: 4096 f32 (max_len % 4 == 0), 8192 16-bit.
  struct Case {
    DType t;
    int64_t max_len;
    bool ok;
  };
  for (const Case& c : {Case{DType::f32, 4096, true}, Case{DType::f32, 4100, false}, Case{DType::f32, 1023, true},
                        Case{DType::f32, 1025, false}, Case{DType::f32, 2046, true}, Case{DType::f32, 2054, false},
                        Case{DType::bf16, 8192, true}, Case{DType::f16, 8200, false}, Case{DType::f16, 4092, true},
                        Case{DType::f16, 4100, false}}) {
    SCOPED_TRACE(std::string(dtype_name(c.t)) + " max_len " + std::to_string(c.max_len));
    auto in = dev(c.t, {2, c.max_len}), idx = dev(DType::i32, {2, 16}), val = dev(c.t, {2, 16});
    if (c.ok) {
      top_k(rt(), in, idx, val);
      EXPECT_EQ(lines(recorded()).size(), 1u);
    } else {
      EXPECT_INVALID(top_k(rt(), in, idx, val), "top_k: argument 'row_states' must be given for rows longer than");
    }
  }
  expect_nothing_called();
}

// ---------------------------------------------------------------------------------------------------------------
// Validation: each refusal names the argument and the rule; nothing reaches the module.

TEST_F(TopkOps, TopKRulesAreCheckedBeforeTheCall) {
  auto in = dev(DType::f32, {4, 4096}), idx = dev(DType::i32, {4, 64}), val = dev(DType::f32, {4, 64});
  EXPECT_INVALID(top_k(rt(), dev(DType::i32, {4, 4096}), idx, val), "top_k: argument 'input' must have dtype");
  EXPECT_INVALID(top_k(rt(), dev(DType::f32, {4, 2, 2048}), idx, val), "argument 'input' must have rank 2");
  EXPECT_INVALID(top_k(rt(), dev_strided(DType::f32, {4, 4096}, {8192, 1}), idx, val),
                 "argument 'input' must be contiguous");
  EXPECT_INVALID(top_k(rt(), TensorView::contiguous(in.data, DType::f32, Device::cpu(), {4, 4096}), idx, val),
                 "argument 'input' must be in CUDA device memory");
  EXPECT_INVALID(top_k(rt(), dev(DType::f32, {4, 0}), idx, val), "argument 'input' must have at least one column");
  // 2^31 elements: FlashInfer's row offsets are 32-bit.
  EXPECT_INVALID(top_k(rt(), dev(DType::bf16, {65536, 32768}), dev(DType::i32, {65536, 64}),
                       dev(DType::bf16, {65536, 64})),
                 "argument 'input' must have fewer than 2^31 elements");
  // Vector loads: 16 bytes when max_len is a multiple of 4 f32; a row of odd length is read one element at a time.
  TensorView off4 = in;
  off4.data = static_cast<char*>(in.data) + 4;
  EXPECT_INVALID(top_k(rt(), off4, idx, val), "argument 'input' must have a data pointer aligned to 16 bytes");
  TensorView odd = TensorView::contiguous(static_cast<char*>(in.data) + 4, DType::f32, in.device, {4, 1023});
  top_k(rt(), odd, idx, val);
  EXPECT_EQ(lines(recorded()).size(), 1u);

  EXPECT_INVALID(top_k(rt(), in, dev(DType::i64, {4, 64}), val), "argument 'indices' must have dtype");
  EXPECT_INVALID(top_k(rt(), in, dev(DType::i32, {3, 64}), val), "argument 'indices' must have size 4 in dim 0");
  EXPECT_INVALID(top_k(rt(), in, dev(DType::i32, {4, 0}), dev(DType::f32, {4, 0})),
                 "argument 'indices' must have k = size(1) >= 1");
  EXPECT_INVALID(top_k(rt(), in, dev(DType::i32, {4, 4097}), dev(DType::f32, {4, 4097})),
                 "argument 'indices' must have k = size(1) at most input.size(1) = 4096");
  EXPECT_INVALID(top_k(rt(), in, idx, dev(DType::bf16, {4, 64})), "argument 'values' must have the dtype of 'input'");
  EXPECT_INVALID(top_k(rt(), in, idx, dev(DType::f32, {4, 32})), "argument 'values' must have the shape of 'indices'");
  EXPECT_INVALID(top_k(rt(), in, idx, dev(DType::f32, {4, 64}, 1)), "argument 'values' must be on the device of 'input'");
  // Outputs share no byte with the input or each other (the row states are an output).
  EXPECT_INVALID(top_k(rt(), in, idx, TensorView::contiguous(in.data, DType::f32, in.device, {4, 64})),
                 "argument 'values' must not overlap 'input'");
  auto big = dev(DType::f32, {4, 65536}), rs = row_states();
  const TensorView rs_on_idx = TensorView::contiguous(idx.data, DType::u8, idx.device, {kTopKRowStatesBytes});
  EXPECT_INVALID(top_k(rt(), big, idx, val, &rs_on_idx), "'row_states'");
  expect_nothing_called();

  // The row states: 1-D, >= kTopKRowStatesBytes, 4-byte aligned, on input's device.
  auto small = dev(DType::u8, {kTopKRowStatesBytes - 1});
  EXPECT_INVALID(top_k(rt(), big, idx, val, &small),
                 "argument 'row_states' must hold at least 1048576 bytes");
  auto two_d = dev(DType::u8, {2, kTopKRowStatesBytes});
  EXPECT_INVALID(top_k(rt(), big, idx, val, &two_d), "argument 'row_states' must have rank 1");
  TensorView shifted = rs;
  shifted.data = static_cast<char*>(rs.data) + 2;
  EXPECT_INVALID(top_k(rt(), big, idx, val, &shifted),
                 "argument 'row_states' must have a data pointer aligned to 4 bytes");
  auto elsewhere = dev(DType::u8, {kTopKRowStatesBytes}, 1);
  EXPECT_INVALID(top_k(rt(), big, idx, val, &elsewhere),
                 "argument 'row_states' must be on the device of 'input'");
  auto as_i32 = dev(DType::i32, {kTopKRowStatesBytes / 4});  // any dtype: FlashInfer sees bytes
  top_k(rt(), big, idx, val, &as_i32);
  EXPECT_EQ(lines(recorded()).size(), 1u);
  expect_nothing_called();
}

TEST_F(TopkOps, TransformRulesAreCheckedBeforeTheCall) {
  auto in = dev(DType::f32, {6, 2048}), len = dev(DType::i32, {6}), table = dev(DType::i32, {6, 2048});
  auto out = dev(DType::i32, {6, 512}), r2b = dev(DType::i32, {6}), off = dev(DType::i32, {6});
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, dev(DType::i32, {5}), table, out),
                 "top_k_page_table_transform: argument 'lengths' must have size 6 in dim 0");
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, dev(DType::i64, {6}), table, out), "argument 'lengths' must have dtype");
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, dev(DType::i32, {6}, 1), table, out),
                 "argument 'lengths' must be on the device of 'input'");
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, len, dev(DType::i32, {6, 2047}), out),
                 "argument 'src_page_table' must have at least max_len = input.size(1) = 2048 columns");
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, len, dev(DType::f32, {6, 2048}), out),
                 "argument 'src_page_table' must have dtype");
  // FlashInfer takes the table's row stride but checks it is contiguous: a column slice of a wider table is not.
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, len, dev_strided(DType::i32, {6, 2048}, {4096, 1}), out),
                 "argument 'src_page_table' must be contiguous");
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, len, dev(DType::i32, {5, 2048}), out),
                 "argument 'src_page_table' must have a row per input row (6) when row_to_batch is absent");
  auto two = dev(DType::i32, {2, 2048});
  top_k_page_table_transform(rt(), in, len, two, out, &r2b);  // rows map onto 2 requests
  EXPECT_EQ(lines(recorded()).size(), 1u);
  auto r2b_short = dev(DType::i32, {3});
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, len, two, out, &r2b_short),
                 "argument 'row_to_batch' must have size 6 in dim 0");
  auto none = dev(DType::i32, {0, 2048});
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, len, none, out, &r2b),
                 "argument 'src_page_table' must have at least one row");
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, len, table, dev(DType::i32, {6, 0})),
                 "argument 'output_page_table' must have k = size(1) >= 1");
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, len, table, dev(DType::i32, {7, 512})),
                 "argument 'output_page_table' must have size 6 in dim 0");
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, len, table, TensorView::contiguous(table.data, DType::i32, table.device, {6, 512})),
                 "argument 'output_page_table' must not overlap 'src_page_table'");
  EXPECT_INVALID(top_k_page_table_transform(rt(), in, len, table, TensorView::contiguous(len.data, DType::i32, len.device, {6, 512})),
                 "argument 'output_page_table' must not overlap 'lengths'");
  EXPECT_INVALID(top_k_page_table_transform(rt(), dev(DType::f32, {6, 16384}), len, dev(DType::i32, {6, 16384}), out),
                 "argument 'row_states' must be given for rows longer than 4096 elements");

  EXPECT_INVALID(top_k_ragged_transform(rt(), in, dev(DType::i32, {7}), len, out),
                 "top_k_ragged_transform: argument 'offsets' must have size 6 in dim 0");
  EXPECT_INVALID(top_k_ragged_transform(rt(), in, off, dev(DType::u32, {6}), out), "argument 'lengths' must have dtype");
  EXPECT_INVALID(top_k_ragged_transform(rt(), in, off, len, dev(DType::i64, {6, 512})),
                 "argument 'output_indices' must have dtype");
  EXPECT_INVALID(top_k_ragged_transform(rt(), in, off, len, TensorView::contiguous(in.data, DType::i32, in.device, {6, 512})),
                 "argument 'output_indices' must not overlap 'input'");
  EXPECT_INVALID(top_k_ragged_transform(rt(), dev(DType::f16, {6, 2048}, 2), off, len, out),
                 "argument 'output_indices' must be on the device of 'input'");
  expect_nothing_called();
}

TEST_F(TopkOps, CAbiEntriesReachTheModuleAndReportErrors) {
  ::setenv("FLASHCPP_TVM_FFI_LIB", FLASHCPP_TVM_FFI_LIB, 1);
  ::setenv("FLASHCPP_MODULE_PATH", dir_.c_str(), 1);
  ::setenv("FLASHCPP_JIT", "off", 1);
  static_assert(FLASHCPP_TOP_K_ROW_STATES_BYTES == kTopKRowStatesBytes);
  auto in = dev(DType::f32, {64, 65536}), idx = dev(DType::i32, {64, 2048}), val = dev(DType::f32, {64, 2048});
  auto rs = row_states(), len = dev(DType::i32, {64}), r2b = dev(DType::i32, {64}), off = dev(DType::i32, {64});
  auto table = dev(DType::i32, {32, 65536});
  const auto cin = to_c(in), cidx = to_c(idx), cval = to_c(val), crs = to_c(rs), clen = to_c(len), cr2b = to_c(r2b),
             coff = to_c(off), ctable = to_c(table);
  ASSERT_EQ(flashcpp_top_k(&cin, &cidx, &cval, &crs, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  expect_args(one_call("radix_topk"), {T(in), T(idx), T(val), T(rs), I(2048)});
  ASSERT_EQ(flashcpp_top_k_page_table_transform(&cin, &clen, &ctable, &cr2b, &cidx, &crs, nullptr), FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  expect_args(one_call("radix_topk_page_table_transform"), {T(in), T(idx), T(table), T(r2b), T(len), T(rs), I(2048)});
  ASSERT_EQ(flashcpp_top_k_ragged_transform(&cin, &coff, &clen, &cidx, &crs, nullptr), FLASHCPP_SUCCESS)
      << flashcpp_last_error();
  expect_args(one_call("radix_topk_ragged_transform"), {T(in), T(idx), T(off), T(len), T(rs), I(2048)});

  // NULL row states for a row that may be split; NULL required tensors; a table without a row per input row.
  EXPECT_EQ(flashcpp_top_k(&cin, &cidx, &cval, nullptr, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("top_k: argument 'row_states' must be given"), std::string::npos)
      << flashcpp_last_error();
  EXPECT_EQ(flashcpp_top_k(&cin, nullptr, &cval, &crs, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("'indices'"), std::string::npos) << flashcpp_last_error();
  EXPECT_EQ(flashcpp_top_k_page_table_transform(&cin, &clen, &ctable, nullptr, &cidx, &crs, nullptr),
            FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("argument 'src_page_table' must have a row per input row"),
            std::string::npos)
      << flashcpp_last_error();
  EXPECT_EQ(flashcpp_top_k_ragged_transform(&cin, nullptr, &clen, &cidx, &crs, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("'offsets'"), std::string::npos) << flashcpp_last_error();
  expect_nothing_called();
}

// ---------------------------------------------------------------------------------------------------------------
// The float64 references against values computed here

TensorView host(std::vector<double>& v, int64_t rows, int64_t cols) {
  return TensorView::contiguous(v.data(), DType::f64, Device::cpu(), {rows, cols});
}
TensorView host(std::vector<int32_t>& v, int64_t rows, int64_t cols) {
  return TensorView::contiguous(v.data(), DType::i32, Device::cpu(), {rows, cols});
}
TensorView host(std::vector<int32_t>& v) {
  return TensorView::contiguous(v.data(), DType::i32, Device::cpu(), {static_cast<int64_t>(v.size())});
}

TEST(TopkReference, PicksTheLargestInOrderWithTiesToTheLowerPosition) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> in = {3, -1, 7, 7, 0.5, -0.0, 0.0, 2,  // row 0
                            -0.0, 0.0, -5, -0.0, 0.0, -inf, inf, nan};
  std::vector<int32_t> idx(2 * 4);
  std::vector<double> val(2 * 4);
  reference::top_k(host(in, 2, 8), host(idx, 2, 4), host(val, 2, 4));
  // Row 1: NaN above +inf, +0.0 above -0.0, ties to the lower position.
  EXPECT_EQ(idx, (std::vector<int32_t>{2, 3, 0, 7, 7, 6, 1, 4}));
  EXPECT_EQ(val[3], 2.0);
  EXPECT_TRUE(std::isnan(val[4]));
  EXPECT_EQ(val[5], inf);
  EXPECT_FALSE(std::signbit(val[6]));  // +0.0
  // k == d: every column in order (FlashInfer's short-row path), values copied.
  std::vector<int32_t> all(2 * 8);
  std::vector<double> vall(2 * 8);
  reference::top_k(host(in, 2, 8), host(all, 2, 8), host(vall, 2, 8));
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 8; ++j) EXPECT_EQ(all[r * 8 + j], j);
  EXPECT_EQ(std::memcmp(vall.data(), in.data(), 8 * 8), 0);
  EXPECT_THROW(reference::top_k(host(in, 2, 8), host(all, 2, 9), host(vall, 2, 9)), Error);  // k > d
}

TEST(TopkReference, RandomRowsMatchACountOfLargerEntries) {
  // Independent check: j is selected iff fewer than k entries of its row are larger (the values are distinct).
  std::mt19937 gen(3);
  const int64_t rows = 5, d = 300, k = 37;
  std::vector<double> in(rows * d);
  std::vector<int32_t> perm(d);
  for (int64_t r = 0; r < rows; ++r) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), gen);
    for (int64_t j = 0; j < d; ++j) in[r * d + j] = perm[j] - 150.0;  // distinct integers, exact in bf16
  }
  // bf16 input and f32 values: the selection and the values are exact.
  std::vector<uint16_t> in16(in.size());
  for (size_t i = 0; i < in.size(); ++i) in16[i] = reference::float_to_bf16(static_cast<float>(in[i]));
  std::vector<int32_t> idx(rows * k);
  std::vector<float> val(rows * k);
  reference::top_k(TensorView::contiguous(in16.data(), DType::bf16, Device::cpu(), {rows, d}), host(idx, rows, k),
                   TensorView::contiguous(val.data(), DType::f32, Device::cpu(), {rows, k}));
  for (int64_t r = 0; r < rows; ++r) {
    std::set<int32_t> want, got(idx.begin() + r * k, idx.begin() + (r + 1) * k);
    for (int64_t j = 0; j < d; ++j) {
      int64_t larger = 0;
      for (int64_t i = 0; i < d; ++i) larger += in[r * d + i] > in[r * d + j];
      if (larger < k) want.insert(static_cast<int32_t>(j));
    }
    EXPECT_EQ(got, want) << "row " << r;
    for (int64_t j = 0; j < k; ++j) EXPECT_EQ(val[r * k + j], in[r * d + idx[r * k + j]]);
    for (int64_t j = 1; j < k; ++j) EXPECT_GT(val[r * k + j - 1], val[r * k + j]);  // descending
  }
}

TEST(TopkReference, PageTableTransformMapsThroughTheBatchRowAndPadsShortRows) {
  // 3 rows of max_len 6, stored as a column slice of an [3, 8] array; 2 requests of width 8 (wider than max_len);
  // row_to_batch {1, 0, 1}, k 3.
  std::vector<double> wide = {0.1, 0.9, 0.3, 0.8, 0.2, 0.7, 99, 99,   // len 6: positions 1, 3, 5
                              5.0, 4.0, 3.0, 2.0, 1.0, 0.0, 99, 99,   // len 2 <= k: positions 0, 1 in order, then -1
                              0.0, 0.0, 9.0, 9.0, 9.0, 9.0, 99, 99};  // len 4: 9, 9 at 2, 3, then the lower 0 (0)
  const TensorView in = TensorView::strided(wide.data(), DType::f64, Device::cpu(), {3, 6}, {8, 1});
  std::vector<int32_t> table(2 * 8), len = {6, 2, 4}, r2b = {1, 0, 1}, out(3 * 3, 7);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 8; ++t) table[b * 8 + t] = 1000 * (b + 1) + t;
  const TensorView r2bv = host(r2b);
  reference::top_k_page_table_transform(in, host(len), host(table, 2, 8), host(out, 3, 3), &r2bv);
  EXPECT_EQ(out, (std::vector<int32_t>{2001, 2003, 2005, 1000, 1001, -1, 2002, 2003, 2000}));

  // Device-side rules the reference can check on the host: lengths <= max_len, row_to_batch < batch, and a table
  // row per input row without row_to_batch.
  std::vector<int32_t> long_len = {6, 7, 0}, bad_r2b = {0, 2, 1};
  const TensorView bad = host(bad_r2b);
  EXPECT_THROW(reference::top_k_page_table_transform(in, host(long_len), host(table, 2, 8), host(out, 3, 3), &r2bv),
               Error);
  EXPECT_THROW(reference::top_k_page_table_transform(in, host(len), host(table, 2, 8), host(out, 3, 3), &bad), Error);
  EXPECT_THROW(reference::top_k_page_table_transform(in, host(len), host(table, 2, 8), host(out, 3, 3)), Error);
}

TEST(TopkReference, RaggedTransformAddsTheOffset) {
  std::vector<double> in = {1, 5, 2, 4, 3, 8,   // len 5 (the 8 is past it): positions 1, 3
                            1, 2, 3, 4, 5, 6};  // len 0: -1, -1
  std::vector<int32_t> off = {100, 7}, len = {5, 0}, out(2 * 2, 7);
  reference::top_k_ragged_transform(host(in, 2, 6), host(off), host(len), host(out, 2, 2));
  EXPECT_EQ(out, (std::vector<int32_t>{101, 103, -1, -1}));
  std::vector<int32_t> huge = {std::numeric_limits<int32_t>::max(), 0};
  EXPECT_THROW(reference::top_k_ragged_transform(host(in, 2, 6), host(huge), host(len), host(out, 2, 2)), Error);
}

}  // namespace
}  // namespace flashcpp::testing
