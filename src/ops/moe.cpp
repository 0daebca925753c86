// CUTLASS fused MoE: backend choice, runner creation (once per configuration), validation and
// run_moe packing (facts sheet A.10, B.6, F.9, F.12). The runner's tactics (tune(), set_tactics,
// auto_tune's record) are in moe_tune.cpp.
#include "flashcpp/moe.hpp"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/check.hpp"
#include "ffi/ffi.hpp"
#include "ops/common.hpp"
#include "ops/moe_internal.hpp"
#include "runtime/runtime_internal.hpp"

#ifndef FLASHCPP_DEFAULT_DEPS_DIR
#define FLASHCPP_DEFAULT_DEPS_DIR ""
#endif

namespace flashcpp {

namespace {
constexpr const char* kCreateOp = "fused_moe_runner";
constexpr const char* kRunOp = "fused_moe";

bool is16(DType t) { return t == DType::f16 || t == DType::bf16; }

MoeBackend backend_for(const DeviceFacts& f) {
  if (f.cc_major == 9) return MoeBackend::sm90;
  if (f.cc_major == 10 && f.cc_minor == 3) return MoeBackend::sm103;
  if (f.cc_major == 10 || f.cc_major == 11) return MoeBackend::sm100;
  if (f.cc_major == 12) return MoeBackend::sm120;
  throw Error(ErrorCode::unsupported, std::string(kCreateOp) + ": no CUTLASS fused-MoE module for compute capability " +
                                          std::to_string(f.cc_major) + "." + std::to_string(f.cc_minor) +
                                          " (FlashInfer ships fused_moe_90, _100, _103 and _120)");
}

/// `<flashinfer data>/csrc/nv_internal/tensorrt_llm`: the DeepGEMM headers NVRTC compiles against.
/// FlashInfer's data dir: FLASHCPP_FLASHINFER_DIR (the flashinfer package dir or its data/ dir), else
/// the build tree's pinned wheel (the rule jit::BuildOptions::from_env documents).
std::string deepgemm_include_dir() {
  namespace fs = std::filesystem;
  fs::path data;
  if (const char* env = std::getenv("FLASHCPP_FLASHINFER_DIR"); env && *env) {
    data = env;
    if (fs::exists(data / "data" / "csrc")) data /= "data";
  } else {
    data = fs::path(FLASHCPP_DEFAULT_DEPS_DIR) / "flashinfer_python" / "flashinfer" / "data";
  }
  const fs::path dir = data / "csrc" / "nv_internal" / "tensorrt_llm";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorCode::not_found, std::string(kCreateOp) + ": the DeepGEMM headers for the FP8 block-scale path "
                                      "are missing (" + dir.string() + "); set FLASHCPP_FLASHINFER_DIR to the "
                                      "flashinfer package (0.6.3) or its data/ directory");
  return dir.string();
}

/// FlashInfer calls set_deepgemm_jit_include_dirs once right after loading the module; so do we.
void set_deepgemm_dirs_once(const ffi::ModuleLibrary& lib) {
  static std::mutex mu;
  static std::set<const ffi::ModuleLibrary*> done;
  std::lock_guard lock(mu);
  if (done.count(&lib)) return;
  const std::string dir = deepgemm_include_dir();
  static const ffi::Function make_array = ffi::Function::global("ffi.Array");
  const ffi::Arg elems[] = {dir.c_str()};
  ffi::Any arr;
  ffi::call(make_array, elems, &arr, nullptr);
  const ffi::ObjectRef dirs = arr.take_object();
  const ffi::Arg args[] = {dirs};
  ffi::call(lib.function("set_deepgemm_jit_include_dirs"), args, nullptr, nullptr);
  done.insert(&lib);
}

void check_scale(const Validator& v, OptionalTensor t, const char* name, std::initializer_list<int64_t> shape,
                 const TensorView& ref) {
  if (!t) v.fail(name, "is required by this quantization");
  v.defined(*t, name).on_cuda(*t, name).same_device(*t, name, ref, "input").dtype(*t, name, {DType::f32})
      .shape(*t, name, shape).contiguous(*t, name);
}
}  // namespace

bool moe_activation_is_gated(MoeActivation a) noexcept {
  return a == MoeActivation::swiglu || a == MoeActivation::geglu;
}

std::string fused_moe_uri(MoeBackend backend) {
  switch (backend) {
    case MoeBackend::sm90: return "fused_moe_90";
    case MoeBackend::sm100: return "fused_moe_100";
    case MoeBackend::sm103: return "fused_moe_103";
    case MoeBackend::sm120: return "fused_moe_120";
    case MoeBackend::automatic: break;
  }
  throw Error(ErrorCode::invalid_argument, "fused_moe_uri: argument 'backend' must not be automatic");
}

static void validate_config(const Validator& v, const FusedMoeConfig& c) {
  switch (c.quantization) {
    case MoeQuantization::none:
      v.require(is16(c.activation_dtype), "config.activation_dtype", "must be f16 or bf16 without quantization");
      v.require(c.weight_dtype == c.activation_dtype, "config.weight_dtype", "must equal activation_dtype without quantization");
      v.require(c.output_dtype == c.activation_dtype, "config.output_dtype", "must equal activation_dtype without quantization");
      break;
    case MoeQuantization::fp8_per_tensor:
      v.require(c.activation_dtype == DType::e4m3, "config.activation_dtype", "must be e4m3 for fp8_per_tensor");
      v.require(c.weight_dtype == DType::e4m3, "config.weight_dtype", "must be e4m3 for fp8_per_tensor");
      v.require(is16(c.output_dtype), "config.output_dtype", "must be f16 or bf16 for fp8_per_tensor");
      break;
    case MoeQuantization::deepseek_fp8_block_scale:
      v.require(c.activation_dtype == DType::bf16, "config.activation_dtype", "must be bf16 for deepseek_fp8_block_scale");
      v.require(c.weight_dtype == DType::e4m3, "config.weight_dtype", "must be e4m3 for deepseek_fp8_block_scale");
      v.require(c.output_dtype == DType::bf16, "config.output_dtype", "must be bf16 for deepseek_fp8_block_scale");
      break;
  }
  ops::check_device_id(v, c.device, "config.device");
}

void validate_fused_moe(const FusedMoeConfig& c, const FusedMoeTensors& a, const FusedMoeOptions& o) {
  const Validator v(kRunOp);
  validate_config(v, c);
  const TensorView& x = a.input;
  v.defined(x, "input").on_cuda(x, "input").dtype(x, "input", {c.activation_dtype}).rank(x, "input", 2)
      .contiguous(x, "input").aligned(x, "input", 16);
  v.require(x.device.id == c.device, "input", "must be on the runner's device cuda:" + std::to_string(c.device) +
                                                  "; got " + x.describe());
  const int64_t T = x.size(0), H = x.size(1);
  v.require(T >= 1 && H >= 1, "input", "must not be empty; got " + x.describe());
  auto dense = [&](const TensorView& t, const char* name, DType dt, std::initializer_list<int64_t> shape) {
    v.defined(t, name).on_cuda(t, name).same_device(t, name, x, "input").dtype(t, name, {dt}).shape(t, name, shape)
        .contiguous(t, name).aligned(t, name, 16);
  };
  dense(a.output, "output", c.output_dtype, {T, H});
  v.defined(a.token_selected_experts, "token_selected_experts").on_cuda(a.token_selected_experts, "token_selected_experts")
      .same_device(a.token_selected_experts, "token_selected_experts", x, "input")
      .dtype(a.token_selected_experts, "token_selected_experts", {DType::i32}).rank(a.token_selected_experts, "token_selected_experts", 2)
      .dim(a.token_selected_experts, "token_selected_experts", 0, T, "input.size(0)")
      .contiguous(a.token_selected_experts, "token_selected_experts");
  const int64_t K = a.token_selected_experts.size(1);
  v.require(K >= 1, "token_selected_experts", "must select at least one expert per token");
  v.defined(a.token_final_scales, "token_final_scales").on_cuda(a.token_final_scales, "token_final_scales")
      .same_device(a.token_final_scales, "token_final_scales", x, "input")
      .dtype(a.token_final_scales, "token_final_scales", {DType::f32}).shape(a.token_final_scales, "token_final_scales", {T, K})
      .contiguous(a.token_final_scales, "token_final_scales");

  v.one_of(static_cast<int64_t>(o.activation), "activation", {0, 1, 2, 3, 4, 6, 7});
  v.rank(a.fc2_weights, "fc2_weights", 3);
  const int64_t E = a.fc2_weights.size(0), I = a.fc2_weights.size(2);
  v.require(E >= 1 && I >= 1, "fc2_weights", "must not be empty; got " + a.fc2_weights.describe());
  const bool gated = moe_activation_is_gated(o.activation);
  const int64_t N1 = gated ? 2 * I : I;
  dense(a.fc2_weights, "fc2_weights", c.weight_dtype, {E, H, I});
  v.rank(a.fc1_weights, "fc1_weights", 3).dim(a.fc1_weights, "fc1_weights", 0, E, "fc2_weights.size(0)")
      .dim(a.fc1_weights, "fc1_weights", 1, N1, gated ? "2 × intermediate (fc2_weights.size(2)), gated activation"
                                                      : "intermediate (fc2_weights.size(2))");
  dense(a.fc1_weights, "fc1_weights", c.weight_dtype, {E, N1, H});

  // The grouped GEMMs use 128-bit TMA loads: hidden and intermediate must be multiples of 16 bytes of
  // the weight type; the block-scale path works on 128×128 blocks.
  const int64_t align = c.quantization == MoeQuantization::deepseek_fp8_block_scale ? 128 : 16 / dtype_size(c.weight_dtype);
  const char* align_why = c.quantization == MoeQuantization::deepseek_fp8_block_scale ? "the 128-wide scale blocks"
                                                                                        : "128 bits of the weight dtype";
  v.divisible(H, "hidden size (input.size(1))", align, align_why);
  v.divisible(I, "intermediate size (fc2_weights.size(2))", align, align_why);

  v.require((a.fc1_bias == nullptr) == (a.fc2_bias == nullptr), "fc1_bias/fc2_bias", "must be given together or not at all");
  if (a.fc1_bias) {
    v.require(c.quantization == MoeQuantization::none, "fc1_bias", "is supported only without quantization");
    dense(*a.fc1_bias, "fc1_bias", c.output_dtype, {E, N1});
    dense(*a.fc2_bias, "fc2_bias", c.output_dtype, {E, H});
  }
  v.in_range(o.tp_size, "tp_size", 1, 1 << 16);
  v.in_range(o.tp_rank, "tp_rank", 0, o.tp_size - 1);
  v.in_range(o.ep_size, "ep_size", 1, 1 << 16);
  v.in_range(o.ep_rank, "ep_rank", 0, o.ep_size - 1);
  if (c.quantization == MoeQuantization::deepseek_fp8_block_scale)
    v.require(o.activation == MoeActivation::swiglu, "activation", "must be swiglu for deepseek_fp8_block_scale");

  const bool fp8 = c.quantization == MoeQuantization::fp8_per_tensor;
  const bool ds = c.quantization == MoeQuantization::deepseek_fp8_block_scale;
  auto must_be_absent = [&](OptionalTensor t, const char* name) {
    if (t) v.fail(name, "must be absent for this quantization");
  };
  if (fp8) {
    check_scale(v, a.fc1_dequant, "fc1_dequant", {E}, x);
    if (a.fc2_quant && a.fc2_quant->rank == 0) check_scale(v, a.fc2_quant, "fc2_quant", {}, x);
    else check_scale(v, a.fc2_quant, "fc2_quant", {E}, x);
    check_scale(v, a.fc2_dequant, "fc2_dequant", {E}, x);
    check_scale(v, a.fc1_input_dequant, "fc1_input_dequant", {}, x);
  } else {
    must_be_absent(a.fc1_dequant, "fc1_dequant");
    must_be_absent(a.fc2_quant, "fc2_quant");
    must_be_absent(a.fc2_dequant, "fc2_dequant");
    must_be_absent(a.fc1_input_dequant, "fc1_input_dequant");
  }
  if (ds) {
    check_scale(v, a.fc1_block_scales, "fc1_block_scales", {E, N1 / 128, H / 128}, x);
    check_scale(v, a.fc2_block_scales, "fc2_block_scales", {E, H / 128, I / 128}, x);
  } else {
    must_be_absent(a.fc1_block_scales, "fc1_block_scales");
    must_be_absent(a.fc2_block_scales, "fc2_block_scales");
  }
  v.no_overlap({{&a.output, "output"}},
               {{&a.input, "input"}, {&a.token_selected_experts, "token_selected_experts"},
                {&a.token_final_scales, "token_final_scales"}, {&a.fc1_weights, "fc1_weights"},
                {&a.fc2_weights, "fc2_weights"}, {a.fc1_bias, "fc1_bias"}, {a.fc2_bias, "fc2_bias"},
                {a.fc1_dequant, "fc1_dequant"}, {a.fc2_quant, "fc2_quant"}, {a.fc2_dequant, "fc2_dequant"},
                {a.fc1_input_dequant, "fc1_input_dequant"}, {a.fc1_block_scales, "fc1_block_scales"},
                {a.fc2_block_scales, "fc2_block_scales"}});
}

// ----------------------------------------------------------------------------- the runner

FusedMoeRunner::FusedMoeRunner(std::unique_ptr<State> s) : s_(std::move(s)) {}
FusedMoeRunner::FusedMoeRunner(FusedMoeRunner&&) noexcept = default;
FusedMoeRunner& FusedMoeRunner::operator=(FusedMoeRunner&&) noexcept = default;
FusedMoeRunner::~FusedMoeRunner() = default;
const FusedMoeConfig& FusedMoeRunner::config() const { return s_->config; }
const std::string& FusedMoeRunner::uri() const { return s_->uri; }

FusedMoeRunner FusedMoeRunner::create(const Runtime& rt, const FusedMoeConfig& config) {
  const Validator v(kCreateOp);
  validate_config(v, config);
  auto st = std::make_unique<State>();
  st->config = config;
  const DeviceFacts& facts = device_facts(config.device);
  if (config.backend == MoeBackend::automatic) st->config.backend = backend_for(facts);
  if (config.quantization == MoeQuantization::deepseek_fp8_block_scale &&
      (st->config.backend != MoeBackend::sm90 || facts.cc_major != 9))
    throw Error(ErrorCode::unsupported, std::string(kCreateOp) + ": deepseek_fp8_block_scale runs only on SM90 "
                                        "(fused_moe_90 on compute capability 9.x); device " +
                                        std::to_string(config.device) + " is " + std::to_string(facts.cc_major) + "." +
                                        std::to_string(facts.cc_minor));
  st->uri = fused_moe_uri(st->config.backend);
  st->lib = load_module(rt, st->uri);
  // The runner allocates its workspace through TVM-FFI's tensor allocator on every call.
  ffi::install_tensor_allocator();
  if (config.quantization == MoeQuantization::deepseek_fp8_block_scale) set_deepgemm_dirs_once(*st->lib);

  const ffi::Arg args[] = {ffi::Arg::dtype(config.activation_dtype), ffi::Arg::dtype(config.weight_dtype),
                           ffi::Arg::dtype(config.output_dtype),
                           config.quantization == MoeQuantization::deepseek_fp8_block_scale,
                           false /*use_w4_group_scaling*/, false /*use_mxfp8_act_scaling*/, false /*use_packed_weights*/};
  ffi::Any result;
  ops::CurrentDeviceScope device_scope(config.device);
  ffi::call(st->lib->function("init"), args, &result, nullptr);
  st->runner = ffi::Module(result.take_object());
  st->run_moe = st->runner.method("run_moe");
  return FusedMoeRunner(std::move(st));
}

std::shared_ptr<FusedMoeRunner> FusedMoeRunner::shared(const Runtime& rt, const FusedMoeConfig& config) {
  using Key = std::tuple<const Runtime*, int, int, int, int, int, int, bool>;
  static std::mutex mu;
  static auto* cache = new std::map<Key, std::shared_ptr<FusedMoeRunner>>();  // lives for the process
  const Key key{&rt, static_cast<int>(config.activation_dtype), static_cast<int>(config.weight_dtype),
                static_cast<int>(config.output_dtype), static_cast<int>(config.quantization),
                static_cast<int>(config.backend), config.device, config.auto_tune};
  std::lock_guard lock(mu);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  auto runner = std::make_shared<FusedMoeRunner>(create(rt, config));
  cache->emplace(key, runner);
  return runner;
}

void FusedMoeRunner::run(const FusedMoeTensors& a, const FusedMoeOptions& o, cudaStream_t stream) const {
  ops::check_plan_alive(Validator(kRunOp), s_.get(), "runner");
  State& s = *s_;
  validate_fused_moe(s.config, a, o);
  if (s.config.auto_tune && s.config.quantization != MoeQuantization::deepseek_fp8_block_scale) {
    const MoeProblemShape shape = MoeProblemShape::of(a, o);
    bool known = false;
    {
      std::lock_guard lock(s.tuned_mu);
      known = s.tuned[ops::token_bucket(a.input.size(0))].find(shape) != nullptr;
    }
    if (!known && !ops::stream_capturing(stream)) ops::auto_tune(s, a, o, shape, stream);
  }

  // quant_scales: an Array of Tensor objects (borrowing the caller's memory for this call).
  ffi::ObjectRef quant_scales;
  if (s.config.quantization == MoeQuantization::fp8_per_tensor) {
    const ffi::ObjectRef scales[] = {ffi::TensorObject::from_view(*a.fc1_dequant), ffi::TensorObject::from_view(*a.fc2_quant),
                                     ffi::TensorObject::from_view(*a.fc2_dequant),
                                     ffi::TensorObject::from_view(*a.fc1_input_dequant)};
    quant_scales = ffi::Array::from_objects(scales);
  } else if (s.config.quantization == MoeQuantization::deepseek_fp8_block_scale) {
    const ffi::ObjectRef scales[] = {ffi::TensorObject::from_view(*a.fc1_block_scales),
                                     ffi::TensorObject::from_view(*a.fc2_block_scales)};
    quant_scales = ffi::Array::from_objects(scales);
  }
  ffi::ObjectRef profile_ids;  // None: the runner's default tactics
  {
    const MoeProblemShape shape = MoeProblemShape::of(a, o);
    std::lock_guard lock(s.tuned_mu);
    if (const State::Tuned* t = s.tuned[ops::token_bucket(a.input.size(0))].find(shape)) profile_ids = t->profile_ids;
  }
  ops::CurrentDeviceScope device_scope(s.config.device);  // the runner uses the current device
  ffi::invoke(s.run_moe, ffi::StreamBinding{a.input.device, stream}, nullptr, a.output, a.input,
              a.token_selected_experts, a.token_final_scales, a.fc1_weights, a.fc1_bias, a.fc2_weights, a.fc2_bias,
              quant_scales, nullptr /*input_sf*/, nullptr /*swiglu_alpha*/, nullptr /*swiglu_beta*/,
              nullptr /*swiglu_limit*/, o.tp_size, o.tp_rank, o.ep_size, o.ep_rank, int64_t{1} /*cluster_size*/,
              int64_t{0} /*cluster_rank*/, false /*enable_alltoall*/, false /*min_latency_mode*/,
              profile_ids, o.enable_pdl, static_cast<int64_t>(o.activation));
}

}  // namespace flashcpp
