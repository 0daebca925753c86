#include "flashcpp/dlpack.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include "core/check.hpp"
#include "flashcpp/error.hpp"

namespace flashcpp {
namespace {

// The managed tensor and everything it points to in one allocation, freed by the deleter.
struct ManagedHolder {
  DLManagedTensor managed{};
  int64_t shape[TensorView::kMaxRank]{};
  int64_t strides[TensorView::kMaxRank]{};
  std::shared_ptr<void> owner;
};

void delete_holder(DLManagedTensor* self) noexcept {
  if (self != nullptr) delete static_cast<ManagedHolder*>(self->manager_ctx);
}

const Validator kCheck("to_dlpack");

void check_view(const TensorView& view) {
  if (view.rank < 0 || view.rank > TensorView::kMaxRank)
    kCheck.fail("view", "must have rank in [0, " + std::to_string(TensorView::kMaxRank) + "]; got " +
                            std::to_string(view.rank));
  const DeviceType type = view.device.type;
  if ((type != DeviceType::cpu && type != DeviceType::cuda && type != DeviceType::cuda_host) ||
      (type == DeviceType::cuda && view.device.id < 0))
    kCheck.fail("view", "must be on cpu, cuda:<id >= 0> or cuda_host; got device type " +
                            std::to_string(static_cast<int32_t>(type)) + " id " + std::to_string(view.device.id));
  if (!view.extent_fits())
    kCheck.fail("view", view, "must have no negative size and a byte extent that fits in int64");
}

// Every element of `view` lies in [base, base + bytes).
void check_inside(const TensorView& view, const void* base, size_t bytes) {
  if (view.numel() == 0) return;
  // extent_fits() held, so each dim's reach and their sums fit in int64.
  int64_t low = 0, high = 0;  // element offsets of the lowest and the highest element
  for (int i = 0; i < view.rank; ++i) {
    const int64_t reach = (view.shape[i] - 1) * view.strides[i];
    (reach < 0 ? low : high) += reach;
  }
  const auto esize = static_cast<__int128>(dtype_size(view.dtype));
  const auto start = static_cast<__int128>(reinterpret_cast<uintptr_t>(view.data)) -
                     static_cast<__int128>(reinterpret_cast<uintptr_t>(base));
  if (start + low * esize < 0 || start + (high + 1) * esize > static_cast<__int128>(bytes))
    kCheck.fail("view", view, "must lie inside the buffer's " + std::to_string(bytes) + " bytes");
}

DLManagedTensor* make_managed(const TensorView& view, std::shared_ptr<void> owner) {
  auto holder = std::make_unique<ManagedHolder>();
  DLTensor& t = holder->managed.dl_tensor;
  t.data = view.data;
  switch (view.device.type) {
    case DeviceType::cpu: t.device = {kDLCPU, 0}; break;
    case DeviceType::cuda: t.device = {kDLCUDA, view.device.id}; break;
    case DeviceType::cuda_host: t.device = {kDLCUDAHost, 0}; break;
  }
  t.ndim = view.rank;
  t.dtype = {dtype_dlpack_code(view.dtype), dtype_bits(view.dtype), 1};
  for (int i = 0; i < view.rank; ++i) {
    holder->shape[i] = view.shape[i];
    holder->strides[i] = view.strides[i];
  }
  t.shape = holder->shape;
  t.strides = holder->strides;
  t.byte_offset = 0;
  holder->owner = std::move(owner);
  holder->managed.manager_ctx = holder.get();
  holder->managed.deleter = delete_holder;
  return &holder.release()->managed;
}

}  // namespace

DLManagedTensor* to_dlpack(DeviceBuffer&& buffer, const TensorView& view) {
  check_view(view);
  if (view.device != Device::cuda(buffer.device()))
    kCheck.fail("view", view, "must be on the buffer's device cuda:" + std::to_string(buffer.device()));
  check_inside(view, buffer.get(), buffer.size());
  // make_shared allocates before it moves: when allocation fails the buffer is still the caller's.
  return make_managed(view, std::make_shared<DeviceBuffer>(std::move(buffer)));
}

DLManagedTensor* to_dlpack(PinnedBuffer&& buffer, const TensorView& view) {
  check_view(view);
  if (!view.device.is_host()) kCheck.fail("view", view, "must be on cuda_host or cpu (pinned host memory)");
  check_inside(view, buffer.get(), buffer.size());
  return make_managed(view, std::make_shared<PinnedBuffer>(std::move(buffer)));
}

DLManagedTensor* to_dlpack(std::shared_ptr<void> owner, const TensorView& view) {
  check_view(view);
  return make_managed(view, std::move(owner));
}

}  // namespace flashcpp
