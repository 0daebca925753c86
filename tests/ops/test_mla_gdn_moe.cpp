// CPU tests of the batch-MLA, GDN and fused-MoE ops: validation matrices and argument packing against
// a recording module (tests/ops/recording_module_mla_gdn_moe.cc) standing in for FlashInfer's modules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ffi/ffi.hpp"
#include "flashcpp/gdn.hpp"
#include "flashcpp/mla_attention.hpp"
#include "flashcpp/moe.hpp"
#include "flashcpp/runtime.hpp"
#include "core/test_hooks.hpp"
#include "runtime/runtime_internal.hpp"

namespace fs = std::filesystem;
using namespace flashcpp;

namespace {

int g_cc_major = 9, g_cc_minor = 0;
const DeviceFacts& fake_facts(int) {
  static thread_local DeviceFacts f;
  f = DeviceFacts{.sm_count = 132, .cc_major = g_cc_major, .cc_minor = g_cc_minor};
  return f;
}

const std::vector<std::string>& module_uris() {
  static const std::vector<std::string> uris = {
      batch_mla_uri(DType::bf16, DType::bf16, DType::bf16, MlaBackend::fa2),
      batch_mla_uri(DType::bf16, DType::bf16, DType::bf16, MlaBackend::sm90),
      batch_mla_uri(DType::f16, DType::f16, DType::f16, MlaBackend::fa2),
      kGdnPrefillUri, "fused_moe_90", "fused_moe_100", "fused_moe_103", "fused_moe_120"};
  return uris;
}

class MlaGdnMoeOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("flashcpp_extra_ops_" + std::to_string(::getpid()));
    for (const auto& uri : module_uris()) {
      fs::create_directories(dir_ / uri);
      fs::copy_file(FLASHCPP_MLA_GDN_MOE_RECORDING_MODULE, dir_ / uri / (uri + ".so"), fs::copy_options::overwrite_existing);
    }
    RuntimeOptions o;
    o.tvm_ffi_library = FLASHCPP_TVM_FFI_LIB;
    o.module_dirs = {dir_};
    o.use_artifacts = false;
    o.jit = JitPolicy::off;
    rt_ = Runtime::create(o);
    // Where auto_tune records MoE tactics (the module cache): this suite's own directory.
    ::setenv("FLASHCPP_CACHE_DIR", (dir_ / "cache").c_str(), 1);
  }
  static void TearDownTestSuite() {
    rt_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void SetUp() override {
    g_cc_major = 9;
    g_cc_minor = 0;
    set_device_facts_for_testing(&fake_facts);
    for (const auto& uri : module_uris()) (void)recorded(uri);
  }
  void TearDown() override { set_device_facts_for_testing(nullptr); }

  /// Log of the module serving `uri` (one line per call), cleared.
  static std::string recorded(const std::string& uri) {
    auto lib = load_module(*rt_, uri);
    ffi::Any r;
    ffi::call(lib->function("recorded"), {}, &r, nullptr);
    return r.as_string();
  }
  static std::vector<std::string> split(const std::string& line, char sep = '|') {
    std::vector<std::string> out;
    std::stringstream ss(!line.empty() && line.back() == '\n' ? line.substr(0, line.size() - 1) : line);
    std::string item;
    while (std::getline(ss, item, sep)) out.push_back(item);
    return out;
  }

  static inline fs::path dir_;
  static inline std::shared_ptr<Runtime> rt_;
};

/// What the recording module prints for a DLTensor view (device overridable: host arrays go as CPU).
std::string tensor_str(const TensorView& t, const char* prefix = "T", int device_type = -1) {
  std::ostringstream os;
  os << prefix << "(" << int(dtype_dlpack_code(t.dtype)) << "." << int(dtype_bits(t.dtype)) << ";[";
  for (int i = 0; i < t.rank; ++i) os << (i ? "," : "") << t.shape[i];
  os << "];[";
  for (int i = 0; i < t.rank; ++i) os << (i ? "," : "") << t.strides[i];
  char ptr[32];
  std::snprintf(ptr, sizeof(ptr), "%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(t.data)));
  os << "];" << (device_type < 0 ? int(t.device.type) : device_type) << ":" << t.device.id << ";@" << ptr << ")";
  return os.str();
}

void* fake(uintptr_t addr) { return reinterpret_cast<void*>(addr); }
TensorView cuda_view(uintptr_t addr, DType t, std::initializer_list<int64_t> shape, int dev = 0) {
  return TensorView::contiguous(fake(addr), t, Device::cuda(dev), shape);
}

#define EXPECT_INVALID(stmt, fragment)                                                   \
  do {                                                                                   \
    try {                                                                                \
      stmt;                                                                              \
      ADD_FAILURE() << "expected invalid_argument containing '" << fragment << "'";      \
    } catch (const Error& e) {                                                           \
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();                      \
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();    \
    }                                                                                    \
  } while (0)

// =============================================================================== batch MLA

struct MlaFixture {
  // 2 requests: qo lens 3, 1; pages 2, 1; kv lens 70, 5 (page size 64).
  std::vector<int32_t> qo{0, 3, 4}, kvp{0, 2, 3}, kvl{70, 5};
  std::vector<uint8_t> pinned = std::vector<uint8_t>(1024);
  Workspace ws;
  BatchMlaConfig cfg;
  TensorView qo_v, kvp_v, kvl_v;
  MlaFixture() {
    ws.float_buffer = cuda_view(0x100000, DType::u8, {1 << 20});
    ws.int_buffer = cuda_view(0x200000, DType::u8, {1024});
    ws.pinned_int_buffer = TensorView::contiguous(pinned.data(), DType::u8, Device::cuda_host(), {1024});
    cfg.num_heads = 16;
    cfg.page_size = 64;
    cfg.backend = MlaBackend::fa2;
    refresh();
  }
  void refresh() {
    qo_v = TensorView::contiguous(qo.data(), DType::i32, Device::cpu(), {int64_t(qo.size())});
    kvp_v = TensorView::contiguous(kvp.data(), DType::i32, Device::cpu(), {int64_t(kvp.size())});
    kvl_v = TensorView::contiguous(kvl.data(), DType::i32, Device::cpu(), {int64_t(kvl.size())});
  }
  BatchMlaPlan plan(const Runtime& rt) const { return BatchMlaPlan::create(rt, ws, qo_v, kvp_v, kvl_v, cfg, nullptr); }
  // Run tensors matching the plan.
  TensorView q_nope = cuda_view(0x1000000, DType::bf16, {4, 16, 512});
  TensorView q_pe = cuda_view(0x2000000, DType::bf16, {4, 16, 64});
  TensorView ckv = cuda_view(0x3000000, DType::bf16, {8, 64, 512});
  TensorView kpe = cuda_view(0x4000000, DType::bf16, {8, 64, 64});
  TensorView idx = cuda_view(0x5000000, DType::i32, {3});
  TensorView out = cuda_view(0x6000000, DType::bf16, {4, 16, 512});
  TensorView lse = cuda_view(0x7000000, DType::f32, {4, 16});
};

TEST_F(MlaGdnMoeOps, MlaUris) {
  EXPECT_EQ(batch_mla_uri(DType::bf16, DType::bf16, DType::bf16, MlaBackend::fa2),
            "batch_mla_attention_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_ckv_512_head_dim_kpe_64_"
            "profiler_False");
  EXPECT_EQ(batch_mla_uri(DType::f16, DType::f16, DType::f16, MlaBackend::sm90),
            "batch_mla_attention_dtype_q_f16_dtype_kv_f16_dtype_o_f16_dtype_idx_i32_head_dim_ckv_512_head_dim_kpe_64_"
            "profiler_False_sm90");
  EXPECT_INVALID(batch_mla_uri(DType::f16, DType::f16, DType::f16, MlaBackend::automatic), "backend");
}

TEST_F(MlaGdnMoeOps, MlaPlanPacking) {
  MlaFixture f;
  f.cfg.causal = true;
  auto plan = f.plan(*rt_);
  const auto uri = batch_mla_uri(DType::bf16, DType::bf16, DType::bf16, MlaBackend::fa2);
  EXPECT_EQ(plan.uri(), uri);
  EXPECT_EQ(plan.batch_size(), 2);
  EXPECT_EQ(plan.total_q_rows(), 4);
  EXPECT_EQ(plan.total_pages(), 3);
  const auto lines = split(recorded(uri), '\n');
  ASSERT_EQ(lines.size(), 1u);
  const auto a = split(lines[0]);
  ASSERT_EQ(a.size(), 10u) << lines[0];
  EXPECT_EQ(a[0], "plan");
  EXPECT_EQ(a[1], tensor_str(f.ws.float_buffer));
  EXPECT_EQ(a[2], tensor_str(f.ws.int_buffer));
  EXPECT_EQ(a[3], tensor_str(f.ws.pinned_int_buffer, "T", 1));  // pinned host goes as kDLCPU
  EXPECT_EQ(a[4], tensor_str(f.qo_v, "T", 1));
  EXPECT_EQ(a[5], tensor_str(f.kvp_v, "T", 1));
  EXPECT_EQ(a[6], tensor_str(f.kvl_v, "T", 1));
  EXPECT_EQ(a[7], "i:16");
  EXPECT_EQ(a[8], "i:512");
  EXPECT_EQ(a[9], "b:1");
  std::vector<int64_t> expected_info;
  for (int64_t i = 0; i < 18; ++i) expected_info.push_back(100 + i);
  EXPECT_EQ(plan.plan_info(), expected_info);
}

TEST_F(MlaGdnMoeOps, MlaRunPacking) {
  MlaFixture f;
  f.cfg.causal = true;
  f.cfg.return_lse_base_on_e = true;
  f.cfg.sm_scale = 0.125;
  auto plan = f.plan(*rt_);
  const auto uri = plan.uri();
  (void)recorded(uri);
  plan.run(f.q_nope, f.q_pe, f.ckv, f.kpe, f.idx, f.out, &f.lse, nullptr);
  auto a = split(recorded(uri));
  ASSERT_EQ(a.size(), 16u);
  EXPECT_EQ(a[0], "run");
  EXPECT_EQ(a[1], tensor_str(f.ws.float_buffer));
  EXPECT_EQ(a[2], tensor_str(f.ws.int_buffer));
  EXPECT_EQ(a[3], "[i:100,i:101,i:102,i:103,i:104,i:105,i:106,i:107,i:108,i:109,i:110,i:111,i:112,i:113,i:114,i:115,"
                  "i:116,i:117]");
  EXPECT_EQ(a[4], tensor_str(f.q_nope));
  EXPECT_EQ(a[5], tensor_str(f.q_pe));
  EXPECT_EQ(a[6], tensor_str(f.ckv));
  EXPECT_EQ(a[7], tensor_str(f.kpe));
  EXPECT_EQ(a[8], tensor_str(f.idx));
  EXPECT_EQ(a[9], tensor_str(f.out));
  EXPECT_EQ(a[10], tensor_str(f.lse));
  EXPECT_EQ(a[11], "i:1");  // causal
  EXPECT_EQ(a[12], "i:16");
  EXPECT_EQ(a[13], "i:64");
  EXPECT_EQ(a[14], "f:0.125");
  EXPECT_EQ(a[15], "b:1");

  // Non-causal plan, no lse, default scale 1/sqrt(576) = 1/24.
  MlaFixture g;
  auto plan2 = g.plan(*rt_);
  (void)recorded(uri);
  plan2.run(g.q_nope, g.q_pe, g.ckv, g.kpe, g.idx, g.out, nullptr, nullptr);
  a = split(recorded(uri));
  ASSERT_EQ(a.size(), 16u);
  EXPECT_EQ(a[10], "None");
  EXPECT_EQ(a[11], "i:0");
  EXPECT_EQ(a[14], "f:0.0416666667");
  EXPECT_EQ(a[15], "b:0");
}

TEST_F(MlaGdnMoeOps, MlaBackendSelection) {
  MlaFixture f;
  f.cfg.backend = MlaBackend::automatic;
  EXPECT_EQ(f.plan(*rt_).backend(), MlaBackend::sm90);
  g_cc_major = 8;
  EXPECT_EQ(f.plan(*rt_).backend(), MlaBackend::fa2);
  f.cfg.backend = MlaBackend::sm90;
  try {
    (void)f.plan(*rt_);
    ADD_FAILURE() << "sm90 on compute capability 8.0 must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
  }
}

TEST_F(MlaGdnMoeOps, MlaPlanValidation) {
  const auto uri = batch_mla_uri(DType::bf16, DType::bf16, DType::bf16, MlaBackend::fa2);
  auto check = [&](auto mutate, const char* fragment) {
    MlaFixture f;
    mutate(f);
    f.refresh();
    EXPECT_INVALID((void)f.plan(*rt_), fragment);
    EXPECT_EQ(recorded(uri), "") << "nothing may be called after a validation failure (" << fragment << ")";
  };
  check([](MlaFixture& f) { f.kvl[0] = 129; }, "kv_len_host");                 // more than 2 pages × 64
  check([](MlaFixture& f) { f.kvl[1] = -1; }, "kv_len_host");
  check([](MlaFixture& f) { f.cfg.causal = true; f.kvl[0] = 2; }, "kv_len >= qo_len");
  check([](MlaFixture& f) { f.qo = {0, 3}; }, "qo_indptr_host");              // wrong length
  check([](MlaFixture& f) { f.kvp = {1, 2, 3}; }, "must start at 0");
  check([](MlaFixture& f) { f.qo = {0, 3, 2}; }, "never decrease");
  check([](MlaFixture& f) { f.cfg.kv_dtype = DType::f16; }, "config.kv_dtype");
  check([](MlaFixture& f) { f.cfg.q_dtype = DType::f32; f.cfg.kv_dtype = DType::f32; }, "config.q_dtype");
  check([](MlaFixture& f) { f.cfg.num_heads = 0; }, "config.num_heads");
  check([](MlaFixture& f) { f.cfg.page_size = 0; }, "config.page_size");
  check([](MlaFixture& f) { f.cfg.sm_scale = -1.0; }, "config.sm_scale");
  check([](MlaFixture& f) { f.cfg.sm_scale = std::nan(""); }, "config.sm_scale");
  check([](MlaFixture& f) { f.ws.pinned_int_buffer = cuda_view(0x900000, DType::u8, {1024}); }, "pinned_int_buffer");
  check([](MlaFixture& f) { f.ws.pinned_int_buffer.shape[0] = 100; }, "pinned_int_buffer");
  check([](MlaFixture& f) { f.ws.int_buffer = cuda_view(0x200000, DType::u8, {1024}, 1); }, "int_buffer");
  check([](MlaFixture& f) { f.ws.float_buffer.dtype = DType::f32; }, "float_buffer");
  check([](MlaFixture& f) { f.ws.int_buffer.data = fake(0x100000 + 4096); },
        "'float_buffer' must not overlap 'int_buffer'");
  {
    // kv_len_host inside the pinned buffer the plan writes (valid values, so only the overlap is wrong).
    MlaFixture f;
    std::memcpy(f.pinned.data() + 512, f.kvl.data(), f.kvl.size() * sizeof(int32_t));
    f.kvl_v.data = f.pinned.data() + 512;
    EXPECT_INVALID((void)f.plan(*rt_), "'pinned_int_buffer' must not overlap 'kv_len_host'");
    EXPECT_EQ(recorded(uri), "");
  }
}

TEST_F(MlaGdnMoeOps, MlaRunValidationRefusesMismatchedRuns) {
  MlaFixture base;
  auto plan = base.plan(*rt_);
  const auto uri = plan.uri();
  (void)recorded(uri);
  auto check = [&](auto mutate, const char* fragment) {
    MlaFixture f;
    mutate(f);
    EXPECT_INVALID(plan.run(f.q_nope, f.q_pe, f.ckv, f.kpe, f.idx, f.out, &f.lse, nullptr), fragment);
    EXPECT_EQ(recorded(uri), "") << fragment;
  };
  check([](MlaFixture& f) { f.q_nope = cuda_view(0x1000000, DType::bf16, {5, 16, 512}); }, "q_nope");  // rows ≠ plan
  check([](MlaFixture& f) { f.q_nope = cuda_view(0x1000000, DType::bf16, {4, 8, 512}); }, "q_nope");   // heads ≠ plan
  check([](MlaFixture& f) { f.q_pe.dtype = DType::f16; }, "q_pe");
  check([](MlaFixture& f) { f.ckv = cuda_view(0x3000000, DType::bf16, {8, 32, 512}); }, "ckv_cache");  // page size
  check([](MlaFixture& f) { f.kpe = cuda_view(0x4000000, DType::bf16, {7, 64, 64}); }, "kpe_cache");   // pages ≠ ckv
  check([](MlaFixture& f) { f.idx = cuda_view(0x5000000, DType::i32, {2}); }, "kv_indices");
  check([](MlaFixture& f) { f.idx.dtype = DType::i64; }, "kv_indices");
  check([](MlaFixture& f) { f.out = cuda_view(0x6000000, DType::bf16, {4, 16, 512}, 1); }, "out");
  check([](MlaFixture& f) { f.lse = cuda_view(0x7000000, DType::f32, {4, 8}); }, "lse");
  check([](MlaFixture& f) { f.lse.dtype = DType::bf16; }, "lse");
  check([](MlaFixture& f) { f.q_nope.data = fake(0x1000002); }, "aligned");
  check([](MlaFixture& f) { f.out.strides[2] = 2; }, "stride 1");
  check([](MlaFixture& f) { f.q_nope.device = Device::cpu(); }, "CUDA");
  check([](MlaFixture& f) { f.out.data = f.q_nope.data; }, "'out' must not overlap 'q_nope'");
  check([](MlaFixture& f) { f.out.data = fake(0x3000000 + 4096); }, "'out' must not overlap 'ckv_cache'");
  check([](MlaFixture& f) { f.lse.data = fake(0x6000000 + 1024); }, "'out' must not overlap 'lse'");
  check([](MlaFixture& f) { f.lse.data = fake(0x100000); }, "'lse' must not overlap 'workspace.float_buffer'");
  check([](MlaFixture& f) { f.idx.data = fake(0x200000); }, "'workspace.int_buffer' must not overlap 'kv_indices'");
}

// =============================================================================== GDN

struct GdnFixture {
  // 2 sequences (3 + 5 tokens), GQA: Hq 4, Hk = Hv 2, D 128.
  int64_t T = 8, N = 2;
  std::vector<int64_t> cu_host{0, 3, 8};
  GdnPrefillTensors a;
  TensorView cu_host_v, state_in, alpha, beta, ws;
  GdnFixture() {
    a.q = cuda_view(0x1000000, DType::bf16, {T, 4, 128});
    a.k = cuda_view(0x2000000, DType::bf16, {T, 2, 128});
    a.v = cuda_view(0x3000000, DType::bf16, {T, 2, 128});
    a.output = cuda_view(0x4000000, DType::bf16, {T, 4, 128});
    a.output_state = cuda_view(0x5000000, DType::f32, {N, 4, 128, 128});
    a.cu_seqlens = cuda_view(0x6000000, DType::i64, {N + 1});
    cu_host_v = TensorView::contiguous(cu_host.data(), DType::i64, Device::cpu(), {N + 1});
    state_in = cuda_view(0x7000000, DType::f32, {N, 4, 128, 128});
    alpha = cuda_view(0x8000000, DType::f32, {T, 4});
    beta = cuda_view(0x9000000, DType::f32, {T, 4});
    ws = cuda_view(0xa000000, DType::u8, {132 * 128});
    a.cu_seqlens_host = &cu_host_v;
    a.workspace = &ws;
  }
};

TEST_F(MlaGdnMoeOps, GdnPacking) {
  GdnFixture f;
  gdn_prefill(*rt_, f.a, {}, nullptr);
  auto a = split(recorded(kGdnPrefillUri));
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a[0], "gdn_prefill");
  EXPECT_EQ(a[1], tensor_str(f.a.output));
  EXPECT_EQ(a[2], tensor_str(f.a.output_state));
  EXPECT_EQ(a[3], tensor_str(f.a.q));
  EXPECT_EQ(a[4], tensor_str(f.a.k));
  EXPECT_EQ(a[5], tensor_str(f.a.v));
  EXPECT_EQ(a[6], tensor_str(f.a.cu_seqlens));
  EXPECT_EQ(a[7], "None");
  EXPECT_EQ(a[8], "None");
  EXPECT_EQ(a[9], "None");
  EXPECT_EQ(a[10], "f:0");
  EXPECT_EQ(a[11], tensor_str(f.ws));

  f.a.input_state = &f.state_in;
  f.a.alpha = &f.alpha;
  f.a.beta = &f.beta;
  gdn_prefill(*rt_, f.a, {.scale = 0.5}, nullptr);
  a = split(recorded(kGdnPrefillUri));
  ASSERT_EQ(a.size(), 12u);
  EXPECT_EQ(a[7], tensor_str(f.state_in));
  EXPECT_EQ(a[8], tensor_str(f.alpha));
  EXPECT_EQ(a[9], tensor_str(f.beta));
  EXPECT_EQ(a[10], "f:0.5");
}

TEST_F(MlaGdnMoeOps, GdnWorkspaceBytesAndArchitecture) {
  EXPECT_EQ(gdn_prefill_workspace_bytes(0), 132 * 128);
  GdnFixture f;
  g_cc_major = 10;
  try {
    gdn_prefill(*rt_, f.a, {}, nullptr);
    ADD_FAILURE() << "GDN prefill on compute capability 10.0 must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("9.x"), std::string::npos) << e.what();
  }
  EXPECT_EQ(recorded(kGdnPrefillUri), "");
}

TEST_F(MlaGdnMoeOps, GdnValidation) {
  auto check = [&](auto mutate, const char* fragment) {
    GdnFixture f;
    mutate(f);
    EXPECT_INVALID(gdn_prefill(*rt_, f.a, {}, nullptr), fragment);
    EXPECT_EQ(recorded(kGdnPrefillUri), "") << fragment;
  };
  check([](GdnFixture& f) { f.a.k.dtype = DType::f16; }, "'k'");
  check([](GdnFixture& f) { f.a.q = cuda_view(0x1000000, DType::f32, {8, 4, 128}); }, "'q'");
  check([](GdnFixture& f) { f.a.q = cuda_view(0x1000000, DType::bf16, {8, 4, 64}); }, "head size");
  check([](GdnFixture& f) { f.a.k = cuda_view(0x2000000, DType::bf16, {8, 4, 128}); }, "GQA");
  check([](GdnFixture& f) { f.a.q = cuda_view(0x1000000, DType::bf16, {8, 3, 128});
                            f.a.output = cuda_view(0x4000000, DType::bf16, {8, 3, 128}); }, "divisible");
  check([](GdnFixture& f) { f.a.output = cuda_view(0x4000000, DType::bf16, {8, 2, 128}); }, "output");
  check([](GdnFixture& f) { f.a.output_state = cuda_view(0x5000000, DType::f32, {3, 4, 128, 128}); }, "output_state");
  check([](GdnFixture& f) { f.a.output_state.dtype = DType::bf16; }, "output_state");
  check([](GdnFixture& f) { f.a.cu_seqlens.dtype = DType::i32; }, "cu_seqlens");
  check([](GdnFixture& f) { f.cu_host[2] = 7; }, "must end at the total token count 8");
  check([](GdnFixture& f) { f.cu_host = {0, 5, 3}; f.cu_host_v.data = f.cu_host.data(); }, "never decrease");
  check([](GdnFixture& f) { f.alpha = cuda_view(0x8000000, DType::f32, {8, 2}); f.a.alpha = &f.alpha; }, "alpha");
  check([](GdnFixture& f) { f.beta.dtype = DType::bf16; f.a.beta = &f.beta; }, "beta");
  check([](GdnFixture& f) { f.state_in = cuda_view(0x7000000, DType::f32, {2, 4, 128, 64}); f.a.input_state = &f.state_in; },
        "input_state");
  check([](GdnFixture& f) { f.ws = cuda_view(0xa000000, DType::u8, {131 * 128}); }, "workspace");
  check([](GdnFixture& f) { f.a.v.strides[0] = 1024; }, "contiguous");
  check([](GdnFixture& f) { f.a.v = cuda_view(0x3000000, DType::bf16, {8, 2, 128}, 1); }, "device");
  check([](GdnFixture& f) { f.a.output.data = f.a.q.data; }, "'output' must not overlap 'q'");
  check([](GdnFixture& f) { f.a.output.data = fake(0x3000000 + 16); }, "'output' must not overlap 'v'");
  check([](GdnFixture& f) { f.a.output_state.data = fake(0x4000000 + 4096); }, "'output' must not overlap 'output_state'");
  // The state updated in place is refused too (not documented as allowed).
  check([](GdnFixture& f) { f.state_in.data = f.a.output_state.data; f.a.input_state = &f.state_in; },
        "'output_state' must not overlap 'input_state'");
  check([](GdnFixture& f) { f.beta.data = fake(0x5000000 + 256); f.a.beta = &f.beta; },
        "'output_state' must not overlap 'beta'");
  check([](GdnFixture& f) { f.ws.data = fake(0x6000000); }, "'workspace' must not overlap 'cu_seqlens'");
  {
    GdnFixture f;
    EXPECT_INVALID(gdn_prefill(*rt_, f.a, {.scale = -1.0}, nullptr), "scale");
    EXPECT_INVALID(gdn_prefill(*rt_, f.a, {.scale = INFINITY}, nullptr), "scale");
    // A set scale must be > 0: 0 is not the default (only an unset scale, or 0 through the C ABI, is).
    EXPECT_INVALID(gdn_prefill(*rt_, f.a, {.scale = 0.0}, nullptr), "must be finite and > 0");
  }
}

// =============================================================================== fused MoE

struct MoeFixture {
  // 4 tokens, top-2, 8 experts, hidden 256, intermediate 128, swiglu.
  FusedMoeConfig cfg;
  FusedMoeTensors a;
  FusedMoeOptions o;  // swiglu, no tensor or expert parallelism
  TensorView fc1_dq, fc2_q, fc2_dq, in_dq, bs1, bs2, b1, b2;
  explicit MoeFixture(MoeQuantization q = MoeQuantization::none) {
    cfg.quantization = q;
    cfg.auto_tune = false;  // the packing tests count the module's calls; MoeAutoTune* turn it on
    const DType act = q == MoeQuantization::fp8_per_tensor ? DType::e4m3 : DType::bf16;
    const DType w = q == MoeQuantization::none ? DType::bf16 : DType::e4m3;
    cfg.activation_dtype = act;
    cfg.weight_dtype = w;
    cfg.output_dtype = DType::bf16;
    a.output = cuda_view(0x1000000, DType::bf16, {4, 256});
    a.input = cuda_view(0x2000000, act, {4, 256});
    a.token_selected_experts = cuda_view(0x3000000, DType::i32, {4, 2});
    a.token_final_scales = cuda_view(0x4000000, DType::f32, {4, 2});
    a.fc1_weights = cuda_view(0x5000000, w, {8, 256, 256});
    a.fc2_weights = cuda_view(0x6000000, w, {8, 256, 128});
    fc1_dq = cuda_view(0x7000000, DType::f32, {8});
    fc2_q = cuda_view(0x7100000, DType::f32, {});
    fc2_dq = cuda_view(0x7200000, DType::f32, {8});
    in_dq = cuda_view(0x7300000, DType::f32, {});
    bs1 = cuda_view(0x7400000, DType::f32, {8, 2, 2});
    bs2 = cuda_view(0x7500000, DType::f32, {8, 2, 1});
    b1 = cuda_view(0x7600000, DType::bf16, {8, 256});
    b2 = cuda_view(0x7700000, DType::bf16, {8, 256});
    if (q == MoeQuantization::fp8_per_tensor) {
      a.fc1_dequant = &fc1_dq;
      a.fc2_quant = &fc2_q;
      a.fc2_dequant = &fc2_dq;
      a.fc1_input_dequant = &in_dq;
    } else if (q == MoeQuantization::deepseek_fp8_block_scale) {
      a.fc1_block_scales = &bs1;
      a.fc2_block_scales = &bs2;
    }
  }
};

TEST_F(MlaGdnMoeOps, MoeRunnerCreatedOnceAndPacked) {
  MoeFixture f;
  auto runner = FusedMoeRunner::create(*rt_, f.cfg);
  EXPECT_EQ(runner.uri(), "fused_moe_90");
  auto init = split(recorded("fused_moe_90"));
  ASSERT_EQ(init.size(), 8u);
  EXPECT_EQ(init[0], "init");
  EXPECT_EQ(init[1], "dt:4.16");
  EXPECT_EQ(init[2], "dt:4.16");
  EXPECT_EQ(init[3], "dt:4.16");
  for (int i = 4; i < 8; ++i) EXPECT_EQ(init[i], "b:0");

  for (int call = 0; call < 2; ++call) {
    runner.run(f.a, f.o, nullptr);
    auto a = split(recorded("fused_moe_90"));  // run_moe only: init is not repeated
    ASSERT_EQ(a.size(), 25u);
    EXPECT_EQ(a[0], "run_moe");
    EXPECT_EQ(a[1], tensor_str(f.a.output));
    EXPECT_EQ(a[2], tensor_str(f.a.input));
    EXPECT_EQ(a[3], tensor_str(f.a.token_selected_experts));
    EXPECT_EQ(a[4], tensor_str(f.a.token_final_scales));
    EXPECT_EQ(a[5], tensor_str(f.a.fc1_weights));
    EXPECT_EQ(a[6], "None");
    EXPECT_EQ(a[7], tensor_str(f.a.fc2_weights));
    EXPECT_EQ(a[8], "None");
    for (int i = 9; i <= 13; ++i) EXPECT_EQ(a[i], "None") << i;  // quant_scales, input_sf, swiglu_*
    EXPECT_EQ(a[14], "i:1");
    EXPECT_EQ(a[15], "i:0");
    EXPECT_EQ(a[16], "i:1");
    EXPECT_EQ(a[17], "i:0");
    EXPECT_EQ(a[18], "i:1");  // cluster_size
    EXPECT_EQ(a[19], "i:0");
    EXPECT_EQ(a[20], "b:0");
    EXPECT_EQ(a[21], "b:0");
    EXPECT_EQ(a[22], "None");
    EXPECT_EQ(a[23], "b:0");
    EXPECT_EQ(a[24], "i:3");  // swiglu
  }
  // Biases and another activation.
  MoeFixture g;
  g.a.fc1_bias = &g.b1;
  g.a.fc2_bias = &g.b2;
  g.o.activation = MoeActivation::relu;
  g.a.fc1_weights = cuda_view(0x5000000, DType::bf16, {8, 128, 256});
  g.b1 = cuda_view(0x7600000, DType::bf16, {8, 128});
  runner.run(g.a, g.o, nullptr);
  auto a = split(recorded("fused_moe_90"));
  ASSERT_EQ(a.size(), 25u);
  EXPECT_EQ(a[6], tensor_str(g.b1));
  EXPECT_EQ(a[8], tensor_str(g.b2));
  EXPECT_EQ(a[24], "i:1");
}

TEST_F(MlaGdnMoeOps, MoeTunePacksTheProfilerCallsAndRunsPassTheTactics) {
  MoeFixture f;
  auto runner = FusedMoeRunner::create(*rt_, f.cfg);
  (void)recorded("fused_moe_90");
  EXPECT_EQ(runner.tactics_for(4).gemm1, -1);
  const MoeTactics t = runner.tune(f.a, f.o, nullptr);  // no candidates offered: defaults kept
  EXPECT_EQ(t.gemm1, -1);
  EXPECT_EQ(t.gemm2, -1);
  auto lines = split(recorded("fused_moe_90"), '\n');
  ASSERT_EQ(lines.size(), 2u);  // the profiler prepared once per GEMM
  for (int gemm = 1; gemm <= 2; ++gemm) {
    auto p = split(lines[gemm - 1]);
    ASSERT_EQ(p.size(), 20u);
    EXPECT_EQ(p[0], "run_gemm_profile");
    EXPECT_EQ(p[1], tensor_str(f.a.input));
    EXPECT_EQ(p[2], tensor_str(f.a.fc1_weights));
    EXPECT_EQ(p[3], "None");
    EXPECT_EQ(p[4], tensor_str(f.a.fc2_weights));
    EXPECT_EQ(p[5], "None");
    EXPECT_EQ(p[6], "i:2");  // top_k
    EXPECT_EQ(p[15], "i:" + std::to_string(gemm));
    EXPECT_EQ(p[16], "i:-1");  // the profiler's default candidate while preparing
    EXPECT_EQ(p[17], "b:1");   // do_preparation
    EXPECT_EQ(p[19], "i:3");   // swiglu
  }
  // Runs in the tuned bucket (4 tokens: bucket 4) pass the tactics; another bucket passes None.
  runner.run(f.a, f.o, nullptr);
  auto a = split(recorded("fused_moe_90"));
  ASSERT_EQ(a.size(), 25u);
  EXPECT_EQ(a[22], "[i:-1,i:-1]");
  MoeFixture g;
  g.a.output = cuda_view(0x1000000, DType::bf16, {16, 256});
  g.a.input = cuda_view(0x2000000, DType::bf16, {16, 256});
  g.a.token_selected_experts = cuda_view(0x3000000, DType::i32, {16, 2});
  g.a.token_final_scales = cuda_view(0x4000000, DType::f32, {16, 2});
  runner.run(g.a, g.o, nullptr);
  a = split(recorded("fused_moe_90"));
  ASSERT_EQ(a.size(), 25u);
  EXPECT_EQ(a[22], "None");
  // Tuning validates as run does, and block-scale runners have nothing to tune.
  f.a.token_final_scales = cuda_view(0x4000000, DType::f32, {4, 3});
  EXPECT_INVALID(runner.tune(f.a, f.o, nullptr), "token_final_scales");
  EXPECT_EQ(recorded("fused_moe_90"), "");
  MoeFixture d(MoeQuantization::deepseek_fp8_block_scale);
  d.a.input = cuda_view(0x2000000, DType::bf16, {4, 256});
  auto block = FusedMoeRunner::create(*rt_, d.cfg);
  (void)recorded("fused_moe_90");
  EXPECT_EQ(block.tune(d.a, d.o, nullptr).gemm1, -1);
  EXPECT_EQ(recorded("fused_moe_90"), "");
}

TEST_F(MlaGdnMoeOps, MoeSetTacticsIsValidatedAndPassedByRun) {
  MoeFixture f;
  auto runner = FusedMoeRunner::create(*rt_, f.cfg);
  (void)recorded("fused_moe_90");
  // The recording runner offers no candidates: only the defaults can be set.
  EXPECT_INVALID(runner.set_tactics(4, {0, -1}), "'tactics.gemm1' must be -1 or in [0, 0)");
  EXPECT_INVALID(runner.set_tactics(4, {-1, 3}), "'tactics.gemm2' must be -1 or in [0, 0)");
  EXPECT_INVALID(runner.set_tactics(4, {-2, -1}), "tactics.gemm1");
  EXPECT_INVALID(runner.set_tactics(0, {-1, -1}), "'tokens' must be >= 1");
  EXPECT_EQ(recorded("fused_moe_90"), "");
  runner.set_tactics(3, {-1, -1});  // bucket 4, as the fixture's 4 tokens
  EXPECT_EQ(runner.tactics_for(4).gemm1, -1);
  runner.run(f.a, f.o, nullptr);
  auto a = split(recorded("fused_moe_90"));
  ASSERT_EQ(a.size(), 25u);
  EXPECT_EQ(a[22], "[i:-1,i:-1]");
  MoeFixture d(MoeQuantization::deepseek_fp8_block_scale);
  auto block = FusedMoeRunner::create(*rt_, d.cfg);
  EXPECT_INVALID(block.set_tactics(4, {1, 1}), "must be {-1, -1} for deepseek_fp8_block_scale");
  block.set_tactics(4, {-1, -1});
}

// Tactics are kept per (token bucket, problem shape): a runner shared by two models (FusedMoeRunner::shared is
// per configuration) must not run one model's tuned tactics on the other's shape. The recording runner offers
// no candidates, so tune() keeps {-1, -1}: run() then passes the list [-1,-1], and None where nothing applies.
// auto_tune (FusedMoeConfig): the first run() of an untuned bucket and shape tunes and records the tactics in the
// module cache; later runs and later runners use the record; a record that does not parse, belongs to another
// module or could have been written by another user is not used. The recording runner offers no candidates, so
// tune() keeps {-1, -1}: the profiler's two preparation calls show a tune, run_moe then passes [-1,-1].
TEST_F(MlaGdnMoeOps, MoeAutoTuneTunesOnceRecordsTheTacticsAndReusesTheRecord) {
  const fs::path records = dir_ / "cache" / "moe-tactics";
  std::error_code ec;
  fs::remove_all(records, ec);
  MoeFixture f;
  f.cfg.auto_tune = true;
  auto calls = [&] {
    std::vector<std::string> names;
    for (const auto& line : split(recorded("fused_moe_90"), '\n')) names.push_back(split(line)[0]);
    return names;
  };
  using V = std::vector<std::string>;
  const V tuned_then_run = {"run_gemm_profile", "run_gemm_profile", "run_moe"}, run_only = {"run_moe"};
  auto runner = FusedMoeRunner::create(*rt_, f.cfg);
  (void)recorded("fused_moe_90");
  runner.run(f.a, f.o, nullptr);
  EXPECT_EQ(calls(), tuned_then_run);
  runner.run(f.a, f.o, nullptr);
  EXPECT_EQ(calls(), run_only);
  ASSERT_TRUE(fs::is_directory(records));
  fs::path file;
  for (const auto& e : fs::directory_iterator(records))
    if (e.path().extension() == ".json") file = e.path();
  ASSERT_FALSE(file.empty());
  std::stringstream text;
  text << std::ifstream(file).rdbuf();
  EXPECT_NE(text.str().find("\"h256_i128_e8_k2_act3_bias0_tp1.0_ep1.0_tokens2^2\""), std::string::npos) << text.str();
  EXPECT_EQ(fs::status(file).permissions() & (fs::perms::group_write | fs::perms::others_write), fs::perms::none);

  // A new runner (as in the next process) reads the record: no tuning.
  auto second = FusedMoeRunner::create(*rt_, f.cfg);
  (void)recorded("fused_moe_90");
  second.run(f.a, f.o, nullptr);
  EXPECT_EQ(calls(), run_only);
  // Another bucket of the same shape is tuned and added to the same record.
  MoeFixture g;
  g.cfg.auto_tune = true;
  g.a.output = cuda_view(0x1000000, DType::bf16, {16, 256});
  g.a.input = cuda_view(0x2000000, DType::bf16, {16, 256});
  g.a.token_selected_experts = cuda_view(0x3000000, DType::i32, {16, 2});
  g.a.token_final_scales = cuda_view(0x4000000, DType::f32, {16, 2});
  second.run(g.a, g.o, nullptr);
  EXPECT_EQ(calls(), tuned_then_run);
  std::stringstream both;
  both << std::ifstream(file).rdbuf();
  EXPECT_NE(both.str().find("tokens2^2"), std::string::npos);
  EXPECT_NE(both.str().find("tokens2^4"), std::string::npos);

  // A record that does not parse is not used: the next runner tunes and rewrites it.
  { std::ofstream(file) << "{ not json"; }
  auto third = FusedMoeRunner::create(*rt_, f.cfg);
  (void)recorded("fused_moe_90");
  third.run(f.a, f.o, nullptr);
  EXPECT_EQ(calls(), tuned_then_run);
  std::stringstream rewritten;
  rewritten << std::ifstream(file).rdbuf();
  EXPECT_NE(rewritten.str().find("\"module_sha256\""), std::string::npos) << rewritten.str();
  // Nor one whose fields have other JSON types (a type error inside the reader must not escape run()).
  { std::ofstream(file) << "{\"module_sha256\": 5, \"tactics\": [1, 2]}"; }
  auto typed = FusedMoeRunner::create(*rt_, f.cfg);
  (void)recorded("fused_moe_90");
  typed.run(f.a, f.o, nullptr);
  EXPECT_EQ(calls(), tuned_then_run);
  rewritten.str("");
  rewritten << std::ifstream(file).rdbuf();
  // The record of another module build (another SHA-256) is not used either.
  {
    std::string t = rewritten.str();
    const size_t at = t.find("\"module_sha256\": \"") + 18;
    t[at] = t[at] == '0' ? '1' : '0';
    std::ofstream(file) << t;
  }
  auto fourth = FusedMoeRunner::create(*rt_, f.cfg);
  (void)recorded("fused_moe_90");
  fourth.run(f.a, f.o, nullptr);
  EXPECT_EQ(calls(), tuned_then_run);
  // One another user could have written (group-writable) is neither used nor written.
  fs::permissions(file, fs::perms::group_write, fs::perm_options::add);
  std::stringstream before;
  before << std::ifstream(file).rdbuf();
  auto fifth = FusedMoeRunner::create(*rt_, f.cfg);
  (void)recorded("fused_moe_90");
  fifth.run(f.a, f.o, nullptr);
  EXPECT_EQ(calls(), tuned_then_run);
  std::stringstream after;
  after << std::ifstream(file).rdbuf();
  EXPECT_EQ(after.str(), before.str());
  fs::remove_all(records, ec);

  // auto_tune off: no tuning, the defaults (None).
  MoeFixture off;
  auto plain = FusedMoeRunner::create(*rt_, off.cfg);
  (void)recorded("fused_moe_90");
  plain.run(off.a, off.o, nullptr);
  auto a = split(recorded("fused_moe_90"));
  ASSERT_EQ(a.size(), 25u);
  EXPECT_EQ(a[0], "run_moe");
  EXPECT_EQ(a[22], "None");
  EXPECT_FALSE(fs::exists(records));
}

TEST_F(MlaGdnMoeOps, MoeTacticsAreKeptPerProblemShape) {
  MoeFixture f;  // 4 tokens (bucket 4), H 256, I 128, E 8, top 2, swiglu
  auto runner = FusedMoeRunner::create(*rt_, f.cfg);
  (void)recorded("fused_moe_90");
  auto profile_ids_of_run = [&](const MoeFixture& m) {
    runner.run(m.a, m.o, nullptr);
    auto a = split(recorded("fused_moe_90"));
    return a.size() == 25u ? a[22] : "unexpected record of " + std::to_string(a.size()) + " fields";
  };
  // Shapes that share f's token bucket but differ from it in one thing each.
  auto with_tokens = [](MoeFixture& m, int64_t T) {
    m.a.output = cuda_view(0x1000000, DType::bf16, {T, 256});
    m.a.input = cuda_view(0x2000000, DType::bf16, {T, 256});
    m.a.token_selected_experts = cuda_view(0x3000000, DType::i32, {T, 2});
    m.a.token_final_scales = cuda_view(0x4000000, DType::f32, {T, 2});
  };
  MoeFixture experts, hidden, inter, top_k, act, bias, tp, ep, rank;
  experts.a.fc1_weights = cuda_view(0x5000000, DType::bf16, {4, 256, 256});
  experts.a.fc2_weights = cuda_view(0x6000000, DType::bf16, {4, 256, 128});
  hidden.a.output = cuda_view(0x1000000, DType::bf16, {4, 128});
  hidden.a.input = cuda_view(0x2000000, DType::bf16, {4, 128});
  hidden.a.fc1_weights = cuda_view(0x5000000, DType::bf16, {8, 256, 128});
  hidden.a.fc2_weights = cuda_view(0x6000000, DType::bf16, {8, 128, 128});
  inter.a.fc1_weights = cuda_view(0x5000000, DType::bf16, {8, 128, 256});
  inter.a.fc2_weights = cuda_view(0x6000000, DType::bf16, {8, 256, 64});
  top_k.a.token_selected_experts = cuda_view(0x3000000, DType::i32, {4, 1});
  top_k.a.token_final_scales = cuda_view(0x4000000, DType::f32, {4, 1});
  act.o.activation = MoeActivation::geglu;
  bias.a.fc1_bias = &bias.b1;
  bias.a.fc2_bias = &bias.b2;
  tp.o.tp_size = 2;
  ep.o.ep_size = 2;
  rank.o.ep_size = 2;
  rank.o.ep_rank = 1;
  const std::pair<const char*, MoeFixture*> others[] = {{"experts", &experts}, {"hidden", &hidden}, {"intermediate", &inter},
                                                        {"top_k", &top_k},     {"activation", &act}, {"bias", &bias},
                                                        {"tp_size", &tp},      {"ep_size", &ep},     {"ep_size and rank", &rank}};
  EXPECT_EQ(profile_ids_of_run(f), "None");
  runner.tune(f.a, f.o, nullptr);
  (void)recorded("fused_moe_90");  // the profiler's preparation
  EXPECT_EQ(profile_ids_of_run(f), "[i:-1,i:-1]");
  for (const auto& [what, m] : others) {
    EXPECT_NE(MoeProblemShape::of(m->a, m->o), MoeProblemShape::of(f.a, f.o)) << what;
    EXPECT_EQ(profile_ids_of_run(*m), "None") << "another " << what << " must not use f's tuned tactics";
  }
  // The rank alone tells shapes apart too.
  runner.tune(ep.a, ep.o, nullptr);
  (void)recorded("fused_moe_90");
  EXPECT_EQ(profile_ids_of_run(ep), "[i:-1,i:-1]");
  EXPECT_EQ(profile_ids_of_run(rank), "None");
  // Same shape, other token counts: 3 tokens share the bucket, 5 do not.
  MoeFixture t3, t5;
  with_tokens(t3, 3);
  with_tokens(t5, 5);
  EXPECT_EQ(MoeProblemShape::of(t3.a, t3.o), MoeProblemShape::of(f.a, f.o));
  EXPECT_EQ(profile_ids_of_run(t3), "[i:-1,i:-1]");
  EXPECT_EQ(profile_ids_of_run(t5), "None");

  // A second shape tuned in the same bucket: both keep their own.
  runner.tune(experts.a, experts.o, nullptr);
  (void)recorded("fused_moe_90");
  EXPECT_EQ(profile_ids_of_run(experts), "[i:-1,i:-1]");
  EXPECT_EQ(profile_ids_of_run(f), "[i:-1,i:-1]");
  EXPECT_EQ(profile_ids_of_run(hidden), "None");

  // set_tactics(tokens, t) applies to every shape of the bucket without tactics of its own; tactics_for(tokens)
  // reads those, tactics_for(tokens, shape) what run() uses.
  EXPECT_EQ(runner.tactics_for(4).gemm1, -1);
  runner.set_tactics(4, MoeTactics{});
  EXPECT_EQ(profile_ids_of_run(hidden), "[i:-1,i:-1]");
  EXPECT_EQ(profile_ids_of_run(t5), "None");  // bucket 8
  EXPECT_EQ(runner.tactics_for(4, MoeProblemShape::of(hidden.a, hidden.o)).gemm2, -1);

  // set_tactics(tokens, shape, t): that shape only; validated.
  MoeFixture t16, inter16;
  with_tokens(t16, 16);
  with_tokens(inter16, 16);
  inter16.a.fc1_weights = inter.a.fc1_weights;
  inter16.a.fc2_weights = inter.a.fc2_weights;
  runner.set_tactics(9, MoeProblemShape::of(t16.a, t16.o), MoeTactics{});  // bucket 16
  (void)recorded("fused_moe_90");
  EXPECT_EQ(profile_ids_of_run(t16), "[i:-1,i:-1]");
  EXPECT_EQ(profile_ids_of_run(inter16), "None");
  MoeProblemShape bad = MoeProblemShape::of(f.a, f.o);
  bad.hidden = 0;
  EXPECT_INVALID(runner.set_tactics(4, bad, MoeTactics{}), "'shape.hidden' must be >= 1");
  bad = MoeProblemShape::of(f.a, f.o);
  bad.top_k = -1;
  EXPECT_INVALID(runner.set_tactics(4, bad, MoeTactics{}), "shape.top_k");
  bad = MoeProblemShape::of(f.a, f.o);
  bad.ep_rank = 2;
  bad.ep_size = 2;
  EXPECT_INVALID(runner.set_tactics(4, bad, MoeTactics{}), "shape.ep_rank");
  bad = MoeProblemShape::of(f.a, f.o);
  bad.activation = static_cast<MoeActivation>(5);
  EXPECT_INVALID(runner.set_tactics(4, bad, MoeTactics{}), "shape.activation");
  EXPECT_INVALID(runner.set_tactics(0, MoeProblemShape::of(f.a, f.o), MoeTactics{}), "'tokens' must be >= 1");
  EXPECT_INVALID(runner.set_tactics(4, MoeProblemShape::of(f.a, f.o), MoeTactics{0, -1}), "'tactics.gemm1' must be -1 or in [0, 0)");
  EXPECT_EQ(recorded("fused_moe_90"), "");
}

TEST_F(MlaGdnMoeOps, MoeFp8PerTensorScalesAreTensorObjects) {
  MoeFixture f(MoeQuantization::fp8_per_tensor);
  auto runner = FusedMoeRunner::create(*rt_, f.cfg);
  auto init = split(recorded("fused_moe_90"));
  ASSERT_EQ(init.size(), 8u);
  EXPECT_EQ(init[1], "dt:10.8");
  EXPECT_EQ(init[2], "dt:10.8");
  EXPECT_EQ(init[3], "dt:4.16");
  runner.run(f.a, f.o, nullptr);
  auto a = split(recorded("fused_moe_90"));
  ASSERT_EQ(a.size(), 25u);
  EXPECT_EQ(a[9], "[" + tensor_str(f.fc1_dq, "O") + "," + tensor_str(f.fc2_q, "O") + "," + tensor_str(f.fc2_dq, "O") +
                      "," + tensor_str(f.in_dq, "O") + "]");
}

TEST_F(MlaGdnMoeOps, MoeDeepSeekBlockScale) {
  MoeFixture f(MoeQuantization::deepseek_fp8_block_scale);
  f.a.input = cuda_view(0x2000000, DType::bf16, {4, 256});
  auto runner = FusedMoeRunner::create(*rt_, f.cfg);
  auto lines = split(recorded("fused_moe_90"), '\n');
  ASSERT_EQ(lines.size(), 2u);
  auto dirs = split(lines[0]);
  ASSERT_EQ(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], "set_deepgemm_jit_include_dirs");
  EXPECT_NE(dirs[1].find("csrc/nv_internal/tensorrt_llm]"), std::string::npos) << dirs[1];
  auto init = split(lines[1]);
  ASSERT_EQ(init.size(), 8u);
  EXPECT_EQ(init[1], "dt:4.16");
  EXPECT_EQ(init[2], "dt:10.8");
  EXPECT_EQ(init[4], "b:1");
  runner.run(f.a, f.o, nullptr);
  auto a = split(recorded("fused_moe_90"));
  ASSERT_EQ(a.size(), 25u);
  EXPECT_EQ(a[9], "[" + tensor_str(f.bs1, "O") + "," + tensor_str(f.bs2, "O") + "]");
  // A second runner of the same module does not set the include dirs again.
  auto runner2 = FusedMoeRunner::create(*rt_, f.cfg);
  EXPECT_EQ(split(recorded("fused_moe_90"), '\n').size(), 1u);
  // Block scale is SM90 only.
  g_cc_major = 10;
  try {
    (void)FusedMoeRunner::create(*rt_, f.cfg);
    ADD_FAILURE() << "deepseek block scale on 10.0 must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
  }
}

TEST_F(MlaGdnMoeOps, MoeBackendByComputeCapability) {
  MoeFixture f;
  const std::pair<std::pair<int, int>, const char*> cases[] = {
      {{9, 0}, "fused_moe_90"}, {{10, 0}, "fused_moe_100"}, {{10, 3}, "fused_moe_103"}, {{12, 0}, "fused_moe_120"}};
  for (const auto& [cc, uri] : cases) {
    g_cc_major = cc.first;
    g_cc_minor = cc.second;
    EXPECT_EQ(FusedMoeRunner::create(*rt_, f.cfg).uri(), uri);
  }
  g_cc_major = 8;
  g_cc_minor = 0;
  try {
    (void)FusedMoeRunner::create(*rt_, f.cfg);
    ADD_FAILURE() << "no fused MoE module for 8.0";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
  }
  f.cfg.backend = MoeBackend::sm120;
  EXPECT_EQ(FusedMoeRunner::create(*rt_, f.cfg).uri(), "fused_moe_120");
}

TEST_F(MlaGdnMoeOps, MoeSharedRunnerIsCachedPerConfiguration) {
  MoeFixture f;
  f.cfg.output_dtype = f.cfg.activation_dtype = f.cfg.weight_dtype = DType::f16;
  auto r1 = FusedMoeRunner::shared(*rt_, f.cfg);
  auto r2 = FusedMoeRunner::shared(*rt_, f.cfg);
  EXPECT_EQ(r1.get(), r2.get());
  EXPECT_EQ(split(recorded("fused_moe_90"), '\n').size(), 1u);  // one init
}

TEST_F(MlaGdnMoeOps, MoeValidation) {
  auto check = [&](MoeQuantization q, auto mutate, const char* fragment) {
    MoeFixture f(q);
    if (q == MoeQuantization::deepseek_fp8_block_scale) f.a.input = cuda_view(0x2000000, DType::bf16, {4, 256});
    mutate(f);
    EXPECT_INVALID(validate_fused_moe(f.cfg, f.a, f.o), fragment);
  };
  using Q = MoeQuantization;
  // The valid fixtures pass.
  for (Q q : {Q::none, Q::fp8_per_tensor}) EXPECT_NO_THROW(validate_fused_moe(MoeFixture(q).cfg, MoeFixture(q).a, {}));
  check(Q::none, [](MoeFixture& f) { f.a.input.dtype = DType::f16; }, "'input'");
  check(Q::none, [](MoeFixture& f) { f.a.output = cuda_view(0x1000000, DType::bf16, {3, 256}); }, "output");
  check(Q::none, [](MoeFixture& f) { f.a.token_selected_experts.dtype = DType::i64; }, "token_selected_experts");
  check(Q::none, [](MoeFixture& f) { f.a.output.data = f.a.input.data; }, "'output' must not overlap 'input'");
  check(Q::none, [](MoeFixture& f) { f.a.output.data = fake(0x5000000 + 65536); }, "'output' must not overlap 'fc1_weights'");
  check(Q::none, [](MoeFixture& f) { f.a.token_final_scales.data = fake(0x1000000 + 16); },
        "'output' must not overlap 'token_final_scales'");
  check(Q::fp8_per_tensor, [](MoeFixture& f) { f.fc2_dq.data = fake(0x1000000); }, "'output' must not overlap 'fc2_dequant'");
  check(Q::none, [](MoeFixture& f) { f.a.token_final_scales = cuda_view(0x4000000, DType::f32, {4, 3}); }, "token_final_scales");
  check(Q::none, [](MoeFixture& f) { f.a.fc1_weights = cuda_view(0x5000000, DType::bf16, {8, 128, 256}); }, "gated");
  check(Q::none, [](MoeFixture& f) { f.a.fc1_weights = cuda_view(0x5000000, DType::bf16, {7, 256, 256}); }, "fc1_weights");
  check(Q::none, [](MoeFixture& f) { f.a.fc2_weights = cuda_view(0x6000000, DType::bf16, {8, 200, 128}); }, "fc2_weights");
  check(Q::none, [](MoeFixture& f) {
    f.a.input = cuda_view(0x2000000, DType::bf16, {4, 252});
    f.a.output = cuda_view(0x1000000, DType::bf16, {4, 252});
    f.a.fc1_weights = cuda_view(0x5000000, DType::bf16, {8, 256, 252});
    f.a.fc2_weights = cuda_view(0x6000000, DType::bf16, {8, 252, 128});
  }, "hidden size");
  check(Q::none, [](MoeFixture& f) { f.a.fc1_bias = &f.b1; }, "together");
  check(Q::none, [](MoeFixture& f) { f.a.fc1_dequant = &f.fc1_dq; }, "absent");
  check(Q::none, [](MoeFixture& f) { f.o.tp_rank = 1; }, "tp_rank");
  check(Q::none, [](MoeFixture& f) { f.o.ep_size = 0; }, "ep_size");
  check(Q::none, [](MoeFixture& f) { f.o.activation = static_cast<MoeActivation>(5); }, "activation");
  check(Q::none, [](MoeFixture& f) { f.cfg.weight_dtype = DType::e4m3; }, "config.weight_dtype");
  check(Q::none, [](MoeFixture& f) { f.a.input = cuda_view(0x2000000, DType::bf16, {4, 256}, 1); }, "device");
  check(Q::none, [](MoeFixture& f) { f.a.fc2_weights.strides[0] = 1 << 20; }, "contiguous");
  check(Q::fp8_per_tensor, [](MoeFixture& f) { f.a.fc2_dequant = nullptr; }, "fc2_dequant");
  check(Q::fp8_per_tensor, [](MoeFixture& f) { f.fc1_dq = cuda_view(0x7000000, DType::f32, {7}); }, "fc1_dequant");
  check(Q::fp8_per_tensor, [](MoeFixture& f) { f.in_dq = cuda_view(0x7300000, DType::f32, {1}); }, "fc1_input_dequant");
  check(Q::fp8_per_tensor, [](MoeFixture& f) { f.cfg.output_dtype = DType::e4m3; }, "config.output_dtype");
  check(Q::fp8_per_tensor, [](MoeFixture& f) {
    f.a.input = cuda_view(0x2000000, DType::e4m3, {4, 248});
    f.a.output = cuda_view(0x1000000, DType::bf16, {4, 248});
    f.a.fc1_weights = cuda_view(0x5000000, DType::e4m3, {8, 256, 248});
    f.a.fc2_weights = cuda_view(0x6000000, DType::e4m3, {8, 248, 128});
  }, "128 bits");
  check(Q::deepseek_fp8_block_scale, [](MoeFixture& f) { f.bs1 = cuda_view(0x7400000, DType::f32, {8, 2, 1}); },
        "fc1_block_scales");
  check(Q::deepseek_fp8_block_scale, [](MoeFixture& f) { f.o.activation = MoeActivation::geglu; }, "swiglu");
  check(Q::deepseek_fp8_block_scale, [](MoeFixture& f) {
    f.a.input = cuda_view(0x2000000, DType::bf16, {4, 192});
    f.a.output = cuda_view(0x1000000, DType::bf16, {4, 192});
    f.a.fc1_weights = cuda_view(0x5000000, DType::e4m3, {8, 256, 192});
    f.a.fc2_weights = cuda_view(0x6000000, DType::e4m3, {8, 192, 128});
  }, "128-wide");
  check(Q::deepseek_fp8_block_scale, [](MoeFixture& f) { f.cfg.output_dtype = DType::f16; }, "config.output_dtype");

  // run() validates before calling: a failing run records nothing.
  MoeFixture f;
  auto runner = FusedMoeRunner::create(*rt_, f.cfg);
  (void)recorded("fused_moe_90");
  f.a.token_final_scales.dtype = DType::bf16;
  EXPECT_INVALID(runner.run(f.a, f.o, nullptr), "token_final_scales");
  EXPECT_EQ(recorded("fused_moe_90"), "");
}

// A plan or runner used after a move is a validation error naming it, and nothing reaches the module.
TEST_F(MlaGdnMoeOps, MovedFromPlanAndRunnerAreRefused) {
  MlaFixture f;
  auto plan = f.plan(*rt_);
  const auto uri = plan.uri();
  BatchMlaPlan moved = std::move(plan);
  (void)recorded(uri);
  EXPECT_INVALID(plan.run(f.q_nope, f.q_pe, f.ckv, f.kpe, f.idx, f.out, &f.lse, nullptr), "'plan' was moved from");
  EXPECT_EQ(recorded(uri), "");
  MoeFixture m;
  auto runner = FusedMoeRunner::create(*rt_, m.cfg);
  FusedMoeRunner moved_runner = std::move(runner);
  (void)recorded("fused_moe_90");
  EXPECT_INVALID(runner.run(m.a, m.o, nullptr), "'runner' was moved from");
  EXPECT_EQ(recorded("fused_moe_90"), "");
}

}  // namespace
