// References of the paged KV append ops: element copies (bit-exact, any dtype) into host caches.
#include <cstring>

#include "reference/reference_util.hpp"

namespace flashcpp::reference {
namespace {

struct Slot {
  int64_t page, entry;
};

// The append's host arrays: batch_indices and positions of `nnz` entries, last_page_len [batch],
// indptr [batch + 1] and indices (int32). Returns batch.
int64_t check_page_table(const Validator& v, const TensorView& batch_indices, const TensorView& positions, int64_t nnz,
                         const TensorView& last_page_len, const TensorView& indptr, const TensorView& indices) {
  detail::check_host_i32(v, batch_indices, "batch_indices", nnz);
  detail::check_host_i32(v, positions, "positions", nnz);
  detail::check_host_i32(v, last_page_len, "last_page_len", -1);
  const int64_t batch = last_page_len.size(0);
  v.indptr(indptr, "indptr", batch + 1);
  detail::check_host_i32(v, indices, "indices", -1);
  return batch;
}

// Resolves token i's (page, entry) from the host page table, checking every index.
Slot locate(const Validator& v, const TensorView& batch_indices, const TensorView& positions, const TensorView& indptr,
            const TensorView& indices, int64_t batch, int64_t page_size, int64_t num_pages, int64_t i) {
  const int32_t b = batch_indices.data_as<const int32_t>()[i];
  const int32_t pos = positions.data_as<const int32_t>()[i];
  if (b < 0 || b >= batch) v.fail("batch_indices", "entry " + std::to_string(i) + " is outside [0, batch)");
  if (pos < 0) v.fail("positions", "entry " + std::to_string(i) + " is negative");
  const int32_t* ptr = indptr.data_as<const int32_t>();
  const int64_t iter = ptr[b] + pos / page_size;
  if (iter >= ptr[b + 1]) v.fail("positions", "entry " + std::to_string(i) + " falls beyond its request's pages");
  if (iter >= indices.size(0)) v.fail("indices", "is shorter than indptr says");
  const int64_t page = indices.data_as<const int32_t>()[iter];
  if (page < 0 || page >= num_pages) v.fail("indices", "holds page id " + std::to_string(page) + " outside the cache");
  return {page, pos % page_size};
}

void copy_element(const TensorView& dst, int64_t dst_off, const TensorView& src, int64_t src_off) {
  const int s = dtype_size(dst.dtype);
  std::memcpy(static_cast<char*>(dst.data) + dst_off * s, static_cast<const char*>(src.data) + src_off * s,
              static_cast<size_t>(s));
}

void check_any_host(const Validator& v, const TensorView& t, const char* arg, int rank) {
  v.defined(t, arg).on_host(t, arg).rank(t, arg, rank).no_negative_strides(t, arg);
}

}  // namespace

void append_paged_kv_cache(const TensorView& key, const TensorView& value, const TensorView& batch_indices,
                           const TensorView& positions, const PagedKvCache& c) {
  const Validator v("reference::append_paged_kv_cache");
  check_any_host(v, key, "append_key", 3);
  check_any_host(v, value, "append_value", 3);
  v.same_shape(value, "append_value", key, "append_key").same_dtype(value, "append_value", key, "append_key");
  check_any_host(v, c.k_cache, "k_cache", 4);
  check_any_host(v, c.v_cache, "v_cache", 4);
  v.same_shape(c.v_cache, "v_cache", c.k_cache, "k_cache");
  v.same_dtype(c.k_cache, "k_cache", key, "append_key").same_dtype(c.v_cache, "v_cache", key, "append_key");
  const bool nhd = c.layout == KvLayout::nhd;
  const int64_t num_pages = c.k_cache.size(0), page_size = nhd ? c.k_cache.size(1) : c.k_cache.size(2);
  const int64_t heads = nhd ? c.k_cache.size(2) : c.k_cache.size(1), d = c.k_cache.size(3);
  v.shape(key, "append_key", {-1, heads, d});
  const int64_t nnz = key.size(0);
  const int64_t batch = check_page_table(v, batch_indices, positions, nnz, c.last_page_len, c.indptr, c.indices);
  for (int64_t i = 0; i < nnz; ++i) {
    const Slot s = locate(v, batch_indices, positions, c.indptr, c.indices, batch, page_size, num_pages, i);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t e = 0; e < d; ++e) {
        const int64_t dst = nhd ? offset_of(c.k_cache, {s.page, s.entry, h, e}) : offset_of(c.k_cache, {s.page, h, s.entry, e});
        const int64_t dstv = nhd ? offset_of(c.v_cache, {s.page, s.entry, h, e}) : offset_of(c.v_cache, {s.page, h, s.entry, e});
        copy_element(c.k_cache, dst, key, offset_of(key, {i, h, e}));
        copy_element(c.v_cache, dstv, value, offset_of(value, {i, h, e}));
      }
  }
}

void append_paged_mla_kv_cache(const TensorView& ckv, const TensorView& kpe, const TensorView& batch_indices,
                               const TensorView& positions, const PagedMlaKvCache& c) {
  const Validator v("reference::append_paged_mla_kv_cache");
  check_any_host(v, ckv, "append_ckv", 2);
  check_any_host(v, kpe, "append_kpe", 2);
  check_any_host(v, c.ckv_cache, "ckv_cache", 3);
  check_any_host(v, c.kpe_cache, "kpe_cache", 3);
  v.same_dtype(kpe, "append_kpe", ckv, "append_ckv").same_dtype(c.ckv_cache, "ckv_cache", ckv, "append_ckv");
  v.same_dtype(c.kpe_cache, "kpe_cache", ckv, "append_ckv");
  const int64_t num_pages = c.ckv_cache.size(0), page_size = c.ckv_cache.size(1);
  const int64_t dc = c.ckv_cache.size(2), dp = c.kpe_cache.size(2);
  v.shape(c.kpe_cache, "kpe_cache", {num_pages, page_size, -1});
  const int64_t nnz = ckv.size(0);
  v.shape(ckv, "append_ckv", {nnz, dc}).shape(kpe, "append_kpe", {nnz, dp});
  const int64_t batch = check_page_table(v, batch_indices, positions, nnz, c.last_page_len, c.indptr, c.indices);
  for (int64_t i = 0; i < nnz; ++i) {
    const Slot s = locate(v, batch_indices, positions, c.indptr, c.indices, batch, page_size, num_pages, i);
    for (int64_t e = 0; e < dc; ++e)
      copy_element(c.ckv_cache, offset_of(c.ckv_cache, {s.page, s.entry, e}), ckv, offset_of(ckv, {i, e}));
    for (int64_t e = 0; e < dp; ++e)
      copy_element(c.kpe_cache, offset_of(c.kpe_cache, {s.page, s.entry, e}), kpe, offset_of(kpe, {i, e}));
  }
}

}  // namespace flashcpp::reference
