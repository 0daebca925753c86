// CUTLASS fused mixture-of-experts (FlashInfer's fused_moe_{90,100,103,120} modules).
//
//   auto runner = flashcpp::FusedMoeRunner::create(*rt, {.activation_dtype = DType::bf16, ...});
//   runner.run(tensors, {.activation = MoeActivation::swiglu}, stream);  // as often as needed
//   // FusedMoeTensors: the call's tensors; FusedMoeOptions: its scalars. The FlashInfer runner object is created once.
//
// For every token t and every k < top_k, with e = token_selected_experts[t, k]:
//   h   = fc1[e] · x_t                         fc1[e]: [N1, hidden]
//   a   = gated ? act(h[I:2I]) ⊙ h[0:I] : act(h)   (I = intermediate size; N1 = 2I gated, else I)
//   out_t += token_final_scales[t, k] · fc2[e] · a   fc2[e]: [hidden, I]
// FlashInfer 0.6.3's runner allocates its workspace on every call through the TVM-FFI tensor
// allocator; flashcpp installs a pooled, stream-ordered allocator for it (ffi::install_tensor_allocator).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "flashcpp/dtype.hpp"
#include "flashcpp/runtime.hpp"
#include "flashcpp/tensor.hpp"

namespace flashcpp {

/// Activation after fc1 (values are FlashInfer's ActivationType). Gated: swiglu, geglu.
enum class MoeActivation : int64_t { gelu = 0, relu = 1, silu = 2, swiglu = 3, geglu = 4, relu2 = 6, identity = 7 };
bool moe_activation_is_gated(MoeActivation a) noexcept;

enum class MoeQuantization {
  none,                       ///< 16-bit activations and weights (f16 or bf16, all equal)
  fp8_per_tensor,             ///< e4m3 input and weights, per-tensor/per-expert float scales, 16-bit output
  deepseek_fp8_block_scale,   ///< bf16 input and output, e4m3 weights with 128×128 block scales (SM90 only)
};

/// Which module: fused_moe_90 (Hopper), _100, _103, _120. automatic: by compute capability
/// (9.x → 90, 10.0 → 100, 10.3 → 103, 12.x → 120).
enum class MoeBackend { automatic, sm90, sm100, sm103, sm120 };
std::string fused_moe_uri(MoeBackend backend);  ///< backend must not be automatic

struct FusedMoeConfig {
  DType activation_dtype = DType::bf16;  ///< dtype of `input`
  DType weight_dtype = DType::bf16;      ///< dtype of fc1/fc2 weights
  DType output_dtype = DType::bf16;      ///< dtype of `output`
  MoeQuantization quantization = MoeQuantization::none;
  MoeBackend backend = MoeBackend::automatic;
  int device = 0;  ///< CUDA device the runner serves
  /// Fast by default: a run() of a token-count bucket and problem shape that has no tactics (none tuned, set or
  /// recorded) first tunes them, once per bucket and shape (tune(): every candidate of both GEMMs timed, blocking,
  /// seconds), and records them in the module cache, `<FLASHCPP_CACHE_DIR>/moe-tactics/`, one JSON file per
  /// module build (its SHA-256) and GPU model, written atomically under a file lock; a later runner, in this
  /// process or the next, reads them from there instead of tuning. A file another user could have written, or
  /// one that does not parse, is not used (and not written). Not during CUDA graph capture (nothing can be timed
  /// there): a capture of an untuned bucket runs the defaults, so run each served bucket once eagerly, or tune(),
  /// before capturing. false: untuned calls run the runner's first candidate (5-8x slower at thousands of tokens).
  /// DeepSeek FP8 block scale has one configuration and nothing to tune.
  bool auto_tune = true;
};

/// One MoE call's tensors. T tokens, K = top_k, E = experts on this rank, H = hidden, I = intermediate.
/// All tensors contiguous, on the config's device.
struct FusedMoeTensors {
  TensorView output;                  ///< [T, H] output_dtype
  TensorView input;                   ///< [T, H] activation_dtype
  /// [T, K] i32, global expert ids, distinct within each row (values are not checked). FlashInfer 0.6.3's
  /// three-kernel routing prologue (used above 256 tokens, for a top_k outside {1, 2, 4, 6, 8} or more than
  /// 510 experts on the rank) maps an expert repeated in a row once and then reads an unset permutation
  /// entry for the repeat: wrong output or an illegal address. Its one-kernel prologue counts it twice.
  TensorView token_selected_experts;
  TensorView token_final_scales;      ///< [T, K] f32 routing weights
  TensorView fc1_weights;             ///< [E, N1, H] weight_dtype (N1 = 2I for gated activations, else I)
  TensorView fc2_weights;             ///< [E, H, I] weight_dtype
  OptionalTensor fc1_bias = nullptr;  ///< [E, N1] output_dtype; fc1_bias and fc2_bias come together
  OptionalTensor fc2_bias = nullptr;  ///< [E, H] output_dtype
  // fp8_per_tensor scales (f32): fc1 output = (x·w1)·fc1_dequant[e]; the intermediate is quantized
  // to e4m3 as a·fc2_quant; fc2 output = (q·w2)·fc2_dequant[e]. fc1_input_dequant is the input's scale.
  OptionalTensor fc1_dequant = nullptr;        ///< [E]
  OptionalTensor fc2_quant = nullptr;          ///< [] (0-d) or [E]
  OptionalTensor fc2_dequant = nullptr;        ///< [E]
  OptionalTensor fc1_input_dequant = nullptr;  ///< [] (0-d)
  // deepseek_fp8_block_scale scales (f32): weight block (i, j) of expert e is scaled by scales[e, i, j].
  OptionalTensor fc1_block_scales = nullptr;   ///< [E, N1/128, H/128]
  OptionalTensor fc2_block_scales = nullptr;   ///< [E, H/128, I/128]
};

/// One MoE call's scalars (validated with the tensors by run(), tune() and validate_fused_moe()).
struct FusedMoeOptions {
  /// Activation after fc1: one FlashInfer knows (MoeActivation's values); gated ones (swiglu, geglu) make
  /// fc1_weights [E, 2I, H]. swiglu only for deepseek_fp8_block_scale.
  MoeActivation activation = MoeActivation::swiglu;
  /// Tensor parallelism (passed to FlashInfer as given): tp_size in [1, 65536], tp_rank in [0, tp_size).
  int64_t tp_size = 1, tp_rank = 0;
  /// Expert parallelism: ep_size in [1, 65536], ep_rank in [0, ep_size). This rank's E experts are the global
  /// ids [ep_rank·E, (ep_rank+1)·E); a token's slots routed to other experts add nothing to its output here.
  int64_t ep_size = 1, ep_rank = 0;
  bool enable_pdl = false;  ///< launch with programmatic dependent launch (SM90+)
};

/// The GEMM configurations ("tactics") the runner uses for its two grouped GEMMs: indices into FlashInfer's
/// candidate lists of fc1 (gemm1) and fc2 (gemm2); -1 is the runner's default, the first candidate
/// (a 128x16 tile on SM90: fine for a few tokens, 5-8x slower than the best at thousands; bench-mla-gdn-moe).
struct MoeTactics {
  int64_t gemm1 = -1, gemm2 = -1;
};

/// The problem shape a call's tactics belong to, besides its token count: what FlashInfer's profiler sizes and
/// builds the grouped GEMMs from (everything tune() passes it but the tensors' data, the token count and
/// options.enable_pdl, a launch attribute). Tactics chosen on one shape are not used for another (they may be slow
/// there, or not run at all).
struct MoeProblemShape {
  int64_t hidden = 0;        ///< H: input.size(1)
  int64_t intermediate = 0;  ///< I: fc2_weights.size(2)
  int64_t experts = 0;       ///< E, the experts on this rank: fc2_weights.size(0)
  int64_t top_k = 0;         ///< K: token_selected_experts.size(1)
  MoeActivation activation = MoeActivation::swiglu;  ///< options.activation
  bool bias = false;  ///< fc1_bias and fc2_bias given
  int64_t tp_size = 1, tp_rank = 0, ep_size = 1, ep_rank = 0;  ///< options' tp/ep sizes and ranks

  /// The shape of a call (`tensors` and `options` as run() takes them; not validated here).
  static MoeProblemShape of(const FusedMoeTensors& tensors, const FusedMoeOptions& options);
  bool operator==(const MoeProblemShape&) const = default;
};

/// A FlashInfer FusedMoeRunner created once (module `init`) and reused for every call. Thread-safe
/// (FlashInfer serialises calls per runner). Keeps its module loaded.
class FusedMoeRunner {
 public:
  /// Validates the configuration, resolves the backend, loads the module, registers the tensor
  /// allocator, sets the DeepGEMM include directories once per module (block-scale path) and
  /// creates the runner. Throws unsupported for combinations the device cannot run.
  static FusedMoeRunner create(const Runtime& rt, const FusedMoeConfig& config);
  /// A runner shared per (runtime, configuration) from a process-wide cache.
  static std::shared_ptr<FusedMoeRunner> shared(const Runtime& rt, const FusedMoeConfig& config);

  /// Validates `tensors` and `options` against the configuration (shapes, dtypes, alignment of H and I, scales,
  /// the activation, the tp/ep sizes and ranks), makes the device current (the runner does not) and launches on
  /// `stream`.
  void run(const FusedMoeTensors& tensors, const FusedMoeOptions& options, cudaStream_t stream) const;

  /// Tactics are kept per token-count bucket (the next power of two of the token count), and within a bucket
  /// per problem shape (MoeProblemShape). A call of T tokens and shape P runs with, in this order:
  ///   1. the tactics kept for (bucket of T, P): by tune() on a call of that bucket and shape, or by
  ///      set_tactics(tokens, P, t);
  ///   2. else those set for the bucket by set_tactics(tokens, t), which apply to every shape without its own;
  ///   3. else the runner's defaults ({-1, -1}; run_moe gets no profile ids).
  /// A later tune() or set_tactics() of the same entry replaces it. A runner shared by several models
  /// (FusedMoeRunner::shared caches one per configuration, not per shape) so keeps each model's tuning.

  /// Chooses the tactics for calls shaped like `tensors` and `options` (validated as run() does): FlashInfer's
  /// profiler runs each candidate of gemm1, then of gemm2, on the tensors' shapes (routing from its own
  /// synthetic data; no tensor of `tensors` is written), timed with CUDA events (median of 3 after one
  /// warm-up); candidates that fail to launch are skipped. The fastest pair is kept for the token-count bucket
  /// of tensors.input.size(0) and the shape MoeProblemShape::of(tensors, options) (rule 1 above): later run()s
  /// of that bucket and shape use it; other shapes and buckets are unaffected.
  /// The profiler runs on a stream the runner owns (FlashInfer keeps its profiler workspace, freed on the
  /// stream it came from), after the work queued on `stream`; later work on `stream` waits for it. Blocks
  /// until done (call it at start-up, for the token counts and shapes you serve). Returns the tactics kept.
  /// A candidate that leaves a sticky CUDA error (e.g. an illegal address) throws cuda_error naming the GEMM,
  /// the candidate and the token count: the CUDA context is then lost. One tune() at a time per runner;
  /// run() may run concurrently.
  /// DeepSeek FP8 block-scale has one fixed configuration in FlashInfer 0.6.3: returns {-1, -1} at once
  /// (nothing is kept).
  MoeTactics tune(const FusedMoeTensors& tensors, const FusedMoeOptions& options, cudaStream_t stream);
  /// The tactics run() uses for `tokens` tokens of `shape` (rules 1-3 above; {-1, -1}: the defaults). Validated:
  /// tokens >= 1 (both overloads).
  MoeTactics tactics_for(int64_t tokens, const MoeProblemShape& shape) const;
  /// The tactics set_tactics(tokens, t) set for the bucket of `tokens` ({-1, -1} if none): what run() uses
  /// for a shape with no tactics of its own in that bucket. tune()'s results are per shape: read them with
  /// tactics_for(tokens, shape).
  MoeTactics tactics_for(int64_t tokens) const;
  /// Sets the tactics of the bucket of `tokens` for every shape that has none of its own there (rule 2: tactics
  /// tune() kept, or set for a shape, take precedence and are left as they are). E.g. tune()'s results from
  /// an earlier process for a runner that serves one shape, on the same module and GPU. Validated: tokens >= 1;
  /// each index -1 or below this runner's candidate count of its GEMM; {-1, -1} only for DeepSeek FP8
  /// block-scale. Nothing is launched.
  void set_tactics(int64_t tokens, const MoeTactics& tactics);
  /// Sets the tactics of the bucket of `tokens` for `shape` only (rule 1), as tune() on such a call would keep
  /// them: e.g. restoring several shapes' tunings from an earlier process. {-1, -1} pins the shape to the
  /// defaults whatever set_tactics(tokens, t) set. Validated as above, and the shape's sizes >= 1, its
  /// activation one FlashInfer knows, its tp/ep ranks below their sizes.
  void set_tactics(int64_t tokens, const MoeProblemShape& shape, const MoeTactics& tactics);

  const FusedMoeConfig& config() const;  ///< backend resolved
  const std::string& uri() const;

  FusedMoeRunner(FusedMoeRunner&&) noexcept;
  FusedMoeRunner& operator=(FusedMoeRunner&&) noexcept;
  ~FusedMoeRunner();

  struct State;

 private:
  explicit FusedMoeRunner(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

/// Validation only (what run() checks before launching); for callers and tests.
void validate_fused_moe(const FusedMoeConfig& config, const FusedMoeTensors& tensors, const FusedMoeOptions& options);

}  // namespace flashcpp
