// GPU tests (label gpu) of batch MLA, GDN prefill and the CUTLASS fused MoE against the float64
// references, at realistic sizes. Outputs are poisoned (0xFF → NaN) before every launch.
// Tolerances (bf16 inputs/outputs, fp32 accumulation in the kernels):
//   MLA out: |d| <= 1e-2 + 2e-2·|ref|; lse: |d| <= 2e-2 (log2 units)
//   GDN out: |d| <= 2e-2 + 2e-2·|ref|; final state: |d| <= 2e-2 + 2e-2·|ref|
//   MoE 16-bit: |d| <= 1e-2 + 5e-2·|ref| and relative L2 error <= 1e-2
//   MoE DeepSeek FP8 block-scale and FP8 per-tensor: |d| <= 3e-2 + 1e-1·|ref| and relative L2 error <= 4e-2
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flashcpp/cuda.hpp"
#include "flashcpp/gdn.hpp"
#include "flashcpp/mla_attention.hpp"
#include "flashcpp/moe.hpp"
#include "flashcpp/runtime.hpp"
#include "reference/gdn_reference.hpp"
#include "reference/mla_attention_reference.hpp"
#include "reference/moe_reference.hpp"
#include "support/gpu.hpp"

using namespace flashcpp;
namespace ref = flashcpp::reference;

namespace {

int threads() { return std::max(1u, std::thread::hardware_concurrency()); }

std::shared_ptr<Runtime> runtime() {
  static std::shared_ptr<Runtime> rt = Runtime::create();
  return rt;
}

/// Host data + its device copy.
template <class T>
struct Buf {
  std::vector<T> host;
  DeviceBuffer dev;
  explicit Buf(size_t n) : host(n), dev(std::max<size_t>(n, 1) * sizeof(T)) {}
  void upload() { cuda_check(flashcpp::testing::upload_bytes(dev.get(), host.data(), host.size() * sizeof(T)), "upload"); }
  void download() { cuda_check(cudaMemcpy(host.data(), dev.get(), host.size() * sizeof(T), cudaMemcpyDeviceToHost), "download"); }
  void poison() { cuda_check(flashcpp::testing::fill_bytes(dev.get(), flashcpp::testing::kPoisonByte, host.size() * sizeof(T)), "poison"); }
  TensorView view(DType t, std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(dev.get(), t, Device::cuda(0), shape);
  }
  TensorView host_view(DType t, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(host.data(), t, Device::cpu(), shape);
  }
};

void fill_bf16(std::vector<uint16_t>& v, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  for (auto& x : v) x = ref::float_to_bf16(d(rng));
}

double as_double(DType t, const void* p, size_t i) { return ref::load(p, t, static_cast<int64_t>(i)); }

/// Compares `n` device results with the reference; reports the worst element and the count over tolerance.
void expect_close(const char* what, DType t, const void* got, const std::vector<double>& want, double atol, double rtol,
                  double max_rel_l2 = -1) {
  size_t bad = 0, worst = 0, nonfinite = 0;
  double worst_excess = -1, err2 = 0, ref2 = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = as_double(t, got, i), w = want[i];
    if (!std::isfinite(g)) {
      ++nonfinite;
      continue;
    }
    const double d = std::fabs(g - w), tol = atol + rtol * std::fabs(w);
    err2 += d * d;
    ref2 += w * w;
    if (d > tol) ++bad;
    if (d - tol > worst_excess) worst_excess = d - tol, worst = i;
  }
  EXPECT_EQ(nonfinite, 0u) << what << ": non-finite outputs (unwritten: still poisoned?)";
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size() << " elements outside |d| <= " << atol << " + "
                     << rtol << "·|ref|; worst at " << worst << ": got " << as_double(t, got, worst) << ", want "
                     << want[worst];
  if (max_rel_l2 > 0) {
    const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
    EXPECT_LE(rel, max_rel_l2) << what << ": relative L2 error";
  }
}

// =============================================================================== batch MLA

struct MlaCase {
  int64_t batch, qo_len, kv_len, heads, page_size;
  bool causal;
  MlaBackend backend;
};

void run_mla(const MlaCase& c) {
  const int64_t H = c.heads, P = c.page_size, n = c.batch * c.qo_len;
  const int64_t pages_per_req = (c.kv_len + P - 1) / P, pages = c.batch * pages_per_req;
  std::mt19937 rng(1234);
  Buf<uint16_t> q_nope(n * H * 512), q_pe(n * H * 64), ckv(pages * P * 512), kpe(pages * P * 64), out(n * H * 512);
  Buf<float> lse(n * H);
  Buf<int32_t> indices(pages);
  fill_bf16(q_nope.host, rng, -1, 1);
  fill_bf16(q_pe.host, rng, -1, 1);
  fill_bf16(ckv.host, rng, -1, 1);
  fill_bf16(kpe.host, rng, -1, 1);
  std::iota(indices.host.begin(), indices.host.end(), 0);
  std::shuffle(indices.host.begin(), indices.host.end(), rng);  // pages scattered through the cache
  std::vector<int32_t> qo(c.batch + 1), kvp(c.batch + 1), kvl(c.batch, static_cast<int32_t>(c.kv_len));
  for (int64_t b = 0; b <= c.batch; ++b) {
    qo[b] = static_cast<int32_t>(b * c.qo_len);
    kvp[b] = static_cast<int32_t>(b * pages_per_req);
  }
  for (auto* b : {&q_nope, &q_pe, &ckv, &kpe, &out}) b->upload();
  indices.upload();
  out.poison();
  lse.poison();

  DeviceBuffer fw(128 << 20), iw(8 << 20);
  PinnedBuffer pw(8 << 20);
  Workspace ws{TensorView::contiguous(fw.get(), DType::u8, Device::cuda(0), {128 << 20}),
               TensorView::contiguous(iw.get(), DType::u8, Device::cuda(0), {8 << 20}),
               TensorView::contiguous(pw.get(), DType::u8, Device::cuda_host(), {8 << 20})};
  BatchMlaConfig cfg{.num_heads = H, .page_size = P, .causal = c.causal, .sm_scale = 1.0 / std::sqrt(192.0),
                     .backend = c.backend};
  auto tv = [](std::vector<int32_t>& v) {
    return TensorView::contiguous(v.data(), DType::i32, Device::cpu(), {static_cast<int64_t>(v.size())});
  };
  Stream stream(0);
  auto plan = BatchMlaPlan::create(*runtime(), ws, tv(qo), tv(kvp), tv(kvl), cfg, stream);
  TensorView lse_v = lse.view(DType::f32, {n, H});
  plan.run(q_nope.view(DType::bf16, {n, H, 512}), q_pe.view(DType::bf16, {n, H, 64}),
           ckv.view(DType::bf16, {pages, P, 512}), kpe.view(DType::bf16, {pages, P, 64}),
           indices.view(DType::i32, {pages}), out.view(DType::bf16, {n, H, 512}), &lse_v, stream);
  stream.synchronize();
  out.download();
  lse.download();

  ref::MlaReferenceInputs in;
  in.q_nope = q_nope.host_view(DType::bf16, {n, H, 512});
  in.q_pe = q_pe.host_view(DType::bf16, {n, H, 64});
  in.ckv_cache = ckv.host_view(DType::bf16, {pages, P, 512});
  in.kpe_cache = kpe.host_view(DType::bf16, {pages, P, 64});
  in.qo_indptr = qo;
  in.kv_indptr = kvp;
  in.kv_len = kvl;
  in.kv_indices = indices.host;
  in.causal = c.causal;
  in.sm_scale = *cfg.sm_scale;
  std::vector<double> want, want_lse;
  ref::batch_mla_reference(in, want, want_lse, threads());
  for (auto& l : want_lse) l /= std::log(2.0);  // FlashInfer's default LSE is log2
  expect_close("mla out", DType::bf16, out.host.data(), want, 1e-2, 2e-2);
  expect_close("mla lse", DType::f32, lse.host.data(), want_lse, 2e-2, 0);
}

bool is_sm90() { return cuda_device_count() > 0 && device_facts(0).cc_major == 9; }

TEST(MlaGdnMoeGpu, MlaDecodeBatch32Context2048Heads128) {
  FLASHCPP_REQUIRE_GPU();
  run_mla({32, 1, 2048, 128, 64, false, MlaBackend::automatic});
}
TEST(MlaGdnMoeGpu, MlaDecodeFa2) {
  FLASHCPP_REQUIRE_GPU();
  run_mla({32, 1, 2048, 128, 64, false, MlaBackend::fa2});
}
TEST(MlaGdnMoeGpu, MlaCausalPrefillBothBackends) {
  FLASHCPP_REQUIRE_GPU();
  run_mla({4, 16, 300, 128, 64, true, MlaBackend::fa2});
  if (is_sm90()) run_mla({4, 16, 300, 128, 64, true, MlaBackend::sm90});
}

// =============================================================================== GDN

void run_gdn(bool gates_and_state) {
  const std::vector<int64_t> lens{1, 17, 1000, 2048};
  const int64_t N = static_cast<int64_t>(lens.size()), H = 16, D = 128;
  std::vector<int64_t> cu(N + 1, 0);
  for (int64_t i = 0; i < N; ++i) cu[i + 1] = cu[i] + lens[i];
  const int64_t T = cu[N];
  std::mt19937 rng(99);
  Buf<uint16_t> q(T * H * D), k(T * H * D), v(T * H * D), out(T * H * D);
  Buf<float> state(N * H * D * D), state_in(N * H * D * D), alpha(T * H), beta(T * H);
  Buf<int64_t> cu_dev(N + 1);
  std::normal_distribution<float> nd(0, 1);
  // Unit-norm q and k rows keep the delta rule stable (as models L2-normalize them).
  for (auto* buf : {&q, &k}) {
    for (int64_t r = 0; r < T * H; ++r) {
      std::vector<float> row(D);
      double s = 0;
      for (auto& x : row) {
        x = nd(rng);
        s += x * x;
      }
      for (int64_t d = 0; d < D; ++d) buf->host[r * D + d] = ref::float_to_bf16(float(row[d] / std::sqrt(s)));
    }
  }
  fill_bf16(v.host, rng, -1, 1);
  std::uniform_real_distribution<float> ua(0.9f, 1.0f), ub(0.1f, 0.9f), us(-0.05f, 0.05f);
  for (auto& x : alpha.host) x = ua(rng);
  for (auto& x : beta.host) x = ub(rng);
  for (auto& x : state_in.host) x = us(rng);
  cu_dev.host = cu;
  for (auto* b : {&q, &k, &v}) b->upload();
  for (auto* b : {&alpha, &beta, &state_in}) b->upload();
  cu_dev.upload();
  out.poison();
  state.poison();

  GdnPrefillTensors a;
  a.q = q.view(DType::bf16, {T, H, D});
  a.k = k.view(DType::bf16, {T, H, D});
  a.v = v.view(DType::bf16, {T, H, D});
  a.output = out.view(DType::bf16, {T, H, D});
  a.output_state = state.view(DType::f32, {N, H, D, D});
  a.cu_seqlens = cu_dev.view(DType::i64, {N + 1});
  TensorView cu_host = TensorView::contiguous(cu.data(), DType::i64, Device::cpu(), {N + 1});
  TensorView si = state_in.view(DType::f32, {N, H, D, D}), al = alpha.view(DType::f32, {T, H}),
             be = beta.view(DType::f32, {T, H});
  a.cu_seqlens_host = &cu_host;
  if (gates_and_state) {
    a.input_state = &si;
    a.alpha = &al;
    a.beta = &be;
  }
  Stream stream(0);
  gdn_prefill(*runtime(), a, {}, stream);
  stream.synchronize();
  out.download();
  state.download();

  ref::GdnReferenceInputs in;
  in.q = q.host_view(DType::bf16, {T, H, D});
  in.k = k.host_view(DType::bf16, {T, H, D});
  in.v = v.host_view(DType::bf16, {T, H, D});
  in.cu_seqlens = cu;
  TensorView si_h = state_in.host_view(DType::f32, {N, H, D, D}), al_h = alpha.host_view(DType::f32, {T, H}),
             be_h = beta.host_view(DType::f32, {T, H});
  if (gates_and_state) {
    in.input_state = &si_h;
    in.alpha = &al_h;
    in.beta = &be_h;
  }
  std::vector<double> want, want_state;
  ref::gdn_prefill_reference(in, want, want_state, threads());
  expect_close("gdn out", DType::bf16, out.host.data(), want, 2e-2, 2e-2);
  expect_close("gdn state", DType::f32, state.host.data(), want_state, 2e-2, 2e-2);
}

TEST(MlaGdnMoeGpu, GdnPrefill4SequencesUpTo2048Heads16) {
  FLASHCPP_REQUIRE_GPU();
  if (!is_sm90()) GTEST_SKIP() << "GDN prefill needs compute capability 9.x";
  run_gdn(false);
}
TEST(MlaGdnMoeGpu, GdnPrefillWithGatesAndInitialState) {
  FLASHCPP_REQUIRE_GPU();
  if (!is_sm90()) GTEST_SKIP() << "GDN prefill needs compute capability 9.x";
  run_gdn(true);
}
TEST(MlaGdnMoeGpu, GdnRefusesOtherArchitectures) {
  FLASHCPP_REQUIRE_GPU();
  if (is_sm90()) GTEST_SKIP() << "only meaningful on a non-SM90 device";
  GdnPrefillTensors a;
  Buf<uint16_t> q(128);
  a.q = q.view(DType::bf16, {1, 1, 128});
  a.k = a.v = a.output = a.q;
  Buf<float> s(128 * 128);
  a.output_state = s.view(DType::f32, {1, 1, 128, 128});
  Buf<int64_t> cu(2);
  a.cu_seqlens = cu.view(DType::i64, {2});
  try {
    gdn_prefill(*runtime(), a, {}, nullptr);
    ADD_FAILURE() << "must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
  }
}

// =============================================================================== fused MoE

bool moe_module_available(std::string* why) {
  if (cuda_device_count() == 0) return false;
  const DeviceFacts& d = device_facts(0);
  const char* uri = d.cc_major == 9 ? "fused_moe_90" : d.cc_major == 12 ? "fused_moe_120" : "fused_moe_100";
  if (runtime()->locate_module(uri)) return true;
  *why = std::string("module ") + uri + " cannot be found (no prebuilt artifact, and the builder is off or "
                                        "cannot build it); set FLASHCPP_MODULE_PATH or build it with `flashcpp build`";
  return false;
}

// How tokens are routed. distinct: K different experts per token, drawn from all E. repeated: as distinct,
// but every other token has its second choice equal to its first (the same expert twice, two weights); only
// at <= 256 tokens, where FlashInfer's one-kernel routing prologue counts a repeat twice (its three-kernel
// prologue, above 256 tokens, does not: FusedMoeTensors::token_selected_experts in include/flashcpp/moe.hpp).
// first_half: K different experts from [0, E/2) only, so the upper half of the experts gets no token.
enum class MoeRouting { distinct, repeated, first_half };

struct MoeCase {
  int64_t tokens, experts, top_k, hidden, inter;
  MoeQuantization quant;
  MoeRouting routing = MoeRouting::distinct;
  uint32_t seed = 7;
  bool tune = false;  // FusedMoeRunner::tune first: the run uses the tactics it chose
};

// e4m3 bytes of v / scale (in uint16 storage, as the test buffers are), scale = amax / 448 over
// [begin, end) of each group.
float e4m3_scale(const std::vector<float>& v, size_t begin, size_t end) {
  float amax = 0;
  for (size_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(v[i]));
  return amax > 0 ? amax / 448.0f : 1.0f;
}

void run_moe(const MoeCase& c) {
  const int64_t T = c.tokens, E = c.experts, K = c.top_k, Hd = c.hidden, I = c.inter, N1 = 2 * I;
  const bool ds = c.quant == MoeQuantization::deepseek_fp8_block_scale;
  const bool pt = c.quant == MoeQuantization::fp8_per_tensor;
  const DType wt = ds || pt ? DType::e4m3 : DType::bf16;
  const DType xt = pt ? DType::e4m3 : DType::bf16;
  std::mt19937 rng(c.seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Buf<uint16_t> x(pt ? (T * Hd + 1) / 2 : T * Hd), out(T * Hd);
  Buf<int32_t> sel(T * K);
  Buf<float> scales(T * K), bs1(ds ? E * (N1 / 128) * (Hd / 128) : 0), bs2(ds ? E * (Hd / 128) * (I / 128) : 0);
  // fp8_per_tensor: the input's scale, per-expert weight scales, and the intermediate's quantization scale.
  Buf<float> fc1_dequant(pt ? E : 0), fc2_quant(pt ? 1 : 0), fc2_dequant(pt ? E : 0), fc1_input_dequant(pt ? 1 : 0);
  std::vector<float> xf(static_cast<size_t>(T * Hd));
  for (auto& v : xf) v = u(rng);
  float x_scale = 1;
  if (pt) {
    x_scale = e4m3_scale(xf, 0, xf.size());
    auto* bytes = reinterpret_cast<uint8_t*>(x.host.data());
    for (size_t i = 0; i < xf.size(); ++i) bytes[i] = ref::float_to_e4m3_bits(xf[i] / x_scale);
  } else {
    for (size_t i = 0; i < xf.size(); ++i) x.host[i] = ref::float_to_bf16(xf[i]);
  }
  // Routing weights normalised to 1 per token.
  const int64_t pool = c.routing == MoeRouting::first_half ? E / 2 : E;
  std::vector<int32_t> ids(static_cast<size_t>(pool));
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(ids.begin(), ids.end(), rng);
    if (c.routing == MoeRouting::repeated && t % 2 == 0) ids[1] = ids[0];
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += (scales.host[t * K + k] = 0.1f + std::fabs(u(rng)));
    for (int64_t k = 0; k < K; ++k) {
      sel.host[t * K + k] = ids[k];
      scales.host[t * K + k] = static_cast<float>(scales.host[t * K + k] / s);
    }
    if (c.routing == MoeRouting::repeated) std::iota(ids.begin(), ids.end(), 0);  // undo the repeat
  }
  // Weights ~ U(-1, 1)/sqrt(fan_in). DeepSeek FP8: one scale per 128×128 block (amax/448); FP8 per-tensor:
  // one scale per expert (amax/448), returned in `expert_scales`.
  auto make_weights = [&](int64_t rows, int64_t cols, std::vector<float>* block_scales, std::vector<float>* expert_scales) {
    std::vector<float> w(E * rows * cols);
    const float s = 1.0f / std::sqrt(static_cast<float>(cols));
    for (auto& v : w) v = u(rng) * s;
    if (!block_scales && !expert_scales) {
      Buf<uint16_t> b(w.size());
      for (size_t i = 0; i < w.size(); ++i) b.host[i] = ref::float_to_bf16(w[i]);
      b.upload();
      return b;
    }
    Buf<uint16_t> packed((w.size() + 1) / 2);  // e4m3 bytes in uint16 storage
    auto* bytes = reinterpret_cast<uint8_t*>(packed.host.data());
    if (expert_scales) {
      for (int64_t e = 0; e < E; ++e) {
        const size_t b = static_cast<size_t>(e * rows * cols), n = static_cast<size_t>(rows * cols);
        const float scale = e4m3_scale(w, b, b + n);
        (*expert_scales)[e] = scale;
        for (size_t i = b; i < b + n; ++i) bytes[i] = ref::float_to_e4m3_bits(w[i] / scale);
      }
      packed.upload();
      return packed;
    }
    const int64_t rb = rows / 128, cb = cols / 128;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t i = 0; i < rb; ++i)
        for (int64_t j = 0; j < cb; ++j) {
          float amax = 0;
          for (int64_t r = i * 128; r < (i + 1) * 128; ++r)
            for (int64_t q = j * 128; q < (j + 1) * 128; ++q) amax = std::max(amax, std::fabs(w[(e * rows + r) * cols + q]));
          const float scale = amax / 448.0f;
          (*block_scales)[(e * rb + i) * cb + j] = scale;
          for (int64_t r = i * 128; r < (i + 1) * 128; ++r)
            for (int64_t q = j * 128; q < (j + 1) * 128; ++q)
              bytes[(e * rows + r) * cols + q] = ref::float_to_e4m3_bits(w[(e * rows + r) * cols + q] / scale);
        }
    packed.upload();
    return packed;
  };
  std::vector<float> w1_scale(static_cast<size_t>(E)), w2_scale(static_cast<size_t>(E));
  Buf<uint16_t> w1 = make_weights(N1, Hd, ds ? &bs1.host : nullptr, pt ? &w1_scale : nullptr);
  Buf<uint16_t> w2 = make_weights(Hd, I, ds ? &bs2.host : nullptr, pt ? &w2_scale : nullptr);
  if (pt) {
    // The intermediate (swiglu of ~U(-1,1)-scaled rows, |a| well below 1) is scaled up by 8 before its
    // e4m3 rounding, and fc2's result scaled back down with the weight scale.
    constexpr float kActQuant = 8.0f;
    for (int64_t e = 0; e < E; ++e) {
      fc1_dequant.host[e] = x_scale * w1_scale[e];
      fc2_dequant.host[e] = w2_scale[e] / kActQuant;
    }
    fc2_quant.host[0] = kActQuant;
    fc1_input_dequant.host[0] = x_scale;
    fc1_dequant.upload();
    fc2_quant.upload();
    fc2_dequant.upload();
    fc1_input_dequant.upload();
  }
  x.upload();
  sel.upload();
  scales.upload();
  if (ds) {
    bs1.upload();
    bs2.upload();
  }
  out.poison();

  FusedMoeConfig cfg;
  cfg.quantization = c.quant;
  cfg.activation_dtype = xt;
  cfg.weight_dtype = wt;
  FusedMoeTensors a;
  a.output = out.view(DType::bf16, {T, Hd});
  a.input = TensorView::contiguous(x.dev.get(), xt, Device::cuda(0), {T, Hd});
  a.token_selected_experts = sel.view(DType::i32, {T, K});
  a.token_final_scales = scales.view(DType::f32, {T, K});
  a.fc1_weights = TensorView::contiguous(w1.dev.get(), wt, Device::cuda(0), {E, N1, Hd});
  a.fc2_weights = TensorView::contiguous(w2.dev.get(), wt, Device::cuda(0), {E, Hd, I});
  TensorView s1 = bs1.view(DType::f32, {E, N1 / 128, Hd / 128}), s2 = bs2.view(DType::f32, {E, Hd / 128, I / 128});
  TensorView d1 = fc1_dequant.view(DType::f32, {E}), q2 = fc2_quant.view(DType::f32, {}),
             d2 = fc2_dequant.view(DType::f32, {E}), di = fc1_input_dequant.view(DType::f32, {});
  if (ds) {
    a.fc1_block_scales = &s1;
    a.fc2_block_scales = &s2;
  }
  if (pt) {
    a.fc1_dequant = &d1;
    a.fc2_quant = &q2;
    a.fc2_dequant = &d2;
    a.fc1_input_dequant = &di;
  }
  const FusedMoeOptions opts;  // swiglu, one rank
  auto runner = FusedMoeRunner::shared(*runtime(), cfg);
  Stream stream(0);
  if (c.tune) {
    // Which step a CUDA error belongs to: tune() and run() are each followed by their own synchronize, and
    // the tactics tune() chose are printed before run() uses them.
    const std::string case_name = std::string(pt ? "fp8 per-tensor" : ds ? "fp8 block-scale" : "bf16") + " T" +
                                  std::to_string(T) + " E" + std::to_string(E) + " top" + std::to_string(K) + " H" +
                                  std::to_string(Hd) + " I" + std::to_string(I);
    SCOPED_TRACE(case_name);
    MoeTactics chosen;
    ASSERT_NO_THROW(chosen = runner->tune(a, opts, stream)) << case_name << ": tune() threw";
    std::cout << "[ tuned    ] " << case_name << ": tune() chose gemm1 " << chosen.gemm1 << ", gemm2 " << chosen.gemm2
              << std::endl;
    SCOPED_TRACE("tactics from tune(): gemm1 " + std::to_string(chosen.gemm1) + ", gemm2 " + std::to_string(chosen.gemm2));
    ASSERT_NO_THROW(stream.synchronize()) << case_name << ": the stream failed right after tune(), before run()";
    EXPECT_GE(chosen.gemm1, 0) << "no gemm1 candidate ran";
    EXPECT_GE(chosen.gemm2, 0) << "no gemm2 candidate ran";
    const MoeTactics kept = runner->tactics_for(T, MoeProblemShape::of(a, opts));
    EXPECT_EQ(kept.gemm1, chosen.gemm1);
    EXPECT_EQ(kept.gemm2, chosen.gemm2);
    out.poison();
    ASSERT_NO_THROW(runner->run(a, opts, stream)) << case_name << ": run() with the tuned tactics threw";
    ASSERT_NO_THROW(stream.synchronize()) << case_name << ": the stream failed after run() with the tuned tactics "
                                          << "(gemm1 " << chosen.gemm1 << ", gemm2 " << chosen.gemm2
                                          << "); tune() and the synchronize after it had succeeded";
  } else {
    runner->run(a, opts, stream);
    stream.synchronize();
  }
  out.download();

  // Reference on host views of the same bytes.
  FusedMoeTensors h = a;
  h.output = out.host_view(DType::bf16, {T, Hd});
  h.input = TensorView::contiguous(x.host.data(), xt, Device::cpu(), {T, Hd});
  h.token_selected_experts = sel.host_view(DType::i32, {T, K});
  h.token_final_scales = scales.host_view(DType::f32, {T, K});
  h.fc1_weights = TensorView::contiguous(w1.host.data(), wt, Device::cpu(), {E, N1, Hd});
  h.fc2_weights = TensorView::contiguous(w2.host.data(), wt, Device::cpu(), {E, Hd, I});
  TensorView hs1 = bs1.host_view(DType::f32, {E, N1 / 128, Hd / 128}), hs2 = bs2.host_view(DType::f32, {E, Hd / 128, I / 128});
  TensorView hd1 = fc1_dequant.host_view(DType::f32, {E}), hq2 = fc2_quant.host_view(DType::f32, {}),
             hd2 = fc2_dequant.host_view(DType::f32, {E}), hdi = fc1_input_dequant.host_view(DType::f32, {});
  if (ds) {
    h.fc1_block_scales = &hs1;
    h.fc2_block_scales = &hs2;
  }
  if (pt) {
    h.fc1_dequant = &hd1;
    h.fc2_quant = &hq2;
    h.fc2_dequant = &hd2;
    h.fc1_input_dequant = &hdi;
  }
  std::vector<double> want;
  ref::fused_moe_reference(runner->config(), h, opts, want, threads());
  if (ds) expect_close("moe deepseek fp8 block-scale", DType::bf16, out.host.data(), want, 3e-2, 1e-1, 4e-2);
  else if (pt) expect_close("moe fp8 per-tensor", DType::bf16, out.host.data(), want, 3e-2, 1e-1, 4e-2);
  else expect_close("moe bf16", DType::bf16, out.host.data(), want, 1e-2, 5e-2, 1e-2);
}

#define FLASHCPP_REQUIRE_MOE()                                \
  do {                                                        \
    FLASHCPP_REQUIRE_GPU();                                   \
    std::string why;                                          \
    if (!moe_module_available(&why)) GTEST_SKIP() << why;     \
  } while (0)

TEST(MlaGdnMoeGpu, MoeBf16Tokens256Experts64Top8) {
  FLASHCPP_REQUIRE_MOE();
  run_moe({256, 64, 8, 2048, 1024, MoeQuantization::none});
}
TEST(MlaGdnMoeGpu, MoeBf16SameExpertTwiceAndEmptyExperts) {
  FLASHCPP_REQUIRE_MOE();
  run_moe({96, 16, 4, 1024, 512, MoeQuantization::none, MoeRouting::repeated, 11});
  run_moe({96, 16, 4, 1024, 512, MoeQuantization::none, MoeRouting::first_half, 12});
}
TEST(MlaGdnMoeGpu, MoeBf16SingleToken) {
  FLASHCPP_REQUIRE_MOE();
  run_moe({1, 64, 8, 2048, 1024, MoeQuantization::none, MoeRouting::distinct, 13});
}
TEST(MlaGdnMoeGpu, MoeBf16Tokens4096) {
  FLASHCPP_REQUIRE_MOE();
  run_moe({4096, 16, 2, 1024, 512, MoeQuantization::none, MoeRouting::distinct, 14});
}
TEST(MlaGdnMoeGpu, MoeFp8PerTensor) {
  FLASHCPP_REQUIRE_MOE();
  run_moe({128, 32, 8, 2048, 1024, MoeQuantization::fp8_per_tensor});
  run_moe({64, 16, 4, 1024, 512, MoeQuantization::fp8_per_tensor, MoeRouting::repeated, 15});
  run_moe({1, 16, 4, 1024, 512, MoeQuantization::fp8_per_tensor, MoeRouting::first_half, 16});
}
TEST(MlaGdnMoeGpu, MoeTunedTactics) {
  FLASHCPP_REQUIRE_MOE();
  MoeCase bf16{256, 32, 8, 1024, 512, MoeQuantization::none, MoeRouting::distinct, 19};
  bf16.tune = true;
  run_moe(bf16);
  if (HasFatalFailure()) return;  // a sticky CUDA error leaves the context unusable for the next case
  // 300 tokens: FlashInfer's three-kernel routing prologue, so the experts of a row are distinct.
  MoeCase fp8{300, 16, 4, 1024, 512, MoeQuantization::fp8_per_tensor, MoeRouting::distinct, 20};
  fp8.tune = true;
  run_moe(fp8);
}
TEST(MlaGdnMoeGpu, MoeDeepSeekFp8BlockScale) {
  FLASHCPP_REQUIRE_MOE();
  if (!is_sm90()) GTEST_SKIP() << "DeepSeek FP8 block scale needs SM90";
  run_moe({128, 32, 8, 2048, 512, MoeQuantization::deepseek_fp8_block_scale});
  run_moe({64, 16, 4, 1024, 512, MoeQuantization::deepseek_fp8_block_scale, MoeRouting::repeated, 17});
  run_moe({1, 16, 4, 1024, 512, MoeQuantization::deepseek_fp8_block_scale, MoeRouting::first_half, 18});
}

}  // namespace
