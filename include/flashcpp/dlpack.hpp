// DLPack out: hand a buffer flashcpp allocated (the convenience layer's outputs) to another framework as a
// DLManagedTensor that owns it. DLPack in is TensorView::from_dlpack (tensor.hpp).
#pragma once
#include <dlpack/dlpack.h>

#include <memory>

#include "flashcpp/cuda.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp {

/// A DLManagedTensor describing `view` that owns `buffer`: its deleter frees the buffer and the managed
/// tensor itself. The consumer (e.g. torch::from_dlpack / at::fromDLPack) calls the deleter exactly once.
/// Rules (Error(invalid_argument) naming the rule, and the buffer stays with the caller):
///  - view: rank in [0, kMaxRank], no negative size, byte extent fits in int64
///  - view.device == cuda:buffer.device()
///  - every element of the view lies inside the buffer's bytes (nothing is checked for an empty view)
/// The DLTensor gets data = view.data, byte_offset 0, strides always set (as PyTorch exports them).
/// Example: `auto outs = mla::sparse_prefill(q, kv, idx, nullptr, nullptr, options, stream);
///           DLManagedTensor* out = to_dlpack(std::move(outs.out), outs.out_view);`
DLManagedTensor* to_dlpack(DeviceBuffer&& buffer, const TensorView& view);

/// The same for page-locked host memory: view.device is cuda_host or cpu.
DLManagedTensor* to_dlpack(PinnedBuffer&& buffer, const TensorView& view);

/// The same for memory kept alive by any owner: the deleter releases `owner` (which may hold a custom
/// deleter). The view's range cannot be checked against an owner of unknown size: the caller vouches for it.
DLManagedTensor* to_dlpack(std::shared_ptr<void> owner, const TensorView& view);

}  // namespace flashcpp
