// The verdict of a whole run: per-kernel counts, negative controls caught or blind, the comparator
// self-test, and the exit code CI gates on.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "judge/comparator.hpp"
#include "judge/result.hpp"

namespace pacheck {

/// How a negative control fared in a run.
enum class ControlOutcome { not_control, caught, blind, not_exercised };
std::string_view control_outcome_name(ControlOutcome o);

struct KernelSummary {
  std::string kernel;
  int passed = 0, failed = 0, declined = 0, caught = 0, missed = 0;
  /// Cells of a negative control not run because they are outside its expected failures (Verdict::not_run).
  int not_run = 0;
  /// Cells per verdict, indexed by verdict_rank(): one count per row of verdict_table(), in its order.
  std::vector<int> verdicts;
  ControlOutcome control = ControlOutcome::not_control;
  /// No cell of this kernel ran (all declined or none selected). Never set for a negative control: one whose
  /// selected cells were all not_run or declined is `not_exercised` (nothing selected could show its fault).
  bool vacuous = false;
};

struct RunSummary {
  std::vector<CellResult> results;   ///< in suite order, kernel-major
  std::vector<KernelSummary> kernels;
  SelfTestResult selftest;
  int passed = 0, failed = 0, declined = 0, caught = 0;
  int not_run = 0;                   ///< negative controls' cells not run: outside their expected failures
  std::vector<int> verdicts;         ///< cells per verdict over every kernel, as KernelSummary::verdicts
  bool blind = false;                ///< a negative control was not caught or the self-test failed
  bool vacuous = false;              ///< some kernel ran no cell (not counted for one shard of a run)
  /// One shard of a sharded run (--shard I/N, N > 1): a kernel without a cell in it is reported but not
  /// vacuous here, as a GoogleTest shard without tests passes; `pacheck merge` judges the whole run.
  bool shard = false;
  /// The run stopped before every planned result finished (RunOptions::stop: a signal, --fail-fast):
  /// `results` holds only the finished ones (resumed ones included), still in suite order, kernel-major.
  bool stopped = false;
  /// Results the run planned (finished or not): results.size() unless `stopped`.
  std::size_t planned = 0;
  /// judge_flags() of the options that decided these verdicts ("" for the defaults): appended to every
  /// repro line a report prints, so the line reproduces the verdict under the same limits.
  std::string judge_flags;
  /// 0 all pass (controls caught), 1 some cell failed, a kernel ran nothing or fewer results than `planned`
  /// exist (a stopped run), 3 instrument blind.
  int exit_code() const;
};

/// A kernel as the per-kernel summary needs it: its name and whether it is a negative control.
struct KernelRole {
  std::string name;
  bool negative_control = false;
};

/// What one result counts as in a run's totals: the pass/fail rule of every report and of exit_code().
enum class CellOutcome {
  passed,    ///< not a failure (and not a negative control's expected failure)
  failed,    ///< a failure verdict on a cell that is not a negative control's expected failure
  declined,  ///< the kernel does not support the cell: neither passes nor fails
  caught,    ///< a negative control's expected failure that failed, as it must
  missed,    ///< a negative control's expected failure that passed: the instrument is blind there
  not_run,   ///< a negative control's cell outside its expected failures, not run (Verdict::not_run)
};

/// The rule: declined cells are declined, not_run ones not_run; a cell `r.expected_fail` marks on a negative control is caught
/// when its verdict is a failure and missed otherwise; any other cell failed when its verdict is a failure
/// (is_failure) and passed otherwise. `negative_control`: r's kernel is a negative control.
CellOutcome cell_outcome(const CellResult& r, bool negative_control);
/// cell_outcome with r's kernel looked up in `s.kernels` (a kernel `s` does not list is not a control).
CellOutcome cell_outcome(const RunSummary& s, const CellResult& r);
/// True when `kernel` is a negative control in `s` (its KernelSummary::control is not not_control).
bool is_negative_control(const RunSummary& s, const std::string& kernel);
/// The cell fails the run: cell_outcome is failed or missed.
bool counts_as_failure(const RunSummary& s, const CellResult& r);

/// "3 variant, 1 stateful, 40 pass": the non-zero counts of `verdicts` (KernelSummary::verdicts) with their
/// verdict names, in verdict_table() order; "no cells" when every count is 0.
std::string verdict_counts_text(const std::vector<int>& verdicts);
/// The cells per verdict as every report's summary line gives them: the kernels under test's counts, then,
/// where a negative control ran, the controls' counts apart, so a control's caught failures never stand
/// beside "0 failed" as if a kernel under test had them:
/// "3810 pass, 19 declined; negative controls: 150 poisoned, 109 fail, 6456 not_run".
std::string verdicts_text(const RunSummary& s);

/// Recomputes `s.kernels` and the run totals (passed, failed, declined, caught, not_run, verdicts, blind, vacuous) from
/// `s.results`, one KernelSummary per entry of `kernels` in that order. run_suite and merge share it, so a
/// merged report is judged exactly as a single run would be.
void summarize(RunSummary& s, const std::vector<KernelRole>& kernels);

}  // namespace pacheck
