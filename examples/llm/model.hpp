// A Llama-family model read from a GGUF file: its configuration and its weights, dequantized on the host at load
// (dequant.hpp says why there) to the model's 16-bit type, which the GPU engine also computes in: f16 by default,
// bf16 on request. f16 is the default because its 10-bit mantissa keeps this engine within the verification's
// tolerance of a float32 run where bf16 does not: transformers itself, run in bf16 on the same GGUF, reaches a
// per-position logit cosine of only 0.9896 against float32 (top-1 agreement 0.975), in f16 0.99994 (docs/LLM.md). The projections a layer runs back to back are fused into one matrix each (q, k, v
// into wqkv; gate, up into w_gate_up), so a layer runs four GEMMs. Weights are row-major [out, in] (a GGUF matrix with
// ne = {in, out}), as the GEMMs read them: y[t, :] = W x[t, :].
//
// RoPE: llama.cpp's converter permutes the rows of attn_q and attn_k so that its rotation pairs dims (2i, 2i + 1) of a
// head (FlashInfer's interleave = true, GPT-J style); the weights are used as stored, with that layout.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "flashcpp/dtype.hpp"
#include "gguf.hpp"

namespace flashcpp::llm {

struct ModelConfig {
  std::string architecture;  ///< general.architecture ("llama")
  std::string name;          ///< general.name
  int64_t layers = 0, hidden = 0, ffn = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, context = 0;
  double rope_theta = 10000.0, rms_eps = 1e-5;
  bool tied_embeddings = false;  ///< no output.weight: the LM head is the token embedding
  int64_t qkv_rows() const { return (heads + 2 * kv_heads) * head_dim; }

  /// From the GGUF metadata; invalid_argument naming the key when a value is missing, out of range or inconsistent,
  /// unsupported for another architecture or a RoPE scaling this engine does not implement.
  static ModelConfig from_gguf(const GgufFile& file);
};

// Every weight holds 16-bit floats of Model::dtype.
struct LayerWeights {
  std::vector<uint16_t> attn_norm;  ///< [hidden]
  std::vector<uint16_t> wqkv;       ///< [qkv_rows, hidden]: q rows, then k rows, then v rows
  std::vector<uint16_t> wo;         ///< [hidden, heads * head_dim]
  std::vector<uint16_t> ffn_norm;   ///< [hidden]
  std::vector<uint16_t> w_gate_up;  ///< [2 * ffn, hidden]: gate rows, then up rows (silu_and_mul's order)
  std::vector<uint16_t> w_down;     ///< [hidden, ffn]
};

struct Model {
  ModelConfig config;
  DType dtype = DType::f16;         ///< of every weight: f16 or bf16
  std::vector<uint16_t> embedding;  ///< [vocab, hidden]
  std::vector<uint16_t> lm_head;    ///< [vocab, hidden]; empty when tied (use embedding)
  std::vector<uint16_t> output_norm;
  std::vector<LayerWeights> layers;

  const std::vector<uint16_t>& head() const { return lm_head.empty() ? embedding : lm_head; }
  /// Bytes of the weights one decode step reads (each matrix once; the embedding rows it gathers are few).
  int64_t weight_bytes_per_step() const;

  /// Reads the configuration, checks every tensor's shape against it and dequantizes the weights to `dtype` (f16 or
  /// bf16, else invalid_argument); a weight beyond that type's range is refused naming the tensor.
  static Model load(const GgufFile& file, DType dtype = DType::f16);
};

}  // namespace flashcpp::llm
