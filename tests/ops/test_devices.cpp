// Device rules of every op family, on the CPU (no GPU needed):
//  * tensors of one call on different CUDA devices are a validation error naming the argument, and
//    nothing reaches a module;
//  * CUDA device ids outside [0, visible devices) are refused before any CUDA or TVM-FFI call, as a clean
//    Error(invalid_argument) (with zero visible GPUs every cuda:N is out of range);
//  * a call whose tensors are all on cuda:1 reaches the module with cuda:1 tensors (nothing is rewritten
//    to the current device), also from two threads driving two devices at once.
// The FlashInfer ops run against the recording stand-ins (tests/ops/recording_module*.cc). While a test
// pretends device facts, set_visible_devices_for_testing decides how many devices exist. Also:
// FLASHCPP_CUDA_CHECK names the failed expression and where it stands.
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "flashcpp/cuda.hpp"
#include "flashcpp/gdn.hpp"
#include "flashcpp/mla.hpp"
#include "flashcpp/mla_attention.hpp"
#include "flashcpp/moe.hpp"
#include "ops/ops_fixture.hpp"

namespace flashcpp::testing {
namespace {

class Devices : public OpsFixture {
 protected:
  void SetUp() override {
    OpsFixture::SetUp();
    set_device_facts_for_testing(&hopper_device_facts);
    set_visible_devices_for_testing(2);  // pretend a two-GPU host
    pinned_ = std::aligned_alloc(256, 1 << 20);
    for (const std::string& uri : extra_uris()) link_extra(uri);
    // Where MoE auto_tune records its tactics (the module cache): this suite's own directory.
    ::setenv("FLASHCPP_CACHE_DIR", (dir_ / "cache").c_str(), 1);
  }
  void TearDown() override {
    std::free(pinned_);
    set_visible_devices_for_testing(-1);
    set_device_facts_for_testing(nullptr);
    OpsFixture::TearDown();
  }

  static std::vector<std::string> extra_uris() {
    return {batch_mla_uri(DType::bf16, DType::bf16, DType::bf16, MlaBackend::fa2), kGdnPrefillUri, "fused_moe_90"};
  }
  /// The batch-MLA/GDN/MoE recording stand-in answers for `uri` (its own log).
  static void link_extra(const std::string& uri) {
    fs::create_directories(dir_ / uri);
    const fs::path p = dir_ / uri / (uri + ".so");
    std::error_code ec;
    if (!fs::exists(p, ec)) fs::copy_file(FLASHCPP_MLA_GDN_MOE_RECORDING_MODULE, p, fs::copy_options::overwrite_existing);
  }
  static std::string recorded_extra(const std::string& uri) {
    auto lib = load_module(*rt_, uri);
    ffi::Any r;
    ffi::call(lib->function("recorded"), {}, &r, nullptr);
    return r.as_string();
  }
  static TensorView on(TensorView t, int id) {
    t.device = Device::cuda(id);
    return t;
  }
  Workspace workspace(int device) {
    Workspace ws;
    ws.float_buffer = dev(DType::u8, {1 << 20}, device);
    ws.int_buffer = dev(DType::u8, {1 << 20}, device);
    ws.pinned_int_buffer = TensorView::contiguous(pinned_, DType::u8, Device::cuda_host(), {1 << 20});
    return ws;
  }
  static std::string batch_decode_uri() {
    return jit::batch_decode_uri(jit::AttentionSpec{});  // bf16, head dims 128
  }
  static std::string single_decode_uri() {
    return jit::single_decode_uri(jit::AttentionSpec{});
  }
  void* pinned_ = nullptr;
};

// Every tensor of the recorded call line is on cuda:<id> (the recording module prints "2:<id>").
void expect_all_on(const std::string& line, int id) {
  const std::string want = ";2:" + std::to_string(id) + ";";
  size_t tensors = 0;
  for (size_t p = line.find(";2:"); p != std::string::npos; p = line.find(";2:", p + 1)) {
    ++tensors;
    EXPECT_EQ(line.compare(p, want.size(), want), 0) << line;
  }
  EXPECT_GT(tensors, 0u) << line;
}

// ------------------------------------------------------------------------------------------------ norm

TEST_F(Devices, NormRefusesTensorsOnTwoDevices) {
  auto in = dev(DType::bf16, {4, 256}), out = dev(DType::bf16, {4, 256}), w = dev(DType::bf16, {256});
  EXPECT_INVALID(rmsnorm(rt(), on(out, 1), in, w), "argument 'out' must be on the device of 'input'");
  EXPECT_INVALID(rmsnorm(rt(), out, in, on(w, 1)), "argument 'weight' must be on the device of 'input'");
  EXPECT_INVALID(gemma_rmsnorm(rt(), out, in, on(w, 1)), "argument 'weight' must be on the device of 'input'");
  EXPECT_INVALID(fused_add_rmsnorm(rt(), in, on(out, 1), w), "argument 'residual' must be on the device of 'input'");
  auto in3 = dev(DType::bf16, {4, 8, 128}), out3 = dev(DType::bf16, {4, 8, 128}), w3 = dev(DType::bf16, {128});
  EXPECT_INVALID(fused_qk_rmsnorm(rt(), out3, in3, on(w3, 1)), "argument 'weight' must be on the device of 'input'");
  EXPECT_EQ(recorded(), "");
}

TEST_F(Devices, NormOnDeviceOneReachesTheModuleOnDeviceOne) {
  rmsnorm(rt(), dev(DType::bf16, {4, 256}, 1), dev(DType::bf16, {4, 256}, 1), dev(DType::bf16, {256}, 1));
  const auto calls = lines(recorded());
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].rfind("rmsnorm|", 0), 0u) << calls[0];
  expect_all_on(calls[0], 1);
}

TEST_F(Devices, OutOfRangeDeviceIdsAreRefusedBeforeAnyCall) {
  auto in = dev(DType::bf16, {4, 256}, 2), out = dev(DType::bf16, {4, 256}, 2), w = dev(DType::bf16, {256}, 2);
  EXPECT_INVALID(rmsnorm(rt(), out, in, w), "argument 'input' must be on a visible CUDA device: device id 2 is outside [0, 2)");
  // Only one argument out of range: named too.
  EXPECT_INVALID(rmsnorm(rt(), on(out, 0), on(in, 0), w), "argument 'weight' must be on a visible CUDA device");
  // A huge id is refused as well (TVM-FFI would size its per-thread stream table by it).
  EXPECT_INVALID(rmsnorm(rt(), on(out, 1 << 30), on(in, 1 << 30), on(w, 1 << 30)), "device id 1073741824 is outside");
  EXPECT_EQ(recorded(), "");
}

TEST_F(Devices, WithZeroVisibleDevicesEveryCudaIdIsRefused) {
  set_visible_devices_for_testing(0);
  auto in = dev(DType::bf16, {4, 256}), out = dev(DType::bf16, {4, 256}), w = dev(DType::bf16, {256});
  EXPECT_INVALID(rmsnorm(rt(), out, in, w), "device id 0 is outside [0, 0)");
  EXPECT_INVALID((void)BatchDecodePlan::create(rt(), workspace(0), {host_i32({0, 1}), host_i32({1}), nullptr},
                                               BatchDecodeConfig{.num_qo_heads = 8, .num_kv_heads = 8, .head_dim = 128,
                                                                 .page_size = 16}),
                 "argument 'workspace.float_buffer' must be on a visible CUDA device");
  EXPECT_EQ(recorded(), "");
}

// The real device count (0 on the CPU machine; whatever the host has elsewhere): the first id past it
// is refused with a clean error by every family, including our own kernels and the device queries.
TEST_F(Devices, RealDeviceCountBoundsEveryFamily) {
  set_visible_devices_for_testing(-1);
  set_device_facts_for_testing(nullptr);
  set_visible_devices_for_testing(-1);
  const int n = cuda_device_count();
  auto in = dev(DType::bf16, {4, 256}, n), out = dev(DType::bf16, {4, 256}, n), w = dev(DType::bf16, {256}, n);
  EXPECT_INVALID(rmsnorm(rt(), out, in, w), "must be on a visible CUDA device");
  EXPECT_INVALID(append_paged_kv_cache(rt(), in, in, in, in, PagedKvCache{}), "must be on a visible CUDA device");
  EXPECT_INVALID(gdn_prefill_workspace_bytes(n), "device id " + std::to_string(n));
  EXPECT_INVALID((void)FusedMoeRunner::create(rt(), FusedMoeConfig{.device = n}), "argument 'config.device'");
  EXPECT_INVALID(mla::device_support(n), "device id " + std::to_string(n));
  EXPECT_INVALID(mla::device_support(-1), "device id -1");
  EXPECT_INVALID(device_facts(n), "device id " + std::to_string(n));
  EXPECT_INVALID((void)mla::DecodePlan::create({.batch = 2, .s_q = 1, .h_q = 64, .topk = 128, .num_sms = 132}, n,
                                               nullptr),
                 "device id " + std::to_string(n));
  auto kv = dev(DType::bf16, {4, 576}, n), kv8 = dev(DType::u8, {4, 656}, n);
  EXPECT_INVALID(mla::quantize_kv_cache_fp8(kv, kv8, nullptr), "device id " + std::to_string(n));
  auto q = dev(DType::bf16, {2, 64, 576}, n), kvp = dev(DType::bf16, {8, 1, 576}, n);
  auto idx = dev(DType::i32, {2, 1, 64}, n);
  EXPECT_INVALID((void)mla::sparse_prefill(q, kvp, idx, nullptr, nullptr, {.sm_scale = 0.1}, nullptr),
                 "device id " + std::to_string(n));
  EXPECT_EQ(recorded(), "");
}

// ------------------------------------------------------------------------------------------------ page

TEST_F(Devices, AppendRefusesTensorsOnTwoDevices) {
  link("page");
  auto k = dev(DType::bf16, {5, 4, 128}), v = dev(DType::bf16, {5, 4, 128});
  auto bi = dev(DType::i32, {5}), pos = dev(DType::i32, {5});
  PagedKvCache c;
  c.k_cache = dev(DType::bf16, {10, 16, 4, 128});
  c.v_cache = dev(DType::bf16, {10, 16, 4, 128});
  c.indices = dev(DType::i32, {10});
  c.indptr = dev(DType::i32, {3});
  c.last_page_len = dev(DType::i32, {2});
  append_paged_kv_cache(rt(), k, v, bi, pos, c);
  ASSERT_EQ(lines(recorded()).size(), 1u);  // the baseline reaches the module
  EXPECT_INVALID(append_paged_kv_cache(rt(), k, on(v, 1), bi, pos, c), "argument 'append_value' must be on the device");
  EXPECT_INVALID(append_paged_kv_cache(rt(), k, v, on(bi, 1), pos, c), "argument 'batch_indices' must be on the device");
  EXPECT_INVALID(append_paged_kv_cache(rt(), k, v, bi, on(pos, 1), c), "argument 'positions' must be on the device");
  const std::pair<TensorView PagedKvCache::*, const char*> members[] = {
      {&PagedKvCache::k_cache, "k_cache"}, {&PagedKvCache::v_cache, "v_cache"}, {&PagedKvCache::indices, "indices"},
      {&PagedKvCache::indptr, "indptr"}, {&PagedKvCache::last_page_len, "last_page_len"}};
  for (const auto& [member, name] : members) {
    PagedKvCache m = c;
    m.*member = on(c.*member, 1);
    EXPECT_INVALID(append_paged_kv_cache(rt(), k, v, bi, pos, m),
                   std::string("argument '") + name + "' must be on the device of 'append_key'");
  }
  PagedMlaKvCache mc;
  mc.ckv_cache = dev(DType::bf16, {4, 16, 512});
  mc.kpe_cache = dev(DType::bf16, {4, 16, 64});
  mc.indices = dev(DType::i32, {4});
  mc.indptr = dev(DType::i32, {2});
  mc.last_page_len = dev(DType::i32, {1});
  auto ckv = dev(DType::bf16, {3, 512}), kpe = dev(DType::bf16, {3, 64}), bi3 = dev(DType::i32, {3}),
       pos3 = dev(DType::i32, {3});
  EXPECT_INVALID(append_paged_mla_kv_cache(rt(), ckv, on(kpe, 1), bi3, pos3, mc), "argument 'append_kpe' must be on the device");
  PagedMlaKvCache mc1 = mc;
  mc1.kpe_cache = on(mc.kpe_cache, 1);
  EXPECT_INVALID(append_paged_mla_kv_cache(rt(), ckv, kpe, bi3, pos3, mc1), "argument 'kpe_cache' must be on the device");
  EXPECT_EQ(recorded(), "");
}

// ------------------------------------------------------------------------------------------------ single attention

TEST_F(Devices, SinglePrefillAndDecodeRefuseTensorsOnTwoDevices) {
  auto q = dev(DType::bf16, {3, 8, 128}), k = dev(DType::bf16, {40, 8, 128}), v = dev(DType::bf16, {40, 8, 128});
  auto o = dev(DType::bf16, {3, 8, 128}), lse = dev(DType::f32, {3, 8}), tmp = dev(DType::u8, {1 << 20});
  EXPECT_INVALID(single_prefill(rt(), q, on(k, 1), v, o, nullptr, {}), "argument 'k' must be on the device of 'q'");
  EXPECT_INVALID(single_prefill(rt(), q, k, on(v, 1), o, nullptr, {}), "argument 'v' must be on the device of 'q'");
  EXPECT_INVALID(single_prefill(rt(), q, k, v, on(o, 1), nullptr, {}), "argument 'out' must be on the device of 'q'");
  const TensorView lse1 = on(lse, 1);
  EXPECT_INVALID(single_prefill(rt(), q, k, v, o, &lse1, {}), "argument 'lse' must be on the device of 'q'");
  EXPECT_INVALID(single_prefill(rt(), q, k, v, o, nullptr, on(tmp, 1)), "argument 'tmp' must be on the device of 'q'");

  auto q2 = dev(DType::bf16, {8, 128}), o2 = dev(DType::bf16, {8, 128});
  auto kd = dev(DType::bf16, {40, 8, 128}), vd = dev(DType::bf16, {40, 8, 128});
  EXPECT_INVALID(single_decode(rt(), q2, on(kd, 1), vd, o2, nullptr, {}), "argument 'k' must be on the device of 'q'");
  EXPECT_INVALID(single_decode(rt(), q2, kd, vd, on(o2, 1), nullptr, {}), "argument 'out' must be on the device of 'q'");
  EXPECT_EQ(recorded(), "");

  link(single_decode_uri());
  single_decode(rt(), on(q2, 1), on(kd, 1), on(vd, 1), on(o2, 1), nullptr, {});
  const auto calls = lines(recorded());
  ASSERT_EQ(calls.size(), 1u);
  expect_all_on(calls[0], 1);
}

// ------------------------------------------------------------------------------------------------ batch plans

TEST_F(Devices, BatchPlansRefuseWorkspacesAndRunsOnAnotherDevice) {
  link(batch_decode_uri());
  link("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_128_"
       "head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False");
  const DecodeIndptrs ip{host_i32({0, 2, 3}), host_i32({1, 16}), nullptr};
  const BatchDecodeConfig c{.num_qo_heads = 32, .num_kv_heads = 8, .head_dim = 128, .page_size = 16,
                            .backend = DecodeBackend::cuda_cores};
  Workspace mixed = workspace(0);
  mixed.int_buffer = on(mixed.int_buffer, 1);
  EXPECT_INVALID((void)BatchDecodePlan::create(rt(), mixed, ip, c),
                 "argument 'workspace.int_buffer' must be on the device of 'workspace.float_buffer'");
  PrefillIndptrs pip{host_i32({0, 3, 5}), host_i32({0, 2, 3}), host_i32({5, 16}), nullptr};
  BatchPrefillConfig pc{.num_qo_heads = 32, .num_kv_heads = 8, .head_dim_qk = 128, .page_size = 16};
  pc.backend = AttentionBackend::fa2;
  EXPECT_INVALID((void)BatchPrefillPlan::create(rt(), mixed, pip, pc),
                 "argument 'workspace.int_buffer' must be on the device of 'workspace.float_buffer'");
  EXPECT_EQ(recorded(), "");

  // A plan made on cuda:1 passes cuda:1 workspaces to FlashInfer's plan and refuses a run on cuda:0.
  auto plan = BatchDecodePlan::create(rt(), workspace(1), ip, c);
  auto calls = lines(recorded());
  ASSERT_EQ(calls.size(), 1u);
  expect_all_on(calls[0], 1);
  PagedKvCache kv;
  kv.k_cache = kv.v_cache = dev(DType::bf16, {3, 16, 8, 128}, 1);
  kv.indices = dev(DType::i32, {3}, 1);
  kv.indptr = dev(DType::i32, {3}, 1);
  kv.last_page_len = dev(DType::i32, {2}, 1);
  auto q = dev(DType::bf16, {2, 32, 128}, 1), o = dev(DType::bf16, {2, 32, 128}, 1);
  EXPECT_INVALID(plan.run(on(q, 0), kv, o), "argument 'q' must be on the planned device cuda:1");
  EXPECT_INVALID(plan.run(q, kv, on(o, 0)), "argument 'out' must be on the device of 'q'");
  PagedKvCache kv0 = kv;
  kv0.indices = on(kv.indices, 0);
  EXPECT_INVALID(plan.run(q, kv0, o), "argument 'indices' must be on the device of 'q'");
  EXPECT_EQ(recorded(), "");
  plan.run(q, kv, o);
  calls = lines(recorded());
  ASSERT_EQ(calls.size(), 1u);
  expect_all_on(calls[0], 1);

  auto pplan = BatchPrefillPlan::create(rt(), workspace(0), pip, pc);
  (void)recorded();
  auto pq = dev(DType::bf16, {5, 32, 128}), po = dev(DType::bf16, {5, 32, 128}), qo = dev(DType::i32, {3});
  PagedKvCache pkv = kv;
  for (TensorView* t : {&pkv.k_cache, &pkv.v_cache, &pkv.indices, &pkv.indptr, &pkv.last_page_len}) *t = on(*t, 0);
  EXPECT_INVALID(pplan.run_paged(on(pq, 1), pkv, qo, po), "argument 'q' must be on the planned device cuda:0");
  EXPECT_INVALID(pplan.run_paged(pq, pkv, on(qo, 1), po), "argument 'qo_indptr' must be on the device of 'q'");
  PagedKvCache pkv1 = pkv;
  pkv1.k_cache = pkv1.v_cache = on(pkv.k_cache, 1);
  EXPECT_INVALID(pplan.run_paged(pq, pkv1, qo, po), "argument 'k_cache' must be on the device of 'q'");
  EXPECT_EQ(recorded(), "");
}

// ------------------------------------------------------------------------------------------------ batch MLA, GDN, MoE

TEST_F(Devices, BatchMlaRefusesTensorsOffThePlansDevice) {
  const std::string uri = batch_mla_uri(DType::bf16, DType::bf16, DType::bf16, MlaBackend::fa2);
  auto qo = host_i32({0, 3, 4}), kvp = host_i32({0, 2, 3}), kvl = host_i32({70, 5});
  BatchMlaConfig cfg;
  cfg.num_heads = 16;
  cfg.page_size = 64;
  cfg.backend = MlaBackend::fa2;
  Workspace ws = workspace(0);
  ws.int_buffer = TensorView::contiguous(ws.int_buffer.data, DType::u8, ws.int_buffer.device, {1024});
  Workspace mixed = ws;
  mixed.int_buffer = on(ws.int_buffer, 1);
  EXPECT_INVALID((void)BatchMlaPlan::create(rt(), mixed, qo, kvp, kvl, cfg, nullptr),
                 "argument 'int_buffer' must be on the device of 'float_buffer'");
  Workspace far = ws;
  far.float_buffer = on(ws.float_buffer, 5);
  far.int_buffer = on(ws.int_buffer, 5);
  EXPECT_INVALID((void)BatchMlaPlan::create(rt(), far, qo, kvp, kvl, cfg, nullptr),
                 "argument 'float_buffer' must be on a visible CUDA device: device id 5");
  EXPECT_EQ(recorded_extra(uri), "");

  auto plan = BatchMlaPlan::create(rt(), ws, qo, kvp, kvl, cfg, nullptr);
  (void)recorded_extra(uri);
  auto q_nope = dev(DType::bf16, {4, 16, 512}), q_pe = dev(DType::bf16, {4, 16, 64});
  auto ckv = dev(DType::bf16, {8, 64, 512}), kpe = dev(DType::bf16, {8, 64, 64}), idx = dev(DType::i32, {3});
  auto out = dev(DType::bf16, {4, 16, 512});
  const char* ref = "must be on the device of 'workspace.float_buffer (the plan's device)'";
  EXPECT_INVALID(plan.run(on(q_nope, 1), q_pe, ckv, kpe, idx, out, nullptr, nullptr), std::string("'q_nope' ") + ref);
  EXPECT_INVALID(plan.run(q_nope, on(q_pe, 1), ckv, kpe, idx, out, nullptr, nullptr), std::string("'q_pe' ") + ref);
  EXPECT_INVALID(plan.run(q_nope, q_pe, on(ckv, 1), kpe, idx, out, nullptr, nullptr), std::string("'ckv_cache' ") + ref);
  EXPECT_INVALID(plan.run(q_nope, q_pe, ckv, on(kpe, 1), idx, out, nullptr, nullptr), std::string("'kpe_cache' ") + ref);
  EXPECT_INVALID(plan.run(q_nope, q_pe, ckv, kpe, on(idx, 1), out, nullptr, nullptr), std::string("'kv_indices' ") + ref);
  EXPECT_INVALID(plan.run(q_nope, q_pe, ckv, kpe, idx, on(out, 1), nullptr, nullptr), std::string("'out' ") + ref);
  const TensorView lse1 = dev(DType::f32, {4, 16}, 1);
  EXPECT_INVALID(plan.run(q_nope, q_pe, ckv, kpe, idx, out, &lse1, nullptr), std::string("'lse' ") + ref);
  EXPECT_EQ(recorded_extra(uri), "");
}

struct GdnArgs {
  std::vector<int64_t> cu_host{0, 3, 8};
  TensorView cu_host_v, ws;
  GdnPrefillTensors a;
  explicit GdnArgs(TensorView (*make)(DType, std::initializer_list<int64_t>, int)) {
    a.q = make(DType::bf16, {8, 4, 128}, 0);
    a.k = make(DType::bf16, {8, 2, 128}, 0);
    a.v = make(DType::bf16, {8, 2, 128}, 0);
    a.output = make(DType::bf16, {8, 4, 128}, 0);
    a.output_state = make(DType::f32, {2, 4, 128, 128}, 0);
    a.cu_seqlens = make(DType::i64, {3}, 0);
    cu_host_v = TensorView::contiguous(cu_host.data(), DType::i64, Device::cpu(), {3});
    ws = make(DType::u8, {132 * 128}, 0);
    a.cu_seqlens_host = &cu_host_v;
    a.workspace = &ws;
  }
};

TEST_F(Devices, GdnRefusesTensorsOnTwoDevicesAndUnknownDevices) {
  GdnArgs base(&OpsFixture::dev);
  gdn_prefill(rt(), base.a, {}, nullptr);
  ASSERT_EQ(lines(recorded_extra(kGdnPrefillUri)).size(), 1u);  // the baseline reaches the module
  auto moved = [&](auto mutate) {
    GdnArgs g = base;
    g.a.cu_seqlens_host = &g.cu_host_v;
    g.a.workspace = &g.ws;
    mutate(g);
    gdn_prefill(rt(), g.a, {}, nullptr);
  };
  EXPECT_INVALID(moved([](GdnArgs& g) { g.a.k = on(g.a.k, 1); }), "argument 'k' must be on the device of 'q'");
  EXPECT_INVALID(moved([](GdnArgs& g) { g.a.v = on(g.a.v, 1); }), "argument 'v' must be on the device of 'q'");
  EXPECT_INVALID(moved([](GdnArgs& g) { g.a.output = on(g.a.output, 1); }), "argument 'output' must be on the device of 'q'");
  EXPECT_INVALID(moved([](GdnArgs& g) { g.a.output_state = on(g.a.output_state, 1); }),
                 "argument 'output_state' must be on the device of 'q'");
  EXPECT_INVALID(moved([](GdnArgs& g) { g.a.cu_seqlens = on(g.a.cu_seqlens, 1); }),
                 "argument 'cu_seqlens' must be on the device of 'q'");
  EXPECT_INVALID(moved([](GdnArgs& g) { g.ws = on(g.ws, 1); }), "argument 'workspace' must be on the device of 'q'");
  EXPECT_INVALID(moved([](GdnArgs& g) {
                   for (TensorView* t : {&g.a.q, &g.a.k, &g.a.v, &g.a.output, &g.a.output_state, &g.a.cu_seqlens, &g.ws})
                     *t = on(*t, 7);
                 }),
                 "argument 'q' must be on a visible CUDA device: device id 7");
  EXPECT_EQ(recorded_extra(kGdnPrefillUri), "");
}

TEST_F(Devices, MoeRefusesTensorsOffTheRunnersDevice) {
  FusedMoeConfig cfg;
  cfg.auto_tune = false;  // one run_moe call per run: the calls below count them
  FusedMoeTensors a;
  a.output = dev(DType::bf16, {4, 256});
  a.input = dev(DType::bf16, {4, 256});
  a.token_selected_experts = dev(DType::i32, {4, 2});
  a.token_final_scales = dev(DType::f32, {4, 2});
  a.fc1_weights = dev(DType::bf16, {8, 256, 256});
  a.fc2_weights = dev(DType::bf16, {8, 256, 128});
  validate_fused_moe(cfg, a, {});  // the baseline is valid
  auto with = [&](auto mutate) {
    FusedMoeTensors m = a;
    mutate(m);
    validate_fused_moe(cfg, m, {});
  };
  EXPECT_INVALID(with([](FusedMoeTensors& m) { m.input = on(m.input, 1); }), "argument 'input' must be on the runner's device cuda:0");
  EXPECT_INVALID(with([](FusedMoeTensors& m) { m.output = on(m.output, 1); }), "argument 'output' must be on the device of 'input'");
  EXPECT_INVALID(with([](FusedMoeTensors& m) { m.token_selected_experts = on(m.token_selected_experts, 1); }),
                 "argument 'token_selected_experts' must be on the device of 'input'");
  EXPECT_INVALID(with([](FusedMoeTensors& m) { m.token_final_scales = on(m.token_final_scales, 1); }),
                 "argument 'token_final_scales' must be on the device of 'input'");
  EXPECT_INVALID(with([](FusedMoeTensors& m) { m.fc1_weights = on(m.fc1_weights, 1); }),
                 "argument 'fc1_weights' must be on the device of 'input'");
  EXPECT_INVALID(with([](FusedMoeTensors& m) { m.fc2_weights = on(m.fc2_weights, 1); }),
                 "argument 'fc2_weights' must be on the device of 'input'");
  FusedMoeConfig far = cfg;
  far.device = 2;
  EXPECT_INVALID((void)FusedMoeRunner::create(rt(), far), "argument 'config.device' must be on a visible CUDA device");
  far.device = -1;
  EXPECT_INVALID((void)FusedMoeRunner::create(rt(), far), "argument 'config.device'");
  EXPECT_EQ(recorded_extra("fused_moe_90"), "");

  // A runner for cuda:1 takes cuda:1 tensors and refuses cuda:0 ones.
  FusedMoeConfig one = cfg;
  one.device = 1;
  auto runner = FusedMoeRunner::create(rt(), one);
  (void)recorded_extra("fused_moe_90");
  EXPECT_INVALID(runner.run(a, {}, nullptr), "argument 'input' must be on the runner's device cuda:1");
  FusedMoeTensors a1 = a;
  for (TensorView* t : {&a1.output, &a1.input, &a1.token_selected_experts, &a1.token_final_scales, &a1.fc1_weights,
                        &a1.fc2_weights})
    *t = on(*t, 1);
  runner.run(a1, {}, nullptr);
  const auto calls = lines(recorded_extra("fused_moe_90"));
  ASSERT_EQ(calls.size(), 1u);
  expect_all_on(calls[0], 1);
}

// ------------------------------------------------------------------------------------------------ sparse MLA (our kernels)

// Validation of our kernels' entry points runs before the device lookup: mixing devices is refused by
// name even on a host without GPUs.
TEST_F(Devices, SparseMlaRefusesTensorsOnTwoDevices) {
  auto q = dev(DType::bf16, {2, 64, 576}), kv = dev(DType::bf16, {300, 1, 576}), idx = dev(DType::i32, {2, 1, 128});
  auto out = dev(DType::bf16, {2, 64, 512}), ml = dev(DType::f32, {2, 64}), lse = dev(DType::f32, {2, 64});
  const mla::SparsePrefillOptions p{.sm_scale = 0.1};
  const mla::SparsePrefillTensors t{.q = q, .kv = kv, .indices = idx, .out = out, .max_logits = &ml, .lse = lse};
  // `t` with one member replaced.
  auto with = [&t](auto member, auto value) {
    mla::SparsePrefillTensors r = t;
    r.*member = value;
    return r;
  };
  using T = mla::SparsePrefillTensors;
  EXPECT_INVALID(mla::sparse_prefill(with(&T::kv, on(kv, 1)), p, nullptr), "argument 'kv' must be on the device of 'q'");
  EXPECT_INVALID(mla::sparse_prefill(with(&T::indices, on(idx, 1)), p, nullptr),
                 "argument 'indices' must be on the device of 'q'");
  EXPECT_INVALID(mla::sparse_prefill(with(&T::out, on(out, 1)), p, nullptr), "argument 'out' must be on the device of 'q'");
  const TensorView ml1 = on(ml, 1);
  EXPECT_INVALID(mla::sparse_prefill(with(&T::max_logits, &ml1), p, nullptr),
                 "argument 'max_logits' must be on the device of 'q'");
  EXPECT_INVALID(mla::sparse_prefill(with(&T::lse, on(lse, 1)), p, nullptr), "argument 'lse' must be on the device of 'q'");
  const TensorView sink = dev(DType::f32, {64}, 1);
  EXPECT_INVALID(mla::sparse_prefill(with(&T::attn_sink, &sink), p, nullptr),
                 "argument 'attn_sink' must be on the device of 'q'");

  auto kvb = dev(DType::bf16, {4, 576}), kv8 = dev(DType::u8, {4, 656});
  EXPECT_INVALID(mla::quantize_kv_cache_fp8(kvb, on(kv8, 1), nullptr), "argument 'out' must be on the device of 'kv'");

  // Decode: a non-split workspace (num_sms 1 keeps the plan unsplit), tensors on two devices.
  mla::DecodeWorkspace ws;
  ws.config = {.batch = 2, .s_q = 1, .h_q = 64, .topk = 128, .num_sms = 1};
  auto dq = dev(DType::bf16, {2, 1, 64, 576}), cache = dev(DType::u8, {8, 64, 1, 656});
  auto didx = dev(DType::i32, {2, 1, 128}), dout = dev(DType::bf16, {2, 1, 64, 512}), dlse = dev(DType::f32, {2, 1, 64});
  const mla::SparseDecodeOptions dp{.sm_scale = 0.1};
  const mla::SparseDecodeTensors dt{.q = dq, .kv_cache = cache, .indices = didx, .out = dout, .lse = dlse};
  auto dwith = [&dt](auto member, const TensorView& value) {
    mla::SparseDecodeTensors r = dt;
    r.*member = value;
    return r;
  };
  using D = mla::SparseDecodeTensors;
  EXPECT_INVALID(mla::sparse_decode(dwith(&D::kv_cache, on(cache, 1)), ws, dp, nullptr),
                 "argument 'kv_cache' must be on the device of 'q'");
  EXPECT_INVALID(mla::sparse_decode(dwith(&D::indices, on(didx, 1)), ws, dp, nullptr),
                 "argument 'indices' must be on the device of 'q'");
  EXPECT_INVALID(mla::sparse_decode(dwith(&D::out, on(dout, 1)), ws, dp, nullptr),
                 "argument 'out' must be on the device of 'q'");
  EXPECT_INVALID(mla::sparse_decode(dwith(&D::lse, on(dlse, 1)), ws, dp, nullptr),
                 "argument 'lse' must be on the device of 'q'");
}

// ------------------------------------------------------------------------------------------------ threads

// Two threads, each driving "its" device in a loop: every recorded call has all of its tensors on one
// device, and every call arrives (module cache, stream binding and runtime are safe to share).
TEST_F(Devices, TwoThreadsDrivingTwoDevicesKeepTheirDevices) {
  constexpr int kCalls = 200;
  std::atomic<int> failures{0};
  // dev() is not thread-safe (it hands out fake addresses): the tensors are made before the threads start.
  const TensorView in[2] = {dev(DType::bf16, {4, 256}, 0), dev(DType::bf16, {4, 256}, 1)};
  const TensorView out[2] = {dev(DType::bf16, {4, 256}, 0), dev(DType::bf16, {4, 256}, 1)};
  const TensorView w[2] = {dev(DType::bf16, {256}, 0), dev(DType::bf16, {256}, 1)};
  auto drive = [&](int device) {
    try {
      for (int i = 0; i < kCalls; ++i) rmsnorm(rt(), out[device], in[device], w[device]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "device " << device << ": " << e.what();
      failures.fetch_add(1);
    }
  };
  std::thread t0([&] { drive(0); }), t1([&] { drive(1); });
  t0.join();
  t1.join();
  EXPECT_EQ(failures.load(), 0);
  int on0 = 0, on1 = 0;
  for (const auto& line : lines(recorded())) {
    if (line.find(";2:1;") == std::string::npos) {
      expect_all_on(line, 0);
      ++on0;
    } else {
      expect_all_on(line, 1);
      ++on1;
    }
  }
  EXPECT_EQ(on0, kCalls);
  EXPECT_EQ(on1, kCalls);
}

}  // namespace
}  // namespace flashcpp::testing

namespace flashcpp::testing {
namespace {

cudaError_t invalid_value() { return cudaErrorInvalidValue; }

TEST(CudaCheck, AFailedCallNamesTheExpressionTheFileAndTheLine) {
  EXPECT_NO_THROW(FLASHCPP_CUDA_CHECK(cudaSuccess));
  const int line = __LINE__ + 2;
  try {
    FLASHCPP_CUDA_CHECK(invalid_value());
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::cuda_error);
    const std::string want = "invalid_value() failed at test_devices.cpp:" + std::to_string(line) +
                             ": cudaErrorInvalidValue (";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashcpp::testing
