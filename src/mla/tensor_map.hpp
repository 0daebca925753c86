// The driver's tensor-map encoder (cuTensorMapEncodeTiled), which the 16-bit pair cluster's whole-tile copies need
// (sparse_attention_wgmma.cuh, Traits::kTmaRows). Looked up through the runtime, so the library links no driver
// library.
#pragma once
#include <cudaTypedefs.h>

namespace flashcpp::mla::kernels {

/// The driver's encoder, looked up once (thread-safe), or null where the driver has none.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

/// Whether the driver has the encoder (KernelSupport::tensor_maps).
bool tensor_maps_available();

}  // namespace flashcpp::mla::kernels
