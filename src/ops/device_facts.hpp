// Internal helpers shared by the batch-MLA, GDN and fused-MoE ops (src/ops/{mla_attention,gdn,moe}.cpp).
#pragma once
#include <optional>

#include "flashcpp/cuda.hpp"

namespace flashcpp::ops {

/// The device facts these ops dispatch on. Read once per device (device_info caches them).
struct DeviceFacts {
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
};

/// Facts of `device`; a hook installed by set_device_facts_for_testing wins (CPU tests have no GPU).
DeviceFacts device_facts(int device);

/// Test seam: replaces device_facts for every device; nullptr restores the real query. Defined only in the
/// test-only library flashcpp_test_hooks (ops/test_hooks.hpp), not in libflashcpp.
using DeviceFactsFn = DeviceFacts (*)(int device);
void set_device_facts_for_testing(DeviceFactsFn fn);

/// Makes `device` current for a scope when a GPU is present. GDN prefill and the MoE runner use the
/// current device rather than their tensors' device, so flashcpp switches it for them. Without a GPU
/// there is nothing to switch (and no kernel can run); CPU tests use recording modules.
class CurrentDeviceScope {
 public:
  explicit CurrentDeviceScope(int device) {
    if (cuda_device_count() > 0) guard_.emplace(device);
  }

 private:
  std::optional<DeviceGuard> guard_;
};

}  // namespace flashcpp::ops
