// Wording and numbers every report format shares, so that summary.md, junit.xml, TAP, the GitHub
// annotations and report.html say the same thing the same way: one repro command, one meaning per exit code,
// one headline and one list of the run-level checks behind it. The one number printer, sci(), the one
// spelling of a NaN/Inf output (unless_nonfinite, metric_text, max_ulp_text, error_clause) and which verdicts
// carry an output, has_output(), are judge's (judge/comparator.hpp, judge/metric_text.hpp, judge/verdict.hpp):
// the figures, a stage before report/, print them too.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "exec/runner.hpp"
#include "judge/metric_text.hpp"  // every format prints its metrics through it

namespace pacheck {

/// `s` with every byte that is not part of a valid UTF-8 sequence replaced by '?' (plugin messages and
/// device strings come from outside pacheck).
std::string valid_utf8(const std::string& s);

/// `s` single-quoted for a POSIX shell unless it is plain ([A-Za-z0-9._/-]+): cell ids hold spaces and '+',
/// and must paste into a terminal intact.
std::string shell_quote(const std::string& s);

/// " --plugin PATH" (PATH shell-quoted, as given to load_plugin) when a plugin loaded in this process
/// registered the kernel named `kernel`, else "": appended to a printed command so that it loads the
/// kernel's library again when pasted.
std::string plugin_flag(const std::string& kernel);

/// How printed commands (repro lines, fuzz replays, `score --cell` lines, the hints that name a command)
/// invoke pacheck: "pacheck" until set_command_name changes it. The CLI sets its argv[0] as invoked
/// ("build/default/cli/pacheck" after a build, "/opt/pacheck/bin/pacheck" from a prefix not on PATH,
/// "pacheck" from PATH), the Python module "python -m pacheck", so that a line pastes where it was printed.
/// `shell_words` is used as given: quote it (shell_quote) before. Thread-safe.
void set_command_name(std::string shell_words);
std::string command_name();

/// The command that reruns one cell with every metric and its worst elements:
/// "pacheck repro 'h32/8 d128 ... clean' --kernel cpu.vector_v" (command_name() in place of "pacheck"), with plugin_flag(r.kernel) appended for a
/// plugin kernel ("... --kernel my.kernel --plugin build/libmy.so") and the run's `judge_flags`
/// (RunSummary::judge_flags: "--tolerance calibrated --oracle-precision f64" and the like) last, so the
/// line reproduces the verdict under the limits that gave it.
std::string repro_command(const CellResult& r, const std::string& judge_flags);

/// How results of one kernel name are reproduced when `pacheck repro` cannot (a kernel that exists only in
/// the process that made its results, such as `pacheck score`'s replayed outputs): given the cell id and the
/// judge flags, the whole command line to print. Registered for the life of the process.
using ReproCommandFn = std::function<std::string(const std::string& cell_id, const std::string& judge_flags)>;

/// Makes repro_command print `fn`'s line for results of kernel `kernel` (replacing an earlier registration;
/// an empty `fn` removes it). Thread-safe. `pacheck score` registers the `pacheck score --cell` line of its
/// kernel here, so every report format prints a command that works pasted.
void set_repro_command(const std::string& kernel, ReproCommandFn fn);

/// What `s.exit_code()` means for this run, in one clause, claiming no more than ran: "every cell passed and
/// every negative control was caught" (only when controls ran and each caught its fault; "every cell passed"
/// otherwise), "some cell failed", "some kernel ran no cell", "instrument blind: the comparator self-test
/// failed" and the like.
std::string exit_meaning(const RunSummary& s);
/// "PASS" (0), "BLIND" (3) or "FAIL" (anything else).
std::string outcome_word(int code);

/// What a run's negative controls did, from its per-kernel summaries: the facts behind controls_statement.
struct ControlFacts {
  std::vector<std::string> caught;         ///< controls whose every planted cell failed, in s.kernels order
  std::vector<std::string> blind;          ///< controls with a planted cell that passed
  std::vector<std::string> not_exercised;  ///< controls with no planted cell among the selected ones
  int caught_cells = 0, missed_cells = 0, not_run_cells = 0;  ///< over every control
  /// The negative controls in the run, whatever their outcome.
  std::size_t ran() const { return caught.size() + blind.size() + not_exercised.size(); }
};
ControlFacts control_facts(const RunSummary& s);

/// What every format says about the run's negative controls, in the console's words:
/// "negative controls: none ran, so this run does not show that its checks can fail here", or
/// "negative controls: 2 ran; caught: cpu.vector_v; not exercised: cpu.fixed_scale; cells: 4 caught,
/// 0 missed, 6 not run" (groups BLIND, caught, not exercised, each only when not empty).
std::string controls_statement(const RunSummary& s);

/// Whether a format lists `r` as a row of its own (a console row, a TAP point, a JUnit testcase) rather
/// than in its negative control's one summary (the console's table row, the control's TAP point and JUnit
/// testcase): every cell of a kernel under test is a row; a negative control's cell only when it fails the
/// run (missed: a planted fault that passed; failed: outside its expected failures, as
/// --controls-everywhere runs them) or when the control errored, crashed or timed out, caught or not.
/// Caught, not_run, declined and passing cells of a control are counted, not listed (a gate with the
/// built-in controls has thousands of not_run cells); every one stays in report.json and results.jsonl.
/// `negative_control`: r's kernel is a negative control.
bool listed_as_row(const CellResult& r, bool negative_control);

/// The cells of negative controls a format counts instead of listing (listed_as_row false), by outcome.
struct SummarisedCells {
  int caught = 0, not_run = 0, passed = 0, declined = 0;
  int total() const { return caught + not_run + passed + declined; }
};
SummarisedCells summarised_cells(const RunSummary& s);
/// "6744 cells of negative controls are counted, not listed (287 caught, 6457 not run)": the one line a
/// format prints where it leaves them out (the parts that are 0 left out), or "" when there are none.
std::string summarised_text(const SummarisedCells& c);

/// The outcome line every format opens or closes with, built here alone so that no format claims more
/// than ran: a format prints its fields in its own markup, never its own wording.
struct Headline {
  int code = 0;          ///< s.exit_code()
  std::string word;      ///< outcome_word(code): "PASS"
  std::string meaning;   ///< exit_meaning(s): "every cell passed"
  /// "4 passed, 0 failed, 0 declined, 2 caught by negative controls" (", 2 not run" when there are).
  std::string counts;
  std::string controls;  ///< controls_statement(s)
};
Headline headline(const RunSummary& s);

/// Every metric of a result, one "name: value" per line (verdict, detail, rel_linf, limit, margin, max_abs,
/// nmse, max_ulp, bitwise_equal_pct, bias_ulp, nan, inf, variant_elements, worst, expected_fail).
std::string metrics_text(const CellResult& r);


/// The suites of `s.results`, in order of first appearance (a merged report may hold several).
std::vector<std::string> suites_of(const RunSummary& s);

/// The KernelSummary of `kernel` over its results of suite `suite` alone (a merged report may hold several
/// suites), judged as `s` judges it (a negative control there is one here).
KernelSummary kernel_summary_in(const RunSummary& s, const std::string& suite, const std::string& kernel);

/// A run-level check: the comparator self-test, each negative control, each kernel ran a cell. Together
/// with the cells they make up the exit code: a report that fails a cell or a check exactly when
/// RunSummary::exit_code() is not 0 never disagrees with the gate.
struct RunCheck {
  enum class Status { passed, failed, skipped };
  std::string name;     ///< "comparator self-test", "cpu.vector_v: negative control caught", "K: ran at least one cell"
  Status status = Status::passed;
  std::string message;  ///< why it failed or was skipped (one line)
  std::string text;     ///< what was counted ("caught 4, missed 0"; the self-test's lines)
  /// A negative control's check: its cells by outcome, "4 caught, 0 missed, 120 not run" (", 2 declined",
  /// ", 3 passed", ", 1 failed" when there are), which the formats that show a control once print with it;
  /// empty for the other checks.
  std::string counts;
};
/// The self-test check, "a negative control ran" (skipped, with controls_statement as its message, when none
/// did; absent otherwise), then per kernel of `s` its negative-control check (controls only) and its "ran at
/// least one cell" check (skipped, not failed, for a kernel without a cell in one shard of a run).
std::vector<RunCheck> run_checks(const RunSummary& s);

}  // namespace pacheck
