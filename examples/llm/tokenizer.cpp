// Byte-level BPE tokenizer (tokenizer.hpp), the way Hugging Face `tokenizers` runs SmolLM2's tokenizer.json:
//   1. added tokens: control tokens (and user-defined ones) are cut out of the text first, leftmost match first and
//      the longest of those starting there (tokenizers' AddedVocabulary, aho-corasick LeftmostLongest);
//   2. pre-tokenizer Sequence[Digits(individual_digits=true), ByteLevel(add_prefix_space=false, use_regex=true)]:
//      every numeric character becomes a piece of its own, then each stretch between them is split by the GPT-2
//      regex on its own (the regex's lookahead never sees past a digit or a special token), matches and the gaps
//      between them both kept;
//   3. each piece's bytes spelled in GPT-2's byte alphabet, then BPE: the adjacent pair of lowest merge rank merged
//      first, the leftmost on ties, until no pair has a merge. A byte whose character is not in the vocabulary is
//      dropped, as tokenizers' BPE does with no unk_token (SmolLM2 lacks 21 bytes, e.g. 0x04, 0xC0, 0xF5..0xFF).
// llama.cpp's "smollm" pre-tokenizer type names this same chain (its regex list: \p{N}, then the GPT-2 regex).
#include "tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>

#include "flashcpp/error.hpp"

namespace flashcpp::llm {
namespace {

// llama.cpp's token types (tokenizer.ggml.token_type).
constexpr int64_t kTypeUndefined = 0, kTypeControl = 3, kTypeUserDefined = 4, kTypeByte = 6;

[[noreturn]] void fail(std::string message) {
  throw_error(ErrorCode::invalid_argument, "tokenizer: " + std::move(message));
}

/// A token's text for a message: quoted, cut to 40 bytes, control bytes escaped (a token may hold any bytes).
std::string quoted(std::string_view text) {
  std::string out = "'";
  for (size_t i = 0; i < text.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > 40) out += "...";
  return out + "'";
}

// GPT-2's byte alphabet: the printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ stand for themselves (as code points); the
// other 68 bytes, in byte order, take the code points U+0100, U+0101, ... so that no token holds a space or a
// control character.
struct ByteAlphabet {
  std::array<uint32_t, 256> code_point{};  // byte -> code point
  std::array<int16_t, 324> byte_of{};      // code point -> byte, -1 for code points outside the alphabet

  ByteAlphabet() {
    byte_of.fill(-1);
    uint32_t next_extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      code_point[b] = printable ? b : next_extra++;
      byte_of[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {  // the alphabet's code points are all below U+0800
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

/// The bytes a token spelled in the byte alphabet stands for; false when the spelling holds a character outside
/// the alphabet (or is not UTF-8), where the token stands for its own UTF-8 bytes, as in tokenizers' ByteLevel
/// decoder.
bool bytes_of_spelling(std::string_view spelling, std::string& bytes) {
  const auto& alphabet = byte_alphabet();
  bytes.clear();
  for (size_t i = 0; i < spelling.size();) {
    const auto c0 = static_cast<unsigned char>(spelling[i]);
    uint32_t cp = 0;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 & 0xe0) == 0xc0 && i + 1 < spelling.size() &&
               (static_cast<unsigned char>(spelling[i + 1]) & 0xc0) == 0x80) {
      cp = ((c0 & 0x1fu) << 6) | (static_cast<unsigned char>(spelling[i + 1]) & 0x3fu);
      i += 2;
    } else {
      return false;  // the alphabet's code points take one or two UTF-8 bytes
    }
    if (cp >= alphabet.byte_of.size() || alphabet.byte_of[cp] < 0) return false;
    bytes += static_cast<char>(alphabet.byte_of[cp]);
  }
  return true;
}

/// A compiled PCRE2 pattern (UTF, Unicode properties for \s \p{L} \p{N}, invalid UTF-8 in the subject allowed:
/// it matches nothing, so it ends up in a gap between matches), JIT-compiled where the library can.
class Regex {
 public:
  explicit Regex(const std::string& pattern) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset, nullptr));
    if (!code_) {
      std::array<PCRE2_UCHAR, 256> text{};
      pcre2_get_error_message(error, text.data(), text.size());
      throw_error(ErrorCode::internal, "tokenizer: the pre-tokenizer regex does not compile at offset " +
                                           std::to_string(error_offset) + ": " +
                                           reinterpret_cast<const char*>(text.data()));
    }
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);  // the interpreter serves if JIT is unavailable
  }

  /// Calls `piece(begin, end, matched)` for every match in subject[0, size) and every gap between matches (the
  /// tokenizers "Isolated" split behaviour), in order.
  template <class Piece>
  void split(const char* subject, size_t size, pcre2_match_data* match, Piece&& piece) const {
    size_t offset = 0;
    while (offset < size) {
      const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(subject), size, offset, 0, match, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        std::array<PCRE2_UCHAR, 256> text{};
        pcre2_get_error_message(rc, text.data(), text.size());
        throw_error(ErrorCode::internal, std::string("tokenizer: the pre-tokenizer regex failed: ") +
                                             reinterpret_cast<const char*>(text.data()));
      }
      const PCRE2_SIZE* bounds = pcre2_get_ovector_pointer(match);
      const size_t begin = bounds[0], end = bounds[1];
      if (begin > offset) piece(offset, begin, false);
      if (end == begin) {  // no alternative matches empty; guard against looping anyway
        offset = begin + 1;
        continue;
      }
      piece(begin, end, true);
      offset = end;
    }
    if (offset < size) piece(offset, size, false);
  }

  pcre2_code* code() const { return code_.get(); }

 private:
  struct Free {
    void operator()(pcre2_code* code) const { pcre2_code_free(code); }
  };
  std::unique_ptr<pcre2_code, Free> code_;
};

struct MatchData {
  struct Free {
    void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
  };
  explicit MatchData(const Regex& regex) : data(pcre2_match_data_create_from_pattern(regex.code(), nullptr)) {
    if (!data) throw_error(ErrorCode::internal, "tokenizer: out of memory for PCRE2 match data");
  }
  std::unique_ptr<pcre2_match_data, Free> data;
};

// The character classes of the pre-tokenizer, as tokenizers 0.23 has them. Its regex engine (Oniguruma) reads \s as
// Unicode's White_Space property, which PCRE2's \s is but for U+180E (a space in PCRE2, a format character since
// Unicode 6.3), so the list is written out. Its Unicode tables are newer than those of the PCRE2 we build with
// (10.42: Unicode 14): the letters and numbers Unicode 15.0 to 16.0 added are listed here too (Kawi, Garay, Kirat
// Rai, CJK extensions H and I, ...; measured: every code point classified by both, the differences are these), and
// the Digits pre-tokenizer, Rust's char::is_numeric, already knows Unicode 17's numbers. With a newer PCRE2 the
// lists are redundant, not wrong.
struct CodePointRange {
  uint32_t first, last;
};
constexpr CodePointRange kWhiteSpace[] = {{0x9, 0xD}, {0x20, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                          {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                          {0x3000, 0x3000}};
constexpr CodePointRange kNewerLetters[] = {
    {0x1C89, 0x1C8A},   {0xA7CB, 0xA7CD},   {0xA7DA, 0xA7DC},   {0x105C0, 0x105F3}, {0x10D4A, 0x10D65},
    {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x1123F, 0x11240}, {0x11380, 0x11389}, {0x1138B, 0x1138B},
    {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113B7}, {0x113D1, 0x113D1}, {0x113D3, 0x113D3},
    {0x11BC0, 0x11BE0}, {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x1342F, 0x1342F},
    {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x16100, 0x1611D}, {0x16D40, 0x16D6C}, {0x18CFF, 0x18CFF},
    {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E06D}, {0x1E4D0, 0x1E4EB},
    {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0}, {0x2B739, 0x2B739}, {0x2EBF0, 0x2EE5D}, {0x31350, 0x323AF}};
constexpr CodePointRange kNewerNumbers[] = {
    {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11F50, 0x11F59}, {0x16130, 0x16139},
    {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3}, {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA}};
constexpr CodePointRange kUnicode17Numbers[] = {{0x11DE0, 0x11DE9}, {0x16FF4, 0x16FF6}};

/// The ranges as the inside of a PCRE2 character class ("\x{9}-\x{D}\x{20}...").
template <size_t N>
std::string class_items(const CodePointRange (&ranges)[N]) {
  std::string out;
  char item[40];
  for (const auto& r : ranges) {
    if (r.first == r.last) {
      std::snprintf(item, sizeof item, "\\x{%X}", r.first);
    } else {
      std::snprintf(item, sizeof item, "\\x{%X}-\\x{%X}", r.first, r.last);
    }
    out += item;
  }
  return out;
}

// tokenizers' ByteLevel pattern (use_regex=true), 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
// \s+(?!\S)|\s+, with the classes above.
std::string gpt2_pattern() {
  const std::string space = class_items(kWhiteSpace);
  const std::string letter = "\\p{L}" + class_items(kNewerLetters), number = "\\p{N}" + class_items(kNewerNumbers);
  return "'s|'t|'re|'ve|'m|'ll|'d| ?[" + letter + "]+| ?[" + number + "]+| ?[^" + space + letter + number + "]+|[" +
         space + "]+(?![^" + space + "])|[" + space + "]+";
}

// tokenizers' Digits pre-tokenizer isolates every character for which Rust's char::is_numeric holds: the general
// categories Nd, Nl, No.
std::string numeric_pattern() {
  return "[\\p{N}" + class_items(kNewerNumbers) + class_items(kUnicode17Numbers) + "]";
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

struct Merge {
  int32_t rank;
  int32_t id;  // the merged token
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

const char* type_name(int64_t type) {
  return type == kTypeControl ? "control" : "user-defined";
}

}  // namespace

struct Tokenizer::Impl {
  std::vector<std::string> tokens;  // spellings as the vocabulary has them
  std::vector<int64_t> types;
  std::vector<std::string> bytes;   // what each token decodes to
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_of;
  std::unordered_map<uint64_t, Merge> merges;
  std::array<int32_t, 256> byte_token{};  // the token of each single byte, -1 where the vocabulary lacks it
  // Tokens matched whole in the text, longest first: control ones (when parse_special), user-defined ones always.
  std::vector<int32_t> added;
  std::array<bool, 256> added_first_byte{};
  int32_t bos_id = -1, eos_id = -1;
  Regex gpt2{gpt2_pattern()};
  Regex numeric{numeric_pattern()};

  void check_id(int32_t id, std::string_view what) const {
    if (id < 0 || static_cast<size_t>(id) >= tokens.size())
      fail(std::string(what) + " = " + std::to_string(id) + " is out of range [0, " + std::to_string(tokens.size()) +
           ")");
  }

  // BPE of one piece (its raw bytes), appended to `ids`.
  void bpe(std::string_view piece, std::vector<int32_t>& ids) const {
    struct Symbol {
      int32_t id;
      int32_t prev, next;  // neighbours in the word, -1 at the ends
    };
    std::vector<Symbol> symbols;
    symbols.reserve(piece.size());
    for (const char c : piece) {
      const int32_t id = byte_token[static_cast<unsigned char>(c)];
      if (id < 0) continue;  // dropped: tokenizers' BPE skips a character it has no token for (no unk_token)
      const auto index = static_cast<int32_t>(symbols.size());
      symbols.push_back({id, index - 1, -1});
      if (index > 0) symbols[index - 1].next = index;
    }
    if (symbols.size() > 1) {
      // Candidates (rank, left symbol, the pair's ids), lowest rank first and the leftmost among equal ranks
      // (symbol indices grow left to right), as tokenizers' Word::merge_all orders them. One goes stale when
      // either side has merged since: its ids no longer match, checked when popped.
      struct Candidate {
        int32_t rank, left, left_id, right_id, merged_id;
        bool operator>(const Candidate& other) const {
          return rank != other.rank ? rank > other.rank : left > other.left;
        }
      };
      std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
      const auto offer = [&](int32_t left) {
        const int32_t right = symbols[left].next;
        if (right < 0) return;
        const auto it = merges.find(pair_key(symbols[left].id, symbols[right].id));
        if (it != merges.end())
          queue.push({it->second.rank, left, symbols[left].id, symbols[right].id, it->second.id});
      };
      for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) offer(i);
      while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        Symbol& left = symbols[top.left];
        const int32_t right = left.next;
        if (left.id != top.left_id || right < 0 || symbols[right].id != top.right_id) continue;
        left.id = top.merged_id;
        left.next = symbols[right].next;
        if (left.next >= 0) symbols[left.next].prev = top.left;
        symbols[right].id = -1;  // merged away: every candidate naming it is stale now
        if (left.prev >= 0) offer(left.prev);
        offer(top.left);
      }
    }
    for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
  }

  // Pre-tokenizer and BPE of text holding no added token.
  void encode_ordinary(std::string_view text, pcre2_match_data* numeric_match, pcre2_match_data* gpt2_match,
                       std::vector<int32_t>& ids) const {
    const auto words = [&](const char* stretch, size_t size) {
      gpt2.split(stretch, size, gpt2_match,
                 [&](size_t begin, size_t end, bool) { bpe(std::string_view(stretch + begin, end - begin), ids); });
    };
    // The numeric pattern matches one character: each is a piece of its own, the stretches between them words.
    numeric.split(text.data(), text.size(), numeric_match, [&](size_t begin, size_t end, bool numeric_char) {
      if (numeric_char) {
        bpe(text.substr(begin, end - begin), ids);
      } else {
        words(text.data() + begin, end - begin);
      }
    });
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_vocab(TokenizerVocab vocab) {
  if (vocab.pre != "smollm")
    throw_error(ErrorCode::unsupported, "tokenizer: the pre-tokenizer " + quoted(vocab.pre) +
                                            " (tokenizer.ggml.pre) is not supported (supported: 'smollm')");
  if (vocab.tokens.empty()) fail("tokens (tokenizer.ggml.tokens) is empty");
  if (vocab.tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("tokens (tokenizer.ggml.tokens) has " + std::to_string(vocab.tokens.size()) +
         " entries, more than 32-bit ids can name");
  if (vocab.types.size() != vocab.tokens.size())
    fail("types (tokenizer.ggml.token_type) has " + std::to_string(vocab.types.size()) + " entries, tokens has " +
         std::to_string(vocab.tokens.size()));

  auto impl = std::make_unique<Impl>();
  impl->id_of.reserve(vocab.tokens.size());
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    const std::string& token = vocab.tokens[i];
    const int64_t type = vocab.types[i];
    if (type < kTypeUndefined || type > kTypeByte)
      fail("types[" + std::to_string(i) + "] (tokenizer.ggml.token_type) = " + std::to_string(type) +
           " is not a token type (0..6)");
    const auto [it, inserted] = impl->id_of.emplace(token, static_cast<int32_t>(i));
    if (!inserted)
      fail("tokens[" + std::to_string(i) + "] (tokenizer.ggml.tokens) " + quoted(token) + " repeats tokens[" +
           std::to_string(it->second) + "]");
    if ((type == kTypeControl || type == kTypeUserDefined) && token.empty())
      fail("tokens[" + std::to_string(i) + "] (tokenizer.ggml.tokens) is empty, but its type (" +
           std::to_string(type) + ", " + type_name(type) + ") matches it whole in the text");
  }

  impl->merges.reserve(vocab.merges.size());
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& merge = vocab.merges[rank];
    const std::string where = "merges[" + std::to_string(rank) + "] (tokenizer.ggml.merges) " + quoted(merge);
    // tokenizers splits a merge at ' ' and wants exactly two parts, then both and their concatenation in the
    // vocabulary (else it refuses the file: BadMerges, MergeTokenOutOfVocabulary).
    const size_t space = merge.find(' ');
    if (space == std::string::npos || merge.find(' ', space + 1) != std::string::npos)
      fail(where + " is not two tokens separated by one space");
    const std::string_view left(merge.data(), space), right(merge.data() + space + 1, merge.size() - space - 1);
    const auto left_it = impl->id_of.find(left), right_it = impl->id_of.find(right);
    if (left_it == impl->id_of.end()) fail(where + ": " + quoted(left) + " is not a token");
    if (right_it == impl->id_of.end()) fail(where + ": " + quoted(right) + " is not a token");
    const std::string joined = std::string(left) + std::string(right);
    const auto joined_it = impl->id_of.find(joined);
    if (joined_it == impl->id_of.end()) fail(where + ": the merged " + quoted(joined) + " is not a token");
    // tokenizers keeps the last rank of a repeated pair (a map filled in order); a repeat is a broken file here.
    const auto [it, inserted] = impl->merges.emplace(pair_key(left_it->second, right_it->second),
                                                     Merge{static_cast<int32_t>(rank), joined_it->second});
    if (!inserted) fail(where + " repeats merges[" + std::to_string(it->second.rank) + "]");
  }

  const auto& alphabet = byte_alphabet();
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    append_utf8(spelling, alphabet.code_point[b]);
    const auto it = impl->id_of.find(spelling);
    impl->byte_token[b] = it == impl->id_of.end() ? -1 : it->second;
  }

  impl->bytes.resize(vocab.tokens.size());
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    const int64_t type = vocab.types[i];
    // Control and user-defined tokens are text (llama.cpp: "<|im_start|>"), not byte-alphabet spellings.
    if (type == kTypeControl || type == kTypeUserDefined || !bytes_of_spelling(vocab.tokens[i], impl->bytes[i]))
      impl->bytes[i] = vocab.tokens[i];
    if (type == kTypeControl || type == kTypeUserDefined) impl->added.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(impl->added.begin(), impl->added.end(), [&](int32_t a, int32_t b) {
    return vocab.tokens[a].size() > vocab.tokens[b].size();
  });
  for (const int32_t id : impl->added) impl->added_first_byte[static_cast<unsigned char>(vocab.tokens[id][0])] = true;

  impl->tokens = std::move(vocab.tokens);
  impl->types = std::move(vocab.types);
  if (vocab.bos_id != -1) impl->check_id(vocab.bos_id, "bos_id (tokenizer.ggml.bos_token_id)");
  if (vocab.eos_id != -1) impl->check_id(vocab.eos_id, "eos_id (tokenizer.ggml.eos_token_id)");
  impl->bos_id = vocab.bos_id;
  impl->eos_id = vocab.eos_id;
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  const std::string& model = file.get_string("tokenizer.ggml.model");
  if (model != "gpt2")
    throw_error(ErrorCode::unsupported, "tokenizer: the tokenizer model " + quoted(model) +
                                            " (tokenizer.ggml.model) is not supported (supported: 'gpt2', "
                                            "byte-level BPE)");
  TokenizerVocab vocab;
  // llama.cpp reads a missing tokenizer.ggml.pre as its "default" pre-tokenizer, which this one does not offer.
  vocab.pre = file.has("tokenizer.ggml.pre") ? file.get_string("tokenizer.ggml.pre") : "default";
  vocab.tokens = file.get_string_array("tokenizer.ggml.tokens");
  vocab.types = file.get_int_array("tokenizer.ggml.token_type");
  vocab.merges = file.get_string_array("tokenizer.ggml.merges");
  const auto read_id = [&](const char* key) -> int32_t {
    if (!file.has(key)) return -1;
    const int64_t id = file.get_int(key);
    if (id < 0 || id > std::numeric_limits<int32_t>::max())
      fail(std::string(key) + " = " + std::to_string(id) + " is not a token id");
    return static_cast<int32_t>(id);
  };
  vocab.bos_id = read_id("tokenizer.ggml.bos_token_id");
  vocab.eos_id = read_id("tokenizer.ggml.eos_token_id");
  return from_vocab(std::move(vocab));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  const Impl& t = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  const MatchData numeric_match(t.numeric), gpt2_match(t.gpt2);
  size_t ordinary_begin = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t found = -1;
    if (t.added_first_byte[static_cast<unsigned char>(text[i])]) {
      for (const int32_t id : t.added) {  // longest first
        if (!parse_special && t.types[id] == kTypeControl) continue;
        const std::string& token = t.tokens[id];
        if (text.compare(i, token.size(), token) == 0) {
          found = id;
          break;
        }
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    t.encode_ordinary(text.substr(ordinary_begin, i - ordinary_begin), numeric_match.data.get(),
                      gpt2_match.data.get(), ids);
    ids.push_back(found);
    i += t.tokens[found].size();
    ordinary_begin = i;
  }
  t.encode_ordinary(text.substr(ordinary_begin), numeric_match.data.get(), gpt2_match.data.get(), ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    impl_->check_id(ids[i], "decode: ids[" + std::to_string(i) + "]");
    out += impl_->bytes[ids[i]];
  }
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id, "token_bytes: id");
  return impl_->bytes[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }

int32_t Tokenizer::find_token(std::string_view piece) const {
  const auto it = impl_->id_of.find(piece);
  return it == impl_->id_of.end() ? -1 : it->second;
}

std::string Tokenizer::chat_prompt(std::string_view user, std::string_view system) const {
  for (const char* marker : {"<|im_start|>", "<|im_end|>"}) {
    const int32_t id = find_token(marker);
    if (id < 0 || impl_->types[id] != kTypeControl)
      throw_error(ErrorCode::unsupported, std::string("tokenizer: chat_prompt writes ChatML, whose marker ") +
                                              marker + " is not a control token of this vocabulary");
  }
  // SmolLM2's template (tokenizer.chat_template) opens with this system message when the first one is not a
  // system message.
  constexpr std::string_view kDefaultSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
  std::string prompt = "<|im_start|>system\n";
  prompt += system.empty() ? kDefaultSystem : system;
  prompt += "<|im_end|>\n<|im_start|>user\n";
  prompt += user;
  prompt += "<|im_end|>\n<|im_start|>assistant\n";
  return prompt;
}

}  // namespace flashcpp::llm
