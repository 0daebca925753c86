// One GPU's share of the decode step, inputs and comparison (see tp_decode.hpp); no NCCL here.
#include "tp_decode.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>

#include "flashcpp/attention.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/mla.hpp"
#include "flashcpp/norm.hpp"

namespace flashcpp::tp {
namespace {

constexpr int64_t kMlaDqk = 576, kMlaDv = 512, kFp8Row = 656;

[[noreturn]] void bad_shape(const std::string& what) {
  throw Error(ErrorCode::invalid_argument, "tp_decode: " + what);
}

DeviceBuffer upload(const void* host, size_t bytes, int device) {
  DeviceBuffer b(std::max<size_t>(bytes, 16), device);
  DeviceGuard guard(device);
  cuda_check(cudaMemcpy(b.get(), host, bytes, cudaMemcpyHostToDevice), "tp_decode: cudaMemcpy (upload)");
  // A pageable copy may still be in flight on return, on the legacy stream the step's streams do not wait for.
  cuda_check(cudaDeviceSynchronize(), "tp_decode: cudaDeviceSynchronize (upload)");
  return b;
}

template <class T>
TensorView host_view(const std::vector<T>& v, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(const_cast<T*>(v.data()), t, Device::cpu(), shape);
}

}  // namespace

float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

// ------------------------------------------------------------------------------------------------ inputs

StepInputs make_inputs(const StepShape& s, uint64_t seed) {
  if (s.batch < 1 || s.num_qo_heads < 1 || s.num_kv_heads < 1 || s.num_qo_heads % s.num_kv_heads != 0)
    bad_shape("batch >= 1, heads >= 1 and num_qo_heads a multiple of num_kv_heads are required");
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256) bad_shape("head_dim must be 64, 128 or 256");
  if (s.page_size < 1 || s.max_kv_len < 1) bad_shape("page_size and max_kv_len must be >= 1");
  if (s.mla && (s.mla_heads < 1 || s.mla_topk < 64 || s.mla_topk % 64 != 0 || s.mla_blocks < 1 || s.mla_block_size < 1))
    bad_shape("MLA needs mla_heads >= 1, mla_topk a positive multiple of 64 and a non-empty cache");
  StepInputs in;
  in.shape = s;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> sym(-1.f, 1.f), gain(0.5f, 1.5f);
  auto fill = [&](std::vector<uint16_t>& v, size_t n, std::uniform_real_distribution<float>& d) {
    v.resize(n);
    for (auto& e : v) e = float_to_bf16(d(rng));
  };
  const int64_t hidden = s.num_qo_heads * s.head_dim;
  fill(in.x, static_cast<size_t>(s.batch * hidden), sym);
  fill(in.ln_weight, static_cast<size_t>(hidden), gain);
  fill(in.q_weight, static_cast<size_t>(s.head_dim), gain);

  // Page table: request i holds max(1, max_kv_len - 97 i) tokens on pages handed out in shuffled order.
  in.kv_indptr.push_back(0);
  for (int64_t i = 0; i < s.batch; ++i) {
    const int64_t len = std::max<int64_t>(1, s.max_kv_len - 97 * i);
    const int64_t pages = (len + s.page_size - 1) / s.page_size;
    in.kv_lens.push_back(static_cast<int32_t>(len));
    in.kv_indptr.push_back(static_cast<int32_t>(in.kv_indptr.back() + pages));
    in.kv_last_page_len.push_back(static_cast<int32_t>(len - (pages - 1) * s.page_size));
  }
  in.num_pages = in.kv_indptr.back();
  in.kv_indices.resize(static_cast<size_t>(in.num_pages));
  std::iota(in.kv_indices.begin(), in.kv_indices.end(), 0);
  std::shuffle(in.kv_indices.begin(), in.kv_indices.end(), rng);
  const size_t cache = static_cast<size_t>(in.num_pages * s.page_size * s.num_kv_heads * s.head_dim);
  fill(in.k_cache, cache, sym);
  fill(in.v_cache, cache, sym);

  if (s.mla) {
    fill(in.mla_q, static_cast<size_t>(s.batch * s.mla_heads * kMlaDqk), sym);
    const int64_t rows = s.mla_blocks * s.mla_block_size;
    std::vector<uint16_t> kv;
    fill(kv, static_cast<size_t>(rows * kMlaDqk), sym);
    in.mla_cache.resize(static_cast<size_t>(rows * kFp8Row));
    // The V3.2 FP8 cache, quantized on the host by flashcpp's quantizer (same bytes as on the GPU).
    mla::quantize_kv_cache_fp8(host_view(kv, DType::bf16, {s.mla_blocks, s.mla_block_size, 1, kMlaDqk}),
                               host_view(in.mla_cache, DType::u8, {s.mla_blocks, s.mla_block_size, 1, kFp8Row}),
                               nullptr);
    std::uniform_int_distribution<int32_t> row(0, static_cast<int32_t>(rows - 1));
    in.mla_indices.resize(static_cast<size_t>(s.batch * s.mla_topk));
    for (size_t i = 0; i < in.mla_indices.size(); ++i) in.mla_indices[i] = i % 17 == 5 ? -1 : row(rng);  // some masked
    in.mla_sm_scale = 1.0 / std::sqrt(static_cast<double>(kMlaDqk));
  }
  return in;
}

// ------------------------------------------------------------------------------------------------ one GPU's share

struct DeviceStep::State {
  const Runtime* rt = nullptr;
  StepShape shape;
  int device = 0, rank = 0, world = 1;
  int64_t hr = 0, hkvr = 0, hmr = 0, hidden = 0;
  std::optional<Stream> stream;
  std::optional<OwnedWorkspace> ws;
  DeviceBuffer x, ln_w, xn, q_w, q, k_cache, v_cache, indptr, indices, last, out;
  std::optional<BatchDecodePlan> plan;
  DeviceBuffer mq, mcache, midx, mout, mlse;
  std::optional<mla::DecodePlan> mplan;
  double mla_scale = 0;

  Device dev() const { return Device::cuda(device); }
  TensorView view(const DeviceBuffer& b, DType t, std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(b.get(), t, dev(), shape);
  }
  PagedKvCache kv() const {
    const int64_t pages = static_cast<int64_t>(k_cache.size() / 2) / (shape.page_size * hkvr * shape.head_dim);
    PagedKvCache c;
    c.k_cache = view(k_cache, DType::bf16, {pages, shape.page_size, hkvr, shape.head_dim});
    c.v_cache = view(v_cache, DType::bf16, {pages, shape.page_size, hkvr, shape.head_dim});
    c.indices = view(indices, DType::i32, {pages});
    c.indptr = view(indptr, DType::i32, {shape.batch + 1});
    c.last_page_len = view(last, DType::i32, {shape.batch});
    return c;
  }
};

DeviceStep::DeviceStep(const Runtime& rt, const StepInputs& in, int device, int rank, int world)
    : s_(std::make_unique<State>()) {
  State& s = *s_;
  const StepShape& sh = in.shape;
  if (world < 1 || rank < 0 || rank >= world) bad_shape("rank must be in [0, world)");
  if (sh.num_qo_heads % world != 0 || sh.num_kv_heads % world != 0)
    bad_shape("num_qo_heads (" + std::to_string(sh.num_qo_heads) + ") and num_kv_heads (" +
              std::to_string(sh.num_kv_heads) + ") must be multiples of the GPU count " + std::to_string(world));
  if (sh.mla && sh.mla_heads % world != 0)
    bad_shape("mla_heads (" + std::to_string(sh.mla_heads) + ") must be a multiple of the GPU count " +
              std::to_string(world));
  s.rt = &rt;
  s.shape = sh;
  s.device = device;
  s.rank = rank;
  s.world = world;
  s.hr = sh.num_qo_heads / world;
  s.hkvr = sh.num_kv_heads / world;
  s.hidden = sh.num_qo_heads * sh.head_dim;
  (void)device_facts(device);  // an unknown device is refused before anything is allocated on it
  s.stream.emplace(device);
  s.ws.emplace(device, int64_t{64} << 20, int64_t{8} << 20);

  s.x = upload(in.x.data(), in.x.size() * 2, device);
  s.ln_w = upload(in.ln_weight.data(), in.ln_weight.size() * 2, device);
  s.q_w = upload(in.q_weight.data(), in.q_weight.size() * 2, device);
  s.xn = DeviceBuffer(static_cast<size_t>(sh.batch * s.hidden * 2), device);
  s.q = DeviceBuffer(static_cast<size_t>(sh.batch * s.hr * sh.head_dim * 2), device);
  s.out = DeviceBuffer(static_cast<size_t>(sh.batch * s.hr * sh.head_dim * 2), device);

  // This rank's KV heads of every page (NHD: [page, slot, head, dim]).
  const int64_t rows = in.num_pages * sh.page_size, d = sh.head_dim;
  std::vector<uint16_t> k_shard(static_cast<size_t>(rows * s.hkvr * d)), v_shard(k_shard.size());
  for (int64_t r = 0; r < rows; ++r) {
    const size_t from = static_cast<size_t>((r * sh.num_kv_heads + rank * s.hkvr) * d);
    const size_t to = static_cast<size_t>(r * s.hkvr * d);
    std::memcpy(&k_shard[to], &in.k_cache[from], static_cast<size_t>(s.hkvr * d) * 2);
    std::memcpy(&v_shard[to], &in.v_cache[from], static_cast<size_t>(s.hkvr * d) * 2);
  }
  s.k_cache = upload(k_shard.data(), k_shard.size() * 2, device);
  s.v_cache = upload(v_shard.data(), v_shard.size() * 2, device);
  s.indptr = upload(in.kv_indptr.data(), in.kv_indptr.size() * 4, device);
  s.indices = upload(in.kv_indices.data(), in.kv_indices.size() * 4, device);
  s.last = upload(in.kv_last_page_len.data(), in.kv_last_page_len.size() * 4, device);

  BatchDecodeConfig cfg;
  cfg.num_qo_heads = s.hr;
  cfg.num_kv_heads = s.hkvr;
  cfg.head_dim = sh.head_dim;
  cfg.page_size = sh.page_size;
  cfg.q_dtype = cfg.kv_dtype = DType::bf16;
  const TensorView indices_host = host_view(in.kv_indices, DType::i32, {in.num_pages});
  const DecodeIndptrs ip{host_view(in.kv_indptr, DType::i32, {sh.batch + 1}),
                         host_view(in.kv_last_page_len, DType::i32, {sh.batch}), &indices_host};
  s.plan.emplace(BatchDecodePlan::create(rt, *s.ws, ip, cfg, *s.stream));

  if (sh.mla) {
    s.hmr = sh.mla_heads / world;
    std::vector<uint16_t> q_shard(static_cast<size_t>(sh.batch * s.hmr * kMlaDqk));
    for (int64_t b = 0; b < sh.batch; ++b)
      std::memcpy(&q_shard[static_cast<size_t>(b * s.hmr * kMlaDqk)],
                  &in.mla_q[static_cast<size_t>((b * sh.mla_heads + rank * s.hmr) * kMlaDqk)],
                  static_cast<size_t>(s.hmr * kMlaDqk) * 2);
    s.mq = upload(q_shard.data(), q_shard.size() * 2, device);
    s.mcache = upload(in.mla_cache.data(), in.mla_cache.size(), device);  // the latent cache: replicated
    s.midx = upload(in.mla_indices.data(), in.mla_indices.size() * 4, device);
    s.mout = DeviceBuffer(static_cast<size_t>(sh.batch * s.hmr * kMlaDv * 2), device);
    s.mlse = DeviceBuffer(static_cast<size_t>(sh.batch * s.hmr * 4), device);
    mla::DecodeConfig mc;
    mc.batch = static_cast<int>(sh.batch);
    mc.s_q = 1;
    mc.h_q = static_cast<int>(s.hmr);
    mc.topk = static_cast<int>(sh.mla_topk);
    s.mplan.emplace(mla::DecodePlan::create(mc, device, *s.stream));
    s.mla_scale = in.mla_sm_scale;
  }
}

DeviceStep::~DeviceStep() {
  if (s_ && s_->stream) (void)cudaStreamSynchronize(*s_->stream);  // nothing in flight uses freed buffers
}

int DeviceStep::device() const { return s_->device; }
cudaStream_t DeviceStep::stream() const { return *s_->stream; }
int64_t DeviceStep::qo_heads() const { return s_->hr; }
int64_t DeviceStep::mla_heads() const { return s_->hmr; }
TensorView DeviceStep::attn_out() const {
  return s_->view(s_->out, DType::bf16, {s_->shape.batch, s_->hr, s_->shape.head_dim});
}
TensorView DeviceStep::mla_out() const {
  if (!s_->shape.mla) return {};
  return s_->view(s_->mout, DType::bf16, {s_->shape.batch, 1, s_->hmr, kMlaDv});
}

void DeviceStep::poison_outputs() {
  DeviceGuard guard(s_->device);
  cuda_check(cudaMemsetAsync(s_->out.get(), 0xFF, s_->out.size(), *s_->stream), "tp_decode: poison");
  if (s_->shape.mla) cuda_check(cudaMemsetAsync(s_->mout.get(), 0xFF, s_->mout.size(), *s_->stream), "tp_decode: poison");
}

void DeviceStep::enqueue() {
  State& s = *s_;
  const StepShape& sh = s.shape;
  const RmsNormOptions norm{.eps = sh.eps};
  const TensorView x = s.view(s.x, DType::bf16, {sh.batch, s.hidden});
  const TensorView xn = s.view(s.xn, DType::bf16, {sh.batch, s.hidden});
  rmsnorm(*s.rt, xn, x, s.view(s.ln_w, DType::bf16, {s.hidden}), norm, *s.stream);
  // This rank's heads of the normalised hidden state: a strided [batch, heads, head_dim] view.
  const TensorView xn_heads =
      TensorView::strided(static_cast<uint16_t*>(s.xn.get()) + s.rank * s.hr * sh.head_dim, DType::bf16, s.dev(),
                          {sh.batch, s.hr, sh.head_dim}, {s.hidden, sh.head_dim, 1});
  const TensorView q = s.view(s.q, DType::bf16, {sh.batch, s.hr, sh.head_dim});
  fused_qk_rmsnorm(*s.rt, q, xn_heads, s.view(s.q_w, DType::bf16, {sh.head_dim}), norm, *s.stream);
  s.plan->run(q, s.kv(), attn_out(), nullptr, *s.stream);
  if (sh.mla) {
    const int64_t rows = static_cast<int64_t>(s.mcache.size()) / kFp8Row / sh.mla_block_size;
    s.mplan->run({.q = s.view(s.mq, DType::bf16, {sh.batch, 1, s.hmr, kMlaDqk}),
                  .kv_cache = s.view(s.mcache, DType::u8, {rows, sh.mla_block_size, 1, kFp8Row}),
                  .indices = s.view(s.midx, DType::i32, {sh.batch, 1, sh.mla_topk}),
                  .out = mla_out(),
                  .lse = s.view(s.mlse, DType::f32, {sh.batch, 1, s.hmr})},
                 {.sm_scale = s.mla_scale}, *s.stream);
  }
}

StepOutputs DeviceStep::download() {
  DeviceGuard guard(s_->device);
  cuda_check(cudaStreamSynchronize(*s_->stream), "tp_decode: cudaStreamSynchronize");
  StepOutputs o;
  o.attn.resize(s_->out.size() / 2);
  cuda_check(cudaMemcpy(o.attn.data(), s_->out.get(), s_->out.size(), cudaMemcpyDeviceToHost), "tp_decode: download");
  if (s_->shape.mla) {
    o.mla.resize(s_->mout.size() / 2);
    cuda_check(cudaMemcpy(o.mla.data(), s_->mout.get(), s_->mout.size(), cudaMemcpyDeviceToHost), "tp_decode: download");
  }
  return o;
}

StepOutputs run_single_gpu(const Runtime& rt, const StepInputs& in, int device) {
  DeviceStep step(rt, in, device, 0, 1);
  step.poison_outputs();
  step.enqueue();
  return step.download();
}

// ------------------------------------------------------------------------------------------------ comparison

Diff compare_bf16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, double atol, double rtol) {
  Diff d;
  d.n = static_cast<int64_t>(want.size());
  if (got.size() != want.size()) {
    d.bad = d.n ? d.n : 1;
    d.first_bad = 0;
    return d;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const double a = bf16_to_float(got[i]), b = bf16_to_float(want[i]);
    const double err = std::fabs(a - b);
    if (!(err <= atol + rtol * std::fabs(b))) {
      if (d.first_bad < 0) d.first_bad = static_cast<int64_t>(i);
      ++d.bad;
    }
    if (std::isfinite(err)) d.max_abs = std::max(d.max_abs, err);
  }
  return d;
}

std::string Diff::describe() const {
  return std::to_string(bad) + " of " + std::to_string(n) + " elements outside tolerance (first at " +
         std::to_string(first_bad) + "), max |diff| " + std::to_string(max_abs);
}

}  // namespace flashcpp::tp
