// `flashcpp bench`: FlashInfer ops through flashcpp on the GPU, one machine-readable line per measurement.
//
// Method (docs/PERFORMANCE.md, "FlashInfer ops"): inputs larger than L2; `--warmup` calls first; kernel
// time = median over `--iters` of CUDA-event pairs around one call; host time = median wall time of one
// API call (entry to return, calls issued back to back, no synchronisation in between). Anchors measured
// in the same run: the copy ceiling (cudaMemcpy device to device of 1 GiB, bytes read + written) and the
// bare-launch floor (host time of one cudaLaunchKernel of an empty kernel).
//
// Lines:  ceiling copy_gbps=<GB/s> bytes=<n>
//         ceiling launch_host_us=<us> launch_kernel_us=<us>
//         op name=<op> config=<k=v,...> kernel_us=<median> [gbps=<GB/s> pct_copy=<%>] [tflops=<TFLOP/s>]
//            host_us=<median> floor_us=<launch floor> [plan_host_us=<us>]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "flashcpp/attention.hpp"
#include "flashcpp/commands.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/norm.hpp"
#include "flashcpp/activation.hpp"
#include "flashcpp/cascade.hpp"
#include "flashcpp/rope.hpp"
#include "flashcpp/topk.hpp"
#include "flashcpp/page.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/sampling.hpp"
#include "flashcpp/bench_data.hpp"

namespace flashcpp::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  int warmup = 10;
  int iters = 50;
  std::vector<std::string> ops;  // empty: all
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Timing {
  double kernel_us = 0, host_us = 0;
};

Timing measure(const std::function<void()>& call, cudaStream_t s, const BenchOptions& o) {
  for (int i = 0; i < o.warmup; ++i) call();
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<Event> start(static_cast<size_t>(o.iters)), stop(static_cast<size_t>(o.iters));
  for (int i = 0; i < o.iters; ++i) {
    start[static_cast<size_t>(i)].record(s);
    call();
    stop[static_cast<size_t>(i)].record(s);
  }
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> kernel, host;
  for (int i = 0; i < o.iters; ++i)
    kernel.push_back(stop[static_cast<size_t>(i)].elapsed_ms_since(start[static_cast<size_t>(i)]) * 1e3);
  for (int i = 0; i < o.iters; ++i) {
    const auto t = Clock::now();
    call();
    host.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
  }
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(s));
  return {median(kernel), median(host)};
}

/// A device buffer filled with a bf16/f16-friendly byte pattern (0x3C3C: ~0.0115 in bf16, ~1.06 in f16).
struct Dev {
  DeviceBuffer buf;
  TensorView view;
  Dev(DType t, std::initializer_list<int64_t> shape, int pattern = 0x3C) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    buf = DeviceBuffer(static_cast<size_t>(std::max<int64_t>(n * dtype_size(t), 16)), 0);
    // Completed before returning: the fill runs on the legacy stream, which the benchmark's stream does not wait for.
    FLASHCPP_CUDA_CHECK(cudaMemset(buf.get(), pattern, buf.size()));
    FLASHCPP_CUDA_CHECK(cudaDeviceSynchronize());
    view = TensorView::contiguous(buf.get(), t, Device::cuda(0), shape);
  }
};
Dev upload_i32(const std::vector<int32_t>& v) {
  Dev d(DType::i32, {static_cast<int64_t>(v.size())}, 0);
  FLASHCPP_CUDA_CHECK(cudaMemcpy(d.buf.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  FLASHCPP_CUDA_CHECK(cudaDeviceSynchronize());
  return d;
}

struct Bench {
  const Runtime& rt;
  const BenchOptions& o;
  Stream stream{0};
  double copy_gbps = 0, floor_us = 0;

  bool wanted(const std::string& op) const {
    return o.ops.empty() || std::find(o.ops.begin(), o.ops.end(), op) != o.ops.end();
  }

  void ceilings() {
    const size_t bytes = size_t{1} << 30;
    DeviceBuffer a(bytes, 0), b(bytes, 0);
    FLASHCPP_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
    const Timing t = measure(
        [&] { FLASHCPP_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream)); }, stream,
        o);
    copy_gbps = 2.0 * static_cast<double>(bytes) / (t.kernel_us * 1e3);
    std::printf("ceiling copy_gbps=%.1f bytes=%zu\n", copy_gbps, bytes);
    const Timing l = measure([&] { cuda_check(launch_empty_kernel(stream), "cudaLaunchKernel"); }, stream, o);
    floor_us = l.host_us;
    std::printf("ceiling launch_host_us=%.2f launch_kernel_us=%.2f\n", l.host_us, l.kernel_us);
  }

  void report(const char* name, const std::string& config, const Timing& t, double bytes, double flops,
              double plan_host_us = -1) {
    std::printf("op name=%s config=%s kernel_us=%.2f", name, config.c_str(), t.kernel_us);
    if (bytes > 0) {
      const double gbps = bytes / (t.kernel_us * 1e3);
      std::printf(" gbps=%.1f pct_copy=%.1f", gbps, 100.0 * gbps / copy_gbps);
    }
    if (flops > 0) std::printf(" tflops=%.1f", flops / (t.kernel_us * 1e6));
    std::printf(" host_us=%.2f floor_us=%.2f", t.host_us, floor_us);
    if (plan_host_us >= 0) std::printf(" plan_host_us=%.1f", plan_host_us);
    std::printf("\n");
    std::fflush(stdout);
  }

  void norms() {
    const int64_t rows = 8192, hidden = 4096;
    Dev x(DType::bf16, {rows, hidden}), res(DType::bf16, {rows, hidden}), out(DType::bf16, {rows, hidden});
    Dev w(DType::bf16, {hidden});
    const double io = 2.0 * rows * hidden * 2;
    const std::string cfg = "rows=8192,hidden=4096,dtype=bf16";
    if (wanted("rmsnorm"))
      report("rmsnorm", cfg, measure([&] { rmsnorm(rt, out.view, x.view, w.view, {}, stream); }, stream, o), io, 0);
    if (wanted("gemma_rmsnorm"))
      report("gemma_rmsnorm", cfg, measure([&] { gemma_rmsnorm(rt, out.view, x.view, w.view, {}, stream); }, stream, o),
             io, 0);
    if (wanted("fused_add_rmsnorm"))
      report("fused_add_rmsnorm", cfg,
             measure([&] { fused_add_rmsnorm(rt, x.view, res.view, w.view, {}, stream); }, stream, o), 2 * io, 0);
    if (wanted("fused_qk_rmsnorm")) {
      const auto q3 = TensorView::contiguous(x.buf.get(), DType::bf16, Device::cuda(0), {rows, 32, 128});
      const auto o3 = TensorView::contiguous(out.buf.get(), DType::bf16, Device::cuda(0), {rows, 32, 128});
      Dev w3(DType::bf16, {128});
      report("fused_qk_rmsnorm", "tokens=8192,heads=32,head_dim=128,dtype=bf16",
             measure([&] { fused_qk_rmsnorm(rt, o3, q3, w3.view, {}, stream); }, stream, o), io, 0);
    }
  }

  /// Memory-bound decode-step ops: RoPE in place on 8192 tokens' q and k, RoPE + FP8 quantization at DeepSeek MLA's
  /// shape (8192 tokens: 1.2 GiB bf16 in, 0.6 GiB e4m3 out), a Llama-3-70B-sized MLP activation (8192 tokens, d 28672:
  /// 1.4 GiB in, 0.5 out) and the cascade merges of 8192 tokens x 32 heads x 128 (bytes: every input and output once).
  void decode_step() {
    const int64_t tokens = 8192, d = 28672;
    if (wanted("silu_and_mul") || wanted("gelu_and_mul")) {
      Dev in(DType::bf16, {tokens, 2 * d}), out(DType::bf16, {tokens, d});
      const double io = 3.0 * tokens * d * 2;
      const std::string cfg = "tokens=8192,d=28672,dtype=bf16";
      if (wanted("silu_and_mul"))
        report("silu_and_mul", cfg, measure([&] { silu_and_mul(rt, out.view, in.view, {}, stream); }, stream, o), io, 0);
      if (wanted("gelu_and_mul"))
        report("gelu_and_mul", cfg, measure([&] { gelu_and_mul(rt, out.view, in.view, {}, stream); }, stream, o), io, 0);
    }
    const int64_t t = 8192, h = 32, hd = 128;
    const std::string cfg = "tokens=8192,heads=32,head_dim=128,dtype=bf16";
    if (wanted("apply_rope_pos_ids")) {  // in place on q and k of a fused qkv row (32 + 8 + 8 heads)
      const int64_t width = 48 * hd;
      Dev qkv(DType::bf16, {t, width}), pos(DType::i32, {t}, 0);
      auto* b = static_cast<uint16_t*>(qkv.buf.get());
      const auto q = TensorView::strided(b, DType::bf16, Device::cuda(0), {t, h, hd}, {width, hd, 1});
      const auto k = TensorView::strided(b + h * hd, DType::bf16, Device::cuda(0), {t, 8, hd}, {width, hd, 1});
      report("apply_rope_pos_ids", "tokens=8192,heads=32/8,head_dim=128,dtype=bf16,in_place",
             measure([&] { apply_rope_pos_ids(rt, q, k, q, k, pos.view, {}, stream); }, stream, o),
             2.0 * t * 40 * hd * 2, 0);
    }
    if (wanted("rope_quantize_fp8")) {  // DeepSeek MLA: q 128 heads of 512 nope + 64 rope, one latent k row, e4m3 out
      const int64_t hq = 128, nope = 512, rope = 64, head = nope + rope;
      Dev q(DType::bf16, {t, hq, head}), kv(DType::bf16, {t, head}), cache(DType::f32, {4096, rope});
      Dev pos(DType::i32, {t}, 0), qro(DType::e4m3, {t, hq, rope}), qno(DType::e4m3, {t, hq, nope});
      Dev kro(DType::e4m3, {t, rope}), kno(DType::e4m3, {t, nope});
      auto* qb = static_cast<uint16_t*>(q.buf.get());
      auto* kb = static_cast<uint16_t*>(kv.buf.get());
      const auto q_nope = TensorView::strided(qb, DType::bf16, Device::cuda(0), {t, hq, nope}, {hq * head, head, 1});
      const auto q_rope = TensorView::strided(qb + nope, DType::bf16, Device::cuda(0), {t, hq, rope}, {hq * head, head, 1});
      const auto k_nope = TensorView::strided(kb, DType::bf16, Device::cuda(0), {t, nope}, {head, 1});
      const auto k_rope = TensorView::strided(kb + nope, DType::bf16, Device::cuda(0), {t, rope}, {head, 1});
      const RopeQuantizeTensors a{.q_rope = q_rope, .k_rope = k_rope, .q_rope_out = qro.view, .k_rope_out = kro.view,
                               .q_nope = &q_nope, .k_nope = &k_nope, .q_nope_out = &qno.view, .k_nope_out = &kno.view,
                               .cos_sin_cache = cache.view, .pos_ids = pos.view};
      report("rope_quantize_fp8", "tokens=8192,mla,heads=128,rope=64,nope=512,dtype=bf16->e4m3",
             measure([&] { rope_quantize_fp8(rt, a, {}, stream); }, stream, o), 3.0 * t * (hq + 1) * head, 0);
    }
    if (wanted("merge_state")) {
      Dev va(DType::bf16, {t, h, hd}), vb(DType::bf16, {t, h, hd}), vm(DType::bf16, {t, h, hd});
      Dev sa(DType::f32, {t, h}), sb(DType::f32, {t, h}), sm(DType::f32, {t, h});
      report("merge_state", cfg,
             measure([&] { merge_state(rt, va.view, sa.view, vb.view, sb.view, vm.view, sm.view, stream); }, stream, o),
             3.0 * t * h * (hd * 2 + 4), 0);
    }
    if (wanted("merge_states")) {
      const int64_t sets = 4;
      Dev v(DType::bf16, {t, sets, h, hd}), s(DType::f32, {t, sets, h}), vm(DType::bf16, {t, h, hd}), sm(DType::f32, {t, h});
      report("merge_states", cfg + ",index_sets=4",
             measure([&] { merge_states(rt, v.view, s.view, vm.view, sm.view, stream); }, stream, o),
             (sets + 1.0) * t * h * (hd * 2 + 4), 0);
    }
    topk();
  }

  /// DSA top-k at DeepSeek V3.2's indexer shape: k 2048 of 65536 f32 logits per row, for 64 rows and for 1 (the two
  /// paths FlashInfer picks there: its filtered kernel, and the multi-CTA radix select). Random distinct-ish logits
  /// (a constant fill would be one 65536-way tie); full-length rows; bytes: the logits read, the outputs written.
  void topk() {
    if (!(wanted("top_k") || wanted("top_k_page_table_transform") || wanted("top_k_ragged_transform"))) return;
    const int64_t max_len = 65536, k = 2048;
    DeviceBuffer row_states(static_cast<size_t>(kTopKRowStatesBytes), 0);
    FLASHCPP_CUDA_CHECK(cudaMemset(row_states.get(), 0, row_states.size()));
    const auto rs = TensorView::contiguous(row_states.get(), DType::u8, Device::cuda(0), {kTopKRowStatesBytes});
    for (const int64_t rows : {int64_t{64}, int64_t{1}}) {
      std::vector<float> host(static_cast<size_t>(rows * max_len));
      uint64_t x = 0x9e3779b97f4a7c15ull;
      for (float& f : host) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f = static_cast<float>(x >> 40) * (2.f / 16777216.f) - 1.f;
      }
      Dev logits(DType::f32, {rows, max_len}, 0), idx(DType::i32, {rows, k}, 0), val(DType::f32, {rows, k}, 0);
      FLASHCPP_CUDA_CHECK(cudaMemcpy(logits.buf.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
      std::vector<int32_t> lens(static_cast<size_t>(rows), static_cast<int32_t>(max_len)), offs(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) offs[static_cast<size_t>(r)] = static_cast<int32_t>(r * max_len);
      Dev len = upload_i32(lens), off = upload_i32(offs);
      const std::string cfg = "rows=" + std::to_string(rows) + ",max_len=65536,k=2048,dtype=f32";
      const double in_bytes = static_cast<double>(rows * max_len * 4);
      if (wanted("top_k"))
        report("top_k", cfg,
               measure([&] { top_k(rt, logits.view, idx.view, val.view, &rs, stream); }, stream, o),
               in_bytes + rows * k * 8.0, 0);
      if (wanted("top_k_page_table_transform")) {
        std::vector<int32_t> tab(static_cast<size_t>(rows * max_len));
        std::iota(tab.begin(), tab.end(), 0);
        Dev table(DType::i32, {rows, max_len}, 0);
        FLASHCPP_CUDA_CHECK(cudaMemcpy(table.buf.get(), tab.data(), tab.size() * 4, cudaMemcpyHostToDevice));
        report("top_k_page_table_transform", cfg,
               measure([&] {
                 top_k_page_table_transform(rt, logits.view, len.view, table.view, idx.view, nullptr, &rs, stream);
               }, stream, o),
               in_bytes + rows * k * 8.0, 0);  // plus the gathered table entries
      }
      if (wanted("top_k_ragged_transform"))
        report("top_k_ragged_transform", cfg,
               measure([&] {
                 top_k_ragged_transform(rt, logits.view, off.view, len.view, idx.view, &rs, stream);
               }, stream, o),
               in_bytes + rows * k * 4.0, 0);
    }
  }

  /// The sampler over a Llama-3 vocabulary (128256) at 1 request (0.5 MB: L2-resident, the latency of a lone
  /// request) and 256 (131 MB, above L2), on random logits (uniform in [-8, 8)) and their softmax. Bytes: one read
  /// of the f32 input (and the renorm/mask/softmax write): the samplers' rejection rounds read it again, so this is
  /// a lower bound of their traffic.
  void sampling() {
    const char* ops[] = {"softmax", "sampling_from_logits", "top_k_sampling_from_probs", "top_p_sampling_from_probs",
                         "top_k_top_p_sampling_from_logits", "top_k_renorm_probs", "top_k_mask_logits"};
    if (std::none_of(std::begin(ops), std::end(ops), [&](const char* n) { return wanted(n); })) return;
    const int64_t vocab = 128256;
    const OwnedSamplingWorkspace ws(0, stream);
    for (int64_t rows : {int64_t{1}, int64_t{256}}) {
      std::vector<float> host(static_cast<size_t>(rows * vocab));
      std::mt19937 gen(static_cast<uint32_t>(rows));
      std::uniform_real_distribution<float> u(-8.0f, 8.0f);
      for (float& x : host) x = u(gen);
      Dev logits(DType::f32, {rows, vocab}, 0), probs(DType::f32, {rows, vocab}, 0), out(DType::f32, {rows, vocab}, 0);
      Dev samples(DType::i32, {rows}, 0);
      FLASHCPP_CUDA_CHECK(cudaMemcpy(logits.buf.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice));
      softmax(rt, ws.view().softmax_buffer, logits.view, probs.view, 1.0, {}, stream);
      const double in = 4.0 * rows * vocab;
      const std::string cfg = "rows=" + std::to_string(rows) + ",vocab=128256";
      const SamplingOptions so{.philox_seed = 1};
      if (wanted("softmax"))
        report("softmax", cfg,
               measure([&] { softmax(rt, ws.view().softmax_buffer, logits.view, out.view, 1.0, {}, stream); }, stream, o),
               2 * in, 0);
      if (wanted("sampling_from_logits"))
        report("sampling_from_logits", cfg,
               measure([&] { sampling_from_logits(rt, logits.view, samples.view, nullptr, so, stream); }, stream, o), in,
               0);
      if (wanted("top_k_sampling_from_probs"))
        report("top_k_sampling_from_probs", cfg + ",top_k=50",
               measure([&] { top_k_sampling_from_probs(rt, probs.view, samples.view, 50, nullptr, so, stream); }, stream,
                       o),
               in, 0);
      if (wanted("top_p_sampling_from_probs"))
        report("top_p_sampling_from_probs", cfg + ",top_p=0.9",
               measure([&] { top_p_sampling_from_probs(rt, probs.view, samples.view, 0.9, nullptr, so, stream); },
                       stream, o),
               in, 0);
      if (wanted("top_k_top_p_sampling_from_logits"))
        report("top_k_top_p_sampling_from_logits", cfg + ",top_k=50,top_p=0.9,top_k_first",
               measure([&] {
                 top_k_top_p_sampling_from_logits(rt, ws, logits.view, out.view, samples.view, 50, 0.9,
                                                  TopKTopPOrder::top_k_first, nullptr, so, stream);
               }, stream, o),
               in, 0);
      if (wanted("top_k_renorm_probs"))
        report("top_k_renorm_probs", cfg + ",top_k=50",
               measure([&] { top_k_renorm_probs(rt, probs.view, out.view, 50, ws.view().row_states, stream); }, stream,
                       o),
               2 * in, 0);
      if (wanted("top_k_mask_logits"))
        report("top_k_mask_logits", cfg + ",top_k=50",
               measure([&] { top_k_mask_logits(rt, logits.view, out.view, 50, ws.view().row_states, stream); }, stream,
                       o),
               2 * in, 0);
    }
  }

  /// 64 requests x 4096 tokens, 8 KV heads, head 128, page 16 (1 GiB of bf16 KV).
  struct DecodeSetup {
    int64_t batch = 64, len = 4096, hq = 32, hkv = 8, d = 128, ps = 16;
    std::vector<int32_t> indptr, last, ids;
    Dev k, v, indices, indptr_d, last_d, q, out;
    explicit DecodeSetup(int64_t pages_per_req = 256)
        : k(DType::bf16, {64 * pages_per_req, 16, 8, 128}), v(DType::bf16, {64 * pages_per_req, 16, 8, 128}),
          indices(DType::i32, {1}), indptr_d(DType::i32, {1}), last_d(DType::i32, {1}), q(DType::bf16, {64, 32, 128}),
          out(DType::bf16, {64, 32, 128}) {
      for (int64_t r = 0; r <= batch; ++r) indptr.push_back(static_cast<int32_t>(r * pages_per_req));
      last.assign(static_cast<size_t>(batch), 16);
      ids.resize(static_cast<size_t>(batch * pages_per_req));
      std::iota(ids.begin(), ids.end(), 0);
      indices = upload_i32(ids);
      indptr_d = upload_i32(indptr);
      last_d = upload_i32(last);
    }
    PagedKvCache cache() const { return {k.view, v.view, indices.view, indptr_d.view, last_d.view, KvLayout::nhd}; }
  };

  void decode() {
    if (!(wanted("batch_decode") || wanted("append_paged_kv_cache"))) return;
    DecodeSetup s;
    OwnedWorkspace ws(0);
    const double kv_bytes = 2.0 * s.batch * s.len * s.hkv * s.d * 2;
    const auto host_i32 = [](std::vector<int32_t>& v) {
      return TensorView::contiguous(v.data(), DType::i32, Device::cpu(), {static_cast<int64_t>(v.size())});
    };
    if (wanted("batch_decode")) {
      struct Path {
        const char* label;
        DecodeBackend decode;
        AttentionBackend prefill;
      };
      std::vector<Path> paths = {{"cuda_cores", DecodeBackend::cuda_cores, AttentionBackend::fa2},
                                 {"tensor_cores_fa2", DecodeBackend::tensor_cores, AttentionBackend::fa2}};
      if (device_facts(0).cc_major == 9) paths.push_back({"tensor_cores_fa3", DecodeBackend::tensor_cores, AttentionBackend::fa3});
      paths.push_back({"auto", DecodeBackend::automatic, AttentionBackend::automatic});
      for (const Path& p : paths) {
        BatchDecodeConfig c;
        c.num_qo_heads = s.hq;
        c.num_kv_heads = s.hkv;
        c.head_dim = s.d;
        c.page_size = s.ps;
        c.backend = p.decode;
        c.prefill_backend = p.prefill;
        const DecodeIndptrs ip{host_i32(s.indptr), host_i32(s.last), nullptr};
        auto t0 = Clock::now();
        auto plan = BatchDecodePlan::create(rt, ws, ip, c, stream);
        const double plan_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        const PagedKvCache kv = s.cache();
        const Timing t = measure([&] { plan.run(s.q.view, kv, s.out.view, nullptr, stream); }, stream, o);
        report("batch_decode",
               std::string("batch=64,ctx=4096,heads=32/8,head_dim=128,page=16,bf16,path=") + p.label +
                   (plan.uses_tensor_cores() ? (plan.prefill_backend() == AttentionBackend::fa3 ? ":fa3" : ":fa2") : ""),
               t, kv_bytes, 0, plan_us);
      }
    }
    if (wanted("append_paged_kv_cache")) {
      // A decode step: one new token per request (positions at each request's last slot).
      std::vector<int32_t> bi(64), pos(64, 4095);
      std::iota(bi.begin(), bi.end(), 0);
      Dev bi_d = upload_i32(bi), pos_d = upload_i32(pos), nk(DType::bf16, {64, 8, 128}), nv(DType::bf16, {64, 8, 128});
      const PagedKvCache kv = s.cache();
      report("append_paged_kv_cache", "tokens=64,heads=8,head_dim=128,page=16,bf16",
             measure([&] { append_paged_kv_cache(rt, nk.view, nv.view, bi_d.view, pos_d.view, kv, stream); }, stream, o),
             0, 0);
    }
  }

  void single() {
    if (wanted("single_decode")) {
      const int64_t len = 32768;  // 128 MiB of KV: above L2
      Dev q(DType::bf16, {32, 128}), k(DType::bf16, {len, 8, 128}), v(DType::bf16, {len, 8, 128}), out(DType::bf16, {32, 128});
      Dev tmp(DType::u8, {32 << 20});
      for (DecodeBackend b : {DecodeBackend::cuda_cores, DecodeBackend::tensor_cores}) {
        SingleDecodeOptions so;
        so.backend = b;
        report("single_decode",
               std::string("ctx=32768,heads=32/8,head_dim=128,bf16,path=") +
                   (b == DecodeBackend::cuda_cores ? "cuda_cores" : "tensor_cores"),
               measure([&] { single_decode(rt, q.view, k.view, v.view, out.view, nullptr, tmp.view, so, stream); },
                       stream, o),
               2.0 * len * 8 * 128 * 2, 0);
      }
    }
    if (wanted("single_prefill")) {
      const int64_t len = 8192;
      Dev q(DType::bf16, {len, 32, 128}), k(DType::bf16, {len, 8, 128}), v(DType::bf16, {len, 8, 128});
      Dev out(DType::bf16, {len, 32, 128});
      Dev tmp(DType::u8, {std::max<int64_t>(32 << 20, single_prefill_tmp_bytes(len, len, 32, 8, 128, DType::bf16, 0))});
      SinglePrefillOptions so;
      so.causal = true;
      const double flops = 4.0 * 128 * 32 * (static_cast<double>(len) * (len + 1) / 2);
      report("single_prefill", "len=8192,causal,heads=32/8,head_dim=128,bf16,fa2",
             measure([&] { single_prefill(rt, q.view, k.view, v.view, out.view, nullptr, tmp.view, so, stream); },
                     stream, o),
             0, flops);
    }
  }

  void prefill() {
    if (!(wanted("batch_prefill_paged") || wanted("batch_prefill_ragged"))) return;
    const int64_t n = 8, len = 1024, hq = 32, hkv = 8, d = 128, ps = 16, ppr = len / ps;
    std::vector<int32_t> qo, kv_pages, last(static_cast<size_t>(n), 16), tok, ids(static_cast<size_t>(n * ppr));
    for (int64_t r = 0; r <= n; ++r) {
      qo.push_back(static_cast<int32_t>(r * len));
      kv_pages.push_back(static_cast<int32_t>(r * ppr));
    }
    std::iota(ids.begin(), ids.end(), 0);
    Dev q(DType::bf16, {n * len, hq, d}), out(DType::bf16, {n * len, hq, d});
    Dev kc(DType::bf16, {n * ppr, ps, hkv, d}), vc(DType::bf16, {n * ppr, ps, hkv, d});
    Dev k(DType::bf16, {n * len, hkv, d}), v(DType::bf16, {n * len, hkv, d});
    Dev qo_d = upload_i32(qo), pages_d = upload_i32(kv_pages), last_d = upload_i32(last), ids_d = upload_i32(ids);
    OwnedWorkspace ws(0);
    const double flops = n * 4.0 * d * hq * (static_cast<double>(len) * (len + 1) / 2);
    auto hv = [](std::vector<int32_t>& v) {
      return TensorView::contiguous(v.data(), DType::i32, Device::cpu(), {static_cast<int64_t>(v.size())});
    };
    std::vector<AttentionBackend> backends{AttentionBackend::fa2};
    if (device_facts(0).cc_major == 9) backends.push_back(AttentionBackend::fa3);
    for (AttentionBackend be : backends) {
      const char* bn = be == AttentionBackend::fa3 ? "fa3" : "fa2";
      BatchPrefillConfig c;
      c.num_qo_heads = hq;
      c.num_kv_heads = hkv;
      c.head_dim_qk = d;
      c.page_size = ps;
      c.causal = true;
      c.backend = be;
      if (wanted("batch_prefill_paged")) {
        auto t0 = Clock::now();
        auto plan = BatchPrefillPlan::create(rt, ws, {hv(qo), hv(kv_pages), hv(last), nullptr}, c, stream);
        const double plan_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        const PagedKvCache kv{kc.view, vc.view, ids_d.view, pages_d.view, last_d.view, KvLayout::nhd};
        report("batch_prefill_paged", std::string("requests=8,len=1024,causal,heads=32/8,head_dim=128,page=16,bf16,") + bn,
               measure([&] { plan.run_paged(q.view, kv, qo_d.view, out.view, nullptr, stream); }, stream, o), 0, flops,
               plan_us);
      }
      if (wanted("batch_prefill_ragged")) {
        c.kv_storage = KvStorage::ragged;
        auto t0 = Clock::now();
        auto plan = BatchPrefillPlan::create(rt, ws, {hv(qo), hv(qo), {}, nullptr}, c, stream);
        const double plan_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        report("batch_prefill_ragged", std::string("requests=8,len=1024,causal,heads=32/8,head_dim=128,bf16,") + bn,
               measure([&] { plan.run_ragged(q.view, k.view, v.view, qo_d.view, qo_d.view, out.view, nullptr, stream); },
                       stream, o),
               0, flops, plan_us);
      }
    }
  }
};

int run_bench(const BenchOptions& o) {
  if (cuda_device_count() == 0)
    throw Error(ErrorCode::unsupported, "bench needs a CUDA GPU (it times FlashInfer's kernels); none was found");
  const DeviceFacts& info = device_facts(0);
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);
  std::printf("device name=\"%s\" sms=%d cc=%d.%d l2_mib=%.0f driver=%d warmup=%d iters=%d\n", info.name.c_str(),
              info.sm_count, info.cc_major, info.cc_minor, info.l2_bytes / 1048576.0, driver, o.warmup, o.iters);
  auto rt = Runtime::create();
  Bench b{*rt, o};
  b.ceilings();
  b.norms();
  b.decode_step();
  b.sampling();
  b.decode();
  b.single();
  b.prefill();
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "Time FlashInfer's norm, activation, RoPE, cascade merge, sampler, DSA top-k, KV "
                                          "append, prefill and decode through flashcpp "
                                          "(kernel and host time, against the copy ceiling and the launch floor)");
  add_timing_options(*cmd, o->warmup, o->iters);
  add_text(*cmd, "--op", o->ops, "only these ops")
      ->check(word_of({"rmsnorm", "gemma_rmsnorm", "fused_add_rmsnorm", "fused_qk_rmsnorm", "batch_decode",
                       "append_paged_kv_cache", "single_decode", "single_prefill", "batch_prefill_paged",
                       "batch_prefill_ragged", "silu_and_mul", "gelu_and_mul", "merge_state", "merge_states",
                       "apply_rope_pos_ids", "rope_quantize_fp8", "softmax", "sampling_from_logits",
                       "top_k_sampling_from_probs", "top_p_sampling_from_probs", "top_k_top_p_sampling_from_logits",
                       "top_k_renorm_probs", "top_k_mask_logits", "top_k", "top_k_page_table_transform", "top_k_ragged_transform"}));
  cmd->callback(checked([o] {
    const int rc = run_bench(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  }));
}

}  // namespace flashcpp::cli
