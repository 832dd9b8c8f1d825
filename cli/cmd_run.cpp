// pacheck run: a suite against kernels, with verdicts, a console table and an exit code CI can gate on.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <unordered_set>

#include "cli/common.hpp"
#include "cli/exit_guard.hpp"
#include "cli/interrupt.hpp"
#include "cli/run_control.hpp"
#include "exec/isolate.hpp"
#include "kernels/backend.hpp"
#include "kernels/plugin.hpp"
#include "exec/plan.hpp"
#include "judge/repeat.hpp"
#include "report/json.hpp"
#include "report/report_dir.hpp"
#include "report/run_identity.hpp"
#include "report/text.hpp"

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

/// "suite gate: 271 cells x 6 kernels = 1,626 results", or, when --filter or --shard leave some out,
/// "suite gate: 40 results (of 271 cells x 6 kernels)": what the run's rows and counts are about.
std::string selection_text(const Suite& suite, std::size_t kernels, std::size_t selected) {
  const std::string of = fmt::format("{} cells x {} kernel{}", group_digits(suite.cells.size()), kernels,
                                     kernels == 1 ? "" : "s");
  if (selected == suite.cells.size() * kernels) return fmt::format("suite {}: {} = {} results", suite.name, of, group_digits(selected));
  return fmt::format("suite {}: {} results (of {})", suite.name, group_digits(selected), of);
}

/// What a stopped run prints after RunControl::print_stopped's line: how to complete it (the --resume
/// command, or how to get a report directory for one).
void print_resume_hint(std::FILE* to, const ReportDir* reports, int repeat) {
  if (repeat > 1)
    fmt::print(to, "pacheck: a --repeat run is not resumable (its results are combined at the end): run it again\n");
  else if (reports && !reports->append_error().empty())
    fmt::print(to, "pacheck: error: {}: the results after it were not kept; no reports were written. Once it can be "
                   "written, --resume runs the missing cells:\n  {}\n",
               reports->append_error(), resume_command(command_line(), reports->dir()));
  else if (reports)
    fmt::print(to, "pacheck: the finished results are kept in {}; no reports were written. Complete the run with:\n  {}\n",
               (std::filesystem::path(reports->dir()) / kResultsLogFile).string(), resume_command(command_line(), reports->dir()));
  else
    fmt::print(to, "pacheck: the finished results were not kept (no --report-dir): run with --report-dir DIR to keep "
                   "them, and complete a stopped run with --resume DIR\n");
  std::fflush(to);
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
  auto quiet = std::make_shared<bool>(false);
  auto control = std::make_shared<RunControlFlags>();
  auto color = std::make_shared<std::string>("auto");
  auto with_controls = std::make_shared<bool>(false);
  auto controls_everywhere = std::make_shared<bool>(false);
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
  cmd->add_flag("--quiet,-q", *quiet,
                "console: rows of failing cells only (not the caught cells of negative controls), then the summary "
                "and the failure list");
  control->bind(cmd, " and a --report-dir is left for --resume, as a stopped run's",
                "; not with --resume, and results.jsonl is written when the last repeat ends");
  cmd->add_flag("--with-controls", *with_controls,
                "also run every built-in negative control of the device (a --plugin's kernels alone are the selection "
                "otherwise): the evidence `pacheck verify` needs that the checks can fail on this device");
  cmd->add_flag("--controls-everywhere", *controls_everywhere,
                "run each negative control on every selected cell, not only on those where its planted fault can "
                "show (its expected failures; the others are reported as not_run): an audit that a control passes "
                "every other cell");
  bind_format_option(cmd, *format);
  bind_color_option(cmd, *color);
  cmd->callback([&ctx, opts, json_path, only_failures, report_dir, resume_dir, format, quiet, control, color,
                 with_controls, controls_everywhere] {
    // Before anything is run or written: a bad --format must not empty an earlier run's report directory.
    FormatOptions fo;
    fo.only_failures = *only_failures;
    fo.quiet = *quiet;
    fo.color = resolve_color(*color);
    const std::unique_ptr<ReportFormat> out = stdout_format(*format, fo);
    if (control->repeat > 1 && !resume_dir->empty())
      throw UsageError("--repeat: not with --resume (the resumed cells ran once; a repeated run starts afresh)");
    const bool tty = isatty(fileno(stderr));
    control->progress_seconds(tty);  // a bad --progress-interval: exit 2 before any report is replaced
    opts->load_plugins();
    const std::string device = resolve_device(opts->device);
    check_device_form(device);
    const Suite suite = load_suite_flag(opts->suite);
    auto kernels = select_kernels(opts->kernels, device, opts->kernel_source(), &suite);
    if (*with_controls) {
      const pacheck_device kind = device == "cpu"                 ? PACHECK_DEVICE_CPU
                                  : device.rfind("hip", 0) == 0 ? PACHECK_DEVICE_HIP
                                                                : PACHECK_DEVICE_CUDA;
      for (const auto& k : Registry::global().negative_controls(kind))
        if (std::find(kernels.begin(), kernels.end(), k) == kernels.end()) kernels.push_back(k);
    }
    // A default device was found by resolve_device (itself a probe): only a named one is opened here.
    if (!opts->device.empty()) check_device(device);
    RunOptions ro = opts->run_options();
    ro.controls_everywhere = *controls_everywhere;
    opts->check_selection(suite, kernels, ro);
    check_memory(plan_memory(suite, kernels, ro), opts->memory.budget());
    // Pre-flight: a --json that cannot be written is found now, not after the run (and before the report
    // directory of an earlier run is replaced).
    if (!json_path->empty()) check_writable_file("--json", *json_path);
    std::optional<ReportDir> reports;
    std::vector<std::string> kernel_names;
    for (const auto& k : kernels) kernel_names.push_back(k->name());
    nlohmann::json identity = run_identity(suite, kernel_names, device, ro, opts->filter);
    // The plugins' SHA-256 (only when some are loaded, so earlier runs without plugins still resume): a
    // library rebuilt between a stop and --resume is other code under the same kernel names, and its results
    // must not be mixed with the first build's.
    for (const auto& p : loaded_plugins()) identity["plugin_sha256"].push_back(p.sha256);
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
    // What the run's end says if code in this process ends it early (exit(), or the --no-isolate watchdog).
    set_unfinished_note(
        reports ? fmt::format("the results finished before it are kept in {}; complete the run, its plugin kernels "
                              "isolated, with:\n  {}",
                              (std::filesystem::path(reports->dir()) / kResultsLogFile).string(),
                              resume_command(command_line(), reports->dir(), {"--no-isolate"}))
                : std::string("no results were kept (no --report-dir)"));
    const std::unique_ptr<CallWatchdog> watchdog = opts->watchdog();
    ro.watchdog = watchdog.get();
    RunStart start;
    start.title = fmt::format("pacheck {} | {} | device {} | kernels:", pacheck_version(),
                              selection_text(suite, kernels.size(), count_selected(suite, kernels, ro)), device);
    for (const auto& k : kernels) start.title += " " + k->name();
    if (ro.shard_count > 1) start.title += fmt::format(" | shard {}/{}", ro.shard_index, ro.shard_count);
    if (control->repeat > 1) start.title += fmt::format(" | --repeat {}", control->repeat);
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
    // Checked before the run starts: a bad --progress-interval is exit 2 with nothing run.
    RunControl control_run(*control, tty);
    out->run_started(start);
    // SIGINT/SIGTERM and --fail-fast stop the run between cells (exec/run_options.hpp's RunOptions::stop).
    const InterruptHandler interrupts;
    ro.on_result = [&](const CellResult& r) {
      // A kill right after this cell must not lose it. A repeated run's results are combined first.
      if (reports && control->repeat == 1) reports->append(r);
    };
    ro.on_result_in_order = [&](const CellResult& r) { out->cell_finished(r); };
    control_run.attach(ro);
    std::vector<KernelRole> roles;
    for (const auto& k : kernels) roles.push_back({k->name(), k->is_negative_control()});
    RunSummary s;
    try {
      s = control_run.run([&] { return run_suite(suite, kernels, device, ro); }, roles);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    std::FILE* notes = *format == kDefaultFormat ? stdout : stderr;
    if (control_run.stopped()) {
      // Only the console shows a stopped run's counts: a document format must not look like a whole run's.
      if (*format == kDefaultFormat) out->run_ended(s, ReportMeta{suite.name, device, {}, identity});
      std::fflush(stdout);
      control_run.print_stopped(notes, s);
      print_resume_hint(notes, reports ? &*reports : nullptr, control->repeat);
      ctx.exit_code = control_run.stopped_exit_code(s);
      return;
    }
    if (control->repeat > 1) {
      if (reports)
        for (const auto& r : s.results) reports->append(r);
      if (*format == kDefaultFormat) control_run.print_repeats(stdout, s);
      else if (!control_run.differences().empty()) control_run.print_repeats(stderr, s);
      std::fflush(stdout);
    }
    ReportMeta meta{suite.name, device, {}, identity};
    if (reports || out->needs_environment() || !json_path->empty()) {
      std::vector<PluginFingerprint> plugins;
      for (const auto& p : loaded_plugins()) plugins.push_back({p.path, p.sha256});
      meta.environment = collect_environment(device, std::move(plugins));
    }
    out->run_ended(s, meta);
    // The --json file is report.json's document: the results with the same environment fingerprint and run.
    if (!json_path->empty()) write_output_file("--json", *json_path, json_text(report_json(s, meta), 1) + "\n");
    ctx.exit_code = s.exit_code();
    if (reports) {
      try {
        EvidenceInputs evidence{suite_digest(suite), {}};
        for (const auto& k : kernels) evidence.kernels.push_back({k->name(), k->layouts(), k->is_negative_control()});
        reports->finish(s, meta, &evidence);
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
