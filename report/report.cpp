// The table of report formats.
#include "report/report.hpp"

#include <sstream>
#include <stdexcept>

namespace pacheck {

std::vector<CellSource> cell_sources_of(const Suite& suite) {
  std::vector<CellSource> out;
  out.reserve(suite.cells.size());
  for (const SuiteCell& c : suite.cells) out.push_back({c.file, c.line});
  return out;
}

void ReportFormat::run_started(const RunStart&) {}
void ReportFormat::cell_finished(const CellResult&) {}

// The factories, one per row below, each defined in its format's file (report/NAME.cpp).
FormatFactory make_console_format;
FormatFactory make_json_format;
FormatFactory make_junit_format;
FormatFactory make_markdown_format;
FormatFactory make_html_format;
FormatFactory make_tap_format;
FormatFactory make_github_format;

std::span<const FormatInfo> format_table() {
  // A format with a file is written into every report directory; one without is for stdout (--format)
  // only, for readers that take the output of the CI step running pacheck (a TAP harness; GitHub, which
  // parses workflow commands from a step's output only). `--format NAME > FILE` writes a file where wanted.
  static const FormatInfo rows[] = {
      {"console", nullptr, "the per-cell table as cells finish (negative controls' caught and not-run cells counted, not listed), then "
       "per-kernel counts (the default on stdout)",
       make_console_format},
      {"json", "report.json", "the run summary and every cell's metrics, with the environment fingerprint",
       make_json_format},
      {"junit", "junit.xml", "JUnit XML: one testcase per cell of a kernel under test, one per negative control with its counts, plus the "
       "run's checks, for CI test viewers",
       make_junit_format},
      {"markdown", "summary.md", "a Markdown summary for a pull-request comment or a GitHub step summary",
       make_markdown_format},
      {"html", "report.html", "one self-contained page of figures: fault matrix, error against length, margins",
       make_html_format},
      {"tap", nullptr, "TAP version 14: a test point per cell of a kernel under test and per run check (a negative control's with "
       "its counts), YAML diagnostics",
       make_tap_format},
      {"github", nullptr,
       "GitHub Actions annotations: ::error per failing cell with its repro command, ::notice summary",
       make_github_format},
  };
  return rows;
}

const FormatInfo* find_format(const std::string& name) {
  for (const FormatInfo& f : format_table())
    if (name == f.name) return &f;
  return nullptr;
}

std::string format_names() {
  std::string out;
  for (const FormatInfo& f : format_table()) out += (out.empty() ? "" : ", ") + std::string(f.name);
  return out;
}

std::string render_format(const std::string& format, const RunSummary& s, const ReportMeta& meta) {
  const FormatInfo* f = find_format(format);
  if (!f) throw std::invalid_argument("no report format named '" + format + "' (known: " + format_names() + ")");
  std::ostringstream out;
  f->make(out, FormatOptions{})->run_ended(s, meta);
  return out.str();
}

}  // namespace pacheck
