// Cascade merges of attention states: validation and argument packing for FlashInfer's `cascade` module
// (merge_state, merge_state_in_place, merge_states; csrc/cascade.cu, include/flashinfer/attention/cascade.cuh).
#include "flashcpp/cascade.hpp"

#include <algorithm>

#include "ops/common.hpp"

namespace flashcpp {
namespace {

enum CascadeFn { kMergeState = 0, kMergeStateInPlace = 1, kMergeStates = 2 };

ops::ResolvedModule cascade_module(const Runtime& rt) {
  static const ops::ModuleKey key = ops::module_key(ops::ModuleFamily::cascade);
  return ops::resolve_module(rt, key, [] { return std::string(ops::kCascadeUri); },
                             {"merge_state", "merge_state_in_place", "merge_states"});
}

// A v tensor of `rank` dims: CUDA, f16/bf16, contiguous (the kernels index (token, [set,] head) rows densely),
// head_dim one FlashInfer dispatches. Returns head_dim.
int64_t check_values(const Validator& v, const TensorView& t, const char* arg, int rank) {
  ops::check_cuda_tensor(v, t, arg);
  v.dtype(t, arg, {DType::f16, DType::bf16}).rank(t, arg, rank).contiguous(t, arg).aligned(t, arg, 16);
  const int64_t d = t.shape[rank - 1];
  v.one_of(d, std::string(arg) + ".size(-1) (head_dim)", {64, 128, 256, 512});
  return d;
}

// An s tensor: f32, contiguous, the leading dims of its v.
void check_lse(const Validator& v, const TensorView& s, const char* arg, const TensorView& values, const char* varg) {
  ops::check_same_device(v, s, arg, values, varg);
  v.dtype(s, arg, {DType::f32}).rank(s, arg, values.rank - 1).contiguous(s, arg);
  for (int i = 0; i + 1 < values.rank; ++i) v.dim(s, arg, i, values.shape[i], varg);
}

void check_same_values(const Validator& v, const TensorView& t, const char* arg, const TensorView& ref,
                       const char* ref_arg) {
  ops::check_same_device(v, t, arg, ref, ref_arg);
  v.same_dtype(t, arg, ref, ref_arg).same_shape(t, arg, ref, ref_arg).contiguous(t, arg).aligned(t, arg, 16);
}

// FlashInfer's block of these kernels is (head_dim / vec) x heads threads, vec = max(16 / 2 bytes, head_dim / 32).
void check_block_threads(const Validator& v, int64_t heads, int64_t head_dim, const char* arg) {
  const int64_t lanes = head_dim / std::max<int64_t>(8, head_dim / 32);
  v.require(heads >= 1 && heads * lanes <= 1024, arg,
            "must have at most " + std::to_string(1024 / lanes) + " heads for head_dim " + std::to_string(head_dim) +
                " (FlashInfer's block holds every head of a token: heads x " + std::to_string(lanes) +
                " threads <= 1024); got " + std::to_string(heads));
}

void check_grid(const Validator& v, int64_t tokens, const char* arg) {
  v.require(tokens <= int64_t{0x7fffffff}, arg, "must have fewer than 2^31 tokens (the kernel's grid)");
}

}  // namespace

void merge_state(const Runtime& rt, const TensorView& v_a, const TensorView& s_a, const TensorView& v_b,
                 const TensorView& s_b, const TensorView& v_merged, const TensorView& s_merged, cudaStream_t stream) {
  const Validator v("merge_state");
  const int64_t d = check_values(v, v_a, "v_a", 3);
  check_same_values(v, v_b, "v_b", v_a, "v_a");
  check_same_values(v, v_merged, "v_merged", v_a, "v_a");
  check_lse(v, s_a, "s_a", v_a, "v_a");
  check_lse(v, s_b, "s_b", v_a, "v_a");
  check_lse(v, s_merged, "s_merged", v_a, "v_a");
  check_block_threads(v, v_a.shape[1], d, "v_a");
  check_grid(v, v_a.shape[0], "v_a");
  v.no_overlap({{&v_merged, "v_merged"}, {&s_merged, "s_merged"}},
               {{&v_a, "v_a"}, {&s_a, "s_a"}, {&v_b, "v_b"}, {&s_b, "s_b"}});
  if (v_a.shape[0] == 0) return;
  const auto mod = cascade_module(rt);
  ffi::invoke(mod.fns[kMergeState], ops::binding_for(v_a, stream), nullptr, v_a, s_a, v_b, s_b, v_merged, s_merged);
}

void merge_state_in_place(const Runtime& rt, const TensorView& v, const TensorView& s, const TensorView& v_other,
                          const TensorView& s_other, const TensorView* mask, cudaStream_t stream) {
  const Validator val("merge_state_in_place");
  const int64_t d = check_values(val, v, "v", 3);
  check_same_values(val, v_other, "v_other", v, "v");
  check_lse(val, s, "s", v, "v");
  check_lse(val, s_other, "s_other", v, "v");
  if (mask) {
    ops::check_same_device(val, *mask, "mask", v, "v");
    val.dtype(*mask, "mask", {DType::u8, DType::boolean}).rank(*mask, "mask", 1).contiguous(*mask, "mask");
    val.dim(*mask, "mask", 0, v.shape[0], "v.size(0)");
  }
  check_block_threads(val, v.shape[1], d, "v");
  check_grid(val, v.shape[0], "v");
  val.no_overlap({{&v, "v"}, {&s, "s"}}, {{&v_other, "v_other"}, {&s_other, "s_other"}, {mask, "mask"}});
  if (v.shape[0] == 0) return;
  const auto mod = cascade_module(rt);
  ffi::invoke(mod.fns[kMergeStateInPlace], ops::binding_for(v, stream), nullptr, v, s, v_other, s_other, mask);
}

void merge_states(const Runtime& rt, const TensorView& v, const TensorView& s, const TensorView& v_merged,
                  const TensorView& s_merged, cudaStream_t stream) {
  const Validator val("merge_states");
  val.rank(v, "v", 4).require(v.shape[1] >= 1, "v", "must have at least one index set (dim 1)");
  const int64_t d = check_values(val, v, "v", 4);
  check_lse(val, s, "s", v, "v");
  const int64_t tokens = v.shape[0], sets = v.shape[1], heads = v.shape[2];
  ops::check_same_device(val, v_merged, "v_merged", v, "v");
  val.same_dtype(v_merged, "v_merged", v, "v").shape(v_merged, "v_merged", {tokens, heads, d});
  val.contiguous(v_merged, "v_merged").aligned(v_merged, "v_merged", 16);
  ops::check_same_device(val, s_merged, "s_merged", v, "v");
  val.dtype(s_merged, "s_merged", {DType::f32}).shape(s_merged, "s_merged", {tokens, heads});
  val.contiguous(s_merged, "s_merged");
  // Fewer index sets than tokens: one block per token holding all its heads; otherwise one per (token, head).
  if (sets < tokens) check_block_threads(val, heads, d, "v");
  else val.require(heads <= 65535, "v", "must have at most 65535 heads (the kernel's grid y)");
  check_grid(val, tokens, "v");
  val.no_overlap({{&v_merged, "v_merged"}, {&s_merged, "s_merged"}}, {{&v, "v"}, {&s, "s"}});
  if (tokens == 0) return;
  const auto mod = cascade_module(rt);
  ffi::invoke(mod.fns[kMergeStates], ops::binding_for(v, stream), nullptr, v, s, v_merged, s_merged);
}

}  // namespace flashcpp
