// One value per visible CUDA device, made once on first use (thread-safe, lock-free afterwards): the one shape of
// every per-device cache (device_facts, the MLA kernels' support).
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>

namespace flashcpp {

template <class T>
class PerDevice {
 public:
  /// Slots for devices [0, count).
  explicit PerDevice(int count)
      : once_(new std::once_flag[static_cast<size_t>(count)]), values_(new T[static_cast<size_t>(count)]) {}

  /// The value of `device_id` (in [0, count): the caller checks), made by init(device_id, value) the first time. An
  /// init that throws leaves the slot unmade: the next call tries again.
  template <class Init>
  const T& get(int device_id, Init&& init) {
    const auto i = static_cast<size_t>(device_id);
    std::call_once(once_[i], [&] { init(device_id, values_[i]); });
    return values_[i];
  }

 private:
  std::unique_ptr<std::once_flag[]> once_;
  std::unique_ptr<T[]> values_;
};

}  // namespace flashcpp
