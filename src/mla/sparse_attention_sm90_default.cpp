// Weak default for the fast Hopper kernel's entry point: "not handled", so the simple kernel runs.
// sparse_attention_sm90.cu provides the real (strong) definition; the linker then prefers it. Kept in
// its own translation unit so no caller can inline the weak body.
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::mla::kernels {

__attribute__((weak)) bool launch_sparse_attention_sm90(const SparseAttentionParams&, cudaStream_t) { return false; }

}  // namespace flashcpp::mla::kernels
