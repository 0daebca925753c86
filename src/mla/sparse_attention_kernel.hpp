// Internal contract between the sparse-MLA host code (validation, dispatch, scheduling) and the
// attention kernels. Host code validates everything before filling these structs; kernels trust them.
// Semantics follow FlashMLA's current main (see docs/MLA.md): natural-log lse, masked invalid indices,
// empty rows give out 0 / lse +inf / max_logits -inf, attn_sink scales out by exp(lse)/(exp(lse)+exp(sink)).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "mla/decode_schedule.hpp"
#include "mla/fp8_v32.hpp"  // FLASHCPP_HD

namespace flashcpp::mla::kernels {

/// Where K/V rows come from. The 16-bit type of q and out follows it: fp16 with the fp16 cache, else bf16.
enum class KvFormat : int {
  bf16 = 0,       ///< kv [num_kv, d_qk] bf16, row stride kv_row_stride (elements)
  fp8_v32 = 1,    ///< DeepSeek V3.2 656-byte rows: 512 e4m3, 4 f32 scales (per 128), 64 bf16 rope
  fp8_v4 = 2,     ///< DeepSeek V4 pages (mla/fp8_v4.hpp), d_qk 512, with an optional extra pool; decode only
  f16 = 3,        ///< as bf16, in fp16 (q and out fp16 too); dense decode only (d_qk 576)
};

/// Whether K/V rows are 16-bit values copied as they are (bf16 or fp16), not an FP8 format dequantized.
FLASHCPP_HD constexpr bool kv_is_16bit(KvFormat f) { return f == KvFormat::bf16 || f == KvFormat::f16; }

/// One sparse attention problem over `num_rows` query tokens, each attending (all h_q heads) to
/// its own list of `topk` KV rows. Prefill: a token is a q row (s). Decode: a token is (b, s).
struct SparseAttentionParams {
  // Decode groups tokens into requests of `tokens_per_request` (s_q) consecutive tokens; each per-token tensor
  // (q, indices, extra_indices, out, lse) then has a request stride besides its token stride, so views whose
  // requests are not evenly spaced (FlashMLA's padded tensors) need no copy. token_offset() is the one rule.
  // Queries: bf16 (fp16 with KvFormat::f16) [num_tokens, h_q, d_qk], last dim contiguous; strides in elements.
  const void* q = nullptr;
  int64_t q_stride_token = 0, q_stride_head = 0, q_stride_request = 0;
  int num_tokens = 0, h_q = 0, d_qk = 576, d_v = 512, topk = 0;

  // Indices: int32 [num_tokens, topk] (stride in elements). An index i is valid iff 0 <= i < num_kv
  // and its slot position < the token's topk_length (when given); everything else is masked, never read.
  const int32_t* indices = nullptr;
  int64_t indices_stride_token = 0, indices_stride_request = 0;
  // Optional int32 lengths; token t uses topk_length[t / tokens_per_length] (prefill, dense decode: 1; decode: s_q;
  // the Hopper kernels take only 1 or tokens_per_request).
  const int32_t* topk_length = nullptr;
  int tokens_per_length = 1;
  // Optional f32 [h_q].
  const float* attn_sink = nullptr;
  float sm_scale = 0.f;

  // KV source.
  KvFormat kv_format = KvFormat::bf16;
  const void* kv = nullptr;
  int64_t num_kv = 0;             // valid index range [0, num_kv)
  int64_t kv_row_stride = 0;      // bf16 / f16: elements between rows
  // Dense decode over a cache (bf16, f16 or fp8_v32) whose block size is a multiple of 64: slot s of a token is row
  // indices[s - s % 64] + s % 64 (each 64-slot tile is 64 consecutive rows of one block), and a tile whose first index
  // is not a row is masked whole. Lets the 16-bit pair cluster copy whole tiles by TMA, the producer prefetch a tile's
  // rows and the few-heads FP8 kernel copy a tile in one bulk copy.
  bool kv_dense_tiles = false;
  // fp8_v32 paged cache [num_blocks, block_size, 1, 656]: row r lives at block r / block_size, slot r % block_size.
  int64_t block_size = 0;
  int64_t kv_block_stride_bytes = 0, kv_slot_stride_bytes = 656;
  // fp8_v4: a token's list of `topk` slots is the main pool's `main_topk` slots (indices, topk_length and the
  // kv / num_kv / block_size / kv_block_stride_bytes pool above), then the extra pool's topk - main_topk
  // slots (the fields below; extra_indices [num_tokens, topk - main_topk], extra_topk_length per request as
  // topk_length). Both pools' valid slots share one softmax; each pool's length masks its own slots.
  int main_topk = 0;
  const void* extra_kv = nullptr;
  int64_t extra_num_kv = 0, extra_block_size = 1, extra_block_stride_bytes = 0;
  const int32_t* extra_indices = nullptr;
  int64_t extra_indices_stride_token = 0, extra_indices_stride_request = 0;
  const int32_t* extra_topk_length = nullptr;

  // Outputs: out bf16 (fp16 with KvFormat::f16) [num_tokens, h_q, d_v] (strides in elements); lse / max_logits f32
  // [num_tokens, h_q] with element strides (max_logits may be null).
  void* out = nullptr;
  int64_t out_stride_token = 0, out_stride_head = 0, out_stride_request = 0;
  float* lse = nullptr;
  int64_t lse_stride_token = 0, lse_stride_head = 1, lse_stride_request = 0;
  float* max_logits = nullptr;  // prefill only (tokens_per_request 1)
  int64_t max_logits_stride_token = 0, max_logits_stride_head = 1;

  // Split-KV (decode only). The defaults (sched == nullptr) mean "no split": every token attends over
  // its whole topk and writes out/lse/max_logits directly. With a schedule (mla/decode_schedule.hpp),
  // tokens are grouped into `num_requests` requests of `tokens_per_request` consecutive tokens; part p
  // of `num_parts` processes the block ranges in sched[p]. A request with one split writes out/lse
  // directly; a split request writes, per split k and token s, row (num_splits[r] + k) * tokens_per_request + s
  // of o_accum bf16 [rows, h_q, d_v] (already divided by that split's softmax sum, 0 when empty) and
  // lse_accum f32 [rows, h_q] (natural log, -inf when empty); the combine kernel finishes them. A partial row's
  // columns 16c + 2t, +1, 16c + 8 + 2t, +1 (t < 4) lie at 16c + 4t .. +3, so that the Hopper kernels' fragment
  // stores (a thread holds columns 8j + 2t, +1) fill whole 32-byte sectors: bf16 halves the bytes written and read
  // (the split small batches' bound), and 4-byte stores that leave half sectors measured slower than f32 (H100,
  // 2026-12-06: V3.2 b 1 26.1 -> 29.5 us, this layout 26.4 -> 24.5).
  // Both kernels take split work (the Hopper kernel for the FP8 cache only).
  const void* sched = nullptr;  // mla::sched::PartMeta[num_parts]
  const int32_t* num_splits = nullptr;  // [num_requests + 1]
  int num_parts = 0, num_requests = 0, tokens_per_request = 1;
  uint16_t* o_accum = nullptr;  // bf16, in the layout above
  float* lse_accum = nullptr;
  int split_group_heads = 0;  // split-KV: heads per CTA the schedule was planned for (0: split_decode_group_heads)
  int64_t accum_rows = 0;  // rows allocated in lse_accum / o_accum (a guard: rows past it are never written)

  /// Element offset of token `token`'s row in a per-token tensor with these token and request strides: with
  /// tokens_per_request 1 (prefill, decode with s_q 1) the token stride alone, else request
  /// token / tokens_per_request, position token % tokens_per_request.
  FLASHCPP_HD int64_t token_offset(int64_t token, int64_t stride_token, int64_t stride_request) const {
    if (tokens_per_request <= 1) return token * stride_token;
    return (token / tokens_per_request) * stride_request + (token % tokens_per_request) * stride_token;
  }
  /// The same offset for the token at position `pos` of request `request` (token = request * tokens_per_request +
  /// pos), without a division: a kernel that has the two (every split piece gets them from the schedule) uses this.
  /// Each 64-bit division on a CTA's way to its first loads cost about 30 instructions fetched cold.
  FLASHCPP_HD int64_t request_offset(int64_t request, int pos, int64_t stride_token, int64_t stride_request) const {
    if (tokens_per_request <= 1) return request * stride_token;
    return request * stride_request + static_cast<int64_t>(pos) * stride_token;
  }
  /// The index of the token's entry in the length vectors (topk_length, extra_topk_length), token / tokens_per_length,
  /// for the two values the Hopper kernels take (sparse_attention_sm90_handles): tokens_per_request (a length per
  /// request: decode) or 1 (a length per token: prefill, dense decode).
  FLASHCPP_HD int64_t length_index(int64_t token, int64_t request) const {
    return tokens_per_length == tokens_per_request ? request : token;
  }
};

/// Request `req`'s piece of split-KV part `m`, for token `tok_in_req` of each request: the token, its tiles
/// [tile_begin, tile_end) of the request's `nb` (clamped, so a malformed part gives an empty range), and
/// where its result goes: a partial row (accum_row >= 0, written only when write_partial: inside the
/// accumulators and a split the request has) when the schedule cut the request, else the final output
/// (accum_row -1). Every kernel that takes split work reads its items through this one definition.
struct SplitPiece {
  int64_t token;
  int tile_begin, tile_end;
  int64_t accum_row;
  bool write_partial;
};
FLASHCPP_HD SplitPiece split_piece(const SparseAttentionParams& p, const sched::PartMeta& m, int req, int nb,
                                   int tok_in_req) {
  SplitPiece s;
  // A request's last piece runs to its end: a schedule planned from lengths (decode_plan with lengths) cut the
  // requests at the tiles those lengths gave, and a run with longer ones must still cover every tile. The piece's
  // range comes from the part's metadata alone (end_is_last): the kernels' first index loads wait for it, and
  // num_splits, a second dependent global load, is needed only by the partial row's address.
  int b0 = req == m.begin_req ? m.begin_block : 0;
  int b1 = req == m.end_req && m.end_is_last == 0 ? m.end_block : nb;
  const int local = req == m.begin_req ? m.begin_split : 0;
  const int split0 = p.num_splits[req];
  const int nsplit = p.num_splits[req + 1] - split0;
  b0 = b0 < 0 ? 0 : (b0 > nb ? nb : b0);
  b1 = b1 < b0 ? b0 : (b1 > nb ? nb : b1);
  s.tile_begin = b0;
  s.tile_end = b1;
  s.token = static_cast<int64_t>(req) * p.tokens_per_request + tok_in_req;
  s.accum_row = -1;
  s.write_partial = false;
  if (nsplit > 1) {
    s.accum_row = static_cast<int64_t>(split0 + local) * p.tokens_per_request + tok_in_req;
    s.write_partial = s.accum_row >= 0 && s.accum_row < p.accum_rows && local < nsplit;
  }
  return s;
}

#if defined(__CUDACC__)
/// The slots a token attends: topk_length[length_index] clamped to [0, topk], or topk. `length_index`: the token's
/// entry, token / tokens_per_length (SparseAttentionParams::length_index where the request is known).
__device__ __forceinline__ int effective_topk(const SparseAttentionParams& p, int64_t length_index) {
  if (p.topk_length == nullptr) return p.topk;
  const int len = __ldg(p.topk_length + length_index);
  return len < 0 ? 0 : (len < p.topk ? len : p.topk);
}
#endif

/// Finishes split requests: out = sum_k w_k o_k with w from the splits' lse and the sink; lse natural log.
/// Requests with a single split are skipped (the attention kernel wrote them). Uses the split fields,
/// out/lse, attn_sink and h_q/d_v of `p`. `programmatic` (Hopper): launched as a programmatic dependent of
/// the attention kernel before it, so its launch overlaps that kernel's tail.
cudaError_t launch_sparse_attention_combine(const SparseAttentionParams& p, cudaStream_t stream, bool programmatic);

/// The combine's launch shape: a warp combines 512 / chunks columns of one (token, head), with `batch` split rows
/// in flight. `rows`: tokens x heads; the splits a request expects follow from num_parts / num_requests.
struct CombineShape {
  int chunks, batch;
};
CombineShape combine_shape(int64_t rows, int num_parts, int num_requests);

/// Writes the split-KV schedule for `batch` requests of `topk` slots into device memory (one tiny kernel,
/// graph-capturable): sched PartMeta[num_parts], num_splits int32[batch + 1].
void launch_decode_schedule(void* sched, int32_t* num_splits, int batch, int topk, int num_parts,
                            cudaStream_t stream);

/// The lengths a decode schedule is balanced by: request r of the schedule (request first_request + r of the batch)
/// runs the tiles of its valid slots: blocks_of(min(topk_length[.], main_topk)) (the whole main pool when null), plus
/// for V4 blocks_of(min(extra_topk_length[.], extra_topk)) (the whole extra pool when null), at least one.
struct ScheduleLengths {
  const int32_t* topk_length = nullptr;
  const int32_t* extra_topk_length = nullptr;
  int main_topk = 0, extra_topk = 0;
  int first_request = 0;
};
/// Requests a schedule by lengths takes (their block counts in shared memory); larger batches use every tile.
inline constexpr int kScheduleLengthsMaxRequests = 12288;
/// Block count of schedule request r by `l` (host and device: the tests' reference uses it too).
FLASHCPP_HD int32_t schedule_request_blocks(const ScheduleLengths& l, int32_t main_len, int32_t extra_len) {
  main_len = main_len < 0 ? 0 : (main_len > l.main_topk ? l.main_topk : main_len);
  extra_len = extra_len < 0 ? 0 : (extra_len > l.extra_topk ? l.extra_topk : extra_len);
  const int32_t b = sched::blocks_of(main_len) + sched::blocks_of(extra_len);
  return b < 1 ? 1 : b;
}
/// launch_decode_schedule for `batch` requests balanced by `lengths` (batch <= kScheduleLengthsMaxRequests).
void launch_decode_schedule_by_lengths(void* sched, int32_t* num_splits, int batch, const ScheduleLengths& lengths,
                                       int num_parts, cudaStream_t stream);

/// Dynamic shared memory the simple kernel needs (bytes); the host checks the device offers it.
int sparse_attention_simple_smem_bytes();
/// Whether this build has code for the current device (false on GPUs the fatbin does not cover).
bool sparse_attention_simple_available();

/// `num_rows` V3.2 cache rows (656 bytes, mla/fp8_v32.hpp) beside the bf16 rows of 576 values they stand for, both
/// walked through up to 3 leading dims (row-major, outermost first). The quantizer reads `bf16` and writes `fp8`, the
/// dequantizer the reverse.
struct V32RowsParams {
  void* bf16 = nullptr;
  void* fp8 = nullptr;
  int64_t num_rows = 0;
  int num_lead = 0;                        // leading dims (1..3), outermost first
  int64_t lead_shape[3] = {1, 1, 1};
  int64_t bf16_lead_stride[3] = {0, 0, 0};  // elements
  int64_t fp8_lead_stride[3] = {0, 0, 0};   // bytes

  /// Row `row`: its first bf16 element and first FP8 byte. The device kernels and the host paths walk rows the same
  /// way.
  FLASHCPP_HD void row_offsets(int64_t row, int64_t& bf16_off, int64_t& fp8_off) const {
    int64_t rem = row;
    bf16_off = 0;
    fp8_off = 0;
    for (int d = num_lead - 1; d >= 0; --d) {
      const int64_t i = rem % lead_shape[d];
      rem /= lead_shape[d];
      bf16_off += i * bf16_lead_stride[d];
      fp8_off += i * fp8_lead_stride[d];
    }
  }
};
void launch_quantize_v32(const V32RowsParams& p, cudaStream_t stream);
/// Needs `fp8` and every fp8 stride 16-byte aligned, `bf16` 16-byte aligned and its strides multiples of 8.
void launch_dequantize_v32(const V32RowsParams& p, cudaStream_t stream);

/// V4 pages (mla/fp8_v4.hpp) beside their bf16 tokens: token t of block b is 512 consecutive bf16 values at
/// bf16 + b * bf16_block_stride + t * bf16_token_stride (elements), its records in the page at pages + b * page_stride
/// (bytes). The quantizer reads `bf16` and writes `pages`, the dequantizer the reverse.
struct V4PagesParams {
  void* bf16 = nullptr;
  void* pages = nullptr;
  int64_t num_blocks = 0, block_size = 0;
  int64_t bf16_block_stride = 0, bf16_token_stride = 0;  // elements
  int64_t page_stride = 0;                               // bytes
};
void launch_quantize_v4(const V4PagesParams& p, cudaStream_t stream);
/// Needs `pages` and page_stride 16-byte aligned, `bf16` 16-byte aligned and its strides multiples of 8.
void launch_dequantize_v4(const V4PagesParams& p, cudaStream_t stream);

/// Test / benchmark switch: when true the host never tries launch_sparse_attention_sm90 (the simple kernel
/// runs everywhere). Initialised from the environment variable FLASHCPP_MLA_FORCE_SIMPLE=1.
void set_force_simple_kernel(bool on);
bool force_simple_kernel();

/// Straightforward kernel, correct for every shape the API accepts (any SM >= 8.0). The yardstick.
void launch_sparse_attention_simple(const SparseAttentionParams& p, cudaStream_t stream);

/// The kernels. Which one runs a problem, and how, is decided by one chooser (launch_plan.hpp: choose / launch).
enum class SparseKernel : int {
  simple = 0,      ///< sparse_attention_simple.cu: any SM >= 8.0, every shape the API accepts
  mma_sm90 = 1,    ///< sparse_attention_mma_sm90.cu: Hopper FP8 decode on mma.sync
  wgmma_sm90 = 2,  ///< sparse_attention_wgmma.cuh: Hopper warp-specialized wgmma (prefill; FP8 decode, 2-CTA cluster)
  dense_mma_sm90 = 3,  ///< dense_decode_mma_fp8.cu: Hopper dense decode over the V3.2 FP8 cache, h_q <= 32, on mma.sync
};
const char* kernel_name(SparseKernel k);

/// Which Hopper kernel runs FP8 decode: nullopt (the default) picks per problem (auto_fp8_kernel); a kernel
/// forces it. Initialised from FLASHCPP_MLA_FP8_KERNEL=auto|mma|wgmma; for benchmarks and tests.
void set_fp8_decode_kernel(std::optional<SparseKernel> k);
std::optional<SparseKernel> fp8_decode_kernel();

/// The automatic choice for FP8 decode, from the H200 measurements in docs/MLA.md: wgmma_sm90 (its 2-CTA
/// cluster) for h_q 65..128 at every batch size, split or not (with the 2026-12-01 combine it is the faster
/// kernel from b 1 up, s_q 1 and 2), and for h_q <= 64 its single CTA tile by tile (FlashMLA's suite, b 148
/// topk 16384: 2477 against 4495 us on the mma.sync kernel, H200, 2026-12-01); mma_sm90 for h_q > 128.
SparseKernel auto_fp8_kernel(const SparseAttentionParams& p);

/// Heads one CTA of the wgmma kernel computes in FP8 decode with a split-KV schedule, which the schedule's part
/// count is planned for: 32 for DeepSeek V4 pages with h_q 33..64 (the heads' two halves as a 2-CTA cluster,
/// each CTA dequantizing half of every tile), else 64. The decode planner and choose() (launch_plan.hpp) both
/// follow it; without a schedule choose() picks between the 32-head cluster and one CTA of 64 heads
/// (unsplit_half_heads_cluster).
constexpr int split_decode_group_heads(KvFormat format, int h_q) {
  return format == KvFormat::fp8_v4 && h_q > 32 && h_q <= 64 ? 32 : 64;
}

/// Without a schedule, whether those heads (split_decode_group_heads 32) run as the 32-head cluster rather than
/// one CTA of 64 heads: where all the tokens' clusters fit on the device at once. A round of clusters took
/// about 0.65 of a single CTA's round (H200, 2026-12-01, V4 h_q 64: b 24, one round of 48 clusters, 33.1 us;
/// single CTAs, tile by tile, one round 47-54 us), so two rounds of clusters lose to one of single CTAs.
constexpr bool unsplit_half_heads_cluster(int64_t tokens, int64_t cluster_slots) {
  return tokens >= 1 && tokens <= cluster_slots;
}

/// Whether the Hopper kernels handle the problem (shape, format, alignment). Guarantees from the host: q/kv
/// data 16-byte aligned and their non-unit strides multiples of 8 elements; fp8 cache data 16-byte aligned,
/// block stride a multiple of 16 bytes, slot stride 656; h_q >= 1 (heads are padded to groups of 64); topk
/// a multiple of 64; num_tokens >= 1.
bool sparse_attention_sm90_handles(const SparseAttentionParams& p);

}  // namespace flashcpp::mla::kernels
