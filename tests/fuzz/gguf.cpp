// Fuzzes flashcpp-llm's GGUF reader (examples/llm/gguf.cpp) and dequantization: any bytes give a parsed file or
// invalid_argument; a parsed file keeps its promises (every tensor's data inside the file, aligned, nbytes what
// its type and shape take), every tensor's bytes can be read, and the first blocks of each dequantize (to f32 and
// to bf16). Another error code, another exception type, a crash or a sanitizer report is a finding.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <vector>

#include "dequant.hpp"
#include "flashcpp/error.hpp"
#include "gguf.hpp"

namespace {

using namespace flashcpp;
using namespace flashcpp::llm;

// The getters a model loader calls: each answers or throws not_found / invalid_argument.
template <class F>
void try_getter(F&& getter) {
  try {
    getter();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::not_found && e.code() != ErrorCode::invalid_argument) std::abort();
  }
}

void exercise(const GgufFile& file) {
  try_getter([&] { (void)file.get_uint("llama.block_count"); });
  try_getter([&] { (void)file.get_int("llama.block_count"); });
  try_getter([&] { (void)file.get_float("llama.rope.freq_base"); });
  try_getter([&] { (void)file.get_bool("tokenizer.ggml.add_bos_token"); });
  try_getter([&] { (void)file.get_string("general.architecture"); });
  try_getter([&] { (void)file.get_string_array("tokenizer.ggml.tokens"); });
  try_getter([&] { (void)file.get_int_array("tokenizer.ggml.token_type"); });

  if (file.alignment() == 0 || (file.alignment() & (file.alignment() - 1)) != 0) std::abort();
  std::vector<float> values;
  std::vector<uint16_t> bf16;
  for (const GgufTensorInfo& t : file.tensors()) {
    if (t.ne.empty() || t.ne.size() > 4 || t.offset % file.alignment() != 0) std::abort();
    if (file.find_tensor(t.name) == nullptr) std::abort();
    const uint64_t elements = t.elements();
    if (t.nbytes != ggml_bytes(t.type, elements, t.name)) std::abort();
    const std::span<const uint8_t> data = file.tensor_data(t);
    if (data.size() != t.nbytes) std::abort();
    // Read every byte: ASan reports any that lies outside the copy of the input.
    uint8_t folded = 0;
    for (uint8_t byte : data) folded ^= byte;
    (void)folded;
    // The first blocks: whole blocks, since ne[0] is a multiple of the block size.
    const uint64_t n = std::min<uint64_t>(elements, 4 * 32);
    const std::span<const uint8_t> head = data.first(ggml_bytes(t.type, n, t.name));
    values.assign(n, 0.0f);
    bf16.assign(n, 0);
    dequantize(t.type, head, values, t.name);
    dequantize_bf16(t.type, head, bf16, t.name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<GgufFile> file;
  try {
    file.emplace(GgufFile::parse(std::span<const uint8_t>(data, size)));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument) std::abort();
    return 0;
  }
  // Outside the try: a parsed file's tensors must all read and dequantize, so any exception here is a finding.
  exercise(*file);
  return 0;
}
