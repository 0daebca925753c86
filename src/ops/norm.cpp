// RMSNorm family: validation and argument packing for FlashInfer's `norm` module (facts sheet §A.1).
#include "flashcpp/norm.hpp"

#include <numeric>

#include "ops/common.hpp"

namespace flashcpp {
namespace {

enum NormFn { kRmsNorm = 0, kFusedAdd = 1, kGemma = 2, kGemmaFusedAdd = 3 };

ops::ResolvedModule norm_module(const Runtime& rt) {
  static const ops::ModuleKey key = ops::module_key(ops::ModuleFamily::norm);
  return ops::resolve_module(rt, key, [] { return std::string(ops::kNormUri); },
                             {"rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm", "gemma_fused_add_rmsnorm"});
}

// The kernels load `gcd(16 / sizeof(T), d)` elements at a time: every row/head start must be aligned to
// that vector, and FlashInfer passes strides as 32-bit values.
void check_vector_access(const Validator& v, const TensorView& t, const char* arg, int64_t d) {
  const int64_t vec = std::gcd<int64_t>(16 / dtype_size(t.dtype), d);
  v.aligned(t, arg, static_cast<size_t>(vec * dtype_size(t.dtype)));
  for (int i = 0; i + 1 < t.rank; ++i) {
    if (t.strides[i] % vec != 0)
      v.fail(arg, t, "must have strides that are multiples of " + std::to_string(vec) +
                         " elements (the kernel's vector width) in every dim but the last");
    if (t.strides[i] > int64_t{0xffffffff}) v.fail(arg, t, "must have strides below 2^32 elements");
  }
}

void check_norm_io(const Validator& v, const TensorView& out, const char* out_arg, const TensorView& input,
                   const TensorView& weight, int rank, const RmsNormOptions& o) {
  ops::check_cuda_tensor(v, input, "input");
  v.rank(input, "input", rank).dtype(input, "input", {DType::f16, DType::bf16}).last_dim_contiguous(input, "input");
  ops::check_same_device(v, out, out_arg, input, "input");
  v.rank(out, out_arg, rank).same_shape(out, out_arg, input, "input").same_dtype(out, out_arg, input, "input");
  v.last_dim_contiguous(out, out_arg);
  ops::check_same_device(v, weight, "weight", input, "input");
  v.rank(weight, "weight", 1).same_dtype(weight, "weight", input, "input").contiguous(weight, "weight");
  const int64_t d = input.size(rank - 1);
  v.dim(weight, "weight", 0, d, rank == 2 ? "input.size(1)" : "input.size(2)");
  v.require(d >= 1, "input", "must have a last dim of at least 1");
  check_vector_access(v, input, "input", d);
  check_vector_access(v, out, out_arg, d);
  check_vector_access(v, weight, "weight", d);
  v.positive(o.eps, "eps");
}

// Plain norms write `out` only; the fused ones update both `input` and `residual` in place.
void check_norm_overlap(const Validator& v, const TensorView& out, const TensorView& input, const TensorView& weight) {
  v.no_overlap({{&out, "out"}}, {{&input, "input"}, {&weight, "weight"}});
}

void call_norm(const Runtime& rt, NormFn fn, const TensorView& a, const TensorView& b, const TensorView& weight,
               const RmsNormOptions& o, cudaStream_t stream) {
  if (a.numel() == 0) return;  // nothing to normalise: FlashInfer would launch an empty grid
  const auto mod = norm_module(rt);
  ffi::invoke(mod.fns[fn], ops::binding_for(b, stream), nullptr, a, b, weight, o.eps, o.enable_pdl);
}

}  // namespace

// The out-of-place norms: `out` = norm(`input`) of `rank` (2: [tokens, hidden]; 3: [tokens, heads, dim]).
static void out_of_place(const char* op, NormFn fn, int rank, const Runtime& rt, const TensorView& out,
                         const TensorView& input, const TensorView& weight, const RmsNormOptions& options,
                         cudaStream_t stream) {
  const Validator v(op);
  check_norm_io(v, out, "out", input, weight, rank, options);
  check_norm_overlap(v, out, input, weight);
  call_norm(rt, fn, out, input, weight, options, stream);
}

void rmsnorm(const Runtime& rt, const TensorView& out, const TensorView& input, const TensorView& weight,
             const RmsNormOptions& options, cudaStream_t stream) {
  out_of_place("rmsnorm", kRmsNorm, 2, rt, out, input, weight, options, stream);
}

void fused_qk_rmsnorm(const Runtime& rt, const TensorView& out, const TensorView& input, const TensorView& weight,
                      const RmsNormOptions& options, cudaStream_t stream) {
  // The 3-D input dispatches to FlashInfer's QK RMSNorm inside the same `rmsnorm` export.
  out_of_place("fused_qk_rmsnorm", kRmsNorm, 3, rt, out, input, weight, options, stream);
}

void gemma_rmsnorm(const Runtime& rt, const TensorView& out, const TensorView& input, const TensorView& weight,
                   const RmsNormOptions& options, cudaStream_t stream) {
  out_of_place("gemma_rmsnorm", kGemma, 2, rt, out, input, weight, options, stream);
}

static void fused_add(const char* op, NormFn fn, const Runtime& rt, const TensorView& input,
                      const TensorView& residual, const TensorView& weight, const RmsNormOptions& options,
                      cudaStream_t stream) {
  const Validator v(op);
  check_norm_io(v, residual, "residual", input, weight, 2, options);
  // Both are written (in place): neither may share a byte with the other or with the weight.
  v.no_overlap({{&residual, "residual"}, {&input, "input"}}, {{&weight, "weight"}});
  call_norm(rt, fn, input, residual, weight, options, stream);
}

void fused_add_rmsnorm(const Runtime& rt, const TensorView& input, const TensorView& residual,
                       const TensorView& weight, const RmsNormOptions& options, cudaStream_t stream) {
  fused_add("fused_add_rmsnorm", kFusedAdd, rt, input, residual, weight, options, stream);
}

void gemma_fused_add_rmsnorm(const Runtime& rt, const TensorView& input, const TensorView& residual,
                             const TensorView& weight, const RmsNormOptions& options, cudaStream_t stream) {
  fused_add("gemma_fused_add_rmsnorm", kGemmaFusedAdd, rt, input, residual, weight, options, stream);
}

}  // namespace flashcpp
