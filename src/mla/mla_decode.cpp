// Sparse MLA decode, host side (include/flashcpp/mla.hpp): validation, the split-KV plan (its sizes rule and the
// schedule kernel), the launches (attention, then the combine) and the DecodePlan convenience layer.
#include <climits>
#include <string>
#include <tuple>
#include <utility>
#include "core/check.hpp"
#include "core/env.hpp"
#include "flashcpp/mla.hpp"
#include "mla/decode_schedule.hpp"
#include "mla/fp8_v32.hpp"
#include "mla/fp8_v4.hpp"
#include "mla/mla_host.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla {
using namespace detail;

// ---------------------------------------------------------------------------------------------------
// Decode

namespace {

void validate_config(const Validator& v, const DecodeConfig& c) {
  if (c.batch < 1) v.fail("batch", "must be >= 1; got " + std::to_string(c.batch));
  if (c.s_q < 1 || c.s_q > 65535) v.fail("s_q", "must be in [1, 65535]; got " + std::to_string(c.s_q));
  if (c.h_q < 1 || c.h_q > kMaxHeads) v.fail("h_q", "must be in [1, 1024]; got " + std::to_string(c.h_q));
  if (c.d_qk != fp8::kDims && c.d_qk != fp8_v4::kDims)
    v.fail("d_qk", "must be 576 (the V3.2 FP8 cache) or 512 (the V4 FP8 cache); got " + std::to_string(c.d_qk));
  validate_topk(v, c.topk, "topk");
  if (c.extra_topk != 0) {
    if (c.d_qk != fp8_v4::kDims)
      v.fail("extra_topk", "must be 0 unless d_qk is 512 (only the V4 cache has an extra pool); got " +
                               std::to_string(c.extra_topk));
    validate_topk(v, c.extra_topk, "extra_topk");
    if (int64_t{c.topk} + c.extra_topk > INT32_MAX) v.fail("extra_topk", "must keep topk + extra_topk <= 2^31 - 1");
  }
  if (c.num_sms < 0 || c.num_sms > kMaxSms)
    v.fail("num_sms", "must be in [0, " + std::to_string(kMaxSms) + "] (0: the device's SM count); got " +
                          std::to_string(c.num_sms));
}

// FLASHCPP_MLA_TAIL_SPLIT=off: never split only a short last wave (for benchmarks).
bool tail_split_enabled() {
  static const bool on = env::choice("FLASHCPP_MLA_TAIL_SPLIT").value_or("auto") != "off";
  return on;
}

// FLASHCPP_MLA_SPLIT=auto|always|off: plan split-KV by the rule below, for every shape that has more than one part,
// or never (for benchmarks).
enum class SplitMode { automatic, always, off };
SplitMode split_mode() {
  static const SplitMode mode = [] {
    const std::string v = env::choice("FLASHCPP_MLA_SPLIT").value_or("auto");
    return v == "always" ? SplitMode::always : (v == "off" ? SplitMode::off : SplitMode::automatic);
  }();
  return mode;
}

// Whether the unsplit grid of V4 pages with short tokens (no lengths) wastes a short last round enough that
// splitting the whole batch pays: at most three rounds, the last at most a quarter full. `wave`: tokens a round
// holds. H200, FlashMLA's suite, 2026-12-01 (split with the 2026-12-01 combine): h_q 128 b 74 (three rounds of 66
// clusters, 16 tokens in the last) 153.0 -> 144.8 us; b 148 (five rounds, the last half full) 253.2 -> 266.9.
bool v4_short_last_round(int64_t tokens, int64_t wave) {
  const int64_t rounds = (tokens + wave - 1) / wave;
  const int64_t last = tokens - (rounds - 1) * wave;
  return rounds >= 2 && rounds <= 3 && 4 * last <= wave;
}

DecodePlanSizes sizes_for(const DecodeConfig& c, int num_sms) {
  DecodePlanSizes s;
  if (split_mode() == SplitMode::off) return s;
  const kernels::KvFormat format = c.d_qk == fp8_v4::kDims ? kernels::KvFormat::fp8_v4 : kernels::KvFormat::fp8_v32;
  int split_group_heads = kernels::split_decode_group_heads(format, c.h_q);
  const int64_t tokens = static_cast<int64_t>(c.batch) * c.s_q;
  const int64_t groups = (c.h_q + 63) / 64;  // CTAs of 64 heads per token (a 2-CTA cluster for 65..128)
  const int64_t wave = std::max<int64_t>(num_sms / groups, 1);  // tokens one round of the unsplit grid holds
  auto parts_for = [&](int group_heads) {
    return std::max<int64_t>(num_sms / (c.s_q * ((c.h_q + group_heads - 1) / group_heads)), 1);
  };
  // The unsplit grid, as the split rule below counts it: a CTA per 64 heads of a token, or per 32 heads (two CTAs
  // per token) where split work runs as the 32-head cluster. Without a schedule those heads run as the cluster where
  // all of them fit at once and else one CTA per token (unsplit_half_heads_cluster), which never splits: the split
  // ends before the cluster needs a second round.
  const bool half_heads = split_group_heads < 64;
  const int64_t ctas = tokens * ((c.h_q + split_group_heads - 1) / split_group_heads);
  int64_t parts = parts_for(split_group_heads);
  // Split only while the unsplit grid would leave about a third of the SMs idle. Measured on the H200
  // (132 SMs, topk 2048, Hopper kernel): at 64 CTAs splitting wins (172 vs 200 us), at 128 it loses
  // (255 vs 201 us); the two cross near 85 CTAs. The 32-head cluster (V4 at its production shapes: 10 tiles per
  // token) only while it would leave two thirds idle: b 8 splits in 25.8 us, b 16 in 40.0, while b 22 runs
  // unsplit in one round in 32.6 (H200, 2026-12-01).
  if (parts <= 1) return s;
  int64_t split_requests = c.batch;
  if (split_mode() == SplitMode::automatic && 3 * ctas >= (half_heads ? 1 : 2) * int64_t{num_sms}) {
    // Unsplit. The wgmma kernel (h_q <= 128) runs a token as one CTA per 64 heads (a 2-CTA cluster for 65..128),
    // one CTA per SM, so a wave holds num_sms / groups tokens.
    constexpr int kTailSplitMinSlots = 2048;
    const bool long_tokens = int64_t{c.topk} + c.extra_topk >= kTailSplitMinSlots;
    if (format == kernels::KvFormat::fp8_v4 && c.h_q <= 128 && !long_tokens && v4_short_last_round(tokens, wave)) {
      // V4 pages: the whole batch split, in CTAs of 64 heads (FlashMLA's split). A run given topk_length or
      // extra_topk_length runs unsplit instead: the split schedule counts every tile, the unsplit grid skips those
      // past each pool's length.
      split_group_heads = 64;
      parts = parts_for(64);
      s.unsplit_with_lengths = true;
    } else {
      // When the last wave is at most two thirds full, the requests of the full waves run unsplit and only the
      // rest are split over all SMs; the split part costs about its share of the work plus a request's start and
      // the combine, which pays where a token's work is long: H200, FlashMLA's suite, 2026-12-01: V3.2 (2048
      // slots) b 74 266.3 -> 242.5 us, topk 16384 b 148 2407 -> 2081 (h_q 64) and 3067 -> 2912 (h_q 128); V4 at
      // 640..1152 slots 2-14% slower, so not there.
      const int64_t waves = (tokens + wave - 1) / wave;
      const int64_t last = tokens - (waves - 1) * wave;
      const int64_t head = (waves - 1) * wave / c.s_q;
      if (!tail_split_enabled() || c.h_q > 128 || waves < 2 || 3 * last > 2 * wave || head < 1 || head >= c.batch)
        return s;
      // Short tokens keep the one grid: there the hardware starts the last wave's CTAs as the first wave's finish.
      // (Running those requests as a second grid of 32-head clusters after the first measured slower on the H200,
      // 2026-12-01: V4 h_q 64 b 74 / 148 88.8 / 128.9 -> 99.9 / 142.2 us, and with extra_topk_length 76.0 /
      // 120.3 -> 138.5 / 169.0.)
      if (!long_tokens) return s;
      s.head_requests = static_cast<int>(head);
      split_requests = c.batch - head;
    }
  }
  s.split = true;
  s.split_group_heads = split_group_heads;
  s.num_sm_parts = static_cast<int>(parts);
  s.sched_meta_elems = parts * sched::kMetaInts;
  s.num_splits_elems = split_requests + 1;
  s.lse_accum_elems = (split_requests + parts) * c.s_q * c.h_q;
  s.o_accum_elems = s.lse_accum_elems * kDv / 2;  // f32 elements, each two bf16 of a partial row
  return s;
}

// Validates the plan buffers against `sizes` (split plans only).
void validate_workspace(const Validator& v, const DecodeWorkspace& ws, const DecodePlanSizes& sizes,
                        bool with_accumulators = true) {
  if (!sizes.split) return;
  cuda_tensor(v, ws.sched_meta, "sched_meta", {DType::i32}, 2);
  v.shape(ws.sched_meta, "sched_meta", {sizes.num_sm_parts, sched::kMetaInts}).contiguous(ws.sched_meta, "sched_meta");
  v.aligned(ws.sched_meta, "sched_meta", 16);
  cuda_tensor(v, ws.num_splits, "num_splits", {DType::i32}, 1);
  v.shape(ws.num_splits, "num_splits", {sizes.num_splits_elems}).contiguous(ws.num_splits, "num_splits");
  v.same_device(ws.num_splits, "num_splits", ws.sched_meta, "sched_meta").aligned(ws.num_splits, "num_splits", 4);
  if (!with_accumulators) return;
  for (const auto& [t, name, elems] : {std::tuple{&ws.lse_accum, "lse_accum", sizes.lse_accum_elems},
                                       std::tuple{&ws.o_accum, "o_accum", sizes.o_accum_elems}}) {
    v.defined(*t, name).dtype(*t, name, {DType::f32}).on_cuda(*t, name).contiguous(*t, name).aligned(*t, name, 16);
    v.same_device(*t, name, ws.sched_meta, "sched_meta");
    if (t->numel() < elems) v.fail(name, *t, "must hold at least " + std::to_string(elems) + " elements");
  }
}

}  // namespace

DecodePlanSizes decode_plan_sizes(const DecodeConfig& config, int num_sms) {
  const Validator v("mla::decode_plan");
  validate_config(v, config);
  return sizes_for(config, planned_sms(v, config.num_sms, num_sms));
}

void decode_plan(const DecodeWorkspace& ws, int device_id, cudaStream_t stream, const DecodePlanLengths& lengths) {
  const Validator v("mla::decode_plan");
  validate_config(v, ws.config);
  const DecodeConfig& c = ws.config;
  // Lengths: i32 [batch] vectors on the plan's device; the extra pool's only for a V4 plan that has one.
  for (const auto& [t, name] : {std::pair{lengths.topk_length, "topk_length"},
                                std::pair{lengths.extra_topk_length, "extra_topk_length"}}) {
    if (t == nullptr) continue;
    v.defined(*t, name).dtype(*t, name, {DType::i32}).rank(*t, name, 1).dim(*t, name, 0, c.batch, "config.batch");
    v.on_cuda(*t, name).contiguous(*t, name).aligned(*t, name, 4);
    if (t->device.id != device_id) v.fail(name, *t, "must be on device " + std::to_string(device_id) + " (device_id)");
  }
  if (lengths.extra_topk_length != nullptr && (c.d_qk != fp8_v4::kDims || c.extra_topk == 0))
    v.fail("extra_topk_length", "needs a V4 plan with an extra pool (d_qk 512, extra_topk > 0); the config has d_qk " +
                                    std::to_string(c.d_qk) + ", extra_topk " + std::to_string(c.extra_topk));
  // The plan writes sched_meta and num_splits; the lengths it reads share no byte with them.
  for (const auto& [buffer, name] : {std::pair{&ws.sched_meta, "sched_meta"}, std::pair{&ws.num_splits, "num_splits"}})
    for (const auto& [t, length_name] : {std::pair{lengths.topk_length, "topk_length"},
                                         std::pair{lengths.extra_topk_length, "extra_topk_length"}})
      if (buffer->data != nullptr && t != nullptr) v.disjoint(*buffer, name, *t, length_name);
  const int n = c.num_sms > 0 ? c.num_sms : kernel_support(device_id).sm_count;
  const DecodePlanSizes sizes = sizes_for(c, n);
  validate_workspace(v, ws, sizes, /*with_accumulators=*/false);  // the plan writes only the schedule
  if (sizes.split) v.disjoint(ws.num_splits, "num_splits", ws.sched_meta, "sched_meta");
  if (sizes.split && ws.sched_meta.device.id != device_id)
    v.fail("sched_meta", ws.sched_meta, "must be on device " + std::to_string(device_id) + " (device_id)");
  require_supported("mla::decode_plan", device_id);
  if (!sizes.split) return;
  DeviceGuard guard(device_id);
  const int requests = c.batch - sizes.head_requests;
  auto* sched_meta = ws.sched_meta.data;
  auto* num_splits = ws.num_splits.data_as<int32_t>();
  if ((lengths.topk_length != nullptr || lengths.extra_topk_length != nullptr) &&
      requests <= kernels::kScheduleLengthsMaxRequests) {
    // The split requests (past the head ones) by the tiles their lengths leave.
    kernels::ScheduleLengths l;
    l.topk_length = lengths.topk_length ? lengths.topk_length->data_as<const int32_t>() : nullptr;
    l.extra_topk_length = lengths.extra_topk_length ? lengths.extra_topk_length->data_as<const int32_t>() : nullptr;
    l.main_topk = c.topk;
    l.extra_topk = c.extra_topk;
    l.first_request = sizes.head_requests;
    kernels::launch_decode_schedule_by_lengths(sched_meta, num_splits, requests, l, sizes.num_sm_parts, stream);
  } else {
    // Each request's whole slot list: the main pool's slots, then the extra pool's.
    kernels::launch_decode_schedule(sched_meta, num_splits, requests, c.topk + c.extra_topk, sizes.num_sm_parts,
                                    stream);
  }
  check_launch("decode schedule kernel launch");
}

namespace {

// Decode indices i32 [b, s_q, topk] matching q [b, s_q, ...], topk a positive multiple of 64.
void validate_decode_indices(const Validator& v, const TensorView& indices, const char* arg, const TensorView& q) {
  const int64_t b = q.size(0), s_q = q.size(1);
  cuda_tensor(v, indices, arg, {DType::i32}, 3);
  v.same_device(indices, arg, q, "q").dim(indices, arg, 0, b, "q.size(0)");
  v.dim(indices, arg, 1, s_q, "q.size(1)").last_dim_contiguous(indices, arg).aligned(indices, arg, 4);
  validate_topk(v, indices.size(2), arg);
}

// What V3.2 and V4 decode share: the query, indices, outputs and workspace checks, and the launch.
struct DecodeProblem {
  int64_t b = 0, s_q = 0, h_q = 0, topk = 0;
  DecodePlanSizes sizes;
};

// sm_scale unset or > 0, d_v 512; q bf16 [b, s_q, h_q, d_qk], indices i32 [b, s_q, topk], out bf16 [b, s_q, h_q, 512],
// lse f32 [b, s_q, h_q].
DecodeProblem validate_decode_tensors(const Validator& v, const std::optional<double>& sm_scale, int d_v, const TensorView& q, int d_qk,
                                      const char* cache_kind, const TensorView& indices, const TensorView& out,
                                      const TensorView& lse) {
  if (sm_scale) v.positive(*sm_scale, "sm_scale");
  if (d_v != kDv) v.fail("d_v", "must be 512; got " + std::to_string(d_v));
  DecodeProblem d;
  cuda_tensor(v, q, "q", {DType::bf16}, 4);
  v.last_dim_contiguous(q, "q");
  d.b = q.size(0), d.s_q = q.size(1), d.h_q = q.size(2);
  if (q.size(3) != d_qk)
    v.fail("q", q, "must have d_qk (dim 3) " + std::to_string(d_qk) + " (the " + cache_kind + " FP8 cache)");
  if (d.b < 1) v.fail("q", q, "must have batch (dim 0) >= 1");
  if (d.s_q < 1 || d.s_q > 65535) v.fail("q", q, "must have s_q (dim 1) in [1, 65535]");
  if (d.h_q < 1 || d.h_q > kMaxHeads) v.fail("q", q, "must have h_q (dim 2) in [1, 1024]");
  if (d.b * d.s_q > INT32_MAX) v.fail("q", q, "must have batch * s_q <= 2^31 - 1");
  vector_aligned(v, q, "q");
  validate_decode_indices(v, indices, "indices", q);
  d.topk = indices.size(2);
  cuda_tensor(v, out, "out", {DType::bf16}, 4);
  v.same_device(out, "out", q, "q").shape(out, "out", {d.b, d.s_q, d.h_q, kDv}).last_dim_contiguous(out, "out");
  v.aligned(out, "out", 2);
  cuda_tensor(v, lse, "lse", {DType::f32}, 3);
  v.same_device(lse, "lse", q, "q").shape(lse, "lse", {d.b, d.s_q, d.h_q}).aligned(lse, "lse", 4);
  return d;
}

// attn_sink f32 [h_q] and topk_length i32 [b], each optional, on q's device.
void validate_decode_vectors(const Validator& v, OptionalTensor attn_sink, OptionalTensor topk_length,
                             const DecodeProblem& d, const TensorView& q) {
  optional_vector(v, attn_sink, "attn_sink", DType::f32, d.h_q, q, "q.size(2)");
  optional_vector(v, topk_length, "topk_length", DType::i32, d.b, q, "q.size(0) (one length per request)");
}

// The workspace must have been planned for exactly this shape; returns its sizes (after the device gate).
// Also the overlap rule: out and lse share no byte with `inputs` or each other; split plans add the
// accumulators (written) and the schedule (read).
DecodePlanSizes validate_planned(const Validator& v, const DecodeWorkspace& ws, const DecodeProblem& d, int d_qk,
                                 int64_t extra_topk, const TensorView& q, const TensorView& out, const TensorView& lse,
                                 std::initializer_list<Validator::Named> inputs) {
  const DecodeConfig& c = ws.config;
  if (c.batch != d.b || c.s_q != d.s_q || c.h_q != d.h_q || c.d_qk != d_qk || c.topk != d.topk ||
      c.extra_topk != extra_topk)
    v.fail("ws", "was planned for batch " + std::to_string(c.batch) + ", s_q " + std::to_string(c.s_q) + ", h_q " +
                     std::to_string(c.h_q) + ", d_qk " + std::to_string(c.d_qk) + ", topk " + std::to_string(c.topk) +
                     ", extra_topk " + std::to_string(c.extra_topk) + "; the tensors give batch " +
                     std::to_string(d.b) + ", s_q " + std::to_string(d.s_q) + ", h_q " + std::to_string(d.h_q) +
                     ", d_qk " + std::to_string(d_qk) + ", topk " + std::to_string(d.topk) + ", extra_topk " +
                     std::to_string(extra_topk));
  validate_config(v, c);
  v.no_overlap({{&out, "out"}, {&lse, "lse"}}, inputs);
  auto check_split_overlap = [&](const DecodePlanSizes& sz) {
    if (!sz.split) return;
    v.no_overlap({{&ws.lse_accum, "lse_accum"}, {&ws.o_accum, "o_accum"}}, inputs);
    v.no_overlap({{&ws.lse_accum, "lse_accum"}, {&ws.o_accum, "o_accum"}},
                 {{&out, "out"}, {&lse, "lse"}, {&ws.sched_meta, "sched_meta"}, {&ws.num_splits, "num_splits"}});
    v.no_overlap({{&out, "out"}, {&lse, "lse"}}, {{&ws.sched_meta, "sched_meta"}, {&ws.num_splits, "num_splits"}});
  };
  DecodePlanSizes sizes;
  if (c.num_sms > 0) {
    sizes = sizes_for(c, c.num_sms);
    validate_workspace(v, ws, sizes);
    check_split_overlap(sizes);
  }
  require_supported(v.op(), q.device.id);
  if (c.num_sms <= 0) {
    sizes = sizes_for(c, kernel_support(q.device.id).sm_count);
    validate_workspace(v, ws, sizes);
    check_split_overlap(sizes);
  }
  if (sizes.split) v.same_device(ws.sched_meta, "sched_meta", q, "q");
  return sizes;
}

// The parts of the kernel parameters both layouts fill the same way.
kernels::SparseAttentionParams decode_params(const DecodeProblem& d, const TensorView& q, const TensorView& indices,
                                             const TensorView& out, const TensorView& lse, OptionalTensor attn_sink,
                                             double sm_scale, const DecodeWorkspace& ws) {
  kernels::SparseAttentionParams p = attention_params(1, d.b * d.s_q, q, indices, out, lse, attn_sink, sm_scale);
  p.tokens_per_length = static_cast<int>(d.s_q);
  // Tokens are (request, position): every per-token tensor keeps both strides, so any view FlashMLA takes
  // (its padded q and indices, its [batch, h_q, s_q] lse seen as [batch, s_q, h_q]) runs without a copy. With
  // s_q == 1 a token is a request and its stride is dim 0's (SparseAttentionParams::token_offset).
  p.q_stride_request = q.stride(0);
  p.indices_stride_request = indices.stride(0);
  p.out_stride_request = out.stride(0);
  p.lse_stride_request = lse.stride(0);
  if (d.s_q == 1) {
    p.q_stride_token = q.stride(0);
    p.indices_stride_token = indices.stride(0);
    p.out_stride_token = out.stride(0);
    p.lse_stride_token = lse.stride(0);
  }
  p.tokens_per_request = static_cast<int>(d.s_q);
  p.num_requests = static_cast<int>(d.b);
  if (d.sizes.split) {
    p.sched = ws.sched_meta.data;
    p.num_splits = ws.num_splits.data_as<const int32_t>();
    p.num_parts = d.sizes.num_sm_parts;
    p.o_accum = ws.o_accum.data_as<uint16_t>();  // bf16 partial rows in f32-typed storage
    p.lse_accum = ws.lse_accum.data_as<float>();
    p.accum_rows = d.sizes.lse_accum_elems / d.h_q;
    p.split_group_heads = d.sizes.split_group_heads;
  }
  return p;
}

// `p` as an unsplit grid: no schedule, no accumulators.
kernels::SparseAttentionParams without_split(kernels::SparseAttentionParams p) {
  p.sched = nullptr;
  p.num_splits = nullptr;
  p.o_accum = nullptr;
  p.lse_accum = nullptr;
  p.num_parts = 0;
  p.accum_rows = 0;
  p.split_group_heads = 0;
  return p;
}

}  // namespace

namespace detail {
// Launches the attention (and, for split requests, the combine). A plan with head requests runs them first as
// an unsplit grid, then the split requests through the schedule, their tensors offset past the head.
void launch_decode(const kernels::SparseAttentionParams& p, const DecodePlanSizes& sizes, int device_id,
                   cudaStream_t stream) {
  DeviceGuard guard(device_id);
  if (!sizes.split) {
    run_attention(p, stream, device_id);
    return;
  }
  if (sizes.unsplit_with_lengths && (p.topk_length != nullptr || p.extra_topk_length != nullptr)) {
    run_attention(without_split(p), stream, device_id);
    return;
  }
  kernels::SparseAttentionParams split = p;
  if (sizes.head_requests > 0) {
    const int64_t head_tokens = static_cast<int64_t>(sizes.head_requests) * p.tokens_per_request;
    kernels::SparseAttentionParams head = without_split(p);
    head.num_tokens = static_cast<int>(head_tokens);
    head.num_requests = sizes.head_requests;
    run_attention(head, stream, device_id);
    auto past_head = [&](auto* ptr, int64_t stride_token, int64_t stride_request) {
      return ptr == nullptr ? ptr : ptr + p.token_offset(head_tokens, stride_token, stride_request);
    };
    split.q = past_head(static_cast<const uint16_t*>(p.q), p.q_stride_token, p.q_stride_request);
    split.indices = past_head(p.indices, p.indices_stride_token, p.indices_stride_request);
    split.extra_indices = past_head(p.extra_indices, p.extra_indices_stride_token, p.extra_indices_stride_request);
    split.out = past_head(static_cast<uint16_t*>(p.out), p.out_stride_token, p.out_stride_request);
    split.lse = past_head(p.lse, p.lse_stride_token, p.lse_stride_request);
    if (p.topk_length != nullptr) split.topk_length = p.topk_length + sizes.head_requests;
    if (p.extra_topk_length != nullptr) split.extra_topk_length = p.extra_topk_length + sizes.head_requests;
    split.num_tokens = static_cast<int>(p.num_tokens - head_tokens);
    split.num_requests = p.num_requests - sizes.head_requests;
  }
  run_attention(split, stream, device_id);
  cuda_check(kernels::launch_sparse_attention_combine(split, stream, kernel_support(device_id).hopper),
             "sparse MLA combine kernel launch");
}

}  // namespace detail

namespace {

// A V4 page pool on q's device (v4_page_rules), 16-byte aligned, at most 2^31 - 1 tokens (int32 indices).
void validate_v4_cache(const Validator& v, const TensorView& t, const char* arg, const TensorView& q) {
  v4_page_rules(v, t, arg);
  v.on_cuda(t, arg).same_device(t, arg, q, "q");
  if (t.size(1) < 1) v.fail(arg, t, "must have block_size (dim 1) >= 1");
  if (t.size(0) * t.size(1) > INT32_MAX) v.fail(arg, t, "must hold at most 2^31 - 1 tokens (int32 indices)");
  v.aligned(t, arg, 16);
}

}  // namespace

void sparse_decode(const SparseDecodeTensors& tensors, const DecodeWorkspace& ws, const SparseDecodeOptions& options,
                   cudaStream_t stream) {
  const Validator v("mla::sparse_decode");
  const auto& [q, kv_cache, indices, topk_length, attn_sink, out, lse, extra_kv_cache, extra_indices,
               extra_topk_length] = tensors;
  // The V3.2 cache has no extra pool.
  for (const auto& [t, name] : {std::pair{extra_kv_cache, "extra_kv_cache"}, std::pair{extra_indices, "extra_indices"},
                                std::pair{extra_topk_length, "extra_topk_length"}})
    if (t != nullptr) v.fail(name, "must be nullptr (the V3.2 cache has no extra pool; see sparse_decode_v4)");
  DecodeProblem d = validate_decode_tensors(v, options.sm_scale, options.d_v, q, fp8::kDims, "V3.2", indices, out, lse);

  v.defined(kv_cache, "kv_cache").dtype(kv_cache, "kv_cache", {DType::u8, DType::i8, DType::e4m3});
  v.rank(kv_cache, "kv_cache", 4).on_cuda(kv_cache, "kv_cache").same_device(kv_cache, "kv_cache", q, "q");
  v.no_negative_strides(kv_cache, "kv_cache").dim(kv_cache, "kv_cache", 2, 1, "h_kv");
  v.dim(kv_cache, "kv_cache", 3, kFp8BytesPerToken, "bytes per token").last_dim_contiguous(kv_cache, "kv_cache");
  const int64_t num_blocks = kv_cache.size(0), block_size = kv_cache.size(1);
  if (block_size < 1) v.fail("kv_cache", kv_cache, "must have block_size (dim 1) >= 1");
  if (block_size > 1 && kv_cache.stride(1) != kFp8BytesPerToken)
    v.fail("kv_cache", kv_cache, "must have stride 656 in dim 1 (tokens of a block are contiguous)");
  if (num_blocks > 1 && kv_cache.stride(0) % 16 != 0)
    v.fail("kv_cache", kv_cache, "must have a block stride (dim 0) that is a multiple of 16 bytes");
  v.aligned(kv_cache, "kv_cache", 16);

  validate_decode_vectors(v, attn_sink, topk_length, d, q);
  d.sizes = validate_planned(v, ws, d, fp8::kDims, 0, q, out, lse,
                             {{&q, "q"}, {&kv_cache, "kv_cache"}, {&indices, "indices"}, {attn_sink, "attn_sink"},
                              {topk_length, "topk_length"}});

  kernels::SparseAttentionParams p = decode_params(d, q, indices, out, lse, attn_sink,
                                                  resolved_sm_scale(options.sm_scale, q.size(3)), ws);
  p.topk_length = topk_length ? topk_length->data_as<const int32_t>() : nullptr;
  p.kv_format = kernels::KvFormat::fp8_v32;
  p.kv = kv_cache.data;
  p.num_kv = num_blocks * block_size;
  p.block_size = block_size;
  p.kv_block_stride_bytes = kv_cache.stride(0);
  p.kv_slot_stride_bytes = kFp8BytesPerToken;
  launch_decode(p, d.sizes, q.device.id, stream);
}

void sparse_decode_v4(const SparseDecodeTensors& tensors, const DecodeWorkspace& ws,
                      const SparseDecodeOptions& options, cudaStream_t stream) {
  const Validator v("mla::sparse_decode_v4");
  const auto& [q, kv_cache, indices, topk_length, attn_sink, out, lse, extra_kv_cache, extra_indices,
               extra_topk_length] = tensors;
  DecodeProblem d = validate_decode_tensors(v, options.sm_scale, options.d_v, q, fp8_v4::kDims, "V4", indices, out, lse);
  validate_v4_cache(v, kv_cache, "kv_cache", q);
  validate_decode_vectors(v, attn_sink, topk_length, d, q);
  const bool extra = extra_kv_cache != nullptr;
  if (extra != (extra_indices != nullptr))
    v.fail(extra ? "extra_indices" : "extra_kv_cache", "must be given together with " +
                                                           std::string(extra ? "extra_kv_cache" : "extra_indices"));
  if (!extra && extra_topk_length != nullptr)
    v.fail("extra_topk_length", "must only be given with the extra pool (extra_kv_cache, extra_indices)");
  int64_t extra_topk = 0;
  if (extra) {
    validate_v4_cache(v, *extra_kv_cache, "extra_kv_cache", q);
    validate_decode_indices(v, *extra_indices, "extra_indices", q);
    extra_topk = extra_indices->size(2);
    optional_vector(v, extra_topk_length, "extra_topk_length", DType::i32, d.b, q,
                    "q.size(0) (one length per request)");
    if (d.topk + extra_topk > INT32_MAX) v.fail("extra_indices", *extra_indices, "must have topk + extra_topk <= 2^31 - 1");
  }
  d.sizes = validate_planned(v, ws, d, fp8_v4::kDims, extra_topk, q, out, lse,
                             {{&q, "q"}, {&kv_cache, "kv_cache"}, {&indices, "indices"}, {attn_sink, "attn_sink"},
                              {topk_length, "topk_length"}, {extra_kv_cache, "extra_kv_cache"},
                              {extra_indices, "extra_indices"}, {extra_topk_length, "extra_topk_length"}});

  kernels::SparseAttentionParams p = decode_params(d, q, indices, out, lse, attn_sink,
                                                  resolved_sm_scale(options.sm_scale, q.size(3)), ws);
  p.kv_format = kernels::KvFormat::fp8_v4;
  p.topk = static_cast<int>(d.topk + extra_topk);
  p.main_topk = static_cast<int>(d.topk);
  p.topk_length = topk_length ? topk_length->data_as<const int32_t>() : nullptr;
  p.kv = kv_cache.data;
  p.num_kv = kv_cache.size(0) * kv_cache.size(1);
  p.block_size = kv_cache.size(1);
  p.kv_block_stride_bytes = kv_cache.stride(0);
  p.kv_slot_stride_bytes = kFp8V4BytesPerToken;
  if (extra) {
    const TensorView& e = *extra_kv_cache;
    p.extra_kv = e.data;
    p.extra_num_kv = e.size(0) * e.size(1);
    p.extra_block_size = e.size(1);
    p.extra_block_stride_bytes = e.stride(0);
    p.extra_indices = extra_indices->data_as<const int32_t>();
    p.extra_indices_stride_token = d.s_q == 1 ? extra_indices->stride(0) : extra_indices->stride(1);
    p.extra_indices_stride_request = extra_indices->stride(0);
    p.extra_topk_length = extra_topk_length ? extra_topk_length->data_as<const int32_t>() : nullptr;
  }
  launch_decode(p, d.sizes, q.device.id, stream);
}

DecodePlan DecodePlan::create(const DecodeConfig& config, int device_id, cudaStream_t stream,
                              const DecodePlanLengths& lengths) {
  DecodePlan plan;
  const Validator v("mla::DecodePlan::create");
  validate_config(v, config);
  // An unknown device is refused before anything is allocated on it (also when config.num_sms is set).
  require_supported("mla::DecodePlan::create", device_id);
  plan.device_ = device_id;
  plan.ws_.config = config;
  if (plan.ws_.config.num_sms == 0) plan.ws_.config.num_sms = kernel_support(device_id).sm_count;
  plan.sizes_ = decode_plan_sizes(plan.ws_.config, plan.ws_.config.num_sms);
  if (plan.sizes_.split) {
    const Device dev = Device::cuda(device_id);
    plan.sched_meta_ = DeviceBuffer(static_cast<size_t>(plan.sizes_.sched_meta_elems) * 4, device_id);
    plan.num_splits_ = DeviceBuffer(static_cast<size_t>(plan.sizes_.num_splits_elems) * 4, device_id);
    plan.lse_accum_ = DeviceBuffer(static_cast<size_t>(plan.sizes_.lse_accum_elems) * 4, device_id);
    plan.o_accum_ = DeviceBuffer(static_cast<size_t>(plan.sizes_.o_accum_elems) * 4, device_id);
    plan.ws_.sched_meta =
        TensorView::contiguous(plan.sched_meta_.get(), DType::i32, dev, {plan.sizes_.num_sm_parts, sched::kMetaInts});
    plan.ws_.num_splits = TensorView::contiguous(plan.num_splits_.get(), DType::i32, dev, {plan.sizes_.num_splits_elems});
    plan.ws_.lse_accum = TensorView::contiguous(plan.lse_accum_.get(), DType::f32, dev, {plan.sizes_.lse_accum_elems});
    plan.ws_.o_accum = TensorView::contiguous(plan.o_accum_.get(), DType::f32, dev, {plan.sizes_.o_accum_elems});
  }
  decode_plan(plan.ws_, device_id, stream, lengths);
  return plan;
}

void DecodePlan::replan(const DecodePlanLengths& lengths, cudaStream_t stream) const {
  decode_plan(ws_, device_, stream, lengths);
}

void DecodePlan::run(const SparseDecodeTensors& tensors, const SparseDecodeOptions& options,
                     cudaStream_t stream) const {
  require_plan_device("mla::DecodePlan::run", tensors.q, "q", device_);
  // The planned config says which cache: d_qk 512 is V4 (validate_config admits only 576 and 512).
  if (ws_.config.d_qk == fp8_v4::kDims) {
    sparse_decode_v4(tensors, ws_, options, stream);
  } else {
    sparse_decode(tensors, ws_, options, stream);
  }
}

}  // namespace flashcpp::mla
