// RMSNorm family on FlashInfer's `norm` module: validated, asynchronous on the caller's stream.
//
// Every function validates all of its arguments before anything is launched; a broken rule throws
// Error(invalid_argument) naming the op, the argument and the rule, and nothing is written.
// Common rules: tensors on one CUDA device, dtype f16 or bf16 (input, output, residual and weight
// all the same dtype), last dim contiguous (stride 1), non-negative strides, eps finite and > 0, and no
// output sharing a byte with another argument (FlashInfer's pointers are restrict: out == input is refused;
// the fused forms update input and residual in place, which must not overlap each other).
// FlashInfer's kernels switch to the tensors' device themselves; the stream is bound for that device.
#pragma once
#include <cuda_runtime_api.h>

#include "flashcpp/tensor.hpp"

namespace flashcpp {

class Runtime;

struct RmsNormOptions {
  double eps = 1e-6;
  /// Programmatic dependent launch (SM90+): lets the kernel overlap the previous kernel's tail on the
  /// same stream. FlashInfer's Python default is "on for compute capability >= 9".
  bool enable_pdl = false;
};

/// out[b, :] = input[b, :] / sqrt(mean(input[b, :]^2) + eps) * weight.
/// input, out: [tokens, hidden] (rows may be strided); weight: [hidden].
void rmsnorm(const Runtime& rt, const TensorView& out, const TensorView& input, const TensorView& weight,
             const RmsNormOptions& options = {}, cudaStream_t stream = nullptr);

/// Per-head RMSNorm for q/k: input, out: [tokens, heads, head_dim] (dims 0 and 1 may be strided, e.g.
/// a slice of a fused qkv tensor); weight: [head_dim]. Normalises every input[t, h, :].
void fused_qk_rmsnorm(const Runtime& rt, const TensorView& out, const TensorView& input, const TensorView& weight,
                      const RmsNormOptions& options = {}, cudaStream_t stream = nullptr);

/// Gemma form: out = input / rms * (1 + weight). Shapes as rmsnorm.
void gemma_rmsnorm(const Runtime& rt, const TensorView& out, const TensorView& input, const TensorView& weight,
                   const RmsNormOptions& options = {}, cudaStream_t stream = nullptr);

/// In place: residual += input; input = residual / rms(residual) * weight.
/// input, residual: [tokens, hidden] (same shape); weight: [hidden].
void fused_add_rmsnorm(const Runtime& rt, const TensorView& input, const TensorView& residual,
                       const TensorView& weight, const RmsNormOptions& options = {}, cudaStream_t stream = nullptr);

/// In place, Gemma form: residual += input; input = residual / rms(residual) * (1 + weight).
void gemma_fused_add_rmsnorm(const Runtime& rt, const TensorView& input, const TensorView& residual,
                             const TensorView& weight, const RmsNormOptions& options = {},
                             cudaStream_t stream = nullptr);

}  // namespace flashcpp
