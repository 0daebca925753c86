// The sampler: validation and argument packing for FlashInfer's `sampling` module (csrc/sampling.cu, renorm.cu,
// flashinfer_sampling_binding.cu; include/flashinfer/sampling.cuh, topk.cuh).
#include "flashcpp/sampling.hpp"

#include <cstdio>
#include <limits>
#include <string>

#include "ops/common.hpp"

namespace flashcpp {
namespace {

// Export order of the binding; resolve_module resolves them in this order.
enum SamplingFn {
  kSoftmax = 0, kSamplingFromProbs, kSamplingFromLogits, kTopKSamplingFromProbs, kTopPSamplingFromProbs,
  kMinPSamplingFromProbs, kTopKTopPSamplingFromProbs, kTopPRenormProbs, kTopKRenormProbs, kTopKMaskLogits,
};

ops::ResolvedModule sampling_module(const Runtime& rt) {
  static const ops::ModuleKey key = ops::module_key(ops::ModuleFamily::sampling);
  return ops::resolve_module(rt, key, [] { return std::string(ops::kSamplingUri); },
                             {"softmax", "sampling_from_probs", "sampling_from_logits", "top_k_sampling_from_probs",
                              "top_p_sampling_from_probs", "min_p_sampling_from_probs",
                              "top_k_top_p_sampling_from_probs", "top_p_renorm_probs", "top_k_renorm_probs",
                              "top_k_mask_logits"});
}

// FlashInfer's OnlineSoftmax: vocab-split path for small batches with a large vocabulary (sampling.cuh).
constexpr int64_t kSoftmaxSmallBatch = 128, kSoftmaxLargeVocab = 24576, kSoftmaxSlice = 8192;
constexpr int64_t kPartialSoftmaxBytes = 8;  // PartialSoftmaxResult {float max_val, denominator}

// A [rows, vocab] matrix of `dtypes`: CUDA, contiguous, 16-byte aligned, vocab in [1, 2^31), rows < 2^31.
void check_matrix(const Validator& v, const TensorView& t, const char* arg, std::initializer_list<DType> dtypes) {
  ops::check_cuda_tensor(v, t, arg);
  v.dtype(t, arg, dtypes).rank(t, arg, 2).contiguous(t, arg).aligned(t, arg, 16);
  if (!(t.shape[1] >= 1 && t.shape[1] < (int64_t{1} << 31)))
    v.fail(arg, "must have a vocabulary (size(1)) in [1, 2^31); got " + std::to_string(t.shape[1]));
  v.require(t.shape[0] < (int64_t{1} << 31), arg, "must have fewer than 2^31 rows (the kernel's grid)");
}

// An output of the input's dtype and shape.
void check_like(const Validator& v, const TensorView& t, const char* arg, const TensorView& ref, const char* ref_arg) {
  ops::check_same_device(v, t, arg, ref, ref_arg);
  v.same_dtype(t, arg, ref, ref_arg).same_shape(t, arg, ref, ref_arg).contiguous(t, arg).aligned(t, arg, 16);
}

// A 1-D per-request tensor of `dtype` with `len` entries (FlashInfer's binding: one per row of `ref`), contiguous,
// on the device of `ref`.
void check_per_row(const Validator& v, const TensorView& t, const char* arg, DType dtype, int64_t len,
                   const TensorView& ref, const char* ref_arg) {
  ops::check_same_device(v, t, arg, ref, ref_arg);
  v.dtype(t, arg, {dtype}).rank(t, arg, 1).contiguous(t, arg);
  v.dim(t, arg, 0, len, std::string("one per row of ") + ref_arg);
}

struct Samples {
  int64_t batch = 0;
};

// samples int32/int64 [batch]; row_indices null (batch == rows) or samples' dtype [batch].
Samples check_samples(const Validator& v, const TensorView& samples, const TensorView* row_indices,
                      const TensorView& probs, const char* probs_arg) {
  ops::check_same_device(v, samples, "samples", probs, probs_arg);
  v.dtype(samples, "samples", {DType::i32, DType::i64}).rank(samples, "samples", 1).contiguous(samples, "samples");
  const int64_t batch = samples.shape[0];
  v.require(batch < (int64_t{1} << 31), "samples", "must have fewer than 2^31 entries (the kernel's grid)");
  if (row_indices) {
    ops::check_same_device(v, *row_indices, "row_indices", probs, probs_arg);
    v.same_dtype(*row_indices, "row_indices", samples, "samples").rank(*row_indices, "row_indices", 1);
    v.contiguous(*row_indices, "row_indices").dim(*row_indices, "row_indices", 0, batch, "samples.size(0)");
  } else {
    if (batch != probs.shape[0])
      v.fail("samples", std::string("must have one entry per row of ") + probs_arg + " when row_indices is absent (" +
                            std::to_string(probs.shape[0]) + "); got " + std::to_string(batch));
  }
  v.no_overlap({{&samples, "samples"}}, {{&probs, probs_arg}, {row_indices, "row_indices"}});
  return {batch};
}

// top_k: a scalar in [1, 2^31) or a per-request tensor of `dtype`.
void check_top_k(const Validator& v, const TopKParam& k, DType dtype, int64_t batch, const TensorView& ref,
                 const char* ref_arg) {
  if (k.per_row) {
    check_per_row(v, *k.per_row, "top_k", dtype, batch, ref, ref_arg);
  } else {
    v.in_range(k.value, "top_k", 1, (int64_t{1} << 31) - 1);
  }
}

// A floating parameter: a finite scalar in [lo, hi] (lo excluded when `lo_open`) or an f32 per-request tensor.
void check_param(const Validator& v, const SamplingParam& p, const char* arg, double lo, bool lo_open, double hi,
                 int64_t batch, const TensorView& ref, const char* ref_arg) {
  if (p.per_row) {
    check_per_row(v, *p.per_row, arg, DType::f32, batch, ref, ref_arg);
    return;
  }
  v.finite(p.value, arg);
  if ((lo_open ? p.value > lo : p.value >= lo) && p.value <= hi) return;
  const auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return std::string(buf);
  };
  const std::string range = hi == std::numeric_limits<double>::max()
                                ? std::string(lo_open ? "> " : ">= ") + num(lo)
                                : std::string("in ") + (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + "]";
  v.fail(arg, "must be " + range + "; got " + num(p.value));
}

// top_k and min_p samplers read a per-request value by sample index (the others by row): with row_indices the
// samples must then be as many as the rows (the binding requires one value per row; more samples would read past).
void check_by_sample(const Validator& v, const TensorView* per_row, const char* arg, int64_t batch, int64_t rows) {
  if (per_row == nullptr) return;
  if (batch != rows)
    v.fail(arg, "per request is read by sample index, so samples must have one entry per row (" + std::to_string(rows) +
                    "); got " + std::to_string(batch));
}

void check_row_states(const Validator& v, const TensorView& row_states, const TensorView& ref, const char* ref_arg) {
  ops::check_device_buffer(v, row_states, "row_states", ref, ref_arg);
  v.min_bytes(row_states, "row_states", kSamplingRowStatesBytes).aligned(row_states, "row_states", 16);
}

OptionalTensor per_row(const TensorView* t) { return t; }
int64_t seed_bits(uint64_t v) { return static_cast<int64_t>(v); }  // the binding's uint64_t takes the bit pattern

}  // namespace

int64_t softmax_workspace_bytes(int64_t rows, int64_t vocab) noexcept {
  if (rows <= 0 || vocab <= 0 || rows > kSoftmaxSmallBatch || vocab < kSoftmaxLargeVocab) return 0;
  const int64_t slices = vocab / kSoftmaxSlice + (vocab % kSoftmaxSlice != 0);  // no overflow near INT64_MAX
  return rows * slices * kPartialSoftmaxBytes;
}

OwnedSamplingWorkspace::OwnedSamplingWorkspace(int device_id, cudaStream_t stream)
    : softmax_(static_cast<size_t>(kSoftmaxWorkspaceBytes), device_id),
      row_states_(static_cast<size_t>(kSamplingRowStatesBytes), device_id) {
  view_.softmax_buffer =
      TensorView::contiguous(softmax_.get(), DType::u8, Device::cuda(device_id), {kSoftmaxWorkspaceBytes});
  view_.row_states =
      TensorView::contiguous(row_states_.get(), DType::u8, Device::cuda(device_id), {kSamplingRowStatesBytes});
  DeviceGuard g(device_id);
  FLASHCPP_CUDA_CHECK(cudaMemsetAsync(row_states_.get(), 0, row_states_.size(), stream));
}

void softmax(const Runtime& rt, const TensorView& workspace, const TensorView& logits, const TensorView& probs,
             SamplingParam temperature, const SoftmaxOptions& options, cudaStream_t stream) {
  const Validator v("softmax");
  check_matrix(v, logits, "logits", {DType::f32});
  check_like(v, probs, "probs", logits, "logits");
  const int64_t rows = logits.shape[0];
  check_param(v, temperature, "temperature", 0.0, true, std::numeric_limits<double>::max(), rows, logits, "logits");
  ops::check_device_buffer(v, workspace, "workspace", logits, "logits");
  v.min_bytes(workspace, "workspace", softmax_workspace_bytes(rows, logits.shape[1])).aligned(workspace, "workspace", 16);
  v.disjoint(probs, "probs", logits, "logits", Validator::InPlace::allowed);
  v.no_overlap({{&probs, "probs"}, {&workspace, "workspace"}}, {{temperature.per_row, "temperature"}});
  v.no_overlap({{&workspace, "workspace"}}, {{&logits, "logits"}});
  if (rows == 0) return;
  const auto mod = sampling_module(rt);
  ffi::invoke(mod.fns[kSoftmax], ops::binding_for(logits, stream), nullptr, workspace, logits, probs,
              per_row(temperature.per_row), temperature.value, options.enable_pdl);
}

void sampling_from_probs(const Runtime& rt, const TensorView& probs, const TensorView& samples,
                         const TensorView* row_indices, const SamplingOptions& options, cudaStream_t stream) {
  const Validator v("sampling_from_probs");
  check_matrix(v, probs, "probs", {DType::f32});
  if (check_samples(v, samples, row_indices, probs, "probs").batch == 0) return;
  const auto mod = sampling_module(rt);
  ffi::invoke(mod.fns[kSamplingFromProbs], ops::binding_for(probs, stream), nullptr, probs, samples,
              per_row(row_indices), options.deterministic, seed_bits(options.philox_seed),
              seed_bits(options.philox_offset));
}

void sampling_from_logits(const Runtime& rt, const TensorView& logits, const TensorView& samples,
                          const TensorView* row_indices, const SamplingOptions& options, cudaStream_t stream) {
  const Validator v("sampling_from_logits");
  check_matrix(v, logits, "logits", {DType::f32});
  if (check_samples(v, samples, row_indices, logits, "logits").batch == 0) return;
  const auto mod = sampling_module(rt);
  ffi::invoke(mod.fns[kSamplingFromLogits], ops::binding_for(logits, stream), nullptr, logits, samples,
              per_row(row_indices), options.deterministic, seed_bits(options.philox_seed),
              seed_bits(options.philox_offset));
}

void top_k_sampling_from_probs(const Runtime& rt, const TensorView& probs, const TensorView& samples, TopKParam top_k,
                               const TensorView* row_indices, const SamplingOptions& options, cudaStream_t stream) {
  const Validator v("top_k_sampling_from_probs");
  check_matrix(v, probs, "probs", {DType::f32});
  const int64_t batch = check_samples(v, samples, row_indices, probs, "probs").batch;
  // The kernel reads a per-request top_k as the sample index type (IdType*), by sample.
  check_top_k(v, top_k, samples.dtype, probs.shape[0], probs, "probs");
  check_by_sample(v, top_k.per_row, "top_k", batch, probs.shape[0]);
  v.no_overlap({{&samples, "samples"}}, {{top_k.per_row, "top_k"}});
  if (batch == 0) return;
  const auto mod = sampling_module(rt);
  ffi::invoke(mod.fns[kTopKSamplingFromProbs], ops::binding_for(probs, stream), nullptr, probs, samples,
              per_row(row_indices), per_row(top_k.per_row), top_k.value, options.deterministic,
              seed_bits(options.philox_seed), seed_bits(options.philox_offset));
}

namespace {
// The samplers of one floating parameter (top_p, min_p): validation, then the module's export of that name.
struct PSampler {
  const char* op;
  SamplingFn fn;
  const char* arg;
  double lo;
  bool lo_open;
  bool by_sample;  // the kernel reads a per-request value by sample index
};

void p_sampler(const PSampler& k, const Runtime& rt, const TensorView& probs, const TensorView& samples,
               const SamplingParam& p, const TensorView* row_indices, const SamplingOptions& options,
               cudaStream_t stream) {
  const Validator v(k.op);
  check_matrix(v, probs, "probs", {DType::f32});
  const int64_t batch = check_samples(v, samples, row_indices, probs, "probs").batch;
  check_param(v, p, k.arg, k.lo, k.lo_open, 1.0, probs.shape[0], probs, "probs");
  if (k.by_sample) check_by_sample(v, p.per_row, k.arg, batch, probs.shape[0]);
  v.no_overlap({{&samples, "samples"}}, {{p.per_row, k.arg}});
  if (batch == 0) return;
  const auto mod = sampling_module(rt);
  ffi::invoke(mod.fns[k.fn], ops::binding_for(probs, stream), nullptr, probs, samples, per_row(row_indices),
              per_row(p.per_row), p.value, options.deterministic, seed_bits(options.philox_seed),
              seed_bits(options.philox_offset));
}
}  // namespace

void top_p_sampling_from_probs(const Runtime& rt, const TensorView& probs, const TensorView& samples,
                               SamplingParam top_p, const TensorView* row_indices, const SamplingOptions& options,
                               cudaStream_t stream) {
  p_sampler({"top_p_sampling_from_probs", kTopPSamplingFromProbs, "top_p", 0.0, true, false}, rt, probs, samples,
            top_p, row_indices, options, stream);
}

void min_p_sampling_from_probs(const Runtime& rt, const TensorView& probs, const TensorView& samples,
                               SamplingParam min_p, const TensorView* row_indices, const SamplingOptions& options,
                               cudaStream_t stream) {
  p_sampler({"min_p_sampling_from_probs", kMinPSamplingFromProbs, "min_p", 0.0, false, true}, rt, probs, samples,
            min_p, row_indices, options, stream);
}

void top_k_top_p_sampling_from_probs(const Runtime& rt, const TensorView& probs, const TensorView& samples,
                                     TopKParam top_k, SamplingParam top_p, const TensorView* row_indices,
                                     const SamplingOptions& options, cudaStream_t stream) {
  const Validator v("top_k_top_p_sampling_from_probs");
  check_matrix(v, probs, "probs", {DType::f32});
  const int64_t batch = check_samples(v, samples, row_indices, probs, "probs").batch;
  check_top_k(v, top_k, samples.dtype, probs.shape[0], probs, "probs");
  check_param(v, top_p, "top_p", 0.0, true, 1.0, probs.shape[0], probs, "probs");
  v.no_overlap({{&samples, "samples"}}, {{top_k.per_row, "top_k"}, {top_p.per_row, "top_p"}});
  if (batch == 0) return;
  const auto mod = sampling_module(rt);
  // The binding takes the scalar top_k as a double (FlashInfer's Python passes an int; either converts).
  ffi::invoke(mod.fns[kTopKTopPSamplingFromProbs], ops::binding_for(probs, stream), nullptr, probs, samples,
              per_row(row_indices), per_row(top_k.per_row), static_cast<double>(top_k.value),
              per_row(top_p.per_row), top_p.value, options.deterministic, seed_bits(options.philox_seed),
              seed_bits(options.philox_offset));
}

void top_k_top_p_sampling_from_logits(const Runtime& rt, const SamplingWorkspace& workspace, const TensorView& logits,
                                      const TensorView& probs, const TensorView& samples, TopKParam top_k,
                                      SamplingParam top_p, TopKTopPOrder order, const TensorView* row_indices,
                                      const SamplingOptions& options, cudaStream_t stream) {
  const Validator v("top_k_top_p_sampling_from_logits");
  check_matrix(v, logits, "logits", {DType::f32});
  check_like(v, probs, "probs", logits, "logits");
  const int64_t rows = logits.shape[0];
  const int64_t batch = check_samples(v, samples, row_indices, logits, "logits").batch;
  const bool k_first = order == TopKTopPOrder::top_k_first;
  v.require(k_first || order == TopKTopPOrder::joint, "order", "must be top_k_first or joint");
  // top_k_first's mask reads a per-row top_k as int32; joint's fused kernel as the sample index type.
  check_top_k(v, top_k, k_first ? DType::i32 : samples.dtype, rows, logits, "logits");
  check_param(v, top_p, "top_p", 0.0, true, 1.0, rows, logits, "logits");
  ops::check_device_buffer(v, workspace.softmax_buffer, "workspace.softmax_buffer", logits, "logits");
  v.min_bytes(workspace.softmax_buffer, "workspace.softmax_buffer", softmax_workspace_bytes(rows, logits.shape[1]));
  v.aligned(workspace.softmax_buffer, "workspace.softmax_buffer", 16);
  if (k_first) check_row_states(v, workspace.row_states, logits, "logits");
  const TensorView* row_states = k_first ? &workspace.row_states : nullptr;
  v.no_overlap({{&probs, "probs"}, {&samples, "samples"}, {&workspace.softmax_buffer, "workspace.softmax_buffer"},
                {row_states, "workspace.row_states"}},
               {{&logits, "logits"}, {row_indices, "row_indices"}, {top_k.per_row, "top_k"},
                {top_p.per_row, "top_p"}});
  if (rows == 0 || batch == 0) return;
  const auto mod = sampling_module(rt);
  const auto binding = ops::binding_for(logits, stream);
  const int64_t seed = seed_bits(options.philox_seed), offset = seed_bits(options.philox_offset);
  if (k_first) {
    ffi::invoke(mod.fns[kTopKMaskLogits], binding, nullptr, logits, probs, per_row(top_k.per_row), top_k.value,
                workspace.row_states);
    ffi::invoke(mod.fns[kSoftmax], binding, nullptr, workspace.softmax_buffer, probs, probs, per_row(nullptr), 1.0,
                false);
    ffi::invoke(mod.fns[kTopPSamplingFromProbs], binding, nullptr, probs, samples, per_row(row_indices),
                per_row(top_p.per_row), top_p.value, options.deterministic, seed, offset);
  } else {
    ffi::invoke(mod.fns[kSoftmax], binding, nullptr, workspace.softmax_buffer, logits, probs, per_row(nullptr), 1.0,
                false);
    ffi::invoke(mod.fns[kTopKTopPSamplingFromProbs], binding, nullptr, probs, samples, per_row(row_indices),
                per_row(top_k.per_row), static_cast<double>(top_k.value), per_row(top_p.per_row), top_p.value,
                options.deterministic, seed, offset);
  }
}

void top_p_renorm_probs(const Runtime& rt, const TensorView& probs, const TensorView& renorm, SamplingParam top_p,
                        cudaStream_t stream) {
  const Validator v("top_p_renorm_probs");
  check_matrix(v, probs, "probs", {DType::f32});
  check_like(v, renorm, "renorm", probs, "probs");
  check_param(v, top_p, "top_p", 0.0, true, 1.0, probs.shape[0], probs, "probs");
  v.no_overlap({{&renorm, "renorm"}}, {{&probs, "probs"}, {top_p.per_row, "top_p"}});
  if (probs.shape[0] == 0) return;
  const auto mod = sampling_module(rt);
  ffi::invoke(mod.fns[kTopPRenormProbs], ops::binding_for(probs, stream), nullptr, probs, renorm,
              per_row(top_p.per_row), top_p.value);
}

void top_k_renorm_probs(const Runtime& rt, const TensorView& probs, const TensorView& renorm, TopKParam top_k,
                        const TensorView& row_states, cudaStream_t stream) {
  const Validator v("top_k_renorm_probs");
  check_matrix(v, probs, "probs", {DType::f32, DType::f16, DType::bf16});
  check_like(v, renorm, "renorm", probs, "probs");
  check_top_k(v, top_k, DType::i32, probs.shape[0], probs, "probs");
  check_row_states(v, row_states, probs, "probs");
  v.no_overlap({{&renorm, "renorm"}, {&row_states, "row_states"}}, {{&probs, "probs"}, {top_k.per_row, "top_k"}});
  if (probs.shape[0] == 0) return;
  const auto mod = sampling_module(rt);
  ffi::invoke(mod.fns[kTopKRenormProbs], ops::binding_for(probs, stream), nullptr, probs, renorm,
              per_row(top_k.per_row), top_k.value, row_states);
}

void top_k_mask_logits(const Runtime& rt, const TensorView& logits, const TensorView& masked, TopKParam top_k,
                       const TensorView& row_states, cudaStream_t stream) {
  const Validator v("top_k_mask_logits");
  check_matrix(v, logits, "logits", {DType::f32, DType::f16, DType::bf16});
  check_like(v, masked, "masked", logits, "logits");
  check_top_k(v, top_k, DType::i32, logits.shape[0], logits, "logits");
  check_row_states(v, row_states, logits, "logits");
  v.no_overlap({{&masked, "masked"}, {&row_states, "row_states"}}, {{&logits, "logits"}, {top_k.per_row, "top_k"}});
  if (logits.shape[0] == 0) return;
  const auto mod = sampling_module(rt);
  ffi::invoke(mod.fns[kTopKMaskLogits], ops::binding_for(logits, stream), nullptr, logits, masked,
              per_row(top_k.per_row), top_k.value, row_states);
}

}  // namespace flashcpp
