// Paged KV cache: layout description and FlashInfer's `page` module (append new tokens into pages).
//
// A paged KV cache stores the keys and values of every request in fixed-size pages:
//   NHD: k_cache, v_cache [num_pages, page_size, num_kv_heads, head_dim]
//   HND: k_cache, v_cache [num_pages, num_kv_heads, page_size, head_dim]
// Request r owns pages indices[indptr[r] .. indptr[r+1]) in order; its last page holds
// last_page_len[r] tokens (1..page_size; 0 only for a request with no pages). So its length is
// (indptr[r+1] - indptr[r] - 1) * page_size + last_page_len[r].
// indices, indptr, last_page_len are int32, 1-D, contiguous, on the cache's device.
// An append writes the caches: they may share no byte with each other or with any other argument (the k
// and v halves of one interleaved [pages, 2, ...] cache do not share bytes and are fine).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashcpp/tensor.hpp"

namespace flashcpp {

class Runtime;

/// Memory order of a KV tensor's token and head dims (FlashInfer's TensorLayout codes).
enum class KvLayout : int64_t { nhd = 0, hnd = 1 };

/// A paged KV cache and its page table (all device tensors). k/v caches must have identical shapes and
/// strides (FlashInfer reads both with one stride set) and a contiguous last dim.
struct PagedKvCache {
  TensorView k_cache;
  TensorView v_cache;
  TensorView indices;        ///< int32 [>= indptr[batch]] page ids
  TensorView indptr;         ///< int32 [batch + 1]
  TensorView last_page_len;  ///< int32 [batch]
  KvLayout layout = KvLayout::nhd;
};

/// Writes append_key/append_value[i] (token i of the batch) into the cache at position positions[i] of
/// request batch_indices[i]. append_key/value: [nnz, num_kv_heads, head_dim] (dims 0, 1 may be strided);
/// batch_indices, positions: int32 [nnz]. Dtype of append_key/value = cache dtype (f16, bf16, e4m3, e5m2).
/// The page table must already contain the pages the positions fall in (positions and page ids live on
/// the device and are not checked on the host).
void append_paged_kv_cache(const Runtime& rt, const TensorView& append_key, const TensorView& append_value,
                           const TensorView& batch_indices, const TensorView& positions, const PagedKvCache& cache,
                           cudaStream_t stream = nullptr);

/// MLA (DeepSeek) latent cache: ckv_cache [num_pages, page_size, 512], kpe_cache [num_pages, page_size, 64].
struct PagedMlaKvCache {
  TensorView ckv_cache;
  TensorView kpe_cache;
  TensorView indices;
  TensorView indptr;
  TensorView last_page_len;
};

/// append_ckv [nnz, 512], append_kpe [nnz, 64] (row-strided allowed, last dim contiguous), same dtype as
/// the caches (f16, bf16, e4m3, e5m2); batch_indices, positions: int32 [nnz].
void append_paged_mla_kv_cache(const Runtime& rt, const TensorView& append_ckv, const TensorView& append_kpe,
                               const TensorView& batch_indices, const TensorView& positions,
                               const PagedMlaKvCache& cache, cudaStream_t stream = nullptr);

/// Host helper: tokens of every request, (pages - 1) * page_size + last_page_len (0 for no pages).
/// indptr, last_page_len: host int32; out: host int32 [batch]. Validates like the ops do.
void paged_kv_lengths(const TensorView& indptr_host, const TensorView& last_page_len_host, int64_t page_size,
                      const TensorView& out_host);

}  // namespace flashcpp
