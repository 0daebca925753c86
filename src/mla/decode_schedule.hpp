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
#include <climits>
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

/// floor(j * n / k) (0 <= j <= k, n >= 0, k >= 1): where piece j of n blocks cut k ways begins; 32-bit divisions
/// while j * (n % k) < k * k fits.
FLASHCPP_HD int32_t piece_edge(int32_t j, int32_t n, int32_t k) {
  return j * (n / k) + (k <= 46340 ? j * (n % k) / k : static_cast<int32_t>(int64_t{j} * (n % k) / k));
}

/// The equal-pieces fill of build_schedule_of: pieces per request (k), or 0 where the greedy fill runs.
template <class Blocks>
FLASHCPP_HD int32_t equal_pieces(int32_t batch, const Blocks& nb, int32_t num_parts) {
  if (batch > num_parts) return 0;
  const int32_t n0 = nb(0);
  for (int32_t r = 1; r < batch; ++r)
    if (nb(r) != n0) return 0;
  const int32_t most = n0 / kMinPieceBlocks;
  const int32_t k = num_parts / batch < most ? num_parts / batch : most;
  return k >= 1 && int64_t{4} * batch * k >= int64_t{3} * num_parts ? k : 0;
}

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
  if (const int32_t k = equal_pieces(batch, nb, num_parts); k > 0) {
    const int32_t n = nb(0);
    for (int32_t r = 0; r <= batch; ++r) num_splits[r] = r * k;
    for (int32_t p = 0; p < num_parts; ++p) {
      PartMeta m{};
      if (p < batch * k) {
        const int32_t r = p / k, j = p % k;
        m.begin_req = m.end_req = r;
        m.begin_block = piece_edge(j, n, k);
        m.end_block = piece_edge(j + 1, n, k);
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

/// One part of the schedule build_schedule_of makes, derived without the whole table: its PartMeta and num_splits at
/// its first and last requests (every request between them is whole in this part, one split). Lets a kernel start its
/// first loads without reading the plan's schedule from global memory (a DRAM round trip before the first Q and index
/// loads of every CTA). O(requests); the host enables it for few requests (kDerivedMaxRequests).
struct DerivedPart {
  PartMeta meta;
  int32_t first_split0, first_splits;  ///< num_splits[begin_req] and begin_req's piece count
  int32_t last_split0, last_splits;    ///< the same for end_req
};
/// Runs of more requests read the plan's schedule: every thread of a CTA derives its part (one walk over the
/// requests), which must stay shorter than the DRAM round trip it replaces.
inline constexpr int kDerivedMaxRequests = 4;

/// Walks the greedy fill of build_schedule_of request by request: calls visit(r, n, split0, pieces, q0, take0, step)
/// per request until visit returns true, where request r (n = nb(r) blocks) has its pieces in parts q0 .. q0 + pieces
/// - 1: the first takes blocks [0, take0) (take0 == n: whole), each further one `step` blocks, the last the rest.
template <class Blocks, class Visit>
FLASHCPP_HD void walk_greedy(int32_t batch, const Blocks& nb, int32_t num_parts, Visit&& visit) {
  constexpr int32_t c = kFixedOverheadBlocks;
  int64_t total = 0;
  for (int32_t r = 0; r < batch; ++r) total += nb(r) + c;
  // 32-bit division where the total allows (always for the few requests a kernel derives).
  const int32_t payload = (total <= INT32_MAX - num_parts ? (static_cast<int32_t>(total) + num_parts - 1) / num_parts
                                                          : static_cast<int32_t>((total + num_parts - 1) / num_parts)) +
                          c;
  const int32_t step = payload - c;  // >= 1: blocks a fresh part takes of a request that does not fit it
  const int32_t last_part = num_parts - 1;
  int32_t q = 0, budget = payload, split0 = 0;
  for (int32_t r = 0; r < batch; ++r) {
    const int32_t n = nb(r), q0 = q;
    int32_t pieces, take0, qf;
    int64_t left;  // the budget of the part the request ends in, after it
    if (int64_t{n} + c <= budget || q == last_part) {
      pieces = 1, take0 = n, qf = q;
      left = int64_t{budget} - n - c;
    } else {
      take0 = budget - c;  // >= 1: a part continues with a request only while its budget exceeds c
      const int32_t rest = n - take0;
      int32_t middle = rest + c <= payload ? 0 : (rest + step - 1) / step - 1;  // cut parts after q0
      if (q0 + 1 + middle > last_part) middle = last_part - q0 - 1;             // the last part takes what is left
      qf = q0 + 1 + middle;
      pieces = middle + 2;
      left = int64_t{payload} - (rest - int64_t{middle} * step) - c;
    }
    if (visit(r, n, split0, pieces, q0, take0, step)) return;
    split0 += pieces;
    if (qf != last_part && left <= c) {
      q = qf + 1, budget = payload;
    } else {
      q = qf, budget = static_cast<int32_t>(left);
    }
  }
}

/// Part `part` of build_schedule_of's schedule of `batch` requests of nb(r) blocks (batch, num_parts, nb(r) >= 1).
template <class Blocks>
FLASHCPP_HD DerivedPart derived_part(int32_t batch, const Blocks& nb, int32_t num_parts, int32_t part) {
  DerivedPart u{};
  u.meta.begin_req = batch;  // empty until a request touches the part
  u.meta.end_req = batch - 1;
  if (const int32_t k = equal_pieces(batch, nb, num_parts); k > 0) {
    if (part >= batch * k) return u;
    const int32_t r = part / k, j = part % k, n = nb(r);
    u.meta = PartMeta{r, r, piece_edge(j, n, k), piece_edge(j + 1, n, k), j, k > 1, k > 1, j == k - 1};
    u.first_split0 = u.last_split0 = r * k;
    u.first_splits = u.last_splits = k;
    return u;
  }
  bool touched = false;
  walk_greedy(batch, nb, num_parts, [&](int32_t r, int32_t n, int32_t split0, int32_t pieces, int32_t q0,
                                        int32_t take0, int32_t step) {
    if (q0 > part) return true;
    const int32_t j = part - q0;
    if (j >= pieces) return false;
    const int32_t begin = j == 0 ? 0 : take0 + (j - 1) * step;
    const int32_t end = j == pieces - 1 ? n : take0 + j * step;
    if (!touched) {
      touched = true;
      u.meta.begin_req = r, u.meta.begin_block = begin, u.meta.begin_split = j;
      u.first_split0 = split0, u.first_splits = pieces;
    }
    u.meta.end_req = r, u.meta.end_block = end, u.meta.end_is_last = j == pieces - 1;
    u.last_split0 = split0, u.last_splits = pieces;
    return false;
  });
  u.meta.first_is_split = touched && u.first_splits > 1;
  u.meta.last_is_split = touched && u.last_splits > 1;
  return u;
}

/// num_splits[r] of that schedule (split0) and request r's piece count.
template <class Blocks>
FLASHCPP_HD void derived_splits(int32_t batch, const Blocks& nb, int32_t num_parts, int32_t r, int32_t& split0,
                                int32_t& pieces) {
  if (const int32_t k = equal_pieces(batch, nb, num_parts); k > 0) {
    split0 = r * k, pieces = k;
    return;
  }
  split0 = 0, pieces = 1;
  walk_greedy(batch, nb, num_parts, [&](int32_t req, int32_t, int32_t s0, int32_t n, int32_t, int32_t, int32_t) {
    if (req < r) return false;
    split0 = s0, pieces = n;
    return true;
  });
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
