// Per-family source generation, following FlashInfer 0.6.3's Python generator (flashinfer/jit/
// attention/modules.py, norm.py, page.py, gdn.py, attention/utils.py): the same rendered files, the same
// copied files, the same source order and the same module flags. Our own code; FlashInfer's templates
// are read from the pinned wheel's data/csrc at generation time.
#include <atomic>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <utility>
#include <unistd.h>

#include "jit/jit.hpp"

namespace flashcpp::jit {
namespace fs = std::filesystem;
namespace {

using Vars = std::map<std::string, std::string>;

const std::vector<std::string> kSm90aFlags = {
    "-gencode=arch=compute_90a,code=sm_90a",
    "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED",
    "-DFLASHINFER_ENABLE_FP8_E8M0",
    "-DFLASHINFER_ENABLE_FP4_E2M1",
};

const char* const kMaskModeLiteral[4] = {"MaskMode::kNone", "MaskMode::kCausal", "MaskMode::kCustom",
                                         "MaskMode::kMultiItemScoring"};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    throw Error(ErrorCode::not_found,
                "jit: FlashInfer source " + p.string() +
                    " is missing; set FLASHCPP_FLASHINFER_DIR to the unpacked flashinfer-python 0.6.3 package "
                    "(its flashinfer/ or flashinfer/data/ directory; scripts/deps.sh installs it)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* lower(bool b) { return b ? "true" : "false"; }

std::string ctype(DType t) {
  auto n = c_type_name(t);
  if (!n) throw Error(ErrorCode::invalid_argument, "jit: FlashInfer templates have no C type for " + std::string(dtype_name(t)));
  return std::string(*n);
}

bool is_fp8(DType t) { return t == DType::e4m3 || t == DType::e5m2; }

std::string pos_encoding_literal(int p) {
  switch (p) {
    case 0: return "PosEncodingMode::kNone";
    case 1: return "PosEncodingMode::kRoPELlama";
    case 2: return "PosEncodingMode::kALiBi";
  }
  throw Error(ErrorCode::invalid_argument, "jit: pos_encoding must be 0 (none), 1 (RoPE) or 2 (ALiBi); got " +
                                               std::to_string(p));
}

// flashinfer/jit/attention/utils.py generate_additional_params.
struct Extra {
  std::string name, ctype;
};
struct AdditionalParams {
  std::string decl, func_params, setter;
};
AdditionalParams additional_params(const std::vector<Extra>& tensors, const std::vector<Extra>& scalars, bool sm90) {
  AdditionalParams r;
  for (const auto& t : tensors) r.decl += t.ctype + "* " + t.name + ";\n";
  for (const auto& s : scalars) r.decl += s.ctype + " " + s.name + ";\n";
  auto is_maybe = [](const std::string& n) { return n.rfind("maybe", 0) == 0; };
  for (const auto& t : tensors)
    r.func_params += is_maybe(t.name) ? ", Optional<ffi::Tensor> " + t.name : ", ffi::Tensor " + t.name;
  for (const auto& s : scalars) r.func_params += ", " + s.ctype + " " + s.name;
  const std::string prefix = sm90 ? "params.additional_params." : "params.";
  std::vector<std::string> stmts;
  for (const auto& t : tensors)
    stmts.push_back(is_maybe(t.name) ? prefix + t.name + " = " + t.name + " ? static_cast<" + t.ctype + "*>(" +
                                           t.name + ".value().data_ptr()): nullptr;"
                                     : prefix + t.name + " = static_cast<" + t.ctype + "*>(" + t.name +
                                           ".data_ptr());");
  for (const auto& s : scalars) stmts.push_back(prefix + s.name + " = " + s.name + ";");
  for (size_t i = 0; i < stmts.size(); ++i) r.setter += (i ? " \\\n" : "") + stmts[i];
  return r;
}

class Generator {
 public:
  Generator(const fs::path& data_dir, const fs::path& gen_dir, ModulePlan& plan)
      : csrc_(data_dir / "csrc"), gen_(gen_dir), plan_(plan) {}

  std::string templ(const std::string& name) {
    auto it = templates_.find(name);
    if (it == templates_.end()) it = templates_.emplace(name, read_file(csrc_ / name)).first;
    return it->second;
  }
  // Renders `template_name` into gen_dir/out_name; adds it to the sources when `compile`.
  void render(const std::string& template_name, const std::string& out_name, const Vars& vars, bool compile) {
    plan_.files.push_back({out_name, render_template(templ(template_name), vars, template_name)});
    if (compile) plan_.sources.push_back(gen_ / out_name);
  }
  // Renders template text that does not live in csrc/ into gen_dir/out_name and compiles it.
  void render_text(const std::string& text, const std::string& template_name, const std::string& out_name,
                   const Vars& vars) {
    plan_.files.push_back({out_name, render_template(text, vars, template_name)});
    plan_.sources.push_back(gen_ / out_name);
  }
  // Copies csrc/<name> verbatim into gen_dir (its quoted include of the config must resolve there).
  void copy(const std::string& name) {
    plan_.files.push_back({name, read_file(csrc_ / name)});
    plan_.sources.push_back(gen_ / name);
  }
  // Compiles csrc/<name> in place.
  void in_place(const std::string& name) {
    const fs::path p = csrc_ / name;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) read_file(p);  // throws the not_found message
    plan_.sources.push_back(p);
  }

 private:
  fs::path csrc_, gen_;
  ModulePlan& plan_;
  std::map<std::string, std::string> templates_;
};

Vars attention_vars(const AttentionSpec& a, const std::string& variant_name, const std::string& variant_decl,
                    const AdditionalParams& ap, bool with_idx, bool with_f16qk) {
  Vars v{
      {"variant_decl", variant_decl},
      {"variant_name", variant_name},
      {"dtype_q", ctype(a.q)},
      {"dtype_kv", ctype(a.kv)},
      {"dtype_o", ctype(a.o)},
      {"head_dim_qk", std::to_string(a.head_dim_qk)},
      {"head_dim_vo", std::to_string(a.head_dim_vo)},
      {"pos_encoding_mode", pos_encoding_literal(a.pos_encoding)},
      {"use_sliding_window", lower(a.use_sliding_window)},
      {"use_logits_soft_cap", lower(a.use_logits_soft_cap)},
      {"additional_params_decl", ap.decl},
      {"additional_func_params", ap.func_params},
      {"additional_params_setter", ap.setter},
  };
  if (with_idx) v["idtype"] = ctype(a.idx);
  if (with_f16qk) v["use_fp16_qk_reduction"] = lower(a.use_fp16_qk_reduction);
  return v;
}

void check_head_dims(const AttentionSpec& a) {
  if (a.head_dim_qk <= 0 || a.head_dim_vo <= 0)
    throw Error(ErrorCode::invalid_argument, "jit: head dims must be positive");
}

std::string fa2_variant(const AttentionSpec& a, bool custom_mask_ident) {
  return std::string("DefaultAttention<") + (custom_mask_ident ? "use_custom_mask" : "false") + ", " +
         lower(a.use_sliding_window) + ", " + lower(a.use_logits_soft_cap) + ", " + lower(a.pos_encoding == 2) + ">";
}

const char* kFa2VariantDecl = "#include<flashinfer/attention/variants.cuh>";
const char* kFa3VariantDecl = "#include<flashinfer/attention/hopper/variants.cuh>";

// The fa3 FP8 variant's extra parameters (single and batch prefill alike): per-tensor or scalar q/k/v scales.
AdditionalParams fa3_fp8_params() {
  return additional_params({{"maybe_scale_q", "float"}, {"maybe_scale_k", "float"}, {"maybe_scale_v", "float"}},
                           {{"sm_scale", "double"}, {"scale_q_scalar", "double"}, {"scale_k_scalar", "double"},
                            {"scale_v_scalar", "double"}},
                           true);
}

// The extra parameters of the prefill variants (FlashInfer 0.6.3's gen_single_prefill_module /
// gen_batch_prefill_module): batch adds the multi-item scoring ones, and fa2's int32_t mask_indptr (int32_t even for
// other index dtypes, as in FlashInfer 0.6.3). The order is FlashInfer's.
AdditionalParams prefill_params(bool batch, bool sm90, bool fp8) {
  if (sm90 && fp8) return fa3_fp8_params();
  std::vector<Extra> items, items_len;
  if (batch) {
    items = {{"maybe_prefix_len_ptr", "uint32_t"},
             {"maybe_token_pos_in_items_ptr", "uint16_t"},
             {"maybe_max_item_len_ptr", "uint16_t"}};
    items_len = {{"token_pos_in_items_len", "int64_t"}};
  }
  std::vector<Extra> tensors, scalars;
  if (sm90) {
    tensors = items;
    tensors.push_back({"maybe_scale_v", "float"});
    scalars = {{"logits_soft_cap", "double"}, {"sm_scale", "double"}, {"scale_v_scalar", "double"}};
  } else {
    tensors = {{"maybe_custom_mask", "uint8_t"}};
    if (batch) tensors.push_back({"maybe_mask_indptr", "int32_t"});
    tensors.push_back({"maybe_alibi_slopes", "float"});
    tensors.insert(tensors.end(), items.begin(), items.end());
    scalars = {{"logits_soft_cap", "double"}, {"sm_scale", "double"}, {"rope_rcp_scale", "double"},
               {"rope_rcp_theta", "double"}};
  }
  scalars.insert(scalars.end(), items_len.begin(), items_len.end());
  return additional_params(tensors, scalars, sm90);
}

// Single and batch prefill write the same files under their family's name ("_sm90" for fa3, "_fp8" for the FP8
// kernels); batch has a paged and a ragged kernel. Each kernel template is rendered once per mask mode m (0..3)
// as "<stem><m>.cu", mask modes outermost (the order FlashInfer's generator writes them).
void gen_prefill(Generator& g, ModulePlan& plan, const AttentionSpec& a, bool batch) {
  check_head_dims(a);
  const bool fp8 = is_fp8(a.q), sm90 = a.backend != Backend::fa2;
  if (batch && is_fp8(a.o))
    throw Error(ErrorCode::invalid_argument, "jit: FP8 output is not supported by the fa2/fa3 batch prefill backends");
  if (!sm90 && fp8)
    throw Error(ErrorCode::invalid_argument,
                "jit: fp8 q (tensor-core fp8) is not supported by the fa2 backend; use fa3 (_sm90)");
  std::string variant = fa2_variant(a, true);
  if (sm90 && fp8) variant = "DefaultFP8Attention";
  else if (sm90) variant = std::string("DefaultAttention<") + lower(a.use_logits_soft_cap) + ">";
  const Vars v = attention_vars(a, variant, sm90 ? kFa3VariantDecl : kFa2VariantDecl, prefill_params(batch, sm90, fp8),
                                batch, true);
  const std::string fam = batch ? "batch_prefill" : "single_prefill", arch = sm90 ? "_sm90" : "",
                    fp8_tag = fp8 ? "_fp8" : "";
  const std::vector<std::string> kinds = batch ? std::vector<std::string>{"_paged", "_ragged"}
                                                : std::vector<std::string>{""};
  for (int m = 0; m < 4; ++m) {
    Vars vm = v;
    vm["mask_mode"] = kMaskModeLiteral[m];
    for (const std::string& kind : kinds)
      g.render(fam + fp8_tag + kind + arch + "_kernel_inst.jinja",
               fam + kind + arch + "_kernel_mask_" + std::to_string(m) + ".cu", vm, true);
  }
  g.copy(fam + fp8_tag + arch + ".cu");
  g.copy(fam + arch + "_jit_binding.cu");
  g.render(fam + arch + "_customize_config.jinja", fam + arch + "_config.inc", v, false);
  if (sm90) plan.extra_cuda_flags = kSm90aFlags;
}

void gen_decode(Generator& g, const AttentionSpec& a, bool batch) {
  check_head_dims(a);
  auto ap = additional_params({{"maybe_alibi_slopes", "float"}},
                              {{"logits_soft_cap", "double"}, {"sm_scale", "double"}, {"rope_rcp_scale", "double"},
                               {"rope_rcp_theta", "double"}},
                              false);
  Vars v = attention_vars(a, fa2_variant(a, false), kFa2VariantDecl, ap, batch, false);
  const std::string fam = batch ? "batch_decode" : "single_decode";
  g.render(fam + "_kernel_inst.jinja", fam + "_kernel.cu", v, true);
  g.copy(fam + ".cu");
  g.copy(fam + "_jit_binding.cu");
  g.render(fam + "_customize_config.jinja", fam + "_config.inc", v, false);
}

void gen_batch_mla(Generator& g, ModulePlan& plan, const MlaSpec& s) {
  Vars v{{"dtype_q", ctype(s.q)},
         {"dtype_kv", ctype(s.kv)},
         {"dtype_o", ctype(s.o)},
         {"dtype_idx", ctype(s.idx)},
         {"head_dim_ckv", std::to_string(s.head_dim_ckv)},
         {"head_dim_kpe", std::to_string(s.head_dim_kpe)}};
  if (s.backend == Backend::fa2) {
    g.render("batch_mla_config.jinja", "batch_mla_config.inc", v, false);
    for (const char* f : {"batch_mla_plan.cu", "batch_mla_run.cu", "batch_mla_binding.cu"}) g.copy(f);
  } else {
    g.render("batch_mla_config.jinja", "batch_mla_sm90_config.inc", v, false);
    for (const char* f : {"batch_mla_sm90_plan.cu", "batch_mla_sm90_run.cu", "batch_mla_sm90_binding.cu"}) g.copy(f);
    plan.extra_cuda_flags = kSm90aFlags;
  }
  if (s.profiler) plan.extra_cuda_flags.push_back("-DFLASHINFER_ENABLE_PROFILER");
}

void gen_gdn_prefill_sm90(Generator& g, ModulePlan& plan) {
  const std::pair<const char*, const char*> dtypes[] = {{"half", "half"}, {"bf16", "nv_bfloat16"}};
  for (const auto& [short_name, ctype_name] : dtypes) {
    // itertools.product([False, True], repeat=4): the last flag varies fastest.
    for (int bits = 0; bits < 16; ++bits) {
      const bool g_ = bits & 8, b = bits & 4, a = bits & 2, i = bits & 1;
      const std::string suffix = std::string(short_name) + "_g" + std::to_string(g_) + "b" + std::to_string(b) + "a" +
                                 std::to_string(a) + "i" + std::to_string(i);
      g.render("gdn_prefill_sm90_kernel_inst.jinja", "gdn_prefill_kernel_" + suffix + ".cu",
               {{"dtype", ctype_name},
                {"is_gva", lower(g_)},
                {"needs_beta", lower(b)},
                {"needs_alpha", lower(a)},
                {"init_state", lower(i)}},
               true);
    }
  }
  g.copy("gdn_prefill_launcher.cu");
  g.copy("prefill_kernel_delta_rule_sm90.cu");
  plan.extra_cuda_flags = kSm90aFlags;
  plan.extra_cuda_flags.push_back("-DFLAT_SM90A_ENABLED");
  plan.extra_cuda_flags.push_back("-std=c++20");
}

// flashinfer/jit/activation.py keeps its template and the activation functions as Python raw strings; they are
// read from the pinned wheel's copy of that file (data/../jit/activation.py), never restated here.
std::string python_raw_string(const std::string& py, const std::string& name, const fs::path& file) {
  const std::string open = name + " = r\"\"\"";
  const size_t at = py.find(open);
  const size_t end = at == std::string::npos ? at : py.find("\"\"\"", at + open.size());
  if (end == std::string::npos)
    throw Error(ErrorCode::not_found, "jit: " + file.string() + " has no raw string '" + name +
                                          "' (is it FlashInfer 0.6.3's jit/activation.py?)");
  return py.substr(at + open.size(), end - at - open.size());
}

void gen_act_and_mul(Generator& g, const fs::path& data_dir, Activation act) {
  const fs::path file = data_dir.parent_path() / "jit" / "activation.py";
  const std::string py = read_file(file);
  std::string templ = python_raw_string(py, "activation_templ", file);
  // The template's one `{% set %}`: the renderer implements no assignments, so its value is passed as a variable.
  const std::string set_tag = "{% set func_name = act_func_name ~ '_and_mul' %}";
  const size_t at = templ.find(set_tag);
  if (at == std::string::npos)
    throw Error(ErrorCode::invalid_argument, "jit: " + file.string() + ": activation_templ no longer sets func_name "
                                             "as FlashInfer 0.6.3 does");
  templ.erase(at, set_tag.size());
  const std::string name(activation_name(act));
  // FlashInfer's names for the three definitions (flashinfer/jit/activation.py act_func_def_str).
  const char* def_var = act == Activation::silu ? "silu_def_cu_str"
                        : act == Activation::gelu ? "gelu_def_cu_str"
                                                  : "gelu_def_tanh_cu_str";
  g.render_text(templ, "activation.py:activation_templ", name + "_and_mul.cu",
                {{"act_func_name", name},
                 {"act_func_def", python_raw_string(py, def_var, file)},
                 {"func_name", name + "_and_mul"}});
}

}  // namespace

ModulePlan plan_module(const std::string& uri, const fs::path& data_dir, const fs::path& gen_dir) {
  auto spec = parse_uri(uri);
  if (!spec)
    throw Error(ErrorCode::invalid_argument,
                "jit: unknown module URI '" + uri +
                    "'. The builder knows norm, page, gdn_prefill_sm90, rope, cascade, sampling, topk, "
                    "{silu,gelu,gelu_tanh}_and_mul and FlashInfer 0.6.3's single_prefill / "
                    "batch_prefill / single_decode / batch_decode / batch_mla URIs (`flashcpp build --list` shows "
                    "the defaults); fused_moe_90 is built by scripts/build-fused-moe.sh");
  ModulePlan plan;
  plan.uri = uri;
  Generator g(data_dir, gen_dir, plan);
  switch (spec->family) {
    case Family::norm:
      g.in_place("norm.cu");
      g.in_place("flashinfer_norm_binding.cu");
      plan.extra_cuda_flags = {"-DENABLE_BF16", "-DENABLE_FP8"};
      break;
    case Family::page:
      g.in_place("page.cu");
      g.in_place("flashinfer_page_binding.cu");
      break;
    case Family::gdn_prefill_sm90: gen_gdn_prefill_sm90(g, plan); break;
    case Family::single_prefill: gen_prefill(g, plan, spec->attention, false); break;
    case Family::batch_prefill: gen_prefill(g, plan, spec->attention, true); break;
    case Family::single_decode: gen_decode(g, spec->attention, false); break;
    case Family::batch_decode: gen_decode(g, spec->attention, true); break;
    case Family::batch_mla: gen_batch_mla(g, plan, spec->mla); break;
    // The decode-step misc modules: FlashInfer's gen_*_module source lists (flashinfer/jit/{rope,cascade,
    // sampling,topk}.py), compiled in place with the common flags.
    case Family::rope:
      g.in_place("rope.cu");
      g.in_place("flashinfer_rope_binding.cu");
      break;
    case Family::cascade:
      g.in_place("cascade.cu");
      g.in_place("flashinfer_cascade_binding.cu");
      break;
    case Family::sampling:
      g.in_place("sampling.cu");
      g.in_place("renorm.cu");
      g.in_place("flashinfer_sampling_binding.cu");
      break;
    case Family::topk:
      g.in_place("topk.cu");
      g.in_place("flashinfer_topk_binding.cu");
      break;
    case Family::act_and_mul: gen_act_and_mul(g, data_dir, spec->activation); break;
  }
  return plan;
}

bool write_if_different(const fs::path& path, std::string_view content) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == content.size()) {
    std::ifstream in(path, std::ios::binary);
    std::string existing(content.size(), '\0');
    if (in.read(existing.data(), static_cast<std::streamsize>(existing.size())) && existing == content) return false;
  }
  fs::create_directories(path.parent_path(), ec);
  // Unique per process and per call: builders in several threads of one process may publish the same
  // file at once (each rename is atomic; the last one wins with identical content).
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp =
      path.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) throw Error(ErrorCode::io_error, "jit: cannot write " + tmp.string());
  }
  fs::permissions(tmp, fs::perms(0644), ec);  // whatever the umask
  fs::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw Error(ErrorCode::io_error, "jit: cannot rename onto " + path.string() + ": " + why);
  }
  return true;
}

}  // namespace flashcpp::jit
