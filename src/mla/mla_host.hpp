// Host helpers the MLA front doors share (mla_prefill.cpp, mla_decode.cpp, mla_quantize.cpp, dense_decode.cpp): the
// tensor checks, the device gate, the kernel launch, the parameters every attention fills alike (defined in mla.cpp),
// and the decode launch (attention, then the combine of split requests; mla_decode.cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "core/check.hpp"
#include "flashcpp/mla.hpp"
#include "mla/launch_plan.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::detail {

using kernels::kernel_support;

inline constexpr int64_t kMaxHeads = 1024;  ///< h_q limit of every MLA entry point
inline constexpr int kMaxSms = 4096;        ///< num_sms limit of the decode configs (the plan buffers grow with it)

/// Defined, of one of `dtypes`, of rank `rank`, on a CUDA device, no negative strides.
void cuda_tensor(const Validator& v, const TensorView& t, const char* arg, std::initializer_list<DType> dtypes, int rank);
/// 16-byte aligned data and strides (other than the unit last one) that keep rows 16-byte aligned.
void vector_aligned(const Validator& v, const TensorView& t, const char* arg);
/// An optional contiguous vector of `len` elements of `dtype` on ref's device.
void optional_vector(const Validator& v, OptionalTensor t, const char* arg, DType dtype, int64_t len,
                     const TensorView& ref, const char* what);
/// topk: a positive multiple of 64 that fits int32.
void validate_topk(const Validator& v, int64_t topk, const char* arg);
/// The page rules of a V4 cache view [num_blocks, block_size, 1, 584] (FlashMLA's view of its pages).
void v4_page_rules(const Validator& v, const TensorView& t, const char* arg);
/// A plan's run (or plan) refuses a CUDA tensor of another device than the plan's, naming it and the plan's device.
void require_plan_device(const char* op, const TensorView& t, const char* arg, int plan_device);
/// Where a cache quantizer or dequantizer runs: true for host memory (both tensors), false for one CUDA device; `out`
/// never overlaps the source `src` (named `src_arg` in messages).
bool converter_on_host(const Validator& v, const TensorView& src, const char* src_arg, const TensorView& out);
/// The SM count a plan-size query schedules for: config_num_sms when > 0, else `num_sms`; either way in
/// [1, kMaxSms] (argument "num_sms").
int planned_sms(const Validator& v, int config_num_sms, int num_sms);
/// Throws unsupported unless the MLA kernels can run on `device_id`.
void require_supported(std::string_view op, int device_id);
/// cuda_check of cudaGetLastError() after a launch.
void check_launch(const char* what);
/// Runs the attention, split-KV or not, as choose() plans it (unsupported if the plan cannot launch).
void run_attention(const kernels::SparseAttentionParams& p, cudaStream_t stream, int device_id);
/// The softmax scale a call uses: the caller's, or 1/sqrt(d_qk).
double resolved_sm_scale(const std::optional<double>& sm_scale, int64_t d_qk);
/// The parameters prefill and decode fill alike; `token_dim` is the dim the tokens run along (heads follow it).
kernels::SparseAttentionParams attention_params(int token_dim, int64_t num_tokens, const TensorView& q,
                                                const TensorView& indices, const TensorView& out,
                                                const TensorView& lse, OptionalTensor attn_sink, double sm_scale);
/// Launches the attention on the selected kernel and, for split plans, the combine.
void launch_decode(const kernels::SparseAttentionParams& p, const DecodePlanSizes& sizes, int device_id,
                   cudaStream_t stream);

}  // namespace flashcpp::mla::detail
