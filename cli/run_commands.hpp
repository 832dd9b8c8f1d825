// `pacheck run` and `pacheck score` as plain functions of plain options: add_run_command and
// add_score_command (cli/common.hpp) parse the command line with CLI11 into a RunCommand or ScoreCommand
// (bind_run_command, bind_score_command), then run_command or score_command runs it.
// A new option of either: its field here, its add_option in the bind function, its use in the function
// that runs the command (cli/cmd_run.cpp, cli/cmd_score.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "cli/run_control.hpp"

namespace pacheck::cli {

/// What `pacheck run` was given.
struct RunCommand {
  /// --suite, --kernel, --device, --filter, --seed, --threads, --shard, --isolate, --no-isolate,
  /// --cell-timeout, --gpu-children, the judge flags, --plugin, --max-memory.
  CommonOptions common;
  std::string report_dir;               ///< --report-dir DIR: "" = none
  std::string resume_dir;               ///< --resume DIR: "" = a fresh run
  std::string json_path;                ///< --json FILE: "" = none
  bool only_failures = false;           ///< --only-failures
  bool quiet = false;                   ///< --quiet
  RunControlFlags control;              ///< --fail-fast, --repeat, --progress-interval
  bool with_controls = false;           ///< --with-controls
  bool controls_everywhere = false;     ///< --controls-everywhere
  std::string format = kDefaultFormat;  ///< --format
  std::string color = "auto";           ///< --color
};
/// Adds run's options to `cmd`, each bound to its field of `o` (which must outlive the parse).
void bind_run_command(CLI::App* cmd, RunCommand& o);
/// Runs `o.common`'s suite and kernels and writes the reports `o` asks for. Everything that can be checked
/// before a cell runs is (the format, the device, the suite, the kernels, the memory, --json, the report
/// directory): a bad value throws UsageError (exit 2) with nothing run and an earlier run's reports left in
/// place. Loads the --plugin libraries (so `o.common.kernels` may be filled from them). Returns the exit
/// code: RunSummary::exit_code(), a stopped run's RunControl::stopped_exit_code(), or kUsage when the
/// verdicts exist but the report directory could not be finished.
int run_command(RunCommand& o);

/// What `pacheck score` was given.
struct ScoreCommand {
  std::string cases;                    ///< --cases DIR (`pacheck export`'s)
  std::string outputs;                  ///< --outputs DIR (one output safetensors per case file)
  std::string kernel = "foreign";       ///< --kernel-name
  std::vector<std::string> cells;       ///< --cell ID (repeatable): only these cells
  std::string json;                     ///< --json FILE: "" = none
  std::string report_dir;               ///< --report-dir DIR: "" = none
  bool only_failures = false;           ///< --only-failures
  bool quiet = false;                   ///< --quiet
  std::string format = kDefaultFormat;  ///< --format
  std::string color = "auto";           ///< --color
  bool negative_control = false;        ///< --negative-control
  std::string control_outputs;          ///< --control-outputs DIR: a planted runner's outputs, a negative control
  CommonOptions common;                 ///< --threads, the judge flags and --max-memory only
  RunControlFlags control;              ///< --fail-fast, --repeat, --progress-interval
};
/// Adds score's options to `cmd`, each bound to its field of `o` (which must outlive the parse).
void bind_score_command(CLI::App* cmd, ScoreCommand& o);
/// Judges the outputs in `o.outputs` against the case files in `o.cases` and writes the reports `o` asks
/// for, as run_command does for a run. A bad option or a case directory that fails its checks throws
/// UsageError (exit 2) before the report directory is started. Registers the `pacheck score --cell` line as
/// the repro command of kernel `o.kernel` (report/text.hpp's set_repro_command). Returns the exit code as
/// run_command does.
int score_command(const ScoreCommand& o);

/// The last step of run and score with a report directory: `write` writes its files (ReportDir::finish, and
/// for run evidence.json after them); then the closing "reports in DIR: ..." line, on stdout beside the
/// `console`, else on stderr. Returns `code`, or kUsage after "pacheck: error: ..." when `write` throws
/// ReportError: the verdicts exist but CI cannot read them, which must never pass as success.
int write_report_dir(const ReportDir& reports, bool console, int code, const std::function<void()>& write);

}  // namespace pacheck::cli
