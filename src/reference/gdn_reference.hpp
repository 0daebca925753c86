// float64 CPU reference of FlashInfer's GDN (gated delta rule) prefill; see include/flashcpp/gdn.hpp.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "flashcpp/tensor.hpp"

namespace flashcpp::reference {

/// Host inputs: q [T, Hq, D], k [T, Hk, D], v [T, Hv, D] (f16/bf16/f32), cu_seqlens [N+1],
/// input_state [N, Hsab, D, D] f32 (V-major: [.., v, k]) or nullptr, alpha/beta [T, Hsab] f32 or nullptr.
/// Head h of Hsab = max(Hq, Hv) reads q head h / (Hsab/Hq), k head h / (Hsab/Hk), v head h / (Hsab/Hv).
/// Writes out [T, Hsab, D] and state [N, Hsab, D, D] (V-major, like output_state).
struct GdnReferenceInputs {
  TensorView q, k, v;
  std::span<const int64_t> cu_seqlens;
  OptionalTensor input_state = nullptr, alpha = nullptr, beta = nullptr;
  double scale = 0.0;  ///< 0: 1/sqrt(D)
};
void gdn_prefill_reference(const GdnReferenceInputs& in, std::vector<double>& out, std::vector<double>& state,
                           int threads = 1);

}  // namespace flashcpp::reference
