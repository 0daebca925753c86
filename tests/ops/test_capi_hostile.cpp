// Every exported C function (enumerated from include/flashcpp/c/*.h) against hostile input, one forked child per
// case: NULLs, bad struct sizes, NaN and inf scalars, unknown enum codes and flags, bad ranks, dtype codes and
// devices, negative, huge and overflowing shapes and strides, aliasing outputs, misaligned data pointers and data
// pointers near the top of the address space. No GPU: the test-hooks seam pretends 64 devices and the recording
// modules stand in for FlashInfer's. Every case must return (no signal, no sanitizer abort); every invalid one must
// be refused with a message; each function's valid baseline must do what it does without a GPU (succeed, or stop
// at the device lookup of our own kernels). The counts are printed ("hostile C ABI: ...").
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "capi/capi.hpp"
#include "flashcpp/attention.hpp"
#include "flashcpp/flashcpp.h"
#include "flashcpp/gdn.hpp"
#include "flashcpp/jit.hpp"
#include "flashcpp/mla_attention.hpp"
#include "flashcpp/moe.hpp"
#include "flashcpp/topk.hpp"
#include "ops/ops_fixture.hpp"
#include "support/c_tensor.hpp"
#include "support/forked_call.hpp"

namespace flashcpp::testing {
namespace {

using forked::Outcome, forked::run_all_forked, forked::run_forked;

// ------------------------------------------------------------------------------------------------ cases

using Ptrs = std::vector<const flashcpp_tensor*>;
using Call = std::function<flashcpp_status(const Ptrs&)>;

enum Role : unsigned { kIn = 0, kOut = 1, kHost = 2, kOptional = 4 };

struct Slot {
  std::string name;
  flashcpp_tensor t;
  unsigned role;
};

/// What a valid call does here: succeed, or be refused at the device lookup of flashcpp's own kernels (no GPU).
struct Expect {
  bool success = true;
  std::string fragment;
};

/// One exported function: its tensor arguments (mutated one at a time), how to call it with them, what its
/// baseline does, and its cases that are not about one tensor (structs, scalars, codes, handles, out-params).
struct Spec {
  std::string fn;
  std::vector<Slot> slots;
  Call call;
  Expect baseline;
  bool baseline_launches = false;  // a valid call would launch our kernels: not run where a GPU is present
  std::vector<std::pair<std::string, Call>> invalid;
  std::vector<std::pair<std::string, Call>> survive;  // no documented failure: must only return
  bool bundles = false;  // its call builds bundles of tensors (bundle<T>): it gets the bad bundle sizes too
};

struct Case {
  std::string fn, what;
  std::function<flashcpp_status()> call;
  enum Kind { invalid, baseline, survive } kind;
  Expect expect;
};

Ptrs ptrs_of(const std::vector<Slot>& s, size_t null_index = SIZE_MAX) {
  Ptrs p;
  for (size_t i = 0; i < s.size(); ++i) p.push_back(i == null_index ? nullptr : &s[i].t);
  return p;
}

int64_t numel(const flashcpp_tensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.rank; ++i) n *= t.shape[i];
  return n;
}
size_t elem_size(const flashcpp_tensor& t) { return dtype_size(static_cast<DType>(t.dtype)); }
bool is_host(const flashcpp_tensor& t) { return t.device_type != FLASHCPP_CUDA; }

// The tensor mutations every slot gets, each certainly invalid by a documented rule (common.h).
std::vector<std::pair<std::string, flashcpp_tensor>> tensor_mutations(const Slot& s) {
  std::vector<std::pair<std::string, flashcpp_tensor>> out;
  const flashcpp_tensor& b = s.t;
  auto add = [&](const std::string& what, auto edit) {
    flashcpp_tensor t = b;
    edit(t);
    out.emplace_back(what, t);
  };
  const int64_t n = numel(b);
  const size_t e = elem_size(b);
  if (n > 0) add("data NULL", [](flashcpp_tensor& t) { t.data = nullptr; });
  for (int32_t r : {-1, 7, 64, std::numeric_limits<int32_t>::min()})
    add("rank " + std::to_string(r), [r](flashcpp_tensor& t) { t.rank = r; });
  for (int32_t d : {-1, 15, 255, 1000, std::numeric_limits<int32_t>::max()})
    add("dtype code " + std::to_string(d), [d](flashcpp_tensor& t) { t.dtype = d; });
  for (int32_t d : {0, 4, -1, 99, std::numeric_limits<int32_t>::min()})
    add("device type " + std::to_string(d), [d](flashcpp_tensor& t) { t.device_type = d; });
  if (b.device_type == FLASHCPP_CUDA) {
    for (int32_t id : {-1, 64, 1 << 30, std::numeric_limits<int32_t>::min()})
      add("cuda device id " + std::to_string(id), [id](flashcpp_tensor& t) { t.device_id = id; });
  }
  if (s.role & kHost) add("host array on cuda", [](flashcpp_tensor& t) { t.device_type = FLASHCPP_CUDA; });
  if (b.rank > 0) {
    add("shape[0] -1", [](flashcpp_tensor& t) { t.shape[0] = -1; });
    add("last dim -5", [](flashcpp_tensor& t) { t.shape[t.rank - 1] = -5; });
    // INT64_MAX elements of 2 bytes or more overflow the byte extent; of 1 byte they fit (a 1-D byte buffer of
    // 2^63 - 1 bytes at a low address lies inside the address space), unless in host memory (2^40 at most).
    if (e >= 2 || (s.role & kHost) || b.rank >= 2)
      add("shape[0] INT64_MAX", [](flashcpp_tensor& t) { t.shape[0] = std::numeric_limits<int64_t>::max(); });
    add("shape[0] INT64_MIN", [](flashcpp_tensor& t) { t.shape[0] = std::numeric_limits<int64_t>::min(); });
    if (b.rank >= 2)
      add("every dim 2^32 (element count overflows)", [](flashcpp_tensor& t) {
        for (int i = 0; i < t.rank; ++i) t.shape[i] = int64_t{1} << 32;
      });
    // Strides matter only along a dimension of size >= 2.
    int d = -1;
    for (int i = 0; i < b.rank && d < 0; ++i)
      if (b.shape[i] >= 2) d = i;
    if (d >= 0) {
      const std::string at = "stride[" + std::to_string(d) + "] ";
      add(at + "INT64_MAX (extent overflows)", [d](flashcpp_tensor& t) { t.strides[d] = std::numeric_limits<int64_t>::max(); });
      add(at + "INT64_MIN (extent overflows)", [d](flashcpp_tensor& t) { t.strides[d] = std::numeric_limits<int64_t>::min(); });
      // Negative, reaching below address 0 from the fake (or heap) data pointer.
      add(at + "-2^62 (reaches below address 0)", [d](flashcpp_tensor& t) { t.strides[d] = -(int64_t{1} << 62); });
      if (s.role & kHost) {
        // A host array spanning more than 2^40 bytes: beyond any allocation (TensorView::kMaxHostBytes).
        add(at + "2^61 (host array spans 2^61 elements)", [d](flashcpp_tensor& t) { t.strides[d] = int64_t{1} << 61; });
        add(at + "2^40 (host array spans > 2^40 bytes)", [d](flashcpp_tensor& t) { t.strides[d] = int64_t{1} << 40; });
      }
    }
  }
  if (n > 0 && e >= 2) add("data misaligned by 1 byte", [](flashcpp_tensor& t) { t.data = static_cast<char*>(t.data) + 1; });
  if (n > 0) {
    // Near the top of the address space: aligned to the element size, its last element's bytes past 2^64.
    __int128 span = 0;
    for (int i = 0; i < b.rank; ++i) span += static_cast<__int128>(b.shape[i] - 1) * b.strides[i];
    const __int128 bytes = (span + 1) * static_cast<__int128>(e);
    const uintptr_t top = static_cast<uintptr_t>(UINTPTR_MAX - static_cast<uintptr_t>(bytes / 2)) & ~uintptr_t(e - 1);
    if (static_cast<__int128>(top) + bytes - 1 > static_cast<__int128>(UINTPTR_MAX))
      add("data 2^64 - extent/2 (wraps)", [top](flashcpp_tensor& t) { t.data = reinterpret_cast<void*>(top); });
    const uintptr_t last = UINTPTR_MAX & ~uintptr_t(e - 1);
    if (bytes > static_cast<__int128>(e))
      add("data at the last aligned address (wraps)", [last](flashcpp_tensor& t) { t.data = reinterpret_cast<void*>(last); });
  }
  return out;
}

// Expands a spec into its cases.
// Sizes of a size-prefixed struct outside the range the library accepts, [first published size, sizeof] (the C
// ABI's table, src/capi/capi.hpp), named alike for every struct.
template <class T>
std::vector<uint32_t> bad_sizes() {
  using Sizes = flashcpp::capi::struct_sizes<T>;
  return {0u, uint32_t(Sizes::first - 1), uint32_t(Sizes::current + 1), uint32_t(Sizes::current + 8), UINT32_MAX};
}
const char* const kBadSizeNames[] = {"0", "first size - 1", "sizeof + 1", "sizeof + 8", "UINT32_MAX"};

// A bundle of tensors as a case's call builds it: c_struct's, but in a bundle-size case (bad_bundle set, in that
// case's own child) with the bad_bundle-th of its bad sizes.
std::optional<size_t> bad_bundle;
template <class T, class... Fields>
T bundle(Fields... fields) {
  T t = c_struct<T>(fields...);
  if (bad_bundle) t.struct_size = bad_sizes<T>()[*bad_bundle];
  return t;
}

void expand(const Spec& spec, std::vector<Case>& cases, bool gpu_present) {
  const auto slots = spec.slots;
  const Call call = spec.call;
  if (!(spec.baseline_launches && gpu_present))
    cases.push_back({spec.fn, "baseline", [=] { return call(ptrs_of(slots)); }, Case::baseline, spec.baseline});
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slot& s = slots[i];
    if (!(s.role & kOptional))
      cases.push_back({spec.fn, s.name + " NULL", [=] { return call(ptrs_of(slots, i)); }, Case::invalid, {}});
    for (const auto& [what, t] : tensor_mutations(s)) {
      auto mutated = slots;
      mutated[i].t = t;
      cases.push_back({spec.fn, s.name + ": " + what, [=] { return call(ptrs_of(mutated)); }, Case::invalid, {}});
    }
    // Aliasing: an output whose data is another argument's (both in host memory or both on the device).
    if (s.role & kOut)
      for (size_t j = 0; j < slots.size(); ++j) {
        if (j == i || is_host(slots[j].t) != is_host(s.t) || numel(slots[j].t) == 0 || numel(s.t) == 0) continue;
        auto mutated = slots;
        mutated[i].t.data = slots[j].t.data;
        cases.push_back({spec.fn, s.name + " aliases " + slots[j].name, [=] { return call(ptrs_of(mutated)); },
                         Case::invalid, {}});
      }
  }
  for (const auto& [what, c] : spec.invalid)
    cases.push_back({spec.fn, what, [=, c = c] { return c(ptrs_of(slots)); }, Case::invalid, {}});
  for (size_t k = 0; spec.bundles && k < std::size(kBadSizeNames); ++k)
    cases.push_back({spec.fn, std::string("bundles' struct_size ") + kBadSizeNames[k], [=] {
                       bad_bundle = k;
                       return call(ptrs_of(slots));
                     }, Case::invalid, Expect{false, "has struct_size "}});
  for (const auto& [what, c] : spec.survive)
    cases.push_back({spec.fn, what, [=, c = c] { return c(ptrs_of(slots)); }, Case::survive, {}});
}

// ------------------------------------------------------------------------------------------------ the fixture

int g_sm_count = 132;
const DeviceFacts& hopper_facts(int) {
  static thread_local DeviceFacts f;
  f = DeviceFacts{.sm_count = g_sm_count, .cc_major = 9, .cc_minor = 0};
  return f;
}

class CapiHostile : public OpsFixture {
 protected:
  static void SetUpTestSuite() {
    OpsFixture::SetUpTestSuite();
    jit::AttentionSpec a;  // bf16, head dim 128, fa2
    for (const std::string& uri : {jit::single_prefill_uri(a), jit::single_decode_uri(a), jit::batch_prefill_uri(a),
                                   jit::batch_decode_uri(a), std::string("page"), std::string("rope"),
                                   std::string("cascade"), std::string("silu_and_mul"), std::string("gelu_and_mul"),
                                   std::string("gelu_tanh_and_mul"), std::string("sampling"),
                                   std::string("topk")})
      link(uri);
    for (const std::string& uri : {batch_mla_uri(DType::bf16, DType::bf16, DType::bf16, MlaBackend::fa2),
                                   std::string(kGdnPrefillUri), fused_moe_uri(MoeBackend::sm90)}) {
      fs::create_directories(dir_ / uri);
      const fs::path p = dir_ / uri / (uri + ".so");
      std::error_code ec;
      if (!fs::exists(p, ec)) fs::create_symlink(FLASHCPP_MLA_GDN_MOE_RECORDING_MODULE, p);
    }
    ::setenv("FLASHCPP_TVM_FFI_LIB", FLASHCPP_TVM_FFI_LIB, 1);
    ::setenv("FLASHCPP_MODULE_PATH", dir_.c_str(), 1);
    ::setenv("FLASHCPP_JIT", "off", 1);
    ::setenv("FLASHCPP_OFFLINE", "1", 1);
    ::setenv("FLASHCPP_CACHE_DIR", (dir_ / "cache").c_str(), 1);
    fs::create_directories(dir_ / "cache");
  }
  void SetUp() override {
    OpsFixture::SetUp();  // cc_major -1: automatic attention backends pick fa2; 64 pretended devices
    set_device_facts_for_testing(&hopper_facts);  // GDN, batch MLA and MoE see an H100-like device
  }
  void TearDown() override {
    for (auto& d : destroy_) d();
    set_device_facts_for_testing(nullptr);
    OpsFixture::TearDown();
  }

  static flashcpp_tensor cuda(DType t, std::initializer_list<int64_t> shape) { return to_c(dev(t, shape)); }
  flashcpp_tensor host(DType t, std::vector<int64_t> shape, Device d = Device::cpu()) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    // 256-byte aligned (what FlashInfer's page-locked workspaces need), in storage of exactly the array's size.
    storage_.push_back(std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(n) * dtype_size(t) + 256, 0));
    const uintptr_t at = (reinterpret_cast<uintptr_t>(storage_.back()->data()) + 255) & ~uintptr_t{255};
    void* p = reinterpret_cast<void*>(at);
    return to_c(TensorView::contiguous(p, t, d, std::span<const int64_t>(shape)));
  }
  flashcpp_tensor host_ints(DType t, const std::vector<int64_t>& values) {
    flashcpp_tensor c = host(t, {static_cast<int64_t>(values.size())});
    for (size_t i = 0; i < values.size(); ++i) {
      if (t == DType::i32) static_cast<int32_t*>(c.data)[i] = static_cast<int32_t>(values[i]);
      else static_cast<int64_t*>(c.data)[i] = values[i];
    }
    return c;
  }

  std::vector<Spec> specs();
  std::vector<std::unique_ptr<std::vector<uint8_t>>> storage_;
  std::vector<std::function<void()>> destroy_;  // of the plans and runners the cases use (children inherit them)
};

// Flags and enum codes outside their documented sets.
const int32_t kBadFlags[] = {2, -1, std::numeric_limits<int32_t>::min()};
const int32_t kBadCodes[] = {-1, 3, 99, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
const double kNonFinite[] = {std::nan(""), INFINITY, -INFINITY};

std::vector<Spec> CapiHostile::specs() {
  std::vector<Spec> all;
  auto invalid = [](Spec& s, std::string what, Call c) { s.invalid.emplace_back(std::move(what), std::move(c)); };
  // The scalars of the RoPE + FP8 entries' argument structs: flags outside {0, 1}, scales not finite and > 0 or past
  // FLT_MAX. `with(edit)` makes the call with the edited struct.
  auto invalid_quantize_scalars = [&](Spec& s, auto with) {
    for (int32_t f : kBadFlags) {
      invalid(s, "args.interleave " + std::to_string(f), with([f](auto& a) { a.interleave = f; }));
      invalid(s, "args.enable_pdl " + std::to_string(f), with([f](auto& a) { a.enable_pdl = f; }));
    }
    for (double x : {std::nan(""), double(INFINITY), -double(INFINITY), 0.0, -1.0, 1e39}) {
      invalid(s, "args.quant_scale_q " + std::to_string(x), with([x](auto& a) { a.quant_scale_q = x; }));
      invalid(s, "args.quant_scale_kv " + std::to_string(x), with([x](auto& a) { a.quant_scale_kv = x; }));
    }
  };

  // ---------------------------------------------------------------------------------------------- norms
  using NormFn = flashcpp_status (*)(const flashcpp_tensor*, const flashcpp_tensor*, const flashcpp_tensor*, double,
                                     int32_t, void*);
  struct Norm {
    const char* fn;
    NormFn f;
    bool qk, in_place;
  };
  for (const Norm& nm : {Norm{"flashcpp_rmsnorm", flashcpp_rmsnorm, false, false},
                         Norm{"flashcpp_fused_qk_rmsnorm", flashcpp_fused_qk_rmsnorm, true, false},
                         Norm{"flashcpp_gemma_rmsnorm", flashcpp_gemma_rmsnorm, false, false},
                         Norm{"flashcpp_fused_add_rmsnorm", flashcpp_fused_add_rmsnorm, false, true},
                         Norm{"flashcpp_gemma_fused_add_rmsnorm", flashcpp_gemma_fused_add_rmsnorm, false, true}}) {
    Spec s;
    s.fn = nm.fn;
    const NormFn f = nm.f;
    if (nm.qk)
      s.slots = {{"out", cuda(DType::bf16, {4, 2, 128}), kOut}, {"input", cuda(DType::bf16, {4, 2, 128}), kIn},
                 {"weight", cuda(DType::bf16, {128}), kIn}};
    else
      s.slots = {{nm.in_place ? "input" : "out", cuda(DType::bf16, {4, 256}), kOut},
                 {nm.in_place ? "residual" : "input", cuda(DType::bf16, {4, 256}), nm.in_place ? kOut : kIn},
                 {"weight", cuda(DType::bf16, {256}), kIn}};
    s.call = [f](const Ptrs& p) { return f(p[0], p[1], p[2], 1e-6, 0, nullptr); };
    for (double eps : {std::nan(""), double(INFINITY), -double(INFINITY), -1e-6})
      invalid(s, "eps " + std::to_string(eps), [f, eps](const Ptrs& p) { return f(p[0], p[1], p[2], eps, 0, nullptr); });
    for (int32_t pdl : kBadFlags)
      invalid(s, "enable_pdl " + std::to_string(pdl), [f, pdl](const Ptrs& p) { return f(p[0], p[1], p[2], 0, pdl, nullptr); });
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- activations
  using ActFn = flashcpp_status (*)(const flashcpp_tensor*, const flashcpp_tensor*, int32_t, void*);
  for (const auto& [name, f] : {std::pair<const char*, ActFn>{"flashcpp_silu_and_mul", flashcpp_silu_and_mul},
                                {"flashcpp_gelu_and_mul", flashcpp_gelu_and_mul},
                                {"flashcpp_gelu_tanh_and_mul", flashcpp_gelu_tanh_and_mul}}) {
    Spec s;
    s.fn = name;
    s.slots = {{"out", cuda(DType::bf16, {4, 128}), kOut}, {"input", cuda(DType::bf16, {4, 256}), kIn}};
    const ActFn fn = f;
    s.call = [fn](const Ptrs& p) { return fn(p[0], p[1], 0, nullptr); };
    for (int32_t pdl : kBadFlags)
      invalid(s, "enable_pdl " + std::to_string(pdl), [fn, pdl](const Ptrs& p) { return fn(p[0], p[1], pdl, nullptr); });
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- cascade merges
  {
    Spec s;
    s.fn = "flashcpp_merge_state";
    s.slots = {{"v_a", cuda(DType::bf16, {3, 8, 128}), kIn},     {"s_a", cuda(DType::f32, {3, 8}), kIn},
               {"v_b", cuda(DType::bf16, {3, 8, 128}), kIn},     {"s_b", cuda(DType::f32, {3, 8}), kIn},
               {"v_merged", cuda(DType::bf16, {3, 8, 128}), kOut}, {"s_merged", cuda(DType::f32, {3, 8}), kOut}};
    s.call = [](const Ptrs& p) { return flashcpp_merge_state(p[0], p[1], p[2], p[3], p[4], p[5], nullptr); };
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_merge_state_in_place";
    s.slots = {{"v", cuda(DType::bf16, {3, 8, 128}), kOut},       {"s", cuda(DType::f32, {3, 8}), kOut},
               {"v_other", cuda(DType::bf16, {3, 8, 128}), kIn}, {"s_other", cuda(DType::f32, {3, 8}), kIn},
               {"mask", cuda(DType::u8, {3}), kIn | kOptional}};
    s.call = [](const Ptrs& p) { return flashcpp_merge_state_in_place(p[0], p[1], p[2], p[3], p[4], nullptr); };
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_merge_states";
    s.slots = {{"v", cuda(DType::bf16, {3, 2, 8, 128}), kIn}, {"s", cuda(DType::f32, {3, 2, 8}), kIn},
               {"v_merged", cuda(DType::bf16, {3, 8, 128}), kOut}, {"s_merged", cuda(DType::f32, {3, 8}), kOut}};
    s.call = [](const Ptrs& p) { return flashcpp_merge_states(p[0], p[1], p[2], p[3], nullptr); };
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- sampling
  // probs / logits f32 [3, 1000], samples int32 [3]; per-row parameters are optional slots (NULL: the scalar, which
  // is valid in every baseline).
  const flashcpp_sampling_options sopt = FLASHCPP_SAMPLING_OPTIONS_INIT;
  auto options_cases = [&](Spec& s, auto with) {
    invalid(s, "options NULL", with(sopt, true));
    for (uint32_t size : bad_sizes<flashcpp_sampling_options>()) {
      auto o = sopt;
      o.struct_size = size;
      invalid(s, "options.struct_size " + std::to_string(size), with(o, false));
    }
    for (int32_t f : kBadFlags) {
      auto o = sopt;
      o.deterministic = f;
      invalid(s, "options.deterministic " + std::to_string(f), with(o, false));
    }
  };
  using PlainSampler = flashcpp_status (*)(const flashcpp_tensor*, const flashcpp_tensor*, const flashcpp_tensor*,
                                           const flashcpp_sampling_options*, void*);
  for (const auto& [fn, f] : {std::pair<const char*, PlainSampler>{"flashcpp_sampling_from_probs", flashcpp_sampling_from_probs},
                              std::pair<const char*, PlainSampler>{"flashcpp_sampling_from_logits", flashcpp_sampling_from_logits}}) {
    Spec s;
    s.fn = fn;
    s.slots = {{"probs", cuda(DType::f32, {3, 1000}), kIn}, {"samples", cuda(DType::i32, {3}), kOut},
               {"row_indices", cuda(DType::i32, {3}), kIn | kOptional}};
    auto with = [f = f](flashcpp_sampling_options o, bool null_options) {
      return [=](const Ptrs& p) { return f(p[0], p[1], p[2], null_options ? nullptr : &o, nullptr); };
    };
    s.call = with(sopt, false);
    options_cases(s, with);
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_top_k_sampling_from_probs";
    s.slots = {{"probs", cuda(DType::f32, {3, 1000}), kIn}, {"samples", cuda(DType::i32, {3}), kOut},
               {"top_k_per_row", cuda(DType::i32, {3}), kIn | kOptional},
               {"row_indices", cuda(DType::i32, {3}), kIn | kOptional}};
    auto with = [](int64_t k, flashcpp_sampling_options o, bool null_options, bool scalar) {
      return [=](const Ptrs& p) {
        return flashcpp_top_k_sampling_from_probs(p[0], p[1], scalar ? nullptr : p[2], k, p[3],
                                                  null_options ? nullptr : &o, nullptr);
      };
    };
    s.call = with(10, sopt, false, false);
    options_cases(s, [&](flashcpp_sampling_options o, bool n) { return with(10, o, n, false); });
    for (int64_t k : {int64_t{0}, int64_t{-1}, int64_t{1} << 31, std::numeric_limits<int64_t>::max(),
                      std::numeric_limits<int64_t>::min()})
      invalid(s, "top_k " + std::to_string(k), with(k, sopt, false, true));
    all.push_back(std::move(s));
  }
  using PSampler = flashcpp_status (*)(const flashcpp_tensor*, const flashcpp_tensor*, const flashcpp_tensor*, double,
                                       const flashcpp_tensor*, const flashcpp_sampling_options*, void*);
  struct PSpec {
    const char* fn;
    PSampler f;
    const char* per_row;
    double good;
    std::vector<double> bad;
  };
  for (const PSpec& ps : {PSpec{"flashcpp_top_p_sampling_from_probs", flashcpp_top_p_sampling_from_probs,
                                "top_p_per_row", 0.9, {0.0, -0.5, 1.5}},
                          PSpec{"flashcpp_min_p_sampling_from_probs", flashcpp_min_p_sampling_from_probs,
                                "min_p_per_row", 0.1, {-0.1, 1.5}}}) {
    Spec s;
    s.fn = ps.fn;
    s.slots = {{"probs", cuda(DType::f32, {3, 1000}), kIn}, {"samples", cuda(DType::i32, {3}), kOut},
               {ps.per_row, cuda(DType::f32, {3}), kIn | kOptional},
               {"row_indices", cuda(DType::i32, {3}), kIn | kOptional}};
    const PSampler f = ps.f;
    auto with = [f](double x, flashcpp_sampling_options o, bool null_options, bool scalar) {
      return [=](const Ptrs& p) {
        return f(p[0], p[1], scalar ? nullptr : p[2], x, p[3], null_options ? nullptr : &o, nullptr);
      };
    };
    const double good = ps.good;
    s.call = with(good, sopt, false, false);
    options_cases(s, [&](flashcpp_sampling_options o, bool n) { return with(good, o, n, false); });
    std::vector<double> bad = ps.bad;
    bad.insert(bad.end(), std::begin(kNonFinite), std::end(kNonFinite));
    for (double x : bad) invalid(s, std::string(ps.per_row) + " scalar " + std::to_string(x), with(x, sopt, false, true));
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_top_k_top_p_sampling_from_probs";
    s.slots = {{"probs", cuda(DType::f32, {3, 1000}), kIn}, {"samples", cuda(DType::i32, {3}), kOut},
               {"top_k_per_row", cuda(DType::i32, {3}), kIn | kOptional},
               {"top_p_per_row", cuda(DType::f32, {3}), kIn | kOptional},
               {"row_indices", cuda(DType::i32, {3}), kIn | kOptional}};
    auto with = [](int64_t k, double tp, flashcpp_sampling_options o, bool null_options) {
      return [=](const Ptrs& p) {
        return flashcpp_top_k_top_p_sampling_from_probs(p[0], p[1], k == 10 ? p[2] : nullptr, k,
                                                        tp == 0.9 ? p[3] : nullptr, tp, p[4],
                                                        null_options ? nullptr : &o, nullptr);
      };
    };
    s.call = with(10, 0.9, sopt, false);
    options_cases(s, [&](flashcpp_sampling_options o, bool n) { return with(10, 0.9, o, n); });
    for (int64_t k : {int64_t{0}, int64_t{-3}, std::numeric_limits<int64_t>::max()})
      invalid(s, "top_k " + std::to_string(k), with(k, 0.9, sopt, false));
    for (double x : {0.0, 2.0, double(NAN), double(INFINITY)})
      invalid(s, "top_p " + std::to_string(x), with(10, x, sopt, false));
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_top_k_top_p_sampling_from_logits";
    s.bundles = true;
    s.slots = {{"workspace.softmax_buffer", cuda(DType::u8, {1 << 20}), kOut},
               {"workspace.row_states", cuda(DType::u8, {1 << 20}), kOut},
               {"logits", cuda(DType::f32, {3, 1000}), kIn},
               {"probs", cuda(DType::f32, {3, 1000}), kOut},
               {"samples", cuda(DType::i32, {3}), kOut},
               {"top_k_per_row", cuda(DType::i32, {3}), kIn | kOptional},
               {"top_p_per_row", cuda(DType::f32, {3}), kIn | kOptional},
               {"row_indices", cuda(DType::i32, {3}), kIn | kOptional}};
    auto with = [](int64_t k, double tp, int32_t order, flashcpp_sampling_options o, bool null_options,
                   bool null_workspace) {
      return [=](const Ptrs& p) {
        const auto ws = bundle<flashcpp_sampling_workspace>(p[0], p[1]);
        return flashcpp_top_k_top_p_sampling_from_logits(null_workspace ? nullptr : &ws, p[2], p[3], p[4],
                                                         k == 10 ? p[5] : nullptr, k, tp == 0.9 ? p[6] : nullptr, tp,
                                                         order, p[7], null_options ? nullptr : &o, nullptr);
      };
    };
    s.call = with(10, 0.9, FLASHCPP_TOP_K_FIRST, sopt, false, false);
    options_cases(s, [&](flashcpp_sampling_options o, bool n) { return with(10, 0.9, 0, o, n, false); });
    invalid(s, "workspace NULL", with(10, 0.9, 0, sopt, false, true));
    for (int32_t code : kBadCodes)
      if (code != FLASHCPP_TOP_K_TOP_P_JOINT) invalid(s, "order " + std::to_string(code), with(10, 0.9, code, sopt, false, false));
    invalid(s, "top_k 0", with(0, 0.9, 0, sopt, false, false));
    invalid(s, "top_p 0", with(10, 0.0, 1, sopt, false, false));
    all.push_back(std::move(s));
  }
  {
    // probs may be exactly logits (softmax runs in place), so probs is not mutated into an alias of logits here;
    // the validation tests cover the partial overlap.
    Spec s;
    s.fn = "flashcpp_softmax";
    s.slots = {{"workspace", cuda(DType::u8, {1 << 20}), kOut}, {"logits", cuda(DType::f32, {4, 32000}), kIn},
               {"probs", cuda(DType::f32, {4, 32000}), kIn},
               {"temperature_per_row", cuda(DType::f32, {4}), kIn | kOptional}};
    auto with = [](double t, int32_t pdl, bool scalar) {
      return [=](const Ptrs& p) { return flashcpp_softmax(p[0], p[1], p[2], scalar ? nullptr : p[3], t, pdl, nullptr); };
    };
    s.call = with(1.0, 0, false);
    for (double t : {0.0, -1.0, double(NAN), double(INFINITY)})
      invalid(s, "temperature " + std::to_string(t), with(t, 0, true));
    for (int32_t f : kBadFlags) invalid(s, "enable_pdl " + std::to_string(f), with(1.0, f, false));
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_top_p_renorm_probs";
    s.slots = {{"probs", cuda(DType::f32, {3, 1000}), kIn}, {"renorm", cuda(DType::f32, {3, 1000}), kOut},
               {"top_p_per_row", cuda(DType::f32, {3}), kIn | kOptional}};
    auto with = [](double tp, bool scalar) {
      return [=](const Ptrs& p) { return flashcpp_top_p_renorm_probs(p[0], p[1], scalar ? nullptr : p[2], tp, nullptr); };
    };
    s.call = with(0.5, false);
    for (double x : {0.0, 1.01, double(NAN), -double(INFINITY)}) invalid(s, "top_p " + std::to_string(x), with(x, true));
    all.push_back(std::move(s));
  }
  using KFilter = flashcpp_status (*)(const flashcpp_tensor*, const flashcpp_tensor*, const flashcpp_tensor*, int64_t,
                                      const flashcpp_tensor*, void*);
  for (const auto& [fn, f, out] : {std::tuple<const char*, KFilter, const char*>{"flashcpp_top_k_renorm_probs",
                                                                              flashcpp_top_k_renorm_probs, "renorm"},
                                   std::tuple<const char*, KFilter, const char*>{"flashcpp_top_k_mask_logits",
                                                                              flashcpp_top_k_mask_logits, "masked"}}) {
    Spec s;
    s.fn = fn;
    s.slots = {{"input", cuda(DType::bf16, {3, 1000}), kIn}, {out, cuda(DType::bf16, {3, 1000}), kOut},
               {"top_k_per_row", cuda(DType::i32, {3}), kIn | kOptional},
               {"row_states", cuda(DType::u8, {1 << 20}), kOut}};
    auto with = [f = f](int64_t k, bool scalar) {
      return [=](const Ptrs& p) { return f(p[0], p[1], scalar ? nullptr : p[2], k, p[3], nullptr); };
    };
    s.call = with(5, false);
    for (int64_t k : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::min()})
      invalid(s, "top_k " + std::to_string(k), with(k, true));
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- DSA top-k
  // f32 rows of 8192 need the row states (more than one CTA's 4096), which are given; 16-bit rows of 1000 do not.
  {
    Spec s;
    s.fn = "flashcpp_top_k";
    s.slots = {{"input", cuda(DType::f32, {3, 8192}), kIn}, {"indices", cuda(DType::i32, {3, 64}), kOut},
               {"values", cuda(DType::f32, {3, 64}), kOut},
               {"row_states", cuda(DType::u8, {kTopKRowStatesBytes}), kOut | kOptional}};
    s.call = [](const Ptrs& p) { return flashcpp_top_k(p[0], p[1], p[2], p[3], nullptr); };
    invalid(s, "row_states NULL for 8192-wide f32 rows", [](const Ptrs& p) {
      return flashcpp_top_k(p[0], p[1], p[2], nullptr, nullptr);
    });
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_top_k_page_table_transform";
    s.slots = {{"input", cuda(DType::f32, {4, 2048}), kIn}, {"lengths", cuda(DType::i32, {4}), kIn},
               {"src_page_table", cuda(DType::i32, {2, 4096}), kIn},
               {"row_to_batch", cuda(DType::i32, {4}), kIn | kOptional},
               {"output_page_table", cuda(DType::i32, {4, 64}), kOut},
               {"row_states", cuda(DType::u8, {kTopKRowStatesBytes}), kOut | kOptional}};
    s.call = [](const Ptrs& p) {
      return flashcpp_top_k_page_table_transform(p[0], p[1], p[2], p[3], p[4], p[5], nullptr);
    };
    invalid(s, "row_to_batch NULL with fewer table rows than input rows", [](const Ptrs& p) {
      return flashcpp_top_k_page_table_transform(p[0], p[1], p[2], nullptr, p[4], p[5], nullptr);
    });
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_top_k_ragged_transform";
    s.slots = {{"input", cuda(DType::bf16, {3, 1000}), kIn}, {"offsets", cuda(DType::i32, {3}), kIn},
               {"lengths", cuda(DType::i32, {3}), kIn}, {"output_indices", cuda(DType::i32, {3, 128}), kOut},
               {"row_states", cuda(DType::u8, {kTopKRowStatesBytes}), kOut | kOptional}};
    s.call = [](const Ptrs& p) { return flashcpp_top_k_ragged_transform(p[0], p[1], p[2], p[3], p[4], nullptr); };
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- RoPE
  // q and k strided (slices of a fused qkv row), q_rope and k_rope contiguous: an output moved onto its input is a
  // partial overlap (exactly in place would be valid).
  auto rope_slots = [](bool cache) {
    std::vector<Slot> v = {{"q", to_c(dev_strided(DType::bf16, {5, 4, 128}, {1024, 128, 1})), kIn},
                           {"k", to_c(dev_strided(DType::bf16, {5, 2, 128}, {1024, 128, 1})), kIn},
                           {"q_rope", cuda(DType::bf16, {5, 4, 128}), kOut},
                           {"k_rope", cuda(DType::bf16, {5, 2, 128}), kOut}};
    if (cache) v.push_back({"cos_sin_cache", cuda(DType::f32, {64, 128}), kIn});
    v.push_back({"pos_ids", cuda(DType::i32, {5}), kIn});
    return v;
  };
  {
    Spec s;
    s.fn = "flashcpp_apply_rope_pos_ids";
    s.slots = rope_slots(false);
    auto with = [](int64_t rd, int32_t il, double scale, double theta) {
      return [=](const Ptrs& p) { return flashcpp_apply_rope_pos_ids(p[0], p[1], p[2], p[3], p[4], rd, il, scale, theta, nullptr); };
    };
    s.call = with(0, 0, 0, 0);
    for (int32_t f : kBadFlags) invalid(s, "interleave " + std::to_string(f), with(0, f, 0, 0));
    for (int64_t rd : {int64_t{-16}, int64_t{24}, int64_t{130}, int64_t{256}, std::numeric_limits<int64_t>::min()})
      invalid(s, "rotary_dim " + std::to_string(rd), with(rd, 0, 0, 0));
    for (double x : kNonFinite) {
      invalid(s, "rope_scale " + std::to_string(x), with(0, 0, x, 0));
      invalid(s, "rope_theta " + std::to_string(x), with(0, 0, 0, x));
    }
    invalid(s, "rope_scale -1", with(0, 0, -1, 0));
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_apply_llama31_rope_pos_ids";
    s.slots = rope_slots(false);
    auto with = [](double lo, double hi, double ctx) {
      return [=](const Ptrs& p) {
        return flashcpp_apply_llama31_rope_pos_ids(p[0], p[1], p[2], p[3], p[4], 0, 0, 8, 5e5, lo, hi, ctx, nullptr);
      };
    };
    s.call = with(0, 0, 0);
    invalid(s, "high_freq_factor == low_freq_factor", with(2, 2, 0));
    invalid(s, "low_freq_factor -1", with(-1, 0, 0));
    for (double x : kNonFinite) {
      invalid(s, "high_freq_factor " + std::to_string(x), with(0, x, 0));
      invalid(s, "old_context_length " + std::to_string(x), with(0, 0, x));
    }
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_apply_rope_with_cos_sin_cache";
    s.slots = rope_slots(true);
    auto with = [](int32_t il) {
      return [=](const Ptrs& p) { return flashcpp_apply_rope_with_cos_sin_cache(p[0], p[1], p[2], p[3], p[4], p[5], il, nullptr); };
    };
    s.call = with(0);
    for (int32_t f : kBadFlags) invalid(s, "interleave " + std::to_string(f), with(f));
    all.push_back(std::move(s));
  }
  // The ragged batch: indptr [3] and offsets [2] on the device (int32).
  auto ragged_slots = [&] {
    std::vector<Slot> v = rope_slots(false);
    v.pop_back();  // pos_ids
    v.push_back({"indptr", cuda(DType::i32, {3}), kIn});
    v.push_back({"offsets", cuda(DType::i32, {2}), kIn});
    return v;
  };
  {
    Spec s;
    s.fn = "flashcpp_apply_rope";
    s.slots = ragged_slots();
    auto with = [](int64_t rd, int32_t il, double scale, double theta) {
      return [=](const Ptrs& p) { return flashcpp_apply_rope(p[0], p[1], p[2], p[3], p[4], p[5], rd, il, scale, theta, nullptr); };
    };
    s.call = with(0, 0, 0, 0);
    for (int32_t f : kBadFlags) invalid(s, "interleave " + std::to_string(f), with(0, f, 0, 0));
    for (int64_t rd : {int64_t{-16}, int64_t{24}, int64_t{130}, int64_t{256}, std::numeric_limits<int64_t>::min()})
      invalid(s, "rotary_dim " + std::to_string(rd), with(rd, 0, 0, 0));
    for (double x : kNonFinite) {
      invalid(s, "rope_scale " + std::to_string(x), with(0, 0, x, 0));
      invalid(s, "rope_theta " + std::to_string(x), with(0, 0, 0, x));
    }
    invalid(s, "rope_theta -1", with(0, 0, 0, -1));
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_apply_llama31_rope";
    s.slots = ragged_slots();
    auto with = [](double lo, double hi, double ctx) {
      return [=](const Ptrs& p) {
        return flashcpp_apply_llama31_rope(p[0], p[1], p[2], p[3], p[4], p[5], 0, 0, 8, 5e5, lo, hi, ctx, nullptr);
      };
    };
    s.call = with(0, 0, 0);
    invalid(s, "high_freq_factor == low_freq_factor", with(2, 2, 0));
    invalid(s, "low_freq_factor -1", with(-1, 0, 0));
    invalid(s, "old_context_length -1", with(0, 0, -1));
    for (double x : kNonFinite) {
      invalid(s, "high_freq_factor " + std::to_string(x), with(0, x, 0));
      invalid(s, "old_context_length " + std::to_string(x), with(0, 0, x));
    }
    all.push_back(std::move(s));
  }
  {
    // DeepSeek MLA's layout at a small size: q [5, 4, 64 + 128], k one latent head [5, 64 + 128], e4m3 out.
    Spec s;
    s.fn = "flashcpp_rope_quantize_fp8";
    s.slots = {{"q_rope", cuda(DType::bf16, {5, 4, 64}), kIn},          {"k_rope", cuda(DType::bf16, {5, 64}), kIn},
               {"q_rope_out", cuda(DType::e4m3, {5, 4, 64}), kOut},     {"k_rope_out", cuda(DType::e4m3, {5, 64}), kOut},
               {"q_nope", cuda(DType::bf16, {5, 4, 128}), kIn},         {"k_nope", cuda(DType::bf16, {5, 128}), kIn},
               {"q_nope_out", cuda(DType::e4m3, {5, 4, 128}), kOut},    {"k_nope_out", cuda(DType::e4m3, {5, 128}), kOut},
               {"cos_sin_cache", cuda(DType::f32, {64, 64}), kIn},      {"pos_ids", cuda(DType::i32, {5}), kIn}};
    const flashcpp_rope_quantize_args init = FLASHCPP_ROPE_QUANTIZE_ARGS_INIT;
    auto with = [init](auto edit, bool null_args = false, bool no_nope = false) {
      return [=](const Ptrs& p) {
        flashcpp_rope_quantize_args a = init;
        a.q_rope = p[0], a.k_rope = p[1], a.q_rope_out = p[2], a.k_rope_out = p[3];
        if (!no_nope) a.q_nope = p[4], a.k_nope = p[5], a.q_nope_out = p[6], a.k_nope_out = p[7];
        a.cos_sin_cache = p[8], a.pos_ids = p[9];
        edit(a);
        return flashcpp_rope_quantize_fp8(null_args ? nullptr : &a, nullptr);
      };
    };
    auto same = [](flashcpp_rope_quantize_args&) {};
    s.call = with(same);
    invalid(s, "args NULL", with(same, true));
    for (uint32_t size : bad_sizes<flashcpp_rope_quantize_args>())
      invalid(s, "args.struct_size " + std::to_string(size), with([size](auto& a) { a.struct_size = size; }));
    invalid_quantize_scalars(s, with);
    s.survive.emplace_back("no nope part (all four NULL)", with(same, false, true));
    all.push_back(std::move(s));
  }

  for (bool mla : {false, true}) {
    // rope_quantize_append_paged_kv_cache at a small size: q [5, 4, 64 + 64]; GQA k [5, 2, 64 + 64] and v [5, 2, 128]
    // into NHD e4m3 k/v caches of 3 pages of 16, or MLA's one latent head [5, 64 + 64] into ckv/kpe caches.
    Spec s;
    s.fn = "flashcpp_rope_quantize_append_paged_kv_cache";
    s.bundles = true;
    s.slots = {{"q_rope", cuda(DType::bf16, {5, 4, 64}), kIn},
               {"k_rope", mla ? cuda(DType::bf16, {5, 64}) : cuda(DType::bf16, {5, 2, 64}), kIn},
               {"q_nope", cuda(DType::bf16, {5, 4, 64}), kIn},
               {"k_nope", mla ? cuda(DType::bf16, {5, 64}) : cuda(DType::bf16, {5, 2, 64}), kIn},
               {"q_rope_out", cuda(DType::e4m3, {5, 4, 64}), kOut},
               {"q_nope_out", cuda(DType::e4m3, {5, 4, 64}), kOut},
               {"cos_sin_cache", cuda(DType::f32, {64, 64}), kIn},
               {"pos_ids", cuda(DType::i32, {5}), kIn},
               {"batch_indices", cuda(DType::i32, {5}), kIn},
               {"positions", cuda(DType::i32, {5}), kIn},
               {mla ? "ckv_cache" : "k_cache", mla ? cuda(DType::e4m3, {3, 16, 64}) : cuda(DType::e4m3, {3, 16, 2, 128}), kOut},
               {mla ? "kpe_cache" : "v_cache", mla ? cuda(DType::e4m3, {3, 16, 64}) : cuda(DType::e4m3, {3, 16, 2, 128}), kOut},
               {"indices", cuda(DType::i32, {3}), kIn},
               {"indptr", cuda(DType::i32, {3}), kIn},
               {"last_page_len", cuda(DType::i32, {2}), kIn}};
    if (!mla) s.slots.push_back({"v", cuda(DType::bf16, {5, 2, 128}), kIn});
    const flashcpp_rope_quantize_append_args init = FLASHCPP_ROPE_QUANTIZE_APPEND_ARGS_INIT;
    auto with = [init, mla](auto edit, bool null_args = false) {
      return [=](const Ptrs& p) {
        flashcpp_rope_quantize_append_args a = init;
        a.q_rope = p[0], a.k_rope = p[1], a.q_nope = p[2], a.k_nope = p[3], a.q_rope_out = p[4], a.q_nope_out = p[5];
        a.cos_sin_cache = p[6], a.pos_ids = p[7], a.batch_indices = p[8], a.positions = p[9];
        const auto kv = bundle<flashcpp_paged_kv_cache>(p[10], p[11], p[12], p[13], p[14], FLASHCPP_KV_NHD);
        const auto ml = bundle<flashcpp_paged_mla_kv_cache>(p[10], p[11], p[12], p[13], p[14]);
        if (mla) a.mla_cache = &ml;
        else a.kv_cache = &kv, a.v = p[15];
        edit(a);
        return flashcpp_rope_quantize_append_paged_kv_cache(null_args ? nullptr : &a, nullptr);
      };
    };
    auto same = [](flashcpp_rope_quantize_append_args&) {};
    s.call = with(same);
    invalid(s, "args NULL", with(same, true));
    for (uint32_t size : bad_sizes<flashcpp_rope_quantize_append_args>())
      invalid(s, "args.struct_size " + std::to_string(size), with([size](auto& a) { a.struct_size = size; }));
    invalid(s, "no cache", with([](auto& a) { a.kv_cache = nullptr, a.mla_cache = nullptr; }));
    invalid_quantize_scalars(s, with);
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- paged KV append
  {
    Spec s;
    s.fn = "flashcpp_append_paged_kv_cache";
    s.bundles = true;
    s.slots = {{"append_key", cuda(DType::bf16, {5, 4, 128}), kIn},
               {"append_value", cuda(DType::bf16, {5, 4, 128}), kIn},
               {"batch_indices", cuda(DType::i32, {5}), kIn},
               {"positions", cuda(DType::i32, {5}), kIn},
               {"cache.k_cache", cuda(DType::bf16, {10, 16, 4, 128}), kOut},
               {"cache.v_cache", cuda(DType::bf16, {10, 16, 4, 128}), kOut},
               {"cache.indices", cuda(DType::i32, {10}), kIn},
               {"cache.indptr", cuda(DType::i32, {3}), kIn},
               {"cache.last_page_len", cuda(DType::i32, {2}), kIn}};
    auto with_layout = [](int32_t layout, bool no_cache) {
      return [=](const Ptrs& p) {
        const auto c = bundle<flashcpp_paged_kv_cache>(p[4], p[5], p[6], p[7], p[8], layout);
        return flashcpp_append_paged_kv_cache(p[0], p[1], p[2], p[3], no_cache ? nullptr : &c, nullptr);
      };
    };
    s.call = with_layout(FLASHCPP_KV_NHD, false);
    invalid(s, "cache NULL", with_layout(FLASHCPP_KV_NHD, true));
    for (int32_t l : {-1, 2, 1000}) invalid(s, "cache.layout " + std::to_string(l), with_layout(l, false));
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_append_paged_mla_kv_cache";
    s.bundles = true;
    s.slots = {{"append_ckv", cuda(DType::bf16, {3, 512}), kIn},
               {"append_kpe", cuda(DType::bf16, {3, 64}), kIn},
               {"batch_indices", cuda(DType::i32, {3}), kIn},
               {"positions", cuda(DType::i32, {3}), kIn},
               {"cache.ckv_cache", cuda(DType::bf16, {8, 64, 512}), kOut},
               {"cache.kpe_cache", cuda(DType::bf16, {8, 64, 64}), kOut},
               {"cache.indices", cuda(DType::i32, {8}), kIn},
               {"cache.indptr", cuda(DType::i32, {2}), kIn},
               {"cache.last_page_len", cuda(DType::i32, {1}), kIn}};
    s.call = [](const Ptrs& p) {
      const auto c = bundle<flashcpp_paged_mla_kv_cache>(p[4], p[5], p[6], p[7], p[8]);
      return flashcpp_append_paged_mla_kv_cache(p[0], p[1], p[2], p[3], &c, nullptr);
    };
    invalid(s, "cache NULL", [](const Ptrs& p) {
      return flashcpp_append_paged_mla_kv_cache(p[0], p[1], p[2], p[3], nullptr, nullptr);
    });
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- single attention
  flashcpp_attention_options opt;
  flashcpp_attention_options_init(&opt);
  opt.decode_backend = FLASHCPP_DECODE_CUDA_CORES;
  for (int which = 0; which < 2; ++which) {
    Spec s;
    const bool prefill = which == 0;
    s.fn = prefill ? "flashcpp_single_prefill" : "flashcpp_single_decode";
    auto f = prefill ? flashcpp_single_prefill : flashcpp_single_decode;
    const int64_t tmp_bytes = prefill ? single_prefill_tmp_bytes(7, 300, 32, 8, 128, DType::bf16)
                                      : single_decode_tmp_bytes(300, 32, 8, 128, DType::bf16);
    if (prefill)
      s.slots = {{"q", cuda(DType::bf16, {7, 32, 128}), kIn}, {"k", cuda(DType::bf16, {300, 8, 128}), kIn},
                 {"v", cuda(DType::bf16, {300, 8, 128}), kIn}, {"out", cuda(DType::bf16, {7, 32, 128}), kOut},
                 {"lse", cuda(DType::f32, {7, 32}), kOut | kOptional}, {"tmp", cuda(DType::u8, {tmp_bytes}), kOut | kOptional}};
    else
      s.slots = {{"q", cuda(DType::bf16, {32, 128}), kIn}, {"k", cuda(DType::bf16, {300, 8, 128}), kIn},
                 {"v", cuda(DType::bf16, {300, 8, 128}), kIn}, {"out", cuda(DType::bf16, {32, 128}), kOut},
                 {"lse", cuda(DType::f32, {32}), kOut | kOptional}, {"tmp", cuda(DType::u8, {tmp_bytes}), kOut | kOptional}};
    auto with = [f](flashcpp_attention_options o, bool null_options) {
      return [=](const Ptrs& p) { return f(p[0], p[1], p[2], p[3], p[4], p[5], null_options ? nullptr : &o, nullptr); };
    };
    s.call = with(opt, false);
    invalid(s, "options NULL", with(opt, true));
    for (uint32_t size : bad_sizes<flashcpp_attention_options>()) {
      auto o = opt;
      o.struct_size = size;
      invalid(s, "options.struct_size " + std::to_string(size), with(o, false));
    }
    for (int32_t code : {-1, 2, 99}) {
      auto o = opt;
      o.layout = code;
      invalid(s, "options.layout " + std::to_string(code), with(o, false));
    }
    for (double x : kNonFinite) {
      auto o = opt;
      o.sm_scale = x;
      invalid(s, "options.sm_scale " + std::to_string(x), with(o, false));
      o = opt;
      o.logits_soft_cap = x;
      invalid(s, "options.logits_soft_cap " + std::to_string(x), with(o, false));
    }
    for (double x : {-1.0, -1e-30}) {
      auto o = opt;
      o.sm_scale = x;
      invalid(s, "options.sm_scale " + std::to_string(x), with(o, false));
      o = opt;
      o.logits_soft_cap = x;
      invalid(s, "options.logits_soft_cap " + std::to_string(x), with(o, false));
    }
    for (int64_t w : {int64_t{-2}, std::numeric_limits<int64_t>::min()}) {
      auto o = opt;
      o.window_left = w;
      invalid(s, "options.window_left " + std::to_string(w), with(o, false));
    }
    if (prefill) {
      for (int32_t flag : kBadFlags) {
        auto o = opt;
        o.causal = flag;
        invalid(s, "options.causal " + std::to_string(flag), with(o, false));
        o = opt;
        o.use_fp16_qk_reduction = flag;
        invalid(s, "options.use_fp16_qk_reduction " + std::to_string(flag), with(o, false));
      }
    } else {
      for (int32_t code : kBadCodes) {
        auto o = opt;
        o.decode_backend = code;
        invalid(s, "options.decode_backend " + std::to_string(code), with(o, false));
      }
    }
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- batch prefill / decode
  const flashcpp_tensor pinned = host(DType::u8, {1 << 20}, Device::cuda_host());
  const std::vector<Slot> ws_slots = {{"workspace.float_buffer", cuda(DType::u8, {1 << 20}), kOut},
                                      {"workspace.int_buffer", cuda(DType::u8, {1 << 20}), kOut},
                                      {"workspace.pinned_int_buffer", pinned, kOut | kHost}};
  flashcpp_batch_prefill_config pc;
  flashcpp_batch_prefill_config_init(&pc);
  pc.num_qo_heads = 32;
  pc.num_kv_heads = 8;
  pc.head_dim_qk = 128;
  pc.page_size = 16;
  pc.backend = FLASHCPP_ATTENTION_FA2;
  flashcpp_batch_decode_config dc;
  flashcpp_batch_decode_config_init(&dc);
  dc.num_qo_heads = 32;
  dc.num_kv_heads = 8;
  dc.head_dim = 128;
  dc.page_size = 16;
  dc.backend = FLASHCPP_DECODE_CUDA_CORES;
  // The scalar fields both configs share, each set outside its rule.
  auto shared_config_cases = [&](Spec& s, auto base, auto with) {
    using C = decltype(base);
    for (uint32_t size : bad_sizes<C>()) {
      C c = base;
      c.struct_size = size;
      invalid(s, "config.struct_size " + std::to_string(size), with(c));
    }
    for (int64_t x : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
      C c = base;
      c.num_qo_heads = x;
      invalid(s, "config.num_qo_heads " + std::to_string(x), with(c));
      c = base;
      c.num_kv_heads = x;
      invalid(s, "config.num_kv_heads " + std::to_string(x), with(c));
      c = base;
      c.page_size = x;
      invalid(s, "config.page_size " + std::to_string(x), with(c));
    }
    for (int32_t code : {-1, -2, -7, 15, 99, std::numeric_limits<int32_t>::min()}) {
      C c = base;
      c.q_dtype = code;
      invalid(s, "config.q_dtype " + std::to_string(code), with(c));
      c = base;
      c.kv_dtype = code;
      invalid(s, "config.kv_dtype " + std::to_string(code), with(c));
      if (code != -1) {
        c = base;
        c.o_dtype = code;
        invalid(s, "config.o_dtype " + std::to_string(code), with(c));
      }
    }
    for (int32_t code : {-1, 2, 99}) {
      C c = base;
      c.layout = code;
      invalid(s, "config.layout " + std::to_string(code), with(c));
    }
    for (int32_t flag : kBadFlags) {
      C c = base;
      c.enable_cuda_graph = flag;
      invalid(s, "config.enable_cuda_graph " + std::to_string(flag), with(c));
      c = base;
      c.enable_pdl = flag;
      invalid(s, "config.enable_pdl " + std::to_string(flag), with(c));
    }
    for (double x : kNonFinite) {
      C c = base;
      c.sm_scale = x;
      invalid(s, "config.sm_scale " + std::to_string(x), with(c));
      c = base;
      c.logits_soft_cap = x;
      invalid(s, "config.logits_soft_cap " + std::to_string(x), with(c));
    }
    {
      C c = base;
      c.sm_scale = -0.5;
      invalid(s, "config.sm_scale -0.5", with(c));
      c = base;
      c.window_left = -2;
      invalid(s, "config.window_left -2", with(c));
    }
  };
  {
    Spec s;
    s.fn = "flashcpp_batch_prefill_plan_create";
    s.bundles = true;
    s.slots = ws_slots;
    s.slots.push_back({"qo_indptr_host", host_ints(DType::i32, {0, 3, 5}), kHost});
    s.slots.push_back({"kv_indptr_host", host_ints(DType::i32, {0, 2, 3}), kHost});
    s.slots.push_back({"kv_last_page_len_host", host_ints(DType::i32, {5, 16}), kHost});
    s.slots.push_back({"kv_indices_host", host_ints(DType::i32, {0, 1, 2}), kHost | kOptional});
    auto with = [](flashcpp_batch_prefill_config c, bool null_ws = false, bool null_config = false, bool null_out = false) {
      return [=](const Ptrs& p) {
        const auto w = bundle<flashcpp_workspace>(p[0], p[1], p[2]);
        flashcpp_batch_prefill_plan* plan = nullptr;
        const flashcpp_status st = flashcpp_batch_prefill_plan_create(
            null_config ? nullptr : &c, null_ws ? nullptr : &w, p[3], p[4], p[5], p[6], nullptr, null_out ? nullptr : &plan);
        flashcpp_batch_prefill_plan_destroy(plan);
        return st;
      };
    };
    s.call = with(pc);
    invalid(s, "workspace NULL", with(pc, true));
    invalid(s, "config NULL", with(pc, false, true));
    invalid(s, "out_plan NULL", with(pc, false, false, true));
    shared_config_cases(s, pc, [&](flashcpp_batch_prefill_config c) { return with(c); });
    for (int32_t code : kBadCodes) {
      auto c = pc;
      c.kv_storage = code == 3 ? 2 : code;
      invalid(s, "config.kv_storage " + std::to_string(c.kv_storage), with(c));
      c = pc;
      c.backend = code;
      invalid(s, "config.backend " + std::to_string(code), with(c));
    }
    for (int32_t flag : kBadFlags) {
      auto c = pc;
      c.causal = flag;
      invalid(s, "config.causal " + std::to_string(flag), with(c));
      c = pc;
      c.disable_split_kv = flag;
      invalid(s, "config.disable_split_kv " + std::to_string(flag), with(c));
    }
    for (int64_t x : {int64_t{0}, int64_t{-1}, int64_t{96}, std::numeric_limits<int64_t>::max()}) {
      auto c = pc;
      c.head_dim_qk = x;
      invalid(s, "config.head_dim_qk " + std::to_string(x), with(c));
    }
    {
      auto c = pc;
      c.head_dim_vo = -1;
      invalid(s, "config.head_dim_vo -1", with(c));
      c = pc;
      c.fixed_split_size = -2;
      invalid(s, "config.fixed_split_size -2", with(c));
    }
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_batch_decode_plan_create";
    s.bundles = true;
    s.slots = ws_slots;
    s.slots.push_back({"kv_indptr_host", host_ints(DType::i32, {0, 2, 3}), kHost});
    s.slots.push_back({"kv_last_page_len_host", host_ints(DType::i32, {5, 16}), kHost});
    s.slots.push_back({"kv_indices_host", host_ints(DType::i32, {0, 1, 2}), kHost | kOptional});
    auto with = [](flashcpp_batch_decode_config c, bool null_ws = false, bool null_config = false, bool null_out = false) {
      return [=](const Ptrs& p) {
        const auto w = bundle<flashcpp_workspace>(p[0], p[1], p[2]);
        flashcpp_batch_decode_plan* plan = nullptr;
        const flashcpp_status st = flashcpp_batch_decode_plan_create(null_config ? nullptr : &c, null_ws ? nullptr : &w,
                                                                     p[3], p[4], p[5], nullptr, null_out ? nullptr : &plan);
        flashcpp_batch_decode_plan_destroy(plan);
        return st;
      };
    };
    s.call = with(dc);
    invalid(s, "workspace NULL", with(dc, true));
    invalid(s, "config NULL", with(dc, false, true));
    invalid(s, "out_plan NULL", with(dc, false, false, true));
    shared_config_cases(s, dc, [&](flashcpp_batch_decode_config c) { return with(c); });
    for (int32_t code : kBadCodes) {
      auto c = dc;
      c.backend = code;
      invalid(s, "config.backend " + std::to_string(code), with(c));
      c = dc;
      c.prefill_backend = code;
      invalid(s, "config.prefill_backend " + std::to_string(code), with(c));
    }
    for (int64_t x : {int64_t{0}, int64_t{-1}, int64_t{96}}) {
      auto c = dc;
      c.head_dim = x;
      invalid(s, "config.head_dim " + std::to_string(x), with(c));
    }
    all.push_back(std::move(s));
  }
  // Plans the run cases use, made here (the children inherit them).
  flashcpp_batch_prefill_plan* paged_plan = nullptr;
  flashcpp_batch_prefill_plan* ragged_plan = nullptr;
  flashcpp_batch_decode_plan* decode_plan = nullptr;
  {
    const auto qo = host_ints(DType::i32, {0, 3, 5}), kv = host_ints(DType::i32, {0, 2, 3});
    const auto last = host_ints(DType::i32, {5, 16}), idx = host_ints(DType::i32, {0, 1, 2});
    const auto rows = host_ints(DType::i32, {0, 20, 37});
    const auto w = bundle<flashcpp_workspace>(&ws_slots[0].t, &ws_slots[1].t, &ws_slots[2].t);
    EXPECT_EQ(flashcpp_batch_prefill_plan_create(&pc, &w, &qo, &kv, &last, &idx, nullptr, &paged_plan), FLASHCPP_SUCCESS)
        << flashcpp_last_error();
    auto rc = pc;
    rc.kv_storage = FLASHCPP_KV_RAGGED;
    EXPECT_EQ(flashcpp_batch_prefill_plan_create(&rc, &w, &qo, &rows, nullptr, nullptr, nullptr, &ragged_plan),
              FLASHCPP_SUCCESS)
        << flashcpp_last_error();
    EXPECT_EQ(flashcpp_batch_decode_plan_create(&dc, &w, &kv, &last, &idx, nullptr, &decode_plan), FLASHCPP_SUCCESS)
        << flashcpp_last_error();
    destroy_.push_back([=] {
      flashcpp_batch_prefill_plan_destroy(paged_plan);
      flashcpp_batch_prefill_plan_destroy(ragged_plan);
      flashcpp_batch_decode_plan_destroy(decode_plan);
    });
  }
  const std::vector<Slot> paged_cache = {{"cache.k_cache", cuda(DType::bf16, {3, 16, 8, 128}), kIn},
                                         {"cache.v_cache", cuda(DType::bf16, {3, 16, 8, 128}), kIn},
                                         {"cache.indices", cuda(DType::i32, {3}), kIn},
                                         {"cache.indptr", cuda(DType::i32, {3}), kIn},
                                         {"cache.last_page_len", cuda(DType::i32, {2}), kIn}};
  {
    Spec s;
    s.fn = "flashcpp_batch_prefill_run_paged";
    s.bundles = true;
    s.slots = {{"q", cuda(DType::bf16, {5, 32, 128}), kIn}, {"qo_indptr", cuda(DType::i32, {3}), kIn},
               {"out", cuda(DType::bf16, {5, 32, 128}), kOut}, {"lse", cuda(DType::f32, {5, 32}), kOut | kOptional}};
    s.slots.insert(s.slots.end(), paged_cache.begin(), paged_cache.end());
    auto with = [](const flashcpp_batch_prefill_plan* plan, int32_t layout, bool null_cache) {
      return [=](const Ptrs& p) {
        const auto c = bundle<flashcpp_paged_kv_cache>(p[4], p[5], p[6], p[7], p[8], layout);
        return flashcpp_batch_prefill_run_paged(plan, p[0], null_cache ? nullptr : &c, p[1], p[2], p[3], nullptr);
      };
    };
    s.call = with(paged_plan, FLASHCPP_KV_NHD, false);
    invalid(s, "plan NULL", with(nullptr, FLASHCPP_KV_NHD, false));
    invalid(s, "cache NULL", with(paged_plan, FLASHCPP_KV_NHD, true));
    invalid(s, "a ragged plan", with(ragged_plan, FLASHCPP_KV_NHD, false));
    for (int32_t l : {-1, 2, 1000}) invalid(s, "cache.layout " + std::to_string(l), with(paged_plan, l, false));
    invalid(s, "cache.layout HND (planned NHD)", with(paged_plan, FLASHCPP_KV_HND, false));
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_batch_prefill_run_ragged";
    s.bundles = true;
    s.slots = {{"q", cuda(DType::bf16, {5, 32, 128}), kIn},
               {"kv.k", cuda(DType::bf16, {37, 8, 128}), kIn},
               {"kv.v", cuda(DType::bf16, {37, 8, 128}), kIn},
               {"kv.indptr", cuda(DType::i32, {3}), kIn},
               {"qo_indptr", cuda(DType::i32, {3}), kIn},
               {"out", cuda(DType::bf16, {5, 32, 128}), kOut},
               {"lse", cuda(DType::f32, {5, 32}), kOut | kOptional}};
    auto with = [](const flashcpp_batch_prefill_plan* plan, bool null_kv) {
      return [=](const Ptrs& p) {
        const auto kv = bundle<flashcpp_ragged_kv>(p[1], p[2], p[3]);
        return flashcpp_batch_prefill_run_ragged(plan, p[0], null_kv ? nullptr : &kv, p[4], p[5], p[6], nullptr);
      };
    };
    s.call = with(ragged_plan, false);
    invalid(s, "plan NULL", with(nullptr, false));
    invalid(s, "kv NULL", with(ragged_plan, true));
    invalid(s, "a paged plan", with(paged_plan, false));
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_batch_decode_run";
    s.bundles = true;
    s.slots = {{"q", cuda(DType::bf16, {2, 32, 128}), kIn}, {"out", cuda(DType::bf16, {2, 32, 128}), kOut},
               {"lse", cuda(DType::f32, {2, 32}), kOut | kOptional}};
    s.slots.insert(s.slots.end(), paged_cache.begin(), paged_cache.end());
    auto with = [](const flashcpp_batch_decode_plan* plan, int32_t layout, bool null_cache) {
      return [=](const Ptrs& p) {
        const auto c = bundle<flashcpp_paged_kv_cache>(p[3], p[4], p[5], p[6], p[7], layout);
        return flashcpp_batch_decode_run(plan, p[0], null_cache ? nullptr : &c, p[1], p[2], nullptr);
      };
    };
    s.call = with(decode_plan, FLASHCPP_KV_NHD, false);
    invalid(s, "plan NULL", with(nullptr, FLASHCPP_KV_NHD, false));
    invalid(s, "cache NULL", with(decode_plan, FLASHCPP_KV_NHD, true));
    for (int32_t l : {-1, 2, 1000}) invalid(s, "cache.layout " + std::to_string(l), with(decode_plan, l, false));
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- batch MLA
  flashcpp_batch_mla_config mc = FLASHCPP_BATCH_MLA_CONFIG_INIT;
  mc.num_heads = 16;
  mc.page_size = 64;
  mc.backend = FLASHCPP_MLA_FA2;
  const flashcpp_tensor mla_pinned = host(DType::u8, {1024}, Device::cuda_host());
  {
    Spec s;
    s.fn = "flashcpp_batch_mla_plan_create";
    s.slots = {{"float_workspace", cuda(DType::u8, {1 << 20}), kOut},
               {"int_workspace", cuda(DType::u8, {1024}), kOut},
               {"pinned_int_workspace", mla_pinned, kOut | kHost},
               {"qo_indptr_host", host_ints(DType::i32, {0, 3, 4}), kHost},
               {"kv_indptr_host", host_ints(DType::i32, {0, 2, 3}), kHost},
               {"kv_len_host", host_ints(DType::i32, {70, 5}), kHost}};
    auto with = [](flashcpp_batch_mla_config c, bool null_config = false, bool null_out = false) {
      return [=](const Ptrs& p) {
        flashcpp_batch_mla_plan* plan = nullptr;
        const flashcpp_status st = flashcpp_batch_mla_plan_create(null_config ? nullptr : &c, p[0], p[1], p[2], p[3],
                                                                  p[4], p[5], nullptr, null_out ? nullptr : &plan);
        flashcpp_batch_mla_plan_destroy(plan);
        return st;
      };
    };
    s.call = with(mc);
    invalid(s, "config NULL", with(mc, true));
    invalid(s, "out_plan NULL", with(mc, false, true));
    for (uint32_t size : bad_sizes<flashcpp_batch_mla_config>()) {
      auto c = mc;
      c.struct_size = size;
      invalid(s, "config.struct_size " + std::to_string(size), with(c));
    }
    for (int32_t code : kBadCodes) {
      auto c = mc;
      c.backend = code;
      invalid(s, "config.backend " + std::to_string(code), with(c));
      c = mc;
      c.q_dtype = code == 3 ? 15 : code;
      invalid(s, "config.q_dtype " + std::to_string(c.q_dtype), with(c));
    }
    for (int32_t flag : kBadFlags) {
      auto c = mc;
      c.causal = flag;
      invalid(s, "config.causal " + std::to_string(flag), with(c));
      c = mc;
      c.return_lse_base_on_e = flag;
      invalid(s, "config.return_lse_base_on_e " + std::to_string(flag), with(c));
    }
    for (double x : {std::nan(""), double(INFINITY), -1.0}) {
      auto c = mc;
      c.sm_scale = x;
      invalid(s, "config.sm_scale " + std::to_string(x), with(c));
    }
    for (int64_t x : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::max()}) {
      auto c = mc;
      c.num_heads = x;
      invalid(s, "config.num_heads " + std::to_string(x), with(c));
      c = mc;
      c.page_size = x;
      invalid(s, "config.page_size " + std::to_string(x), with(c));
    }
    all.push_back(std::move(s));
  }
  flashcpp_batch_mla_plan* mla_plan = nullptr;
  {
    const auto qo = host_ints(DType::i32, {0, 3, 4}), kvp = host_ints(DType::i32, {0, 2, 3}), kvl = host_ints(DType::i32, {70, 5});
    const auto fw = cuda(DType::u8, {1 << 20}), iw = cuda(DType::u8, {1024});
    EXPECT_EQ(flashcpp_batch_mla_plan_create(&mc, &fw, &iw, &mla_pinned, &qo, &kvp, &kvl, nullptr, &mla_plan),
              FLASHCPP_SUCCESS)
        << flashcpp_last_error();
    destroy_.push_back([=] { flashcpp_batch_mla_plan_destroy(mla_plan); });
  }
  {
    Spec s;
    s.fn = "flashcpp_batch_mla_run";
    s.bundles = true;
    s.slots = {{"q_nope", cuda(DType::bf16, {4, 16, 512}), kIn},
               {"q_pe", cuda(DType::bf16, {4, 16, 64}), kIn},
               {"cache.ckv_cache", cuda(DType::bf16, {8, 64, 512}), kIn},
               {"cache.kpe_cache", cuda(DType::bf16, {8, 64, 64}), kIn},
               {"cache.kv_indices", cuda(DType::i32, {3}), kIn},
               {"out", cuda(DType::bf16, {4, 16, 512}), kOut},
               {"lse", cuda(DType::f32, {4, 16}), kOut | kOptional}};
    auto with = [](const flashcpp_batch_mla_plan* plan, bool null_cache) {
      return [=](const Ptrs& p) {
        const auto c = bundle<flashcpp_batch_mla_cache>(p[2], p[3], p[4]);
        return flashcpp_batch_mla_run(plan, p[0], p[1], null_cache ? nullptr : &c, p[5], p[6], nullptr);
      };
    };
    s.call = with(mla_plan, false);
    invalid(s, "plan NULL", with(nullptr, false));
    invalid(s, "cache NULL", with(mla_plan, true));
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- GDN
  {
    Spec s;
    s.fn = "flashcpp_gdn_prefill";
    s.slots = {{"output", cuda(DType::bf16, {8, 4, 128}), kOut},
               {"output_state", cuda(DType::f32, {2, 4, 128, 128}), kOut},
               {"q", cuda(DType::bf16, {8, 4, 128}), kIn},
               {"k", cuda(DType::bf16, {8, 2, 128}), kIn},
               {"v", cuda(DType::bf16, {8, 2, 128}), kIn},
               {"cu_seqlens", cuda(DType::i64, {3}), kIn},
               {"cu_seqlens_host", host_ints(DType::i64, {0, 3, 8}), kHost | kOptional},
               {"input_state", cuda(DType::f32, {2, 4, 128, 128}), kOptional},
               {"alpha", cuda(DType::f32, {8, 4}), kOptional},
               {"beta", cuda(DType::f32, {8, 4}), kOptional},
               {"workspace", cuda(DType::u8, {132 * 128}), kOut | kOptional}};
    auto with = [](double scale, uint32_t size, bool null_args) {
      return [=](const Ptrs& p) {
        const flashcpp_gdn_prefill_args a{size, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], scale};
        return flashcpp_gdn_prefill(null_args ? nullptr : &a, nullptr);
      };
    };
    s.call = with(0.0, sizeof(flashcpp_gdn_prefill_args), false);
    invalid(s, "args NULL", with(0.0, sizeof(flashcpp_gdn_prefill_args), true));
    for (uint32_t size : bad_sizes<flashcpp_gdn_prefill_args>())
      invalid(s, "args.struct_size " + std::to_string(size), with(0.0, size, false));
    for (double x : {std::nan(""), double(INFINITY), -double(INFINITY), -1.0})
      invalid(s, "args.scale " + std::to_string(x), with(x, sizeof(flashcpp_gdn_prefill_args), false));
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_gdn_prefill_workspace_bytes";
    s.call = [](const Ptrs&) {
      int64_t b = 0;
      return flashcpp_gdn_prefill_workspace_bytes(0, &b);
    };
    invalid(s, "out_bytes NULL", [](const Ptrs&) { return flashcpp_gdn_prefill_workspace_bytes(0, nullptr); });
    for (int32_t d : {-1, 64, 1 << 30, std::numeric_limits<int32_t>::min()})
      invalid(s, "device " + std::to_string(d), [d](const Ptrs&) {
        int64_t b = 0;
        return flashcpp_gdn_prefill_workspace_bytes(d, &b);
      });
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- fused MoE
  flashcpp_fused_moe_config moe = FLASHCPP_FUSED_MOE_CONFIG_INIT;
  moe.backend = FLASHCPP_MOE_SM90;
  {
    Spec s;
    s.fn = "flashcpp_fused_moe_runner_create";
    auto with = [](flashcpp_fused_moe_config c, bool null_config = false, bool null_out = false) {
      return [=](const Ptrs&) {
        flashcpp_fused_moe_runner* r = nullptr;
        const flashcpp_status st = flashcpp_fused_moe_runner_create(null_config ? nullptr : &c, null_out ? nullptr : &r);
        flashcpp_fused_moe_runner_destroy(r);
        return st;
      };
    };
    s.call = with(moe);
    invalid(s, "config NULL", with(moe, true));
    invalid(s, "out_runner NULL", with(moe, false, true));
    for (uint32_t size : bad_sizes<flashcpp_fused_moe_config>()) {
      auto c = moe;
      c.struct_size = size;
      invalid(s, "config.struct_size " + std::to_string(size), with(c));
    }
    for (int32_t code : {-1, 5, 15, 99, std::numeric_limits<int32_t>::min()}) {
      auto c = moe;
      c.quantization = code;
      invalid(s, "config.quantization " + std::to_string(code), with(c));
      c = moe;
      c.backend = code;
      invalid(s, "config.backend " + std::to_string(code), with(c));
      c = moe;
      c.activation_dtype = code == 5 ? 16 : code;
      invalid(s, "config.activation_dtype " + std::to_string(c.activation_dtype), with(c));
      c = moe;
      c.weight_dtype = code == 5 ? 16 : code;
      invalid(s, "config.weight_dtype " + std::to_string(c.weight_dtype), with(c));
      c = moe;
      c.output_dtype = code == 5 ? 16 : code;
      invalid(s, "config.output_dtype " + std::to_string(c.output_dtype), with(c));
    }
    for (int32_t d : {-1, 64, 1 << 30, std::numeric_limits<int32_t>::min()}) {
      auto c = moe;
      c.device = d;
      invalid(s, "config.device " + std::to_string(d), with(c));
    }
    all.push_back(std::move(s));
  }
  flashcpp_fused_moe_runner* runner = nullptr;
  EXPECT_EQ(flashcpp_fused_moe_runner_create(&moe, &runner), FLASHCPP_SUCCESS) << flashcpp_last_error();
  destroy_.push_back([=] { flashcpp_fused_moe_runner_destroy(runner); });
  flashcpp_fused_moe_args ma = FLASHCPP_FUSED_MOE_ARGS_INIT;
  const std::vector<Slot> moe_slots = {{"output", cuda(DType::bf16, {4, 256}), kOut},
                                       {"input", cuda(DType::bf16, {4, 256}), kIn},
                                       {"token_selected_experts", cuda(DType::i32, {4, 2}), kIn},
                                       {"token_final_scales", cuda(DType::f32, {4, 2}), kIn},
                                       {"fc1_weights", cuda(DType::bf16, {8, 256, 256}), kIn},
                                       {"fc2_weights", cuda(DType::bf16, {8, 256, 128}), kIn}};
  auto moe_args_cases = [&](Spec& s, auto with) {
    invalid(s, "args NULL", with(ma, true));
    for (uint32_t size : bad_sizes<flashcpp_fused_moe_args>()) {
      auto a = ma;
      a.struct_size = size;
      invalid(s, "args.struct_size " + std::to_string(size), with(a, false));
    }
    for (int64_t act : {int64_t{-1}, int64_t{5}, int64_t{8}, (int64_t{1} << 32) + 3, std::numeric_limits<int64_t>::min()}) {
      auto a = ma;
      a.activation = act;
      invalid(s, "args.activation " + std::to_string(act), with(a, false));
    }
    for (auto [field, value] : {std::pair{0, int64_t{0}}, std::pair{0, int64_t{-1}}, std::pair{1, int64_t{1}},
                                std::pair{1, int64_t{-1}}, std::pair{2, int64_t{0}}, std::pair{3, int64_t{1}},
                                std::pair{3, int64_t{-1}}, std::pair{0, std::numeric_limits<int64_t>::max()}}) {
      auto a = ma;
      int64_t* f[] = {&a.tp_size, &a.tp_rank, &a.ep_size, &a.ep_rank};
      *f[field] = value;
      const char* names[] = {"tp_size", "tp_rank", "ep_size", "ep_rank"};
      invalid(s, std::string("args.") + names[field] + " " + std::to_string(value), with(a, false));
    }
    for (int32_t flag : kBadFlags) {
      auto a = ma;
      a.enable_pdl = flag;
      invalid(s, "args.enable_pdl " + std::to_string(flag), with(a, false));
    }
  };
  for (int which = 0; which < 2; ++which) {
    Spec s;
    const bool tune = which == 1;
    s.fn = tune ? "flashcpp_fused_moe_tune" : "flashcpp_fused_moe_run";
    s.slots = moe_slots;
    auto with = [runner, tune](flashcpp_fused_moe_args a, bool null_args, bool null_runner = false) {
      return [=](const Ptrs& p) mutable {
        a.output = p[0];
        a.input = p[1];
        a.token_selected_experts = p[2];
        a.token_final_scales = p[3];
        a.fc1_weights = p[4];
        a.fc2_weights = p[5];
        flashcpp_fused_moe_runner* r = null_runner ? nullptr : runner;
        if (tune) {
          int64_t g1 = 0, g2 = 0;
          return flashcpp_fused_moe_tune(r, null_args ? nullptr : &a, nullptr, &g1, &g2);
        }
        return flashcpp_fused_moe_run(r, null_args ? nullptr : &a, nullptr);
      };
    };
    s.call = with(ma, false);
    invalid(s, "runner NULL", with(ma, false, true));
    moe_args_cases(s, with);
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_fused_moe_tactics";
    s.call = [runner](const Ptrs&) {
      int64_t g1 = 0, g2 = 0;
      return flashcpp_fused_moe_tactics(runner, 16, &g1, &g2);
    };
    for (int64_t tokens : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::min()})
      invalid(s, "tokens " + std::to_string(tokens), [runner, tokens](const Ptrs&) {
        int64_t g1 = 0, g2 = 0;
        return flashcpp_fused_moe_tactics(runner, tokens, &g1, &g2);
      });
    invalid(s, "runner NULL", [](const Ptrs&) {
      int64_t g1 = 0, g2 = 0;
      return flashcpp_fused_moe_tactics(nullptr, 16, &g1, &g2);
    });
    invalid(s, "out_gemm1 NULL", [runner](const Ptrs&) {
      int64_t g2 = 0;
      return flashcpp_fused_moe_tactics(runner, 16, nullptr, &g2);
    });
    invalid(s, "out_gemm2 NULL", [runner](const Ptrs&) {
      int64_t g1 = 0;
      return flashcpp_fused_moe_tactics(runner, 16, &g1, nullptr);
    });
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_fused_moe_set_tactics";
    s.call = [runner](const Ptrs&) { return flashcpp_fused_moe_set_tactics(runner, 16, -1, -1); };
    invalid(s, "runner NULL", [](const Ptrs&) { return flashcpp_fused_moe_set_tactics(nullptr, 16, -1, -1); });
    for (auto [tokens, g1, g2] : {std::tuple{int64_t{0}, int64_t{-1}, int64_t{-1}}, std::tuple{int64_t{-5}, int64_t{-1}, int64_t{-1}},
                                  std::tuple{int64_t{16}, int64_t{-2}, int64_t{-1}}, std::tuple{int64_t{16}, int64_t{-1}, int64_t{-2}},
                                  std::tuple{int64_t{16}, std::numeric_limits<int64_t>::max(), int64_t{-1}},
                                  std::tuple{int64_t{16}, int64_t{-1}, std::numeric_limits<int64_t>::min()}})
      invalid(s, "tokens " + std::to_string(tokens) + " gemm1 " + std::to_string(g1) + " gemm2 " + std::to_string(g2),
              [=](const Ptrs&) { return flashcpp_fused_moe_set_tactics(runner, tokens, g1, g2); });
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- sparse MLA
  // A valid call reaches our kernels' device lookup: refused there without a GPU (real device facts).
  const Expect device_lookup{false, "visible CUDA devices: 0"};
  flashcpp_mla_options mo = FLASHCPP_MLA_OPTIONS_INIT;
  mo.sm_scale = 0.05f;
  auto mla_options_cases = [&](Spec& s, auto with) {
    invalid(s, "options NULL", with(mo, true));
    for (uint32_t size : bad_sizes<flashcpp_mla_options>()) {
      auto o = mo;
      o.struct_size = size;
      invalid(s, "options.struct_size " + std::to_string(size), with(o, false));
    }
    for (float x : {std::nanf(""), float(INFINITY), -float(INFINITY), -1.0f}) {
      auto o = mo;
      o.sm_scale = x;
      invalid(s, "options.sm_scale " + std::to_string(x), with(o, false));
    }
    for (int32_t dv : {0, -1, 511, 576}) {
      auto o = mo;
      o.d_v = dv;
      invalid(s, "options.d_v " + std::to_string(dv), with(o, false));
    }
  };
  {
    Spec s;
    s.fn = "flashcpp_mla_sparse_prefill";
    s.bundles = true;
    s.baseline = device_lookup;
    s.baseline_launches = true;
    s.slots = {{"tensors.q", cuda(DType::bf16, {4, 64, 576}), kIn},
               {"tensors.kv", cuda(DType::bf16, {300, 1, 576}), kIn},
               {"tensors.indices", cuda(DType::i32, {4, 1, 128}), kIn},
               {"tensors.attn_sink", cuda(DType::f32, {64}), kOptional},
               {"tensors.topk_length", cuda(DType::i32, {4}), kOptional},
               {"tensors.out", cuda(DType::bf16, {4, 64, 512}), kOut},
               {"tensors.max_logits", cuda(DType::f32, {4, 64}), kOut | kOptional},
               {"tensors.lse", cuda(DType::f32, {4, 64}), kOut}};
    auto with = [](flashcpp_mla_options o, bool null_options, bool null_tensors = false) {
      return [=](const Ptrs& p) {
        const auto t = bundle<flashcpp_mla_prefill_tensors>(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
        return flashcpp_mla_sparse_prefill(null_tensors ? nullptr : &t, null_options ? nullptr : &o, nullptr);
      };
    };
    s.call = with(mo, false);
    invalid(s, "tensors NULL", with(mo, false, true));
    mla_options_cases(s, with);
    all.push_back(std::move(s));
  }
  flashcpp_mla_decode_config mdc = FLASHCPP_MLA_DECODE_CONFIG_INIT;
  mdc.batch = 2;
  mdc.s_q = 1;
  mdc.h_q = 64;
  mdc.topk = 128;
  mdc.num_sms = 132;
  flashcpp_mla_decode_config mdc4 = mdc;
  mdc4.d_qk = 512;
  mdc4.extra_topk = 64;
  auto decode_config_cases = [&](Spec& s, flashcpp_mla_decode_config base, auto with) {
    invalid(s, "config NULL", with(base, true));
    for (uint32_t size : bad_sizes<flashcpp_mla_decode_config>()) {
      auto c = base;
      c.struct_size = size;
      invalid(s, "config.struct_size " + std::to_string(size), with(c, false));
    }
    const int32_t imin = std::numeric_limits<int32_t>::min(), imax = std::numeric_limits<int32_t>::max();
    for (int32_t x : {0, -1, imin, imax}) {
      auto c = base;
      if (x != imax) {  // a size query for 2^31 - 1 requests has an answer
        c.batch = x;
        invalid(s, "config.batch " + std::to_string(x), with(c, false));
      }
      c = base;
      c.s_q = x;
      invalid(s, "config.s_q " + std::to_string(x), with(c, false));
      c = base;
      c.h_q = x;
      invalid(s, "config.h_q " + std::to_string(x), with(c, false));
    }
    for (int32_t x : {0, -64, 100, imin}) {
      auto c = base;
      c.topk = x;
      invalid(s, "config.topk " + std::to_string(x), with(c, false));
    }
    for (int32_t x : {0, -1, 575, 1024}) {
      auto c = base;
      c.d_qk = x;
      invalid(s, "config.d_qk " + std::to_string(x), with(c, false));
    }
    for (int32_t x : {-1, 100000, imin}) {
      auto c = base;
      c.num_sms = x;
      invalid(s, "config.num_sms " + std::to_string(x), with(c, false));
    }
    for (int32_t x : {-1, 64, 1 << 30, imin}) {
      auto c = base;
      c.device_id = x;
      invalid(s, "config.device_id " + std::to_string(x), with(c, false));
    }
    for (int32_t x : {-64, 100, imin}) {
      auto c = base;
      c.extra_topk = x;
      invalid(s, "config.extra_topk " + std::to_string(x), with(c, false));
    }
  };
  flashcpp_mla_decode_plan_sizes sizes{}, sizes4{};
  EXPECT_EQ(flashcpp_mla_decode_plan(&mdc, nullptr, nullptr, &sizes, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  EXPECT_EQ(flashcpp_mla_decode_plan(&mdc4, nullptr, nullptr, &sizes4, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();
  EXPECT_EQ(sizes.split, 1);
  {
    Spec s;
    s.fn = "flashcpp_mla_decode_plan";
    s.call = [mdc](const Ptrs&) {
      flashcpp_mla_decode_plan_sizes z;
      return flashcpp_mla_decode_plan(&mdc, nullptr, nullptr, &z, nullptr);
    };
    decode_config_cases(s, mdc, [](flashcpp_mla_decode_config c, bool null_config) {
      return [=](const Ptrs&) {
        flashcpp_mla_decode_plan_sizes z;
        return flashcpp_mla_decode_plan(null_config ? nullptr : &c, nullptr, nullptr, &z, nullptr);
      };
    });
    all.push_back(std::move(s));
  }
  {
    // The plan with its buffers: reaches the device lookup when valid.
    Spec s;
    s.fn = "flashcpp_mla_decode_plan";
    s.baseline = device_lookup;
    s.baseline_launches = true;
    const int64_t parts = sizes.num_sm_parts;
    s.slots = {{"sched_meta", to_c(dev(DType::i32, {parts, FLASHCPP_MLA_SCHED_META_INTS})), kOut},
               {"num_splits", to_c(dev(DType::i32, {sizes.num_splits_elems})), kOut}};
    auto with = [](flashcpp_mla_decode_config c, bool null_config) {
      return [=](const Ptrs& p) {
        flashcpp_mla_decode_plan_sizes z;
        return flashcpp_mla_decode_plan(null_config ? nullptr : &c, p[0], p[1], &z, nullptr);
      };
    };
    s.call = with(mdc, false);
    decode_config_cases(s, mdc, with);
    all.push_back(std::move(s));
  }
  {
    // The plan by lengths (V4, both lengths optional): its buffers and lengths mutated one at a time.
    Spec s;
    s.fn = "flashcpp_mla_decode_plan_by_lengths";
    s.baseline = device_lookup;
    s.baseline_launches = true;
    s.slots = {{"sched_meta", to_c(dev(DType::i32, {sizes4.num_sm_parts, FLASHCPP_MLA_SCHED_META_INTS})), kOut},
               {"num_splits", to_c(dev(DType::i32, {sizes4.num_splits_elems})), kOut},
               {"topk_length", to_c(dev(DType::i32, {mdc4.batch})), kIn | kOptional},
               {"extra_topk_length", to_c(dev(DType::i32, {mdc4.batch})), kIn | kOptional}};
    auto with = [](flashcpp_mla_decode_config c, bool null_config) {
      return [=](const Ptrs& p) {
        flashcpp_mla_decode_plan_sizes z;
        return flashcpp_mla_decode_plan_by_lengths(null_config ? nullptr : &c, p[0], p[1], p[2], p[3], &z, nullptr);
      };
    };
    s.call = with(mdc4, false);
    decode_config_cases(s, mdc4, with);
    // The extra pool's lengths need a V4 plan with an extra pool.
    flashcpp_mla_decode_config no_extra = mdc4;
    no_extra.extra_topk = 0;
    for (const auto& [what, c] : {std::pair{"a V3.2 config", mdc}, std::pair{"no extra pool", no_extra}})
      invalid(s, std::string("extra_topk_length with ") + what, [c](const Ptrs& p) {
        flashcpp_mla_decode_plan_sizes z;
        return flashcpp_mla_decode_plan_by_lengths(&c, p[0], p[1], nullptr, p[3], &z, nullptr);
      });
    all.push_back(std::move(s));
  }
  for (int which = 0; which < 2; ++which) {
    const bool v4 = which == 1;
    const flashcpp_mla_decode_config base = v4 ? mdc4 : mdc;
    const flashcpp_mla_decode_plan_sizes& z = v4 ? sizes4 : sizes;
    Spec s;
    s.fn = v4 ? "flashcpp_mla_sparse_decode_v4" : "flashcpp_mla_sparse_decode";
    s.bundles = true;
    s.baseline = device_lookup;
    s.baseline_launches = true;
    const int64_t d = v4 ? 512 : 576, bytes = v4 ? 584 : 656;
    s.slots = {{"tensors.q", cuda(DType::bf16, {2, 1, 64, d}), kIn},
               {"tensors.kv_cache", cuda(DType::u8, {4, 64, 1, bytes}), kIn},
               {"tensors.indices", cuda(DType::i32, {2, 1, 128}), kIn},
               {"tensors.topk_length", cuda(DType::i32, {2}), kOptional},
               {"tensors.attn_sink", cuda(DType::f32, {64}), kOptional},
               {"tensors.out", cuda(DType::bf16, {2, 1, 64, 512}), kOut},
               {"tensors.lse", cuda(DType::f32, {2, 1, 64}), kOut},
               {"tensors.sched_meta", to_c(dev(DType::i32, {z.num_sm_parts, FLASHCPP_MLA_SCHED_META_INTS})), kIn | kOptional},
               {"tensors.num_splits", to_c(dev(DType::i32, {z.num_splits_elems})), kIn | kOptional},
               {"tensors.lse_accum", to_c(dev(DType::f32, {z.lse_accum_elems})), kOut | kOptional},
               {"tensors.o_accum", to_c(dev(DType::f32, {z.o_accum_elems})), kOut | kOptional}};
    if (v4) {
      s.slots.push_back({"tensors.extra_kv_cache", cuda(DType::u8, {2, 64, 1, 584}), kOptional});
      s.slots.push_back({"tensors.extra_indices", cuda(DType::i32, {2, 1, 64}), kOptional});
      s.slots.push_back({"tensors.extra_topk_length", cuda(DType::i32, {2}), kOptional});
    }
    auto with = [v4](flashcpp_mla_decode_config c, flashcpp_mla_options o, bool null_config, bool null_options,
                     bool null_tensors) {
      return [=](const Ptrs& p) {
        auto t = bundle<flashcpp_mla_decode_tensors>();
        t.q = p[0];
        t.kv_cache = p[1];
        t.indices = p[2];
        t.topk_length = p[3];
        t.attn_sink = p[4];
        t.out = p[5];
        t.lse = p[6];
        t.sched_meta = p[7];
        t.num_splits = p[8];
        t.lse_accum = p[9];
        t.o_accum = p[10];
        if (v4) {
          t.extra_kv_cache = p[11];
          t.extra_indices = p[12];
          t.extra_topk_length = p[13];
        }
        auto f = v4 ? flashcpp_mla_sparse_decode_v4 : flashcpp_mla_sparse_decode;
        return f(null_config ? nullptr : &c, null_tensors ? nullptr : &t, null_options ? nullptr : &o, nullptr);
      };
    };
    s.call = with(base, mo, false, false, false);
    invalid(s, "tensors NULL", with(base, mo, false, false, true));
    decode_config_cases(s, base, [=](flashcpp_mla_decode_config c, bool null_config) {
      return with(c, mo, null_config, false, false);
    });
    mla_options_cases(s, [=](flashcpp_mla_options o, bool null_options) { return with(base, o, false, null_options, false); });
    if (!v4) {
      const flashcpp_tensor extra = cuda(DType::u8, {2, 64, 1, 584});
      invalid(s, "tensors.extra_kv_cache given (V3.2)", [=](const Ptrs& p) {
        auto t = bundle<flashcpp_mla_decode_tensors>();
        t.q = p[0];
        t.kv_cache = p[1];
        t.indices = p[2];
        t.out = p[5];
        t.lse = p[6];
        t.sched_meta = p[7];
        t.num_splits = p[8];
        t.lse_accum = p[9];
        t.o_accum = p[10];
        t.extra_kv_cache = &extra;
        return flashcpp_mla_sparse_decode(&base, &t, &mo, nullptr);
      });
    }
    all.push_back(std::move(s));
  }
  // Dense decode: the size query and the run.
  flashcpp_mla_dense_decode_config ddc = FLASHCPP_MLA_DENSE_DECODE_CONFIG_INIT;
  ddc.batch = 2;
  ddc.s_q = 2;
  ddc.h_q = 64;
  ddc.block_size = 64;
  ddc.max_blocks = 4;
  ddc.num_sms = 132;
  auto dense_config_cases = [&](Spec& s, auto with) {
    invalid(s, "config NULL", with(ddc, true));
    for (uint32_t size : bad_sizes<flashcpp_mla_dense_decode_config>()) {
      auto c = ddc;
      c.struct_size = size;
      invalid(s, "config.struct_size " + std::to_string(size), with(c, false));
    }
    const int32_t imin = std::numeric_limits<int32_t>::min(), imax = std::numeric_limits<int32_t>::max();
    for (int32_t x : {0, -1, imin}) {
      using Field = int32_t flashcpp_mla_dense_decode_config::*;
      for (const auto& [name, field] : {std::pair<const char*, Field>{"batch", &flashcpp_mla_dense_decode_config::batch},
                                        {"s_q", &flashcpp_mla_dense_decode_config::s_q},
                                        {"h_q", &flashcpp_mla_dense_decode_config::h_q},
                                        {"block_size", &flashcpp_mla_dense_decode_config::block_size},
                                        {"max_blocks", &flashcpp_mla_dense_decode_config::max_blocks}}) {
        auto c = ddc;
        c.*field = x;
        invalid(s, std::string("config.") + name + " " + std::to_string(x), with(c, false));
      }
    }
    for (int32_t x : {imax, 65536}) {
      auto c = ddc;
      c.s_q = x;
      invalid(s, "config.s_q " + std::to_string(x), with(c, false));
      c = ddc;
      c.h_q = x;
      invalid(s, "config.h_q " + std::to_string(x), with(c, false));
    }
    {
      auto c = ddc;
      c.max_blocks = imax;  // max_blocks * block_size overflows int32 slots
      invalid(s, "config.max_blocks 2^31 - 1", with(c, false));
    }
    for (int32_t x : {-1, 100000, imin}) {
      auto c = ddc;
      c.num_sms = x;
      invalid(s, "config.num_sms " + std::to_string(x), with(c, false));
    }
    for (int32_t x : {2, -1, imin}) {
      auto c = ddc;
      c.causal = x;
      invalid(s, "config.causal " + std::to_string(x), with(c, false));
    }
    for (int32_t x : {-1, 64, 1 << 30, imin}) {
      auto c = ddc;
      c.device_id = x;
      invalid(s, "config.device_id " + std::to_string(x), with(c, false));
    }
  };
  flashcpp_mla_dense_decode_sizes dsz{};
  EXPECT_EQ(flashcpp_mla_dense_decode_sizes_for(&ddc, &dsz), FLASHCPP_SUCCESS) << flashcpp_last_error();
  {
    Spec s;
    s.fn = "flashcpp_mla_dense_decode_sizes_for";
    auto with = [](flashcpp_mla_dense_decode_config c, bool null_config) {
      return [=](const Ptrs&) {
        flashcpp_mla_dense_decode_sizes z;
        return flashcpp_mla_dense_decode_sizes_for(null_config ? nullptr : &c, &z);
      };
    };
    s.call = with(ddc, false);
    invalid(s, "sizes NULL", [ddc](const Ptrs&) { return flashcpp_mla_dense_decode_sizes_for(&ddc, nullptr); });
    dense_config_cases(s, with);
    all.push_back(std::move(s));
  }
  const std::vector<Slot> dense_ws = {
      {"workspace.sched_meta", to_c(dev(DType::i32, {dsz.num_sm_parts, FLASHCPP_MLA_SCHED_META_INTS})), kOut},
      {"workspace.num_splits", to_c(dev(DType::i32, {dsz.num_splits_elems})), kOut},
      {"workspace.lse_accum", to_c(dev(DType::f32, {dsz.lse_accum_elems})), kOut},
      {"workspace.o_accum", to_c(dev(DType::f32, {dsz.o_accum_elems})), kOut},
      {"workspace.indices", to_c(dev(DType::i32, {dsz.indices_elems})), kOut},
      {"workspace.token_lengths", to_c(dev(DType::i32, {dsz.token_lengths_elems})), kOut}};
  // The workspace struct from the slots at `at` (six of them).
  auto dense_ws_of = [](const Ptrs& p, size_t at) {
    return bundle<flashcpp_mla_dense_decode_workspace>(p[at], p[at + 1], p[at + 2], p[at + 3], p[at + 4], p[at + 5]);
  };
  {
    Spec s;
    s.fn = "flashcpp_mla_dense_decode_plan";
    s.bundles = true;
    s.baseline = device_lookup;
    s.baseline_launches = true;
    s.slots = {{"block_table", cuda(DType::i32, {2, 4}), kIn}, {"cache_seqlens", cuda(DType::i32, {2}), kIn}};
    s.slots.insert(s.slots.end(), dense_ws.begin(), dense_ws.end());
    auto with = [dense_ws_of](flashcpp_mla_dense_decode_config c, bool null_config, bool null_ws = false) {
      return [=](const Ptrs& p) {
        const flashcpp_mla_dense_decode_workspace w = dense_ws_of(p, 2);
        return flashcpp_mla_dense_decode_plan(null_config ? nullptr : &c, p[0], p[1], null_ws ? nullptr : &w, nullptr);
      };
    };
    s.call = with(ddc, false);
    invalid(s, "workspace NULL", with(ddc, false, true));
    dense_config_cases(s, with);
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_mla_dense_decode";
    s.bundles = true;
    s.baseline = device_lookup;
    s.baseline_launches = true;
    const flashcpp_mla_dense_decode_options ddo = FLASHCPP_MLA_DENSE_DECODE_OPTIONS_INIT;
    s.slots = {{"tensors.q", cuda(DType::bf16, {2, 2, 64, 576}), kIn},
               {"tensors.kv_cache", cuda(DType::bf16, {8, 64, 1, 576}), kIn},
               {"tensors.attn_sink", cuda(DType::f32, {64}), kOptional},
               {"tensors.out", cuda(DType::bf16, {2, 2, 64, 512}), kOut},
               {"tensors.lse", cuda(DType::f32, {2, 2, 64}), kOut}};
    s.slots.insert(s.slots.end(), dense_ws.begin(), dense_ws.end());
    auto with = [dense_ws_of](flashcpp_mla_dense_decode_config c, flashcpp_mla_dense_decode_options o, bool null_config,
                              bool null_options, bool null_tensors, bool null_ws = false) {
      return [=](const Ptrs& p) {
        const auto t = bundle<flashcpp_mla_dense_decode_tensors>(p[0], p[1], p[2], p[3], p[4]);
        const flashcpp_mla_dense_decode_workspace w = dense_ws_of(p, 5);
        return flashcpp_mla_dense_decode(null_config ? nullptr : &c, null_tensors ? nullptr : &t, null_ws ? nullptr : &w,
                                         null_options ? nullptr : &o, nullptr);
      };
    };
    s.call = with(ddc, ddo, false, false, false);
    invalid(s, "tensors NULL", with(ddc, ddo, false, false, true));
    invalid(s, "workspace NULL", with(ddc, ddo, false, false, false, true));
    dense_config_cases(s, [=](flashcpp_mla_dense_decode_config c, bool null_config) {
      return with(c, ddo, null_config, false, false);
    });
    invalid(s, "options NULL", with(ddc, ddo, false, true, false));
    for (uint32_t size : bad_sizes<flashcpp_mla_dense_decode_options>()) {
      auto o = ddo;
      o.struct_size = size;
      invalid(s, "options.struct_size " + std::to_string(size), with(ddc, o, false, false, false));
    }
    for (float x : {std::nanf(""), float(INFINITY), -float(INFINITY), -1.0f}) {
      auto o = ddo;
      o.sm_scale = x;
      invalid(s, "options.sm_scale " + std::to_string(x), with(ddc, o, false, false, false));
    }
    all.push_back(std::move(s));
  }
  // The FP8 cache conversions: bf16 [2, 576] <-> V3.2 rows [2, 656], bf16 [2, 2, 1, 512] <-> V4 pages [2, 2, 1, 584].
  using Convert = flashcpp_status (*)(const flashcpp_tensor*, const flashcpp_tensor*, void*);
  const struct {
    const char* fn;
    Convert f;
    bool v4, quantize;
  } conversions[] = {
      {"flashcpp_mla_quantize_kv_cache_fp8", flashcpp_mla_quantize_kv_cache_fp8, false, true},
      {"flashcpp_mla_quantize_kv_cache_fp8_v4", flashcpp_mla_quantize_kv_cache_fp8_v4, true, true},
      {"flashcpp_mla_dequantize_kv_cache_fp8", flashcpp_mla_dequantize_kv_cache_fp8, false, false},
      {"flashcpp_mla_dequantize_kv_cache_fp8_v4", flashcpp_mla_dequantize_kv_cache_fp8_v4, true, false},
  };
  for (const auto& c : conversions) {
    Spec s;
    s.fn = c.fn;
    const auto values = c.v4 ? host(DType::bf16, {2, 2, 1, 512}) : host(DType::bf16, {2, 576});
    const auto fp8 = c.v4 ? host(DType::u8, {2, 2, 1, 584}) : host(DType::u8, {2, 656});
    if (c.quantize)
      s.slots = {{"kv", values, kIn | kHost}, {"out", fp8, kOut | kHost}};
    else
      s.slots = {{"cache", fp8, kIn | kHost}, {"out", values, kOut | kHost}};
    s.call = [f = c.f](const Ptrs& p) { return f(p[0], p[1], nullptr); };
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_mla_get_device_info";
    s.baseline = cuda_device_count() > 0 ? Expect{} : Expect{false, "visible CUDA devices: 0"};
    s.call = [](const Ptrs&) {
      flashcpp_mla_device_info info;
      return flashcpp_mla_get_device_info(0, &info);
    };
    invalid(s, "info NULL", [](const Ptrs&) { return flashcpp_mla_get_device_info(0, nullptr); });
    for (int32_t d : {-1, 1 << 30, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()})
      invalid(s, "device_id " + std::to_string(d), [d](const Ptrs&) {
        flashcpp_mla_device_info info;
        return flashcpp_mla_get_device_info(d, &info);
      });
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- DLPack, runtime
  {
    Spec s;
    s.fn = "flashcpp_tensor_from_dlpack";
    static float data[6];
    static int64_t shape[2] = {2, 3}, strides[2] = {3, 1};
    DLTensor base{};
    base.data = data;
    base.device = {kDLCPU, 0};
    base.ndim = 2;
    base.dtype = {kDLFloat, 32, 1};
    base.shape = shape;
    base.strides = strides;
    auto with = [](DLTensor d, bool null_src = false, bool null_out = false) {
      return [=](const Ptrs&) {
        flashcpp_tensor t{};
        return flashcpp_tensor_from_dlpack(null_src ? nullptr : &d, null_out ? nullptr : &t);
      };
    };
    s.call = with(base);
    invalid(s, "src NULL", with(base, true));
    invalid(s, "out NULL", with(base, false, true));
    for (int32_t n : {-1, 7, std::numeric_limits<int32_t>::min()}) {
      auto d = base;
      d.ndim = n;
      invalid(s, "ndim " + std::to_string(n), with(d));
    }
    {
      auto d = base;
      d.shape = nullptr;
      invalid(s, "shape NULL", with(d));
      d = base;
      d.data = nullptr;
      invalid(s, "data NULL", with(d));
      static int64_t neg[2] = {2, -3}, huge[3] = {2, int64_t{1} << 32, int64_t{1} << 32};
      d = base;
      d.shape = neg;
      invalid(s, "negative size", with(d));
      d = base;
      d.ndim = 3;
      d.shape = huge;
      d.strides = nullptr;  // the compact stride of dim 0, 2^64, does not fit in int64
      invalid(s, "compact strides overflow", with(d));
    }
    for (auto [code, bits, lanes] : {std::tuple{kDLFloat, 32, 2}, std::tuple{kDLFloat, 7, 1}, std::tuple{kDLInt, 4, 1},
                                     std::tuple{kDLOpaqueHandle, 64, 1}, std::tuple{kDLBfloat, 32, 1}, std::tuple{kDLFloat, 0, 0}}) {
      auto d = base;
      d.dtype = {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), static_cast<uint16_t>(lanes)};
      invalid(s, "dtype " + std::to_string(code) + "." + std::to_string(bits) + "x" + std::to_string(lanes), with(d));
    }
    for (auto [type, id] : {std::pair{DLDeviceType(0), 0}, std::pair{kDLCUDA, -1}, std::pair{DLDeviceType(99), 0},
                            std::pair{kDLVulkan, 0}}) {
      auto d = base;
      d.device = {type, id};
      invalid(s, "device " + std::to_string(int(type)) + ":" + std::to_string(id), with(d));
    }
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_prepare";
    s.call = [](const Ptrs&) { return flashcpp_prepare(nullptr, 0); };
    invalid(s, "count -1", [](const Ptrs&) { return flashcpp_prepare(nullptr, -1); });
    invalid(s, "count INT32_MIN", [](const Ptrs&) { return flashcpp_prepare(nullptr, std::numeric_limits<int32_t>::min()); });
    invalid(s, "uris NULL, count 1", [](const Ptrs&) { return flashcpp_prepare(nullptr, 1); });
    invalid(s, "uris[0] NULL", [](const Ptrs&) {
      const char* const u[] = {nullptr};
      return flashcpp_prepare(u, 1);
    });
    for (const char* name : {"", "..", "../norm", "a/b", "norm name", "norm\n", "\x7f", "/etc/passwd", "norm..x"})
      invalid(s, std::string("uri '") + name + "'", [name](const Ptrs&) {
        const char* const u[] = {name};
        return flashcpp_prepare(u, 1);
      });
    all.push_back(std::move(s));
  }
  {
    Spec s;
    s.fn = "flashcpp_set_log_callback";
    s.call = [](const Ptrs&) { return flashcpp_set_log_callback(nullptr, nullptr); };
    s.survive.emplace_back("a callback", [](const Ptrs&) {
      return flashcpp_set_log_callback([](int32_t, const char*, void*) {}, reinterpret_cast<void*>(uintptr_t{1}));
    });
    all.push_back(std::move(s));
  }

  // ---------------------------------------------------------------------------------------------- no failure mode
  // Functions without a status: any input must only return.
  auto survivor = [&](const char* fn, std::vector<std::pair<std::string, std::function<void()>>> cases) {
    Spec s;
    s.fn = fn;
    s.baseline = Expect{};
    auto first = cases.front().second;
    s.call = [first](const Ptrs&) {
      first();
      return FLASHCPP_SUCCESS;
    };
    for (auto& [what, c] : cases)
      s.survive.emplace_back(what, [c = c](const Ptrs&) {
        c();
        return FLASHCPP_SUCCESS;
      });
    all.push_back(std::move(s));
  };
  survivor("flashcpp_last_error", {{"call", [] { (void)std::strlen(flashcpp_last_error()); }}});
  survivor("flashcpp_abi_version", {{"call", [] { (void)flashcpp_abi_version(); }}});
  survivor("flashcpp_version", {{"call", [] { (void)std::strlen(flashcpp_version()); }}});
  survivor("flashcpp_status_name", {{"every code", [] {
                                       for (int s : {0, 1, 10, 11, -1, 99, std::numeric_limits<int>::min(),
                                                     std::numeric_limits<int>::max()})
                                         (void)std::strlen(flashcpp_status_name(static_cast<flashcpp_status>(s)));
                                     }}});
  survivor("flashcpp_attention_options_init", {{"NULL", [] { flashcpp_attention_options_init(nullptr); }}});
  survivor("flashcpp_batch_prefill_config_init", {{"NULL", [] { flashcpp_batch_prefill_config_init(nullptr); }}});
  survivor("flashcpp_batch_decode_config_init", {{"NULL", [] { flashcpp_batch_decode_config_init(nullptr); }}});
  survivor("flashcpp_recommended_workspace_bytes",
           {{"both NULL", [] { flashcpp_recommended_workspace_bytes(nullptr, nullptr); }},
            {"one NULL", [] {
               int64_t f = 0;
               flashcpp_recommended_workspace_bytes(&f, nullptr);
               flashcpp_recommended_workspace_bytes(nullptr, &f);
             }}});
  survivor("flashcpp_softmax_workspace_bytes", {{"any sizes", [] {
                                                  for (int64_t r : {int64_t{-1}, int64_t{0}, int64_t{128},
                                                                    std::numeric_limits<int64_t>::max()})
                                                    for (int64_t v : {int64_t{-1}, int64_t{24576},
                                                                      std::numeric_limits<int64_t>::max(),
                                                                      std::numeric_limits<int64_t>::min()})
                                                      if (flashcpp_softmax_workspace_bytes(r, v) < 0) std::abort();
                                                }}});
  survivor("flashcpp_sampling_row_states_bytes", {{"call", [] { (void)flashcpp_sampling_row_states_bytes(); }}});
  survivor("flashcpp_batch_prefill_plan_destroy", {{"NULL", [] { flashcpp_batch_prefill_plan_destroy(nullptr); }}});
  survivor("flashcpp_batch_decode_plan_destroy", {{"NULL", [] { flashcpp_batch_decode_plan_destroy(nullptr); }}});
  survivor("flashcpp_batch_mla_plan_destroy", {{"NULL", [] { flashcpp_batch_mla_plan_destroy(nullptr); }}});
  survivor("flashcpp_fused_moe_runner_destroy", {{"NULL", [] { flashcpp_fused_moe_runner_destroy(nullptr); }}});
  survivor("flashcpp_batch_decode_uses_tensor_cores",
           {{"NULL", [] {
               if (flashcpp_batch_decode_uses_tensor_cores(nullptr) != 0) std::abort();
             }},
            {"a CUDA-core plan", [decode_plan] {
               if (flashcpp_batch_decode_uses_tensor_cores(decode_plan) != 0) std::abort();
             }}});
  return all;
}

// The exported functions, read from the C headers (so a new one cannot go untested).
std::set<std::string> declared_functions() {
  std::set<std::string> names;
  const std::regex decl(R"((?:^|\n)[A-Za-z_][A-Za-z0-9_ \t\*]*[ \t\*](flashcpp_[a-z0-9_]+)\()");
  for (const auto& entry : fs::directory_iterator(fs::path(FLASHCPP_SOURCE_DIR) / "include" / "flashcpp" / "c")) {
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    for (std::sregex_iterator it(text.begin(), text.end(), decl), end; it != end; ++it) names.insert((*it)[1]);
  }
  return names;
}

TEST_F(CapiHostile, TheForkedRunnerReportsCrashesAndStatuses) {
  const Outcome crash = run_forked([]() -> flashcpp_status { std::abort(); });
  EXPECT_FALSE(crash.returned);
  EXPECT_EQ(crash.signal, SIGABRT);
  const Outcome ok = run_forked([] { return FLASHCPP_NOT_FOUND; });
  EXPECT_TRUE(ok.returned);
  EXPECT_EQ(ok.status, FLASHCPP_NOT_FOUND);
  // The parallel runner keeps each outcome with its call (tests/support/forked_call.hpp serves the probe test too).
  const std::vector<Outcome> all = run_all_forked(
      {[] { return FLASHCPP_SUCCESS; }, []() -> flashcpp_status { std::abort(); }, [] { return FLASHCPP_NOT_FOUND; }}, 2);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_TRUE(all[0].returned);
  EXPECT_EQ(all[0].status, FLASHCPP_SUCCESS);
  EXPECT_FALSE(all[1].returned);
  EXPECT_EQ(all[1].signal, SIGABRT);
  EXPECT_EQ(all[2].status, FLASHCPP_NOT_FOUND);
}

TEST_F(CapiHostile, TheHeadersDeclareTheFunctionsThisTestCovers) {
  const std::set<std::string> declared = declared_functions();
  std::set<std::string> covered;
  for (const Spec& s : specs()) covered.insert(s.fn);
  EXPECT_EQ(declared.size(), 81u);
  EXPECT_EQ(declared, covered);
}

TEST_F(CapiHostile, EveryExportedFunctionRefusesHostileInputWithoutASignal) {
  const bool gpu = cuda_device_count() > 0;
  std::vector<Case> cases;
  std::set<std::string> fns;
  for (const Spec& s : specs()) {
    expand(s, cases, gpu);
    fns.insert(s.fn);
  }
  ASSERT_FALSE(HasFailure()) << "a plan, runner or size query the cases need could not be made";
  int invalid = 0, refused = 0, abnormal = 0, success_on_invalid = 0, silent = 0, baselines = 0, survivors = 0;
  std::map<std::string, int> per_fn;
  std::map<int, int> by_status;
  const std::regex names_what(R"(arguments? '|DLTensor\.|FlashInfer module ')");
  // FLASHCPP_HOSTILE_LOG=<file>: every invalid case with its status and message, one a line.
  std::ofstream log;
  if (const char* path = std::getenv("FLASHCPP_HOSTILE_LOG")) log.open(path);
  std::vector<std::string> failures;
  std::vector<std::function<flashcpp_status()>> calls;
  for (const Case& c : cases) calls.push_back(c.call);
  const size_t parallel = std::max(2u, std::thread::hardware_concurrency());
  const std::vector<Outcome> outcomes = run_all_forked(calls, parallel);
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const Outcome& o = outcomes[k];
    ++per_fn[c.fn];
    const std::string where = c.fn + " [" + c.what + "]";
    if (!o.returned) {
      ++abnormal;
      failures.push_back(where + ": did not return (signal " + std::to_string(o.signal) + ", exit " +
                         std::to_string(o.exit_code) + ")");
      continue;
    }
    switch (c.kind) {
      case Case::invalid:
        ++invalid;
        if (o.status == FLASHCPP_SUCCESS) {
          ++success_on_invalid;
          failures.push_back(where + ": SUCCESS on invalid input");
        } else if (o.message.empty() || o.status < FLASHCPP_INVALID_ARGUMENT || o.status > FLASHCPP_UNTRUSTED ||
                   o.status == FLASHCPP_INTERNAL || o.status == FLASHCPP_FFI_ERROR) {
          // No message, an unknown status, or not refused by flashcpp's checks (an internal error, or the module's).
          ++silent;
          failures.push_back(where + ": status " + std::to_string(o.status) + ": " + o.message);
        } else if (!std::regex_search(o.message, names_what)) {
          ++silent;  // refused, but the message names neither an argument nor a DLTensor field
          failures.push_back(where + ": the message names no argument: " + o.message);
        } else if (o.message.find(c.expect.fragment) == std::string::npos) {
          ++silent;  // refused, but not for the rule the case breaks (the bundle-size cases name theirs)
          failures.push_back(where + ": the message lacks '" + c.expect.fragment + "': " + o.message);
        } else {
          ++refused;
          ++by_status[o.status];
        }
        if (log) log << where << "\t" << o.status << "\t" << o.message << "\n";
        break;
      case Case::baseline:
        ++baselines;
        if (c.expect.success ? o.status != FLASHCPP_SUCCESS
                             : (o.status == FLASHCPP_SUCCESS || o.message.find(c.expect.fragment) == std::string::npos))
          failures.push_back(where + ": the valid call returned " + std::to_string(o.status) + ": " + o.message);
        break;
      case Case::survive:
        ++survivors;
        break;
    }
  }
  std::printf("hostile C ABI: %zu cases over %zu functions: %d invalid, %d refused with a message, %d signals or "
              "sanitizer aborts, %d SUCCESS on invalid, %d not refused by a check (no message naming the argument, or an internal or module error); %d valid baselines, %d "
              "no-status calls\n",
              cases.size(), fns.size(), invalid, refused, abnormal, success_on_invalid, silent, baselines, survivors);
  for (const auto& [status, n] : by_status)
    std::printf("  refused with %s: %d\n", flashcpp_status_name(static_cast<flashcpp_status>(status)), n);
  for (size_t i = 0; i < failures.size() && i < 80; ++i) ADD_FAILURE() << failures[i];
  EXPECT_EQ(abnormal, 0);
  EXPECT_EQ(success_on_invalid, 0);
  EXPECT_EQ(silent, 0);
  EXPECT_EQ(refused, invalid);
  EXPECT_EQ(fns.size(), 81u);
  EXPECT_GT(cases.size(), 1500u);
}

}  // namespace
}  // namespace flashcpp::testing
