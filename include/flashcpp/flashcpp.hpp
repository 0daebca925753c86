// flashcpp: everything a C++ program needs, in one include.
//   Runtime (where FlashInfer modules come from), TensorView, DLPack in and out, errors, CUDA helpers,
//   FlashInfer ops (norm, RoPE, gated activations, cascade merges, sampling, DSA top-k, paged KV append, prefill,
//   decode, batch MLA, GDN, fused MoE),
//   our sparse MLA kernels, and the float64 `reference` backend.
#pragma once
#include "flashcpp/activation.hpp"
#include "flashcpp/artifacts.hpp"
#include "flashcpp/attention.hpp"
#include "flashcpp/cascade.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/dlpack.hpp"
#include "flashcpp/dtype.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/gdn.hpp"
#include "flashcpp/jit.hpp"
#include "flashcpp/mla.hpp"
#include "flashcpp/mla_attention.hpp"
#include "flashcpp/moe.hpp"
#include "flashcpp/norm.hpp"
#include "flashcpp/page.hpp"
#include "flashcpp/reference.hpp"
#include "flashcpp/rope.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/sampling.hpp"
#include "flashcpp/tensor.hpp"
#include "flashcpp/topk.hpp"
#include "flashcpp/version.hpp"
