// A tensor-parallel decode step over N GPUs with flashcpp and NCCL (the example `flashcpp_tp_decode`
// and the GPU test MultiGpu.TensorParallelStepMatchesOneGpu use this code).
//
// The step (one decode token for each of `batch` requests), per GPU of a world of N:
//   xn  = rmsnorm(x, ln_weight)                        replicated: every GPU holds the full hidden state
//   q_r = qk_rmsnorm(xn[:, heads of rank r], q_weight)  this GPU's query heads (stand-in for the
//                                                        column-parallel q projection flashcpp has no GEMM for)
//   o_r = batch_decode(q_r, paged KV of kv heads of r)   attention heads split across GPUs (GQA groups whole)
//   m_r = mla::sparse_decode(q_mla[heads of r], FP8 cache, indices)   sparse MLA heads split (e.g. 128 = 2 x 64);
//                                                        the latent KV cache is one head, replicated
// and then o = ncclAllGather(o_r), m = ncclAllGather(m_r) (rank-major), re-ordered on the host into the
// single-GPU head order and compared with the same step on one GPU.
//
// One process drives the N GPUs from N threads; the communicators come from ncclCommInitAll. NVLink
// multicast (NVLS) is switched off (NCCL_NVLS_ENABLE=0 set in the process before the communicators are
// created): the machines this runs on do not allow it.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "flashcpp/runtime.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp::tp {

struct StepShape {
  int64_t batch = 8;
  int64_t num_qo_heads = 32;  ///< hidden = num_qo_heads * head_dim
  int64_t num_kv_heads = 8;
  int64_t head_dim = 128;
  int64_t page_size = 16;
  int64_t max_kv_len = 1000;  ///< request i holds max(1, max_kv_len - 97 i) tokens
  double eps = 1e-6;
  bool mla = true;            ///< also run sparse MLA decode over the FP8 cache
  int64_t mla_heads = 128;
  int64_t mla_topk = 256;
  int64_t mla_blocks = 64, mla_block_size = 64;
};

/// Host inputs of one step (bf16 as raw bits), made deterministically from a seed.
struct StepInputs {
  StepShape shape;
  std::vector<int32_t> kv_lens, kv_indptr, kv_indices, kv_last_page_len;  // page table
  std::vector<uint16_t> x;              ///< [batch, hidden]
  std::vector<uint16_t> ln_weight;      ///< [hidden]
  std::vector<uint16_t> q_weight;       ///< [head_dim]
  std::vector<uint16_t> k_cache, v_cache;  ///< NHD [pages, page_size, num_kv_heads, head_dim]
  int64_t num_pages = 0;
  std::vector<uint16_t> mla_q;          ///< [batch, 1, mla_heads, 576]
  std::vector<uint8_t> mla_cache;       ///< [mla_blocks, mla_block_size, 1, 656] (V3.2 FP8)
  std::vector<int32_t> mla_indices;     ///< [batch, 1, mla_topk]
  double mla_sm_scale = 0;
};
/// Throws invalid_argument when the shape is not usable (sizes, multiples).
StepInputs make_inputs(const StepShape& shape, uint64_t seed);

/// Outputs in the single-GPU head order.
struct StepOutputs {
  std::vector<uint16_t> attn;  ///< [batch, num_qo_heads, head_dim] bf16
  std::vector<uint16_t> mla;   ///< [batch, 1, mla_heads, 512] bf16 (empty without MLA)
};

/// One GPU's share of the step: query heads, KV heads and MLA heads of rank `rank` of `world`. Owns
/// everything it uses on `device` (buffers, workspace, plans, stream): nothing is shared between devices.
class DeviceStep {
 public:
  /// Uploads the inputs of its shard and makes its plans (on its own stream). Throws invalid_argument
  /// when the heads do not split into `world` shards.
  DeviceStep(const Runtime& rt, const StepInputs& in, int device, int rank, int world);
  ~DeviceStep();
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  /// Poisons the outputs (0xFF: NaN) on the stream.
  void poison_outputs();
  /// rmsnorm -> qk rmsnorm -> batch decode -> sparse MLA decode, asynchronous on stream(). Whatever the
  /// calling thread's current device is: the ops run on this step's device.
  void enqueue();
  /// Synchronizes the stream and copies the rank-local outputs to the host (local head order).
  StepOutputs download();

  int device() const;
  cudaStream_t stream() const;
  TensorView attn_out() const;  ///< [batch, heads of this rank, head_dim]
  TensorView mla_out() const;   ///< [batch, 1, mla heads of this rank, 512] (undefined without MLA)
  int64_t qo_heads() const;
  int64_t mla_heads() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

/// The step on one GPU with all heads.
StepOutputs run_single_gpu(const Runtime& rt, const StepInputs& in, int device);

struct TpRun {
  StepOutputs out;                 ///< rank 0's gathered outputs, single-GPU head order
  bool ranks_agree = true;         ///< every rank received the same gathered bytes
  double ms_per_step = 0;          ///< wall time per step (compute + all-gather), after one warm-up
  std::string nccl_version;
};
/// The step across `devices` (one thread per GPU; NCCL communicators from ncclCommInitAll). Runs
/// `iterations` steps after one warm-up step and returns the last. Sets NCCL_NVLS_ENABLE=0.
TpRun run_tensor_parallel(const Runtime& rt, const StepInputs& in, std::span<const int> devices, int iterations = 1);

/// Element-wise |got - want| <= atol + rtol |want| over bf16 bits (NaN never passes).
struct Diff {
  int64_t n = 0, bad = 0, first_bad = -1;
  double max_abs = 0;
  std::string describe() const;
};
Diff compare_bf16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, double atol, double rtol);

float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace flashcpp::tp
