// Wording and numbers every report format shares, so that summary.md, junit.xml, TAP, the GitHub
// annotations and report.html say the same thing the same way: one repro command, one meaning per exit code
// and one list of the run-level checks behind it. The one number printer, sci(), and which verdicts carry an
// output, has_output(), are judge's (judge/comparator.hpp, judge/verdict.hpp): the figures use them too.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "exec/runner.hpp"

namespace pacheck {

/// A metric taken over the finite (output, oracle) pairs only (rel_linf, max_abs, mean_abs, nmse): "nan" or
/// "inf" when the output holds such elements, since a number there would read as a small error; else
/// `formatted`, the value as the caller prints it.
std::string unless_nonfinite(const Metrics& m, const std::string& formatted);

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

/// The command that reruns one cell with every metric and its worst elements:
/// "pacheck repro 'h32/8 d128 ... clean' --kernel cpu.vector_v", with plugin_flag(r.kernel) appended for a
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

/// What exit code 0, 1 or 3 means, in one clause ("every cell passed and every negative control was
/// caught"); "?" for any other code.
std::string exit_meaning(int code);
/// "PASS" (0), "BLIND" (3) or "FAIL" (anything else).
std::string outcome_word(int code);

/// Every metric of a result, one "name: value" per line (verdict, detail, rel_linf, limit, margin, max_abs,
/// nmse, max_ulp, bitwise_equal_pct, bias_ulp, nan, inf, variant_elements, worst, expected_fail).
std::string metrics_text(const CellResult& r);


/// The suites of `s.results`, in order of first appearance (a merged report may hold several).
std::vector<std::string> suites_of(const RunSummary& s);

/// A run-level check: the comparator self-test, each negative control, each kernel ran a cell. Together
/// with the cells they make up the exit code: a report that fails a cell or a check exactly when
/// RunSummary::exit_code() is not 0 never disagrees with the gate.
struct RunCheck {
  enum class Status { passed, failed, skipped };
  std::string name;     ///< "comparator self-test", "cpu.vector_v: negative control caught", "K: ran at least one cell"
  Status status = Status::passed;
  std::string message;  ///< why it failed or was skipped (one line)
  std::string text;     ///< what was counted ("caught 4, missed 0"; the self-test's lines)
};
/// The self-test check, then per kernel of `s` its negative-control check (controls only) and its "ran at
/// least one cell" check (skipped, not failed, for a kernel without a cell in one shard of a run).
std::vector<RunCheck> run_checks(const RunSummary& s);

}  // namespace pacheck
