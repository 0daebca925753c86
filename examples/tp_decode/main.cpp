// flashcpp_tp_decode: one tensor-parallel decode step across N GPUs (RMSNorm, per-head RMSNorm, paged
// batch decode and sparse MLA decode with flashcpp on each GPU's head shard, outputs combined with
// ncclAllGather), checked against the same step on one GPU.
//
//   flashcpp_tp_decode --gpus 2 [--batch 8] [--kv-len 1000] [--iters 20] [--no-mla] [--seed 1]
//
// Exit status 0 when the N-GPU step matches the one-GPU step within tolerance, 1 when it does not,
// 2 on an error. NCCL_NVLS_ENABLE=0 is set in the process before the communicators are created.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <vector>

#include "flashcpp/cuda.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/runtime.hpp"
#include "tp_decode.hpp"

int main(int argc, char** argv) {
  CLI::App app{"flashcpp tensor-parallel decode step over NCCL, compared with one GPU"};
  int gpus = 0, iters = 20;
  int64_t batch = 8, kv_len = 1000;
  uint64_t seed = 1;
  bool no_mla = false;
  app.add_option("--gpus", gpus, "GPUs to shard the heads over (default: every visible GPU)");
  app.add_option("--batch", batch, "requests in the decode batch")->check(CLI::PositiveNumber);
  app.add_option("--kv-len", kv_len, "tokens of the longest request's KV cache")->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "timed steps after one warm-up step")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "input seed");
  app.add_flag("--no-mla", no_mla, "skip the sparse MLA decode part");
  CLI11_PARSE(app, argc, argv);

  try {
    const int visible = flashcpp::cuda_device_count();
    if (gpus == 0) gpus = visible;
    if (visible == 0) {
      std::fprintf(stderr, "flashcpp_tp_decode: no CUDA device is visible\n");
      return 2;
    }
    if (gpus < 1 || gpus > visible) {
      std::fprintf(stderr, "flashcpp_tp_decode: --gpus %d, but %d CUDA device(s) are visible\n", gpus, visible);
      return 2;
    }
    std::vector<int> devices;
    for (int i = 0; i < gpus; ++i) devices.push_back(i);

    flashcpp::tp::StepShape shape;
    shape.batch = batch;
    shape.max_kv_len = kv_len;
    shape.mla = !no_mla;
    const auto inputs = flashcpp::tp::make_inputs(shape, seed);
    auto rt = flashcpp::Runtime::create();

    std::printf("flashcpp_tp_decode: %d GPU(s) [%s], batch %lld, kv up to %lld tokens, %lld q / %lld kv heads x %lld, "
                "sparse MLA %s\n",
                gpus, flashcpp::device_facts(0).name.c_str(), static_cast<long long>(batch),
                static_cast<long long>(kv_len), static_cast<long long>(shape.num_qo_heads),
                static_cast<long long>(shape.num_kv_heads), static_cast<long long>(shape.head_dim),
                shape.mla ? ("h_q " + std::to_string(shape.mla_heads) + " = " + std::to_string(gpus) + " x " +
                             std::to_string(shape.mla_heads / gpus) + ", topk " + std::to_string(shape.mla_topk))
                                .c_str()
                          : "off");
    const auto one = flashcpp::tp::run_single_gpu(*rt, inputs, devices[0]);
    const auto tp = flashcpp::tp::run_tensor_parallel(*rt, inputs, devices, iters);
    std::printf("NCCL %s (NCCL_NVLS_ENABLE=0), %.3f ms per tensor-parallel step (compute + all-gather, %d steps)\n",
                tp.nccl_version.c_str(), tp.ms_per_step, iters);

    // Tolerances: the shards run the same kernels on fewer heads, so only the split-KV schedule (and
    // with it the order of the partial-result merge) differs: a few bf16 ulps.
    const auto attn = flashcpp::tp::compare_bf16(tp.out.attn, one.attn, 2e-3, 1e-2);
    std::printf("attention [%lld x %lld x %lld]: %s\n", static_cast<long long>(batch),
                static_cast<long long>(shape.num_qo_heads), static_cast<long long>(shape.head_dim),
                attn.describe().c_str());
    bool ok = attn.bad == 0 && tp.ranks_agree;
    if (shape.mla) {
      const auto m = flashcpp::tp::compare_bf16(tp.out.mla, one.mla, 2e-3, 1e-2);
      std::printf("sparse MLA [%lld x 1 x %lld x 512]: %s\n", static_cast<long long>(batch),
                  static_cast<long long>(shape.mla_heads), m.describe().c_str());
      ok = ok && m.bad == 0;
    }
    if (!tp.ranks_agree) std::printf("ranks received different all-gather results\n");
    std::printf("%s: the %d-GPU step %s the one-GPU step\n", ok ? "PASS" : "FAIL", gpus, ok ? "matches" : "differs from");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashcpp_tp_decode: %s\n", e.what());
    return 2;
  }
}
