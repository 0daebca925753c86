// Each CLI subcommand registers itself on the app; main() calls every add_*_command in order.
#pragma once
#include <CLI/CLI.hpp>

namespace flashcpp::cli {
void add_doctor_command(CLI::App& app);
void add_build_command(CLI::App& app);
void add_fetch_command(CLI::App& app);   // cmd_fetch.cpp: `flashcpp fetch`
void add_cache_command(CLI::App& app);   // cmd_fetch.cpp: `flashcpp cache ls|verify|prune`
void add_bench_extra_command(CLI::App& app);  // cmd_bench_extra.cpp: `flashcpp bench-extra`
void add_mla_bench_command(CLI::App& app);    // cmd_mla_bench.cpp: `flashcpp mla-bench`
void add_demo_command(CLI::App& app);   // cmd_demo.cpp: `flashcpp demo`
void add_bench_command(CLI::App& app);  // cmd_bench.cpp: `flashcpp bench`
}  // namespace flashcpp::cli
