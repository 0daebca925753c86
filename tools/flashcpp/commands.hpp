// Each CLI subcommand registers itself on the app; main() calls every add_*_command in order.
#pragma once
#include <CLI/CLI.hpp>

namespace flashcpp::cli {
void add_doctor_command(CLI::App& app);
void add_build_command(CLI::App& app);
}  // namespace flashcpp::cli
