// Device overrides for CPU tests, kept out of the release library's exported symbols: they are defined by
// the test-only library flashcpp_test_hooks (tests/support/test_hooks.cpp, which also defines the
// set_*_for_testing seams), and libflashcpp finds them by name, once, when that library is in the process.
// In every other process test_overrides() is nullptr and the real device facts apply.
#pragma once
#include <atomic>

#include "ops/device_facts.hpp"

namespace flashcpp::ops {

struct TestOverrides {
  std::atomic<int> visible_devices{-1};  ///< >= 0: pretend this many visible CUDA devices
  std::atomic<int> cc_major{-100};       ///< != -100: every device has this compute capability major (-1: none)
  std::atomic<ops::DeviceFactsFn> device_facts{nullptr};  ///< replaces ops::device_facts
};

/// The name under which the test-only library defines its TestOverrides (extern "C").
inline constexpr const char* kTestOverridesSymbol = "flashcpp_test_overrides";

/// The test-only library's overrides when it is loaded, else nullptr (looked up once per process).
const TestOverrides* test_overrides() noexcept;

}  // namespace flashcpp::ops
