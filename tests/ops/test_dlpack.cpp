// DLPack in and out with structs built by hand: every dtype and device mapping, NULL strides, byte_offset,
// each refusal naming the field, the C function's status and last error, a managed tensor's deleter, and an
// op (the V3.2 FP8 quantizer, host path) fed through the C ABI from DLPack tensors.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flashcpp/dlpack.hpp"
#include "flashcpp/flashcpp.h"
#include "flashcpp/mla.hpp"

extern "C" int flashcpp_dlpack_header_is_c(void);

namespace flashcpp {
namespace {

// A DLTensor over `data` with its own shape/strides storage (strides NULL unless given).
struct HandMade {
  std::vector<int64_t> shape, strides;
  DLTensor t{};
  HandMade(void* data, DLDataType dtype, DLDevice device, std::vector<int64_t> shape_,
           std::vector<int64_t> strides_ = {})
      : shape(std::move(shape_)), strides(std::move(strides_)) {
    t.data = data;
    t.device = device;
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = dtype;
    t.shape = shape.empty() ? nullptr : shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
  }
};

constexpr DLDevice kCpu{kDLCPU, 0};
constexpr DLDataType kF32{kDLFloat, 32, 1};

std::string message_of(const std::function<void()>& fn, ErrorCode expected_code) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected_code) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(DLPackIn, EveryDtypeMapsToItsDType) {
  struct Case {
    DLDataType dl;
    DType expected;
  };
  const Case cases[] = {
      {{kDLBfloat, 16, 1}, DType::bf16}, {{kDLFloat, 16, 1}, DType::f16},   {{kDLFloat, 32, 1}, DType::f32},
      {{kDLFloat, 64, 1}, DType::f64},   {{kDLInt, 32, 1}, DType::i32},     {{kDLUInt, 8, 1}, DType::u8},
      {{kDLFloat8_e4m3fn, 8, 1}, DType::e4m3}, {{kDLFloat8_e5m2, 8, 1}, DType::e5m2},
      {{kDLInt, 8, 1}, DType::i8},       {{kDLInt, 64, 1}, DType::i64},     {{kDLUInt, 32, 1}, DType::u32},
      {{kDLBool, 8, 1}, DType::boolean},
  };
  alignas(8) unsigned char buf[64]{};
  for (const auto& c : cases) {
    HandMade h(buf, c.dl, kCpu, {2, 3});
    const TensorView v = TensorView::from_dlpack(h.t);
    EXPECT_EQ(v.dtype, c.expected) << int(c.dl.code) << "/" << int(c.dl.bits);
    // And back: the exported code and bits are the ones read.
    EXPECT_EQ(dtype_dlpack_code(v.dtype), c.dl.code);
    EXPECT_EQ(dtype_bits(v.dtype), c.dl.bits);
  }
}

TEST(DLPackIn, DevicesMapAndHostIdsReadAsZero) {
  float x = 0;
  HandMade cpu(&x, kF32, {kDLCPU, 0}, {1});
  EXPECT_EQ(TensorView::from_dlpack(cpu.t).device, Device::cpu());
  HandMade cuda(&x, kF32, {kDLCUDA, 3}, {1});
  EXPECT_EQ(TensorView::from_dlpack(cuda.t).device, Device::cuda(3));
  HandMade pinned(&x, kF32, {kDLCUDAHost, 2}, {1});
  EXPECT_EQ(TensorView::from_dlpack(pinned.t).device, Device::cuda_host());
}

TEST(DLPackIn, NullStridesAreCompactRowMajorAndGivenStridesAreKept) {
  float buf[2 * 3 * 4]{};
  HandMade compact(buf, kF32, kCpu, {2, 3, 4});
  const TensorView c = TensorView::from_dlpack(compact.t);
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.data, buf);
  EXPECT_EQ(c.shape[0], 2);
  EXPECT_EQ(c.shape[2], 4);
  EXPECT_EQ(c.strides[0], 12);
  EXPECT_EQ(c.strides[1], 4);
  EXPECT_EQ(c.strides[2], 1);
  HandMade transposed(buf, kF32, kCpu, {4, 6}, {1, 4});
  const TensorView t = TensorView::from_dlpack(transposed.t);
  EXPECT_EQ(t.strides[0], 1);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_FALSE(t.is_contiguous());
  HandMade scalar(buf, kF32, kCpu, {});  // ndim 0, shape and strides NULL
  const TensorView s = TensorView::from_dlpack(scalar.t);
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.numel(), 1);
}

TEST(DLPackIn, ByteOffsetIsAppliedToData) {
  float buf[8]{};
  HandMade h(buf, kF32, kCpu, {4});
  h.t.byte_offset = 4 * sizeof(float);
  EXPECT_EQ(TensorView::from_dlpack(h.t).data, buf + 4);
  // An empty tensor may have NULL data; no offset is applied to NULL.
  HandMade empty(nullptr, kF32, kCpu, {0, 5});
  empty.t.byte_offset = 64;
  const TensorView e = TensorView::from_dlpack(empty.t);
  EXPECT_EQ(e.data, nullptr);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.defined());
}

TEST(DLPackIn, EachRefusalNamesTheFieldAndValue) {
  float buf[8]{};
  struct Case {
    const char* what;
    std::function<void(HandMade&)> spoil;
    ErrorCode code;
    std::string expected;
  };
  const Case cases[] = {
      {"ROCm device", [](HandMade& h) { h.t.device = {kDLROCM, 0}; }, ErrorCode::unsupported,
       "DLTensor.device.device_type is 10 (kDLROCM)"},
      {"managed memory", [](HandMade& h) { h.t.device = {kDLCUDAManaged, 0}; }, ErrorCode::unsupported,
       "DLTensor.device.device_type is 13 (kDLCUDAManaged)"},
      {"unknown device", [](HandMade& h) { h.t.device = {static_cast<DLDeviceType>(99), 0}; },
       ErrorCode::unsupported, "DLTensor.device.device_type is 99 (unknown)"},
      {"negative CUDA id", [](HandMade& h) { h.t.device = {kDLCUDA, -1}; }, ErrorCode::invalid_argument,
       "DLTensor.device.device_id is -1"},
      {"vector lanes", [](HandMade& h) { h.t.dtype = {kDLFloat, 32, 4}; }, ErrorCode::unsupported,
       "DLTensor.dtype.lanes is 4"},
      {"non-fn e4m3", [](HandMade& h) { h.t.dtype = {kDLFloat8_e4m3, 8, 1}; }, ErrorCode::unsupported,
       "DLTensor.dtype is code 8 bits 8"},
      {"complex", [](HandMade& h) { h.t.dtype = {kDLComplex, 64, 1}; }, ErrorCode::unsupported,
       "DLTensor.dtype is code 5 bits 64"},
      {"bf32", [](HandMade& h) { h.t.dtype = {kDLBfloat, 32, 1}; }, ErrorCode::unsupported,
       "DLTensor.dtype is code 4 bits 32"},
      {"rank 7", [](HandMade& h) { h.t.ndim = 7; }, ErrorCode::invalid_argument, "DLTensor.ndim is 7"},
      {"negative rank", [](HandMade& h) { h.t.ndim = -1; }, ErrorCode::invalid_argument, "DLTensor.ndim is -1"},
      {"NULL shape", [](HandMade& h) { h.t.shape = nullptr; }, ErrorCode::invalid_argument,
       "DLTensor.shape is NULL with ndim 2"},
      {"negative size", [](HandMade& h) { h.shape[1] = -3; }, ErrorCode::invalid_argument,
       "DLTensor.shape[1] is -3"},
      {"NULL data", [](HandMade& h) { h.t.data = nullptr; }, ErrorCode::invalid_argument,
       "DLTensor.data is NULL for a tensor with elements"},
      {"offset past the address space", [](HandMade& h) { h.t.byte_offset = UINT64_MAX; },
       ErrorCode::invalid_argument, "DLTensor.byte_offset 18446744073709551615"},
      {"strides that overflow", [](HandMade& h) { h.shape = {INT64_MAX, 2, 2}; h.t.ndim = 3; h.t.shape = h.shape.data(); h.shape[1] = INT64_MAX; },
       ErrorCode::invalid_argument, "DLTensor.shape: "},
  };
  for (const auto& c : cases) {
    std::vector<int64_t> shape7(7, 1);
    HandMade h(buf, kF32, kCpu, {2, 4});
    c.spoil(h);
    if (h.t.ndim == 7) h.t.shape = shape7.data();
    const std::string msg = message_of([&] { (void)TensorView::from_dlpack(h.t); }, c.code);
    EXPECT_EQ(msg.rfind("from_dlpack: " + c.expected, 0), 0u) << c.what << ": " << msg;
  }
}

TEST(DLPackIn, CFunctionFillsTheTensorOrReportsStatusAndLastError) {
  int32_t buf[16]{};
  HandMade h(buf, {kDLInt, 32, 1}, {kDLCUDA, 1}, {2, 8});
  h.t.byte_offset = 8;
  flashcpp_tensor out{};
  ASSERT_EQ(flashcpp_tensor_from_dlpack(&h.t, &out), FLASHCPP_SUCCESS) << flashcpp_last_error();
  EXPECT_EQ(out.data, buf + 2);
  EXPECT_EQ(out.dtype, FLASHCPP_I32);
  EXPECT_EQ(out.device_type, FLASHCPP_CUDA);
  EXPECT_EQ(out.device_id, 1);
  EXPECT_EQ(out.rank, 2);
  EXPECT_EQ(out.shape[0], 2);
  EXPECT_EQ(out.shape[1], 8);
  EXPECT_EQ(out.strides[0], 8);
  EXPECT_EQ(out.strides[1], 1);

  // Refusals: the status by kind, the last error naming the field, *out untouched.
  const flashcpp_tensor before = out;
  h.t.device = {kDLVulkan, 0};
  EXPECT_EQ(flashcpp_tensor_from_dlpack(&h.t, &out), FLASHCPP_UNSUPPORTED);
  EXPECT_NE(std::string(flashcpp_last_error()).find("DLTensor.device.device_type is 7 (kDLVulkan)"), std::string::npos)
      << flashcpp_last_error();
  EXPECT_EQ(std::memcmp(&before, &out, sizeof out), 0);
  h.t.device = {kDLCPU, 0};
  h.shape[0] = -1;
  EXPECT_EQ(flashcpp_tensor_from_dlpack(&h.t, &out), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("DLTensor.shape[0] is -1"), std::string::npos)
      << flashcpp_last_error();
  EXPECT_EQ(std::memcmp(&before, &out, sizeof out), 0);
  EXPECT_EQ(flashcpp_tensor_from_dlpack(nullptr, &out), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("argument 'src' is NULL"), std::string::npos);
  EXPECT_EQ(flashcpp_tensor_from_dlpack(&h.t, nullptr), FLASHCPP_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flashcpp_last_error()).find("argument 'out' is NULL"), std::string::npos);
}

TEST(DLPackIn, HeaderIsValidC) { EXPECT_EQ(flashcpp_dlpack_header_is_c(), 1); }

// bf16 bits of v (truncation: exact for the values used here).
uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

TEST(DLPackIn, AnOpThroughTheCAbiFromDLPackTensorsMatchesTheDirectCall) {
  // V3.2 FP8 quantizer, host path: kv bf16 [3, 1, 576] read through byte_offset, out u8 [3, 1, 656] with NULL
  // strides; the bytes must equal those of the C++ call on plain views.
  constexpr int kRows = 3, kDim = 576, kBytes = mla::kFp8BytesPerToken;
  std::vector<uint16_t> storage(16 + kRows * kDim);
  for (size_t i = 0; i < kRows * kDim; ++i)
    storage[16 + i] = bf16_bits(static_cast<float>(static_cast<int>(i * 37 % 101) - 50) / 16.f);
  std::vector<uint8_t> via_dlpack(kRows * kBytes, 0xAB), direct(kRows * kBytes, 0xCD);

  HandMade kv(storage.data(), {kDLBfloat, 16, 1}, kCpu, {kRows, 1, kDim});
  kv.t.byte_offset = 16 * sizeof(uint16_t);
  HandMade out(via_dlpack.data(), {kDLUInt, 8, 1}, kCpu, {kRows, 1, kBytes});
  flashcpp_tensor ckv, cout;
  ASSERT_EQ(flashcpp_tensor_from_dlpack(&kv.t, &ckv), FLASHCPP_SUCCESS) << flashcpp_last_error();
  ASSERT_EQ(flashcpp_tensor_from_dlpack(&out.t, &cout), FLASHCPP_SUCCESS) << flashcpp_last_error();
  ASSERT_EQ(flashcpp_mla_quantize_kv_cache_fp8(&ckv, &cout, nullptr), FLASHCPP_SUCCESS) << flashcpp_last_error();

  mla::quantize_kv_cache_fp8(
      TensorView::contiguous(storage.data() + 16, DType::bf16, Device::cpu(), {kRows, 1, kDim}),
      TensorView::contiguous(direct.data(), DType::u8, Device::cpu(), {kRows, 1, kBytes}), nullptr);
  EXPECT_EQ(via_dlpack, direct);
  EXPECT_NE(via_dlpack, std::vector<uint8_t>(kRows * kBytes, 0xAB));  // written
}

// ---------------------------------------------------------------------------------------------------
// DLPack out

TEST(DLPackOut, ManagedTensorDescribesTheViewAndItsDeleterReleasesTheOwner) {
  auto storage = std::make_shared<std::vector<float>>(24);
  bool released = false;
  std::shared_ptr<void> owner(storage.get(), [keep = storage, &released](void*) mutable {
    released = true;
    keep.reset();
  });
  const TensorView view =
      TensorView::strided(storage->data() + 1, DType::f32, Device::cuda_host(), {3, 4}, {8, 2});
  std::weak_ptr<std::vector<float>> alive = storage;
  storage.reset();
  DLManagedTensor* m = to_dlpack(std::move(owner), view);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(owner, nullptr);  // moved in
  EXPECT_FALSE(released);
  const DLTensor& t = m->dl_tensor;
  EXPECT_EQ(t.data, view.data);
  EXPECT_EQ(t.byte_offset, 0u);
  EXPECT_EQ(t.device.device_type, kDLCUDAHost);
  EXPECT_EQ(t.ndim, 2);
  EXPECT_EQ(t.dtype.code, kDLFloat);
  EXPECT_EQ(t.dtype.bits, 32);
  EXPECT_EQ(t.dtype.lanes, 1);
  EXPECT_EQ(t.shape[0], 3);
  EXPECT_EQ(t.shape[1], 4);
  EXPECT_EQ(t.strides[0], 8);
  EXPECT_EQ(t.strides[1], 2);
  // Round trip: the managed tensor reads back as the view.
  const TensorView back = TensorView::from_dlpack(t);
  EXPECT_EQ(back.describe(), view.describe());
  EXPECT_EQ(back.strides, view.strides);
  EXPECT_FALSE(alive.expired());
  m->deleter(m);
  EXPECT_TRUE(released);
  EXPECT_TRUE(alive.expired());  // the storage was freed with the managed tensor (ASan: and the holder)
}

TEST(DLPackOut, DeviceBufferGoesWithTheManagedTensor) {
  // A zero-byte DeviceBuffer needs no GPU; an empty view of it is exported and freed.
  DeviceBuffer buffer(0, 2);
  DLManagedTensor* m = to_dlpack(std::move(buffer), TensorView::contiguous(nullptr, DType::bf16, Device::cuda(2), {0, 512}));
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(m->dl_tensor.device.device_id, 2);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLBfloat);
  EXPECT_EQ(m->dl_tensor.strides[0], 512);
  m->deleter(m);
}

TEST(DLPackOut, RefusalsLeaveTheBufferWithTheCaller) {
  DeviceBuffer buffer(0, 1);
  float host[4]{};
  const std::string wrong_device = message_of(
      [&] { to_dlpack(std::move(buffer), TensorView::contiguous(nullptr, DType::f32, Device::cuda(0), {0})); },
      ErrorCode::invalid_argument);
  EXPECT_NE(wrong_device.find("to_dlpack: argument 'view' must be on the buffer's device cuda:1"), std::string::npos)
      << wrong_device;
  const std::string outside = message_of(
      [&] { to_dlpack(std::move(buffer), TensorView::contiguous(host, DType::f32, Device::cuda(1), {4})); },
      ErrorCode::invalid_argument);
  EXPECT_NE(outside.find("must lie inside the buffer's 0 bytes"), std::string::npos) << outside;
  EXPECT_EQ(buffer.device(), 1);  // not moved from
  TensorView negative = TensorView::contiguous(host, DType::f32, Device::cpu(), {4});
  negative.shape[0] = -4;
  const std::string bad_view = message_of([&] { to_dlpack(std::shared_ptr<void>(), negative); },
                                          ErrorCode::invalid_argument);
  EXPECT_NE(bad_view.find("must have no negative size"), std::string::npos) << bad_view;
  TensorView odd_device = TensorView::contiguous(host, DType::f32, Device::cpu(), {4});
  odd_device.device.type = static_cast<DeviceType>(7);
  const std::string bad_device = message_of([&] { to_dlpack(std::shared_ptr<void>(), odd_device); },
                                            ErrorCode::invalid_argument);
  EXPECT_NE(bad_device.find("got device type 7"), std::string::npos) << bad_device;
}

}  // namespace
}  // namespace flashcpp
