// The flashcpp CLI as a user runs it: exit codes and what it prints, on this machine (no GPU needed).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

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

TEST(Cli, UnknownSubcommandFails) {
  const CliRun r = run("no-such-command");
  EXPECT_NE(r.exit_code, 0);
}

TEST(Cli, FetchOfflineWithColdCacheSaysWhatToSet) {
  const CliRun r = run("fetch --skip-jit-cache", "FLASHCPP_OFFLINE=1 FLASHCPP_NO_BUILD_DEPS=1 FLASHCPP_CACHE_DIR='" + temp_cache() + "/cold'");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("FLASHCPP_OFFLINE"), std::string::npos) << r.output;
}

}  // namespace
