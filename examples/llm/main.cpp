// flashcpp-llm: generate text with a GGUF Llama-family model on flashcpp, score token sequences (teacher-forced
// logits, for verification against another implementation), or benchmark prefill and decode.
//
//   flashcpp-llm generate --model M.gguf --prompt "..." [--chat] [--max-tokens N] [--sample --top-k K --top-p P]
//   flashcpp-llm generate --model M.gguf --ids PROMPTS.json --out GEN.json --max-tokens N      (several at once)
//   flashcpp-llm score --model M.gguf --ids IDS.json --logits OUT.f32
//   flashcpp-llm bench --model M.gguf [--no-prefill] [--decode-batch B ...] [--steps N]
// --backend reference runs the CPU reference instead of the GPU; --dtype bf16 computes in bf16 instead of f16.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "engine.hpp"
#include "flashcpp/error.hpp"
#include "generate.hpp"
#include "gguf.hpp"
#include "model.hpp"
#include "tokenizer.hpp"

using namespace flashcpp;
using namespace flashcpp::llm;

namespace {

std::vector<std::vector<int32_t>> read_sequences(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorCode::io_error, "cannot open '" + path + "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw_error(ErrorCode::invalid_argument, "'" + path + "' is not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("sequences") || !j["sequences"].is_array())
    throw_error(ErrorCode::invalid_argument, "'" + path + "' must be an object with an array 'sequences'");
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : j["sequences"]) {
    if (!s.is_array() || s.empty())
      throw_error(ErrorCode::invalid_argument, "'" + path + "': every sequence must be a non-empty array of ids");
    std::vector<int32_t> ids;
    for (const auto& v : s) {
      if (!v.is_number_integer()) throw_error(ErrorCode::invalid_argument, "'" + path + "': ids must be integers");
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id > INT32_MAX) throw_error(ErrorCode::invalid_argument, "'" + path + "': id out of range");
      ids.push_back(static_cast<int32_t>(id));
    }
    out.push_back(std::move(ids));
  }
  return out;
}

bool no_pdl = false, no_graphs = false, no_fused = false, decode_unsplit = false,
     persistent_decode = EngineOptions{}.persistent_decode, time_steps = false;
int64_t fused_decode_max_tokens = EngineOptions{}.fused_decode_max_tokens;

EngineOptions engine_options(const std::string& backend) {
  EngineOptions o;
  o.time_steps = time_steps;
  o.pdl = !no_pdl;
  o.cuda_graphs = !no_graphs;
  o.fused_decode_max_tokens = no_fused ? 0 : fused_decode_max_tokens;
  o.decode_unsplit = decode_unsplit;
  o.persistent_decode = persistent_decode;
  o.backend = backend == "reference" ? Backend::reference : Backend::gpu;
  if (o.backend == Backend::reference) o.max_pages = 512;  // 8192 tokens of f32 KV on the host
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flashcpp-llm: a small engine running a GGUF Llama-family model on flashcpp"};
  app.require_subcommand(1);
  std::string model_path, backend = "gpu", dtype = "f16";
  auto common = [&](CLI::App* c) {
    c->add_option("--model", model_path, "the GGUF file")->required();
    c->add_option("--backend", backend, "gpu or reference (the CPU reference)")->check(CLI::IsMember({"gpu", "reference"}));
    c->add_flag("--no-pdl", no_pdl, "gpu: no programmatic dependent launch");
    c->add_flag("--no-graphs", no_graphs, "gpu: no CUDA-graph replay of decode steps");
    c->add_flag("--no-fused", no_fused, "gpu: decode steps without the fused linear-layer kernels");
    c->add_flag("--decode-unsplit", decode_unsplit,
                "gpu: decode attention on the tensor-core path with split-KV off (no merge kernels)");
    c->add_flag("--persistent-decode,!--no-persistent-decode", persistent_decode,
                "gpu: decode steps of at most 4 tokens as one persistent kernel, every layer and the LM head (default "
                "on; --no-persistent-decode: 5 kernels a layer)");
    c->add_option("--fused-decode-tokens", fused_decode_max_tokens,
                  "gpu: decode steps of at most this many tokens use the fused kernels (0..8)")
        ->check(CLI::Range(0, 8));
    c->add_option("--dtype", dtype, "weights and activations: f16 (default) or bf16")->check(CLI::IsMember({"f16", "bf16"}));
  };

  CLI::App* gen = app.add_subcommand("generate", "generate text (greedy unless --sample)");
  common(gen);
  std::string prompt, ids_path, out_path;
  bool chat = false, sample = false;
  int64_t max_tokens = 64, top_k = 50;
  double top_p = 0.9;
  uint64_t seed = 0;
  gen->add_option("--prompt", prompt, "the prompt text");
  gen->add_flag("--chat", chat, "wrap the prompt in the model's chat template (one user message)");
  gen->add_option("--ids", ids_path, "JSON {\"sequences\": [[ids...], ...]}: several prompts, run together");
  gen->add_option("--out", out_path, "with --ids: where the generated ids go (JSON)");
  gen->add_option("--max-tokens", max_tokens, "tokens to generate per prompt")->check(CLI::Range(1, 1 << 20));
  bool greedy_flag = false;
  gen->add_flag("--greedy", greedy_flag, "greedy decoding (the default)");
  gen->add_flag("--sample", sample, "sample with top-k / top-p instead of greedy");
  gen->add_option("--top-k", top_k)->check(CLI::Range(1, 1 << 20));
  gen->add_option("--top-p", top_p)->check(CLI::Range(0.0, 1.0));
  gen->add_option("--seed", seed);

  CLI::App* score = app.add_subcommand("score", "teacher-forced logits of token sequences");
  common(score);
  std::string logits_path;
  score->add_option("--ids", ids_path, "JSON {\"sequences\": [[ids...], ...]}")->required();
  score->add_option("--logits", logits_path, "raw little-endian f32 logits [sum of lengths][vocab]")->required();

  CLI::App* bench = app.add_subcommand("bench", "prefill and decode throughput (LLM_BENCH json lines)");
  common(bench);
  BenchOptions bench_opt;
  bool no_prefill = false;
  std::vector<int64_t> decode_batches;
  bench->add_flag("--no-prefill", no_prefill, "only the decode cases");
  bench->add_option("--decode-batch", decode_batches, "decode batch sizes (default 1 8 64)")->check(CLI::Range(1, 64));
  bench->add_option("--steps", bench_opt.decode_steps, "decode steps per batch size (timed from the 6th)")
      ->check(CLI::Range(6, 100000));

  CLI11_PARSE(app, argc, argv);
  try {
    const GgufFile file = GgufFile::open(model_path);
    const Model model = Model::load(file, dtype == "bf16" ? DType::bf16 : DType::f16);
    time_steps = bench->parsed();
    const EngineOptions engine_opt = engine_options(backend);
    Engine engine(model, engine_opt);
    if (*score) {
      const auto seqs = read_sequences(ids_path);
      std::ofstream out(logits_path, std::ios::binary | std::ios::trunc);
      if (!out) throw_error(ErrorCode::io_error, "cannot write '" + logits_path + "'");
      for (const auto& ids : seqs) {
        const int seq = engine.open_sequence();
        const StepInput in{seq, ids, true};
        const std::vector<float> logits = engine.forward({&in, 1});
        out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
        engine.close_sequence(seq);
      }
      if (!out.flush()) throw_error(ErrorCode::io_error, "writing '" + logits_path + "' failed");
      std::cout << nlohmann::json{{"sequences", seqs.size()}, {"vocab", model.config.vocab}}.dump() << "\n";
      return 0;
    }
    if (*gen) {
      GenerateOptions g;
      g.max_new_tokens = max_tokens;
      g.sampler.greedy = !sample;
      g.sampler.top_k = top_k;
      g.sampler.top_p = top_p;
      g.sampler.seed = seed;
      if (!ids_path.empty()) {
        const auto prompts = read_sequences(ids_path);
        g.eos_id = -1;  // exactly max_tokens each: what a comparison with another implementation needs
        const GenerateResult r = generate(engine, prompts, g);
        nlohmann::json j{{"sequences", r.tokens}, {"steps", r.steps}, {"seconds", r.seconds}};
        if (out_path.empty()) {
          std::cout << j.dump() << "\n";
        } else {
          std::ofstream o(out_path, std::ios::trunc);
          o << j.dump() << "\n";
          if (!o.flush()) throw_error(ErrorCode::io_error, "writing '" + out_path + "' failed");
        }
        return 0;
      }
      if (prompt.empty()) throw_error(ErrorCode::invalid_argument, "generate: --prompt or --ids is required");
      const Tokenizer tok = Tokenizer::from_gguf(file);
      const std::vector<int32_t> ids = tok.encode(chat ? tok.chat_prompt(prompt) : prompt);
      g.eos_id = chat ? tok.find_token("<|im_end|>") : tok.eos_id();
      GenerateResult r = generate(engine, {ids}, g);
      std::vector<int32_t>& out = r.tokens[0];
      if (!out.empty() && out.back() == g.eos_id) out.pop_back();  // the end token is not part of the answer
      std::cout << tok.decode(out) << "\n";
      std::fprintf(stderr, "flashcpp-llm: %zu prompt tokens, %zu generated in %.3f s\n", ids.size(), r.tokens[0].size(),
                   r.seconds);
      return 0;
    }
    if (*bench) {
      bench_opt.prefill = !no_prefill;
      if (!decode_batches.empty()) bench_opt.decode_batches = decode_batches;
      bench_opt.max_step_tokens = engine_opt.max_step_tokens;
      return run_bench(engine, model, bench_opt);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "flashcpp-llm: %s\n", e.what());
    return e.code() == ErrorCode::invalid_argument ? 2 : 1;
  }
  return 0;
}
