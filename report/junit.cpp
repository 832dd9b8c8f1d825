// The junit format: junit.xml, for CI test-report viewers. <testsuites> with one <testsuite> per suite and
// kernel (properties carry the environment), one <testcase> per cell: <failure type="VERDICT"> for a wrong
// output, <error type="VERDICT"> for error/crash/timeout, <skipped> for declined, each carrying the verdict,
// detail and metrics; plus a "pacheck.checks" testsuite with the comparator self-test, each negative
// control and each kernel's "ran at least one cell" check, so the file fails exactly when the exit code is
// not 0.
#include <fmt/format.h>

#include <ostream>
#include <sstream>

#include "report/report.hpp"
#include "report/text.hpp"

namespace pacheck {

namespace {

/// XML attribute/text escaping. Control characters other than tab, newline and carriage return are not
/// allowed in XML 1.0 even as references, so they become '?'.
std::string xml(const std::string& raw) {
  std::string out;
  for (char ch : valid_utf8(raw)) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') out += '?';
        else out += ch;
    }
  }
  return out;
}

void write_junit(std::ostream& out, const RunSummary& s, const ReportMeta& meta) {
  struct Counts {
    int tests = 0, failures = 0, errors = 0, skipped = 0;
    double time = 0;
  };
  std::ostringstream body;
  Counts all;
  const auto env_rows = environment_rows(meta.environment);
  auto properties = [&](std::ostringstream& o) {
    o << "    <properties>\n";
    for (const auto& [k, v] : env_rows) o << "      <property name=\"" << xml(k) << "\" value=\"" << xml(v) << "\"/>\n";
    o << "    </properties>\n";
  };
  auto suite_open = [&](const std::string& name, const Counts& c) {
    all.tests += c.tests;
    all.failures += c.failures;
    all.errors += c.errors;
    all.skipped += c.skipped;
    all.time += c.time;
    return fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.6f}\">\n",
                       xml(name), c.tests, c.failures, c.errors, c.skipped, c.time);
  };

  for (const auto& suite : suites_of(s)) {
    for (const auto& ks : s.kernels) {
      Counts c;
      std::ostringstream cases;
      const std::string classname = "pacheck." + suite + "." + ks.kernel;
      for (const auto& r : s.results) {
        if (r.suite != suite || r.kernel != ks.kernel) continue;
        ++c.tests;
        c.time += r.seconds;
        cases << fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.6f}\"", xml(classname), xml(r.cell_id),
                             r.seconds);
        switch (cell_outcome(r, ks.control != ControlOutcome::not_control)) {
          case CellOutcome::passed: cases << "/>\n"; break;
          case CellOutcome::declined:
            ++c.skipped;
            cases << ">\n      <skipped message=\"" << xml("declined: " + r.detail) << "\"/>\n    </testcase>\n";
            break;
          case CellOutcome::caught:
            cases << ">\n      <system-out>"
                  << xml(fmt::format("negative control: the planted fault was caught ({})\n", verdict_name(r.verdict)) + metrics_text(r))
                  << "</system-out>\n    </testcase>\n";
            break;
          case CellOutcome::missed:
            ++c.failures;
            cases << ">\n      <failure type=\"missed\" message=\""
                  << xml("negative control not caught: this cell must fail but passed (instrument blind)") << "\">"
                  << xml(metrics_text(r)) << "</failure>\n    </testcase>\n";
            break;
          case CellOutcome::failed: {
            const bool err = is_error_verdict(r.verdict);
            (err ? c.errors : c.failures)++;
            const char* tag = err ? "error" : "failure";
            cases << ">\n      <" << tag << " type=\"" << verdict_name(r.verdict) << "\" message=\""
                  << xml(fmt::format("{}: {}", verdict_name(r.verdict), r.detail)) << "\">" << xml(metrics_text(r))
                  << "</" << tag << ">\n    </testcase>\n";
            break;
          }
        }
      }
      if (c.tests == 0) continue;
      body << suite_open(suite + "." + ks.kernel, c);
      properties(body);
      body << cases.str() << "  </testsuite>\n";
    }
  }

  // Run-level checks, so the file fails exactly when the exit code is not 0.
  Counts c;
  std::ostringstream cases;
  for (const RunCheck& check : run_checks(s)) {
    ++c.tests;
    cases << "    <testcase classname=\"pacheck.checks\" name=\"" << xml(check.name) << "\" time=\"0\"";
    if (check.status == RunCheck::Status::skipped) {
      ++c.skipped;
      cases << ">\n      <skipped message=\"" << xml(check.message) << "\"/>\n    </testcase>\n";
    } else if (check.status == RunCheck::Status::failed) {
      ++c.failures;
      cases << ">\n      <failure type=\"check\" message=\"" << xml(check.message) << "\">" << xml(check.text)
            << "</failure>\n    </testcase>\n";
    } else {
      cases << "/>\n";
    }
  }
  body << suite_open("pacheck.checks", c);
  properties(body);
  body << cases.str() << "  </testsuite>\n";

  out << fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.6f}\">\n",
                     xml("pacheck " + meta.suite), all.tests, all.failures, all.errors, all.skipped, all.time) +
         body.str() + "</testsuites>\n";
}

}  // namespace

std::unique_ptr<ReportFormat> make_junit_format(std::ostream& out, const FormatOptions&) {
  return std::make_unique<DocumentFormat>(out, write_junit);
}

}  // namespace pacheck
