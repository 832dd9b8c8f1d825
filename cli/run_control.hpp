// How a run-like command (run, score) is driven while it runs (issue 21): --fail-fast, --repeat N,
// --progress-interval SECONDS, the live progress line on a terminal, and what a stopped run prints first.
// One implementation, so both commands give the same meaning, messages and exit codes.
#pragma once

#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exec/run_options.hpp"
#include "judge/repeat.hpp"
#include "judge/summary.hpp"
#include "report/report_dir.hpp"

namespace pacheck::cli {

/// Default --progress-interval when stderr is not a terminal (a CI log): a line every this many seconds.
inline constexpr double kDefaultProgressInterval = 30;

/// The flags --fail-fast, --repeat N and --progress-interval SECONDS, bound alike on run and score.
struct RunControlFlags {
  bool fail_fast = false;
  int repeat = 1;                      ///< 1..1000 (CLI11's range check: exit 2 naming --repeat)
  std::string progress_interval;       ///< as given; checked by progress_seconds()
  CLI::Option* progress_option = nullptr;
  /// Adds the three flags to `cmd`; `fail_fast_notes` and `repeat_notes` end the help of --fail-fast and
  /// --repeat (what the command does with its report directory, what a flag does not combine with).
  void bind(CLI::App* cmd, const std::string& fail_fast_notes, const std::string& repeat_notes);
  /// The interval in seconds (0 = no [progress] lines): the value given ('off' gives 0), else
  /// kDefaultProgressInterval when `stderr_tty` is false and 0 when it is true (the live line shows progress
  /// there). Throws UsageError naming --progress-interval for a value that is not 'off' or a number, NaN,
  /// infinite, zero or negative.
  double progress_seconds(bool stderr_tty) const;
};

/// Drives the repeats of one run and reports on them while they run. Construct it, attach() it to the
/// RunOptions the command passes to run_suite (or score_cases), then call run() with the function that
/// runs once. Callbacks set on the RunOptions before attach() keep running (after its own work for
/// on_result, before it for on_result_in_order).
class RunControl {
 public:
  /// `stderr_tty`: whether stderr is a terminal (the live "[done/total] cells" line goes there then).
  RunControl(const RunControlFlags& flags, bool stderr_tty);
  ~RunControl();
  RunControl(const RunControl&) = delete;
  RunControl& operator=(const RunControl&) = delete;

  /// Sets ro.stop (SIGINT/SIGTERM through InterruptHandler, and --fail-fast's first failing result: cell_outcome
  /// failed or missed), wraps ro.on_result (records the first failure), ro.on_result_in_order (rows of the
  /// first repeat only; clears the live line first), and sets on_progress, on_planned and on_started for the
  /// live line and the [progress] lines.
  void attach(RunOptions& ro);

  /// Calls `once` up to --repeat times, each a whole run: returns the first stopped run's summary as it is
  /// (stopped() is then true), the only run's summary when --repeat is 1, else combine_repeats over the
  /// runs judged with `roles` (differences() then lists the flaky results). A [progress] line is printed
  /// every progress interval while it runs (thread of its own, on stderr). Exceptions of `once` pass through.
  RunSummary run(const std::function<RunSummary()>& once, const std::vector<KernelRole>& roles);

  /// The last run() stopped early (a signal or --fail-fast).
  bool stopped() const { return stopped_; }
  /// The signal that stopped it (SIGINT, SIGTERM), or 0.
  int signal() const;
  /// The exit code of a stopped run: 128 + signal, or for --fail-fast at least kFail (1).
  int stopped_exit_code(const RunSummary& s) const;
  /// The first line a stopped run prints: "pacheck: interrupted by SIGINT: 3 of 40 results finished (...); no
  /// further cell was started" or "pacheck: stopped early (--fail-fast) after the first failure, K 'ID'
  /// (verdict): ...", with a newline before it; flushed.
  void print_stopped(std::FILE* to, const RunSummary& s) const;
  /// --repeat N's lines before the summary: how often each result ran and every result whose verdict
  /// differed, with its verdicts in repeat order and its repro line. Prints nothing when --repeat is 1.
  void print_repeats(std::FILE* to, const RunSummary& combined) const;
  /// After a --repeat N run that was not stopped (nothing when --repeat is 1): appends the combined results to
  /// `reports`' results.jsonl (held back while the repeats ran) when given, then prints print_repeats' lines
  /// on stdout when it carries the `console`, else on stderr and only when some result differed; flushes
  /// stdout.
  void finish_repeats(const RunSummary& combined, bool console, ReportDir* reports) const;
  /// Results whose verdict differed between repeats (after run() with --repeat > 1).
  const std::vector<RepeatDifference>& differences() const { return diffs_; }
  int repeat() const { return repeat_; }
  /// The interval of the [progress] lines in seconds, 0 when off.
  double progress_interval() const { return interval_; }

  /// One [progress] line as the ticker prints it (no newline): "[progress] 12/40 results finished, 2 running
  /// (K 'ID', K 'ID'), 1m05s elapsed", "repeat 2/3: " after the tag in a repeated run, "N running" only
  /// beyond three ids ("and 5 more"). For tests and the ticker.
  std::string progress_line() const;

 private:
  void ticker();

  bool fail_fast_;
  int repeat_;
  bool tty_;
  double interval_;
  std::atomic<int> current_{0};  ///< the repeat running now (0-based)
  bool stopped_ = false;
  std::atomic<bool> first_seen_{false};
  std::string first_text_;  ///< "cpu.vector_v 'h32/8 ... V:nan@tail' (poisoned)"
  std::vector<RepeatDifference> diffs_;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;                                ///< guards the fields below
  int done_ = 0, total_ = -1;                            ///< total -1: not planned yet
  std::vector<std::pair<std::string, std::string>> running_;  ///< (kernel, cell id), oldest first
  std::condition_variable wake_;
  bool finished_ = false;
  std::thread thread_;
};

}  // namespace pacheck::cli
