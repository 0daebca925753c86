// The FP8 cache quantizers (sparse_attention_kernel.hpp, launch_quantize_v32 / launch_quantize_v4): bf16 rows into
// DeepSeek V3.2's 656-byte rows and V4's 584-byte page records, FlashMLA's bytes; and the dequantizers back (exact:
// an e4m3 value times a power-of-two scale is a bf16 value).
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

// Every kernel here gives a row (V3.2) or token (V4) to a warp, eight warps to a block of 256 threads.
__device__ __forceinline__ int64_t warp_item() { return static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5); }
__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }

// A V3.2 row's bf16 values and FP8 bytes.
struct V32Row {
  uint16_t* bf16;
  unsigned char* fp8;
};
// This warp's row, or false past the last one.
__device__ __forceinline__ bool warp_v32_row(const V32RowsParams& p, V32Row& r) {
  const int64_t row = warp_item();
  if (row >= p.num_rows) return false;
  int64_t bf16_off, fp8_off;
  p.row_offsets(row, bf16_off, fp8_off);
  r = {static_cast<uint16_t*>(p.bf16) + bf16_off, static_cast<unsigned char*>(p.fp8) + fp8_off};
  return true;
}

// A V4 token's bf16 values and its two records in its page.
struct V4Token {
  uint16_t* bf16;
  unsigned char* record;
  unsigned char* scales;
};
// This warp's token, or false past the last one.
__device__ __forceinline__ bool warp_v4_token(const V4PagesParams& p, V4Token& k) {
  const int64_t token = warp_item();
  if (token >= p.num_blocks * p.block_size) return false;
  const int64_t blk = token / p.block_size, slot = token % p.block_size;
  unsigned char* page = static_cast<unsigned char*>(p.pages) + blk * p.page_stride;
  k = {static_cast<uint16_t*>(p.bf16) + blk * p.bf16_block_stride + slot * p.bf16_token_stride,
       page + fp8_v4::token_record_offset(slot), page + fp8_v4::scale_record_offset(p.block_size, slot)};
  return true;
}

// The quantizers' RoPE dims: lane copies bf16 values 2 lane and 2 lane + 1 of the 64 as their bytes (little endian).
__device__ __forceinline__ void copy_rope_pair(const uint16_t* rope, unsigned char* dst, int lane) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint16_t v = rope[lane * 2 + i];
    dst[(lane * 2 + i) * 2] = static_cast<unsigned char>(v & 0xff);
    dst[(lane * 2 + i) * 2 + 1] = static_cast<unsigned char>(v >> 8);
  }
}

// Quantizer: one warp per 576-value row; lane owns 4 consecutive values of each 128-value tile.
__global__ void __launch_bounds__(256) quantize_v32_kernel(const V32RowsParams p) {
  V32Row r;
  if (!warp_v32_row(p, r)) return;
  const int lane = lane_id();
  const uint16_t* src = r.bf16;
  unsigned char* dst = r.fp8;
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
  copy_rope_pair(src + fp8::kNopeDims, dst + fp8::kRopeOffset, lane);
}

// V4 quantizer: one warp per token; lane owns values 2 lane, 2 lane + 1 of each 64-value tile and of the RoPE
// dims. The same arithmetic as fp8_v4::quantize_token (max is order-free, so the bytes match the host's).
__global__ void __launch_bounds__(256) quantize_v4_kernel(const V4PagesParams p) {
  namespace v4 = fp8_v4;
  V4Token k;
  if (!warp_v4_token(p, k)) return;
  const int lane = lane_id();
  const uint16_t* src = k.bf16;
  unsigned char *record = k.record, *scales = k.scales;
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
  copy_rope_pair(src + v4::kNopeDims, record + v4::kRopeOffset, lane);
}

// V3.2 dequantizer: one warp per row; lane l turns bytes [16 l, 16 l + 16) of the NoPE part (tile l / 8) into 16 bf16
// values, lanes 0..7 copy one 16-byte piece of the RoPE part each.
__global__ void __launch_bounds__(256) dequantize_v32_kernel(const V32RowsParams p) {
  V32Row r;
  if (!warp_v32_row(p, r)) return;
  const int lane = lane_id();
  const unsigned char* src = r.fp8;
  uint16_t* dst = r.bf16;
  const float scale = *reinterpret_cast<const float*>(src + fp8::kScaleOffset + (lane / 8) * 4);
  auto* out = reinterpret_cast<uint4*>(dst + lane * 16);
  dequant_fp8x16(*reinterpret_cast<const uint4*>(src + lane * 16), scale, out[0], out[1]);
  if (lane < fp8::kRopeDims * 2 / 16)
    reinterpret_cast<uint4*>(dst + fp8::kNopeDims)[lane] = reinterpret_cast<const uint4*>(src + fp8::kRopeOffset)[lane];
}

// V4 dequantizer: one warp per token; lanes 0..27 turn 16 bytes of the NoPE part (tile l / 4) into 16 bf16 values,
// lanes 28..31 and 0..3 copy the RoPE part's eight 16-byte pieces.
__global__ void __launch_bounds__(256) dequantize_v4_kernel(const V4PagesParams p) {
  namespace v4 = fp8_v4;
  V4Token k;
  if (!warp_v4_token(p, k)) return;
  const int lane = lane_id();
  constexpr int kNopeLanes = v4::kNopeDims / 16;  // 28
  if (lane < kNopeLanes) {
    auto* out = reinterpret_cast<uint4*>(k.bf16 + lane * 16);
    dequant_fp8x16(*reinterpret_cast<const uint4*>(k.record + lane * 16), v4::pow2_of_e8m0(k.scales[lane / 4]), out[0],
                   out[1]);
  }
  const int rope_piece = (lane + 32 - kNopeLanes) % 32;  // lanes 28..31 -> 0..3, lanes 0..3 -> 4..7
  if (rope_piece < v4::kRopeDims * 2 / 16)
    reinterpret_cast<uint4*>(k.bf16 + v4::kNopeDims)[rope_piece] =
        reinterpret_cast<const uint4*>(k.record + v4::kRopeOffset)[rope_piece];
}

}  // namespace

// One warp per row or token, eight to a block of 256 threads.
void launch_quantize_v32(const V32RowsParams& p, cudaStream_t stream) {
  quantize_v32_kernel<<<static_cast<unsigned>((p.num_rows + 7) / 8), 256, 0, stream>>>(p);
}
void launch_dequantize_v32(const V32RowsParams& p, cudaStream_t stream) {
  dequantize_v32_kernel<<<static_cast<unsigned>((p.num_rows + 7) / 8), 256, 0, stream>>>(p);
}

void launch_quantize_v4(const V4PagesParams& p, cudaStream_t stream) {
  quantize_v4_kernel<<<static_cast<unsigned>((p.num_blocks * p.block_size + 7) / 8), 256, 0, stream>>>(p);
}
void launch_dequantize_v4(const V4PagesParams& p, cudaStream_t stream) {
  dequantize_v4_kernel<<<static_cast<unsigned>((p.num_blocks * p.block_size + 7) / 8), 256, 0, stream>>>(p);
}

}  // namespace flashcpp::mla::kernels
