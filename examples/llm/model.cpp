#include "model.hpp"

#include <string>

#include "dequant.hpp"
#include "flashcpp/error.hpp"

namespace flashcpp::llm {
namespace {

[[noreturn]] void bad(const std::string& what) { throw_error(ErrorCode::invalid_argument, "model: " + what); }

int64_t positive(const GgufFile& f, const std::string& key, int64_t most) {
  const uint64_t v = f.get_uint(key);
  if (v < 1 || v > static_cast<uint64_t>(most))
    bad("'" + key + "' must be in [1, " + std::to_string(most) + "]; got " + std::to_string(v));
  return static_cast<int64_t>(v);
}

// The tensor `name` as 16-bit floats of `dtype`, checked to have exactly `ne` (ne[0] contiguous) and to be finite.
std::vector<uint16_t> weight(const GgufFile& f, DType dtype, const std::string& name, std::initializer_list<int64_t> ne) {
  const GgufTensorInfo& t = f.tensor(name);
  std::string want, got;
  for (int64_t n : ne) want += (want.empty() ? "" : ", ") + std::to_string(n);
  for (uint64_t n : t.ne) got += (got.empty() ? "" : ", ") + std::to_string(n);
  if (t.ne.size() != ne.size() || want != got) bad("tensor '" + name + "' must have ne {" + want + "}; got {" + got + "}");
  std::vector<uint16_t> out(t.elements());
  dequantize(t.type, f.tensor_data(t), out, dtype, name);
  // Exponent all ones: infinity or NaN (f16: bits 10-14, bf16: bits 7-14), e.g. a value beyond f16's 65504.
  const uint16_t exponent = dtype == DType::f16 ? 0x7c00 : 0x7f80;
  for (size_t i = 0; i < out.size(); ++i)
    if ((out[i] & exponent) == exponent)
      bad("tensor '" + name + "' element " + std::to_string(i) + " is not finite in " + std::string(dtype_name(dtype)));
  return out;
}

void append(std::vector<uint16_t>& to, const std::vector<uint16_t>& from) { to.insert(to.end(), from.begin(), from.end()); }

}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.architecture = f.get_string("general.architecture");
  if (c.architecture != "llama")
    throw_error(ErrorCode::unsupported, "model: general.architecture '" + c.architecture + "' is not supported (llama)");
  c.name = f.has("general.name") ? f.get_string("general.name") : std::string("unnamed");
  const std::string a = "llama.";
  c.layers = positive(f, a + "block_count", 1024);
  c.hidden = positive(f, a + "embedding_length", 1 << 16);
  c.ffn = positive(f, a + "feed_forward_length", 1 << 18);
  c.heads = positive(f, a + "attention.head_count", 1024);
  c.kv_heads = f.has(a + "attention.head_count_kv") ? positive(f, a + "attention.head_count_kv", 1024) : c.heads;
  c.context = positive(f, a + "context_length", int64_t{1} << 24);
  if (c.hidden % c.heads != 0)
    bad("llama.embedding_length (" + std::to_string(c.hidden) + ") must be a multiple of llama.attention.head_count (" +
        std::to_string(c.heads) + ")");
  c.head_dim = c.hidden / c.heads;
  if (f.has(a + "rope.dimension_count") && static_cast<int64_t>(f.get_uint(a + "rope.dimension_count")) != c.head_dim)
    throw_error(ErrorCode::unsupported, "model: llama.rope.dimension_count " +
                                            std::to_string(f.get_uint(a + "rope.dimension_count")) +
                                            " != head dim " + std::to_string(c.head_dim) + " (partial RoPE) is not supported");
  if (c.heads % c.kv_heads != 0)
    bad("llama.attention.head_count (" + std::to_string(c.heads) + ") must be a multiple of head_count_kv (" +
        std::to_string(c.kv_heads) + ")");
  if (f.has(a + "rope.scaling.type") && f.get_string(a + "rope.scaling.type") != "none")
    throw_error(ErrorCode::unsupported, "model: RoPE scaling '" + f.get_string(a + "rope.scaling.type") + "' is not supported");
  if (f.has(a + "rope.freq_base")) c.rope_theta = f.get_float(a + "rope.freq_base");
  if (!(c.rope_theta > 0 && c.rope_theta < 1e12)) bad("llama.rope.freq_base must be in (0, 1e12)");
  c.rms_eps = f.get_float(a + "attention.layer_norm_rms_epsilon");
  if (!(c.rms_eps > 0 && c.rms_eps < 1)) bad("llama.attention.layer_norm_rms_epsilon must be in (0, 1)");
  const GgufTensorInfo& embd = f.tensor("token_embd.weight");
  if (embd.ne.size() != 2) bad("tensor 'token_embd.weight' must have 2 dims");
  c.vocab = static_cast<int64_t>(embd.ne[1]);
  if (f.has(a + "vocab_size") && static_cast<int64_t>(f.get_uint(a + "vocab_size")) != c.vocab)
    bad("llama.vocab_size (" + std::to_string(f.get_uint(a + "vocab_size")) + ") != token_embd.weight rows (" +
        std::to_string(c.vocab) + ")");
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  return c;
}

int64_t Model::weight_bytes_per_step() const {
  int64_t elems = static_cast<int64_t>(head().size() + output_norm.size());
  for (const LayerWeights& l : layers)
    elems += static_cast<int64_t>(l.attn_norm.size() + l.wqkv.size() + l.wo.size() + l.ffn_norm.size() +
                                  l.w_gate_up.size() + l.w_down.size());
  return elems * 2;
}

Model Model::load(const GgufFile& f, DType dtype) {
  if (dtype != DType::f16 && dtype != DType::bf16)
    bad(std::string("the weight type must be f16 or bf16; got ") + std::string(dtype_name(dtype)));
  Model m;
  m.dtype = dtype;
  m.config = ModelConfig::from_gguf(f);
  const ModelConfig& c = m.config;
  const int64_t h = c.hidden, d = c.head_dim;
  m.embedding = weight(f, dtype, "token_embd.weight", {h, c.vocab});
  if (!c.tied_embeddings) m.lm_head = weight(f, dtype, "output.weight", {h, c.vocab});
  m.output_norm = weight(f, dtype, "output_norm.weight", {h});
  m.layers.resize(static_cast<size_t>(c.layers));
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights& l = m.layers[static_cast<size_t>(i)];
    l.attn_norm = weight(f, dtype, p + "attn_norm.weight", {h});
    l.wqkv = weight(f, dtype, p + "attn_q.weight", {h, c.heads * d});
    append(l.wqkv, weight(f, dtype, p + "attn_k.weight", {h, c.kv_heads * d}));
    append(l.wqkv, weight(f, dtype, p + "attn_v.weight", {h, c.kv_heads * d}));
    l.wo = weight(f, dtype, p + "attn_output.weight", {c.heads * d, h});
    l.ffn_norm = weight(f, dtype, p + "ffn_norm.weight", {h});
    l.w_gate_up = weight(f, dtype, p + "ffn_gate.weight", {h, c.ffn});
    append(l.w_gate_up, weight(f, dtype, p + "ffn_up.weight", {h, c.ffn}));
    l.w_down = weight(f, dtype, p + "ffn_down.weight", {c.ffn, h});
  }
  return m;
}

}  // namespace flashcpp::llm
