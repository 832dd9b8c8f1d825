// --repeat N (issue 21): the same run N times, for flake hunting. Which result a cell is reported with,
// and which cells are flaky.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "judge/summary.hpp"

namespace pacheck {

/// A result whose verdict was not the same in every repeat.
struct RepeatDifference {
  std::string kernel;
  std::string cell_id;
  std::vector<Verdict> verdicts;  ///< one per repeat, in repeat order
  /// Its pass/fail outcome differs too (cell_outcome failed or missed in some repeats only): the combined
  /// result is then a failing one, so the run fails.
  bool outcome_differs = false;
  std::size_t recorded = 0;       ///< the repeat (0-based) whose result the combined summary holds
};

/// Combines `runs`, the summaries of the repeats of one run (the same plan: the same results in the same
/// order; none stopped), into one summary judged with `kernels` as summarize() judges a run. Each result
/// is its first repeat's, except that a result that fails the run in some repeat (cell_outcome failed or
/// missed) is the first such repeat's: a flaky failure fails the combined run and its reports. The
/// comparator self-test is the first failing repeat's, else the first's. Every result whose verdict
/// differs between repeats is appended to `*differences` (when not null), in plan order. Throws
/// std::invalid_argument when `runs` is empty, a run stopped, or two runs do not hold the same results.
RunSummary combine_repeats(std::vector<RunSummary> runs, const std::vector<KernelRole>& kernels,
                           std::vector<RepeatDifference>* differences);

}  // namespace pacheck
