// Gated activations on FlashInfer's `silu_and_mul`, `gelu_and_mul` and `gelu_tanh_and_mul` modules: validated,
// asynchronous on the caller's stream.
//
// out[..., i] = act(input[..., i]) * input[..., d + i] for i < d, where input's last dim is 2d (the gate half, then
// the up half, as a fused gate/up projection writes them). act: SiLU x / (1 + e^-x); GELU x/2 (1 + erf(x/sqrt 2));
// GELU-tanh x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Computed in float, rounded to the output's dtype.
//
// Validated before anything is launched (Error(invalid_argument) naming the op, the argument and the rule):
// input and out on one CUDA device, dtype f16 or bf16 and the same; out's shape is input's with the last dim
// halved; both contiguous (FlashInfer's kernel addresses rows as token * 2d and token * d: it takes no row
// stride, so a strided view must be copied first); d a multiple of 8 (the kernel's 16-byte vectors: with d
// not a multiple of 8 out's rows would be misaligned) and below 2^31; 16-byte aligned data; out shares no byte
// with input. Tokens (the product of the leading dims) below 2^31; none: nothing is launched.
#pragma once
#include <cuda_runtime_api.h>

#include "flashcpp/tensor.hpp"

namespace flashcpp {

class Runtime;

struct ActivationOptions {
  /// Programmatic dependent launch (SM90+): the kernel waits on the previous grid in-kernel, so its launch
  /// overlaps that grid's tail.
  bool enable_pdl = false;
};

/// out [..., d] = silu(input[..., :d]) * input[..., d:]; input [..., 2d].
void silu_and_mul(const Runtime& rt, const TensorView& out, const TensorView& input,
                  const ActivationOptions& options = {}, cudaStream_t stream = nullptr);
/// out [..., d] = gelu(input[..., :d]) * input[..., d:] (erf form).
void gelu_and_mul(const Runtime& rt, const TensorView& out, const TensorView& input,
                  const ActivationOptions& options = {}, cudaStream_t stream = nullptr);
/// out [..., d] = gelu_tanh(input[..., :d]) * input[..., d:] (tanh approximation).
void gelu_tanh_and_mul(const Runtime& rt, const TensorView& out, const TensorView& input,
                       const ActivationOptions& options = {}, cudaStream_t stream = nullptr);

}  // namespace flashcpp
