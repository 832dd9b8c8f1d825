// pacheck run: a suite against kernels, with verdicts, a console table and an exit code CI can gate on.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "cli/common.hpp"
#include "runner/report.hpp"

namespace pacheck::cli {

void add_run_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("run", "run a suite against kernels and give a verdict per cell (default: gate)");
  auto opts = std::make_shared<CommonOptions>();
  auto json_path = std::make_shared<std::string>();
  auto only_failures = std::make_shared<bool>(false);
  opts->bind(cmd);
  cmd->add_option("--json", *json_path, "write the full report (summary and every cell's metrics) to this JSON file");
  cmd->add_flag("--only-failures", *only_failures, "print only cells that did not pass");
  cmd->callback([&ctx, opts, json_path, only_failures] {
    opts->load_plugins();
    const std::string device = resolve_device(opts->device);
    Suite suite;
    try {
      suite = load_suite(opts->suite);
    } catch (const SuiteError& e) {
      throw UsageError(e.what());
    }
    auto kernels = select_kernels(opts->kernels, device);
    RunOptions ro = opts->run_options();
    const bool tty = isatty(fileno(stderr));
    fmt::print("pacheck {} | suite {} ({} cells) | device {} | kernels:", pacheck_version(), suite.name,
               suite.cells.size(), device);
    for (const auto& k : kernels) fmt::print(" {}", k->name());
    fmt::print("\n\n");
    print_header();
    std::fflush(stdout);
    ro.on_result = [&](const CellResult& r) {
      if (tty) fmt::print(stderr, "\r\033[K");
      if (!*only_failures || is_failure(r.verdict) || r.expected_fail) print_row(r);
      std::fflush(stdout);
    };
    if (tty) ro.on_progress = [](int done, int total) { fmt::print(stderr, "\r[{}/{}] cells", done, total); };
    RunSummary s;
    try {
      s = run_suite(suite, kernels, device, ro);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    if (tty) fmt::print(stderr, "\r\033[K");
    print_summary(s);
    if (!json_path->empty()) {
      std::ofstream out(*json_path);
      if (!out) throw UsageError(fmt::format("--json: cannot write '{}'", *json_path));
      out << to_json(s, suite.name, device).dump(1) << "\n";
    }
    ctx.exit_code = s.exit_code();
  });
}

}  // namespace pacheck::cli
