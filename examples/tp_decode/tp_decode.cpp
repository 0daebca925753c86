// The tensor-parallel decode step across N GPUs with NCCL (see tp_decode.hpp).
#include <nccl.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>

#include "flashcpp/cuda.hpp"
#include "flashcpp/error.hpp"
#include "tp_decode.hpp"

namespace flashcpp::tp {
namespace {

constexpr int64_t kMlaDv = 512;

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw Error(ErrorCode::cuda_error, std::string(what) + " failed: " + ncclGetErrorString(r));
}

}  // namespace

// ------------------------------------------------------------------------------------------------ N GPUs

TpRun run_tensor_parallel(const Runtime& rt, const StepInputs& in, std::span<const int> devices, int iterations) {
  const int world = static_cast<int>(devices.size());
  if (world < 1) throw Error(ErrorCode::invalid_argument, "tp_decode: at least one device is needed");
  if (iterations < 1) throw Error(ErrorCode::invalid_argument, "tp_decode: iterations must be >= 1");
  for (int d : devices) (void)device_facts(d);  // unknown ids: invalid_argument before NCCL sees them
  const StepShape& sh = in.shape;

  // NVLink multicast (NVLS) stays off on these machines: NCCL reads this when it creates communicators.
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  TpRun result;
  int version = 0;
  nccl_check(ncclGetVersion(&version), "ncclGetVersion");
  result.nccl_version = std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                        std::to_string(version % 100);
  std::vector<ncclComm_t> comms(static_cast<size_t>(world), nullptr);
  std::vector<int> devs(devices.begin(), devices.end());
  nccl_check(ncclCommInitAll(comms.data(), world, devs.data()), "ncclCommInitAll");
  struct Comms {
    std::vector<ncclComm_t>& c;
    ~Comms() {
      for (ncclComm_t x : c)
        if (x) (void)ncclCommDestroy(x);
    }
  } comms_guard{comms};

  std::barrier sync(world);
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<StepOutputs> gathered(static_cast<size_t>(world));
  std::vector<double> ms(static_cast<size_t>(world), 0.0);

  auto worker = [&](int r) {
    const int dev = devs[static_cast<size_t>(r)];
    std::unique_ptr<DeviceStep> step;
    DeviceBuffer g_attn, g_mla;
    size_t attn_count = 0, mla_count = 0;
    try {
      step = std::make_unique<DeviceStep>(rt, in, dev, r, world);
      attn_count = static_cast<size_t>(sh.batch * step->qo_heads() * sh.head_dim);
      mla_count = sh.mla ? static_cast<size_t>(sh.batch * step->mla_heads() * kMlaDv) : 0;
      g_attn = DeviceBuffer(attn_count * 2 * static_cast<size_t>(world), dev);
      if (sh.mla) g_mla = DeviceBuffer(mla_count * 2 * static_cast<size_t>(world), dev);
      // One step without collectives first: anything that can fail fails here, before any rank waits
      // in an all-gather for a peer that will never come.
      step->enqueue();
      (void)step->download();
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
      failed = true;
    }
    sync.arrive_and_wait();
    if (failed) return;
    try {
      auto one_step = [&] {
        step->poison_outputs();
        {
          DeviceGuard guard(dev);
          cuda_check(cudaMemsetAsync(g_attn.get(), 0xFF, g_attn.size(), step->stream()), "tp_decode: poison");
          if (sh.mla) cuda_check(cudaMemsetAsync(g_mla.get(), 0xFF, g_mla.size(), step->stream()), "tp_decode: poison");
        }
        step->enqueue();
        DeviceGuard guard(dev);  // NCCL enqueues on the communicator's device
        nccl_check(ncclGroupStart(), "ncclGroupStart");
        nccl_check(ncclAllGather(step->attn_out().data, g_attn.get(), attn_count, ncclBfloat16,
                                 comms[static_cast<size_t>(r)], step->stream()),
                   "ncclAllGather (attention)");
        if (sh.mla)
          nccl_check(ncclAllGather(step->mla_out().data, g_mla.get(), mla_count, ncclBfloat16,
                                   comms[static_cast<size_t>(r)], step->stream()),
                     "ncclAllGather (MLA)");
        nccl_check(ncclGroupEnd(), "ncclGroupEnd");
      };
      one_step();  // warm-up with collectives
      {
        DeviceGuard guard(dev);
        cuda_check(cudaStreamSynchronize(step->stream()), "tp_decode: cudaStreamSynchronize");
      }
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) one_step();
      DeviceGuard guard(dev);
      cuda_check(cudaStreamSynchronize(step->stream()), "tp_decode: cudaStreamSynchronize");
      ms[static_cast<size_t>(r)] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iterations;
      StepOutputs& g = gathered[static_cast<size_t>(r)];
      g.attn.resize(attn_count * static_cast<size_t>(world));
      cuda_check(cudaMemcpy(g.attn.data(), g_attn.get(), g.attn.size() * 2, cudaMemcpyDeviceToHost), "download");
      if (sh.mla) {
        g.mla.resize(mla_count * static_cast<size_t>(world));
        cuda_check(cudaMemcpy(g.mla.data(), g_mla.get(), g.mla.size() * 2, cudaMemcpyDeviceToHost), "download");
      }
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(worker, r);
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);

  // Rank-major gathered buffers -> single-GPU head order.
  const int64_t hr = sh.num_qo_heads / world, d = sh.head_dim;
  const StepOutputs& g0 = gathered[0];
  result.out.attn.resize(g0.attn.size());
  for (int64_t r = 0; r < world; ++r)
    for (int64_t b = 0; b < sh.batch; ++b)
      std::memcpy(&result.out.attn[static_cast<size_t>((b * sh.num_qo_heads + r * hr) * d)],
                  &g0.attn[static_cast<size_t>(((r * sh.batch + b) * hr) * d)], static_cast<size_t>(hr * d) * 2);
  if (sh.mla) {
    const int64_t hm = sh.mla_heads / world;
    result.out.mla.resize(g0.mla.size());
    for (int64_t r = 0; r < world; ++r)
      for (int64_t b = 0; b < sh.batch; ++b)
        std::memcpy(&result.out.mla[static_cast<size_t>((b * sh.mla_heads + r * hm) * kMlaDv)],
                    &g0.mla[static_cast<size_t>(((r * sh.batch + b) * hm) * kMlaDv)],
                    static_cast<size_t>(hm * kMlaDv) * 2);
  }
  for (const StepOutputs& g : gathered) result.ranks_agree = result.ranks_agree && g.attn == g0.attn && g.mla == g0.mla;
  result.ms_per_step = ms[0];
  return result;
}

}  // namespace flashcpp::tp
