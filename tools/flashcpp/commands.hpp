// Each CLI subcommand registers itself on the app; main() calls every add_*_command in order.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>

#include "flashcpp/error.hpp"
#include "flashcpp/options.hpp"

namespace flashcpp::cli {

/// The exit status of every command (main.cpp's header comment; README).
enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitUsage = 2, kExitUnsupported = 3 };
/// A flashcpp::Error's exit status: invalid_argument is a usage error, unsupported is 3, the rest 1.
inline int exit_code(ErrorCode code) {
  return code == ErrorCode::invalid_argument ? kExitUsage : code == ErrorCode::unsupported ? kExitUnsupported : kExitFailure;
}

/// Every invalid FLASHCPP_* setting as one invalid_argument error (doctor.cpp). Commands call it after their own
/// option checks, so a bad command line is reported first; `doctor` reports the settings instead of failing.
void check_environment();
/// `fn` preceded by check_environment(): the callback of a command without option checks of its own.
inline std::function<void()> checked(std::function<void()> fn) {
  return [fn = std::move(fn)] {
    check_environment();
    fn();
  };
}

/// --warmup and --iters of the benchmark commands: calls before timing, then timed calls whose median is reported.
inline void add_timing_options(CLI::App& cmd, int& warmup, int& iters) {
  add_integer(cmd, "--warmup", warmup, "calls before timing (per case)", 0, 1000);
  add_integer(cmd, "--iters", iters, "timed calls per case (median reported)", 1, 1000);
}

void add_doctor_command(CLI::App& app);
void add_build_command(CLI::App& app);
void add_prepare_command(CLI::App& app);  // cmd_prepare.cpp: `flashcpp prepare CONFIG.json`
void add_fetch_command(CLI::App& app);   // cmd_fetch.cpp: `flashcpp fetch`
void add_cache_command(CLI::App& app);   // cmd_fetch.cpp: `flashcpp cache ls|verify|prune`
void add_bench_mla_gdn_moe_command(CLI::App& app);  // cmd_bench_mla_gdn_moe.cpp: `flashcpp bench-mla-gdn-moe`
void add_mla_bench_command(CLI::App& app);    // cmd_mla_bench.cpp: `flashcpp mla-bench`
void add_demo_command(CLI::App& app);   // cmd_demo.cpp: `flashcpp demo`
void add_bench_command(CLI::App& app);  // cmd_bench.cpp: `flashcpp bench`
}  // namespace flashcpp::cli
