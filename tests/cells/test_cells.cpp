// pacheck::gtest through a kernel's own gtest binary (cells_fixture, the planted kernel cells.tail_v): the
// tests it registers are the cells `pacheck list cells` prints, and the planted fault fails exactly its
// straddling V cells with a non-finite poison, each failure carrying the exact id and the repro line.
#include <gtest/gtest.h>
#include <pugixml.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pacheck/cells.hpp"
#include "pacheck/cells_c.h"

namespace {

/// Runs a shell command; returns its exit status and stdout.
std::pair<int, std::string> capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, out};
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

/// A fixture's output as a failure message prints it: its "[  SKIPPED ]" lines reworded, because ctest takes
/// that text anywhere in a test's output as the test skipping itself (gtest_discover_tests' skip pattern),
/// which would show a failing test here as skipped.
std::string shown(std::string out) {
  for (std::size_t at; (at = out.find("[  SKIPPED ]")) != std::string::npos;) out.replace(at, 12, "[ (skipped) ]");
  return out;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) v.push_back(l);
  return v;
}

std::string fixture(const std::string& suite, const std::string& args, bool check = false) {
  return "PACHECK_FIXTURE_SUITE=" + suite + (check ? "" : " PACHECK_FIXTURE_NO_CHECK=1") + " '" PACHECK_CELLS_FIXTURE "' " +
         args;
}

std::vector<std::string> list_cells(const std::string& suite) {
  auto [rc, out] = capture(std::string("'" PACHECK_BINARY "' list cells --suite ") + suite +
                           " --kernel cells.tail_v --plugin '" PACHECK_TAIL_V_PLUGIN "'");
  EXPECT_EQ(rc, 0) << shown(out);
  return lines_of(out);
}

/// The cells cells.tail_v must fail: a non-finite poison (nan, +inf, -inf) in V (V or K+V) written where the
/// kernel reads it (region tail or all), in a case where some sequence straddles a block.
bool planted_fails(const std::string& id) {
  std::istringstream in(id);
  std::vector<std::string> tok;
  for (std::string t; in >> t;) tok.push_back(t);
  int bs = 0;
  std::vector<int> lens;
  for (const auto& t : tok) {
    if (t.rfind("bs", 0) == 0) bs = std::stoi(t.substr(2));
    if (t.rfind("ctx", 0) == 0) {
      std::istringstream l(t.substr(3));
      for (std::string n; std::getline(l, n, ',');) lens.push_back(std::stoi(n));
    }
  }
  const std::string& fault = tok.back();
  const auto colon = fault.find(':'), at = fault.find('@');
  if (colon == std::string::npos || at == std::string::npos) return false;  // "clean"
  const std::string target = fault.substr(0, colon), poison = fault.substr(colon + 1, at - colon - 1),
                    region = fault.substr(at + 1);
  bool straddle = false;
  for (int n : lens) straddle = straddle || (bs > 0 && n % bs != 0);
  return target.find('V') != std::string::npos && (poison == "nan" || poison == "+inf" || poison == "-inf") &&
         (region == "tail" || region == "all") && straddle;
}

/// `--gtest_list_tests` of the fixture: (test suite, test name, GetParam() text = the cell id) in order.
struct Listed {
  std::string group, name, id;
};
std::vector<Listed> listed_tests(const std::string& suite) {
  auto [rc, out] = capture(fixture(suite, "--gtest_list_tests"));
  EXPECT_EQ(rc, 0) << shown(out);
  std::vector<Listed> v;
  std::string group;
  for (const auto& l : lines_of(out)) {
    if (l[0] != ' ') {
      group = l.substr(0, l.find('.'));
      continue;
    }
    const auto hash = l.find("  # GetParam() = ");
    Listed t{group, l.substr(2, hash == std::string::npos ? std::string::npos : hash - 2), ""};
    if (hash != std::string::npos) t.id = l.substr(hash + 17);
    v.push_back(t);
  }
  return v;
}

class RegisteredNames : public testing::TestWithParam<std::string> {};

TEST_P(RegisteredNames, AreTheCellsOfListCellsOneTestEach) {
  const std::string suite = GetParam();
  const std::vector<std::string> ids = list_cells(suite);
  const std::vector<Listed> tests = listed_tests(suite);
  ASSERT_FALSE(ids.empty());
  ASSERT_EQ(tests.size(), ids.size()) << "one test per cell of `pacheck list cells --suite " << suite << "`";
  std::set<std::string> names;
  std::string group = suite;
  for (char& c : group)
    if (c == '-') c = '_';
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(tests[i].group, group);
    EXPECT_EQ(tests[i].id, ids[i]) << "test " << i << " carries the exact cell id";
    EXPECT_EQ(tests[i].name.rfind(pacheck::cells::test_name_of(ids[i]), 0), 0u) << ids[i];
    EXPECT_TRUE(names.insert(tests[i].name).second) << "duplicate test name " << tests[i].name;
    EXPECT_EQ(tests[i].name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"),
              std::string::npos)
        << tests[i].name;
  }
}

INSTANTIATE_TEST_SUITE_P(Suites, RegisteredNames, testing::Values("tail-poison", "gate", "boundary"));

TEST(CellsGtest, FilterRunsTheOneCellItNames) {
  const std::vector<Listed> tests = listed_tests("tail-poison");
  ASSERT_FALSE(tests.empty());
  const Listed& t = tests.back();
  auto [rc, out] = capture(fixture("tail-poison", "--gtest_brief=0 --gtest_filter='" + t.group + "." + t.name + "'"));
  EXPECT_NE(out.find("1 test from 1 test suite ran"), std::string::npos) << shown(out);
}

TEST(CellsGtest, PlantedTailFaultFailsExactlyItsStraddlingVCells) {
  const std::string xml = PACHECK_CELLS_WORK "/tail_v.xml";
  std::remove(xml.c_str());
  // With the instrument Environment (comparator self-test, negative controls on tail-poison): it must pass.
  auto [rc, out] = capture(fixture("tail-poison", "--gtest_output=xml:'" + xml + "'", true));
  EXPECT_EQ(rc, 1) << shown(out);
  pugi::xml_document doc;
  ASSERT_TRUE(doc.load_file(xml.c_str())) << xml << "\n" << shown(out);
  std::set<std::string> failed, expected, all;
  for (const std::string& id : list_cells("tail-poison")) {
    all.insert(id);
    if (planted_fails(id)) expected.insert(id);
  }
  int cases = 0;
  for (auto tc : doc.select_nodes("//testcase")) {
    ++cases;
    const pugi::xml_node n = tc.node();
    std::string id = n.select_node("properties/property[@name='cell_id']").node().attribute("value").value();
    if (id.empty()) id = n.attribute("cell_id").value();  // older GoogleTest: properties as attributes
    EXPECT_EQ(id, n.attribute("value_param").value());
    EXPECT_TRUE(all.count(id)) << id;
    if (auto f = n.child("failure")) {
      failed.insert(id);
      const std::string msg = f.attribute("message").value();
      EXPECT_NE(msg.find("cell '" + id + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("repro: pacheck repro"), std::string::npos) << msg;
      EXPECT_NE(msg.find("--plugin"), std::string::npos) << msg;
      EXPECT_NE(msg.find("worst"), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(cases, static_cast<int>(all.size()));
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(failed, expected);
}

/// A cell of a kernel's gtest XML report (--gtest_output=xml): its cell id and whether it failed or skipped.
struct XmlCell {
  std::string id;
  bool failed = false, skipped = false;
};
std::vector<XmlCell> xml_cells(const std::string& xml) {
  pugi::xml_document doc;
  EXPECT_TRUE(doc.load_file(xml.c_str())) << xml;
  std::vector<XmlCell> v;
  for (auto tc : doc.select_nodes("//testcase")) {
    const pugi::xml_node n = tc.node();
    XmlCell c{n.attribute("value_param").value()};
    c.failed = static_cast<bool>(n.child("failure"));
    c.skipped = static_cast<bool>(n.child("skipped")) || std::string(n.attribute("result").value()) == "skipped";
    v.push_back(c);
  }
  return v;
}

// An MLA kernel (ABI version 4, PACHECK_KERNEL_MLA) through pacheck::gtest: the planted cells.mla_v_tail
// (mla_v_tail_kernel.c: V read over the whole final block, weight 0 past the last key) registered on suite mla
// fails exactly the cells whose V part of the tail holds a non-finite poison at a straddling length (the cells
// pacheck's cell list marks poisons_v_tail: those the built-in control cpu.mla_v_tail must fail), skips the
// cells it declines (the fp8 latent caches: it takes bf16 only) and passes every other, rope-only tail poison
// and other sequences' slots included. The 128K cells are filtered out for time.
TEST(CellsGtest, PlantedMlaVTailFailsExactlyTheVTailCellsOfSuiteMla) {
  char* listed = nullptr;
  ASSERT_EQ(pacheck_cells_add_plugin(PACHECK_MLA_V_TAIL_PLUGIN, &listed), 0) << (listed ? listed : "");
  pacheck_cells_free(listed);
  ASSERT_EQ(pacheck_cells_list_cells("mla", "cells.mla_v_tail", &listed), 0) << (listed ? listed : "");
  const nlohmann::json cells = nlohmann::json::parse(listed)["cells"];
  pacheck_cells_free(listed);
  std::set<std::string> expected;
  for (const auto& c : cells)
    if (c["poisons_v_tail"].get<bool>() && c["id"].get<std::string>().find("ctx13107") == std::string::npos)
      expected.insert(c["id"].get<std::string>());
  const std::string xml = PACHECK_CELLS_WORK "/mla_v_tail.xml";
  std::remove(xml.c_str());
  auto [rc, out] = capture("PACHECK_FIXTURE_KERNEL=mla " +
                           fixture("mla", "--gtest_filter='-*ctx13107*' --gtest_output=xml:'" + xml + "'"));
  EXPECT_EQ(rc, 1) << shown(out);
  std::set<std::string> failed, skipped;
  int ran = 0;
  for (const XmlCell& c : xml_cells(xml)) {
    ++ran;
    if (c.failed) failed.insert(c.id);
    if (c.skipped) skipped.insert(c.id);
  }
  EXPECT_EQ(ran + 2, static_cast<int>(cells.size())) << "every cell of suite mla but the two 128K ones";
  EXPECT_FALSE(skipped.empty());
  for (const std::string& id : skipped) {
    EXPECT_NE(id.find("fp8"), std::string::npos) << id << " skipped";
    expected.erase(id);  // declined: the kernel takes bf16 latent caches only
  }
  EXPECT_GE(expected.size(), 20u);
  EXPECT_EQ(failed, expected);
}

/// The line of cells_fixture.cpp that calls register_suite (found in the source, so the test follows edits).
int registration_line() {
  const std::string src = std::string(__FILE__).substr(0, std::string(__FILE__).rfind('/')) + "/cells_fixture.cpp";
  FILE* f = std::fopen(src.c_str(), "r");
  EXPECT_NE(f, nullptr) << src;
  if (!f) return -1;
  char buf[1024];
  int line = 0, found = -1;
  while (std::fgets(buf, sizeof buf, f)) {
    ++line;
    if (found < 0 && std::string(buf).find("pacheck::gtest::register_suite(") != std::string::npos) found = line;
  }
  std::fclose(f);
  return found;
}

// A failing cell is reported at the user's register_suite call (the console's "FILE:LINE: Failure" and the
// XML's file and line), never at pacheck's own cells/gtest.cpp, and its text ends with a line that reruns
// that one test in this binary.
TEST(CellsGtest, FailuresPointAtTheUsersRegistrationLine) {
  const int line = registration_line();
  ASSERT_GT(line, 0);
  const std::string at = "cells_fixture.cpp:" + std::to_string(line) + ": Failure";
  auto [rc, out] = capture(fixture("tail-poison", "--gtest_color=no 2>&1"));
  EXPECT_EQ(rc, 1) << shown(out);
  EXPECT_NE(out.find(at), std::string::npos) << shown(out);
  EXPECT_EQ(out.find("gtest.cpp:"), std::string::npos) << shown(out);
  const auto rerun = out.find("rerun this test: ");
  ASSERT_NE(rerun, std::string::npos) << shown(out);
  const std::string cmd = out.substr(rerun + 17, out.find('\n', rerun) - rerun - 17);
  EXPECT_NE(cmd.find("--gtest_filter="), std::string::npos) << cmd;
  auto [rc1, one] = capture("PACHECK_FIXTURE_NO_CHECK=1 " + cmd + " --gtest_color=no 2>&1");
  EXPECT_EQ(rc1, 1) << cmd << "\n" << one;
  EXPECT_NE(one.find("1 test from 1 test suite ran"), std::string::npos) << one;
  EXPECT_NE(one.find(at), std::string::npos) << one;
  // The refusal of a suite pacheck cannot load is reported there too.
  auto [rc2, refused] = capture(fixture("no-such-suite", "--gtest_color=no 2>&1"));
  EXPECT_EQ(rc2, 1) << refused;
  EXPECT_NE(refused.find(at), std::string::npos) << refused;
}

// A suite pacheck cannot load is not an abort of the kernel's binary (an exception out of main() between
// InitGoogleTest and RUN_ALL_TESTS): register_suite registers one failing test that names the call and the
// reason, so the console, the XML and ctest show why, and the binary exits 1.
TEST(CellsGtest, AnUnknownSuiteIsAFailingTestNotAnAbort) {
  auto [rc, out] = capture(fixture("no-such-suite", "--gtest_color=no 2>&1"));
  EXPECT_EQ(rc, 1) << shown(out);
  EXPECT_EQ(out.find("terminate called"), std::string::npos) << shown(out);
  EXPECT_NE(out.find("[  FAILED  ] pacheck_setup.no_such_suite"), std::string::npos) << shown(out);
  EXPECT_NE(out.find("pacheck::gtest::register_suite(\"no-such-suite\"): "), std::string::npos) << shown(out);
  EXPECT_NE(out.find("no-such-suite"), std::string::npos) << shown(out);
}

// A bad suite registered beside a good one fails its own test and does not hide the others: its instrument
// Environment is never added (a failing global Environment skips every test of the binary), and registering
// the good suite twice is refused the same way rather than registering every test twice.
TEST(CellsGtest, ABadSuiteBesideAGoodOneFailsItsOwnTestOnly) {
  auto [rc, out] = capture(fixture("no-such-suite,scales,scales", "--gtest_color=no --gtest_brief=1 2>&1", true));
  EXPECT_EQ(rc, 1) << shown(out);
  EXPECT_NE(out.find("[  FAILED  ] pacheck_setup.no_such_suite"), std::string::npos) << shown(out);
  EXPECT_NE(out.find("[  FAILED  ] pacheck_setup.scales"), std::string::npos) << shown(out);
  EXPECT_NE(out.find("register_suite was called twice"), std::string::npos) << shown(out);
  EXPECT_EQ(out.find("SKIPPED"), std::string::npos) << shown(out);
  EXPECT_NE(out.find("[  PASSED  ] 11 tests."), std::string::npos) << shown(out);  // scales' cells ran: 16 less 5 straddling V
}

// A device that does not exist is an error of every cell, not a silent CPU run of the CPU kernel.
TEST(CellsGtest, AnUnknownDeviceFailsEveryCellNamingIt) {
  auto [rc, out] = capture("PACHECK_FIXTURE_DEVICE=gpu7 " + fixture("scales", "--gtest_color=no 2>&1"));
  EXPECT_EQ(rc, 1) << shown(out);
  EXPECT_NE(out.find("device 'gpu7': unknown device 'gpu7'"), std::string::npos) << shown(out);
  EXPECT_EQ(out.find("[       OK ]"), std::string::npos) << shown(out);
}

// A cell with no output to judge (declined here; error, crash and timeout alike) carries no metrics: the
// gtest failure text and the Python message print CellRun::metrics, and a "worst: (seq -1, ...)" with
// rel_linf 0 against limit 0 would be noise. A judged cell keeps every metric.
TEST(CellsRunCell, MetricsOnlyWhenAnOutputWasJudged) {
  static const std::vector<std::string> added = pacheck::cells::add_plugin(PACHECK_TAIL_V_PLUGIN);
  ASSERT_EQ(added, std::vector<std::string>{"cells.tail_v"});
  // tail_v_kernel.c declines head_size > 512
  const pacheck::cells::CellRun declined =
      pacheck::cells::run_cell("", "cells.tail_v", "h2/1 d576 bs16 f32 ctx20 nhd seed7 clean", "cpu");
  EXPECT_TRUE(declined.declined) << declined.verdict << ": " << declined.detail;
  EXPECT_EQ(declined.metrics, "");
  const pacheck::cells::CellRun judged =
      pacheck::cells::run_cell("", "cells.tail_v", "h2/1 d64 bs16 f32 ctx20 nhd seed7 clean", "cpu");
  EXPECT_EQ(judged.verdict, "pass") << judged.detail;
  EXPECT_NE(judged.metrics.find("worst: (seq "), std::string::npos) << judged.metrics;
}

}  // namespace
