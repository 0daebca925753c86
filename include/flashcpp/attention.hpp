// Attention on FlashInfer's prefill and decode modules: single prefill/decode, batch prefill (ragged and
// paged KV) and batch paged decode with RAII plans. Validated, asynchronous on the caller's stream.
// Outputs (out, lse, tmp and the plan's workspace buffers) may share no byte with any other argument.
//
// Shapes (H_qo query heads, H_kv key/value heads, H_qo divisible by H_kv; D head dims):
//   q            [tokens, H_qo, D_qk]                    (dims 0, 1 may be strided; last dim contiguous)
//   k, v         NHD [kv_tokens, H_kv, D] | HND [H_kv, kv_tokens, D]
//   out          [tokens, H_qo, D_vo], dtype o (defaults to q's dtype)
//   lse          optional float32 [tokens, H_qo]: log2(sum_j exp(score_j)) of each row
// Scores: s = (q . k) * sm_scale (default 1/sqrt(D_qk)); with logits_soft_cap > 0,
// s = cap * tanh(s / cap). Causal keeps kv j for query i when j <= i + kv_len - qo_len (queries are
// right-aligned to the keys); window_left >= 0 keeps j >= i + kv_len - qo_len - window_left.
// Supported: q/k/v f16 or bf16 with q dtype == kv dtype (the modules this build uses), no positional
// encoding in the kernel (apply RoPE before), head dims 64, 128, 256 (and 192/128 on fa3).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flashcpp/cuda.hpp"
#include "flashcpp/page.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp {

class Runtime;

// -------------------------------------------------------------------------------------------------
// Workspaces

/// Caller-owned buffers batch plans schedule into. All 1-D; their byte size is numel * element size.
/// float_buffer and int_buffer on the CUDA device of the attention tensors; pinned_int_buffer in
/// page-locked host memory (cuda_host, or cpu memory the caller pinned), at least as large as int_buffer.
/// A plan remembers the three pointers and sizes; run() refuses other buffers. Do not touch the pinned
/// buffer from the host while a plan's stream has not yet run the plan's copy (create a plan, then
/// create the next plan on the same stream: that is always safe).
struct Workspace {
  TensorView float_buffer;
  TensorView int_buffer;
  TensorView pinned_int_buffer;
};

/// FlashInfer's recommended sizes: 128 MiB float workspace, 8 MiB int (and pinned) workspace.
int64_t recommended_float_workspace_bytes() noexcept;
int64_t recommended_int_workspace_bytes() noexcept;

/// Convenience owner of a Workspace (cudaMalloc / cudaMallocHost); not needed by the ops.
class OwnedWorkspace {
 public:
  explicit OwnedWorkspace(int device_id = 0, int64_t float_bytes = recommended_float_workspace_bytes(),
                          int64_t int_bytes = recommended_int_workspace_bytes());
  const Workspace& view() const { return view_; }
  operator const Workspace&() const { return view_; }

 private:
  DeviceBuffer float_, int_;
  PinnedBuffer pinned_;
  Workspace view_;
};

// -------------------------------------------------------------------------------------------------
// Backends

/// Batch prefill kernels: fa3 = FlashInfer's Hopper (`_sm90`) modules, fa2 = the portable ones.
/// automatic: fa3 on compute capability 9.x when the variant exists (q dtype == kv dtype == o dtype,
/// 16-bit, head dims 64/64, 128/128, 256/256 or 192/128, and not ragged HND, which fa3 misreads); else fa2.
enum class AttentionBackend { automatic, fa2, fa3 };

/// Decode kernels: cuda_cores = FlashInfer's decode module; tensor_cores = its prefill module with one
/// query per request (fa2 unless prefill_backend names fa3). automatic takes tensor cores when the GQA
/// group size H_qo / H_kv is 4 or more (measured faster on the H200; see docs/PERFORMANCE.md) or not one of
/// 1, 2, 3, 4, 8 (which the decode module cannot do).
enum class DecodeBackend { automatic, cuda_cores, tensor_cores };

/// The decode path `backend` resolves to for a head configuration.
bool decode_uses_tensor_cores(int64_t num_qo_heads, int64_t num_kv_heads, DecodeBackend backend) noexcept;

// -------------------------------------------------------------------------------------------------
// Single-request attention

struct SinglePrefillOptions {
  bool causal = false;
  KvLayout layout = KvLayout::nhd;
  int64_t window_left = -1;           ///< -1: no sliding window; else >= 0
  double logits_soft_cap = 0.0;       ///< 0: off; else > 0
  std::optional<double> sm_scale;     ///< default 1/sqrt(head_dim_qk); must be finite and > 0
  bool use_fp16_qk_reduction = false; ///< f16 q only
};

/// Bytes of `tmp` single_prefill may use to split the KV sequence (an upper bound). `device_id` < 0:
/// no device facts (a looser bound).
int64_t single_prefill_tmp_bytes(int64_t qo_len, int64_t kv_len, int64_t num_qo_heads, int64_t num_kv_heads,
                                 int64_t head_dim_vo, DType o_dtype, int device_id = -1);

/// Attention of one request (FlashInfer fa2 single prefill; the Hopper single-prefill module misreads
/// HND and is not prebuilt, so it is not used). q [qo_len, H_qo, D_qk], k/v [kv_len...] per layout,
/// out [qo_len, H_qo, D_vo], lse optional f32 [qo_len, H_qo] (contiguous). `tmp`: 1-D CUDA scratch
/// with at least single_prefill_tmp_bytes(...) bytes, or absent (TensorView{}: null data, or numel 0) to
/// never split the KV sequence.
void single_prefill(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, OptionalTensor lse, const TensorView& tmp,
                    const SinglePrefillOptions& options = {}, cudaStream_t stream = nullptr);

struct SingleDecodeOptions {
  KvLayout layout = KvLayout::nhd;
  int64_t window_left = -1;
  double logits_soft_cap = 0.0;
  std::optional<double> sm_scale;
  DecodeBackend backend = DecodeBackend::automatic;
};

/// Bytes of `tmp` single_decode may use (upper bound; see single_prefill_tmp_bytes).
int64_t single_decode_tmp_bytes(int64_t kv_len, int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim,
                                DType o_dtype, int device_id = -1);

/// One query token: q [H_qo, D], k/v [kv_len, H_kv, D] (NHD) or [H_kv, kv_len, D] (HND), all fully
/// contiguous (the decode kernel assumes it), out [H_qo, D], lse optional f32 [H_qo]. D_qk == D_vo.
void single_decode(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& out, OptionalTensor lse, const TensorView& tmp,
                   const SingleDecodeOptions& options = {}, cudaStream_t stream = nullptr);

// -------------------------------------------------------------------------------------------------
// Batch prefill

enum class KvStorage { ragged, paged };

struct BatchPrefillConfig {
  KvStorage kv_storage = KvStorage::paged;
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim_qk = 0;
  int64_t head_dim_vo = 0;  ///< 0: head_dim_qk
  int64_t page_size = 0;    ///< paged: tokens per page (> 0); ragged: ignored
  DType q_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;
  std::optional<DType> o_dtype;  ///< default q_dtype
  KvLayout layout = KvLayout::nhd;
  bool causal = false;
  int64_t window_left = -1;
  double logits_soft_cap = 0.0;
  std::optional<double> sm_scale;
  AttentionBackend backend = AttentionBackend::automatic;
  /// CUDA-graph mode: FlashInfer pads the schedule so that a run captured in a graph stays valid
  /// when a later plan (same workspace, same or smaller batch) rewrites the int workspace.
  bool enable_cuda_graph = false;
  bool enable_pdl = false;
  int64_t fixed_split_size = -1;  ///< fa2 only; -1 off
  bool disable_split_kv = false;  ///< fa2 only
};

/// Host (int32) index arrays a prefill plan is made from.
struct PrefillIndptrs {
  TensorView qo_indptr;         ///< [batch + 1] query tokens
  TensorView kv_indptr;         ///< [batch + 1] kv tokens (ragged) or pages (paged)
  TensorView kv_last_page_len;  ///< paged only: [batch]
  /// Paged, optional: host copy of the page ids; run() then checks them against the cache's page count.
  OptionalTensor kv_indices = nullptr;
};

/// A FlashInfer batch-prefill plan: owns the module and FlashInfer's plan-info array; remembers what it
/// was planned for and refuses a run that differs (Error invalid_argument).
class BatchPrefillPlan {
 public:
  static BatchPrefillPlan create(const Runtime& rt, const Workspace& workspace, const PrefillIndptrs& indptrs,
                                 const BatchPrefillConfig& config, cudaStream_t stream = nullptr);
  BatchPrefillPlan(BatchPrefillPlan&&) noexcept;
  BatchPrefillPlan& operator=(BatchPrefillPlan&&) noexcept;
  ~BatchPrefillPlan();

  /// Ragged KV: q [total_q, H_qo, D_qk]; k, v [total_kv, H_kv, D] (NHD) or [H_kv, total_kv, D] (HND);
  /// qo_indptr, kv_indptr: device int32 copies of the planned host arrays; out [total_q, H_qo, D_vo].
  void run_ragged(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& qo_indptr,
                  const TensorView& kv_indptr, const TensorView& out, OptionalTensor lse = nullptr,
                  cudaStream_t stream = nullptr) const;
  /// Paged KV: the cache's indptr/last_page_len must hold the planned values (fa3 reads lengths from the
  /// plan, fa2 from these arrays); qo_indptr: device int32 copy of the planned host array.
  void run_paged(const TensorView& q, const PagedKvCache& kv, const TensorView& qo_indptr, const TensorView& out,
                 OptionalTensor lse = nullptr, cudaStream_t stream = nullptr) const;

  AttentionBackend backend() const;  ///< fa2 or fa3
  const std::string& module_uri() const;
  int64_t batch_size() const;
  int64_t total_q_tokens() const;
  std::vector<int64_t> plan_info() const;

  struct State;

 private:
  explicit BatchPrefillPlan(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

// -------------------------------------------------------------------------------------------------
// Batch decode

struct BatchDecodeConfig {
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t page_size = 0;
  DType q_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;
  std::optional<DType> o_dtype;
  KvLayout layout = KvLayout::nhd;
  int64_t window_left = -1;
  double logits_soft_cap = 0.0;
  std::optional<double> sm_scale;
  DecodeBackend backend = DecodeBackend::automatic;
  AttentionBackend prefill_backend = AttentionBackend::automatic;  ///< for the tensor-core path
  bool enable_cuda_graph = false;
  bool enable_pdl = false;
  /// Split-KV control of the tensor-core path's fa2 plan, as FlashInfer's decode wrapper takes them: each request's
  /// KV cut into chunks of fixed_split_size pages (-1: FlashInfer's choice), or never cut (disable_split_kv: no
  /// merge kernel after the attention, one CTA per request and KV head). The CUDA-core path (FlashInfer's decode
  /// plan) has neither; a plan that runs there refuses them, as fa3 does.
  int64_t fixed_split_size = -1;
  bool disable_split_kv = false;
};

/// Host (int32) page table of the batch: kv_indptr [batch + 1] (pages), kv_last_page_len [batch].
struct DecodeIndptrs {
  TensorView kv_indptr;
  TensorView kv_last_page_len;
  OptionalTensor kv_indices = nullptr;  ///< optional host page ids, checked against the cache at run
};

/// A FlashInfer batch-decode plan (one query token per request). On the tensor-core path the plan also
/// places the query indptr (0, 1, ..., batch) at the end of the int workspace (copied on `stream`).
class BatchDecodePlan {
 public:
  static BatchDecodePlan create(const Runtime& rt, const Workspace& workspace, const DecodeIndptrs& indptrs,
                                const BatchDecodeConfig& config, cudaStream_t stream = nullptr);
  BatchDecodePlan(BatchDecodePlan&&) noexcept;
  BatchDecodePlan& operator=(BatchDecodePlan&&) noexcept;
  ~BatchDecodePlan();

  /// q [batch, H_qo, D], out [batch, H_qo, D], lse optional f32 [batch, H_qo]; the cache's page table
  /// must hold the planned values.
  void run(const TensorView& q, const PagedKvCache& kv, const TensorView& out, OptionalTensor lse = nullptr,
           cudaStream_t stream = nullptr) const;

  bool uses_tensor_cores() const;
  AttentionBackend prefill_backend() const;  ///< fa2/fa3 on the tensor-core path
  const std::string& module_uri() const;
  int64_t batch_size() const;
  std::vector<int64_t> plan_info() const;

  struct State;

 private:
  explicit BatchDecodePlan(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace flashcpp
