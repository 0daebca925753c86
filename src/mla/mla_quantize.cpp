// The FP8 cache quantizers, host side (include/flashcpp/mla.hpp): validation, then the host path (host tensors) or
// one kernel launch.
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
  const bool host = quantizer_on_host(v, kv, out);
  kernels::QuantizeParams p;
  p.src = kv.data;
  p.dst = out.data;
  p.num_lead = kv.rank - 1;
  p.num_rows = 1;
  for (int d = 0; d < p.num_lead; ++d) {
    p.lead_shape[d] = kv.size(d);
    p.src_lead_stride[d] = kv.stride(d);
    p.dst_lead_stride[d] = out.stride(d);
    p.num_rows *= kv.size(d);
  }
  if (!host && (p.num_rows + 7) / 8 > INT32_MAX) v.fail("kv", kv, "must have at most 2^34 tokens");
  if (p.num_rows == 0) return;
  if (host) {
    for (int64_t r = 0; r < p.num_rows; ++r) {
      int64_t so, dout;
      p.row_offsets(r, so, dout);
      const auto* src = static_cast<const uint16_t*>(p.src) + so;
      auto* dst = static_cast<unsigned char*>(p.dst) + dout;
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
  const bool host = quantizer_on_host(v, kv, out);
  const int64_t num_tokens = num_blocks * block_size;
  if (!host && (num_tokens + 7) / 8 > INT32_MAX) v.fail("kv", kv, "must have at most 2^34 tokens");
  if (num_tokens == 0) return;
  kernels::QuantizeV4Params p;
  p.src = kv.data;
  p.dst = out.data;
  p.num_blocks = num_blocks;
  p.block_size = block_size;
  p.src_block_stride = kv.stride(0);
  p.src_token_stride = kv.stride(1);
  p.dst_page_stride = out.stride(0);
  if (host) {
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      auto* page = static_cast<uint8_t*>(p.dst) + blk * p.dst_page_stride;
      for (int64_t t = 0; t < block_size; ++t) {
        const auto* src = static_cast<const uint16_t*>(p.src) + blk * p.src_block_stride + t * p.src_token_stride;
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

}  // namespace flashcpp::mla
