// Host side of dense MLA decode (include/flashcpp/mla.hpp): validation before anything is launched or written, the
// workspace sizes, the plan (one kernel, mla/dense_decode_kernel.hpp) and the run (the sparse decode kernels and their
// combine over the indices the plan wrote).
#include <algorithm>
#include <climits>
#include <string>

#include "core/check.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/mla.hpp"
#include "mla/decode_schedule.hpp"
#include "mla/dense_decode_kernel.hpp"
#include "mla/fp8_v32.hpp"
#include "mla/mla_host.hpp"

namespace flashcpp::mla {
namespace {

using namespace detail;

constexpr int kDqk = 576;

void validate_config(const Validator& v, const DenseDecodeConfig& c) {
  if (c.batch < 1) v.fail("batch", "must be >= 1; got " + std::to_string(c.batch));
  if (c.s_q < 1 || c.s_q > 65535) v.fail("s_q", "must be in [1, 65535]; got " + std::to_string(c.s_q));
  if (c.h_q < 1 || c.h_q > kMaxHeads) v.fail("h_q", "must be in [1, 1024]; got " + std::to_string(c.h_q));
  if (int64_t{c.batch} * c.s_q > INT32_MAX) v.fail("batch", "must keep batch * s_q <= 2^31 - 1");
  if (c.block_size < 1) v.fail("block_size", "must be >= 1; got " + std::to_string(c.block_size));
  if (c.max_blocks < 1) v.fail("max_blocks", "must be >= 1; got " + std::to_string(c.max_blocks));
  if (int64_t{c.max_blocks} * c.block_size > INT32_MAX - 63)
    v.fail("max_blocks", "must keep max_blocks * block_size <= 2^31 - 64 (int32 slots); got " +
                             std::to_string(c.max_blocks) + " x " + std::to_string(c.block_size));
  if (c.num_sms < 0 || c.num_sms > kMaxSms)
    v.fail("num_sms", "must be in [0, " + std::to_string(kMaxSms) + "] (0: the device's SM count); got " +
                          std::to_string(c.num_sms));
  // The plan kernel's grid: one block per request and 1024 slots, plus the schedule's.
  const int64_t capacity = (int64_t{c.max_blocks} * c.block_size + 63) / 64 * 64;
  if (int64_t{c.batch} * ((capacity + 1023) / 1024) >= INT32_MAX)
    v.fail("batch", "must keep batch * ceil(max_blocks * block_size / 1024) < 2^31 - 1");
}

// Parts: one per SM's worth of CTAs of a request (s_q tokens, a CTA per 64 heads), as FlashMLA's num_sm_parts.
DenseDecodePlanSizes sizes_for(const DenseDecodeConfig& c, int num_sms) {
  DenseDecodePlanSizes s;
  const int64_t groups = (c.h_q + 63) / 64;
  s.num_sm_parts = static_cast<int>(std::max<int64_t>(num_sms / (int64_t{c.s_q} * groups), 1));
  s.capacity = (int64_t{c.max_blocks} * c.block_size + 63) / 64 * 64;
  s.sched_meta_elems = int64_t{s.num_sm_parts} * sched::kMetaInts;
  s.num_splits_elems = int64_t{c.batch} + 1;
  s.lse_accum_elems = (int64_t{c.batch} + s.num_sm_parts) * c.s_q * c.h_q;
  s.o_accum_elems = s.lse_accum_elems * kDv / 2;  // f32 elements, each two bf16 of a partial row
  s.indices_elems = int64_t{c.batch} * s.capacity;
  s.token_lengths_elems = int64_t{c.batch} * c.s_q;
  return s;
}

int sms_of(const DenseDecodeConfig& c, int device_id) {
  return c.num_sms > 0 ? c.num_sms : kernel_support(device_id).sm_count;
}

// Every workspace buffer: its dtype, contiguous, on q's device, large enough; the ones written by vector stores
// 16-byte aligned.
void validate_workspace(const Validator& v, const DenseDecodeWorkspace& ws, const DenseDecodePlanSizes& s,
                        const TensorView& q) {
  cuda_tensor(v, ws.sched_meta, "sched_meta", {DType::i32}, 2);
  v.shape(ws.sched_meta, "sched_meta", {s.num_sm_parts, sched::kMetaInts}).contiguous(ws.sched_meta, "sched_meta");
  v.aligned(ws.sched_meta, "sched_meta", 16).same_device(ws.sched_meta, "sched_meta", q, "q");
  cuda_tensor(v, ws.num_splits, "num_splits", {DType::i32}, 1);
  v.shape(ws.num_splits, "num_splits", {s.num_splits_elems}).contiguous(ws.num_splits, "num_splits");
  v.aligned(ws.num_splits, "num_splits", 4).same_device(ws.num_splits, "num_splits", q, "q");
  struct Buffer {
    const TensorView* t;
    const char* name;
    DType dtype;
    int64_t elems;
  };
  for (const Buffer& b : {Buffer{&ws.lse_accum, "lse_accum", DType::f32, s.lse_accum_elems},
                          Buffer{&ws.o_accum, "o_accum", DType::f32, s.o_accum_elems},
                          Buffer{&ws.indices, "indices", DType::i32, s.indices_elems},
                          Buffer{&ws.token_lengths, "token_lengths", DType::i32, s.token_lengths_elems}}) {
    v.defined(*b.t, b.name).dtype(*b.t, b.name, {b.dtype}).on_cuda(*b.t, b.name).contiguous(*b.t, b.name);
    v.aligned(*b.t, b.name, 16).same_device(*b.t, b.name, q, "q");
    if (b.t->numel() < b.elems) v.fail(b.name, *b.t, "must hold at least " + std::to_string(b.elems) + " elements");
  }
}

struct CacheLayout {
  kernels::KvFormat format{};
  int64_t num_blocks = 0, block_size = 0;
  int64_t row_stride = 0;  // bf16 / fp16: elements between consecutive tokens (pages included)
};

// kv_cache: bf16 or fp16 (q's dtype) [num_blocks, block_size, 1, 576] (tokens evenly spaced across pages) or, with a
// bf16 q, the V3.2 FP8 rows [num_blocks, block_size, 1, 656]; at most 2^31 - 1 tokens (int32 indices).
CacheLayout validate_cache(const Validator& v, const TensorView& kv, const TensorView& q) {
  v.defined(kv, "kv_cache").dtype(kv, "kv_cache", {DType::bf16, DType::f16, DType::u8, DType::i8, DType::e4m3});
  const bool sixteen_bit = kv.dtype == DType::bf16 || kv.dtype == DType::f16;
  if (sixteen_bit && kv.dtype != q.dtype)
    v.fail("kv_cache", kv,
           "must have q's dtype (" + std::string(dtype_name(q.dtype)) + ") when it holds 16-bit values");
  if (!sixteen_bit && q.dtype != DType::bf16)
    v.fail("q", q, "must be bf16 with the V3.2 FP8 cache (its RoPE dims are bf16)");
  v.rank(kv, "kv_cache", 4).on_cuda(kv, "kv_cache").same_device(kv, "kv_cache", q, "q");
  v.no_negative_strides(kv, "kv_cache").dim(kv, "kv_cache", 2, 1, "h_kv").last_dim_contiguous(kv, "kv_cache");
  v.aligned(kv, "kv_cache", 16);
  CacheLayout c;
  c.num_blocks = kv.size(0);
  c.block_size = kv.size(1);
  if (c.block_size < 1) v.fail("kv_cache", kv, "must have block_size (dim 1) >= 1");
  if (c.num_blocks > (INT32_MAX / c.block_size))
    v.fail("kv_cache", kv, "must hold at most 2^31 - 1 tokens (int32 indices)");
  if (sixteen_bit) {
    c.format = kv.dtype == DType::f16 ? kernels::KvFormat::f16 : kernels::KvFormat::bf16;
    v.dim(kv, "kv_cache", 3, kDqk, "576 values per token");
    // Token t of block k is row k * block_size + t, `row_stride` elements apart.
    const bool paged = c.block_size > 1;
    c.row_stride = paged ? kv.stride(1) : (c.num_blocks > 1 ? kv.stride(0) : kDqk);
    if ((paged || c.num_blocks > 1) && (c.row_stride < kDqk || c.row_stride % 8 != 0))
      v.fail("kv_cache", kv, std::string("must have a token stride (dim ") + (paged ? "1" : "0") +
                             ") of at least 576 elements and a multiple of 8; got " + std::to_string(c.row_stride));
    if (paged && c.num_blocks > 1 && kv.stride(0) != c.block_size * c.row_stride)
      v.fail("kv_cache", kv, "must have a page stride (dim 0) of block_size token strides (" +
                             std::to_string(c.block_size * c.row_stride) + "); got " + std::to_string(kv.stride(0)));
  } else {
    c.format = kernels::KvFormat::fp8_v32;
    v.dim(kv, "kv_cache", 3, kFp8BytesPerToken, "656 bytes per token (the V3.2 FP8 layout)");
    if (c.block_size > 1 && kv.stride(1) != kFp8BytesPerToken)
      v.fail("kv_cache", kv, "must have stride 656 in dim 1 (tokens of a block are contiguous)");
    if (c.num_blocks > 1 && (kv.stride(0) % 16 != 0 || kv.stride(0) < c.block_size * kFp8BytesPerToken))
      v.fail("kv_cache", kv, "must have a block stride (dim 0) that is a multiple of 16 bytes and at least block_size * "
                             "656 (blocks must not overlap)");
  }
  return c;
}

// The workspace against its config (on `ref`'s device): the config's rules, then, with config.num_sms set, the buffers
// before the device is asked anything; returns the sizes.
template <class OverlapRule>  // a template, not std::function: its closure would be allocated on every call
DenseDecodePlanSizes checked_sizes(const Validator& v, const DenseDecodeWorkspace& ws, const TensorView& ref,
                                   const OverlapRule& overlap_rule) {
  const DenseDecodeConfig& c = ws.config;
  validate_config(v, c);
  if (c.num_sms > 0) {
    const DenseDecodePlanSizes s = sizes_for(c, c.num_sms);
    validate_workspace(v, ws, s, ref);
    overlap_rule();
  }
  require_supported(v.op(), ref.device.id);
  const DenseDecodePlanSizes s = sizes_for(c, sms_of(c, ref.device.id));
  if (c.num_sms <= 0) {
    validate_workspace(v, ws, s, ref);
    overlap_rule();
  }
  return s;
}

}  // namespace

DenseDecodePlanSizes dense_decode_plan_sizes(const DenseDecodeConfig& config, int num_sms) {
  const Validator v("mla::dense_decode_plan_sizes");
  validate_config(v, config);
  return sizes_for(config, planned_sms(v, config.num_sms, num_sms));
}

void dense_decode_plan(const DenseDecodeWorkspace& ws, const TensorView& block_table, const TensorView& cache_seqlens,
                       cudaStream_t stream) {
  const Validator v("mla::dense_decode_plan");
  const DenseDecodeConfig& c = ws.config;
  validate_config(v, c);
  cuda_tensor(v, block_table, "block_table", {DType::i32}, 2);
  v.dim(block_table, "block_table", 0, c.batch, "config.batch").dim(block_table, "block_table", 1, c.max_blocks,
                                                                     "config.max_blocks");
  v.last_dim_contiguous(block_table, "block_table").aligned(block_table, "block_table", 4);
  cuda_tensor(v, cache_seqlens, "cache_seqlens", {DType::i32}, 1);
  v.same_device(cache_seqlens, "cache_seqlens", block_table, "block_table");
  v.dim(cache_seqlens, "cache_seqlens", 0, c.batch, "config.batch").contiguous(cache_seqlens, "cache_seqlens");
  v.aligned(cache_seqlens, "cache_seqlens", 4);
  const DenseDecodePlanSizes sizes = checked_sizes(v, ws, block_table, [&] {
    // The workspace's buffers are disjoint (the plan writes four of them, the runs the other two).
    v.no_overlap({{&ws.sched_meta, "sched_meta"}, {&ws.num_splits, "num_splits"}, {&ws.indices, "indices"},
                  {&ws.token_lengths, "token_lengths"}, {&ws.lse_accum, "lse_accum"}, {&ws.o_accum, "o_accum"}},
                 {{&block_table, "block_table"}, {&cache_seqlens, "cache_seqlens"}});
  });

  kernels::DensePlanParams params;
  params.block_table = block_table.data_as<const int32_t>();
  params.block_table_stride = block_table.stride(0);
  params.cache_seqlens = cache_seqlens.data_as<const int32_t>();
  params.batch = c.batch;
  params.s_q = c.s_q;
  params.max_blocks = c.max_blocks;
  params.block_size = c.block_size;
  params.causal = c.causal && c.s_q > 1;
  params.indices = ws.indices.data_as<int32_t>();
  params.capacity = sizes.capacity;
  params.token_lengths = ws.token_lengths.data_as<int32_t>();
  params.sched = static_cast<sched::PartMeta*>(ws.sched_meta.data);
  params.num_splits = ws.num_splits.data_as<int32_t>();
  params.num_parts = sizes.num_sm_parts;
  DeviceGuard guard(block_table.device.id);
  cuda_check(kernels::launch_dense_decode_plan(params, stream), "dense MLA decode plan kernel launch");
}

void dense_decode(const DenseDecodeTensors& tensors, const DenseDecodeWorkspace& ws, const DenseDecodeOptions& options,
                  cudaStream_t stream) {
  const Validator v("mla::dense_decode");
  const auto& [q, kv_cache, attn_sink, out, lse] = tensors;
  if (options.sm_scale) v.positive(*options.sm_scale, "sm_scale");
  cuda_tensor(v, q, "q", {DType::bf16, DType::f16}, 4);
  v.last_dim_contiguous(q, "q").dim(q, "q", 3, kDqk, "d_qk 576 (512 latent + 64 RoPE)");
  const int64_t b = q.size(0), s_q = q.size(1), h_q = q.size(2);
  if (b < 1) v.fail("q", q, "must have batch (dim 0) >= 1");
  if (s_q < 1 || s_q > 65535) v.fail("q", q, "must have s_q (dim 1) in [1, 65535]");
  if (h_q < 1 || h_q > kMaxHeads) v.fail("q", q, "must have h_q (dim 2) in [1, 1024]");
  vector_aligned(v, q, "q");
  const CacheLayout cache = validate_cache(v, kv_cache, q);
  cuda_tensor(v, out, "out", {q.dtype}, 4);  // q's dtype
  v.same_device(out, "out", q, "q").shape(out, "out", {b, s_q, h_q, kDv}).last_dim_contiguous(out, "out");
  v.aligned(out, "out", 2);
  cuda_tensor(v, lse, "lse", {DType::f32}, 3);
  v.same_device(lse, "lse", q, "q").shape(lse, "lse", {b, s_q, h_q}).aligned(lse, "lse", 4);
  optional_vector(v, attn_sink, "attn_sink", DType::f32, h_q, q, "q.size(2)");

  const DenseDecodeConfig& c = ws.config;
  if (c.batch != b || c.s_q != s_q || c.h_q != h_q || c.block_size != cache.block_size)
    v.fail("ws", "was planned for batch " + std::to_string(c.batch) + ", s_q " + std::to_string(c.s_q) + ", h_q " +
                     std::to_string(c.h_q) + ", block_size " + std::to_string(c.block_size) + "; the tensors give batch " +
                     std::to_string(b) + ", s_q " + std::to_string(s_q) + ", h_q " + std::to_string(h_q) +
                     ", block_size " + std::to_string(cache.block_size));
  // Written: out, lse and the accumulators; read: the inputs and the plan's buffers (the workspace's buffers disjoint).
  const DenseDecodePlanSizes sizes = checked_sizes(v, ws, q, [&] {
    v.no_overlap({{&out, "out"}, {&lse, "lse"}, {&ws.lse_accum, "lse_accum"}, {&ws.o_accum, "o_accum"},
                  {&ws.sched_meta, "sched_meta"}, {&ws.num_splits, "num_splits"}, {&ws.indices, "indices"},
                  {&ws.token_lengths, "token_lengths"}},
                 {{&q, "q"}, {&kv_cache, "kv_cache"}, {attn_sink, "attn_sink"}});
  });

  // The attention reads each request's slot list through a [b, s_q, capacity] view whose tokens share it.
  TensorView indices = TensorView::contiguous(ws.indices.data, DType::i32, q.device, {b, s_q, sizes.capacity});
  indices.strides[1] = 0;
  kernels::SparseAttentionParams p = attention_params(1, b * s_q, q, indices, out, lse, attn_sink,
                                                      resolved_sm_scale(options.sm_scale, kDqk));
  p.q_stride_request = q.stride(0);
  p.indices_stride_request = sizes.capacity;
  p.out_stride_request = out.stride(0);
  p.lse_stride_request = lse.stride(0);
  if (s_q == 1) {
    p.q_stride_token = q.stride(0);
    p.indices_stride_token = sizes.capacity;
    p.out_stride_token = out.stride(0);
    p.lse_stride_token = lse.stride(0);
  }
  p.topk_length = ws.token_lengths.data_as<const int32_t>();
  p.tokens_per_length = 1;
  p.tokens_per_request = static_cast<int>(s_q);
  p.num_requests = static_cast<int>(b);
  p.kv_format = cache.format;
  p.kv = kv_cache.data;
  p.num_kv = cache.num_blocks * cache.block_size;
  p.kv_dense_tiles = cache.block_size % 64 == 0;  // every 64-slot tile is 64 consecutive rows of one block
  if (kernels::kv_is_16bit(cache.format)) {
    p.kv_row_stride = cache.row_stride;
  } else {
    p.block_size = cache.block_size;
    p.kv_block_stride_bytes = kv_cache.stride(0);
    p.kv_slot_stride_bytes = kFp8BytesPerToken;
  }
  p.sched = ws.sched_meta.data;
  p.num_splits = ws.num_splits.data_as<const int32_t>();
  p.num_parts = sizes.num_sm_parts;
  p.o_accum = ws.o_accum.data_as<uint16_t>();  // bf16 partial rows in f32-typed storage
  p.lse_accum = ws.lse_accum.data_as<float>();
  p.accum_rows = sizes.lse_accum_elems / h_q;
  p.split_group_heads = 64;

  DecodePlanSizes split;
  split.split = true;
  split.num_sm_parts = sizes.num_sm_parts;
  split.split_group_heads = 64;
  launch_decode(p, split, q.device.id, stream);
}

DenseDecodePlan DenseDecodePlan::create(const DenseDecodeConfig& config, int device_id) {
  const Validator v("mla::DenseDecodePlan::create");
  validate_config(v, config);
  require_supported("mla::DenseDecodePlan::create", device_id);  // before anything is allocated on it
  DenseDecodePlan plan;
  plan.device_ = device_id;
  plan.ws_.config = config;
  if (plan.ws_.config.num_sms == 0) plan.ws_.config.num_sms = kernel_support(device_id).sm_count;
  plan.sizes_ = dense_decode_plan_sizes(plan.ws_.config, plan.ws_.config.num_sms);
  const DenseDecodePlanSizes& s = plan.sizes_;
  const Device dev = Device::cuda(device_id);
  auto buffer = [&](DeviceBuffer& buf, TensorView& view, DType dtype, int64_t elems, std::initializer_list<int64_t> shape) {
    buf = DeviceBuffer(static_cast<size_t>(elems) * 4, device_id);
    view = TensorView::contiguous(buf.get(), dtype, dev, shape);
  };
  buffer(plan.sched_meta_, plan.ws_.sched_meta, DType::i32, s.sched_meta_elems, {s.num_sm_parts, sched::kMetaInts});
  buffer(plan.num_splits_, plan.ws_.num_splits, DType::i32, s.num_splits_elems, {s.num_splits_elems});
  buffer(plan.lse_accum_, plan.ws_.lse_accum, DType::f32, s.lse_accum_elems, {s.lse_accum_elems});
  buffer(plan.o_accum_, plan.ws_.o_accum, DType::f32, s.o_accum_elems, {s.o_accum_elems});
  buffer(plan.indices_, plan.ws_.indices, DType::i32, s.indices_elems, {s.indices_elems});
  buffer(plan.token_lengths_, plan.ws_.token_lengths, DType::i32, s.token_lengths_elems, {s.token_lengths_elems});
  return plan;
}

void DenseDecodePlan::plan(const TensorView& block_table, const TensorView& cache_seqlens, cudaStream_t stream) const {
  require_plan_device("mla::DenseDecodePlan::plan", block_table, "block_table", device_);
  dense_decode_plan(ws_, block_table, cache_seqlens, stream);
}

void DenseDecodePlan::run(const DenseDecodeTensors& tensors, const DenseDecodeOptions& options,
                          cudaStream_t stream) const {
  require_plan_device("mla::DenseDecodePlan::run", tensors.q, "q", device_);
  dense_decode(tensors, ws_, options, stream);
}

}  // namespace flashcpp::mla
