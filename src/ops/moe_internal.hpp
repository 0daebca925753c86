// What moe.cpp (validation, the runner, run()) and moe_tune.cpp (tactics: tune(), set_tactics, auto_tune's
// record) share: the runner's state, the token-count buckets, and run()'s entry into auto-tuning.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ffi/ffi.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/moe.hpp"

namespace flashcpp {

struct FusedMoeRunner::State {
  // Declaration order matters (members die in reverse): the runner object's deleter lives in the module, so the
  // module library is declared first and destroyed last. The runner keeps the profiler workspace tune() had
  // allocated, which the allocator frees on tune_stream (the stream it came from) when the runner dies: the
  // stream is declared before the runner, so it outlives it.
  std::shared_ptr<ffi::ModuleLibrary> lib;
  std::optional<Stream> tune_stream;  // the runner's own stream for FlashInfer's profiler, made by the first tune()
  ffi::Module runner;
  ffi::Function run_moe;
  FusedMoeConfig config;
  std::string uri;
  // Tactics per token-count bucket (log2 of the next power of two), with the profile_ids Array run_moe takes,
  // built once. `shapes`: those tune() chose (or set_tactics set) for one problem shape, which only calls of
  // that shape use (a runner shared by several models keeps each model's); `any`: those set_tactics(tokens, t)
  // set for every shape that has none of its own in the bucket. Neither: None, the runner's defaults.
  struct Tuned {
    MoeTactics tactics;
    ffi::ObjectRef profile_ids;
  };
  struct Bucket {
    std::optional<Tuned> any;
    std::vector<std::pair<MoeProblemShape, Tuned>> shapes;  // a few shapes at most: searched linearly
    // What a call of `shape` in this bucket uses: its shape's tactics, else `any`'s, else none.
    const Tuned* find(const MoeProblemShape& shape) const {
      for (const auto& [sh, t] : shapes)
        if (sh == shape) return &t;
      return any ? &*any : nullptr;
    }
  };
  mutable std::mutex tuned_mu;
  std::array<Bucket, 64> tuned;
  // One tune() at a time: the profiler's prepared shapes and workspace are the runner's; guards tune_stream.
  std::mutex tune_mu;
  // auto_tune's record of tactics (moe-tactics/<file>.json in the cache; empty: kept in memory only), decided on
  // the first untuned call (it hashes the module). Guarded by tune_mu.
  std::optional<std::filesystem::path> tactics_file;
  std::string module_sha256;
};

namespace ops {

/// The tactics bucket of a call of `tokens` tokens: log2 of the next power of two (at most 63).
inline size_t token_bucket(int64_t tokens) {
  size_t b = 0;
  while (b < 63 && (int64_t{1} << b) < tokens) ++b;
  return b;
}

// Whether `stream` is capturing a CUDA graph (then nothing may be tuned: it would synchronize).
bool stream_capturing(cudaStream_t stream);
// run()'s first call of an untuned bucket and shape (FusedMoeConfig::auto_tune): the recorded tactics, else tune()
// and record them.
void auto_tune(FusedMoeRunner::State& s, const FusedMoeTensors& a, const FusedMoeOptions& o,
               const MoeProblemShape& shape, cudaStream_t stream);

}  // namespace ops
}  // namespace flashcpp
