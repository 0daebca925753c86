// Gated activations: validation and argument packing for FlashInfer's `<act>_and_mul` modules (one export each,
// named like the module: (out, input, enable_pdl); flashinfer/jit/activation.py).
#include "flashcpp/activation.hpp"

#include "ops/common.hpp"

namespace flashcpp {
namespace {

enum class Act : uint8_t { silu = 0, gelu = 1, gelu_tanh = 2 };
constexpr const char* kActModule[] = {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"};

ops::ResolvedModule act_module(const Runtime& rt, Act act) {
  const auto i = static_cast<uint8_t>(act);
  // One key per activation: the module key's `extra` slot carries it.
  return ops::resolve_module(rt, ops::module_key(ops::ModuleFamily::act_and_mul, {}, i),
                             [i] { return std::string(kActModule[i]); }, {kActModule[i]});
}

void act_and_mul(const char* op, Act act, const Runtime& rt, const TensorView& out, const TensorView& input,
                 const ActivationOptions& o, cudaStream_t stream) {
  const Validator v(op);
  ops::check_cuda_tensor(v, input, "input");
  v.dtype(input, "input", {DType::f16, DType::bf16});
  v.require(input.rank >= 1, "input", "must have at least one dim (the last holds the gate and up halves)");
  ops::check_same_device(v, out, "out", input, "input");
  v.same_dtype(out, "out", input, "input").rank(out, "out", input.rank);
  for (int i = 0; i + 1 < input.rank; ++i) v.dim(out, "out", i, input.shape[i], "input's");
  const int64_t width = input.shape[input.rank - 1];
  v.require(width % 16 == 0 && width >= 16, "input",
            "must have a last dim (2d) that is a positive multiple of 16, so d is a multiple of the kernel's "
            "8-element vectors; got " + std::to_string(width));
  v.require(width / 2 <= int64_t{0x7fffffff}, "input", "must have d (half the last dim) below 2^31");
  v.dim(out, "out", out.rank - 1, width / 2, "input.size(-1) / 2");
  // FlashInfer's kernel addresses row t at t * 2d (input) and t * d (out): no row stride.
  v.contiguous(input, "input").contiguous(out, "out");
  v.aligned(input, "input", 16).aligned(out, "out", 16);
  const int64_t tokens = input.numel() / width;
  v.require(tokens <= int64_t{0x7fffffff}, "input", "must have fewer than 2^31 rows (the kernel's grid)");
  v.no_overlap({{&out, "out"}}, {{&input, "input"}});
  if (tokens == 0) return;  // an empty grid: nothing to launch
  const auto mod = act_module(rt, act);
  ffi::invoke(mod.fns[0], ops::binding_for(out, stream), nullptr, out, input, o.enable_pdl);
}

}  // namespace

void silu_and_mul(const Runtime& rt, const TensorView& out, const TensorView& input, const ActivationOptions& options,
                  cudaStream_t stream) {
  act_and_mul("silu_and_mul", Act::silu, rt, out, input, options, stream);
}

void gelu_and_mul(const Runtime& rt, const TensorView& out, const TensorView& input, const ActivationOptions& options,
                  cudaStream_t stream) {
  act_and_mul("gelu_and_mul", Act::gelu, rt, out, input, options, stream);
}

void gelu_tanh_and_mul(const Runtime& rt, const TensorView& out, const TensorView& input,
                       const ActivationOptions& options, cudaStream_t stream) {
  act_and_mul("gelu_tanh_and_mul", Act::gelu_tanh, rt, out, input, options, stream);
}

}  // namespace flashcpp
