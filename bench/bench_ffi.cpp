// Host cost of one call through flashcpp's ffi layer (5 tensors + 3 scalars, stream bound) against the
// same exported function called with a hand-packed argument array and no stream handling.
#include <benchmark/benchmark.h>

#include <vector>

#include "ffi/ffi.hpp"

using namespace flashcpp;

namespace {
struct Fixture {
  std::shared_ptr<ffi::ModuleLibrary> module;
  ffi::abi::SafeCall fn = nullptr;
  std::vector<uint16_t> buf = std::vector<uint16_t>(4096);
  Fixture() {
    ffi::Library::load(FLASHCPP_TVM_FFI_LIB);
    module = ffi::ModuleLibrary::open(FLASHCPP_TEST_MODULE);
    fn = module->function("five_tensors_three_scalars");
  }
};
Fixture& fixture() {
  static Fixture f;
  return f;
}

// Inputs as an op sees them: TensorViews built by the caller (a real CUDA device id, CPU memory is fine:
// the callee reads only metadata).
void BM_FlashcppCall(benchmark::State& state) {
  Fixture& f = fixture();
  const Device dev = Device::cuda(0);
  const TensorView q = TensorView::contiguous(f.buf.data(), DType::bf16, dev, {64, 32, 128});
  const TensorView k = TensorView::contiguous(f.buf.data(), DType::bf16, dev, {1024, 16, 8, 128});
  const TensorView v = k;
  const TensorView o = q;
  const TensorView idx = TensorView::contiguous(f.buf.data(), DType::i32, dev, {65});
  auto stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x1234});
  for (auto _ : state) {
    ffi::TensorArg tq(q), tk(k), tv(v), to(o), ti(idx);
    const ffi::Arg args[] = {tq, tk, tv, to, ti, int64_t{3}, 0.5, true};
    const ffi::StreamBinding binding{dev, stream};
    ffi::Any result;
    ffi::call(f.fn, args, &result, &binding);
    benchmark::DoNotOptimize(result.raw()->v_int64);
  }
}
BENCHMARK(BM_FlashcppCall);

// The floor: DLTensors and the TVMFFIAny array packed once, outside the loop; a bare call.
void BM_HandPackedCall(benchmark::State& state) {
  Fixture& f = fixture();
  int64_t s3[] = {64, 32, 128}, st3[] = {4096, 128, 1};
  int64_t s4[] = {1024, 16, 8, 128}, st4[] = {16384, 1024, 128, 1};
  int64_t s1[] = {65}, st1[] = {1};
  DLTensor t3{f.buf.data(), {kDLCUDA, 0}, 3, {kDLBfloat, 16, 1}, s3, st3, 0};
  DLTensor t4{f.buf.data(), {kDLCUDA, 0}, 4, {kDLBfloat, 16, 1}, s4, st4, 0};
  DLTensor t1{f.buf.data(), {kDLCUDA, 0}, 1, {kDLInt, 32, 1}, s1, st1, 0};
  ffi::abi::Any args[8]{};
  DLTensor* ts[] = {&t3, &t4, &t4, &t3, &t1};
  for (int i = 0; i < 5; ++i) {
    args[i].type_index = ffi::abi::kDLTensorPtr;
    args[i].v_ptr = ts[i];
  }
  args[5].type_index = ffi::abi::kInt;
  args[5].v_int64 = 3;
  args[6].type_index = ffi::abi::kFloat;
  args[6].v_float64 = 0.5;
  args[7].type_index = ffi::abi::kBool;
  args[7].v_int64 = 1;
  for (auto _ : state) {
    ffi::abi::Any result{};
    result.type_index = ffi::abi::kNone;
    int rc = f.fn(nullptr, args, 8, &result);
    benchmark::DoNotOptimize(rc);
    benchmark::DoNotOptimize(result.v_int64);
  }
}
BENCHMARK(BM_HandPackedCall);

// Same as BM_FlashcppCall without a stream binding: isolates the cost of the stream set/restore.
void BM_FlashcppCallNoStream(benchmark::State& state) {
  Fixture& f = fixture();
  const Device dev = Device::cuda(0);
  const TensorView q = TensorView::contiguous(f.buf.data(), DType::bf16, dev, {64, 32, 128});
  const TensorView k = TensorView::contiguous(f.buf.data(), DType::bf16, dev, {1024, 16, 8, 128});
  const TensorView idx = TensorView::contiguous(f.buf.data(), DType::i32, dev, {65});
  for (auto _ : state) {
    ffi::TensorArg tq(q), tk(k), tv(k), to(q), ti(idx);
    const ffi::Arg args[] = {tq, tk, tv, to, ti, int64_t{3}, 0.5, true};
    ffi::Any result;
    ffi::call(f.fn, args, &result, nullptr);
    benchmark::DoNotOptimize(result.raw()->v_int64);
  }
}
BENCHMARK(BM_FlashcppCallNoStream);
}  // namespace

BENCHMARK_MAIN();
