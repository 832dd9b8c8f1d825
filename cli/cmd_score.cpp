// pacheck score: verdicts for outputs a foreign runner computed from `pacheck export` case files, with the
// same table, summary, JSON report and exit code as `pacheck run`.
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <unistd.h>

#include "cli/common.hpp"
#include "cli/interrupt.hpp"
#include "cli/run_commands.hpp"
#include "cli/run_control.hpp"
#include "interop/casefiles.hpp"
#include "interop/safetensors.hpp"
#include "report/json.hpp"
#include "report/report_dir.hpp"
#include "report/run_identity.hpp"
#include "report/text.hpp"
#include "verify/evidence.hpp"

namespace pacheck::cli {

namespace {

/// The replayed kernels exist only in this process: a failing cell's repro line is this command for it, under
/// either name score reports cells under (score_kernel_name: a mixed export's MLA cells get their own).
void register_score_repro(const ScoreCommand& o) {
  auto line = [cases = o.cases, outputs = o.outputs, kernel = o.kernel, negative_control = o.negative_control](
                  const std::string& cell_id, const std::string& judge_flags) {
    std::string line = fmt::format("{} score --cases {} --outputs {} --cell {}", command_name(), shell_quote(cases),
                                   shell_quote(outputs), shell_quote(cell_id));
    if (kernel != "foreign") line += " --kernel-name " + shell_quote(kernel);
    if (negative_control) line += " --negative-control";
    if (!judge_flags.empty()) line += " " + judge_flags;
    return line;
  };
  set_repro_command(o.kernel, line);
  set_repro_command(score_kernel_name(o.kernel, true, true), line);
  if (o.control_outputs.empty()) return;
  // The control's cells rerun alone: its outputs scored as a control under its own name.
  const std::string control = o.kernel + kControlKernelSuffix;
  auto control_line = [cases = o.cases, outputs = o.control_outputs, control](const std::string& cell_id,
                                                                              const std::string& judge_flags) {
    return fmt::format("{} score --cases {} --outputs {} --cell {} --kernel-name {} --negative-control{}",
                       command_name(), shell_quote(cases), shell_quote(outputs), shell_quote(cell_id),
                       shell_quote(control), judge_flags.empty() ? "" : " " + judge_flags);
  };
  set_repro_command(control, control_line);
  set_repro_command(score_kernel_name(control, true, true), control_line);
}

/// score's pre-flight, which score_cases calls once the case files passed their checks (and again for each
/// repeat of --repeat N): the memory check, the replayed kernels' roles into `roles` (one kernel, or two for an
/// export of multi-head and MLA cells, and as many controls with --control-outputs), the run's identity (with
/// the case and output directories and `manifest_sha256`, which `verify --cases` compares) into
/// `identity`, the scored cells and kernels into `evidence`, and the report directory into `reports`, started
/// once.
decltype(ScoreOptions::preflight) score_preflight(const ScoreCommand& o, MemoryBudget budget, const std::string& device,
                                                  std::vector<KernelRole>& roles, nlohmann::json& identity,
                                                  EvidenceInputs& evidence, const std::string& manifest_sha256,
                                                  std::optional<ReportDir>& reports) {
  return [&o, budget, device, &roles, &identity, &evidence, &manifest_sha256, &reports](
             const Suite& suite, const std::vector<KernelPtr>& kernels, const RunOptions& ro) {
    check_memory(plan_memory(suite, kernels, ro), budget);
    std::vector<std::string> names;
    roles.clear();
    evidence = {suite_digest(suite), {}};
    for (const auto& k : kernels) {
      names.push_back(k->name());
      roles.push_back({k->name(), k->is_negative_control()});
      evidence.kernels.push_back({k->name(), k->layouts(), k->is_negative_control(), k->takes_mla()});
    }
    identity = run_identity(suite, names, device, ro, "");
    identity["score"] = {{"cases", std::filesystem::absolute(o.cases).lexically_normal().string()},
                         {"outputs", std::filesystem::absolute(o.outputs).lexically_normal().string()},
                         {"manifest_sha256", manifest_sha256}};
    if (o.report_dir.empty()) return;
    try {
      // Once: each repeat of --repeat N passes the pre-flight again, into the one directory.
      if (!reports) reports = ReportDir::start(o.report_dir, identity);
    } catch (const ReportError& e) {
      throw UsageError(e.what());
    }
  };
}

/// What a stopped score prints after RunControl::print_stopped's line: what was kept and how to complete it.
void print_score_stopped_hint(std::FILE* notes, const ReportDir* reports, int repeat) {
  if (repeat > 1)
    fmt::print(notes, "pacheck: {}a --repeat score is combined at the end: run the same command again\n",
               reports ? "no results were kept and no reports were written; " : "");
  else if (reports)
    fmt::print(notes, "pacheck: the scored results are kept in {}; no reports were written. score has no "
                      "--resume: run the same command again\n",
               (std::filesystem::path(reports->dir()) / kResultsLogFile).string());
  else
    fmt::print(notes, "pacheck: score keeps no partial results without --report-dir and has no --resume: run the "
                      "same command again\n");
  std::fflush(notes);
}

/// A finished score: its format's document, what the export left out, --json, and the report directory.
/// Returns the exit code: the run's, or kUsage when the report directory could not be finished.
int end_score(const ScoreCommand& o, const RunSummary& s, ReportMeta& meta, const std::string& suite,
              const std::vector<LeftOut>& left_out, const EvidenceInputs& evidence, ReportFormat& out,
              ReportDir* reports) {
  std::FILE* notes = o.format == kDefaultFormat ? stdout : stderr;
  // Outputs are judged on the CPU.
  if (reports || out.needs_environment()) {
    meta.environment = collect_environment("cpu");
    meta.environment.device = meta.device;  // "cpu (replayed outputs)", as run.json and the console name it
  }
  out.run_ended(s, meta);
  // What the export could not write as case files is not covered by this score: say so after the summary.
  for (const auto& l : left_out)
    if (l.cells > 0)
      fmt::print(notes, "pacheck: not scored: the export left out {} cell(s) of suite {} ({}: {}); run them with "
                        "`pacheck run` or the Python module\n",
                 l.cells, suite, l.kind, l.reason);
  if (!o.json.empty()) write_output_file("--json", o.json, to_json(s, suite, meta.device).dump(1) + "\n");
  if (!reports) return s.exit_code();
  return write_report_dir(*reports, o.format == kDefaultFormat, s.exit_code(), [&] {
    reports->finish(s, meta);
    // `pacheck verify DIR --cases EXPORT` checks it (and refuses a score of --cell's part: cells left out).
    write_evidence(reports->dir(), s, meta, evidence);
  });
}

}  // namespace

void bind_score_command(CLI::App* cmd, ScoreCommand& o) {
  cmd->add_option("--cases", o.cases, "directory written by `pacheck export`")->required();
  cmd->add_option("--outputs", o.outputs, "directory holding one output safetensors per case file")->required();
  cmd->add_option("--kernel-name", o.kernel, "name to report the outputs under")->capture_default_str();
  cmd->add_option("--cell", o.cells,
                  "score only this cell (its id exactly as score prints it; repeatable): the repro line of a failing "
                  "cell");
  cmd->add_option("--json", o.json, "write the full report (summary and every cell's metrics) to this JSON file");
  cmd->add_option("--report-dir", o.report_dir,
                  fmt::format("write {} (one line per scored cell, as it is scored), {} into this directory, as "
                              "`run --report-dir` does (locked while score writes; an earlier run's reports there "
                              "are replaced once the case files have been read)",
                              kResultsLogFile, format_files_prose()));
  cmd->add_flag("--only-failures", o.only_failures, "console: print only cells that did not pass");
  cmd->add_flag("--quiet,-q", o.quiet,
                "console: rows of failing cells only (not the caught cells of negative controls), then the summary "
                "and the failure list");
  bind_format_option(cmd, o.format);
  bind_color_option(cmd, o.color);
  cmd->add_option("--control-outputs", o.control_outputs,
                  fmt::format("outputs of the same runner with the planted V-tail fault (runner.py --bug v-tail), "
                              "scored beside --outputs as the negative control KERNEL-NAME{}: it must fail exactly "
                              "the cells that poison the V tail, or the score is instrument blind (exit 3); "
                              "`pacheck verify` needs it in a score's evidence",
                              kControlKernelSuffix))
      ->check(CLI::Validator(
          [](const std::string& v) { return v.empty() ? std::string("an empty directory name") : std::string(); },
          "DIR", "not empty"));
  cmd->add_flag("--negative-control", o.negative_control,
                "the outputs come from a runner with the planted V-tail fault (runner.py --bug v-tail): it must fail "
                "the cells that poison the V tail, or the run is instrument blind (exit 3)");
  cmd->add_option("--threads,-j", o.common.threads, "CPU worker threads (default: all cores)");
  o.common.judge.bind(cmd);
  o.common.memory.bind(cmd);
  o.control.bind(cmd, "; a --report-dir keeps the scored results in " + std::string(kResultsLogFile),
                 "; results.jsonl is written when the last repeat ends");
}

int score_command(const ScoreCommand& o) {
  // The name goes into ids, reports and one-line logs: the rule a plugin's kernel names follow.
  if (const std::string why = kernel_name_problem(o.kernel); !why.empty())
    throw UsageError(fmt::format("--kernel-name: {}", why));
  FormatOptions fo;
  fo.only_failures = o.only_failures;
  fo.quiet = o.quiet;
  fo.color = resolve_color(o.color);
  const std::unique_ptr<ReportFormat> out = stdout_format(o.format, fo);
  const bool tty = isatty(fileno(stderr)) != 0;
  o.control.progress_seconds(tty);  // a bad --progress-interval: exit 2 before anything is read or written
  // Pre-flight: an unwritable --json fails now, not after every output was scored.
  if (!o.json.empty()) check_writable_file("--json", o.json);
  ScoreOptions so;
  so.kernel_name = o.kernel;
  so.negative_control = o.negative_control;
  so.control_outputs = o.control_outputs;
  so.cells = o.cells;
  so.run = o.common.run_options();
  register_score_repro(o);
  const std::string device = "cpu (replayed outputs)";
  // The report directory is started only once the case files passed their checks (the pre-flight): a
  // broken export must not replace an earlier run's reports.
  std::optional<ReportDir> reports;
  nlohmann::json identity;
  std::vector<KernelRole> roles;  // the replayed kernels, known once the manifest was read (the pre-flight)
  EvidenceInputs evidence;
  std::string manifest_sha256;  // set by score_cases before the pre-flight: the manifest bytes it read
  so.preflight =
      score_preflight(o, o.common.memory.budget(), device, roles, identity, evidence, manifest_sha256, reports);
  so.run.on_result = [&](const CellResult& r) {
    // First: a kill right after this cell must not lose it. A repeated score's results are combined first.
    if (reports && o.control.repeat == 1) reports->append(r);
  };
  // SIGINT/SIGTERM and --fail-fast stop the scoring between cells, --repeat N scores N times, and
  // --progress-interval reports while it runs: as on `run` (cli/run_control.hpp).
  RunControl control_run(o.control, tty);
  const InterruptHandler interrupts;
  // The table starts with the first result, so a bad case directory prints only its error. Rows come in
  // plan order, whatever the thread count.
  bool started = false;
  so.run.on_result_in_order = [&](const CellResult& r) {
    if (!started) {
      std::string title = fmt::format("pacheck {} | score {} against {}", pacheck_version(), o.outputs, o.cases);
      if (o.control.repeat > 1) title += fmt::format(" | --repeat {}", o.control.repeat);
      RunStart start{title, {}};
      for (const auto& role : roles)
        if (role.negative_control) start.negative_controls.push_back(role.name);
      start.results_in = results_kept_in(reports ? reports->dir() : "", o.json);
      out->run_started(start);
      started = true;
    }
    out->cell_finished(r);
  };
  control_run.attach(so.run);
  std::string suite;
  std::vector<LeftOut> left_out;
  RunSummary s;
  try {
    s = control_run.run([&] { return score_cases(o.cases, o.outputs, so, &suite, &left_out, &manifest_sha256); }, roles);
  } catch (const CaseFilesError& e) {
    throw UsageError(e.what());
  } catch (const SafetensorsError& e) {
    throw UsageError(e.what());
  }
  ReportMeta meta{suite, device, {}, identity.is_null() ? nlohmann::json(nullptr) : identity};
  if (control_run.stopped()) {
    // Only the console shows a stopped run's counts: a document format must not look like a whole run's.
    if (o.format == kDefaultFormat) out->run_ended(s, meta);
    std::fflush(stdout);
    std::FILE* notes = o.format == kDefaultFormat ? stdout : stderr;
    control_run.print_stopped(notes, s);
    print_score_stopped_hint(notes, reports ? &*reports : nullptr, o.control.repeat);
    return control_run.stopped_exit_code(s);
  }
  // A repeated score's results are combined first, then logged.
  control_run.finish_repeats(s, o.format == kDefaultFormat, reports ? &*reports : nullptr);
  return end_score(o, s, meta, suite, left_out, evidence, *out, reports ? &*reports : nullptr);
}

void add_score_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("score", "judge a foreign runner's outputs for exported case files, like `run`");
  auto o = std::make_shared<ScoreCommand>();
  bind_score_command(cmd, *o);
  cmd->callback([&ctx, o] { ctx.exit_code = score_command(*o); });
}

}  // namespace pacheck::cli
