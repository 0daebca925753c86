// The sampler of a decode step on FlashInfer's `sampling` module: softmax with temperature, sampling from
// probabilities or logits, top-k / top-p / min-p sampling, the fused top-k + top-p sampler, and the renorm and
// mask helpers. Validated, asynchronous on the caller's stream, no allocation, no synchronization.
//
// Shapes and dtypes. probs and logits are [rows, vocab], contiguous, 16-byte aligned (FlashInfer addresses row r at
// r * vocab with 16-byte vectors), f32 unless stated; vocab in [1, 2^31). samples is int32 or int64 [batch]. Without
// `row_indices`, batch == rows and sample i is drawn from row i; with `row_indices` (1-D [batch], samples' dtype),
// sample i is drawn from row row_indices[i], so several samples can share one distribution (its values are read on
// the device and must lie in [0, rows): they cannot be checked without a synchronization).
//
// Per-request parameters (temperature, top_k, top_p, min_p) are a scalar for every request or a 1-D [rows] tensor
// on the device, one value per row of probs/logits (f32; top_k int32, or samples' dtype where stated). The top_k
// and min_p samplers read value i for sample i, the others value r for row r (FlashInfer's kernels), so those two
// take a tensor with row_indices only when there are as many samples as rows. Scalars are validated (temperature
// finite and > 0: FlashInfer's kernel turns 0 into a uniform distribution, use top_k 1 for greedy; top_k >= 1;
// top_p in (0, 1]; min_p in [0, 1]); per-request values are read by the kernel, unvalidated.
//
// Randomness is Philox (curand) with an explicit seed and offset: the same inputs, seed and offset give the same
// samples (with `deterministic`, FlashInfer's deterministic scans; without, faster and run-to-run stable only in
// distribution). FlashInfer's Python API advances its generator's offset by (n + 3) / 4 * 4 per call, n = batch
// for sampling_from_probs and min_p, batch * vocab for sampling_from_logits (Gumbel noise per logit), batch * 32
// for the top-k/top-p samplers; a caller that wants fresh draws advances `philox_offset` (or the seed) likewise. Seed and offset are kernel arguments, so a CUDA graph
// replays the ones it was captured with.
//
// Validated before anything is launched (Error(invalid_argument) naming the op, the argument and the rule): every
// tensor on one CUDA device; dtypes, ranks, shapes, contiguity and alignment as above; outputs share no byte with
// an input (softmax may run exactly in place); workspaces large enough. Zero rows or zero samples launch nothing.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

#include "flashcpp/cuda.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp {

class Runtime;

/// A floating-point per-request parameter: `value` for every request, or `per_row` (f32 [rows] on the device).
struct SamplingParam {
  double value = 0;
  const TensorView* per_row = nullptr;  ///< borrowed for the call
  SamplingParam(double v) : value(v) {}                  // NOLINT(google-explicit-constructor): a scalar
  SamplingParam(const TensorView& t) : per_row(&t) {}   // NOLINT(google-explicit-constructor): per request
};

/// top_k for every request (`value`), or per request (`per_row` [rows]: int32, or samples' dtype for the top-k and
/// the fused top-k + top-p samplers, whose kernels read it as the sample index type).
struct TopKParam {
  int64_t value = 0;
  const TensorView* per_row = nullptr;  ///< borrowed for the call
  TopKParam(int64_t k) : value(k) {}                     // NOLINT(google-explicit-constructor): a scalar
  TopKParam(const TensorView& t) : per_row(&t) {}       // NOLINT(google-explicit-constructor): per request
};

struct SamplingOptions {
  bool deterministic = true;
  uint64_t philox_seed = 0;
  uint64_t philox_offset = 0;
};

// -------------------------------------------------------------------------------------------------
// Workspaces

/// Bytes of softmax's scratch for `rows` x `vocab` (FlashInfer splits the vocabulary of small batches with a large
/// vocabulary into 8192-wide slices and keeps one (max, denominator) pair per slice): rows * ceil(vocab / 8192) * 8
/// for rows <= 128 and vocab >= 24576, else 0.
int64_t softmax_workspace_bytes(int64_t rows, int64_t vocab) noexcept;
/// Bytes of the row-states buffer of top_k_renorm_probs / top_k_mask_logits (FlashInfer's size: one 3 KiB state
/// per SM of the largest GPU, rounded up).
inline constexpr int64_t kSamplingRowStatesBytes = int64_t{1} << 20;
/// FlashInfer's softmax workspace size (1 MiB): enough for 128 rows of a 8M-entry vocabulary.
inline constexpr int64_t kSoftmaxWorkspaceBytes = int64_t{1} << 20;

/// Caller-owned scratch of the sampling ops, 1-D contiguous buffers on the device of the logits.
/// softmax_buffer: at least softmax_workspace_bytes(rows, vocab), 16-byte aligned.
/// row_states: at least kSamplingRowStatesBytes, zero-filled before its first use; the top-k kernels leave it zero
/// when they finish. One launch at a time may use a row_states buffer (give each stream its own).
struct SamplingWorkspace {
  TensorView softmax_buffer;
  TensorView row_states;
};

/// Convenience owner of a SamplingWorkspace (kSoftmaxWorkspaceBytes + kSamplingRowStatesBytes on `device_id`,
/// row_states zeroed on `stream`); not needed by the ops.
class OwnedSamplingWorkspace {
 public:
  explicit OwnedSamplingWorkspace(int device_id = 0, cudaStream_t stream = nullptr);
  const SamplingWorkspace& view() const { return view_; }
  operator const SamplingWorkspace&() const { return view_; }  // NOLINT(google-explicit-constructor)

 private:
  DeviceBuffer softmax_, row_states_;
  SamplingWorkspace view_;
};

// -------------------------------------------------------------------------------------------------
// Softmax

struct SoftmaxOptions {
  /// Programmatic dependent launch (SM90+).
  bool enable_pdl = false;
};

/// probs [rows, vocab] = softmax(logits / temperature) per row; logits, probs f32 [rows, vocab]; temperature per
/// request is f32 [rows]. probs may be exactly logits (in place). `workspace` 1-D, >= softmax_workspace_bytes.
void softmax(const Runtime& rt, const TensorView& workspace, const TensorView& logits, const TensorView& probs,
             SamplingParam temperature = 1.0, const SoftmaxOptions& options = {}, cudaStream_t stream = nullptr);

// -------------------------------------------------------------------------------------------------
// Samplers: samples int32/int64 [batch]; row_indices null or samples' dtype [batch].

/// One sample per request from the categorical distribution of its probs row (rows need not be normalized).
void sampling_from_probs(const Runtime& rt, const TensorView& probs, const TensorView& samples,
                         const TensorView* row_indices = nullptr, const SamplingOptions& options = {},
                         cudaStream_t stream = nullptr);
/// One sample per request from softmax(logits row) (Gumbel-max over the logits; no softmax pass).
void sampling_from_logits(const Runtime& rt, const TensorView& logits, const TensorView& samples,
                          const TensorView* row_indices = nullptr, const SamplingOptions& options = {},
                          cudaStream_t stream = nullptr);
/// From the top_k largest probabilities of the row, renormalized (top_k >= vocab: the whole row). A per-request
/// top_k has samples' dtype.
void top_k_sampling_from_probs(const Runtime& rt, const TensorView& probs, const TensorView& samples, TopKParam top_k,
                               const TensorView* row_indices = nullptr, const SamplingOptions& options = {},
                               cudaStream_t stream = nullptr);
/// From the smallest set of largest probabilities whose sum reaches top_p (nucleus sampling); rows normalized.
void top_p_sampling_from_probs(const Runtime& rt, const TensorView& probs, const TensorView& samples,
                               SamplingParam top_p, const TensorView* row_indices = nullptr,
                               const SamplingOptions& options = {}, cudaStream_t stream = nullptr);
/// From the probabilities >= min_p x the row's largest; rows normalized.
void min_p_sampling_from_probs(const Runtime& rt, const TensorView& probs, const TensorView& samples,
                               SamplingParam min_p, const TensorView* row_indices = nullptr,
                               const SamplingOptions& options = {}, cudaStream_t stream = nullptr);
/// Top-k and top-p applied jointly (a token survives both filters) in one rejection-sampling kernel; rows normalized.
/// A per-request top_k has samples' dtype.
void top_k_top_p_sampling_from_probs(const Runtime& rt, const TensorView& probs, const TensorView& samples,
                                     TopKParam top_k, SamplingParam top_p, const TensorView* row_indices = nullptr,
                                     const SamplingOptions& options = {}, cudaStream_t stream = nullptr);

/// Which filter of top_k_top_p_sampling_from_logits comes first (FlashInfer's filter_apply_order).
enum class TopKTopPOrder {
  top_k_first,  ///< mask all but the top_k logits, softmax, then top-p sample the renormalized top-k set
  joint,        ///< softmax, then top_k_top_p_sampling_from_probs (both filters on the full distribution)
};

/// The sampler of an engine's decode step, from logits f32 [rows, vocab]: top_k_mask_logits or nothing, softmax,
/// then the top-p or fused sampler (FlashInfer's Python composes the same kernels, with torch's softmax). probs
/// f32 [rows, vocab] is scratch the call writes (the distribution actually sampled); it shares no byte with the
/// other arguments. The workspace's row_states is used for top_k_first. A per-row top_k is int32 for
/// top_k_first and samples' dtype for joint.
void top_k_top_p_sampling_from_logits(const Runtime& rt, const SamplingWorkspace& workspace, const TensorView& logits,
                                      const TensorView& probs, const TensorView& samples, TopKParam top_k,
                                      SamplingParam top_p, TopKTopPOrder order = TopKTopPOrder::top_k_first,
                                      const TensorView* row_indices = nullptr, const SamplingOptions& options = {},
                                      cudaStream_t stream = nullptr);

// -------------------------------------------------------------------------------------------------
// Renorm and mask helpers (no randomness)

/// renorm [rows, vocab] = probs restricted to the top-p nucleus of each row, renormalized; f32.
void top_p_renorm_probs(const Runtime& rt, const TensorView& probs, const TensorView& renorm, SamplingParam top_p,
                        cudaStream_t stream = nullptr);
/// renorm = probs restricted to each row's top_k largest, renormalized; f32, f16 or bf16 (renorm the same);
/// per-row top_k int32. `row_states`: see SamplingWorkspace.
void top_k_renorm_probs(const Runtime& rt, const TensorView& probs, const TensorView& renorm, TopKParam top_k,
                        const TensorView& row_states, cudaStream_t stream = nullptr);
/// masked = logits with all but each row's top_k largest set to -inf; f32, f16 or bf16; per-row top_k int32.
void top_k_mask_logits(const Runtime& rt, const TensorView& logits, const TensorView& masked, TopKParam top_k,
                       const TensorView& row_states, cudaStream_t stream = nullptr);

}  // namespace flashcpp
