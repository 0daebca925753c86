// `flashcpp mla-bench --suite flashmla` (cmd_mla_suite.cpp): the performance cases of DeepSeek FlashMLA's own test
// suites, with inputs drawn the way FlashMLA's tests draw them, timed on flashcpp alone.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "flashcpp/mla.hpp"
#include "flashcpp/tensor.hpp"
#include "mla/launch_plan.hpp"
#include "mla/sparse_attention_kernel.hpp"

namespace flashcpp::cli {

struct MlaSuiteOptions {
  int device = 0;
  int warmup = 3;   ///< graph replays before the timed ones (per case)
  int iters = 10;   ///< timed replays per case (median reported)
  int num_sms = 0;  ///< DecodeConfig::num_sms (0: the device's)
  bool decode = true, prefill = true;
  bool dense = false;  ///< the dense decoding cases instead (--suite flashmla-dense)
  std::string filter;  ///< only cases whose label ("decode V4 config 1 b 64 s_q 2 h_q 64 d_qk 512") contains it
};

/// The kernel selector's decode inputs from a plan (cmd_mla_bench.cpp): requests of q [b, s_q, ...] and, when the
/// plan splits, its schedule and accumulators, as mla.cpp fills them, so a benchmark's kernel label names the kernel
/// that ran.
void add_decode_selector_params(mla::kernels::SparseAttentionParams& p, const TensorView& q, const mla::DecodePlan& plan);

/// Runs FlashMLA's decode then prefill performance cases (or, with options.dense, its dense decoding cases) on
/// `stream` (device `options.device` current), one human line and one "MLA_BENCH {json}" line per case.
void run_flashmla_suite(const MlaSuiteOptions& options, cudaStream_t stream);

}  // namespace flashcpp::cli
