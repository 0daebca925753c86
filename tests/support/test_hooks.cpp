// The test-only library flashcpp_test_hooks: the device seams CPU tests use (pretended device counts and
// facts). The release libflashcpp exports none of them; it reads these overrides through test_overrides() when
// this library is in the process (src/core/test_hooks.hpp).
#include "core/test_hooks.hpp"

extern "C" {
// Found by name (kTestOverridesSymbol) from libflashcpp.
__attribute__((visibility("default"))) flashcpp::TestOverrides flashcpp_test_overrides;
}

namespace flashcpp {

void set_visible_devices_for_testing(int n) noexcept { flashcpp_test_overrides.visible_devices.store(n < 0 ? -1 : n); }

void set_device_facts_for_testing(DeviceFactsFn fn) noexcept {
  flashcpp_test_overrides.device_facts.store(fn);
  // Pretended facts come with pretended devices: fake cuda:N tensors reach the recording modules.
  set_visible_devices_for_testing(fn ? kMaxPretendDevices : -1);
}

}  // namespace flashcpp
