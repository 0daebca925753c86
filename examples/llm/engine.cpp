#include "engine.hpp"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "dequant.hpp"
#include "flashcpp/activation.hpp"
#include "flashcpp/attention.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/norm.hpp"
#include "flashcpp/page.hpp"
#include "flashcpp/reference.hpp"
#include "flashcpp/rope.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/sampling.hpp"
#include "decode_linear.hpp"
#include "decode_step.hpp"
#include "gather_rows.hpp"

namespace flashcpp::llm {
namespace {

[[noreturn]] void bad(const std::string& what) { throw_error(ErrorCode::invalid_argument, "engine: " + what); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Sequence {
  bool open = false;
  int64_t length = 0;
  std::vector<int32_t> pages;
};

// The host side of one step: what every layer's ops read, in the order FlashInfer's ops take it.
struct StepPlan {
  int64_t batch = 0, tokens = 0, rows = 0;
  bool decode = false;                 // every entry brings one token: batch decode, else batch prefill
  std::vector<int32_t> token_ids;      // [tokens]
  std::vector<int32_t> positions;      // [tokens]: position of the token in its sequence
  std::vector<int32_t> batch_indices;  // [tokens]: its entry
  std::vector<int32_t> qo_indptr;      // [batch + 1]
  std::vector<int32_t> kv_indptr;      // [batch + 1] pages
  std::vector<int32_t> kv_indices;     // page ids
  std::vector<int32_t> last_page_len;  // [batch]
  std::vector<int32_t> logit_rows;     // [rows]: token rows whose logits the step computes
};

// ------------------------------------------------------------------------------------------------ cuBLASLt

void blas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw_error(ErrorCode::cuda_error, std::string("engine: ") + what + " failed (cuBLAS status " +
                                           std::to_string(static_cast<int>(s)) + ")");
}

// y [t, n] = x [t, k] . w [n, k]^T: 16-bit inputs (f16 or bf16), f32 accumulation, output in the input type or f32.
// In cuBLAS's column-major terms that is y^T = w . x^T with w read transposed.
class Gemm {
 public:
  Gemm(int device, DType dtype, size_t workspace_bytes)
      : type_(dtype == DType::f16 ? CUDA_R_16F : CUDA_R_16BF), workspace_(workspace_bytes, device) {
    blas_check(cublasLtCreate(&handle_), "cublasLtCreate");
  }
  ~Gemm() {
    for (auto& [key, p] : plans_) {
      cublasLtMatmulDescDestroy(p.op);
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.c);
    }
    if (handle_) cublasLtDestroy(handle_);
  }
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void run(const void* x, const void* w, void* y, int64_t t, int64_t n, int64_t k, bool f32_out, cudaStream_t stream) {
    const Plan& p = plan(t, n, k, f32_out);
    const float one = 1.f, zero = 0.f;
    blas_check(cublasLtMatmul(handle_, p.op, &one, w, p.a, x, p.b, &zero, y, p.c, y, p.c, &p.algo, workspace_.get(),
                              workspace_.size(), stream),
               "cublasLtMatmul");
  }

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan(int64_t t, int64_t n, int64_t k, bool f32_out) {
    const auto key = std::make_tuple(t, n, k, f32_out);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    Plan p;
    blas_check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t trans = CUBLAS_OP_T;
    blas_check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)),
               "cublasLtMatmulDescSetAttribute");
    blas_check(cublasLtMatrixLayoutCreate(&p.a, type_, k, n, k), "cublasLtMatrixLayoutCreate");
    blas_check(cublasLtMatrixLayoutCreate(&p.b, type_, k, t, k), "cublasLtMatrixLayoutCreate");
    blas_check(cublasLtMatrixLayoutCreate(&p.c, f32_out ? CUDA_R_32F : type_, n, t, n),
               "cublasLtMatrixLayoutCreate");
    cublasLtMatmulPreference_t pref = nullptr;
    blas_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    const size_t ws = workspace_.size();
    blas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
               "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    blas_check(s, "cublasLtMatmulAlgoGetHeuristic");
    if (found < 1)
      throw_error(ErrorCode::unsupported, "engine: cuBLASLt has no algorithm for a " + std::to_string(t) + " x " +
                                              std::to_string(n) + " x " + std::to_string(k) + " GEMM");
    p.algo = result.algo;
    return plans_.emplace(key, p).first->second;
  }

  cudaDataType_t type_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Plan> plans_;
};

// RAII CUDA graph and its executable.
struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<int64_t> plan_info;  // the decode plan it was captured with (a replay needs the same)
  int64_t launches = 0;
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

}  // namespace

// ------------------------------------------------------------------------------------------------ state

struct Engine::Impl {
  const Model* model = nullptr;
  ModelConfig cfg;
  EngineOptions opt;
  std::vector<Sequence> seqs;
  std::vector<int32_t> free_pages;  // a stack
  int64_t last_launches = 0;
  bool last_replayed = false;
  const char* last_path = "none";
  Engine::StepTiming last_timing;

  // gpu
  std::shared_ptr<Runtime> rt;
  std::optional<Stream> stream;
  std::optional<Gemm> gemm;
  std::optional<OwnedWorkspace> ws;
  std::optional<OwnedSamplingWorkspace> sampling_ws;
  DeviceBuffer weights;  // every weight (16-bit, the model's dtype), 256-byte aligned pieces
  struct LayerPtrs {
    const uint16_t *attn_norm, *wqkv, *wo, *ffn_norm, *w_gate_up, *w_down;
  };
  std::vector<LayerPtrs> layer_w;
  const uint16_t *embedding_w = nullptr, *head_w = nullptr, *out_norm_w = nullptr;
  DeviceBuffer k_cache, v_cache;  // [layers][max_pages, page_size, kv_heads, head_dim], the model's dtype
  DeviceBuffer residual, h, qkv, attn, gu, act, hl, logits, probs;
  // The persistent decode step (decode_step.hpp), when the model is one it takes: its per-layer pointers, its attention
  // splits and its barrier counter (zero between launches: the kernel leaves it so).
  DeviceBuffer step_layers, step_splits, step_barrier;
  // Index arrays at fixed offsets (so a captured graph reads this step's values): see Offsets.
  struct Offsets {
    int64_t tokens, positions, batch_indices, qo_indptr, kv_indptr, last_page_len, kv_indices, logit_rows, samples,
        total;
  } off{};
  DeviceBuffer index_dev;
  PinnedBuffer index_host, logits_host;
  std::map<int64_t, std::unique_ptr<Graph>> graphs;  // decode batch size -> graph
  std::optional<Event> step_begin, step_end;          // time_steps

  // reference
  std::vector<float> r_k, r_v;  // [layers][max_pages, page_size, kv_heads, head_dim] f32
  std::vector<std::vector<float>> r_norms;  // per layer attn, ffn norms (f32), then the output norm
};

namespace {

using Impl = Engine::Impl;

Impl::Offsets index_offsets(const EngineOptions& o) {
  Impl::Offsets off{};
  int64_t at = 0;
  auto take = [&](int64_t n) {
    const int64_t here = at;
    at += (n + 3) / 4 * 4;  // 16-byte aligned pieces
    return here;
  };
  off.tokens = take(o.max_step_tokens);
  off.positions = take(o.max_step_tokens);
  off.batch_indices = take(o.max_step_tokens);
  off.qo_indptr = take(o.max_batch + 1);
  off.kv_indptr = take(o.max_batch + 1);
  off.last_page_len = take(o.max_batch);
  off.kv_indices = take(o.max_pages);
  off.logit_rows = take(o.max_logit_rows);
  off.samples = take(o.max_batch);
  off.total = at;
  return off;
}

void setup_gpu(Impl& s) {
  const ModelConfig& c = s.cfg;
  const int dev = s.opt.device;
  (void)device_facts(dev);  // an unknown device is refused before anything is allocated
  DeviceGuard guard(dev);
  s.rt = Runtime::create();
  s.stream.emplace(dev);
  s.gemm.emplace(dev, s.model->dtype, size_t{32} << 20);
  s.ws.emplace(dev);
  s.sampling_ws.emplace(dev, s.stream->get());

  // Weights: one allocation, uploaded once.
  std::vector<std::pair<const std::vector<uint16_t>*, const uint16_t**>> parts;
  s.layer_w.resize(static_cast<size_t>(c.layers));
  parts.push_back({&s.model->embedding, &s.embedding_w});
  if (!s.model->lm_head.empty()) parts.push_back({&s.model->lm_head, &s.head_w});
  parts.push_back({&s.model->output_norm, &s.out_norm_w});
  for (size_t i = 0; i < s.layer_w.size(); ++i) {
    const LayerWeights& l = s.model->layers[i];
    Impl::LayerPtrs& p = s.layer_w[i];
    parts.push_back({&l.attn_norm, &p.attn_norm});
    parts.push_back({&l.wqkv, &p.wqkv});
    parts.push_back({&l.wo, &p.wo});
    parts.push_back({&l.ffn_norm, &p.ffn_norm});
    parts.push_back({&l.w_gate_up, &p.w_gate_up});
    parts.push_back({&l.w_down, &p.w_down});
  }
  size_t bytes = 0;
  for (auto& [v, p] : parts) bytes += (v->size() * 2 + 255) / 256 * 256;
  s.weights = DeviceBuffer(bytes, dev);
  size_t at = 0;
  for (auto& [v, p] : parts) {
    auto* dst = static_cast<uint8_t*>(s.weights.get()) + at;
    FLASHCPP_CUDA_CHECK(cudaMemcpy(dst, v->data(), v->size() * 2, cudaMemcpyHostToDevice));
    *p = reinterpret_cast<const uint16_t*>(dst);
    at += (v->size() * 2 + 255) / 256 * 256;
  }
  if (!s.head_w) s.head_w = s.embedding_w;

  const int64_t page_elems = s.opt.page_size * c.kv_heads * c.head_dim;
  const size_t cache_bytes = static_cast<size_t>(c.layers * s.opt.max_pages * page_elems * 2);
  s.k_cache = DeviceBuffer(cache_bytes, dev);
  s.v_cache = DeviceBuffer(cache_bytes, dev);
  const int64_t t = s.opt.max_step_tokens;
  s.residual = DeviceBuffer(static_cast<size_t>(t * c.hidden * 2), dev);
  s.h = DeviceBuffer(static_cast<size_t>(t * c.hidden * 2), dev);
  s.qkv = DeviceBuffer(static_cast<size_t>(t * c.qkv_rows() * 2), dev);
  s.attn = DeviceBuffer(static_cast<size_t>(t * c.heads * c.head_dim * 2), dev);
  s.gu = DeviceBuffer(static_cast<size_t>(t * 2 * c.ffn * 2), dev);
  s.act = DeviceBuffer(static_cast<size_t>(t * c.ffn * 2), dev);
  s.hl = DeviceBuffer(static_cast<size_t>(s.opt.max_logit_rows * c.hidden * 2), dev);
  s.logits = DeviceBuffer(static_cast<size_t>(s.opt.max_logit_rows * c.vocab * 4), dev);
  s.probs = DeviceBuffer(static_cast<size_t>(s.opt.max_batch * c.vocab * 4), dev);
  // Poisoned: activations with NaN (0xffff is NaN in f16 and bf16, 0xffffffff in f32), so a value read before any op
  // wrote it shows in the logits; the KV pages with 0x4040 (2.125 in f16, 3.0 in bf16), finite like the stale rows of
  // a reused page, so attention that read slots past a sequence's length would give wrong (not NaN) results, which
  // the tests against the reference catch.
  for (DeviceBuffer* b : {&s.residual, &s.h, &s.qkv, &s.attn, &s.gu, &s.act, &s.hl, &s.logits, &s.probs})
    FLASHCPP_CUDA_CHECK(cudaMemset(b->get(), 0xff, b->size()));
  for (DeviceBuffer* b : {&s.k_cache, &s.v_cache}) FLASHCPP_CUDA_CHECK(cudaMemset(b->get(), 0x40, b->size()));
  // The copies and fills above run on the legacy default stream and may still be in flight on return; the engine's
  // stream is non-blocking and would not wait for them (a fill could land after the first KV append).
  FLASHCPP_CUDA_CHECK(cudaDeviceSynchronize());
  s.off = index_offsets(s.opt);
  s.index_dev = DeviceBuffer(static_cast<size_t>(s.off.total * 4), dev);
  s.index_host = PinnedBuffer(static_cast<size_t>(s.off.total * 4));
  s.logits_host = PinnedBuffer(static_cast<size_t>(s.opt.max_logit_rows * c.vocab * 4));
  // On where the model fits the kernel and the device can hold its grid at once; else the fused and unfused paths.
  if (s.opt.persistent_decode && decode_step_supports(1, c.hidden, c.ffn, c.heads, c.kv_heads, c.head_dim, c.vocab) &&
      decode_step_launch_check(s.model->dtype == DType::f16) == cudaSuccess) {
    std::vector<DecodeStepLayer> layers(static_cast<size_t>(c.layers));
    for (size_t i = 0; i < layers.size(); ++i) {
      const Impl::LayerPtrs& w = s.layer_w[i];
      const int64_t off = static_cast<int64_t>(i) * s.opt.max_pages * page_elems;
      layers[i] = {w.attn_norm, w.wqkv, w.wo, w.ffn_norm, w.w_gate_up, w.w_down,
                   static_cast<uint16_t*>(s.k_cache.get()) + off, static_cast<uint16_t*>(s.v_cache.get()) + off};
    }
    s.step_layers = DeviceBuffer(layers.size() * sizeof(DecodeStepLayer), dev);
    FLASHCPP_CUDA_CHECK(cudaMemcpy(s.step_layers.get(), layers.data(), s.step_layers.size(), cudaMemcpyHostToDevice));
    s.step_splits = DeviceBuffer(static_cast<size_t>(decode_step_split_floats(kDecodeStepMaxTokens, c.heads) * 4), dev);
    FLASHCPP_CUDA_CHECK(cudaMemset(s.step_splits.get(), 0xff, s.step_splits.size()));  // NaN, as the activations
    s.step_barrier = DeviceBuffer(sizeof(unsigned), dev);
    FLASHCPP_CUDA_CHECK(cudaMemset(s.step_barrier.get(), 0, sizeof(unsigned)));
    FLASHCPP_CUDA_CHECK(cudaDeviceSynchronize());
  }
  if (s.opt.time_steps) {
    s.step_begin.emplace();
    s.step_end.emplace();
  }
}

void setup_reference(Impl& s) {
  const ModelConfig& c = s.cfg;
  const size_t cache = static_cast<size_t>(c.layers * s.opt.max_pages * s.opt.page_size * c.kv_heads * c.head_dim);
  s.r_k.assign(cache, 0.f);
  s.r_v.assign(cache, 0.f);
  auto to_f32 = [&](const std::vector<uint16_t>& b) {
    std::vector<float> f(b.size());
    for (size_t i = 0; i < b.size(); ++i) f[i] = half_bits_to_f32(s.model->dtype, b[i]);
    return f;
  };
  for (const LayerWeights& l : s.model->layers) {
    s.r_norms.push_back(to_f32(l.attn_norm));
    s.r_norms.push_back(to_f32(l.ffn_norm));
  }
  s.r_norms.push_back(to_f32(s.model->output_norm));
}

// Checks the step and builds its host arrays; allocates the pages it needs only once everything is valid.
StepPlan plan_step(Impl& s, std::span<const StepInput> batch) {
  const EngineOptions& o = s.opt;
  if (batch.empty()) bad("'batch' must hold at least one entry");
  if (static_cast<int64_t>(batch.size()) > o.max_batch)
    bad("'batch' holds " + std::to_string(batch.size()) + " entries; max_batch is " + std::to_string(o.max_batch));
  StepPlan p;
  p.batch = static_cast<int64_t>(batch.size());
  int64_t new_pages = 0;
  std::vector<bool> seen(s.seqs.size(), false);
  p.decode = true;
  for (size_t e = 0; e < batch.size(); ++e) {
    const StepInput& in = batch[e];
    const std::string arg = "batch[" + std::to_string(e) + "]";
    if (in.sequence < 0 || in.sequence >= static_cast<int>(s.seqs.size()) || !s.seqs[in.sequence].open)
      bad(arg + ".sequence " + std::to_string(in.sequence) + " is not an open sequence");
    if (seen[in.sequence]) bad(arg + ".sequence " + std::to_string(in.sequence) + " appears twice in one step");
    seen[in.sequence] = true;
    if (in.tokens.empty()) bad(arg + ".tokens must hold at least one token");
    for (size_t i = 0; i < in.tokens.size(); ++i)
      if (in.tokens[i] < 0 || in.tokens[i] >= s.cfg.vocab)
        bad(arg + ".tokens[" + std::to_string(i) + "] = " + std::to_string(in.tokens[i]) + " is outside [0, " +
            std::to_string(s.cfg.vocab) + ")");
    const Sequence& q = s.seqs[in.sequence];
    const int64_t n = static_cast<int64_t>(in.tokens.size()), len = q.length + n;
    if (len > s.cfg.context)
      bad(arg + ": sequence " + std::to_string(in.sequence) + " would hold " + std::to_string(len) +
          " tokens; the model's context is " + std::to_string(s.cfg.context));
    new_pages += ceil_div(len, o.page_size) - static_cast<int64_t>(q.pages.size());
    p.tokens += n;
    p.rows += in.all_logits ? n : 1;
    p.decode = p.decode && n == 1;
  }
  if (p.tokens > o.max_step_tokens)
    bad("the step holds " + std::to_string(p.tokens) + " tokens; max_step_tokens is " + std::to_string(o.max_step_tokens));
  if (p.rows > o.max_logit_rows)
    bad("the step asks for " + std::to_string(p.rows) + " logit rows; max_logit_rows is " +
        std::to_string(o.max_logit_rows));
  if (new_pages > static_cast<int64_t>(s.free_pages.size()))
    bad("the step needs " + std::to_string(new_pages) + " new KV pages; " + std::to_string(s.free_pages.size()) +
        " of " + std::to_string(o.max_pages) + " are free");

  // Valid: take the pages and lay out the arrays.
  p.qo_indptr.push_back(0);
  p.kv_indptr.push_back(0);
  for (size_t e = 0; e < batch.size(); ++e) {
    const StepInput& in = batch[e];
    Sequence& q = s.seqs[in.sequence];
    const int64_t n = static_cast<int64_t>(in.tokens.size()), len = q.length + n;
    while (static_cast<int64_t>(q.pages.size()) < ceil_div(len, o.page_size)) {
      q.pages.push_back(s.free_pages.back());
      s.free_pages.pop_back();
    }
    const int32_t first = static_cast<int32_t>(p.token_ids.size());
    for (int64_t i = 0; i < n; ++i) {
      p.token_ids.push_back(in.tokens[static_cast<size_t>(i)]);
      p.positions.push_back(static_cast<int32_t>(q.length + i));
      p.batch_indices.push_back(static_cast<int32_t>(e));
    }
    if (in.all_logits)
      for (int64_t i = 0; i < n; ++i) p.logit_rows.push_back(first + static_cast<int32_t>(i));
    else
      p.logit_rows.push_back(first + static_cast<int32_t>(n - 1));
    p.qo_indptr.push_back(static_cast<int32_t>(p.token_ids.size()));
    p.kv_indices.insert(p.kv_indices.end(), q.pages.begin(), q.pages.end());
    p.kv_indptr.push_back(static_cast<int32_t>(p.kv_indices.size()));
    p.last_page_len.push_back(static_cast<int32_t>(len - (static_cast<int64_t>(q.pages.size()) - 1) * o.page_size));
    q.length = len;
  }
  return p;
}

// ------------------------------------------------------------------------------------------------ gpu step

struct GpuViews {
  Device dev;
  TensorView i32(const DeviceBuffer& b, int64_t offset, int64_t n) const {
    return TensorView::contiguous(static_cast<int32_t*>(b.get()) + offset, DType::i32, dev, {n});
  }
};

TensorView host_i32(const std::vector<int32_t>& v) {
  return TensorView::contiguous(const_cast<int32_t*>(v.data()), DType::i32, Device::cpu(),
                                {static_cast<int64_t>(v.size())});
}

bool fused_decode_applies(const Impl& s, int64_t tokens) {
  const ModelConfig& c = s.cfg;
  return tokens <= s.opt.fused_decode_max_tokens && decode_linear_supports(tokens, c.hidden) &&
         decode_linear_supports(tokens, c.heads * c.head_dim) && decode_linear_supports(tokens, c.ffn);
}

int64_t enqueue_sampler(Impl& s, const StepPlan& p, const SamplerOptions& sample, bool pdl);

bool persistent_decode_applies(const Impl& s, const StepPlan& p) {
  return p.decode && s.opt.persistent_decode && s.step_layers.get() != nullptr && p.tokens <= kDecodeStepMaxTokens;
}

// A decode step as one persistent kernel (decode_step.hpp), then the sampler. Returns the launches after the embedding.
int64_t enqueue_persistent_decode(Impl& s, const StepPlan& p, const SamplerOptions* sample, bool pdl) {
  const ModelConfig& c = s.cfg;
  const auto* idx = static_cast<const int32_t*>(s.index_dev.get());
  DecodeStepParams dp;
  dp.f16 = s.model->dtype == DType::f16;
  dp.tokens = p.tokens;
  dp.layers = c.layers;
  dp.hidden = c.hidden;
  dp.ffn = c.ffn;
  dp.heads = c.heads;
  dp.kv_heads = c.kv_heads;
  dp.head_dim = c.head_dim;
  dp.vocab = c.vocab;
  dp.page_size = s.opt.page_size;
  dp.eps = static_cast<float>(c.rms_eps);
  dp.rope_theta = static_cast<float>(c.rope_theta);
  dp.layer = static_cast<const DecodeStepLayer*>(s.step_layers.get());
  dp.out_norm = s.out_norm_w;
  dp.lm_head = s.head_w;
  dp.residual = static_cast<uint16_t*>(s.residual.get());
  dp.qkv = static_cast<uint16_t*>(s.qkv.get());
  dp.attn_split = static_cast<float*>(s.step_splits.get());
  dp.act = static_cast<uint16_t*>(s.act.get());
  dp.logits = static_cast<float*>(s.logits.get());
  dp.positions = idx + s.off.positions;
  dp.batch_indices = idx + s.off.batch_indices;
  dp.kv_indptr = idx + s.off.kv_indptr;
  dp.kv_indices = idx + s.off.kv_indices;
  dp.barrier = static_cast<unsigned*>(s.step_barrier.get());
  FLASHCPP_CUDA_CHECK(launch_decode_step(dp, s.stream->get()));
  return 1 + (sample ? enqueue_sampler(s, p, *sample, pdl) : 0);
}

// A decode step of at most kDecodeLinearMaxTokens tokens in 5 kernels a layer (decode_linear.hpp): the q/k/v projection
// with the attention norm before it and RoPE and the KV append after it; attention; the o projection adding into the
// residual; the gate/up projection with the FFN norm before it and SiLU-and-mul after it; the down projection adding
// into the residual. Then the LM head with the output norm, and the sampler. Returns the launches after the embedding.
int64_t enqueue_fused_decode(Impl& s, const StepPlan& p, const BatchDecodePlan& decode, const SamplerOptions* sample,
                             bool pdl) {
  const ModelConfig& c = s.cfg;
  const cudaStream_t st = s.stream->get();
  const Device dev = Device::cuda(s.opt.device);
  const GpuViews g{dev};
  const DType dt = s.model->dtype;
  const int64_t t = p.tokens, d = c.head_dim, qkv_rows = c.qkv_rows();
  const int64_t page_elems = s.opt.page_size * c.kv_heads * d;
  const auto* idx = static_cast<const int32_t*>(s.index_dev.get());
  auto* residual = static_cast<uint16_t*>(s.residual.get());
  auto* qkv = static_cast<uint16_t*>(s.qkv.get());
  DecodeLinearParams base;
  base.f16 = dt == DType::f16;
  base.tokens = t;
  base.eps = static_cast<float>(c.rms_eps);
  base.pdl = pdl;
  auto run = [&](const DecodeLinearParams& lp) { FLASHCPP_CUDA_CHECK(launch_decode_linear(lp, st)); };
  const TensorView q = TensorView::strided(qkv, dt, dev, {t, c.heads, d}, {qkv_rows, d, 1});
  const TensorView attn = TensorView::contiguous(s.attn.get(), dt, dev, {t, c.heads, d});
  int64_t launches = 0;
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    const Impl::LayerPtrs& w = s.layer_w[static_cast<size_t>(layer)];
    auto* k_cache = static_cast<uint16_t*>(s.k_cache.get()) + layer * s.opt.max_pages * page_elems;
    auto* v_cache = static_cast<uint16_t*>(s.v_cache.get()) + layer * s.opt.max_pages * page_elems;
    DecodeLinearParams qkv_p = base;
    qkv_p.epilogue = DecodeEpilogue::rope_append;
    qkv_p.rows = qkv_rows;
    qkv_p.k = c.hidden;
    qkv_p.w = w.wqkv;
    qkv_p.x = residual;
    qkv_p.norm_w = w.attn_norm;
    qkv_p.q_out = qkv;
    qkv_p.q_stride = qkv_rows;
    qkv_p.k_cache = k_cache;
    qkv_p.v_cache = v_cache;
    qkv_p.positions = idx + s.off.positions;
    qkv_p.batch_indices = idx + s.off.batch_indices;
    qkv_p.kv_indptr = idx + s.off.kv_indptr;
    qkv_p.kv_indices = idx + s.off.kv_indices;
    qkv_p.heads = c.heads;
    qkv_p.kv_heads = c.kv_heads;
    qkv_p.head_dim = d;
    qkv_p.page_size = s.opt.page_size;
    qkv_p.rope_theta = static_cast<float>(c.rope_theta);
    run(qkv_p);
    PagedKvCache kv;
    kv.k_cache = TensorView::contiguous(k_cache, dt, dev, {s.opt.max_pages, s.opt.page_size, c.kv_heads, d});
    kv.v_cache = TensorView::contiguous(v_cache, dt, dev, {s.opt.max_pages, s.opt.page_size, c.kv_heads, d});
    kv.indices = g.i32(s.index_dev, s.off.kv_indices, s.opt.max_pages);
    kv.indptr = g.i32(s.index_dev, s.off.kv_indptr, p.batch + 1);
    kv.last_page_len = g.i32(s.index_dev, s.off.last_page_len, p.batch);
    decode.run(q, kv, attn, nullptr, st);
    DecodeLinearParams o_p = base;
    o_p.epilogue = DecodeEpilogue::add_residual;
    o_p.rows = c.hidden;
    o_p.k = c.heads * d;
    o_p.w = w.wo;
    o_p.x = static_cast<const uint16_t*>(s.attn.get());
    o_p.residual = residual;
    run(o_p);
    DecodeLinearParams gu_p = base;
    gu_p.epilogue = DecodeEpilogue::silu_and_mul;
    gu_p.rows = 2 * c.ffn;
    gu_p.k = c.hidden;
    gu_p.w = w.w_gate_up;
    gu_p.x = residual;
    gu_p.norm_w = w.ffn_norm;
    gu_p.act = static_cast<uint16_t*>(s.act.get());
    run(gu_p);
    DecodeLinearParams down_p = base;
    down_p.epilogue = DecodeEpilogue::add_residual;
    down_p.rows = c.hidden;
    down_p.k = c.ffn;
    down_p.w = w.w_down;
    down_p.x = static_cast<const uint16_t*>(s.act.get());
    down_p.residual = residual;
    run(down_p);
    launches += 5;
  }
  // Every entry of a decode step brings one token: the logit rows are the tokens, in order.
  DecodeLinearParams head_p = base;
  head_p.epilogue = DecodeEpilogue::store_f32;
  head_p.rows = c.vocab;
  head_p.k = c.hidden;
  head_p.w = s.head_w;
  head_p.x = residual;
  head_p.norm_w = s.out_norm_w;
  head_p.out_f32 = static_cast<float*>(s.logits.get());
  run(head_p);
  ++launches;
  if (sample) launches += enqueue_sampler(s, p, *sample, pdl);
  return launches;
}

// Enqueues the whole step (after the index upload) on the engine's stream: every layer, then the logits of the
// planned rows into s.logits. With `sample`, also the next token of each entry into the index buffer's samples.
int64_t enqueue_gpu_step(Impl& s, const StepPlan& p, const BatchPrefillPlan* prefill, const BatchDecodePlan* decode,
                         const SamplerOptions* sample) {
  const ModelConfig& c = s.cfg;
  const cudaStream_t st = s.stream->get();
  const Device dev = Device::cuda(s.opt.device);
  const GpuViews g{dev};
  const Runtime& rt = *s.rt;
  const int64_t t = p.tokens, d = c.head_dim, qkv_rows = c.qkv_rows();
  int64_t launches = 0;
  const DType dt = s.model->dtype;
  auto half = [&](const void* ptr, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(const_cast<void*>(ptr), dt, dev, shape);
  };
  const auto* idx = static_cast<const int32_t*>(s.index_dev.get());
  const TensorView positions = g.i32(s.index_dev, s.off.positions, t);
  const TensorView batch_indices = g.i32(s.index_dev, s.off.batch_indices, t);
  const TensorView qo_indptr = g.i32(s.index_dev, s.off.qo_indptr, p.batch + 1);
  const int64_t page_elems = s.opt.page_size * c.kv_heads * d;
  const bool pdl = s.opt.pdl && device_facts(s.opt.device).cc_major >= 9;
  const RmsNormOptions norm{c.rms_eps, pdl};
  RopeOptions rope;
  rope.interleave = true;  // llama.cpp's permuted q/k rows (model.hpp)
  rope.rope_theta = c.rope_theta;

  const TensorView residual = half(s.residual.get(), {t, c.hidden});
  const TensorView h = half(s.h.get(), {t, c.hidden});
  FLASHCPP_CUDA_CHECK(launch_gather_rows(s.embedding_w, idx + s.off.tokens, t, c.hidden,
                                         static_cast<uint16_t*>(s.residual.get()), st));
  ++launches;
  if (persistent_decode_applies(s, p)) return launches + enqueue_persistent_decode(s, p, sample, pdl);
  if (decode && fused_decode_applies(s, t)) return launches + enqueue_fused_decode(s, p, *decode, sample, pdl);
  rmsnorm(rt, h, residual, half(s.layer_w[0].attn_norm, {c.hidden}), norm, st);
  ++launches;
  auto* qkv = static_cast<uint16_t*>(s.qkv.get());
  const TensorView q = TensorView::strided(qkv, dt, dev, {t, c.heads, d}, {qkv_rows, d, 1});
  const TensorView k = TensorView::strided(qkv + c.heads * d, dt, dev, {t, c.kv_heads, d}, {qkv_rows, d, 1});
  const TensorView v =
      TensorView::strided(qkv + (c.heads + c.kv_heads) * d, dt, dev, {t, c.kv_heads, d}, {qkv_rows, d, 1});
  const TensorView attn = half(s.attn.get(), {t, c.heads, d});
  const TensorView gu = half(s.gu.get(), {t, 2 * c.ffn});
  const TensorView act = half(s.act.get(), {t, c.ffn});

  for (int64_t layer = 0; layer < c.layers; ++layer) {
    const Impl::LayerPtrs& w = s.layer_w[static_cast<size_t>(layer)];
    s.gemm->run(s.h.get(), w.wqkv, qkv, t, qkv_rows, c.hidden, false, st);
    apply_rope_pos_ids(rt, q, k, q, k, positions, rope, st);
    PagedKvCache kv;
    const int64_t layer_off = layer * s.opt.max_pages * page_elems;
    kv.k_cache = half(static_cast<uint16_t*>(s.k_cache.get()) + layer_off, {s.opt.max_pages, s.opt.page_size, c.kv_heads, d});
    kv.v_cache = half(static_cast<uint16_t*>(s.v_cache.get()) + layer_off, {s.opt.max_pages, s.opt.page_size, c.kv_heads, d});
    // The whole page-id array: its extent stays the same from step to step (a captured graph's does too).
    kv.indices = g.i32(s.index_dev, s.off.kv_indices, s.opt.max_pages);
    kv.indptr = g.i32(s.index_dev, s.off.kv_indptr, p.batch + 1);
    kv.last_page_len = g.i32(s.index_dev, s.off.last_page_len, p.batch);
    append_paged_kv_cache(rt, k, v, batch_indices, positions, kv, st);
    if (decode)
      decode->run(q, kv, attn, nullptr, st);
    else
      prefill->run_paged(q, kv, qo_indptr, attn, nullptr, st);
    s.gemm->run(s.attn.get(), w.wo, s.h.get(), t, c.hidden, c.heads * d, false, st);
    fused_add_rmsnorm(rt, h, residual, half(w.ffn_norm, {c.hidden}), norm, st);
    s.gemm->run(s.h.get(), w.w_gate_up, s.gu.get(), t, 2 * c.ffn, c.hidden, false, st);
    silu_and_mul(rt, act, gu, ActivationOptions{pdl}, st);
    s.gemm->run(s.act.get(), w.w_down, s.h.get(), t, c.hidden, c.ffn, false, st);
    const uint16_t* next_norm = layer + 1 < c.layers ? s.layer_w[static_cast<size_t>(layer + 1)].attn_norm : s.out_norm_w;
    fused_add_rmsnorm(rt, h, residual, half(next_norm, {c.hidden}), norm, st);
    launches += 10;
  }
  FLASHCPP_CUDA_CHECK(launch_gather_rows(static_cast<const uint16_t*>(s.h.get()), idx + s.off.logit_rows, p.rows,
                                         c.hidden, static_cast<uint16_t*>(s.hl.get()), st));
  s.gemm->run(s.hl.get(), s.head_w, s.logits.get(), p.rows, c.vocab, c.hidden, true, st);
  launches += 2;
  if (sample) launches += enqueue_sampler(s, p, *sample, pdl);
  return launches;
}

// Each entry's next token from its logit row, into the index buffer's samples. Returns the launches.
int64_t enqueue_sampler(Impl& s, const StepPlan& p, const SamplerOptions& sample, bool pdl) {
  const ModelConfig& c = s.cfg;
  const cudaStream_t st = s.stream->get();
  const Device dev = Device::cuda(s.opt.device);
  const Runtime& rt = *s.rt;
  const TensorView logits = TensorView::contiguous(s.logits.get(), DType::f32, dev, {p.rows, c.vocab});
  const TensorView probs = TensorView::contiguous(s.probs.get(), DType::f32, dev, {p.rows, c.vocab});
  const TensorView samples = GpuViews{dev}.i32(s.index_dev, s.off.samples, p.rows);
  SamplingOptions so;
  so.philox_seed = sample.seed;
  if (sample.greedy) {
    // Greedy: the top-1 of the distribution (top-k sampling with k = 1 draws the largest probability).
    softmax(rt, s.sampling_ws->view().softmax_buffer, logits, probs, 1.0, SoftmaxOptions{pdl}, st);
    top_k_sampling_from_probs(rt, probs, samples, 1, nullptr, so, st);
    return 2;
  }
  top_k_top_p_sampling_from_logits(rt, *s.sampling_ws, logits, probs, samples, sample.top_k, sample.top_p,
                                   TopKTopPOrder::top_k_first, nullptr, so, st);
  return 3;
}

void upload_indices(Impl& s, const StepPlan& p) {
  auto* h = static_cast<int32_t*>(s.index_host.get());
  auto put = [&](int64_t off, const std::vector<int32_t>& v) { std::memcpy(h + off, v.data(), v.size() * 4); };
  put(s.off.tokens, p.token_ids);
  put(s.off.positions, p.positions);
  put(s.off.batch_indices, p.batch_indices);
  put(s.off.qo_indptr, p.qo_indptr);
  put(s.off.kv_indptr, p.kv_indptr);
  put(s.off.last_page_len, p.last_page_len);
  put(s.off.kv_indices, p.kv_indices);
  put(s.off.logit_rows, p.logit_rows);
  // The pinned buffer is rewritten by the next step only after this copy ran (gpu_step synchronizes at its end).
  FLASHCPP_CUDA_CHECK(cudaMemcpyAsync(s.index_dev.get(), h, static_cast<size_t>(s.off.samples * 4),
                                      cudaMemcpyHostToDevice, s.stream->get()));
}

// Runs a planned step on the GPU; returns when its results (logits or samples) are on the host.
void gpu_step(Impl& s, const StepPlan& p, const SamplerOptions* sample, float* logits_out, int32_t* samples_out) {
  const ModelConfig& c = s.cfg;
  DeviceGuard guard(s.opt.device);
  const cudaStream_t st = s.stream->get();
  if (s.step_begin) s.step_begin->record(st);
  upload_indices(s, p);
  std::optional<BatchPrefillPlan> prefill;
  std::optional<BatchDecodePlan> decode;
  const auto plan_start = std::chrono::steady_clock::now();
  const bool graphs = s.opt.cuda_graphs && p.decode && sample != nullptr;
  if (persistent_decode_applies(s, p)) {
    // No attention plan: the persistent kernel splits each token's keys itself.
  } else if (p.decode) {
    BatchDecodeConfig dc;
    dc.num_qo_heads = c.heads;
    dc.num_kv_heads = c.kv_heads;
    dc.head_dim = c.head_dim;
    dc.page_size = s.opt.page_size;
    dc.q_dtype = dc.kv_dtype = s.model->dtype;
    dc.enable_cuda_graph = graphs;
    dc.enable_pdl = s.opt.pdl && device_facts(s.opt.device).cc_major >= 9;
    if (s.opt.decode_unsplit) {
      dc.backend = DecodeBackend::tensor_cores;
      dc.disable_split_kv = true;
    }
    const DecodeIndptrs ip{host_i32(p.kv_indptr), host_i32(p.last_page_len)};
    decode.emplace(BatchDecodePlan::create(*s.rt, *s.ws, ip, dc, st));
  } else {
    BatchPrefillConfig pc;
    pc.kv_storage = KvStorage::paged;
    pc.num_qo_heads = c.heads;
    pc.num_kv_heads = c.kv_heads;
    pc.head_dim_qk = c.head_dim;
    pc.page_size = s.opt.page_size;
    pc.q_dtype = pc.kv_dtype = s.model->dtype;
    pc.causal = true;
    pc.enable_pdl = s.opt.pdl && device_facts(s.opt.device).cc_major >= 9;
    const PrefillIndptrs ip{host_i32(p.qo_indptr), host_i32(p.kv_indptr), host_i32(p.last_page_len)};
    prefill.emplace(BatchPrefillPlan::create(*s.rt, *s.ws, ip, pc, st));
  }
  const double plan_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - plan_start).count();
  s.last_replayed = false;
  s.last_path = !p.decode                        ? "prefill"
                : persistent_decode_applies(s, p) ? "persistent"
                : fused_decode_applies(s, p.tokens) ? "fused"
                                                    : "unfused";
  if (graphs) {
    // A decode step of this batch size replays its graph when the plan matches the captured one (FlashInfer's
    // CUDA-graph mode keeps the workspace layout of a batch size; the index arrays sit at fixed offsets).
    std::unique_ptr<Graph>& gr = s.graphs[p.batch];
    const std::vector<int64_t> plan_info = decode ? decode->plan_info() : std::vector<int64_t>{};
    if (gr && gr->plan_info != plan_info) gr.reset();
    if (!gr) {
      auto fresh = std::make_unique<Graph>();
      FLASHCPP_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      try {
        fresh->launches = enqueue_gpu_step(s, p, nullptr, decode ? &*decode : nullptr, sample);
      } catch (...) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(st, &broken);
        if (broken) cudaGraphDestroy(broken);
        throw;
      }
      FLASHCPP_CUDA_CHECK(cudaStreamEndCapture(st, &fresh->graph));
      FLASHCPP_CUDA_CHECK(cudaGraphInstantiate(&fresh->exec, fresh->graph, 0));
      fresh->plan_info = plan_info;
      gr = std::move(fresh);
    } else {
      s.last_replayed = true;
    }
    FLASHCPP_CUDA_CHECK(cudaGraphLaunch(gr->exec, st));
    s.last_launches = gr->launches;
  } else {
    s.last_launches = enqueue_gpu_step(s, p, prefill ? &*prefill : nullptr, decode ? &*decode : nullptr, sample);
  }
  if (s.step_end) s.step_end->record(st);
  if (sample) {
    FLASHCPP_CUDA_CHECK(cudaMemcpyAsync(samples_out, static_cast<int32_t*>(s.index_dev.get()) + s.off.samples,
                                        static_cast<size_t>(p.rows * 4), cudaMemcpyDeviceToHost, st));
  } else {
    FLASHCPP_CUDA_CHECK(cudaMemcpyAsync(s.logits_host.get(), s.logits.get(), static_cast<size_t>(p.rows * c.vocab * 4),
                                        cudaMemcpyDeviceToHost, st));
  }
  s.stream->synchronize();
  if (s.step_end) s.last_timing = {plan_us, 1e3 * s.step_end->elapsed_ms_since(*s.step_begin)};
  if (!sample) std::memcpy(logits_out, s.logits_host.get(), static_cast<size_t>(p.rows * c.vocab * 4));
}

// ------------------------------------------------------------------------------------------------ reference step

// y [t, n] = x [t, k] . w [n, k]^T, w 16-bit of `wt`, f32 accumulation.
void ref_gemm(DType wt, const float* x, const uint16_t* w, float* y, int64_t t, int64_t n, int64_t k) {
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < k; ++i) row[static_cast<size_t>(i)] = half_bits_to_f32(wt, w[j * k + i]);
    for (int64_t r = 0; r < t; ++r) {
      const float* xr = x + r * k;
      float acc = 0.f;
      for (int64_t i = 0; i < k; ++i) acc += xr[i] * row[static_cast<size_t>(i)];
      y[r * n + j] = acc;
    }
  }
}

void reference_step(Impl& s, const StepPlan& p, float* logits_out) {
  const ModelConfig& c = s.cfg;
  const Device cpu = Device::cpu();
  const int64_t t = p.tokens, d = c.head_dim, qkv_rows = c.qkv_rows();
  auto f32 = [&](float* ptr, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(ptr, DType::f32, cpu, shape);
  };
  std::vector<float> residual(static_cast<size_t>(t * c.hidden)), h(residual.size()), qkv(static_cast<size_t>(t * qkv_rows)),
      q_rot(static_cast<size_t>(t * c.heads * d)), k_rot(static_cast<size_t>(t * c.kv_heads * d)), attn(q_rot.size()),
      gu(static_cast<size_t>(t * 2 * c.ffn)), act(static_cast<size_t>(t * c.ffn));
  for (int64_t r = 0; r < t; ++r)
    for (int64_t i = 0; i < c.hidden; ++i)
      residual[static_cast<size_t>(r * c.hidden + i)] =
          half_bits_to_f32(s.model->dtype, s.model->embedding[static_cast<size_t>(p.token_ids[static_cast<size_t>(r)] * c.hidden + i)]);
  const TensorView res_v = f32(residual.data(), {t, c.hidden}), h_v = f32(h.data(), {t, c.hidden});
  auto norm_w = [&](size_t i) { return f32(s.r_norms[i].data(), {c.hidden}); };
  reference::rmsnorm(h_v, res_v, norm_w(0), RmsNormOptions{c.rms_eps, false});
  const TensorView q = TensorView::strided(qkv.data(), DType::f32, cpu, {t, c.heads, d}, {qkv_rows, d, 1});
  const TensorView k = TensorView::strided(qkv.data() + c.heads * d, DType::f32, cpu, {t, c.kv_heads, d}, {qkv_rows, d, 1});
  const TensorView v =
      TensorView::strided(qkv.data() + (c.heads + c.kv_heads) * d, DType::f32, cpu, {t, c.kv_heads, d}, {qkv_rows, d, 1});
  const TensorView qr = f32(q_rot.data(), {t, c.heads, d}), kr = f32(k_rot.data(), {t, c.kv_heads, d});
  std::vector<int32_t> kv_indices = p.kv_indices;
  if (kv_indices.empty()) kv_indices.push_back(0);
  const TensorView positions = host_i32(p.positions), batch_indices = host_i32(p.batch_indices);
  RopeOptions rope;
  rope.interleave = true;
  rope.rope_theta = c.rope_theta;
  BatchPrefillConfig pc;
  pc.num_qo_heads = c.heads;
  pc.num_kv_heads = c.kv_heads;
  pc.head_dim_qk = c.head_dim;
  pc.page_size = s.opt.page_size;
  pc.causal = true;
  const int64_t page_elems = s.opt.page_size * c.kv_heads * d;
  for (int64_t layer = 0; layer < c.layers; ++layer) {
    const LayerWeights& w = s.model->layers[static_cast<size_t>(layer)];
    ref_gemm(s.model->dtype, h.data(), w.wqkv.data(), qkv.data(), t, qkv_rows, c.hidden);
    reference::apply_rope_pos_ids(q, k, qr, kr, positions, rope);
    PagedKvCache kv;
    float* kc = s.r_k.data() + layer * s.opt.max_pages * page_elems;
    float* vc = s.r_v.data() + layer * s.opt.max_pages * page_elems;
    kv.k_cache = f32(kc, {s.opt.max_pages, s.opt.page_size, c.kv_heads, d});
    kv.v_cache = f32(vc, {s.opt.max_pages, s.opt.page_size, c.kv_heads, d});
    kv.indices = host_i32(kv_indices);
    kv.indptr = host_i32(p.kv_indptr);
    kv.last_page_len = host_i32(p.last_page_len);
    reference::append_paged_kv_cache(kr, v, batch_indices, positions, kv);
    reference::batch_prefill_paged(qr, kv, host_i32(p.qo_indptr), f32(attn.data(), {t, c.heads, d}), nullptr, pc);
    ref_gemm(s.model->dtype, attn.data(), w.wo.data(), h.data(), t, c.hidden, c.heads * d);
    reference::fused_add_rmsnorm(h_v, res_v, norm_w(static_cast<size_t>(2 * layer + 1)), RmsNormOptions{c.rms_eps, false});
    ref_gemm(s.model->dtype, h.data(), w.w_gate_up.data(), gu.data(), t, 2 * c.ffn, c.hidden);
    reference::silu_and_mul(f32(act.data(), {t, c.ffn}), f32(gu.data(), {t, 2 * c.ffn}));
    ref_gemm(s.model->dtype, act.data(), w.w_down.data(), h.data(), t, c.hidden, c.ffn);
    reference::fused_add_rmsnorm(h_v, res_v, norm_w(static_cast<size_t>(2 * layer + 2)), RmsNormOptions{c.rms_eps, false});
  }
  std::vector<float> hl(static_cast<size_t>(p.rows * c.hidden));
  for (int64_t r = 0; r < p.rows; ++r)
    std::memcpy(&hl[static_cast<size_t>(r * c.hidden)], &h[static_cast<size_t>(p.logit_rows[static_cast<size_t>(r)] * c.hidden)],
                static_cast<size_t>(c.hidden) * 4);
  ref_gemm(s.model->dtype, hl.data(), s.model->head().data(), logits_out, p.rows, c.vocab, c.hidden);
}

}  // namespace

// ------------------------------------------------------------------------------------------------ Engine

Engine::Engine(const Model& model, const EngineOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  const EngineOptions& o = options;
  auto range = [](const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      bad(std::string("EngineOptions::") + name + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
          "]; got " + std::to_string(v));
  };
  range("page_size", o.page_size, 1, 1024);
  range("max_pages", o.max_pages, 1, int64_t{1} << 24);
  range("max_batch", o.max_batch, 1, 4096);
  range("max_step_tokens", o.max_step_tokens, 1, int64_t{1} << 20);
  range("max_logit_rows", o.max_logit_rows, o.max_batch, int64_t{1} << 20);
  range("fused_decode_max_tokens", o.fused_decode_max_tokens, 0, kDecodeLinearMaxTokens);
  if (model.layers.size() != static_cast<size_t>(model.config.layers) || model.layers.empty())
    bad("the model's layers do not match its configuration");
  s.model = &model;
  s.cfg = model.config;
  s.opt = o;
  s.seqs.resize(static_cast<size_t>(o.max_batch * 4));
  for (int64_t i = o.max_pages - 1; i >= 0; --i) s.free_pages.push_back(static_cast<int32_t>(i));
  if (o.backend == Backend::gpu)
    setup_gpu(s);
  else
    setup_reference(s);
}

Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

int Engine::open_sequence() {
  for (size_t i = 0; i < impl_->seqs.size(); ++i)
    if (!impl_->seqs[i].open) {
      impl_->seqs[i] = Sequence{true, 0, {}};
      return static_cast<int>(i);
    }
  bad("all " + std::to_string(impl_->seqs.size()) + " sequence slots are open");
}

void Engine::close_sequence(int sequence) {
  if (sequence < 0 || sequence >= static_cast<int>(impl_->seqs.size()) || !impl_->seqs[sequence].open)
    bad("close_sequence: " + std::to_string(sequence) + " is not an open sequence");
  Sequence& q = impl_->seqs[sequence];
  for (auto it = q.pages.rbegin(); it != q.pages.rend(); ++it) impl_->free_pages.push_back(*it);
  q = Sequence{};
}

int64_t Engine::length(int sequence) const {
  if (sequence < 0 || sequence >= static_cast<int>(impl_->seqs.size()) || !impl_->seqs[sequence].open)
    bad("length: " + std::to_string(sequence) + " is not an open sequence");
  return impl_->seqs[sequence].length;
}

int64_t Engine::free_pages() const { return static_cast<int64_t>(impl_->free_pages.size()); }

std::vector<float> Engine::forward(std::span<const StepInput> batch) {
  Impl& s = *impl_;
  const StepPlan p = plan_step(s, batch);
  std::vector<float> logits(static_cast<size_t>(p.rows * s.cfg.vocab));
  if (s.opt.backend == Backend::gpu)
    gpu_step(s, p, nullptr, logits.data(), nullptr);
  else
    reference_step(s, p, logits.data());
  return logits;
}

std::vector<int32_t> Engine::forward_sample(std::span<const StepInput> batch, const SamplerOptions& sampler) {
  Impl& s = *impl_;
  for (const StepInput& in : batch)
    if (in.all_logits) bad("forward_sample: all_logits is for forward(); a sampled step uses each entry's last token");
  if (!sampler.greedy && (sampler.top_k < 1 || !(sampler.top_p > 0 && sampler.top_p <= 1)))
    bad("SamplerOptions: top_k must be >= 1 and top_p in (0, 1]");
  const StepPlan p = plan_step(s, batch);
  std::vector<int32_t> next(static_cast<size_t>(p.rows));
  if (s.opt.backend == Backend::gpu) {
    gpu_step(s, p, &sampler, nullptr, next.data());
  } else {
    if (!sampler.greedy) throw_error(ErrorCode::unsupported, "engine: the reference backend samples greedily only");
    std::vector<float> logits(static_cast<size_t>(p.rows * s.cfg.vocab));
    reference_step(s, p, logits.data());
    for (int64_t r = 0; r < p.rows; ++r) {
      const float* row = logits.data() + r * s.cfg.vocab;
      next[static_cast<size_t>(r)] = static_cast<int32_t>(std::max_element(row, row + s.cfg.vocab) - row);
    }
  }
  return next;
}

int64_t Engine::last_step_launches() const { return impl_->last_launches; }
bool Engine::last_step_replayed() const { return impl_->last_replayed; }
const char* Engine::last_step_path() const { return impl_->last_path; }
Engine::StepTiming Engine::last_step_timing() const { return impl_->last_timing; }

}  // namespace flashcpp::llm
