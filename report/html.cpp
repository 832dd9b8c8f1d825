// The html format: report.html, one self-contained page a reviewer of a kernel PR reads instead of a wall of
// numbers (report/html_report.hpp says what is on it; figures/figures.hpp draws its figures).
// This file: the page frame, its header and the provenance section.
#include <fmt/format.h>

#include <ostream>
#include <sstream>

#include "figures/figures.hpp"
#include "figures/svg.hpp"
#include "report/html_report.hpp"
#include "report/text.hpp"

namespace pacheck {

namespace {

using svg::escape;

/// Inline CSS. System fonts only (no @font-face: the page must not load anything); figure sizes come from
/// the SVGs' own width/height so layout does not depend on the fonts a machine has.
constexpr const char* kCss = R"(
:root { color-scheme: light; }
body { margin: 0; background: #fafafa; color: #1b1b1b;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans",
    "Liberation Sans", "DejaVu Sans", sans-serif; font-size: 15px; line-height: 1.45; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 28px 60px; background: #fff; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 19px; margin: 34px 0 6px; padding-top: 10px; border-top: 1px solid #ddd; }
h3 { font-size: 16px; margin: 20px 0 4px; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono",
  "DejaVu Sans Mono", monospace; font-size: 13px; }
pre { background: #f3f3f3; padding: 8px 10px; overflow-x: auto; border-radius: 4px; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { border: 1px solid #d8d8d8; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f1f1f1; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.lede { color: #444; margin: 0 0 12px; }
.outcome { padding: 8px 12px; border-radius: 4px; border-left: 6px solid; margin: 10px 0; }
.outcome.ok { background: #e8f1fa; border-color: #0072b2; }
.outcome.bad { background: #fdf0e6; border-color: #d55e00; }
nav ol { margin: 4px 0; padding-left: 22px; }
figure { margin: 14px 0 22px; }
figcaption { max-width: 980px; color: #333; font-size: 14px; margin-top: 6px; }
figcaption b { color: #000; }
.note { color: #555; font-style: italic; }
svg.chart { display: block; max-width: 100%; height: auto; margin: 8px 0; }
.chart-scroll { overflow-x: auto; max-width: 100%; }
.chart-scroll svg.chart { max-width: none; }
svg.chart text { font-family: inherit; }
svg.chart text:not([fill]) { fill: #222; }
svg.chart .tick { font-size: 11px; }
svg.chart .axis-label { font-size: 12px; font-weight: 600; }
svg.chart .panel-title { font-size: 13px; font-weight: 700; }
svg.chart .legend-title { font-size: 11px; }
svg.chart .legend { font-size: 11px; }
svg.chart .mark { font-size: 10px; font-weight: 700; pointer-events: none; }
svg.chart .row-label { font-size: 11px; }
svg.chart .col-label { font-size: 10.5px; }
svg.chart .cell:hover rect.fill { stroke: #000; stroke-width: 2; }
)";

// ---- section 5: provenance ------------------------------------------------------------------------------

/// Each negative control as one row (its outcome and cells by outcome), then its caught cells as one line
/// each, folded: its not_run cells are counted, never listed (every cell is in report.json). "" when the
/// run has no control.
std::string controls_table(const RunSummary& s) {
  std::ostringstream t, lists;
  t << "<table class=\"controls\"><tr><th>negative control</th><th>outcome</th><th>caught</th><th>missed</th>"
       "<th>not run</th><th>declined</th></tr>\n";
  bool any = false;
  for (const auto& k : s.kernels) {
    if (k.control == ControlOutcome::not_control) continue;
    any = true;
    const char* meaning = k.control == ControlOutcome::caught ? "caught: the instrument sees the planted fault"
                          : k.control == ControlOutcome::blind ? "BLIND: a planted fault passed unseen"
                                                               : "not exercised: no cell of this run is among its expected failures";
    t << "<tr><td class=\"mono\">" << escape(k.kernel) << "</td><td>" << escape(meaning) << "</td>";
    for (int n : {k.caught, k.missed, k.not_run, k.declined}) t << "<td class=\"num\">" << n << "</td>";
    t << "</tr>\n";
    std::string caught;
    for (const auto& r : s.results)
      if (r.kernel == k.kernel && cell_outcome(r, true) == CellOutcome::caught)
        caught += escape(fmt::format("{:<17} {}\n", verdict_name(r.verdict), r.cell_id));
    if (!caught.empty())
      lists << "<details><summary><span class=\"mono\">" << escape(k.kernel) << "</span>: its " << k.caught
            << " caught cells</summary>\n<pre class=\"caught\">" << caught << "</pre></details>\n";
  }
  if (!any) return "";
  t << "</table>\n";
  return t.str() + lists.str() +
         "<p class=\"note\">Missed cells are among the failing cells below. Cells outside a control's expected failures "
         "are not run (<code>--controls-everywhere</code> runs them); every cell of every control, with its metrics, is "
         "in the report directory's report.json and results.jsonl.</p>\n";
}

std::string provenance_section(const RunSummary& s, const ReportMeta& meta) {
  std::ostringstream o;
  o << "<section id=\"" << html_ids::kProvenance << "\">\n<h2>5. Provenance, instrument checks and repro commands</h2>\n";
  const Environment& e = meta.environment;
  o << "<h3>Environment fingerprint</h3>\n<table class=\"env\">\n";
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"pacheck version", e.pacheck_version}, {"git commit", e.git_commit},  {"build type", e.build_type},
      {"compiler", e.compiler},               {"host", e.host},              {"device", e.device},
      {"device name", e.device_name},         {"architecture", e.arch},      {"driver", e.driver},
      {"runtime", e.runtime},                 {"device description", e.device_description}};
  for (const auto& [k, v] : rows)
    if (!v.empty()) o << "<tr><th>" << escape(k) << "</th><td class=\"mono\">" << escape(v) << "</td></tr>\n";
  for (const auto& p : e.plugins)
    o << "<tr><th>plugin</th><td class=\"mono\">" << escape(p.path) << "<br>sha256 " << escape(p.sha256) << "</td></tr>\n";
  for (const auto& m : meta.merged_from)
    if (m.is_object()) o << "<tr><th>merged from</th><td class=\"mono\">" << escape(m.value("source", std::string())) << "</td></tr>\n";
  o << "</table>\n";

  o << "<h3>Comparator self-test</h3>\n<p>" << (s.selftest.passed ? "<b>passed</b>: the comparator flags the planted errors it is given."
                                                                     : "<b>FAILED</b>: the comparator missed a planted error; no verdict of this run can be trusted.")
    << "</p>\n";
  if (!s.selftest.lines.empty()) {
    o << "<details><summary>" << s.selftest.lines.size() << " checks</summary>\n<pre>";
    for (const auto& l : s.selftest.lines) o << escape(l) << "\n";
    o << "</pre></details>\n";
  }

  o << "<h3>Negative controls</h3>\n<p>" << escape(controls_statement(s)) << ".</p>\n";
  const std::string controls = controls_table(s);
  if (!controls.empty()) o << controls;
  else
    o << "<p class=\"note\">A clean result means more with one beside it: e.g. <code>--kernel cpu.vector_v</code> on the "
         "tail-poison suite must fail exactly at the straddling V cells.</p>\n";

  std::vector<const CellResult*> failing;
  for (const auto& r : s.results)
    if (counts_as_failure(s, r)) failing.push_back(&r);
  o << "<h3>Failing cells (" << failing.size() << ")</h3>\n";
  if (failing.empty()) {
    o << "<p>None: every cell of every kernel under test passed or was declined, and no negative control missed a "
         "planted fault (which controls ran: above).</p>\n";
  } else {
    constexpr std::size_t kShow = 300;
    o << "<p>Rerun one cell with every metric and its worst elements:</p>\n<pre class=\"repro\">";
    for (std::size_t i = 0; i < std::min(kShow, failing.size()); ++i) {
      const CellResult& r = *failing[i];
      const bool missed = cell_outcome(s, r) == CellOutcome::missed;
      o << escape(repro_command(r, s.judge_flags))
        << "   <span class=\"note\"># " << escape(missed ? "negative control MISSED (passed)" : std::string(verdict_name(r.verdict)))
        << (has_output(r.verdict) ? escape(", " + error_clause(r)) : "")
        << "</span>\n";
    }
    o << "</pre>\n";
    if (failing.size() > kShow) o << "<p class=\"note\">... and " << failing.size() - kShow << " more in junit.xml and report.json.</p>\n";
    if (!e.plugins.empty())
      o << "<p class=\"note\">Plugin kernels: load the same libraries when reproducing (their SHA-256 are above).</p>\n";
  }
  o << "</section>\n";
  return o.str();
}

// ---- header ---------------------------------------------------------------------------------------------

/// The per-kernel counts, as the console's table gives them: the kernels under test first, then the
/// negative controls (each one row: its caught, missed and not-run cells; section 5 lists them).
std::string kernel_table(const RunSummary& s) {
  std::ostringstream o;
  o << "<table class=\"kernels\"><tr><th>kernel</th><th>passed</th><th>failed</th><th>declined</th><th>caught</th>"
       "<th>missed</th><th>not run</th><th>negative control</th><th>verdicts</th></tr>\n";
  for (const bool controls : {false, true})
    for (const auto& k : s.kernels) {
      if ((k.control != ControlOutcome::not_control) != controls) continue;
      o << "<tr><td class=\"mono\">" << escape(k.kernel) << "</td>";
      for (int n : {k.passed, k.failed, k.declined, k.caught, k.missed, k.not_run}) o << "<td class=\"num\">" << n << "</td>";
      o << "<td>" << escape(std::string(control_outcome_name(k.control))) << (k.vacuous ? " (ran no cell)" : "") << "</td><td>"
        << escape(verdict_counts_text(k.verdicts)) << "</td></tr>\n";
    }
  o << "</table>\n";
  return o.str();
}

std::string header(const RunSummary& s, const ReportMeta& meta) {
  std::ostringstream o;
  o << "<h1>pacheck report: " << escape(meta.suite) << "</h1>\n";
  o << "<p class=\"lede\">" << escape(fmt::format("device {} \xC2\xB7 pacheck {} ({}) \xC2\xB7 {} results from {} kernel(s)", meta.device,
                                                   meta.environment.pacheck_version, meta.environment.git_commit, s.results.size(),
                                                   s.kernels.size()))
    << "</p>\n";
  const Headline h = headline(s);
  o << "<div class=\"outcome " << (h.code == 0 ? "ok" : "bad") << "\"><b>exit code " << h.code << "</b>: "
    << escape(fmt::format("{}. {}. {}. Verdicts: {}.", h.meaning, h.counts, h.controls, verdicts_text(s)))
    << "</div>\n";
  o << kernel_table(s);
  const std::vector<std::string> drawn = html::drawn_kernels(s);
  const std::size_t controls = control_facts(s).ran();
  if (controls > 0 && drawn.size() < s.kernels.size())
    o << "<p class=\"note\">The figures draw the kernels under test; the " << controls << " negative control"
      << (controls == 1 ? " is" : "s are") << " counted above and listed in <a href=\"#" << html_ids::kProvenance
      << "\">section 5</a> with their caught cells.</p>\n";
  o << "<nav><ol>"
    << fmt::format("<li><a href=\"#{}\">Fault matrix</a></li><li><a href=\"#{}\">Error against context length</a></li>"
                   "<li><a href=\"#{}\">Margin heat map</a></li><li><a href=\"#{}\">A/B time ratio</a></li>"
                   "<li><a href=\"#{}\">Provenance, checks and repro commands</a></li>",
                   html_ids::kFaultMatrix, html_ids::kErrorVsLength, html_ids::kMargin, html_ids::kBenchRatio, html_ids::kProvenance)
    << "</ol></nav>\n";
  return o.str();
}

/// The page without bench results (a report directory's report.html).
void write_html(std::ostream& out, const RunSummary& s, const ReportMeta& meta) { out << html_report(s, meta); }

}  // namespace

std::string html_report(const RunSummary& s, const ReportMeta& meta, const BenchTable* bench) {
  const std::vector<html::CellInfo> cells = html::describe_all(s);
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    // No network at all, even if a string in the page were mistaken for a URL.
    << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n"
    << "<title>" << escape(fmt::format("pacheck report: {} on {}", meta.suite, meta.device)) << "</title>\n"
    << "<style>" << kCss << "</style>\n</head>\n<body>\n<main>\n";
  o << header(s, meta);
  o << html::fault_matrix_figure(s, cells);
  o << html::error_length_figure(s, cells);
  o << html::margin_figure(s, cells);
  o << html::bench_figure(bench);
  o << provenance_section(s, meta);
  o << "</main>\n</body>\n</html>\n";
  return o.str();
}

std::unique_ptr<ReportFormat> make_html_format(std::ostream& out, const FormatOptions&) {
  return std::make_unique<DocumentFormat>(out, write_html);
}

}  // namespace pacheck
