// `flashcpp mla-bench`: sparse MLA prefill and FP8 decode timings on the GPU.
// Method: CUDA events around each launch (decode: around one CUDA-graph replay of plan.run, which is the
// split kernel plus the combine), warm-up launches first, the median of the timed ones reported. FLOPs
// are counted as FlashMLA does: 2 * (d_qk + d_v) per query head per topk slot, masked slots included.
// Inputs are larger than L2 (q alone is 604 MB for the prefill shape). Prints one human line and one
// machine-readable line ("MLA_BENCH {json}") per case.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <memory>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "flashcpp/bench_data.hpp"
#include "flashcpp/commands.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/mla.hpp"
#include "flashcpp/mla_suite.hpp"
#include "tools_internal.hpp"

namespace flashcpp::cli {
namespace {

struct MlaBenchOptions {
  int device = 0;
  int warmup = 3;
  int iters = 10;
  bool prefill = true, decode = true, simple = false, v4 = false;
  std::vector<int64_t> s_kv = {8192, 32768, 65536, 98304, 131072};
  std::vector<int64_t> batches = {1, 2, 64, 128};
  int64_t prefill_s_q = 4096, h_q = 128, topk = 2048, decode_s_q = 2, decode_s_kv = 32768;
  int num_sms = 0;  // DecodeConfig::num_sms: 0 = the device's (what the split-KV schedule plans for)
  std::string suite, suite_filter;  // --suite flashmla: FlashMLA's performance cases instead (cmd_mla_suite.cpp)
};

// n bf16 values uniform in [-scale, scale), made on the device; complete on return.
void upload_random(DeviceBuffer& buf, size_t n, uint32_t seed, float scale) {
  FLASHCPP_CUDA_CHECK(fill_uniform_bf16(buf.get(), n, seed, -scale, scale, nullptr));
  FLASHCPP_CUDA_CHECK(cudaDeviceSynchronize());
}

// indices [rows, topk]: distinct random rows of [lo(row), lo(row) + range) per row.
std::vector<int32_t> random_indices(int64_t rows, int64_t topk, int64_t range, const std::vector<int64_t>& lo, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> idx(static_cast<size_t>(rows * topk));
  std::vector<int32_t> perm(static_cast<size_t>(range));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < topk; ++j) {
      const int64_t k = std::uniform_int_distribution<int64_t>(j % range, range - 1)(rng);
      std::swap(perm[static_cast<size_t>(j % range)], perm[static_cast<size_t>(k)]);
      idx[static_cast<size_t>(r * topk + j)] = static_cast<int32_t>(lo[static_cast<size_t>(r)] + perm[static_cast<size_t>(j % range)]);
    }
  return idx;
}

template <class Fn>
double median_ms(int warmup, int iters, cudaStream_t stream, Fn&& launch) {
  for (int i = 0; i < warmup; ++i) launch();
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  Event start, stop;
  for (int i = 0; i < iters; ++i) {
    start.record(stream);
    launch();
    stop.record(stream);
    FLASHCPP_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    ms.push_back(stop.elapsed_ms_since(start));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median time of one CUDA-graph replay of `run` (a decode plan's run: split kernel plus combine). One eager
// call first does the one-time setup outside the capture.
template <class Run>
double graph_replay_ms(const MlaBenchOptions& o, cudaStream_t stream, Run&& run) {
  run();
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FLASHCPP_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  run();
  FLASHCPP_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  if (inst != cudaSuccess) (void)cudaGraphDestroy(graph);
  cuda_check(inst, "cudaGraphInstantiate");
  const double ms = median_ms(o.warmup, o.iters, stream, [&] { FLASHCPP_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  return ms;
}

// The launch plan that runs `p` on `device` (kernel, wgmma variant, heads per CTA): the one chooser mla's dispatch
// asks (mla::kernels::choose). The benchmarks fill `p` as the library fills it for their contiguous
// tensors (selector_params and the lines after it), so the label names the kernel that was timed.
const char* selected_kernel(const mla::kernels::SparseAttentionParams& p, int device) {
  return mla::kernels::plan_label(mla::kernels::choose(p, mla::kernels::kernel_support(device)));
}

// The selector's inputs common to prefill (q [s_q, h_q, d_qk]) and decode (q [b, s_q, h_q, d_qk]): sizes,
// pointers and token / head strides of the contiguous q, indices and out.
mla::kernels::SparseAttentionParams selector_params(const TensorView& q, const TensorView& indices, const TensorView& out) {
  mla::kernels::SparseAttentionParams p;
  const int r = q.rank;
  p.q = q.data;
  p.q_stride_token = q.stride(r - 3);
  p.q_stride_head = q.stride(r - 2);
  p.num_tokens = static_cast<int>(q.numel() / (q.size(r - 2) * q.size(r - 1)));
  p.h_q = static_cast<int>(q.size(r - 2));
  p.d_qk = static_cast<int>(q.size(r - 1));
  p.topk = static_cast<int>(indices.size(-1));
  p.indices = indices.data_as<const int32_t>();
  p.out = out.data;
  p.out_stride_token = out.stride(r - 3);
  p.out_stride_head = out.stride(r - 2);
  return p;
}

}  // namespace

void add_decode_selector_params(mla::kernels::SparseAttentionParams& p, const TensorView& q, const mla::DecodePlan& plan) {
  p.tokens_per_length = p.tokens_per_request = static_cast<int>(q.size(1));
  p.num_requests = static_cast<int>(q.size(0));
  if (!plan.sizes().split) return;
  const mla::DecodeWorkspace& ws = plan.workspace();
  p.sched = ws.sched_meta.data;
  p.num_splits = ws.num_splits.data_as<const int32_t>();
  p.num_parts = plan.sizes().num_sm_parts;
  p.o_accum = ws.o_accum.data_as<uint16_t>();  // bf16 partial rows in f32-typed storage
  p.lse_accum = ws.lse_accum.data_as<float>();
  p.accum_rows = plan.sizes().lse_accum_elems / p.h_q;
}

namespace {

void report(const char* op, const std::string& shape, double ms, double flop, const char* kernel) {
  const double tflops = flop / (ms * 1e-3) / 1e12;
  std::printf("%-8s %-52s %10.3f us %8.1f TFLOP/s  (%s)\n", op, shape.c_str(), ms * 1e3, tflops, kernel);
  std::printf("MLA_BENCH {\"op\":\"%s\",%s,\"median_us\":%.3f,\"tflops\":%.2f,\"kernel\":\"%s\"}\n", op, shape.c_str(),
              ms * 1e3, tflops, kernel);
  std::fflush(stdout);
}

void bench_prefill(const MlaBenchOptions& o, cudaStream_t stream) {
  const int64_t s_q = o.prefill_s_q, h_q = o.h_q, d_qk = 576, topk = o.topk;
  const Device dev = Device::cuda(o.device);
  DeviceBuffer q(static_cast<size_t>(s_q * h_q * d_qk * 2), o.device);
  DeviceBuffer out(static_cast<size_t>(s_q * h_q * 512 * 2), o.device), lse(static_cast<size_t>(s_q * h_q * 4), o.device),
      ml(static_cast<size_t>(s_q * h_q * 4), o.device), sink(static_cast<size_t>(h_q * 4), o.device);
  upload_random(q, static_cast<size_t>(s_q * h_q * d_qk), 1, 0.1f);
  FLASHCPP_CUDA_CHECK(cudaMemset(sink.get(), 0, static_cast<size_t>(h_q * 4)));
  const auto qv = TensorView::contiguous(q.get(), DType::bf16, dev, {s_q, h_q, d_qk});
  const auto ov = TensorView::contiguous(out.get(), DType::bf16, dev, {s_q, h_q, 512});
  const auto lv = TensorView::contiguous(lse.get(), DType::f32, dev, {s_q, h_q});
  const auto mv = TensorView::contiguous(ml.get(), DType::f32, dev, {s_q, h_q});
  const auto sv = TensorView::contiguous(sink.get(), DType::f32, dev, {h_q});
  for (int64_t s_kv : o.s_kv) {
    DeviceBuffer kv(static_cast<size_t>(s_kv * d_qk * 2), o.device), idx(static_cast<size_t>(s_q * topk * 4), o.device);
    upload_random(kv, static_cast<size_t>(s_kv * d_qk), 2, 0.1f);
    const auto hidx = random_indices(s_q, topk, s_kv, std::vector<int64_t>(static_cast<size_t>(s_q), 0), 3);
    FLASHCPP_CUDA_CHECK(cudaMemcpy(idx.get(), hidx.data(), hidx.size() * 4, cudaMemcpyHostToDevice));
    const auto kvv = TensorView::contiguous(kv.get(), DType::bf16, dev, {s_kv, 1, d_qk});
    const auto iv = TensorView::contiguous(idx.get(), DType::i32, dev, {s_q, 1, topk});
    const mla::SparsePrefillTensors tensors{
        .q = qv, .kv = kvv, .indices = iv, .attn_sink = &sv, .out = ov, .max_logits = &mv, .lse = lv};
    const mla::SparsePrefillOptions params{.sm_scale = 1.0 / std::sqrt(192.0)};
    const double ms = median_ms(o.warmup, o.iters, stream, [&] { mla::sparse_prefill(tensors, params, stream); });
    const double flop = 2.0 * static_cast<double>(s_q * h_q * topk) * (d_qk + 512);
    char shape[200];
    std::snprintf(shape, sizeof shape, "\"s_q\":%lld,\"h_q\":%lld,\"d_qk\":%lld,\"topk\":%lld,\"s_kv\":%lld",
                  (long long)s_q, (long long)h_q, (long long)d_qk, (long long)topk, (long long)s_kv);
    mla::kernels::SparseAttentionParams p = selector_params(qv, iv, ov);
    p.kv = kvv.data;
    p.num_kv = s_kv;
    p.kv_row_stride = kvv.stride(0);
    report("prefill", shape, ms, flop, selected_kernel(p, o.device));
  }
}

void bench_decode(const MlaBenchOptions& o, cudaStream_t stream) {
  const int64_t s_q = o.decode_s_q, h_q = o.h_q, topk = o.topk, s_kv = o.decode_s_kv, block = 64;
  const Device dev = Device::cuda(o.device);
  for (int64_t b : o.batches) {
    const int64_t blocks_per_req = s_kv / block, num_blocks = b * blocks_per_req;
    DeviceBuffer cache(static_cast<size_t>(num_blocks * block * 656), o.device);
    DeviceBuffer q(static_cast<size_t>(b * s_q * h_q * 576 * 2), o.device), out(static_cast<size_t>(b * s_q * h_q * 512 * 2), o.device);
    DeviceBuffer lse(static_cast<size_t>(b * s_q * h_q * 4), o.device), idx(static_cast<size_t>(b * s_q * topk * 4), o.device);
    {
      // A real quantized cache: quantize random bf16 rows on the device.
      DeviceBuffer src(static_cast<size_t>(num_blocks * block * 576 * 2), o.device);
      upload_random(src, static_cast<size_t>(num_blocks * block * 576), 4, 0.1f);
      mla::quantize_kv_cache_fp8(TensorView::contiguous(src.get(), DType::bf16, dev, {num_blocks, block, 1, 576}),
                                 TensorView::contiguous(cache.get(), DType::u8, dev, {num_blocks, block, 1, 656}), stream);
      FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    upload_random(q, static_cast<size_t>(b * s_q * h_q * 576), 5, 0.5f);
    std::vector<int64_t> lo(static_cast<size_t>(b * s_q));
    for (int64_t t = 0; t < b * s_q; ++t) lo[static_cast<size_t>(t)] = (t / s_q) * s_kv;  // each request its own blocks
    const auto hidx = random_indices(b * s_q, topk, s_kv, lo, 6);
    FLASHCPP_CUDA_CHECK(cudaMemcpy(idx.get(), hidx.data(), hidx.size() * 4, cudaMemcpyHostToDevice));
    const auto qv = TensorView::contiguous(q.get(), DType::bf16, dev, {b, s_q, h_q, 576});
    const auto cv = TensorView::contiguous(cache.get(), DType::u8, dev, {num_blocks, block, 1, 656});
    const auto iv = TensorView::contiguous(idx.get(), DType::i32, dev, {b, s_q, topk});
    const auto ov = TensorView::contiguous(out.get(), DType::bf16, dev, {b, s_q, h_q, 512});
    const auto lv = TensorView::contiguous(lse.get(), DType::f32, dev, {b, s_q, h_q});
    const mla::SparseDecodeOptions params{.sm_scale = std::pow(576.0, -0.5)};
    const mla::DecodePlan plan = mla::DecodePlan::create(
        {.batch = int(b), .s_q = int(s_q), .h_q = int(h_q), .d_qk = 576, .topk = int(topk), .num_sms = o.num_sms},
        o.device, stream);
    const mla::SparseDecodeTensors tensors{.q = qv, .kv_cache = cv, .indices = iv, .out = ov, .lse = lv};
    const double ms = graph_replay_ms(o, stream, [&] { plan.run(tensors, params, stream); });
    const double flop = 2.0 * static_cast<double>(b * s_q * h_q * topk) * (576 + 512);
    char shape[240];
    std::snprintf(shape, sizeof shape,
                  "\"b\":%lld,\"s_q\":%lld,\"h_q\":%lld,\"d_qk\":576,\"topk\":%lld,\"s_kv\":%lld,\"split_parts\":%d,"
                  "\"head_requests\":%d",
                  (long long)b, (long long)s_q, (long long)h_q, (long long)topk, (long long)s_kv,
                  plan.sizes().split ? plan.sizes().num_sm_parts : 0, plan.sizes().head_requests);
    mla::kernels::SparseAttentionParams p = selector_params(qv, iv, ov);
    add_decode_selector_params(p, qv, plan);
    p.kv_format = mla::kernels::KvFormat::fp8_v32;
    p.kv = cv.data;
    p.num_kv = num_blocks * block;
    p.block_size = block;
    p.kv_block_stride_bytes = cv.stride(0);
    report("decode", shape, ms, flop, selected_kernel(p, o.device));
  }
}

// DeepSeek V4 decode on FlashMLA's production shapes (h200-anchors.md: s_q 2, main pool topk 128 in 256-token
// pages, extra pool topk 512 (h_q 64) or 1024 (h_q 128) in 64-token pages, 16K tokens per pool per request).
// FLOPs: 2 * (512 + 512) per head per slot of both pools.
void bench_decode_v4(const MlaBenchOptions& o, cudaStream_t stream) {
  const int64_t s_q = o.decode_s_q, h_q = o.h_q, topk = 128, extra_topk = h_q <= 64 ? 512 : 1024;
  const int64_t tokens = 16384, bs = 256, xbs = 64;
  const Device dev = Device::cuda(o.device);
  // A pool of quantized random pages, `tokens` per request: [b * tokens / block, block, 1, 584].
  auto make_pool = [&](int64_t b, int64_t block, uint32_t seed) {
    const int64_t nb = b * tokens / block, page = block * 584;  // 584 * block is a multiple of 16 for these blocks
    DeviceBuffer pages(static_cast<size_t>(nb * page), o.device);
    DeviceBuffer src(static_cast<size_t>(nb * block * 512 * 2), o.device);
    upload_random(src, static_cast<size_t>(nb * block * 512), seed, 0.1f);
    const auto view = TensorView::strided(pages.get(), DType::u8, dev, {nb, block, 1, 584}, {page, 584, 584, 1});
    mla::quantize_kv_cache_fp8_v4(TensorView::contiguous(src.get(), DType::bf16, dev, {nb, block, 1, 512}), view, stream);
    FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
    return std::pair<DeviceBuffer, TensorView>(std::move(pages), view);
  };
  for (int64_t b : o.batches) {
    auto [main_pages, cv] = make_pool(b, bs, 14);
    auto [extra_pages, xv] = make_pool(b, xbs, 15);
    DeviceBuffer q(static_cast<size_t>(b * s_q * h_q * 512 * 2), o.device), out(static_cast<size_t>(b * s_q * h_q * 512 * 2), o.device);
    DeviceBuffer lse(static_cast<size_t>(b * s_q * h_q * 4), o.device);
    DeviceBuffer idx(static_cast<size_t>(b * s_q * topk * 4), o.device), xidx(static_cast<size_t>(b * s_q * extra_topk * 4), o.device);
    upload_random(q, static_cast<size_t>(b * s_q * h_q * 512), 16, 0.5f);
    std::vector<int64_t> lo(static_cast<size_t>(b * s_q));
    for (int64_t t = 0; t < b * s_q; ++t) lo[static_cast<size_t>(t)] = (t / s_q) * tokens;  // each request its own pages
    const auto hidx = random_indices(b * s_q, topk, tokens, lo, 17), hxidx = random_indices(b * s_q, extra_topk, tokens, lo, 18);
    FLASHCPP_CUDA_CHECK(cudaMemcpy(idx.get(), hidx.data(), hidx.size() * 4, cudaMemcpyHostToDevice));
    FLASHCPP_CUDA_CHECK(cudaMemcpy(xidx.get(), hxidx.data(), hxidx.size() * 4, cudaMemcpyHostToDevice));
    const auto qv = TensorView::contiguous(q.get(), DType::bf16, dev, {b, s_q, h_q, 512});
    const auto iv = TensorView::contiguous(idx.get(), DType::i32, dev, {b, s_q, topk});
    const auto xiv = TensorView::contiguous(xidx.get(), DType::i32, dev, {b, s_q, extra_topk});
    const auto ov = TensorView::contiguous(out.get(), DType::bf16, dev, {b, s_q, h_q, 512});
    const auto lv = TensorView::contiguous(lse.get(), DType::f32, dev, {b, s_q, h_q});
    const mla::SparseDecodeOptions params{.sm_scale = std::pow(512.0, -0.5)};
    const mla::SparseDecodeTensors tensors{.q = qv, .kv_cache = cv, .indices = iv, .out = ov, .lse = lv,
                                           .extra_kv_cache = &xv, .extra_indices = &xiv};
    const mla::DecodePlan plan = mla::DecodePlan::create({.batch = int(b), .s_q = int(s_q), .h_q = int(h_q), .d_qk = 512,
                                                          .topk = int(topk), .extra_topk = int(extra_topk),
                                                          .num_sms = o.num_sms},
                                                         o.device, stream);
    const double ms = graph_replay_ms(o, stream, [&] { plan.run(tensors, params, stream); });
    const double flop = 2.0 * static_cast<double>(b * s_q * h_q * (topk + extra_topk)) * (512 + 512);
    char shape[240];
    std::snprintf(shape, sizeof shape,
                  "\"b\":%lld,\"s_q\":%lld,\"h_q\":%lld,\"d_qk\":512,\"topk\":%lld,\"extra_topk\":%lld,"
                  "\"block\":%lld,\"extra_block\":%lld,\"split_parts\":%d,\"head_requests\":%d",
                  (long long)b, (long long)s_q, (long long)h_q, (long long)topk, (long long)extra_topk, (long long)bs,
                  (long long)xbs, plan.sizes().split ? plan.sizes().num_sm_parts : 0, plan.sizes().head_requests);
    mla::kernels::SparseAttentionParams p = selector_params(qv, iv, ov);
    add_decode_selector_params(p, qv, plan);
    p.kv_format = mla::kernels::KvFormat::fp8_v4;
    p.topk = static_cast<int>(topk + extra_topk);
    p.main_topk = static_cast<int>(topk);
    p.kv = cv.data;
    p.num_kv = cv.size(0) * cv.size(1);
    p.block_size = cv.size(1);
    p.kv_block_stride_bytes = cv.stride(0);
    p.kv_slot_stride_bytes = 584;
    p.extra_kv = xv.data;
    p.extra_num_kv = xv.size(0) * xv.size(1);
    p.extra_block_size = xv.size(1);
    p.extra_block_stride_bytes = xv.stride(0);
    p.extra_indices = xiv.data_as<const int32_t>();
    p.extra_indices_stride_token = xiv.stride(1);
    report("decode_v4", shape, ms, flop, selected_kernel(p, o.device));
  }
}

}  // namespace

void add_mla_bench_command(CLI::App& app) {
  auto opts = std::make_shared<MlaBenchOptions>();
  auto* cmd = app.add_subcommand("mla-bench", "Benchmark sparse MLA prefill and FP8 decode, and dense MLA decode, on the GPU");
  add_integer(*cmd, "--device", opts->device, "CUDA device (below the device count)", 0, 1023);
  add_timing_options(*cmd, opts->warmup, opts->iters);
  // Sizes are positive (a usage error otherwise, exit 2); the library checks the rest (multiples of 64, limits).
  const int64_t one = 1, most = INT32_MAX;
  add_integer(*cmd, "--s-kv", opts->s_kv, "Prefill KV lengths", one, most);
  add_integer(*cmd, "--batch", opts->batches, "Decode batch sizes", one, most);
  add_integer(*cmd, "--topk", opts->topk, "topk (multiple of 64)", one, most);
  add_integer(*cmd, "--h-q", opts->h_q, "Query heads", one, most);
  add_integer(*cmd, "--prefill-s-q", opts->prefill_s_q, "Prefill query tokens", one, most);
  add_integer(*cmd, "--decode-s-q", opts->decode_s_q, "Decode query tokens per request", one, most);
  add_integer(*cmd, "--decode-s-kv", opts->decode_s_kv, "Decode KV tokens per request (multiple of 64)", one, most);
  add_integer(*cmd, "--num-sms", opts->num_sms, "SM count the decode plan schedules for (0: the device's)", 0, 4096);
  auto only = std::make_shared<std::pair<bool, bool>>(false, false);
  cmd->add_flag("--prefill-only", only->first, "Only the prefill cases");
  cmd->add_flag("--decode-only", only->second, "Only the decode cases");
  cmd->add_flag("--simple", opts->simple, "Force the portable simple kernel (no Hopper kernel)");
  auto* suite = add_word(*cmd, "--suite", opts->suite,
                         "Run a whole suite instead: flashmla = FlashMLA's decode and prefill performance "
                         "cases, inputs drawn as its tests draw them (--prefill-only / --decode-only apply); "
                         "flashmla-dense = its dense decoding cases (bf16 cache and FP8 rows)",
                         {"flashmla", "flashmla-dense"});
  add_text(*cmd, "--suite-filter", opts->suite_filter,
           "Only suite cases whose label contains SUBSTR (e.g. \"decode V4 config 1 b 64 \", \"prefill V3.2\")")
      ->needs(suite);
  cmd->add_flag("--v4", opts->v4, "DeepSeek V4 decode on FlashMLA's production shapes instead (use --batch 2 64 128 148)");
  auto fp8_kernel = std::make_shared<std::string>("");
  add_word(*cmd, "--fp8-kernel", *fp8_kernel, "Hopper kernel for FP8 decode (auto: the default)", {"auto", "mma", "wgmma"});
  cmd->callback(checked([opts, only, fp8_kernel] {
    MlaBenchOptions o = *opts;
    if (*fp8_kernel == "auto") mla::kernels::set_fp8_decode_kernel(std::nullopt);
    else if (!fp8_kernel->empty())
      mla::kernels::set_fp8_decode_kernel(*fp8_kernel == "wgmma" ? mla::kernels::SparseKernel::wgmma_sm90
                                                                 : mla::kernels::SparseKernel::mma_sm90);
    if (only->first) o.decode = false;
    if (only->second) o.prefill = false;
    if (cuda_device_count() == 0)
      throw Error(ErrorCode::unsupported, "mla-bench needs a CUDA GPU (it times the MLA kernels); none was found");
    if (o.device < 0 || o.device >= cuda_device_count())
      throw CLI::ValidationError("--device", "must be in [0, " + std::to_string(cuda_device_count()) + "); got " +
                                                 std::to_string(o.device));
    mla::kernels::set_force_simple_kernel(o.simple);
    const auto s = mla::device_support(o.device);
    const DeviceFacts& info = device_facts(o.device);
    std::printf("device %d: %s, %d SMs, cc %d.%d; warm-up %d, median of %d\n", o.device, info.name.c_str(),
                info.sm_count, info.cc_major, info.cc_minor, o.warmup, o.iters);
    if (!s.sparse_supported) throw Error(ErrorCode::unsupported, "mla-bench: sparse MLA cannot run on this device");
    DeviceGuard guard(o.device);
    Stream stream(o.device);
    if (!o.suite.empty()) {
      run_flashmla_suite({.device = o.device, .warmup = o.warmup, .iters = o.iters, .num_sms = o.num_sms,
                          .decode = o.decode, .prefill = o.prefill, .dense = o.suite == "flashmla-dense",
                          .filter = o.suite_filter},
                         stream);
      return;
    }
    if (o.v4) {
      bench_decode_v4(o, stream);
      return;
    }
    if (o.prefill) bench_prefill(o, stream);
    if (o.decode) bench_decode(o, stream);
  }));
}

}  // namespace flashcpp::cli
