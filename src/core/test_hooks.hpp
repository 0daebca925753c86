// Device overrides for CPU tests, kept out of the release library's exported symbols: they are defined by
// the test-only library flashcpp_test_hooks (tests/support/test_hooks.cpp, which also defines the
// set_*_for_testing seams declared here), and libflashcpp finds them by name, once, when that library is in the
// process. In every other process test_overrides() is nullptr and the real device facts apply.
#pragma once
#include <atomic>

#include "flashcpp/cuda.hpp"

namespace flashcpp {

/// A pretended device's facts: replaces device_facts() for every device id while installed.
using DeviceFactsFn = const DeviceFacts& (*)(int device);

struct TestOverrides {
  std::atomic<int> visible_devices{-1};          ///< >= 0: pretend this many visible CUDA devices
  std::atomic<DeviceFactsFn> device_facts{nullptr};  ///< replaces device_facts()
};

/// The name under which the test-only library defines its TestOverrides (extern "C").
inline constexpr const char* kTestOverridesSymbol = "flashcpp_test_overrides";

/// The test-only library's overrides when it is loaded, else nullptr (looked up once per process).
const TestOverrides* test_overrides() noexcept;

/// CUDA device ids the ops accept: [0, visible_device_count()). This is cuda_device_count() unless a test set it
/// (set_visible_devices_for_testing; set_device_facts_for_testing also makes every id below kMaxPretendDevices
/// visible while it is active, so CPU tests can drive recording modules with fake cuda:N tensors).
int visible_device_count() noexcept;
inline constexpr int kMaxPretendDevices = 64;

/// Test seams, defined only in the test-only library flashcpp_test_hooks, not in libflashcpp.
/// n >= 0 pretends n visible devices; -1 restores the real count.
void set_visible_devices_for_testing(int n) noexcept;
/// Replaces device_facts() for every device (a pretended GPU; cc_major -1: a device whose compute capability is
/// unknown, as on a machine without a GPU); nullptr restores the real query.
void set_device_facts_for_testing(DeviceFactsFn fn) noexcept;

}  // namespace flashcpp
