// The launch plan (one choice for dispatch, benchmarks and tests: kernel, wgmma variant, heads per CTA, cluster) and
// the page/slot divider the FP8 producers use, on the CPU: no kernel is launched here.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <cstdint>
#include <random>

#include "mla/fast_divmod.hpp"
#include "mla/launch_plan.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace {

using namespace flashcpp::mla;
using kernels::KvFormat;
using kernels::LaunchPlan;
using kernels::SparseKernel;
using kernels::WgmmaVariant;

alignas(16) uint8_t g_buffer[4096];

// A problem every Hopper kernel handles: prefill over bf16 KV, aligned, d_qk 576, h_q 128.
kernels::SparseAttentionParams prefill_params() {
  kernels::SparseAttentionParams p;
  p.q = g_buffer;
  p.kv = g_buffer;
  p.out = g_buffer;
  p.indices = reinterpret_cast<const int32_t*>(g_buffer);
  p.q_stride_token = 128 * 576;
  p.q_stride_head = 576;
  p.out_stride_token = 128 * 512;
  p.out_stride_head = 512;
  p.num_tokens = 4;
  p.h_q = 128;
  p.topk = 2048;
  p.num_kv = 8192;
  p.kv_row_stride = 576;
  return p;
}

kernels::SparseAttentionParams decode_params() {
  kernels::SparseAttentionParams p = prefill_params();
  p.kv_format = KvFormat::fp8_v32;
  p.block_size = 64;
  p.kv_block_stride_bytes = 64 * 656;
  p.kv_slot_stride_bytes = 656;
  return p;
}

// An H200 (132 SMs, 66 whole clusters of the unsplit V4 32-head instantiation), or a GPU without the Hopper kernels.
kernels::KernelSupport facts(bool hopper, int64_t cluster_slots = 66) {
  kernels::KernelSupport f;
  f.device_id = 0;
  f.cc_major = hopper ? 9 : 8;
  f.sm_count = 132;
  f.sparse_supported = true;
  f.hopper = hopper;
  f.v4_half_heads_cluster_slots = hopper ? cluster_slots : 0;
  f.tensor_maps = hopper;
  return f;
}

SparseKernel kernel_of(const kernels::SparseAttentionParams& p, bool hopper) {
  return kernels::choose(p, facts(hopper)).kernel;
}

struct Fp8KernelScope {
  std::optional<SparseKernel> saved = kernels::fp8_decode_kernel();
  ~Fp8KernelScope() { kernels::set_fp8_decode_kernel(saved); }
};

// V4 with h_q 33..64 runs split work as the 32-head cluster (its schedule counts two head groups per token), and
// unsplit work too where all the clusters fit at once (132 SMs: 66 clusters).
TEST(MlaKernelSelect, HalfHeadsClusterForV4WithUpTo64Heads) {
  using kernels::KvFormat;
  EXPECT_EQ(kernels::split_decode_group_heads(KvFormat::fp8_v4, 64), 32);
  EXPECT_EQ(kernels::split_decode_group_heads(KvFormat::fp8_v4, 33), 32);
  EXPECT_EQ(kernels::split_decode_group_heads(KvFormat::fp8_v4, 32), 64);
  EXPECT_EQ(kernels::split_decode_group_heads(KvFormat::fp8_v4, 128), 64);
  EXPECT_EQ(kernels::split_decode_group_heads(KvFormat::fp8_v32, 64), 64);
  EXPECT_TRUE(kernels::unsplit_half_heads_cluster(48, 66));   // b 24: one round of clusters
  EXPECT_TRUE(kernels::unsplit_half_heads_cluster(66, 66));
  EXPECT_FALSE(kernels::unsplit_half_heads_cluster(67, 66));  // a second round: single CTAs
  EXPECT_FALSE(kernels::unsplit_half_heads_cluster(296, 66));  // b 148
  EXPECT_FALSE(kernels::unsplit_half_heads_cluster(4, 0));     // no cluster fits
}

// The combine's shape: whole rows, two in flight, where tokens x heads fill the GPU with few splits each (FlashMLA's
// suite, V3.2 s_q 2 h_q 128 b 16: 33 parts, two splits a request); column halves at b 8 (four splits); quarter rows
// and deep batches for a few tokens with tens of splits (b 1: 16 splits; V4 h_q 128 b 2: about 9).
TEST(MlaKernelSelect, CombineShapeFollowsRowsAndSplits) {
  auto shape = [](int64_t rows, int parts, int requests) {
    const kernels::CombineShape s = kernels::combine_shape(rows, parts, requests);
    return std::pair{s.chunks, s.batch};
  };
  EXPECT_EQ(shape(32 * 128, 33, 16), (std::pair{1, 2}));
  EXPECT_EQ(shape(16 * 128, 33, 8), (std::pair{2, 4}));
  EXPECT_EQ(shape(2 * 128, 33, 1), (std::pair{4, 16}));
  EXPECT_EQ(shape(4 * 128, 33, 2), (std::pair{4, 16}));
  EXPECT_EQ(shape(4 * 128, 12, 2), (std::pair{4, 8}));
  EXPECT_EQ(shape(148 * 128, 66, 74), (std::pair{1, 2}));  // a whole V4 batch split, about two splits a request
  EXPECT_EQ(shape(32 * 128, 132, 16), (std::pair{4, 16}));  // many splits keep the deep batch however many rows
}

TEST(MlaKernelSelect, HopperPicksWgmmaForPrefillAndTheForcedKernelForFp8Decode) {
  Fp8KernelScope scope;
  kernels::set_fp8_decode_kernel(SparseKernel::mma_sm90);
  EXPECT_EQ(kernel_of(prefill_params(), true), SparseKernel::wgmma_sm90);
  EXPECT_EQ(kernel_of(decode_params(), true), SparseKernel::mma_sm90);
  kernels::set_fp8_decode_kernel(SparseKernel::wgmma_sm90);
  EXPECT_EQ(kernel_of(decode_params(), true), SparseKernel::wgmma_sm90);
  EXPECT_EQ(kernel_of(prefill_params(), true), SparseKernel::wgmma_sm90);
}

TEST(MlaKernelSelect, AutomaticFp8ChoiceFollowsHeads) {
  Fp8KernelScope scope;
  kernels::set_fp8_decode_kernel(std::nullopt);
  kernels::SparseAttentionParams p = decode_params();
  p.h_q = 128;
  EXPECT_EQ(kernel_of(p, true), SparseKernel::wgmma_sm90);  // unsplit, h_q 128: the 2-CTA cluster
  // h_q <= 64: the single CTA, tile by tile; past 128 the mma.sync kernel.
  for (int h : {1, 32, 64, 65}) {
    p.h_q = h;
    EXPECT_EQ(kernel_of(p, true), SparseKernel::wgmma_sm90) << "h_q " << h;
  }
  for (int h : {129, 256}) {
    p.h_q = h;
    EXPECT_EQ(kernel_of(p, true), SparseKernel::mma_sm90) << "h_q " << h;
  }
  // Split-KV: the cluster at any work per part, down to one request over 33 parts (topk 2048 = 32 tiles).
  p.h_q = 128;
  p.topk = 2048;
  p.num_parts = 33;
  p.sched = g_buffer;
  p.num_splits = reinterpret_cast<const int32_t*>(g_buffer);
  p.o_accum = reinterpret_cast<uint16_t*>(g_buffer);
  p.lse_accum = reinterpret_cast<float*>(g_buffer);
  for (int requests : {1, 2, 4, 5, 8}) {
    p.num_requests = requests;
    EXPECT_EQ(kernels::auto_fp8_kernel(p), SparseKernel::wgmma_sm90) << requests << " requests";
    EXPECT_EQ(kernel_of(p, true), SparseKernel::wgmma_sm90) << requests << " requests";
  }
  p.h_q = 64;
  EXPECT_EQ(kernel_of(p, true), SparseKernel::wgmma_sm90);
  // A forced kernel wins over the automatic choice.
  p.h_q = 128;
  p.num_requests = 1;
  kernels::set_fp8_decode_kernel(SparseKernel::mma_sm90);
  EXPECT_EQ(kernel_of(p, true), SparseKernel::mma_sm90);
}

// V4 pages: the wgmma kernel takes them (automatic or forced; forcing the mma.sync kernel, which has no V4
// path, runs the simple one), and only shapes it handles: page strides of 16-byte multiples, pool slot counts
// of whole 64-row tiles, an extra pool present wherever it has slots.
TEST(MlaKernelSelect, V4PagesRunOnTheWgmmaKernel) {
  Fp8KernelScope scope;
  kernels::SparseAttentionParams p = decode_params();
  p.kv_format = KvFormat::fp8_v4;
  p.d_qk = 512;
  p.topk = 128 + 512;
  p.main_topk = 128;
  p.kv_block_stride_bytes = 64 * 584;
  p.extra_kv = g_buffer;
  p.extra_indices = reinterpret_cast<const int32_t*>(g_buffer);
  p.extra_block_size = 256;
  p.extra_block_stride_bytes = 256 * 584;
  EXPECT_TRUE(kernels::sparse_attention_sm90_handles(p));
  kernels::set_fp8_decode_kernel(std::nullopt);
  EXPECT_EQ(kernel_of(p, true), SparseKernel::wgmma_sm90);
  kernels::set_fp8_decode_kernel(SparseKernel::mma_sm90);
  EXPECT_EQ(kernel_of(p, true), SparseKernel::simple);
  kernels::set_fp8_decode_kernel(SparseKernel::wgmma_sm90);
  EXPECT_EQ(kernel_of(p, true), SparseKernel::wgmma_sm90);
  EXPECT_EQ(kernel_of(p, false), SparseKernel::simple);
  auto unhandled = [&](auto change, const char* what) {
    kernels::SparseAttentionParams q = p;
    change(q);
    EXPECT_FALSE(kernels::sparse_attention_sm90_handles(q)) << what;
    EXPECT_EQ(kernel_of(q, true), SparseKernel::simple) << what;
  };
  unhandled([](auto& q) { q.main_topk = 96; }, "main pool not whole tiles");
  unhandled([](auto& q) { q.main_topk = 1024; }, "main_topk past topk");
  unhandled([](auto& q) { q.extra_kv = nullptr; }, "extra slots without an extra pool");
  unhandled([](auto& q) { q.extra_kv = g_buffer + 8; }, "extra pool not 16-byte aligned");
  unhandled([](auto& q) { q.extra_block_stride_bytes = 256 * 584 + 4; }, "extra page stride not a 16-byte multiple");
  unhandled([](auto& q) { q.kv_block_stride_bytes = 64 * 584 + 4; }, "main page stride not a 16-byte multiple");
  unhandled([](auto& q) { q.d_qk = 576; }, "d_qk 576");
  kernels::SparseAttentionParams main_only = p;  // no extra pool at all
  main_only.topk = main_only.main_topk = 128;
  main_only.extra_kv = nullptr;
  main_only.extra_indices = nullptr;
  EXPECT_EQ(kernel_of(main_only, true), SparseKernel::wgmma_sm90);
}

TEST(MlaKernelSelect, SimpleOffHopperWhenForcedOrUnhandled) {
  EXPECT_EQ(kernel_of(prefill_params(), false), SparseKernel::simple);
  EXPECT_EQ(kernel_of(decode_params(), false), SparseKernel::simple);

  kernels::set_force_simple_kernel(true);
  EXPECT_EQ(kernel_of(prefill_params(), true), SparseKernel::simple);
  kernels::set_force_simple_kernel(false);

  auto misaligned = prefill_params();
  misaligned.q = g_buffer + 8;  // rows not 16-byte aligned
  EXPECT_EQ(kernel_of(misaligned, true), SparseKernel::simple);
  auto odd_stride = prefill_params();
  odd_stride.out_stride_head = 516;  // not a multiple of 8 elements
  EXPECT_EQ(kernel_of(odd_stride, true), SparseKernel::simple);
  auto split_bf16 = prefill_params();
  split_bf16.sched = g_buffer;  // split work over bf16 KV (dense decode): the Hopper kernel with d_qk 576 only
  split_bf16.num_splits = reinterpret_cast<const int32_t*>(g_buffer);
  split_bf16.o_accum = reinterpret_cast<uint16_t*>(g_buffer);
  split_bf16.lse_accum = reinterpret_cast<float*>(g_buffer);
  split_bf16.num_parts = split_bf16.num_requests = 1;
  EXPECT_EQ(kernel_of(split_bf16, true), split_bf16.d_qk == 576 ? SparseKernel::wgmma_sm90 : SparseKernel::simple);
  split_bf16.d_qk = 512;
  EXPECT_EQ(kernel_of(split_bf16, true), SparseKernel::simple);
  auto short_slot = decode_params();
  short_slot.kv_slot_stride_bytes = 640;  // shorter than a 656-byte row
  EXPECT_EQ(kernel_of(short_slot, true), SparseKernel::simple);
  auto d512_fp8 = decode_params();
  d512_fp8.d_qk = 512;
  EXPECT_EQ(kernel_of(d512_fp8, true), SparseKernel::simple);
  // Lengths per token (1) or per request (tokens_per_request) on the Hopper kernels, which index them by the token
  // or its request without a division (SparseAttentionParams::length_index); any other grouping runs the simple one.
  auto lengths = decode_params();
  lengths.tokens_per_request = 2;
  lengths.topk_length = reinterpret_cast<const int32_t*>(g_buffer);
  for (const auto& [per_length, kernel] :
       {std::pair{1, SparseKernel::wgmma_sm90}, std::pair{2, SparseKernel::wgmma_sm90},
        std::pair{4, SparseKernel::simple}, std::pair{0, SparseKernel::simple}}) {
    lengths.tokens_per_length = per_length;
    EXPECT_EQ(kernel_of(lengths, true), kernel) << "tokens_per_length " << per_length;
  }
  lengths.topk_length = nullptr;  // without lengths the grouping is never read
  EXPECT_EQ(kernel_of(lengths, true), SparseKernel::wgmma_sm90);
}

// FLASHCPP_MLA_DENSE_KERNEL's few-heads FP8 switch for a scope: on (the default) or off (=gather).
struct DenseFp8MmaScope {
  explicit DenseFp8MmaScope(bool on) : prev(kernels::dense_fp8_mma_kernel()) { kernels::set_dense_fp8_mma_kernel(on); }
  ~DenseFp8MmaScope() { kernels::set_dense_fp8_mma_kernel(prev); }
  bool prev;
};

// Dense decode over a cache whose block size is a multiple of 64 (every tile is 64 consecutive rows).
kernels::SparseAttentionParams whole_tiles(kernels::SparseAttentionParams p) {
  p.kv_dense_tiles = true;
  return p;
}

// `p` as split-KV work of 2 requests over 33 parts, planned for `group_heads` heads per CTA (0: the rule's).
kernels::SparseAttentionParams with_split(kernels::SparseAttentionParams p, int group_heads = 0) {
  p.sched = g_buffer;
  p.num_splits = reinterpret_cast<const int32_t*>(g_buffer);
  p.o_accum = reinterpret_cast<uint16_t*>(g_buffer);
  p.lse_accum = reinterpret_cast<float*>(g_buffer);
  p.num_parts = 33;
  p.num_requests = 2;
  p.split_group_heads = group_heads;
  return p;
}

// The whole plan of every documented case (docs/MLA.md, "Kernels"): the wgmma instantiation, heads per CTA, cluster
// and split, and the label the benchmarks print.
TEST(MlaLaunchPlan, EveryDocumentedCase) {
  Fp8KernelScope scope;
  kernels::set_fp8_decode_kernel(std::nullopt);
  auto heads = [](kernels::SparseAttentionParams p, int h_q, int tokens = 4) {
    p.h_q = h_q;
    p.num_tokens = tokens;
    return p;
  };
  kernels::SparseAttentionParams v4 = decode_params();
  v4.kv_format = KvFormat::fp8_v4;
  v4.d_qk = 512;
  v4.topk = v4.main_topk = 128;
  v4.kv_block_stride_bytes = 64 * 584;
  kernels::SparseAttentionParams prefill512 = prefill_params();
  prefill512.d_qk = 512;
  struct Row {
    const char* what;
    kernels::SparseAttentionParams p;
    LaunchPlan plan;
    const char* label;
    int64_t cluster_slots = 66;
  };
  using enum WgmmaVariant;
  const SparseKernel wg = SparseKernel::wgmma_sm90;
  const Row rows[] = {
      {"prefill d_qk 576", prefill_params(), {wg, bf16_576, false, 64, 1}, "wgmma_sm90/bf16_576/64h"},
      {"prefill d_qk 512", prefill512, {wg, bf16_512, false, 64, 1}, "wgmma_sm90/bf16_512/64h"},
      {"dense decode (split bf16)", with_split(prefill_params()),
        {wg, bf16_576, true, 64, 1}, "wgmma_sm90/bf16_576/64h"},
      {"dense decode (split bf16, whole tiles): multicast to the two head groups", whole_tiles(with_split(prefill_params())),
        {wg, bf16_576_pair, true, 64, 2}, "wgmma_sm90/bf16_576_pair/64h"},
      {"dense decode (split bf16 h_q 65, whole tiles)", whole_tiles(with_split(heads(prefill_params(), 65))),
        {wg, bf16_576_pair, true, 64, 2}, "wgmma_sm90/bf16_576_pair/64h"},
      {"dense decode (split bf16 h_q 64, whole tiles): one head group", whole_tiles(with_split(heads(prefill_params(), 64))),
        {wg, bf16_576, true, 64, 1}, "wgmma_sm90/bf16_576/64h"},
      {"dense decode (split bf16 h_q 129, whole tiles): three head groups", whole_tiles(with_split(heads(prefill_params(), 129))),
        {wg, bf16_576, true, 64, 1}, "wgmma_sm90/bf16_576/64h"},
      {"dense decode (split V3.2 FP8, whole tiles)", whole_tiles(with_split(decode_params())),
        {wg, v32_pair, true, 64, 2}, "wgmma_sm90/v32_pair/64h"},
      {"dense decode (split V3.2 FP8 h_q 16, whole tiles): the few-heads kernel",
        whole_tiles(with_split(heads(decode_params(), 16))), {SparseKernel::dense_mma_sm90, none, true, 0, 1},
        "dense_mma_sm90"},
      {"dense decode (split V3.2 FP8 h_q 32, whole tiles)", whole_tiles(with_split(heads(decode_params(), 32))),
        {SparseKernel::dense_mma_sm90, none, true, 0, 1}, "dense_mma_sm90"},
      {"dense decode (split V3.2 FP8 h_q 33, whole tiles)", whole_tiles(with_split(heads(decode_params(), 33))),
        {wg, v32_alone, true, 64, 1}, "wgmma_sm90/v32_alone/64h"},
      {"V3.2 h_q 128", decode_params(), {wg, v32_pair, false, 64, 2}, "wgmma_sm90/v32_pair/64h"},
      {"V3.2 h_q 128 split", with_split(decode_params()), {wg, v32_pair, true, 64, 2}, "wgmma_sm90/v32_pair/64h"},
      {"V3.2 h_q 65", heads(decode_params(), 65), {wg, v32_pair, false, 64, 2}, "wgmma_sm90/v32_pair/64h"},
      {"V3.2 h_q 64", heads(decode_params(), 64), {wg, v32_alone, false, 64, 1}, "wgmma_sm90/v32_alone/64h"},
      {"V3.2 h_q 1 split", with_split(heads(decode_params(), 1)),
        {wg, v32_alone, true, 64, 1}, "wgmma_sm90/v32_alone/64h"},
      {"V3.2 h_q 129", heads(decode_params(), 129), {SparseKernel::mma_sm90, none, false, 0, 1}, "mma_sm90"},
      {"V4 h_q 128", v4, {wg, v4_pair, false, 64, 2}, "wgmma_sm90/v4_pair/64h"},
      {"V4 h_q 128 split", with_split(v4), {wg, v4_pair, true, 64, 2}, "wgmma_sm90/v4_pair/64h"},
      {"V4 h_q 64 split", with_split(heads(v4, 64)), {wg, v4_pair, true, 32, 2}, "wgmma_sm90/v4_pair/32h"},
      {"V4 h_q 33 split, planned 32", with_split(heads(v4, 33), 32),
        {wg, v4_pair, true, 32, 2}, "wgmma_sm90/v4_pair/32h"},
      {"V4 h_q 64 split, planned 64", with_split(heads(v4, 64), 64),
        {wg, v4_alone, true, 64, 1}, "wgmma_sm90/v4_alone/64h"},
      {"V4 h_q 64, 48 tokens", heads(v4, 64, 48), {wg, v4_pair, false, 32, 2}, "wgmma_sm90/v4_pair/32h"},
      {"V4 h_q 64, 66 tokens", heads(v4, 64, 66), {wg, v4_pair, false, 32, 2}, "wgmma_sm90/v4_pair/32h"},
      {"V4 h_q 64, 67 tokens", heads(v4, 64, 67), {wg, v4_alone, false, 64, 1}, "wgmma_sm90/v4_alone/64h"},
      {"V4 h_q 64, no cluster fits", heads(v4, 64, 4), {wg, v4_alone, false, 64, 1}, "wgmma_sm90/v4_alone/64h", 0},
      {"V4 h_q 32", heads(v4, 32), {wg, v4_alone, false, 64, 1}, "wgmma_sm90/v4_alone/64h"},
      {"V4 h_q 32 split", with_split(heads(v4, 32)), {wg, v4_alone, true, 64, 1}, "wgmma_sm90/v4_alone/64h"},
  };
  for (const Row& r : rows) {
    const LaunchPlan plan = kernels::choose(r.p, facts(true, r.cluster_slots));
    EXPECT_EQ(plan, r.plan) << r.what << ": got " << kernels::plan_label(plan) << " split " << plan.split << " heads "
                            << plan.group_heads << " cluster " << plan.cluster_ctas;
    EXPECT_STREQ(kernels::plan_label(plan), r.label) << r.what;
    // Off Hopper every case runs on the simple kernel, with no wgmma decision attached.
    const LaunchPlan off = kernels::choose(r.p, facts(false));
    EXPECT_EQ(off, (LaunchPlan{SparseKernel::simple, none, r.plan.split, 0, 1})) << r.what;
    EXPECT_STREQ(kernels::plan_label(off), "simple") << r.what;
  }
}

// docs/MLA.md's launch-plan table, row by row, against the chooser: the documentation cannot drift from the code.
TEST(MlaLaunchPlan, DocsTableMatchesTheChooser) {
  Fp8KernelScope scope;
  kernels::set_fp8_decode_kernel(std::nullopt);
  std::ifstream in(FLASHCPP_SOURCE_DIR "/docs/MLA.md");
  ASSERT_TRUE(in) << "docs/MLA.md missing";
  std::string line;
  while (std::getline(in, line) && line.find("<!-- launch-plan table") == std::string::npos) {
  }
  ASSERT_TRUE(in) << "docs/MLA.md has no launch-plan table marker";
  std::getline(in, line);  // header
  std::getline(in, line);  // separator
  int rows = 0;
  while (std::getline(in, line) && !line.empty() && line[0] == '|') {
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string c; std::getline(ss, c, '|');) {
      c.erase(0, c.find_first_not_of(" `"));
      c.erase(c.find_last_not_of(" `") + 1);
      cells.push_back(c);
    }
    ASSERT_GE(cells.size(), 7u) << line;
    const std::string &op = cells[0], &kv = cells[1], &plan = cells[6];
    // "bf16" / "f16" / "v32" / "v4", then ", whole tiles" (dense decode over a block size that is a multiple of 64),
    // then ", FLASHCPP_MLA_DENSE_KERNEL=gather" (the few-heads FP8 kernel switched off).
    const std::string format = kv.substr(0, kv.find(','));
    const bool gather = kv.ends_with(", FLASHCPP_MLA_DENSE_KERNEL=gather");  // the few-heads FP8 kernel off
    const bool bf16 = format == "bf16" || format == "f16";
    kernels::SparseAttentionParams p = bf16 ? prefill_params() : decode_params();
    if (format == "f16") p.kv_format = KvFormat::f16;
    p.kv_dense_tiles = kv.find(", whole tiles") != std::string::npos;
    DenseFp8MmaScope few_heads(!gather);
    if (format == "v4") {
      p.kv_format = KvFormat::fp8_v4;
      p.topk = p.main_topk = 128;
      p.kv_block_stride_bytes = 64 * 584;
    } else {
      ASSERT_TRUE(bf16 || format == "v32") << line;
    }
    p.d_qk = std::stoi(cells[2]);
    p.h_q = std::stoi(cells[3]);
    p.num_tokens = std::stoi(cells[5]);
    if (cells[4] == "yes") {
      p = with_split(p);
    } else {
      ASSERT_EQ(cells[4], "no") << line;
    }
    EXPECT_STREQ(kernels::plan_label(kernels::choose(p, facts(true))), plan.c_str()) << op << ": " << line;
    EXPECT_STREQ(kernels::plan_label(kernels::choose(p, facts(false))), "simple") << line;
    ++rows;
  }
  EXPECT_GE(rows, 13) << "the table lost rows";
}

// launch() runs exactly its plan: a plan that does not fit the problem launches nothing (no CUDA call is made on these
// paths, so this runs without a GPU).
TEST(MlaLaunchPlan, LaunchRefusesAPlanThatDoesNotFitTheProblem) {
  const kernels::SparseAttentionParams v32 = decode_params();
  LaunchPlan plan = kernels::choose(v32, facts(true));
  ASSERT_EQ(plan.variant, WgmmaVariant::v32_pair);
  LaunchPlan split_plan = plan;
  split_plan.split = true;  // the problem has no schedule
  EXPECT_FALSE(kernels::launch(split_plan, v32, nullptr));
  LaunchPlan v4_plan = plan;
  v4_plan.variant = WgmmaVariant::v4_pair;  // V4 pages' instantiation for a V3.2 cache
  EXPECT_FALSE(kernels::launch(v4_plan, v32, nullptr));
  LaunchPlan bf16_plan = plan;
  bf16_plan.variant = WgmmaVariant::bf16_512;  // a bf16 instantiation for the FP8 cache
  EXPECT_FALSE(kernels::launch(bf16_plan, v32, nullptr));
  kernels::SparseAttentionParams prefill = prefill_params();
  LaunchPlan d512 = kernels::choose(prefill, facts(true));
  d512.variant = WgmmaVariant::bf16_512;  // d_qk 576 problem, d_qk 512 instantiation
  EXPECT_FALSE(kernels::launch(d512, prefill, nullptr));
}

// Dense decode's 16-bit whole tiles at 65..128 heads run as the pair cluster (each tile multicast by TMA to a token's
// two head groups) exactly where the tensor map can describe the cache; otherwise the gather instantiation runs. The
// pair instantiations refuse what is not theirs before any CUDA call.
TEST(MlaLaunchPlan, MulticastTilesFitOnlyWhatTheTensorMapTakes) {
  const kernels::SparseAttentionParams p = whole_tiles(with_split(prefill_params()));
  EXPECT_TRUE(kernels::multicast_tiles_fit(p, true));
  EXPECT_FALSE(kernels::multicast_tiles_fit(p, false));  // no tensor maps from the driver
  EXPECT_FALSE(kernels::multicast_tiles_fit(with_split(prefill_params()), true));  // tiles not whole
  auto with = [&](auto change) {
    kernels::SparseAttentionParams q = p;
    change(q);
    return q;
  };
  EXPECT_FALSE(kernels::multicast_tiles_fit(with([](auto& q) { q.h_q = 64; }), true));   // one head group
  EXPECT_TRUE(kernels::multicast_tiles_fit(with([](auto& q) { q.h_q = 65; }), true));
  EXPECT_FALSE(kernels::multicast_tiles_fit(with([](auto& q) { q.h_q = 129; }), true));  // three groups
  EXPECT_FALSE(kernels::multicast_tiles_fit(with([](auto& q) { q.d_qk = 512; }), true));
  EXPECT_FALSE(kernels::multicast_tiles_fit(with([](auto& q) { q.kv = g_buffer + 8; }), true));  // unaligned
  EXPECT_FALSE(kernels::multicast_tiles_fit(with([](auto& q) { q.kv_row_stride = 580; }), true));  // 1160 bytes
  EXPECT_TRUE(kernels::multicast_tiles_fit(with([](auto& q) { q.kv_row_stride = 584; }), true));   // 1168 bytes
  EXPECT_FALSE(kernels::multicast_tiles_fit(with([](auto& q) { q.num_kv = 0; }), true));
  EXPECT_FALSE(kernels::multicast_tiles_fit(with([](auto& q) { q.num_kv = int64_t{INT32_MAX} + 1; }), true));
  EXPECT_FALSE(kernels::multicast_tiles_fit(whole_tiles(with_split(decode_params())), true));  // the FP8 cache
  kernels::KernelSupport no_maps = facts(true);
  no_maps.tensor_maps = false;
  EXPECT_EQ(kernels::choose(p, no_maps), (LaunchPlan{SparseKernel::wgmma_sm90, WgmmaVariant::bf16_576, true, 64, 1}));
  // Whole tiles without a schedule (prefill's unsplit grid): the pair cluster takes split work only.
  EXPECT_EQ(kernels::choose(whole_tiles(prefill_params()), facts(true)).variant, WgmmaVariant::bf16_576);
  const LaunchPlan pair = kernels::choose(p, facts(true));
  ASSERT_EQ(pair.variant, WgmmaVariant::bf16_576_pair);
  EXPECT_FALSE(kernels::launch(pair, with([](auto& q) { q.d_qk = 512; }), nullptr));  // a d_qk 512 problem
  EXPECT_FALSE(kernels::launch(pair, with([](auto& q) { q.kv_format = KvFormat::f16; }), nullptr));  // fp16 KV
  LaunchPlan unsplit = pair;
  unsplit.split = false;
  EXPECT_FALSE(kernels::launch(unsplit, p, nullptr));  // the problem has a schedule; the plan says none
  LaunchPlan f16_pair = pair;
  f16_pair.variant = WgmmaVariant::f16_576_pair;
  EXPECT_FALSE(kernels::launch(f16_pair, p, nullptr));  // a bf16 problem
}

// Dense decode's FP8 split work with up to 32 heads runs the few-heads kernel (dense_decode_mma_fp8.cu) when it is
// switched on (FLASHCPP_MLA_DENSE_KERNEL=mma) and the cache's tiles are single copies; every other problem keeps its
// kernel.
TEST(MlaLaunchPlan, DenseFp8FewHeadsKernel) {
  DenseFp8MmaScope scope(true);
  kernels::SparseAttentionParams p = whole_tiles(with_split(decode_params()));
  for (int h : {1, 16, 17, 32}) {
    p.h_q = h;
    EXPECT_TRUE(kernels::dense_fp8_mma_fit(p)) << "h_q " << h;
    const LaunchPlan plan = kernels::choose(p, facts(true));
    EXPECT_EQ(plan.kernel, SparseKernel::dense_mma_sm90) << "h_q " << h;
    EXPECT_STREQ(kernels::plan_label(plan), "dense_mma_sm90");
    EXPECT_EQ(kernels::choose(p, facts(false)).kernel, SparseKernel::simple);
  }
  p.h_q = 16;
  auto refused = [&](const char* what, kernels::SparseAttentionParams q) {
    EXPECT_FALSE(kernels::dense_fp8_mma_fit(q)) << what;
    EXPECT_NE(kernels::choose(q, facts(true)).kernel, SparseKernel::dense_mma_sm90) << what;
  };
  kernels::SparseAttentionParams q = p;
  q.h_q = 33;
  refused("33 heads", q);
  q = p;
  q.kv_slot_stride_bytes = 672;  // padded rows: a tile is no longer one copy
  q.kv_block_stride_bytes = 64 * 672;
  refused("padded rows", q);
  q = p;
  q.block_size = 32;
  q.kv_block_stride_bytes = 32 * 656;
  refused("block size 32", q);
  q = p;
  q.kv = g_buffer + 8;
  refused("unaligned cache", q);
  q = p;
  q.kv_block_stride_bytes = 64 * 656 + 8;
  refused("unaligned block stride", q);
  q = p;
  q.kv_dense_tiles = false;
  refused("gathered rows", q);
  refused("unsplit", whole_tiles(decode_params()));
  kernels::SparseAttentionParams bf16 = whole_tiles(with_split(prefill_params()));
  bf16.h_q = 16;
  refused("bf16 cache", bf16);
  kernels::set_dense_fp8_mma_kernel(false);
  EXPECT_EQ(kernels::choose(p, facts(true)).kernel, SparseKernel::wgmma_sm90);
}

// Dense decode over an fp16 cache (fp16 q and out): its own instantiation of the sparse kernel's gathers, split or not
// by the plan; the simple kernel off Hopper.
TEST(MlaLaunchPlan, Fp16CacheRunsItsOwnInstantiation) {
  kernels::SparseAttentionParams p = with_split(prefill_params());
  p.kv_format = kernels::KvFormat::f16;
  const LaunchPlan plan = kernels::choose(p, facts(true));
  EXPECT_EQ(plan.kernel, SparseKernel::wgmma_sm90);
  EXPECT_EQ(plan.variant, WgmmaVariant::f16_576);
  EXPECT_TRUE(plan.split);
  EXPECT_STREQ(kernels::plan_label(plan), "wgmma_sm90/f16_576/64h");
  // Whole tiles at 128 heads: the fp16 pair cluster, as bf16's.
  const LaunchPlan pair = kernels::choose(whole_tiles(p), facts(true));
  EXPECT_EQ(pair, (LaunchPlan{SparseKernel::wgmma_sm90, WgmmaVariant::f16_576_pair, true, 64, 2}));
  EXPECT_STREQ(kernels::plan_label(pair), "wgmma_sm90/f16_576_pair/64h");
  EXPECT_EQ(kernels::choose(p, facts(false)).kernel, SparseKernel::simple);
  // d_qk 512 (prefill's V4 shape) is not an fp16 problem the Hopper kernels take.
  kernels::SparseAttentionParams d512 = p;
  d512.d_qk = 512;
  EXPECT_EQ(kernels::choose(d512, facts(true)).kernel, SparseKernel::simple);
  // The fp16 instantiation refuses a bf16 problem, and the bf16 ones an fp16 problem (nothing launched).
  kernels::SparseAttentionParams bf16 = p;
  bf16.kv_format = kernels::KvFormat::bf16;
  EXPECT_FALSE(kernels::launch(plan, bf16, nullptr));
  LaunchPlan bf16_plan = plan;
  bf16_plan.variant = WgmmaVariant::bf16_576;
  EXPECT_FALSE(kernels::launch(bf16_plan, p, nullptr));
}

TEST(MlaKernelSelect, NamesEveryKernel) {
  EXPECT_STREQ(kernels::kernel_name(SparseKernel::simple), "simple");
  EXPECT_STREQ(kernels::kernel_name(SparseKernel::mma_sm90), "mma_sm90");
  EXPECT_STREQ(kernels::kernel_name(SparseKernel::wgmma_sm90), "wgmma_sm90");
  EXPECT_STREQ(kernels::kernel_name(SparseKernel::dense_mma_sm90), "dense_mma_sm90");
}

TEST(MlaFastDivmod, MatchesDivisionForPageSizesAndIndices) {
  std::mt19937 rng(7);
  const uint32_t divisors[] = {1, 2, 3, 7, 53, 61, 64, 69, 576, 1000, 65536, 123457, (1u << 30) + 3, 2147483647u};
  for (uint32_t d : divisors) {
    const FastDivmod f(d);
    for (int i = 0; i < 200000; ++i) {
      const uint32_t n = i < 1000 ? 2147483647u - static_cast<uint32_t>(i) : rng() % 2147483648u;
      ASSERT_EQ(f.div_host(n), n / d) << "n " << n << " d " << d;
    }
    ASSERT_EQ(f.div_host(0), 0u);
  }
}

}  // namespace
