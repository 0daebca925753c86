// Host helpers the MLA front doors share (defined in mla.cpp): the tensor checks, the device gate, the kernel
// parameters every attention fills alike, and the decode launch (attention, then the combine of split requests).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <optional>

#include "core/check.hpp"
#include "flashcpp/mla.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::detail {

/// Defined, of one of `dtypes`, of rank `rank`, on a CUDA device, no negative strides.
void cuda_tensor(const Validator& v, const TensorView& t, const char* arg, std::initializer_list<DType> dtypes, int rank);
/// 16-byte aligned data and strides (other than the unit last one) that keep rows 16-byte aligned.
void vector_aligned(const Validator& v, const TensorView& t, const char* arg);
/// An optional contiguous vector of `len` elements of `dtype` on ref's device.
void optional_vector(const Validator& v, OptionalTensor t, const char* arg, DType dtype, int64_t len,
                     const TensorView& ref, const char* what);
/// Throws unsupported unless the MLA kernels can run on `device_id`.
void require_supported(const char* op, int device_id);
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
