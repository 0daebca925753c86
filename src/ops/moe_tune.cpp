// FusedMoeRunner's tactics: tune() (FlashInfer's profiler times every GEMM candidate), tactics_for, set_tactics,
// and auto_tune's record of the chosen tactics in the cache (moe-tactics/<module>-<GPU>.json).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "artifacts/internal.hpp"
#include "core/check.hpp"
#include "core/config_file.hpp"
#include "core/file_lock.hpp"
#include "core/json.hpp"
#include "ffi/ffi.hpp"
#include "ffi/trust.hpp"
#include "flashcpp/cuda.hpp"
#include "flashcpp/moe.hpp"
#include "ops/common.hpp"
#include "ops/moe_internal.hpp"

namespace flashcpp {

namespace {
constexpr const char* kTuneOp = "fused_moe_tune";
constexpr const char* kSetTacticsOp = "fused_moe_set_tactics";

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
MoeTactics tune_locked(FusedMoeRunner::State& s, const FusedMoeTensors& a, const FusedMoeOptions& o,
                       cudaStream_t stream);
}  // namespace

MoeProblemShape MoeProblemShape::of(const FusedMoeTensors& a, const FusedMoeOptions& o) {
  MoeProblemShape p;
  p.hidden = a.input.size(1);
  p.intermediate = a.fc2_weights.size(2);
  p.experts = a.fc2_weights.size(0);
  p.top_k = a.token_selected_experts.size(1);
  p.activation = o.activation;
  p.bias = a.fc1_bias != nullptr;
  p.tp_size = o.tp_size;
  p.tp_rank = o.tp_rank;
  p.ep_size = o.ep_size;
  p.ep_rank = o.ep_rank;
  return p;
}

MoeTactics FusedMoeRunner::tactics_for(int64_t tokens) const {
  const Validator v(kTuneOp);
  ops::check_plan_alive(v, s_.get(), "runner");
  if (tokens < 1) v.fail("tokens", "must be >= 1; got " + std::to_string(tokens));
  std::lock_guard lock(s_->tuned_mu);
  const auto& any = s_->tuned[ops::token_bucket(tokens)].any;
  return any ? any->tactics : MoeTactics{};
}

MoeTactics FusedMoeRunner::tactics_for(int64_t tokens, const MoeProblemShape& shape) const {
  const Validator v(kTuneOp);
  ops::check_plan_alive(v, s_.get(), "runner");
  if (tokens < 1) v.fail("tokens", "must be >= 1; got " + std::to_string(tokens));
  std::lock_guard lock(s_->tuned_mu);
  const State::Tuned* t = s_->tuned[ops::token_bucket(tokens)].find(shape);
  return t ? t->tactics : MoeTactics{};
}

MoeTactics FusedMoeRunner::tune(const FusedMoeTensors& a, const FusedMoeOptions& o, cudaStream_t stream) {
  ops::check_plan_alive(Validator(kTuneOp), s_.get(), "runner");
  State& s = *s_;
  validate_fused_moe(s.config, a, o);
  if (s.config.quantization == MoeQuantization::deepseek_fp8_block_scale) return {};
  std::lock_guard tune_lock(s.tune_mu);
  return tune_locked(s, a, o, stream);
}

namespace {
MoeTactics tune_locked(FusedMoeRunner::State& s, const FusedMoeTensors& a, const FusedMoeOptions& o,
                       cudaStream_t stream) {
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
                top_k, o.tp_size, o.tp_rank, o.ep_size, o.ep_rank, int64_t{1} /*cluster_size*/,
                int64_t{0} /*cluster_rank*/, false /*enable_alltoall*/, false /*min_latency_mode*/, gemm, id, prepare,
                o.enable_pdl, static_cast<int64_t>(o.activation));
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
  const MoeProblemShape shape = MoeProblemShape::of(a, o);
  keep_tactics(s, tokens, &shape, chosen);
  return chosen;
}

// ----------------------------------------------------------------------------- auto_tune's record

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
    const artifacts::Settings cfg = artifacts::Settings::from_env();
    if (cfg.cache_dir.empty()) return *s.tactics_file;
    s.module_sha256 = ffi::file_sha256(s.lib->path());
    const DeviceFacts& facts = device_facts(s.config.device);
    std::string gpu = "cc" + std::to_string(facts.cc_major) + std::to_string(facts.cc_minor) + "-" +
                      std::to_string(facts.sm_count) + "sm";
    if (!facts.name.empty()) gpu = facts.name + "-" + gpu;
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
    const artifacts::Settings cfg = artifacts::Settings::from_env();
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

}  // namespace

namespace ops {

bool stream_capturing(cudaStream_t stream) {
  if (cuda_device_count() == 0) return false;  // CPU tests: recording modules, nothing is captured
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown: do not risk a synchronizing tune inside a capture
  }
  return status != cudaStreamCaptureStatusNone;
}

void auto_tune(FusedMoeRunner::State& s, const FusedMoeTensors& a, const FusedMoeOptions& o,
               const MoeProblemShape& shape, cudaStream_t stream) {
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
  const MoeTactics t = tune_locked(s, a, o, stream);
  if (!file.empty()) record_tactics(s, file, key, t);
}

}  // namespace ops

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
  auto& bucket = s.tuned[ops::token_bucket(tokens)];
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
