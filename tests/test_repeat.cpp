// Issue 21: how --repeat N combines its repeats (judge/repeat.hpp's combine_repeats): which result each cell
// is reported with, and which cells are listed as flaky.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "judge/repeat.hpp"

namespace pacheck {
namespace {

CellResult result(const std::string& kernel, const std::string& cell, Verdict v) {
  CellResult r;
  r.kernel = kernel;
  r.cell_id = cell;
  r.verdict = v;
  return r;
}

RunSummary run_of(std::vector<CellResult> rs) {
  RunSummary s;
  s.results = std::move(rs);
  s.planned = s.results.size();
  s.selftest.passed = true;
  return s;
}

TEST(Repeat, AFailureInAnyRepeatIsReportedAndDifferencesListed) {
  const std::vector<KernelRole> roles{{"k", false}};
  std::vector<RunSummary> runs;
  runs.push_back(run_of({result("k", "a", Verdict::pass), result("k", "b", Verdict::pass),
                         result("k", "c", Verdict::poisoned)}));
  runs.push_back(run_of({result("k", "a", Verdict::pass), result("k", "b", Verdict::fail),
                         result("k", "c", Verdict::unwritten)}));
  runs.push_back(run_of({result("k", "a", Verdict::pass), result("k", "b", Verdict::pass),
                         result("k", "c", Verdict::poisoned)}));
  std::vector<RepeatDifference> diffs;
  const RunSummary s = combine_repeats(runs, roles, &diffs);
  ASSERT_EQ(s.results.size(), 3u);
  EXPECT_EQ(s.results[0].verdict, Verdict::pass);
  EXPECT_EQ(s.results[1].verdict, Verdict::fail) << "a flaky failure must fail the combined run";
  EXPECT_EQ(s.results[2].verdict, Verdict::poisoned) << "failing every time: the first repeat's result";
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.passed, 1);
  EXPECT_EQ(s.exit_code(), 1);
  ASSERT_EQ(diffs.size(), 2u);
  EXPECT_EQ(diffs[0].cell_id, "b");
  EXPECT_TRUE(diffs[0].outcome_differs);
  EXPECT_EQ(diffs[0].recorded, 1u);
  EXPECT_EQ(diffs[0].verdicts, (std::vector<Verdict>{Verdict::pass, Verdict::fail, Verdict::pass}));
  EXPECT_EQ(diffs[1].cell_id, "c");
  EXPECT_FALSE(diffs[1].outcome_differs);
  EXPECT_EQ(diffs[1].recorded, 0u);
}

TEST(Repeat, SameVerdictsGiveTheFirstRepeatAndNoDifference) {
  const std::vector<KernelRole> roles{{"k", false}};
  std::vector<RunSummary> runs{run_of({result("k", "a", Verdict::pass)}), run_of({result("k", "a", Verdict::pass)})};
  std::vector<RepeatDifference> diffs;
  const RunSummary s = combine_repeats(runs, roles, &diffs);
  EXPECT_TRUE(diffs.empty());
  EXPECT_EQ(s.exit_code(), 0);
}

TEST(Repeat, RefusesRepeatsOfDifferentPlans) {
  const std::vector<KernelRole> roles{{"k", false}};
  std::vector<RunSummary> runs{run_of({result("k", "a", Verdict::pass)}), run_of({result("k", "b", Verdict::pass)})};
  EXPECT_THROW(combine_repeats(runs, roles, nullptr), std::invalid_argument);
  runs[1] = run_of({});
  EXPECT_THROW(combine_repeats(runs, roles, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace pacheck
