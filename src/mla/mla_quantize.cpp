// The FP8 cache quantizers and dequantizers, host side (include/flashcpp/mla.hpp): validation, then the host path
// (host tensors) or one kernel launch.
#include <cmath>
#include <cstring>
#include <string>
#include "core/check.hpp"
#include "flashcpp/mla.hpp"
#include "mla/fp8_v32.hpp"
#include "mla/fp8_v4.hpp"
#include "mla/mla_host.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla {
using namespace detail;

namespace {

// The rows of a V3.2 cache and their bf16 values, walked through the leading dims the two share.
kernels::V32RowsParams v32_rows(const TensorView& bf16, const TensorView& fp8_rows) {
  kernels::V32RowsParams p;
  p.bf16 = bf16.data;
  p.fp8 = fp8_rows.data;
  p.num_lead = bf16.rank - 1;
  p.num_rows = 1;
  for (int d = 0; d < p.num_lead; ++d) {
    p.lead_shape[d] = bf16.size(d);
    p.bf16_lead_stride[d] = bf16.stride(d);
    p.fp8_lead_stride[d] = fp8_rows.stride(d);
    p.num_rows *= bf16.size(d);
  }
  return p;
}

kernels::V4PagesParams v4_pages(const TensorView& bf16, const TensorView& pages) {
  kernels::V4PagesParams p;
  p.bf16 = bf16.data;
  p.pages = pages.data;
  p.num_blocks = bf16.size(0);
  p.block_size = bf16.size(1);
  p.bf16_block_stride = bf16.stride(0);
  p.bf16_token_stride = bf16.stride(1);
  p.page_stride = pages.stride(0);
  return p;
}

// The device dequantizers move 16-byte vectors: the cache's data and the strides of its first `cache_dims` dims (those
// its rows are found by) 16-byte multiples, out's data 16-byte aligned and its strides multiples of 8 values.
void check_vector_layout(const Validator& v, const TensorView& cache, int cache_dims, const TensorView& out) {
  v.aligned(cache, "cache", 16).aligned(out, "out", 16);
  for (int d = 0; d + 1 < out.rank; ++d) {
    if (d < cache_dims && cache.size(d) > 1 && cache.stride(d) % 16 != 0)
      v.fail("cache", cache, "must have strides that are multiples of 16 bytes on a GPU; dim " + std::to_string(d) +
                                 " has " + std::to_string(cache.stride(d)));
    if (out.size(d) > 1 && out.stride(d) % 8 != 0)
      v.fail("out", out, "must have strides that are multiples of 8 values on a GPU; dim " + std::to_string(d) +
                             " has " + std::to_string(out.stride(d)));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Quantizer

void quantize_kv_cache_fp8(const TensorView& kv, const TensorView& out, cudaStream_t stream) {
  const Validator v("mla::quantize_kv_cache_fp8");
  v.defined(kv, "kv").dtype(kv, "kv", {DType::bf16}).no_negative_strides(kv, "kv");
  if (kv.rank < 2 || kv.rank > 4) v.fail("kv", kv, "must have rank 2, 3 or 4");
  v.dim(kv, "kv", kv.rank - 1, fp8::kDims, "576 values per token").last_dim_contiguous(kv, "kv");
  v.defined(out, "out").dtype(out, "out", {DType::u8, DType::i8, DType::e4m3}).rank(out, "out", kv.rank);
  for (int d = 0; d + 1 < kv.rank; ++d) v.dim(out, "out", d, kv.size(d), "kv's leading dims");
  v.dim(out, "out", out.rank - 1, kFp8BytesPerToken, "656 bytes per token").last_dim_contiguous(out, "out");
  v.no_negative_strides(out, "out");
  const bool host = converter_on_host(v, kv, "kv", out);
  const kernels::V32RowsParams p = v32_rows(kv, out);
  if (!host && (p.num_rows + 7) / 8 > INT32_MAX) v.fail("kv", kv, "must have at most 2^34 tokens");
  if (p.num_rows == 0) return;
  if (host) {
    for (int64_t r = 0; r < p.num_rows; ++r) {
      int64_t so, dout;
      p.row_offsets(r, so, dout);
      const auto* src = static_cast<const uint16_t*>(p.bf16) + so;
      auto* dst = static_cast<unsigned char*>(p.fp8) + dout;
      for (int t = 0; t < fp8::kNumScales; ++t) {
        float amax = 0.f;
        for (int c = 0; c < fp8::kTileDims; ++c) {
          const float x = std::fabs(fp8::bf16_to_float(src[t * fp8::kTileDims + c]));
          amax = x > amax ? x : amax;
        }
        const float scale = fp8::pow2_scale(amax);
        for (int c = 0; c < fp8::kTileDims; ++c)
          dst[t * fp8::kTileDims + c] = fp8::float_to_e4m3(fp8::bf16_to_float(src[t * fp8::kTileDims + c]) / scale);
        std::memcpy(dst + fp8::kScaleOffset + t * 4, &scale, 4);
      }
      std::memcpy(dst + fp8::kRopeOffset, src + fp8::kNopeDims, fp8::kRopeDims * 2);
    }
    return;
  }
  require_supported("mla::quantize_kv_cache_fp8", kv.device.id);
  DeviceGuard guard(kv.device.id);
  kernels::launch_quantize_v32(p, stream);
  check_launch("FP8 quantizer kernel launch");
}

void quantize_kv_cache_fp8_v4(const TensorView& kv, const TensorView& out, cudaStream_t stream) {
  const Validator v("mla::quantize_kv_cache_fp8_v4");
  v.defined(kv, "kv").dtype(kv, "kv", {DType::bf16}).rank(kv, "kv", 4).no_negative_strides(kv, "kv");
  v.dim(kv, "kv", 2, 1, "h_kv").dim(kv, "kv", 3, fp8_v4::kDims, "512 values per token").last_dim_contiguous(kv, "kv");
  v4_page_rules(v, out, "out");
  v.dim(out, "out", 0, kv.size(0), "kv.size(0) (num_blocks)").dim(out, "out", 1, kv.size(1), "kv.size(1) (block_size)");
  const int64_t num_blocks = kv.size(0), block_size = kv.size(1);
  const bool host = converter_on_host(v, kv, "kv", out);
  const int64_t num_tokens = num_blocks * block_size;
  if (!host && (num_tokens + 7) / 8 > INT32_MAX) v.fail("kv", kv, "must have at most 2^34 tokens");
  if (num_tokens == 0) return;
  const kernels::V4PagesParams p = v4_pages(kv, out);
  if (host) {
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      auto* page = static_cast<uint8_t*>(p.pages) + blk * p.page_stride;
      for (int64_t t = 0; t < block_size; ++t) {
        const auto* src = static_cast<const uint16_t*>(p.bf16) + blk * p.bf16_block_stride + t * p.bf16_token_stride;
        fp8_v4::quantize_token(src, page + fp8_v4::token_record_offset(t),
                               page + fp8_v4::scale_record_offset(block_size, t));
      }
    }
    return;
  }
  require_supported("mla::quantize_kv_cache_fp8_v4", kv.device.id);
  DeviceGuard guard(kv.device.id);
  kernels::launch_quantize_v4(p, stream);
  check_launch("FP8 V4 quantizer kernel launch");
}

// ---------------------------------------------------------------------------------------------------
// Dequantizer

void dequantize_kv_cache_fp8(const TensorView& cache, const TensorView& out, cudaStream_t stream) {
  const Validator v("mla::dequantize_kv_cache_fp8");
  v.defined(cache, "cache").dtype(cache, "cache", {DType::u8, DType::i8, DType::e4m3}).no_negative_strides(cache, "cache");
  if (cache.rank < 2 || cache.rank > 4) v.fail("cache", cache, "must have rank 2, 3 or 4");
  v.dim(cache, "cache", cache.rank - 1, kFp8BytesPerToken, "656 bytes per token").last_dim_contiguous(cache, "cache");
  v.defined(out, "out").dtype(out, "out", {DType::bf16}).rank(out, "out", cache.rank);
  for (int d = 0; d + 1 < cache.rank; ++d) v.dim(out, "out", d, cache.size(d), "cache's leading dims");
  v.dim(out, "out", out.rank - 1, fp8::kDims, "576 values per token").last_dim_contiguous(out, "out");
  v.no_negative_strides(out, "out");
  const bool host = converter_on_host(v, cache, "cache", out);
  const kernels::V32RowsParams p = v32_rows(out, cache);
  if (!host) {
    check_vector_layout(v, cache, cache.rank - 1, out);
    if ((p.num_rows + 7) / 8 > INT32_MAX) v.fail("cache", cache, "must have at most 2^34 tokens");
  }
  if (p.num_rows == 0) return;
  if (host) {
    for (int64_t r = 0; r < p.num_rows; ++r) {
      int64_t bf16_off, fp8_off;
      p.row_offsets(r, bf16_off, fp8_off);
      const auto* src = static_cast<const uint8_t*>(p.fp8) + fp8_off;
      auto* dst = static_cast<uint16_t*>(p.bf16) + bf16_off;
      for (int t = 0; t < fp8::kNumScales; ++t) {
        float scale;
        std::memcpy(&scale, src + fp8::kScaleOffset + t * 4, 4);
        for (int c = 0; c < fp8::kTileDims; ++c)
          dst[t * fp8::kTileDims + c] = fp8::float_to_bf16(fp8::e4m3_to_float(src[t * fp8::kTileDims + c]) * scale);
      }
      std::memcpy(dst + fp8::kNopeDims, src + fp8::kRopeOffset, fp8::kRopeDims * 2);
    }
    return;
  }
  require_supported("mla::dequantize_kv_cache_fp8", cache.device.id);
  DeviceGuard guard(cache.device.id);
  kernels::launch_dequantize_v32(p, stream);
  check_launch("FP8 dequantizer kernel launch");
}

void dequantize_kv_cache_fp8_v4(const TensorView& cache, const TensorView& out, cudaStream_t stream) {
  const Validator v("mla::dequantize_kv_cache_fp8_v4");
  v4_page_rules(v, cache, "cache");
  v.defined(out, "out").dtype(out, "out", {DType::bf16}).rank(out, "out", 4).no_negative_strides(out, "out");
  v.dim(out, "out", 0, cache.size(0), "cache.size(0) (num_blocks)").dim(out, "out", 1, cache.size(1), "cache.size(1) (block_size)");
  v.dim(out, "out", 2, 1, "h_kv").dim(out, "out", 3, fp8_v4::kDims, "512 values per token").last_dim_contiguous(out, "out");
  const int64_t num_blocks = cache.size(0), block_size = cache.size(1);
  const bool host = converter_on_host(v, cache, "cache", out);
  const int64_t num_tokens = num_blocks * block_size;
  if (!host) {
    check_vector_layout(v, cache, 1, out);  // tokens sit at fixed offsets in their page
    if ((num_tokens + 7) / 8 > INT32_MAX) v.fail("cache", cache, "must have at most 2^34 tokens");
  }
  if (num_tokens == 0) return;
  const kernels::V4PagesParams p = v4_pages(out, cache);
  if (host) {
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      const auto* page = static_cast<const uint8_t*>(p.pages) + blk * p.page_stride;
      for (int64_t t = 0; t < block_size; ++t) {
        const uint8_t* record = page + fp8_v4::token_record_offset(t);
        const uint8_t* scales = page + fp8_v4::scale_record_offset(block_size, t);
        auto* dst = static_cast<uint16_t*>(p.bf16) + blk * p.bf16_block_stride + t * p.bf16_token_stride;
        for (int c = 0; c < fp8_v4::kNopeDims; ++c)
          dst[c] = fp8::float_to_bf16(fp8::e4m3_to_float(record[c]) * fp8_v4::pow2_of_e8m0(scales[c / fp8_v4::kTileDims]));
        std::memcpy(dst + fp8_v4::kNopeDims, record + fp8_v4::kRopeOffset, fp8_v4::kRopeDims * 2);
      }
    }
    return;
  }
  require_supported("mla::dequantize_kv_cache_fp8_v4", cache.device.id);
  DeviceGuard guard(cache.device.id);
  kernels::launch_dequantize_v4(p, stream);
  check_launch("FP8 V4 dequantizer kernel launch");
}

}  // namespace flashcpp::mla
