// `flashcpp demo`: one decode step of a transformer layer, end to end:
//   fused qkv hidden states -> RMSNorm -> RoPE on q and k at each request's position -> append the new k/v into
//   a paged KV cache -> batch decode; the layer's MLP activation (SiLU-and-mul of the gate/up projection); and the
//   sampler (top-k then top-p over the LM head's logits, here random logits of the vocabulary's size).
// With a GPU it runs FlashInfer's kernels through flashcpp (timed with CUDA events and host clocks) and
// checks every result against the float64 reference; without one (or with --cpu) it runs the
// reference backend and says so. Exit status 1 when a GPU result is outside its tolerance.
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "flashcpp/activation.hpp"
#include "flashcpp/attention.hpp"
#include "flashcpp/commands.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/norm.hpp"
#include "flashcpp/page.hpp"
#include "flashcpp/reference.hpp"
#include "flashcpp/rope.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/sampling.hpp"

namespace flashcpp::cli {
namespace {

namespace ref = flashcpp::reference;

struct DemoOptions {
  int64_t batch = 8, context = 1024, num_qo_heads = 32, num_kv_heads = 8, head_dim = 128, page_size = 16;
  int64_t ffn = 14336;  // the MLP's intermediate size (gate/up halves of 2 x ffn)
  int64_t vocab = 128256, top_k = 50;
  double top_p = 0.9;
  uint64_t seed = 0;
  bool cpu = false;
  std::string backend = "auto";
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

/// A host tensor (bf16 / f32 / i32 bytes) with an optional device twin.
struct HostDev {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> host;
  DeviceBuffer dev;
  HostDev(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
    host.assign(static_cast<size_t>(numel() * dtype_size(t)), 0);
  }
  int64_t numel() const { return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>()); }
  size_t bytes() const { return host.size(); }
  TensorView h() { return TensorView::contiguous(host.data(), dtype, Device::cpu(), std::span<const int64_t>(shape)); }
  TensorView d() const { return TensorView::contiguous(dev.get(), dtype, Device::cuda(0), std::span<const int64_t>(shape)); }
  void to_device() {
    dev = DeviceBuffer(std::max<size_t>(bytes(), 16), 0);
    FLASHCPP_CUDA_CHECK(cudaMemcpy(dev.get(), host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<uint8_t> from_device() const {
    std::vector<uint8_t> out(bytes());
    FLASHCPP_CUDA_CHECK(cudaMemcpy(out.data(), dev.get(), bytes(), cudaMemcpyDeviceToHost));
    return out;
  }
};

void fill(HostDev& t, std::mt19937_64& gen, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  const TensorView v = t.h();
  for (int64_t i = 0; i < t.numel(); ++i) ref::store(v, i, u(gen));
}
HostDev i32(const std::vector<int32_t>& values) {
  HostDev t(DType::i32, {static_cast<int64_t>(values.size())});
  if (!values.empty()) std::memcpy(t.host.data(), values.data(), values.size() * 4);
  return t;
}

/// Max |got - want| over a tensor (got: raw bytes of `dtype`), and whether all are within atol + rtol |want|.
struct Check {
  double max_err = 0;
  bool ok = true;
};
Check compare(const std::vector<uint8_t>& got, DType dtype, HostDev& want, double atol, double rtol) {
  Check c;
  const TensorView g = TensorView::contiguous(const_cast<uint8_t*>(got.data()), dtype, Device::cpu(), {want.numel()});
  const TensorView w = want.h();
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = ref::load(g, i), b = ref::load(w, i), e = std::fabs(a - b);
    if (!(e <= atol + rtol * std::fabs(b))) c.ok = false;
    if (std::isfinite(e)) c.max_err = std::max(c.max_err, e);
    else c.ok = false;
  }
  return c;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / 1073741824.0);
  return buf;
}

// Rules the options must meet together, checked before anything is allocated: a usage error (exit status 2)
// that names the option and, for sizes, the memory the run would need.
void validate(const DemoOptions& o) {
  if (o.ffn % 8 != 0)  // SiLU-and-mul moves 16-byte vectors of the gate and up halves
    throw CLI::ValidationError("--ffn", "must be a multiple of 8; got " + std::to_string(o.ffn));
  if (o.num_qo_heads % o.num_kv_heads != 0)
    throw CLI::ValidationError("--qo-heads", "must be a multiple of --kv-heads (" + std::to_string(o.num_kv_heads) +
                                                 "); got " + std::to_string(o.num_qo_heads));
  const int64_t pages = o.batch * ((o.context + o.page_size - 1) / o.page_size) + 1;  // <= 2^32 + 1: no overflow
  if (pages > INT32_MAX)
    throw CLI::ValidationError("--context", "gives " + std::to_string(pages) +
                                                " KV pages (--batch x pages per request); the page indices are int32");
  // Host: both caches, the step's activations in bf16 and float64-reference f32, and (GPU) one cache read back.
  const bool gpu = !o.cpu && cuda_device_count() > 0;
  const double cache = static_cast<double>(pages) * o.page_size * o.num_kv_heads * o.head_dim * 2;
  const double acts = static_cast<double>(o.batch) * (o.num_qo_heads + 2 * o.num_kv_heads) * o.head_dim * 2 * 8 +
                      static_cast<double>(o.batch) * static_cast<double>(o.vocab) * 24;  // logits, probs, distribution
  const double host = (gpu ? 3 : 2) * cache + acts;
  const long pages_of_memory = ::sysconf(_SC_PHYS_PAGES), page_bytes = ::sysconf(_SC_PAGE_SIZE);
  const double host_memory = static_cast<double>(pages_of_memory) * static_cast<double>(page_bytes);
  if (pages_of_memory > 0 && page_bytes > 0 && host > host_memory)  // unknown size: nothing to compare with
    throw CLI::ValidationError("--context", "with --batch " + std::to_string(o.batch) + ", --kv-heads " +
                                                std::to_string(o.num_kv_heads) + " and --head-dim " +
                                                std::to_string(o.head_dim) + " needs " + gib(host) +
                                                " of host memory; this machine has " + gib(host_memory));
  if (gpu && 2 * cache + acts > static_cast<double>(device_facts(0).total_memory))
    throw CLI::ValidationError("--context", "needs " + gib(2 * cache + acts) + " of GPU memory; GPU 0 has " +
                                                gib(static_cast<double>(device_facts(0).total_memory)));
}

int run_demo(const DemoOptions& o) {
  const bool gpu = !o.cpu && cuda_device_count() > 0;
  const uint64_t seed = o.seed != 0 ? o.seed : std::random_device{}();
  std::mt19937_64 gen(seed);
  const int64_t B = o.batch, Hq = o.num_qo_heads, Hkv = o.num_kv_heads, D = o.head_dim, ps = o.page_size;
  const int64_t qkv_width = (Hq + 2 * Hkv) * D;
  std::printf("flashcpp demo: one decode step (RMSNorm -> RoPE -> paged KV append -> batch decode; SiLU-and-mul; "
              "top-k/top-p sampler)\n");
  std::printf("  batch %lld, context %lld tokens, heads %lld/%lld, head_dim %lld, page size %lld, bf16, seed %llu\n",
              static_cast<long long>(B), static_cast<long long>(o.context), static_cast<long long>(Hq),
              static_cast<long long>(Hkv), static_cast<long long>(D), static_cast<long long>(ps),
              static_cast<unsigned long long>(seed));
  if (!gpu)
    std::printf("  %s: running the float64 reference backend on the CPU (flashcpp::reference)\n",
                o.cpu ? "--cpu given" : "no GPU found");

  // Inputs: the new token's fused qkv hidden states, the norm weight, and each request's cached context.
  HostDev hidden(DType::bf16, {B, qkv_width}), weight(DType::bf16, {qkv_width}), gate_up(DType::bf16, {B, 2 * o.ffn});
  fill(hidden, gen, -2.0, 2.0);
  fill(weight, gen, 0.5, 1.5);
  fill(gate_up, gen, -4.0, 4.0);
  // The LM head's logits of the new token (random here: the demo has no LM head).
  HostDev logits(DType::f32, {B, o.vocab}), probs(DType::f32, {B, o.vocab}), samples(DType::i32, {B});
  fill(logits, gen, -8.0, 8.0);
  const SamplingOptions sample_opt{.philox_seed = seed, .philox_offset = 0};
  const int64_t pages_per_req = (o.context + ps - 1) / ps;
  const int64_t num_pages = B * pages_per_req + 1;
  std::vector<int32_t> ids(static_cast<size_t>(num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), gen);
  std::vector<int32_t> indptr{0}, last, batch_indices, positions;
  for (int64_t r = 0; r < B; ++r) {
    indptr.push_back(static_cast<int32_t>((r + 1) * pages_per_req));
    last.push_back(static_cast<int32_t>(o.context - (pages_per_req - 1) * ps));
    batch_indices.push_back(static_cast<int32_t>(r));
    positions.push_back(static_cast<int32_t>(o.context - 1));  // the new token is the context's last
  }
  ids.resize(static_cast<size_t>(B * pages_per_req));
  HostDev k_cache(DType::bf16, {num_pages, ps, Hkv, D}), v_cache(DType::bf16, {num_pages, ps, Hkv, D});
  fill(k_cache, gen, -1.0, 1.0);
  fill(v_cache, gen, -1.0, 1.0);
  HostDev indices = i32(ids), indptr_t = i32(indptr), last_t = i32(last), bi = i32(batch_indices), pos = i32(positions);

  // Views of the normalised qkv: q [B, Hq, D], k and v [B, Hkv, D] (strided rows of the fused tensor).
  HostDev normed(DType::bf16, {B, qkv_width}), out(DType::bf16, {B, Hq, D}), act(DType::bf16, {B, o.ffn});
  // q and k rotated to each request's position (the new token's: context - 1), out of place.
  HostDev q_rot(DType::bf16, {B, Hq, D}), k_rot(DType::bf16, {B, Hkv, D});
  auto qkv_views = [&](void* base, Device dev) {
    auto* p = static_cast<uint16_t*>(base);
    struct {
      TensorView q, k, v;
    } r;
    r.q = TensorView::strided(p, DType::bf16, dev, {B, Hq, D}, {qkv_width, D, 1});
    r.k = TensorView::strided(p + Hq * D, DType::bf16, dev, {B, Hkv, D}, {qkv_width, D, 1});
    r.v = TensorView::strided(p + (Hq + Hkv) * D, DType::bf16, dev, {B, Hkv, D}, {qkv_width, D, 1});
    return r;
  };
  BatchDecodeConfig cfg;
  cfg.num_qo_heads = Hq;
  cfg.num_kv_heads = Hkv;
  cfg.head_dim = D;
  cfg.page_size = ps;
  cfg.backend = o.backend == "cuda_cores" ? DecodeBackend::cuda_cores
                : o.backend == "tensor_cores" ? DecodeBackend::tensor_cores : DecodeBackend::automatic;
  const RmsNormOptions norm_opt{.eps = 1e-6, .enable_pdl = false};
  const RopeOptions rope_opt{.rope_theta = 5e5};

  // Reference norm (always: it is the CPU result and the GPU's yardstick). The step continues on the
  // bf16-rounded normalised values, as the GPU does.
  HostDev normed_ref(DType::f32, {B, qkv_width}), out_ref(DType::f32, {B, Hq, D}), act_ref(DType::f32, {B, o.ffn});
  HostDev q_rot_ref(DType::f32, {B, Hq, D}), k_rot_ref(DType::f32, {B, Hkv, D});
  auto t0 = Clock::now();
  ref::rmsnorm(normed_ref.h(), hidden.h(), weight.h(), norm_opt);
  const double ref_norm_ms = ms_since(t0);
  ref::rmsnorm(normed.h(), hidden.h(), weight.h(), norm_opt);
  const TensorView indices_host = indices.h();
  PagedKvCache ref_cache{k_cache.h(), v_cache.h(), indices_host, indptr_t.h(), last_t.h(), KvLayout::nhd};
  double ref_rope_ms = 0, ref_append_ms = 0, ref_decode_ms = 0, ref_act_ms = 0, ref_sample_ms = 0;
  // The sampler's distribution: softmax, the top_k largest renormalized, then their top-p nucleus renormalized.
  HostDev dist(DType::f64, {B, o.vocab}), dist_k(DType::f64, {B, o.vocab});
  // Reference RoPE of the normalised values in normed.host (into q_rot_ref / k_rot_ref, and the bf16 q_rot / k_rot
  // the rest of the step reads unless `keep_rotated`: the GPU's own), then append + decode (updates the host caches)
  // and the MLP activation.
  auto reference_tail = [&](bool keep_rotated) {
    const auto hv = qkv_views(normed.host.data(), Device::cpu());
    auto t = Clock::now();
    ref::apply_rope_pos_ids(hv.q, hv.k, q_rot_ref.h(), k_rot_ref.h(), pos.h(), rope_opt);
    ref_rope_ms = ms_since(t);
    if (!keep_rotated) ref::apply_rope_pos_ids(hv.q, hv.k, q_rot.h(), k_rot.h(), pos.h(), rope_opt);
    t = Clock::now();
    ref::append_paged_kv_cache(k_rot.h(), hv.v, bi.h(), pos.h(), ref_cache);
    ref_append_ms = ms_since(t);
    t = Clock::now();
    ref::batch_decode(q_rot.h(), ref_cache, out_ref.h(), nullptr, cfg);
    ref_decode_ms = ms_since(t);
    t = Clock::now();
    ref::silu_and_mul(act_ref.h(), gate_up.h());
    ref_act_ms = ms_since(t);
    t = Clock::now();
    ref::softmax(logits.h(), dist.h());
    ref::top_k_renorm_probs(dist.h(), dist_k.h(), o.top_k);
    ref::top_p_renorm_probs(dist_k.h(), dist.h(), o.top_p);
    ref_sample_ms = ms_since(t);
  };
  // Whether every request's sample lies in its row's top-k/top-p set (where the distribution is non-zero).
  auto samples_in_support = [&](const std::vector<uint8_t>& got) {
    const auto* d = reinterpret_cast<const double*>(dist.host.data());
    for (int64_t r = 0; r < B; ++r) {
      int32_t t = 0;
      std::memcpy(&t, got.data() + 4 * r, 4);
      if (t < 0 || t >= o.vocab || !(d[r * o.vocab + t] > 0)) return false;
    }
    return true;
  };

  if (!gpu) {
    reference_tail(false);
    std::printf("\n  step              time (CPU, float64 reference)\n");
    std::printf("  rmsnorm           %10.3f ms\n", ref_norm_ms);
    std::printf("  rope              %10.3f ms\n", ref_rope_ms);
    std::printf("  append KV         %10.3f ms\n", ref_append_ms);
    std::printf("  batch decode      %10.3f ms\n", ref_decode_ms);
    std::printf("  silu_and_mul      %10.3f ms\n", ref_act_ms);
    // The reference backend's sampler: one draw per request from the float64 distribution.
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    const auto* d = reinterpret_cast<const double*>(dist.host.data());
    for (int64_t r = 0; r < B; ++r) {
      double u = u01(gen), acc = 0;
      int32_t t = 0;
      for (int64_t i = 0; i < o.vocab; ++i)
        if (d[r * o.vocab + i] > 0 && (acc += d[r * o.vocab + i]) >= u) {
          t = static_cast<int32_t>(i);
          break;
        }
      std::memcpy(samples.host.data() + 4 * r, &t, 4);
    }
    std::printf("  sample            %10.3f ms   (top-k %lld, top-p %.2f; tokens %d ...)\n", ref_sample_ms,
                static_cast<long long>(o.top_k), o.top_p, reinterpret_cast<const int32_t*>(samples.host.data())[0]);
    const TensorView ov = out_ref.h();
    std::printf("\n  out[0, 0, 0:4] = %.5f %.5f %.5f %.5f\n", ref::load(ov, 0), ref::load(ov, 1), ref::load(ov, 2),
                ref::load(ov, 3));
    std::printf("  reference backend: done (on a machine with a GPU this runs FlashInfer's kernels and checks them)\n");
    return 0;
  }

  const DeviceFacts& info = device_facts(0);
  std::printf("  GPU 0: %s (compute capability %d.%d)\n", info.name.c_str(), info.cc_major, info.cc_minor);
  auto rt = Runtime::create();
  for (HostDev* t : {&hidden, &weight, &gate_up, &k_cache, &v_cache, &indices, &indptr_t, &last_t, &bi, &pos, &normed,
                     &out, &act, &q_rot, &k_rot, &logits, &probs, &samples})
    t->to_device();
  auto poison_outputs = [&] {
    for (HostDev* t : {&normed, &out, &act, &q_rot, &k_rot, &probs, &samples})
      FLASHCPP_CUDA_CHECK(cudaMemset(t->dev.get(), 0xFF, t->bytes()));
  };
  poison_outputs();
  OwnedWorkspace ws(0);
  Stream stream(0);
  const OwnedSamplingWorkspace sampling_ws(0, stream);
  auto sample = [&] {
    top_k_top_p_sampling_from_logits(*rt, sampling_ws, logits.d(), probs.d(), samples.d(), o.top_k, o.top_p,
                                     TopKTopPOrder::top_k_first, nullptr, sample_opt, stream);
  };
  const auto dv = qkv_views(normed.dev.get(), Device::cuda(0));
  const PagedKvCache cache{k_cache.d(), v_cache.d(), indices.d(), indptr_t.d(), last_t.d(), KvLayout::nhd};
  auto plan = BatchDecodePlan::create(*rt, ws, {indptr_t.h(), last_t.h(), &indices_host}, cfg, stream);

  // Warm-up step (loads the modules), then one timed step on fresh caches.
  auto t_first = Clock::now();
  rmsnorm(*rt, normed.d(), hidden.d(), weight.d(), norm_opt, stream);
  apply_rope_pos_ids(*rt, dv.q, dv.k, q_rot.d(), k_rot.d(), pos.d(), rope_opt, stream);
  append_paged_kv_cache(*rt, k_rot.d(), dv.v, bi.d(), pos.d(), cache, stream);
  plan.run(q_rot.d(), cache, out.d(), nullptr, stream);
  silu_and_mul(*rt, act.d(), gate_up.d(), {}, stream);
  sample();
  stream.synchronize();
  const double first_ms = ms_since(t_first);
  for (HostDev* t : {&k_cache, &v_cache}) t->to_device();
  poison_outputs();
  const PagedKvCache fresh{k_cache.d(), v_cache.d(), indices.d(), indptr_t.d(), last_t.d(), KvLayout::nhd};
  // The step once more on fresh caches, each call timed on the device (events) and on the host.
  constexpr int kSteps = 6;
  Event ev[kSteps + 1];
  double host_us[kSteps] = {};
  auto timed = [&](int i, auto&& call) {
    const auto h = Clock::now();
    call();
    host_us[i] = std::chrono::duration<double, std::micro>(Clock::now() - h).count();
    ev[i + 1].record(stream);
  };
  ev[0].record(stream);
  timed(0, [&] { rmsnorm(*rt, normed.d(), hidden.d(), weight.d(), norm_opt, stream); });
  timed(1, [&] { apply_rope_pos_ids(*rt, dv.q, dv.k, q_rot.d(), k_rot.d(), pos.d(), rope_opt, stream); });
  timed(2, [&] { append_paged_kv_cache(*rt, k_rot.d(), dv.v, bi.d(), pos.d(), fresh, stream); });
  timed(3, [&] { plan.run(q_rot.d(), fresh, out.d(), nullptr, stream); });
  timed(4, [&] { silu_and_mul(*rt, act.d(), gate_up.d(), {}, stream); });
  timed(5, sample);
  stream.synchronize();

  // Norm against the exact reference; each later step against the reference run on the GPU's own inputs to it
  // (RoPE on the GPU's normalised values, append and decode on its rotated q and k: the appended cache must
  // match bit for bit).
  normed.host = normed.from_device();
  const Check c_norm = compare(normed.host, DType::bf16, normed_ref, 1.5e-2, 1.5e-2);
  q_rot.host = q_rot.from_device();
  k_rot.host = k_rot.from_device();
  reference_tail(true);
  // FlashInfer's angle is float(position) x frequency with fast sin/cos: its error grows with the position (about
  // 2^-24 of it in radians), so the bound does too.
  const double rope_tol = 2e-2 + static_cast<double>(o.context - 1) * std::ldexp(1.0, -21);
  Check c_rope = compare(q_rot.host, DType::bf16, q_rot_ref, rope_tol, 2e-2);
  const Check c_rope_k = compare(k_rot.host, DType::bf16, k_rot_ref, rope_tol, 2e-2);
  c_rope.ok = c_rope.ok && c_rope_k.ok;
  c_rope.max_err = std::max(c_rope.max_err, c_rope_k.max_err);
  const bool cache_ok = k_cache.from_device() == k_cache.host && v_cache.from_device() == v_cache.host;
  const Check c_out = compare(out.from_device(), DType::bf16, out_ref, 2e-2, 2e-2);
  const Check c_act = compare(act.from_device(), DType::bf16, act_ref, 1e-2, 1e-2);
  samples.host = samples.from_device();
  const bool sample_ok = samples_in_support(samples.host);
  std::printf("  decode path: %s (%s)\n", plan.uses_tensor_cores() ? "tensor cores" : "CUDA cores",
              plan.module_uri().c_str());
  std::printf("\n  step              GPU kernel    host call    CPU reference   check\n");
  auto kernel_us = [&](int i) { return ev[i + 1].elapsed_ms_since(ev[i]) * 1e3; };
  std::printf("  rmsnorm           %8.1f us   %7.1f us   %10.3f ms   %s (max |err| %.2e, tol 1.5e-2)\n", kernel_us(0),
              host_us[0], ref_norm_ms, c_norm.ok ? "PASS" : "FAIL", c_norm.max_err);
  std::printf("  rope              %8.1f us   %7.1f us   %10.3f ms   %s (max |err| %.2e, tol %.1e)\n", kernel_us(1),
              host_us[1], ref_rope_ms, c_rope.ok ? "PASS" : "FAIL", c_rope.max_err, rope_tol);
  std::printf("  append KV         %8.1f us   %7.1f us   %10.3f ms   %s (bit-exact cache)\n", kernel_us(2),
              host_us[2], ref_append_ms, cache_ok ? "PASS" : "FAIL");
  std::printf("  batch decode      %8.1f us   %7.1f us   %10.3f ms   %s (max |err| %.2e, tol 2e-2)\n", kernel_us(3),
              host_us[3], ref_decode_ms, c_out.ok ? "PASS" : "FAIL", c_out.max_err);
  std::printf("  silu_and_mul      %8.1f us   %7.1f us   %10.3f ms   %s (max |err| %.2e, tol 1e-2)\n", kernel_us(4),
              host_us[4], ref_act_ms, c_act.ok ? "PASS" : "FAIL", c_act.max_err);
  std::printf("  sample            %8.1f us   %7.1f us   %10.3f ms   %s (each token in its top-k %lld / top-p %.2f set;"
              " tokens %d ...)\n",
              kernel_us(5), host_us[5], ref_sample_ms, sample_ok ? "PASS" : "FAIL", static_cast<long long>(o.top_k),
              o.top_p, reinterpret_cast<const int32_t*>(samples.host.data())[0]);
  std::printf("  (first step, module loading included: %.1f ms)\n", first_ms);
  const bool ok = c_norm.ok && c_rope.ok && cache_ok && c_out.ok && c_act.ok && sample_ok;
  std::printf("\n  %s\n", ok ? "all results match the float64 reference" : "MISMATCH against the reference");
  return ok ? 0 : 1;
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  auto* cmd = app.add_subcommand("demo", "One decode step (RMSNorm -> RoPE -> paged KV append -> batch decode; the "
                                         "MLP's SiLU-and-mul; the top-k/top-p sampler), checked "
                                         "against the float64 reference; the reference backend alone without a GPU");
  add_integer(*cmd, "--batch", o->batch, "requests", int64_t{1}, int64_t{4096});
  add_integer(*cmd, "--context", o->context, "tokens per request, the new one included", int64_t{1}, int64_t{1} << 20);
  add_integer(*cmd, "--qo-heads", o->num_qo_heads, "query heads", int64_t{1}, int64_t{256});
  add_integer(*cmd, "--kv-heads", o->num_kv_heads, "key/value heads", int64_t{1}, int64_t{256});
  add_integer_of(*cmd, "--head-dim", o->head_dim, "head dim", std::vector<int64_t>{64, 128, 256});
  add_integer(*cmd, "--page-size", o->page_size, "tokens per KV page", int64_t{1}, int64_t{1024});
  add_integer(*cmd, "--ffn", o->ffn, "MLP intermediate size (a multiple of 8)", int64_t{8}, int64_t{1} << 17);
  add_integer(*cmd, "--vocab", o->vocab, "vocabulary size of the sampled logits", int64_t{1}, int64_t{1} << 24);
  add_integer(*cmd, "--top-k", o->top_k, "the sampler's top_k", int64_t{1}, int64_t{1} << 24);
  add_real(*cmd, "--top-p", o->top_p, "the sampler's top_p, in (0, 1]", 0.0, 1.0, true);
  add_integer(*cmd, "--seed", o->seed, "random seed (0: fresh)", uint64_t{0}, std::numeric_limits<uint64_t>::max());
  add_word(*cmd, "--backend", o->backend, "decode path", {"auto", "cuda_cores", "tensor_cores"});
  cmd->add_flag("--cpu", o->cpu, "run the float64 reference backend even when a GPU is present");
  cmd->callback([o] {
    validate(*o);
    check_environment();
    const int rc = run_demo(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace flashcpp::cli
