// Every property of property_table() over every registered CPU kernel (ctest label `property`), one test
// per (kernel, property), named like Registry/Holds.Property/cpu_split_kv_batch_invariance:
//  - a kernel that is not a negative control must hold every property (an MLA kernel: every property that
//    applies to it, on MLA cases);
//  - a negative control must hold every property it is not expected to fail (test_controls.hpp);
//  - a planted kernel must hold the properties of planted_holds();
//  - opt-in properties (overflow) run only where opt_in_holds() lists them.
// A new property or kernel is tested here with no edit. test_planted.cpp asserts the expected failures.
#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <memory>
#include <map>

#include "properties/test_controls.hpp"

namespace {

using namespace pacheck;
using namespace pacheck::prop;
using namespace pacheck::prop::test;

/// One target per kernel for the whole test program (probing its case space once).
const KernelUnderTest& target(const std::string& name) {
  static std::map<std::string, KernelUnderTest> targets;
  auto it = targets.find(name);
  if (it == targets.end()) {
    const KernelPtr k = kernel(name);
    if (!k) throw std::invalid_argument("no kernel " + name);
    it = targets.emplace(name, make_target(k)).first;
  }
  return it->second;
}

/// Every (kernel, property) that must hold; cases 0 means RapidCheck's max_success (300 under test_main.cpp's
/// defaults).
std::vector<Hold> holds() {
  std::vector<Hold> out;
  for (const KernelPtr& k : Registry::global().all()) {
    // A control whose state outlives a call (cpu.replay_output, cpu.stale_max) meets, in a later property's
    // cases, buffers the allocator hands out at an address an earlier case used: whether it holds there
    // depends on the allocator and the order the tests run in. Its catch (determinism, on buffers of one pool)
    // is in catches(); tests/test_state_controls.cpp runs it as `pacheck run` does.
    if (k->device() != PACHECK_DEVICE_CPU || k->history_dependent()) continue;
    const bool unreachable = std::any_of(unreached().begin(), unreached().end(),
                                         [&](const Unreached& u) { return u.kernel == k->name(); });
    if (unreachable) continue;
    // An MLA kernel (the generators draw it MLA cases) holds the properties that apply to it.
    for (const PropertyInfo& p : property_table())
      if (!p.opt_in && applies(p, *k) && !caught(k->name(), p.name))
        out.push_back({k->name(), std::string(p.name), control_hold_cases(k->name())});
  }
  for (const Hold& h : planted_holds()) out.push_back(h);
  for (const Hold& h : opt_in_holds()) out.push_back(h);
  return out;
}

class Holds : public ::testing::TestWithParam<Hold> {};

TEST_P(Holds, Property) {
  const Hold& h = GetParam();
  RunParams params = rc_params();
  if (h.cases > 0) params.cases = h.cases;
  // run_property draws from params.seed alone; mixing in the test's name gives each (kernel, property) its
  // own cases, as RC_GTEST_PROP's per-test seeds did, and the same ones on every run.
  for (char ch : param_name(h.kernel, h.property))
    params.seed = (params.seed ^ static_cast<unsigned char>(ch)) * 0x100000001B3ull;  // FNV-1a step
  const PropertyRun run = run_property(parse_property(h.property), target(h.kernel), params);
  std::cout << h.property << " on " << h.kernel << ": " << (run.passed ? "held" : "FAILED") << " after "
            << run.cases << " cases, " << run.seconds << " s; " << tag_summary(run.distribution) << "\n";
  EXPECT_TRUE(run.passed) << (run.counterexample ? run.counterexample->message : run.message)
                          << "\nreplay: RC_PARAMS=\"reproduce=" << run.reproduce << "\"";
  EXPECT_EQ(run.cases, params.cases);
}

// exact-scaling once failed cpu.split_kv, a correct kernel, at its 69th case from seed 1 (h16/1 d80 bs1 f16
// ctx1024 seed655532, V x 2^2): an output whose true value is just below f16's smallest normal rounds onto
// it, and 4 x that value need not round to 4 x 2^-14. The check now leaves the smallest normal out; this
// replays the seed that found it.
TEST(ExactScaling, HoldsWhereAnOutputRoundsOntoTheSmallestNormal) {
  RunParams params;
  params.seed = 1;
  params.cases = 300;  // as `pacheck fuzz --seed 1`: RapidCheck sizes cases by their index out of max_success
  const PropertyRun run = run_property(parse_property("exact-scaling"), target("cpu.split_kv"), params);
  EXPECT_TRUE(run.passed) << (run.counterexample ? run.counterexample->message : run.message);
  EXPECT_EQ(run.cases, params.cases);
}

/// cpu.reference whose calls end with a CUDA out-of-memory error: every `every`-th call (every 1: each call).
class OutOfMemoryEvery : public Kernel {
 public:
  explicit OutOfMemoryEvery(int every) : inner_(Registry::global().find("cpu.reference")), every_(every) {}
  std::string name() const override { return "test.oom_every_" + std::to_string(every_); }
  std::string description() const override { return "cpu.reference, out of device memory on some calls"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case& c) const override { return inner_->supports(c); }
  void run(const pacheck_kernel_args& args) const override {
    if (++calls_ % every_ == 0)
      throw KernelError("cuda: kernel execution: cudaErrorMemoryAllocation: out of memory");
    inner_->run(args);
  }

 private:
  KernelPtr inner_;
  int every_;
  mutable std::atomic<int> calls_{0};
};

// The trust run's parallel fuzz jobs on one H100 once ran a GPU kernel out of device memory, and determinism
// reported it as the kernel's fault. An occasional out-of-memory call discards its case (counted); a kernel
// that runs out on every call still fails the property (RapidCheck gives up), so a leak is not hidden.
/// determinism over `cases` cases from seed 3 on a kernel out of device memory on every `every`-th call.
PropertyRun determinism_out_of_memory_every(int every, int cases) {
  RunParams params;
  params.seed = 3;
  params.cases = cases;
  return run_property(parse_property("determinism"), make_target(std::make_shared<OutOfMemoryEvery>(every)), params);
}

TEST(DeviceOutOfMemory, DiscardsTheCaseAndIsCounted) {
  const PropertyRun run = determinism_out_of_memory_every(7, 40);
  EXPECT_TRUE(run.passed) << (run.counterexample ? run.counterexample->message : run.message);
  EXPECT_EQ(run.cases, 40);
  EXPECT_GT(run.device_out_of_memory, 0);
}

TEST(DeviceOutOfMemory, OnEveryCallFailsTheProperty) {
  const PropertyRun run = determinism_out_of_memory_every(1, 20);
  EXPECT_FALSE(run.passed);
  EXPECT_GT(run.device_out_of_memory, 20);
  EXPECT_EQ(run.cases, 0);
}

INSTANTIATE_TEST_SUITE_P(Registry, Holds, ::testing::ValuesIn(holds()),
                         [](const ::testing::TestParamInfo<Hold>& info) {
                           return param_name(info.param.kernel, info.param.property);
                         });

}  // namespace
