// State across calls (issue 45; shared/docs/fault-classes.md section 7): `pacheck run` reuses a worker's
// buffers across the cells of one shape (exec/plan.hpp's chains, exec/guarded_run.hpp's BufferPool), in
// suite order, so a kernel that replays an output cached for the same addresses (cpu.replay_output) or keeps
// its running max from the previous call (cpu.stale_max) fails the cells that follow a contrasting case, and
// the runner names the cause `stateful` (exec/execute.hpp). Honest kernels give the same results as before.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "exec/runner.hpp"
#include "exec_fixtures.hpp"

namespace pacheck {
namespace {

using exec_test::kClean;
using exec_test::kVNanTail;

/// Cases of one shape (h4/1 d64 bs16 bf16, seq_lens {700, 77}) with the given distributions, in that order,
/// clean and with NaN in the V tail; `between` puts a case of another shape between each two.
Suite contrast_suite(const std::vector<Dist>& dists, bool between = false) {
  Suite s;
  s.name = "contrast";
  for (Dist d : dists) {
    for (const FaultSpec& f : {kClean, kVNanTail}) {
      SuiteCell sc;
      sc.cell = Cell{Case{.num_heads = 4, .num_kv_heads = 1, .head_size = 64, .block_size = 16, .seq_lens = {700, 77}}, f};
      sc.cell.c.dist = d;
      s.cells.push_back(sc);
    }
    if (between) s.cells.push_back(exec_test::two_sequence_cell(37, kClean));
  }
  return s;
}

RunSummary run(const Suite& suite, const std::vector<std::string>& names, int threads, bool everywhere = false) {
  std::vector<KernelPtr> kernels;
  for (const std::string& n : names) kernels.push_back(Registry::global().find(n));
  RunOptions o;
  o.threads = threads;
  o.controls_everywhere = everywhere;
  return run_suite(suite, kernels, "cpu", o);
}

const CellResult& result(const RunSummary& s, const std::string& kernel, const std::string& cell_id) {
  for (const CellResult& r : s.results)
    if (r.kernel == kernel && r.cell_id == cell_id) return r;
  throw std::runtime_error("no result for " + kernel + " " + cell_id);
}

// The peaked case runs on the buffers the far_above case (logits 4 orders of magnitude above) was just run on:
// both controls fail each of its cells, stateful, and pass the far_above case's; honest kernels pass all.
TEST(StateControls, CaughtAfterAContrastingCaseOfTheSameShapeAndNamedStateful) {
  for (int threads : {1, 2})
    for (bool between : {false, true}) {
      const Suite suite = contrast_suite({Dist::far_above, Dist::peaked}, between);
      const RunSummary s = run(suite, {"cpu.reference", "cpu.online", "cpu.replay_output", "cpu.stale_max"}, threads);
      EXPECT_FALSE(s.blind) << "threads " << threads;
      EXPECT_EQ(s.failed, 0) << "threads " << threads;  // caught control cells are not failures of the run
      int caught = 0;
      for (const CellResult& r : s.results) {
        SCOPED_TRACE(r.kernel + " " + r.cell_id);
        const bool control = r.kernel == "cpu.replay_output" || r.kernel == "cpu.stale_max";
        const bool after = r.case_id.find("dist=peaked") != std::string::npos;
        if (control && after) {
          EXPECT_TRUE(r.expected_fail);
          EXPECT_EQ(r.verdict, Verdict::stateful) << r.detail;
          EXPECT_NE(r.detail.find("the output depends on earlier calls"), std::string::npos) << r.detail;
          ++caught;
        } else if (control && r.case_id.find("far_above") != std::string::npos) {
          EXPECT_EQ(r.verdict, Verdict::pass) << r.detail;  // history for the peaked case: run, and honest there
        } else if (!control) {
          EXPECT_EQ(r.verdict, Verdict::pass) << r.detail;
        }
      }
      EXPECT_EQ(caught, 4) << "threads " << threads;
    }
}

// Without the contrasting case before it the same cells pass: the failures above are the history's (the
// case's own earlier calls leave its own output and maxima, which change nothing). The controls' cells are
// then not_run (nothing they must fail), and with --controls-everywhere they pass.
TEST(StateControls, HonestOnTheFirstCaseOnItsBuffers) {
  const Suite suite = contrast_suite({Dist::peaked});
  const RunSummary s = run(suite, {"cpu.replay_output", "cpu.stale_max"}, 1);
  for (const CellResult& r : s.results) EXPECT_EQ(r.verdict, Verdict::not_run) << r.kernel << " " << r.cell_id;
  const RunSummary all = run(suite, {"cpu.replay_output", "cpu.stale_max"}, 1, /*everywhere=*/true);
  for (const CellResult& r : all.results) EXPECT_EQ(r.verdict, Verdict::pass) << r.kernel << " " << r.cell_id << r.detail;
}

// The other order: a case of small logits, then far_above. Each far_above row's max is above what the
// peaked case left, so cpu.stale_max passes both; cpu.replay_output replays the first case's output for the
// second. Every cell fails exactly where the controls' expected failures say.
TEST(StateControls, StaleMaxNeedsTheLargerLogitsFirst) {
  const Suite suite = contrast_suite({Dist::peaked, Dist::far_above});
  const RunSummary s = run(suite, {"cpu.replay_output", "cpu.stale_max"}, 1, /*everywhere=*/true);
  for (const CellResult& r : s.results) {
    SCOPED_TRACE(r.kernel + " " + r.cell_id);
    const bool second = r.case_id.find("far_above") != std::string::npos;
    EXPECT_EQ(r.expected_fail, second && r.kernel == "cpu.replay_output");
    EXPECT_EQ(is_failure(r.verdict), r.expected_fail) << verdict_name(r.verdict) << ": " << r.detail;
  }
}

// A case whose output lies close to the first case's: soft caps of 50, then 30, on normal logits (the variants
// suite has this pair, one after the other on one shape). cpu.replay_output replays the first output for the
// second case, which its limit accepts (the two lie about 6e-3 apart, bf16's limit is 1.95e-2): it passes, and
// its expected failures leave the cell out (it was counted missed, and selftest instrument blind).
TEST(StateControls, ReplayOfAnOutputCloseToTheCellsOwnIsNoExpectedFailure) {
  Suite suite = contrast_suite({Dist::normal, Dist::normal});
  for (std::size_t i = 0; i < suite.cells.size(); ++i) suite.cells[i].cell.c.logits_soft_cap = i < 2 ? 50.0f : 30.0f;
  const RunSummary s = run(suite, {"cpu.replay_output"}, 1, /*everywhere=*/true);
  ASSERT_EQ(s.results.size(), 4u);
  for (const CellResult& r : s.results) {
    SCOPED_TRACE(r.cell_id);
    EXPECT_FALSE(r.expected_fail);
    EXPECT_EQ(r.verdict, Verdict::pass) << r.detail;
  }
  EXPECT_FALSE(s.blind);
}

// A pool hands a call the previous call's buffers when the sizes match, and new ones otherwise.
TEST(BufferPool, SameSizesSameAddresses) {
  const auto b = make_cpu_backend();
  BufferPool pool(*b);
  void* a = pool.take(0, 1000);
  void* out = pool.take(1, 64);
  EXPECT_EQ(pool.take(0, 1000), a);
  EXPECT_EQ(pool.take(1, 64), out);
  EXPECT_NE(pool.take(0, 2000), a);  // allocated before the old one is freed
}

// Chains: the items of one buffer shape run one after another on one worker, in suite order, whatever lies
// between them in the suite; the first item of each chain is not `chained`.
TEST(Plan, ItemsOfOneShapeFormOneChainInSuiteOrder) {
  const Suite suite = contrast_suite({Dist::far_above, Dist::peaked, Dist::normal}, /*between=*/true);
  RunOptions o;
  const Plan p = plan_run(suite, {Registry::global().find("cpu.reference")}, o);
  const std::vector<std::size_t>& lane = p.items_of(Lane::cpu);
  ASSERT_EQ(lane.size(), 4u);  // three contrast cases and the case between them
  EXPECT_EQ(p.items[lane[0]].c.dist, Dist::far_above);
  EXPECT_EQ(p.items[lane[1]].c.dist, Dist::peaked);
  EXPECT_EQ(p.items[lane[2]].c.dist, Dist::normal);
  EXPECT_FALSE(p.items[lane[0]].chained);
  EXPECT_TRUE(p.items[lane[1]].chained);
  EXPECT_TRUE(p.items[lane[2]].chained);
  EXPECT_FALSE(p.items[lane[3]].chained);
}

}  // namespace
}  // namespace pacheck
