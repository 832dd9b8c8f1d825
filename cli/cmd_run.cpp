// pacheck run: a suite against kernels, with verdicts, a console table and an exit code CI can gate on.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <unordered_set>

#include "cli/common.hpp"
#include "exec/isolate.hpp"
#include "kernels/backend.hpp"
#include "kernels/plugin.hpp"
#include "exec/plan.hpp"
#include "report/json.hpp"
#include "report/report_dir.hpp"
#include "report/run_identity.hpp"

namespace pacheck::cli {

namespace {
/// Checks `device` before anything is printed or written, so a run that cannot start never empties the
/// report directory of an earlier run: check_device_form checks its form (before kernels are chosen for
/// it); check_device that a device the user named opens, even when every kernel runs on the CPU (a gate
/// that names cuda:0 on a machine without one must not pass on its CPU kernels). The probe runs in a child
/// process, which leaves this process without a GPU context for the isolated children forked later.
/// Both throw UsageError with open_backend's message ("--device: unknown device ...", "no CUDA device: ...").
void check_device_form(const std::string& device) {
  try {
    check_device_spec(device);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

void check_device(const std::string& device) {
  if (device == "cpu") return;
  auto probe = [&]() -> std::string {
    try {
      for (const auto& spec : resolve_device_specs(device)) open_backend(spec);
      return "ok";
    } catch (const std::exception& e) {
      return std::string("!") + e.what();
    }
  };
  const std::optional<std::string> answer = run_in_child_process(probe, 120);
  if (answer && answer->rfind('!', 0) == 0) throw UsageError(answer->substr(1));
  // No answer (no child could be forked, or it died): the run itself reports the device as before.
}

}  // namespace

void add_run_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("run", "run a suite against kernels and give a verdict per cell (default: gate)");
  auto opts = std::make_shared<CommonOptions>();
  auto json_path = std::make_shared<std::string>();
  auto only_failures = std::make_shared<bool>(false);
  auto report_dir = std::make_shared<std::string>();
  auto resume_dir = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>(kDefaultFormat);
  opts->bind(cmd);
  cmd->add_option("--report-dir", *report_dir,
                  fmt::format("write {} (one line per finished cell, as it finishes), {} into this directory, "
                              "replacing an earlier run's reports there (the directory is locked while the run "
                              "writes: a second run into it fails at once)",
                              kResultsLogFile, format_files_prose()));
  cmd->add_option("--resume", *resume_dir,
                  "complete the interrupted run whose reports are in this directory: cells already in its "
                  "results.jsonl are not run again (same suite, kernels, device and options required); lines of "
                  "cells not in the run are dropped, two lines for one cell are an error");
  cmd->add_option("--json", *json_path, "write the full report (summary and every cell's metrics) to this JSON file");
  cmd->add_flag("--only-failures", *only_failures, "console: print only cells that did not pass");
  bind_format_option(cmd, *format);
  cmd->callback([&ctx, opts, json_path, only_failures, report_dir, resume_dir, format] {
    // Before anything is run or written: a bad --format must not empty an earlier run's report directory.
    const std::unique_ptr<ReportFormat> out = stdout_format(*format, {*only_failures});
    opts->load_plugins();
    const std::string device = resolve_device(opts->device);
    check_device_form(device);
    const Suite suite = load_suite_flag(opts->suite);
    auto kernels = select_kernels(opts->kernels, device, opts->kernel_source());
    // A default device was found by resolve_device (itself a probe): only a named one is opened here.
    if (!opts->device.empty()) check_device(device);
    RunOptions ro = opts->run_options();
    opts->check_selection(suite, kernels, ro);
    // Pre-flight: a --json that cannot be written is found now, not after the run (and before the report
    // directory of an earlier run is replaced).
    if (!json_path->empty()) check_writable_file("--json", *json_path);
    std::optional<ReportDir> reports;
    std::vector<std::string> kernel_names;
    for (const auto& k : kernels) kernel_names.push_back(k->name());
    const nlohmann::json identity = run_identity(suite, kernel_names, device, ro, opts->filter);
    try {
      if (!resume_dir->empty()) {
        if (!report_dir->empty() && std::filesystem::weakly_canonical(*report_dir) != std::filesystem::weakly_canonical(*resume_dir))
          throw UsageError("--report-dir and --resume name different directories (--resume DIR writes its reports into DIR)");
        const std::unordered_set<std::string> planned = selected_keys(suite, kernels, ro);
        reports = ReportDir::resume(*resume_dir, identity,
                                    {[&](const std::string& kernel, const std::string& cell) {
                                      return planned.count(result_key(kernel, cell)) > 0;
                                    }});
        for (const auto& r : reports->previous()) ro.previous[result_key(r.kernel, r.cell_id)] = r;
      } else if (!report_dir->empty()) {
        reports = ReportDir::start(*report_dir, identity);
      }
    } catch (const ReportError& e) {
      throw UsageError(e.what());
    }
    const bool tty = isatty(fileno(stderr));
    RunStart start;
    start.title = fmt::format("pacheck {} | suite {} ({} cells) | device {} | kernels:", pacheck_version(), suite.name,
                              suite.cells.size(), device);
    for (const auto& k : kernels) start.title += " " + k->name();
    if (ro.shard_count > 1) start.title += fmt::format(" | shard {}/{}", ro.shard_index, ro.shard_count);
    if (reports && !resume_dir->empty()) {
      start.notes.push_back(fmt::format("resuming {}: {} finished cells in {} are not run again", reports->dir(),
                                        ro.previous.size(), kResultsLogFile));
      if (const auto& dropped = reports->dropped(); !dropped.empty()) {
        std::string which;
        for (std::size_t i = 0; i < dropped.size() && i < 5; ++i) which += (i ? "; " : "") + dropped[i];
        if (dropped.size() > 5) which += fmt::format("; and {} more", dropped.size() - 5);
        const std::string note = fmt::format(
            "resuming {}: {} lines of {} are not cells of this run and were dropped, not counted: {}", reports->dir(),
            dropped.size(), kResultsLogFile, which);
        start.notes.push_back(note);
        // Also on stderr, where a document format on stdout would not show it.
        if (*format != kDefaultFormat) fmt::print(stderr, "pacheck: warning: {}\n", note);
      }
    }
    out->run_started(start);
    ro.on_result = [&](const CellResult& r) {
      if (reports) reports->append(r);  // first: a kill right after this cell must not lose it
      if (tty) fmt::print(stderr, "\r\033[K");
      out->cell_finished(r);
    };
    if (tty) ro.on_progress = [](int done, int total) { fmt::print(stderr, "\r[{}/{}] cells", done, total); };
    RunSummary s;
    try {
      s = run_suite(suite, kernels, device, ro);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    if (tty) fmt::print(stderr, "\r\033[K");
    ReportMeta meta{suite.name, device, {}, identity};
    if (reports || out->needs_environment()) {
      std::vector<PluginFingerprint> plugins;
      for (const auto& p : loaded_plugins()) plugins.push_back({p.path, p.sha256});
      meta.environment = collect_environment(device, std::move(plugins));
    }
    out->run_ended(s, meta);
    if (!json_path->empty()) write_output_file("--json", *json_path, to_json(s, suite.name, device).dump(1) + "\n");
    ctx.exit_code = s.exit_code();
    if (reports) {
      try {
        reports->finish(s, meta);
      } catch (const ReportError& e) {
        // The verdicts exist but CI cannot read them: never let that pass as success.
        fmt::print(stderr, "pacheck: error: {}\n", e.what());
        ctx.exit_code = kUsage;
        return;
      }
      // Beside the console table; on stderr when stdout carries a document another program reads.
      fmt::print(*format == kDefaultFormat ? stdout : stderr, "{}\n", reports_line(reports->dir()));
    }
  });
}

}  // namespace pacheck::cli
