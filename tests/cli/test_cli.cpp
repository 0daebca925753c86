// The flashcpp CLI as a user runs it: exit codes and what it prints, on this machine (no GPU needed).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <array>
#include <chrono>
#include <fstream>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "flashcpp/cuda.hpp"
#include "flashcpp/jit.hpp"
#include "flashcpp/mla_attention.hpp"

namespace {

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CliRun run(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + " '" FLASHCPP_CLI "' " + args + " 2>&1";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string temp_cache() {
  auto d = std::filesystem::temp_directory_path() / ("flashcpp_cli_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

TEST(Cli, DoctorReportsRuntimeGpusAndCacheAndExitsZero) {
  const CliRun r = run("doctor", "FLASHCPP_CACHE_DIR='" + temp_cache() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("libtvm_ffi:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(version 0.1."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CUDA runtime:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cache:"), std::string::npos) << r.output;
}

TEST(Cli, BuildListsTheDefaultModulesWithoutBuilding) {
  const CliRun r = run("build --list");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(("\n" + r.output).find("\nnorm\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("batch_decode_with_kv_cache_dtype_q_bf16"), std::string::npos) << r.output;
}

TEST(Cli, BuildRejectsAnUnknownUri) {
  const CliRun r = run("build --uri not_a_flashinfer_module", "FLASHCPP_CACHE_DIR='" + temp_cache() + "'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not_a_flashinfer_module"), std::string::npos) << r.output;
}

TEST(Cli, CacheLsOnAnEmptyCache) {
  const CliRun r = run("cache ls", "FLASHCPP_CACHE_DIR='" + temp_cache() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Cli, UnknownSubcommandIsNamedWithUsageStatus) {
  CliRun r = run("bogus");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown subcommand 'bogus'"), std::string::npos) << r.output;
  r = run("cache bogus");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("flashcpp cache: unknown subcommand 'bogus'"), std::string::npos) << r.output;
}

TEST(Cli, FetchOfflineWithColdCacheSaysWhatToSet) {
  const CliRun r = run("fetch --skip-jit-cache", "FLASHCPP_OFFLINE=1 FLASHCPP_NO_BUILD_DEPS=1 FLASHCPP_CACHE_DIR='" + temp_cache() + "/cold'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("FLASHCPP_OFFLINE"), std::string::npos) << r.output;
}

// Offline, a module the cache cannot provide: "not cached (offline)", exit 1 (failure), and the ways out.
TEST(Cli, FetchOfflineModuleNotCachedExitsOne) {
  const std::string env = "VIRTUAL_ENV= CONDA_PREFIX= FLASHCPP_PYTHON_PREFIXES= FLASHCPP_JIT_CACHE= FLASHCPP_CACHE_DIR='" +
                          temp_cache() + "/cold-module'";
  for (const std::string args : {"fetch --offline --module norm", "fetch --offline"}) {
    const CliRun r = run(args, env);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    const size_t line = r.output.find("module norm:");
    ASSERT_NE(line, std::string::npos) << args << "\n" << r.output;
    const std::string norm_line = r.output.substr(line, r.output.find('\n', line) - line);
    EXPECT_NE(norm_line.find("not cached (offline)"), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("not in the pinned"), std::string::npos) << args << "\n" << r.output;
    for (const char* want : {"`flashcpp build`", "FLASHCPP_JIT_CACHE=<path to the", "--skip-jit-cache"})
      EXPECT_NE(r.output.find(want), std::string::npos) << args << ": missing " << want << "\n" << r.output;
  }
}

// Downloads from a port nobody listens on: one attempt, a clear message, no empty .part file for `cache ls`.
TEST(Cli, FetchFromAnUnreachableIndexFailsFastAndLeavesNoPartFile) {
  const std::string cache = temp_cache() + "/unreachable";
  const std::string env = "VIRTUAL_ENV= CONDA_PREFIX= FLASHCPP_PYTHON_PREFIXES= FLASHCPP_NO_BUILD_DEPS=1 "
                          "FLASHCPP_RETRIES=5 FLASHCPP_INDEX_URL=http://127.0.0.1:1/simple/ FLASHCPP_CACHE_DIR='" + cache + "'";
  const auto t0 = std::chrono::steady_clock::now();
  const CliRun r = run("fetch --skip-jit-cache", env);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);  // 5 retries: 1+2+4+8+16 s
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot be reached"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("FLASHCPP_OFFLINE=1"), std::string::npos) << r.output;
  const CliRun ls = run("cache ls", "FLASHCPP_CACHE_DIR='" + cache + "'");
  EXPECT_EQ(ls.exit_code, 0) << ls.output;
  EXPECT_EQ(ls.output.find(".part"), std::string::npos) << ls.output;
}

}  // namespace

namespace {

// The exit statuses every command shares (README): 0 ok, 1 failure, 2 usage, 3 unsupported here.
constexpr int kUsage = 2, kUnsupported = 3;

bool contains(const CliRun& r, const std::string& s) { return r.output.find(s) != std::string::npos; }
bool crashed(const CliRun& r) { return r.exit_code < 0 || contains(r, "unexpected error"); }

TEST(Cli, DemoRefusesHeadDimZero) {
  const CliRun r = run("demo --cpu --head-dim 0");
  EXPECT_EQ(r.exit_code, kUsage) << r.output;
  EXPECT_TRUE(contains(r, "--head-dim")) << r.output;
}

TEST(Cli, DemoRefusesANegativeHeadDim) {
  for (const char* args : {"demo --cpu --head-dim -5", "demo --cpu --head-dim=-5", "demo --cpu --head-dim 96"}) {
    const CliRun r = run(args);
    EXPECT_EQ(r.exit_code, kUsage) << args << "\n" << r.output;
    EXPECT_FALSE(crashed(r)) << r.output;
  }
}

TEST(Cli, DemoRefusesAContextThatWouldExceedMemoryNamingTheSize) {
  const CliRun r = run("demo --cpu --context 1048576 --batch 4096 --kv-heads 64 --qo-heads 64 --head-dim 256");
  EXPECT_EQ(r.exit_code, kUsage) << r.output;
  EXPECT_TRUE(contains(r, "--context")) << r.output;
  EXPECT_TRUE(contains(r, "GiB of host memory; this machine has")) << r.output;
}

TEST(Cli, DemoRefusesQueryHeadsThatAreNotAMultipleOfKvHeads) {
  const CliRun r = run("demo --cpu --qo-heads 12 --kv-heads 8");
  EXPECT_EQ(r.exit_code, kUsage) << r.output;
  EXPECT_TRUE(contains(r, "must be a multiple of --kv-heads (8); got 12")) << r.output;
}

TEST(Cli, HelpShowsDefaults) {
  const CliRun r = run("demo --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r, "1024")) << r.output;  // --context
  EXPECT_TRUE(contains(r, "auto")) << r.output;  // --backend
}

TEST(Cli, InvalidJitSettingIsReportedByDoctorAndRefusedByCommands) {
  const std::string env = "FLASHCPP_JIT=bogus FLASHCPP_CACHE_DIR='" + temp_cache() + "'";
  const CliRun doctor = run("doctor", env);
  EXPECT_EQ(doctor.exit_code, 1) << doctor.output;
  EXPECT_TRUE(contains(doctor, "FLASHCPP_JIT must be one of auto, off, force; got 'bogus'")) << doctor.output;
  for (const char* cmd : {"demo --cpu --batch 1 --context 8", "build --list", "fetch --offline --skip-jit-cache", "cache ls"}) {
    const CliRun r = run(cmd, env);
    EXPECT_EQ(r.exit_code, kUsage) << cmd << "\n" << r.output;
    EXPECT_TRUE(contains(r, "FLASHCPP_JIT must be one of auto, off, force")) << cmd << "\n" << r.output;
  }
}

TEST(Cli, AnArgumentErrorComesBeforeAnInvalidSetting) {
  const CliRun r = run("demo --cpu --head-dim 0", "FLASHCPP_JIT=bogus");
  EXPECT_EQ(r.exit_code, kUsage) << r.output;
  EXPECT_TRUE(contains(r, "--head-dim")) << r.output;
  EXPECT_FALSE(contains(r, "FLASHCPP_JIT")) << r.output;
}

TEST(Cli, OfflineSettingIsZeroOrOne) {
  for (const char* v : {"yes", "false", "true", "2"}) {
    const std::string env = std::string("FLASHCPP_OFFLINE=") + v + " FLASHCPP_CACHE_DIR='" + temp_cache() + "'";
    const CliRun doctor = run("doctor", env);
    EXPECT_EQ(doctor.exit_code, 1) << v << "\n" << doctor.output;
    EXPECT_TRUE(contains(doctor, std::string("FLASHCPP_OFFLINE must be one of 0, 1; got '") + v + "'")) << doctor.output;
    const CliRun ls = run("cache ls", env);
    EXPECT_EQ(ls.exit_code, kUsage) << ls.output;
    EXPECT_TRUE(contains(ls, "FLASHCPP_OFFLINE")) << ls.output;
  }
}

TEST(Cli, CacheDirThatIsAFileIsRefusedByDoctorAndCache) {
  const std::string file = temp_cache() + "/not_a_dir";
  std::ofstream(file) << "x";
  const std::string env = "FLASHCPP_CACHE_DIR='" + file + "'";
  const CliRun doctor = run("doctor", env);
  EXPECT_EQ(doctor.exit_code, 1) << doctor.output;
  EXPECT_TRUE(contains(doctor, "FLASHCPP_CACHE_DIR must be a directory")) << doctor.output;
  for (const char* cmd : {"cache ls", "cache prune", "build --print-root"}) {
    const CliRun r = run(cmd, env);
    EXPECT_EQ(r.exit_code, kUsage) << cmd << "\n" << r.output;
    EXPECT_TRUE(contains(r, "FLASHCPP_CACHE_DIR must be a directory")) << cmd << "\n" << r.output;
  }
}

TEST(Cli, DoctorWithoutAGpuSaysTheReferenceBackendRunsAndSucceeds) {
  if (flashcpp::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  const CliRun r = run("doctor", "FLASHCPP_CACHE_DIR='" + temp_cache() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r, "reference backend")) << r.output;
  EXPECT_TRUE(contains(r, "doctor: no problems found")) << r.output;
}

TEST(Cli, EveryBenchCommandWithoutAGpuExitsUnsupported) {
  if (flashcpp::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present: the benchmarks would run";
  for (const char* cmd : {"bench", "bench-mla-gdn-moe", "mla-bench", "mla-bench --suite flashmla-dense"}) {
    const CliRun r = run(cmd, "FLASHCPP_CACHE_DIR='" + temp_cache() + "'");
    EXPECT_EQ(r.exit_code, kUnsupported) << cmd << "\n" << r.output;
    EXPECT_TRUE(contains(r, "needs a CUDA GPU")) << cmd << "\n" << r.output;
  }
}

// A size that can never be valid is a usage error (exit 2) before any GPU check, not "unsupported".
TEST(Cli, MlaBenchRefusesNonPositiveSizesAsUsage) {
  for (const char* args : {"mla-bench --topk -5", "mla-bench --h-q 0", "mla-bench --decode-s-q -1"}) {
    const CliRun r = run(args, "FLASHCPP_CACHE_DIR='" + temp_cache() + "'");
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_TRUE(contains(r, "must be an integer in [1, 2147483647]")) << args << "\n" << r.output;
  }
}

TEST(Cli, QuietBuildKeepsTheFailureReason) {
  const CliRun r = run("build -q --uri not_a_flashinfer_module", "FLASHCPP_CACHE_DIR='" + temp_cache() + "'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r, "not_a_flashinfer_module")) << r.output;
  EXPECT_GT(r.output.size(), std::string("not_a_flashinfer_module").size() + 40) << r.output;
}

}  // namespace

namespace {

TEST(Cli, VersionReportsLibraryAbiPinsAndCuda) {
  const CliRun r = run("--version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("flashcpp 0.", 0), 0u) << r.output;
  for (const char* part : {"(C ABI 4.3.0, ", "FlashInfer 0.6.3, ", "TVM-FFI 0.1.9, ", "built with CUDA 1"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
}

}  // namespace

// `flashcpp prepare CONFIG.json`: the modules each model family's layers need, as the ops pick them.
namespace {

std::string data(const std::string& name) { return std::string("'" FLASHCPP_CLI_DATA "/") + name + "'"; }

flashcpp::jit::AttentionSpec attention(int head_dim, flashcpp::jit::Backend backend) {
  flashcpp::jit::AttentionSpec s;
  s.head_dim_qk = s.head_dim_vo = head_dim;
  s.backend = backend;
  return s;
}

TEST(CliPrepare, Llama3ListsNormPagePrefillFa3AndTensorCoreDecode) {
  using flashcpp::jit::Backend;
  const CliRun r = run("prepare " + data("llama3_8b.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r, "Llama 3 (LlamaForCausalLM), bf16, sm90")) << r.output;
  EXPECT_TRUE(contains(r, "32 query heads, 8 KV heads (group 4), head dim 128")) << r.output;
  EXPECT_TRUE(contains(r, "modules (4):")) << r.output;
  for (const std::string& uri : {std::string("norm"), std::string("page"),
                                 flashcpp::jit::batch_prefill_uri(attention(128, Backend::fa3)),
                                 flashcpp::jit::batch_prefill_uri(attention(128, Backend::fa2))})
    EXPECT_TRUE(contains(r, "  " + uri + "  (")) << uri << "\n" << r.output;
  // On Ampere: no fa3.
  const CliRun a = run("prepare --sm 80 " + data("llama3_8b.json"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_TRUE(contains(a, "modules (3):")) << a.output;
  EXPECT_FALSE(contains(a, flashcpp::jit::batch_prefill_uri(attention(128, Backend::fa3)))) << a.output;
}

TEST(CliPrepare, QwenDenseAndMoe) {
  using flashcpp::jit::Backend;
  CliRun r = run("prepare " + data("qwen2_7b.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r, "Qwen 2 (Qwen2ForCausalLM)")) << r.output;
  EXPECT_TRUE(contains(r, "28 query heads, 4 KV heads (group 7), head dim 128")) << r.output;
  // Group 1: decode on CUDA cores (the decode module); 60 experts through the sm90 fused MoE.
  r = run("prepare " + data("qwen2_moe.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r, "  " + flashcpp::jit::batch_decode_uri(attention(128, Backend::fa2)) + "  (decode")) << r.output;
  EXPECT_TRUE(contains(r, "MoE: 60 experts, top 4")) << r.output;
  EXPECT_TRUE(contains(r, "  fused_moe_90  (")) << r.output;
  // Qwen 3 MoE: head_dim from its own field (hidden 2048 / 32 heads would say 64).
  r = run("prepare --sm 100 " + data("qwen3_moe.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r, "head dim 128")) << r.output;
  EXPECT_TRUE(contains(r, "  fused_moe_100  (")) << r.output;
  EXPECT_TRUE(contains(r, "  " + flashcpp::jit::batch_prefill_uri(attention(128, Backend::fa2)) + "  (")) << r.output;
}

TEST(CliPrepare, DeepSeekV3UsesTheMlaModuleAndV32TheBuiltInSparseKernels) {
  CliRun r = run("prepare " + data("deepseek_v3.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r, "DeepSeek V3 (DeepseekV3ForCausalLM)")) << r.output;
  EXPECT_TRUE(contains(r, "  " + flashcpp::batch_mla_uri(flashcpp::DType::bf16, flashcpp::DType::bf16, flashcpp::DType::bf16,
                                                           flashcpp::MlaBackend::sm90) + "  (")) << r.output;
  EXPECT_TRUE(contains(r, "  fused_moe_90  (")) << r.output;
  r = run("prepare " + data("deepseek_v32.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r, "DeepSeek V3.2 (DeepseekV32ForCausalLM)")) << r.output;
  EXPECT_TRUE(contains(r, "index top-k 2048")) << r.output;
  EXPECT_TRUE(contains(r, "built in (no module): flashcpp::mla sparse prefill")) << r.output;
  EXPECT_FALSE(contains(r, "batch_mla_attention")) << r.output;
}

TEST(CliPrepare, UnknownArchitectureIsAClearError) {
  const CliRun r = run("prepare " + data("unknown_arch.json"));
  EXPECT_EQ(r.exit_code, kUnsupported) << r.output;
  EXPECT_TRUE(contains(r, "names architecture 'MambaForCausalLM' (model_type 'mamba'), which flashcpp does not know")) << r.output;
  EXPECT_TRUE(contains(r, "DeepseekV32ForCausalLM (deepseek_v32)")) << r.output;
  EXPECT_FALSE(crashed(r)) << r.output;
}

TEST(CliPrepare, BadConfigFieldsAndFilesAreNamed) {
  const std::string dir = temp_cache();
  std::ofstream(dir + "/no_heads.json") << R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096})";
  CliRun r = run("prepare '" + dir + "/no_heads.json'");
  EXPECT_EQ(r.exit_code, kUsage) << r.output;
  EXPECT_TRUE(contains(r, "'num_attention_heads' is missing")) << r.output;
  std::ofstream(dir + "/odd_dim.json") << R"({"model_type": "qwen2", "hidden_size": 960, "num_attention_heads": 10})";
  r = run("prepare '" + dir + "/odd_dim.json'");
  EXPECT_EQ(r.exit_code, kUnsupported) << r.output;
  EXPECT_TRUE(contains(r, "must be 64, 128 or 256")) << r.output;
  r = run("prepare '" + dir + "/absent.json'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r, "absent.json' cannot be read: No such file or directory")) << r.output;
}

}  // namespace

namespace {
// --prepare acquires the listed modules in order with progress on stderr and stops at the first it cannot have.
TEST(CliPrepare, PrepareStopsAtTheFirstModuleItCannotHave) {
  const std::string env = "VIRTUAL_ENV= CONDA_PREFIX= FLASHCPP_PYTHON_PREFIXES= FLASHCPP_JIT_CACHE= FLASHCPP_MODULE_PATH= "
                          "FLASHCPP_OFFLINE=1 FLASHCPP_JIT=off FLASHCPP_CACHE_DIR='" + temp_cache() + "/prepare-cold'";
  const CliRun r = run("prepare --prepare " + data("qwen2_moe.json"), env);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r, "flashcpp: prepare: module 1 of 5: norm")) << r.output;
  EXPECT_TRUE(contains(r, "'norm' is not available")) << r.output;
  EXPECT_FALSE(contains(r, "module 2 of 5")) << r.output;
  EXPECT_FALSE(contains(r, "prepared ")) << r.output;
}
}  // namespace

// Every option's value goes through one strict, typed path (tools/flashcpp/options.hpp): each bad value below is a
// usage error (exit 2) naming the option and the rule, before any GPU check. Before it, `demo --head-dim ''` died of
// SIGSEGV (the empty string skipped the set check: head_dim 0), `prepare --sm ''` planned for "sm0" and exited 0,
// `demo --seed -5` ran with seed 2^64 - 5, and `mla-bench --device -1` exited 3 (no GPU) instead of 2.
namespace {

struct BadValue {
  std::string args;
  std::string option;  // named in the message
  std::string rule;    // the rule the message states ("": the value is accepted)
};

TEST(CliOptions, EveryCommandRefusesBadValuesAsUsageErrors) {
  const std::string cfg = std::string(FLASHCPP_CLI_DATA) + "/llama3_8b.json";
  const std::vector<BadValue> cases = {
      {"demo --cpu --head-dim ''", "--head-dim", "must be one of 64, 128, 256; got ''"},
      {"demo --cpu --head-dim=", "--head-dim", "1 required"},
      {"demo --cpu --head-dim 0x80", "--head-dim", "must be one of 64, 128, 256; got '0x80'"},
      {"demo --cpu --seed -5", "--seed", "must be an integer in [0, 18446744073709551615]; got '-5'"},
      {"demo --cpu --seed ''", "--seed", "must be an integer in [0, 18446744073709551615]; got ''"},
      {"demo --cpu --seed 18446744073709551616", "--seed", "must be an integer in [0, 18446744073709551615]"},
      {"demo --cpu --seed ' 7'", "--seed", "must be an integer in [0, 18446744073709551615]; got ' 7'"},
      {"demo --cpu --seed +7", "--seed", "must be an integer in [0, 18446744073709551615]; got '+7'"},
      {"demo --cpu --batch ''", "--batch", "must be an integer in [1, 4096]; got ''"},
      {"demo --cpu --batch 0", "--batch", "must be an integer in [1, 4096]; got '0'"},
      {"demo --cpu --batch 99999999999999999999", "--batch", "must be an integer in [1, 4096]"},
      {"demo --cpu --context -1", "--context", "must be an integer in [1, 1048576]"},
      {"demo --cpu --qo-heads 1.5", "--qo-heads", "must be an integer in [1, 256]; got '1.5'"},
      {"demo --cpu --kv-heads ''", "--kv-heads", "must be an integer in [1, 256]"},
      {"demo --cpu --page-size 4096", "--page-size", "must be an integer in [1, 1024]"},
      {"demo --cpu --backend ''", "--backend", "must be one of auto, cuda_cores, tensor_cores; got ''"},
      {"demo --cpu --backend CUDA_CORES", "--backend", "must be one of auto, cuda_cores, tensor_cores"},
      {"prepare '" + cfg + "' --sm ''", "--sm", "must be one of 80, 86, 89, 90, 100, 103, 120; got ''"},
      {"prepare '" + cfg + "' --sm 0", "--sm", "must be one of 80, 86, 89, 90, 100, 103, 120; got '0'"},
      {"prepare '" + cfg + "' --sm 090", "--sm", ""},  // 090 reads as 90 (not octal 72): accepted
      {"prepare ''", "config", "must not be empty"},
      {"mla-bench --topk -5", "--topk", "must be an integer in [1, 2147483647]; got '-5'"},
      {"mla-bench --device -1", "--device", "must be an integer in [0, 1023]; got '-1'"},
      {"mla-bench --device ''", "--device", "must be an integer in [0, 1023]"},
      {"mla-bench --batch 1 '' 64", "--batch", "must be an integer in [1, 2147483647]; got ''"},
      {"mla-bench --s-kv 0", "--s-kv", "must be an integer in [1, 2147483647]"},
      {"mla-bench --num-sms -1", "--num-sms", "must be an integer in [0, 4096]"},
      {"mla-bench --warmup -1", "--warmup", "must be an integer in [0, 1000]"},
      {"mla-bench --iters 0", "--iters", "must be an integer in [1, 1000]"},
      {"mla-bench --suite ''", "--suite", "must be one of flashmla, flashmla-dense; got ''"},
      {"mla-bench --suite dense", "--suite", "must be one of flashmla, flashmla-dense; got 'dense'"},
      {"mla-bench --suite flashmla --suite-filter ''", "--suite-filter", "must not be empty"},
      {"mla-bench --suite flashmla-dense --suite-filter ''", "--suite-filter", "must not be empty"},
      {"mla-bench --fp8-kernel ''", "--fp8-kernel", "must be one of auto, mma, wgmma; got ''"},
      {"bench --iters ''", "--iters", "must be an integer in [1, 1000]"},
      {"bench --op bogus", "--op", "must be one of rmsnorm,"},
      {"bench --op ''", "--op", "must not be empty"},
      {"bench-mla-gdn-moe --op ''", "--op", "must be one of mla, gdn, moe, all; got ''"},
      {"bench-mla-gdn-moe --moe-tokens 0", "--moe-tokens", "must be an integer in [1, 1048576]"},
      {"bench-mla-gdn-moe --bf16-ceiling inf", "--bf16-ceiling", "must be a finite number in (0, 1e+09]; got 'inf'"},
      {"bench-mla-gdn-moe --bf16-ceiling nan", "--bf16-ceiling", "must be a finite number in (0, 1e+09]"},
      {"bench-mla-gdn-moe --bf16-ceiling 0", "--bf16-ceiling", "must be a finite number in (0, 1e+09]; got '0'"},
      {"bench-mla-gdn-moe --bf16-ceiling ''", "--bf16-ceiling", "must be a finite number in (0, 1e+09]"},
      {"bench-mla-gdn-moe --iters -3", "--iters", "must be an integer in [1, 100000]"},
      {"bench-mla-gdn-moe --device -1", "--device", "must be an integer in [0, 1023]"},
      {"build --uri ''", "--uri", "must not be empty"},
      {"build --arch ''", "--arch", "must not be empty"},
      {"build --jobs -1", "--jobs", "must be an integer in [0, 4096]"},
      {"build --jobs ''", "--jobs", "must be an integer in [0, 4096]"},
      {"build --cache-dir '' --print-root", "--cache-dir", "must not be empty"},
      {"fetch --module ''", "--module", "must not be empty"},
  };
  // Decimal means decimal: a leading zero is not octal (CLI11's own conversion would read 010 as 8).
  const CliRun seeded = run("demo --cpu --batch 1 --context 8 --seed 010");
  EXPECT_EQ(seeded.exit_code, 0) << seeded.output;
  EXPECT_TRUE(contains(seeded, "seed 10\n")) << seeded.output;
  for (const BadValue& c : cases) {
    const CliRun r = run(c.args, "FLASHCPP_OFFLINE=1 FLASHCPP_CACHE_DIR='" + temp_cache() + "'");
    EXPECT_FALSE(crashed(r)) << c.args << "\n" << r.output;
    if (c.rule.empty()) {
      EXPECT_EQ(r.exit_code, 0) << c.args << "\n" << r.output;
      continue;
    }
    EXPECT_EQ(r.exit_code, kUsage) << c.args << "\n" << r.output;
    EXPECT_TRUE(contains(r, c.option + ": " + c.rule)) << c.args << "\n" << r.output;
  }
}

// The same for every option a command's --help lists with a value: an empty value is a usage error naming it (so an
// option added without the typed path fails here).
TEST(CliOptions, AnEmptyValueForAnyListedOptionIsAUsageError) {
  int checked = 0;
  for (const std::string cmd : {"doctor", "fetch", "build", "prepare", "bench-mla-gdn-moe", "mla-bench", "demo", "bench",
                                "cache prune"}) {
    const CliRun help = run(cmd + " --help");
    ASSERT_EQ(help.exit_code, 0) << cmd << "\n" << help.output;
    std::istringstream lines(help.output);
    std::string line;
    while (std::getline(lines, line)) {
      // "  --name TYPE ..." or "  -j,--jobs TYPE ...": an option that takes a value (a flag has no TYPE).
      static const std::regex option(R"(^\s+(?:-[A-Za-z],)?(--[a-z0-9-]+)(?:,-[A-Za-z])?\s([A-Z{][^ ]*))");
      std::smatch m;
      if (!std::regex_search(line, m, option) || m[1] == "--help") continue;
      const std::string name = m[1];
      const std::string prefix = cmd == "prepare" ? "prepare x.json" : cmd == "mla-bench" && name == "--suite-filter"
                                                                           ? "mla-bench --suite flashmla"
                                                                           : cmd;
      const CliRun r = run(prefix + " " + name + " ''", "FLASHCPP_OFFLINE=1 FLASHCPP_CACHE_DIR='" + temp_cache() + "'");
      EXPECT_EQ(r.exit_code, kUsage) << cmd << " " << name << " ''\n" << r.output;
      EXPECT_TRUE(contains(r, name + ": must")) << cmd << " " << name << " ''\n" << r.output;
      ++checked;
    }
  }
  EXPECT_GE(checked, 35) << "the --help lines were not recognised";
}

// A run bounded by `timeout` (a hang fails the case instead of the test run) that must return within 20 s.
CliRun timed(const std::string& args, const std::string& env) {
  const auto t0 = std::chrono::steady_clock::now();
  const CliRun r = run(args, "timeout 60 env " + env);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0) << args;
  return r;
}

// A FIFO as a model's config is refused at once (it used to hang `prepare` forever), as are a file above the size
// limit, a directory and JSON nested 100,000 deep (which overflowed the stack: SIGSEGV).
TEST(CliFiles, FifoHugeAndDeepConfigsAreRefusedAtOnce) {
  const std::string dir = temp_cache() + "/files";
  std::filesystem::create_directories(dir);
  const std::string fifo = dir + "/config.fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string env = "FLASHCPP_OFFLINE=1 FLASHCPP_CACHE_DIR='" + dir + "/cache'";
  CliRun r = timed("prepare '" + fifo + "'", env);
  EXPECT_EQ(r.exit_code, kUsage) << r.output;
  EXPECT_TRUE(contains(r, "flashcpp prepare: config '" + fifo + "' must be a regular file (not a FIFO)")) << r.output;

  {
    std::ofstream deep(dir + "/deep.json");
    deep << std::string(100000, '[') << std::string(100000, ']');
  }
  r = timed("prepare '" + dir + "/deep.json'", env);
  EXPECT_EQ(r.exit_code, kUsage) << r.output;
  EXPECT_TRUE(contains(r, "deep.json' nests arrays and objects more than 64 levels deep")) << r.output;
  {
    std::ofstream big(dir + "/big.json");
    big << "{\"architectures\": [\"LlamaForCausalLM\"], \"pad\": \"" << std::string((16u << 20) + 16, ' ') << "\"}";
  }
  r = timed("prepare '" + dir + "/big.json'", env);
  EXPECT_EQ(r.exit_code, kUsage) << r.output;
  EXPECT_TRUE(contains(r, "big.json' must be at most 16777216 bytes")) << r.output;
  r = timed("prepare '" + dir + "'", env);
  EXPECT_EQ(r.exit_code, kUsage) << r.output;
  EXPECT_TRUE(contains(r, "must be a regular file (not a directory)")) << r.output;
}


// FLASHCPP_MANIFEST a FIFO (it used to hang `doctor` and `fetch` forever) or JSON nested 100,000 deep: doctor names
// the problem and its remedy and exits 1; fetch refuses the setting (exit 2); both at once.
TEST(CliDoctor, AnUnusableManifestIsAProblemAndFetchRefusesIt) {
  const std::string dir = temp_cache() + "/manifest";
  std::filesystem::create_directories(dir);
  const std::string fifo = dir + "/manifest.fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string env = "FLASHCPP_OFFLINE=1 FLASHCPP_CACHE_DIR='" + dir + "/cache' ";
  CliRun r = timed("doctor", env + "FLASHCPP_MANIFEST='" + fifo + "'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r, "FLASHCPP_MANIFEST file '" + fifo + "' must be a regular file (not a FIFO)")) << r.output;
  EXPECT_TRUE(contains(r, "unset FLASHCPP_MANIFEST")) << r.output;  // the remedy
  EXPECT_FALSE(contains(r, "no problems found")) << r.output;
  r = timed("fetch --skip-jit-cache", env + "FLASHCPP_MANIFEST='" + fifo + "'");
  EXPECT_EQ(r.exit_code, kUsage) << r.output;
  EXPECT_TRUE(contains(r, "must be a regular file (not a FIFO)")) << r.output;
  {
    std::ofstream deep(dir + "/deep.json");
    deep << std::string(100000, '[') << std::string(100000, ']');
  }
  r = timed("doctor", env + "FLASHCPP_MANIFEST='" + dir + "/deep.json'");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r, "deep.json' nests arrays and objects more than 64 levels deep")) << r.output;
}

// `doctor` fails (exit 1) when what it reports is untrusted: a libtvm_ffi in a group-writable directory used to be
// reported "untrusted" followed by "no problems found" and exit 0.
TEST(CliDoctor, AnUntrustedLibtvmFfiIsAProblem) {
  const std::string dir = temp_cache() + "/untrusted-tvm";
  std::filesystem::create_directories(dir + "/lib");
  const std::string lib = std::string(FLASHCPP_TVM_FFI_LIB);
  std::filesystem::copy_file(lib, dir + "/lib/libtvm_ffi.so", std::filesystem::copy_options::overwrite_existing);
  ::chmod(dir.c_str(), 0775);  // group-writable: anyone in the group could replace the library
  const std::string env = "FLASHCPP_TVM_FFI='" + dir + "' FLASHCPP_CACHE_DIR='" + temp_cache() + "'";
  CliRun r = run("doctor", env);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r, "libtvm_ffi is untrusted and will not be loaded")) << r.output;
  EXPECT_TRUE(contains(r, "chmod go-w")) << r.output;  // the remedy
  EXPECT_FALSE(contains(r, "no problems found")) << r.output;
  ::chmod(dir.c_str(), 0755);  // fixed: the same library is trusted
  r = run("doctor", env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r, "no problems found")) << r.output;
}

}  // namespace
