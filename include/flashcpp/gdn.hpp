// Gated delta rule (GDN) prefill over packed sequences: FlashInfer's gdn_prefill_sm90 module (Hopper only).
//
// Per sequence and per head h (state S is [D_v, D_k], starting from input_state or zero):
//   S   = alpha_t · S                        (alpha: multiplicative decay, default 1)
//   S  += beta_t · (v_t − S k_t) k_tᵀ        (beta: update gate, default 1)
//   o_t = scale · S q_t                      (scale 0 → 1/sqrt(head_size))
// and output_state receives the final S of every sequence, laid out [N, H, V, K].
#pragma once
#include <optional>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashcpp/runtime.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp {

/// Tensors of one gdn_prefill call. T = total packed tokens, N = sequences, D = head size (128),
/// Hsab = max(Hq, Hv). GQA (Hq >= Hv): Hk == Hv, Hq a multiple of Hv. GVA (Hv > Hq): Hk == Hq, Hv a multiple of Hq.
struct GdnPrefillTensors {
  TensorView output;        ///< [T, Hsab, D], dtype of q, contiguous, CUDA
  TensorView output_state;  ///< [N, Hsab, D, D] f32, contiguous (always written)
  TensorView q;             ///< [T, Hq, D] f16 or bf16, contiguous
  TensorView k;             ///< [T, Hk, D], dtype of q, contiguous
  TensorView v;             ///< [T, Hv, D], dtype of q, contiguous
  TensorView cu_seqlens;    ///< i64 [N+1] CUDA, contiguous: sequence n is tokens [cu[n], cu[n+1])
  /// Optional host copy of cu_seqlens (i64 [N+1]); when given its values are validated (0, never
  /// decreasing, ends at T). The kernel reads the device copy.
  OptionalTensor cu_seqlens_host = nullptr;
  OptionalTensor input_state = nullptr;  ///< [N, Hsab, D, D] f32 contiguous; absent: zero state
  OptionalTensor alpha = nullptr;        ///< [T, Hsab] f32 contiguous, values > 0; absent: all ones
  OptionalTensor beta = nullptr;         ///< [T, Hsab] f32 contiguous; absent: all ones
  /// u8 1-D CUDA scratch of >= gdn_prefill_workspace_bytes(device) bytes (one 128-byte TMA descriptor
  /// per SM). Absent: a per-device buffer flashcpp allocates once; calls sharing it must not overlap
  /// in time on different streams (pass your own per stream in that case).
  OptionalTensor workspace = nullptr;
};

struct GdnPrefillOptions {
  /// Multiplies q·k; unset: 1/sqrt(head_size); set: finite and > 0.
  std::optional<double> scale;
};

inline constexpr int64_t kGdnHeadSize = 128;
inline constexpr const char* kGdnPrefillUri = "gdn_prefill_sm90";

/// SM count × 128 bytes (the SM count is read once per device and cached). `device` must be a visible CUDA device
/// (invalid_argument otherwise).
int64_t gdn_prefill_workspace_bytes(int device);

/// Validates everything (shapes, dtypes, contiguity, devices, head grouping, scalar ranges, the
/// optional host cu_seqlens, no output, output_state or workspace byte shared with another argument, so
/// input_state may not be output_state), throws unsupported on a device that is not compute capability 9.x,
/// makes the tensors' device current (the kernel does not), then launches on `stream`.
/// Any device, any order, any thread: calls are serialised process-wide for their host part only (the
/// launch is asynchronous), because FlashInfer 0.6.3's module keeps one-time kernel setup in
/// process-wide flags that flashcpp re-arms when the device changes (docs/MULTI_GPU.md).
void gdn_prefill(const Runtime& rt, const GdnPrefillTensors& args, const GdnPrefillOptions& options, cudaStream_t stream);

}  // namespace flashcpp
