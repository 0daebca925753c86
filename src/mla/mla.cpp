// Host side of MLA shared by its front doors (mla_prefill.cpp, mla_decode.cpp, mla_quantize.cpp, dense_decode.cpp):
// the tensor checks, the device gate and support query, the kernel switch of the simple kernel, the parameters every
// attention fills alike.
#include "flashcpp/mla.hpp"

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <tuple>
#include <cmath>

#include "core/check.hpp"
#include "core/env.hpp"
#include "core/per_device.hpp"
#include "mla/decode_schedule.hpp"
#include "mla/fp8_v32.hpp"
#include "mla/fp8_v4.hpp"
#include "mla/launch_plan.hpp"
#include "mla/mla_host.hpp"
#include "mla/sparse_attention_kernel.hpp"
#include "mla/tensor_map.hpp"

namespace flashcpp::mla {
using namespace detail;
namespace detail {

// Checks shared by every CUDA tensor argument.
void cuda_tensor(const Validator& v, const TensorView& t, const char* arg, std::initializer_list<DType> dtypes, int rank) {
  v.defined(t, arg).dtype(t, arg, dtypes).rank(t, arg, rank).on_cuda(t, arg).no_negative_strides(t, arg);
}

// 16-byte aligned data and strides (other than the unit last one) that keep rows 16-byte aligned.
void vector_aligned(const Validator& v, const TensorView& t, const char* arg) {
  v.aligned(t, arg, 16);
  const int64_t unit = 16 / dtype_size(t.dtype);
  for (int d = 0; d + 1 < t.rank; ++d)
    if (t.shape[d] > 1 && t.strides[d] % unit != 0)
      v.fail(arg, t, "must have strides that are multiples of " + std::to_string(unit) +
                         " elements (16 bytes) in every dim but the last; dim " + std::to_string(d) + " has stride " +
                         std::to_string(t.strides[d]));
}

void optional_vector(const Validator& v, OptionalTensor t, const char* arg, DType dtype, int64_t len,
                     const TensorView& ref, const char* what) {
  if (t == nullptr) return;
  v.defined(*t, arg).dtype(*t, arg, {dtype}).rank(*t, arg, 1).dim(*t, arg, 0, len, what).on_cuda(*t, arg);
  v.contiguous(*t, arg).same_device(*t, arg, ref, "q").aligned(*t, arg, 4);
}

void validate_topk(const Validator& v, int64_t topk, const char* arg) {
  if (topk < kTopkMultiple || topk % kTopkMultiple != 0 || topk > INT32_MAX)
    v.fail(arg, "(topk) must be a positive multiple of 64; got " + std::to_string(topk));
}

// The page rules of a V4 cache view [num_blocks, block_size, 1, 584] (FlashMLA's view of its pages): stride(1)
// 584, a page stride that is a multiple of 16 bytes and at least block_size * 584 (pages must not overlap).
void v4_page_rules(const Validator& v, const TensorView& t, const char* arg) {
  v.defined(t, arg).dtype(t, arg, {DType::u8, DType::i8, DType::e4m3}).rank(t, arg, 4).no_negative_strides(t, arg);
  v.dim(t, arg, 2, 1, "h_kv").dim(t, arg, 3, kFp8V4BytesPerToken, "584 bytes per token").last_dim_contiguous(t, arg);
  const int64_t num_blocks = t.size(0), block_size = t.size(1);
  if (block_size > 1 && t.stride(1) != kFp8V4BytesPerToken)
    v.fail(arg, t, "must have stride 584 in dim 1 (FlashMLA's view of a V4 page)");
  if (num_blocks > 1 && t.stride(0) % fp8_v4::kPageStrideMultiple != 0)
    v.fail(arg, t, "must have a page stride (dim 0) that is a multiple of 16 bytes; got " + std::to_string(t.stride(0)));
  if (num_blocks > 1 && t.stride(0) < block_size * kFp8V4BytesPerToken)
    v.fail(arg, t, "must have a page stride (dim 0) of at least block_size * 584 = " +
                       std::to_string(block_size * kFp8V4BytesPerToken) + " bytes (pages must not overlap); got " +
                       std::to_string(t.stride(0)));
}

void require_plan_device(const char* op, const TensorView& t, const char* arg, int plan_device) {
  if (t.device.type == DeviceType::cuda && t.device.id != plan_device)
    Validator(op).fail(arg, t, "must be on the plan's device " + std::to_string(plan_device));
}

// Where a cache (de)quantizer runs: both tensors in host memory (the calling thread) or on one CUDA device. Returns
// true for the host. The output never overlaps the source (no in-place form: the sizes differ).
bool converter_on_host(const Validator& v, const TensorView& src, const char* src_arg, const TensorView& out) {
  const bool host = src.device.is_host();
  if (host) {
    v.on_host(src, src_arg).on_host(out, "out");  // both read or written right here: their extents bounded
  } else {
    v.on_cuda(src, src_arg).same_device(out, "out", src, src_arg);
  }
  v.disjoint(out, "out", src, src_arg);
  return host;
}

int planned_sms(const Validator& v, int config_num_sms, int num_sms) {
  const int n = config_num_sms > 0 ? config_num_sms : num_sms;
  if (n < 1 || n > kMaxSms)
    v.fail("num_sms", "must be in [1, " + std::to_string(kMaxSms) + "] (config.num_sms or the argument); got " +
                          std::to_string(n));
  return n;
}

// Device gate: throws unsupported unless the kernels can run on `device_id`.
void require_supported(std::string_view op, int device_id) {
  const kernels::KernelSupport& s = kernel_support(device_id);
  if (!s.sparse_supported)
    throw Error(ErrorCode::unsupported,
                std::string(op) + ": device " + std::to_string(device_id) + " (compute capability " +
                    std::to_string(s.cc_major) + "." + std::to_string(s.cc_minor) +
                    ") cannot run sparse MLA: it needs SM >= 8.0, code for this GPU in the build (sm_90a by default) "
                    "and " + std::to_string(kernels::sparse_attention_simple_smem_bytes()) +
                    " bytes of shared memory per block");
}

std::atomic<bool>& force_simple_flag() {
  static std::atomic<bool> flag{[] {
    return env::flag("FLASHCPP_MLA_FORCE_SIMPLE");
  }()};
  return flag;
}

void check_launch(const char* what) { cuda_check(cudaGetLastError(), what); }

// Runs the attention, split-KV or not, as the launch plan says. A plan that cannot launch is an error, never a
// silent switch to another kernel.
void run_attention(const kernels::SparseAttentionParams& p, cudaStream_t stream, int device_id) {
  const kernels::LaunchPlan plan = kernels::choose(p, kernel_support(device_id));
  if (!kernels::launch(plan, p, stream)) {
    (void)cudaGetLastError();
    throw Error(ErrorCode::unsupported, std::string("sparse MLA: the ") + kernels::plan_label(plan) +
                                            " kernel has no code for device " + std::to_string(device_id) +
                                            " or too little shared memory there");
  }
  check_launch("sparse MLA attention kernel launch");
}

}  // namespace detail

namespace kernels {
const KernelSupport& kernel_support(int device_id) {
  const DeviceFacts& info = flashcpp::device_facts(device_id);  // throws invalid_argument for an unknown id
  // Only a device of this process runs kernels (a CPU test's pretended facts describe none).
  if (const int n = cuda_device_count(); device_id >= n)
    throw Error(ErrorCode::invalid_argument, "sparse MLA: device id " + std::to_string(device_id) + " is outside [0, " +
                                                 std::to_string(n) + ") (visible CUDA devices: " + std::to_string(n) +
                                                 ")");
  // Read once per device, thread-safe, lock-free afterwards: every call of every op asks.
  static PerDevice<KernelSupport> support(cuda_device_count());
  return support.get(device_id, [&info](int id, KernelSupport& f) {
    f.device_id = id;
    f.cc_major = info.cc_major;
    f.cc_minor = info.cc_minor;
    f.sm_count = info.sm_count;
    DeviceGuard guard(id);
    const bool has_code = sparse_attention_simple_available();
    f.sparse_supported = info.cc_major >= 8 && has_code &&
                         info.max_smem_per_block_optin >= sparse_attention_simple_smem_bytes();
    f.hopper = f.sparse_supported && info.cc_major == 9 && info.cc_minor == 0;
    if (f.hopper) {
      f.v4_half_heads_cluster_slots = wgmma_v4_pair_cluster_slots(id);
      f.tensor_maps = tensor_maps_available();
    }
  });
}

void set_force_simple_kernel(bool on) { force_simple_flag().store(on); }
bool force_simple_kernel() { return force_simple_flag().load(std::memory_order_relaxed); }
}  // namespace kernels

MlaDeviceSupport device_support(int device_id) {
  const kernels::KernelSupport& f = kernels::kernel_support(device_id);
  return {.device_id = device_id, .cc_major = f.cc_major, .cc_minor = f.cc_minor, .sm_count = f.sm_count,
          .sparse_supported = f.sparse_supported, .hopper_kernel = f.hopper};
}

namespace detail {
// The softmax scale a call uses: the caller's, or 1/sqrt(d_qk) of q (include/flashcpp/mla.hpp).
double resolved_sm_scale(const std::optional<double>& sm_scale, int64_t d_qk) {
  return sm_scale ? *sm_scale : 1.0 / std::sqrt(static_cast<double>(d_qk));
}

// The kernel parameters prefill and decode fill alike: sizes, softmax options, and q / indices / out / lse with
// their token and head strides. `token_dim` is the dim the tokens run along (prefill's [s_q, h_q, ...]: 0;
// decode's [b, s_q, h_q, ...]: 1); heads follow it, d_qk and topk are the last dims.
kernels::SparseAttentionParams attention_params(int token_dim, int64_t num_tokens, const TensorView& q,
                                                const TensorView& indices, const TensorView& out,
                                                const TensorView& lse, OptionalTensor attn_sink, double sm_scale) {
  kernels::SparseAttentionParams p;
  p.q = q.data;
  p.q_stride_token = q.stride(token_dim);
  p.q_stride_head = q.stride(token_dim + 1);
  p.num_tokens = static_cast<int>(num_tokens);
  p.h_q = static_cast<int>(q.size(token_dim + 1));
  p.d_qk = static_cast<int>(q.size(-1));
  p.d_v = kDv;
  p.topk = static_cast<int>(indices.size(-1));
  p.indices = indices.data_as<const int32_t>();
  p.indices_stride_token = indices.stride(token_dim);
  p.attn_sink = attn_sink ? attn_sink->data_as<const float>() : nullptr;
  p.sm_scale = static_cast<float>(sm_scale);
  p.out = out.data;
  p.out_stride_token = out.stride(token_dim);
  p.out_stride_head = out.stride(token_dim + 1);
  p.lse = lse.data_as<float>();
  p.lse_stride_token = lse.stride(token_dim);
  p.lse_stride_head = lse.stride(token_dim + 1);
  return p;
}
}  // namespace detail

}  // namespace flashcpp::mla
