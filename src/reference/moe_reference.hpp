// float64 CPU reference of the CUTLASS fused MoE (include/flashcpp/moe.hpp). FP8 values are decoded
// exactly (e4m3 bits × their scale) and the intermediate results are rounded where the kernel stores
// them: fc1 output in the output dtype, the activation in the fc2 input type (16-bit; e4m3 after
// ×fc2_quant for fp8_per_tensor; bf16 then per-token 1×128 e4m3 blocks with scale amax/448 for the
// DeepSeek block-scale path, whose input is quantized the same way).
#pragma once
#include <vector>

#include "flashcpp/moe.hpp"

namespace flashcpp::reference {

/// Host views with the shapes and dtypes FusedMoeTensors documents (fc1_input_dequant is not used:
/// the fp8 input is taken as given and fc1_dequant holds the combined input × weight scale). Of `options`,
/// activation and ep_rank are read (tp_size, tp_rank and enable_pdl are not).
void fused_moe_reference(const FusedMoeConfig& config, const FusedMoeTensors& tensors, const FusedMoeOptions& options,
                         std::vector<double>& out, int threads = 1);

/// act(x) of a non-gated activation, or act(gate) for a gated one (silu for swiglu, gelu for geglu).
double moe_activation(MoeActivation a, double x) noexcept;

}  // namespace flashcpp::reference
