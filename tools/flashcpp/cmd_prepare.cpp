// `flashcpp prepare CONFIG.json`: the FlashInfer modules (and the options that pick them) a model's layers need,
// read from its Hugging Face config.json; printed, or with --prepare fetched or built now through
// Runtime::prepare, with progress.
#include <cstdio>
#include <string>
#include <vector>

#include "tools_internal.hpp"
#include "flashcpp/commands.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/jit.hpp"
#include "flashcpp/mla_attention.hpp"
#include "flashcpp/moe.hpp"
#include "flashcpp/runtime.hpp"

namespace flashcpp::cli {
namespace {

using nlohmann::json;

enum class Family { llama, qwen_dense, qwen_moe, deepseek_v3, deepseek_v32 };

struct Known {
  const char* architecture;
  const char* model_type;
  Family family;
  const char* name;
};
constexpr Known kKnown[] = {
    {"LlamaForCausalLM", "llama", Family::llama, "Llama 3"},
    {"Qwen2ForCausalLM", "qwen2", Family::qwen_dense, "Qwen 2"},
    {"Qwen3ForCausalLM", "qwen3", Family::qwen_dense, "Qwen 3"},
    {"Qwen2MoeForCausalLM", "qwen2_moe", Family::qwen_moe, "Qwen 2 MoE"},
    {"Qwen3MoeForCausalLM", "qwen3_moe", Family::qwen_moe, "Qwen 3 MoE"},
    {"DeepseekV3ForCausalLM", "deepseek_v3", Family::deepseek_v3, "DeepSeek V3"},
    {"DeepseekV32ForCausalLM", "deepseek_v32", Family::deepseek_v32, "DeepSeek V3.2"},
};

struct Module {
  std::string uri;
  std::string used_for;
};

struct Plan {
  std::string model;            // "Llama 3 (LlamaForCausalLM)"
  std::string dtype_name;       // "bf16"
  std::vector<std::string> options;  // what picked the modules
  std::vector<Module> modules;  // in first-use order, no duplicates
  std::vector<std::string> builtin;  // flashcpp's own kernels: nothing to fetch
  void add(std::string uri, std::string used_for) {
    for (Module& m : modules)
      if (m.uri == uri) {
        m.used_for += "; " + used_for;
        return;
      }
    modules.push_back({std::move(uri), std::move(used_for)});
  }
};

class ConfigReader {
 public:
  ConfigReader(json j, std::string file) : j_(std::move(j)), file_(std::move(file)) {}
  [[noreturn]] void fail(ErrorCode code, const std::string& key, const std::string& rule) const {
    throw_error(code, "flashcpp prepare: " + file_ + ": '" + key + "' " + rule);
  }
  // A positive integer field; `fallback` < 0: required.
  long positive(const char* key, long fallback = -1) const {
    if (!j_.contains(key) || j_.at(key).is_null()) {
      if (fallback < 0) fail(ErrorCode::invalid_argument, key, "is missing (a positive integer)");
      return fallback;
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<long long>() <= 0 || v.get<long long>() > (1LL << 30))
      fail(ErrorCode::invalid_argument, key, "must be a positive integer; got " + v.dump());
    return static_cast<long>(v.get<long long>());
  }
  std::string text(const char* key) const {
    if (!j_.contains(key)) return {};
    const json& v = j_.at(key);
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array() && !v.empty() && v.front().is_string()) return v.front().get<std::string>();
    fail(ErrorCode::invalid_argument, key, "must be a string or a list of strings; got " + v.dump());
  }
  bool flag(const char* key) const { return j_.contains(key) && j_.at(key).is_boolean() && j_.at(key).get<bool>(); }

 private:
  json j_;
  std::string file_;
};

DType model_dtype(const ConfigReader& c, std::string* name) {
  const std::string t = c.text("torch_dtype").empty() ? c.text("dtype") : c.text("torch_dtype");
  if (t.empty() || t == "bfloat16") {
    *name = "bf16";
    return DType::bf16;
  }
  if (t == "float16") {
    *name = "f16";
    return DType::f16;
  }
  c.fail(ErrorCode::unsupported, "torch_dtype", "must be bfloat16 or float16 for FlashInfer's attention modules; got '" + t + "'");
}

// The attention modules the ops pick automatically (src/ops/prefill.cpp, decode.cpp) for this head geometry.
void add_attention(Plan& p, const ConfigReader& c, DType dt, int sm, bool sliding_window) {
  const long qo = c.positive("num_attention_heads");
  const long kv = c.positive("num_key_value_heads", qo);
  const long hidden = c.positive("hidden_size");
  if (qo % kv != 0)
    c.fail(ErrorCode::invalid_argument, "num_key_value_heads",
           "must divide num_attention_heads (" + std::to_string(qo) + "); got " + std::to_string(kv));
  const long head_dim = c.positive("head_dim", hidden / qo);
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    c.fail(ErrorCode::unsupported, "head_dim", "(or hidden_size / num_attention_heads) must be 64, 128 or 256 for "
                                               "FlashInfer's attention modules; got " + std::to_string(head_dim));
  jit::AttentionSpec s;
  s.q = s.kv = s.o = dt;
  s.head_dim_qk = s.head_dim_vo = static_cast<int>(head_dim);
  s.use_sliding_window = sliding_window;
  const long group = qo / kv;
  const bool tensor_core_decode = group >= 4;  // decode_uses_tensor_cores, automatic
  p.options.push_back("attention: " + std::to_string(qo) + " query heads, " + std::to_string(kv) + " KV heads (group " +
                      std::to_string(group) + "), head dim " + std::to_string(head_dim) +
                      (sliding_window ? ", sliding window" : "") + "; decode on " +
                      (tensor_core_decode ? "tensor cores (the prefill module)" : "CUDA cores"));
  s.backend = sm == 90 ? jit::Backend::fa3 : jit::Backend::fa2;
  p.add(jit::batch_prefill_uri(s), std::string("prefill attention (") + (sm == 90 ? "fa3, Hopper" : "fa2") + ")");
  if (tensor_core_decode) {
    s.backend = jit::Backend::fa2;
    p.add(jit::batch_prefill_uri(s), "decode attention (tensor cores, fa2)");
  } else {
    p.add(jit::batch_decode_uri(s), "decode attention (CUDA cores)");
  }
}

void add_moe(Plan& p, const ConfigReader& c, const char* experts_key, int sm) {
  const long experts = c.positive(experts_key);
  const long topk = c.positive("num_experts_per_tok");
  p.options.push_back("MoE: " + std::to_string(experts) + " experts, top " + std::to_string(topk));
  const MoeBackend b = sm == 90 ? MoeBackend::sm90 : sm == 100 ? MoeBackend::sm100 : sm == 103 ? MoeBackend::sm103
                       : sm == 120 ? MoeBackend::sm120 : MoeBackend::automatic;
  if (b == MoeBackend::automatic) {
    p.options.push_back("MoE: no fused MoE module for sm" + std::to_string(sm) + " (sm90, sm100, sm103, sm120 have one)");
    return;
  }
  p.add(fused_moe_uri(b), "fused MoE experts");
}

Plan plan_for(const std::string& file, int sm) {
  // A regular file of at most 16 MiB read within 10 s (a FIFO is refused, not waited on), JSON at most 64 deep.
  const json j = load_json_file(file, "flashcpp prepare: config");
  if (!j.is_object()) throw_error(ErrorCode::invalid_argument, "flashcpp prepare: '" + file + "' must hold a JSON object");
  const ConfigReader c(j, file);
  const std::string arch = c.text("architectures"), type = c.text("model_type");
  const Known* known = nullptr;
  for (const Known& k : kKnown)
    if ((!arch.empty() && arch == k.architecture) || (arch.empty() && type == k.model_type)) known = &k;
  if (!known) {
    std::string names;
    for (const Known& k : kKnown) names += std::string(names.empty() ? "" : ", ") + k.architecture + " (" + k.model_type + ")";
    throw_error(ErrorCode::unsupported, "flashcpp prepare: " + file + " names architecture '" + arch + "' (model_type '" +
                                            type + "'), which flashcpp does not know; known: " + names);
  }
  Plan p;
  p.model = std::string(known->name) + " (" + known->architecture + ")";
  const DType dt = model_dtype(c, &p.dtype_name);
  p.add(jit::norm_uri(), "RMSNorm");
  switch (known->family) {
    case Family::llama:
    case Family::qwen_dense:
      p.add(jit::page_uri(), "paged KV-cache append");
      add_attention(p, c, dt, sm, c.flag("use_sliding_window"));
      break;
    case Family::qwen_moe:
      p.add(jit::page_uri(), "paged KV-cache append");
      add_attention(p, c, dt, sm, c.flag("use_sliding_window"));
      add_moe(p, c, "num_experts", sm);
      break;
    case Family::deepseek_v3: {
      const long ckv = c.positive("kv_lora_rank"), kpe = c.positive("qk_rope_head_dim");
      if (ckv != kMlaHeadDimCkv || kpe != kMlaHeadDimKpe)
        c.fail(ErrorCode::unsupported, "kv_lora_rank", "and qk_rope_head_dim must be 512 and 64 for FlashInfer's MLA "
                                                       "module; got " + std::to_string(ckv) + " and " + std::to_string(kpe));
      p.options.push_back("attention: MLA, " + std::to_string(c.positive("num_attention_heads")) +
                          " heads, ckv 512, kpe 64");
      p.add(jit::page_uri(), "paged MLA KV-cache append");
      p.add(batch_mla_uri(dt, dt, dt, sm == 90 ? MlaBackend::sm90 : MlaBackend::fa2),
            std::string("MLA prefill and decode (") + (sm == 90 ? "sm90" : "fa2") + ")");
      add_moe(p, c, "n_routed_experts", sm);
      break;
    }
    case Family::deepseek_v32: {
      const long topk = c.positive("index_topk");
      p.options.push_back("attention: sparse MLA (DSA), " + std::to_string(c.positive("num_attention_heads")) +
                          " heads, index top-k " + std::to_string(topk) + ", FP8 KV cache");
      p.builtin.push_back("flashcpp::mla sparse prefill and FP8 sparse decode, FP8 cache quantizer");
      add_moe(p, c, "n_routed_experts", sm);
      break;
    }
  }
  return p;
}

struct PrepareOptions {
  std::string config;
  int sm = 90;
  bool prepare = false;
  bool verbose = false;
};

void run_prepare(const PrepareOptions& o) {
  const Plan p = plan_for(o.config, o.sm);
  std::printf("model: %s, %s, sm%d\n", p.model.c_str(), p.dtype_name.c_str(), o.sm);
  for (const auto& opt : p.options) std::printf("  %s\n", opt.c_str());
  std::printf("modules (%zu):\n", p.modules.size());
  for (const auto& m : p.modules) std::printf("  %s  (%s)\n", m.uri.c_str(), m.used_for.c_str());
  for (const auto& b : p.builtin) std::printf("built in (no module): %s\n", b.c_str());
  if (!o.prepare) return;
  check_environment();
  RuntimeOptions ro = RuntimeOptions::from_env();
  const LogLevel shown = o.verbose ? LogLevel::debug : LogLevel::info;
  ro.log = [shown](LogLevel l, const std::string& line) {
    if (l <= shown) std::fprintf(stderr, "flashcpp: %s\n", line.c_str());
  };
  std::vector<std::string> uris;
  for (const auto& m : p.modules) uris.push_back(m.uri);
  Runtime::create(ro)->prepare(uris);
  std::printf("prepared %zu module(s)\n", uris.size());
}

}  // namespace

void add_prepare_command(CLI::App& app) {
  auto o = std::make_shared<PrepareOptions>();
  auto* cmd = app.add_subcommand("prepare", "The FlashInfer modules a model's layers need, from its config.json "
                                            "(DeepSeek V3/V3.2, Llama 3, Qwen 2/3 and their MoE): printed, or "
                                            "fetched/built now with --prepare");
  add_text(*cmd, "config", o->config, "the model's Hugging Face config.json")->required();
  add_integer_of(*cmd, "--sm", o->sm, "target GPU architecture", std::vector<int>{80, 86, 89, 90, 100, 103, 120})
      ->capture_default_str();
  cmd->add_flag("--prepare", o->prepare, "Fetch or build and load every listed module now, with progress");
  cmd->add_flag("--verbose,-v", o->verbose, "With --prepare: also download progress and each build step");
  cmd->callback([o] { run_prepare(*o); });
}

}  // namespace flashcpp::cli
