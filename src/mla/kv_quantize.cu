// The FP8 cache quantizers (sparse_attention_kernel.hpp, launch_quantize_v32 / launch_quantize_v4): bf16 rows into
// DeepSeek V3.2's 656-byte rows and V4's 584-byte page records, FlashMLA's bytes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "mla/fp8_v32.hpp"
#include "mla/fp8_v4.hpp"
#include "mla/simple_device.cuh"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::kernels {
namespace {

// Quantizer: one warp per 576-value row; lane owns 4 consecutive values of each 128-value tile.
__global__ void __launch_bounds__(256) quantize_v32_kernel(const QuantizeParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= p.num_rows) return;
  int64_t src_off, dst_off;
  p.row_offsets(row, src_off, dst_off);
  const auto* src = static_cast<const uint16_t*>(p.src) + src_off;
  auto* dst = static_cast<unsigned char*>(p.dst) + dst_off;
#pragma unroll
  for (int t = 0; t < fp8::kNumScales; ++t) {
    float x[4];
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[i] = fp8::bf16_to_float(src[t * fp8::kTileDims + lane * 4 + i]);
      amax = fmaxf(amax, fabsf(x[i]));
    }
    amax = warp_max(amax);
    const float scale = fp8::pow2_scale(amax);
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[t * fp8::kTileDims + lane * 4 + i] = fp8::float_to_e4m3(x[i] / scale);
    if (lane == 0) {
      const uint32_t bits = __float_as_uint(scale);
#pragma unroll
      for (int b = 0; b < 4; ++b) dst[fp8::kScaleOffset + t * 4 + b] = static_cast<unsigned char>(bits >> (8 * b));
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint16_t v = src[fp8::kNopeDims + lane * 2 + i];
    dst[fp8::kRopeOffset + (lane * 2 + i) * 2] = static_cast<unsigned char>(v & 0xff);
    dst[fp8::kRopeOffset + (lane * 2 + i) * 2 + 1] = static_cast<unsigned char>(v >> 8);
  }
}

// V4 quantizer: one warp per token; lane owns values 2 lane, 2 lane + 1 of each 64-value tile and of the RoPE
// dims. The same arithmetic as fp8_v4::quantize_token (max is order-free, so the bytes match the host's).
__global__ void __launch_bounds__(256) quantize_v4_kernel(const QuantizeV4Params p) {
  namespace v4 = fp8_v4;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (token >= p.num_blocks * p.block_size) return;
  const int64_t blk = token / p.block_size, slot = token % p.block_size;
  const auto* src = static_cast<const uint16_t*>(p.src) + blk * p.src_block_stride + slot * p.src_token_stride;
  auto* page = static_cast<unsigned char*>(p.dst) + blk * p.dst_page_stride;
  unsigned char* record = page + v4::token_record_offset(slot);
  unsigned char* scales = page + v4::scale_record_offset(p.block_size, slot);
#pragma unroll
  for (int t = 0; t < v4::kNumScales; ++t) {
    const float x0 = fp8::bf16_to_float(src[t * v4::kTileDims + lane * 2]);
    const float x1 = fp8::bf16_to_float(src[t * v4::kTileDims + lane * 2 + 1]);
    const float scale = fp8::pow2_scale(warp_max(fmaxf(fabsf(x0), fabsf(x1))));
    record[t * v4::kTileDims + lane * 2] = fp8::float_to_e4m3(x0 / scale);
    record[t * v4::kTileDims + lane * 2 + 1] = fp8::float_to_e4m3(x1 / scale);
    if (lane == t) scales[t] = v4::e8m0_of_pow2(scale);
  }
  if (lane == v4::kNumScales) scales[v4::kNumScales] = 0;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint16_t v = src[v4::kNopeDims + lane * 2 + i];
    record[v4::kRopeOffset + (lane * 2 + i) * 2] = static_cast<unsigned char>(v & 0xff);
    record[v4::kRopeOffset + (lane * 2 + i) * 2 + 1] = static_cast<unsigned char>(v >> 8);
  }
}

}  // namespace

void launch_quantize_v32(const QuantizeParams& p, cudaStream_t stream) {
  const int64_t blocks = (p.num_rows + 7) / 8;
  quantize_v32_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
}

void launch_quantize_v4(const QuantizeV4Params& p, cudaStream_t stream) {
  const int64_t blocks = (p.num_blocks * p.block_size + 7) / 8;
  quantize_v4_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
}

}  // namespace flashcpp::mla::kernels
