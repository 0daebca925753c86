// Continuous batching over an Engine, and the benchmark of flashcpp-llm.
//
// generate() runs several prompts at once: every step carries the running sequences' last tokens (one each) and, while
// there is room (max_batch sequences, max_step_tokens tokens, KV pages for each admitted prompt's whole length), the
// prompts waiting to start, whole. A sequence that reaches its token budget or the end token leaves at once and its
// pages go back to the pool, so the next prompt can start in the following step. Steps with no prompt admitted are
// pure decode steps (CUDA-graph replays on the GPU).
#pragma once
#include <cstdint>
#include <vector>

#include "engine.hpp"

namespace flashcpp::llm {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  int32_t eos_id = -1;  ///< a sequence ends after this token (included); -1: only the budget ends it
  SamplerOptions sampler;
  int64_t max_batch = 64;         ///< at most the engine's max_batch
  int64_t max_step_tokens = 4096; ///< at most the engine's max_step_tokens
  int64_t page_size = 16;         ///< the engine's page size (for the admission's page count)
};

struct GenerateResult {
  std::vector<std::vector<int32_t>> tokens;  ///< generated ids per prompt, in prompt order
  int64_t steps = 0;
  double seconds = 0;
};

GenerateResult generate(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options);

struct BenchOptions {
  bool prefill = true;                          ///< 1 x 512 and 8 x 512 prompt tokens
  std::vector<int64_t> decode_batches{1, 8, 64};  ///< after 128-token prompts
  int64_t decode_steps = 40;                    ///< timed from the 6th
  int64_t max_step_tokens = 4096;               ///< the engine's: the decode prompts are prefilled in steps of this
};

/// Prefill and decode throughput, one `LLM_BENCH {json}` line per case on stdout. step_us is a step's host time
/// (planning, upload, the kernels or the graph replay, the copy back); gpu_us and plan_us are Engine::StepTiming's
/// (the engine must have time_steps); decode lines also carry floor_us, the larger of the weights' bytes over the copy
/// bandwidth measured in the same run and the step's kernel count x 0.59 us. Returns the exit status (3: no GPU backend).
int run_bench(Engine& engine, const Model& model, const BenchOptions& options);

}  // namespace flashcpp::llm
