// Split-KV schedule for sparse decode, shared by the device plan kernel and host code (tests, CPU
// reference of the schedule). Written from FlashMLA's documented algorithm (greedy fill of SM parts with
// a fixed per-request overhead), with flashcpp's own field layout.
//
// Work unit: one "block" = 64 consecutive topk slots of one request (all s_q tokens and all heads of the
// request go with it). Part p of `num_parts` processes requests begin_req..end_req (inclusive): the first
// from begin_block, the last up to end_block (exclusive), every request in between whole. A request that
// is cut over several parts has several "splits"; num_splits is the exclusive prefix sum of splits per
// request, so split k of request r has accumulator row num_splits[r] + k.
#pragma once
#include <cstdint>

#include "mla/fp8_v32.hpp"  // FLASHCPP_HD

namespace flashcpp::mla::sched {

inline constexpr int kBlockSlots = 64;          ///< topk slots per schedule block
inline constexpr int kFixedOverheadBlocks = 5;  ///< cost of starting a request, in blocks
inline constexpr int kMetaInts = 8;             ///< int32 per part in the metadata tensor
inline constexpr int kMinPieceBlocks = 4;       ///< equal pieces (build_schedule) keep at least this many blocks

/// One part's work; stored as kMetaInts int32 values in this order.
struct PartMeta {
  int32_t begin_req;        ///< first request (inclusive); begin_req > end_req marks an empty part
  int32_t end_req;          ///< last request (inclusive)
  int32_t begin_block;      ///< first block of begin_req
  int32_t end_block;        ///< one past the last block of end_req
  int32_t begin_split;      ///< split index (within begin_req) of this part's piece of begin_req
  int32_t first_is_split;   ///< 1 if begin_req is cut over several parts
  int32_t last_is_split;    ///< 1 if end_req is cut over several parts
  int32_t end_is_last;      ///< 1 if this part's piece of end_req is that request's last (it runs to the end)
};
static_assert(sizeof(PartMeta) == kMetaInts * 4);

/// Blocks of one request with `topk` slots.
FLASHCPP_HD int32_t blocks_of(int32_t topk) { return (topk + kBlockSlots - 1) / kBlockSlots; }

/// Fills `meta[num_parts]` and `num_splits[batch + 1]` for requests of `nb(r)` blocks each (`nb`: any callable, e.g.
/// one reading shared memory on the device; build_schedule below takes an array or one count for all).
/// Deterministic; O(batch + num_parts).
/// Requires batch >= 1, num_parts >= 1, every request >= 1 block.
/// Requests of one size that fill at least 3/4 of the parts as k = min(num_parts / batch, blocks / 4) equal pieces
/// each are cut so, one piece a part: every part then runs one work item (the greedy fill below cuts requests at
/// budget boundaries, which gives most parts pieces of two requests, each paying its Q load and partial output).
/// Pieces keep at least kMinPieceBlocks: one-block pieces lost to the greedy fill (H200, 2026-12-01, V3.2 b 1
/// 22.2 -> 24.4 us, V4 h_q 128 b 2 24.9 -> 25.4) where pieces of 4-16 won (V3.2 b 8 / 16: 51.9 / 85.3 -> 49.6 /
/// 80.7 us).
template <class Blocks>
FLASHCPP_HD void build_schedule_of(int32_t batch, const Blocks& nb, int32_t num_parts, PartMeta* meta,
                                   int32_t* num_splits) {
  bool same_size = true;
  for (int32_t r = 1; r < batch && same_size; ++r) same_size = nb(r) == nb(0);
  if (same_size && batch <= num_parts) {
    const int32_t n = nb(0);
    const int32_t most = n / kMinPieceBlocks;
    const int32_t k = num_parts / batch < most ? num_parts / batch : most;
    if (k >= 1 && int64_t{4} * batch * k >= int64_t{3} * num_parts) {
      for (int32_t r = 0; r <= batch; ++r) num_splits[r] = r * k;
      for (int32_t p = 0; p < num_parts; ++p) {
        PartMeta m{};
        if (p < batch * k) {
          const int32_t r = p / k, j = p % k;
          m.begin_req = m.end_req = r;
          m.begin_block = static_cast<int32_t>(int64_t{j} * n / k);
          m.end_block = static_cast<int32_t>(int64_t{j + 1} * n / k);
          m.begin_split = j;
          m.first_is_split = m.last_is_split = k > 1;
          m.end_is_last = j == k - 1;
        } else {
          m.begin_req = batch;  // empty
          m.end_req = batch - 1;
        }
        meta[p] = m;
      }
      return;
    }
  }
  int64_t total = 0;
  for (int32_t r = 0; r < batch; ++r) total += nb(r) + kFixedOverheadBlocks;
  const int64_t payload = (total + num_parts - 1) / num_parts + kFixedOverheadBlocks;

  for (int32_t r = 0; r <= batch; ++r) num_splits[r] = 0;  // first: pieces per request (shifted by one)
  int32_t req = 0, block = 0;
  for (int32_t p = 0; p < num_parts; ++p) {
    PartMeta m{};
    if (req >= batch) {
      m.begin_req = batch;  // empty
      m.end_req = batch - 1;
      meta[p] = m;
      continue;
    }
    m.begin_req = req;
    m.begin_block = block;
    m.begin_split = num_splits[req + 1];
    int64_t budget = payload;
    for (;;) {
      const int64_t cost = (nb(req) - block) + kFixedOverheadBlocks;
      ++num_splits[req + 1];  // this part holds one piece of `req`
      if (cost <= budget || p == num_parts - 1) {
        // The rest of the request fits (the last part takes whatever is left).
        budget -= cost;
        m.end_req = req;
        m.end_block = nb(req);
        m.end_is_last = 1;
        ++req;
        block = 0;
        if (req >= batch || (budget <= kFixedOverheadBlocks && p != num_parts - 1)) break;
      } else {
        // Cut the request: take what the budget allows (at least one block), continue on the next part.
        int64_t take = budget - kFixedOverheadBlocks;
        if (take < 1) take = 1;
        m.end_req = req;
        m.end_block = block + static_cast<int32_t>(take);
        m.end_is_last = 0;
        block = m.end_block;
        break;
      }
    }
    meta[p] = m;
  }
  // Prefix sum, then the split flags (a request is split when it has more than one piece).
  for (int32_t r = 0; r < batch; ++r) num_splits[r + 1] += num_splits[r];
  for (int32_t p = 0; p < num_parts; ++p) {
    PartMeta& m = meta[p];
    if (m.begin_req > m.end_req) continue;
    m.first_is_split = (num_splits[m.begin_req + 1] - num_splits[m.begin_req]) > 1;
    m.last_is_split = (num_splits[m.end_req + 1] - num_splits[m.end_req]) > 1;
  }
}

/// Blocks of each request: an array, or one value for every request.
struct BlockCounts {
  const int32_t* blocks;
  int32_t uniform_blocks;
  FLASHCPP_HD int32_t operator()(int32_t r) const { return blocks ? blocks[r] : uniform_blocks; }
};

FLASHCPP_HD void build_schedule(int32_t batch, const int32_t* blocks, int32_t uniform_blocks, int32_t num_parts,
                                       PartMeta* meta, int32_t* num_splits) {
  build_schedule_of(batch, BlockCounts{blocks, uniform_blocks}, num_parts, meta, num_splits);
}

}  // namespace flashcpp::mla::sched
