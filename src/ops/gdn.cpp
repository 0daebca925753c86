// GDN prefill (SM90): validation, workspace, device switch and packing (facts sheet A.3, B.5).
#include "flashcpp/gdn.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.hpp"
#include "core/elf_symbols.hpp"
#include "ffi/ffi.hpp"
#include "ops/common.hpp"
#include "runtime/runtime_internal.hpp"

namespace flashcpp {

// ----------------------------------------------------------------------------- gdn_prefill
namespace {
constexpr const char* kOp = "gdn_prefill";

/// One workspace per device, allocated on first use and kept for the process.
TensorView default_workspace(int device) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  const int64_t bytes = gdn_prefill_workspace_bytes(device);
  std::lock_guard lock(mu);
  if (buffers.size() <= static_cast<size_t>(device)) buffers.resize(static_cast<size_t>(device) + 1);
  auto& slot = buffers[static_cast<size_t>(device)];
  if (!slot) slot = std::make_unique<DeviceBuffer>(static_cast<size_t>(bytes), device);
  return TensorView::contiguous(slot->get(), DType::u8, Device::cuda(device), {bytes});
}

/// FlashInfer 0.6.3's GDN kernels launch through CUTLASS's `device::Universal` adapter (flat/hopper/
/// device/device_universal.hpp), which raises a kernel's dynamic shared-memory limit only on its first
/// use in the process (a function-local `static bool initialized`). That limit belongs to a device, so
/// the first launch of the kernel on any other device fails ("invalid argument"). The flags are
/// GNU-unique symbols of the module's .dynsym; we clear them whenever a call's device differs from the
/// previous call's, and the module then sets the limit again on the now current device. Clearing and
/// calling happen under one process-wide lock (the flags are process-wide), which costs host time only:
/// the launch itself is asynchronous.
struct GdnModule {
  std::shared_ptr<ffi::ModuleLibrary> lib;
  ffi::abi::SafeCall fn = nullptr;
  std::vector<bool*> once_flags;  ///< `Universal<...>::is_initialized(bool)::initialized` of every kernel
};

constexpr std::string_view kOnceFlagPrefix = "_ZZN7cutlass6device9Universal";
constexpr std::string_view kOnceFlagSuffix = "14is_initializedEbE11initialized";

/// The runtime's GDN module, resolved once per runtime (the module stays loaded).
std::shared_ptr<const GdnModule> gdn_module(const Runtime& rt) {
  static std::mutex mu;
  static const Runtime* cached_rt = nullptr;
  static std::shared_ptr<const GdnModule> cached;
  std::lock_guard lock(mu);
  if (cached_rt != &rt || !cached) {
    auto m = std::make_shared<GdnModule>();
    m->lib = load_module(rt, kGdnPrefillUri);
    m->fn = m->lib->function("gdn_prefill");
    for (const std::string& name : elf_dynamic_symbols_containing(m->lib->path(), kOnceFlagSuffix))
      if (name.starts_with(kOnceFlagPrefix) && name.ends_with(kOnceFlagSuffix))
        if (void* flag = m->lib->find_symbol(name)) m->once_flags.push_back(static_cast<bool*>(flag));
    cached = std::move(m);
    cached_rt = &rt;
  }
  return cached;
}

std::mutex g_launch_mu;       // serialises GDN calls (the flags are process-wide)
int g_last_launch_device = -1;  // guarded by g_launch_mu

/// Serialises GDN calls and re-arms the module's one-time kernel setup when the device changes.
class GdnLaunchLock {
 public:
  GdnLaunchLock(const GdnModule& m, int device) : lock_(g_launch_mu) {
    if (g_last_launch_device != device) {
      for (bool* flag : m.once_flags) *flag = false;
      g_last_launch_device = device;
    }
  }

 private:
  std::lock_guard<std::mutex> lock_;
};

void check_dense(const Validator& v, const TensorView& t, const char* name, const TensorView& ref) {
  v.defined(t, name).on_cuda(t, name).same_device(t, name, ref, "q").contiguous(t, name).aligned(t, name, 16);
}
}  // namespace

int64_t gdn_prefill_workspace_bytes(int device) {
  // A visible device, as every op checks its tensors' (a device-facts hook would answer for any id).
  ops::check_device_id(Validator("gdn_prefill_workspace_bytes"), device, "device");
  return static_cast<int64_t>(device_facts(device).sm_count) * 128;
}

void gdn_prefill(const Runtime& rt, const GdnPrefillTensors& a, const GdnPrefillOptions& p, cudaStream_t stream) {
  const Validator v(kOp);
  // q decides dtype, device, T and D; everything else is checked against it.
  v.defined(a.q, "q").on_cuda(a.q, "q").dtype(a.q, "q", {DType::f16, DType::bf16}).rank(a.q, "q", 3);
  ops::check_device_id(v, a.q.device.id, "q");
  const int64_t T = a.q.size(0), Hq = a.q.size(1), D = a.q.size(2);
  v.dim(a.q, "q", 2, kGdnHeadSize, "the kernel's head size");
  v.require(T >= 1, "q", "must hold at least one token");
  check_dense(v, a.q, "q", a.q);
  v.rank(a.k, "k", 3).same_dtype(a.k, "k", a.q, "q").dim(a.k, "k", 0, T, "q.size(0)").dim(a.k, "k", 2, D, "q.size(2)");
  check_dense(v, a.k, "k", a.q);
  v.rank(a.v, "v", 3).same_dtype(a.v, "v", a.q, "q").dim(a.v, "v", 0, T, "q.size(0)").dim(a.v, "v", 2, D, "q.size(2)");
  check_dense(v, a.v, "v", a.q);
  const int64_t Hk = a.k.size(1), Hv = a.v.size(1);
  v.require(Hq >= 1 && Hk >= 1 && Hv >= 1, "q/k/v", "must have at least one head each");
  if (Hq >= Hv) {  // GQA
    v.dim(a.k, "k", 1, Hv, "v.size(1): with Hq >= Hv (GQA) k and v have the same heads");
    v.divisible(Hq, "q.size(1)", Hv, "v.size(1)");
  } else {  // GVA
    v.dim(a.k, "k", 1, Hq, "q.size(1): with Hv > Hq (GVA) q and k have the same heads");
    v.divisible(Hv, "v.size(1)", Hq, "q.size(1)");
  }
  const int64_t Hsab = std::max(Hq, Hv);
  v.shape(a.output, "output", {T, Hsab, D}).same_dtype(a.output, "output", a.q, "q");
  check_dense(v, a.output, "output", a.q);

  v.defined(a.cu_seqlens, "cu_seqlens").on_cuda(a.cu_seqlens, "cu_seqlens").same_device(a.cu_seqlens, "cu_seqlens", a.q, "q")
      .dtype(a.cu_seqlens, "cu_seqlens", {DType::i64}).rank(a.cu_seqlens, "cu_seqlens", 1).contiguous(a.cu_seqlens, "cu_seqlens");
  const int64_t N = a.cu_seqlens.size(0) - 1;
  v.require(N >= 1, "cu_seqlens", "must have at least 2 entries (one sequence)");
  if (a.cu_seqlens_host) {
    const TensorView& h = *a.cu_seqlens_host;
    v.on_host(h, "cu_seqlens_host").dtype(h, "cu_seqlens_host", {DType::i64}).shape(h, "cu_seqlens_host", {N + 1})
        .contiguous(h, "cu_seqlens_host");
    v.require(h.data != nullptr, "cu_seqlens_host", "must not be null");
    const int64_t* c = h.data_as<const int64_t>();
    if (c[0] != 0) v.fail("cu_seqlens_host", "must start at 0; got " + std::to_string(c[0]));
    for (int64_t i = 1; i <= N; ++i)
      if (c[i] < c[i - 1])
        v.fail("cu_seqlens_host", "must never decrease; entry " + std::to_string(i) + " is " + std::to_string(c[i]) +
                                      " after " + std::to_string(c[i - 1]));
    if (c[N] != T) v.fail("cu_seqlens_host", "must end at the total token count " + std::to_string(T) + "; got " +
                                                 std::to_string(c[N]));
  }
  v.dtype(a.output_state, "output_state", {DType::f32}).shape(a.output_state, "output_state", {N, Hsab, D, D});
  check_dense(v, a.output_state, "output_state", a.q);
  if (a.input_state) {
    v.dtype(*a.input_state, "input_state", {DType::f32}).shape(*a.input_state, "input_state", {N, Hsab, D, D});
    check_dense(v, *a.input_state, "input_state", a.q);
  }
  if (a.alpha) {
    v.dtype(*a.alpha, "alpha", {DType::f32}).shape(*a.alpha, "alpha", {T, Hsab});
    check_dense(v, *a.alpha, "alpha", a.q);
  }
  if (a.beta) {
    v.dtype(*a.beta, "beta", {DType::f32}).shape(*a.beta, "beta", {T, Hsab});
    check_dense(v, *a.beta, "beta", a.q);
  }
  if (p.scale) v.positive(*p.scale, "scale");

  const int device = a.q.device.id;
  const DeviceFacts& facts = device_facts(device);
  if (facts.cc_major != 9)
    throw Error(ErrorCode::unsupported, std::string(kOp) + ": FlashInfer's GDN prefill runs only on compute capability "
                                        "9.x (Hopper); device " + std::to_string(device) + " is " +
                                        std::to_string(facts.cc_major) + "." + std::to_string(facts.cc_minor));
  TensorView ws;
  if (a.workspace) {
    ws = *a.workspace;
    v.defined(ws, "workspace").on_cuda(ws, "workspace").same_device(ws, "workspace", a.q, "q")
        .dtype(ws, "workspace", {DType::u8}).rank(ws, "workspace", 1).contiguous(ws, "workspace")
        .min_bytes(ws, "workspace", int64_t{facts.sm_count} * 128).aligned(ws, "workspace", 128);
  } else {
    ws = default_workspace(device);
  }
  // The kernel writes output, output_state and the workspace: none shares a byte with another argument
  // (an input_state updated in place is refused too; FlashInfer reads it while other CTAs write).
  v.no_overlap({{&a.output, "output"}, {&a.output_state, "output_state"}, {a.workspace, "workspace"}},
               {{&a.q, "q"}, {&a.k, "k"}, {&a.v, "v"}, {&a.cu_seqlens, "cu_seqlens"}, {a.input_state, "input_state"},
                {a.alpha, "alpha"}, {a.beta, "beta"}});

  const std::shared_ptr<const GdnModule> module = gdn_module(rt);
  ops::CurrentDeviceScope device_scope(device);  // the kernel launches on the current device
  const GdnLaunchLock launch_lock(*module, device);
  ffi::invoke(module->fn, ffi::StreamBinding{a.q.device, stream}, nullptr, a.output, a.output_state, a.q, a.k, a.v,
              a.cu_seqlens, a.input_state, a.alpha, a.beta, p.scale.value_or(0.0), ws);  // 0: the module's 1/sqrt(D)
}

}  // namespace flashcpp
