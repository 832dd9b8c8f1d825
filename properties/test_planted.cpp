// Every property shown failing on a planted fault it is meant to catch, with a shrunk counterexample that
// names the fault's trigger: cpu.vector_v (the negative control) for tail-poison, and the planted
// kernels of properties/planted_kernels.cpp for the rest.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <utility>

#include "properties/planted_kernels.hpp"
#include "properties/properties.hpp"

namespace {

using namespace pacheck;
using namespace pacheck::prop;

/// Cases, seed and size from RapidCheck's configuration (RC_PARAMS; test_main.cpp sets the CI defaults).
RunParams rc_params() {
  const auto& tp = rc::detail::configuration().testParams;
  RunParams p;
  p.seed = tp.seed;
  p.cases = tp.maxSuccess;
  p.max_size = tp.maxSize;
  return p;
}

KernelPtr kernel(const std::string& name) {
  KernelPtr k = Registry::global().find(name);
  return k ? k : find_planted_kernel(name);
}

/// Runs property `p` on kernel `name`, expecting it to fail; prints and returns the shrunk counterexample.
std::optional<Counterexample> expect_caught(Property p, const std::string& name, double* seconds = nullptr) {
  const KernelPtr k = kernel(name);
  if (!k) {
    ADD_FAILURE() << "no kernel " << name;
    return std::nullopt;
  }
  const PropertyRun run = run_property(p, make_target(k), rc_params());
  std::cout << property_name(p) << " on " << name << ": " << (run.passed ? "held" : "FAILED") << " after " << run.cases
            << " cases, " << run.seconds << " s\n"
            << (run.counterexample ? run.counterexample->message : run.message) << "\n";
  if (seconds) *seconds = run.seconds;
  EXPECT_FALSE(run.passed) << property_name(p) << " did not catch " << name << " in " << run.cases << " cases";
  EXPECT_TRUE(run.counterexample.has_value()) << run.message;
  if (run.counterexample) {
    const Counterexample& cx = *run.counterexample;
    EXPECT_EQ(cx.repro, "pacheck repro '" + cx.cell.id() + "' --kernel " + name);
    EXPECT_NE(cx.message.find(cx.repro), std::string::npos);
    EXPECT_NE(cx.message.find("case   " + cx.cell.c.id()), std::string::npos);
    // The printed ids must read back to the same cell, or the repro line would run something else.
    EXPECT_EQ(parse_case_id(cx.cell.c.id()).id(), cx.cell.c.id());
  }
  return run.counterexample;
}

/// The verdict `pacheck repro` gives the counterexample's cell (the same run_cell it calls).
Verdict repro_verdict(const Cell& cell, const std::string& name) {
  auto backend = make_cpu_backend();
  return run_cell(cell, *kernel(name), *backend, RunOptions{}).first.verdict;
}

/// Runs the counterexample's printed `pacheck repro` line with the pacheck binary of this build: its exit
/// status and stdout (stderr appended).
std::pair<int, std::string> run_repro_line(const Counterexample& cx) {
  const std::string prefix = "pacheck ";
  EXPECT_EQ(cx.repro.rfind(prefix, 0), 0u) << cx.repro;
  const std::string out = ::testing::TempDir() + "pacheck_test_planted_repro." + std::to_string(::getpid()) + ".out";
  const std::string cmd = std::string(PACHECK_BINARY) + " " + cx.repro.substr(prefix.size()) + " >" + out + " 2>&1";
  const int st = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, text.str()};
}

/// Runs property `p` on `name` with `cases` cases and expects it to hold.
void expect_holds(Property p, const std::string& name, int cases) {
  RunParams params = rc_params();
  params.cases = cases;
  const PropertyRun run = run_property(p, make_target(kernel(name)), params);
  EXPECT_TRUE(run.passed) << property_name(p) << " on " << name << ":\n" << run.message;
  EXPECT_EQ(run.cases, cases);
}

int max_len(const Case& c) { return *std::max_element(c.seq_lens.begin(), c.seq_lens.end()); }

}  // namespace

// Acceptance of issue 5: the negative control is caught with a straddling length and a V poison, in
// under a minute, and `pacheck repro` on the printed cell fails it too.
TEST(NegativeControl, CpuVectorVFailsTailPoisonWithStraddlingLengthAndVPoison) {
  double seconds = 0;
  const auto cx = expect_caught(Property::tail_poison, "cpu.vector_v", &seconds);
  ASSERT_TRUE(cx);
  EXPECT_TRUE(cx->cell.c.straddles()) << cx->cell.id();
  EXPECT_NE(cx->cell.fault.target, pacheck::Target::k) << cx->cell.id();
  EXPECT_TRUE(poison_is_nonfinite(cx->cell.fault.poison)) << cx->cell.id();
  EXPECT_TRUE(poisons_v_tail(cx->cell)) << cx->cell.id();
  EXPECT_EQ(cx->cell.c.num_seqs(), 1) << "not shrunk: " << cx->cell.id();
  EXPECT_LT(seconds, 60.0);
  EXPECT_EQ(repro_verdict(cx->cell, "cpu.vector_v"), Verdict::poisoned);
}

TEST(Planted, OffByOneBlockCaughtByAgreementAtAnAlignedLength) {
  const auto cx = expect_caught(Property::agreement, "planted.off_by_one_block");
  ASSERT_TRUE(cx);
  const Case& c = cx->cell.c;
  EXPECT_TRUE(std::any_of(c.seq_lens.begin(), c.seq_lens.end(), [&](int len) { return len % c.block_size == 0; }))
      << c.id();
  EXPECT_TRUE(is_failure(repro_verdict(cx->cell, "planted.off_by_one_block")));
}

TEST(Planted, GqaModuloCaughtByAgreementWithGqaAndSeveralKvHeads) {
  const auto cx = expect_caught(Property::agreement, "planted.gqa_modulo");
  ASSERT_TRUE(cx);
  EXPECT_GE(cx->cell.c.gqa_ratio(), 2) << cx->cell.id();
  EXPECT_GE(cx->cell.c.num_kv_heads, 2) << cx->cell.id();
  EXPECT_TRUE(is_failure(repro_verdict(cx->cell, "planted.gqa_modulo")));
}

TEST(Planted, GqaModuloCaughtByGqaExpansion) {
  const auto cx = expect_caught(Property::gqa_expansion, "planted.gqa_modulo");
  ASSERT_TRUE(cx);
  EXPECT_GE(cx->cell.c.gqa_ratio(), 2) << cx->cell.id();
  EXPECT_GE(cx->cell.c.num_kv_heads, 2) << cx->cell.id();
  EXPECT_NE(cx->what.find("MHA expansion"), std::string::npos) << cx->what;
}

TEST(Planted, SplitKvEmptyPartitionCaughtByAgreementOnAShortSequence) {
  const auto cx = expect_caught(Property::agreement, "planted.split_kv_empty_partition");
  ASSERT_TRUE(cx);
  // Two sibling partitions of 8 x ceil(len / 8) tokens are both empty: 6 * ceil(len / 8) >= len at least.
  const Case& c = cx->cell.c;
  EXPECT_TRUE(std::any_of(c.seq_lens.begin(), c.seq_lens.end(), [](int len) { return 6 * ((len + 7) / 8) >= len; }))
      << c.id();
  EXPECT_EQ(cx->what.rfind("poisoned", 0), 0u) << cx->what;
  EXPECT_EQ(repro_verdict(cx->cell, "planted.split_kv_empty_partition"), Verdict::poisoned);
  // The printed repro line runs as printed: `pacheck repro` finds planted kernels too.
  const auto [rc, out] = run_repro_line(*cx);
  EXPECT_EQ(rc, 1) << cx->repro << "\n" << out;
  EXPECT_NE(out.find("kernel    planted.split_kv_empty_partition on "), std::string::npos) << out;
  EXPECT_NE(out.find("verdict   poisoned"), std::string::npos) << out;
}

TEST(Planted, SoftmaxNoMaxCaughtByAgreementOnTheExtremeDistribution) {
  const auto cx = expect_caught(Property::agreement, "planted.softmax_no_max");
  ASSERT_TRUE(cx);
  EXPECT_EQ(cx->cell.c.dist, Dist::extreme) << cx->cell.id();
  EXPECT_TRUE(is_failure(repro_verdict(cx->cell, "planted.softmax_no_max")));
}

// The remaining planted faults stay within tolerance of the oracle: only their metamorphic property sees
// them. Each test shows both halves.
TEST(Planted, PhysicalBlockOrderCaughtOnlyByPagingInvariance) {
  const auto cx = expect_caught(Property::paging, "planted.physical_block_order");
  ASSERT_TRUE(cx);
  const Case& c = cx->cell.c;
  EXPECT_GT(max_len(c), c.block_size) << "needs two blocks to reorder: " << c.id();
  expect_holds(Property::agreement, "planted.physical_block_order", 100);
}

TEST(Planted, LaunchOrderCaughtOnlyByDeterminism) {
  const auto cx = expect_caught(Property::determinism, "planted.launch_order");
  ASSERT_TRUE(cx);
  EXPECT_GE(max_len(cx->cell.c), 3) << "reversing fewer than 3 addends rounds the same: " << cx->cell.id();
  expect_holds(Property::agreement, "planted.launch_order", 100);
}

TEST(Planted, BatchSplitCaughtOnlyByBatchInvariance) {
  const auto cx = expect_caught(Property::batch, "planted.batch_split");
  ASSERT_TRUE(cx);
  EXPECT_GE(cx->cell.c.num_seqs(), 2) << cx->cell.id();
  EXPECT_GT(max_len(cx->cell.c), 16) << "one partition whatever the batch: " << cx->cell.id();
  expect_holds(Property::agreement, "planted.batch_split", 100);
}

TEST(Planted, F16StagedVCaughtByExactScaling) {
  const auto cx = expect_caught(Property::scaling, "planted.f16_staged_v");
  ASSERT_TRUE(cx);
  // f16 caches hold nothing f16 staging can lose; the fault needs a wider cache dtype.
  EXPECT_NE(cx->cell.c.kv_dtype, DType::f16) << cx->cell.id();
  EXPECT_NE(cx->what.find("does not scale the output"), std::string::npos) << cx->what;
}
