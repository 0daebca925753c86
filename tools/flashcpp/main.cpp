// The flashcpp command-line tool: doctor, fetch, cache, build, demo, bench.
// Exit codes, the same for every command (README, "The flashcpp command"):
//   0 success; 1 failure; 2 usage (a bad command line, option value or FLASHCPP_* setting);
//   3 unsupported here (the machine lacks what the command needs, e.g. a GPU).
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "flashcpp/commands.hpp"
#include "flashcpp/error.hpp"
#include "flashcpp/version.hpp"

namespace {

// CLI11 reports a word that is not a subcommand as "A subcommand is required" or as an unexpected argument;
// name it instead. Walks the leading words down the subcommand tree, stopping at the first option.
bool check_subcommands(CLI::App& app, int argc, char** argv) {
  CLI::App* cur = &app;
  std::string path = "flashcpp";
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    const auto subs = cur->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return true;
    CLI::App* next = nullptr;
    std::string names;
    for (CLI::App* s : subs) {
      if (s->check_name(argv[i])) next = s;
      names += (names.empty() ? "" : ", ") + s->get_name();
    }
    if (next == nullptr) {
      std::fprintf(stderr, "%s: unknown subcommand '%s' (subcommands: %s; see %s --help)\n", path.c_str(), argv[i],
                   names.c_str(), path.c_str());
      return false;
    }
    cur = next;
    path += " " + cur->get_name();
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace flashcpp::cli;
  CLI::App app{"flashcpp: FlashInfer kernels and sparse MLA for C++ programs\n"
               "exit status: 0 ok, 1 failure, 2 usage (command line or FLASHCPP_* setting), 3 unsupported here"};
  app.option_defaults()->always_capture_default();  // --help shows every default (inherited by subcommands)
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(flashcpp::version_string()),
                       "Print the flashcpp, C ABI, pinned FlashInfer and TVM-FFI versions and the CUDA it was built with");
  add_doctor_command(app);
  add_fetch_command(app);
  add_cache_command(app);
  add_build_command(app);
  add_prepare_command(app);
  add_bench_mla_gdn_moe_command(app);
  add_mla_bench_command(app);
  add_demo_command(app);
  add_bench_command(app);
  if (!check_subcommands(app, argc, argv)) return kExitUsage;
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a command's own status (e.g. demo: a result outside its tolerance)
    return e.get_exit_code();
  } catch (const CLI::Error& e) {
    const int rc = app.exit(e);  // prints help or the parse error
    return rc == 0 ? kExitOk : kExitUsage;
  } catch (const flashcpp::Error& e) {
    std::fprintf(stderr, "flashcpp: %s\n", e.what());
    return exit_code(e.code());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "flashcpp: out of memory\n");
    return kExitFailure;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashcpp: unexpected error: %s\n", e.what());
    return kExitFailure;
  }
  return kExitOk;
}
