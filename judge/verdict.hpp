// Verdicts: the outcome of one cell on one kernel, described once in verdict_table(): name, meaning, whether
// it fails the gate, and precedence (table order, which is also the enum's order). judge() picks the first
// verdict of the table that applies; docs/REFERENCE.md's verdict table lists the same rows in the same order
// (tests/test_tables.cpp checks it) and `pacheck list verdicts` prints them.
//
// Quick start: adding a verdict
//  Add the enumerator to Verdict and its row to verdict_table() in verdict.cpp at the place of its
//  precedence (a static_assert keeps the two in one order), its check in judge() (judge/judge.cpp) or, for
//  a runner outcome, where exec/ produces it, and its line in docs/REFERENCE.md's verdict table. Reports,
//  the exit code (through the row's fails-the-gate flag and cell_outcome) and `pacheck list verdicts`
//  follow.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace pacheck {

/// Outcome of one cell on one kernel, in order of precedence when several apply (first wins). oob_write to
/// fail are judge()'s (variant, nondeterministic and stateful name the cause of one check, a faulted output
/// that differs from its clean twin: judge/cause.hpp); declined, not_run, error, crash and timeout come from
/// the runner, pass when nothing applies.
enum class Verdict {
  oob_write,      ///< a guard region around the output changed
  input_mutated,  ///< query, caches, block_tables or seq_lens changed
  unwritten,      ///< output elements left untouched (still the NaN fill pattern)
  poisoned,       ///< NaN/Inf where the oracle is finite
  overflow,       ///< NaN/Inf where the oracle is finite, on a clean cell of dist=overflow (V near the dtype's limit)
  variant,        ///< the fault changes the output, reproducibly from the same history: poison leaks
  nondeterministic,  ///< differs from the clean twin, and two runs from the same history differ too
  stateful,       ///< differs from the clean twin because of earlier calls: same-history runs agree
  fail,           ///< beyond tolerance
  biased,         ///< within tolerance, but rounded off-centre: a one-way signed mean error (comparator BiasCheck)
  declined,       ///< the kernel does not support the cell
  not_run,        ///< a negative control not run on a cell outside its expected failures (exec/plan.hpp)
  error,          ///< the kernel or device reported an error
  crash,          ///< the kernel's process died (isolated runs)
  timeout,        ///< the kernel's process hung past the cell timeout (isolated runs)
  pass,           ///< within tolerance, finite, bitwise invariant under the fault
};

/// One row of verdict_table().
struct VerdictInfo {
  Verdict value;
  std::string_view name;     ///< as reports write it ("oob_write")
  std::string_view meaning;  ///< docs/REFERENCE.md's "meaning" column, without its Markdown
  bool fails_gate;           ///< counts as a failure of the cell (is_failure): all but pass, declined, not_run
};
/// Every verdict in order of precedence, highest first: the enum's order.
std::span<const VerdictInfo> verdict_table();

/// "oob_write", "input_mutated", ..., "pass" (verdict_table()'s names).
std::string_view verdict_name(Verdict v);
/// Parses a verdict_name(); throws std::invalid_argument listing the names otherwise.
Verdict parse_verdict(std::string_view s);
/// True for every verdict but pass, declined and not_run (VerdictInfo::fails_gate).
bool is_failure(Verdict v);
/// The kernel produced an output to measure: not declined, not_run, error, crash or timeout.
bool has_output(Verdict v);
/// The kernel or its process failed to produce an output: error, crash or timeout.
bool is_error_verdict(Verdict v);
/// Position of `v` in verdict_table(): 0 for the verdict that wins over every other. When several verdicts
/// apply to one run, the one of lowest rank is the cell's.
std::size_t verdict_rank(Verdict v);

}  // namespace pacheck
