// FlashInfer 0.6.3 module URIs: construction from typed specs and parsing back.
// Facts: flashinfer/jit/attention/modules.py (get_*_uri), flashinfer/jit/utils.py (filename_safe_dtype_map).
#include <regex>
#include <string>

#include "jit/jit.hpp"

namespace flashcpp::jit {

std::string_view family_name(Family f) noexcept {
  switch (f) {
    case Family::norm: return "norm";
    case Family::page: return "page";
    case Family::gdn_prefill_sm90: return "gdn_prefill_sm90";
    case Family::single_prefill: return "single_prefill";
    case Family::batch_prefill: return "batch_prefill";
    case Family::single_decode: return "single_decode";
    case Family::batch_decode: return "batch_decode";
    case Family::batch_mla: return "batch_mla";
    case Family::rope: return "rope";
    case Family::cascade: return "cascade";
    case Family::sampling: return "sampling";
    case Family::topk: return "topk";
    case Family::act_and_mul: return "act_and_mul";
  }
  return "unknown";
}

std::string_view activation_name(Activation a) noexcept {
  switch (a) {
    case Activation::silu: return "silu";
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
  }
  return "unknown";
}

std::string act_and_mul_uri(Activation a) { return std::string(activation_name(a)) + "_and_mul"; }

std::optional<std::string_view> uri_dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f16: case DType::bf16: case DType::e4m3: case DType::e5m2: case DType::i8: case DType::u8:
    case DType::i32: case DType::u32: case DType::i64: case DType::u64:
      return dtype_name(t);
    default:
      return std::nullopt;
  }
}

std::optional<std::string_view> c_type_name(DType t) noexcept {
  switch (t) {
    case DType::f16: return "half";
    case DType::bf16: return "nv_bfloat16";
    case DType::e4m3: return "__nv_fp8_e4m3";
    case DType::e5m2: return "__nv_fp8_e5m2";
    case DType::i8: return "int8_t";
    case DType::u8: return "uint8_t";
    case DType::i32: return "int32_t";
    case DType::u32: return "uint32_t";
    case DType::i64: return "int64_t";
    case DType::u64: return "uint64_t";
    default: return std::nullopt;
  }
}

static std::string dt(DType t) {
  auto n = uri_dtype_name(t);
  if (!n)
    throw Error(ErrorCode::invalid_argument,
                "FlashInfer module URIs have no name for dtype " + std::string(dtype_name(t)) +
                    " (allowed: f16, bf16, e4m3, e5m2, i8, u8, i32, u32, i64, u64)");
  return std::string(*n);
}

// Python's str(bool).
static const char* py(bool b) { return b ? "True" : "False"; }

static std::string head(const AttentionSpec& s, bool with_idx) {
  std::string u = "dtype_q_" + dt(s.q) + "_dtype_kv_" + dt(s.kv) + "_dtype_o_" + dt(s.o) + "_";
  if (with_idx) u += "dtype_idx_" + dt(s.idx) + "_";
  u += "head_dim_qk_" + std::to_string(s.head_dim_qk) + "_head_dim_vo_" + std::to_string(s.head_dim_vo) +
       "_posenc_" + std::to_string(s.pos_encoding) + "_use_swa_" + py(s.use_sliding_window) +
       "_use_logits_cap_" + py(s.use_logits_soft_cap);
  return u;
}

std::string single_prefill_uri(const AttentionSpec& s) {
  return "single_prefill_with_kv_cache_" + head(s, false) + "_f16qk_" + py(s.use_fp16_qk_reduction) +
         (s.backend == Backend::fa3 ? "_sm90" : "");
}

std::string batch_prefill_uri(const AttentionSpec& s) {
  return "batch_prefill_with_kv_cache_" + head(s, true) + "_f16qk_" + py(s.use_fp16_qk_reduction) +
         (s.backend == Backend::fa3 ? "_sm90" : "");
}

std::string single_decode_uri(const AttentionSpec& s) { return "single_decode_with_kv_cache_" + head(s, false); }

std::string batch_decode_uri(const AttentionSpec& s) { return "batch_decode_with_kv_cache_" + head(s, true); }

std::string batch_mla_uri(const MlaSpec& s) {
  return "batch_mla_attention_dtype_q_" + dt(s.q) + "_dtype_kv_" + dt(s.kv) + "_dtype_o_" + dt(s.o) +
         "_dtype_idx_" + dt(s.idx) + "_head_dim_ckv_" + std::to_string(s.head_dim_ckv) + "_head_dim_kpe_" +
         std::to_string(s.head_dim_kpe) + "_profiler_" + py(s.profiler) +
         (s.backend == Backend::fa3 ? "_sm90" : "");
}

std::string ModuleSpec::uri() const {
  switch (family) {
    case Family::norm: return norm_uri();
    case Family::page: return page_uri();
    case Family::gdn_prefill_sm90: return gdn_prefill_sm90_uri();
    case Family::single_prefill: return single_prefill_uri(attention);
    case Family::batch_prefill: return batch_prefill_uri(attention);
    case Family::single_decode: return single_decode_uri(attention);
    case Family::batch_decode: return batch_decode_uri(attention);
    case Family::batch_mla: return batch_mla_uri(mla);
    case Family::rope: return rope_uri();
    case Family::cascade: return cascade_uri();
    case Family::sampling: return sampling_uri();
    case Family::topk: return topk_uri();
    case Family::act_and_mul: return act_and_mul_uri(activation);
  }
  throw Error(ErrorCode::internal, "jit: unknown module family");
}

// ---- parsing ----

static std::optional<DType> parse_dt(const std::string& s) {
  auto t = dtype_from_name(s);
  if (!t || !uri_dtype_name(*t)) return std::nullopt;
  return t;
}

static std::optional<int> parse_int(const std::string& s) {
  if (s.empty() || s.size() > 6) return std::nullopt;
  return std::stoi(s);
}

std::optional<ModuleSpec> parse_uri(const std::string& uri) {
  ModuleSpec spec;
  if (uri == "norm") { spec.family = Family::norm; return spec; }
  if (uri == "page") { spec.family = Family::page; return spec; }
  if (uri == "gdn_prefill_sm90") { spec.family = Family::gdn_prefill_sm90; return spec; }
  for (Family f : {Family::rope, Family::cascade, Family::sampling, Family::topk})
    if (uri == family_name(f)) { spec.family = f; return spec; }
  for (Activation a : {Activation::silu, Activation::gelu, Activation::gelu_tanh})
    if (uri == act_and_mul_uri(a)) { spec.family = Family::act_and_mul; spec.activation = a; return spec; }

  // One pattern per family; the dtype names contain no '_', which makes the split unambiguous.
  static const std::string D = "([a-z0-9]+)", N = "([0-9]+)", B = "(True|False)";
  static const std::regex attention_re(
      "^(single_prefill|batch_prefill|single_decode|batch_decode)_with_kv_cache_dtype_q_" + D + "_dtype_kv_" + D +
      "_dtype_o_" + D + "(?:_dtype_idx_" + D + ")?_head_dim_qk_" + N + "_head_dim_vo_" + N + "_posenc_" + N +
      "_use_swa_" + B + "_use_logits_cap_" + B + "(?:_f16qk_" + B + ")?(_sm90)?$");
  static const std::regex mla_re("^batch_mla_attention_dtype_q_" + D + "_dtype_kv_" + D + "_dtype_o_" + D +
                                 "_dtype_idx_" + D + "_head_dim_ckv_" + N + "_head_dim_kpe_" + N + "_profiler_" +
                                 B + "(_sm90)?$");
  std::smatch m;
  if (std::regex_match(uri, m, attention_re)) {
    const std::string fam = m[1];
    spec.family = fam == "single_prefill" ? Family::single_prefill
                  : fam == "batch_prefill" ? Family::batch_prefill
                  : fam == "single_decode" ? Family::single_decode
                                           : Family::batch_decode;
    AttentionSpec& a = spec.attention;
    auto q = parse_dt(m[2]), kv = parse_dt(m[3]), o = parse_dt(m[4]);
    if (!q || !kv || !o) return std::nullopt;
    a.q = *q, a.kv = *kv, a.o = *o;
    if (m[5].matched) {
      auto idx = parse_dt(m[5]);
      if (!idx) return std::nullopt;
      a.idx = *idx;
    }
    auto dqk = parse_int(m[6]), dvo = parse_int(m[7]), pe = parse_int(m[8]);
    if (!dqk || !dvo || !pe) return std::nullopt;
    a.head_dim_qk = *dqk, a.head_dim_vo = *dvo, a.pos_encoding = *pe;
    a.use_sliding_window = m[9] == "True";
    a.use_logits_soft_cap = m[10] == "True";
    if (m[11].matched) a.use_fp16_qk_reduction = m[11] == "True";
    a.backend = m[12].matched ? Backend::fa3 : Backend::fa2;
  } else if (std::regex_match(uri, m, mla_re)) {
    spec.family = Family::batch_mla;
    MlaSpec& s = spec.mla;
    auto q = parse_dt(m[1]), kv = parse_dt(m[2]), o = parse_dt(m[3]), idx = parse_dt(m[4]);
    auto ckv = parse_int(m[5]), kpe = parse_int(m[6]);
    if (!q || !kv || !o || !idx || !ckv || !kpe) return std::nullopt;
    s.q = *q, s.kv = *kv, s.o = *o, s.idx = *idx, s.head_dim_ckv = *ckv, s.head_dim_kpe = *kpe;
    s.profiler = m[7] == "True";
    s.backend = m[8].matched ? Backend::fa3 : Backend::fa2;
  } else {
    return std::nullopt;
  }
  // Anything the constructors would spell differently (idx on a single family, f16qk on decode, _sm90 on
  // decode, leading zeros, ...) is not a FlashInfer URI.
  if (spec.uri() != uri) return std::nullopt;
  return spec;
}

std::vector<std::string> default_uris() {
  std::vector<std::string> uris = {norm_uri(),    page_uri(),     gdn_prefill_sm90_uri(), rope_uri(),
                                   cascade_uri(), sampling_uri(), topk_uri()};
  for (Activation a : {Activation::silu, Activation::gelu, Activation::gelu_tanh}) uris.push_back(act_and_mul_uri(a));
  for (DType t : {DType::bf16, DType::f16}) {
    AttentionSpec a;
    a.q = a.kv = a.o = t;
    a.head_dim_qk = a.head_dim_vo = 128;
    a.backend = Backend::fa2;
    uris.push_back(batch_prefill_uri(a));
    uris.push_back(single_prefill_uri(a));
    uris.push_back(single_decode_uri(a));
    uris.push_back(batch_decode_uri(a));
    a.backend = Backend::fa3;
    uris.push_back(batch_prefill_uri(a));
    uris.push_back(single_prefill_uri(a));
    MlaSpec m;
    m.q = m.kv = m.o = t;
    for (Backend b : {Backend::fa2, Backend::fa3}) {
      m.backend = b;
      uris.push_back(batch_mla_uri(m));
    }
  }
  return uris;
}

}  // namespace flashcpp::jit
