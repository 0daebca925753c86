// Multi-GPU correctness (label gpu; run with FLASHCPP_GPU_TESTS=1, the two-GPU tests skip on one GPU):
//  * OneGpu...: unknown devices are refused cleanly (no sticky CUDA error) and every op leaves the
//    caller's current device as it was; with two GPUs the ops run on cuda:0 while cuda:1 is current;
//  * ...OnDeviceOne...: every op family on cuda:1 while the current device is 0, against the float64
//    references (batch MLA, GDN and MoE against the same op on cuda:0, which test_mla_gdn_moe_gpu checks
//    against their references); the decode step (norm, qk-norm, paged decode, sparse MLA decode) is
//    captured in a CUDA graph on a cuda:1 stream, which fails if any op launched elsewhere;
//  * TwoThreadsDriveTwoGpus: one thread per GPU runs the decode step in a loop for FLASHCPP_SOAK_SECONDS
//    (default 20 s), every iteration poisoned and checked;
//  * TensorParallelStepMatchesOneGpu: examples/tp_decode over two GPUs with NCCL equals the one-GPU step.
// Tolerances: norm bf16 |d| <= 1.5e-2 + 1.5e-2|ref|; single/batch prefill |d| <= 2e-2 + 2e-2|ref|; the
// decode step's attention and sparse MLA |d| <= 4e-3 + 2e-2|ref| (outputs are ~0.03); KV append and the
// FP8 quantizer bit-exact; cuda:1 vs cuda:0 (same kernels, same inputs) |d| <= 1e-3 + 1e-3|ref|;
// tensor-parallel vs one GPU |d| <= 2e-3 + 1e-2|ref| (only the split-KV merge order differs).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flashcpp/attention.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/gdn.hpp"
#include "flashcpp/mla.hpp"
#include "flashcpp/mla_attention.hpp"
#include "flashcpp/moe.hpp"
#include "flashcpp/norm.hpp"
#include "flashcpp/page.hpp"
#include "flashcpp/reference.hpp"
#include "flashcpp/runtime.hpp"
#include "reference/gdn_reference.hpp"
#include "reference/mla_reference.hpp"
#include "support/gpu.hpp"
#include "tp_decode.hpp"

namespace flashcpp::testing {
namespace {

namespace ref = flashcpp::reference;

const Runtime& runtime() {
  static const std::shared_ptr<Runtime> rt = Runtime::create();
  return *rt;
}

int current_device() {
  int d = -1;
  cuda_check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

#define REQUIRE_TWO_GPUS()                                                                                 \
  do {                                                                                                     \
    FLASHCPP_REQUIRE_GPU();                                                                                \
    if (cuda_device_count() < 2)                                                                           \
      GTEST_SKIP() << "needs 2 CUDA devices; " << cuda_device_count() << " visible (run on a 2-GPU host)"; \
  } while (0)

/// Skips the test (naming the module) when the Runtime cannot provide a FlashInfer module.
#define SKIP_IF_MODULE_MISSING(stmt)                                                                       \
  do {                                                                                                     \
    try {                                                                                                  \
      stmt;                                                                                                \
    } catch (const Error& e) {                                                                             \
      if (e.code() == ErrorCode::not_found) GTEST_SKIP() << "module not available here: " << e.what();    \
      throw;                                                                                               \
    }                                                                                                      \
  } while (0)

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = tp::float_to_bf16(d(rng));
  return v;
}

template <class T>
TensorView host_view(std::vector<T>& v, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), t, Device::cpu(), shape);
}

std::vector<uint16_t> to_bf16(const std::vector<double>& v) {
  std::vector<uint16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = tp::float_to_bf16(static_cast<float>(v[i]));
  return o;
}

void expect_close_bf16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, double atol, double rtol,
                       const std::string& what) {
  const tp::Diff d = tp::compare_bf16(got, want, atol, rtol);
  EXPECT_EQ(d.bad, 0) << what << ": " << d.describe();
}

/// Device arrays of one run on `device`: uploads and allocations happen with that device current
/// (and restore the caller's), so the op calls between them see whatever current device the test set.
class On {
 public:
  explicit On(int device) : device_(device), stream_(device) {}
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  template <class T>
  TensorView put(const std::vector<T>& host, DType t, std::initializer_list<int64_t> shape) {
    DeviceBuffer& b = keep(host.size() * sizeof(T));
    DeviceGuard g(device_);
    cuda_check(::flashcpp::testing::upload_bytes(b.get(), host.data(), host.size() * sizeof(T)), "upload");
    return TensorView::contiguous(b.get(), t, Device::cuda(device_), shape);
  }
  /// An output, poisoned with 0xFF (NaN for floats) before the op runs.
  TensorView out(DType t, std::initializer_list<int64_t> shape) {
    const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    DeviceBuffer& b = keep(static_cast<size_t>(n * dtype_size(t)));
    DeviceGuard g(device_);
    cuda_check(::flashcpp::testing::fill_bytes(b.get(), kPoisonByte, b.size()), "poison");
    return TensorView::contiguous(b.get(), t, Device::cuda(device_), shape);
  }
  template <class T = uint16_t>
  std::vector<T> get(const TensorView& t) {
    DeviceGuard g(device_);
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    std::vector<T> h(static_cast<size_t>(t.numel() * dtype_size(t.dtype)) / sizeof(T));
    cuda_check(cudaMemcpy(h.data(), t.data, h.size() * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
  OwnedWorkspace& workspace() {
    if (!ws_) {
      DeviceGuard g(device_);
      ws_ = std::make_unique<OwnedWorkspace>(device_, int64_t{64} << 20, int64_t{8} << 20);
    }
    return *ws_;
  }

 private:
  DeviceBuffer& keep(size_t bytes) {
    bufs_.push_back(std::make_unique<DeviceBuffer>(std::max<size_t>(bytes, 16), device_));
    return *bufs_.back();
  }
  int device_;
  Stream stream_;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs_;
  std::unique_ptr<OwnedWorkspace> ws_;
};

/// Runs `op` on `device` with `current` as the calling thread's current device; checks the op left the
/// current device alone.
template <class Op>
auto run_with_current(int device, int current, Op&& op) {
  On on(device);
  DeviceGuard current_guard(current);
  auto result = op(on);
  EXPECT_EQ(current_device(), current) << "an op on cuda:" << device << " changed the current device";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return result;
}

// ------------------------------------------------------------------------------------------------ the decode step reference

struct StepReference {
  std::vector<uint16_t> attn, mla;
};

/// float64 reference of tp::DeviceStep over all heads (intermediates rounded to bf16 as on the GPU).
StepReference reference_step(const tp::StepInputs& in) {
  const tp::StepShape& s = in.shape;
  const int64_t hidden = s.num_qo_heads * s.head_dim;
  auto x = in.x, lnw = in.ln_weight, qw = in.q_weight, kc = in.k_cache, vc = in.v_cache;
  auto ptr = in.kv_indptr, idx = in.kv_indices, last = in.kv_last_page_len;
  std::vector<uint16_t> xn(x.size()), q(static_cast<size_t>(s.batch * hidden)), out(q.size());
  ref::rmsnorm(host_view(xn, DType::bf16, {s.batch, hidden}), host_view(x, DType::bf16, {s.batch, hidden}),
               host_view(lnw, DType::bf16, {hidden}), {.eps = s.eps});
  ref::fused_qk_rmsnorm(host_view(q, DType::bf16, {s.batch, s.num_qo_heads, s.head_dim}),
                        host_view(xn, DType::bf16, {s.batch, s.num_qo_heads, s.head_dim}),
                        host_view(qw, DType::bf16, {s.head_dim}), {.eps = s.eps});
  PagedKvCache kv;
  kv.k_cache = host_view(kc, DType::bf16, {in.num_pages, s.page_size, s.num_kv_heads, s.head_dim});
  kv.v_cache = host_view(vc, DType::bf16, {in.num_pages, s.page_size, s.num_kv_heads, s.head_dim});
  kv.indices = host_view(idx, DType::i32, {in.num_pages});
  kv.indptr = host_view(ptr, DType::i32, {s.batch + 1});
  kv.last_page_len = host_view(last, DType::i32, {s.batch});
  BatchDecodeConfig cfg;
  cfg.num_qo_heads = s.num_qo_heads;
  cfg.num_kv_heads = s.num_kv_heads;
  cfg.head_dim = s.head_dim;
  cfg.page_size = s.page_size;
  ref::batch_decode(host_view(q, DType::bf16, {s.batch, s.num_qo_heads, s.head_dim}), kv,
                    host_view(out, DType::bf16, {s.batch, s.num_qo_heads, s.head_dim}), nullptr, cfg);
  StepReference r;
  r.attn = out;
  if (s.mla) {
    auto mq = in.mla_q;
    auto cache = in.mla_cache;
    auto mi = in.mla_indices;
    const int64_t blocks = static_cast<int64_t>(cache.size()) / 656 / s.mla_block_size;
    const auto m = ref::mla_sparse_decode_reference(host_view(mq, DType::bf16, {s.batch, 1, s.mla_heads, 576}),
                                                    host_view(cache, DType::u8, {blocks, s.mla_block_size, 1, 656}),
                                                    host_view(mi, DType::i32, {s.batch, 1, s.mla_topk}), nullptr,
                                                    nullptr, in.mla_sm_scale);
    r.mla = to_bf16(m.out);
  }
  return r;
}

// The step's outputs are small (|attn| <= 0.15, mean 0.03): an absolute 4e-3 keeps the check sharp (an
// all-zero output fails on ~90% of the elements) and still allows bf16 rounding of P and of the output.
constexpr double kStepAtol = 4e-3, kStepRtol = 2e-2;

const tp::StepInputs& step_inputs() {
  static const tp::StepInputs in = tp::make_inputs(tp::StepShape{}, 20240601);
  return in;
}
const StepReference& step_reference() {
  static const StepReference r = reference_step(step_inputs());
  return r;
}

void expect_step_matches_reference(const tp::StepOutputs& got, const std::string& what) {
  expect_close_bf16(got.attn, step_reference().attn, kStepAtol, kStepRtol, what + ": attention");
  if (!got.mla.empty() || !step_reference().mla.empty())
    expect_close_bf16(got.mla, step_reference().mla, kStepAtol, kStepRtol, what + ": sparse MLA");
}

// ------------------------------------------------------------------------------------------------ one GPU

TEST(MultiGpu, OneGpuUnknownDevicesAreRefusedAndTheCurrentDeviceIsKept) {
  FLASHCPP_REQUIRE_GPU();
  const int n = cuda_device_count();
  const int before = current_device();
  // Tensors on a device that does not exist: invalid_argument before any CUDA call, no sticky error.
  const TensorView x = TensorView::contiguous(reinterpret_cast<void*>(0x10000), DType::bf16, Device::cuda(n), {4, 256});
  const TensorView w = TensorView::contiguous(reinterpret_cast<void*>(0x20000), DType::bf16, Device::cuda(n), {256});
  try {
    rmsnorm(runtime(), x, x, w);
    ADD_FAILURE() << "cuda:" << n << " must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("visible CUDA device"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)mla::DecodePlan::create({.batch = 1, .h_q = 64, .topk = 64}, n, nullptr), Error);
  EXPECT_THROW((void)FusedMoeRunner::create(runtime(), {.device = n}), Error);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(current_device(), before);

  // Every device's step with the current device set to another one (the same one on a one-GPU host).
  for (int d = 0; d < n && d < 2; ++d) {
    const int other = (d + 1) % n;
    SCOPED_TRACE("step on cuda:" + std::to_string(d) + " with cuda:" + std::to_string(other) + " current");
    const tp::StepOutputs got = run_with_current(d, other, [&](On&) {
      tp::DeviceStep step(runtime(), step_inputs(), d, 0, 1);
      step.poison_outputs();
      step.enqueue();
      return step.download();
    });
    expect_step_matches_reference(got, "cuda:" + std::to_string(d));
  }
}

// ------------------------------------------------------------------------------------------------ cuda:1 while cuda:0 is current

TEST(MultiGpu, NormAppendAndSingleAttentionOnDeviceOne) {
  REQUIRE_TWO_GPUS();
  // RMSNorm and fused add RMSNorm.
  auto x = random_bf16(64 * 4096, 1), r0 = random_bf16(64 * 4096, 2), w = random_bf16(4096, 3, 0.5f, 1.5f);
  const auto gpu = run_with_current(1, 0, [&](On& on) {
    const TensorView out = on.out(DType::bf16, {64, 4096});
    const TensorView in = on.put(x, DType::bf16, {64, 4096}), wt = on.put(w, DType::bf16, {4096});
    rmsnorm(runtime(), out, in, wt, {}, on.stream());
    const TensorView res = on.put(r0, DType::bf16, {64, 4096}), in2 = on.put(x, DType::bf16, {64, 4096});
    fused_add_rmsnorm(runtime(), in2, res, wt, {}, on.stream());
    return std::vector<std::vector<uint16_t>>{on.get(out), on.get(in2), on.get(res)};
  });
  std::vector<uint16_t> want(x.size()), in2 = x, res = r0;
  ref::rmsnorm(host_view(want, DType::bf16, {64, 4096}), host_view(x, DType::bf16, {64, 4096}),
               host_view(w, DType::bf16, {4096}));
  expect_close_bf16(gpu[0], want, 1.5e-2, 1.5e-2, "rmsnorm");
  ref::fused_add_rmsnorm(host_view(in2, DType::bf16, {64, 4096}), host_view(res, DType::bf16, {64, 4096}),
                         host_view(w, DType::bf16, {4096}));
  expect_close_bf16(gpu[1], in2, 1.5e-2, 1.5e-2, "fused_add_rmsnorm input");
  expect_close_bf16(gpu[2], res, 0, 0, "fused_add_rmsnorm residual");

  // Paged KV append (a copy: bit-exact). 2 requests on pages {3} and {5, 6}; 12 + 20 tokens.
  {
    const int64_t pages = 8, ps = 16, hkv = 4, d = 128, nnz = 32;
    std::vector<uint16_t> kc(pages * ps * hkv * d, 0), vc = kc;
    auto k = random_bf16(nnz * hkv * d, 4), v = random_bf16(nnz * hkv * d, 5);
    std::vector<int32_t> indices{3, 5, 6}, indptr{0, 1, 3}, last{12, 4}, bi, pos;
    for (int i = 0; i < 12; ++i) bi.push_back(0), pos.push_back(i);
    for (int i = 0; i < 20; ++i) bi.push_back(1), pos.push_back(i);
    const auto got = run_with_current(1, 0, [&](On& on) {
      PagedKvCache c;
      c.k_cache = on.put(kc, DType::bf16, {pages, ps, hkv, d});
      c.v_cache = on.put(vc, DType::bf16, {pages, ps, hkv, d});
      c.indices = on.put(indices, DType::i32, {3});
      c.indptr = on.put(indptr, DType::i32, {3});
      c.last_page_len = on.put(last, DType::i32, {2});
      append_paged_kv_cache(runtime(), on.put(k, DType::bf16, {nnz, hkv, d}), on.put(v, DType::bf16, {nnz, hkv, d}),
                            on.put(bi, DType::i32, {nnz}), on.put(pos, DType::i32, {nnz}), c, on.stream());
      return std::vector<std::vector<uint16_t>>{on.get(c.k_cache), on.get(c.v_cache)};
    });
    PagedKvCache hc;
    hc.k_cache = host_view(kc, DType::bf16, {pages, ps, hkv, d});
    hc.v_cache = host_view(vc, DType::bf16, {pages, ps, hkv, d});
    hc.indices = host_view(indices, DType::i32, {3});
    hc.indptr = host_view(indptr, DType::i32, {3});
    hc.last_page_len = host_view(last, DType::i32, {2});
    ref::append_paged_kv_cache(host_view(k, DType::bf16, {nnz, hkv, d}), host_view(v, DType::bf16, {nnz, hkv, d}),
                               host_view(bi, DType::i32, {nnz}), host_view(pos, DType::i32, {nnz}), hc);
    EXPECT_TRUE(got[0] == kc) << "append_paged_kv_cache k_cache differs from the reference";
    EXPECT_TRUE(got[1] == vc) << "append_paged_kv_cache v_cache differs from the reference";
  }

  // Single prefill (causal, GQA 8/2) and single decode (GQA 8/2, CUDA cores).
  {
    const int64_t qo = 7, kv = 300, hq = 8, hkv = 2, d = 128;
    auto q = random_bf16(qo * hq * d, 6), k = random_bf16(kv * hkv * d, 7), v = random_bf16(kv * hkv * d, 8);
    SinglePrefillOptions po;
    po.causal = true;
    const auto got = run_with_current(1, 0, [&](On& on) {
      const TensorView out = on.out(DType::bf16, {qo, hq, d});
      single_prefill(runtime(), on.put(q, DType::bf16, {qo, hq, d}), on.put(k, DType::bf16, {kv, hkv, d}),
                     on.put(v, DType::bf16, {kv, hkv, d}), out, nullptr, TensorView{}, po, on.stream());
      const TensorView dout = on.out(DType::bf16, {hq, d});
      std::vector<uint16_t> q1(q.begin(), q.begin() + hq * d);
      single_decode(runtime(), on.put(q1, DType::bf16, {hq, d}), on.put(k, DType::bf16, {kv, hkv, d}),
                    on.put(v, DType::bf16, {kv, hkv, d}), dout, nullptr, TensorView{}, {}, on.stream());
      return std::vector<std::vector<uint16_t>>{on.get(out), on.get(dout)};
    });
    std::vector<uint16_t> want(qo * hq * d), dwant(hq * d), q1(q.begin(), q.begin() + hq * d);
    ref::single_prefill(host_view(q, DType::bf16, {qo, hq, d}), host_view(k, DType::bf16, {kv, hkv, d}),
                        host_view(v, DType::bf16, {kv, hkv, d}), host_view(want, DType::bf16, {qo, hq, d}), nullptr, po);
    expect_close_bf16(got[0], want, 2e-2, 2e-2, "single_prefill");
    ref::single_decode(host_view(q1, DType::bf16, {hq, d}), host_view(k, DType::bf16, {kv, hkv, d}),
                       host_view(v, DType::bf16, {kv, hkv, d}), host_view(dwant, DType::bf16, {hq, d}), nullptr, {});
    expect_close_bf16(got[1], dwant, 2e-2, 2e-2, "single_decode");
  }
}

TEST(MultiGpu, BatchPrefillOnDeviceOne) {
  REQUIRE_TWO_GPUS();
  const tp::StepInputs& in = step_inputs();
  const tp::StepShape& s = in.shape;
  const int64_t per = 2, total = s.batch * per;
  std::vector<int32_t> qo_indptr;
  for (int64_t b = 0; b <= s.batch; ++b) qo_indptr.push_back(static_cast<int32_t>(b * per));
  auto q = random_bf16(total * s.num_qo_heads * s.head_dim, 9);
  auto kc = in.k_cache, vc = in.v_cache;
  auto idx = in.kv_indices, ptr = in.kv_indptr, last = in.kv_last_page_len;
  BatchPrefillConfig cfg;
  cfg.num_qo_heads = s.num_qo_heads;
  cfg.num_kv_heads = s.num_kv_heads;
  cfg.head_dim_qk = s.head_dim;
  cfg.page_size = s.page_size;
  cfg.causal = true;
  const auto got = run_with_current(1, 0, [&](On& on) {
    PagedKvCache kv;
    kv.k_cache = on.put(kc, DType::bf16, {in.num_pages, s.page_size, s.num_kv_heads, s.head_dim});
    kv.v_cache = on.put(vc, DType::bf16, {in.num_pages, s.page_size, s.num_kv_heads, s.head_dim});
    kv.indices = on.put(idx, DType::i32, {in.num_pages});
    kv.indptr = on.put(ptr, DType::i32, {s.batch + 1});
    kv.last_page_len = on.put(last, DType::i32, {s.batch});
    const TensorView idx_host = host_view(idx, DType::i32, {in.num_pages});
    const PrefillIndptrs ip{host_view(qo_indptr, DType::i32, {s.batch + 1}), host_view(ptr, DType::i32, {s.batch + 1}),
                            host_view(last, DType::i32, {s.batch}), &idx_host};
    auto plan = BatchPrefillPlan::create(runtime(), on.workspace(), ip, cfg, on.stream());
    const TensorView out = on.out(DType::bf16, {total, s.num_qo_heads, s.head_dim});
    plan.run_paged(on.put(q, DType::bf16, {total, s.num_qo_heads, s.head_dim}), kv,
                   on.put(qo_indptr, DType::i32, {s.batch + 1}), out, nullptr, on.stream());
    return on.get(out);
  });
  std::vector<uint16_t> want(q.size());
  PagedKvCache hkv;
  hkv.k_cache = host_view(kc, DType::bf16, {in.num_pages, s.page_size, s.num_kv_heads, s.head_dim});
  hkv.v_cache = host_view(vc, DType::bf16, {in.num_pages, s.page_size, s.num_kv_heads, s.head_dim});
  hkv.indices = host_view(idx, DType::i32, {in.num_pages});
  hkv.indptr = host_view(ptr, DType::i32, {s.batch + 1});
  hkv.last_page_len = host_view(last, DType::i32, {s.batch});
  ref::batch_prefill_paged(host_view(q, DType::bf16, {total, s.num_qo_heads, s.head_dim}), hkv,
                           host_view(qo_indptr, DType::i32, {s.batch + 1}),
                           host_view(want, DType::bf16, {total, s.num_qo_heads, s.head_dim}), nullptr, cfg);
  expect_close_bf16(got, want, 2e-2, 2e-2, "batch prefill (paged, causal)");
}

// The decode step (rmsnorm, qk rmsnorm, batch decode, sparse MLA decode) on cuda:1 captured in a CUDA
// graph on a cuda:1 stream while cuda:0 is current: a launch bound to any other stream or device breaks
// the capture or leaves the poisoned outputs unwritten.
TEST(MultiGpu, DecodeStepOnDeviceOneCapturedInAGraph) {
  REQUIRE_TWO_GPUS();
  DeviceGuard current(0);
  tp::DeviceStep step(runtime(), step_inputs(), 1, 0, 1);
  step.enqueue();  // one eager step first: lazy per-device set-up (kernel attributes) stays out of the capture
  (void)step.download();
  step.poison_outputs();
  {
    DeviceGuard g(1);
    cuda_check(cudaStreamSynchronize(step.stream()), "cudaStreamSynchronize");
  }
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(step.stream(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(current_device(), 0);
  try {
    step.enqueue();
  } catch (...) {
    (void)cudaStreamEndCapture(step.stream(), &graph);
    throw;
  }
  ASSERT_EQ(cudaStreamEndCapture(step.stream(), &graph), cudaSuccess);
  EXPECT_EQ(current_device(), 0);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_GE(nodes, 4u) << "the graph should hold the step's kernels";
  {
    DeviceGuard g(1);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, step.stream()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(step.stream()), cudaSuccess);
    cudaGraphExecDestroy(exec);
  }
  cudaGraphDestroy(graph);
  expect_step_matches_reference(step.download(), "graph replay on cuda:1");
}

TEST(MultiGpu, SparseMlaPrefillAndQuantizerOnDeviceOne) {
  REQUIRE_TWO_GPUS();
  const int64_t s_q = 4, h = 64, s_kv = 512, topk = 128;
  auto q = random_bf16(s_q * h * 576, 10), kv = random_bf16(s_kv * 576, 11);
  std::vector<int32_t> idx(s_q * topk);
  std::mt19937 rng(12);
  for (auto& i : idx) i = static_cast<int32_t>(rng() % s_kv);
  const double scale = 1.0 / std::sqrt(576.0);
  const auto got = run_with_current(1, 0, [&](On& on) {
    const TensorView out = on.out(DType::bf16, {s_q, h, 512}), lse = on.out(DType::f32, {s_q, h});
    const TensorView kvd = on.put(kv, DType::bf16, {s_kv, 1, 576});
    mla::sparse_prefill({.q = on.put(q, DType::bf16, {s_q, h, 576}),
                         .kv = kvd,
                         .indices = on.put(idx, DType::i32, {s_q, 1, topk}),
                         .out = out,
                         .lse = lse},
                        {.sm_scale = scale}, on.stream());
    const TensorView fp8 = on.out(DType::u8, {s_kv, 656});
    mla::quantize_kv_cache_fp8(TensorView::contiguous(kvd.data, DType::bf16, kvd.device, {s_kv, 576}), fp8, on.stream());
    return std::make_pair(on.get(out), on.get<uint8_t>(fp8));
  });
  const auto r = ref::mla_sparse_prefill_reference(host_view(q, DType::bf16, {s_q, h, 576}),
                                                   host_view(kv, DType::bf16, {s_kv, 1, 576}),
                                                   host_view(idx, DType::i32, {s_q, 1, topk}), nullptr, nullptr, scale);
  expect_close_bf16(got.first, to_bf16(r.out), 2e-2, 2e-2, "mla::sparse_prefill");
  std::vector<uint8_t> want(s_kv * 656);
  mla::quantize_kv_cache_fp8(host_view(kv, DType::bf16, {s_kv, 576}), host_view(want, DType::u8, {s_kv, 656}), nullptr);
  EXPECT_TRUE(got.second == want) << "mla::quantize_kv_cache_fp8 on cuda:1 differs from the host quantizer";
}

// Batch MLA and fused MoE: the same call on cuda:1 (cuda:0 current) and on cuda:0 (cuda:1 current)
// give the same outputs (test_mla_gdn_moe_gpu checks cuda:0 against the float64 references).
TEST(MultiGpu, BatchMlaOnDeviceOneMatchesDeviceZero) {
  REQUIRE_TWO_GPUS();
  // Batch MLA: 4 requests, 1 query row each, 300 KV tokens in pages of 64, 16 heads.
  const int64_t B = 4, H = 16, P = 64, kv_len = 300, ppr = (kv_len + P - 1) / P, pages = B * ppr;
  auto qn = random_bf16(B * H * 512, 20), qp = random_bf16(B * H * 64, 21);
  auto ckv = random_bf16(pages * P * 512, 22), kpe = random_bf16(pages * P * 64, 23);
  std::vector<int32_t> pidx(pages), qo(B + 1), kvp(B + 1), kvl(B, kv_len);
  std::iota(pidx.begin(), pidx.end(), 0);
  for (int64_t b = 0; b <= B; ++b) qo[b] = static_cast<int32_t>(b), kvp[b] = static_cast<int32_t>(b * ppr);
  auto mla_run = [&](On& on) {
    BatchMlaConfig cfg{.num_heads = H, .page_size = P};
    auto plan = BatchMlaPlan::create(runtime(), on.workspace(), host_view(qo, DType::i32, {B + 1}),
                                     host_view(kvp, DType::i32, {B + 1}), host_view(kvl, DType::i32, {B}), cfg,
                                     on.stream());
    const TensorView out = on.out(DType::bf16, {B, H, 512});
    plan.run(on.put(qn, DType::bf16, {B, H, 512}), on.put(qp, DType::bf16, {B, H, 64}),
             on.put(ckv, DType::bf16, {pages, P, 512}), on.put(kpe, DType::bf16, {pages, P, 64}),
             on.put(pidx, DType::i32, {pages}), out, nullptr, on.stream());
    return on.get(out);
  };
  std::vector<uint16_t> m1, m0;
  SKIP_IF_MODULE_MISSING(m1 = run_with_current(1, 0, mla_run));
  m0 = run_with_current(0, 1, mla_run);
  expect_close_bf16(m1, m0, 1e-3, 1e-3, "batch MLA cuda:1 vs cuda:0");
  expect_close_bf16(m0, m0, 0, 0, "batch MLA cuda:0 written (no NaN)");
}

TEST(MultiGpu, FusedMoeOnDeviceOneMatchesDeviceZero) {
  REQUIRE_TWO_GPUS();

  // Fused MoE (bf16): 16 tokens, top-2 of 8 experts, hidden 256, intermediate 128, swiglu.
  const int64_t Tm = 16, Hm = 256, Im = 128, E = 8, K = 2;
  auto xin = random_bf16(Tm * Hm, 40), w1 = random_bf16(E * 2 * Im * Hm, 41, -0.05f, 0.05f);
  auto w2 = random_bf16(E * Hm * Im, 42, -0.05f, 0.05f);
  std::vector<int32_t> sel(Tm * K);
  std::vector<float> scales(Tm * K, 0.5f);
  for (int64_t t = 0; t < Tm; ++t) sel[t * K] = static_cast<int32_t>(t % E), sel[t * K + 1] = static_cast<int32_t>((t + 3) % E);
  auto moe_run = [&](On& on) {
    FusedMoeConfig cfg;
    cfg.device = on.device();
    auto runner = FusedMoeRunner::create(runtime(), cfg);
    FusedMoeTensors a;
    a.output = on.out(DType::bf16, {Tm, Hm});
    a.input = on.put(xin, DType::bf16, {Tm, Hm});
    a.token_selected_experts = on.put(sel, DType::i32, {Tm, K});
    a.token_final_scales = on.put(scales, DType::f32, {Tm, K});
    a.fc1_weights = on.put(w1, DType::bf16, {E, 2 * Im, Hm});
    a.fc2_weights = on.put(w2, DType::bf16, {E, Hm, Im});
    runner.run(a, {.activation = MoeActivation::swiglu}, on.stream());
    return on.get(a.output);
  };
  std::vector<uint16_t> e1, e0;
  SKIP_IF_MODULE_MISSING(e1 = run_with_current(1, 0, moe_run));
  e0 = run_with_current(0, 1, moe_run);
  expect_close_bf16(e1, e0, 1e-3, 1e-3, "fused MoE cuda:1 vs cuda:0");
  expect_close_bf16(e0, e0, 0, 0, "fused MoE cuda:0 written (no NaN)");
}

// GDN prefill on both GPUs in an order that catches per-process one-time kernel setup inside the module:
// the plain variant on cuda:0, then cuda:1, then cuda:0 again; the gated variant (alpha, beta, initial
// state) first on cuda:1, then on cuda:0. Every run against the float64 reference, and the two devices
// against each other. Each step runs even when an earlier one failed, so one run names every failing step.
TEST(MultiGpu, GdnPrefillOnEitherDeviceInAnyOrder) {
  REQUIRE_TWO_GPUS();
  const int64_t N = 2, T = 256, H = 4, D = 128;
  std::vector<int64_t> cu{0, 100, T};
  // Unit-norm q and k rows keep the delta rule stable (models L2-normalise them).
  auto unit_rows = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<uint16_t> v(static_cast<size_t>(T * H * D));
    for (int64_t r = 0; r < T * H; ++r) {
      std::vector<float> row(D);
      double ss = 0;
      for (auto& x : row) x = nd(rng), ss += double(x) * x;
      for (int64_t d = 0; d < D; ++d) v[r * D + d] = tp::float_to_bf16(static_cast<float>(row[d] / std::sqrt(ss)));
    }
    return v;
  };
  auto gq = unit_rows(30), gk = unit_rows(31), gv = random_bf16(T * H * D, 32);
  std::mt19937_64 rng(33);
  std::uniform_real_distribution<float> ua(0.9f, 1.0f), ub(0.1f, 0.9f), us(-0.05f, 0.05f);
  std::vector<float> alpha(T * H), beta(T * H), state_in(N * H * D * D);
  for (auto& x : alpha) x = ua(rng);
  for (auto& x : beta) x = ub(rng);
  for (auto& x : state_in) x = us(rng);

  struct Result {
    std::vector<uint16_t> out;
    std::vector<float> state;
  };
  auto gdn_run = [&](bool gated) {
    return [&, gated](On& on) {
      GdnPrefillTensors a;
      a.q = on.put(gq, DType::bf16, {T, H, D});
      a.k = on.put(gk, DType::bf16, {T, H, D});
      a.v = on.put(gv, DType::bf16, {T, H, D});
      a.cu_seqlens = on.put(cu, DType::i64, {N + 1});
      a.output = on.out(DType::bf16, {T, H, D});
      a.output_state = on.out(DType::f32, {N, H, D, D});
      TensorView al, be, si;
      if (gated) {
        al = on.put(alpha, DType::f32, {T, H});
        be = on.put(beta, DType::f32, {T, H});
        si = on.put(state_in, DType::f32, {N, H, D, D});
        a.alpha = &al;
        a.beta = &be;
        a.input_state = &si;
      }
      gdn_prefill(runtime(), a, {}, on.stream());  // the default per-device workspace
      return Result{on.get(a.output), on.get<float>(a.output_state)};
    };
  };
  auto reference = [&](bool gated) {
    ref::GdnReferenceInputs in;
    in.q = host_view(gq, DType::bf16, {T, H, D});
    in.k = host_view(gk, DType::bf16, {T, H, D});
    in.v = host_view(gv, DType::bf16, {T, H, D});
    in.cu_seqlens = cu;
    TensorView al = host_view(alpha, DType::f32, {T, H}), be = host_view(beta, DType::f32, {T, H}),
               si = host_view(state_in, DType::f32, {N, H, D, D});
    if (gated) in.alpha = &al, in.beta = &be, in.input_state = &si;
    std::vector<double> out, state;
    ref::gdn_prefill_reference(in, out, state, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    return std::pair{to_bf16(out), state};
  };
  const auto want_plain = reference(false), want_gated = reference(true);

  std::string missing;  // the runtime has no GDN module: the test skips
  auto step = [&](const char* what, bool gated, int device) -> std::optional<Result> {
    if (!missing.empty()) return std::nullopt;
    SCOPED_TRACE(what);
    std::optional<Result> r;
    try {
      r = run_with_current(device, 1 - device, gdn_run(gated));
    } catch (const Error& e) {
      if (e.code() == ErrorCode::not_found) {
        missing = e.what();
        return std::nullopt;
      }
      ADD_FAILURE() << what << ": " << e.what();
      return std::nullopt;
    }
    const auto& want = gated ? want_gated : want_plain;
    expect_close_bf16(r->out, want.first, 2e-2, 2e-2, std::string(what) + " output vs reference");
    int64_t bad = 0;
    for (size_t i = 0; i < want.second.size(); ++i)
      if (!(std::abs(double(r->state[i]) - want.second[i]) <= 2e-2 + 2e-2 * std::abs(want.second[i]))) ++bad;
    EXPECT_EQ(bad, 0) << what << ": final state differs from the reference at " << bad << " of "
                      << want.second.size() << " values";
    return r;
  };
  std::optional<Result> p0, p1, p0_again, g1, g0;
  p0 = step("plain on cuda:0 (first)", false, 0);
  if (!missing.empty()) GTEST_SKIP() << "module not available here: " << missing;
  p1 = step("plain on cuda:1 (after cuda:0)", false, 1);
  p0_again = step("plain on cuda:0 (after cuda:1)", false, 0);
  g1 = step("gated on cuda:1 (first)", true, 1);
  g0 = step("gated on cuda:0 (after cuda:1)", true, 0);
  if (p0 && p1) expect_close_bf16(p1->out, p0->out, 1e-3, 1e-3, "GDN plain cuda:1 vs cuda:0");
  if (p0 && p0_again) EXPECT_EQ(p0_again->out, p0->out) << "GDN plain on cuda:0 changed after running on cuda:1";
  if (g0 && g1) expect_close_bf16(g1->out, g0->out, 1e-3, 1e-3, "GDN gated cuda:1 vs cuda:0");
  if (!p0 || !p1) return;

  // Two threads, one per GPU, each with the other GPU current, alternate plain and gated calls: every
  // call switches the module's device, and every output must equal that device's first result bitwise.
  const int kIters = 40;
  std::atomic<int> mismatches{0}, errors{0};
  std::string first_error;
  std::mutex error_mu;
  auto worker = [&](int device) {
    const Result& want_plain_dev = device == 0 ? *p0 : *p1;
    const std::optional<Result>& want_gated_dev = device == 0 ? g0 : g1;
    DeviceGuard current(1 - device);
    On on(device);
    for (int i = 0; i < kIters; ++i) {
      const bool gated = (i % 2 == 1) && want_gated_dev.has_value();
      try {
        const Result r = gdn_run(gated)(on);
        if (r.out != (gated ? want_gated_dev->out : want_plain_dev.out)) ++mismatches;
      } catch (const std::exception& e) {
        if (errors++ == 0) {
          std::lock_guard lock(error_mu);
          first_error = e.what();
        }
      }
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(errors.load(), 0) << "first error: " << first_error;
  EXPECT_EQ(mismatches.load(), 0) << "GDN outputs on two threads differ from each device's first result";
}

// ------------------------------------------------------------------------------------------------ two threads, two GPUs

double soak_seconds() {
  const char* v = std::getenv("FLASHCPP_SOAK_SECONDS");
  const double s = v ? std::atof(v) : 0.0;
  return s > 0 ? s : 20.0;
}

TEST(MultiGpu, TwoThreadsDriveTwoGpus) {
  REQUIRE_TWO_GPUS();
  const StepReference& want = step_reference();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(soak_seconds());
  std::atomic<bool> stop{false};
  struct Report {
    int64_t iterations = 0;
    std::string failure;
  } reports[2];
  auto drive = [&](int device) {
    Report& rep = reports[device];
    try {
      // The thread's current device is the *other* GPU: every op must follow its tensors.
      cuda_check(cudaSetDevice(1 - device), "cudaSetDevice");
      tp::DeviceStep step(runtime(), step_inputs(), device, 0, 1);
      std::vector<uint16_t> first_attn;
      while (!stop.load() && std::chrono::steady_clock::now() < deadline) {
        step.poison_outputs();
        step.enqueue();
        const tp::StepOutputs got = step.download();
        const tp::Diff a = tp::compare_bf16(got.attn, want.attn, kStepAtol, kStepRtol);
        const tp::Diff m = tp::compare_bf16(got.mla, want.mla, kStepAtol, kStepRtol);
        if (first_attn.empty()) first_attn = got.attn;
        std::string bad;
        if (a.bad) bad = "attention: " + a.describe();
        else if (m.bad) bad = "sparse MLA: " + m.describe();
        else if (got.attn != first_attn) bad = "attention differs bitwise from this thread's first iteration";
        else if (current_device() != 1 - device) bad = "the current device changed";
        if (!bad.empty()) {
          rep.failure = "cuda:" + std::to_string(device) + " iteration " + std::to_string(rep.iterations) + ": " + bad;
          stop = true;
          return;
        }
        ++rep.iterations;
      }
    } catch (const std::exception& e) {
      rep.failure = "cuda:" + std::to_string(device) + ": " + e.what();
      stop = true;
    }
  };
  std::thread t0(drive, 0), t1(drive, 1);
  t0.join();
  t1.join();
  for (const Report& r : reports) EXPECT_TRUE(r.failure.empty()) << r.failure;
  EXPECT_GT(reports[0].iterations, 0);
  EXPECT_GT(reports[1].iterations, 0);
  std::printf("[   INFO   ] %.0f s: %lld steps on cuda:0, %lld on cuda:1, every one checked\n", soak_seconds(),
              static_cast<long long>(reports[0].iterations), static_cast<long long>(reports[1].iterations));
}

// ------------------------------------------------------------------------------------------------ tensor parallel

TEST(MultiGpu, TensorParallelStepMatchesOneGpu) {
  REQUIRE_TWO_GPUS();
#ifndef FLASHCPP_HAVE_NCCL
  GTEST_SKIP() << "NCCL was not found at configure time (libnccl / nccl.h in the CUDA toolkit)";
#else
  const tp::StepInputs& in = step_inputs();
  const tp::StepOutputs one = tp::run_single_gpu(runtime(), in, 0);
  expect_step_matches_reference(one, "one GPU");
  const int devices[] = {0, 1};
  const tp::TpRun run = tp::run_tensor_parallel(runtime(), in, devices, 3);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  EXPECT_TRUE(run.ranks_agree) << "the ranks received different all-gather results";
  expect_close_bf16(run.out.attn, one.attn, 2e-3, 1e-2, "tensor-parallel attention vs one GPU");
  expect_close_bf16(run.out.mla, one.mla, 2e-3, 1e-2, "tensor-parallel sparse MLA (128 heads = 2 x 64) vs one GPU");
  expect_step_matches_reference(run.out, "two GPUs");
  std::printf("[   INFO   ] NCCL %s: %.3f ms per 2-GPU step\n", run.nccl_version.c_str(), run.ms_per_step);
#endif
}

}  // namespace
}  // namespace flashcpp::testing
