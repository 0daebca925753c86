// CUTLASS fused MoE: backend choice, runner creation (once per configuration), validation and
// run_moe packing (facts sheet A.10, B.6, F.9, F.12).
#include "flashcpp/moe.hpp"

#include <algorithm>
#include <cctype>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "artifacts/internal.hpp"
#include "core/check.hpp"
#include "core/config_file.hpp"
#include "core/file_lock.hpp"
#include "core/json.hpp"
#include "ffi/ffi.hpp"
#include "ffi/trust.hpp"
#include "flashcpp/cuda.hpp"
#include "ops/common.hpp"
#include "ops/device_facts.hpp"
#include "runtime/runtime_internal.hpp"

#ifndef FLASHCPP_DEFAULT_DEPS_DIR
#define FLASHCPP_DEFAULT_DEPS_DIR ""
#endif

namespace flashcpp {

namespace {
constexpr const char* kCreateOp = "fused_moe_runner";
constexpr const char* kRunOp = "fused_moe";

bool is16(DType t) { return t == DType::f16 || t == DType::bf16; }

MoeBackend backend_for(const ops::DeviceFacts& f) {
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

void validate_fused_moe(const FusedMoeConfig& c, const FusedMoeArgs& a) {
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

  v.one_of(static_cast<int64_t>(a.activation), "activation", {0, 1, 2, 3, 4, 6, 7});
  v.rank(a.fc2_weights, "fc2_weights", 3);
  const int64_t E = a.fc2_weights.size(0), I = a.fc2_weights.size(2);
  v.require(E >= 1 && I >= 1, "fc2_weights", "must not be empty; got " + a.fc2_weights.describe());
  const bool gated = moe_activation_is_gated(a.activation);
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
  v.in_range(a.tp_size, "tp_size", 1, 1 << 16);
  v.in_range(a.tp_rank, "tp_rank", 0, a.tp_size - 1);
  v.in_range(a.ep_size, "ep_size", 1, 1 << 16);
  v.in_range(a.ep_rank, "ep_rank", 0, a.ep_size - 1);
  if (c.quantization == MoeQuantization::deepseek_fp8_block_scale)
    v.require(a.activation == MoeActivation::swiglu, "activation", "must be swiglu for deepseek_fp8_block_scale");

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

struct FusedMoeRunner::State {
  // Declaration order matters (members die in reverse): the runner object's deleter lives in the module, so the
  // module library is declared first and destroyed last. The runner keeps the profiler workspace tune() had
  // allocated, which the allocator frees on tune_stream (the stream it came from) when the runner dies: the
  // stream is declared before the runner, so it outlives it.
  std::shared_ptr<ffi::ModuleLibrary> lib;
  std::optional<Stream> tune_stream;  // the runner's own stream for FlashInfer's profiler, made by the first tune()
  ffi::Module runner;
  ffi::Function run_moe;
  FusedMoeConfig config;
  std::string uri;
  // Tactics per token-count bucket (log2 of the next power of two), with the profile_ids Array run_moe takes,
  // built once. `shapes`: those tune() chose (or set_tactics set) for one problem shape, which only calls of
  // that shape use (a runner shared by several models keeps each model's); `any`: those set_tactics(tokens, t)
  // set for every shape that has none of its own in the bucket. Neither: None, the runner's defaults.
  struct Tuned {
    MoeTactics tactics;
    ffi::ObjectRef profile_ids;
  };
  struct Bucket {
    std::optional<Tuned> any;
    std::vector<std::pair<MoeProblemShape, Tuned>> shapes;  // a few shapes at most: searched linearly
    // What a call of `shape` in this bucket uses: its shape's tactics, else `any`'s, else none.
    const Tuned* find(const MoeProblemShape& shape) const {
      for (const auto& [sh, t] : shapes)
        if (sh == shape) return &t;
      return any ? &*any : nullptr;
    }
  };
  mutable std::mutex tuned_mu;
  std::array<Bucket, 64> tuned;
  // One tune() at a time: the profiler's prepared shapes and workspace are the runner's; guards tune_stream.
  std::mutex tune_mu;
  // auto_tune's record of tactics (moe-tactics/<file>.json in the cache; empty: kept in memory only), decided on
  // the first untuned call (it hashes the module). Guarded by tune_mu.
  std::optional<std::filesystem::path> tactics_file;
  std::string module_sha256;
};

namespace {
constexpr const char* kTuneOp = "fused_moe_tune";
constexpr const char* kSetTacticsOp = "fused_moe_set_tactics";

size_t token_bucket(int64_t tokens) {
  size_t b = 0;
  while (b < 63 && (int64_t{1} << b) < tokens) ++b;
  return b;
}

// How many GEMM candidates the runner offers for gemm1 and gemm2 (FlashInfer's runner methods).
std::pair<int64_t, int64_t> tactic_counts(const ffi::Module& runner) {
  auto count = [&](const char* name) {
    ffi::Any n;
    ffi::call(runner.method(name), {}, &n, nullptr);
    return n.as_int();
  };
  return {count("get_gemm1_tactic_count"), count("get_gemm2_tactic_count")};
}

// What a profiler call left once `stream` has finished it: cudaSuccess; a non-sticky error (a refused launch),
// cleared here; or a sticky one (illegal address, launch failure, ...), which no clearing removes and every later
// CUDA call returns: the context is lost. Asking again after the clearing tells the two apart.
struct Settled {
  cudaError_t error = cudaSuccess;
  bool sticky = false;
};
Settled settle(cudaStream_t stream) {
  cudaError_t error = cudaStreamSynchronize(stream);
  const cudaError_t last = cudaGetLastError();  // clears a non-sticky error
  if (error == cudaSuccess) error = last;
  if (error == cudaSuccess) return {};
  auto failed = [](cudaError_t e) { return e != cudaSuccess && e != cudaErrorNotReady; };
  const cudaError_t query = cudaStreamQuery(stream);
  const cudaError_t again = cudaGetLastError();
  return {error, failed(query) || failed(again)};
}

std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

// Keeps `t` for the bucket of `tokens`, for `shape` only or (nullptr) for every shape without its own, with
// the profile_ids Array run_moe takes (a gemm2 index below the gemm2 count is read there as relative to
// gemm2's candidates).
void keep_tactics(FusedMoeRunner::State& s, int64_t tokens, const MoeProblemShape* shape, const MoeTactics& t);
// set_tactics' checks of the tactics themselves.
void validate_tactics(const Validator& v, const FusedMoeRunner::State& s, const MoeTactics& tactics);
// tune()'s work, with tune_mu held by the caller.
MoeTactics tune_locked(FusedMoeRunner::State& s, const FusedMoeArgs& a, cudaStream_t stream);
// Whether `stream` is capturing a CUDA graph (then nothing may be tuned: it would synchronize).
bool stream_capturing(cudaStream_t stream);
// run()'s first call of an untuned bucket and shape (FusedMoeConfig::auto_tune): the recorded tactics, else tune()
// and record them.
void auto_tune(FusedMoeRunner::State& s, const FusedMoeArgs& a, const MoeProblemShape& shape, cudaStream_t stream);
}  // namespace

MoeProblemShape MoeProblemShape::of(const FusedMoeArgs& a) {
  MoeProblemShape p;
  p.hidden = a.input.size(1);
  p.intermediate = a.fc2_weights.size(2);
  p.experts = a.fc2_weights.size(0);
  p.top_k = a.token_selected_experts.size(1);
  p.activation = a.activation;
  p.bias = a.fc1_bias != nullptr;
  p.tp_size = a.tp_size;
  p.tp_rank = a.tp_rank;
  p.ep_size = a.ep_size;
  p.ep_rank = a.ep_rank;
  return p;
}

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
  const ops::DeviceFacts facts = ops::device_facts(config.device);
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

void FusedMoeRunner::run(const FusedMoeArgs& a, cudaStream_t stream) const {
  ops::check_plan_alive(Validator(kRunOp), s_.get(), "runner");
  State& s = *s_;
  validate_fused_moe(s.config, a);
  if (s.config.auto_tune && s.config.quantization != MoeQuantization::deepseek_fp8_block_scale) {
    const MoeProblemShape shape = MoeProblemShape::of(a);
    bool known = false;
    {
      std::lock_guard lock(s.tuned_mu);
      known = s.tuned[token_bucket(a.input.size(0))].find(shape) != nullptr;
    }
    if (!known && !stream_capturing(stream)) auto_tune(s, a, shape, stream);
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
    const MoeProblemShape shape = MoeProblemShape::of(a);
    std::lock_guard lock(s.tuned_mu);
    if (const State::Tuned* t = s.tuned[token_bucket(a.input.size(0))].find(shape)) profile_ids = t->profile_ids;
  }
  ops::CurrentDeviceScope device_scope(s.config.device);  // the runner uses the current device
  ffi::invoke(s.run_moe, ffi::StreamBinding{a.input.device, stream}, nullptr, a.output, a.input,
              a.token_selected_experts, a.token_final_scales, a.fc1_weights, a.fc1_bias, a.fc2_weights, a.fc2_bias,
              quant_scales, nullptr /*input_sf*/, nullptr /*swiglu_alpha*/, nullptr /*swiglu_beta*/,
              nullptr /*swiglu_limit*/, a.tp_size, a.tp_rank, a.ep_size, a.ep_rank, int64_t{1} /*cluster_size*/,
              int64_t{0} /*cluster_rank*/, false /*enable_alltoall*/, false /*min_latency_mode*/,
              profile_ids, a.enable_pdl, static_cast<int64_t>(a.activation));
}

MoeTactics FusedMoeRunner::tactics_for(int64_t tokens) const {
  const Validator v(kTuneOp);
  ops::check_plan_alive(v, s_.get(), "runner");
  if (tokens < 1) v.fail("tokens", "must be >= 1; got " + std::to_string(tokens));
  std::lock_guard lock(s_->tuned_mu);
  const auto& any = s_->tuned[token_bucket(tokens)].any;
  return any ? any->tactics : MoeTactics{};
}

MoeTactics FusedMoeRunner::tactics_for(int64_t tokens, const MoeProblemShape& shape) const {
  const Validator v(kTuneOp);
  ops::check_plan_alive(v, s_.get(), "runner");
  if (tokens < 1) v.fail("tokens", "must be >= 1; got " + std::to_string(tokens));
  std::lock_guard lock(s_->tuned_mu);
  const State::Tuned* t = s_->tuned[token_bucket(tokens)].find(shape);
  return t ? t->tactics : MoeTactics{};
}

MoeTactics FusedMoeRunner::tune(const FusedMoeArgs& a, cudaStream_t stream) {
  ops::check_plan_alive(Validator(kTuneOp), s_.get(), "runner");
  State& s = *s_;
  validate_fused_moe(s.config, a);
  if (s.config.quantization == MoeQuantization::deepseek_fp8_block_scale) return {};
  std::lock_guard tune_lock(s.tune_mu);
  return tune_locked(s, a, stream);
}

namespace {
MoeTactics tune_locked(FusedMoeRunner::State& s, const FusedMoeArgs& a, cudaStream_t stream) {
  const int64_t tokens = a.input.size(0), top_k = a.token_selected_experts.size(1);
  // The profiler entries, resolved here: a runner that is never tuned does not depend on them.
  const ffi::Function run_gemm_profile = s.runner.method("run_gemm_profile");
  const auto [gemm1_candidates, gemm2_candidates] = tactic_counts(s.runner);
  ops::CurrentDeviceScope device_scope(s.config.device);
  // The profiler runs on the runner's own stream: FlashInfer keeps the workspace it allocates for the profiler
  // until the next preparation or the runner's death and frees it on the stream it came from, which the
  // caller's stream may not outlive. That stream waits for the work already queued on `stream`; `stream`
  // waits for the profiler at the end. Without a GPU nothing can launch (CPU tests use recording modules):
  // the calls go to `stream` and nothing is waited for.
  const bool gpu = cuda_device_count() > 0;
  if (gpu && !s.tune_stream) s.tune_stream.emplace(s.config.device);
  const cudaStream_t ts = gpu ? s.tune_stream->get() : stream;
  const ffi::StreamBinding binding{a.input.device, ts};
  // FlashInfer's profiler entry: candidate `id` (an index into gemm1's then gemm2's candidates) of GEMM
  // `gemm` on these shapes; `prepare` first builds the profiler's routing and workspace for them.
  auto profile = [&](int64_t gemm, int64_t id, bool prepare) {
    ffi::invoke(run_gemm_profile, binding, nullptr, a.input, a.fc1_weights, a.fc1_bias, a.fc2_weights, a.fc2_bias,
                top_k, a.tp_size, a.tp_rank, a.ep_size, a.ep_rank, int64_t{1} /*cluster_size*/,
                int64_t{0} /*cluster_rank*/, false /*enable_alltoall*/, false /*min_latency_mode*/, gemm, id, prepare,
                a.enable_pdl, static_cast<int64_t>(a.activation));
  };
  // Runs `call` (work on `ts`) and waits for it. True when it ran; false when it was refused (FlashInfer
  // raised, or a launch left a non-sticky error, cleared); with `must_run` a refusal throws instead. A sticky
  // error throws naming `step`: the context is lost, and every later candidate would fail too.
  auto checked = [&](const std::string& step, bool must_run, const auto& call) {
    std::optional<FfiError> refused;
    try {
      call();
    } catch (const FfiError& e) {
      refused = e;
    }
    const Settled st = gpu ? settle(ts) : Settled{};
    if (st.sticky)
      throw Error(ErrorCode::cuda_error,
                  std::string(kTuneOp) + " (" + s.uri + "), " + std::to_string(tokens) + " tokens: " + step +
                      " left a sticky CUDA error, " + cuda_error_text(st.error) + "; the CUDA context of device " +
                      std::to_string(s.config.device) + " is no longer usable (restart the process; set_tactics "
                      "applies known-good tactics without tuning)" +
                      (refused ? "; FlashInfer reported: " + refused->message() : std::string()));
    if (must_run && refused) throw *refused;
    if (must_run && st.error != cudaSuccess)
      throw Error(ErrorCode::cuda_error, std::string(kTuneOp) + " (" + s.uri + "), " + std::to_string(tokens) +
                                             " tokens: " + step + " failed: " + cuda_error_text(st.error));
    return !refused && st.error == cudaSuccess;
  };
  if (gpu) {
    Event ready;
    ready.record(stream);
    cuda_check(cudaStreamWaitEvent(ts, ready.get(), 0), kTuneOp);
    // A sticky error from the caller's own work is not the profiler's; a non-sticky one left from earlier calls
    // is cleared.
    checked("the work queued on the caller's stream before tune()", false, [] {});
  }
  std::optional<Event> start, stop;  // created once there is a candidate to time
  // The fastest candidate of one GEMM (relative index), or -1 when none ran.
  auto fastest = [&](int64_t gemm, int64_t first, int64_t candidates) {
    const std::string g = "gemm " + std::to_string(gemm);
    checked(g + "'s profiler preparation (profile id -1, which FlashInfer runs as candidate 0 of gemm 1)", true,
            [&] { profile(gemm, -1, true); });
    if (candidates > 0 && !start) start.emplace(), stop.emplace();
    int64_t best = -1;
    float best_ms = 0;
    for (int64_t i = 0; i < candidates; ++i) {
      const std::string candidate = g + " candidate " + std::to_string(i) + " of " + std::to_string(candidates) +
                                    " (absolute profile id " + std::to_string(first + i) + ")";
      // Warm-up: a candidate these shapes cannot use is refused here.
      if (!checked(candidate + " warm-up", false, [&] { profile(gemm, first + i, false); })) continue;
      float ms[3] = {};
      bool ran = true;
      for (int k = 0; k < 3 && ran; ++k) {
        ran = checked(candidate + " timed run " + std::to_string(k + 1) + " of 3", false, [&] {
          start->record(ts);
          profile(gemm, first + i, false);
          stop->record(ts);
        });
        if (ran) ms[k] = stop->elapsed_ms_since(*start);
      }
      if (!ran) continue;
      std::sort(ms, ms + 3);
      if (best < 0 || ms[1] < best_ms) best = i, best_ms = ms[1];
    }
    return best;
  };
  MoeTactics chosen;
  chosen.gemm1 = fastest(1, 0, gemm1_candidates);
  chosen.gemm2 = fastest(2, gemm1_candidates, gemm2_candidates);
  if (gpu) {
    Event done;
    done.record(ts);
    cuda_check(cudaStreamWaitEvent(stream, done.get(), 0), kTuneOp);
  }
  const MoeProblemShape shape = MoeProblemShape::of(a);
  keep_tactics(s, tokens, &shape, chosen);
  return chosen;
}

// ----------------------------------------------------------------------------- auto_tune's record

bool stream_capturing(cudaStream_t stream) {
  if (cuda_device_count() == 0) return false;  // CPU tests: recording modules, nothing is captured
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown: do not risk a synchronizing tune inside a capture
  }
  return status != cudaStreamCaptureStatusNone;
}

// The record's key of a (shape, bucket): every field of MoeProblemShape, and the bucket's log2.
std::string record_key(const MoeProblemShape& p, size_t bucket) {
  return "h" + std::to_string(p.hidden) + "_i" + std::to_string(p.intermediate) + "_e" + std::to_string(p.experts) +
         "_k" + std::to_string(p.top_k) + "_act" + std::to_string(static_cast<int>(p.activation)) + "_bias" +
         std::to_string(p.bias ? 1 : 0) + "_tp" + std::to_string(p.tp_size) + "." + std::to_string(p.tp_rank) +
         "_ep" + std::to_string(p.ep_size) + "." + std::to_string(p.ep_rank) + "_tokens2^" + std::to_string(bucket);
}

std::string file_safe(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  return s;
}

// Where this runner's tactics are recorded: <cache>/moe-tactics/<uri>-<module sha256 prefix>-<GPU>.json, or
// nothing when there is no cache directory or the module cannot be hashed. Decided once per runner.
const std::filesystem::path& tactics_file(FusedMoeRunner::State& s) {
  if (s.tactics_file) return *s.tactics_file;
  s.tactics_file.emplace();
  try {
    const artifacts::Config cfg = artifacts::Config::from_env();
    if (cfg.cache_dir.empty()) return *s.tactics_file;
    s.module_sha256 = ffi::file_sha256(s.lib->path());
    const ops::DeviceFacts facts = ops::device_facts(s.config.device);
    std::string gpu = "cc" + std::to_string(facts.cc_major) + std::to_string(facts.cc_minor) + "-" +
                      std::to_string(facts.sm_count) + "sm";
    if (cuda_device_count() > 0) gpu = device_info(s.config.device).name + "-" + gpu;
    *s.tactics_file = cfg.cache_dir / "moe-tactics" /
                      file_safe(s.uri + "-" + s.module_sha256.substr(0, 16) + "-" + gpu + ".json");
  } catch (const Error&) {
    s.tactics_file.emplace();  // no usable cache: the tactics stay in memory
  }
  return *s.tactics_file;
}

// The record's entries, or an empty object when the file is missing, not trusted (another user could have
// written it) or not the record of this module.
nlohmann::json read_record(const std::filesystem::path& file, const std::string& module_sha256) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return nlohmann::json::object();
  try {
    ffi::require_trusted_file(file, "MoE tactics record");
    nlohmann::json j = parse_json(read_config_file(file, "MoE tactics record"), "MoE tactics record", 4);
    if (!j.is_object() || j.value("module_sha256", std::string()) != module_sha256 || !j.contains("tactics") ||
        !j["tactics"].is_object())
      return nlohmann::json::object();
    return j["tactics"];
  } catch (const std::exception&) {  // flashcpp's Error (untrusted, unreadable, not JSON) or a JSON type error
    return nlohmann::json::object();
  }
}

std::optional<MoeTactics> recorded_tactics(FusedMoeRunner::State& s, const std::filesystem::path& file,
                                           const std::string& key) {
  const nlohmann::json t = read_record(file, s.module_sha256);
  const auto it = t.find(key);
  if (it == t.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() ||
      !(*it)[1].is_number_integer())
    return std::nullopt;
  const MoeTactics tactics{(*it)[0].get<int64_t>(), (*it)[1].get<int64_t>()};
  try {
    validate_tactics(Validator(kTuneOp), s, tactics);  // a record of another candidate list is not used
  } catch (const Error&) {
    return std::nullopt;
  }
  return tactics;
}

// Adds (key -> tactics) to the record: under the record's lock, merged with what other processes wrote, written
// atomically. A record that cannot be written leaves the tactics in memory (the run itself is not at stake).
void record_tactics(FusedMoeRunner::State& s, const std::filesystem::path& file, const std::string& key,
                    const MoeTactics& t) {
  try {
    const artifacts::Config cfg = artifacts::Config::from_env();
    artifacts::detail::make_cache_dir(cfg, file.parent_path());
    const FileLock lock =
        FileLock::acquire(file.string() + ".lock", "recording MoE tactics", artifacts::detail::lock_wait(cfg));
    std::error_code ec;
    if (std::filesystem::exists(file, ec)) ffi::require_trusted_file(file, "MoE tactics record");
    nlohmann::json tactics = read_record(file, s.module_sha256);
    tactics[key] = {t.gemm1, t.gemm2};
    const nlohmann::json j = {{"module", s.uri},
                              {"module_sha256", s.module_sha256},
                              {"note",
                               "FusedMoeRunner auto_tune: [gemm1, gemm2] tactics per problem shape and "
                               "token-count bucket, chosen by tune() on this GPU model"},
                              {"tactics", tactics}};
    artifacts::detail::write_file_atomic(file, j.dump(1) + "\n");
  } catch (const std::exception&) {
  }
}

void auto_tune(FusedMoeRunner::State& s, const FusedMoeArgs& a, const MoeProblemShape& shape, cudaStream_t stream) {
  const size_t bucket = token_bucket(a.input.size(0));
  std::lock_guard tune_lock(s.tune_mu);
  {
    std::lock_guard lock(s.tuned_mu);
    if (s.tuned[bucket].find(shape)) return;  // another thread's call got there first
  }
  const std::filesystem::path& file = tactics_file(s);
  const std::string key = record_key(shape, bucket);
  if (!file.empty())
    if (const auto t = recorded_tactics(s, file, key)) {
      keep_tactics(s, a.input.size(0), &shape, *t);
      return;
    }
  const MoeTactics t = tune_locked(s, a, stream);
  if (!file.empty()) record_tactics(s, file, key, t);
}
}  // namespace

void FusedMoeRunner::set_tactics(int64_t tokens, const MoeTactics& tactics) {
  const Validator v(kSetTacticsOp);
  ops::check_plan_alive(v, s_.get(), "runner");
  if (tokens < 1) v.fail("tokens", "must be >= 1; got " + std::to_string(tokens));
  validate_tactics(v, *s_, tactics);
  keep_tactics(*s_, tokens, nullptr, tactics);
}

void FusedMoeRunner::set_tactics(int64_t tokens, const MoeProblemShape& shape, const MoeTactics& tactics) {
  const Validator v(kSetTacticsOp);
  ops::check_plan_alive(v, s_.get(), "runner");
  if (tokens < 1) v.fail("tokens", "must be >= 1; got " + std::to_string(tokens));
  // The shape's own checks, as run() makes them on a call's tensors (a shape no call can have is refused).
  auto positive = [&](int64_t n, const char* name) {
    v.require(n >= 1, name, "must be >= 1; got " + std::to_string(n));
  };
  positive(shape.hidden, "shape.hidden");
  positive(shape.intermediate, "shape.intermediate");
  positive(shape.experts, "shape.experts");
  positive(shape.top_k, "shape.top_k");
  v.one_of(static_cast<int64_t>(shape.activation), "shape.activation", {0, 1, 2, 3, 4, 6, 7});
  v.in_range(shape.tp_size, "shape.tp_size", 1, 1 << 16);
  v.in_range(shape.tp_rank, "shape.tp_rank", 0, shape.tp_size - 1);
  v.in_range(shape.ep_size, "shape.ep_size", 1, 1 << 16);
  v.in_range(shape.ep_rank, "shape.ep_rank", 0, shape.ep_size - 1);
  validate_tactics(v, *s_, tactics);
  keep_tactics(*s_, tokens, &shape, tactics);
}

namespace {
void validate_tactics(const Validator& v, const FusedMoeRunner::State& s, const MoeTactics& tactics) {
  if (s.config.quantization == MoeQuantization::deepseek_fp8_block_scale && (tactics.gemm1 != -1 || tactics.gemm2 != -1))
    v.fail("tactics", "must be {-1, -1} for deepseek_fp8_block_scale (FlashInfer 0.6.3 runs one fixed configuration); got {" +
                          std::to_string(tactics.gemm1) + ", " + std::to_string(tactics.gemm2) + "}");
  if (tactics.gemm1 != -1 || tactics.gemm2 != -1) {
    const auto [gemm1_candidates, gemm2_candidates] = tactic_counts(s.runner);
    if (tactics.gemm1 < -1 || tactics.gemm1 >= gemm1_candidates)
      v.fail("tactics.gemm1", "must be -1 or in [0, " + std::to_string(gemm1_candidates) + ") (this runner's gemm1 candidates); got " +
                                  std::to_string(tactics.gemm1));
    if (tactics.gemm2 < -1 || tactics.gemm2 >= gemm2_candidates)
      v.fail("tactics.gemm2", "must be -1 or in [0, " + std::to_string(gemm2_candidates) + ") (this runner's gemm2 candidates); got " +
                                  std::to_string(tactics.gemm2));
  }
}

void keep_tactics(FusedMoeRunner::State& s, int64_t tokens, const MoeProblemShape* shape, const MoeTactics& t) {
  const int64_t ids[] = {t.gemm1, t.gemm2};
  FusedMoeRunner::State::Tuned tuned{t, ffi::Array::from_int64(ids)};
  std::lock_guard lock(s.tuned_mu);
  auto& bucket = s.tuned[token_bucket(tokens)];
  if (!shape) {
    bucket.any = std::move(tuned);
    return;
  }
  for (auto& [sh, kept] : bucket.shapes)
    if (sh == *shape) {
      kept = std::move(tuned);
      return;
    }
  bucket.shapes.emplace_back(*shape, std::move(tuned));
}
}  // namespace

}  // namespace flashcpp
