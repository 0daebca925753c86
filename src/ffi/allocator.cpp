// The DLPack tensor allocator flashcpp registers with libtvm_ffi for modules that allocate
// (FlashInfer 0.6.3's MoE runner allocates its workspace on every call). Device memory comes from
// cudaMallocAsync on the calling thread's TVM-FFI stream for that device, out of the device's default
// memory pool with its release threshold raised, so steady-state calls reuse pooled memory instead of
// calling cudaMalloc. Frees are stream-ordered on the same stream.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "ffi/ffi.hpp"
#include "flashcpp/cuda.hpp"

namespace flashcpp::ffi {
namespace {

std::atomic<uint64_t> g_device_allocs{0}, g_device_frees{0}, g_host_allocs{0}, g_host_frees{0};

struct Allocation {
  DLManagedTensorVersioned managed{};
  int64_t shape[16]{};
  int64_t strides[16]{};
  void* data = nullptr;
  bool on_device = false;
  int device = 0;
  cudaStream_t stream = nullptr;
};

void free_allocation(DLManagedTensorVersioned* m) {
  auto* a = static_cast<Allocation*>(m->manager_ctx);
  if (a->data) {
    if (a->on_device) {
      int previous = 0;
      (void)cudaGetDevice(&previous);
      if (previous != a->device) (void)cudaSetDevice(a->device);
      (void)cudaFreeAsync(a->data, a->stream);
      if (previous != a->device) (void)cudaSetDevice(previous);
      g_device_frees.fetch_add(1, std::memory_order_relaxed);
    } else {
      std::free(a->data);
      g_host_frees.fetch_add(1, std::memory_order_relaxed);
    }
  }
  delete a;
}

void raise_pool_threshold(int device) {
  static std::mutex mu;
  static bool done[64] = {};
  std::lock_guard lock(mu);
  if (device < 0 || device >= 64 || done[device]) return;
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    uint64_t threshold = UINT64_MAX;  // keep freed blocks in the pool
    (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  }
  done[device] = true;
}

int allocate(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
             void (*set_error)(void*, const char*, const char*)) {
  auto fail = [&](const char* kind, const std::string& msg) {
    if (set_error) set_error(error_ctx, kind, msg.c_str());
    return -1;
  };
  if (prototype->ndim < 0 || prototype->ndim > 16) return fail("ValueError", "flashcpp allocator: rank > 16");
  int64_t numel = 1;
  for (int i = 0; i < prototype->ndim; ++i) numel *= prototype->shape[i];
  const size_t bytes = static_cast<size_t>((numel * prototype->dtype.bits * prototype->dtype.lanes + 7) / 8);

  auto* a = new Allocation();
  a->managed.version.major = DLPACK_MAJOR_VERSION;
  a->managed.version.minor = DLPACK_MINOR_VERSION;
  a->managed.manager_ctx = a;
  a->managed.deleter = &free_allocation;
  DLTensor& t = a->managed.dl_tensor;
  t.device = prototype->device;
  t.ndim = prototype->ndim;
  t.dtype = prototype->dtype;
  t.shape = a->shape;
  t.strides = a->strides;
  t.byte_offset = 0;
  int64_t stride = 1;
  for (int i = prototype->ndim - 1; i >= 0; --i) {
    a->shape[i] = prototype->shape[i];
    a->strides[i] = stride;
    stride *= prototype->shape[i];
  }

  if (prototype->device.device_type == kDLCUDA) {
    a->on_device = true;
    a->device = prototype->device.device_id;
    a->stream = static_cast<cudaStream_t>(api().EnvGetStream(kDLCUDA, a->device));
    raise_pool_threshold(a->device);
    int previous = 0;
    (void)cudaGetDevice(&previous);
    if (previous != a->device) (void)cudaSetDevice(a->device);
    cudaError_t st = bytes ? cudaMallocAsync(&a->data, bytes, a->stream) : cudaSuccess;
    if (previous != a->device) (void)cudaSetDevice(previous);
    if (st != cudaSuccess) {
      delete a;
      return fail("RuntimeError", std::string("flashcpp allocator: cudaMallocAsync of ") + std::to_string(bytes) +
                                      " bytes failed: " + cudaGetErrorString(st));
    }
    g_device_allocs.fetch_add(1, std::memory_order_relaxed);
  } else if (prototype->device.device_type == kDLCPU || prototype->device.device_type == kDLCUDAHost) {
    const size_t rounded = (bytes + 255) / 256 * 256;
    a->data = std::aligned_alloc(256, rounded ? rounded : 256);
    if (!a->data) {
      delete a;
      return fail("RuntimeError", "flashcpp allocator: out of host memory");
    }
    g_host_allocs.fetch_add(1, std::memory_order_relaxed);
  } else {
    delete a;
    return fail("ValueError", "flashcpp allocator: unsupported device type " +
                                  std::to_string(static_cast<int>(prototype->device.device_type)));
  }
  t.data = a->data;
  *out = &a->managed;
  return 0;
}

}  // namespace

void install_tensor_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (int rc = api().EnvSetDLPackManagedTensorAllocator(&allocate, 1, nullptr); rc != 0)
      throw_last_error(rc, "TVMFFIEnvSetDLPackManagedTensorAllocator");
  });
}

AllocatorStats allocator_stats() {
  return {g_device_allocs.load(), g_device_frees.load(), g_host_allocs.load(), g_host_frees.load()};
}

}  // namespace flashcpp::ffi
