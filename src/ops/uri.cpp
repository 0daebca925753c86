// Module URIs of the attention families the ops call: one spelling for the whole project, the module
// builder's (flashcpp::jit, FlashInfer 0.6.3 naming, facts sheet §B.1-§B.3). posenc is always 0 here.
#include "flashcpp/jit.hpp"
#include "ops/common.hpp"

namespace flashcpp::ops {
namespace {

jit::AttentionSpec spec(const AttentionVariant& v, bool sm90, DType idx = DType::i32) {
  jit::AttentionSpec s;
  s.backend = sm90 ? jit::Backend::fa3 : jit::Backend::fa2;
  s.q = v.q;
  s.kv = v.kv;
  s.o = v.o;
  s.idx = idx;
  s.head_dim_qk = static_cast<int>(v.head_dim_qk);
  s.head_dim_vo = static_cast<int>(v.head_dim_vo);
  s.pos_encoding = 0;
  s.use_sliding_window = v.use_sliding_window;
  s.use_logits_soft_cap = v.use_logits_soft_cap;
  s.use_fp16_qk_reduction = v.use_fp16_qk_reduction;
  return s;
}

}  // namespace

std::string single_prefill_uri(const AttentionVariant& v, bool sm90) { return jit::single_prefill_uri(spec(v, sm90)); }
std::string batch_prefill_uri(const AttentionVariant& v, DType idx, bool sm90) {
  return jit::batch_prefill_uri(spec(v, sm90, idx));
}
std::string single_decode_uri(const AttentionVariant& v) { return jit::single_decode_uri(spec(v, false)); }
std::string batch_decode_uri(const AttentionVariant& v, DType idx) { return jit::batch_decode_uri(spec(v, false, idx)); }

}  // namespace flashcpp::ops
