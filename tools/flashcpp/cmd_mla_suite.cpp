// `flashcpp mla-bench --suite flashmla`: the performance cases of DeepSeek FlashMLA's tests
// (tests/test_flash_mla_sparse_decoding.py gen_testcase's performance_cases, plus V3.2 b 1, 8, 16, 32 and s_q 1;
// tests/test_flash_mla_sparse_prefill.py performance_case_templates), with inputs drawn as FlashMLA's tests/lib.py
// draws them, timed on flashcpp alone (bench/flashmla_side_by_side.py times FlashMLA beside it on the same cases).
// `--suite flashmla-dense`: its dense decoding cases (tests/test_flash_mla_dense_decoding.py), run_dense_case.
//
// Inputs (docs/PERFORMANCE.md, "flashcpp mla-bench --suite flashmla"): per pool, per-request cache lengths
// max(normal(s_k, s_k / 2), s_q), a randomly permuted block table, per query distinct random positions inside its
// request's length (-1 padding), NaN in every KV token no index (inside its pool's length) reads, values
// normal / 10 clamped to [-1, 1], quantized by flashcpp's quantizers into FlashMLA's page layouts; q, indices and
// extra indices as kernelkit's padded non-contiguous views; lse in FlashMLA's [b, h_q, s_q] layout.
// Timing: one CUDA-graph replay per timed run, the L2 evicted (a 256 MiB memset) before each, median of --iters;
// host time per eager call (30 back to back, no synchronization, best of 3). FLOPs as FlashMLA counts them.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "flashcpp/bench_data.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/mla.hpp"
#include "flashcpp/mla_suite.hpp"
#include "tools_internal.hpp"

namespace flashcpp::cli {
namespace {

constexpr size_t kL2FlushBytes = size_t{256} << 20;  // H200 L2 is 60 MB: four times over evicts it
constexpr int kHostCalls = 30, kHostRounds = 3;
constexpr int64_t kV32RowBytes = mla::kFp8BytesPerToken, kV4RowBytes = mla::kFp8V4BytesPerToken;
constexpr uint64_t kSuiteSeed = 0x5EED0000;  // case i draws from kSuiteSeed + i: a filter does not change inputs

using Clock = std::chrono::steady_clock;

struct DecodeCase {
  std::string name;
  int64_t b = 0, s_q = 2, h_q = 128, d_qk = 576, s_k = 32768, topk = 2048, block = 64;
  int64_t extra_s_k = 0, extra_topk = 0, extra_block = 0;  // extra_topk 0: no extra pool
  bool extra_topk_length = false;
};

struct PrefillCase {
  std::string name;
  int64_t d_qk = 576, h_q = 128, topk = 2048, s_kv = 0, s_q = 4096;
};

std::vector<DecodeCase> flashmla_decode_cases() {
  std::vector<DecodeCase> cases;
  auto add = [&](DecodeCase c, std::initializer_list<int64_t> batches) {
    for (int64_t b : batches) {
      c.b = b;
      cases.push_back(c);
    }
  };
  const DecodeCase v32{.name = "V3.2"};
  add(v32, {1, 2, 8, 16, 32, 64, 74, 128});
  DecodeCase v32_s_q1 = v32;
  v32_s_q1.name = "V3.2 s_q 1";
  v32_s_q1.s_q = 1;
  add(v32_s_q1, {1, 128});
  // FlashMLA's "MODEL1" (DeepSeek V4) configs 1-4.
  const DecodeCase v4{.name = "V4", .s_q = 2, .d_qk = 512, .s_k = 16384, .topk = 128, .block = 256, .extra_s_k = 16384,
                      .extra_block = 64};
  const struct {
    const char* name;
    int64_t h_q, extra_topk, extra_block;
    bool extra_topk_length;
  } configs[] = {{"V4 config 1", 64, 512, 64, false},
                 {"V4 config 2", 128, 1024, 64, false},
                 {"V4 config 3", 64, 1024, 2, true},
                 {"V4 config 4", 128, 1024, 2, true}};
  for (const auto& cfg : configs) {
    DecodeCase c = v4;
    c.name = cfg.name;
    c.h_q = cfg.h_q;
    c.extra_topk = cfg.extra_topk;
    c.extra_block = cfg.extra_block;
    c.extra_topk_length = cfg.extra_topk_length;
    add(c, {2, 64, 74, 128, 148, 256});
  }
  for (int64_t h_q : {64, 128})
    for (int64_t d_qk : {512, 576})
      cases.push_back({.name = "peak", .b = 148, .s_q = 2, .h_q = h_q, .d_qk = d_qk, .s_k = 32768, .topk = 16384});
  return cases;
}

std::vector<PrefillCase> flashmla_prefill_cases() {
  std::vector<PrefillCase> cases;
  const struct {
    const char* name;
    int64_t d_qk, h_q, topk;
    std::vector<int64_t> s_kv;
  } templates[] = {{"V3.2", 576, 128, 2048, {8192, 32768, 65536, 98304, 131072}},
                   {"V4 config 1", 512, 64, 512, {8192, 32768, 49152, 65536}},
                   {"V4 config 2", 512, 128, 1024, {8192, 32768, 49152, 65536}}};
  for (const auto& t : templates)
    for (int64_t s_kv : t.s_kv)
      cases.push_back({.name = t.name, .d_qk = t.d_qk, .h_q = t.h_q, .topk = t.topk, .s_kv = s_kv});
  return cases;
}

// Host data into a new device buffer, in order on `stream` (its kernels come next on that non-blocking stream);
// complete on return, so `host` may go.
template <class T>
DeviceBuffer upload(const std::vector<T>& host, int device, cudaStream_t stream) {
  DeviceBuffer buf(host.size() * sizeof(T), device);
  FLASHCPP_CUDA_CHECK(cudaMemcpyAsync(buf.get(), host.data(), buf.size(), cudaMemcpyHostToDevice, stream));
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
  return buf;
}

// kernelkit's non_contiguousify, as FlashMLA's tests hand every input over: storage with each dim one longer and
// the last 128 longer, viewed at the original shape.
struct PaddedLayout {
  std::vector<int64_t> shape, strides;
  int64_t storage_elems = 1;
};
PaddedLayout padded_layout(std::initializer_list<int64_t> shape) {
  PaddedLayout l{.shape = shape, .strides = std::vector<int64_t>(shape.size())};
  for (size_t d = shape.size(); d-- > 0;) {
    l.strides[d] = l.storage_elems;
    l.storage_elems *= l.shape[d] + (d + 1 == shape.size() ? 128 : 1);
  }
  return l;
}
TensorView padded_view(void* data, DType dtype, Device dev, const PaddedLayout& l) {
  return TensorView::strided(data, dtype, dev, std::span<const int64_t>(l.shape), std::span<const int64_t>(l.strides));
}

// k distinct uniform positions of [0, len) in random order, -1 past len (FlashMLA's _randperm_batch with one
// padding value): a partial Fisher-Yates over a permutation kept as the identity (its swaps undone after each draw),
// so a draw costs O(k) whatever len is.
class DistinctSampler {
 public:
  void draw(std::mt19937_64& rng, int64_t len, int64_t k, int32_t* out) {
    if (static_cast<int64_t>(perm_.size()) < len) {
      const size_t old = perm_.size();
      perm_.resize(static_cast<size_t>(len));
      std::iota(perm_.begin() + static_cast<std::ptrdiff_t>(old), perm_.end(), static_cast<int32_t>(old));
    }
    const int64_t m = std::min(len, k);
    swaps_.resize(static_cast<size_t>(std::max<int64_t>(m, 0)));
    for (int64_t j = 0; j < m; ++j) {
      const int64_t u = std::uniform_int_distribution<int64_t>(j, len - 1)(rng);
      std::swap(perm_[static_cast<size_t>(j)], perm_[static_cast<size_t>(u)]);
      swaps_[static_cast<size_t>(j)] = u;
      out[j] = perm_[static_cast<size_t>(j)];
    }
    for (int64_t j = m; j-- > 0;)
      std::swap(perm_[static_cast<size_t>(j)], perm_[static_cast<size_t>(swaps_[static_cast<size_t>(j)])]);
    std::fill(out + std::max<int64_t>(m, 0), out + k, -1);
  }

 private:
  std::vector<int32_t> perm_;
  std::vector<int64_t> swaps_;
};

// attn_sink f32 [h_q] as FlashMLA's tests draw it: normal values, +inf where a second normal draw is > 0.5, -inf
// where it is < -0.5.
DeviceBuffer make_attn_sink(int64_t h_q, std::mt19937_64& rng, int device, cudaStream_t stream) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> sink(static_cast<size_t>(h_q));
  for (float& s : sink) s = normal(rng);
  for (float& s : sink) {
    const float m = normal(rng);
    if (m > 0.5f) s = std::numeric_limits<float>::infinity();
    else if (m < -0.5f) s = -std::numeric_limits<float>::infinity();
  }
  return upload(sink, device, stream);
}

// One KV pool of a decode case (FlashMLA's generate_one_k_scope, is_varlen): FP8 pages, the padded index view into
// them and, with `with_length`, per-request topk lengths.
struct KvPool {
  DeviceBuffer pages, indices, lengths;
  TensorView cache, index_view, length_view;
  int64_t tokens = 0;    // num_blocks * block
  int64_t attended = 0;  // FlashMLA's count: b * s_q * topk, or sum(length) * s_q with lengths
};

KvPool make_pool(const DecodeCase& c, int64_t s_k, int64_t block, int64_t topk, bool with_length,
                 std::mt19937_64& rng, int device, cudaStream_t stream) {
  const Device dev = Device::cuda(device);
  const int64_t b = c.b, s_q = c.s_q;
  std::normal_distribution<double> seqlen(static_cast<double>(s_k), static_cast<double>(s_k) / 2);
  std::vector<int64_t> lens(static_cast<size_t>(b));
  for (int64_t& len : lens) len = static_cast<int64_t>(std::max(seqlen(rng), static_cast<double>(s_q)));
  const int64_t align = 4 * block, max_len = *std::max_element(lens.begin(), lens.end());
  const int64_t max_pad = std::max<int64_t>((max_len + align - 1) / align, 1) * align;
  const int64_t blocks_per_req = max_pad / block, num_blocks = b * blocks_per_req;
  std::vector<int32_t> block_table(static_cast<size_t>(num_blocks));  // [b, blocks_per_req], a permutation
  std::iota(block_table.begin(), block_table.end(), 0);
  std::shuffle(block_table.begin(), block_table.end(), rng);

  KvPool pool;
  pool.tokens = num_blocks * block;
  std::vector<int32_t> topk_len;
  if (with_length) {
    topk_len.resize(static_cast<size_t>(b));
    for (int32_t& l : topk_len) l = static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, topk)(rng));
    pool.attended = std::accumulate(topk_len.begin(), topk_len.end(), int64_t{0}) * s_q;
  } else {
    pool.attended = b * s_q * topk;
  }

  // Indices into the pages, in the padded storage (its padding -1), and which tokens they read.
  const PaddedLayout il = padded_layout({b, s_q, topk});
  std::vector<int32_t> idx(static_cast<size_t>(il.storage_elems), -1);
  std::vector<uint8_t> used(static_cast<size_t>(pool.tokens), 0);
  DistinctSampler sampler;
  for (int64_t r = 0; r < b; ++r) {
    const int32_t* table = block_table.data() + r * blocks_per_req;
    const int64_t read_slots = with_length ? topk_len[static_cast<size_t>(r)] : topk;
    for (int64_t s = 0; s < s_q; ++s) {
      int32_t* row = idx.data() + r * il.strides[0] + s * il.strides[1];
      sampler.draw(rng, lens[static_cast<size_t>(r)], topk, row);
      for (int64_t j = 0; j < topk; ++j) {
        if (row[j] < 0) continue;
        row[j] = static_cast<int32_t>(table[row[j] / block] * block + row[j] % block);
        if (j < read_slots) used[static_cast<size_t>(row[j])] = 1;
      }
    }
  }
  pool.indices = upload(idx, device, stream);
  pool.index_view = padded_view(pool.indices.get(), DType::i32, dev, il);
  if (with_length) {
    pool.lengths = upload(topk_len, device, stream);
    pool.length_view = TensorView::contiguous(pool.lengths.get(), DType::i32, dev, {b});
  }

  // Pages in FlashMLA's layouts (tests/quant.py): V3.2 pages of block + 1 rows; V4 pages padded to 576 bytes.
  const bool v4 = c.d_qk == 512;
  const int64_t row_bytes = v4 ? kV4RowBytes : kV32RowBytes;
  const int64_t page = v4 ? (block * kV4RowBytes + 575) / 576 * 576 : (block + 1) * kV32RowBytes;
  pool.pages = DeviceBuffer(static_cast<size_t>(num_blocks * page), device);
  pool.cache = TensorView::strided(pool.pages.get(), DType::u8, dev, {num_blocks, block, 1, row_bytes},
                                   {page, row_bytes, row_bytes, 1});

  // bf16 values drawn, poisoned and quantized a chunk of blocks at a time (256 MiB of bf16), so the largest pools
  // need their pages and little more.
  const DeviceBuffer used_dev = upload(used, device, stream);
  const int64_t chunk_blocks = std::max<int64_t>(1, (int64_t{1} << 27) / (block * c.d_qk));
  DeviceBuffer staging(static_cast<size_t>(std::min(chunk_blocks, num_blocks) * block * c.d_qk * 2), device);
  for (int64_t b0 = 0; b0 < num_blocks; b0 += chunk_blocks) {
    const int64_t nb = std::min(chunk_blocks, num_blocks - b0), rows = nb * block;
    FLASHCPP_CUDA_CHECK(fill_normal_bf16(staging.get(), static_cast<size_t>(rows * c.d_qk), rng(), 0.f, 0.1f, -1.f, 1.f,
                                         stream));
    FLASHCPP_CUDA_CHECK(fill_nan_unused_rows_bf16(staging.get(), static_cast<size_t>(rows), static_cast<size_t>(c.d_qk),
                                                  used_dev.as<const uint8_t>() + b0 * block, stream));
    const TensorView src = TensorView::contiguous(staging.get(), DType::bf16, dev, {nb, block, 1, c.d_qk});
    const TensorView dst = TensorView::strided(pool.pages.as<uint8_t>() + b0 * page, DType::u8, dev,
                                               {nb, block, 1, row_bytes}, {page, row_bytes, row_bytes, 1});
    if (v4) mla::quantize_kv_cache_fp8_v4(src, dst, stream);
    else mla::quantize_kv_cache_fp8(src, dst, stream);
  }
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));  // before staging and used_dev are freed
  return pool;
}

// A captured CUDA graph, destroyed on every path.
struct CapturedGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CapturedGraph() = default;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
  }
};

template <class Call>
void capture(CapturedGraph& g, cudaStream_t stream, Call& call) {
  FLASHCPP_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    call();
  } catch (...) {  // leave the stream out of capture mode
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(stream, &broken);
    if (broken != nullptr) (void)cudaGraphDestroy(broken);
    throw;
  }
  FLASHCPP_CUDA_CHECK(cudaStreamEndCapture(stream, &g.graph));
  FLASHCPP_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
}

struct SuiteTiming {
  double median_us = 0, host_us = 0;
};

// Median time of one CUDA-graph replay of `call`, the L2 evicted before each timed replay (FlashMLA's suite flushes
// it before each run), and the host time of one eager call. One eager call first does the one-time setup outside
// the capture.
template <class Call>
SuiteTiming time_case(const MlaSuiteOptions& o, const DeviceBuffer& flush, cudaStream_t stream, Call&& call) {
  call();
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
  CapturedGraph g;
  capture(g, stream, call);
  for (int i = 0; i < o.warmup; ++i) FLASHCPP_CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us(static_cast<size_t>(o.iters));
  Event start, stop;
  for (size_t i = 0; i < us.size(); ++i) {
    FLASHCPP_CUDA_CHECK(cudaMemsetAsync(flush.get(), static_cast<int>(i & 0xFF), flush.size(), stream));
    start.record(stream);
    FLASHCPP_CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
    stop.record(stream);
    FLASHCPP_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    us[i] = stop.elapsed_ms_since(start) * 1e3;
  }
  std::sort(us.begin(), us.end());
  SuiteTiming timing{.median_us = us[us.size() / 2], .host_us = std::numeric_limits<double>::infinity()};
  for (int round = 0; round < kHostRounds; ++round) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kHostCalls; ++i) call();
    const auto t1 = Clock::now();
    timing.host_us = std::min(timing.host_us, std::chrono::duration<double, std::micro>(t1 - t0).count() / kHostCalls);
    FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return timing;
}

// The human line (cmd_mla_bench.cpp's report() style) and the machine line, with the case name and host time.
void report_suite(const char* op, const std::string& case_name, const std::string& label, const std::string& shape,
                  const SuiteTiming& t, double flop, const char* kernel) {
  const double tflops = flop / (t.median_us * 1e-6) / 1e12;
  std::printf("%-14s %-52s %10.3f us %8.1f TFLOP/s  host %7.1f us  (%s)\n", op, label.c_str(), t.median_us, tflops,
              t.host_us, kernel);
  std::printf("MLA_BENCH {\"op\":\"%s\",\"case\":\"%s\",%s,\"median_us\":%.3f,\"tflops\":%.2f,\"host_us\":%.3f,"
              "\"kernel\":\"%s\"}\n",
              op, case_name.c_str(), shape.c_str(), t.median_us, tflops, t.host_us, kernel);
  std::fflush(stdout);
}

const char* kernel_label(const mla::kernels::SparseAttentionParams& p, int device) {
  return mla::kernels::plan_label(mla::kernels::choose(p, mla::kernels::kernel_support(device)));
}

// The selector's inputs for a decode call, filled as mla.cpp's decode_params fills them for these strided views,
// so the label names the kernel that was timed.
mla::kernels::SparseAttentionParams decode_selector_params(const DecodeCase& c, const TensorView& q,
                                                           const KvPool& main_pool, const KvPool* extra_pool,
                                                           const TensorView& out, const mla::DecodePlan& plan) {
  mla::kernels::SparseAttentionParams p;
  const bool by_token = c.s_q > 1;  // s_q 1: a token is a request, its stride dim 0's
  const TensorView& iv = main_pool.index_view;
  p.q = q.data;
  p.q_stride_token = q.stride(by_token ? 1 : 0);
  p.q_stride_head = q.stride(2);
  p.q_stride_request = q.stride(0);
  p.num_tokens = static_cast<int>(c.b * c.s_q);
  p.h_q = static_cast<int>(c.h_q);
  p.d_qk = static_cast<int>(c.d_qk);
  p.topk = static_cast<int>(c.topk);
  p.indices = iv.data_as<const int32_t>();
  p.indices_stride_token = iv.stride(by_token ? 1 : 0);
  p.indices_stride_request = iv.stride(0);
  p.out = out.data;
  p.out_stride_token = out.stride(by_token ? 1 : 0);
  p.out_stride_head = out.stride(2);
  p.out_stride_request = out.stride(0);
  add_decode_selector_params(p, q, plan);
  p.kv = main_pool.cache.data;
  p.num_kv = main_pool.tokens;
  p.block_size = main_pool.cache.size(1);
  p.kv_block_stride_bytes = main_pool.cache.stride(0);
  if (c.d_qk == 576) {
    p.kv_format = mla::kernels::KvFormat::fp8_v32;
    p.kv_slot_stride_bytes = kV32RowBytes;
    return p;
  }
  p.kv_format = mla::kernels::KvFormat::fp8_v4;
  p.kv_slot_stride_bytes = kV4RowBytes;
  p.main_topk = p.topk;
  if (extra_pool != nullptr) {
    p.topk = static_cast<int>(c.topk + c.extra_topk);
    p.extra_kv = extra_pool->cache.data;
    p.extra_num_kv = extra_pool->tokens;
    p.extra_block_size = extra_pool->cache.size(1);
    p.extra_block_stride_bytes = extra_pool->cache.stride(0);
    p.extra_indices = extra_pool->index_view.data_as<const int32_t>();
    p.extra_indices_stride_token = extra_pool->index_view.stride(by_token ? 1 : 0);
    p.extra_indices_stride_request = extra_pool->index_view.stride(0);
  }
  return p;
}

void run_decode_case(const MlaSuiteOptions& o, const DecodeCase& c, const std::string& label, uint64_t seed,
                     const DeviceBuffer& flush, cudaStream_t stream) {
  const Device dev = Device::cuda(o.device);
  std::mt19937_64 rng(seed);
  const int64_t b = c.b, s_q = c.s_q, h_q = c.h_q, d_qk = c.d_qk;
  // q [b, s_q, h_q, d_qk]: normal clamped to [-1, 1], the whole padded storage drawn.
  const PaddedLayout ql = padded_layout({b, s_q, h_q, d_qk});
  DeviceBuffer q(static_cast<size_t>(ql.storage_elems * 2), o.device);
  FLASHCPP_CUDA_CHECK(
      fill_normal_bf16(q.get(), static_cast<size_t>(ql.storage_elems), rng(), 0.f, 1.f, -1.f, 1.f, stream));
  const DeviceBuffer sink = make_attn_sink(h_q, rng, o.device, stream);
  const KvPool main_pool = make_pool(c, c.s_k, c.block, c.topk, false, rng, o.device, stream);
  const bool has_extra = c.extra_topk > 0;
  KvPool extra_pool;
  if (has_extra)
    extra_pool = make_pool(c, c.extra_s_k, c.extra_block, c.extra_topk, c.extra_topk_length, rng, o.device, stream);
  DeviceBuffer out(static_cast<size_t>(b * s_q * h_q * mla::kDv * 2), o.device);
  DeviceBuffer lse(static_cast<size_t>(b * h_q * s_q * 4), o.device);  // FlashMLA's [b, h_q, s_q]

  const TensorView qv = padded_view(q.get(), DType::bf16, dev, ql);
  const TensorView ov = TensorView::contiguous(out.get(), DType::bf16, dev, {b, s_q, h_q, mla::kDv});
  const TensorView lv = TensorView::strided(lse.get(), DType::f32, dev, {b, s_q, h_q}, {h_q * s_q, 1, s_q});
  const TensorView sv = TensorView::contiguous(sink.get(), DType::f32, dev, {h_q});
  const double sm_scale = std::pow(static_cast<double>(d_qk), -0.55);
  const mla::DecodePlan plan = mla::DecodePlan::create({.batch = int(b), .s_q = int(s_q), .h_q = int(h_q),
                                                        .d_qk = int(d_qk), .topk = int(c.topk),
                                                        .extra_topk = int(c.extra_topk), .num_sms = o.num_sms},
                                                       o.device, stream);
  // One bundle for both caches; the plan's d_qk picks sparse_decode (576) or sparse_decode_v4 (512).
  const mla::SparseDecodeTensors tensors{
      .q = qv,
      .kv_cache = main_pool.cache,
      .indices = main_pool.index_view,
      .attn_sink = &sv,
      .out = ov,
      .lse = lv,
      .extra_kv_cache = has_extra ? &extra_pool.cache : nullptr,
      .extra_indices = has_extra ? &extra_pool.index_view : nullptr,
      .extra_topk_length = has_extra && c.extra_topk_length ? &extra_pool.length_view : nullptr};
  const mla::SparseDecodeOptions params{.sm_scale = sm_scale};
  const SuiteTiming t = time_case(o, flush, stream, [&] { plan.run(tensors, params, stream); });
  const int64_t attended = main_pool.attended + (has_extra ? extra_pool.attended : 0);
  const double flop =
      2.0 * static_cast<double>(h_q) * static_cast<double>(attended) * static_cast<double>(d_qk + mla::kDv);
  char shape[400];
  std::snprintf(shape, sizeof shape,
                "\"b\":%lld,\"s_q\":%lld,\"h_q\":%lld,\"d_qk\":%lld,\"topk\":%lld,\"s_k\":%lld,\"block\":%lld,"
                "\"extra_topk\":%lld,\"extra_s_k\":%lld,\"extra_block\":%lld,\"extra_topk_length\":%s,"
                "\"kv_tokens\":%lld,\"extra_kv_tokens\":%lld,\"split_parts\":%d,\"head_requests\":%d",
                (long long)b, (long long)s_q, (long long)h_q, (long long)d_qk, (long long)c.topk, (long long)c.s_k,
                (long long)c.block, (long long)c.extra_topk, (long long)c.extra_s_k, (long long)c.extra_block,
                c.extra_topk_length ? "true" : "false", (long long)main_pool.tokens, (long long)extra_pool.tokens,
                plan.sizes().split ? plan.sizes().num_sm_parts : 0, plan.sizes().head_requests);
  const auto p = decode_selector_params(c, qv, main_pool, has_extra ? &extra_pool : nullptr, ov, plan);
  report_suite("decode_suite", c.name, label, shape, t, flop, kernel_label(p, o.device));
}

void run_prefill_case(const MlaSuiteOptions& o, const PrefillCase& c, const std::string& label, uint64_t seed,
                      const DeviceBuffer& flush, cudaStream_t stream) {
  const Device dev = Device::cuda(o.device);
  std::mt19937_64 rng(seed);
  const int64_t s_q = c.s_q, h_q = c.h_q, d_qk = c.d_qk, topk = c.topk, s_kv = c.s_kv;
  // q and kv: normal / 10 plus one uniform offset in [-0.05, 0.05) per tensor, clamped to [-10, 10].
  std::uniform_real_distribution<float> offset(-0.05f, 0.05f);
  const PaddedLayout ql = padded_layout({s_q, h_q, d_qk}), kl = padded_layout({s_kv, 1, d_qk});
  DeviceBuffer q(static_cast<size_t>(ql.storage_elems * 2), o.device);
  DeviceBuffer kv(static_cast<size_t>(kl.storage_elems * 2), o.device);
  FLASHCPP_CUDA_CHECK(fill_normal_bf16(q.get(), static_cast<size_t>(ql.storage_elems), rng(), offset(rng), 0.1f, -10.f,
                                       10.f, stream));
  FLASHCPP_CUDA_CHECK(fill_normal_bf16(kv.get(), static_cast<size_t>(kl.storage_elems), rng(), offset(rng), 0.1f, -10.f,
                                       10.f, stream));
  // indices [s_q, 1, topk]: distinct random rows of [0, s_kv) in random order (s_kv >= topk in every case, so
  // FlashMLA's invalid-index padding never appears).
  const PaddedLayout il = padded_layout({s_q, 1, topk});
  std::vector<int32_t> idx(static_cast<size_t>(il.storage_elems), -1);
  DistinctSampler sampler;
  for (int64_t s = 0; s < s_q; ++s) sampler.draw(rng, s_kv, topk, idx.data() + s * il.strides[0]);
  const DeviceBuffer indices = upload(idx, o.device, stream);
  const DeviceBuffer sink = make_attn_sink(h_q, rng, o.device, stream);
  DeviceBuffer out(static_cast<size_t>(s_q * h_q * mla::kDv * 2), o.device);
  DeviceBuffer max_logits(static_cast<size_t>(s_q * h_q * 4), o.device);
  DeviceBuffer lse(static_cast<size_t>(s_q * h_q * 4), o.device);
  FLASHCPP_CUDA_CHECK(cudaStreamSynchronize(stream));

  const TensorView qv = padded_view(q.get(), DType::bf16, dev, ql);
  const TensorView kvv = padded_view(kv.get(), DType::bf16, dev, kl);
  const TensorView iv = padded_view(indices.get(), DType::i32, dev, il);
  const TensorView ov = TensorView::contiguous(out.get(), DType::bf16, dev, {s_q, h_q, mla::kDv});
  const TensorView mv = TensorView::contiguous(max_logits.get(), DType::f32, dev, {s_q, h_q});
  const TensorView lv = TensorView::contiguous(lse.get(), DType::f32, dev, {s_q, h_q});
  const TensorView sv = TensorView::contiguous(sink.get(), DType::f32, dev, {h_q});
  const mla::SparsePrefillTensors tensors{
      .q = qv, .kv = kvv, .indices = iv, .attn_sink = &sv, .out = ov, .max_logits = &mv, .lse = lv};
  const mla::SparsePrefillOptions params{.sm_scale = 0.5};
  const SuiteTiming t = time_case(o, flush, stream, [&] { mla::sparse_prefill(tensors, params, stream); });
  const double flop = 2.0 * static_cast<double>(s_q * topk * h_q) * static_cast<double>(d_qk + mla::kDv);
  char shape[200];
  std::snprintf(shape, sizeof shape, "\"s_q\":%lld,\"h_q\":%lld,\"d_qk\":%lld,\"topk\":%lld,\"s_kv\":%lld",
                (long long)s_q, (long long)h_q, (long long)d_qk, (long long)topk, (long long)s_kv);
  mla::kernels::SparseAttentionParams p;
  p.q = qv.data;
  p.q_stride_token = qv.stride(0);
  p.q_stride_head = qv.stride(1);
  p.num_tokens = static_cast<int>(s_q);
  p.h_q = static_cast<int>(h_q);
  p.d_qk = static_cast<int>(d_qk);
  p.topk = static_cast<int>(topk);
  p.indices = iv.data_as<const int32_t>();
  p.indices_stride_token = iv.stride(0);
  p.out = ov.data;
  p.out_stride_token = ov.stride(0);
  p.out_stride_head = ov.stride(1);
  p.kv = kvv.data;
  p.num_kv = s_kv;
  p.kv_row_stride = kvv.stride(0);
  report_suite("prefill_suite", c.name, label, shape, t, flop, kernel_label(p, o.device));
}

// FlashMLA's dense decoding performance cases (tests/test_flash_mla_dense_decoding.py: b 128, varlen, causal and not,
// s_q 1 and 2, s_k 4K..32K), plus tensor-parallel head counts (h_q 16 and 32) at s_q 1.
struct DenseCase {
  std::string name;
  int64_t b, s_q, h_q, s_k;
  bool causal;
};
std::vector<DenseCase> flashmla_dense_cases() {
  std::vector<DenseCase> cases;
  for (bool causal : {false, true})
    for (int64_t s_q : {1, 2})
      for (int64_t s_k : {4096, 8192, 16384, 32768}) cases.push_back({"dense", 128, s_q, 128, s_k, causal});
  for (int64_t h_q : {16, 32}) cases.push_back({"dense tp", 128, 1, h_q, 8192, false});
  return cases;
}

// Device-to-device copy bandwidth (bytes read + written per second) of a 2 GiB copy, graph-timed like the cases.
double copy_bandwidth(const MlaSuiteOptions& o, const DeviceBuffer& flush, cudaStream_t stream) {
  constexpr size_t kBytes = size_t{2} << 30;
  const DeviceBuffer src(kBytes, o.device), dst(kBytes, o.device);
  FLASHCPP_CUDA_CHECK(cudaMemsetAsync(src.get(), 1, kBytes, stream));
  const SuiteTiming t = time_case(o, flush, stream, [&] {
    FLASHCPP_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), kBytes, cudaMemcpyDeviceToDevice, stream));
  });
  return 2.0 * static_cast<double>(kBytes) / (t.median_us * 1e-6);
}

// Inputs as FlashMLA's generate_test_data draws them: lengths max(normal(s_k, s_k / 2), s_q), a random permutation of
// the blocks (64 tokens) as the block table, entries past a request's blocks 2147480000, q and K normal / 10 clamped
// to [-1, 1], NaN in every cached token past its request's length. Timed: one layer's run on the step's plan
// (FlashMLA reuses its metadata across calls likewise), on the bf16 cache and on the V3.2 FP8 rows quantized from it;
// the plan apart.
void run_dense_case(const MlaSuiteOptions& o, const DenseCase& c, const std::string& label, uint64_t seed,
                    const DeviceBuffer& flush, double copy_bw, cudaStream_t stream) {
  constexpr int64_t kBlock = 64, kD = 576;
  const Device dev = Device::cuda(o.device);
  std::mt19937_64 rng(seed);
  const int64_t b = c.b, s_q = c.s_q, h_q = c.h_q;
  std::normal_distribution<double> nd(static_cast<double>(c.s_k), static_cast<double>(c.s_k) / 2);
  std::vector<int32_t> lens(static_cast<size_t>(b));
  for (auto& l : lens) l = static_cast<int32_t>(std::max<double>(nd(rng), static_cast<double>(s_q)));
  const int64_t max_len = *std::max_element(lens.begin(), lens.end());
  const int64_t max_blocks = (max_len + 255) / 256 * 256 / kBlock, num_blocks = b * max_blocks;
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> table(perm.size());
  std::vector<uint8_t> used(static_cast<size_t>(num_blocks * kBlock), 0);
  double mean_len = 0;
  for (int64_t r = 0; r < b; ++r) {
    const int64_t len = lens[static_cast<size_t>(r)], blocks = (len + kBlock - 1) / kBlock;
    mean_len += static_cast<double>(len) / static_cast<double>(b);
    for (int64_t k = 0; k < max_blocks; ++k) {
      const int32_t blk = perm[static_cast<size_t>(r * max_blocks + k)];
      table[static_cast<size_t>(r * max_blocks + k)] = k < blocks ? blk : 2147480000;
      for (int64_t t = 0; t < kBlock && k * kBlock + t < len; ++t) used[static_cast<size_t>(blk * kBlock + t)] = 1;
    }
  }
  const DeviceBuffer table_d = upload(table, o.device, stream), lens_d = upload(lens, o.device, stream);
  const DeviceBuffer used_d = upload(used, o.device, stream);
  DeviceBuffer kv(static_cast<size_t>(num_blocks * kBlock * kD * 2), o.device);
  FLASHCPP_CUDA_CHECK(fill_normal_bf16(kv.get(), static_cast<size_t>(num_blocks * kBlock * kD), rng(), 0.f, 0.1f, -1.f,
                                       1.f, stream));
  FLASHCPP_CUDA_CHECK(fill_nan_unused_rows_bf16(kv.get(), static_cast<size_t>(num_blocks * kBlock), kD,
                                                used_d.as<uint8_t>(), stream));
  DeviceBuffer q(static_cast<size_t>(b * s_q * h_q * kD * 2), o.device);
  FLASHCPP_CUDA_CHECK(fill_normal_bf16(q.get(), static_cast<size_t>(b * s_q * h_q * kD), rng(), 0.f, 0.1f, -1.f, 1.f, stream));
  DeviceBuffer fp8(static_cast<size_t>(num_blocks * kBlock * mla::kFp8BytesPerToken), o.device);
  const TensorView kvv = TensorView::contiguous(kv.get(), DType::bf16, dev, {num_blocks, kBlock, 1, kD});
  const TensorView fp8v =
      TensorView::contiguous(fp8.get(), DType::u8, dev, {num_blocks, kBlock, 1, mla::kFp8BytesPerToken});
  mla::quantize_kv_cache_fp8(kvv, fp8v, stream);
  DeviceBuffer out(static_cast<size_t>(b * s_q * h_q * mla::kDv * 2), o.device);
  DeviceBuffer lse(static_cast<size_t>(b * h_q * s_q * 4), o.device);  // FlashMLA's [b, h_q, s_q]
  const TensorView qv = TensorView::contiguous(q.get(), DType::bf16, dev, {b, s_q, h_q, kD});
  const TensorView ov = TensorView::contiguous(out.get(), DType::bf16, dev, {b, s_q, h_q, mla::kDv});
  const TensorView lv = TensorView::strided(lse.get(), DType::f32, dev, {b, s_q, h_q}, {h_q * s_q, 1, s_q});
  const TensorView tv = TensorView::contiguous(table_d.get(), DType::i32, dev, {b, max_blocks});
  const TensorView lenv = TensorView::contiguous(lens_d.get(), DType::i32, dev, {b});
  const mla::DenseDecodePlan plan = mla::DenseDecodePlan::create(
      {.batch = int(b), .s_q = int(s_q), .h_q = int(h_q), .block_size = int(kBlock), .max_blocks = int(max_blocks),
       .causal = c.causal, .num_sms = o.num_sms},
      o.device);
  plan.plan(tv, lenv, stream);
  const mla::DenseDecodeOptions options{};  // FlashMLA's default scale, 1/sqrt(576)
  const SuiteTiming plan_t = time_case(o, flush, stream, [&] { plan.plan(tv, lenv, stream); });
  const double flop = static_cast<double>(b * h_q * s_q) * (2.0 * kD + 2.0 * mla::kDv) * mean_len;
  double bf16_us = 0;
  for (const TensorView* cache : {&kvv, &fp8v}) {
    const bool is_fp8 = cache == &fp8v;
    const mla::DenseDecodeTensors tensors{.q = qv, .kv_cache = *cache, .out = ov, .lse = lv};
    const SuiteTiming t = time_case(o, flush, stream, [&] { plan.run(tensors, options, stream); });
    if (!is_fp8) bf16_us = t.median_us;
    const double moved = static_cast<double>(b) * (mean_len * (is_fp8 ? mla::kFp8BytesPerToken : kD * 2) +
                                                   static_cast<double>(s_q * h_q * (kD + mla::kDv) * 2));
    char shape[400];
    std::snprintf(shape, sizeof shape,
                  "\"b\":%lld,\"s_q\":%lld,\"h_q\":%lld,\"s_k\":%lld,\"causal\":%s,\"mean_len\":%.1f,\"kv\":\"%s\","
                  "\"plan_us\":%.3f,\"copy_fraction\":%.3f,\"copy_tb_s\":%.3f,\"fp8_speedup\":%.3f",
                  (long long)b, (long long)s_q, (long long)h_q, (long long)c.s_k, c.causal ? "true" : "false", mean_len,
                  is_fp8 ? "fp8" : "bf16", plan_t.median_us, moved / (t.median_us * 1e-6) / copy_bw, copy_bw / 1e12,
                  is_fp8 ? bf16_us / t.median_us : 1.0);
    report_suite("dense_decode_suite", c.name, label + (is_fp8 ? " fp8" : " bf16"), shape, t, flop,
                 "sparse kernels, split-KV");
  }
}

}  // namespace

void run_flashmla_suite(const MlaSuiteOptions& o, cudaStream_t stream) {
  const DeviceBuffer flush(kL2FlushBytes, o.device);
  std::printf("suite flashmla: L2 flush %zu MiB before each timed replay; host time best of %d x %d eager calls%s%s\n",
              kL2FlushBytes >> 20, kHostRounds, kHostCalls, o.filter.empty() ? "" : "; filter ", o.filter.c_str());
  char label[160];
  uint64_t ordinal = 0;
  if (o.decode && !o.dense)
    for (const DecodeCase& c : flashmla_decode_cases()) {
      const uint64_t seed = kSuiteSeed + ordinal++;
      std::snprintf(label, sizeof label, "%s b %lld s_q %lld h_q %lld d_qk %lld", c.name.c_str(), (long long)c.b,
                    (long long)c.s_q, (long long)c.h_q, (long long)c.d_qk);
      if (!o.filter.empty() && ("decode " + std::string(label)).find(o.filter) == std::string::npos) continue;
      run_decode_case(o, c, label, seed, flush, stream);
    }
  ordinal = 1000;  // prefill seeds apart from decode's, whichever of the two runs
  if (o.prefill && !o.dense)
    for (const PrefillCase& c : flashmla_prefill_cases()) {
      const uint64_t seed = kSuiteSeed + ordinal++;
      std::snprintf(label, sizeof label, "%s s_kv %lld s_q %lld h_q %lld d_qk %lld", c.name.c_str(), (long long)c.s_kv,
                    (long long)c.s_q, (long long)c.h_q, (long long)c.d_qk);
      if (!o.filter.empty() && ("prefill " + std::string(label)).find(o.filter) == std::string::npos) continue;
      run_prefill_case(o, c, label, seed, flush, stream);
    }
  ordinal = 2000;
  if (o.dense) {
    const double copy_bw = copy_bandwidth(o, flush, stream);
    std::printf("dense: copy bandwidth %.2f TB/s (2 GiB device-to-device, read + written)\n", copy_bw / 1e12);
    for (const DenseCase& c : flashmla_dense_cases()) {
      const uint64_t seed = kSuiteSeed + ordinal++;
      std::snprintf(label, sizeof label, "%s b %lld s_q %lld h_q %lld s_k %lld%s", c.name.c_str(), (long long)c.b,
                    (long long)c.s_q, (long long)c.h_q, (long long)c.s_k, c.causal ? " causal" : "");
      if (!o.filter.empty() && std::string(label).find(o.filter) == std::string::npos) continue;
      run_dense_case(o, c, label, seed, flush, copy_bw, stream);
    }
  }
}

}  // namespace flashcpp::cli
