// The junit format: junit.xml, for CI test-report viewers. <testsuites> with one <testsuite> per suite and
// kernel under test (properties carry the environment), one <testcase> per cell: <failure type="VERDICT">
// for a wrong output, <error type="VERDICT"> for error/crash/timeout, <skipped> for declined, each carrying
// the verdict, detail and metrics; then per suite a "SUITE.negative-controls" testsuite with one <testcase>
// per negative control (classname pacheck.SUITE.negative-controls, name the control): its counts as
// properties, its caught cells listed in <system-out>, a <failure> listing its missed cells (and any failed
// outside its expected failures) when there are, <skipped> when no selected cell could show its fault; its
// not_run cells are counted there, never a testcase each (report.json and results.jsonl hold every cell); plus a "pacheck.checks" testsuite with the comparator self-test, each negative
// control and each kernel's "ran at least one cell" check, so the file fails exactly when the exit code is
// not 0. Written with pugixml, which does the XML escaping.
// Each testsuite's properties also hold its cells per verdict ("verdicts"; pacheck.checks: the whole run's);
// pacheck.checks's also the outcome and which negative controls ran (text.hpp's headline), and a run with
// none has a skipped "a negative control ran" testcase saying so.
#include <fmt/format.h>
#include <pugixml.hpp>

#include <algorithm>
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

/// One suite-and-kernel's testcases into `suite` (a kernel under test: a control is add_control's);
/// returns their counts.
Counts add_cells(pugi::xml_node suite, const RunSummary& s, const std::string& suite_name, const KernelSummary& ks) {
  Counts c;
  const std::string classname = "pacheck." + suite_name + "." + ks.kernel;
  for (const auto& r : s.results) {
    if (r.suite != suite_name || r.kernel != ks.kernel) continue;
    ++c.tests;
    c.time += r.seconds;
    pugi::xml_node tc = add_testcase(suite, classname, r.cell_id, seconds(r.seconds));
    switch (cell_outcome(r, /*negative_control=*/false)) {
      case CellOutcome::passed:
      case CellOutcome::caught:  // neither this nor missed: those are a control's outcomes
      case CellOutcome::missed: break;
      case CellOutcome::declined:
      case CellOutcome::not_run:
        ++c.skipped;
        add_skipped(tc, r.verdict == Verdict::declined ? "declined: " + r.detail : r.detail);
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

/// Cells of a control's failure text with their metrics; the rest are counted (report.json has them all).
constexpr std::size_t kListedControlCells = 100;

/// One line per cell of `cells`: its verdict and id (the system-out of a control's testcase).
std::string cell_lines(const std::vector<const CellResult*>& cells) {
  std::string out;
  for (const CellResult* r : cells) out += fmt::format("  {:<17} {}\n", verdict_name(r->verdict), r->cell_id);
  return out;
}

/// The <failure> of a control with cells that fail the run: its missed expected failures (instrument
/// blind) and any cell failed outside them, each with its metrics and repro command.
void add_control_failure(pugi::xml_node tc, const RunSummary& s, const KernelSummary& ks,
                         const std::vector<const CellResult*>& failing) {
  const std::string message =
      ks.missed > 0 ? fmt::format("negative control not caught: {} of {} cells it must fail passed (instrument blind)",
                                  ks.missed, ks.missed + ks.caught)
                    : fmt::format("negative control failed {} cells outside its expected failures", ks.failed);
  std::string text;
  for (std::size_t i = 0; i < failing.size() && i < kListedControlCells; ++i) {
    const CellResult& r = *failing[i];
    const bool missed = cell_outcome(r, true) == CellOutcome::missed;
    text += fmt::format("{} {}\n{}\nrepro: {}\n\n", missed ? "MISSED" : "FAILED", r.cell_id, metrics_text(r),
                        repro_command(r, s.judge_flags));
  }
  if (failing.size() > kListedControlCells)
    text += fmt::format("... and {} more in report.json\n", failing.size() - kListedControlCells);
  add_outcome(tc, "failure", ks.missed > 0 ? "missed" : "failed", message, text);
}

/// One suite's negative control `kernel` as one testcase of `suite`; returns its counts.
Counts add_control(pugi::xml_node suite, const RunSummary& s, const std::string& suite_name, const std::string& kernel) {
  const KernelSummary ks = kernel_summary_in(s, suite_name, kernel);
  Counts c;
  std::vector<const CellResult*> caught, failing, errored;
  for (const auto& r : s.results) {
    if (r.suite != suite_name || r.kernel != kernel) continue;
    c.time += r.seconds;
    const CellOutcome o = cell_outcome(r, true);
    if (o == CellOutcome::caught) caught.push_back(&r);
    if (o == CellOutcome::missed || o == CellOutcome::failed) failing.push_back(&r);
    if (o == CellOutcome::caught && is_error_verdict(r.verdict)) errored.push_back(&r);
  }
  c.tests = 1;
  pugi::xml_node tc = add_testcase(suite, "pacheck." + suite_name + ".negative-controls", kernel, seconds(c.time));
  tc.append_child("properties");
  add_property(tc, "outcome", std::string(control_outcome_name(ks.control)));
  for (const auto& [name, n] : {std::pair{"caught", ks.caught}, std::pair{"missed", ks.missed},
                                std::pair{"not_run", ks.not_run}, std::pair{"declined", ks.declined},
                                std::pair{"passed", ks.passed}, std::pair{"failed", ks.failed}})
    add_property(tc, name, std::to_string(n));
  if (!failing.empty()) {
    ++c.failures;
    add_control_failure(tc, s, ks, failing);
  } else if (ks.control == ControlOutcome::not_exercised) {
    ++c.skipped;
    add_skipped(tc, fmt::format("not exercised: no selected cell is among its expected failures ({} not run, {} declined)",
                                ks.not_run, ks.declined));
  }
  std::string out = fmt::format("negative control {}: {} ({} caught, {} missed, {} not run, {} declined); every cell "
                                "with its metrics is in the report directory's report.json and results.jsonl\n",
                                kernel, control_outcome_name(ks.control), ks.caught, ks.missed, ks.not_run, ks.declined);
  if (!errored.empty())
    out += "caught by an error, not by the comparator (the kernel errored, crashed or timed out):\n" + cell_lines(errored);
  if (!caught.empty()) out += "caught:\n" + cell_lines(caught);
  tc.append_child("system-out").text() = xml_text(out).c_str();
  return c;
}

/// The testsuite "SUITE.negative-controls" of `root`: one testcase per negative control with results in
/// the suite; nothing when it has none. Returns its counts.
Counts add_controls_suite(pugi::xml_node root, const RunSummary& s, const std::string& suite_name, const ReportMeta& meta) {
  pugi::xml_node node = open_suite(root, suite_name + ".negative-controls");
  add_properties(node, meta.environment);
  Counts c;
  std::vector<int> verdicts(verdict_table().size(), 0);
  for (const auto& ks : s.kernels) {
    if (ks.control == ControlOutcome::not_control) continue;
    const bool any = std::any_of(s.results.begin(), s.results.end(),
                                 [&](const CellResult& r) { return r.suite == suite_name && r.kernel == ks.kernel; });
    if (!any) continue;
    c.add(add_control(node, s, suite_name, ks.kernel));
    for (const auto& r : s.results)
      if (r.suite == suite_name && r.kernel == ks.kernel) ++verdicts[verdict_rank(r.verdict)];
  }
  if (c.tests == 0) {
    root.remove_child(node);
    return c;
  }
  add_property(node, "verdicts", verdict_counts_text(verdicts));
  set_counts(node, c);
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

  for (const auto& suite : suites_of(s)) {
    for (const auto& ks : s.kernels) {
      if (ks.control != ControlOutcome::not_control) continue;  // add_controls_suite, below
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
    all.add(add_controls_suite(root, s, suite, meta));
  }

  // Run-level checks, so the file fails exactly when the exit code is not 0.
  pugi::xml_node checks = open_suite(root, "pacheck.checks");
  add_properties(checks, meta.environment);
  add_property(checks, "verdicts", verdicts_text(s));
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
