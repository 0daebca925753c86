// The flashcpp-llm engine: runs a Model (model.hpp) over a paged KV cache for several sequences at once.
//
// A forward step takes any mix of sequences, each with one or more new tokens (a prompt, a chunk of one, or the
// token a decode step sampled): their keys and values are appended to the sequences' pages and the step returns
// logits for each sequence's last new token (or for all of them). A step whose sequences all bring one token runs
// FlashInfer's batch decode; any other runs its batch prefill (causal, paged). Both are planned once per step
// (plan/run) and shared by every layer.
//
// Backends: gpu runs every op through flashcpp (RMSNorm, RoPE, paged KV append, batch prefill / decode, SiLU-and-mul,
// the sampler) and the GEMMs through cuBLASLt, in the model's 16-bit type (f16 or bf16) with f32 accumulation,
// asynchronously on the engine's stream; with cuda_graphs a decode step of a batch size it has seen is replayed as
// one CUDA graph. reference runs the same
// step on the CPU with flashcpp's float64 reference ops and f32 activations (GEMMs in f32): slow, and independent of
// the GPU.
//
// KV pages come from a fixed pool (EngineOptions::max_pages); close_sequence returns a sequence's pages.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model.hpp"

namespace flashcpp::llm {

enum class Backend { gpu, reference };

struct EngineOptions {
  Backend backend = Backend::gpu;
  int device = 0;
  int64_t page_size = 16;
  int64_t max_pages = 8192;        ///< KV pool, pages of page_size tokens
  int64_t max_batch = 64;          ///< sequences in one step
  int64_t max_step_tokens = 4096;  ///< new tokens in one step
  int64_t max_logit_rows = 1024;   ///< logit rows one step may return (all_logits)
  bool cuda_graphs = true;         ///< gpu: replay decode steps as CUDA graphs
  /// gpu: programmatic dependent launch for the FlashInfer kernels that take it (norms, activation, attention): each
  /// may start while the previous kernel drains (Hopper and newer).
  bool pdl = true;
  /// gpu: decode steps of at most this many tokens (0..kDecodeLinearMaxTokens, 8) run their linear layers as fused
  /// kernels (decode_linear.hpp: 5 kernels a layer instead of 10); larger steps, and every step with 0, run them as the
  /// prefill does (cuBLASLt GEMMs and FlashInfer's norm/RoPE/append/activation kernels). The fused kernels' time grows
  /// with the tokens (each warp's dot products run token by token) while cuBLASLt's barely does: H200, 2026-12-04,
  /// SmolLM2 f16, CUDA graphs, a step of 1 / 2 / 3 / 4 / 8 tokens: fused 870 / 996 / 1104 / 1222 / 1984 us, the
  /// cuBLASLt path 1226 / 1231 / 1245 / 1257 / 1254, so they cross between 4 and 5 tokens.
  int64_t fused_decode_max_tokens = 4;
  /// gpu: decode attention on FlashInfer's tensor-core path (its fa2 prefill kernel, one query a request) with
  /// split-KV off (BatchDecodeConfig::disable_split_kv): one attention kernel a layer and no merge. The default
  /// CUDA-core decode plan splits short contexts too and merges them (30 merge kernels of a batch-1 step's 154, 118 µs
  /// of kernel time alone, docs/PERFORMANCE.md); off until measured against it.
  bool decode_unsplit = false;
  /// gpu: decode steps of at most kDecodeStepMaxTokens (4) tokens run as one persistent kernel (decode_step.hpp: every
  /// layer, attention included, and the LM head, phases separated by grid-wide barriers) instead of 5 kernels a layer
  /// plus FlashInfer's decode plan and merges. For models it supports (head_dim 64, hidden and heads * head_dim up to
  /// 768, FFN up to 1536: SmolLM2); others, and larger steps, take the paths above. On: faster than the fused kernels
  /// at 1, 2 and 4 tokens (docs/PERFORMANCE.md, "flashcpp-llm").
  bool persistent_decode = true;
  /// gpu: time each step's device work (index upload to the last kernel) with CUDA events: last_step_gpu_us.
  bool time_steps = false;
};

/// One sequence's part of a step.
struct StepInput {
  int sequence = -1;
  std::span<const int32_t> tokens;  ///< >= 1 new tokens, each in [0, vocab)
  bool all_logits = false;          ///< logits of every new token, else of the last only
};

/// How a step picks each sequence's next token (on the backend, from the last row's logits).
struct SamplerOptions {
  bool greedy = true;
  int64_t top_k = 50;
  double top_p = 0.9;
  uint64_t seed = 0;
};

class Engine {
 public:
  Engine(const Model& model, const EngineOptions& options);
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

  /// A new empty sequence; invalid_argument when all max_batch * 4 slots are open.
  int open_sequence();
  /// Returns its pages to the pool; invalid_argument for a sequence that is not open.
  void close_sequence(int sequence);
  int64_t length(int sequence) const;
  int64_t free_pages() const;

  /// One step; returns f32 logits [rows][vocab], rows in the order of `batch` (each entry's last token, or all of its
  /// tokens when all_logits). Validated first (sequences open and distinct, tokens in range, sizes within the
  /// options, enough free pages): on error nothing is appended.
  std::vector<float> forward(std::span<const StepInput> batch);
  /// One step that returns only each entry's next token (sampled from its last token's logits on the backend).
  std::vector<int32_t> forward_sample(std::span<const StepInput> batch, const SamplerOptions& sampler);

  /// Kernel launches of the last step (gpu; 0 for reference) and whether it was a graph replay.
  int64_t last_step_launches() const;
  bool last_step_replayed() const;
  /// How the last step ran: "prefill", or a decode step's "persistent", "fused" or "unfused" (cuBLASLt and FlashInfer)
  /// path (gpu; "none" before its first step and on the reference backend).
  const char* last_step_path() const;
  /// Where the last step's time went (gpu with time_steps; else zeros): plan_us, the host's attention planning
  /// (FlashInfer's plan, its workspace upload included); gpu_us, the device's span from the index upload to the last
  /// kernel (host planning inside it shows as idle time).
  struct StepTiming {
    double plan_us = 0, gpu_us = 0;
  };
  StepTiming last_step_timing() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashcpp::llm
