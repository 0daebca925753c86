// DLPack on the GPU: the V3.2 FP8 quantizer fed through the C ABI from kDLCUDA DLTensors (the input read
// through byte_offset, the output with NULL strides) writes the host path's bytes; its output handed back
// out as a DLManagedTensor owning the DeviceBuffer reads back the same, and the deleter frees it.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "flashcpp/dlpack.hpp"
#include "flashcpp/flashcpp.h"
#include "flashcpp/mla.hpp"
#include "support/gpu.hpp"

namespace {

using namespace flashcpp;

uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

TEST(DLPackGpu, QuantizerThroughTheCAbiFromCudaDLTensors) {
  FLASHCPP_REQUIRE_GPU();
  constexpr int64_t kRows = 40, kDim = 576, kBytes = mla::kFp8BytesPerToken, kLead = 128;  // kLead bf16 before kv
  std::vector<uint16_t> host_kv(kLead + kRows * kDim, 0);
  for (int64_t i = 0; i < kRows * kDim; ++i)
    host_kv[kLead + i] = bf16_bits(static_cast<float>(static_cast<int>(i * 7919 % 2003) - 1001) / 97.f);
  std::vector<uint8_t> expected(kRows * kBytes);
  mla::quantize_kv_cache_fp8(TensorView::contiguous(host_kv.data() + kLead, DType::bf16, Device::cpu(), {kRows, 1, kDim}),
                             TensorView::contiguous(expected.data(), DType::u8, Device::cpu(), {kRows, 1, kBytes}),
                             nullptr);

  DeviceBuffer kv(host_kv.size() * sizeof(uint16_t), 0), out(kRows * kBytes, 0);
  CUDA_OK(::flashcpp::testing::upload_bytes(kv.get(), host_kv.data(), kv.size()));
  CUDA_OK(::flashcpp::testing::fill_bytes(out.get(), ::flashcpp::testing::kPoisonByte, out.size()));

  int64_t kv_shape[3] = {kRows, 1, kDim}, out_shape[3] = {kRows, 1, kBytes};
  DLTensor dkv{}, dout{};
  dkv.data = kv.get();  // base pointer 256-aligned, the tensor at byte_offset, as DLPack describes it
  dkv.byte_offset = kLead * sizeof(uint16_t);
  dkv.device = {kDLCUDA, 0};
  dkv.ndim = 3;
  dkv.dtype = {kDLBfloat, 16, 1};
  dkv.shape = kv_shape;
  dout.data = out.get();
  dout.device = {kDLCUDA, 0};
  dout.ndim = 3;
  dout.dtype = {kDLUInt, 8, 1};
  dout.shape = out_shape;  // strides NULL: compact
  flashcpp_tensor ckv, cout;
  ASSERT_EQ(flashcpp_tensor_from_dlpack(&dkv, &ckv), FLASHCPP_SUCCESS) << flashcpp_last_error();
  ASSERT_EQ(flashcpp_tensor_from_dlpack(&dout, &cout), FLASHCPP_SUCCESS) << flashcpp_last_error();
  Stream stream(0);
  ASSERT_EQ(flashcpp_mla_quantize_kv_cache_fp8(&ckv, &cout, stream.get()), FLASHCPP_SUCCESS) << flashcpp_last_error();
  stream.synchronize();
  std::vector<uint8_t> got(expected.size());
  CUDA_OK(cudaMemcpy(got.data(), out.get(), got.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, expected);

  // Out again: the managed tensor owns the buffer; what it describes reads back the same bytes.
  const TensorView out_view = TensorView::from_dlpack(dout);
  DLManagedTensor* managed = to_dlpack(std::move(out), out_view);
  EXPECT_EQ(out.get(), nullptr);
  const TensorView back = TensorView::from_dlpack(managed->dl_tensor);
  EXPECT_EQ(back.device, Device::cuda(0));
  EXPECT_TRUE(back.is_contiguous());
  std::vector<uint8_t> again(expected.size());
  CUDA_OK(cudaMemcpy(again.data(), back.data, again.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(again, expected);
  void* const freed = back.data;
  managed->deleter(managed);
  // The deleter ran cudaFree: the runtime no longer knows the pointer.
  cudaPointerAttributes attributes{};
  CUDA_OK(cudaPointerGetAttributes(&attributes, freed));
  EXPECT_EQ(attributes.type, cudaMemoryTypeUnregistered);
}

}  // namespace
