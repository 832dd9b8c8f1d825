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
#include "cli/run_commands.hpp"
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
#include "verify/evidence.hpp"

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

/// The kernels a run tests: --kernel's (or the --plugin libraries'; with neither, the built-in kernels of
/// the kinds, MLA or multi-head, that `suite` has cells of), then with --with-controls every built-in
/// negative control of the device's kind that is not among them yet.
std::vector<KernelPtr> run_kernels(const RunCommand& o, const std::string& device, const Suite& suite) {
  auto kernels = select_kernels(o.common.kernels, device, o.common.kernel_source(), &suite);
  if (o.with_controls) {
    const pacheck_device kind = device == "cpu"                 ? PACHECK_DEVICE_CPU
                                : device.rfind("hip", 0) == 0 ? PACHECK_DEVICE_HIP
                                                              : PACHECK_DEVICE_CUDA;
    for (const auto& k : Registry::global().negative_controls(kind))
      if (std::find(kernels.begin(), kernels.end(), k) == kernels.end()) kernels.push_back(k);
  }
  return kernels;
}

/// A run as resolved before it starts: where, what and how it runs, and its identity (run.json).
struct RunPlan {
  std::string device;
  Suite suite;
  std::vector<KernelPtr> kernels;
  RunOptions ro;
  nlohmann::json identity;
};

/// Loads the plugins and resolves and checks everything the run needs before its report directory is
/// touched: the device, the suite, the kernels, the selection, the memory, --json. Throws UsageError.
RunPlan plan_run_command(RunCommand& o) {
  CommonOptions& opts = o.common;
  RunPlan p;
  opts.load_plugins();
  p.device = resolve_device(opts.device);
  check_device_form(p.device);
  p.suite = load_suite_flag(opts.suite);
  p.kernels = run_kernels(o, p.device, p.suite);
  // A default device was found by resolve_device (itself a probe): only a named one is opened here.
  if (!opts.device.empty()) check_device(p.device);
  p.ro = opts.run_options();
  p.ro.controls_everywhere = o.controls_everywhere;
  opts.check_selection(p.suite, p.kernels, p.ro);
  check_memory(plan_memory(p.suite, p.kernels, p.ro), opts.memory.budget());
  // Pre-flight: a --json that cannot be written is found now, not after the run (and before the report
  // directory of an earlier run is replaced).
  if (!o.json_path.empty()) check_writable_file("--json", o.json_path);
  std::vector<std::string> kernel_names;
  for (const auto& k : p.kernels) kernel_names.push_back(k->name());
  p.identity = run_identity(p.suite, kernel_names, p.device, p.ro, opts.filter);
  // The plugins' SHA-256 (only when some are loaded, so earlier runs without plugins still resume): a
  // library rebuilt between a stop and --resume is other code under the same kernel names, and its results
  // must not be mixed with the first build's.
  for (const auto& pl : loaded_plugins()) p.identity["plugin_sha256"].push_back(pl.sha256);
  return p;
}

/// Starts the report directory --report-dir names, or continues the one --resume names (its finished results
/// go into p.ro.previous, so they are not run again); nullopt with neither. Throws UsageError.
std::optional<ReportDir> open_report_dir(const RunCommand& o, RunPlan& p) {
  std::optional<ReportDir> reports;
  try {
    if (!o.resume_dir.empty()) {
      if (!o.report_dir.empty() &&
          std::filesystem::weakly_canonical(o.report_dir) != std::filesystem::weakly_canonical(o.resume_dir))
        throw UsageError("--report-dir and --resume name different directories (--resume DIR writes its reports into DIR)");
      const std::unordered_set<std::string> planned = selected_keys(p.suite, p.kernels, p.ro);
      reports = ReportDir::resume(o.resume_dir, p.identity,
                                  {[&](const std::string& kernel, const std::string& cell) {
                                    return planned.count(result_key(kernel, cell)) > 0;
                                  }});
      for (const auto& r : reports->previous()) p.ro.previous[result_key(r.kernel, r.cell_id)] = r;
    } else if (!o.report_dir.empty()) {
      reports = ReportDir::start(o.report_dir, p.identity);
    }
  } catch (const ReportError& e) {
    throw UsageError(e.what());
  }
  return reports;
}

/// What the run tells its format before the first cell: the title (the selection, the device, the kernels,
/// the shard, --repeat), which kernels are negative controls, where every result is kept, and, when resuming, the cells not run again and the lines of results.jsonl dropped
/// (also on stderr when stdout carries a document format).
RunStart run_start(const RunCommand& o, const RunPlan& p, const ReportDir* reports) {
  RunStart start;
  start.title = fmt::format("pacheck {} | {} | device {} | kernels:", pacheck_version(),
                            selection_text(p.suite, p.kernels.size(), count_selected(p.suite, p.kernels, p.ro)), p.device);
  for (const auto& k : p.kernels) {
    start.title += " " + k->name();
    if (k->is_negative_control()) start.negative_controls.push_back(k->name());
  }
  start.results_in = results_kept_in(reports ? reports->dir() : "", o.json_path);
  if (p.ro.shard_count > 1) start.title += fmt::format(" | shard {}/{}", p.ro.shard_index, p.ro.shard_count);
  if (o.control.repeat > 1) start.title += fmt::format(" | --repeat {}", o.control.repeat);
  if (!reports || o.resume_dir.empty()) return start;
  start.notes.push_back(fmt::format("resuming {}: {} finished cells in {} are not run again", reports->dir(),
                                    p.ro.previous.size(), kResultsLogFile));
  if (const auto& dropped = reports->dropped(); !dropped.empty()) {
    std::string which;
    for (std::size_t i = 0; i < dropped.size() && i < 5; ++i) which += (i ? "; " : "") + dropped[i];
    if (dropped.size() > 5) which += fmt::format("; and {} more", dropped.size() - 5);
    const std::string note = fmt::format(
        "resuming {}: {} lines of {} are not cells of this run and were dropped, not counted: {}", reports->dir(),
        dropped.size(), kResultsLogFile, which);
    start.notes.push_back(note);
    // Also on stderr, where a document format on stdout would not show it.
    if (o.format != kDefaultFormat) fmt::print(stderr, "pacheck: warning: {}\n", note);
  }
  return start;
}

/// A stopped run (a signal, --fail-fast): only the console shows its counts, then the stop line and how to
/// complete the run. Returns its exit code.
int end_stopped_run(const RunCommand& o, const RunPlan& p, const RunSummary& s, const RunControl& control_run,
                    ReportFormat& out, const ReportDir* reports) {
  std::FILE* notes = o.format == kDefaultFormat ? stdout : stderr;
  // Only the console shows a stopped run's counts: a document format must not look like a whole run's.
  if (o.format == kDefaultFormat) out.run_ended(s, ReportMeta{p.suite.name, p.device, {}, p.identity});
  std::fflush(stdout);
  control_run.print_stopped(notes, s);
  print_resume_hint(notes, reports, o.control.repeat);
  return control_run.stopped_exit_code(s);
}

/// A finished run: its format's document, --json, and the report directory with its evidence.json last.
/// Returns the exit code: the run's, or kUsage when the report directory could not be finished.
int end_run(const RunCommand& o, const RunPlan& p, const RunSummary& s, const RunControl& control_run,
            ReportFormat& out, std::optional<ReportDir>& reports) {
  control_run.finish_repeats(s, o.format == kDefaultFormat, reports ? &*reports : nullptr);
  ReportMeta meta{p.suite.name, p.device, {}, p.identity};
  meta.cell_sources = cell_sources_of(p.suite);
  if (reports || out.needs_environment() || !o.json_path.empty()) {
    std::vector<PluginFingerprint> plugins;
    for (const auto& pl : loaded_plugins()) plugins.push_back({pl.path, pl.sha256});
    meta.environment = collect_environment(p.device, std::move(plugins));
  }
  out.run_ended(s, meta);
  // The --json file is report.json's document: the results with the same environment fingerprint and run.
  if (!o.json_path.empty()) write_output_file("--json", o.json_path, json_text(report_json(s, meta), 1) + "\n");
  if (!reports) return s.exit_code();
  return write_report_dir(*reports, o.format == kDefaultFormat, s.exit_code(), [&] {
    reports->finish(s, meta);
    EvidenceInputs evidence{suite_digest(p.suite), {}};
    for (const auto& k : p.kernels) evidence.kernels.push_back({k->name(), k->layouts(), k->is_negative_control(), k->takes_mla()});
    write_evidence(reports->dir(), s, meta, evidence);
  });
}

}  // namespace

int write_report_dir(const ReportDir& reports, bool console, int code, const std::function<void()>& write) {
  try {
    write();
  } catch (const ReportError& e) {
    // The verdicts exist but CI cannot read them: never let that pass as success.
    fmt::print(stderr, "pacheck: error: {}\n", e.what());
    return kUsage;
  }
  // Beside the console table; on stderr when stdout carries a document another program reads.
  fmt::print(console ? stdout : stderr, "{}\n", reports_line(reports.dir()));
  return code;
}

void bind_run_command(CLI::App* cmd, RunCommand& o) {
  o.common.bind(cmd);
  cmd->add_option("--report-dir", o.report_dir,
                  fmt::format("write {} (one line per finished cell, as it finishes), {} into this directory, "
                              "replacing an earlier run's reports there (the directory is locked while the run "
                              "writes: a second run into it fails at once)",
                              kResultsLogFile, format_files_prose()));
  cmd->add_option("--resume", o.resume_dir,
                  "complete the interrupted run whose reports are in this directory: cells already in its "
                  "results.jsonl are not run again (same suite, kernels, device and options required); lines of "
                  "cells not in the run are dropped, two lines for one cell are an error");
  cmd->add_option("--json", o.json_path, "write the full report (summary and every cell's metrics) to this JSON file");
  cmd->add_flag("--only-failures", o.only_failures, "console: print only cells that did not pass");
  cmd->add_flag("--quiet,-q", o.quiet,
                "console: rows of failing cells only (not the caught cells of negative controls), then the summary "
                "and the failure list");
  o.control.bind(cmd, " and a --report-dir is left for --resume, as a stopped run's",
                 "; not with --resume, and results.jsonl is written when the last repeat ends");
  cmd->add_flag("--with-controls", o.with_controls,
                "also run every built-in negative control of the device (a --plugin's kernels alone are the selection "
                "otherwise): the evidence `pacheck verify` needs that the checks can fail on this device");
  cmd->add_flag("--controls-everywhere", o.controls_everywhere,
                "run each negative control on every selected cell, not only on those where its planted fault can "
                "show (its expected failures; the others are reported as not_run): an audit that a control passes "
                "every other cell");
  bind_format_option(cmd, o.format);
  bind_color_option(cmd, o.color);
}

int run_command(RunCommand& o) {
  // Before anything is run or written: a bad --format must not empty an earlier run's report directory.
  FormatOptions fo;
  fo.only_failures = o.only_failures;
  fo.quiet = o.quiet;
  fo.color = resolve_color(o.color);
  const std::unique_ptr<ReportFormat> out = stdout_format(o.format, fo);
  if (o.control.repeat > 1 && !o.resume_dir.empty())
    throw UsageError("--repeat: not with --resume (the resumed cells ran once; a repeated run starts afresh)");
  const bool tty = isatty(fileno(stderr));
  o.control.progress_seconds(tty);  // a bad --progress-interval: exit 2 before any report is replaced
  RunPlan p = plan_run_command(o);
  std::optional<ReportDir> reports = open_report_dir(o, p);
  // What the run's end says if code in this process ends it early (exit(), or the --no-isolate watchdog).
  set_unfinished_note(
      reports ? fmt::format("the results finished before it are kept in {}; complete the run, its plugin kernels "
                            "isolated, with:\n  {}",
                            (std::filesystem::path(reports->dir()) / kResultsLogFile).string(),
                            resume_command(command_line(), reports->dir(), {"--no-isolate"}))
              : std::string("no results were kept (no --report-dir)"));
  const std::unique_ptr<CallWatchdog> watchdog = o.common.watchdog();
  p.ro.watchdog = watchdog.get();
  const RunStart start = run_start(o, p, reports ? &*reports : nullptr);
  // Checked before the run starts: a bad --progress-interval is exit 2 with nothing run.
  RunControl control_run(o.control, tty);
  out->run_started(start);
  // SIGINT/SIGTERM and --fail-fast stop the run between cells (exec/run_options.hpp's RunOptions::stop).
  const InterruptHandler interrupts;
  p.ro.on_result = [&](const CellResult& r) {
    // A kill right after this cell must not lose it. A repeated run's results are combined first.
    if (reports && o.control.repeat == 1) reports->append(r);
  };
  p.ro.on_result_in_order = [&](const CellResult& r) { out->cell_finished(r); };
  control_run.attach(p.ro);
  std::vector<KernelRole> roles;
  for (const auto& k : p.kernels) roles.push_back({k->name(), k->is_negative_control()});
  RunSummary s;
  try {
    s = control_run.run([&] { return run_suite(p.suite, p.kernels, p.device, p.ro); }, roles);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (control_run.stopped()) return end_stopped_run(o, p, s, control_run, *out, reports ? &*reports : nullptr);
  return end_run(o, p, s, control_run, *out, reports);
}

void add_run_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("run", "run a suite against kernels and give a verdict per cell (default: gate)");
  auto o = std::make_shared<RunCommand>();
  bind_run_command(cmd, *o);
  cmd->callback([&ctx, o] { ctx.exit_code = run_command(*o); });
}

}  // namespace pacheck::cli
