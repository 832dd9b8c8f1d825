// The fixed limit's length term (issue 16): an honest kernel that accumulates token by token in fp32 drops
// every weight below u times its running sum (swamping). Fuzz found it on dist=peaked f32 cells, where
// thousands of tokens weigh ~4e-8 next to a few hot ones: the seven serial CPU designs failed the flat
// 2^-14 f32 limit at rel_linf 6.145e-5 on `h2/1 d32 bs1 f32 ctx1,2423 ... dist=peaked`. The limit now
// grows as 2uL (accumulation_limit) where that passes the dtype's budget.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/cell.hpp"
#include "exec/runner.hpp"
#include "exec_fixtures.hpp"
#include "judge/comparator.hpp"
#include "kernels/kernel.hpp"
#include "properties/planted_kernels.hpp"

namespace pacheck {
namespace {

TEST(AccumulationLimit, GrowsAsTwoULAboveEachDtypesBudget) {
  EXPECT_EQ(accumulation_limit(0), 0.0);
  EXPECT_EQ(accumulation_limit(2423), 2423 * 0x1p-23);
  EXPECT_EQ(fixed_limit(DType::f32, 1), 0x1p-14);
  EXPECT_EQ(fixed_limit(DType::f32, 512), 0x1p-14) << "the crossover: 512 tokens x 2^-23 = 2^-14";
  EXPECT_EQ(fixed_limit(DType::f32, 2423), 2423 * 0x1p-23);
  EXPECT_EQ(fixed_limit(DType::f16, 20480), fixed_limit(DType::f16));
  EXPECT_EQ(fixed_limit(DType::f16, 32768), 32768 * 0x1p-23);
  EXPECT_EQ(fixed_limit(DType::bf16, 32768), fixed_limit(DType::bf16)) << "bf16's budget covers 163,840 tokens";
  const Tolerance fixed;
  EXPECT_EQ(fixed.limit(DType::f32, 0, false, 4096), 4096 * 0x1p-23);
  EXPECT_EQ(fixed.limit(DType::f32, 0, false), 0x1p-14) << "no length given: the dtype's budget";
  EXPECT_EQ(fixed.limit(DType::f32, 0, true, 4096), tf32_limit()) << "TF32 is wider still";
  Tolerance cal;
  cal.policy = TolerancePolicy::calibrated;
  EXPECT_EQ(cal.limit(DType::f32, 1e-6, false, 4096), 4 * 1e-6 + 0x1p-19)
      << "the emulation carries a serial fp32 accumulator: no length term";
}

RunSummary run_cell(const std::string& cell_id, const std::vector<std::string>& kernels,
                    TolerancePolicy policy = TolerancePolicy::fixed) {
  Suite s;
  s.name = "swamping";
  SuiteCell sc;
  sc.cell = parse_cell_id(cell_id);
  s.cells.push_back(sc);
  std::vector<KernelPtr> ks;
  for (const auto& name : kernels) {
    KernelPtr k = name.rfind("planted.", 0) == 0 ? prop::find_planted_kernel(name) : Registry::global().find(name);
    if (!k) throw std::runtime_error("no kernel " + name);
    ks.push_back(k);
  }
  RunOptions o;
  o.threads = 2;
  o.tolerance.policy = policy;
  return run_suite(s, ks, "cpu", o);
}

// The fuzz counterexample itself (seed 5 of the trust run's fuzz, 2026-12-02).
const std::string kSwamped = "h2/1 d32 bs1 f32 ctx1,2423 vllm seed708648 dist=peaked spare=1 padcols=0 clean";

TEST(AccumulationLimit, SerialFp32DesignsPassThePeakedCellFuzzFound) {
  const std::vector<std::string> honest = {"cpu.reference", "cpu.vector_v_masked", "cpu.online", "cpu.two_pass",
                                           "cpu.half_products", "cpu.p_in_v_dtype", "cpu.split_kv", "cpu.split_kv_lse"};
  const RunSummary s = run_cell(kSwamped, honest);
  ASSERT_EQ(s.results.size(), honest.size());
  for (const CellResult& r : s.results) {
    EXPECT_EQ(r.verdict, Verdict::pass) << r.kernel << ": " << r.detail;
    EXPECT_EQ(r.limit, 2423 * 0x1p-23) << r.kernel;
    EXPECT_LE(r.margin, 0.5) << r.kernel << " rel_linf " << r.metrics.rel_linf;
    if (r.kernel == "cpu.reference")
      EXPECT_GT(r.metrics.rel_linf, 0x1p-14) << "the flat f32 limit would fail it: this test would not see a regression";
  }
}

// What the length term costs: on the swamped cell an f16 accumulator (rel_linf 2.6e-4) sits below the
// worst honest loss 2uL (2.9e-4) and passes; tolerance cannot tell them apart there. A bf16 accumulator
// still fails it, and the f16 one fails the same geometry with normal inputs, where nothing is swamped.
TEST(AccumulationLimit, AccumulatorFaultsStillFailWhereTheyExceedTheHonestLoss) {
  const RunSummary peaked = run_cell(kSwamped, {"planted.bf16_accumulator"});
  ASSERT_EQ(peaked.results.size(), 1u);
  EXPECT_EQ(peaked.results[0].verdict, Verdict::fail) << peaked.results[0].metrics.rel_linf;
  const std::string normal = "h2/1 d32 bs1 f32 ctx1,2423 vllm seed708648 dist=normal spare=1 padcols=0 clean";
  const RunSummary s = run_cell(normal, {"planted.bf16_accumulator", "planted.f16_accumulator", "cpu.reference"});
  ASSERT_EQ(s.results.size(), 3u);
  for (const CellResult& r : s.results)
    EXPECT_EQ(r.verdict, r.kernel == "cpu.reference" ? Verdict::pass : Verdict::fail)
        << r.kernel << " rel_linf " << r.metrics.rel_linf << " limit " << r.limit;
}

// The calibrated policy on a peaked f32 cell (a fresh user's fuzz run, 2026-12-03): every serial fp32
// design errs ~7e-6 there, swamping the softmax denominator's ~1,000 weights of ~4e-8 after the hot
// token, while the emulation summed that denominator in Eigen's lane-parallel order (no swamping) and
// measured ~4e-7: the limit 3.66e-6 failed cpu.reference. The emulation's denominator is now a serial
// fp32 sum in token order, as its P.V accumulator already was.
const std::string kPeaked1025 = "h1/1 d32 bs1 f32 ctx1025 nhd seed0 dist=peaked spare=1 padcols=0 clean";

TEST(CalibratedEmulation, SerialFp32DesignsPassThePeakedCellUnderCalibrated) {
  const std::vector<std::string> honest = {"cpu.reference", "cpu.vector_v_masked", "cpu.online", "cpu.two_pass",
                                           "cpu.half_products", "cpu.p_in_v_dtype", "cpu.split_kv", "cpu.split_kv_lse"};
  const RunSummary s = run_cell(kPeaked1025, honest, TolerancePolicy::calibrated);
  ASSERT_EQ(s.results.size(), honest.size());
  for (const CellResult& r : s.results) {
    EXPECT_EQ(r.verdict, Verdict::pass) << r.kernel << ": " << r.detail;
    EXPECT_LE(r.margin, 0.5) << r.kernel << " rel_linf " << r.metrics.rel_linf << " limit " << r.limit;
    std::printf("%-22s rel_linf %.3e limit %.3e margin %.3f\n", r.kernel.c_str(), r.metrics.rel_linf, r.limit,
                r.margin);
    if (r.kernel == "cpu.reference")
      EXPECT_GT(r.metrics.rel_linf, 0x1p-19 + 4 * 4.4e-7) << "the old limit (3.66e-6) would fail it";
  }
}

TEST(CalibratedEmulation, AccumulatorFaultsStillFailThePeakedCellUnderCalibrated) {
  // (planted.drop_last_token is not one: the last token weighs ~4e-8 here, so it matches cpu.reference.)
  const RunSummary s = run_cell(kPeaked1025, {"planted.bf16_accumulator", "planted.exp2_no_log2e"},
                                TolerancePolicy::calibrated);
  ASSERT_EQ(s.results.size(), 2u);
  for (const CellResult& r : s.results)
    EXPECT_EQ(r.verdict, Verdict::fail) << r.kernel << " rel_linf " << r.metrics.rel_linf << " limit " << r.limit;
}

}  // namespace
}  // namespace pacheck
