// DSA top-k on FlashInfer's `topk` module: validated, asynchronous on the caller's stream. The indexer stage of
// DeepSeek sparse attention (V3.2): the k highest-scoring KV positions of each query row, optionally mapped through
// a token page table (top_k_page_table_transform) or shifted by a per-row offset (top_k_ragged_transform), so that
// the result is the `indices` of flashcpp::mla::sparse_decode / sparse_prefill (below).
//
// What a row's result holds (FlashInfer 0.6.3: a radix select on the values' bit patterns, or its "filtered"
// variant; FlashInfer picks one from the dtype, rows, max_len, k and the device):
//  * A set: the k entries of highest value, in no particular order. Not sorted, and the order changes from run to
//    run (the kernels place entries with atomics). Compare results as sets.
//  * Values are ordered as the input dtype's bits in IEEE total order: -0.0 ranks below +0.0, a NaN with the sign
//    bit clear above +inf (with it set, below -inf).
//  * Ties: every entry above the k-th highest value is in the set; the remaining places go to an arbitrary,
//    run-dependent choice among the entries equal to it.
//  * A short row (the transforms: lengths[r] <= k; top_k: k == d) is not selected from: its positions 0 .. len-1
//    in order (transformed), then -1 up to k (top_k: indices 0 .. d-1 in order and their values).
//
// Tensors (all on one CUDA device, all contiguous; k is the output's width):
//   top_k                       input f32/f16/bf16 [rows, d]; indices i32 [rows, k]; values [rows, k] in input's
//                               dtype; 1 <= k <= d. indices[r][j] is a column of input, values[r][j] its value.
//   top_k_page_table_transform  input [rows, max_len] (the indexer's logits); lengths i32 [rows]; src_page_table
//                               i32 [batch, width], width >= max_len (only its first max_len columns are read:
//                               a wider table works as it is); optional row_to_batch i32 [rows] (absent: row r
//                               uses table row r, and batch >= rows); output_page_table i32 [rows, k], k >= 1:
//                                 output[r][j] = src_page_table[b][p_j] for j < lengths[r], -1 after,
//                               with b = row_to_batch[r] (or r) and p_j the j-th selected position of
//                               input[r][0 .. lengths[r]).
//   top_k_ragged_transform      input [rows, max_len]; offsets i32 [rows]; lengths i32 [rows]; output_indices
//                               i32 [rows, k], k >= 1: offsets[r] + p_j for j < lengths[r], -1 after.
// For the transforms k may exceed max_len (every row is then short: DSA's first k decode steps).
//
// Row states (row_states): for long rows FlashInfer's radix path spreads one row over several CTAs, which
// meet at barriers in a caller-owned workspace of per-group counters and histograms (FlashInfer's RadixRowState).
// Rules: 1-D, contiguous, any dtype, at least kTopKRowStatesBytes (what FlashInfer's Python API allocates: enough
// for 339 row groups, so for any GPU up to 678 SMs), 4-byte aligned; zero-filled before its first use (cudaMemset);
// each launch leaves its counters and histograms zero again, so it can be reused without clearing, but a launch
// that did not finish (a CUDA error) leaves it dirty; never used by two launches that may run at the same time
// (two streams, concurrent graph replays): their barriers would mix. Absent, the op requires
// max_len <= 1024 x gcd(16 / element bytes, max_len) (4096 for f32, 8192 for f16/bf16 when max_len is a multiple
// of 4 / 8): the smallest chunk FlashInfer ever gives one CTA, so no path it can pick needs the workspace (the
// choice of path depends on the device's shared memory and FlashInfer's FLASHINFER_TOPK_ALGO, which flashcpp does
// not predict). The multi-CTA path also needs its CTAs (at most one per SM) resident together: it spins.
//
// Validated before anything is launched (Error(invalid_argument) naming the op, the argument and the rule): device
// and dtypes as above; ranks and shapes; every tensor contiguous; input's data aligned to FlashInfer's vector
// (gcd(16 / element bytes, max_len) elements); max_len >= 1; input and the output below 2^31 elements (FlashInfer
// indexes rows in 32 bits); without row_to_batch, batch >= rows; the row-states rules above; outputs (the row
// states included) share no byte with another argument. Zero rows launch nothing. Launches run with input's device
// current and restore the caller's (FlashInfer's topk entry points call cudaSetDevice and leave it set).
// Read on the device and not validated (the caller's contract): each lengths[r] in [0, max_len] (a larger or
// negative length reads past the row), each row_to_batch[r] in [0, batch), offsets[r] + lengths[r] - 1 within int32,
// and the page table's values (copied as they are, -1 included).
//
// Feeding sparse MLA (flashcpp/mla.hpp: indices i32, an index outside the cache's [0, num_blocks * block_size)
// such as -1 is masked and never read; topk a positive multiple of 64, e.g. DeepSeek V3.2's 2048):
//  * sparse_decode: rows = batch x s_q (row r = request r / s_q, its token r % s_q), row_to_batch[r] = r / s_q
//    (absent when s_q is 1); src_page_table[b][t] = the cache slot of request b's token t,
//    block_table[b][t / block_size] * block_size + t % block_size (a page table of page size 1); lengths[r] = the
//    tokens row r may attend to. output_page_table [rows, k] is sparse_decode's indices [batch, s_q, k] as it is
//    (the same bytes); the -1 of short rows are masked.
//  * sparse_prefill over one ragged kv [s_kv, 1, d_qk]: top_k_ragged_transform with offsets[r] = the first kv row
//    of query r's sequence; output_indices [s_q, k] is sparse_prefill's indices [s_q, 1, k].
//
// FlashInfer 0.6.3 caveat (its FilteredTopK, which it picks for k <= 2048 and max_len <= 16384 in 16-bit types, or
// f32 rows up to 32768, or longer f32 rows when rows > max_len / 16384): it keeps at most 16384 candidates in the
// bucket of the k-th value (the top 8 bits of the value's f16 pattern) and a row with more there gets a wrong
// result. 16-bit rows in that path are at most 16384 long, so only long f32 rows of values crowded into one such
// bucket (a range like [1, 1.25)) are exposed.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashcpp/tensor.hpp"

namespace flashcpp {

class Runtime;

/// The least size of the row-states workspace (bytes): FlashInfer's own (1 MiB).
inline constexpr int64_t kTopKRowStatesBytes = int64_t{1} << 20;

// The optional tensors are named parameters (nullptr: absent): row_states, the multi-CTA workspace (header comment),
// and for the page-table transform row_to_batch, i32 [rows], the page-table row of each input row (absent: row r
// uses table row r).

/// indices, values = the k = indices.size(1) largest entries of each row of input (unordered).
void top_k(const Runtime& rt, const TensorView& input, const TensorView& indices, const TensorView& values,
           OptionalTensor row_states = nullptr, cudaStream_t stream = nullptr);

/// output_page_table[r] = src_page_table[row_to_batch[r]] at the top-k positions of input[r][0 .. lengths[r]).
void top_k_page_table_transform(const Runtime& rt, const TensorView& input, const TensorView& lengths,
                                const TensorView& src_page_table, const TensorView& output_page_table,
                                OptionalTensor row_to_batch = nullptr, OptionalTensor row_states = nullptr,
                                cudaStream_t stream = nullptr);

/// output_indices[r] = offsets[r] + the top-k positions of input[r][0 .. lengths[r]).
void top_k_ragged_transform(const Runtime& rt, const TensorView& input, const TensorView& offsets,
                            const TensorView& lengths, const TensorView& output_indices,
                            OptionalTensor row_states = nullptr, cudaStream_t stream = nullptr);

}  // namespace flashcpp
