// Scheduling (exec/in_process.hpp, exec/runner.hpp): GPU work items spread over devices by position, a
// lost device context ends only that device's cells, and run_suite reports cells settled while planning
// before any other.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "exec_fixtures.hpp"

namespace pacheck {
namespace {

using exec_test::kClean;
using exec_test::PlantedCpu;
using exec_test::two_sequence_suite;
using exec_test::unowned;

/// The CPU backend under another name: stands in for one GPU device of a multi-device run (the planted
/// "GPU" kernels below run on host memory).
class NamedCpuBackend final : public Backend {
 public:
  explicit NamedCpuBackend(std::string name) : name_(std::move(name)), cpu_(make_cpu_backend()) {}
  std::string name() const override { return name_; }
  pacheck_device device() const override { return PACHECK_DEVICE_CUDA; }
  std::string description() const override { return "host memory standing in for " + name_; }
  void* alloc(std::size_t bytes) override { return cpu_->alloc(bytes); }
  void release(void* p) override { cpu_->release(p); }
  void upload(void* dst, const void* src, std::size_t bytes) override { cpu_->upload(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { cpu_->download(dst, src, bytes); }
  void sync() override { cpu_->sync(); }
  void* stream() override { return cpu_->stream(); }
  double time_ms(const std::function<void()>& fn) override { return cpu_->time_ms(fn); }
  double copy_bandwidth_gbs(std::size_t bytes, int reps) override { return cpu_->copy_bandwidth_gbs(bytes, reps); }

 private:
  std::string name_;
  std::unique_ptr<Backend> cpu_;
};

GpuDevices two_fake_devices() {
  GpuDevices d;
  d.specs = {"fake:0", "fake:1"};
  for (const auto& s : d.specs) d.in_process.push_back(std::make_unique<NamedCpuBackend>(s));
  return d;
}

/// Runs the plan in process and returns how many results were emitted.
int run_plan(Plan& p, const GpuDevices& gpus, int threads) {
  RunOptions o;
  o.threads = threads;
  std::mutex mu;
  int emitted = 0;
  run_in_process(p, gpus, o, [&](CellResult&) {
    std::lock_guard<std::mutex> lock(mu);
    ++emitted;
  });
  return emitted;
}

TEST(InProcess, GpuCasesGoToDevicesByPositionWhateverTheThreads) {
  PlantedCpu g("planted.gpu", PlantedCpu::What::none, -1, PACHECK_DEVICE_CUDA);
  const Suite suite = two_sequence_suite({17, 33, 48, 64, 100}, {kClean});
  for (int threads : {1, 3}) {
    Plan p = plan_run(suite, {unowned(&g)}, RunOptions{});
    const GpuDevices gpus = two_fake_devices();
    EXPECT_EQ(run_plan(p, gpus, threads), 5);
    for (std::size_t i = 0; i < p.results.size(); ++i) {
      EXPECT_EQ(p.results[i].verdict, Verdict::pass) << p.results[i].detail;
      EXPECT_EQ(p.results[i].index, static_cast<int>(i));
      EXPECT_EQ(p.results[i].device, gpus.specs[gpu_device_for(i, 2)]) << "case " << i << ", threads " << threads;
    }
  }
}

TEST(InProcess, ALostContextEndsOnlyItsOwnDevicesCells) {
  // GPU case 1 (ctx33) runs on fake:1 and loses its context: fake:1's later case (3) is not run, fake:0's
  // cases and the CPU kernel's cells all are. One thread, so "later" is the queue order.
  PlantedCpu g("planted.gpu", PlantedCpu::What::fatal_error, 33, PACHECK_DEVICE_CUDA);
  PlantedCpu c("planted.cpu", PlantedCpu::What::fatal_error, 33);
  Plan p = plan_run(two_sequence_suite({17, 33, 48, 64, 100}, {kClean}), {unowned(&g), unowned(&c)}, RunOptions{});
  EXPECT_EQ(run_plan(p, two_fake_devices(), 1), 10);
  const std::vector<Verdict> want_gpu{Verdict::pass, Verdict::error, Verdict::pass, Verdict::error, Verdict::pass};
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(p.results[i].verdict, want_gpu[i]) << "GPU case " << i;
  EXPECT_EQ(p.results[1].detail, "planted illegal address");
  EXPECT_EQ(p.results[3].detail, "not run: the device context was lost by an earlier fatal error");
  EXPECT_EQ(p.results[3].device, "") << "no kernel ran";
  for (std::size_t i = 5; i < 10; ++i)
    EXPECT_EQ(p.results[i].verdict, i == 6 ? Verdict::error : Verdict::pass) << "CPU cells run on: " << i;
}

TEST(RunSuite, CellsSettledWhilePlanningAreReportedFirstAndResumedOnesNever) {
  PlantedCpu k("planted.declines33", PlantedCpu::What::decline, 33);
  const Suite suite = two_sequence_suite({17, 33, 48, 64}, {kClean});
  RunOptions o;
  o.threads = 2;
  const Cell resumed = suite.cells[3].for_layouts(k.layouts());
  CellResult before;
  before.verdict = Verdict::pass;
  before.detail = "earlier";
  o.previous.emplace(result_key(k.name(), resumed.id()), before);
  std::vector<std::string> order;
  std::vector<int> done;
  o.on_result = [&](const CellResult& r) { order.push_back(r.cell_id); };
  o.on_progress = [&](int d, int total) {
    done.push_back(d);
    EXPECT_EQ(total, 4);
  };
  const RunSummary s = run_suite(suite, {unowned(&k)}, "cpu", o);
  ASSERT_EQ(order.size(), 3u) << "the resumed cell is not reported again";
  EXPECT_EQ(order[0], suite.cells[1].for_layouts(k.layouts()).id()) << "the declined cell comes first";
  EXPECT_EQ(done, (std::vector<int>{2, 3, 4})) << "counting from the resumed cell";
  ASSERT_EQ(s.results.size(), 4u);
  EXPECT_EQ(s.results[1].verdict, Verdict::declined);
  EXPECT_EQ(s.results[3].detail, "earlier");
  for (const auto& r : s.results) EXPECT_EQ(r.suite, "test");
}

}  // namespace
}  // namespace pacheck
