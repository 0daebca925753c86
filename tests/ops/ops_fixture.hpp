// Test fixture for the FlashInfer ops without a GPU: a Runtime whose modules are the recording stand-in
// (tests/ops/recording_module.cc) linked in as <dir>/<uri>/<uri>.so, plus helpers to build fake device
// tensors and the record strings the stand-in writes.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "ffi/ffi.hpp"
#include "flashcpp/attention.hpp"
#include "flashcpp/norm.hpp"
#include "flashcpp/page.hpp"
#include "flashcpp/runtime.hpp"
#include "ops/attention_plan.hpp"
#include "runtime/runtime_internal.hpp"

namespace flashcpp::testing {

namespace fs = std::filesystem;

/// Pretended device facts (set_device_facts_for_testing): a device whose compute capability is unknown (what a
/// machine without a GPU gives: automatic backends never pick fa3), and an H100/H200-like Hopper device.
inline const DeviceFacts& unknown_device_facts(int) {
  static const DeviceFacts f{.sm_count = 132, .cc_major = -1};
  return f;
}
inline const DeviceFacts& hopper_device_facts(int) {
  static const DeviceFacts f{.sm_count = 132, .cc_major = 9, .cc_minor = 0};
  return f;
}

class OpsFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("flashcpp_ops_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    RuntimeOptions o;
    o.tvm_ffi_library = FLASHCPP_TVM_FFI_LIB;
    o.module_dirs = {dir_};
    o.use_artifacts = false;
    o.jit = JitPolicy::off;
    rt_ = Runtime::create(o);
  }
  static void TearDownTestSuite() {
    rt_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void SetUp() override {
    set_device_facts_for_testing(&unknown_device_facts);  // no GPU facts: automatic never picks fa3
    link("norm");
    (void)recorded();
    set_plan_entries(-1);
  }
  void TearDown() override { set_device_facts_for_testing(nullptr); }

  /// Makes the recording module answer for `uri`.
  static void link(const std::string& uri) {
    fs::create_directories(dir_ / uri);
    const fs::path p = dir_ / uri / (uri + ".so");
    std::error_code ec;
    if (!fs::exists(p, ec)) fs::create_symlink(FLASHCPP_OPS_RECORDING_MODULE, p);
  }
  /// The log of every call since the last read (one line per call), cleared.
  static std::string recorded() {
    auto lib = load_module(*rt_, "norm");
    ffi::Any r;
    ffi::call(lib->function("recorded"), {}, &r, nullptr);
    return r.as_string();
  }
  static void set_plan_entries(int64_t n) {
    auto lib = load_module(*rt_, "norm");
    const ffi::Arg a[] = {n};
    ffi::call(lib->function("set_plan_entries"), a, nullptr, nullptr);
  }
  static std::vector<std::string> lines(const std::string& log) { return split(log, '\n'); }
  /// The single record of `name` since the last read, split into arguments (name first).
  static std::vector<std::string> one_call(const std::string& name) {
    const auto ls = lines(recorded());
    EXPECT_EQ(ls.size(), 1u);
    if (ls.size() != 1) return {};
    auto a = split(ls[0]);
    EXPECT_EQ(a[0], name);
    return a;
  }
  /// Every argument of a record against `want` (an empty entry: not compared).
  static void expect_args(const std::vector<std::string>& got, const std::vector<std::string>& want) {
    ASSERT_EQ(got.size(), want.size() + 1) << "argument count of " << (got.empty() ? "?" : got[0]);
    for (size_t i = 0; i < want.size(); ++i)
      if (!want[i].empty()) EXPECT_EQ(got[i + 1], want[i]) << got[0] << " argument #" << i;
  }
  static std::vector<std::string> split(const std::string& s, char sep = '|') {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, sep)) out.push_back(item);
    return out;
  }

  /// A fake CUDA tensor (never dereferenced): row-major at a distinct, 1 MiB aligned address that no other
  /// fake tensor's bytes reach (validation refuses outputs that overlap other arguments).
  static TensorView dev(DType t, std::initializer_list<int64_t> shape, int device = 0) {
    TensorView v = TensorView::contiguous(nullptr, t, Device::cuda(device), shape);
    v.data = next_fake(v);
    return v;
  }
  static TensorView dev_strided(DType t, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides) {
    TensorView v = TensorView::strided(nullptr, t, Device::cuda(0), shape, strides);
    v.data = next_fake(v);
    return v;
  }
  static void* next_fake(const TensorView& v) {
    next_addr_ += 0x100000;
    const uintptr_t at = next_addr_;
    if (v.extent_fits() && v.nbytes() > 0x100000) next_addr_ += (static_cast<uintptr_t>(v.nbytes()) + 0xfffff) & ~uintptr_t{0xfffff};
    return reinterpret_cast<void*>(at);
  }
  /// Host int32 array owned by the fixture instance.
  TensorView host_i32(std::vector<int32_t> values) {
    host_.push_back(std::make_unique<std::vector<int32_t>>(std::move(values)));
    auto& v = *host_.back();
    return TensorView::contiguous(v.data(), DType::i32, Device::cpu(), {static_cast<int64_t>(v.size())});
  }

  /// What the recording module writes for a raw DLTensor argument.
  static std::string T(const TensorView& v, bool host_values = false) {
    std::ostringstream os;
    const DLDataType dt = ffi::to_dl_dtype(v.dtype);
    os << "T(" << int(dt.code) << "." << int(dt.bits) << ";[";
    for (int i = 0; i < v.rank; ++i) os << (i ? "," : "") << v.shape[i];
    os << "];[";
    for (int i = 0; i < v.rank; ++i) os << (i ? "," : "") << v.strides[i];
    char ptr[32];
    std::snprintf(ptr, sizeof(ptr), "%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(v.data)));
    os << "];" << int(v.device.type == DeviceType::cuda ? 2 : 1) << ":" << v.device.id << ";@" << ptr;
    if (host_values) {
      os << ";{";
      for (int64_t i = 0; i < v.numel(); ++i) os << (i ? "," : "") << v.data_as<const int32_t>()[i];
      os << "}";
    }
    return os.str() + ")";
  }
  /// A 1-D u8 view of `bytes` bytes at v.data (how workspaces reach FlashInfer).
  static std::string bytes(const TensorView& v, int64_t n, bool as_cpu = false) {
    TensorView b = TensorView::contiguous(v.data, DType::u8, as_cpu ? Device::cpu() : v.device, {n});
    return T(b);
  }
  static std::string F(double x) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "f:%.17g", x);
    return buf;
  }
  static std::string I(int64_t x) { return "i:" + std::to_string(x); }
  static std::string B(bool x) { return x ? "b:1" : "b:0"; }

  static const Runtime& rt() { return *rt_; }

  static inline fs::path dir_;
  static inline std::shared_ptr<Runtime> rt_;
  static inline uintptr_t next_addr_ = 0x7f0000000000;
  std::vector<std::unique_ptr<std::vector<int32_t>>> host_;
};

/// Expects `fn` to throw Error(invalid_argument) whose message contains `fragment`.
#define EXPECT_INVALID(fn, fragment)                                                                    \
  do {                                                                                                  \
    try {                                                                                               \
      fn;                                                                                               \
      ADD_FAILURE() << "expected invalid_argument containing '" << (fragment) << "'";                  \
    } catch (const ::flashcpp::Error& e) {                                                              \
      EXPECT_EQ(e.code(), ::flashcpp::ErrorCode::invalid_argument) << e.what();                         \
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();                   \
    }                                                                                                   \
  } while (0)

/// A host f64 tensor of `shape`, zero-filled, for the float64 references' tests.
struct HostF64 {
  std::vector<double> data;
  std::vector<int64_t> shape;
  explicit HostF64(std::vector<int64_t> s) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.assign(static_cast<size_t>(n), 0.0);
  }
  TensorView view() { return TensorView::contiguous(data.data(), DType::f64, Device::cpu(), std::span<const int64_t>(shape)); }
};

}  // namespace flashcpp::testing
