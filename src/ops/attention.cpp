// Public helpers of flashcpp/attention.hpp that prefill.cpp and decode.cpp share: the recommended workspace
// sizes, OwnedWorkspace, and the decode backend choice.
#include "flashcpp/attention.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

#include "flashcpp/error.hpp"

namespace flashcpp {

int64_t recommended_float_workspace_bytes() noexcept { return int64_t{128} << 20; }
int64_t recommended_int_workspace_bytes() noexcept { return int64_t{8} << 20; }

namespace {
// The size, once both are known to be positive: checked before anything is allocated.
size_t workspace_bytes(int64_t bytes, int64_t float_bytes, int64_t int_bytes) {
  if (float_bytes <= 0 || int_bytes <= 0)
    throw Error(ErrorCode::invalid_argument, "OwnedWorkspace: sizes must be > 0; got float_bytes " +
                                                 std::to_string(float_bytes) + ", int_bytes " + std::to_string(int_bytes));
  return static_cast<size_t>(bytes);
}
}  // namespace

OwnedWorkspace::OwnedWorkspace(int device_id, int64_t float_bytes, int64_t int_bytes)
    : float_(workspace_bytes(float_bytes, float_bytes, int_bytes), device_id),
      int_(static_cast<size_t>(int_bytes), device_id),
      pinned_(static_cast<size_t>(int_bytes)) {
  view_.float_buffer = TensorView::contiguous(float_.get(), DType::u8, Device::cuda(device_id), {float_bytes});
  view_.int_buffer = TensorView::contiguous(int_.get(), DType::u8, Device::cuda(device_id), {int_bytes});
  view_.pinned_int_buffer = TensorView::contiguous(pinned_.get(), DType::u8, Device::cuda_host(), {int_bytes});
}

bool decode_uses_tensor_cores(int64_t num_qo_heads, int64_t num_kv_heads, DecodeBackend backend) noexcept {
  switch (backend) {
    case DecodeBackend::cuda_cores: return false;
    case DecodeBackend::tensor_cores: return true;
    case DecodeBackend::automatic: break;
  }
  if (num_kv_heads <= 0 || num_qo_heads % num_kv_heads != 0) return true;
  const int64_t g = num_qo_heads / num_kv_heads;
  // Measured on the H200 (docs/PERFORMANCE.md): at group 4 the tensor-core path (FlashInfer's fa2 prefill
  // module) reads KV at 103% of the copy ceiling against 65% for the CUDA-core decode module.
  return g >= 4 || !(g == 1 || g == 2 || g == 3 || g == 8);
}

}  // namespace flashcpp
