// `flashcpp bench-mla-gdn-moe`: kernel time (CUDA events, median), TFLOP/s and host time per call of batch MLA,
// GDN prefill at the GPU-test sizes, and the CUTLASS fused MoE at DeepSeek-V3's and a Mixtral-like expert
// shape for 1..4096 tokens. Inputs are larger than L2 (MLA KV 32×2048×576 bf16 = 75 MiB; MoE weights
// 22 GiB and 2.6 GiB), random values made on the device.
//
// FLOP counts: MLA 2·B·qo·H·kv·(576 + 512); GDN 6·D² per token·head (the recurrent form: decay, S·k,
// rank-1 update, S·q); MoE 2·T·K·(H·N1 + I·H).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tools_internal.hpp"
#include "flashcpp/bench_data.hpp"
#include "flashcpp/commands.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/gdn.hpp"
#include "flashcpp/mla_attention.hpp"
#include "flashcpp/moe.hpp"
#include "flashcpp/runtime.hpp"

namespace flashcpp::cli {
namespace {

struct Timing {
  double kernel_ms = 0, host_us = 0;
};

/// Median kernel time (events around each launch) and median host time of the launch call itself.
Timing measure(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) launch(stream);
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> kernel, host;
  Event start, stop;
  for (int i = 0; i < iters; ++i) {
    start.record(stream);
    const auto t0 = std::chrono::steady_clock::now();
    launch(stream);
    const auto t1 = std::chrono::steady_clock::now();
    stop.record(stream);
    FLASHCPP_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    kernel.push_back(stop.elapsed_ms_since(start));
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  auto median = [](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  return {median(kernel), median(host)};
}

/// Device buffer of `n` bf16 values drawn from U(-scale, scale) on the device (bench_data.hpp); complete on return.
DeviceBuffer random_bf16(size_t n, float scale, uint64_t seed, int device) {
  DeviceBuffer d(n * 2, device);
  FLASHCPP_CUDA_CHECK(fill_uniform_bf16(d.get(), n, seed, -scale, scale, nullptr));
  FLASHCPP_CUDA_CHECK(cudaDeviceSynchronize());
  return d;
}

template <class T>
DeviceBuffer upload(const std::vector<T>& h, int device) {
  DeviceBuffer d(std::max<size_t>(h.size(), 1) * sizeof(T), device);
  FLASHCPP_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

void report(const char* name, double flops, const Timing& t) {
  std::printf("%-44s kernel %9.3f ms  %7.1f TFLOP/s  host %7.1f us/call\n", name, t.kernel_ms,
              flops / (t.kernel_ms * 1e-3) / 1e12, t.host_us);
}

void bench_mla(const Runtime& rt, int device, int iters, MlaBackend backend, const char* name) {
  const int64_t B = 32, kv = 2048, H = 128, P = 64, pages_per = kv / P, pages = B * pages_per;
  std::mt19937 rng(1);
  auto qn = random_bf16(B * H * 512, 1, 1, device), qp = random_bf16(B * H * 64, 1, 2, device);
  auto ckv = random_bf16(pages * P * 512, 1, 3, device), kpe = random_bf16(pages * P * 64, 1, 4, device);
  DeviceBuffer out(B * H * 512 * 2, device);
  std::vector<int32_t> idx(pages), qo(B + 1), kvp(B + 1), kvl(B, kv);
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), rng);
  for (int64_t b = 0; b <= B; ++b) qo[b] = int32_t(b), kvp[b] = int32_t(b * pages_per);
  auto idx_d = upload(idx, device);
  OwnedWorkspace ws(device);
  auto hv = [](std::vector<int32_t>& v) {
    return TensorView::contiguous(v.data(), DType::i32, Device::cpu(), {int64_t(v.size())});
  };
  Stream stream(device);
  const Device dev = Device::cuda(device);
  auto plan = BatchMlaPlan::create(rt, ws, hv(qo), hv(kvp), hv(kvl),
                                   {.num_heads = H, .page_size = P, .sm_scale = 1 / std::sqrt(192.0), .backend = backend},
                                   stream);
  const TensorView q1 = TensorView::contiguous(qn.get(), DType::bf16, dev, {B, H, 512}),
                   q2 = TensorView::contiguous(qp.get(), DType::bf16, dev, {B, H, 64}),
                   c = TensorView::contiguous(ckv.get(), DType::bf16, dev, {pages, P, 512}),
                   k = TensorView::contiguous(kpe.get(), DType::bf16, dev, {pages, P, 64}),
                   i = TensorView::contiguous(idx_d.get(), DType::i32, dev, {pages}),
                   o = TensorView::contiguous(out.get(), DType::bf16, dev, {B, H, 512});
  const Timing t = measure([&](cudaStream_t s) { plan.run(q1, q2, c, k, i, o, nullptr, s); }, stream, 5, iters);
  report(name, 2.0 * B * H * kv * (576 + 512), t);
}

void bench_gdn(const Runtime& rt, int device, int iters) {
  const std::vector<int64_t> lens{1, 17, 1000, 2048, 2048, 2048, 2048, 2048};
  const int64_t N = int64_t(lens.size()), H = 16, D = 128;
  std::vector<int64_t> cu(N + 1, 0);
  for (int64_t n = 0; n < N; ++n) cu[n + 1] = cu[n] + lens[n];
  const int64_t T = cu[N];
  const float s = 1.0f / std::sqrt(float(D));
  auto q = random_bf16(T * H * D, s, 5, device), k = random_bf16(T * H * D, s, 6, device),
       v = random_bf16(T * H * D, 1, 7, device);
  DeviceBuffer out(T * H * D * 2, device), state(N * H * D * D * 4, device);
  auto cu_d = upload(cu, device);
  const Device dev = Device::cuda(device);
  GdnPrefillTensors a;
  a.q = TensorView::contiguous(q.get(), DType::bf16, dev, {T, H, D});
  a.k = TensorView::contiguous(k.get(), DType::bf16, dev, {T, H, D});
  a.v = TensorView::contiguous(v.get(), DType::bf16, dev, {T, H, D});
  a.output = TensorView::contiguous(out.get(), DType::bf16, dev, {T, H, D});
  a.output_state = TensorView::contiguous(state.get(), DType::f32, dev, {N, H, D, D});
  a.cu_seqlens = TensorView::contiguous(cu_d.get(), DType::i64, dev, {N + 1});
  Stream stream(device);
  const Timing t = measure([&](cudaStream_t st) { gdn_prefill(rt, a, {}, st); }, stream, 5, iters);
  report("gdn_prefill 8 seqs (T=12306) H16 D128 bf16", 6.0 * T * H * D * D, t);
}

/// Expert weights: `n` bf16 values from U(-scale, scale), or `n` random finite e4m3 codes, made on the device.
DeviceBuffer random_weights(size_t n, bool e4m3, float bf16_scale, uint64_t seed, int device) {
  if (!e4m3) return random_bf16(n, bf16_scale, seed, device);
  DeviceBuffer d(n, device);
  FLASHCPP_CUDA_CHECK(fill_random_e4m3(d.get(), n, seed, nullptr));
  FLASHCPP_CUDA_CHECK(cudaDeviceSynchronize());
  return d;
}

struct MoeShape {
  const char* name;
  int64_t hidden, inter, experts, top_k;
};

/// One shape at several token counts: kernel time, TFLOP/s on routed tokens (2·T·K·(H·N1 + I·H)) and its
/// share of the card's bf16 GEMM ceiling (`ceiling_tflops`), the weight bytes of the experts the call
/// touches per µs, host time per call, and what the workspace allocations did in the steady state.
void bench_moe_shape(const Runtime& rt, int device, int iters, const MoeShape& shape, MoeQuantization quant,
                     const std::vector<int64_t>& token_counts, double ceiling_tflops, bool tune) {
  const int64_t Hd = shape.hidden, I = shape.inter, E = shape.experts, K = shape.top_k, N1 = 2 * I;
  const bool ds = quant == MoeQuantization::deepseek_fp8_block_scale;
  const DType wt = ds ? DType::e4m3 : DType::bf16;
  const size_t wbytes = ds ? 1 : 2;
  std::mt19937 rng(3);
  DeviceBuffer w1 = random_weights(size_t(E * N1 * Hd), ds, 0.02f, 11, device),
               w2 = random_weights(size_t(E * Hd * I), ds, 0.03f, 12, device);
  std::vector<float> bs1(ds ? E * (N1 / 128) * (Hd / 128) : 0, 2e-3f), bs2(ds ? E * (Hd / 128) * (I / 128) : 0, 2e-3f);
  auto bs1_d = upload(bs1, device), bs2_d = upload(bs2, device);
  const Device dev = Device::cuda(device);
  const TensorView s1 = TensorView::contiguous(bs1_d.get(), DType::f32, dev, {E, N1 / 128, Hd / 128}),
                   s2 = TensorView::contiguous(bs2_d.get(), DType::f32, dev, {E, Hd / 128, I / 128});
  FusedMoeConfig cfg;
  cfg.device = device;
  cfg.quantization = quant;
  cfg.weight_dtype = wt;
  // Two runners of the shape: the default configuration (auto_tune: an untuned bucket is tuned on its first call)
  // and one without auto_tune (the runner's first candidate unless tuned explicitly).
  auto auto_runner = FusedMoeRunner::shared(rt, cfg);
  FusedMoeConfig plain_cfg = cfg;
  plain_cfg.auto_tune = false;
  auto runner = FusedMoeRunner::shared(rt, plain_cfg);
  Stream stream(device);
  cudaMemPool_t pool = nullptr;
  FLASHCPP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  auto reserved = [&] {
    uint64_t v = 0;
    FLASHCPP_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v));
    return v;
  };
  for (const int64_t T : token_counts) {
    auto x = random_bf16(size_t(T * Hd), 1, 13 + uint64_t(T), device);
    DeviceBuffer out(size_t(T * Hd) * 2, device);
    std::vector<int32_t> sel(size_t(T * K));
    std::vector<float> sc(size_t(T * K), 1.0f / float(K));
    std::vector<int32_t> ids(static_cast<size_t>(E));
    std::iota(ids.begin(), ids.end(), 0);
    std::vector<bool> touched(size_t(E), false);
    for (int64_t t = 0; t < T; ++t) {
      std::shuffle(ids.begin(), ids.end(), rng);
      std::copy(ids.begin(), ids.begin() + K, sel.begin() + t * K);
      for (int64_t k = 0; k < K; ++k) touched[size_t(ids[size_t(k)])] = true;
    }
    const double experts_touched = double(std::count(touched.begin(), touched.end(), true));
    auto sel_d = upload(sel, device);
    auto sc_d = upload(sc, device);
    FusedMoeTensors a;
    a.input = TensorView::contiguous(x.get(), DType::bf16, dev, {T, Hd});
    a.output = TensorView::contiguous(out.get(), DType::bf16, dev, {T, Hd});
    a.token_selected_experts = TensorView::contiguous(sel_d.get(), DType::i32, dev, {T, K});
    a.token_final_scales = TensorView::contiguous(sc_d.get(), DType::f32, dev, {T, K});
    a.fc1_weights = TensorView::contiguous(w1.get(), wt, dev, {E, N1, Hd});
    a.fc2_weights = TensorView::contiguous(w2.get(), wt, dev, {E, Hd, I});
    if (ds) {
      a.fc1_block_scales = &s1;
      a.fc2_block_scales = &s2;
    }
    const FusedMoeOptions opts;  // swiglu, one rank
    // Warm-up first (it fills the pool), then the steady state is measured: allocations per call and
    // whether the pool had to reserve more memory from the driver (a miss) during the timed calls.
    auto measure_and_report = [&](const char* tactics_label, const std::shared_ptr<FusedMoeRunner>& runner) {
      const int warmup = 5;
      for (int i = 0; i < warmup; ++i) runner->run(a, opts, stream);
      FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
      const auto before = ffi::allocator_stats();
      const uint64_t reserved_before = reserved();
      const Timing t = measure([&](cudaStream_t st) { runner->run(a, opts, st); }, stream, 0, iters);
      const uint64_t reserved_after = reserved();
      const auto after = ffi::allocator_stats();
      const double flops = 2.0 * double(T * K) * double(Hd * N1 + I * Hd);
      const double touched_bytes = experts_touched * double(N1 * Hd + Hd * I) * double(wbytes);
      char name[96];
      std::snprintf(name, sizeof name, "fused_moe %s %s T%lld %s", shape.name, ds ? "fp8-block" : "bf16", (long long)T,
                    tactics_label);
      std::printf("%-44s kernel %9.3f ms  %7.1f TFLOP/s (%4.1f%% of %.0f)  experts' weights %6.0f GB/s  host %7.1f us/call"
                  "  workspace: %.1f allocations/call, pool growth %llu B\n",
                  name, t.kernel_ms, flops / (t.kernel_ms * 1e-3) / 1e12,
                  100.0 * flops / (t.kernel_ms * 1e-3) / 1e12 / ceiling_tflops, ceiling_tflops,
                  touched_bytes / (t.kernel_ms * 1e-3) / 1e9, t.host_us,
                  double(after.device_allocations - before.device_allocations) / double(iters),
                  (unsigned long long)(reserved_after - reserved_before));
      std::printf("MOE_BENCH {\"shape\":\"%s\",\"quant\":\"%s\",\"tokens\":%lld,\"hidden\":%lld,\"inter\":%lld,\"experts\":%lld,"
                  "\"top_k\":%lld,\"kernel_ms\":%.4f,\"tflops\":%.2f,\"host_us\":%.1f,\"allocs_per_call\":%.2f,"
                  "\"pool_growth_bytes\":%llu,\"tactics\":\"%s\"}\n",
                  shape.name, ds ? "fp8_block" : "bf16", (long long)T, (long long)Hd, (long long)I, (long long)E, (long long)K,
                  t.kernel_ms, flops / (t.kernel_ms * 1e-3) / 1e12, t.host_us,
                  double(after.device_allocations - before.device_allocations) / double(iters),
                  (unsigned long long)(reserved_after - reserved_before), tactics_label);
    };
    // The "default" row: the runner without auto_tune, on its defaults. The runner is shared per configuration, and tactics are
    // kept per (token bucket, problem shape): another shape's tuning never applies here, but an earlier
    // token count of this shape in the same power-of-two bucket may have been tuned; {-1, -1} for this
    // shape overrides that (run_moe treats it as no profile ids).
    const MoeProblemShape problem = MoeProblemShape::of(a, opts);
    if (tune) runner->set_tactics(T, problem, MoeTactics{});
    const MoeTactics used = runner->tactics_for(T, problem);
    if (used.gemm1 != -1 || used.gemm2 != -1)
      throw Error(ErrorCode::internal, "bench-mla-gdn-moe: the default row of " + std::string(shape.name) +
                                           " would run tactics (" + std::to_string(used.gemm1) + "," +
                                           std::to_string(used.gemm2) + ")");
    measure_and_report("default", runner);
    // auto_tune: the first call of this bucket tunes (or reads the module cache's record), timed here whole.
    if (!ds) {
      FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
      const auto t0 = std::chrono::steady_clock::now();
      auto_runner->run(a, opts, stream);
      FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
      const double first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const MoeTactics at = auto_runner->tactics_for(T, problem);
      char label[64];
      std::snprintf(label, sizeof label, "auto(%lld,%lld)", (long long)at.gemm1, (long long)at.gemm2);
      std::printf("fused_moe %s bf16 T%lld auto_tune first call %.1f ms (tuning or the record included)\n", shape.name,
                  (long long)T, first_ms);
      measure_and_report(label, auto_runner);
    }
    if (tune) {
      const MoeTactics t = runner->tune(a, opts, stream);
      char label[48];
      std::snprintf(label, sizeof label, "tuned(%lld,%lld)", (long long)t.gemm1, (long long)t.gemm2);
      measure_and_report(label, runner);
    }
  }
}

}  // namespace

void add_bench_mla_gdn_moe_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-mla-gdn-moe", "Benchmark batch MLA, GDN prefill and the fused MoE on the GPU");
  static std::string op = "all";
  static int iters = 50, device = 0;
  static std::vector<int64_t> moe_tokens{1, 16, 256, 4096};
  static double ceiling = 785;
  static bool moe_tune = false;
  add_word(*cmd, "--op", op, "which ops", {"mla", "gdn", "moe", "all"});
  add_integer(*cmd, "--moe-tokens", moe_tokens, "token counts of the MoE shapes", int64_t{1}, int64_t{1} << 20);
  add_real(*cmd, "--bf16-ceiling", ceiling, "the card's bf16 GEMM TFLOP/s the MoE figures are compared with (H200: 785)",
           0, 1e9, /*lo_open=*/true);
  cmd->add_flag("--moe-tune", moe_tune, "also time each MoE case after FusedMoeRunner::tune chose its GEMM tactics");
  add_integer(*cmd, "--iters", iters, "timed iterations (median reported)", 1, 100000);
  add_integer(*cmd, "--device", device, "CUDA device (below the device count)", 0, 1023);
  cmd->callback(checked([] {
    if (cuda_device_count() == 0) throw Error(ErrorCode::unsupported, "bench-mla-gdn-moe needs a CUDA GPU; none was found");
    DeviceGuard guard(device);
    const DeviceFacts& info = device_facts(device);
    std::printf("%s (compute capability %d.%d, %d SMs)\n", info.name.c_str(), info.cc_major, info.cc_minor, info.sm_count);
    auto rt = Runtime::create();
    auto run = [&](const char* what, const std::function<void()>& fn) {
      try {
        fn();
      } catch (const Error& e) {
        std::printf("%-44s skipped: %s\n", what, e.what());
      }
    };
    if (op == "mla" || op == "all") {
      run("batch_mla fa2", [&] { bench_mla(*rt, device, iters, MlaBackend::fa2, "batch_mla fa2 B32 kv2048 H128 bf16"); });
      if (info.cc_major == 9)
        run("batch_mla sm90", [&] { bench_mla(*rt, device, iters, MlaBackend::sm90, "batch_mla sm90 B32 kv2048 H128 bf16"); });
    }
    if (op == "gdn" || op == "all") run("gdn_prefill", [&] { bench_gdn(*rt, device, iters); });
    if (op == "moe" || op == "all") {
      // DeepSeek-V3's routed experts and a Mixtral-8x7B-like layer; swiglu, so fc1 is [E, 2I, H].
      const MoeShape deepseek{"deepseek-v3 H7168 I2048 E256 top8", 7168, 2048, 256, 8};
      const MoeShape mixtral{"mixtral H4096 I14336 E8 top2", 4096, 14336, 8, 2};
      run("fused_moe deepseek bf16", [&] { bench_moe_shape(*rt, device, iters, deepseek, MoeQuantization::none, moe_tokens, ceiling, moe_tune); });
      if (info.cc_major == 9)
        run("fused_moe deepseek fp8 block-scale", [&] {
          bench_moe_shape(*rt, device, iters, deepseek, MoeQuantization::deepseek_fp8_block_scale, moe_tokens, ceiling, moe_tune);
        });
      run("fused_moe mixtral bf16", [&] { bench_moe_shape(*rt, device, iters, mixtral, MoeQuantization::none, moe_tokens, ceiling, moe_tune); });
    }
  }));
}

}  // namespace flashcpp::cli
