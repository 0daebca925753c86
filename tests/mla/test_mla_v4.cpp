// DeepSeek V4 ("MODEL1") FP8 cache: the quantizer (library and reference) and the float64 decode reference
// against FlashMLA's own outputs (golden cases model1_*), plus the layout and pool semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "flashcpp/error.hpp"
#include "flashcpp/mla.hpp"
#include "mla/fp8_v4.hpp"
#include "mla/mla_test_support.hpp"
#include "reference/mla_reference.hpp"

namespace {

using namespace flashcpp;
using namespace flashcpp::mla_test;
using flashcpp::reference::MlaReferenceResult;
using flashcpp::reference::MlaV4Pool;
namespace v4 = flashcpp::mla::fp8_v4;

constexpr double kInf = std::numeric_limits<double>::infinity();

// FlashMLA's view of a V4 page buffer [num_blocks, page_bytes]: [num_blocks, block_size, 1, 584].
TensorView page_view(const uint8_t* pages, int64_t num_blocks, int64_t block_size, int64_t page_bytes) {
  return TensorView::strided(const_cast<uint8_t*>(pages), DType::u8, Device::cpu(), {num_blocks, block_size, 1, 584},
                             {page_bytes, 584, 584, 1});
}

// True for the bytes of a page that carry data: token records, and the 7 scales of each scale record
// (FlashMLA leaves the pad byte of a scale record and the page padding unwritten).
bool is_data_byte(int64_t offset_in_page, int64_t block_size) {
  if (offset_in_page < block_size * v4::kTokenRecordBytes) return true;
  const int64_t s = offset_in_page - block_size * v4::kTokenRecordBytes;
  return s < block_size * v4::kScaleRecordBytes && s % v4::kScaleRecordBytes != v4::kNumScales;
}

TEST(MlaV4Golden, QuantizersReproduceFlashMlaBytes) {
  const auto found = golden_dir_with("model1_quantize");
  if (!found) GTEST_SKIP() << "no model1_quantize golden case (they live in the project's shared data)";
  const auto& dir = *found;
  const auto names = golden_case_names(dir, "model1_quantize");
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const GoldenCase c = load_golden(dir, name);
    ASSERT_EQ(c.op, "quantize_model1");
    const int64_t nb = c.params.at("num_blocks").get<int64_t>(), bs = c.params.at("block_size").get<int64_t>();
    const int64_t page = c.params.at("block_stride_bytes").get<int64_t>();
    const GoldenTensor& want = c.outputs.at("k_cache_fp8");
    ASSERT_EQ(static_cast<int64_t>(want.bytes.size()), nb * page);

    const auto ref = reference::mla_quantize_v4_reference(c.inputs.at("kv").view(), page);
    std::vector<uint8_t> lib(static_cast<size_t>(nb * page), 0xCD);  // poison: untouched bytes stay 0xCD
    mla::quantize_kv_cache_fp8_v4(c.inputs.at("kv").view(), page_view(lib.data(), nb, bs, page), nullptr);
    int64_t compared = 0;
    for (int64_t i = 0; i < nb * page; ++i) {
      const int64_t in_page = i % page;
      if (is_data_byte(in_page, bs)) {
        ASSERT_EQ(ref[static_cast<size_t>(i)], want.bytes[static_cast<size_t>(i)]) << "reference, byte " << i;
        ASSERT_EQ(lib[static_cast<size_t>(i)], want.bytes[static_cast<size_t>(i)]) << "library, byte " << i;
        ++compared;
      } else if (in_page < bs * v4::kBytesPerToken) {
        ASSERT_EQ(lib[static_cast<size_t>(i)], 0) << "pad byte " << i << " is written as 0";
      } else {
        ASSERT_EQ(lib[static_cast<size_t>(i)], 0xCD) << "page padding byte " << i << " must stay untouched";
      }
    }
    EXPECT_EQ(compared, nb * bs * (v4::kTokenRecordBytes + v4::kNumScales));
  }
}

TEST(MlaV4Golden, DecodeReferenceMatchesFlashMla) {
  const auto found = golden_dir_with("model1_decode");
  if (!found) GTEST_SKIP() << "no model1_decode golden case (they live in the project's shared data)";
  const auto& dir = *found;
  const auto names = golden_case_names(dir, "model1_decode");
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const GoldenCase c = load_golden(dir, name);
    ASSERT_EQ(c.op, "sparse_decode_fp8_model1");
    const auto& p = c.params;
    MlaV4Pool main{page_view(c.inputs.at("k_cache_fp8").bytes.data(), p.at("num_blocks").get<int64_t>(),
                             p.at("block_size").get<int64_t>(), p.at("block_stride_bytes").get<int64_t>()),
                   c.inputs.at("indices").view()};
    TensorView len, extra_len, sink;
    if (c.has_input("topk_length")) len = c.inputs.at("topk_length").view(), main.topk_length = &len;
    MlaV4Pool extra;
    const bool has_extra = c.has_input("extra_k_cache_fp8");
    if (has_extra) {
      extra.cache = page_view(c.inputs.at("extra_k_cache_fp8").bytes.data(), p.at("extra_num_blocks").get<int64_t>(),
                              p.at("extra_block_size").get<int64_t>(), p.at("extra_block_stride_bytes").get<int64_t>());
      extra.indices = c.inputs.at("extra_indices").view();
      if (c.has_input("extra_topk_length")) extra_len = c.inputs.at("extra_topk_length").view(), extra.topk_length = &extra_len;
    }
    OptionalTensor sink_p = nullptr;
    if (c.has_input("attn_sink")) sink = c.inputs.at("attn_sink").view(), sink_p = &sink;
    const MlaReferenceResult r = reference::mla_sparse_decode_v4_reference(
        c.inputs.at("q").view(), main, has_extra ? &extra : nullptr, sink_p, p.at("sm_scale").get<double>());
    expect_out_within_magnitude(r.out, r.out_magnitude);
    // The golden README measured an independent float64 decoder at out max |d| <= 9.8e-4: FlashMLA rounds P to
    // bf16 before P.V. Every element within abs 2e-3 or FlashMLA's rel rule, cosine as FlashMLA's.
    const auto out = compare(r.out, c.outputs.at("out").bf16_values(), 2e-3, kOutRelTol, kOutCosDiffTol, "out");
    EXPECT_TRUE(out.ok) << out.message;
    const auto lse = compare(r.lse, lse_rows_of_b_hq_sq(c.outputs.at("lse_b_hq_sq")), kLseAbsTol, kLseRelTol, 1.0, "lse");
    EXPECT_TRUE(lse.ok) << lse.message;
    std::printf("[ golden ] %s: %s\n", name.c_str(), out.message.substr(0, out.message.find('\n')).c_str());
  }
}

// ---------------------------------------------------------------------------------------------------
// Layout and quantizer on made-up data

TEST(MlaV4Fp8, E8m0CodesArePowersOfTwo) {
  for (int e = 1; e < 255; ++e) {
    const float s = v4::pow2_of_e8m0(static_cast<uint8_t>(e));
    EXPECT_EQ(static_cast<double>(s), std::ldexp(1.0, e - 127)) << e;
    EXPECT_EQ(v4::e8m0_of_pow2(s), e) << e;
  }
  EXPECT_EQ(static_cast<double>(v4::pow2_of_e8m0(0)), std::ldexp(1.0, -127));
  EXPECT_TRUE(std::isnan(v4::pow2_of_e8m0(255)));
  // The quantizer's scales stay in [2^-13, 2^120]: bytes [114, 247].
  EXPECT_EQ(v4::e8m0_of_pow2(mla::fp8::pow2_scale(0.f)), 114);
  EXPECT_EQ(v4::e8m0_of_pow2(mla::fp8::pow2_scale(std::numeric_limits<float>::max())), 247);
}

TEST(MlaV4Fp8, LibraryQuantizerMatchesReferenceOnStridedPaddedInput) {
  std::mt19937 rng(41);
  const int64_t nb = 3, bs = 5, tok_stride = 530, blk_stride = 3000, page = 2960;  // 5 * 584 = 2920 bytes of data, padded to 185 * 16
  std::vector<uint16_t> buf(static_cast<size_t>(nb * blk_stride), 0x7fc0);  // NaN padding must never be read
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> mag(-20.f, 6.f);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = 0; t < bs; ++t)
      for (int64_t c = 0; c < 512; ++c)
        buf[static_cast<size_t>(b * blk_stride + t * tok_stride + c)] = float_to_bf16_bits(
            nd(rng) * std::exp2(mag(rng) * (c < 64 ? 0.1f : 1.f)) * (c >= 128 && c < 192 ? 0.f : 1.f));
  const TensorView src =
      TensorView::strided(buf.data(), DType::bf16, Device::cpu(), {nb, bs, 1, 512}, {blk_stride, tok_stride, 512, 1});
  const auto ref = reference::mla_quantize_v4_reference(src, page);
  std::vector<uint8_t> out(static_cast<size_t>(nb * page), 0xCD);
  mla::quantize_kv_cache_fp8_v4(src, page_view(out.data(), nb, bs, page), nullptr);
  for (int64_t i = 0; i < nb * page; ++i) {
    if (i % page >= bs * 584) {
      ASSERT_EQ(out[static_cast<size_t>(i)], 0xCD) << "page padding byte " << i;
      continue;
    }
    ASSERT_EQ(out[static_cast<size_t>(i)], ref[static_cast<size_t>(i)]) << "byte " << i << " of page " << i / page;
  }
  // The all-zero tile (dims 128..191) of every token: scale 2^-13 (byte 114), zero codes (+0 or -0).
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = 0; t < bs; ++t) {
      const uint8_t* pg = out.data() + b * page;
      EXPECT_EQ(pg[v4::scale_record_offset(bs, t) + 2], 114);
      for (int c = 128; c < 192; ++c) ASSERT_EQ(pg[v4::token_record_offset(t) + c] & 0x7f, 0);
    }
  // Dequantized values are within e4m3 precision of the source; RoPE dims are exact.
  for (int64_t t = 0; t < bs; ++t) {
    const auto row = reference::mla_dequantize_v4_token(out.data() + 2 * page, bs, t);
    for (int64_t c = 0; c < 512; ++c) {
      const double x = bf16_bits_to_float(buf[static_cast<size_t>(2 * blk_stride + t * tok_stride + c)]);
      if (c >= 448) ASSERT_EQ(row[static_cast<size_t>(c)], x) << c;
      else EXPECT_NEAR(row[static_cast<size_t>(c)], x, std::fabs(x) / 16 + 1e-3) << c;
    }
  }
}

// The V4 dequantizer is exact: every value equals the reference dequantization of its token, on padded pages into a
// padded output; RoPE dims are the source's bits, the output's padding untouched.
TEST(MlaV4Fp8, LibraryDequantizerIsTheReferenceDequantization) {
  std::mt19937 rng(43);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> mag(-20.f, 6.f);
  const int64_t nb = 4, bs = 6, page = 3520, out_tok = 520;  // 6 * 584 = 3504 bytes, padded to 220 * 16
  std::vector<uint16_t> src(static_cast<size_t>(nb * bs * 512));
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = float_to_bf16_bits(nd(rng) * std::exp2(mag(rng) * (i % 512 < 64 ? 0.1f : 1.f)));
  std::vector<uint8_t> pages(static_cast<size_t>(nb * page), 0xCD);
  mla::quantize_kv_cache_fp8_v4(TensorView::contiguous(src.data(), DType::bf16, Device::cpu(), {nb, bs, 1, 512}),
                                page_view(pages.data(), nb, bs, page), nullptr);
  std::vector<uint16_t> out(static_cast<size_t>(nb * bs * out_tok), 0x7fc1);
  mla::dequantize_kv_cache_fp8_v4(page_view(pages.data(), nb, bs, page),
                                  TensorView::strided(out.data(), DType::bf16, Device::cpu(), {nb, bs, 1, 512},
                                                      {bs * out_tok, out_tok, out_tok, 1}),
                                  nullptr);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = 0; t < bs; ++t) {
      const auto want = reference::mla_dequantize_v4_token(pages.data() + b * page, bs, t);
      const uint16_t* got = out.data() + (b * bs + t) * out_tok;
      for (int64_t c = 0; c < 512; ++c) {
        ASSERT_EQ(static_cast<double>(bf16_bits_to_float(got[c])), want[static_cast<size_t>(c)])
            << "block " << b << " token " << t << " dim " << c;
        if (c >= 448) ASSERT_EQ(got[c], src[static_cast<size_t>((b * bs + t) * 512 + c)]) << "RoPE dim " << c;
      }
      for (int64_t c = 512; c < out_tok; ++c) ASSERT_EQ(got[c], 0x7fc1) << "padding";
    }
}

// ---------------------------------------------------------------------------------------------------
// Decode reference semantics

struct V4Pool {
  int64_t nb, bs, page;
  std::vector<uint8_t> pages;
  std::vector<int32_t> idx;
  std::vector<int32_t> len;
  V4Pool(int64_t nb_, int64_t bs_, int64_t b, int64_t s_q, int64_t topk, std::mt19937& rng)
      : nb(nb_), bs(bs_), page(((bs_ * 584 + 15) / 16) * 16) {
    const auto kv = random_bf16(static_cast<size_t>(nb * bs * 512), rng, 1.0);
    const TensorView kvv = TensorView::contiguous(const_cast<uint16_t*>(kv.data()), DType::bf16, Device::cpu(), {nb, bs, 1, 512});
    pages = reference::mla_quantize_v4_reference(kvv, page);
    idx.resize(static_cast<size_t>(b * s_q * topk));
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(nb * bs - 1));
    for (auto& i : idx) i = d(rng);
  }
  TensorView cache() const { return page_view(pages.data(), nb, bs, page); }
  TensorView indices(int64_t b, int64_t s_q) const {
    return TensorView::contiguous(const_cast<int32_t*>(idx.data()), DType::i32, Device::cpu(),
                                  {b, s_q, static_cast<int64_t>(idx.size()) / (b * s_q)});
  }
};

TEST(MlaV4Reference, ExtraPoolJoinsTheSoftmaxOfTheMainPool) {
  // Two pools attended together give the same result as one pool holding both pools' rows.
  std::mt19937 rng(42);
  const int64_t b = 2, s_q = 2, h_q = 3;
  V4Pool a(4, 7, b, s_q, 64, rng), x(9, 2, b, s_q, 128, rng);
  auto q = random_bf16(static_cast<size_t>(b * s_q * h_q * 512), rng, 1.0);
  const TensorView qv = TensorView::contiguous(q.data(), DType::bf16, Device::cpu(), {b, s_q, h_q, 512});
  const MlaV4Pool main{a.cache(), a.indices(b, s_q)}, extra{x.cache(), x.indices(b, s_q)};
  const auto both = reference::mla_sparse_decode_v4_reference(qv, main, &extra, nullptr, 0.04);
  // One pool of pages of 1 token: a's 28 tokens, then x's 18; indices remapped.
  std::vector<uint8_t> joined;
  auto add_tokens = [&](const V4Pool& p) {
    for (int64_t i = 0; i < p.nb * p.bs; ++i) {
      const uint8_t* pg = p.pages.data() + (i / p.bs) * p.page;
      std::vector<uint8_t> one(592, 0);  // a 1-token page, padded to 16 bytes
      std::memcpy(one.data(), pg + v4::token_record_offset(i % p.bs), 576);
      std::memcpy(one.data() + 576, pg + v4::scale_record_offset(p.bs, i % p.bs), 8);
      joined.insert(joined.end(), one.begin(), one.end());
    }
  };
  add_tokens(a);
  add_tokens(x);
  std::vector<int32_t> jidx;
  for (int64_t t = 0; t < b * s_q; ++t) {
    for (int64_t j = 0; j < 64; ++j) jidx.push_back(a.idx[static_cast<size_t>(t * 64 + j)]);
    for (int64_t j = 0; j < 128; ++j) jidx.push_back(static_cast<int32_t>(a.nb * a.bs) + x.idx[static_cast<size_t>(t * 128 + j)]);
  }
  const MlaV4Pool one{page_view(joined.data(), a.nb * a.bs + x.nb * x.bs, 1, 592),
                      TensorView::contiguous(jidx.data(), DType::i32, Device::cpu(), {b, s_q, 192})};
  const auto ref = reference::mla_sparse_decode_v4_reference(qv, one, nullptr, nullptr, 0.04);
  ASSERT_EQ(both.out.size(), ref.out.size());
  for (size_t i = 0; i < ref.out.size(); ++i) ASSERT_NEAR(both.out[i], ref.out[i], 1e-12) << i;
  for (size_t i = 0; i < ref.lse.size(); ++i) ASSERT_NEAR(both.lse[i], ref.lse[i], 1e-12) << i;
  // Without the extra pool the result differs (the test would notice a dropped pool).
  const auto main_only = reference::mla_sparse_decode_v4_reference(qv, main, nullptr, nullptr, 0.04);
  EXPECT_GT(std::fabs(main_only.lse[0] - both.lse[0]), 1e-6);
}

TEST(MlaV4Reference, LengthsAndInvalidIndicesMaskEachPoolAndEmptyRowsFollowFlashMla) {
  std::mt19937 rng(43);
  const int64_t b = 3, s_q = 1, h_q = 2;
  V4Pool a(3, 61, b, s_q, 64, rng), x(5, 4, b, s_q, 64, rng);
  auto q = random_bf16(static_cast<size_t>(b * s_q * h_q * 512), rng, 1.0);
  const TensorView qv = TensorView::contiguous(q.data(), DType::bf16, Device::cpu(), {b, s_q, h_q, 512});
  // Request 0: main length 10, extra length 0. Request 1: both 0 (empty row). Request 2: full, with invalid
  // indices of every kind in both pools.
  std::vector<int32_t> main_len = {10, 0, 64}, extra_len = {0, 0, 1000};
  const int32_t invalid[] = {-1, std::numeric_limits<int32_t>::min(), 183, 1 << 30, std::numeric_limits<int32_t>::max()};
  for (int j = 0; j < 64; j += 3) a.idx[static_cast<size_t>(128 + j)] = invalid[j % 5];
  for (int j = 1; j < 64; j += 4) x.idx[static_cast<size_t>(128 + j)] = j % 2 ? 20 : -7;  // 20 = 5 * 4: past the end
  const TensorView ml = TensorView::contiguous(main_len.data(), DType::i32, Device::cpu(), {b});
  const TensorView el = TensorView::contiguous(extra_len.data(), DType::i32, Device::cpu(), {b});
  const MlaV4Pool main{a.cache(), a.indices(b, s_q), &ml}, extra{x.cache(), x.indices(b, s_q), &el};
  const auto r = reference::mla_sparse_decode_v4_reference(qv, main, &extra, nullptr, 0.05);
  expect_out_within_magnitude(r.out, r.out_magnitude);

  // The same problem with every masked slot dropped by hand (indices -1, no lengths).
  V4Pool a2 = a, x2 = x;
  for (int j = 10; j < 64; ++j) a2.idx[static_cast<size_t>(j)] = -1;
  for (int j = 0; j < 64; ++j) x2.idx[static_cast<size_t>(j)] = -1;
  for (int j = 0; j < 64; ++j) a2.idx[static_cast<size_t>(64 + j)] = x2.idx[static_cast<size_t>(64 + j)] = -1;
  for (int j = 0; j < 64; j += 3) a2.idx[static_cast<size_t>(128 + j)] = -1;  // every invalid kind behaves as -1
  for (int j = 1; j < 64; j += 4) x2.idx[static_cast<size_t>(128 + j)] = -1;
  const MlaV4Pool main2{a2.cache(), a2.indices(b, s_q)}, extra2{x2.cache(), x2.indices(b, s_q)};
  const auto want = reference::mla_sparse_decode_v4_reference(qv, main2, &extra2, nullptr, 0.05);
  for (size_t i = 0; i < want.out.size(); ++i) ASSERT_EQ(r.out[i], want.out[i]) << i;
  for (int64_t h = 0; h < h_q; ++h) {
    EXPECT_EQ(r.lse_at(1, h), kInf);
    EXPECT_EQ(r.max_logits_at(1, h), -kInf);
    for (int64_t c = 0; c < 512; ++c) ASSERT_EQ(r.out_at(1, h, c), 0.0);
    EXPECT_TRUE(std::isfinite(r.lse_at(0, h)));
    EXPECT_DOUBLE_EQ(r.lse_at(2, h), want.lse_at(2, h));
  }
  // Request 0 with a single main slot is that token's dequantized row.
  std::vector<int32_t> one_len = {1, 0, 0};
  const TensorView ol = TensorView::contiguous(one_len.data(), DType::i32, Device::cpu(), {b});
  const MlaV4Pool main1{a.cache(), a.indices(b, s_q), &ol};
  const auto r1 = reference::mla_sparse_decode_v4_reference(qv, main1, nullptr, nullptr, 0.05);
  const int32_t t0 = a.idx[0];
  const auto row = reference::mla_dequantize_v4_token(a.pages.data() + (t0 / 61) * a.page, 61, t0 % 61);
  for (int64_t c = 0; c < 512; ++c) ASSERT_EQ(r1.out_at(0, 1, c), row[static_cast<size_t>(c)]);
}

}  // namespace
