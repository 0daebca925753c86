#include "generate.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <random>
#include <span>
#include <string>

#include "flashcpp/cuda.hpp"
#include "flashcpp/error.hpp"

namespace flashcpp::llm {
namespace {

using Clock = std::chrono::steady_clock;

int64_t pages_for(int64_t tokens, int64_t page_size) { return (tokens + page_size - 1) / page_size; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

GenerateResult generate(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o) {
  if (o.max_new_tokens < 1) throw_error(ErrorCode::invalid_argument, "generate: max_new_tokens must be >= 1");
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw_error(ErrorCode::invalid_argument, "generate: prompt " + std::to_string(i) + " is empty");
    if (static_cast<int64_t>(prompts[i].size()) > o.max_step_tokens)
      throw_error(ErrorCode::invalid_argument, "generate: prompt " + std::to_string(i) + " has " +
                                                   std::to_string(prompts[i].size()) + " tokens; max_step_tokens is " +
                                                   std::to_string(o.max_step_tokens));
  }
  struct Running {
    size_t prompt;
    int sequence;
    int64_t pages;  // reserved for its whole length
  };
  GenerateResult r;
  r.tokens.resize(prompts.size());
  std::deque<size_t> waiting;
  for (size_t i = 0; i < prompts.size(); ++i) waiting.push_back(i);
  std::vector<Running> running;
  const auto start = Clock::now();
  while (!waiting.empty() || !running.empty()) {
    std::vector<StepInput> batch;
    std::vector<std::vector<int32_t>> last(running.size());
    for (size_t i = 0; i < running.size(); ++i) {
      last[i] = {r.tokens[running[i].prompt].back()};
      batch.push_back({running[i].sequence, last[i], false});
    }
    int64_t step_tokens = static_cast<int64_t>(running.size());
    while (!waiting.empty() && static_cast<int64_t>(batch.size()) < o.max_batch) {
      const std::vector<int32_t>& p = prompts[waiting.front()];
      const int64_t need = pages_for(static_cast<int64_t>(p.size()) + o.max_new_tokens, o.page_size);
      // Pages the running sequences will still take (their reservations less what they hold).
      int64_t outstanding = 0;
      for (const Running& q : running) outstanding += q.pages - pages_for(engine.length(q.sequence), o.page_size);
      if (step_tokens + static_cast<int64_t>(p.size()) > o.max_step_tokens || need > engine.free_pages() - outstanding)
        break;
      const int seq = engine.open_sequence();
      running.push_back({waiting.front(), seq, need});
      batch.push_back({seq, p, false});
      step_tokens += static_cast<int64_t>(p.size());
      waiting.pop_front();
    }
    if (batch.empty())
      throw_error(ErrorCode::invalid_argument, "generate: prompt " + std::to_string(waiting.front()) +
                                                   " needs more KV pages than the engine has");
    const std::vector<int32_t> next = engine.forward_sample(batch, o.sampler);
    ++r.steps;
    std::vector<Running> still;
    for (size_t i = 0; i < running.size(); ++i) {
      std::vector<int32_t>& out = r.tokens[running[i].prompt];
      out.push_back(next[i]);
      const bool done = static_cast<int64_t>(out.size()) >= o.max_new_tokens || (o.eos_id >= 0 && next[i] == o.eos_id);
      if (done) {
        engine.close_sequence(running[i].sequence);
      } else {
        still.push_back(running[i]);
      }
    }
    running = std::move(still);
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

namespace {

// Device-to-device copy bandwidth (read + write bytes per second) of a 1 GiB buffer, the best of 5.
double copy_bandwidth(int device) {
  DeviceGuard guard(device);
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer a(bytes, device), b(bytes, device);
  Stream st(device);
  Event e0, e1;
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    e0.record(st);
    FLASHCPP_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, st));
    e1.record(st);
    st.synchronize();
    const double ms = e1.elapsed_ms_since(e0);
    if (i > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / (ms * 1e-3));
  }
  return best;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = d(rng);
  return v;
}

}  // namespace

int run_bench(Engine& engine, const Model& model, const BenchOptions& o) {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "flashcpp-llm bench: no GPU\n");
    return 3;
  }
  const ModelConfig& c = model.config;
  std::mt19937 rng(1234);
  const double bw = copy_bandwidth(0);
  const SamplerOptions greedy;
  // Prefill: prompts of 512 tokens, timed from the host (planning, upload, every layer, the sampler, the copy back).
  for (int64_t batch : {int64_t{1}, int64_t{8}}) {
    if (!o.prefill) break;
    std::vector<double> secs, gpu, plan;
    for (int rep = 0; rep < 6; ++rep) {
      std::vector<std::vector<int32_t>> prompts;
      std::vector<StepInput> in;
      for (int64_t i = 0; i < batch; ++i) prompts.push_back(random_tokens(512, c.vocab, rng));
      for (int64_t i = 0; i < batch; ++i) in.push_back({engine.open_sequence(), prompts[static_cast<size_t>(i)], false});
      const auto t0 = Clock::now();
      (void)engine.forward_sample(in, greedy);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep > 0) {
        secs.push_back(s);
        gpu.push_back(engine.last_step_timing().gpu_us);
        plan.push_back(engine.last_step_timing().plan_us);
      }
      for (const StepInput& e : in) engine.close_sequence(e.sequence);
    }
    const double s = median(secs);
    std::printf("LLM_BENCH {\"op\":\"prefill\",\"batch\":%lld,\"prompt\":512,\"step_us\":%.1f,\"gpu_us\":%.1f,"
                "\"plan_us\":%.1f,\"tokens_per_s\":%.0f,\"dtype\":\"%s\"}\n",
                static_cast<long long>(batch), s * 1e6, median(gpu), median(plan), static_cast<double>(batch * 512) / s,
                std::string(dtype_name(model.dtype)).c_str());
  }
  // Decode: batch sequences of 128 prompt tokens (prefilled in steps of at most max_step_tokens), then decode_steps
  // steps of one token each (graph replays after the first).
  const int64_t prompt = 128;
  for (int64_t batch : o.decode_batches) {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<StepInput> in;
    for (int64_t i = 0; i < batch; ++i) prompts.push_back(random_tokens(prompt, c.vocab, rng));
    for (int64_t i = 0; i < batch; ++i) in.push_back({engine.open_sequence(), prompts[static_cast<size_t>(i)], false});
    std::vector<int32_t> next;
    const size_t per_step = static_cast<size_t>(std::max<int64_t>(1, o.max_step_tokens / prompt));
    for (size_t first = 0; first < in.size(); first += per_step) {
      const size_t n = std::min(per_step, in.size() - first);
      const std::vector<int32_t> part = engine.forward_sample(std::span(in).subspan(first, n), greedy);
      next.insert(next.end(), part.begin(), part.end());
    }
    std::vector<std::vector<int32_t>> one(static_cast<size_t>(batch));
    std::vector<double> secs, gpu, plan;
    bool replayed = true;
    for (int64_t step = 0; step < o.decode_steps; ++step) {
      for (int64_t i = 0; i < batch; ++i) {
        one[static_cast<size_t>(i)] = {next[static_cast<size_t>(i)]};
        in[static_cast<size_t>(i)].tokens = one[static_cast<size_t>(i)];
      }
      const auto t0 = Clock::now();
      next = engine.forward_sample(in, greedy);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (step >= 5) {
        secs.push_back(s);
        gpu.push_back(engine.last_step_timing().gpu_us);
        plan.push_back(engine.last_step_timing().plan_us);
        replayed = replayed && engine.last_step_replayed();
      }
    }
    const double s = secs.empty() ? 0 : median(secs);
    const int64_t launches = engine.last_step_launches();
    const double weights_us = static_cast<double>(model.weight_bytes_per_step()) / bw * 1e6;
    const double floor_us = std::max(weights_us, static_cast<double>(launches) * 0.59);
    std::printf("LLM_BENCH {\"op\":\"decode\",\"batch\":%lld,\"context\":%lld,\"step_us\":%.1f,\"gpu_us\":%.1f,"
                "\"plan_us\":%.1f,\"tokens_per_s\":%.0f,\"floor_us\":%.1f,\"weights_floor_us\":%.1f,\"kernels\":%lld,"
                "\"graph_replay\":%s,\"copy_gb_s\":%.0f,\"step_over_floor\":%.2f,\"dtype\":\"%s\",\"path\":\"%s\"}\n",
                static_cast<long long>(batch), static_cast<long long>(prompt + o.decode_steps), s * 1e6,
                gpu.empty() ? 0.0 : median(gpu), plan.empty() ? 0.0 : median(plan),
                s > 0 ? static_cast<double>(batch) / s : 0.0, floor_us, weights_us,
                static_cast<long long>(launches), replayed ? "true" : "false", bw / 1e9, s * 1e6 / floor_us,
                std::string(dtype_name(model.dtype)).c_str(), engine.last_step_path());
    std::fflush(stdout);
    for (const StepInput& e : in) engine.close_sequence(e.sequence);
  }
  return 0;
}

}  // namespace flashcpp::llm
