// Issue 21: run_suite's rows in plan order (on_result_in_order), and a run stopped between cells
// (RunOptions::stop: SIGINT/SIGTERM, --fail-fast) with its isolated children killed and reaped.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "exec/runner.hpp"
#include "exec/watchdog.hpp"
#include "exec_fixtures.hpp"

namespace pacheck {
namespace {

using exec_test::kClean;
using exec_test::kVNanTail;
using exec_test::unowned;

std::vector<int> lengths(int n) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(17 + 5 * i);
  return out;
}

/// "kernel|cell id" of each result, in order.
std::vector<std::string> keys(const std::vector<CellResult>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs) out.push_back(r.kernel + "|" + r.cell_id);
  return out;
}

/// cpu.reference that sleeps `ms` on every cell whose first length is `slow_len` (so later cells finish
/// first on other threads), and hangs for good there when `ms` < 0.
class Slow : public Kernel {
 public:
  Slow(std::string name, int slow_len, int ms) : name_(std::move(name)), slow_len_(slow_len), ms_(ms) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "slow on one length"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args& a) const override {
    if (a.seq_lens[0] == slow_len_) {
      if (ms_ < 0)
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    }
    Registry::global().find("cpu.reference")->run(a);
  }

 private:
  std::string name_;
  int slow_len_, ms_;
};

TEST(RunOrder, InOrderCallbackFollowsThePlanWhateverTheThreads) {
  // The first cell is slow: with 4 threads every later cell finishes before it, so completion order is not
  // plan order; on_result_in_order must still give plan order (the console's rows).
  const Suite suite = exec_test::two_sequence_suite(lengths(12), {kClean, kVNanTail});
  Slow slow("planted.slow_first", 17, 300);
  const KernelPtr online = Registry::global().find("cpu.online");
  RunOptions o;
  o.threads = 4;
  std::vector<CellResult> finished, in_order;
  o.on_result = [&](const CellResult& r) { finished.push_back(r); };
  o.on_result_in_order = [&](const CellResult& r) { in_order.push_back(r); };
  const RunSummary s = run_suite(suite, {unowned(&slow), online}, "cpu", o);
  ASSERT_FALSE(s.stopped);
  EXPECT_EQ(s.planned, s.results.size());
  EXPECT_EQ(keys(in_order), keys(s.results));
  EXPECT_NE(keys(finished), keys(s.results)) << "the slow first cell did not finish last: the test shows nothing";
}

TEST(RunOrder, ResumedResultsAreSkippedNotWaitedFor) {
  const Suite suite = exec_test::two_sequence_suite(lengths(6), {kClean});
  const KernelPtr ref = Registry::global().find("cpu.reference");
  RunOptions first;
  first.threads = 2;
  const RunSummary whole = run_suite(suite, {ref}, "cpu", first);
  RunOptions o;
  o.threads = 2;
  for (std::size_t i : {0u, 3u}) o.previous[result_key(whole.results[i].kernel, whole.results[i].cell_id)] = whole.results[i];
  std::vector<CellResult> in_order;
  o.on_result_in_order = [&](const CellResult& r) { in_order.push_back(r); };
  const RunSummary s = run_suite(suite, {ref}, "cpu", o);
  std::vector<CellResult> want = whole.results;
  want.erase(want.begin() + 3);
  want.erase(want.begin());
  EXPECT_EQ(keys(in_order), keys(want));
}

TEST(RunStop, NoCellStartsAfterTheStopAndTheFinishedOnesAreKept) {
  const Suite suite = exec_test::two_sequence_suite(lengths(20), {kClean});
  const KernelPtr ref = Registry::global().find("cpu.reference");
  RunOptions o;
  o.threads = 1;
  std::atomic<int> done{0};
  std::vector<CellResult> in_order;
  o.on_result = [&](const CellResult&) { ++done; };
  o.on_result_in_order = [&](const CellResult& r) { in_order.push_back(r); };
  o.stop = [&] { return done >= 3; };
  const RunSummary s = run_suite(suite, {ref}, "cpu", o);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.planned, 20u);
  EXPECT_EQ(s.results.size(), 3u) << "one thread: the stop is seen before the fourth cell starts";
  EXPECT_EQ(keys(in_order), keys(s.results));
  int counted = 0;
  for (int n : s.verdicts) counted += n;
  EXPECT_EQ(counted, 3) << "the summary counts the finished results only";
}

TEST(RunStop, IsolatedChildrenRunningACellAreKilledAndReaped) {
  // The second cell hangs (cell timeout 600 s); a stop one second in must end the run within seconds and
  // leave no child process, running or zombie.
  const Suite suite = exec_test::two_sequence_suite(lengths(4), {kClean});
  Slow hang("planted.hang_second", 22, -1);
  RunOptions o;
  o.threads = 1;
  o.isolate = [](const Kernel&) { return true; };
  o.cell_timeout_s = 600;
  std::atomic<bool> stop{false};
  o.stop = [&] { return stop.load(); };
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    stop = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  const RunSummary s = run_suite(suite, {unowned(&hang)}, "cpu", o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stopper.join();
  EXPECT_LT(seconds, 30) << "the hung child was not killed at the stop";
  EXPECT_TRUE(s.stopped);
  ASSERT_EQ(s.results.size(), 1u);
  EXPECT_EQ(s.results[0].verdict, Verdict::pass);
  int status = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1) << "a child process is left";
  EXPECT_EQ(errno, ECHILD);
}

// Issue 46: a run that planned results and has fewer (a process cut short, a stop) never exits 0.
TEST(RunSummaryExit, FewerResultsThanPlannedFail) {
  RunSummary s;
  s.selftest.passed = true;
  summarize(s, {});
  EXPECT_EQ(s.exit_code(), 0);
  s.planned = 3;
  EXPECT_EQ(s.exit_code(), 1) << "planned 3, finished none";
}

// Issue 46: --no-isolate's watchdog. A watched call past its timeout ends the process through on_timeout,
// naming the call; calls that return in time, and kernels not watched, are never reported.
TEST(CallWatchdog, EndsTheProcessForACallPastItsTimeout) {
  auto all = [](const Kernel&) { return true; };
  EXPECT_EXIT(
      {
        CallWatchdog dog(0.2, all, [](const std::string& what, double seconds) {
          std::fprintf(stderr, "ended: %s after %g s\n", what.c_str(), seconds);
          std::_Exit(7);
        });
        const CallWatchdog::Watch w = dog.watch("a slow call");
        std::this_thread::sleep_for(std::chrono::seconds(20));
      },
      ::testing::ExitedWithCode(7), "ended: a slow call after 0.2 s");
  CallWatchdog dog(0.2, all, [](const std::string&, double) { std::_Exit(9); });
  for (int i = 0; i < 6; ++i) {
    const CallWatchdog::Watch w = dog.watch("a quick call");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // nothing registered: nothing to end
  CallWatchdog none(0.01, [](const Kernel&) { return false; }, [](const std::string&, double) { std::_Exit(9); });
  const KernelPtr k = Registry::global().find("cpu.reference");
  ASSERT_NE(k, nullptr);
  EXPECT_FALSE(none.watches(*k));
  const CallWatchdog::Watch inert = watch_call(&none, *k, [] { return std::string("never"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

}  // namespace
}  // namespace pacheck
