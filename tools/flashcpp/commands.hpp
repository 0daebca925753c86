// Each CLI subcommand registers itself on the app; main() calls every add_*_command in order.
#pragma once
#include <CLI/CLI.hpp>

namespace flashcpp::cli {
void add_doctor_command(CLI::App& app);
void add_build_command(CLI::App& app);
void add_fetch_command(CLI::App& app);   // cmd_fetch.cpp: `flashcpp fetch`
void add_cache_command(CLI::App& app);   // cmd_fetch.cpp: `flashcpp cache ls|verify|prune`
void add_bench_extra_command(CLI::App& app);  // cmd_bench_extra.cpp: `flashcpp bench-extra`
}  // namespace flashcpp::cli
