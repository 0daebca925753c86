// Division by a divisor fixed per launch, by a multiply-high and a shift: n / d for 0 <= n < 2^31 and
// 1 <= d < 2^31 (the round-up method of CUTLASS's FastDivmod). The FP8 decode producers split every index
// into page and slot; a 64-bit division per row cost more than the dequantization.
#pragma once
#include <cstdint>

namespace flashcpp::mla {

struct FastDivmod {
  uint32_t divisor = 1, multiplier = 0, shift = 0;
  FastDivmod() = default;
  explicit FastDivmod(uint32_t d) : divisor(d) {
    if (d <= 1) return;
    uint32_t log2_ceil = 0;
    while ((1ull << log2_ceil) < d) ++log2_ceil;
    const uint32_t p = 31 + log2_ceil;
    multiplier = static_cast<uint32_t>(((1ull << p) + d - 1) / d);
    shift = p - 32;
  }
#if defined(__CUDACC__)
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    // Both sides computed, then selected: a branch here made the callers' per-row code divergent, with the
    // multiplier and shift loaded per thread from the constant bank.
    const uint32_t q = __umulhi(n, multiplier) >> shift;
    return divisor == 1 ? n : q;
  }
#endif
  /// The same on the host (tests).
  uint32_t div_host(uint32_t n) const {
    return divisor == 1 ? n : static_cast<uint32_t>((static_cast<uint64_t>(n) * multiplier) >> 32) >> shift;
  }
};

}  // namespace flashcpp::mla
