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

// The same work as BM_FlashcppCall written by hand against the raw ABI, per call: DLTensors and the
// TVMFFIAny array filled from the caller's shapes, the stream set before and restored after. The
// difference to BM_FlashcppCall is what flashcpp's layer adds.
void BM_HandPackedPerCallWithStream(benchmark::State& state) {
  Fixture& f = fixture();
  const ffi::abi::Api& api = ffi::Library::instance().api();
  const TensorView q = TensorView::contiguous(f.buf.data(), DType::bf16, Device::cuda(0), {64, 32, 128});
  const TensorView k = TensorView::contiguous(f.buf.data(), DType::bf16, Device::cuda(0), {1024, 16, 8, 128});
  const TensorView idx = TensorView::contiguous(f.buf.data(), DType::i32, Device::cuda(0), {65});
  const TensorView* views[5] = {&q, &k, &k, &q, &idx};
  auto stream = reinterpret_cast<void*>(uintptr_t{0x1234});
  for (auto _ : state) {
    DLTensor t[5];
    int64_t shapes[5][6], strides[5][6];
    ffi::abi::Any args[8];
    for (int i = 0; i < 5; ++i) {
      const TensorView& v = *views[i];
      for (int d = 0; d < v.rank; ++d) {
        shapes[i][d] = v.shape[static_cast<size_t>(d)];
        strides[i][d] = v.strides[static_cast<size_t>(d)];
      }
      t[i] = DLTensor{v.data, {kDLCUDA, 0}, v.rank, {dtype_dlpack_code(v.dtype), dtype_bits(v.dtype), 1},
                      shapes[i], strides[i], 0};
      args[i].type_index = ffi::abi::kDLTensorPtr;
      args[i].zero_padding = 0;
      args[i].v_ptr = &t[i];
    }
    args[5].type_index = ffi::abi::kInt;
    args[5].zero_padding = 0;
    args[5].v_int64 = 3;
    args[6].type_index = ffi::abi::kFloat;
    args[6].zero_padding = 0;
    args[6].v_float64 = 0.5;
    args[7].type_index = ffi::abi::kBool;
    args[7].zero_padding = 0;
    args[7].v_int64 = 1;
    void* previous = nullptr;
    api.EnvSetStream(kDLCUDA, 0, stream, &previous);
    ffi::abi::Any result{};
    result.type_index = ffi::abi::kNone;
    int rc = f.fn(nullptr, args, 8, &result);
    api.EnvSetStream(kDLCUDA, 0, previous, nullptr);
    benchmark::DoNotOptimize(rc);
    benchmark::DoNotOptimize(result.v_int64);
  }
}
BENCHMARK(BM_HandPackedPerCallWithStream);
}  // namespace

BENCHMARK_MAIN();
