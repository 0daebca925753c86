// The FP8 cache quantizers and dequantizers, host side (include/flashcpp/mla.hpp): validation, then the host path
// (host tensors, on the calling thread) or one kernel launch. Each conversion reads `src` (named as the public
// function names it) and writes `out`; the V3.2 pair is a bf16 tensor [..., 576] and rows [..., 656] of the same
// leading shape, the V4 pair bf16 [num_blocks, block_size, 1, 512] and the pages of quantize_kv_cache_fp8_v4.
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

enum class Direction { quantize, dequantize };

// The V3.2 pair's rules: src of rank 2..4, out with src's leading dims; bf16 on one side, rows on the other.
void v32_rules(const Validator& v, const TensorView& src, const char* src_arg, const TensorView& out, Direction dir) {
  const bool q = dir == Direction::quantize;
  const std::initializer_list<DType> bf16 = {DType::bf16}, rows = {DType::u8, DType::i8, DType::e4m3};
  const auto last = [](bool is_bf16) { return is_bf16 ? int64_t{fp8::kDims} : int64_t{kFp8BytesPerToken}; };
  const auto last_rule = [](bool is_bf16) { return is_bf16 ? "576 values per token" : "656 bytes per token"; };
  v.defined(src, src_arg).dtype(src, src_arg, q ? bf16 : rows).no_negative_strides(src, src_arg);
  if (src.rank < 2 || src.rank > 4) v.fail(src_arg, src, "must have rank 2, 3 or 4");
  v.dim(src, src_arg, src.rank - 1, last(q), last_rule(q)).last_dim_contiguous(src, src_arg);
  v.defined(out, "out").dtype(out, "out", q ? rows : bf16).rank(out, "out", src.rank);
  const std::string leading = std::string(src_arg) + "'s leading dims";
  for (int d = 0; d + 1 < src.rank; ++d) v.dim(out, "out", d, src.size(d), leading);
  v.dim(out, "out", out.rank - 1, last(!q), last_rule(!q)).last_dim_contiguous(out, "out");
  v.no_negative_strides(out, "out");
}

// The V4 pair's rules: bf16 [num_blocks, block_size, 1, 512] on one side, pages (v4_page_rules) on the other.
void v4_rules(const Validator& v, const TensorView& src, const char* src_arg, const TensorView& out, Direction dir) {
  const auto bf16_rules = [&v](const TensorView& t, const char* arg) {
    v.defined(t, arg).dtype(t, arg, {DType::bf16}).rank(t, arg, 4).no_negative_strides(t, arg);
    v.dim(t, arg, 2, 1, "h_kv").dim(t, arg, 3, fp8_v4::kDims, "512 values per token").last_dim_contiguous(t, arg);
  };
  if (dir == Direction::quantize) {
    bf16_rules(src, src_arg);
    v4_page_rules(v, out, "out");
  } else {
    v4_page_rules(v, src, src_arg);
    bf16_rules(out, "out");
  }
  const std::string arg = src_arg;
  v.dim(out, "out", 0, src.size(0), arg + ".size(0) (num_blocks)");
  v.dim(out, "out", 1, src.size(1), arg + ".size(1) (block_size)");
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

// One warp per token on the device: the grid's block count (8 tokens a block) must fit in int32.
void check_token_count(const Validator& v, int64_t tokens, const TensorView& src, const char* src_arg) {
  if ((tokens + 7) / 8 > INT32_MAX) v.fail(src_arg, src, "must have at most 2^34 tokens");
}

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

// The host paths: fn(bf16 values, row bytes) for every V3.2 row; fn(bf16 values, token record, scale record) for
// every V4 token. Rows and tokens are walked as the kernels walk them.
template <class Fn>
void for_each_v32_row(const kernels::V32RowsParams& p, Fn&& fn) {
  for (int64_t r = 0; r < p.num_rows; ++r) {
    int64_t bf16_off, fp8_off;
    p.row_offsets(r, bf16_off, fp8_off);
    fn(static_cast<uint16_t*>(p.bf16) + bf16_off, static_cast<uint8_t*>(p.fp8) + fp8_off);
  }
}

template <class Fn>
void for_each_v4_token(const kernels::V4PagesParams& p, Fn&& fn) {
  for (int64_t blk = 0; blk < p.num_blocks; ++blk) {
    uint8_t* page = static_cast<uint8_t*>(p.pages) + blk * p.page_stride;
    for (int64_t t = 0; t < p.block_size; ++t)
      fn(static_cast<uint16_t*>(p.bf16) + blk * p.bf16_block_stride + t * p.bf16_token_stride,
         page + fp8_v4::token_record_offset(t), page + fp8_v4::scale_record_offset(p.block_size, t));
  }
}

// The device path: one launch on the tensors' device.
template <class Launch>
void launch_on_device(const char* op, int device, const char* what, Launch&& launch) {
  require_supported(op, device);
  DeviceGuard guard(device);
  launch();
  check_launch(what);
}

// The host paths' per-row and per-token work (the kernels do the same arithmetic spread over a warp).
void quantize_v32_row(const uint16_t* src, uint8_t* dst) {
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

void dequantize_v32_row(uint16_t* dst, const uint8_t* src) {
  for (int t = 0; t < fp8::kNumScales; ++t) {
    float scale;
    std::memcpy(&scale, src + fp8::kScaleOffset + t * 4, 4);
    for (int c = 0; c < fp8::kTileDims; ++c)
      dst[t * fp8::kTileDims + c] = fp8::float_to_bf16(fp8::e4m3_to_float(src[t * fp8::kTileDims + c]) * scale);
  }
  std::memcpy(dst + fp8::kNopeDims, src + fp8::kRopeOffset, fp8::kRopeDims * 2);
}

void dequantize_v4_token(uint16_t* dst, const uint8_t* record, const uint8_t* scales) {
  for (int c = 0; c < fp8_v4::kNopeDims; ++c)
    dst[c] = fp8::float_to_bf16(fp8::e4m3_to_float(record[c]) * fp8_v4::pow2_of_e8m0(scales[c / fp8_v4::kTileDims]));
  std::memcpy(dst + fp8_v4::kNopeDims, record + fp8_v4::kRopeOffset, fp8_v4::kRopeDims * 2);
}

enum class Layout { v32_rows, v4_pages };

// One conversion between a bf16 tensor and an FP8 cache of either layout, either way: the rules, then the host walk
// or one launch.
void convert(const char* op, Layout layout, const TensorView& src, const char* src_arg, const TensorView& out,
             Direction dir, cudaStream_t stream) {
  const bool q = dir == Direction::quantize, v4 = layout == Layout::v4_pages;
  const Validator v(op);
  if (v4) {
    v4_rules(v, src, src_arg, out, dir);
  } else {
    v32_rules(v, src, src_arg, out, dir);
  }
  const bool host = converter_on_host(v, src, src_arg, out);
  const TensorView& bf16 = q ? src : out;
  const TensorView& fp8 = q ? out : src;
  const kernels::V32RowsParams rows = v4 ? kernels::V32RowsParams{} : v32_rows(bf16, fp8);
  const kernels::V4PagesParams pages = v4 ? v4_pages(bf16, fp8) : kernels::V4PagesParams{};
  const int64_t tokens = v4 ? pages.num_blocks * pages.block_size : rows.num_rows;
  if (!host) {
    // V4 tokens sit at fixed offsets in their page: only the page stride is free.
    if (!q) check_vector_layout(v, src, v4 ? 1 : src.rank - 1, out);
    check_token_count(v, tokens, src, src_arg);
  }
  if (tokens == 0) return;
  if (host && v4) {
    for_each_v4_token(pages, [q](uint16_t* values, uint8_t* record, uint8_t* scales) {
      q ? fp8_v4::quantize_token(values, record, scales) : dequantize_v4_token(values, record, scales);
    });
  } else if (host) {
    for_each_v32_row(rows, [q](uint16_t* values, uint8_t* row) {
      q ? quantize_v32_row(values, row) : dequantize_v32_row(values, row);
    });
  } else {
    launch_on_device(op, src.device.id, q ? "FP8 cache quantizer kernel launch" : "FP8 cache dequantizer kernel launch",
                     [&] {
                       if (v4) {
                         q ? kernels::launch_quantize_v4(pages, stream) : kernels::launch_dequantize_v4(pages, stream);
                       } else {
                         q ? kernels::launch_quantize_v32(rows, stream) : kernels::launch_dequantize_v32(rows, stream);
                       }
                     });
  }
}

}  // namespace

void quantize_kv_cache_fp8(const TensorView& kv, const TensorView& out, cudaStream_t stream) {
  convert("mla::quantize_kv_cache_fp8", Layout::v32_rows, kv, "kv", out, Direction::quantize, stream);
}

void quantize_kv_cache_fp8_v4(const TensorView& kv, const TensorView& out, cudaStream_t stream) {
  convert("mla::quantize_kv_cache_fp8_v4", Layout::v4_pages, kv, "kv", out, Direction::quantize, stream);
}

void dequantize_kv_cache_fp8(const TensorView& cache, const TensorView& out, cudaStream_t stream) {
  convert("mla::dequantize_kv_cache_fp8", Layout::v32_rows, cache, "cache", out, Direction::dequantize, stream);
}

void dequantize_kv_cache_fp8_v4(const TensorView& cache, const TensorView& out, cudaStream_t stream) {
  convert("mla::dequantize_kv_cache_fp8_v4", Layout::v4_pages, cache, "cache", out, Direction::dequantize, stream);
}

}  // namespace flashcpp::mla
