// execute_cell alone (exec/execute.hpp): the clean-twin baseline is computed once per case and kernel and
// shared by its faulted cells, a difference from it has its cause named, and kernel and harness errors
// become `error` results.
#include <gtest/gtest.h>

#include "exec_fixtures.hpp"

namespace pacheck {
namespace {

using exec_test::kClean;
using exec_test::kKBigAll;
using exec_test::kVNanTail;
using exec_test::PlantedCpu;
using exec_test::two_sequence_cell;

Cell cell_of(int len, const FaultSpec& f) { return two_sequence_cell(len, f).cell; }

/// A counting kernel, a CPU backend and the prepared case of cells of seq_lens {37, 32}.
struct CountingCase {
  PlantedCpu kernel{"planted.counting"};
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  CaseData data = prepare_case(cell_of(37, kClean).c, RunOptions{});
  Execution run(const FaultSpec& f, CleanTwin& twin) {
    return execute_cell(data, kernel, cell_of(37, f), *cpu, twin, Tolerance{});
  }
};

TEST(ExecuteCell, FaultedCellsOfACaseShareOneCleanTwin) {
  CountingCase t;
  CleanTwin twin;
  const Execution a = t.run(kVNanTail, twin);
  EXPECT_EQ(t.kernel.calls, 2) << "the clean twin, then the faulted call";
  ASSERT_TRUE(twin.bits.has_value());
  EXPECT_EQ(a.result.verdict, Verdict::pass) << a.result.detail;
  EXPECT_GT(a.poisoned, 0);
  EXPECT_EQ(a.result.device, "cpu");
  EXPECT_NO_THROW(a.rethrow()) << "judged: nothing to rethrow";
  const Execution b = t.run(kKBigAll, twin);
  EXPECT_EQ(t.kernel.calls, 3) << "the second faulted cell reuses the twin";
  EXPECT_EQ(b.result.verdict, Verdict::pass) << b.result.detail;
}

TEST(ExecuteCell, ACleanCellsRunIsTheTwin) {
  CountingCase t;
  CleanTwin twin;
  const Execution c = t.run(kClean, twin);
  EXPECT_EQ(t.kernel.calls, 1);
  ASSERT_TRUE(twin.bits.has_value());
  EXPECT_EQ(*twin.bits, c.raw.bits);
  EXPECT_EQ(c.poisoned, 0);
  t.run(kVNanTail, twin);
  EXPECT_EQ(t.kernel.calls, 2) << "no second clean call";
}

TEST(ExecuteCell, TheInvarianceCheckComparesWithTheTwinItIsGiven) {
  // A twin that differs in one element makes a correct kernel's faulted cell differ: the baseline given is
  // the one judged against, not a fresh clean call. Its cause is then named: two clean re-runs here agree
  // with each other and the faulted run, not with that twin, so the twin's call looks like one an earlier
  // call changed (stateful), with or without fresh processes (whose clean and faulted runs agree).
  CountingCase t;
  CleanTwin twin;
  t.run(kVNanTail, twin);
  (*twin.bits)[5] ^= 1u;
  const int before = t.kernel.calls;
  const Execution e = t.run(kVNanTail, twin);
  EXPECT_EQ(e.result.variant_elements, 1);
  EXPECT_EQ(e.result.verdict, Verdict::stateful) << e.result.detail;
  EXPECT_NE(e.result.detail.find("no fresh process"), std::string::npos) << e.result.detail;
  EXPECT_EQ(t.kernel.calls - before, 1 + kCauseReruns) << "the faulted call, then the re-runs";

  const FreshProcesses server({&t.kernel}, 30);
  ExecuteOptions how;
  how.fresh = &server;
  const Execution f = execute_cell(t.data, t.kernel, cell_of(37, kVNanTail), *t.cpu, twin, Tolerance{}, how);
  EXPECT_EQ(f.result.verdict, Verdict::stateful) << f.result.detail;
  EXPECT_NE(f.result.detail.find("clean-cache run differs in 1 element, its faulted run in 0 elements"),
            std::string::npos)
      << f.result.detail;
  ASSERT_TRUE(twin.fresh.has_value()) << "the fresh clean runs are kept with the twin";
  EXPECT_EQ(twin.fresh->size(), static_cast<std::size_t>(kFreshCleanRuns));
}

TEST(ExecuteCell, AFaultedCacheGivenIsTheOneRun) {
  // cpu.vector_v reads the V tail of a straddling final block: NaN there shows in its output, a K poison
  // does not. Given K's cache under the V-tail cell's name, the call reads the cache given.
  const KernelPtr vv = Registry::global().find("cpu.vector_v");
  auto cpu = make_cpu_backend();
  const Cell cell = cell_of(37, kVNanTail);
  const CaseData data = prepare_case(cell.c, RunOptions{});
  CleanTwin twin;
  EXPECT_TRUE(is_failure(execute_cell(data, *vv, cell, *cpu, twin, Tolerance{}).result.verdict));
  const FaultedCache k_poisoned = faulted_cache(data.c, data.cache, kKBigAll);
  ASSERT_GT(k_poisoned.poisoned, 0);
  ExecuteOptions how;
  how.faulted = &k_poisoned;
  const Execution e = execute_cell(data, *vv, cell, *cpu, twin, Tolerance{}, how);
  EXPECT_EQ(e.result.verdict, Verdict::pass) << e.result.detail;
  EXPECT_EQ(e.poisoned, k_poisoned.poisoned);
}

/// The detail of a poisoned cell whose clean twin's run threw `what`.
std::string twin_failed(const Cell& cell, const std::string& what) {
  return "the clean twin '" + Cell{cell.c, FaultSpec{}}.id() +
         "' (the same case, clean cache), which this cell is compared against bitwise, could not run: " + what;
}

TEST(ExecuteCell, ErrorsBecomeErrorResults) {
  struct Row {
    PlantedCpu::What what;
    ExecError error;
    const char* detail;
  };
  auto cpu = make_cpu_backend();
  for (const Row row : {Row{PlantedCpu::What::kernel_error, ExecError::kernel, "planted launch failure"},
                        Row{PlantedCpu::What::fatal_error, ExecError::fatal, "planted illegal address"},
                        Row{PlantedCpu::What::harness_error, ExecError::harness, "planted host failure"}}) {
    PlantedCpu k("planted.throws", row.what, 37);
    for (const FaultSpec& f : {kClean, kVNanTail}) {
      const Cell cell = cell_of(37, f);
      const CaseData data = prepare_case(cell.c, RunOptions{});
      CleanTwin twin;
      const Execution e = execute_cell(data, k, cell, *cpu, twin, Tolerance{});
      // A poisoned cell runs its clean twin first: a kernel error there is named as the twin's (a harness
      // error is pacheck's own and keeps its text).
      const std::string detail = f.clean() || row.error == ExecError::harness ? std::string(row.detail) : twin_failed(cell, row.detail);
      EXPECT_EQ(e.result.verdict, Verdict::error) << row.detail;
      EXPECT_EQ(e.error, row.error) << row.detail;
      EXPECT_EQ(e.result.detail, detail);
      EXPECT_EQ(e.result.cell_id, cell.id());
      EXPECT_EQ(e.result.kernel, "planted.throws");
      EXPECT_EQ(e.result.device, "cpu") << "the device the failed call ran on";
      EXPECT_TRUE(e.raw.bits.empty());
      EXPECT_FALSE(twin.bits.has_value()) << "a failed call leaves no baseline";
      // rethrow() gives back the exception a caller without error results (the properties) expects.
      try {
        e.rethrow();
        ADD_FAILURE() << "rethrow() returned for " << row.detail;
      } catch (const KernelError& err) {
        EXPECT_NE(row.error, ExecError::harness) << row.detail;
        EXPECT_EQ(err.fatal, row.error == ExecError::fatal) << row.detail;
        EXPECT_EQ(err.what(), detail);
      } catch (const std::runtime_error& err) {
        EXPECT_EQ(row.error, ExecError::harness) << row.detail;
        EXPECT_STREQ(err.what(), row.detail);
      }
    }
  }
}

TEST(ExecuteCell, RunCellReportsAKernelErrorAsAVerdict) {
  // pacheck repro: a kernel error is the cell's verdict (exit 1), not a usage error.
  PlantedCpu k("planted.throws", PlantedCpu::What::kernel_error, 37);
  auto cpu = make_cpu_backend();
  CaseData data;
  const auto [r, raw] = run_cell(cell_of(37, kVNanTail), k, *cpu, RunOptions{}, &data);
  EXPECT_EQ(r.verdict, Verdict::error);
  EXPECT_EQ(r.detail, twin_failed(cell_of(37, kVNanTail), "planted launch failure"));
  EXPECT_TRUE(raw.out.empty());
  EXPECT_FALSE(data.ref.out.empty()) << "the prepared case still comes back";
}

}  // namespace
}  // namespace pacheck
