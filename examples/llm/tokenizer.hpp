// Byte-level BPE tokenizer of a GGUF model (tokenizer.ggml.model "gpt2"), from the file's tokenizer metadata:
// tokenizer.ggml.tokens (the vocabulary, GPT-2 byte-to-unicode spelling), tokenizer.ggml.merges ("a b" ranks in
// order), tokenizer.ggml.token_type (1 normal, 3 control, 4 user-defined, ...), bos/eos ids. The pre-tokenizer
// is the one tokenizer.ggml.pre names ("smollm": digits split one by one, then the GPT-2 regex); another name is
// unsupported (a typed error naming it). Control and user-defined tokens (e.g. <|im_start|>) are matched as whole
// pieces in the text when parse_special is on. It agrees with the Hugging Face `tokenizers` library on the
// committed corpus (tests/llm/data).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf.hpp"

namespace flashcpp::llm {

/// What a tokenizer is made of (from_gguf reads these keys; tests build it directly).
struct TokenizerVocab {
  std::vector<std::string> tokens;  ///< tokenizer.ggml.tokens
  std::vector<int64_t> types;       ///< tokenizer.ggml.token_type (same length as tokens)
  std::vector<std::string> merges;  ///< tokenizer.ggml.merges, rank order
  std::string pre;                  ///< tokenizer.ggml.pre
  int32_t bos_id = -1, eos_id = -1;
};

class Tokenizer {
 public:
  /// invalid_argument naming the field when the vocabulary is malformed; unsupported for an unknown `pre`.
  static Tokenizer from_vocab(TokenizerVocab vocab);
  /// invalid_argument naming the key when the metadata is malformed (a merge naming an unknown token, ids out of
  /// range, arrays of different lengths); unsupported for another tokenizer model or pre-tokenizer.
  static Tokenizer from_gguf(const GgufFile& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// The ids of `text`. parse_special: control tokens are matched whole (tokenizers' special tokens); off, they
  /// are ordinary text (tokenizers' encode_special_tokens). User-defined tokens are matched whole either way, as
  /// in tokenizers and llama.cpp. Any bytes are taken: a run of bytes that are not UTF-8 matches no regex class and
  /// is a piece of its own, each byte spelled through the byte alphabet (tokenizers only takes valid strings). A
  /// byte the vocabulary has no token for is dropped, as tokenizers' BPE does without an unk_token. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  /// The UTF-8 bytes of the ids (control tokens spelled as their text); invalid_argument for an id out of range.
  /// The bytes are returned as they are: a piece of a character is not replaced by U+FFFD (tokenizers' decode
  /// does replace), so a stream of tokens can be decoded piece by piece.
  std::string decode(std::span<const int32_t> ids) const;
  /// The bytes of one token (a piece of a UTF-8 character possibly).
  std::string token_bytes(int32_t id) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  /// The id of a token spelled exactly `piece` (e.g. "<|im_end|>"), or -1.
  int32_t find_token(std::string_view piece) const;

  /// The chat prompt of one user message in the ChatML markers the model's template uses: "<|im_start|>system\n
  /// {system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n" (the default system message
  /// of SmolLM2's template when `system` is empty).
  std::string chat_prompt(std::string_view user, std::string_view system = {}) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashcpp::llm
