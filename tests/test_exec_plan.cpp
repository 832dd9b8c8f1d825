// The planner alone (exec/plan.hpp): which (kernel, cell) pairs a run selects, which it settles before
// running anything, and how it groups the rest into work items per lane.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "exec_fixtures.hpp"

namespace pacheck {
namespace {

using exec_test::kClean;
using exec_test::kVNanTail;
using exec_test::PlantedCpu;
using exec_test::two_sequence_suite;
using exec_test::unowned;

/// Every job of the plan as (result index -> job), checking each result index appears at most once.
std::vector<const Job*> jobs_by_result(const Plan& p) {
  std::vector<const Job*> out(p.results.size(), nullptr);
  for (const auto& item : p.items)
    for (const auto& j : item.jobs) {
      EXPECT_LT(j.result_index, out.size());
      EXPECT_EQ(out[j.result_index], nullptr) << "two jobs for result " << j.result_index;
      out[j.result_index] = &j;
    }
  return out;
}

TEST(Plan, ShardSeedAndFilterSelectCellsKernelMajorInSuiteOrder) {
  PlantedCpu a("planted.a"), b("planted.b");
  const Suite suite = two_sequence_suite({17, 33, 48}, {kClean, kVNanTail});  // cells 0..5
  RunOptions o;
  o.shard_count = 2;
  o.shard_index = 1;
  o.seed = 99;
  const Plan p = plan_run(suite, {unowned(&a), unowned(&b)}, o);
  ASSERT_EQ(p.results.size(), 6u);  // cells 1, 3, 5 of each kernel
  const auto jobs = jobs_by_result(p);
  const int want_index[] = {1, 3, 5, 1, 3, 5};
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    ASSERT_NE(jobs[i], nullptr) << i;
    EXPECT_EQ(jobs[i]->index, want_index[i]) << i;
    EXPECT_EQ(jobs[i]->kernel, i < 3 ? static_cast<const Kernel*>(&a) : &b) << "kernel-major: " << i;
    EXPECT_EQ(jobs[i]->cell.c.seed, 99u) << "--seed overrides every cell's seed";
  }
  EXPECT_TRUE(p.settled.empty());
  EXPECT_TRUE(p.resumed.empty());

  RunOptions f;
  f.filter = std::regex("ctx33,");
  const Plan q = plan_run(suite, {unowned(&a)}, f);
  ASSERT_EQ(q.results.size(), 2u);
  for (const Job* j : jobs_by_result(q)) EXPECT_EQ(j->cell.c.seq_lens[0], 33);
}

TEST(Plan, ResumedResultsAreKeptAtTheirPositionAndNotRun) {
  PlantedCpu a("planted.a");
  const Suite suite = two_sequence_suite({17, 33}, {kClean, kVNanTail}, "resumed");
  const Cell second = suite.cells[1].for_layouts(a.layouts());
  CellResult before;
  before.kernel = a.name();
  before.cell_id = second.id();
  before.verdict = Verdict::variant;
  before.detail = "measured by an earlier run";
  RunOptions o;
  o.previous.emplace(result_key(a.name(), second.id()), before);
  const Plan p = plan_run(suite, {unowned(&a)}, o);
  ASSERT_EQ(p.results.size(), 4u);
  EXPECT_EQ(p.resumed, (std::vector<std::size_t>{1}));
  EXPECT_EQ(p.results[1].detail, "measured by an earlier run");
  EXPECT_EQ(p.results[1].verdict, Verdict::variant);
  EXPECT_EQ(p.results[1].suite, "resumed");
  EXPECT_EQ(p.results[1].index, 1);
  const auto jobs = jobs_by_result(p);
  EXPECT_EQ(jobs[1], nullptr) << "a resumed cell is not run again";
  for (std::size_t i : {0u, 2u, 3u}) EXPECT_NE(jobs[i], nullptr) << i;
  EXPECT_TRUE(p.settled.empty()) << "resumed results are not re-emitted";
}

TEST(Plan, DeclinedCellsAreSettledWithTheKernelsReason) {
  PlantedCpu a("planted.declines33", PlantedCpu::What::decline, 33);
  const Suite suite = two_sequence_suite({17, 33, 48}, {kClean});
  const Plan p = plan_run(suite, {unowned(&a)}, RunOptions{});
  EXPECT_EQ(p.settled, (std::vector<std::size_t>{1}));
  EXPECT_EQ(p.results[1].verdict, Verdict::declined);
  EXPECT_EQ(p.results[1].detail, "planted decline");
  EXPECT_EQ(p.results[1].index, 1);
  EXPECT_EQ(p.results[1].suite, "test");
  EXPECT_EQ(p.results[1].device, "") << "no kernel ran";
  const auto jobs = jobs_by_result(p);
  EXPECT_EQ(jobs[1], nullptr);
  EXPECT_NE(jobs[0], nullptr);
  EXPECT_NE(jobs[2], nullptr);
}

/// A kernel whose supports() ends the process that asks it.
class DiesWhenAsked final : public PlantedCpu {
 public:
  DiesWhenAsked() : PlantedCpu("planted.dies_when_asked") {}
  Support supports(const Case&) const override { std::abort(); }
};

TEST(Plan, IsolatedKernelsAreAskedInAChildAndAFailedAskErrorsTheirCells) {
  PlantedCpu declines("planted.declines33", PlantedCpu::What::decline, 33);
  DiesWhenAsked dies;
  const Suite suite = two_sequence_suite({17, 33}, {kClean});
  RunOptions o;
  o.isolate = [](const Kernel&) { return true; };
  o.cell_timeout_s = 30;
  const Plan p = plan_run(suite, {unowned(&declines), unowned(&dies)}, o);
  ASSERT_EQ(p.results.size(), 4u);
  EXPECT_EQ(p.settled, (std::vector<std::size_t>{1, 2, 3}));
  EXPECT_EQ(p.results[1].verdict, Verdict::declined);
  EXPECT_EQ(p.results[1].detail, "planted decline") << "the child's answer, with its reason";
  for (std::size_t i : {2u, 3u}) {
    EXPECT_EQ(p.results[i].verdict, Verdict::error) << i;
    EXPECT_NE(p.results[i].detail.find("asking planted.dies_when_asked which cells it supports failed"), std::string::npos)
        << p.results[i].detail;
  }
  ASSERT_EQ(p.items_of(Lane::isolated_cpu).size(), 1u);
  EXPECT_EQ(p.items[p.items_of(Lane::isolated_cpu)[0]].jobs.size(), 1u);
}

TEST(Plan, InProcessKernelsShareAWorkItemPerCase) {
  // Two CPU kernels reading vllm share each case; a kernel preferring nhd runs native cells in another
  // layout, so another case (and item); two GPU kernels share each case on the GPU lane.
  PlantedCpu a("planted.a"), b("planted.b"), nhd("planted.nhd", PlantedCpu::What::none, -1, PACHECK_DEVICE_CPU, {Layout::nhd});
  PlantedCpu g1("planted.g1", PlantedCpu::What::none, -1, PACHECK_DEVICE_CUDA);
  PlantedCpu g2("planted.g2", PlantedCpu::What::none, -1, PACHECK_DEVICE_CUDA);
  const Suite suite = two_sequence_suite({17, 33}, {kClean, kVNanTail});
  const Plan p = plan_run(suite, {unowned(&a), unowned(&g1), unowned(&b), unowned(&nhd), unowned(&g2)}, RunOptions{});
  const auto& cpu = p.items_of(Lane::cpu);
  const auto& gpu = p.items_of(Lane::gpu);
  ASSERT_EQ(cpu.size(), 4u);  // (17, vllm), (33, vllm), (17, nhd), (33, nhd)
  ASSERT_EQ(gpu.size(), 2u);
  EXPECT_TRUE(p.items_of(Lane::isolated_cpu).empty());
  EXPECT_TRUE(p.items_of(Lane::isolated_gpu).empty());
  for (std::size_t i : cpu) {
    const WorkItem& item = p.items[i];
    std::set<const Kernel*> kernels;
    for (const auto& j : item.jobs) {
      EXPECT_EQ(j.cell.c.id(), item.c.id()) << "a job of another case in the item";
      kernels.insert(j.kernel);
    }
    EXPECT_EQ(item.jobs.size(), item.c.layout == Layout::nhd ? 2u : 4u) << item.c.id();
    EXPECT_EQ(kernels.size(), item.c.layout == Layout::nhd ? 1u : 2u) << item.c.id();
  }
  EXPECT_EQ(p.items[cpu[0]].c.seq_lens[0], 17) << "items in suite order";
  EXPECT_EQ(p.items[cpu[1]].c.seq_lens[0], 33);
  for (std::size_t i : gpu) EXPECT_EQ(p.items[i].jobs.size(), 4u) << "both GPU kernels, both faults";
}

TEST(Plan, IsolatedGpuWorkIsOneItemPerKernelAndCase) {
  PlantedCpu g1("planted.g1", PlantedCpu::What::none, -1, PACHECK_DEVICE_CUDA);
  PlantedCpu g2("planted.g2", PlantedCpu::What::none, -1, PACHECK_DEVICE_CUDA);
  PlantedCpu c1("planted.c1"), c2("planted.c2");
  const Suite suite = two_sequence_suite({17, 33}, {kClean, kVNanTail});
  RunOptions o;
  o.isolate = [](const Kernel&) { return true; };
  const Plan p = plan_run(suite, {unowned(&g1), unowned(&g2), unowned(&c1), unowned(&c2)}, o);
  const auto& iso_gpu = p.items_of(Lane::isolated_gpu);
  ASSERT_EQ(iso_gpu.size(), 4u);
  for (std::size_t i : iso_gpu) {
    const WorkItem& item = p.items[i];
    ASSERT_EQ(item.jobs.size(), 2u) << "one kernel's two faults";
    EXPECT_EQ(item.jobs[0].kernel, item.jobs[1].kernel);
  }
  // Isolated CPU work is still shared per case (the parent prepares it once for every kernel's child).
  const auto& iso_cpu = p.items_of(Lane::isolated_cpu);
  ASSERT_EQ(iso_cpu.size(), 2u);
  for (std::size_t i : iso_cpu) EXPECT_EQ(p.items[i].jobs.size(), 4u);
  EXPECT_TRUE(p.items_of(Lane::cpu).empty());
  EXPECT_TRUE(p.items_of(Lane::gpu).empty());
}

TEST(Plan, LaneFollowsDeviceAndIsolation) {
  PlantedCpu c("planted.c"), g("planted.g", PlantedCpu::What::none, -1, PACHECK_DEVICE_CUDA);
  EXPECT_EQ(lane_of(c, false), Lane::cpu);
  EXPECT_EQ(lane_of(g, false), Lane::gpu);
  EXPECT_EQ(lane_of(c, true), Lane::isolated_cpu);
  EXPECT_EQ(lane_of(g, true), Lane::isolated_gpu);
}

}  // namespace
}  // namespace pacheck
