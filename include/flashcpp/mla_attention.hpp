// Batch MLA paged attention (DeepSeek's multi-head latent attention in its absorbed form) through
// FlashInfer's batch_mla module: plan once per batch layout, run many times.
//
//   auto plan = flashcpp::BatchMlaPlan::create(*rt, ws, qo_indptr_host, kv_indptr_host, kv_len_host,
//                                              {.num_heads = 128, .page_size = 64, .causal = true,
//                                               .sm_scale = 1 / std::sqrt(192.0)}, stream);
//   plan.run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indices, out, &lse, stream);
//
// Head dims are fixed: ckv (latent, also the output dim) 512, kpe (rope part) 64.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flashcpp/attention.hpp"  // Workspace
#include "flashcpp/dtype.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp {

inline constexpr int64_t kMlaHeadDimCkv = 512;
inline constexpr int64_t kMlaHeadDimKpe = 64;

/// Which FlashInfer implementation runs the attention.
enum class MlaBackend {
  automatic,  ///< sm90 on compute capability 9.x, fa2 elsewhere (FlashInfer's "auto")
  fa2,        ///< FlashAttention-2 style kernel (any supported GPU)
  sm90,       ///< Hopper kernel (compute capability 9.x only)
};

struct BatchMlaConfig {
  int64_t num_heads = 128;
  /// Tokens per KV-cache page (dim 1 of ckv_cache / kpe_cache).
  int64_t page_size = 64;
  /// dtype of q_nope, q_pe and out: f16 or bf16.
  DType q_dtype = DType::bf16;
  /// dtype of the ckv/kpe caches; must equal q_dtype (the only modules FlashInfer ships).
  DType kv_dtype = DType::bf16;
  /// Causal mask with queries aligned to the end of their request's KV (needs kv_len >= qo_len).
  bool causal = false;
  /// Softmax scale applied to q·k (finite, > 0); default 1/sqrt(kMlaHeadDimCkv + kMlaHeadDimKpe).
  /// FlashInfer uses the value as given; DeepSeek models use 1/sqrt(qk_nope_head_dim + qk_rope_head_dim).
  std::optional<double> sm_scale;
  /// LSE in natural log instead of FlashInfer's default log2.
  bool return_lse_base_on_e = false;
  MlaBackend backend = MlaBackend::automatic;
};

/// FlashInfer module URI of a batch MLA configuration (backend fa2 or sm90; idx int32, no profiler).
std::string batch_mla_uri(DType q_dtype, DType kv_dtype, DType o_dtype, MlaBackend backend);

/// A batch MLA plan: owns FlashInfer's plan info, remembers what it was planned for and refuses a
/// mismatched run. Moveable, not copyable. Thread-compatible (one stream at a time per plan).
class BatchMlaPlan {
 public:
  /// Plans a batch of `batch = kv_len_host.size(0)` requests.
  ///  qo_indptr_host: i32 [batch+1] host; query rows of request b are [qo_indptr[b], qo_indptr[b+1]).
  ///  kv_indptr_host: i32 [batch+1] host; request b owns kv_indices[kv_indptr[b] .. kv_indptr[b+1]) (pages).
  ///  kv_len_host:    i32 [batch] host; tokens of request b, <= its pages × page_size.
  /// Validated: everything above, workspace dtypes/devices/ranks, config ranges, backend vs device.
  /// The plan writes its schedule into the pinned buffer and copies it to int_buffer with
  /// cudaMemcpyAsync on `stream`: do not reuse pinned_int_buffer until `stream` reached it.
  /// Workspace: u8 buffers (float: 128 MiB recommended, int and pinned: 8 MiB), float/int on the CUDA
  /// device the attention runs on; the plan keeps the views and run() uses them.
  static BatchMlaPlan create(const Runtime& rt, const Workspace& workspace, const TensorView& qo_indptr_host,
                             const TensorView& kv_indptr_host, const TensorView& kv_len_host,
                             const BatchMlaConfig& config, cudaStream_t stream);

  /// Runs the planned attention. Shapes (n = total query rows, H = num_heads, P = pages):
  ///  q_nope [n, H, 512], q_pe [n, H, 64] (q_dtype; strides of dims 0-1 free, last dim contiguous)
  ///  ckv_cache [P, page_size, 512], kpe_cache [P, page_size, 64] (kv_dtype; last dim contiguous)
  ///  kv_indices i32 [>= kv_indptr[batch]] contiguous CUDA: page ids (values are not checked: device memory)
  ///  out [n, H, 512] (q_dtype); lse (optional) f32 [n, H] contiguous, log2 unless return_lse_base_on_e.
  /// All tensors on the workspace's device; 16-byte aligned data pointers.
  void run(const TensorView& q_nope, const TensorView& q_pe, const TensorView& ckv_cache, const TensorView& kpe_cache,
           const TensorView& kv_indices, const TensorView& out, OptionalTensor lse, cudaStream_t stream) const;

  int64_t batch_size() const;
  int64_t total_q_rows() const;
  int64_t total_pages() const;
  MlaBackend backend() const;  ///< resolved (never automatic)
  const std::string& uri() const;
  const BatchMlaConfig& config() const;
  /// FlashInfer's plan info (18 int64 entries, see the facts sheet A.11).
  std::vector<int64_t> plan_info() const;

  BatchMlaPlan(BatchMlaPlan&&) noexcept;
  BatchMlaPlan& operator=(BatchMlaPlan&&) noexcept;
  ~BatchMlaPlan();

  struct State;

 private:
  explicit BatchMlaPlan(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace flashcpp
