// FlashInfer v0.6.3 module URIs for the attention families this layer calls (facts sheet §B.1-§B.3).
// Booleans render as Python reprs (True/False); posenc is always 0 (no in-kernel positional encoding).
#include <string>

#include "ops/common.hpp"

namespace flashcpp::ops {
namespace {

const char* py_bool(bool b) { return b ? "True" : "False"; }

std::string dtypes_part(const AttentionVariant& v) {
  std::string s = "_dtype_q_";
  s += dtype_name(v.q);
  s += "_dtype_kv_";
  s += dtype_name(v.kv);
  s += "_dtype_o_";
  s += dtype_name(v.o);
  return s;
}

std::string dims_flags_part(const AttentionVariant& v) {
  std::string s = "_head_dim_qk_" + std::to_string(v.head_dim_qk) + "_head_dim_vo_" + std::to_string(v.head_dim_vo);
  s += "_posenc_0_use_swa_";
  s += py_bool(v.use_sliding_window);
  s += "_use_logits_cap_";
  s += py_bool(v.use_logits_soft_cap);
  return s;
}

}  // namespace

std::string single_prefill_uri(const AttentionVariant& v, bool sm90) {
  std::string s = "single_prefill_with_kv_cache" + dtypes_part(v) + dims_flags_part(v) + "_f16qk_" +
                  py_bool(v.use_fp16_qk_reduction);
  if (sm90) s += "_sm90";
  return s;
}

std::string batch_prefill_uri(const AttentionVariant& v, DType idx, bool sm90) {
  std::string s = "batch_prefill_with_kv_cache" + dtypes_part(v) + "_dtype_idx_" + std::string(dtype_name(idx)) +
                  dims_flags_part(v) + "_f16qk_" + py_bool(v.use_fp16_qk_reduction);
  if (sm90) s += "_sm90";
  return s;
}

std::string single_decode_uri(const AttentionVariant& v) {
  return "single_decode_with_kv_cache" + dtypes_part(v) + dims_flags_part(v);
}

std::string batch_decode_uri(const AttentionVariant& v, DType idx) {
  return "batch_decode_with_kv_cache" + dtypes_part(v) + "_dtype_idx_" + std::string(dtype_name(idx)) +
         dims_flags_part(v);
}

}  // namespace flashcpp::ops
