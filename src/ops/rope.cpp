// RoPE: validation and argument packing for FlashInfer's `rope` module (apply_rope_pos_ids,
// apply_llama31_rope_pos_ids, apply_rope_pos_ids_cos_sin_cache, apply_rope, apply_llama31_rope, rope_quantize,
// rope_quantize_append_paged_kv_cache; csrc/rope.cu, include/flashinfer/pos_enc.cuh).
#include "flashcpp/rope.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <tuple>

#include "ops/common.hpp"

namespace flashcpp {
namespace {

enum RopeFn {
  kPosIds = 0,
  kLlama31PosIds = 1,
  kCosSinCache = 2,
  kRagged = 3,
  kLlama31Ragged = 4,
  kQuantize = 5,
  kQuantizeAppend = 6
};

ops::ResolvedModule rope_module(const Runtime& rt) {
  static const ops::ModuleKey key = ops::module_key(ops::ModuleFamily::rope);
  return ops::resolve_module(rt, key, [] { return std::string(ops::kRopeUri); },
                             {"apply_rope_pos_ids", "apply_llama31_rope_pos_ids", "apply_rope_pos_ids_cos_sin_cache",
                              "apply_rope", "apply_llama31_rope", "rope_quantize",
                              "rope_quantize_append_paged_kv_cache"});
}

// One of q, k, q_rope, k_rope: rank 3, last dim contiguous, rows and head strides on 16-byte boundaries (the
// kernels move 16-byte vectors).
void check_heads_tensor(const Validator& v, const TensorView& t, const char* arg) {
  ops::check_cuda_tensor(v, t, arg);
  v.rank(t, arg, 3).last_dim_contiguous(t, arg).aligned(t, arg, 16);
  for (int d = 0; d < 2; ++d)
    if (t.strides[d] % 8 != 0) v.fail(arg, t, "must have strides in dims 0 and 1 that are multiples of 8 elements");
}

// The rules every RoPE op on whole heads shares (q, k and their outputs); returns head_dim.
int64_t check_rope_tensors(const Validator& v, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                           const TensorView& k_rope) {
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
  const int64_t head_dim = q.shape[2];
  v.one_of(head_dim, "q.size(2) (head_dim)", {64, 128, 256, 512});
  v.require(q.shape[1] >= 1 && k.shape[1] >= 1, "k", "must have at least one head, as must q");
  v.require(q.shape[0] <= int64_t{0x7fffffff}, "q", "must have fewer than 2^31 tokens");
  // Each output may be exactly its input (in place), never a partial overlap; no other sharing.
  v.disjoint(q_rope, "q_rope", q, "q", Validator::InPlace::allowed);
  v.disjoint(k_rope, "k_rope", k, "k", Validator::InPlace::allowed);
  v.disjoint(q_rope, "q_rope", k, "k").disjoint(k_rope, "k_rope", q, "q");
  v.no_overlap({{&q_rope, "q_rope"}, {&k_rope, "k_rope"}}, {});
  return head_dim;
}

// The pos_ids ops' rules; returns head_dim.
int64_t check_rope_io(const Validator& v, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                      const TensorView& k_rope, const TensorView& pos_ids) {
  const int64_t head_dim = check_rope_tensors(v, q, k, q_rope, k_rope);
  ops::check_same_device(v, pos_ids, "pos_ids", q, "q");
  v.dtype(pos_ids, "pos_ids", {DType::i32, DType::i64}).rank(pos_ids, "pos_ids", 1).contiguous(pos_ids, "pos_ids");
  v.dim(pos_ids, "pos_ids", 0, q.shape[0], "q.size(0)");
  v.require(q.shape[1] + k.shape[1] <= 65535, "k", "must have at least one head, and H_q + H_k at most 65535 (the "
            "kernel's grid y)");
  v.no_overlap({{&q_rope, "q_rope"}, {&k_rope, "k_rope"}}, {{&pos_ids, "pos_ids"}});
  return head_dim;
}

// The ragged ops' rules (indptr [batch + 1] and offsets [batch], on the device, both int32 or both int64); returns
// head_dim. The kernel launches one block per (request, head): batch x (H_q + H_k) blocks in grid x.
int64_t check_ragged_rope_io(const Validator& v, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                             const TensorView& k_rope, const TensorView& indptr, const TensorView& offsets) {
  const int64_t head_dim = check_rope_tensors(v, q, k, q_rope, k_rope);
  ops::check_same_device(v, indptr, "indptr", q, "q");
  v.dtype(indptr, "indptr", {DType::i32, DType::i64}).rank(indptr, "indptr", 1).contiguous(indptr, "indptr");
  ops::check_same_device(v, offsets, "offsets", q, "q");
  v.same_dtype(offsets, "offsets", indptr, "indptr").rank(offsets, "offsets", 1).contiguous(offsets, "offsets");
  const int64_t batch = offsets.shape[0];
  v.dim(indptr, "indptr", 0, batch + 1, "offsets.size(0) + 1");
  if (batch > int64_t{0x7fffffff} / (q.shape[1] + k.shape[1]))
    v.fail("offsets", offsets, "must have fewer than 2^31 / (H_q + H_k) = " +
                                   std::to_string(int64_t{0x7fffffff} / (q.shape[1] + k.shape[1])) +
                                   " requests (one block per request and head in the kernel's grid x)");
  v.no_overlap({{&q_rope, "q_rope"}, {&k_rope, "k_rope"}}, {{&indptr, "indptr"}, {&offsets, "offsets"}});
  return head_dim;
}

// rotary_dim: even, <= head_dim, whole kernel vectors (NeoX: whole vectors in each half).
void check_rotary_dim(const Validator& v, int64_t rotary_dim, int64_t head_dim, bool interleave, const char* arg) {
  const int64_t vec = std::max<int64_t>(8, head_dim / 32), step = interleave ? vec : 2 * vec;
  if (!(rotary_dim >= step && rotary_dim <= head_dim && rotary_dim % step == 0))
    v.fail(arg, "must be a multiple of " + std::to_string(step) + " (the kernel's " + std::to_string(vec) +
                    "-element vectors" + (interleave ? "" : ", in each half") + ") in [" + std::to_string(step) + ", " +
                    std::to_string(head_dim) + "] (head_dim); got " + std::to_string(rotary_dim));
}

int64_t resolved_rotary_dim(const Validator& v, const RopeOptions& o, int64_t head_dim) {
  const int64_t rd = o.rotary_dim == 0 ? head_dim : o.rotary_dim;
  check_rotary_dim(v, rd, head_dim, o.interleave, "rotary_dim");
  v.positive(o.rope_scale, "rope_scale").positive(o.rope_theta, "rope_theta");
  return rd;
}

void check_llama31_scaling(const Validator& v, const Llama31RopeScaling& s) {
  v.positive(s.low_freq_factor, "low_freq_factor").positive(s.old_context_length, "old_context_length");
  v.finite(s.high_freq_factor, "high_freq_factor");
  if (!(s.high_freq_factor > s.low_freq_factor))
    v.fail("high_freq_factor", "must be above low_freq_factor (" + std::to_string(s.low_freq_factor) +
                                   "): the blend divides by their difference; got " +
                                   std::to_string(s.high_freq_factor));
}

// ------------------------------------------------------------------------------------------- rope_quantize

// One part of rope_quantize (an input or an output): rank `rank`, on q_rope's device, last dim contiguous, 16-byte
// aligned rows (the kernel moves 16-element vectors: 32 bytes of f16/bf16, 16 of fp8), strides of the dims before the
// last multiples of `stride_elems` (dims of size 1 excepted) and below 2^32. A part without elements is not read.
void check_part(const Validator& v, const TensorView& t, const char* arg, int rank, int64_t stride_elems,
                const TensorView& ref) {
  ops::check_same_device(v, t, arg, ref, "q_rope");
  v.rank(t, arg, rank).last_dim_contiguous(t, arg);
  if (t.numel() == 0) return;
  v.aligned(t, arg, 16);
  for (int d = 0; d + 1 < rank; ++d) {
    if (t.shape[d] <= 1) continue;
    if (t.strides[d] % stride_elems != 0)
      v.fail(arg, t, "must have strides before the last dim that are multiples of " + std::to_string(stride_elems) +
                         " elements (16-byte vectors)");
    if (t.strides[d] >= (int64_t{1} << 32))
      v.fail(arg, t, "must have strides below 2^32 elements (FlashInfer's binding keeps them in 32 bits)");
  }
}

// The four input parts of rope_quantize (f16/bf16 like q_rope, strides multiples of 8 elements): q's [tokens, H_q,
// rope_dim] and [tokens, H_q, no_rope_dim], k's the same with H_k heads (k_rank 3) or one latent head (k_rank 2,
// MLA's [tokens, d]). Returns no_rope_dim.
int64_t check_quantize_inputs(const Validator& v, const TensorView& q_rope, const TensorView& k_rope,
                              const TensorView& q_nope, const TensorView& k_nope, int k_rank) {
  const int64_t tokens = q_rope.shape[0], h_q = q_rope.shape[1], rope_dim = q_rope.shape[2];
  check_part(v, q_rope, "q_rope", 3, 8, q_rope);
  check_part(v, k_rope, "k_rope", k_rank, 8, q_rope);
  check_part(v, q_nope, "q_nope", 3, 8, q_rope);
  check_part(v, k_nope, "k_nope", k_rank, 8, q_rope);
  v.same_dtype(k_rope, "k_rope", q_rope, "q_rope").same_dtype(q_nope, "q_nope", q_rope, "q_rope");
  v.same_dtype(k_nope, "k_nope", q_rope, "q_rope");
  v.dim(k_rope, "k_rope", 0, tokens, "q_rope.size(0)").dim(k_rope, "k_rope", k_rank - 1, rope_dim, "q_rope.size(2)");
  v.dim(q_nope, "q_nope", 0, tokens, "q_rope.size(0)").dim(q_nope, "q_nope", 1, h_q, "q_rope.size(1)");
  const int64_t no_rope_dim = q_nope.shape[2];
  v.dim(k_nope, "k_nope", 0, tokens, "q_rope.size(0)");
  if (k_rank == 3) v.dim(k_nope, "k_nope", 1, k_rope.shape[1], "k_rope.size(1)");
  v.dim(k_nope, "k_nope", k_rank - 1, no_rope_dim, "q_nope.size(2)");
  return no_rope_dim;
}

// The rope_quantize kernels' rules on rope_dim: 16-element vectors (NeoX: whole vectors in each half), bdx = rope_dim
// / 16 threads <= 1024.
void check_quantize_rope_dim(const Validator& v, int64_t rope_dim, bool interleave) {
  const int64_t step = interleave ? 16 : 32;
  if (!(rope_dim >= step && rope_dim <= 16384 && rope_dim % step == 0))
    v.fail("q_rope.size(2) (rope_dim)", "must be a multiple of " + std::to_string(step) +
                                            " (the kernel's 16-element vectors" + (interleave ? "" : ", in each half") +
                                            ") in [" + std::to_string(step) + ", 16384]; got " +
                                            std::to_string(rope_dim));
}

// cos_sin_cache f32 [rows >= 1, rope_dim] contiguous and 16-byte aligned; pos_ids int32/int64 [tokens] contiguous,
// both on q_rope's device; the quant scales finite, > 0 and floats.
void check_quantize_tables(const Validator& v, const TensorView& cos_sin_cache, const TensorView& pos_ids,
                           const TensorView& q_rope, int64_t tokens, int64_t rope_dim, const RopeQuantizeOptions& o) {
  ops::check_same_device(v, cos_sin_cache, "cos_sin_cache", q_rope, "q_rope");
  v.dtype(cos_sin_cache, "cos_sin_cache", {DType::f32}).rank(cos_sin_cache, "cos_sin_cache", 2);
  v.contiguous(cos_sin_cache, "cos_sin_cache").aligned(cos_sin_cache, "cos_sin_cache", 16);
  v.require(cos_sin_cache.shape[0] >= 1, "cos_sin_cache", "must have at least one position row");
  v.dim(cos_sin_cache, "cos_sin_cache", 1, rope_dim, "q_rope.size(2) (rope_dim)");
  ops::check_same_device(v, pos_ids, "pos_ids", q_rope, "q_rope");
  v.dtype(pos_ids, "pos_ids", {DType::i32, DType::i64}).rank(pos_ids, "pos_ids", 1).contiguous(pos_ids, "pos_ids");
  v.dim(pos_ids, "pos_ids", 0, tokens, "q_rope.size(0)");
  // With int32 positions the kernel computes pos x rope_dim in 32-bit unsigned arithmetic.
  v.require(pos_ids.dtype == DType::i64 || cos_sin_cache.numel() <= (int64_t{1} << 32), "cos_sin_cache",
            "must have at most 2^32 elements with int32 pos_ids (the kernel's row offset is 32-bit)");
  for (const auto& [x, arg] : {std::pair{o.quant_scale_q, "quant_scale_q"}, std::pair{o.quant_scale_kv, "quant_scale_kv"}}) {
    v.positive(x, arg);
    if (x > FLT_MAX) v.fail(arg, "must be at most FLT_MAX (the kernel takes a float); got " + std::to_string(x));
  }
}

// A page cache tensor the append kernel stores 16 FP8 elements at a time into: 16-byte aligned, every stride a
// multiple of 16 elements but the last dim's (contiguous).
void check_fp8_pages(const Validator& v, const TensorView& t, const char* arg) {
  v.last_dim_contiguous(t, arg).aligned(t, arg, 16);
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.shape[d] > 1 && t.strides[d] % 16 != 0)
      v.fail(arg, t, "must have strides that are multiples of 16 elements in every dim but the last (16-byte stores)");
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
  check_llama31_scaling(v, s);
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

void apply_rope(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                const TensorView& k_rope, const TensorView& indptr, const TensorView& offsets, const RopeOptions& o,
                cudaStream_t stream) {
  const Validator v("apply_rope");
  const int64_t head_dim = check_ragged_rope_io(v, q, k, q_rope, k_rope, indptr, offsets);
  const int64_t rd = resolved_rotary_dim(v, o, head_dim);
  if (q.shape[0] == 0 || offsets.shape[0] == 0) return;  // no row to write (an empty grid would not launch)
  const auto mod = rope_module(rt);
  ffi::invoke(mod.fns[kRagged], ops::binding_for(q, stream), nullptr, q, k, q_rope, k_rope, indptr, offsets, rd,
              o.interleave, o.rope_scale, o.rope_theta);
}

void apply_llama31_rope(const Runtime& rt, const TensorView& q, const TensorView& k, const TensorView& q_rope,
                        const TensorView& k_rope, const TensorView& indptr, const TensorView& offsets,
                        const RopeOptions& o, const Llama31RopeScaling& s, cudaStream_t stream) {
  const Validator v("apply_llama31_rope");
  const int64_t head_dim = check_ragged_rope_io(v, q, k, q_rope, k_rope, indptr, offsets);
  const int64_t rd = resolved_rotary_dim(v, o, head_dim);
  check_llama31_scaling(v, s);
  if (q.shape[0] == 0 || offsets.shape[0] == 0) return;
  const auto mod = rope_module(rt);
  ffi::invoke(mod.fns[kLlama31Ragged], ops::binding_for(q, stream), nullptr, q, k, q_rope, k_rope, indptr, offsets,
              rd, o.interleave, o.rope_scale, o.rope_theta, s.low_freq_factor, s.high_freq_factor,
              s.old_context_length);
}

void rope_quantize_fp8(const Runtime& rt, const RopeQuantizeTensors& a, const RopeQuantizeOptions& o,
                       cudaStream_t stream) {
  const Validator v("rope_quantize_fp8");
  const TensorView &q_rope = a.q_rope, &k_rope = a.k_rope, &q_rope_out = a.q_rope_out, &k_rope_out = a.k_rope_out;
  const TensorView &cos_sin_cache = a.cos_sin_cache, &pos_ids = a.pos_ids;
  ops::check_cuda_tensor(v, q_rope, "q_rope");
  v.rank(q_rope, "q_rope", 3).dtype(q_rope, "q_rope", {DType::f16, DType::bf16});
  ops::check_cuda_tensor(v, k_rope, "k_rope");
  if (k_rope.rank != 2 && k_rope.rank != 3)
    v.fail("k_rope", k_rope, "must have rank 3 ([tokens, H_k, rope_dim]) or 2 (MLA: [tokens, rope_dim])");
  const int k_rank = k_rope.rank;
  const int64_t tokens = q_rope.shape[0], h_q = q_rope.shape[1], rope_dim = q_rope.shape[2];
  const int64_t h_k = k_rank == 3 ? k_rope.shape[1] : 1;
  // No nope part: views of last dim 0 (never read nor written), as FlashInfer's Python API makes for None.
  const int given = (a.q_nope != nullptr) + (a.k_nope != nullptr) + (a.q_nope_out != nullptr) + (a.k_nope_out != nullptr);
  if (given != 0 && given != 4)
    v.fail("q_nope", "must be given with k_nope, q_nope_out and k_nope_out, or all four absent (no nope part)");
  TensorView none_q = TensorView::contiguous(nullptr, q_rope.dtype, q_rope.device, {tokens, h_q, 0});
  TensorView none_k = k_rank == 3 ? TensorView::contiguous(nullptr, q_rope.dtype, q_rope.device, {tokens, h_k, 0})
                                  : TensorView::contiguous(nullptr, q_rope.dtype, q_rope.device, {tokens, 0});
  TensorView none_qo = none_q, none_ko = none_k;
  none_qo.dtype = none_ko.dtype = q_rope_out.dtype;
  const TensorView& q_nope = given ? *a.q_nope : none_q;
  const TensorView& k_nope = given ? *a.k_nope : none_k;
  const TensorView& q_nope_out = given ? *a.q_nope_out : none_qo;
  const TensorView& k_nope_out = given ? *a.k_nope_out : none_ko;
  // Outputs: e4m3/e5m2 like q_rope_out, strides multiples of 16 elements, each its input's shape.
  const int64_t no_rope_dim = check_quantize_inputs(v, q_rope, k_rope, q_nope, k_nope, k_rank);
  check_part(v, q_rope_out, "q_rope_out", 3, 16, q_rope);
  v.dtype(q_rope_out, "q_rope_out", {DType::e4m3, DType::e5m2}).same_shape(q_rope_out, "q_rope_out", q_rope, "q_rope");
  for (const auto& [out, out_arg, in, in_arg, rank] :
       {std::tuple{&k_rope_out, "k_rope_out", &k_rope, "k_rope", k_rank},
        std::tuple{&q_nope_out, "q_nope_out", &q_nope, "q_nope", 3},
        std::tuple{&k_nope_out, "k_nope_out", &k_nope, "k_nope", k_rank}}) {
    check_part(v, *out, out_arg, rank, 16, q_rope);
    v.same_dtype(*out, out_arg, q_rope_out, "q_rope_out").same_shape(*out, out_arg, *in, in_arg);
  }
  check_quantize_rope_dim(v, rope_dim, o.interleave);
  v.require(h_q >= 1 && h_k >= 1, "k_rope", "must have at least one head, as must q_rope");
  v.require(tokens <= int64_t{0x7fffffff}, "q_rope", "must have fewer than 2^31 tokens");
  const int64_t nope_chunks = (no_rope_dim + rope_dim - 1) / rope_dim;
  if (h_q + h_k > 65535 || (h_q + h_k) * (1 + nope_chunks) > 65535)
    v.fail("q_nope", q_nope, "must give (H_q + H_k) x (1 + ceil(no_rope_dim / rope_dim)) <= 65535 blocks (the "
                             "kernel's grid y); got H_q " + std::to_string(h_q) + ", H_k " + std::to_string(h_k) +
                             ", no_rope_dim " + std::to_string(no_rope_dim));
  check_quantize_tables(v, cos_sin_cache, pos_ids, q_rope, tokens, rope_dim, o);
  // FP8 outputs never alias their f16/bf16 inputs: no output may share a byte with any argument.
  v.no_overlap({{&q_rope_out, "q_rope_out"}, {&k_rope_out, "k_rope_out"}, {&q_nope_out, "q_nope_out"},
                {&k_nope_out, "k_nope_out"}},
               {{&q_rope, "q_rope"}, {&k_rope, "k_rope"}, {&q_nope, "q_nope"}, {&k_nope, "k_nope"},
                {&cos_sin_cache, "cos_sin_cache"}, {&pos_ids, "pos_ids"}});
  if (tokens == 0) return;  // an empty grid would not launch
  const auto mod = rope_module(rt);
  ffi::invoke(mod.fns[kQuantize], ops::binding_for(q_rope, stream), nullptr, q_rope, k_rope, q_nope, k_nope, q_rope_out,
              k_rope_out, q_nope_out, k_nope_out, cos_sin_cache, pos_ids, o.quant_scale_q, o.quant_scale_kv,
              o.interleave, o.enable_pdl);
}

void rope_quantize_append_paged_kv_cache(const Runtime& rt, const RopeQuantizeAppendTensors& a,
                                         const RopeQuantizeOptions& o, cudaStream_t stream) {
  const Validator v("rope_quantize_append_paged_kv_cache");
  const TensorView &q_rope = a.q_rope, &k_rope = a.k_rope, &q_nope = a.q_nope, &k_nope = a.k_nope;
  const TensorView &q_rope_out = a.q_rope_out, &q_nope_out = a.q_nope_out;
  if ((a.kv_cache != nullptr) == (a.mla_cache != nullptr))
    v.fail("kv_cache", "must be given for GQA/MHA, or mla_cache for MLA: exactly one of the two");
  const bool mla = a.mla_cache != nullptr;
  ops::check_cuda_tensor(v, q_rope, "q_rope");
  v.rank(q_rope, "q_rope", 3).dtype(q_rope, "q_rope", {DType::f16, DType::bf16});
  ops::check_cuda_tensor(v, k_rope, "k_rope");
  const int k_rank = mla ? 2 : 3;
  if (k_rope.rank != k_rank)
    v.fail("k_rope", k_rope, mla ? "must have rank 2 with mla_cache ([tokens, rope_dim], one latent head)"
                                 : "must have rank 3 with kv_cache ([tokens, H_k, rope_dim])");
  const int64_t tokens = q_rope.shape[0], h_q = q_rope.shape[1], rope_dim = q_rope.shape[2];
  const int64_t h_k = mla ? 1 : k_rope.shape[1];
  const int64_t no_rope_dim = check_quantize_inputs(v, q_rope, k_rope, q_nope, k_nope, k_rank);
  check_quantize_rope_dim(v, rope_dim, o.interleave);
  // The kernel moves the nope parts in rope_dim-wide chunks without a bound check; MLA's latent part is what the ckv
  // cache holds (FlashInfer's binding takes a cache without data for "not this layout").
  if (mla && no_rope_dim == 0)
    v.fail("q_nope.size(2) (no_rope_dim)", "must be at least rope_dim with mla_cache (the latent part ckv_cache holds)");
  if (no_rope_dim % rope_dim != 0)
    v.fail("q_nope.size(2) (no_rope_dim)", "must be a multiple of rope_dim " + std::to_string(rope_dim) +
                                               " (the kernel moves the nope parts in rope_dim-wide chunks); got " +
                                               std::to_string(no_rope_dim));
  check_part(v, q_rope_out, "q_rope_out", 3, 16, q_rope);
  v.dtype(q_rope_out, "q_rope_out", {DType::e4m3, DType::e5m2}).same_shape(q_rope_out, "q_rope_out", q_rope, "q_rope");
  check_part(v, q_nope_out, "q_nope_out", 3, 16, q_rope);
  v.same_dtype(q_nope_out, "q_nope_out", q_rope_out, "q_rope_out").same_shape(q_nope_out, "q_nope_out", q_nope, "q_nope");
  v.require(h_q >= 1 && h_k >= 1, "k_rope", "must have at least one head, as must q_rope");
  v.require(tokens <= int64_t{0x7fffffff}, "q_rope", "must have fewer than 2^31 tokens");
  const int64_t nope_chunks = no_rope_dim / rope_dim;
  const int64_t grid_y = (h_q + h_k) * (1 + nope_chunks) + (mla ? 0 : h_k);
  if (h_q + h_k > 65535 || grid_y > 65535)
    v.fail("q_nope", q_nope, "must give (H_q + H_k) x (1 + no_rope_dim / rope_dim)" +
                                 std::string(mla ? "" : " + H_k") + " <= 65535 blocks (the kernel's grid y); got H_q " +
                                 std::to_string(h_q) + ", H_k " + std::to_string(h_k) + ", no_rope_dim " +
                                 std::to_string(no_rope_dim));
  check_quantize_tables(v, a.cos_sin_cache, a.pos_ids, q_rope, tokens, rope_dim, o);
  ops::check_device_index_array(v, a.batch_indices, "batch_indices", tokens, q_rope, "q_rope");
  ops::check_device_index_array(v, a.positions, "positions", tokens, q_rope, "q_rope");

  // The cache, its page table and the values appended to it.
  TensorView v_view;  // GQA/MHA: v; MLA: an empty view (FlashInfer's binding takes "no V" as one without elements)
  TensorView cache0, cache1, indices, indptr, last_page_len;
  int64_t page_size = 0, layout = 0;
  const char *cache0_arg = "k_cache", *cache1_arg = "v_cache";
  if (!mla) {
    const PagedKvCache& c = *a.kv_cache;
    const ops::PagedGeometry g = ops::check_paged_cache(v, c, q_rope, "q_rope", -1);
    v.same_dtype(c.k_cache, "k_cache", q_rope_out, "q_rope_out");
    if (g.num_kv_heads != h_k) v.fail("k_cache", c.k_cache, "must have H_k " + std::to_string(h_k) + " heads (k_rope.size(1))");
    if (g.head_dim != rope_dim + no_rope_dim)
      v.fail("k_cache", c.k_cache, "must have head_dim rope_dim + no_rope_dim = " + std::to_string(rope_dim + no_rope_dim));
    check_fp8_pages(v, c.k_cache, "k_cache");
    check_fp8_pages(v, c.v_cache, "v_cache");
    if (a.v == nullptr) v.fail("v", "must be given with kv_cache (GQA/MHA appends v)");
    v_view = *a.v;
    ops::check_cuda_tensor(v, v_view, "v");
    ops::check_same_device(v, v_view, "v", q_rope, "q_rope");
    v.rank(v_view, "v", 3).same_dtype(v_view, "v", q_rope, "q_rope");
    v.shape(v_view, "v", {tokens, h_k, rope_dim + no_rope_dim});
    check_part(v, v_view, "v", 3, 8, q_rope);
    cache0 = c.k_cache, cache1 = c.v_cache, indices = c.indices, indptr = c.indptr, last_page_len = c.last_page_len;
    page_size = g.page_size;
    layout = static_cast<int64_t>(c.layout);
  } else {
    const PagedMlaKvCache& c = *a.mla_cache;
    if (a.v != nullptr) v.fail("v", "must be absent with mla_cache (MLA caches no v)");
    cache0_arg = "ckv_cache", cache1_arg = "kpe_cache";
    ops::check_same_device(v, c.ckv_cache, "ckv_cache", q_rope, "q_rope");
    v.rank(c.ckv_cache, "ckv_cache", 3).same_dtype(c.ckv_cache, "ckv_cache", q_rope_out, "q_rope_out");
    const int64_t num_pages = c.ckv_cache.size(0);
    page_size = c.ckv_cache.size(1);
    v.require(num_pages >= 1 && page_size >= 1, "ckv_cache", "must have at least one page of at least one token");
    v.shape(c.ckv_cache, "ckv_cache", {num_pages, page_size, no_rope_dim});
    ops::check_same_device(v, c.kpe_cache, "kpe_cache", q_rope, "q_rope");
    v.rank(c.kpe_cache, "kpe_cache", 3).same_dtype(c.kpe_cache, "kpe_cache", q_rope_out, "q_rope_out");
    v.shape(c.kpe_cache, "kpe_cache", {num_pages, page_size, rope_dim});
    check_fp8_pages(v, c.ckv_cache, "ckv_cache");
    check_fp8_pages(v, c.kpe_cache, "kpe_cache");
    ops::check_device_index_array(v, c.last_page_len, "last_page_len", -1, q_rope, "q_rope");
    const int64_t batch = c.last_page_len.size(0);
    v.require(batch >= 1, "last_page_len", "must have at least one entry (batch >= 1)");
    ops::check_device_index_array(v, c.indptr, "indptr", batch + 1, q_rope, "q_rope");
    ops::check_device_index_array(v, c.indices, "indices", -1, q_rope, "q_rope");
    v_view = TensorView::contiguous(nullptr, q_rope.dtype, q_rope.device, {0, 1, rope_dim + no_rope_dim});
    cache0 = c.ckv_cache, cache1 = c.kpe_cache, indices = c.indices, indptr = c.indptr, last_page_len = c.last_page_len;
  }
  v.require(page_size <= int64_t{0x7fffffff}, cache0_arg, "must have a page size below 2^31");
  // No output (q's and the caches) shares an element with an input or with another output (the k and v halves of
  // one interleaved cache are disjoint).
  v.no_overlap({{&q_rope_out, "q_rope_out"}, {&q_nope_out, "q_nope_out"}, {&cache0, cache0_arg}, {&cache1, cache1_arg}},
               {{&q_rope, "q_rope"}, {&k_rope, "k_rope"}, {&q_nope, "q_nope"}, {&k_nope, "k_nope"}, {&v_view, "v"},
                {&a.cos_sin_cache, "cos_sin_cache"}, {&a.pos_ids, "pos_ids"}, {&a.batch_indices, "batch_indices"},
                {&a.positions, "positions"}, {&indices, "indices"}, {&indptr, "indptr"},
                {&last_page_len, "last_page_len"}});
  if (tokens == 0) return;  // an empty grid would not launch

  // FlashInfer's binding takes 3-D k parts in both paths (MLA: one head) and the caches of the path it does not run
  // as tensors without data.
  auto with_one_head = [](const TensorView& t) {
    return TensorView::strided(t.data, t.dtype, t.device, {t.shape[0], 1, t.shape[1]},
                               {t.strides[0], t.shape[1], t.strides[1]});
  };
  const TensorView k_rope3 = mla ? with_one_head(k_rope) : k_rope;
  const TensorView k_nope3 = mla ? with_one_head(k_nope) : k_nope;
  const TensorView no_cache4 = TensorView::contiguous(nullptr, q_rope_out.dtype, q_rope.device, {0, 1, 1, 16});
  const TensorView no_cache3 = TensorView::contiguous(nullptr, q_rope_out.dtype, q_rope.device, {0, 1, 16});
  const TensorView& k_cache = mla ? no_cache4 : cache0;
  const TensorView& v_cache = mla ? no_cache4 : cache1;
  const TensorView& ckv_cache = mla ? cache0 : no_cache3;
  const TensorView& kpe_cache = mla ? cache1 : no_cache3;
  const auto mod = rope_module(rt);
  ffi::invoke(mod.fns[kQuantizeAppend], ops::binding_for(q_rope, stream), nullptr, q_rope, k_rope3, q_nope, k_nope3,
              v_view, q_rope_out, q_nope_out, a.cos_sin_cache, a.pos_ids, k_cache, v_cache, ckv_cache, kpe_cache,
              indices, indptr, a.batch_indices, a.positions, layout, page_size, o.quant_scale_q, o.quant_scale_kv,
              o.interleave, o.enable_pdl);
}

}  // namespace flashcpp
