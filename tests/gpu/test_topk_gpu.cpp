// DSA top-k (FlashInfer's topk module) on the GPU against the float64 reference, and the DSA decode chain: indexer
// logits -> top_k_page_table_transform -> mla::sparse_decode against the float64 MLA reference.
// Run with FLASHCPP_GPU_TESTS=1 on a machine whose Runtime finds (or builds) the `topk` module.
//
// Every test: fresh random inputs (seed printed on failure; no zeros), outputs poisoned before the run (0xA5 bytes:
// an int32 that is neither -1 nor any index or page-table value, NaN-free garbage in the values), every CUDA
// status checked. FlashInfer's result is an unordered set, so each row is compared as a set:
//  * the entries are distinct positions of the row (< its length), FlashInfer's values are the input's there;
//  * the multiset of their values equals the reference's (exact: a selection is not rounded). Where the k-th value
//    is not tied this is the reference's set itself, which the tie-free cases also compare directly; where it is,
//    any choice among the tied entries is FlashInfer's documented behaviour;
//  * short rows (length <= k) equal the reference exactly: positions in order, then -1.
// The cases cover FlashInfer's paths on an H200: FilteredTopK (k <= 2048, 16-bit rows <= 16384, f32 rows <= 32768
// or rows > max_len / 16384), the single-CTA radix select and the multi-CTA one that uses the row states (f32 rows
// of 65536 / 131072 with few rows); which one ran is not observable, the cases are chosen so each is taken.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "flashcpp/cuda.hpp"
#include "flashcpp/mla.hpp"
#include "flashcpp/reference.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/topk.hpp"
#include "mla/mla_test_support.hpp"
#include "reference/mla_reference.hpp"
#include "support/gpu.hpp"

namespace flashcpp::testing {
namespace {

namespace ref = flashcpp::reference;
namespace mla = flashcpp::mla;

constexpr int kTopkPoisonByte = 0xA5;
constexpr int32_t kPoisonI32 = static_cast<int32_t>(0xA5A5A5A5u);

const Runtime& runtime() {
  static const std::shared_ptr<Runtime> rt = Runtime::create();
  return *rt;
}

uint32_t fresh_seed() { return std::random_device{}(); }

/// A host array with its device twin (contiguous, row-major).
template <class T>
struct Arr {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<T> host;
  DeviceBuffer dev;
  Arr(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
    host.assign(static_cast<size_t>(numel()), T{});
    dev = DeviceBuffer(std::max<size_t>(bytes(), 16), 0);
  }
  int64_t numel() const { return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>()); }
  size_t bytes() const { return static_cast<size_t>(numel()) * sizeof(T); }
  TensorView hview() { return TensorView::contiguous(host.data(), dtype, Device::cpu(), std::span<const int64_t>(shape)); }
  TensorView dview() const {
    return TensorView::contiguous(dev.get(), dtype, Device::cuda(0), std::span<const int64_t>(shape));
  }
  void upload() {
    ASSERT_EQ(upload_bytes(dev.get(), host.data(), bytes()), cudaSuccess);
  }
  void poison() { ASSERT_EQ(fill_bytes(dev.get(), kTopkPoisonByte, std::max<size_t>(bytes(), 16)), cudaSuccess); }
  void download() {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(host.data(), dev.get(), bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

/// Scores [rows, d] in `t` (stored as 16-bit bits or float): `distinct`: each row a random permutation of d distinct
/// non-zero values in (-1, 1) (f32 only: exact); otherwise uniform in (-4, 4) rounded to the dtype, zeros replaced.
/// `levels` > 0: one of `levels` values (many ties at the threshold).
struct Scores {
  DType dtype;
  int64_t rows, d;
  std::vector<uint16_t> h16;
  std::vector<float> h32;
  DeviceBuffer dev;
  Scores(DType t, int64_t r, int64_t n) : dtype(t), rows(r), d(n) {}
  TensorView hview() {
    void* p = dtype == DType::f32 ? static_cast<void*>(h32.data()) : static_cast<void*>(h16.data());
    return TensorView::contiguous(p, dtype, Device::cpu(), {rows, d});
  }
  TensorView dview() const { return TensorView::contiguous(dev.get(), dtype, Device::cuda(0), {rows, d}); }
  double at(int64_t r, int64_t j) const {
    const size_t i = static_cast<size_t>(r * d + j);
    if (dtype == DType::f32) return h32[i];
    return dtype == DType::bf16 ? ref::bf16_to_float(h16[i]) : ref::half_to_float(h16[i]);
  }
};

Scores make_scores(DType t, int64_t rows, int64_t d, std::mt19937& rng, bool distinct, int levels = 0) {
  Scores s(t, rows, d);
  const size_t n = static_cast<size_t>(rows * d);
  std::vector<double> v(n);
  std::vector<int64_t> perm(static_cast<size_t>(d));
  std::uniform_real_distribution<double> u(-4, 4);
  for (int64_t r = 0; r < rows; ++r) {
    std::iota(perm.begin(), perm.end(), int64_t{0});
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t j = 0; j < d; ++j) {
      double x;
      if (distinct) x = (static_cast<double>(perm[static_cast<size_t>(j)]) + 0.25) / static_cast<double>(d) * 2 - 1;
      else if (levels > 0) x = (static_cast<double>(rng() % static_cast<uint32_t>(levels)) - levels / 2 + 0.5) / 8;
      else x = u(rng);
      v[static_cast<size_t>(r * d + j)] = x;
    }
  }
  if (t == DType::f32) {
    s.h32.resize(n);
    for (size_t i = 0; i < n; ++i) s.h32[i] = static_cast<float>(v[i]);
  } else {
    s.h16.resize(n);
    for (size_t i = 0; i < n; ++i) {
      uint16_t b = t == DType::bf16 ? ref::float_to_bf16(static_cast<float>(v[i])) : ref::float_to_half(static_cast<float>(v[i]));
      if ((b & 0x7fff) == 0) b = t == DType::bf16 ? ref::float_to_bf16(0.125f) : ref::float_to_half(0.125f);
      s.h16[i] = b;
    }
  }
  const size_t bytes = n * dtype_size(t);
  s.dev = DeviceBuffer(std::max<size_t>(bytes, 16), 0);
  const void* src = t == DType::f32 ? static_cast<const void*>(s.h32.data()) : static_cast<const void*>(s.h16.data());
  cuda_check(upload_bytes(s.dev.get(), src, bytes), "upload scores");
  return s;
}

// FlashInfer's order of values (IEEE total order), as in the reference.
uint64_t key(double x) {
  const uint64_t b = std::bit_cast<uint64_t>(x), sign = uint64_t{1} << 63;
  return (b & sign) ? ~b : (b ^ sign);
}

/// Row r's selected positions `got` (k of them, -1 past a short row's end) against the reference's `want`.
/// Returns "" when they agree as documented, else what differs.
std::string compare_row(const Scores& s, int64_t r, int64_t len, const std::vector<int64_t>& got,
                        const std::vector<int64_t>& want, bool tie_free) {
  const int64_t k = static_cast<int64_t>(want.size());
  if (len <= k) {  // short row: exact
    return got == want ? "" : "short row (length " + std::to_string(len) + ") differs from positions in order, then -1";
  }
  std::set<int64_t> seen;
  std::multiset<uint64_t> got_keys, want_keys;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t p = got[static_cast<size_t>(j)];
    if (p < 0 || p >= len) return "entry " + std::to_string(j) + " is position " + std::to_string(p) + ", outside [0, " +
                                  std::to_string(len) + ")";
    if (!seen.insert(p).second) return "position " + std::to_string(p) + " selected twice";
    got_keys.insert(key(s.at(r, p)));
    want_keys.insert(key(s.at(r, want[static_cast<size_t>(j)])));
  }
  if (got_keys != want_keys) return "the multiset of selected values differs from the reference's";
  if (tie_free && seen != std::set<int64_t>(want.begin(), want.end())) return "the set differs from the reference's";
  return "";
}

void expect_rows(const std::vector<std::string>& why, const std::string& what) {
  int64_t bad = 0, first = -1;
  for (size_t r = 0; r < why.size(); ++r)
    if (!why[r].empty() && bad++ == 0) first = static_cast<int64_t>(r);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << why.size() << " rows wrong; first row " << first << ": "
                    << (first >= 0 ? why[static_cast<size_t>(first)] : "");
}

/// A zero-filled row-states workspace (FlashInfer's rule: zero before the first use).
struct RowStates {
  DeviceBuffer buf{static_cast<size_t>(kTopKRowStatesBytes), 0};
  TensorView view = TensorView::contiguous(buf.get(), DType::u8, Device::cuda(0), {kTopKRowStatesBytes});
  RowStates() { cuda_check(fill_bytes(buf.get(), 0, buf.size()), "zero row states"); }
};

class TopkGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    FLASHCPP_REQUIRE_GPU();
    seed_ = fresh_seed();
  }
  uint32_t seed_ = 0;
};

// ------------------------------------------------------------------------------------------------ top_k

struct TopKCase {
  DType dtype;
  int64_t rows, d, k;
  bool distinct;
  int levels = 0;
  bool row_states = true;
};

TEST_F(TopkGpu, TopKMatchesTheReferenceAsSets) {
  RowStates rs;
  for (const TopKCase& c : {
           TopKCase{DType::f32, 64, 65536, 2048, true},      // DSA shape, FilteredTopK (64 rows > 65536 / 16384)
           TopKCase{DType::f32, 1, 65536, 2048, true},       // one row: the multi-CTA radix select
           TopKCase{DType::f32, 3, 131072, 512, true},       // multi-CTA, more CTAs per row
           TopKCase{DType::f32, 8, 65536, 1500, false, 64},  // ties at the threshold (64 levels), filtered
           TopKCase{DType::f32, 2, 65536, 1500, false, 64},  // the same through the multi-CTA radix select
           TopKCase{DType::bf16, 64, 8192, 512, false},      // 16-bit, filtered
           TopKCase{DType::f16, 4, 32768, 2048, false},      // 16-bit, radix (one CTA holds 32768 halves)
           TopKCase{DType::f32, 5, 1023, 100, true, 0, false},  // odd length, scalar loads, no row states
           TopKCase{DType::bf16, 2, 300, 300, false, 0, false}, // k == d: every column in order
       }) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " rows " + std::to_string(c.rows) + " d " + std::to_string(c.d) +
                 " k " + std::to_string(c.k) + (c.levels ? " levels " + std::to_string(c.levels) : "") + " seed " +
                 std::to_string(seed_));
    std::mt19937 rng(seed_);
    Scores s = make_scores(c.dtype, c.rows, c.d, rng, c.distinct, c.levels);
    Arr<int32_t> idx(DType::i32, {c.rows, c.k}), want_idx(DType::i32, {c.rows, c.k});
    Arr<double> want_val(DType::f64, {c.rows, c.k});
    const size_t vbytes = static_cast<size_t>(c.rows * c.k) * dtype_size(c.dtype);
    DeviceBuffer val(std::max<size_t>(vbytes, 16), 0);
    const TensorView vview = TensorView::contiguous(val.get(), c.dtype, Device::cuda(0), {c.rows, c.k});
    idx.poison();
    CUDA_OK(fill_bytes(val.get(), kTopkPoisonByte, vbytes));
    top_k(runtime(), s.dview(), idx.dview(), vview, c.row_states ? &rs.view : nullptr);
    idx.download();
    std::vector<uint8_t> vhost(vbytes);
    CUDA_OK(cudaMemcpy(vhost.data(), val.get(), vbytes, cudaMemcpyDeviceToHost));
    const TensorView vh = TensorView::contiguous(vhost.data(), c.dtype, Device::cpu(), {c.rows, c.k});
    ref::top_k(s.hview(), want_idx.hview(), want_val.hview());

    std::vector<std::string> why(static_cast<size_t>(c.rows));
    for (int64_t r = 0; r < c.rows; ++r) {
      std::vector<int64_t> got(static_cast<size_t>(c.k)), want(static_cast<size_t>(c.k));
      for (int64_t j = 0; j < c.k; ++j) {
        got[static_cast<size_t>(j)] = idx.host[static_cast<size_t>(r * c.k + j)];
        want[static_cast<size_t>(j)] = want_idx.host[static_cast<size_t>(r * c.k + j)];
      }
      std::string w = compare_row(s, r, c.d, got, want, c.distinct);
      // values[r][j] is the input's value at indices[r][j], bit for bit.
      for (int64_t j = 0; j < c.k && w.empty(); ++j)
        if (key(ref::load(vh, r * c.k + j)) != key(s.at(r, got[static_cast<size_t>(j)])))
          w = "values[" + std::to_string(j) + "] is not the input's value at its index";
      why[static_cast<size_t>(r)] = w;
    }
    expect_rows(why, "top_k");
  }
}

// ------------------------------------------------------------------------------------------------ transforms

struct TransformCase {
  DType dtype;
  int64_t batch, s_q, max_len, k;
  bool distinct;
};

/// Lengths of rows = batch * s_q: random in [1, max_len], plus the edges (0, 1, k - 1, k, k + 1, max_len).
std::vector<int32_t> random_lengths(int64_t rows, int64_t max_len, int64_t k, std::mt19937& rng) {
  std::vector<int32_t> len(static_cast<size_t>(rows));
  for (auto& l : len) l = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(1, max_len)(rng));
  const int64_t edges[] = {0, 1, k - 1, k, k + 1, max_len};
  for (size_t i = 0; i < 6 && i < len.size(); ++i) len[i] = static_cast<int32_t>(std::clamp<int64_t>(edges[i], 0, max_len));
  std::shuffle(len.begin(), len.end(), rng);
  return len;
}

TEST_F(TopkGpu, PageTableTransformMatchesTheReferenceAsSets) {
  RowStates rs;
  for (const TransformCase& c : {TransformCase{DType::f32, 32, 2, 65536, 2048, true},   // DSA decode, MTP 2
                                 TransformCase{DType::f32, 1, 1, 65536, 2048, true},    // one row: multi-CTA
                                 TransformCase{DType::f32, 64, 1, 8192, 512, true},
                                 TransformCase{DType::bf16, 16, 4, 16384, 2048, false}}) {
    const int64_t rows = c.batch * c.s_q, width = c.max_len + 64;  // a token page table wider than max_len
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " batch " + std::to_string(c.batch) + " s_q " +
                 std::to_string(c.s_q) + " max_len " + std::to_string(c.max_len) + " k " + std::to_string(c.k) +
                 " seed " + std::to_string(seed_));
    std::mt19937 rng(seed_);
    Scores s = make_scores(c.dtype, rows, c.max_len, rng, c.distinct);
    Arr<int32_t> len(DType::i32, {rows}), r2b(DType::i32, {rows}), table(DType::i32, {c.batch, width});
    Arr<int32_t> out(DType::i32, {rows, c.k}), want(DType::i32, {rows, c.k});
    len.host = random_lengths(rows, c.max_len, c.k, rng);
    for (int64_t r = 0; r < rows; ++r) r2b.host[static_cast<size_t>(r)] = static_cast<int32_t>(r / c.s_q);
    // Distinct slots (a random injective map), so each output value names one position of one request.
    std::vector<int32_t> slots(static_cast<size_t>(c.batch * width));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    table.host = slots;
    std::vector<int64_t> where(slots.size());  // slot -> request * width + position
    for (size_t i = 0; i < slots.size(); ++i) where[static_cast<size_t>(slots[i])] = static_cast<int64_t>(i);
    len.upload();
    r2b.upload();
    table.upload();
    out.poison();
    const TensorView r2bv = r2b.dview();
    const bool one_to_one = c.s_q == 1;
    top_k_page_table_transform(runtime(), s.dview(), len.dview(), table.dview(), out.dview(),
                               one_to_one ? nullptr : &r2bv, &rs.view);
    out.download();
    const TensorView r2bh = r2b.hview();
    ref::top_k_page_table_transform(s.hview(), len.hview(), table.hview(), want.hview(), one_to_one ? nullptr : &r2bh);

    std::vector<std::string> why(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / c.s_q, l = len.host[static_cast<size_t>(r)];
      std::vector<int64_t> got(static_cast<size_t>(c.k)), wp(static_cast<size_t>(c.k));
      std::string w;
      for (int64_t j = 0; j < c.k && w.empty(); ++j) {
        for (auto [v, dst] : {std::pair{out.host[static_cast<size_t>(r * c.k + j)], &got},
                              std::pair{want.host[static_cast<size_t>(r * c.k + j)], &wp}}) {
          if (v == -1) {
            (*dst)[static_cast<size_t>(j)] = -1;
            continue;
          }
          if (v < 0 || static_cast<size_t>(v) >= where.size() || where[static_cast<size_t>(v)] / width != b) {
            w = "entry " + std::to_string(j) + " = " + std::to_string(v) + " is not a slot of request " + std::to_string(b);
            break;
          }
          (*dst)[static_cast<size_t>(j)] = where[static_cast<size_t>(v)] % width;
        }
      }
      why[static_cast<size_t>(r)] = w.empty() ? compare_row(s, r, l, got, wp, c.distinct) : w;
    }
    expect_rows(why, "top_k_page_table_transform");
  }
}

TEST_F(TopkGpu, RaggedTransformMatchesTheReferenceAsSets) {
  RowStates rs;
  for (const TransformCase& c : {TransformCase{DType::f32, 64, 1, 65536, 2048, true},
                                 TransformCase{DType::f32, 2, 1, 65536, 512, true},
                                 TransformCase{DType::bf16, 64, 1, 8192, 2048, false},
                                 TransformCase{DType::f16, 3, 1, 2000, 4096, false}}) {  // k > max_len: all short
    const int64_t rows = c.batch;
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " rows " + std::to_string(rows) + " max_len " +
                 std::to_string(c.max_len) + " k " + std::to_string(c.k) + " seed " + std::to_string(seed_));
    std::mt19937 rng(seed_);
    Scores s = make_scores(c.dtype, rows, c.max_len, rng, c.distinct);
    Arr<int32_t> len(DType::i32, {rows}), off(DType::i32, {rows}), out(DType::i32, {rows, c.k}),
        want(DType::i32, {rows, c.k});
    len.host = random_lengths(rows, c.max_len, c.k, rng);
    int32_t start = static_cast<int32_t>(rng() % 1000);  // ragged kv: row r's sequence starts where r - 1's ends
    for (int64_t r = 0; r < rows; ++r) {
      off.host[static_cast<size_t>(r)] = start;
      start += len.host[static_cast<size_t>(r)];
    }
    len.upload();
    off.upload();
    out.poison();
    top_k_ragged_transform(runtime(), s.dview(), off.dview(), len.dview(), out.dview(), &rs.view);
    out.download();
    ref::top_k_ragged_transform(s.hview(), off.hview(), len.hview(), want.hview());
    std::vector<std::string> why(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t o = off.host[static_cast<size_t>(r)];
      std::vector<int64_t> got(static_cast<size_t>(c.k)), wp(static_cast<size_t>(c.k));
      for (int64_t j = 0; j < c.k; ++j) {
        const int32_t g = out.host[static_cast<size_t>(r * c.k + j)], w = want.host[static_cast<size_t>(r * c.k + j)];
        got[static_cast<size_t>(j)] = g == -1 ? -1 : int64_t{g} - o;  // poison lands outside [0, len)
        wp[static_cast<size_t>(j)] = w == -1 ? -1 : int64_t{w} - o;
      }
      why[static_cast<size_t>(r)] = compare_row(s, r, len.host[static_cast<size_t>(r)], got, wp, c.distinct);
    }
    expect_rows(why, "top_k_ragged_transform");
  }
}

TEST_F(TopkGpu, RowStatesAreReusableAcrossLaunches) {
  // The multi-CTA radix path (one f32 row of 65536) three times on one workspace, zeroed once: every result right,
  // and each launch leaves the histograms and the barrier counter of every group zero (RadixRowState: 3 x 256 u32
  // histograms, then remaining_k, prefix, arrival_counter, output_counter, sum_topk; 3092 bytes).
  RowStates rs;
  std::mt19937 rng(seed_);
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (int rep = 0; rep < 3; ++rep) {
    Scores s = make_scores(DType::f32, 1, 65536, rng, true);
    Arr<int32_t> idx(DType::i32, {1, 2048}), want(DType::i32, {1, 2048});
    Arr<float> val(DType::f32, {1, 2048});
    Arr<double> want_val(DType::f64, {1, 2048});
    idx.poison();
    val.poison();
    top_k(runtime(), s.dview(), idx.dview(), val.dview(), &rs.view);
    idx.download();
    ref::top_k(s.hview(), want.hview(), want_val.hview());
    std::vector<int64_t> got(idx.host.begin(), idx.host.end()), wp(want.host.begin(), want.host.end());
    EXPECT_EQ(compare_row(s, 0, 65536, got, wp, true), "") << "launch " << rep;
    std::vector<uint32_t> state(static_cast<size_t>(kTopKRowStatesBytes / 4));
    CUDA_OK(cudaMemcpy(state.data(), rs.buf.get(), static_cast<size_t>(kTopKRowStatesBytes), cudaMemcpyDeviceToHost));
    const size_t words = 3092 / 4;
    for (size_t g = 0; g + words <= state.size(); g += words) {
      for (size_t i = 0; i < 3 * 256; ++i) ASSERT_EQ(state[g + i], 0u) << "launch " << rep << " group " << g / words;
      ASSERT_EQ(state[g + 3 * 256 + 2], 0u) << "arrival_counter, launch " << rep << " group " << g / words;
    }
  }
}

// ------------------------------------------------------------------------------------------------ the DSA chain

TEST_F(TopkGpu, IndexerTopKFeedsSparseDecode) {
  // DeepSeek V3.2 decode, small: 4 requests x 2 MTP tokens, 64 heads, k 512 of up to 5000 cached tokens in 64-token
  // blocks of the FP8 cache. The indexer's logits pick each token's k keys through the token page table; the
  // attention over them must match the float64 MLA reference given the reference top-k's indices.
  using namespace flashcpp::mla_test;
  const int64_t b = 4, s_q = 2, h_q = 64, k = 512, block = 64, max_len = 5000;
  const int64_t ctx[b] = {5000, 300, 4097, 2048};  // request 1 shorter than k: its rows end in -1
  const int64_t blocks_per = (max_len + block - 1) / block, num_blocks = b * blocks_per + 5;
  SCOPED_TRACE("seed " + std::to_string(seed_));
  std::mt19937 rng(seed_);

  // Cache: every block of every request in a random place; token slots block * 64 + offset.
  std::vector<int32_t> block_ids(static_cast<size_t>(num_blocks));
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);
  std::vector<uint16_t> kv = random_bf16(static_cast<size_t>(num_blocks * block * 576), rng);
  std::vector<uint8_t> cache(static_cast<size_t>(num_blocks * block * 656));
  mla::quantize_kv_cache_fp8(TensorView::contiguous(kv.data(), DType::bf16, Device::cpu(), {num_blocks * block, 576}),
                             TensorView::contiguous(cache.data(), DType::u8, Device::cpu(), {num_blocks * block, 656}),
                             nullptr);
  const int64_t width = blocks_per * block;
  Arr<int32_t> table(DType::i32, {b, width}), len(DType::i32, {b * s_q}), r2b(DType::i32, {b * s_q});
  for (int64_t r = 0; r < b; ++r)
    for (int64_t t = 0; t < width; ++t)
      table.host[static_cast<size_t>(r * width + t)] =
          block_ids[static_cast<size_t>(r * blocks_per + t / block)] * static_cast<int32_t>(block) + static_cast<int32_t>(t % block);
  for (int64_t r = 0; r < b * s_q; ++r) {
    r2b.host[static_cast<size_t>(r)] = static_cast<int32_t>(r / s_q);
    len.host[static_cast<size_t>(r)] = static_cast<int32_t>(ctx[r / s_q] - (s_q - 1 - r % s_q));  // causal MTP
  }
  // Indexer logits, distinct; past each row's length a large value that would win if it were read.
  Scores logits = make_scores(DType::f32, b * s_q, max_len, rng, true);
  for (int64_t r = 0; r < b * s_q; ++r)
    for (int64_t t = len.host[static_cast<size_t>(r)]; t < max_len; ++t)
      logits.h32[static_cast<size_t>(r * max_len + t)] = 100.0f + static_cast<float>(t);
  CUDA_OK(upload_bytes(logits.dev.get(), logits.h32.data(), logits.h32.size() * 4));
  table.upload();
  len.upload();
  r2b.upload();

  Arr<int32_t> indices(DType::i32, {b * s_q, k}), want_idx(DType::i32, {b * s_q, k});
  RowStates rs;
  Stream stream(0);
  indices.poison();
  const TensorView r2bv = r2b.dview();
  top_k_page_table_transform(runtime(), logits.dview(), len.dview(), table.dview(), indices.dview(),
                             &r2bv, &rs.view, stream);

  // Sparse decode on the same stream, reading top-k's output as its indices [b, s_q, k] (the same bytes).
  Arr<uint16_t> q(DType::bf16, {b, s_q, h_q, 576});
  q.host = random_bf16(q.host.size(), rng, 1.0);
  q.upload();
  DeviceBuffer dcache(cache.size(), 0);
  CUDA_OK(upload_bytes(dcache.get(), cache.data(), cache.size()));
  Arr<uint16_t> out(DType::bf16, {b, s_q, h_q, 512});
  Arr<float> lse(DType::f32, {b, s_q, h_q});
  out.poison();
  lse.poison();
  const double sm_scale = 1.0 / std::sqrt(192.0);
  const TensorView cview =
      TensorView::contiguous(dcache.get(), DType::u8, Device::cuda(0), {num_blocks, block, 1, 656});
  const TensorView iview = TensorView::contiguous(indices.dev.get(), DType::i32, Device::cuda(0), {b, s_q, k});
  const mla::DecodePlan plan = mla::DecodePlan::create(
      {.batch = int(b), .s_q = int(s_q), .h_q = int(h_q), .d_qk = 576, .topk = int(k)}, 0, stream);
  const mla::SparseDecodeOptions options{.sm_scale = sm_scale};
  plan.run({.q = q.dview(), .kv_cache = cview, .indices = iview, .out = out.dview(), .lse = lse.dview()}, options, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  indices.download();
  out.download();
  lse.download();

  // The indices: per row the reference's set (distinct logits), short rows exactly.
  const TensorView r2bh = r2b.hview();
  ref::top_k_page_table_transform(logits.hview(), len.hview(), table.hview(), want_idx.hview(), &r2bh);
  for (int64_t r = 0; r < b * s_q; ++r) {
    std::vector<int32_t> g(indices.host.begin() + r * k, indices.host.begin() + (r + 1) * k);
    std::vector<int32_t> w(want_idx.host.begin() + r * k, want_idx.host.begin() + (r + 1) * k);
    if (len.host[static_cast<size_t>(r)] <= k) {
      EXPECT_EQ(g, w) << "short row " << r;
    } else {
      EXPECT_EQ(std::multiset<int32_t>(g.begin(), g.end()), std::multiset<int32_t>(w.begin(), w.end())) << "row " << r;
    }
  }

  // The attention against the float64 reference over the reference's indices.
  const auto hc = TensorView::contiguous(cache.data(), DType::u8, Device::cpu(), {num_blocks, block, 1, 656});
  const auto hi = TensorView::contiguous(want_idx.host.data(), DType::i32, Device::cpu(), {b, s_q, k});
  const auto want = ref::mla_sparse_decode_reference(q.hview(), hc, hi, nullptr, nullptr, sm_scale);
  std::vector<double> got_out, got_lse;
  for (uint16_t x : out.host) got_out.push_back(bf16_bits_to_float(x));
  for (float x : lse.host) got_lse.push_back(x);
  const auto o = compare(got_out, want.out, 4e-3, kOutRelTol, kOutCosDiffTol, "sparse_decode out");
  EXPECT_TRUE(o.ok) << o.message;
  const auto l = compare(got_lse, want.lse, kLseAbsTol, kLseRelTol, 1.0, "sparse_decode lse");
  EXPECT_TRUE(l.ok) << l.message;
}

}  // namespace
}  // namespace flashcpp::testing
