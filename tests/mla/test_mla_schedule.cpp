// Split-KV schedule invariants (the same function the device plan kernel runs): every (request, block)
// is covered exactly once, parts are contiguous and ordered, split counts and flags are consistent, and
// the accumulator rows the run uses stay inside the planned buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "flashcpp/mla.hpp"
#include "mla/decode_schedule.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace {

using namespace flashcpp::mla;

struct Piece {
  int part, begin, end, split;
};

void check_schedule(int batch, const std::vector<int32_t>& blocks, int parts) {
  SCOPED_TRACE("batch " + std::to_string(batch) + ", parts " + std::to_string(parts));
  std::vector<sched::PartMeta> meta(static_cast<size_t>(parts));
  std::vector<int32_t> num_splits(static_cast<size_t>(batch) + 1, -99);
  sched::build_schedule(batch, blocks.data(), 0, parts, meta.data(), num_splits.data());

  std::vector<std::vector<Piece>> pieces(static_cast<size_t>(batch));
  int expected_req = 0, expected_block = 0;
  bool done = false;
  for (int p = 0; p < parts; ++p) {
    const auto& m = meta[static_cast<size_t>(p)];
    if (m.begin_req > m.end_req) {  // empty: only after all the work
      EXPECT_EQ(m.begin_req, batch);
      done = true;
      continue;
    }
    ASSERT_FALSE(done) << "non-empty part " << p << " after an empty one";
    ASSERT_EQ(m.begin_req, expected_req) << "part " << p;
    ASSERT_EQ(m.begin_block, expected_block) << "part " << p;
    for (int r = m.begin_req; r <= m.end_req; ++r) {
      const int b0 = r == m.begin_req ? m.begin_block : 0;
      const int b1 = r == m.end_req ? m.end_block : blocks[static_cast<size_t>(r)];
      ASSERT_LT(b0, b1) << "part " << p << " request " << r << " has an empty piece";
      ASSERT_LE(b1, blocks[static_cast<size_t>(r)]);
      pieces[static_cast<size_t>(r)].push_back({p, b0, b1, r == m.begin_req ? m.begin_split : 0});
    }
    if (m.end_block == blocks[static_cast<size_t>(m.end_req)]) {
      expected_req = m.end_req + 1;
      expected_block = 0;
    } else {
      expected_req = m.end_req;
      expected_block = m.end_block;
    }
  }
  EXPECT_EQ(expected_req, batch) << "not every request was scheduled";

  // Coverage exactly once, in order; split indices 0..n-1; num_splits is the prefix sum of pieces.
  ASSERT_EQ(num_splits[0], 0);
  int total = 0;
  for (int r = 0; r < batch; ++r) {
    const auto& pr = pieces[static_cast<size_t>(r)];
    ASSERT_FALSE(pr.empty()) << "request " << r;
    int next = 0;
    for (size_t k = 0; k < pr.size(); ++k) {
      EXPECT_EQ(pr[k].begin, next) << "request " << r << " piece " << k;
      EXPECT_EQ(pr[k].split, static_cast<int>(k)) << "request " << r;
      next = pr[k].end;
    }
    EXPECT_EQ(next, blocks[static_cast<size_t>(r)]) << "request " << r << " not fully covered";
    const int n = num_splits[static_cast<size_t>(r) + 1] - num_splits[static_cast<size_t>(r)];
    EXPECT_EQ(n, static_cast<int>(pr.size())) << "request " << r;
    total += n;
  }
  EXPECT_EQ(num_splits[static_cast<size_t>(batch)], total);
  // Accumulator rows: each part cuts at most one request, so splits <= batch + parts - 1 < batch + parts.
  EXPECT_LE(total, batch + parts - 1);
  for (int p = 0; p < parts; ++p) {
    const auto& m = meta[static_cast<size_t>(p)];
    if (m.begin_req > m.end_req) continue;
    const int nb = num_splits[static_cast<size_t>(m.begin_req) + 1] - num_splits[static_cast<size_t>(m.begin_req)];
    const int ne = num_splits[static_cast<size_t>(m.end_req) + 1] - num_splits[static_cast<size_t>(m.end_req)];
    EXPECT_EQ(m.first_is_split, nb > 1 ? 1 : 0);
    EXPECT_EQ(m.last_is_split, ne > 1 ? 1 : 0);
    // The part holds end_req's last piece exactly when that piece ends the request.
    const auto& pe = pieces[static_cast<size_t>(m.end_req)];
    const int end_blocks = blocks[static_cast<size_t>(m.end_req)];
    const bool last =
        std::any_of(pe.begin(), pe.end(), [&](const Piece& x) { return x.part == p && x.end == end_blocks; });
    EXPECT_EQ(m.end_is_last, last ? 1 : 0) << "part " << p;
  }
}

TEST(MlaSchedule, UniformRequestsEveryShape) {
  for (int batch : {1, 2, 3, 4, 64, 74, 128, 321})
    for (int topk : {64, 128, 576, 2048, 16384})
      for (int parts : {1, 2, 7, 33, 66, 132, 200}) {
        std::vector<int32_t> blocks(static_cast<size_t>(batch), sched::blocks_of(topk));
        check_schedule(batch, blocks, parts);
        // The device path passes blocks == nullptr with a uniform count: identical result.
        std::vector<sched::PartMeta> a(static_cast<size_t>(parts)), b(static_cast<size_t>(parts));
        std::vector<int32_t> na(static_cast<size_t>(batch) + 1), nb(static_cast<size_t>(batch) + 1);
        sched::build_schedule(batch, blocks.data(), 0, parts, a.data(), na.data());
        sched::build_schedule(batch, nullptr, sched::blocks_of(topk), parts, b.data(), nb.data());
        ASSERT_EQ(na, nb);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(sched::PartMeta)));
      }
}

// The work items every kernel reads from a schedule (kernels::split_piece), walked the way the kernels walk
// them: each (request, block) of each token is attended exactly once; a request with one split writes the
// final output, every piece of a cut request its own accumulator row inside the planned rows.
TEST(MlaSchedule, KernelPiecesCoverEveryRequestOnceAndWriteDistinctRows) {
  for (int batch : {1, 2, 5, 64, 129})
    for (int topk : {64, 640, 2048})
      for (int parts : {1, 3, 33, 132})
        for (int tokens_per_request : {1, 2}) {
          SCOPED_TRACE(std::to_string(batch) + " requests, topk " + std::to_string(topk) + ", " +
                       std::to_string(parts) + " parts, s_q " + std::to_string(tokens_per_request));
          const int nb = sched::blocks_of(topk);
          std::vector<sched::PartMeta> meta(static_cast<size_t>(parts));
          std::vector<int32_t> num_splits(static_cast<size_t>(batch) + 1);
          sched::build_schedule(batch, nullptr, nb, parts, meta.data(), num_splits.data());
          kernels::SparseAttentionParams p;
          p.num_splits = num_splits.data();
          p.num_requests = batch;
          p.tokens_per_request = tokens_per_request;
          p.accum_rows = static_cast<int64_t>(num_splits[static_cast<size_t>(batch)]) * tokens_per_request;
          std::vector<int> covered(static_cast<size_t>(batch * nb * tokens_per_request), 0);
          std::vector<int> row_used(static_cast<size_t>(p.accum_rows), 0);
          for (const sched::PartMeta& m : meta) {
            const int first = m.begin_req < 0 ? 0 : m.begin_req;
            const int last = m.end_req < batch ? m.end_req : batch - 1;
            for (int tok = 0; tok < tokens_per_request; ++tok)
              for (int req = first; req <= last; ++req) {
                const kernels::SplitPiece piece = kernels::split_piece(p, m, req, nb, tok);
                ASSERT_EQ(piece.token, static_cast<int64_t>(req) * tokens_per_request + tok);
                ASSERT_LE(0, piece.tile_begin);
                ASSERT_LT(piece.tile_begin, piece.tile_end);
                ASSERT_LE(piece.tile_end, nb);
                for (int b = piece.tile_begin; b < piece.tile_end; ++b)
                  ++covered[static_cast<size_t>((req * nb + b) * tokens_per_request + tok)];
                const int splits = num_splits[static_cast<size_t>(req) + 1] - num_splits[static_cast<size_t>(req)];
                if (splits == 1) {
                  EXPECT_EQ(piece.accum_row, -1);
                  EXPECT_FALSE(piece.write_partial);
                } else {
                  ASSERT_TRUE(piece.write_partial);
                  ASSERT_LT(piece.accum_row, p.accum_rows);
                  ++row_used[static_cast<size_t>(piece.accum_row)];
                }
              }
          }
          EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), static_cast<std::ptrdiff_t>(covered.size()))
              << "a (request, block, token) attended other than once";
          EXPECT_EQ(std::count_if(row_used.begin(), row_used.end(), [](int n) { return n > 1; }), 0)
              << "two pieces write one accumulator row";
        }
}

// The Hopper kernels take a piece's offsets from its request and position (request_offset) and its length entry from
// length_index, with no division; both must name what the token arithmetic names (token_offset, token /
// tokens_per_length), for FlashMLA-style strides that give each request its own stride.
TEST(MlaSchedule, RequestOffsetsAndLengthEntriesMatchTheTokenArithmetic) {
  std::mt19937 rng(7);
  for (int tokens_per_request : {1, 2, 3, 4, 7}) {
    kernels::SparseAttentionParams p;
    p.tokens_per_request = tokens_per_request;
    for (int per_length : {1, tokens_per_request}) {
      p.tokens_per_length = per_length;
      for (int trial = 0; trial < 200; ++trial) {
        const int64_t request = std::uniform_int_distribution<int64_t>(0, 1 << 20)(rng);
        const int pos = std::uniform_int_distribution<int>(0, tokens_per_request - 1)(rng);
        const int64_t stride_token = std::uniform_int_distribution<int64_t>(1, 1 << 16)(rng);
        const int64_t stride_request =
            stride_token * tokens_per_request + std::uniform_int_distribution<int64_t>(0, 4096)(rng);  // padded
        const int64_t token = request * tokens_per_request + pos;
        SCOPED_TRACE("s_q " + std::to_string(tokens_per_request) + ", request " + std::to_string(request) +
                     ", position " + std::to_string(pos));
        ASSERT_EQ(p.request_offset(request, pos, stride_token, stride_request),
                  p.token_offset(token, stride_token, stride_request));
        ASSERT_EQ(p.length_index(token, request), token / per_length);
      }
    }
  }
}

// A schedule planned from lengths (DecodePlanLengths, kernels::schedule_request_blocks) cuts each request at the
// tiles its planned lengths leave, and the pieces the kernels walk (split_piece over the request's full tile count)
// still cover every tile once, whatever lengths the run has: a request's last piece runs to its end. With the
// planned lengths the valid tiles (those the V4 kernel runs, main pool's then extra pool's) spread evenly: no part's
// cost passes the greedy fill's payload, and the busiest parts run fewer of them than with every tile counted.
TEST(MlaSchedule, SchedulesByLengthsCoverEveryTileAndBalanceTheValidOnes) {
  std::mt19937 rng(29);
  int64_t sum_by_lengths = 0, sum_every_tile = 0;
  for (int iter = 0; iter < 200; ++iter) {
    const int batch = std::uniform_int_distribution<int>(1, 300)(rng);
    const int parts = std::uniform_int_distribution<int>(1, 140)(rng);
    const int main_topk = 64 * std::uniform_int_distribution<int>(1, 4)(rng);
    const int extra_topk = 64 * std::uniform_int_distribution<int>(0, 16)(rng);
    const int nb = sched::blocks_of(main_topk + extra_topk);
    SCOPED_TRACE(std::to_string(batch) + " requests, " + std::to_string(parts) + " parts, topk " +
                 std::to_string(main_topk) + " + " + std::to_string(extra_topk));
    kernels::ScheduleLengths l;
    l.main_topk = main_topk;
    l.extra_topk = extra_topk;
    std::uniform_int_distribution<int> main_len(-5, main_topk + 5), extra_len(-5, extra_topk + 5);
    std::vector<int32_t> planned(static_cast<size_t>(batch)), valid(static_cast<size_t>(batch));
    for (int r = 0; r < batch; ++r) {
      const int m = main_len(rng), x = extra_len(rng);
      planned[static_cast<size_t>(r)] = kernels::schedule_request_blocks(l, m, x);
      const int vm = std::clamp(m, 0, main_topk), vx = std::clamp(x, 0, extra_topk);
      valid[static_cast<size_t>(r)] = sched::blocks_of(vm) + sched::blocks_of(vx);
      ASSERT_EQ(planned[static_cast<size_t>(r)], std::max(valid[static_cast<size_t>(r)], 1));
    }
    auto busiest = [&](const std::vector<int32_t>& blocks, bool check_cover) {
      std::vector<sched::PartMeta> meta(static_cast<size_t>(parts));
      std::vector<int32_t> num_splits(static_cast<size_t>(batch) + 1);
      sched::build_schedule(batch, blocks.data(), 0, parts, meta.data(), num_splits.data());
      kernels::SparseAttentionParams p;
      p.num_splits = num_splits.data();
      p.num_requests = batch;
      p.accum_rows = num_splits[static_cast<size_t>(batch)];
      std::vector<int> covered(static_cast<size_t>(batch) * nb, 0);
      int most = 0;
      for (const sched::PartMeta& m : meta) {
        int runs = 0;  // valid tiles this part runs
        for (int req = std::max(m.begin_req, 0); req <= std::min(m.end_req, batch - 1); ++req) {
          const kernels::SplitPiece piece = kernels::split_piece(p, m, req, nb, 0);
          for (int b = piece.tile_begin; b < piece.tile_end; ++b)
            ++covered[static_cast<size_t>(req) * nb + b];
          runs += std::max(0, std::min(piece.tile_end, valid[static_cast<size_t>(req)]) - piece.tile_begin);
        }
        most = std::max(most, runs);
      }
      if (check_cover)
        EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), static_cast<std::ptrdiff_t>(covered.size()))
            << "a (request, tile) attended other than once";
      return most;
    };
    const int by_lengths = busiest(planned, true);
    const int every_tile = busiest(std::vector<int32_t>(static_cast<size_t>(batch), nb), true);
    // The greedy fill's bound: no part's cost (its valid tiles plus kFixedOverheadBlocks a piece) exceeds the
    // payload, the mean cost of a part plus one overhead.
    int64_t total = 0;
    for (int32_t b : planned) total += b + sched::kFixedOverheadBlocks;
    EXPECT_LE(by_lengths, (total + parts - 1) / parts + sched::kFixedOverheadBlocks);
    sum_by_lengths += by_lengths;
    sum_every_tile += every_tile;
  }
  // Over all the draws the busiest parts run fewer valid tiles than with every tile counted (13% fewer, 2026-12-03).
  EXPECT_LT(sum_by_lengths * 10, sum_every_tile * 9) << sum_by_lengths << " against " << sum_every_tile;
}

TEST(MlaSchedule, RandomRequestLengths) {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    const int batch = std::uniform_int_distribution<int>(1, 200)(rng);
    const int parts = std::uniform_int_distribution<int>(1, 160)(rng);
    std::vector<int32_t> blocks(static_cast<size_t>(batch));
    for (auto& b : blocks) b = std::uniform_int_distribution<int>(1, 300)(rng);
    check_schedule(batch, blocks, parts);
  }
}

TEST(MlaSchedule, SmallBatchIsSpreadOverParts) {
  // One request of 32 blocks over 66 parts: it is cut into several splits (that is the point of split-KV).
  std::vector<sched::PartMeta> meta(66);
  std::vector<int32_t> ns(2);
  sched::build_schedule(1, nullptr, 32, 66, meta.data(), ns.data());
  EXPECT_GT(ns[1], 4);
  check_schedule(1, std::vector<int32_t>{32}, 66);
}

// Requests of one size that fill >= 3/4 of the parts with equal pieces: one piece of one request a part.
TEST(MlaSchedule, FewEqualRequestsGetOnePieceAPart) {
  for (auto [batch, parts, pieces] : {std::tuple{16, 33, 2}, std::tuple{8, 33, 4}, std::tuple{4, 33, 8},
                                      std::tuple{5, 33, 6}}) {
    SCOPED_TRACE(std::to_string(batch) + " requests over " + std::to_string(parts) + " parts");
    std::vector<sched::PartMeta> meta(static_cast<size_t>(parts));
    std::vector<int32_t> ns(static_cast<size_t>(batch) + 1);
    sched::build_schedule(batch, nullptr, 32, parts, meta.data(), ns.data());
    for (int p = 0; p < parts; ++p) {
      const auto& m = meta[static_cast<size_t>(p)];
      if (p >= batch * pieces) {
        EXPECT_GT(m.begin_req, m.end_req) << "part " << p << " should be empty";
        continue;
      }
      EXPECT_EQ(m.begin_req, p / pieces);
      EXPECT_EQ(m.end_req, p / pieces);
      EXPECT_EQ(m.begin_split, p % pieces);
      const int len = m.end_block - m.begin_block;
      EXPECT_TRUE(len == 32 / pieces || len == 32 / pieces + 1) << "part " << p << ": " << len << " blocks";
    }
    EXPECT_EQ(ns[static_cast<size_t>(batch)], batch * pieces);
    check_schedule(batch, std::vector<int32_t>(static_cast<size_t>(batch), 32), parts);
  }
  // Below 3/4 of the parts (12 requests x 2 pieces of 33), or pieces under 4 blocks (2 requests of 32 blocks: 8
  // pieces each at most, 16 of 33 parts): the greedy fill.
  for (auto [batch, blocks, equal_pieces] : {std::tuple{12, 32, 24}, std::tuple{2, 32, 32}, std::tuple{1, 32, 32}}) {
    std::vector<sched::PartMeta> meta(33);
    std::vector<int32_t> ns(static_cast<size_t>(batch) + 1);
    sched::build_schedule(batch, nullptr, blocks, 33, meta.data(), ns.data());
    EXPECT_NE(ns[static_cast<size_t>(batch)], equal_pieces) << batch << " requests";
    check_schedule(batch, std::vector<int32_t>(static_cast<size_t>(batch), blocks), 33);
  }
}

TEST(MlaSchedule, PlanSizesCoverTheSchedule) {
  for (int batch : {1, 2, 3, 8, 30})
    for (int s_q : {1, 2, 3})
      for (int h_q : {16, 64, 128})
        for (int topk : {64, 2048}) {
          const DecodeConfig cfg{.batch = batch, .s_q = s_q, .h_q = h_q, .d_qk = 576, .topk = topk};
          const auto s = decode_plan_sizes(cfg, 132);
          if (!s.split) {
            EXPECT_GE(3 * int64_t{batch} * s_q * ((h_q + 63) / 64), 2 * 132);
            continue;
          }
          // The schedule covers the split requests: all of them, or those after the head (a short last wave).
          const int split_requests = batch - s.head_requests;
          ASSERT_GE(split_requests, 1);
          EXPECT_EQ(s.num_splits_elems, split_requests + 1);
          std::vector<sched::PartMeta> meta(static_cast<size_t>(s.num_sm_parts));
          std::vector<int32_t> ns(static_cast<size_t>(split_requests) + 1);
          sched::build_schedule(split_requests, nullptr, sched::blocks_of(topk), s.num_sm_parts, meta.data(), ns.data());
          // Rows used: (num_splits[b]) * s_q rows of h_q heads.
          EXPECT_LE(int64_t{ns[static_cast<size_t>(split_requests)]} * s_q * h_q, s.lse_accum_elems);
          EXPECT_EQ(s.o_accum_elems, s.lse_accum_elems * 256);  // bf16 rows, two to an f32 element
          EXPECT_EQ(s.sched_meta_elems, int64_t{s.num_sm_parts} * sched::kMetaInts);
        }
}

}  // namespace
