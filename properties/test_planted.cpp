// Every expected catch of test_controls.hpp: the property fails on the negative control or planted kernel,
// with a shrunk counterexample whose ids read back and that names the fault's trigger. One test per row,
// named like Controls/Caught.Property/planted_gqa_modulo_agreement_WithGqaAndSeveralKvHeads.
#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "properties/test_controls.hpp"

namespace {

using namespace pacheck;
using namespace pacheck::prop;
using namespace pacheck::prop::test;

class Caught : public ::testing::TestWithParam<Catch> {};

TEST_P(Caught, Property) {
  const Catch& row = GetParam();
  const KernelPtr k = kernel(row.kernel);
  ASSERT_TRUE(k) << "no kernel " << row.kernel;
  RunParams params = rc_params();
  if (row.cases > 0) params.cases = row.cases;
  const PropertyRun run = run_property(parse_property(row.property), make_target(k), params);
  std::cout << row.property << " on " << row.kernel << ": " << (run.passed ? "held" : "FAILED")
            << " after " << run.cases << " cases, " << run.seconds << " s\n"
            << (run.counterexample ? run.counterexample->message : run.message) << "\n";
  EXPECT_FALSE(run.passed) << row.property << " did not catch " << row.kernel << " in " << run.cases
                           << " cases";
  ASSERT_TRUE(run.counterexample.has_value()) << run.message;
  const Counterexample& cx = *run.counterexample;
  EXPECT_EQ(cx.repro, "pacheck repro '" + cx.cell.id() + "' --kernel " + row.kernel);
  EXPECT_NE(cx.message.find(cx.repro), std::string::npos);
  EXPECT_NE(cx.message.find("case   " + cx.cell.c.id()), std::string::npos);
  // The printed ids must read back to the same cell, or the repro line would run something else.
  EXPECT_EQ(parse_case_id(cx.cell.c.id()).id(), cx.cell.c.id());
  row.check(cx, run.seconds);
}

INSTANTIATE_TEST_SUITE_P(Controls, Caught, ::testing::ValuesIn(catches()),
                         [](const ::testing::TestParamInfo<Catch>& info) {
                           return param_name(info.param.kernel, info.param.property, info.param.shows);
                         });
// The same test over design_limits(): honest designs failing an opt-in property at their documented limit.
INSTANTIATE_TEST_SUITE_P(DesignLimits, Caught, ::testing::ValuesIn(design_limits()),
                         [](const ::testing::TestParamInfo<Catch>& info) {
                           return param_name(info.param.kernel, info.param.property, info.param.shows);
                         });

// Every negative control of the registry and every planted kernel has an expected catch or says why the
// generators cannot reach its fault; every row names a kernel and a property that exist (and unreached
// ones are controls), so no control is left untested by accident.
TEST(Controls, EveryControlIsExpected) {
  std::set<std::string> expected;
  for (const Catch& c : catches()) expected.insert(c.kernel);
  for (const Unreached& u : unreached()) {
    const KernelPtr k = kernel(u.kernel);
    ASSERT_TRUE(k) << "unreached() names no kernel " << u.kernel;
    EXPECT_TRUE(k->is_negative_control()) << u.kernel << " is no negative control: it must hold every property";
    EXPECT_FALSE(expected.count(u.kernel)) << u.kernel << " is both caught and unreached";
    expected.insert(u.kernel);
  }
  std::vector<KernelPtr> controls = planted_kernels();
  for (const KernelPtr& k : Registry::global().all())
    if (k->device() == PACHECK_DEVICE_CPU && k->is_negative_control()) controls.push_back(k);  // MLA ones too
  for (const KernelPtr& k : controls)
    EXPECT_TRUE(expected.count(k->name())) << k->name() << ": add its expected catch to properties/test_controls.hpp";
  for (const std::string& name : expected) EXPECT_TRUE(kernel(name)) << "test_controls.hpp names no kernel " << name;
  for (const Hold& h : planted_holds()) EXPECT_FALSE(caught(h.kernel, h.property)) << h.kernel << " both holds and fails";
  // A design limit is an honest registered kernel failing an opt-in property; on a default property it would
  // be a false alarm, which is fixed in the check, never listed here.
  for (const Catch& c : design_limits()) {
    const KernelPtr k = Registry::global().find(c.kernel);
    ASSERT_TRUE(k) << "design_limits() names no registered kernel " << c.kernel;
    EXPECT_FALSE(k->is_negative_control()) << c.kernel << " is a negative control: its row belongs in catches()";
    EXPECT_TRUE(parse_property(c.property)->opt_in) << c.property << " is a default property: fix the check";
  }
  for (const Hold& h : opt_in_holds()) {
    EXPECT_TRUE(parse_property(h.property)->opt_in) << h.property << " runs over every kernel already";
    EXPECT_FALSE(std::any_of(design_limits().begin(), design_limits().end(),
                             [&](const Catch& c) { return c.kernel == h.kernel && c.property == h.property; }))
        << h.kernel << " both holds and fails " << h.property;
  }
  // Rows name properties: a name property_table() lacks would fail only when its row runs.
  for (const Catch& c : catches()) EXPECT_NO_THROW(parse_property(c.property)) << c.kernel;
  // A row whose property does not apply to its kernel (an MLA kernel and gqa-expansion, say) could never run.
  for (const Catch& c : catches()) EXPECT_TRUE(applies(parse_property(c.property), *kernel(c.kernel))) << c.kernel;
  for (const Hold& h : planted_holds()) EXPECT_NO_THROW(parse_property(h.property)) << h.kernel;
}

}  // namespace
