// RoPE: validation and argument packing for FlashInfer's `rope` module (apply_rope_pos_ids,
// apply_llama31_rope_pos_ids, apply_rope_pos_ids_cos_sin_cache; csrc/rope.cu, include/flashinfer/pos_enc.cuh).
#include "flashcpp/rope.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "ops/common.hpp"

namespace flashcpp {
namespace {

enum RopeFn { kPosIds = 0, kLlama31PosIds = 1, kCosSinCache = 2 };

ops::ResolvedModule rope_module(const Runtime& rt) {
  static const ops::ModuleKey key = ops::module_key(ops::ModuleFamily::rope);
  return ops::resolve_module(rt, key, [] { return std::string(ops::kRopeUri); },
                             {"apply_rope_pos_ids", "apply_llama31_rope_pos_ids", "apply_rope_pos_ids_cos_sin_cache"});
}

// One of q, k, q_rope, k_rope: rank 3, last dim contiguous, rows and head strides on 16-byte boundaries (the
// kernels move 16-byte vectors).
void check_heads_tensor(const Validator& v, const TensorView& t, const char* arg) {
  ops::check_cuda_tensor(v, t, arg);
  v.rank(t, arg, 3).last_dim_contiguous(t, arg).aligned(t, arg, 16);
  for (int d = 0; d < 2; ++d)
    if (t.strides[d] % 8 != 0) v.fail(arg, t, "must have strides in dims 0 and 1 that are multiples of 8 elements");
}

// The rules every RoPE op shares; returns head_dim.
int64_t check_rope_io(const Validator& v, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                      const TensorView& k_rope, const TensorView& pos_ids) {
  check_heads_tensor(v, q, "q");
  v.dtype(q, "q", {DType::f16, DType::bf16});
  check_heads_tensor(v, k, "k");
  ops::check_same_device(v, k, "k", q, "q");
  v.same_dtype(k, "k", q, "q").dim(k, "k", 0, q.shape[0], "q.size(0)").dim(k, "k", 2, q.shape[2], "q.size(2)");
  for (const auto& [out, out_arg, in, in_arg] :
       {std::tuple{&q_rope, "q_rope", &q, "q"}, std::tuple{&k_rope, "k_rope", &k, "k"}}) {
    check_heads_tensor(v, *out, out_arg);
    ops::check_same_device(v, *out, out_arg, q, "q");
    v.same_dtype(*out, out_arg, q, "q").same_shape(*out, out_arg, *in, in_arg);
  }
  ops::check_same_device(v, pos_ids, "pos_ids", q, "q");
  v.dtype(pos_ids, "pos_ids", {DType::i32, DType::i64}).rank(pos_ids, "pos_ids", 1).contiguous(pos_ids, "pos_ids");
  v.dim(pos_ids, "pos_ids", 0, q.shape[0], "q.size(0)");
  const int64_t head_dim = q.shape[2];
  v.one_of(head_dim, "q.size(2) (head_dim)", {64, 128, 256, 512});
  v.require(q.shape[1] >= 1 && k.shape[1] >= 1 && q.shape[1] + k.shape[1] <= 65535, "k",
            "must have at least one head, and H_q + H_k at most 65535 (the kernel's grid y)");
  v.require(q.shape[0] <= int64_t{0x7fffffff}, "q", "must have fewer than 2^31 tokens");
  // Each output may be exactly its input (in place), never a partial overlap; no other sharing.
  v.disjoint(q_rope, "q_rope", q, "q", Validator::InPlace::allowed);
  v.disjoint(k_rope, "k_rope", k, "k", Validator::InPlace::allowed);
  v.no_overlap({{&q_rope, "q_rope"}, {&k_rope, "k_rope"}}, {{&pos_ids, "pos_ids"}});
  v.disjoint(q_rope, "q_rope", k, "k").disjoint(k_rope, "k_rope", q, "q");
  return head_dim;
}

// rotary_dim: even, <= head_dim, whole kernel vectors (NeoX: whole vectors in each half).
void check_rotary_dim(const Validator& v, int64_t rotary_dim, int64_t head_dim, bool interleave, const char* arg) {
  const int64_t vec = std::max<int64_t>(8, head_dim / 32), step = interleave ? vec : 2 * vec;
  v.require(rotary_dim >= step && rotary_dim <= head_dim && rotary_dim % step == 0, arg,
            "must be a multiple of " + std::to_string(step) + " (the kernel's " + std::to_string(vec) +
                "-element vectors" + (interleave ? "" : ", in each half") + ") in [" + std::to_string(step) + ", " +
                std::to_string(head_dim) + "] (head_dim); got " + std::to_string(rotary_dim));
}

int64_t resolved_rotary_dim(const Validator& v, const RopeOptions& o, int64_t head_dim) {
  const int64_t rd = o.rotary_dim == 0 ? head_dim : o.rotary_dim;
  check_rotary_dim(v, rd, head_dim, o.interleave, "rotary_dim");
  v.positive(o.rope_scale, "rope_scale").positive(o.rope_theta, "rope_theta");
  return rd;
}

}  // namespace

void apply_rope_pos_ids(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                        const TensorView& k_rope, const TensorView& pos_ids, const RopeOptions& o, cudaStream_t stream) {
  const Validator v("apply_rope_pos_ids");
  const int64_t head_dim = check_rope_io(v, q, k, q_rope, k_rope, pos_ids);
  const int64_t rd = resolved_rotary_dim(v, o, head_dim);
  if (q.shape[0] == 0) return;
  const auto mod = rope_module(rt);
  ffi::invoke(mod.fns[kPosIds], ops::binding_for(q, stream), nullptr, q, k, q_rope, k_rope, pos_ids, rd, o.interleave,
              o.rope_scale, o.rope_theta);
}

void apply_llama31_rope_pos_ids(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                                const TensorView& k_rope, const TensorView& pos_ids, const RopeOptions& o,
                                const Llama31RopeScaling& s, cudaStream_t stream) {
  const Validator v("apply_llama31_rope_pos_ids");
  const int64_t head_dim = check_rope_io(v, q, k, q_rope, k_rope, pos_ids);
  const int64_t rd = resolved_rotary_dim(v, o, head_dim);
  v.positive(s.low_freq_factor, "low_freq_factor").positive(s.old_context_length, "old_context_length");
  v.finite(s.high_freq_factor, "high_freq_factor");
  v.require(s.high_freq_factor > s.low_freq_factor, "high_freq_factor",
            "must be above low_freq_factor (" + std::to_string(s.low_freq_factor) + "): the blend divides by their "
            "difference; got " + std::to_string(s.high_freq_factor));
  if (q.shape[0] == 0) return;
  const auto mod = rope_module(rt);
  ffi::invoke(mod.fns[kLlama31PosIds], ops::binding_for(q, stream), nullptr, q, k, q_rope, k_rope, pos_ids, rd,
              o.interleave, o.rope_scale, o.rope_theta, s.low_freq_factor, s.high_freq_factor, s.old_context_length);
}

void apply_rope_with_cos_sin_cache(const Runtime& rt, const TensorView& q, const TensorView& k,
                                   const TensorView& q_rope, const TensorView& k_rope, const TensorView& cos_sin_cache,
                                   const TensorView& pos_ids, bool interleave, cudaStream_t stream) {
  const Validator v("apply_rope_with_cos_sin_cache");
  const int64_t head_dim = check_rope_io(v, q, k, q_rope, k_rope, pos_ids);
  ops::check_same_device(v, cos_sin_cache, "cos_sin_cache", q, "q");
  v.dtype(cos_sin_cache, "cos_sin_cache", {DType::f32}).rank(cos_sin_cache, "cos_sin_cache", 2);
  v.contiguous(cos_sin_cache, "cos_sin_cache").aligned(cos_sin_cache, "cos_sin_cache", 16);
  v.require(cos_sin_cache.shape[0] >= 1, "cos_sin_cache", "must have at least one position row");
  check_rotary_dim(v, cos_sin_cache.shape[1], head_dim, interleave, "cos_sin_cache.size(1) (rotary_dim)");
  v.no_overlap({{&q_rope, "q_rope"}, {&k_rope, "k_rope"}}, {{&cos_sin_cache, "cos_sin_cache"}});
  if (q.shape[0] == 0) return;
  const auto mod = rope_module(rt);
  ffi::invoke(mod.fns[kCosSinCache], ops::binding_for(q, stream), nullptr, q, k, q_rope, k_rope, cos_sin_cache,
              pos_ids, interleave);
}

}  // namespace flashcpp
