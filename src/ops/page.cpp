// Paged KV append: validation and argument packing for FlashInfer's `page` module (facts sheet §A.2).
#include "flashcpp/page.hpp"

#include <cstdint>

#include "ops/common.hpp"

namespace flashcpp {
namespace {

enum PageFn { kAppend = 0, kAppendMla = 1 };

ops::ResolvedModule page_module(const Runtime& rt) {
  static const ops::ModuleKey key = ops::module_key(ops::ModuleFamily::page);
  return ops::resolve_module(rt, key, [] { return std::string(ops::kPageUri); },
                             {"append_paged_kv_cache", "append_paged_mla_kv_cache"});
}

// The append kernels move 16 bytes per thread: rows and heads must start on 16-byte boundaries.
void check_vector_rows(const Validator& v, const TensorView& t, const char* arg) {
  const int64_t vec = 16 / dtype_size(t.dtype);
  v.aligned(t, arg, 16);
  v.divisible(t.size(-1), arg, vec, "16 bytes of elements (last dim)");
  for (int i = 0; i + 1 < t.rank; ++i)
    if (t.strides[i] % vec != 0)
      v.fail(arg, t, "must have strides that are multiples of 16 bytes in every dim but the last");
}

// One tensor argument of an append and its name in messages.
struct Arg {
  const TensorView& t;
  const char* name;
  operator Validator::Named() const { return {&t, name}; }
};

// What both appends check once their own shapes are read: the token arrays (one entry per appended row), 16-byte
// rows in every tensor the kernel moves, and caches (the outputs) that overlap no input. `Cache` is
// PagedKvCache or PagedMlaKvCache.
template <class Cache>
void check_append_common(const Validator& v, Arg append0, Arg append1, Arg cache0, Arg cache1, const Cache& cache,
                         const TensorView& batch_indices, const TensorView& positions) {
  const int64_t nnz = append0.t.size(0);
  ops::check_device_index_array(v, batch_indices, "batch_indices", nnz, append0.t, append0.name);
  ops::check_device_index_array(v, positions, "positions", nnz, append0.t, append0.name);
  for (const Arg& a : {append0, append1, cache0, cache1}) check_vector_rows(v, a.t, a.name);
  v.no_overlap({cache0, cache1}, {append0, append1, {&batch_indices, "batch_indices"}, {&positions, "positions"},
                                  {&cache.indices, "indices"}, {&cache.indptr, "indptr"},
                                  {&cache.last_page_len, "last_page_len"}});
}

}  // namespace

void append_paged_kv_cache(const Runtime& rt, const TensorView& append_key, const TensorView& append_value,
                           const TensorView& batch_indices, const TensorView& positions, const PagedKvCache& cache,
                           cudaStream_t stream) {
  const Validator v("append_paged_kv_cache");
  ops::check_cuda_tensor(v, append_key, "append_key");
  v.rank(append_key, "append_key", 3).last_dim_contiguous(append_key, "append_key");
  v.dtype(append_key, "append_key", {DType::f16, DType::bf16, DType::e4m3, DType::e5m2});
  ops::check_same_device(v, append_value, "append_value", append_key, "append_key");
  v.same_shape(append_value, "append_value", append_key, "append_key")
      .same_dtype(append_value, "append_value", append_key, "append_key")
      .last_dim_contiguous(append_value, "append_value");
  const ops::PagedGeometry g = ops::check_paged_cache(v, cache, append_key, "append_key", -1);
  v.same_dtype(cache.k_cache, "k_cache", append_key, "append_key");
  v.dim(append_key, "append_key", 1, g.num_kv_heads, "the cache's num_kv_heads");
  v.dim(append_key, "append_key", 2, g.head_dim, "the cache's head_dim");
  const int64_t nnz = append_key.size(0);
  // The k and v halves of one interleaved cache are fine as the two outputs: their elements are disjoint.
  check_append_common(v, {append_key, "append_key"}, {append_value, "append_value"}, {cache.k_cache, "k_cache"},
                      {cache.v_cache, "v_cache"}, cache, batch_indices, positions);
  if (nnz == 0) return;

  const auto mod = page_module(rt);
  ffi::invoke(mod.fns[kAppend], ops::binding_for(append_key, stream), nullptr, append_key, append_value,
              batch_indices, positions, cache.k_cache, cache.v_cache, cache.indices, cache.indptr, cache.last_page_len,
              static_cast<int64_t>(cache.layout));
}

void append_paged_mla_kv_cache(const Runtime& rt, const TensorView& append_ckv, const TensorView& append_kpe,
                               const TensorView& batch_indices, const TensorView& positions,
                               const PagedMlaKvCache& cache, cudaStream_t stream) {
  const Validator v("append_paged_mla_kv_cache");
  ops::check_cuda_tensor(v, append_ckv, "append_ckv");
  v.rank(append_ckv, "append_ckv", 2).last_dim_contiguous(append_ckv, "append_ckv");
  v.dtype(append_ckv, "append_ckv", {DType::f16, DType::bf16, DType::e4m3, DType::e5m2});
  v.dim(append_ckv, "append_ckv", 1, 512, "the MLA latent dim");
  const int64_t nnz = append_ckv.size(0);
  ops::check_same_device(v, append_kpe, "append_kpe", append_ckv, "append_ckv");
  v.rank(append_kpe, "append_kpe", 2).last_dim_contiguous(append_kpe, "append_kpe");
  v.same_dtype(append_kpe, "append_kpe", append_ckv, "append_ckv");
  v.shape(append_kpe, "append_kpe", {nnz, 64});
  ops::check_same_device(v, cache.ckv_cache, "ckv_cache", append_ckv, "append_ckv");
  v.rank(cache.ckv_cache, "ckv_cache", 3).last_dim_contiguous(cache.ckv_cache, "ckv_cache");
  v.same_dtype(cache.ckv_cache, "ckv_cache", append_ckv, "append_ckv");
  v.dim(cache.ckv_cache, "ckv_cache", 2, 512, "the MLA latent dim");
  const int64_t num_pages = cache.ckv_cache.size(0), page_size = cache.ckv_cache.size(1);
  v.require(num_pages >= 1 && page_size >= 1, "ckv_cache", "must have at least one page of at least one token");
  ops::check_same_device(v, cache.kpe_cache, "kpe_cache", append_ckv, "append_ckv");
  v.rank(cache.kpe_cache, "kpe_cache", 3).last_dim_contiguous(cache.kpe_cache, "kpe_cache");
  v.same_dtype(cache.kpe_cache, "kpe_cache", append_ckv, "append_ckv");
  v.shape(cache.kpe_cache, "kpe_cache", {num_pages, page_size, 64});
  ops::check_device_index_array(v, cache.last_page_len, "last_page_len", -1, append_ckv, "append_ckv");
  const int64_t batch = cache.last_page_len.size(0);
  v.require(batch >= 1, "last_page_len", "must have at least one entry (batch >= 1)");
  ops::check_device_index_array(v, cache.indptr, "indptr", batch + 1, append_ckv, "append_ckv");
  ops::check_device_index_array(v, cache.indices, "indices", -1, append_ckv, "append_ckv");
  check_append_common(v, {append_ckv, "append_ckv"}, {append_kpe, "append_kpe"}, {cache.ckv_cache, "ckv_cache"},
                      {cache.kpe_cache, "kpe_cache"}, cache, batch_indices, positions);
  if (nnz == 0) return;

  const auto mod = page_module(rt);
  ffi::invoke(mod.fns[kAppendMla], ops::binding_for(append_ckv, stream), nullptr, append_ckv, append_kpe,
              batch_indices, positions, cache.ckv_cache, cache.kpe_cache, cache.indices, cache.indptr,
              cache.last_page_len);
}

namespace ops {
PagedGeometry check_paged_cache(const Validator& v, const PagedKvCache& kv, const TensorView& ref,
                                const char* ref_arg, int64_t expected_batch) {
  check_same_device(v, kv.k_cache, "k_cache", ref, ref_arg);
  check_same_device(v, kv.v_cache, "v_cache", ref, ref_arg);
  v.rank(kv.k_cache, "k_cache", 4).last_dim_contiguous(kv.k_cache, "k_cache");
  v.same_dtype(kv.v_cache, "v_cache", kv.k_cache, "k_cache");
  v.same_shape(kv.v_cache, "v_cache", kv.k_cache, "k_cache");
  v.same_strides(kv.v_cache, "v_cache", kv.k_cache, "k_cache");
  if (kv.layout != KvLayout::nhd && kv.layout != KvLayout::hnd)
    v.fail("layout", "must be nhd or hnd; got " + std::to_string(static_cast<int64_t>(kv.layout)));
  PagedGeometry g;
  g.num_pages = kv.k_cache.size(0);
  g.page_size = kv.layout == KvLayout::nhd ? kv.k_cache.size(1) : kv.k_cache.size(2);
  g.num_kv_heads = kv.layout == KvLayout::nhd ? kv.k_cache.size(2) : kv.k_cache.size(1);
  g.head_dim = kv.k_cache.size(3);
  if (g.page_size < 1) v.fail("k_cache", kv.k_cache, "must have a page size >= 1");
  v.require(g.num_pages >= 1, "k_cache", "must have at least one page");
  check_device_index_array(v, kv.last_page_len, "last_page_len", expected_batch, ref, ref_arg);
  const int64_t batch = kv.last_page_len.size(0);
  v.require(batch >= 1, "last_page_len", "must have at least one entry (batch >= 1)");
  check_device_index_array(v, kv.indptr, "indptr", batch + 1, ref, ref_arg);
  check_device_index_array(v, kv.indices, "indices", -1, ref, ref_arg);
  return g;
}

void paged_kv_lengths(const Validator& v, const TensorView& indptr_host, const TensorView& last_page_len_host,
                      int64_t page_size, const TensorView& out_host) {
  v.in_range(page_size, "page_size", 1, int64_t{1} << 30);
  v.on_host(last_page_len_host, "kv_last_page_len").dtype(last_page_len_host, "last_page_len", {DType::i32});
  v.rank(last_page_len_host, "last_page_len", 1).contiguous(last_page_len_host, "last_page_len");
  const int64_t batch = last_page_len_host.size(0);
  v.indptr(indptr_host, "kv_indptr", batch + 1);
  v.on_host(out_host, "out").dtype(out_host, "out", {DType::i32}).shape(out_host, "out", {batch});
  v.contiguous(out_host, "out");
  v.no_overlap({{&out_host, "out"}}, {{&indptr_host, "kv_indptr"}, {&last_page_len_host, "kv_last_page_len"}});
  const auto* ptr = indptr_host.data_as<const int32_t>();
  const auto* last = last_page_len_host.data_as<const int32_t>();
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t pages = ptr[r + 1] - ptr[r];
    const int64_t lo = pages == 0 ? 0 : 1, hi = pages == 0 ? 0 : page_size;
    if (last[r] < lo || last[r] > hi)
      v.fail("kv_last_page_len", "entry " + std::to_string(r) + " is " + std::to_string(last[r]) + ", outside [" +
                                  std::to_string(lo) + ", " + std::to_string(hi) + "] for a request with " +
                                  std::to_string(pages) + " pages");
    // The lengths are int32 (FlashInfer's planners take int32): a request longer than that is refused.
    const int64_t len = pages == 0 ? 0 : (pages - 1) * page_size + last[r];  // pages < 2^31, page_size <= 2^30
    if (len > INT32_MAX)
      v.fail("kv_indptr", "request " + std::to_string(r) + " has " + std::to_string(len) + " tokens (" +
                              std::to_string(pages) + " pages of " + std::to_string(page_size) +
                              "), more than the int32 lengths hold (2147483647)");
  }
  auto* out = out_host.data_as<int32_t>();
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t pages = ptr[r + 1] - ptr[r];
    out[r] = static_cast<int32_t>(pages == 0 ? 0 : (pages - 1) * page_size + last[r]);
  }
}

}  // namespace ops

void paged_kv_lengths(const TensorView& indptr_host, const TensorView& last_page_len_host, int64_t page_size,
                      const TensorView& out_host) {
  ops::paged_kv_lengths(Validator("paged_kv_lengths"), indptr_host, last_page_len_host, page_size, out_host);
}

}  // namespace flashcpp
