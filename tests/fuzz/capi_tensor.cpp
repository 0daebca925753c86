// Fuzzes the C ABI's argument validation: tensors of any rank, dtype and device code, shapes and strides up to
// the int64 limits, NULL tensors and NULL data, scalar options, given to the norm, page-append, single-attention
// and batch-plan entry points. Every call must return a status with a message (the default runtime cannot start
// here, so calls that pass validation stop at the first module lookup); never a crash, a sanitizer report or
// FLASHCPP_INTERNAL (an exception the library did not type).
// Host tensors (CPU, CUDA_HOST) are backed by a real buffer covering their extent, filled from the input, since
// the library reads them; device tensors get an address that is never dereferenced on the host.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "flashcpp/c/ops.h"
#include "fuzz_support.hpp"

namespace {

// v - 1 without overflow (INT64_MIN wraps to INT64_MAX): the fuzzed values reach every extreme.
std::int64_t minus_one(std::int64_t v) { return static_cast<std::int64_t>(static_cast<std::uint64_t>(v) - 1u); }

class Reader {
 public:
  Reader(const std::uint8_t* d, size_t n) : d_(d), n_(n) {}
  std::uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  std::int64_t raw64() {
    std::uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v = (v << 8) | byte();
    return static_cast<std::int64_t>(v);
  }
  /// Mostly small values, sometimes an edge of the int64 range or of what kernels index.
  std::int64_t dim() {
    static const std::int64_t edges[] = {0, 1, -1, 2, 64, 128, 512, 576, 65536, std::int64_t{1} << 31,
                                         (std::int64_t{1} << 31) - 1, std::int64_t{1} << 33, std::int64_t{1} << 58,
                                         std::numeric_limits<std::int64_t>::max(),
                                         std::numeric_limits<std::int64_t>::min()};
    const std::uint8_t b = byte();
    if (b < 160) return b % 40;
    if (b < 250) return edges[b % std::size(edges)];
    return raw64();
  }
  double real() {
    static const double values[] = {0.0, 1e-6, 1.0, -1.0, 0.125, 1e300, -0.0,
                                    std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()};
    return values[byte() % std::size(values)];
  }
  bool done() const { return i_ >= n_; }

 private:
  const std::uint8_t* d_;
  size_t n_, i_ = 0;
};

size_t element_size(std::int32_t dtype) {
  static const size_t sizes[] = {2, 2, 4, 8, 1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 1};
  return dtype >= 0 && dtype < 15 ? sizes[dtype] : 1;
}

/// The tensors of one call and the host buffers behind them.
class Arena {
 public:
  // Pointers into tensors_ are handed out: no call takes more than 16 tensors, so it never reallocates.
  explicit Arena(Reader& r) : r_(r) { tensors_.reserve(16); }

  const flashcpp_tensor* tensor() {
    const std::uint8_t mode = r_.byte();
    if (mode % 16 == 15) return nullptr;
    auto& t = tensors_.emplace_back();
    std::memset(&t, 0, sizeof t);
    t.dtype = static_cast<std::int32_t>(r_.byte() % 16);  // 15 is not a dtype
    const bool host = mode & 0x10;
    t.device_type = host ? ((mode & 0x20) ? FLASHCPP_CUDA_HOST : FLASHCPP_CPU) : FLASHCPP_CUDA;
    if ((mode & 0xC0) == 0xC0) t.device_type = static_cast<std::int32_t>(r_.byte()) - 8;  // mostly no device type
    t.device_id = (mode & 0x40) ? static_cast<std::int32_t>(r_.byte()) - 2 : 0;
    t.rank = static_cast<std::int32_t>(r_.byte() % 8);  // 7 is over FLASHCPP_MAX_RANK
    const int rank = t.rank > FLASHCPP_MAX_RANK ? FLASHCPP_MAX_RANK : t.rank;
    const bool contiguous = (mode & 0x08) == 0;
    if (host) {
      // Small extents, so that a real buffer covers every element the library may read.
      for (int i = 0; i < rank; ++i) t.shape[i] = r_.byte() % 9;
      for (int i = rank - 1; i >= 0; --i)
        t.strides[i] = contiguous ? (i == rank - 1 ? 1 : t.strides[i + 1] * (t.shape[i + 1] ? t.shape[i + 1] : 1))
                                  : static_cast<std::int64_t>(r_.byte() % 9) - 4;
      std::int64_t lo = 0, hi = 0;
      for (int i = 0; i < rank; ++i) {
        if (t.shape[i] == 0) continue;
        const std::int64_t reach = (t.shape[i] - 1) * t.strides[i];
        (reach < 0 ? lo : hi) += reach;
      }
      const size_t esize = element_size(t.dtype);
      auto& buf = buffers_.emplace_back(static_cast<size_t>(hi - lo + 1) * 8 / sizeof(std::uint64_t) + 1);
      auto* bytes = reinterpret_cast<std::uint8_t*>(buf.data());
      const bool ramp = r_.byte() & 1;  // indptr-like: 0, k, 2k, ... as int32
      const std::int32_t step = r_.byte() % 8;
      for (size_t i = 0; i < static_cast<size_t>(hi - lo + 1) * esize; ++i) bytes[i] = r_.byte();
      if (ramp && esize == 4)
        for (std::int64_t i = 0; i <= hi - lo; ++i) reinterpret_cast<std::int32_t*>(bytes)[i] = static_cast<std::int32_t>(i) * step;
      t.data = (mode & 0x04) ? nullptr : bytes + static_cast<size_t>(-lo) * esize;
    } else {
      for (int i = 0; i < rank; ++i) t.shape[i] = r_.dim();
      std::uint64_t running = 1;  // contiguous strides, wrapping as an unchecked caller's would
      for (int i = rank - 1; i >= 0; --i) {
        t.strides[i] = contiguous ? static_cast<std::int64_t>(running) : r_.dim();
        running *= static_cast<std::uint64_t>(t.shape[i]);
      }
      // Device memory is never touched on the host: any aligned (or deliberately misaligned) address.
      t.data = (mode & 0x04) ? nullptr
                             : reinterpret_cast<void*>(std::uintptr_t{0x7f0000000000} + (std::uintptr_t{r_.byte()} << 4) +
                                                       ((mode & 0x02) ? 2 : 0));
    }
    return &t;
  }

 private:
  Reader& r_;
  std::vector<flashcpp_tensor> tensors_;
  std::vector<std::vector<std::uint64_t>> buffers_;
};

flashcpp_status call(Reader& r, Arena& a) {
  const double eps = r.real();
  const std::int32_t pdl = r.byte() & 1;
  switch (r.byte() % 9) {
    case 0: {
      auto out = a.tensor(), in = a.tensor(), w = a.tensor();
      return flashcpp_rmsnorm(out, in, w, eps, pdl, nullptr);
    }
    case 1: {
      auto in = a.tensor(), res = a.tensor(), w = a.tensor();
      return flashcpp_fused_add_rmsnorm(in, res, w, eps, pdl, nullptr);
    }
    case 2: {
      auto out = a.tensor(), in = a.tensor(), w = a.tensor();
      return flashcpp_fused_qk_rmsnorm(out, in, w, eps, pdl, nullptr);
    }
    case 3: {
      auto key = a.tensor(), value = a.tensor(), batch = a.tensor(), pos = a.tensor();
      flashcpp_paged_kv_cache c{sizeof(flashcpp_paged_kv_cache), a.tensor(), a.tensor(), a.tensor(), a.tensor(), a.tensor(), r.byte() % 3};
      return flashcpp_append_paged_kv_cache(key, value, batch, pos, (r.byte() & 1) ? &c : nullptr, nullptr);
    }
    case 4: {
      auto ckv = a.tensor(), kpe = a.tensor(), batch = a.tensor(), pos = a.tensor();
      flashcpp_paged_mla_kv_cache c{sizeof(flashcpp_paged_mla_kv_cache), a.tensor(), a.tensor(), a.tensor(), a.tensor(), a.tensor()};
      return flashcpp_append_paged_mla_kv_cache(ckv, kpe, batch, pos, (r.byte() & 1) ? &c : nullptr, nullptr);
    }
    case 5:
    case 6: {
      flashcpp_attention_options o;
      flashcpp_attention_options_init(&o);
      o.causal = r.byte() % 3, o.layout = r.byte() % 3, o.window_left = minus_one(r.dim()), o.logits_soft_cap = r.real();
      o.sm_scale = r.real(), o.decode_backend = r.byte() % 4, o.use_fp16_qk_reduction = r.byte() % 3;
      auto q = a.tensor(), k = a.tensor(), v = a.tensor(), out = a.tensor(), lse = a.tensor(), tmp = a.tensor();
      const auto* opts = (r.byte() & 7) ? &o : nullptr;
      return (r.byte() & 1) ? flashcpp_single_prefill(q, k, v, out, lse, tmp, opts, nullptr)
                            : flashcpp_single_decode(q, k, v, out, lse, tmp, opts, nullptr);
    }
    case 7: {
      flashcpp_batch_decode_config c;
      flashcpp_batch_decode_config_init(&c);
      c.num_qo_heads = r.dim(), c.num_kv_heads = r.dim(), c.head_dim = r.dim(), c.page_size = r.dim();
      c.q_dtype = r.byte() % 16, c.kv_dtype = r.byte() % 16, c.o_dtype = static_cast<std::int32_t>(r.byte() % 17) - 1;
      c.layout = r.byte() % 3, c.window_left = minus_one(r.dim()), c.logits_soft_cap = r.real(), c.sm_scale = r.real();
      c.backend = r.byte() % 4, c.prefill_backend = r.byte() % 4;
      flashcpp_workspace ws{sizeof(flashcpp_workspace), a.tensor(), a.tensor(), a.tensor()};
      auto indptr = a.tensor(), last = a.tensor(), indices = a.tensor();
      flashcpp_batch_decode_plan* plan = nullptr;
      const auto s = flashcpp_batch_decode_plan_create((r.byte() & 7) ? &c : nullptr, (r.byte() & 7) ? &ws : nullptr,
                                                       indptr, last, indices, nullptr, &plan);
      flashcpp_batch_decode_plan_destroy(plan);
      return s;
    }
    default: {
      flashcpp_batch_prefill_config c;
      flashcpp_batch_prefill_config_init(&c);
      c.kv_storage = r.byte() % 3, c.num_qo_heads = r.dim(), c.num_kv_heads = r.dim(), c.head_dim_qk = r.dim();
      c.head_dim_vo = r.dim(), c.page_size = r.dim(), c.q_dtype = r.byte() % 16, c.kv_dtype = r.byte() % 16;
      c.o_dtype = static_cast<std::int32_t>(r.byte() % 17) - 1, c.layout = r.byte() % 3, c.causal = r.byte() % 2;
      c.window_left = minus_one(r.dim()), c.logits_soft_cap = r.real(), c.sm_scale = r.real(), c.backend = r.byte() % 4;
      c.fixed_split_size = minus_one(r.dim()), c.disable_split_kv = r.byte() % 2;
      flashcpp_workspace ws{sizeof(flashcpp_workspace), a.tensor(), a.tensor(), a.tensor()};
      auto qo = a.tensor(), kv = a.tensor(), last = a.tensor(), indices = a.tensor();
      flashcpp_batch_prefill_plan* plan = nullptr;
      const auto s = flashcpp_batch_prefill_plan_create((r.byte() & 7) ? &c : nullptr, (r.byte() & 7) ? &ws : nullptr,
                                                        qo, kv, last, indices, nullptr, &plan);
      flashcpp_batch_prefill_plan_destroy(plan);
      return s;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // No module can load: an empty private cache, offline, no build-tree or Python packages to fall back on.
  const auto& dir = flashcpp::fuzz::scratch_dir();
  ::setenv("FLASHCPP_CACHE_DIR", (dir / "cache").c_str(), 1);
  ::setenv("FLASHCPP_OFFLINE", "1", 1);
  ::setenv("FLASHCPP_NO_BUILD_DEPS", "1", 1);
  ::setenv("FLASHCPP_JIT", "off", 1);
  for (const char* v : {"FLASHCPP_TVM_FFI", "FLASHCPP_TVM_FFI_LIB", "FLASHCPP_JIT_CACHE", "FLASHCPP_MODULE_PATH",
                        "FLASHCPP_PYTHON_PREFIXES", "FLASHCPP_FLASHINFER_PYTHON", "VIRTUAL_ENV", "CONDA_PREFIX"})
    ::unsetenv(v);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, size_t size) {
  Reader r(data, size);
  Arena a(r);
  const flashcpp_status s = call(r, a);
  const char* message = flashcpp_last_error();
  if (s != FLASHCPP_SUCCESS && (message == nullptr || *message == '\0')) std::abort();
  if (s == FLASHCPP_INTERNAL || s < FLASHCPP_SUCCESS || s > FLASHCPP_UNTRUSTED) {
    std::fprintf(stderr, "status %d: %s\n", static_cast<int>(s), message);
    std::abort();
  }
  return 0;
}
