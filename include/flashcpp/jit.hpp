// flashcpp's module builder: FlashInfer kernel modules built from the pinned FlashInfer sources
// (flashinfer-python 0.6.3 `data/` tree) with nvcc, offline and without Python.
//
//   URI  ->  generated sources (our own generator, FlashInfer's templates and recipe)
//        ->  nvcc / c++ (parallel)  ->  <cache_dir>/jit/<key>/<uri>/<uri>.so
//
// The URIs are FlashInfer's own module names, so a built module is interchangeable with the one
// in FlashInfer's prebuilt jit-cache (same exports, same ABI, same `<uri>/<uri>.so` layout).
// docs/JIT.md describes the recipe, the cache layout and every environment variable.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashcpp/dtype.hpp"
#include "flashcpp/error.hpp"

namespace flashcpp::jit {

/// The FlashInfer release whose sources and recipe the generator follows.
inline constexpr std::string_view kFlashInferVersion = "0.6.3";

// ---------------------------------------------------------------------------------------------
// Building

struct BuildOptions {
  /// FlashInfer's `data/` directory: csrc/, include/, cutlass/, spdlog/.
  std::filesystem::path flashinfer_data_dir;
  /// Directory holding tvm/ffi/*.h and dlpack/dlpack.h.
  std::filesystem::path tvm_ffi_include_dir;
  /// Modules land at <cache_dir>/jit/<key>/<uri>/<uri>.so; key = hash of FlashInfer version,
  /// architectures, nvcc version, host compiler and the common flag set.
  std::filesystem::path cache_dir;
  /// FLASHCPP_CACHE_SHARED=1: the cache root is created 0755 for several users instead of 0700 (modules
  /// 0755, other files 0644, build trees 0700, whatever the umask). Each published module gets a SHA-256
  /// record; cached_module() and the Runtime refuse one that no longer matches it (docs/ARTIFACTS.md).
  bool shared_cache = false;
  /// FLASHINFER_CUDA_ARCH_LIST style entries: "9.0a", "8.0", "10.0a", "12.0f".
  std::vector<std::string> cuda_archs = {"9.0a"};
  /// Parallel compiler processes (0 = hardware threads).
  int jobs = 0;
  /// Receives one line per step (generation, each compile, link, cache hit); may be empty.
  std::function<void(const std::string&)> progress;
  /// A module another process is building is waited for at most this long (FLASHCPP_LOCK_TIMEOUT); then that
  /// module's result is an io_error naming the builder's PID. The wait is reported through `progress` (else
  /// stderr) after lock_report_after_s.
  double lock_timeout_s = 6 * 3600.0;
  double lock_report_after_s = 5;

  /// From the environment:
  ///   FLASHCPP_CACHE_DIR (else $XDG_CACHE_HOME/flashcpp, else ~/.cache/flashcpp),
  ///   FLASHCPP_CUDA_ARCH_LIST (space/comma/semicolon separated; else FLASHINFER_CUDA_ARCH_LIST; else 9.0a),
  ///   FLASHCPP_JIT_JOBS, FLASHCPP_LOCK_TIMEOUT, FLASHCPP_FLASHINFER_DIR (the flashinfer package dir or its data/
  ///   dir; else the build tree's pinned wheel), FLASHCPP_TVM_FFI_INCLUDE (else the build tree's pinned wheel;
  ///   neither build-tree default with FLASHCPP_NO_BUILD_DEPS=1). FLASHCPP_JIT_JOBS, FLASHCPP_LOCK_TIMEOUT and
  ///   FLASHCPP_CACHE_DIR are checked strictly (an integer in [0, 4096]; seconds in (0, 86400]; a directory):
  ///   anything else is an invalid_argument error.
  ///   The CUDA toolkit comes from CUDA_HOME / CUDA_PATH, else nvcc on PATH, else /usr/local/cuda;
  ///   the host compiler from CXX (else c++).
  static BuildOptions from_env();
};

/// The module's path if it is already built for these options (no build, no lock) and matches the SHA-256
/// recorded when it was built; std::nullopt when absent or unrecorded (built again). Throws Error(untrusted)
/// when its bytes differ from the record.
std::optional<std::filesystem::path> cached_module(const BuildOptions&, const std::string& uri);
/// Builds the module unless it is cached, and returns its path. Thread- and process-safe: an exclusive
/// file lock per URI makes concurrent builders produce one module; the .so is published atomically.
/// Throws Error: invalid_argument (unknown URI), not_found (sources/headers missing), unsupported (no
/// nvcc, or a compile/link failed: the message carries the tail of the compiler log).
std::filesystem::path build_module(const BuildOptions&, const std::string& uri);
/// One module of a build_modules() call.
struct BuildResult {
  std::string uri;
  std::filesystem::path path;   ///< the published .so (empty on failure)
  bool cached = false;          ///< found built; nothing compiled
  double seconds = 0;           ///< wall time from the start of the build to the publish of this module
  double compile_seconds = 0;   ///< sum of this module's compiler and linker process times (its own cost
                                ///< when it shares the pool with other modules)
  std::uintmax_t bytes = 0;     ///< size of the .so
  std::optional<Error> error;   ///< why this module failed (other modules still build)
};
/// Builds several modules with one pool of `jobs` compiler processes shared by all of them (small modules
/// do not leave cores idle). Per-module failures are reported in the results, not thrown; invalid options
/// (no nvcc, no sources) throw as build_module does.
std::vector<BuildResult> build_modules(const BuildOptions&, const std::vector<std::string>& uris);

/// True when nvcc, a host compiler, the FlashInfer sources and the tvm-ffi headers are present; otherwise
/// false with `why_not` (if given) saying what is missing and what to set.
bool can_build(const BuildOptions&, std::string* why_not = nullptr);
/// <cache_dir>/jit/<key>: the directory this configuration's modules are published in (computes the key;
/// runs `nvcc --version` once per process).
std::filesystem::path module_root(const BuildOptions&);

// ---------------------------------------------------------------------------------------------
// URIs (FlashInfer 0.6.3 naming, flashinfer/jit/attention/modules.py)

enum class Backend { fa2, fa3 };  ///< fa3 = the Hopper (`_sm90`) templates

/// One attention module variant. Every field is part of the URI.
struct AttentionSpec {
  Backend backend = Backend::fa2;  ///< prefill families only (decode has no fa3 variant)
  DType q = DType::bf16, kv = DType::bf16, o = DType::bf16;
  DType idx = DType::i32;          ///< batch families only
  int head_dim_qk = 128, head_dim_vo = 128;
  int pos_encoding = 0;            ///< 0 none, 1 RoPE (llama), 2 ALiBi
  bool use_sliding_window = false;
  bool use_logits_soft_cap = false;
  bool use_fp16_qk_reduction = false;  ///< prefill families only
};

/// A batch MLA module (DeepSeek MLA, paged, head_dim_ckv / head_dim_kpe).
struct MlaSpec {
  Backend backend = Backend::fa2;
  DType q = DType::bf16, kv = DType::bf16, o = DType::bf16, idx = DType::i32;
  int head_dim_ckv = 512, head_dim_kpe = 64;
  bool profiler = false;
};

enum class Family {
  norm,
  page,
  gdn_prefill_sm90,
  single_prefill,
  batch_prefill,
  single_decode,
  batch_decode,
  batch_mla,
  rope,         ///< apply_rope*, the Llama 3.1 variants, cos/sin cache, rope_quantize (csrc/rope.cu)
  cascade,      ///< merge_state, merge_state_in_place, merge_states (csrc/cascade.cu)
  sampling,     ///< softmax, the samplers, renorm and mask helpers (csrc/sampling.cu, renorm.cu)
  topk,         ///< radix top-k and its page-table / ragged transforms (csrc/topk.cu)
  act_and_mul,  ///< one gated activation per module: silu/gelu/gelu_tanh_and_mul (jit/activation.py's template)
};
std::string_view family_name(Family) noexcept;

/// The activation of an act_and_mul module (its URI is `<name>_and_mul`).
enum class Activation { silu, gelu, gelu_tanh };
std::string_view activation_name(Activation) noexcept;

/// A parsed/constructible module: the family plus the spec that applies to it.
struct ModuleSpec {
  Family family = Family::norm;
  AttentionSpec attention;  ///< single/batch prefill/decode
  MlaSpec mla;              ///< batch_mla
  Activation activation = Activation::silu;  ///< act_and_mul
  std::string uri() const;
};

std::string single_prefill_uri(const AttentionSpec&);
std::string batch_prefill_uri(const AttentionSpec&);
std::string single_decode_uri(const AttentionSpec&);
std::string batch_decode_uri(const AttentionSpec&);
std::string batch_mla_uri(const MlaSpec&);
inline std::string norm_uri() { return "norm"; }
inline std::string page_uri() { return "page"; }
inline std::string gdn_prefill_sm90_uri() { return "gdn_prefill_sm90"; }
inline std::string rope_uri() { return "rope"; }
inline std::string cascade_uri() { return "cascade"; }
inline std::string sampling_uri() { return "sampling"; }
inline std::string topk_uri() { return "topk"; }
std::string act_and_mul_uri(Activation);

/// The spec a URI names, or nullopt for a URI this generator does not know. Round-trips:
/// parse_uri(s)->uri() == s for every URI the constructors above produce.
std::optional<ModuleSpec> parse_uri(const std::string& uri);

/// What `flashcpp build --defaults` builds: norm, page, gdn_prefill_sm90, the decode-step misc modules (rope,
/// cascade, sampling, topk, silu/gelu/gelu_tanh_and_mul), and for bf16 and f16 (q = kv = o, int32 indices,
/// head dim 128, no RoPE/ALiBi, no sliding window, no soft cap): batch prefill fa2 + fa3, single prefill
/// fa2 + fa3, single and batch decode, and batch MLA fa2 + fa3 (512/64). 26 modules.
std::vector<std::string> default_uris();

}  // namespace flashcpp::jit
