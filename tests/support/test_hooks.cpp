// The test-only library flashcpp_test_hooks: the device seams CPU tests use (pretended device counts and
// facts). The release libflashcpp exports none of them; it reads these overrides through
// ops::test_overrides() when this library is in the process (src/ops/test_hooks.hpp).
#include "ops/attention_plan.hpp"
#include "ops/common.hpp"
#include "ops/device_facts.hpp"
#include "ops/test_hooks.hpp"

extern "C" {
// Found by name (ops::kTestOverridesSymbol) from libflashcpp.
__attribute__((visibility("default"))) flashcpp::ops::TestOverrides flashcpp_test_overrides;
}

namespace flashcpp::ops {

void set_visible_devices_for_testing(int n) noexcept { flashcpp_test_overrides.visible_devices.store(n < 0 ? -1 : n); }

void set_device_cc_major_for_testing(int cc_major) noexcept {
  flashcpp_test_overrides.cc_major.store(cc_major);
  // Pretended facts come with pretended devices: fake cuda:N tensors reach the recording modules.
  set_visible_devices_for_testing(cc_major == -100 ? -1 : kMaxPretendDevices);
}

}  // namespace flashcpp::ops

namespace flashcpp::ops {

void set_device_facts_for_testing(DeviceFactsFn fn) {
  flashcpp_test_overrides.device_facts.store(fn);
  ops::set_visible_devices_for_testing(fn ? ops::kMaxPretendDevices : -1);
}

}  // namespace flashcpp::ops
