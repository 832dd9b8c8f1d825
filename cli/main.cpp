// pacheck: numerical-correctness and fault-injection tests for paged-attention decode kernels.
//
// Quick start: adding a subcommand
//  Write cli/cmd_NAME.cpp with `void add_NAME_command(CLI::App&, Context&)` (declared in cli/common.hpp)
//  and call it below. Use common.hpp's shared options (kernels, devices, run options) and exit codes, so a
//  bad value is refused with its reason and exit 2 as in every other subcommand.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "cli/exit_guard.hpp"
#include "cli/interrupt.hpp"
#include "report/report.hpp"
#include "report/text.hpp"

int main(int argc, char** argv) {
  using namespace pacheck::cli;
  CLI::App app{"pacheck: numerical-correctness and fault-injection tests for paged-attention decode kernels.\n"
               "Exit codes: 0 all cells pass and negative controls caught, 1 some cell failed, 2 usage or input\n"
               "error, 3 instrument blind (a negative control was not caught or the comparator self-test failed),\n"
               "130 / 143 stopped by SIGINT / SIGTERM (the command that resumes the run is printed)."};
  app.set_version_flag("--version", pacheck::pacheck_version());
  Context ctx;
  add_run_command(app, ctx);
  add_list_command(app, ctx);
  add_selftest_command(app, ctx);
  add_repro_command(app, ctx);
  add_fuzz_command(app, ctx);
  add_export_command(app, ctx);
  add_score_command(app, ctx);
  add_bench_command(app, ctx);
  add_report_command(app, ctx);
  add_merge_command(app, ctx);
  add_verify_command(app, ctx);
  app.require_subcommand(1, 1);
  refuse_empty_values(app);  // every option of every subcommand, including those added above
  // `pacheck` alone runs the default job: `run` on the gate suite on the default device.
  std::vector<const char*> args(argv, argv + argc);
  if (argc == 1) args.push_back("run");
  remember_command_line({args.begin(), args.end()});  // for the resume command of a stopped run
  // Printed repro, replay and score lines invoke pacheck as this process was invoked, so they paste as
  // they are (a prefix install's bin/ is often not on PATH).
  pacheck::set_command_name(pacheck::shell_quote(argv[0]));
  // A first word that is no subcommand is a typo, not a missing subcommand (CLI11 would say "A subcommand
  // is required"): name it and list the subcommands.
  // An option before any subcommand that pacheck itself does not take is one of a subcommand's, misplaced.
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
  if (args.size() > 1 && args[1][0] != '-' && std::find(names.begin(), names.end(), args[1]) == names.end()) {
    fmt::print(stderr, "pacheck: error: '{}' is not a pacheck subcommand; subcommands: {}\n", args[1],
               fmt::join(names, ", "));
    return kUsage;
  }
  if (args.size() > 1 && args[1][0] == '-' && !is_app_option(app, args[1])) {
    fmt::print(stderr, "pacheck: error: '{}' is not an option of pacheck itself (which takes --help and --version); a "
                       "subcommand's options follow it: `pacheck SUBCOMMAND --help` lists them; subcommands: {}\n",
               args[1], fmt::join(names, ", "));
    return kUsage;
  }
  try {
    // A kernel in this process that calls exit() must not end the command with the status it chose.
    const ExitGuard guard(args.size() > 1 ? args[1] : "");
    app.parse(static_cast<int>(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11's own messages ("--threads: Value abc could not be converted") get the prefix every other
    // refusal has, and name the subcommand whose --help lists the options.
    std::string sub;
    for (const CLI::App* s : app.get_subcommands()) sub = " " + s->get_name();
    fmt::print(stderr, "pacheck: error: {}\nRun 'pacheck{} --help' for the options.\n", e.what(), sub);
    return kUsage;
  } catch (const UsageError& e) {
    fmt::print(stderr, "pacheck: error: {}\n", e.what());
    return kUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "pacheck: error: {}\n", e.what());
    return kUsage;
  }
  return ctx.exit_code;
}
