// `flashcpp bench-mla-gdn-moe`: kernel time (CUDA events, median), TFLOP/s and host time per call of batch MLA,
// GDN prefill and the CUTLASS fused MoE at the GPU-test sizes. Inputs are larger than L2 where the op
// allows (MLA KV 32×2048×576 bf16 = 75 MiB; MoE weights 64 experts × 12 MiB).
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

/// Device buffer of `n` bf16 values drawn from U(-scale, scale).
DeviceBuffer random_bf16(size_t n, float scale, std::mt19937& rng, int device) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<uint16_t> h(n);
  for (auto& x : h) {
    float f = u(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
  }
  DeviceBuffer d(n * 2, device);
  FLASHCPP_CUDA_CHECK(cudaMemcpy(d.get(), h.data(), n * 2, cudaMemcpyHostToDevice));
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
  auto qn = random_bf16(B * H * 512, 1, rng, device), qp = random_bf16(B * H * 64, 1, rng, device);
  auto ckv = random_bf16(pages * P * 512, 1, rng, device), kpe = random_bf16(pages * P * 64, 1, rng, device);
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
  std::mt19937 rng(2);
  const float s = 1.0f / std::sqrt(float(D));
  auto q = random_bf16(T * H * D, s, rng, device), k = random_bf16(T * H * D, s, rng, device),
       v = random_bf16(T * H * D, 1, rng, device);
  DeviceBuffer out(T * H * D * 2, device), state(N * H * D * D * 4, device);
  auto cu_d = upload(cu, device);
  const Device dev = Device::cuda(device);
  GdnPrefillArgs a;
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

void bench_moe(const Runtime& rt, int device, int iters) {
  const int64_t T = 256, E = 64, K = 8, Hd = 2048, I = 1024, N1 = 2 * I;
  std::mt19937 rng(3);
  auto x = random_bf16(T * Hd, 1, rng, device), w1 = random_bf16(E * N1 * Hd, 0.02f, rng, device),
       w2 = random_bf16(E * Hd * I, 0.03f, rng, device);
  DeviceBuffer out(T * Hd * 2, device);
  std::vector<int32_t> sel(T * K);
  std::vector<float> sc(T * K, 1.0f / K);
  std::vector<int32_t> ids(E);
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(ids.begin(), ids.end(), rng);
    std::copy(ids.begin(), ids.begin() + K, sel.begin() + t * K);
  }
  auto sel_d = upload(sel, device);
  auto sc_d = upload(sc, device);
  const Device dev = Device::cuda(device);
  FusedMoeArgs a;
  a.input = TensorView::contiguous(x.get(), DType::bf16, dev, {T, Hd});
  a.output = TensorView::contiguous(out.get(), DType::bf16, dev, {T, Hd});
  a.token_selected_experts = TensorView::contiguous(sel_d.get(), DType::i32, dev, {T, K});
  a.token_final_scales = TensorView::contiguous(sc_d.get(), DType::f32, dev, {T, K});
  a.fc1_weights = TensorView::contiguous(w1.get(), DType::bf16, dev, {E, N1, Hd});
  a.fc2_weights = TensorView::contiguous(w2.get(), DType::bf16, dev, {E, Hd, I});
  FusedMoeConfig cfg;
  cfg.device = device;
  auto runner = FusedMoeRunner::shared(rt, cfg);
  Stream stream(device);
  const auto before = ffi::allocator_stats();
  const Timing t = measure([&](cudaStream_t s) { runner->run(a, s); }, stream, 5, iters);
  const auto after = ffi::allocator_stats();
  report("fused_moe bf16 T256 E64 top8 H2048 I1024", 2.0 * T * K * (Hd * N1 + I * Hd), t);
  std::printf("  tensor allocator: %.1f device allocations per call (pooled cudaMallocAsync, no cudaMalloc)\n",
              double(after.device_allocations - before.device_allocations) / double(iters + 5));
}

}  // namespace

void add_bench_mla_gdn_moe_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-mla-gdn-moe", "Benchmark batch MLA, GDN prefill and the fused MoE on the GPU");
  static std::string op = "all";
  static int iters = 50, device = 0;
  cmd->add_option("--op", op, "mla, gdn, moe or all")->check(CLI::IsMember({"mla", "gdn", "moe", "all"}));
  cmd->add_option("--iters", iters, "timed iterations (median reported)")->check(CLI::Range(1, 100000));
  cmd->add_option("--device", device, "CUDA device");
  cmd->callback(checked([] {
    if (cuda_device_count() == 0) throw Error(ErrorCode::unsupported, "bench-mla-gdn-moe needs a CUDA GPU; none was found");
    DeviceGuard guard(device);
    const DeviceInfo& info = device_info(device);
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
    if (op == "moe" || op == "all") run("fused_moe", [&] { bench_moe(*rt, device, iters); });
  }));
}

}  // namespace flashcpp::cli
