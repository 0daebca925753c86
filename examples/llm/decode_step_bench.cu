// decode_step_bench: the persistent decode step (decode_step.hpp) timed alone on random weights of SmolLM2-135M's
// shape (no model file needed): 30 layers, hidden 576, FFN 1536, 9 query and 3 KV heads of 64, vocabulary 49152, f16,
// every sequence at a context of 168 tokens (`--context N`) in 16-token pages. One DECODE_STEP_BENCH json line per
// step size: the median of 30 launches (CUDA events, after 5 warm-up launches, each from the same embeddings; the
// 270 MB of weights exceed the L2, so each launch reads them from memory). --dump writes the logits of each step
// size's last launch (f32, tokens x vocab, the step sizes in turn), so two builds can be compared on the same random
// model. In an
// experiment build (-DFLASHCPP_DECODE_STEP_PROBE) `--probe BITS` switches parts of every phase off, or alternatives
// on (decode_step.cu says which), `--grid N` runs N blocks instead of one per SM, and `--trace FILE` appends, for each
// step size, one more launch's phase trace: u64 globaltimer [phase][start, marks 1-4, end][block] (decode_step.cu says
// what the marks are; 0 where a block's first warp had no work), phases in kernel order.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "decode_step.hpp"

namespace flashcpp::llm {
#ifdef FLASHCPP_DECODE_STEP_PROBE
cudaError_t decode_step_set_probe(int bits);
void decode_step_set_grid(int blocks);
cudaError_t decode_step_set_trace(unsigned long long* buffer);
#endif
}  // namespace flashcpp::llm

namespace {

using flashcpp::llm::DecodeStepLayer;
using flashcpp::llm::DecodeStepParams;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "decode_step_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A device buffer of n 16-bit values drawn uniformly from [-scale, scale] (around `center`).
uint16_t* random_f16(size_t n, float center, float scale, std::mt19937& rng, std::vector<void*>& owned) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<__half> h(n);
  for (auto& v : h) v = __float2half(center + u(rng));
  void* d = nullptr;
  check(cudaMalloc(&d, n * 2), "cudaMalloc");
  check(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  owned.push_back(d);
  return static_cast<uint16_t*>(d);
}

template <class T> T* device_copy(const std::vector<T>& v, std::vector<void*>& owned) {
  void* d = nullptr;
  check(cudaMalloc(&d, v.size() * sizeof(T)), "cudaMalloc");
  check(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  owned.push_back(d);
  return static_cast<T*>(d);
}

}  // namespace

int main(int argc, char** argv) {
  int probe = 0, grid = 0;
  int64_t context = 168;  // a step's tokens each at this context (keys 0..context - 1 of its own sequence)
  const char* dump = nullptr;
  const char* trace = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--probe") == 0 && i + 1 < argc) {
      probe = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--grid") == 0 && i + 1 < argc) {
      grid = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--trace") == 0 && i + 1 < argc) {
      trace = argv[++i];
    } else if (std::strcmp(argv[i], "--dump") == 0 && i + 1 < argc) {
      dump = argv[++i];
    } else if (std::strcmp(argv[i], "--context") == 0 && i + 1 < argc && std::atoll(argv[i + 1]) >= 1 &&
               std::atoll(argv[i + 1]) <= 65536) {
      context = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: decode_step_bench [--context 1..65536] [--probe BITS] [--grid BLOCKS] [--trace FILE] "
                   "[--dump LOGITS_FILE]\n");
      return 2;
    }
  }
#ifdef FLASHCPP_DECODE_STEP_PROBE
  check(flashcpp::llm::decode_step_set_probe(probe), "probe");
  flashcpp::llm::decode_step_set_grid(grid);
#else
  if (probe != 0 || grid != 0 || trace != nullptr) {
    std::fprintf(stderr, "decode_step_bench: --probe, --grid and --trace need a build with -DFLASHCPP_DECODE_STEP_PROBE\n");
    return 2;
  }
#endif
  constexpr int64_t kLayers = 30, kHidden = 576, kFfn = 1536, kHeads = 9, kKvHeads = 3, kD = 64, kVocab = 49152;
  [[maybe_unused]] constexpr int64_t kTraceSlots = 6;  // (experiment builds: --trace)
  constexpr int64_t kPage = 16, kMaxTokens = flashcpp::llm::kDecodeStepMaxTokens;
  const int64_t pages_per_seq = (context + kPage - 1) / kPage, num_pages = kMaxTokens * pages_per_seq;
  std::mt19937 rng(7);
  std::vector<void*> owned;
  const size_t qkv_rows = (kHeads + 2 * kKvHeads) * kD, page_elems = kPage * kKvHeads * kD;
  std::vector<DecodeStepLayer> layers(kLayers);
  for (auto& l : layers) {
    l.attn_norm = random_f16(kHidden, 1.f, 0.1f, rng, owned);
    l.wqkv = random_f16(qkv_rows * kHidden, 0.f, 0.05f, rng, owned);
    l.wo = random_f16(kHidden * kHeads * kD, 0.f, 0.05f, rng, owned);
    l.ffn_norm = random_f16(kHidden, 1.f, 0.1f, rng, owned);
    l.w_gate_up = random_f16(2 * kFfn * kHidden, 0.f, 0.05f, rng, owned);
    l.w_down = random_f16(kHidden * kFfn, 0.f, 0.05f, rng, owned);
    l.k_cache = random_f16(num_pages * page_elems, 0.f, 1.f, rng, owned);
    l.v_cache = random_f16(num_pages * page_elems, 0.f, 1.f, rng, owned);
  }
  DecodeStepParams p;
  p.f16 = true;
  p.layers = kLayers;
  p.hidden = kHidden;
  p.ffn = kFfn;
  p.heads = kHeads;
  p.kv_heads = kKvHeads;
  p.head_dim = kD;
  p.vocab = kVocab;
  p.page_size = kPage;
  p.layer = device_copy(layers, owned);
  p.out_norm = random_f16(kHidden, 1.f, 0.1f, rng, owned);
  p.lm_head = random_f16(kVocab * kHidden, 0.f, 0.05f, rng, owned);
  p.residual = random_f16(kMaxTokens * kHidden, 0.f, 1.f, rng, owned);
  // Every launch starts from the same embeddings (the step adds into the residual in place).
  const uint16_t* embeddings = random_f16(kMaxTokens * kHidden, 0.f, 1.f, rng, owned);
  p.qkv = random_f16(kMaxTokens * qkv_rows, 0.f, 1.f, rng, owned);
  p.act = random_f16(kMaxTokens * kFfn, 0.f, 1.f, rng, owned);
  std::vector<float> zeros(static_cast<size_t>(flashcpp::llm::decode_step_split_floats(kMaxTokens, kHeads)));
  p.attn_split = device_copy(zeros, owned);
  p.logits = device_copy(std::vector<float>(kMaxTokens * kVocab), owned);
  std::vector<int32_t> positions(kMaxTokens, static_cast<int32_t>(context - 1)), batch(kMaxTokens),
      indptr(kMaxTokens + 1), pages(num_pages);
  for (int64_t i = 0; i < kMaxTokens; ++i) batch[i] = static_cast<int32_t>(i);
  for (int64_t i = 0; i <= kMaxTokens; ++i) indptr[i] = static_cast<int32_t>(i * pages_per_seq);
  int64_t stride = 7;  // scattered pages: a stride prime to the page count makes a permutation
  while (std::gcd(stride, num_pages) != 1) stride += 2;
  for (int64_t i = 0; i < num_pages; ++i) pages[i] = static_cast<int32_t>((i * stride) % num_pages);
  p.positions = device_copy(positions, owned);
  p.batch_indices = device_copy(batch, owned);
  p.kv_indptr = device_copy(indptr, owned);
  p.kv_indices = device_copy(pages, owned);
  p.barrier = device_copy(std::vector<unsigned>(1, 0u), owned);

  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  cudaEvent_t begin = nullptr, end = nullptr;
  check(cudaEventCreate(&begin), "cudaEventCreate");
  check(cudaEventCreate(&end), "cudaEventCreate");
  for (int64_t tokens = 1; tokens <= kMaxTokens; tokens *= 2) {
    p.tokens = tokens;
    std::vector<float> us;
    for (int it = 0; it < 35; ++it) {
      check(cudaMemcpyAsync(p.residual, embeddings, kMaxTokens * kHidden * 2, cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpyAsync");
      check(cudaEventRecord(begin, stream), "cudaEventRecord");
      check(flashcpp::llm::launch_decode_step(p, stream), "launch_decode_step");
      check(cudaEventRecord(end, stream), "cudaEventRecord");
      check(cudaEventSynchronize(end), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
      if (it >= 5) us.push_back(ms * 1e3f);
    }
    if (dump != nullptr) {
      std::vector<float> logits(static_cast<size_t>(tokens * kVocab));
      check(cudaMemcpy(logits.data(), p.logits, logits.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
      if (FILE* f = std::fopen(dump, tokens == 1 ? "wb" : "ab")) {
        std::fwrite(logits.data(), 4, logits.size(), f);
        std::fclose(f);
      }
    }
#ifdef FLASHCPP_DECODE_STEP_PROBE
    if (trace != nullptr) {
      int blocks = grid;
      if (blocks <= 0) check(cudaDeviceGetAttribute(&blocks, cudaDevAttrMultiProcessorCount, 0), "SM count");
      const size_t n = static_cast<size_t>(kTraceSlots * (5 * kLayers + 1) * blocks);
      unsigned long long* d = nullptr;
      check(cudaMalloc(&d, n * 8), "cudaMalloc");
      check(cudaMemset(d, 0, n * 8), "cudaMemset");
      check(flashcpp::llm::decode_step_set_trace(d), "trace");
      check(cudaMemcpyAsync(p.residual, embeddings, kMaxTokens * kHidden * 2, cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpyAsync");
      check(flashcpp::llm::launch_decode_step(p, stream), "launch_decode_step");
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      check(flashcpp::llm::decode_step_set_trace(nullptr), "trace");
      std::vector<unsigned long long> h(n);
      check(cudaMemcpy(h.data(), d, n * 8, cudaMemcpyDeviceToHost), "cudaMemcpy");
      cudaFree(d);
      if (FILE* f = std::fopen(trace, tokens == 1 ? "wb" : "ab")) {
        std::fwrite(h.data(), 8, n, f);
        std::fclose(f);
      }
    }
#endif
    std::sort(us.begin(), us.end());
    std::printf("DECODE_STEP_BENCH {\"tokens\":%lld,\"context\":%lld,\"probe\":%d,\"grid\":%d,\"us\":%.1f,"
                "\"min_us\":%.1f}\n",
                static_cast<long long>(tokens), static_cast<long long>(context), probe, grid, us[us.size() / 2],
                us.front());
  }
  for (void* d : owned) cudaFree(d);
  return 0;
}
