// Sparse MLA (DeepSeek V3.2 attention) with FlashMLA's semantics, on flashcpp's own kernels.
//
// Semantics (FlashMLA main, see docs/MLA.md):
//  * Every query token attends, with all its heads, to the `topk` KV rows its indices name. An index is
//    valid iff 0 <= index < number of KV rows and its slot is < the token's topk_length (when given);
//    every other index (-1, INT_MIN, INT_MAX, past the end, ...) is masked and never read.
//  * lse and max_logits are natural-log values in units of sm_scale * q.k. A row with no valid index
//    gives out 0, lse +inf and max_logits -inf.
//  * attn_sink[h] (optional, f32) scales head h's output by exp(lse) / (exp(lse) + exp(sink)); it does not
//    change lse or max_logits. -inf has no effect, +inf makes the output 0.
//
// Every entry point validates all of its arguments (flashcpp::Validator) before it launches anything or
// writes any output; a broken rule throws Error(invalid_argument) naming the op, the argument and the
// rule. Outputs (out, lse, max_logits, the quantizer's out, the decode plan's buffers) may share no byte
// with any other argument. Launches are asynchronous on the caller's stream (never synchronized) and made
// with the tensors' device current (restored afterwards).
//
// Devices: the kernels run on SM >= 8.0 GPUs this build has code for (the default build is sm_90a, so
// Hopper only); any other device gives Error(unsupported). On SM90 a fast Hopper kernel is used where it
// handles the shape, the portable "simple" kernel otherwise.
#pragma once
#include <optional>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashcpp/cuda.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp::mla {

inline constexpr int kDv = 512;                ///< value / output head dimension
inline constexpr int kFp8BytesPerToken = 656;  ///< V3.2 FP8 cache row: 512 e4m3 + 4 f32 scales + 64 bf16
inline constexpr int kTopkMultiple = 64;       ///< topk must be a positive multiple of this

// ---------------------------------------------------------------------------------------------------
// Sparse prefill
// ---------------------------------------------------------------------------------------------------

/// Per-call scalars of sparse prefill (flashcpp_mla_options in C).
struct SparsePrefillOptions {
  std::optional<double> sm_scale;  ///< unset: 1/sqrt(d_qk) of q (DeepSeek models pass 1/sqrt(192)); set: finite and > 0
  int d_v = kDv;                   ///< must be 512
};

/// The tensors of a sparse prefill, in the order of the C bundle flashcpp_mla_prefill_tensors. Every tensor is on one
/// CUDA device. Layout rules: the last dim of every tensor is contiguous; q and kv data are 16-byte aligned with
/// strides that are multiples of 8 elements (any framework allocation is); other strides are free (non-negative).
/// out, max_logits and lse (written) may share no byte with any other tensor. s_q may be 0 (nothing is launched).
struct SparsePrefillTensors {
  TensorView q;                          ///< bf16 [s_q, h_q, d_qk], d_qk in {512, 576}, h_q in [1, 1024]
  TensorView kv;                         ///< bf16 [s_kv, 1, d_qk]
  TensorView indices;                    ///< i32 [s_q, 1, topk], topk a positive multiple of 64
  OptionalTensor attn_sink = nullptr;    ///< f32 [h_q], contiguous; nullptr: no sink
  OptionalTensor topk_length = nullptr;  ///< i32 [s_q], contiguous; token i uses slots < topk_length[i]; nullptr: all
  TensorView out;                        ///< bf16 [s_q, h_q, 512] (written)
  OptionalTensor max_logits = nullptr;   ///< f32 [s_q, h_q] (written); nullptr: not computed
  TensorView lse;                        ///< f32 [s_q, h_q] (written)
};

/// Sparse attention for prefill over `tensors` (shapes, dtypes and layout rules on SparsePrefillTensors).
void sparse_prefill(const SparsePrefillTensors& tensors, const SparsePrefillOptions& options, cudaStream_t stream);

/// Convenience layer: allocates out [s_q, h_q, 512] bf16, max_logits and lse [s_q, h_q] f32 on q's device and runs
/// sparse_prefill on them. The inputs are SparsePrefillTensors' inputs in its order (attn_sink, topk_length: nullptr
/// when absent), with the same rules.
struct SparsePrefillOutputs {
  DeviceBuffer out, max_logits, lse;
  TensorView out_view, max_logits_view, lse_view;
};
SparsePrefillOutputs sparse_prefill(const TensorView& q, const TensorView& kv, const TensorView& indices,
                                    OptionalTensor attn_sink, OptionalTensor topk_length,
                                    const SparsePrefillOptions& options, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------
// FP8 KV cache (V3.2 layout)
// ---------------------------------------------------------------------------------------------------

/// Quantizes bf16 KV rows of 576 values into the 656-byte V3.2 layout, byte for byte as FlashMLA's
/// quantizer: per 128-value tile scale = 2^ceil(log2(max(amax / 448, 1e-4))) stored as f32, values
/// x / scale rounded to nearest-even e4m3, RoPE dims 512..575 copied as bf16.
///  kv   bf16 [..., 576] (rank 2..4, e.g. [num_blocks, block_size, 1, 576] or [num_tokens, 1, 576])
///  out  u8 / i8 / e4m3 [..., 656] with the same leading shape; last dims contiguous
/// Both on one CUDA device (asynchronous on `stream`), or both in host memory (runs on the calling
/// thread; `stream` unused) — the same bytes either way.
void quantize_kv_cache_fp8(const TensorView& kv, const TensorView& out, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------
// FP8 KV cache (DeepSeek V4 layout, FlashMLA's "MODEL1"; docs/MLA.md)
// ---------------------------------------------------------------------------------------------------

inline constexpr int kFp8V4BytesPerToken = 584;  ///< 448 e4m3 + 64 bf16 (576-byte record) + 7 e8m0 + 1 pad

/// Quantizes bf16 KV pages of 512 values per token into the V4 layout, byte for byte as FlashMLA's
/// quantizer (the pad bytes, which FlashMLA leaves unwritten, are written as 0): per 64-value tile of
/// dims 0..447 scale = 2^ceil(log2(max(amax / 448, 1e-4))) stored as e8m0, values x / scale rounded to
/// nearest-even e4m3; RoPE dims 448..511 copied as bf16. A page holds first block_size 576-byte token
/// records, then block_size 8-byte scale records.
///  kv   bf16 [num_blocks, block_size, 1, 512]; last dim contiguous, other strides free (non-negative)
///  out  u8 / i8 / e4m3 [num_blocks, block_size, 1, 584], FlashMLA's view of the pages: stride(1) == 584,
///       last dim contiguous, page stride stride(0) a multiple of 16 bytes and >= block_size * 584 (bytes
///       of a page past block_size * 584 are left untouched)
/// Both on one CUDA device (asynchronous on `stream`), or both in host memory (runs on the calling
/// thread; `stream` unused): the same bytes either way.
void quantize_kv_cache_fp8_v4(const TensorView& kv, const TensorView& out, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------
// FP8 KV cache back to bf16 (both layouts)
// ---------------------------------------------------------------------------------------------------

/// The inverse of quantize_kv_cache_fp8: each 656-byte V3.2 row back to its 576 bf16 values, dims 0..511 as e4m3 value
/// times its tile's scale (exact: the product of an e4m3 value and a power of two is a bf16 value; the very values
/// sparse_decode's kernels attend), dims 512..575 the stored bf16. With it an engine that keeps only the FP8 cache runs
/// prefill as dequantize + sparse_prefill: a cache of pages [num_blocks, block_size, 1, 656] gives bf16
/// [num_blocks, block_size, 1, 576], whose view [num_blocks * block_size, 1, 576] takes the decode indices
/// (block * block_size + offset) unchanged.
///  cache  u8 / i8 / e4m3 [..., 656] (rank 2..4); last dim contiguous
///  out    bf16 [..., 576] with the same leading shape (written); last dim contiguous
/// Both in host memory (runs on the calling thread; `stream` unused), or both on one CUDA device (asynchronous on
/// `stream`; there the cache's data and leading strides are 16-byte multiples, out's data is 16-byte aligned and its
/// strides are multiples of 8 values). Host and device give the same bytes.
void dequantize_kv_cache_fp8(const TensorView& cache, const TensorView& out, cudaStream_t stream);

/// The inverse of quantize_kv_cache_fp8_v4: each token of the V4 pages back to its 512 bf16 values (dims 0..447 e4m3
/// value times its tile's e8m0 scale, exact; dims 448..511 the stored bf16).
///  cache  u8 / i8 / e4m3 [num_blocks, block_size, 1, 584], the page rules of quantize_kv_cache_fp8_v4's out
///  out    bf16 [num_blocks, block_size, 1, 512] (written); last dim contiguous
/// Devices, stream and layout on a GPU as dequantize_kv_cache_fp8 (the page stride is a 16-byte multiple already).
void dequantize_kv_cache_fp8_v4(const TensorView& cache, const TensorView& out, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------
// Sparse decode over the FP8 cache: plan (split-KV schedule) + run (split kernel + combine)
// ---------------------------------------------------------------------------------------------------

/// The shape a decode plan is made for.
struct DecodeConfig {
  int batch = 0;   ///< requests, >= 1
  int s_q = 1;     ///< query tokens per request (MTP), >= 1
  int h_q = 0;     ///< query heads, [1, 1024]
  int d_qk = 576;  ///< 576 (V3.2 cache, sparse_decode) or 512 (V4 cache, sparse_decode_v4)
  int topk = 0;    ///< positive multiple of 64 (the main pool's slots)
  int extra_topk = 0;  ///< V4 only: the extra pool's slots, 0 (no extra pool) or a positive multiple of 64
  int num_sms = 0; ///< SMs to schedule for, at most 4096; 0 = the device's SM count
};

/// Sizes of the plan buffers (elements). `split == false`: the run needs no buffers (all sizes 0) and
/// launches one kernel; otherwise sched_meta is i32 [num_sm_parts, 8], num_splits i32 [split requests + 1],
/// lse_accum f32 [lse_accum_elems], o_accum f32 [o_accum_elems] (16-byte aligned; opaque scratch: it holds the split
/// pieces' partial rows as bf16, two to an element).
/// `head_requests` > 0 (split plans only): where the unsplit grid would end on a short last wave, the first
/// head_requests requests run unsplit (whole waves) and only the remaining batch - head_requests are split over all
/// SMs, so no SM idles through a long last wave of few tokens; the schedule and buffers are those of the split
/// requests.
struct DecodePlanSizes {
  int num_sm_parts = 0;
  bool split = false;
  int64_t sched_meta_elems = 0, num_splits_elems = 0, lse_accum_elems = 0, o_accum_elems = 0;
  int head_requests = 0;
  /// Heads per CTA of the split grid (32: V4 h_q 33..64 as a 2-CTA cluster; 64 otherwise); 0 when not split.
  int split_group_heads = 0;
  /// A split plan whose run, given topk_length or extra_topk_length, runs unsplit (V4 pages: the split schedule
  /// counts every tile, the unsplit grid skips the tiles past each pool's length). The buffers stay as planned.
  bool unsplit_with_lengths = false;
};

/// Validates `config` and returns the buffer sizes. `num_sms` must be > 0 when config.num_sms is 0.
/// The sizes depend only on the shape. A schedule planned without lengths depends only on the shape too, never on
/// index or topk_length values, so one plan serves every decode step of that shape (CUDA-graph safe: plan once,
/// capture run, replay); one planned with a step's lengths (DecodePlanLengths) balances the split parts by them.
DecodePlanSizes decode_plan_sizes(const DecodeConfig& config, int num_sms);

/// Caller-owned plan buffers plus the config they were planned for.
struct DecodeWorkspace {
  DecodeConfig config;
  TensorView sched_meta;  ///< i32 [num_sm_parts, 8] (empty when !split)
  TensorView num_splits;  ///< i32 [num_splits_elems] (empty when !split)
  TensorView lse_accum;   ///< f32, >= lse_accum_elems (empty when !split)
  TensorView o_accum;     ///< f32, >= o_accum_elems   (empty when !split)
};

/// The per-request lengths a decode plan may balance its split schedule by: the tensors the step's runs pass as
/// topk_length / extra_topk_length. A split request runs only the 64-slot tiles of its valid slots (the main pool's
/// up to its length, then, V4, the extra pool's), and a schedule planned without lengths gives every part the same
/// share of all tiles; one planned with them gives every part the same share of the tiles that run (FlashMLA's
/// scheduler does so too). Results never depend on it: a run whose lengths differ from the planned ones (a
/// step's new lengths before re-planning) is exact, only less balanced, since each request's last piece runs to
/// its end. Planning reads the lengths on the device (batches up to 12288 requests; larger ones plan as without).
struct DecodePlanLengths {
  OptionalTensor topk_length = nullptr;        ///< i32 [batch], contiguous, on the plan's device
  OptionalTensor extra_topk_length = nullptr;  ///< i32 [batch], contiguous; V4 plans with an extra pool only
};

/// Writes the schedule into ws.sched_meta / ws.num_splits on `stream` (one tiny kernel, no host copy), balanced by
/// `lengths` where given. When the plan is not split this validates and does nothing. The device is that of the
/// buffers (or `device_id` when not split).
void decode_plan(const DecodeWorkspace& ws, int device_id, cudaStream_t stream, const DecodePlanLengths& lengths = {});

/// Per-call scalars of sparse decode, V3.2 and V4 alike (flashcpp_mla_options in C).
struct SparseDecodeOptions {
  std::optional<double> sm_scale;  ///< unset: 1/sqrt(d_qk) of q (DeepSeek models pass 1/sqrt(192)); set: finite and > 0
  int d_v = kDv;                   ///< must be 512
};

/// The tensors of a sparse decode, one bundle for the V3.2 cache (sparse_decode) and the V4 cache (sparse_decode_v4),
/// in the order of the C bundle flashcpp_mla_decode_tensors (whose plan buffers are DecodeWorkspace here). All on the
/// workspace's device. Strides: q, indices (both pools'), out and lse take any non-negative strides with the last dim
/// contiguous (requests need not be evenly spaced: FlashMLA's padded test tensors and its [batch, h_q, s_q] lse run as
/// they are); q's data is 16-byte aligned and its strides multiples of 8 elements. out with strides of 8-element
/// multiples and 16-byte aligned data runs on the Hopper kernels, any other out on the portable one. out and lse
/// (written) may share no byte with any other tensor nor with the workspace.
struct SparseDecodeTensors {
  TensorView q;  ///< bf16 [batch, s_q, h_q, d_qk]: d_qk 576 (V3.2) or 512 (V4)
  /// V3.2: u8 / i8 / e4m3 [num_blocks, block_size, 1, 656]; slot stride 656 bytes, block stride any multiple of 16
  ///       bytes, data 16-byte aligned; block_size >= 1 (any value).
  /// V4 (FlashMLA's "MODEL1", layout in quantize_kv_cache_fp8_v4): u8 / i8 / e4m3 [num_blocks, block_size, 1, 584]:
  ///       stride(1) 584, page stride a multiple of 16 and >= block_size * 584 bytes, data 16-byte aligned;
  ///       block_size >= 1 (any value; the extra pool may use another).
  TensorView kv_cache;
  /// i32 [batch, s_q, topk], topk a positive multiple of 64: block * block_size + offset into its pool; anything
  /// outside [0, num_blocks * block_size) (e.g. -1), and every slot at or past the request's topk_length, is masked,
  /// never read.
  TensorView indices;
  OptionalTensor topk_length = nullptr;  ///< i32 [batch], contiguous: (main-pool) slots per request; nullptr: all
  OptionalTensor attn_sink = nullptr;    ///< f32 [h_q], contiguous; nullptr: no sink
  TensorView out;                        ///< bf16 [batch, s_q, h_q, 512] (written)
  TensorView lse;  ///< f32 [batch, s_q, h_q] (written; any strides, e.g. a view of FlashMLA's [batch, h_q, s_q])
  /// V4 only (sparse_decode refuses them): the extra pool attended in the same softmax (FlashMLA's extra_k_cache),
  /// V4 pages as kv_cache; given iff extra_indices is.
  OptionalTensor extra_kv_cache = nullptr;
  OptionalTensor extra_indices = nullptr;      ///< V4 only: i32 [batch, s_q, extra_topk]: indices into the extra pool
  OptionalTensor extra_topk_length = nullptr;  ///< V4 only: i32 [batch], contiguous: extra-pool slots per request
};

/// Sparse decode attention over the FP8 V3.2 cache (d_qk 576; shapes and rules on SparseDecodeTensors; the extra_*
/// tensors must be nullptr). `ws`: a workspace planned by decode_plan for this shape (d_qk 576) on this device.
void sparse_decode(const SparseDecodeTensors& tensors, const DecodeWorkspace& ws, const SparseDecodeOptions& options,
                   cudaStream_t stream);

/// Sparse decode over the DeepSeek V4 FP8 cache (d_qk 512; FlashMLA's "MODEL1"), with an optional extra pool attended
/// in the same softmax (extra_kv_cache, extra_indices, extra_topk_length). `ws`: planned with d_qk 512, topk and
/// extra_topk (0 without the extra pool) of these tensors. Runs on the Hopper wgmma kernel on SM90 (the portable
/// kernel elsewhere or for layouts it does not take).
void sparse_decode_v4(const SparseDecodeTensors& tensors, const DecodeWorkspace& ws, const SparseDecodeOptions& options,
                      cudaStream_t stream);

/// Convenience layer: owns the plan buffers and remembers the shape; run() refuses another shape.
class DecodePlan {
 public:
  /// Allocates the buffers on `device_id` and plans on `stream` (asynchronously), balanced by `lengths` where given.
  static DecodePlan create(const DecodeConfig& config, int device_id, cudaStream_t stream,
                           const DecodePlanLengths& lengths = {});
  /// Plans the same buffers again on `stream`, e.g. by a new step's lengths (decode_plan).
  void replan(const DecodePlanLengths& lengths, cudaStream_t stream) const;
  /// sparse_decode on a plan made with d_qk 576 (the V3.2 cache), sparse_decode_v4 on one made with d_qk 512 (V4).
  void run(const SparseDecodeTensors& tensors, const SparseDecodeOptions& options, cudaStream_t stream) const;
  const DecodePlanSizes& sizes() const { return sizes_; }
  const DecodeWorkspace& workspace() const { return ws_; }
  int device() const { return device_; }

 private:
  DecodePlan() = default;
  DecodePlanSizes sizes_;
  DecodeWorkspace ws_;
  int device_ = 0;
  DeviceBuffer sched_meta_, num_splits_, lse_accum_, o_accum_;
};

// ---------------------------------------------------------------------------------------------------
// Dense decode over a paged cache (DeepSeek V3 / R1, Kimi K2: every cached token attended)
// ---------------------------------------------------------------------------------------------------

/// The shape a dense decode workspace is sized for. Plan once per decode step (dense_decode_plan: the split-KV
/// schedule, each request's slot list and its tokens' lengths, built on the device from that step's block table and
/// lengths), then run every layer of the step on it (dense_decode), as FlashMLA shares its scheduler metadata across
/// layers. Both are asynchronous and CUDA-graph safe: capture plan and runs, replay with new lengths and block tables
/// in the same buffers.
struct DenseDecodeConfig {
  int batch = 0;        ///< requests, >= 1
  int s_q = 1;          ///< query tokens per request (MTP), [1, 65535]
  int h_q = 0;          ///< query heads, [1, 1024]
  int block_size = 0;   ///< tokens per cache block, >= 1 (kv_cache.size(1))
  int max_blocks = 0;   ///< blocks a request may hold, >= 1 (block_table.size(1))
  bool causal = false;  ///< token s of s_q sees length - (s_q - 1 - s) tokens (FlashMLA's causal); s_q 1: no effect
  int num_sms = 0;      ///< SMs to schedule for, at most 4096; 0 = the device's SM count
};

/// Sizes of the workspace buffers (elements): sched_meta i32 [num_sm_parts, 8], num_splits i32 [batch + 1],
/// lse_accum f32 / o_accum f32 (opaque scratch: bf16 partial rows, two to an element), indices i32 [batch, capacity]
/// (capacity = max_blocks * block_size rounded up to a multiple of 64), token_lengths i32 [batch * s_q]; all
/// contiguous, all but num_splits 16-byte aligned.
struct DenseDecodePlanSizes {
  int num_sm_parts = 0;
  int64_t capacity = 0;
  int64_t sched_meta_elems = 0, num_splits_elems = 0, lse_accum_elems = 0, o_accum_elems = 0;
  int64_t indices_elems = 0, token_lengths_elems = 0;
};

/// Validates `config` and returns the buffer sizes. `num_sms` must be > 0 when config.num_sms is 0.
DenseDecodePlanSizes dense_decode_plan_sizes(const DenseDecodeConfig& config, int num_sms);

/// Caller-owned buffers plus the config they were sized for.
struct DenseDecodeWorkspace {
  DenseDecodeConfig config;
  TensorView sched_meta;     ///< i32 [num_sm_parts, 8]       (written by the plan)
  TensorView num_splits;     ///< i32 [batch + 1]             (written by the plan)
  TensorView lse_accum;      ///< f32, >= lse_accum_elems     (written by each run)
  TensorView o_accum;        ///< f32, >= o_accum_elems       (written by each run)
  TensorView indices;        ///< i32, >= indices_elems       (written by the plan)
  TensorView token_lengths;  ///< i32, >= token_lengths_elems (written by the plan)
};

/// Plans one decode step on `stream` (one small kernel): reads
///  block_table   i32 [batch, max_blocks], last dim contiguous: request r's token j is in block
///                block_table[r][j / block_size]; a negative id masks its tokens, as does one past the cache at run
///  cache_seqlens i32 [batch], contiguous: tokens per request, clamped to [0, max_blocks * block_size]
/// and writes the workspace's schedule, indices and token lengths. The block table and lengths may change between
/// steps (a new plan each step); runs of the step read what this plan wrote.
void dense_decode_plan(const DenseDecodeWorkspace& ws, const TensorView& block_table, const TensorView& cache_seqlens,
                       cudaStream_t stream);

/// Per-call scalars of dense decode (flashcpp_mla_dense_decode_options in C).
struct DenseDecodeOptions {
  std::optional<double> sm_scale;  ///< unset: 1/sqrt(576); set: finite and > 0
};

/// The tensors of a dense decode, in the order of the C bundle flashcpp_mla_dense_decode_tensors; all on the
/// workspace's device. out and lse (written) may share no byte with any other tensor nor with the workspace.
struct DenseDecodeTensors {
  /// bf16 or fp16 [batch, s_q, h_q, 576]; last dim contiguous, data 16-byte aligned, strides multiples of 8
  TensorView q;
  /// q's dtype (bf16 or fp16) [num_blocks, block_size, 1, 576]: last dim contiguous, token stride (dim 1) >= 576 and a
  /// multiple of 8, page stride (dim 0) block_size token strides, data 16-byte aligned; or, with a bf16 q, the V3.2 FP8
  /// layout u8 / i8 / e4m3 [num_blocks, block_size, 1, 656] (quantize_kv_cache_fp8): stride(1) 656, page stride a
  /// multiple of 16 bytes. At most 2^31 - 1 tokens.
  TensorView kv_cache;
  OptionalTensor attn_sink = nullptr;  ///< f32 [h_q], contiguous; nullptr: no sink
  TensorView out;                      ///< q's dtype [batch, s_q, h_q, 512] (written)
  TensorView lse;  ///< f32 [batch, s_q, h_q] (written; any strides, e.g. a view of FlashMLA's [batch, h_q, s_q])
};

/// Dense MLA decode (FlashMLA's flash_mla_with_kvcache semantics) over the step planned in `ws`: each request's query
/// tokens attend to its first cache_seqlens[r] cached tokens; V is the first 512 dims of each token. A request of
/// length 0 (or a causal token with none to see) gives out 0 and lse +inf. Shapes and rules on DenseDecodeTensors.
///  ws  sized by dense_decode_plan_sizes for this shape on this device, planned by dense_decode_plan on this stream
///      (or one ordered before it); its accumulators are written, so one run at a time per workspace
/// Runs the sparse decode kernels (wgmma on SM90, the portable kernel elsewhere) over the planned indices.
void dense_decode(const DenseDecodeTensors& tensors, const DenseDecodeWorkspace& ws, const DenseDecodeOptions& options,
                  cudaStream_t stream);

/// Convenience layer: owns the workspace and remembers the shape; plan() and run() refuse another shape.
class DenseDecodePlan {
 public:
  /// Allocates the buffers on `device_id` (nothing is launched).
  static DenseDecodePlan create(const DenseDecodeConfig& config, int device_id);
  void plan(const TensorView& block_table, const TensorView& cache_seqlens, cudaStream_t stream) const;
  void run(const DenseDecodeTensors& tensors, const DenseDecodeOptions& options, cudaStream_t stream) const;
  const DenseDecodePlanSizes& sizes() const { return sizes_; }
  const DenseDecodeWorkspace& workspace() const { return ws_; }
  int device() const { return device_; }

 private:
  DenseDecodePlan() = default;
  DenseDecodePlanSizes sizes_;
  DenseDecodeWorkspace ws_;
  int device_ = 0;
  DeviceBuffer sched_meta_, num_splits_, lse_accum_, o_accum_, indices_, token_lengths_;
};

// ---------------------------------------------------------------------------------------------------
// Devices
// ---------------------------------------------------------------------------------------------------

struct MlaDeviceSupport {
  int device_id = 0, cc_major = 0, cc_minor = 0, sm_count = 0;
  bool sparse_supported = false;  ///< the kernels can run on this device with this build
  bool hopper_kernel = false;     ///< SM 9.0: the fast Hopper kernel is tried first
};
/// Facts about `device_id` for sparse MLA (throws invalid_argument for an unknown device).
MlaDeviceSupport device_support(int device_id);

}  // namespace flashcpp::mla
