// The flashcpp command-line tool: doctor, fetch, cache, build, demo, bench.
#include <cstdio>
#include <exception>

#include "flashcpp/error.hpp"
#include "flashcpp/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"flashcpp: FlashInfer kernels and sparse MLA for C++ programs"};
  app.require_subcommand(1);
  flashcpp::cli::add_doctor_command(app);
  flashcpp::cli::add_fetch_command(app);
  flashcpp::cli::add_cache_command(app);
  flashcpp::cli::add_build_command(app);
  flashcpp::cli::add_bench_extra_command(app);
  flashcpp::cli::add_mla_bench_command(app);
  flashcpp::cli::add_demo_command(app);
  flashcpp::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const flashcpp::Error& e) {
    std::fprintf(stderr, "flashcpp: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashcpp: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
