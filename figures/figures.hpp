// The figures stage: report.html's figures, drawn from a finished run's results as inline SVG
// (figures/svg.hpp, the SVG writer). The page around them and the html format are report/html.cpp
// (report/html_report.hpp); this stage comes before report/ because that format, a row of report's format
// table, draws them, and it needs only judge's results, verdicts and metrics and core's case ids.
//   1. the fault matrix per suite and kernel: cells by poison target x straddling/aligned length x dtype x
//      GQA ratio, coloured by verdict and marked with its name (seed 000, figure 4);
//   2. error against context length per kernel: rel_linf of every shape, the min-max band across shapes
//      and the median where shapes share a length, on an axis of the measured lengths in order, with the
//      tolerance limits (seed 000, figure 2);
//   3. a heat map per suite and kernel of the margin (rel_linf / limit) per shape x length;
//   4. with `pacheck bench --json` results, the A/B time-ratio heat map, both times in each cell's hover
//      title (seed 000, figure 1).
// Every figure stays readable from 1 to thousands of results at 1280 px (ci/check-report-browser.sh measures
// it in Chromium): legends name only what is drawn, long labels are cut with the whole text in a hover
// title, and a figure too wide for the page scrolls sideways at full size rather than shrinking its text.
//
// Quick start: adding a figure
//   1. Create figures/NAME.cpp defining `std::string NAME_figure(const RunSummary& s, const std::vector<CellInfo>&
//      cells)` (declared below) in pacheck::html: an svg::Writer sized from its layout, a legend of only what it
//      draws (draw_legend), and figure(id, heading, chart(w), caption), whose caption says what good looks
//      like. Keep each step (gathering the data, the layout, the legend, one panel) a function of its own.
//   2. Give it an element id in html_ids and call it from html_report() in report/html.cpp, with a link in
//      the page's header.
//   3. Test it in tests/test_html_report.cpp through html_report() and, for layout, ci/check-report-browser.sh.
// The building blocks the figures share (legends, fitted labels, the heat-map layout) are in figures/parts.hpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "figures/svg.hpp"
#include "judge/summary.hpp"

namespace pacheck {

/// The element ids of the report's figures and sections (tests and the browser check look them up).
namespace html_ids {
inline constexpr const char* kFaultMatrix = "fig-fault-matrix";
inline constexpr const char* kErrorVsLength = "fig-error-length";
inline constexpr const char* kMargin = "fig-margin";
inline constexpr const char* kBenchRatio = "fig-bench-ratio";
inline constexpr const char* kProvenance = "sec-provenance";
}  // namespace html_ids

/// One kernel's timing in a bench row, as `pacheck bench --json` writes it.
struct BenchTimingRow {
  std::string kernel;
  bool ran = false;
  std::string note;     ///< why it did not run (declined, error)
  std::string verdict;  ///< correctness verdict of the timed case
  double median_us = 0, p10_us = 0, p90_us = 0;
  double rel_linf = 0;
};
/// One case of a bench table; ratio = time(A) / time(B) when both ran.
struct BenchCaseRow {
  std::string case_id;
  std::vector<BenchTimingRow> kernels;
  std::optional<double> ratio;
};
/// A `pacheck bench --json` file (report/html_report.hpp's load_bench reads one).
struct BenchTable {
  std::string suite;
  std::string device;
  std::vector<BenchCaseRow> rows;
};

/// The fault matrix's colour for a verdict. Chosen so the verdicts a reviewer must tell apart (pass, fail,
/// poisoned, integrity failures, process failures) stay apart for deuteranopes too.
svg::Rgb verdict_colour(Verdict v);
/// The text mark written in a fault-matrix cell of that verdict ("ok", "NaN", ...): colour is never the
/// only cue.
std::string verdict_mark(Verdict v);

namespace html {

/// One result with the parts of its case and fault the figures group by.
struct CellInfo {
  const CellResult* r = nullptr;
  std::string dtype;  ///< "bf16", or "bf16 q=f32 o=f32" for mixed dtypes
  std::string heads;  ///< "h32/8"
  int gqa = 1;
  int head_size = 0, block_size = 0;
  int length = 0;       ///< longest sequence of the batch
  std::string ctx;      ///< "4090" or "1030,33,517"
  std::string row_key;  ///< case id without the layout: the same suite cell for every kernel
  std::string shape;    ///< case id without lengths, seed and layout: a shape for figures 2 and 3
  std::string seed;
  std::string target;  ///< "clean", "K", "V", "K+V"
  std::string poison;  ///< "nan@tail", "" for clean
};
/// The kernels the figures draw, in the summary's order: the kernels under test. A negative control's
/// panels would repeat, cell by cell, what its one row of the page's table counts (a gate holds thousands
/// of its not_run cells), so controls are drawn only in a run of controls alone.
std::vector<std::string> drawn_kernels(const RunSummary& s);
/// Results of drawn_kernels(s), described, deduplicated by (suite, kernel, cell) in report order; results
/// whose case id does not parse are left out (they are still listed in the tables).
std::vector<CellInfo> describe_all(const RunSummary& s);

/// The figures of the page, each a <figure> (or a <section> saying why it is empty). None throws for a
/// well-formed summary.
std::string fault_matrix_figure(const RunSummary& s, const std::vector<CellInfo>& cells);
std::string error_length_figure(const RunSummary& s, const std::vector<CellInfo>& cells);
std::string margin_figure(const RunSummary& s, const std::vector<CellInfo>& cells);
/// Figure 4 from `bench` (nullptr: a note saying how to get it).
std::string bench_figure(const BenchTable* bench);

}  // namespace html
}  // namespace pacheck
