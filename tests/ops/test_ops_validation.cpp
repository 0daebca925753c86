// The validation matrix: for every op a valid baseline (which reaches the module), then one failing case
// per rule. Each failing case must throw Error(invalid_argument) naming the argument and the rule, and
// must call nothing (the recording module's log stays empty: nothing launched, nothing written).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include "ops/ops_fixture.hpp"

namespace flashcpp::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

class OpsValidation : public OpsFixture {
 protected:
  /// Runs `call(args)` on a copy of `base` changed by `mutate`; expects invalid_argument with `fragment`.
  template <class Args>
  void reject(const Args& base, const std::function<void(Args&)>& mutate, const std::function<void(const Args&)>& call,
              const std::string& fragment) {
    Args a = base;
    mutate(a);
    (void)recorded();
    EXPECT_INVALID(call(a), fragment);
    EXPECT_EQ(recorded(), "") << "a module function ran after a validation failure (" << fragment << ")";
  }
  template <class Args>
  void accept(const Args& base, const std::function<void(const Args&)>& call) {
    (void)recorded();
    call(base);
    EXPECT_NE(recorded(), "") << "the valid baseline did not reach the module";
  }
  static TensorView on_device(TensorView t, int id) {
    t.device = Device::cuda(id);
    return t;
  }
  static TensorView shifted(TensorView t, int bytes) {
    t.data = static_cast<char*>(t.data) + bytes;
    return t;
  }
};

// -------------------------------------------------------------------------------------------------

struct NormArgs {
  TensorView out, input, weight;
  RmsNormOptions o;
};

// A contiguous view of a shape whose element count overflows int64 is still built (validation refuses it
// by name); one whose strides themselves overflow is refused when it is made.
TEST(OpsTensorView, ContiguousStridesAreCheckedAndOverflowingCountsLeftToValidation) {
  const auto wide = TensorView::contiguous(nullptr, DType::bf16, Device::cpu(), {int64_t{1} << 33, int64_t{1} << 31});
  EXPECT_EQ(wide.strides[0], int64_t{1} << 31);
  EXPECT_FALSE(wide.extent_fits());
  EXPECT_TRUE(wide.is_contiguous());
  EXPECT_INVALID((void)TensorView::contiguous(nullptr, DType::bf16, Device::cpu(),
                                              {2, int64_t{1} << 40, int64_t{1} << 40}),
                 "stride that does not fit in int64");
  // numel and nbytes on views validation has not seen: a zero size wins over a product past int64 (the
  // C ABI fuzzer's [6, 3.3e18, 0] overflowed before reaching the 0), a product past int64 saturates.
  TensorView huge = TensorView::contiguous(nullptr, DType::bf16, Device::cpu(), {6, 0});
  huge.shape[1] = 3327647950551526914;
  huge.rank = 3;
  huge.shape[2] = 0;
  huge.strides[2] = 1;
  EXPECT_EQ(huge.numel(), 0);
  EXPECT_EQ(huge.nbytes(), 0);
  EXPECT_TRUE(huge.extent_fits());  // no element: nothing to address
  huge.shape[2] = 1;
  EXPECT_EQ(huge.numel(), INT64_MAX);
  EXPECT_FALSE(huge.extent_fits());
  huge.strides[0] = int64_t{1} << 62;  // (6 - 1) * 2^62 elements of span
  EXPECT_EQ(huge.nbytes(), INT64_MAX);
  huge.shape[2] = 0;
  huge.shape[0] = -6;  // a negative size is refused even behind a zero one
  EXPECT_FALSE(huge.extent_fits());
  // A stride of INT64_MIN (found by the C ABI fuzzer: extent_fits negated it before refusing it).
  TensorView min_stride = TensorView::contiguous(nullptr, DType::bf16, Device::cpu(), {2, 3});
  min_stride.strides[0] = INT64_MIN;
  EXPECT_FALSE(min_stride.extent_fits());
  EXPECT_EQ(min_stride.nbytes(), INT64_MAX);
  const auto ok = TensorView::contiguous(nullptr, DType::bf16, Device::cpu(), {3, 5, 7});
  EXPECT_EQ(ok.strides[0], 35);
  EXPECT_EQ(ok.strides[1], 7);
  EXPECT_TRUE(ok.extent_fits());
}

TEST_F(OpsValidation, Rmsnorm) {
  NormArgs b{dev(DType::bf16, {4, 256}), dev(DType::bf16, {4, 256}), dev(DType::bf16, {256}), {}};
  auto call = [](const NormArgs& a) { rmsnorm(rt(), a.out, a.input, a.weight, a.o); };
  accept<NormArgs>(b, call);
  using M = std::function<void(NormArgs&)>;
  const std::vector<std::pair<M, std::string>> cases = {
      {[](NormArgs& a) { a.input.dtype = DType::f32; }, "'input' must have dtype f16 or bf16"},
      {[](NormArgs& a) { a.input = dev(DType::bf16, {4, 2, 128}); }, "'input' must have rank 2"},
      {[](NormArgs& a) { a.out = dev(DType::bf16, {4, 128}); }, "'out' must have the shape of 'input'"},
      {[](NormArgs& a) { a.out.dtype = DType::f16; }, "'out' must have the dtype of 'input'"},
      {[](NormArgs& a) { a.weight = dev(DType::bf16, {255}); }, "'weight' must have size 256 in dim 0"},
      {[](NormArgs& a) { a.weight = dev(DType::bf16, {2, 128}); }, "'weight' must have rank 1"},
      {[](NormArgs& a) { a.input = dev_strided(DType::bf16, {4, 256}, {512, 2}); }, "stride 1 in its last dim"},
      {[](NormArgs& a) { a.out = dev_strided(DType::bf16, {4, 256}, {-256, 1}); }, "must not have negative strides"},
      {[](NormArgs& a) { a.input = dev_strided(DType::bf16, {4, 256}, {260, 1}); }, "multiples of 8 elements"},
      {[](NormArgs& a) { a.input = shifted(a.input, 2); }, "aligned to 16 bytes"},
      {[](NormArgs& a) { a.out = on_device(a.out, 1); }, "'out' must be on the device of 'input'"},
      {[](NormArgs& a) { a.weight = on_device(a.weight, 1); }, "'weight' must be on the device of 'input'"},
      {[](NormArgs& a) { a.input.device = Device::cpu(); }, "'input' must be in CUDA device memory"},
      {[](NormArgs& a) { a.weight.data = nullptr; }, "'weight' must not be null"},
      // Sizes whose element count wraps int64 (2^33 x 2^31 = 2^64 elements) or whose byte extent does.
      {[](NormArgs& a) { a.input = dev(DType::bf16, {int64_t{1} << 33, int64_t{1} << 31}); }, "fit in int64"},
      {[](NormArgs& a) { a.out = dev_strided(DType::bf16, {4, 256}, {int64_t{1} << 62, 1}); }, "fit in int64"},
      {[](NormArgs& a) { a.weight.shape[0] = -256; }, "'weight' must have non-negative sizes"},
      // Addresses: data misaligned for its dtype (an odd bf16 pointer), and data plus the byte extent past the
      // address space (the top of it, or below 0 through a negative stride).
      {[](NormArgs& a) { a.weight = shifted(a.weight, 1); },
       "'weight' must have a data pointer aligned to its element size"},
      {[](NormArgs& a) { a.weight.data = reinterpret_cast<void*>(UINTPTR_MAX - 255); },
       "'weight' must lie inside the address space"},
      {[](NormArgs& a) {
         a.weight = dev_strided(DType::bf16, {256}, {-1});
         a.weight.data = reinterpret_cast<void*>(uintptr_t{64});
       }, "'weight' must lie inside the address space"},
      {[](NormArgs& a) { a.weight.rank = 9; }, "'weight' must have rank in [0, 6]"},
      {[](NormArgs& a) { a.o.eps = kNaN; }, "'eps' must be finite and > 0"},
      {[](NormArgs& a) { a.o.eps = 0; }, "'eps' must be finite and > 0"},
      {[](NormArgs& a) { a.o.eps = kInf; }, "'eps' must be finite and > 0"},
  };
  for (const auto& [m, frag] : cases) reject<NormArgs>(b, m, call, frag);
}

TEST_F(OpsValidation, FusedQkAndFusedAddNorms) {
  NormArgs b{dev(DType::f16, {4, 8, 128}), dev(DType::f16, {4, 8, 128}), dev(DType::f16, {128}), {}};
  auto qk = [](const NormArgs& a) { fused_qk_rmsnorm(rt(), a.out, a.input, a.weight, a.o); };
  accept<NormArgs>(b, qk);
  reject<NormArgs>(b, [](NormArgs& a) { a.input = dev(DType::f16, {4, 1024}); }, qk, "'input' must have rank 3");
  reject<NormArgs>(b, [](NormArgs& a) { a.weight = dev(DType::f16, {8}); }, qk, "size 128 in dim 0 (= input.size(2))");
  reject<NormArgs>(b, [](NormArgs& a) { a.input = dev_strided(DType::f16, {4, 8, 128}, {3000, 130, 1}); }, qk,
                   "multiples of 8 elements");

  NormArgs f{dev(DType::bf16, {4, 256}), dev(DType::bf16, {4, 256}), dev(DType::bf16, {256}), {}};  // out = residual
  auto fused = [](const NormArgs& a) { fused_add_rmsnorm(rt(), a.input, a.out, a.weight, a.o); };
  auto gemma = [](const NormArgs& a) { gemma_fused_add_rmsnorm(rt(), a.input, a.out, a.weight, a.o); };
  accept<NormArgs>(f, fused);
  accept<NormArgs>(f, gemma);
  reject<NormArgs>(f, [](NormArgs& a) { a.out = a.input; }, fused, "'residual' must not overlap 'input'");
  reject<NormArgs>(f, [](NormArgs& a) { a.out = dev(DType::bf16, {3, 256}); }, gemma,
                   "'residual' must have the shape of 'input'");
  reject<NormArgs>(f, [](NormArgs& a) { a.o.eps = -1; }, gemma, "'eps' must be finite and > 0");
  auto gemma_norm = [](const NormArgs& a) { gemma_rmsnorm(rt(), a.out, a.input, a.weight, a.o); };
  reject<NormArgs>(f, [](NormArgs& a) { a.weight.dtype = DType::f16; }, gemma_norm,
                   "'weight' must have the dtype of 'input'");
}

// -------------------------------------------------------------------------------------------------

struct AppendArgs {
  TensorView k, v, bi, pos;
  PagedKvCache c;
};

TEST_F(OpsValidation, AppendPagedKvCache) {
  link("page");
  AppendArgs b;
  b.k = dev(DType::bf16, {5, 4, 128});
  b.v = dev(DType::bf16, {5, 4, 128});
  b.bi = dev(DType::i32, {5});
  b.pos = dev(DType::i32, {5});
  b.c.k_cache = dev(DType::bf16, {10, 16, 4, 128});
  b.c.v_cache = dev(DType::bf16, {10, 16, 4, 128});
  b.c.indices = dev(DType::i32, {10});
  b.c.indptr = dev(DType::i32, {3});
  b.c.last_page_len = dev(DType::i32, {2});
  auto call = [](const AppendArgs& a) { append_paged_kv_cache(rt(), a.k, a.v, a.bi, a.pos, a.c); };
  accept<AppendArgs>(b, call);
  using M = std::function<void(AppendArgs&)>;
  const std::vector<std::pair<M, std::string>> cases = {
      {[](AppendArgs& a) { a.k.dtype = a.v.dtype = DType::f16; }, "'k_cache' must have the dtype of 'append_key'"},
      {[](AppendArgs& a) { a.k.dtype = DType::f32; }, "'append_key' must have dtype f16 or bf16 or e4m3 or e5m2"},
      {[](AppendArgs& a) { a.v = dev(DType::bf16, {4, 4, 128}); }, "'append_value' must have the shape of 'append_key'"},
      {[](AppendArgs& a) { a.k = dev(DType::bf16, {5, 128}); a.v = dev(DType::bf16, {5, 128}); },
       "'append_key' must have rank 3"},
      {[](AppendArgs& a) { a.bi = dev(DType::i32, {4}); }, "'batch_indices' must have size 5 in dim 0"},
      {[](AppendArgs& a) { a.pos.dtype = DType::i64; }, "'positions' must have dtype i32"},
      {[](AppendArgs& a) { a.pos = dev_strided(DType::i32, {5}, {2}); }, "'positions' must be contiguous"},
      {[](AppendArgs& a) { a.c.v_cache = dev_strided(DType::bf16, {10, 16, 4, 128}, {16384, 512, 128, 1}); },
       "'v_cache' must have the same strides as 'k_cache'"},
      {[](AppendArgs& a) { a.c.v_cache = dev(DType::bf16, {9, 16, 4, 128}); }, "'v_cache' must have the shape of 'k_cache'"},
      {[](AppendArgs& a) { a.c.k_cache = dev(DType::bf16, {10, 16, 8, 64}); a.c.v_cache = dev(DType::bf16, {10, 16, 8, 64}); },
       "the cache's num_kv_heads"},
      {[](AppendArgs& a) { a.c.indptr = dev(DType::i32, {2}); }, "'indptr' must have size 3 in dim 0"},
      {[](AppendArgs& a) { a.c.last_page_len = dev(DType::i32, {0}); a.c.indptr = dev(DType::i32, {1}); },
       "'last_page_len' must have at least one entry"},
      {[](AppendArgs& a) { a.c.indices = on_device(a.c.indices, 1); }, "'indices' must be on the device of 'append_key'"},
      {[](AppendArgs& a) { a.c.k_cache = on_device(a.c.k_cache, 2); }, "'k_cache' must be on the device"},
      {[](AppendArgs& a) { a.c.layout = static_cast<KvLayout>(3); }, "'layout' must be nhd or hnd"},
      {[](AppendArgs& a) { a.c.k_cache = shifted(a.c.k_cache, 8); a.c.v_cache = shifted(a.c.v_cache, 8); },
       "aligned to 16 bytes"},
  };
  for (const auto& [m, frag] : cases) reject<AppendArgs>(b, m, call, frag);
}

struct MlaAppendArgs {
  TensorView ckv, kpe, bi, pos;
  PagedMlaKvCache c;
};

TEST_F(OpsValidation, AppendPagedMlaKvCache) {
  link("page");
  MlaAppendArgs b;
  b.ckv = dev(DType::bf16, {3, 512});
  b.kpe = dev(DType::bf16, {3, 64});
  b.bi = dev(DType::i32, {3});
  b.pos = dev(DType::i32, {3});
  b.c.ckv_cache = dev(DType::bf16, {8, 64, 512});
  b.c.kpe_cache = dev(DType::bf16, {8, 64, 64});
  b.c.indices = dev(DType::i32, {8});
  b.c.indptr = dev(DType::i32, {2});
  b.c.last_page_len = dev(DType::i32, {1});
  auto call = [](const MlaAppendArgs& a) { append_paged_mla_kv_cache(rt(), a.ckv, a.kpe, a.bi, a.pos, a.c); };
  accept<MlaAppendArgs>(b, call);
  reject<MlaAppendArgs>(b, [](MlaAppendArgs& a) { a.ckv = dev(DType::bf16, {3, 256}); }, call, "size 512 in dim 1");
  reject<MlaAppendArgs>(b, [](MlaAppendArgs& a) { a.kpe = dev(DType::bf16, {3, 32}); }, call,
                        "'append_kpe' must have shape [3, 64]");
  reject<MlaAppendArgs>(b, [](MlaAppendArgs& a) { a.c.kpe_cache = dev(DType::bf16, {8, 32, 64}); }, call,
                        "'kpe_cache' must have shape [8, 64, 64]");
  reject<MlaAppendArgs>(b, [](MlaAppendArgs& a) { a.c.ckv_cache.dtype = DType::f16; }, call,
                        "'ckv_cache' must have the dtype of 'append_ckv'");
  reject<MlaAppendArgs>(b, [](MlaAppendArgs& a) { a.pos = dev(DType::i32, {2}); }, call, "'positions' must have size 3");
}

// -------------------------------------------------------------------------------------------------

// The overlap rule: an output shares no byte with any input nor another output. Interleaved views whose
// byte ranges cross but whose elements do not (rows of one buffer, the k/v halves of one cache) pass.
TEST_F(OpsValidation, OverlappingOutputsOfNormsAndAppendsAreRefused) {
  NormArgs n{dev(DType::bf16, {4, 256}), dev(DType::bf16, {4, 256}), dev(DType::bf16, {256}), {}};
  auto norm = [](const NormArgs& a) { rmsnorm(rt(), a.out, a.input, a.weight, a.o); };
  auto qk = [](const NormArgs& a) { fused_qk_rmsnorm(rt(), a.out, a.input, a.weight, a.o); };
  auto fused = [](const NormArgs& a) { fused_add_rmsnorm(rt(), a.input, a.out, a.weight, a.o); };
  using M = std::function<void(NormArgs&)>;
  const std::vector<std::pair<M, std::string>> norm_cases = {
      {[](NormArgs& a) { a.out = shifted(a.input, 16); },
       "'out' must not overlap 'input' (an output shares no byte with another argument; its data starts 16 bytes "
       "after the data of 'input')"},
      {[](NormArgs& a) { a.out = a.input; }, "'out' must not overlap 'input'"},  // FlashInfer's pointers are restrict
      {[](NormArgs& a) { a.weight.data = static_cast<char*>(a.out.data) + 1024; }, "'out' must not overlap 'weight'"},
      // Rows 512 elements apart, the output in the second half of each: the ranges cross at the last row only
      // if the output is shifted into the input's half.
      {[](NormArgs& a) {
         a.input = dev_strided(DType::bf16, {4, 256}, {512, 1});
         a.out = shifted(a.input, 256 * 2 - 16);
       },
       "'out' must not overlap 'input'"},
  };
  for (const auto& [m, frag] : norm_cases) reject<NormArgs>(n, m, norm, frag);
  NormArgs interleaved = n;
  interleaved.input = dev_strided(DType::bf16, {4, 256}, {512, 1});
  interleaved.out = shifted(interleaved.input, 256 * 2);
  accept<NormArgs>(interleaved, norm);
  // The byte ranges' edges (the rule settles views whose ranges do not meet without the element search): the
  // output starting right after the input's last byte passes, one 16-byte step earlier it is refused; and the
  // same for an output ending right before the input.
  NormArgs adjacent = n;
  adjacent.out = shifted(adjacent.input, 4 * 256 * 2);
  accept<NormArgs>(adjacent, norm);
  adjacent.out = shifted(adjacent.input, -4 * 256 * 2);
  accept<NormArgs>(adjacent, norm);
  reject<NormArgs>(n, [](NormArgs& a) { a.out = shifted(a.input, 4 * 256 * 2 - 16); }, norm,
                   "'out' must not overlap 'input' (an output shares no byte with another argument; its data starts "
                   "2032 bytes after the data of 'input')");
  reject<NormArgs>(n, [](NormArgs& a) { a.out = shifted(a.input, -4 * 256 * 2 + 16); }, norm,
                   "its data starts 2032 bytes before the data of 'input'");
  NormArgs heads{dev(DType::f16, {4, 8, 128}), dev(DType::f16, {4, 8, 128}), dev(DType::f16, {128}), {}};
  reject<NormArgs>(heads, [](NormArgs& a) { a.out = shifted(a.input, 128 * 2 * 8 * 3); }, qk,
                   "'out' must not overlap 'input'");
  reject<NormArgs>(n, [](NormArgs& a) { a.out = shifted(a.input, 512); }, fused, "'residual' must not overlap 'input'");
  reject<NormArgs>(n, [](NormArgs& a) { a.weight.data = a.input.data; }, fused, "'input' must not overlap 'weight'");

  link("page");
  AppendArgs b;
  b.k = dev(DType::bf16, {5, 4, 128});
  b.v = dev(DType::bf16, {5, 4, 128});
  b.bi = dev(DType::i32, {5});
  b.pos = dev(DType::i32, {5});
  b.c.k_cache = dev(DType::bf16, {10, 16, 4, 128});
  b.c.v_cache = dev(DType::bf16, {10, 16, 4, 128});
  b.c.indices = dev(DType::i32, {10});
  b.c.indptr = dev(DType::i32, {3});
  b.c.last_page_len = dev(DType::i32, {2});
  auto append = [](const AppendArgs& a) { append_paged_kv_cache(rt(), a.k, a.v, a.bi, a.pos, a.c); };
  using A = std::function<void(AppendArgs&)>;
  const std::vector<std::pair<A, std::string>> append_cases = {
      {[](AppendArgs& a) { a.c.v_cache = a.c.k_cache; }, "'k_cache' must not overlap 'v_cache'"},
      // k_cache == v_cache == the appended keys (viewed as one page): the caches collide first.
      {[](AppendArgs& a) { a.c.k_cache.data = a.c.v_cache.data = a.k.data; }, "'k_cache' must not overlap 'v_cache'"},
      {[](AppendArgs& a) { a.k.data = a.c.k_cache.data; }, "'k_cache' must not overlap 'append_key'"},
      {[](AppendArgs& a) { a.v.data = static_cast<char*>(a.c.v_cache.data) + 16 * 4 * 128 * 2; },
       "'v_cache' must not overlap 'append_value'"},
      {[](AppendArgs& a) { a.c.indices.data = static_cast<char*>(a.c.v_cache.data) + 4096; },
       "'v_cache' must not overlap 'indices'"},
      {[](AppendArgs& a) { a.pos.data = static_cast<char*>(a.c.k_cache.data) + 32; }, "'k_cache' must not overlap 'positions'"},
  };
  for (const auto& [m, frag] : append_cases) reject<AppendArgs>(b, m, append, frag);
  // The k and v halves of one [pages, 2, page_size, heads, dim] cache interleave without sharing a byte.
  AppendArgs one_cache = b;
  one_cache.c.k_cache = dev_strided(DType::bf16, {10, 16, 4, 128}, {2 * 16 * 4 * 128, 512, 128, 1});
  one_cache.c.v_cache = shifted(one_cache.c.k_cache, 16 * 4 * 128 * 2);
  accept<AppendArgs>(one_cache, append);
  reject<AppendArgs>(one_cache, [](AppendArgs& a) { a.c.v_cache = shifted(a.c.k_cache, 16 * 4 * 128 * 2 - 256); },
                     append, "'k_cache' must not overlap 'v_cache'");

  MlaAppendArgs m;
  m.ckv = dev(DType::bf16, {3, 512});
  m.kpe = dev(DType::bf16, {3, 64});
  m.bi = dev(DType::i32, {3});
  m.pos = dev(DType::i32, {3});
  m.c.ckv_cache = dev(DType::bf16, {8, 64, 512});
  m.c.kpe_cache = dev(DType::bf16, {8, 64, 64});
  m.c.indices = dev(DType::i32, {8});
  m.c.indptr = dev(DType::i32, {2});
  m.c.last_page_len = dev(DType::i32, {1});
  auto mla = [](const MlaAppendArgs& a) { append_paged_mla_kv_cache(rt(), a.ckv, a.kpe, a.bi, a.pos, a.c); };
  accept<MlaAppendArgs>(m, mla);
  reject<MlaAppendArgs>(m, [](MlaAppendArgs& a) { a.c.kpe_cache.data = static_cast<char*>(a.c.ckv_cache.data) + 1024; },
                        mla, "'ckv_cache' must not overlap 'kpe_cache'");
  reject<MlaAppendArgs>(m, [](MlaAppendArgs& a) { a.ckv.data = a.c.ckv_cache.data; }, mla,
                        "'ckv_cache' must not overlap 'append_ckv'");
}

struct SingleArgs {
  TensorView q, k, v, o, lse, tmp;
  bool with_lse = true;
  SinglePrefillOptions opt;
};

TEST_F(OpsValidation, SinglePrefill) {
  link("single_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_head_dim_qk_128_head_dim_vo_128_"
       "posenc_0_use_swa_False_use_logits_cap_False_f16qk_False");
  SingleArgs b;
  b.q = dev(DType::bf16, {7, 32, 128});
  b.k = dev(DType::bf16, {300, 8, 128});
  b.v = dev(DType::bf16, {300, 8, 128});
  b.o = dev(DType::bf16, {7, 32, 128});
  b.lse = dev(DType::f32, {7, 32});
  b.tmp = dev(DType::u8, {1 << 20});
  auto call = [](const SingleArgs& a) {
    single_prefill(rt(), a.q, a.k, a.v, a.o, a.with_lse ? &a.lse : nullptr, a.tmp, a.opt);
  };
  accept<SingleArgs>(b, call);
  using M = std::function<void(SingleArgs&)>;
  const std::vector<std::pair<M, std::string>> cases = {
      {[](SingleArgs& a) { a.q.dtype = a.k.dtype = a.v.dtype = a.o.dtype = DType::f32; }, "'q' must have dtype f16 or bf16"},
      {[](SingleArgs& a) { a.k.dtype = DType::f16; }, "'k' must have the dtype of 'q'"},
      {[](SingleArgs& a) { a.q = dev(DType::bf16, {7, 4096}); }, "'q' must have rank 3"},
      {[](SingleArgs& a) { a.q = dev(DType::bf16, {7, 30, 128}); a.o = dev(DType::bf16, {7, 30, 128}); a.lse = dev(DType::f32, {7, 30}); },
       "must be divisible by num_kv_heads"},
      {[](SingleArgs& a) { a.k = dev(DType::bf16, {300, 8, 64}); }, "'k' must have size 128 in dim 2 (= q.size(-1))"},
      {[](SingleArgs& a) { a.v = dev(DType::bf16, {299, 8, 128}); }, "'v' must have shape [300, 8, 128]"},
      {[](SingleArgs& a) { a.o = dev(DType::bf16, {7, 16, 128}); }, "'out' must have shape [7, 32, *]"},
      {[](SingleArgs& a) { a.o = dev_strided(DType::bf16, {7, 32, 128}, {8192, 256, 1}); }, "'out' must be contiguous"},
      {[](SingleArgs& a) { a.lse.dtype = DType::bf16; }, "'lse' must have dtype f32"},
      {[](SingleArgs& a) { a.lse = dev(DType::f32, {32, 7}); }, "'lse' must have shape [7, 32]"},
      {[](SingleArgs& a) { a.k = dev_strided(DType::bf16, {300, 8, 128}, {1024, 128, 2}); }, "'k' must have stride 1"},
      {[](SingleArgs& a) { a.q = dev_strided(DType::bf16, {7, 32, 128}, {int64_t{1} << 32, 128, 1}); },
       "'q' must have strides below 2^31"},
      {[](SingleArgs& a) { a.v = on_device(a.v, 1); }, "'v' must be on the device of 'q'"},
      {[](SingleArgs& a) { a.k = dev(DType::bf16, {0, 8, 128}); a.v = dev(DType::bf16, {0, 8, 128}); },
       "'k' must hold at least one token"},
      {[](SingleArgs& a) { a.opt.sm_scale = 0.0; }, "'sm_scale' must be finite and > 0"},
      {[](SingleArgs& a) { a.opt.sm_scale = -0.1; }, "'sm_scale' must be finite and > 0"},
      {[](SingleArgs& a) { a.opt.sm_scale = kNaN; }, "'sm_scale' must be finite and > 0"},
      {[](SingleArgs& a) { a.opt.logits_soft_cap = kInf; }, "'logits_soft_cap' must be finite"},
      {[](SingleArgs& a) { a.opt.logits_soft_cap = -1; }, "'logits_soft_cap' must be 0 (off) or > 0"},
      {[](SingleArgs& a) { a.opt.window_left = -2; }, "'window_left' must be -1 (no window) or >= 0"},
      {[](SingleArgs& a) { a.opt.use_fp16_qk_reduction = true; }, "'use_fp16_qk_reduction' needs f16 q"},
      {[](SingleArgs& a) { a.opt.layout = static_cast<KvLayout>(2); }, "'layout' must be nhd or hnd"},
      // NHD tensors read as HND: 300 "heads" of 8 tokens, which 32 query heads cannot be grouped over.
      {[](SingleArgs& a) { a.opt.layout = KvLayout::hnd; }, "must be divisible by num_kv_heads (300)"},
      {[](SingleArgs& a) { a.tmp = dev(DType::u8, {1000}); }, "'tmp' must hold at least"},
      {[](SingleArgs& a) { a.tmp = on_device(a.tmp, 3); }, "'tmp' must be on the device of 'q'"},
      {[](SingleArgs& a) { a.tmp = dev(DType::u8, {2, 1 << 20}); }, "'tmp' must have rank 1"},
      {[](SingleArgs& a) { a.o = a.q; }, "'out' must not overlap 'q'"},
      {[](SingleArgs& a) { a.o.data = static_cast<char*>(a.v.data) + 16; }, "'out' must not overlap 'v'"},
      {[](SingleArgs& a) { a.lse.data = a.tmp.data; }, "'lse' must not overlap 'tmp'"},
      {[](SingleArgs& a) { a.tmp.data = static_cast<char*>(a.k.data) + 4096; }, "'tmp' must not overlap 'k'"},
  };
  for (const auto& [m, frag] : cases) reject<SingleArgs>(b, m, call, frag);
}

TEST_F(OpsValidation, SingleDecode) {
  link("single_decode_with_kv_cache_dtype_q_f16_dtype_kv_f16_dtype_o_f16_head_dim_qk_128_head_dim_vo_128_"
       "posenc_0_use_swa_False_use_logits_cap_False");
  SingleArgs b;
  b.q = dev(DType::f16, {32, 128});
  b.k = dev(DType::f16, {600, 8, 128});
  b.v = dev(DType::f16, {600, 8, 128});
  b.o = dev(DType::f16, {32, 128});
  b.lse = dev(DType::f32, {32});
  b.tmp = dev(DType::u8, {1 << 20});
  SingleDecodeOptions base_opt;
  auto call = [base_opt](const SingleArgs& a) {
    SingleDecodeOptions o = base_opt;
    o.sm_scale = a.opt.sm_scale;
    o.window_left = a.opt.window_left;
    o.layout = a.opt.layout;
    o.backend = DecodeBackend::cuda_cores;  // the decode module's rules are what this matrix checks
    single_decode(rt(), a.q, a.k, a.v, a.o, a.with_lse ? &a.lse : nullptr, a.tmp, o);
  };
  accept<SingleArgs>(b, call);
  reject<SingleArgs>(b, [](SingleArgs& a) { a.q = dev(DType::f16, {1, 32, 128}); }, call, "'q' must have rank 2");
  reject<SingleArgs>(b, [](SingleArgs& a) { a.k = dev_strided(DType::f16, {600, 8, 128}, {2048, 128, 1}); }, call,
                     "'k' must be contiguous");
  reject<SingleArgs>(b, [](SingleArgs& a) { a.lse = dev(DType::f32, {32, 1}); }, call, "'lse' must have shape [32]");
  reject<SingleArgs>(b, [](SingleArgs& a) { a.o = dev(DType::f16, {32, 64}); }, call, "'out' must have shape [32, 128]");
  reject<SingleArgs>(b, [](SingleArgs& a) { a.q = dev(DType::f16, {32, 100}); a.o = dev(DType::f16, {32, 100}); }, call,
                     "must be divisible by 16");
  reject<SingleArgs>(b, [](SingleArgs& a) { a.tmp = dev(DType::u8, {64}); }, call, "'tmp' must hold at least");
  reject<SingleArgs>(b, [](SingleArgs& a) { a.o = a.q; }, call, "'out' must not overlap 'q'");
  reject<SingleArgs>(b, [](SingleArgs& a) { a.lse.data = static_cast<char*>(a.o.data) + 64; }, call,
                     "'out' must not overlap 'lse'");
  reject<SingleArgs>(b,
                     [](SingleArgs& a) {
                       a.q = dev(DType::f16, {48, 128});
                       a.o = dev(DType::f16, {48, 128});
                       a.lse = dev(DType::f32, {48});
                       a.opt.causal = true;  // cuda_cores requested with group 6
                     },
                     call, "cuda_cores supports GQA group sizes 1, 2, 3, 4, 8 only");
}

// -------------------------------------------------------------------------------------------------

struct PlanArgs {
  Workspace ws;
  PrefillIndptrs ip;
  BatchPrefillConfig c;
  TensorView indices_host;
  bool with_indices = false;
};

class OpsPlanValidation : public OpsValidation {
 protected:
  void SetUp() override {
    OpsValidation::SetUp();
    pinned_ = std::aligned_alloc(256, 1 << 20);
    link("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
         "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False");
    link("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
         "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False_sm90");
    base_.ws.float_buffer = dev(DType::u8, {1 << 20});
    base_.ws.int_buffer = dev(DType::u8, {1 << 20});
    base_.ws.pinned_int_buffer = TensorView::contiguous(pinned_, DType::u8, Device::cuda_host(), {1 << 20});
    base_.ip.qo_indptr = host_i32({0, 3, 5});
    base_.ip.kv_indptr = host_i32({0, 2, 3});
    base_.ip.kv_last_page_len = host_i32({5, 16});
    base_.indices_host = host_i32({0, 1, 2});
    base_.c.num_qo_heads = 32;
    base_.c.num_kv_heads = 8;
    base_.c.head_dim_qk = 128;
    base_.c.page_size = 16;
    base_.c.causal = true;
  }
  void TearDown() override {
    std::free(pinned_);
    OpsValidation::TearDown();
  }
  static void create(const PlanArgs& a) {
    PrefillIndptrs ip = a.ip;
    ip.kv_indices = a.with_indices ? &a.indices_host : nullptr;
    (void)BatchPrefillPlan::create(rt(), a.ws, ip, a.c);
  }
  void* pinned_ = nullptr;
  PlanArgs base_;
};

TEST_F(OpsPlanValidation, BatchPrefillCreate) {
  accept<PlanArgs>(base_, create);
  using M = std::function<void(PlanArgs&)>;
  auto h = [this](std::vector<int32_t> v) { return host_i32(std::move(v)); };
  const std::vector<std::pair<M, std::string>> cases = {
      {[&](PlanArgs& a) { a.ip.qo_indptr = h({1, 3, 5}); }, "'qo_indptr' must start at 0"},
      {[&](PlanArgs& a) { a.ip.qo_indptr = h({0, 3, 2}); }, "'qo_indptr' must never decrease"},
      {[&](PlanArgs& a) { a.ip.qo_indptr = h({0}); }, "'qo_indptr' must have at least two entries"},
      {[&](PlanArgs& a) { a.ip.qo_indptr.device = Device::cuda(0); }, "'qo_indptr' must be in host memory"},
      {[&](PlanArgs& a) { a.ip.qo_indptr.dtype = DType::u32; }, "'qo_indptr' must have dtype i32"},
      {[&](PlanArgs& a) { a.ip.qo_indptr.data = nullptr; }, "'qo_indptr' must not be null"},
      {[&](PlanArgs& a) { a.ip.kv_indptr.data = nullptr; }, "'kv_indptr' must not be null"},
      {[&](PlanArgs& a) { a.ip.kv_last_page_len.data = nullptr; }, "'kv_last_page_len' must not be null"},
      {[&](PlanArgs& a) { a.ip.kv_indptr = h({0, 2}); }, "'kv_indptr' must have size 3 in dim 0"},
      {[&](PlanArgs& a) { a.ip.kv_indptr = h({0, 2, 1}); }, "'kv_indptr' must never decrease"},
      {[&](PlanArgs& a) { a.ip.kv_last_page_len = h({17, 16}); }, "BatchPrefillPlan::create: argument 'kv_last_page_len' entry 0 is 17, outside [1, 16]"},
      {[&](PlanArgs& a) { a.ip.kv_last_page_len = h({0, 16}); }, "outside [1, 16]"},
      {[&](PlanArgs& a) { a.ip.kv_last_page_len = h({5}); }, "'kv_last_page_len' must have size 2 in dim 0"},
      {[&](PlanArgs& a) { a.with_indices = true; a.indices_host = h({0, -1, 2}); }, "'kv_indices' entry 1 is -1"},
      {[&](PlanArgs& a) { a.with_indices = true; a.indices_host = h({0, 1}); }, "'kv_indices' must hold at least"},
      {[&](PlanArgs& a) { a.with_indices = true; a.indices_host.data = nullptr; }, "'kv_indices' must not be null"},
      {[](PlanArgs& a) { a.ws.float_buffer.device = Device::cuda_host(); }, "'workspace.float_buffer' must be in CUDA"},
      {[](PlanArgs& a) { a.ws.int_buffer = on_device(a.ws.int_buffer, 1); }, "'workspace.int_buffer' must be on the device"},
      {[](PlanArgs& a) { a.ws.pinned_int_buffer.shape[0] = 1000; }, "'workspace.pinned_int_buffer' must hold at least"},
      {[](PlanArgs& a) { a.ws.pinned_int_buffer.device = Device::cuda(0); }, "'workspace.pinned_int_buffer' must be in host"},
      {[](PlanArgs& a) { a.ws.int_buffer = dev(DType::u8, {1024}); }, "'workspace.int_buffer' must hold at least"},
      {[](PlanArgs& a) { a.ws.float_buffer = dev(DType::u8, {2, 1 << 19}); }, "'workspace.float_buffer' must have rank 1"},
      {[](PlanArgs& a) { a.ws.float_buffer = shifted(a.ws.float_buffer, 16); }, "aligned to 256 bytes"},
      {[](PlanArgs& a) { a.c.num_kv_heads = 6; }, "'num_qo_heads' (32) must be divisible by num_kv_heads (6)"},
      {[](PlanArgs& a) { a.c.num_kv_heads = 0; }, "'num_kv_heads' must be in [1,"},
      {[](PlanArgs& a) { a.c.head_dim_qk = 100; }, "'head_dim_qk' (100) must be divisible by 16"},
      {[](PlanArgs& a) { a.c.head_dim_qk = 1024; }, "'head_dim_qk' must be in [16, 512]"},
      {[](PlanArgs& a) { a.c.head_dim_vo = 64; }, "must equal head_dim_qk for paged KV"},
      {[](PlanArgs& a) { a.c.kv_dtype = DType::f16; }, "'kv_dtype' must equal q_dtype"},
      {[](PlanArgs& a) { a.c.q_dtype = a.c.kv_dtype = DType::f32; }, "'q_dtype' must be f16 or bf16"},
      {[](PlanArgs& a) { a.c.sm_scale = -1.0; }, "'sm_scale' must be finite and > 0"},
      {[](PlanArgs& a) { a.c.logits_soft_cap = kNaN; }, "'logits_soft_cap' must be finite"},
      {[](PlanArgs& a) { a.c.window_left = -5; }, "'window_left' must be -1"},
      {[](PlanArgs& a) { a.c.fixed_split_size = 0; }, "'fixed_split_size' must be -1 (off) or > 0"},
      {[](PlanArgs& a) { a.c.page_size = 0; }, "'page_size' must be in [1, 65536]"},
      {[](PlanArgs& a) { a.c.layout = static_cast<KvLayout>(9); }, "'layout' must be nhd or hnd"},
      {[](PlanArgs& a) { a.c.backend = AttentionBackend::fa3; a.c.disable_split_kv = true; }, "are fa2 options"},
      {[](PlanArgs& a) { a.c.kv_storage = KvStorage::ragged; a.c.layout = KvLayout::hnd; a.c.backend = AttentionBackend::fa3; },
       "fa3 reads ragged k/v as NHD only"},
      {[](PlanArgs& a) { a.ws.int_buffer = a.ws.float_buffer; },
       "'workspace.float_buffer' must not overlap 'workspace.int_buffer'"},
      // A host array inside the pinned buffer FlashInfer's plan writes (values copied so the array is valid).
      {[](PlanArgs& a) {
         std::memcpy(static_cast<char*>(a.ws.pinned_int_buffer.data) + 4096, a.ip.kv_indptr.data, 3 * sizeof(int32_t));
         a.ip.kv_indptr.data = static_cast<char*>(a.ws.pinned_int_buffer.data) + 4096;
       },
       "'workspace.pinned_int_buffer' must not overlap 'kv_indptr'"},
  };
  for (const auto& [m, frag] : cases) reject<PlanArgs>(base_, m, create, frag);
}

TEST_F(OpsPlanValidation, BatchPrefillRunRefusesWhatWasNotPlanned) {
  PrefillIndptrs ip = base_.ip;
  ip.kv_indices = &base_.indices_host;
  auto plan = BatchPrefillPlan::create(rt(), base_.ws, ip, base_.c);
  struct RunArgs {
    TensorView q, o, qo, lse;
    PagedKvCache kv;
  } b;
  b.q = dev(DType::bf16, {5, 32, 128});
  b.o = dev(DType::bf16, {5, 32, 128});
  b.qo = dev(DType::i32, {3});
  b.lse = dev(DType::f32, {5, 32});
  b.kv.k_cache = dev(DType::bf16, {3, 16, 8, 128});
  b.kv.v_cache = dev(DType::bf16, {3, 16, 8, 128});
  b.kv.indices = dev(DType::i32, {3});
  b.kv.indptr = dev(DType::i32, {3});
  b.kv.last_page_len = dev(DType::i32, {2});
  auto call = [&plan](const RunArgs& a) { plan.run_paged(a.q, a.kv, a.qo, a.o, &a.lse); };
  accept<RunArgs>(b, call);
  using M = std::function<void(RunArgs&)>;
  const std::vector<std::pair<M, std::string>> cases = {
      {[](RunArgs& a) { a.q = dev(DType::bf16, {6, 32, 128}); }, "'q' must have shape [5, 32, 128]"},
      {[](RunArgs& a) { a.q.dtype = DType::f16; }, "'q' must have dtype bf16"},
      {[](RunArgs& a) { a.q = on_device(a.q, 1); }, "'q' must be on the planned device cuda:0"},
      {[](RunArgs& a) { a.o.dtype = DType::f16; }, "'out' must have dtype bf16"},
      {[](RunArgs& a) { a.o = dev(DType::bf16, {5, 32, 64}); }, "'out' must have shape [5, 32, 128]"},
      {[](RunArgs& a) { a.lse = dev(DType::f32, {5}); }, "'lse' must have shape [5, 32]"},
      {[](RunArgs& a) { a.kv.k_cache = a.kv.v_cache = dev(DType::bf16, {3, 8, 8, 128}); }, "planned page size 16"},
      {[](RunArgs& a) { a.kv.k_cache = a.kv.v_cache = dev(DType::bf16, {3, 16, 4, 128}); }, "planned num_kv_heads 8"},
      {[](RunArgs& a) { a.kv.k_cache = a.kv.v_cache = dev(DType::bf16, {3, 16, 8, 64}); }, "planned head_dim 128"},
      {[](RunArgs& a) { a.kv.k_cache = a.kv.v_cache = dev(DType::bf16, {2, 16, 8, 128}); }, "holds page id 2"},
      {[](RunArgs& a) { a.kv.k_cache.dtype = a.kv.v_cache.dtype = DType::f16; }, "'k_cache' must have dtype bf16"},
      {[](RunArgs& a) { a.kv.layout = KvLayout::hnd; }, "'layout' must be the planned layout"},
      {[](RunArgs& a) { a.kv.indices = dev(DType::i32, {2}); }, "at least the planned 3 page ids"},
      {[](RunArgs& a) { a.kv.indptr = dev(DType::i32, {4}); }, "'indptr' must have size 3"},
      {[](RunArgs& a) { a.kv.last_page_len = dev(DType::i32, {3}); }, "'last_page_len' must have size 2"},
      {[](RunArgs& a) { a.qo = dev(DType::i32, {2}); }, "'qo_indptr' must have size 3"},
      {[](RunArgs& a) { a.qo = on_device(a.qo, 1); }, "'qo_indptr' must be on the device of 'q'"},
      {[](RunArgs& a) { a.o = a.q; }, "'out' must not overlap 'q'"},
      {[](RunArgs& a) { a.o.data = a.kv.v_cache.data; }, "'out' must not overlap 'v_cache'"},
      {[](RunArgs& a) { a.lse.data = static_cast<char*>(a.kv.indices.data) + 4; }, "'lse' must not overlap 'indices'"},
      {[](RunArgs& a) { a.qo.data = static_cast<char*>(a.o.data) + 32; }, "'out' must not overlap 'qo_indptr'"},
  };
  for (const auto& [m, frag] : cases) reject<RunArgs>(b, m, call, frag);

  // The run writes the plan's float workspace and reads its int workspace.
  RunArgs into_ws = b;
  into_ws.o.data = base_.ws.float_buffer.data;
  reject<RunArgs>(into_ws, [](RunArgs&) {}, call, "'out' must not overlap 'workspace.float_buffer'");
  into_ws = b;
  into_ws.q.data = static_cast<char*>(base_.ws.int_buffer.data) + 4096;
  reject<RunArgs>(into_ws, [](RunArgs&) {}, call, "'workspace.int_buffer' must not overlap 'q'");
  auto k = dev(DType::bf16, {3, 8, 128});
  EXPECT_INVALID(plan.run_ragged(b.q, k, k, b.qo, b.qo, b.o), "was made for paged KV");
  BatchPrefillPlan moved = std::move(plan);
  EXPECT_INVALID(plan.run_paged(b.q, b.kv, b.qo, b.o), "'plan' was moved from");
  EXPECT_EQ(recorded(), "");
}

TEST_F(OpsPlanValidation, BatchDecodeCreateAndRun) {
  link("batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False");
  struct DecodeArgs {
    Workspace ws;
    DecodeIndptrs ip;
    BatchDecodeConfig c;
  } b;
  b.ws = base_.ws;
  b.ip.kv_indptr = host_i32({0, 2, 3});
  b.ip.kv_last_page_len = host_i32({1, 16});
  b.c.num_qo_heads = 32;
  b.c.num_kv_heads = 8;
  b.c.head_dim = 128;
  b.c.page_size = 16;
  b.c.backend = DecodeBackend::cuda_cores;
  auto create = [](const DecodeArgs& a) { (void)BatchDecodePlan::create(rt(), a.ws, a.ip, a.c); };
  accept<DecodeArgs>(b, create);
  using M = std::function<void(DecodeArgs&)>;
  const std::vector<std::pair<M, std::string>> cases = {
      {[](DecodeArgs& a) { a.c.num_qo_heads = 48; a.c.backend = DecodeBackend::cuda_cores; }, "group sizes 1, 2, 3, 4, 8"},
      {[](DecodeArgs& a) { a.c.num_qo_heads = 33; }, "must be divisible by num_kv_heads"},
      {[](DecodeArgs& a) { a.c.page_size = -1; }, "'page_size' must be in [1, 65536]"},
      {[](DecodeArgs& a) { a.c.head_dim = 8; }, "'head_dim' must be in [16, 512]"},
      {[](DecodeArgs& a) { a.c.logits_soft_cap = -3; }, "'logits_soft_cap' must be 0 (off) or > 0"},
      {[](DecodeArgs& a) { a.c.sm_scale = kInf; }, "'sm_scale' must be finite and > 0"},
      {[](DecodeArgs& a) { a.c.o_dtype = DType::f32; }, "'o_dtype' must be f16 or bf16"},
      {[this](DecodeArgs& a) { a.ip.kv_indptr = host_i32({0, 3, 2}); }, "'kv_indptr' must never decrease"},
      {[this](DecodeArgs& a) { a.ip.kv_indptr = host_i32({2, 3, 4}); }, "'kv_indptr' must start at 0"},
      {[this](DecodeArgs& a) { a.ip.kv_last_page_len = host_i32({}); }, "must have at least one entry"},
      {[this](DecodeArgs& a) { a.ip.kv_last_page_len = host_i32({1, 0}); }, "entry 1 is 0, outside [1, 16]"},
      {[](DecodeArgs& a) { a.ip.kv_indptr.data = nullptr; }, "'kv_indptr' must not be null"},
      {[](DecodeArgs& a) { a.ip.kv_last_page_len.data = nullptr; }, "'kv_last_page_len' must not be null"},
      {[](DecodeArgs& a) { a.ws.int_buffer = dev(DType::u8, {100}); }, "'workspace.int_buffer' must hold at least"},
      {[](DecodeArgs& a) { a.ws.float_buffer = shifted(a.ws.int_buffer, 4096); },
       "'workspace.float_buffer' must not overlap 'workspace.int_buffer'"},
      // The split-KV controls: fa2's, so only on the tensor-core path, and never fa3.
      {[](DecodeArgs& a) { a.c.disable_split_kv = true; }, "need the tensor-core path"},
      {[](DecodeArgs& a) { a.c.fixed_split_size = 8; }, "'fixed_split_size' and disable_split_kv need the tensor-core"},
      {[](DecodeArgs& a) { a.c.backend = DecodeBackend::tensor_cores; a.c.fixed_split_size = 0; },
       "'fixed_split_size' must be -1 (off) or > 0; got 0"},
      {[](DecodeArgs& a) { a.c.backend = DecodeBackend::tensor_cores; a.c.fixed_split_size = -7; },
       "'fixed_split_size' must be -1 (off) or > 0; got -7"},
      {[](DecodeArgs& a) {
         a.c.backend = DecodeBackend::tensor_cores;
         a.c.prefill_backend = AttentionBackend::fa3;
         a.c.disable_split_kv = true;
       },
       "are fa2 options"},
  };
  for (const auto& [m, frag] : cases) reject<DecodeArgs>(b, m, create, frag);

  auto plan = BatchDecodePlan::create(rt(), b.ws, b.ip, b.c);
  PagedKvCache kv;
  kv.k_cache = kv.v_cache = dev(DType::bf16, {3, 16, 8, 128});
  kv.indices = dev(DType::i32, {3});
  kv.indptr = dev(DType::i32, {3});
  kv.last_page_len = dev(DType::i32, {2});
  auto q = dev(DType::bf16, {2, 32, 128}), o = dev(DType::bf16, {2, 32, 128});
  (void)recorded();
  EXPECT_INVALID(plan.run(dev(DType::bf16, {3, 32, 128}), kv, o), "'q' must have shape [2, 32, 128]");
  EXPECT_INVALID(plan.run(q, kv, dev(DType::f16, {2, 32, 128})), "'out' must have dtype bf16");
  EXPECT_INVALID(plan.run(q, kv, dev_strided(DType::bf16, {2, 32, 128}, {8192, 256, 1})), "'out' must be contiguous");
  PagedKvCache hnd = kv;
  hnd.layout = KvLayout::hnd;
  EXPECT_INVALID(plan.run(q, hnd, o), "planned");
  EXPECT_INVALID(plan.run(q, kv, q), "'out' must not overlap 'q'");
  EXPECT_INVALID(plan.run(q, kv, TensorView::contiguous(kv.k_cache.data, DType::bf16, Device::cuda(0), {2, 32, 128})),
                 "'out' must not overlap 'k_cache'");
  const TensorView lse_in_ws = TensorView::contiguous(b.ws.float_buffer.data, DType::f32, Device::cuda(0), {2, 32});
  EXPECT_INVALID(plan.run(q, kv, o, &lse_in_ws), "'lse' must not overlap 'workspace.float_buffer'");
  EXPECT_EQ(recorded(), "");
  plan.run(q, kv, o);
  EXPECT_NE(recorded(), "");
}

// Sizes are checked before anything is allocated (on a machine without a GPU an allocation would fail
// first and report a CUDA error instead of the rule).
TEST(OwnedWorkspaceSizes, NonPositiveSizesAreRefusedBeforeAllocating) {
  for (auto [f, i] : {std::pair<int64_t, int64_t>{0, 16}, {16, 0}, {-1, 16}, {16, -5}}) {
    try {
      OwnedWorkspace ws(0, f, i);
      ADD_FAILURE() << "accepted float_bytes " << f << ", int_bytes " << i;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find("sizes must be > 0"), std::string::npos) << e.what();
    }
  }
}

// Token counts are computed in int64 and refused past int32 (they used to wrap: 40000 pages of 65536 gave
// -1673592831), and computed right below that.
TEST(PagedKvLengths, RefusesLengthsPastInt32AndComputesTheRest) {
  std::vector<int32_t> indptr{0, 40000}, last{1}, out{-7};
  const auto view = [](std::vector<int32_t>& v) {
    return TensorView::contiguous(v.data(), DType::i32, Device::cpu(), {static_cast<int64_t>(v.size())});
  };
  EXPECT_INVALID(paged_kv_lengths(view(indptr), view(last), 65536, view(out)), "more than the int32 lengths hold");
  EXPECT_EQ(out[0], -7) << "nothing is written on error";
  indptr = {0, 3, 3, 4};
  last = {5, 0, 16};
  out = {-7, -7, -7};
  paged_kv_lengths(view(indptr), view(last), 16, view(out));
  EXPECT_EQ(out, (std::vector<int32_t>{2 * 16 + 5, 0, 16}));
}

}  // namespace
}  // namespace flashcpp::testing
