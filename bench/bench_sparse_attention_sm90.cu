// Standalone check + benchmark of the Hopper sparse MLA kernels (launch_hopper: the launch plan choose() makes on
// device 0 when that is not the simple kernel: the wgmma kernel for prefill and, for FP8 decode, the automatic choice
// or the kernel FLASHCPP_MLA_FP8_KERNEL=mma|wgmma forces).
//
//   bench_sparse_attention_sm90            correctness cases, then timings
//   bench_sparse_attention_sm90 --check    correctness only
//   bench_sparse_attention_sm90 --bench    timings only
//   bench_sparse_attention_sm90 --quick    the small correctness cases only (for compute-sanitizer)
//
// Correctness: random inputs (invalid indices of every kind, slots past topk_length pointing at
// NaN-filled KV rows that must never be read, an all-invalid token, attn_sink with finite/-inf/+inf heads),
// outputs poisoned with NaN before each launch. The sm90 kernel is compared with the simple kernel on
// every token and with a float64 CPU reference on a few tokens, with FlashMLA's data and tolerances:
//   prefill: q, kv ~ U(-0.18, 0.18) (std ~0.1 like FlashMLA's randn/10 + U(-0.05, 0.05)), sm_scale 0.5;
//            out |d| <= 8e-4 or <= 3.01/128 |ref|, cos-diff <= 7e-6; lse / max_logits |d| <= 1e-6 or
//            <= 2.01/65536 |ref|;
//   decode:  q ~ U(-1, 1), kv ~ U(-0.18, 0.18), sm_scale d_qk^-0.55; out |d| <= 1e-3 or <= 2.01/128 |ref|,
//            cos-diff <= 5e-6; lse |d| <= 1e-6 or <= 8.01/65536 |ref|;
//   infinities and NaN positions must match. One line per case, PASS/FAIL.
// "sharp" cases use logits of std ~1 (q, kv ~ U(-1.7, 1.7), sm_scale d_qk^-0.5): there the bf16 rounding
// of P before the PV product (FlashMLA does the same) gives per-element errors up to ~1 bf16 ulp of the
// largest V term on outputs that cancel to small values, so they are judged on cos-diff, lse and
// max_logits only (the element-wise out figures are printed).
// Timing: CUDA events, 3 warm-up runs, median of 20, FLOPs = 2 (d_qk + d_v) per head per topk slot.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mla/fp8_v32.hpp"
#include "mla/launch_plan.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace k = flashcpp::mla::kernels;
namespace fp8 = flashcpp::mla::fp8;

// The plan the library would run `p` with on device 0; false (nothing launched) when that is the simple kernel.
bool launch_hopper(const k::SparseAttentionParams& p, cudaStream_t stream) {
  const k::LaunchPlan plan = k::choose(p, k::kernel_support(0));
  return plan.kernel != k::SparseKernel::simple && k::launch(plan, p, stream);
}

#define CK(x)                                                                                       \
  do {                                                                                              \
    cudaError_t e_ = (x);                                                                           \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, \
                   #x);                                                                             \
      std::exit(2);                                                                                 \
    }                                                                                               \
  } while (0)

namespace {

// ------------------------------------------------------------------------------------------------
// Device helpers: random fill and a V3.2 quantizer (one thread per row, power-of-two scales).
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__global__ void fill_uniform_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float amp) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x100000001b3ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(h >> 40) * (1.f / 16777216.f);
    p[i] = __float2bfloat16_rn((2.f * u - 1.f) * amp);
  }
}
__global__ void quantize_rows(const uint16_t* src, int64_t rows, int block_size, int64_t block_stride_bytes,
                              uint8_t* cache) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  const uint16_t* s = src + r * fp8::kDims;
  uint8_t* d = cache + (r / block_size) * block_stride_bytes + (r % block_size) * fp8::kBytesPerToken;
  for (int g = 0; g < fp8::kNumScales; ++g) {
    float amax = 0.f;
    for (int i = 0; i < fp8::kTileDims; ++i) amax = fmaxf(amax, fabsf(fp8::bf16_to_float(s[g * 128 + i])));
    const float scale = fp8::pow2_scale(amax);
    for (int i = 0; i < fp8::kTileDims; ++i) d[g * 128 + i] = fp8::float_to_e4m3(fp8::bf16_to_float(s[g * 128 + i]) / scale);
    std::memcpy(d + fp8::kScaleOffset + 4 * g, &scale, 4);
  }
  std::memcpy(d + fp8::kRopeOffset, s + fp8::kNopeDims, 2 * fp8::kRopeDims);
}

void fill(void* p, int64_t n, uint64_t seed, float amp) {
  fill_uniform_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, amp);
  CK(cudaGetLastError());
}

template <class T>
struct DevBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) { CK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T))); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  std::vector<T> host() const {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

// ------------------------------------------------------------------------------------------------
struct Case {
  std::string name;
  bool fp8_kv = false;
  int batch = 1, s_q = 1;  // tokens = batch * s_q; decode: topk_length per request (tokens_per_length = s_q)
  int h_q = 128, d_qk = 576, topk = 512;
  int64_t s_kv = 4096;  // prefill: rows of kv; decode: rows per request
  int block_size = 64;
  bool sink = false, topk_len = false;
  double invalid_frac = 0.1;
  bool sharp = false;
};

struct Problem {
  Case c;
  int tokens = 0;
  int64_t num_kv = 0;
  std::vector<int32_t> idx;
  std::vector<int32_t> lens;  // per length group
  std::vector<float> sink;
  std::vector<int64_t> poison;
  DevBuf<uint16_t>* q = nullptr;
  DevBuf<uint16_t>* kv_bf16 = nullptr;  // bf16 KV (prefill) or the source rows of the fp8 cache
  DevBuf<uint8_t>* cache = nullptr;
  DevBuf<int32_t>* d_idx = nullptr;
  DevBuf<int32_t>* d_len = nullptr;
  DevBuf<float>* d_sink = nullptr;
  int64_t block_stride_bytes = 0;
  ~Problem() {
    delete q; delete kv_bf16; delete cache; delete d_idx; delete d_len; delete d_sink;
  }
};

constexpr int32_t kInvalid[] = {-1, INT_MIN, -123456, -2, INT_MAX, 2147480000};

void build(Problem& P, uint64_t seed) {
  const Case& c = P.c;
  std::mt19937_64 rng(seed);
  P.tokens = c.batch * c.s_q;
  P.num_kv = c.fp8_kv ? c.s_kv * c.batch : c.s_kv;
  // Poison rows: NaN-filled, never referenced by a valid in-length slot.
  for (int64_t r : {int64_t{3}, int64_t{17}, P.num_kv / 2, P.num_kv - 1}) P.poison.push_back(r);
  std::sort(P.poison.begin(), P.poison.end());
  P.poison.erase(std::unique(P.poison.begin(), P.poison.end()), P.poison.end());
  auto is_poison = [&](int64_t r) { return std::binary_search(P.poison.begin(), P.poison.end(), r); };

  const int groups = c.fp8_kv ? c.batch : P.tokens;  // topk_length entries
  const int tokens_per_len = c.fp8_kv ? c.s_q : 1;
  if (c.topk_len) {
    P.lens.resize(groups);
    for (int i = 0; i < groups; ++i) {
      const int r = static_cast<int>(rng() % 8);
      P.lens[i] = r == 0 ? 0 : r == 1 ? c.topk : static_cast<int>(rng() % (c.topk + 1));
    }
    if (groups > 2) P.lens[2] = c.topk + 1000;  // longer than topk: clamped
  }
  P.idx.resize(static_cast<size_t>(P.tokens) * c.topk);
  for (int t = 0; t < P.tokens; ++t) {
    const int len = c.topk_len ? P.lens[t / tokens_per_len] : c.topk;
    const int64_t lo = c.fp8_kv ? (t / c.s_q) * c.s_kv : 0, span = c.s_kv;
    for (int i = 0; i < c.topk; ++i) {
      int32_t v;
      if (i >= len) {
        v = static_cast<int32_t>(P.poison[rng() % P.poison.size()]);  // masked by topk_length: never read
      } else if (t == 1 || std::uniform_real_distribution<double>(0, 1)(rng) < c.invalid_frac) {
        const int k = static_cast<int>(rng() % 8);
        v = k < 6 ? kInvalid[k] : static_cast<int32_t>(P.num_kv + (k == 6 ? 0 : 5));
      } else {
        int64_t r;
        do r = lo + static_cast<int64_t>(rng() % span); while (is_poison(r));
        v = static_cast<int32_t>(r);
      }
      P.idx[static_cast<size_t>(t) * c.topk + i] = v;
    }
  }
  if (c.sink) {
    P.sink.resize(c.h_q);
    for (int h = 0; h < c.h_q; ++h) P.sink[h] = std::uniform_real_distribution<float>(-3.f, 3.f)(rng);
    P.sink[0] = -INFINITY;
    if (c.h_q > 1) P.sink[1] = INFINITY;
    if (c.h_q > 2) P.sink[2] = 30.f;
  }

  P.q = new DevBuf<uint16_t>(static_cast<size_t>(P.tokens) * c.h_q * c.d_qk);
  const float q_amp = c.sharp ? 1.7f : (c.fp8_kv ? 1.f : 0.18f), kv_amp = c.sharp ? 1.7f : 0.18f;
  fill(P.q->p, P.q->n, seed * 3 + 1, q_amp);
  P.kv_bf16 = new DevBuf<uint16_t>(static_cast<size_t>(P.num_kv) * c.d_qk);
  fill(P.kv_bf16->p, P.kv_bf16->n, seed * 3 + 2, kv_amp);
  if (c.fp8_kv) {
    const int64_t blocks = (P.num_kv + c.block_size - 1) / c.block_size;
    P.block_stride_bytes = static_cast<int64_t>(c.block_size + 1) * fp8::kBytesPerToken;  // padded blocks
    P.cache = new DevBuf<uint8_t>(static_cast<size_t>(blocks * P.block_stride_bytes));
    CK(cudaMemset(P.cache->p, 0xFF, P.cache->n));  // padding / tail rows are NaN too
    quantize_rows<<<static_cast<unsigned>((P.num_kv + 127) / 128), 128>>>(P.kv_bf16->p, P.num_kv, c.block_size,
                                                                           P.block_stride_bytes, P.cache->p);
    CK(cudaGetLastError());
    for (int64_t r : P.poison)
      CK(cudaMemset(P.cache->p + (r / c.block_size) * P.block_stride_bytes + (r % c.block_size) * fp8::kBytesPerToken,
                    0xFF, fp8::kBytesPerToken));
  } else {
    for (int64_t r : P.poison) CK(cudaMemset(P.kv_bf16->p + r * c.d_qk, 0xFF, c.d_qk * 2));
  }
  P.d_idx = new DevBuf<int32_t>(P.idx.size());
  CK(cudaMemcpy(P.d_idx->p, P.idx.data(), P.idx.size() * 4, cudaMemcpyHostToDevice));
  if (c.topk_len) {
    P.d_len = new DevBuf<int32_t>(P.lens.size());
    CK(cudaMemcpy(P.d_len->p, P.lens.data(), P.lens.size() * 4, cudaMemcpyHostToDevice));
  }
  if (c.sink) {
    P.d_sink = new DevBuf<float>(P.sink.size());
    CK(cudaMemcpy(P.d_sink->p, P.sink.data(), P.sink.size() * 4, cudaMemcpyHostToDevice));
  }
  CK(cudaDeviceSynchronize());
}

struct Outputs {
  DevBuf<uint16_t> out;
  DevBuf<float> lse, ml;
  Outputs(int tokens, int h_q) : out(static_cast<size_t>(tokens) * h_q * 512), lse(static_cast<size_t>(tokens) * h_q),
                                 ml(static_cast<size_t>(tokens) * h_q) {}
  void poison() {
    CK(cudaMemset(out.p, 0xFF, out.n * 2));
    CK(cudaMemset(lse.p, 0xFF, lse.n * 4));
    CK(cudaMemset(ml.p, 0xFF, ml.n * 4));
  }
};

float sm_scale_of(const Case& c) {
  if (c.sharp) return 1.f / std::sqrt(static_cast<float>(c.d_qk));
  return c.fp8_kv ? std::pow(static_cast<float>(c.d_qk), -0.55f) : 0.5f;
}

k::SparseAttentionParams params(const Problem& P, Outputs& o) {
  const Case& c = P.c;
  k::SparseAttentionParams p;
  p.q = P.q->p;
  p.q_stride_token = static_cast<int64_t>(c.h_q) * c.d_qk;
  p.q_stride_head = c.d_qk;
  p.num_tokens = P.tokens;
  p.h_q = c.h_q;
  p.d_qk = c.d_qk;
  p.d_v = 512;
  p.topk = c.topk;
  p.indices = P.d_idx->p;
  p.indices_stride_token = c.topk;
  p.topk_length = c.topk_len ? P.d_len->p : nullptr;
  p.tokens_per_length = c.fp8_kv ? c.s_q : 1;
  p.attn_sink = c.sink ? P.d_sink->p : nullptr;
  p.sm_scale = sm_scale_of(c);
  p.num_kv = P.num_kv;
  if (c.fp8_kv) {
    p.kv_format = k::KvFormat::fp8_v32;
    p.kv = P.cache->p;
    p.block_size = c.block_size;
    p.kv_block_stride_bytes = P.block_stride_bytes;
    p.kv_slot_stride_bytes = fp8::kBytesPerToken;
  } else {
    p.kv_format = k::KvFormat::bf16;
    p.kv = P.kv_bf16->p;
    p.kv_row_stride = c.d_qk;
  }
  p.out = o.out.p;
  p.out_stride_token = static_cast<int64_t>(c.h_q) * 512;
  p.out_stride_head = 512;
  p.lse = o.lse.p;
  p.lse_stride_token = c.h_q;
  p.lse_stride_head = 1;
  p.max_logits = o.ml.p;
  p.max_logits_stride_token = c.h_q;
  p.max_logits_stride_head = 1;
  return p;
}

// ------------------------------------------------------------------------------------------------
// Comparison with FlashMLA's tolerances.
struct Tol {
  double out_abs, out_rel, cos, lse_rel;
};
Tol tolerances(const Case& c) {
  if (c.fp8_kv) return {1e-3, 2.01 / 128, 5e-6, 8.01 / 65536};
  return {8e-4, 3.01 / 128, 7e-6, 2.01 / 65536};
}
struct Diff {
  Tol tol{};
  bool judge_out = true;
  double out_max = 0, cos_diff = 0, lse_max = 0, ml_max = 0;
  long bad_out = 0, bad_lse = 0, bad_ml = 0, nan_out = 0;
  double sxy = 0, sxx = 0;
  bool ok() const {
    return (bad_out == 0 || !judge_out) && nan_out == 0 && bad_lse == 0 && bad_ml == 0 && cos_diff <= tol.cos;
  }
};
bool close_scalar(double a, double b, double rel, double& maxd) {
  if (std::isnan(a) || std::isnan(b)) return false;
  if (std::isinf(a) || std::isinf(b)) return a == b;
  const double d = std::fabs(a - b);
  maxd = std::max(maxd, d);
  return d <= 1e-6 || d <= rel * std::fabs(b);
}
void compare_row(Diff& D, const uint16_t* out, float lse, float ml, const double* ref_out, double ref_lse,
                 double ref_ml) {
  for (int i = 0; i < 512; ++i) {
    const double a = fp8::bf16_to_float(out[i]), b = ref_out[i];
    const double d = std::fabs(a - b);
    if (std::isnan(a) != std::isnan(b)) ++D.nan_out;
    if (!(d <= D.tol.out_abs || d <= D.tol.out_rel * std::fabs(b))) ++D.bad_out;  // NaN fails here
    if (!std::isnan(d)) D.out_max = std::max(D.out_max, d);
    D.sxy += a * b;
    D.sxx += a * a + b * b;
  }
  if (!close_scalar(lse, ref_lse, D.tol.lse_rel, D.lse_max)) ++D.bad_lse;
  if (!close_scalar(ml, ref_ml, 2.01 / 65536, D.ml_max)) ++D.bad_ml;
}
void finish(Diff& D) { D.cos_diff = D.sxx > 0 ? 1.0 - 2.0 * D.sxy / D.sxx : (std::isnan(D.sxx) ? 1.0 : 0.0); }

// Float64 reference for one token (all heads) from host copies of the inputs.
void reference_token(const Problem& P, const std::vector<uint16_t>& q, const std::vector<uint16_t>& kv,
                     const std::vector<uint8_t>& cache, int t, std::vector<double>& out, std::vector<double>& lse,
                     std::vector<double>& ml) {
  const Case& c = P.c;
  const int len = c.topk_len ? std::clamp(P.lens[t / (c.fp8_kv ? c.s_q : 1)], 0, c.topk) : c.topk;
  const double sm_scale = sm_scale_of(c);  // the float the kernels get
  std::vector<std::vector<double>> rows;
  for (int i = 0; i < len; ++i) {
    const int64_t r = P.idx[static_cast<size_t>(t) * c.topk + i];
    if (r < 0 || r >= P.num_kv) continue;
    std::vector<double> v(c.d_qk);
    if (c.fp8_kv) {
      const uint8_t* b = cache.data() + (r / c.block_size) * P.block_stride_bytes + (r % c.block_size) * fp8::kBytesPerToken;
      for (int d = 0; d < 512; ++d) {
        float s;
        std::memcpy(&s, b + fp8::kScaleOffset + 4 * (d / 128), 4);
        v[d] = fp8::bf16_to_float(fp8::float_to_bf16(fp8::e4m3_to_float(b[d]) * s));
      }
      for (int d = 0; d < 64; ++d) {
        uint16_t h;
        std::memcpy(&h, b + fp8::kRopeOffset + 2 * d, 2);
        v[512 + d] = fp8::bf16_to_float(h);
      }
    } else {
      for (int d = 0; d < c.d_qk; ++d) v[d] = fp8::bf16_to_float(kv[r * c.d_qk + d]);
    }
    rows.push_back(std::move(v));
  }
  out.assign(static_cast<size_t>(c.h_q) * 512, 0.0);
  lse.assign(c.h_q, INFINITY);
  ml.assign(c.h_q, -INFINITY);
  std::vector<double> s(rows.size());
  for (int h = 0; h < c.h_q; ++h) {
    if (rows.empty()) continue;
    const uint16_t* qh = q.data() + (static_cast<size_t>(t) * c.h_q + h) * c.d_qk;
    double m = -INFINITY;
    for (size_t j = 0; j < rows.size(); ++j) {
      double acc = 0;
      for (int d = 0; d < c.d_qk; ++d) acc += fp8::bf16_to_float(qh[d]) * rows[j][d];
      s[j] = acc * sm_scale;
      m = std::max(m, s[j]);
    }
    double sum = 0;
    for (double x : s) sum += std::exp(x - m);
    const double l = std::log(sum) + m;
    lse[h] = l;
    ml[h] = m;
    double lo = l;
    if (c.sink) {
      const double sk = P.sink[h];
      lo = std::isinf(sk) ? (sk > 0 ? INFINITY : l) : std::max(l, sk) + std::log1p(std::exp(-std::fabs(l - sk)));
    }
    if (std::isinf(lo)) continue;  // sink = +inf: out 0
    for (size_t j = 0; j < rows.size(); ++j) {
      const double w = std::exp(s[j] - lo);
      for (int d = 0; d < 512; ++d) out[static_cast<size_t>(h) * 512 + d] += w * rows[j][d];
    }
  }
}

bool run_case(const Case& c, uint64_t seed) {
  Problem P;
  P.c = c;
  build(P, seed);
  Outputs fast(P.tokens, c.h_q), simple(P.tokens, c.h_q);
  fast.poison();
  simple.poison();
  const k::SparseAttentionParams pf = params(P, fast), ps = params(P, simple);
  const bool taken = launch_hopper(pf, nullptr);
  CK(cudaGetLastError());
  k::launch_sparse_attention_simple(ps, nullptr);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  if (!taken) {
    std::printf("%-50s FAIL (sm90 kernel declined the shape)\n", c.name.c_str());
    return false;
  }
  const auto fo = fast.out.host(), so = simple.out.host();
  const auto fl = fast.lse.host(), sl = simple.lse.host(), fm = fast.ml.host(), sm = simple.ml.host();

  // sm90 vs simple, every token and head.
  Diff vs_simple;
  vs_simple.tol = tolerances(c);
  vs_simple.judge_out = !c.sharp;
  std::vector<double> row(512);
  for (size_t r = 0; r < fl.size(); ++r) {
    for (int i = 0; i < 512; ++i) row[i] = fp8::bf16_to_float(so[r * 512 + i]);
    compare_row(vs_simple, fo.data() + r * 512, fl[r], fm[r], row.data(), sl[r], sm[r]);
  }
  finish(vs_simple);

  // sm90 vs float64 reference on a few tokens (0, the all-invalid token 1, 2, the last).
  const auto qh = P.q->host();
  std::vector<uint16_t> kvh;
  std::vector<uint8_t> cacheh;
  if (c.fp8_kv) cacheh = P.cache->host(); else kvh = P.kv_bf16->host();
  Diff vs_ref;
  vs_ref.tol = tolerances(c);
  vs_ref.judge_out = !c.sharp;
  std::vector<int> toks = {0, 1, 2, P.tokens - 1};
  std::sort(toks.begin(), toks.end());
  toks.erase(std::unique(toks.begin(), toks.end()), toks.end());
  std::vector<double> ro, rl, rm;
  for (int t : toks) {
    if (t < 0 || t >= P.tokens) continue;
    reference_token(P, qh, kvh, cacheh, t, ro, rl, rm);
    for (int h = 0; h < c.h_q; ++h) {
      const size_t r = static_cast<size_t>(t) * c.h_q + h;
      compare_row(vs_ref, fo.data() + r * 512, fl[r], fm[r], ro.data() + static_cast<size_t>(h) * 512, rl[h], rm[h]);
    }
  }
  finish(vs_ref);
  const bool ok = vs_simple.ok() && vs_ref.ok();
  std::printf("%-50s simple: out %.1e cos %.1e lse %.1e ml %.1e bad %ld/%ld/%ld | ref: out %.1e cos %.1e lse %.1e "
              "bad %ld/%ld/%ld  %s\n",
              c.name.c_str(), vs_simple.out_max, vs_simple.cos_diff, vs_simple.lse_max, vs_simple.ml_max,
              vs_simple.bad_out, vs_simple.bad_lse, vs_simple.bad_ml, vs_ref.out_max, vs_ref.cos_diff, vs_ref.lse_max,
              vs_ref.bad_out, vs_ref.bad_lse, vs_ref.bad_ml, ok ? "PASS" : "FAIL");
  return ok;
}

Case mk(const char* name, bool fp8_kv, int batch, int s_q, int h_q, int d_qk, int topk, int64_t s_kv, int block,
        bool sink, bool len, double inv = 0.1, bool sharp = false) {
  Case c;
  c.name = name;
  c.fp8_kv = fp8_kv;
  c.batch = batch;
  c.s_q = s_q;
  c.h_q = h_q;
  c.d_qk = d_qk;
  c.topk = topk;
  c.s_kv = s_kv;
  c.block_size = block;
  c.sink = sink;
  c.topk_len = len;
  c.invalid_frac = inv;
  c.sharp = sharp;
  return c;
}

int check_all(bool quick) {
  const std::vector<Case> cases = {
      mk("prefill bf16 d576 h128 sq61 topk512", false, 1, 61, 128, 576, 512, 4000, 0, true, true),
      mk("prefill bf16 d576 h64 sq37 topk256", false, 1, 37, 64, 576, 256, 1000, 0, false, false),
      mk("prefill bf16 d512 h128 sq29 topk128 sink", false, 1, 29, 128, 512, 128, 700, 0, true, false),
      mk("prefill bf16 d512 h64 sq17 topk2048 len", false, 1, 17, 64, 512, 2048, 10000, 0, false, true),
      mk("prefill bf16 d576 h128 sq5 topk2048 s_kv128K", false, 1, 5, 128, 576, 2048, 131072, 0, true, true, 0.02),
      mk("prefill bf16 d576 h16 sq9 topk64 (bonus)", false, 1, 9, 16, 576, 64, 300, 0, true, false),
      mk("prefill bf16 d576 h100 sq9 topk192 (bonus)", false, 1, 9, 100, 576, 192, 500, 0, false, true),
      mk("decode fp8 h128 b4 sq2 topk512 blk64", true, 4, 2, 128, 576, 512, 2048, 64, true, true),
      mk("decode fp8 h64 b3 sq1 topk2048 blk61", true, 3, 1, 64, 576, 2048, 4096, 61, false, false),
      mk("decode fp8 h128 b2 sq2 topk64 blk53 len", true, 2, 2, 128, 576, 64, 500, 53, true, true),
      mk("decode fp8 h128 b3 sq2 topk256 blk1", true, 3, 2, 128, 576, 256, 777, 1, false, false, 0.3),
      mk("decode fp8 h128 b74 sq3 topk576 blk69", true, 74, 3, 128, 576, 576, 1024, 69, true, true),
      mk("prefill bf16 d512 h64 sq62 topk128 s_kv95 (topk>s_kv)", false, 1, 62, 64, 512, 128, 95, 0, true, true),
      mk("prefill bf16 d576 h128 sq213 topk384", false, 1, 213, 128, 576, 384, 1592, 0, true, true),
      mk("sharp prefill bf16 d576 h128 sq61 topk512", false, 1, 61, 128, 576, 512, 4000, 0, true, true, 0.1, true),
      mk("sharp decode fp8 h128 b4 sq2 topk512", true, 4, 2, 128, 576, 512, 2048, 64, true, true, 0.1, true),
      mk("decode fp8 h100 b3 sq2 topk320 blk64 (cluster, partial group)", true, 3, 2, 100, 576, 320, 1500, 64, true, true),
  };
  int fails = 0;
  uint64_t seed = 1234;
  int ran = 0;
  for (const Case& c : cases) {
    ++seed;
    if (quick && static_cast<int64_t>(c.batch) * c.s_q * c.topk > 20000) continue;  // small cases only
    fails += run_case(c, seed) ? 0 : 1;
    ++ran;
  }
  std::printf("correctness: %d/%d cases PASS\n", ran - fails, ran);
  return fails;
}

// ------------------------------------------------------------------------------------------------
template <class F>
double median_ms(F&& launch, int warmup = 3, int iters = 20) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) launch();
  CK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float x = 0;
    CK(cudaEventElapsedTime(&x, a, b));
    ms.push_back(x);
  }
  CK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void bench_case(const Case& c, bool with_simple) {
  Problem P;
  P.c = c;
  build(P, 99);
  Outputs o(P.tokens, c.h_q);
  o.poison();
  const k::SparseAttentionParams p = params(P, o);
  if (!launch_hopper(p, nullptr)) {
    std::printf("%-52s declined by the sm90 kernel\n", c.name.c_str());
    return;
  }
  CK(cudaDeviceSynchronize());
  const double flop = 2.0 * (c.d_qk + 512) * c.h_q * static_cast<double>(c.topk) * P.tokens;
  const double ms = median_ms([&] { launch_hopper(p, nullptr); });
  std::printf("%-52s sm90 %9.1f us %7.1f TFLOP/s", c.name.c_str(), ms * 1e3, flop / (ms * 1e-3) / 1e12);
  if (with_simple) {
    const double ms2 = median_ms([&] { k::launch_sparse_attention_simple(p, nullptr); }, 1, 5);
    std::printf(" | simple %9.1f us %6.1f TFLOP/s", ms2 * 1e3, flop / (ms2 * 1e-3) / 1e12);
  }
  std::printf("\n");
}

void bench_all() {
  // Prefill: no invalid indices (FlashMLA's benchmark counts every slot).
  bench_case(mk("prefill bf16 sq4096 h128 d576 topk2048 skv8K", false, 1, 4096, 128, 576, 2048, 8192, 0, false, false, 0),
             true);
  bench_case(mk("prefill bf16 sq4096 h128 d576 topk2048 skv32K", false, 1, 4096, 128, 576, 2048, 32768, 0, false, false, 0),
             false);
  bench_case(mk("prefill bf16 sq4096 h128 d576 topk2048 skv128K", false, 1, 4096, 128, 576, 2048, 131072, 0, false, false, 0),
             false);
  bench_case(mk("prefill bf16 sq4096 h64 d576 topk2048 skv8K", false, 1, 4096, 64, 576, 2048, 8192, 0, false, false, 0),
             false);
  bench_case(mk("prefill bf16 sq4096 h128 d512 topk2048 skv8K", false, 1, 4096, 128, 512, 2048, 8192, 0, false, false, 0),
             false);
  // Decode over the V3.2 FP8 cache: s_kv 8192 rows per request, block 64.
  bench_case(mk("decode fp8 b1 sq2 h128 topk2048", true, 1, 2, 128, 576, 2048, 8192, 64, false, false, 0), false);
  bench_case(mk("decode fp8 b64 sq2 h128 topk2048", true, 64, 2, 128, 576, 2048, 8192, 64, false, false, 0), true);
  bench_case(mk("decode fp8 b128 sq2 h128 topk2048", true, 128, 2, 128, 576, 2048, 8192, 64, false, false, 0), false);
  bench_case(mk("decode fp8 b128 sq1 h128 topk2048", true, 128, 1, 128, 576, 2048, 8192, 64, false, false, 0), false);
}

}  // namespace

int main(int argc, char** argv) {
  bool check = true, bench = true, quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--check")) bench = false;
    else if (!std::strcmp(argv[i], "--bench")) check = false;
    else if (!std::strcmp(argv[i], "--quick")) quick = true, bench = false;
    else {
      std::fprintf(stderr, "usage: %s [--check|--bench|--quick]\n", argv[0]);
      return 2;
    }
  }
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  int fails = 0;
  if (check) fails = check_all(quick);
  if (bench) bench_all();
  return fails == 0 ? 0 : 1;
}
