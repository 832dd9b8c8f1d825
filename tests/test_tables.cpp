// The name tables (core/table.hpp) and the documents that list them: every table round-trips its names,
// parse errors list what was expected, judge() picks verdicts in verdict_table()'s order, and docs/REFERENCE.md's
// fault and verdict tables and docs/PROPERTIES.md's property table say what the tables say, in their order.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "pacheck/kernel_abi.h"

#include "core/case.hpp"
#include "core/case_fields.hpp"
#include "core/fault.hpp"
#include "core/table.hpp"
#include "judge/judge.hpp"
#include "judge/verdict.hpp"
#include "properties/properties.hpp"
#include "suites/suite.hpp"

namespace pacheck {
namespace {

/// Every row's name parses back to its value, names and values are unique, and an unknown name is an
/// error that names what was expected and lists every canonical name.
template <typename Row>
void expect_round_trip(std::span<const Row> table, std::string_view what) {
  ASSERT_FALSE(table.empty()) << what;
  std::set<std::string_view> names;
  std::set<int> values;
  for (const Row& r : table) {
    EXPECT_TRUE(names.insert(r.name).second) << what << " name " << r.name << " twice";
    EXPECT_TRUE(values.insert(static_cast<int>(r.value)).second) << what << " value of " << r.name << " twice";
    EXPECT_EQ(name_of(table, r.value), r.name);
    EXPECT_EQ(parse(table, r.name, what), r.value) << r.name;
  }
  try {
    parse(table, "no-such-name", what);
    ADD_FAILURE() << what << ": no-such-name parsed";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "unknown " + std::string(what) + " 'no-such-name' (expected " + names_list(table) + ")");
  }
}

TEST(Tables, EveryTableRoundTripsItsNames) {
  expect_round_trip(poison_table(), "poison");
  expect_round_trip(target_table(), "poison target");
  expect_round_trip(region_table(), "poison region");
  expect_round_trip(dtype_table(), "dtype");
  expect_round_trip(layout_table(), "layout");
  expect_round_trip(dist_table(), "distribution");
  expect_round_trip(verdict_table(), "verdict");
}

// Properties are identified by their rows (no enum): each name parses back to its own row, names are
// unique, and an unknown name lists every property in table order.
TEST(Tables, EveryPropertyNameParsesBackToItsRow) {
  const auto table = prop::property_table();
  ASSERT_FALSE(table.empty());
  std::set<std::string_view> names;
  for (const prop::PropertyInfo& r : table) {
    EXPECT_TRUE(names.insert(r.name).second) << "property name " << r.name << " twice";
    EXPECT_EQ(&*prop::parse_property(r.name), &r) << r.name;
    EXPECT_EQ(prop::property_name(r), r.name);
  }
  try {
    prop::parse_property("no-such-name");
    ADD_FAILURE() << "no-such-name parsed";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("unknown property 'no-such-name' (expected ", 0), 0u) << what;
    EXPECT_EQ(what.back(), ')') << what;
    std::size_t at = 0;
    for (const prop::PropertyInfo& r : table) {
      at = what.find(r.name, at);
      ASSERT_NE(at, std::string::npos) << r.name << " missing or out of order in: " << what;
      at += r.name.size();
    }
  }
}

TEST(Tables, ParseTakesAliasesAndNamesTheExpectedValues) {
  EXPECT_EQ(parse_poison("inf"), Poison::pinf);
  EXPECT_EQ(parse_target("kv"), Target::kv);
  EXPECT_EQ(parse_target("k+v"), Target::kv);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float8_e4m3fnuz"), DType::fp8_e4m3fnuz);
  EXPECT_EQ(names_list(target_table()), "K, V or K+V");
  try {
    parse_target("W");
    ADD_FAILURE() << "W parsed";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown poison target 'W' (expected K, V or K+V)");
  }
  // An alias is a whole word of the list, never a prefix or a part of one.
  EXPECT_THROW(parse_target("k+"), std::invalid_argument);
  EXPECT_THROW(parse_dtype("float"), std::invalid_argument);
  EXPECT_THROW(parse_dtype(""), std::invalid_argument);
}

// ---- verdict precedence ------------------------------------------------------------------------------

TEST(VerdictOrder, TheEnumOrderIsTheTableOrder) {
  const auto table = verdict_table();
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(table[i].value), i) << table[i].name;
    EXPECT_EQ(verdict_rank(table[i].value), i) << table[i].name;
    EXPECT_EQ(is_failure(table[i].value), table[i].fails_gate) << table[i].name;
  }
  EXPECT_EQ(table.back().value, Verdict::pass) << "pass is what is left when nothing else applies";
  EXPECT_FALSE(is_failure(Verdict::declined));
}

/// A run of a small f32 case on which every check of judge() fails at once, and ways to repair each.
struct Everything {
  Cell cell;
  OracleResult ref;
  RawRun run;
  std::vector<std::uint32_t> clean_bits;

  Everything() {
    cell.c.num_heads = cell.c.num_kv_heads = 1;
    cell.c.head_size = 4;
    cell.c.block_size = 4;
    cell.c.seq_lens = {3};
    cell.c.q_dtype = cell.c.kv_dtype = cell.c.out_dtype = DType::f32;
    cell.fault = parse_fault("V:nan@tail");
    ref.out = {0.5, 0.25, -0.5, 1.0};
    run.out = {std::numeric_limits<double>::quiet_NaN(), 0.25, 4.0, 1.0};  // NaN, and 4 vs -0.5 beyond tolerance
    for (double v : run.out) run.bits.push_back(to_bits(static_cast<float>(v), DType::f32));
    clean_bits = run.bits;
    clean_bits[1] ^= 1;  // one element differs from the clean-cache run
    run.guard_ok = false;
    run.guard_detail = "guard";
    run.inputs_ok = false;
    run.inputs_detail = "inputs";
    run.unwritten = 1;
    run.first_unwritten = 3;
  }
  /// Makes the check of verdict `v` pass.
  void repair(Verdict v) {
    switch (v) {
      case Verdict::oob_write: run.guard_ok = true; break;
      case Verdict::input_mutated: run.inputs_ok = true; break;
      case Verdict::unwritten: run.unwritten = 0; break;
      case Verdict::poisoned: run.out[0] = ref.out[0]; break;
      case Verdict::variant: clean_bits = run.bits; break;
      case Verdict::fail: run.out = ref.out; break;
      default: FAIL() << verdict_name(v) << " is not one of judge()'s verdicts";
    }
  }
  Verdict judged() const {
    const KernelPtr k = Registry::global().find("cpu.reference");
    return judge(cell, *k, ref, std::nullopt, run, &clean_bits, Tolerance{}).verdict;
  }
};

// judge() gives the first verdict of verdict_table() whose check fails: with every check failing, repairing
// them one at a time in table order walks the table from oob_write down to pass.
TEST(VerdictOrder, JudgePicksTheFirstVerdictOfTheTableThatApplies) {
  const std::set<Verdict> judges{Verdict::oob_write, Verdict::input_mutated, Verdict::unwritten,
                                 Verdict::poisoned,  Verdict::variant,       Verdict::fail};
  Everything e;
  std::size_t walked = 0;
  for (const VerdictInfo& v : verdict_table()) {
    if (!judges.count(v.value)) continue;
    EXPECT_EQ(e.judged(), v.value) << "expected " << v.name << " after repairing the checks above it";
    e.repair(v.value);
    ++walked;
  }
  EXPECT_EQ(e.judged(), Verdict::pass);
  EXPECT_EQ(walked, judges.size()) << "some verdict of judge() is missing from verdict_table()";
}

// The case the reference's verdict table decides: a run that is both unwritten and poisoned is unwritten, and one that
// is poisoned and beyond tolerance is poisoned, whichever check judge() happens to make first.
TEST(VerdictOrder, UnwrittenAndPoisonedIsUnwritten) {
  Everything e;
  e.repair(Verdict::oob_write);
  e.repair(Verdict::input_mutated);
  EXPECT_EQ(e.judged(), Verdict::unwritten);
  e.repair(Verdict::unwritten);
  EXPECT_EQ(e.judged(), Verdict::poisoned);
}

// ---- the documents -----------------------------------------------------------------------------------

/// The source tree: the built-in suites live in its suites/ folder.
std::filesystem::path source_root() { return std::filesystem::path(suites_dir()).parent_path(); }

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The cells of each row of the first Markdown table after the line `heading`, without the header and rule
/// rows; each cell trimmed, Markdown code spans and `\|` escapes undone.
std::vector<std::vector<std::string>> markdown_table(const std::string& doc, const std::string& heading) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(doc);
  std::string line;
  bool in_section = false, in_table = false;
  int header_rows = 0;
  while (std::getline(in, line)) {
    if (!in_section) {
      in_section = line == heading;
      continue;
    }
    if (line.rfind("|", 0) != 0) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    if (header_rows++ < 2) continue;
    std::vector<std::string> cells;
    std::string cell;
    for (std::size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
        cell += '|';
        ++i;
      } else if (line[i] == '|') {
        cells.push_back(cell);
        cell.clear();
      } else if (line[i] != '`') {
        cell += line[i];
      }
    }
    for (std::string& c : cells) {
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
    }
    rows.push_back(cells);
  }
  return rows;
}

/// Rows of `doc_rows` against `table` as (column of the name, column expected) pairs: one row per table row,
/// in table order, each column equal to what `expected` makes of the row.
template <typename Row>
void expect_rows(const std::vector<std::vector<std::string>>& doc_rows, std::span<const Row> table,
                 const std::function<std::vector<std::string>(const Row&)>& expected, const std::string& where) {
  ASSERT_EQ(doc_rows.size(), table.size()) << where << " has " << doc_rows.size() << " rows, the table " << table.size();
  for (std::size_t i = 0; i < table.size(); ++i) EXPECT_EQ(doc_rows[i], expected(table[i])) << where << " row " << i + 1;
}

TEST(Docs, ReferenceListsEveryVerdictInOrderOfPrecedence) {
  const auto rows =
      markdown_table(read(source_root() / "docs" / "REFERENCE.md"), "## Verdicts (in order of precedence)");
  expect_rows<VerdictInfo>(rows, verdict_table(),
                           [](const VerdictInfo& v) {
                             return std::vector<std::string>{std::string(v.name), std::string(v.meaning)};
                           },
                           "docs/REFERENCE.md's verdict table");
}

TEST(Docs, ReferenceListsEveryPoisonValueTargetAndRegion) {
  const std::string reference = read(source_root() / "docs" / "REFERENCE.md");
  const auto rows = markdown_table(reference, "## Faults");
  expect_rows<PoisonInfo>(rows, poison_table(),
                          [](const PoisonInfo& p) {
                            return std::vector<std::string>{std::string(p.name), p.nonfinite ? "non-finite" : "finite",
                                                            std::string(p.meaning)};
                          },
                          "docs/REFERENCE.md's poison table");
  const auto section = reference.find("## Faults");
  ASSERT_NE(section, std::string::npos);
  const std::string prose = reference.substr(section, reference.find("| poison |", section) - section);
  for (const TargetInfo& t : target_table())
    EXPECT_NE(prose.find("`" + std::string(t.name) + "`"), std::string::npos) << "target " << t.name;
  for (const RegionInfo& r : region_table())
    EXPECT_NE(prose.find("`" + std::string(r.name) + "`"), std::string::npos) << "region " << r.name;
}

TEST(Docs, SuitesMdListsEveryVariantTokenOfTheCaseFieldTable) {
  // docs/SUITES.md's variants table has a row per token of every case field a `variants` item can set.
  const std::string doc = read(source_root() / "docs" / "SUITES.md");
  for (const CaseField& f : case_field_table()) {
    if (f.suite_key != "variants") continue;
    EXPECT_NE(doc.find("| `" + std::string(f.token)), std::string::npos) << f.token;
    EXPECT_NE(doc.find("| `" + std::string(f.name) + "` |"), std::string::npos) << f.name;
  }
}

// The ABI version the plugin guide names is the header's: a plugin author reads it to know which fields exist.
TEST(Docs, YourKernelNamesTheKernelAbiVersionOfTheHeader) {
  const std::string doc = read(source_root() / "docs" / "YOUR-KERNEL.md");
  const std::string want = "kernel ABI version " + std::to_string(PACHECK_ABI_VERSION);
  EXPECT_NE(doc.find(want), std::string::npos) << "docs/YOUR-KERNEL.md does not say '" << want << "'";
  const std::string stem = "kernel ABI version ";
  for (std::size_t at = doc.find(stem); at != std::string::npos; at = doc.find(stem, at + 1))
    EXPECT_EQ(doc.compare(at, want.size(), want), 0) << "a stale ABI version: " << doc.substr(at, want.size() + 8);
}

TEST(Docs, PropertiesMdListsEveryPropertyInOrder) {
  const std::string doc = read(source_root() / "docs" / "PROPERTIES.md");
  const auto rows = markdown_table(doc, "## The properties");
  const auto table = prop::property_table();
  ASSERT_EQ(rows.size(), table.size()) << "docs/PROPERTIES.md's property table";
  for (std::size_t i = 0; i < table.size(); ++i) {
    ASSERT_GE(rows[i].size(), 2u);
    EXPECT_EQ(rows[i][0], std::to_string(i + 1));
    EXPECT_EQ(rows[i][1], table[i].name) << "row " << i + 1;
  }
}

}  // namespace
}  // namespace pacheck
