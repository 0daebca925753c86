// DSA top-k: validation and argument packing for FlashInfer's `topk` module (radix_topk,
// radix_topk_page_table_transform, radix_topk_ragged_transform; csrc/topk.cu, include/flashinfer/topk.cuh).
#include "flashcpp/topk.hpp"

#include <numeric>
#include <string>

#include "ops/common.hpp"

namespace flashcpp {
namespace {

enum TopkFn { kRadixTopk = 0, kPageTableTransform = 1, kRaggedTransform = 2 };

ops::ResolvedModule topk_module(const Runtime& rt) {
  static const ops::ModuleKey key = ops::module_key(ops::ModuleFamily::topk);
  return ops::resolve_module(rt, key, [] { return std::string(ops::kTopkUri); },
                             {"radix_topk", "radix_topk_page_table_transform", "radix_topk_ragged_transform"});
}

constexpr int64_t kMaxElements = int64_t{0x7fffffff};  // FlashInfer's row offsets are 32-bit products
constexpr int64_t kBlockThreads = 1024;                 // the radix kernel's CTA

// FlashInfer's vector width for a row of max_len elements: gcd(16 bytes / element size, max_len) elements.
int64_t vec_elems(DType t, int64_t max_len) {
  return std::gcd(static_cast<int64_t>(16 / dtype_size(t)), max_len);
}

// The scores: CUDA, f32/f16/bf16, [rows, max_len] contiguous, max_len >= 1, below 2^31 elements, rows aligned to
// FlashInfer's vector loads. Returns max_len.
int64_t check_input(const Validator& v, const TensorView& input) {
  ops::check_cuda_tensor(v, input, "input");
  v.dtype(input, "input", {DType::f32, DType::f16, DType::bf16}).rank(input, "input", 2);
  const int64_t max_len = input.shape[1];
  if (max_len < 1) v.fail("input", "must have at least one column (max_len >= 1); got " + input.describe());
  v.contiguous(input, "input");
  if (input.numel() > kMaxElements)
    v.fail("input", "must have fewer than 2^31 elements (FlashInfer indexes rows in 32 bits); got " + input.describe());
  const int64_t vec = vec_elems(input.dtype, max_len);
  v.aligned(input, "input", static_cast<size_t>(vec * dtype_size(input.dtype)));
  return max_len;
}

// An i32 output [rows, k], k >= 1, contiguous, below 2^31 elements, on input's device. Returns k.
int64_t check_index_output(const Validator& v, const TensorView& out, const char* arg, const TensorView& input) {
  ops::check_same_device(v, out, arg, input, "input");
  v.dtype(out, arg, {DType::i32}).rank(out, arg, 2);
  v.dim(out, arg, 0, input.shape[0], "input.size(0)");
  const int64_t k = out.shape[1];
  if (k < 1) v.fail(arg, "must have k = size(1) >= 1; got " + out.describe());
  v.contiguous(out, arg);
  if (out.numel() > kMaxElements) v.fail(arg, "must have fewer than 2^31 elements; got " + out.describe());
  return k;
}

// The optional row-states workspace, or the rule that lets it be absent.
void check_row_states(const Validator& v, OptionalTensor row_states, const TensorView& input, int64_t max_len) {
  if (row_states) {
    ops::check_device_buffer(v, *row_states, "row_states", input, "input");
    v.min_bytes(*row_states, "row_states", kTopKRowStatesBytes).aligned(*row_states, "row_states", 4);
    return;
  }
  const int64_t single_cta = kBlockThreads * vec_elems(input.dtype, max_len);
  if (max_len > single_cta)
    v.fail("row_states", "must be given for rows longer than " + std::to_string(single_cta) + " elements (max_len " +
                             std::to_string(max_len) +
                             "): FlashInfer's radix path may split such a row over several CTAs, "
                             "which synchronize through it (kTopKRowStatesBytes, zero-filled)");
}

}  // namespace

void top_k(const Runtime& rt, const TensorView& input, const TensorView& indices, const TensorView& values,
           OptionalTensor row_states, cudaStream_t stream) {
  const Validator v("top_k");
  const int64_t d = check_input(v, input);
  const int64_t k = check_index_output(v, indices, "indices", input);
  if (k > d)
    v.fail("indices",
           "must have k = size(1) at most input.size(1) = " + std::to_string(d) + "; got " + indices.describe());
  ops::check_same_device(v, values, "values", input, "input");
  v.same_dtype(values, "values", input, "input").same_shape(values, "values", indices, "indices");
  v.contiguous(values, "values");
  check_row_states(v, row_states, input, d);
  v.no_overlap({{&indices, "indices"}, {&values, "values"}, {row_states, "row_states"}}, {{&input, "input"}});
  if (input.shape[0] == 0) return;
  const auto mod = topk_module(rt);
  const ops::CurrentDeviceScope device_scope(input.device.id);  // FlashInfer sets it and leaves it set
  ffi::invoke(mod.fns[kRadixTopk], ops::binding_for(input, stream), nullptr, input, indices, values, row_states, k);
}

void top_k_page_table_transform(const Runtime& rt, const TensorView& input, const TensorView& lengths,
                                const TensorView& src_page_table, const TensorView& output_page_table,
                                OptionalTensor row_to_batch, OptionalTensor row_states, cudaStream_t stream) {
  const Validator v("top_k_page_table_transform");
  const int64_t max_len = check_input(v, input);
  const int64_t rows = input.shape[0];
  const int64_t k = check_index_output(v, output_page_table, "output_page_table", input);
  ops::check_device_index_array(v, lengths, "lengths", rows, input, "input");
  ops::check_same_device(v, src_page_table, "src_page_table", input, "input");
  v.dtype(src_page_table, "src_page_table", {DType::i32}).rank(src_page_table, "src_page_table", 2);
  v.contiguous(src_page_table, "src_page_table");
  if (src_page_table.shape[1] < max_len)
    v.fail("src_page_table", "must have at least max_len = input.size(1) = " + std::to_string(max_len) +
                                 " columns; got " + src_page_table.describe());
  if (row_to_batch) {
    ops::check_device_index_array(v, *row_to_batch, "row_to_batch", rows, input, "input");
    if (rows != 0 && src_page_table.shape[0] < 1)
      v.fail("src_page_table",
             "must have at least one row (row_to_batch names its rows); got " + src_page_table.describe());
  } else {
    if (src_page_table.shape[0] < rows)
      v.fail("src_page_table", "must have a row per input row (" + std::to_string(rows) +
                                   ") when row_to_batch is absent; got " + src_page_table.describe());
  }
  check_row_states(v, row_states, input, max_len);
  v.no_overlap({{&output_page_table, "output_page_table"}, {row_states, "row_states"}},
               {{&input, "input"}, {&lengths, "lengths"}, {&src_page_table, "src_page_table"},
                {row_to_batch, "row_to_batch"}});
  if (rows == 0) return;
  const auto mod = topk_module(rt);
  const ops::CurrentDeviceScope device_scope(input.device.id);  // FlashInfer sets it and leaves it set
  ffi::invoke(mod.fns[kPageTableTransform], ops::binding_for(input, stream), nullptr, input, output_page_table,
              src_page_table, row_to_batch, lengths, row_states, k);
}

void top_k_ragged_transform(const Runtime& rt, const TensorView& input, const TensorView& offsets,
                            const TensorView& lengths, const TensorView& output_indices, OptionalTensor row_states,
                            cudaStream_t stream) {
  const Validator v("top_k_ragged_transform");
  const int64_t max_len = check_input(v, input);
  const int64_t rows = input.shape[0];
  const int64_t k = check_index_output(v, output_indices, "output_indices", input);
  ops::check_device_index_array(v, offsets, "offsets", rows, input, "input");
  ops::check_device_index_array(v, lengths, "lengths", rows, input, "input");
  check_row_states(v, row_states, input, max_len);
  v.no_overlap({{&output_indices, "output_indices"}, {row_states, "row_states"}},
               {{&input, "input"}, {&offsets, "offsets"}, {&lengths, "lengths"}});
  if (rows == 0) return;
  const auto mod = topk_module(rt);
  const ops::CurrentDeviceScope device_scope(input.device.id);  // FlashInfer sets it and leaves it set
  ffi::invoke(mod.fns[kRaggedTransform], ops::binding_for(input, stream), nullptr, input, output_indices, offsets,
              lengths, row_states, k);
}

}  // namespace flashcpp
