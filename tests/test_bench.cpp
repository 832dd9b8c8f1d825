// pacheck bench on the CPU path: rows in suite order, streamed as they finish, with the preparation of later
// cases running ahead of the timing (bench/bench.cpp).
#include <gtest/gtest.h>

#include "bench/bench.hpp"
#include "suites/suite.hpp"

namespace pacheck {
namespace {

Suite small_suite() {
  return parse_suite(R"(name = "bench-test"
[[cells]]
heads = ["4/2", "4/4"]
head_sizes = 64
block_sizes = 16
dtypes = "bf16"
seq_lens = [33, 100, 250]
faults = ["clean", "V:nan@tail"]
)",
                     "bench-test.toml");
}

BenchOptions quick(int prepare_threads) {
  BenchOptions o;
  o.samples = 3;
  o.warmup = 1;
  o.min_sample_ms = 0.01;
  o.rotate_bytes = 0;
  o.prepare_threads = prepare_threads;
  return o;
}

TEST(Bench, RowsArriveInSuiteOrderAndPrepareAheadChangesNothing) {
  const Suite suite = small_suite();
  std::vector<KernelPtr> kernels = {Registry::global().find("cpu.reference"), Registry::global().find("cpu.vector_v")};
  ASSERT_TRUE(kernels[0] && kernels[1]);
  for (int threads : {1, 4}) {
    SCOPED_TRACE(threads);
    BenchOptions o = quick(threads);
    std::vector<std::string> streamed;
    int starts = 0;
    o.on_start = [&](const std::string& device, double copy_gbs) {
      ++starts;
      EXPECT_FALSE(device.empty());
      EXPECT_GT(copy_gbs, 0);
      EXPECT_TRUE(streamed.empty());
    };
    o.on_row = [&](const BenchRow& r) { streamed.push_back(r.case_id); };
    const BenchResult res = run_bench(suite, kernels, "cpu", o);
    EXPECT_EQ(starts, 1);
    // Faulted cells are not timed: 2 head layouts x 3 lengths clean rows.
    ASSERT_EQ(res.rows.size(), 6u);
    ASSERT_EQ(streamed.size(), res.rows.size());
    for (std::size_t i = 0; i < res.rows.size(); ++i) {
      EXPECT_EQ(streamed[i], res.rows[i].case_id);
      const BenchRow& r = res.rows[i];
      ASSERT_EQ(r.timings.size(), 2u);
      for (const KernelTiming& t : r.timings) {
        EXPECT_TRUE(t.ran) << t.note;
        EXPECT_EQ(t.verdict, Verdict::pass) << r.case_id;  // clean cache: the control passes too
        EXPECT_GT(t.median_us, 0);
        EXPECT_LE(t.p10_us, t.median_us);
        EXPECT_LE(t.median_us, t.p90_us);
      }
      ASSERT_TRUE(r.ratio.has_value());
      EXPECT_NEAR(*r.ratio, r.timings[0].median_us / r.timings[1].median_us, 1e-12);
      EXPECT_GT(r.kv_bytes, 0);
    }
    EXPECT_NE(res.rows[0].case_id.find("ctx33"), std::string::npos) << res.rows[0].case_id;
  }
}

TEST(Bench, KvBytesCountEverySequenceToken) {
  Suite suite = parse_suite(R"(name = "b"
[[cells]]
heads = "8/2"
head_sizes = 128
block_sizes = 16
dtypes = "f16"
seq_lens = [[10, 20, 30]]
)",
                            "b.toml");
  std::vector<KernelPtr> kernels = {Registry::global().find("cpu.reference")};
  const BenchResult res = run_bench(suite, kernels, "cpu", quick(2));
  ASSERT_EQ(res.rows.size(), 1u);
  EXPECT_EQ(res.rows[0].kv_bytes, std::int64_t{60} * 2 * 128 * 2 * 2);
  EXPECT_FALSE(res.rows[0].ratio.has_value());  // one kernel: no A/B
}

TEST(Bench, PreparationErrorsBecomeErrorRowsAndTheRestIsTimed) {
  // An impossible case fails in preparation on a worker thread: the error must reach its row as an `error`
  // (not hang, not end the bench), and the other rows are still timed.
  Suite suite = small_suite();
  ASSERT_GE(suite.cells.size(), 2u);
  suite.cells.front().cell.c.head_size = -1;
  std::vector<KernelPtr> kernels = {Registry::global().find("cpu.reference")};
  int rows_seen = 0;
  BenchOptions opt = quick(4);
  opt.on_row = [&](const BenchRow&) { ++rows_seen; };
  const BenchResult res = run_bench(suite, kernels, "cpu", opt);
  ASSERT_GE(res.rows.size(), 2u);
  EXPECT_EQ(rows_seen, static_cast<int>(res.rows.size()));
  const KernelTiming& bad = res.rows.front().timings.front();
  EXPECT_FALSE(bad.ran);
  EXPECT_EQ(bad.verdict, Verdict::error);
  EXPECT_NE(bad.note.find("preparing the case failed"), std::string::npos) << bad.note;
  for (std::size_t i = 1; i < res.rows.size(); ++i) EXPECT_TRUE(res.rows[i].timings.front().ran) << res.rows[i].case_id;
}

}  // namespace
}  // namespace pacheck
