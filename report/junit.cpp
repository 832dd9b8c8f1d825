// The junit format: junit.xml, for CI test-report viewers. <testsuites> with one <testsuite> per suite and
// kernel (properties carry the environment), one <testcase> per cell: <failure type="VERDICT"> for a wrong
// output, <error type="VERDICT"> for error/crash/timeout, <skipped> for declined, each carrying the verdict,
// detail and metrics; plus a "pacheck.checks" testsuite with the comparator self-test, each negative
// control and each kernel's "ran at least one cell" check, so the file fails exactly when the exit code is
// not 0. Written with pugixml, which does the XML escaping.
// Each testsuite's properties also hold its cells per verdict ("verdicts"; pacheck.checks: the whole run's);
// pacheck.checks's also the outcome and which negative controls ran (text.hpp's headline), and a run with
// none has a skipped "a negative control ran" testcase saying so.
#include <fmt/format.h>
#include <pugixml.hpp>

#include <ostream>

#include "report/report.hpp"
#include "report/text.hpp"

namespace pacheck {

namespace {

/// `raw` as text XML 1.0 can carry at all: invalid UTF-8 and control characters other than tab, newline
/// and carriage return (not allowed even as character references) become '?'. pugixml escapes the rest.
std::string xml_text(const std::string& raw) {
  std::string out = valid_utf8(raw);
  for (char& ch : out)
    if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') ch = '?';
  return out;
}

std::string seconds(double s) { return fmt::format("{:.6f}", s); }

/// A <testsuites> or <testsuite> element's counts, kept as its testcases are added and written at the end
/// (attributes in the order JUnit consumers show them).
struct Counts {
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  double time = 0;
  void add(const Counts& c) {
    tests += c.tests;
    failures += c.failures;
    errors += c.errors;
    skipped += c.skipped;
    time += c.time;
  }
};

pugi::xml_node open_suite(pugi::xml_node parent, const std::string& name) {
  pugi::xml_node n = parent.append_child("testsuite");
  n.append_attribute("name") = xml_text(name).c_str();
  for (const char* a : {"tests", "failures", "errors", "skipped", "time"}) n.append_attribute(a);
  return n;
}

void set_counts(pugi::xml_node n, const Counts& c) {
  n.attribute("tests") = c.tests;
  n.attribute("failures") = c.failures;
  n.attribute("errors") = c.errors;
  n.attribute("skipped") = c.skipped;
  n.attribute("time") = seconds(c.time).c_str();
}

/// One more <property> in `suite`'s <properties> (add_properties made it).
void add_property(pugi::xml_node suite, const std::string& name, const std::string& value) {
  pugi::xml_node p = suite.child("properties").append_child("property");
  p.append_attribute("name") = xml_text(name).c_str();
  p.append_attribute("value") = xml_text(value).c_str();
}

void add_properties(pugi::xml_node suite, const Environment& env) {
  suite.append_child("properties");
  for (const auto& [k, v] : environment_rows(env)) add_property(suite, k, v);
}

pugi::xml_node add_testcase(pugi::xml_node suite, const std::string& classname, const std::string& name,
                            const std::string& time) {
  pugi::xml_node c = suite.append_child("testcase");
  c.append_attribute("classname") = xml_text(classname).c_str();
  c.append_attribute("name") = xml_text(name).c_str();
  c.append_attribute("time") = time.c_str();
  return c;
}

/// <tag type="TYPE" message="MESSAGE">TEXT</tag> (tag: failure or error).
void add_outcome(pugi::xml_node testcase, const char* tag, const std::string& type, const std::string& message,
                 const std::string& text) {
  pugi::xml_node f = testcase.append_child(tag);
  f.append_attribute("type") = xml_text(type).c_str();
  f.append_attribute("message") = xml_text(message).c_str();
  f.text() = xml_text(text).c_str();
}

void add_skipped(pugi::xml_node testcase, const std::string& message) {
  testcase.append_child("skipped").append_attribute("message") = xml_text(message).c_str();
}

/// One suite-and-kernel's testcases into `suite`; returns their counts.
Counts add_cells(pugi::xml_node suite, const RunSummary& s, const std::string& suite_name, const KernelSummary& ks) {
  Counts c;
  const std::string classname = "pacheck." + suite_name + "." + ks.kernel;
  for (const auto& r : s.results) {
    if (r.suite != suite_name || r.kernel != ks.kernel) continue;
    ++c.tests;
    c.time += r.seconds;
    pugi::xml_node tc = add_testcase(suite, classname, r.cell_id, seconds(r.seconds));
    switch (cell_outcome(r, ks.control != ControlOutcome::not_control)) {
      case CellOutcome::passed: break;
      case CellOutcome::declined:
        ++c.skipped;
        add_skipped(tc, "declined: " + r.detail);
        break;
      case CellOutcome::not_run:
        ++c.skipped;
        add_skipped(tc, r.detail);
        break;
      case CellOutcome::caught:
        tc.append_child("system-out").text() =
            xml_text(fmt::format("negative control: the planted fault was caught ({})\n", verdict_name(r.verdict)) +
                     metrics_text(r))
                .c_str();
        break;
      case CellOutcome::missed:
        ++c.failures;
        add_outcome(tc, "failure", "missed",
                    "negative control not caught: this cell must fail but passed (instrument blind)", metrics_text(r));
        break;
      case CellOutcome::failed: {
        const bool err = is_error_verdict(r.verdict);
        (err ? c.errors : c.failures)++;
        add_outcome(tc, err ? "error" : "failure", std::string(verdict_name(r.verdict)),
                    fmt::format("{}: {}", verdict_name(r.verdict), r.detail), metrics_text(r));
        break;
      }
    }
  }
  return c;
}

void write_junit(std::ostream& out, const RunSummary& s, const ReportMeta& meta) {
  pugi::xml_document doc;
  pugi::xml_node decl = doc.append_child(pugi::node_declaration);
  decl.append_attribute("version") = "1.0";
  decl.append_attribute("encoding") = "UTF-8";
  pugi::xml_node root = doc.append_child("testsuites");
  root.append_attribute("name") = xml_text("pacheck " + meta.suite).c_str();
  for (const char* a : {"tests", "failures", "errors", "skipped", "time"}) root.append_attribute(a);
  Counts all;

  for (const auto& suite : suites_of(s))
    for (const auto& ks : s.kernels) {
      pugi::xml_node node = open_suite(root, suite + "." + ks.kernel);
      add_properties(node, meta.environment);
      const Counts c = add_cells(node, s, suite, ks);
      if (c.tests == 0) {
        root.remove_child(node);
        continue;
      }
      std::vector<int> verdicts(verdict_table().size(), 0);
      for (const auto& r : s.results)
        if (r.suite == suite && r.kernel == ks.kernel) ++verdicts[verdict_rank(r.verdict)];
      add_property(node, "verdicts", verdict_counts_text(verdicts));
      set_counts(node, c);
      all.add(c);
    }

  // Run-level checks, so the file fails exactly when the exit code is not 0.
  pugi::xml_node checks = open_suite(root, "pacheck.checks");
  add_properties(checks, meta.environment);
  add_property(checks, "verdicts", verdict_counts_text(s.verdicts));
  const Headline h = headline(s);
  add_property(checks, "outcome", fmt::format("{} (exit {}): {}; {}", h.word, h.code, h.meaning, h.counts));
  add_property(checks, "negative controls", h.controls);
  Counts c;
  for (const RunCheck& check : run_checks(s)) {
    ++c.tests;
    pugi::xml_node tc = add_testcase(checks, "pacheck.checks", check.name, "0");
    if (check.status == RunCheck::Status::skipped) {
      ++c.skipped;
      add_skipped(tc, check.message);
    } else if (check.status == RunCheck::Status::failed) {
      ++c.failures;
      add_outcome(tc, "failure", "check", check.message, check.text);
    }
  }
  set_counts(checks, c);
  all.add(c);
  set_counts(root, all);
  doc.save(out, "  ", pugi::format_indent, pugi::encoding_utf8);
}

}  // namespace

std::unique_ptr<ReportFormat> make_junit_format(std::ostream& out, const FormatOptions&) {
  return std::make_unique<DocumentFormat>(out, write_junit);
}

}  // namespace pacheck
