// report.html: one self-contained page a reviewer of a kernel PR reads instead of a wall of numbers.
// Inline SVG figures (report/svg.hpp), inline CSS, no script, no font files, no network:
//   1. the fault matrix per suite and kernel: cells by poison target x straddling/aligned length x dtype x
//      GQA ratio, coloured by verdict and marked with its name (seed 000, figure 4);
//   2. error against context length per kernel: rel_linf of every shape, the min-max band across shapes
//      and the median where shapes share a length, on an axis of the measured lengths in order, with the
//      tolerance limits (seed 000, figure 2);
//   3. a heat map per suite and kernel of the margin (rel_linf / limit) per shape x length;
//   4. with `pacheck bench --json` results, the A/B time-ratio heat map, both times in each cell's hover
//      title (seed 000, figure 1);
//   5. the environment fingerprint, the comparator self-test, the negative controls and the repro command
//      of every failing cell.
// Every figure stays readable from 1 to thousands of results at 1280 px (ci/check-report-browser.sh measures
// it in Chromium): legends name only what is drawn, long labels are cut with the whole text in a hover
// title, and a figure too wide for the page scrolls sideways at full size rather than shrinking its text.
// The html format of report/report.hpp's table writes this page (report/html.cpp); its figures live in
// report/html_*.cpp (report/html_parts.hpp lists them).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "exec/runner.hpp"
#include "report/report.hpp"
#include "report/svg.hpp"

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
/// A `pacheck bench --json` file.
struct BenchTable {
  std::string suite;
  std::string device;
  std::vector<BenchCaseRow> rows;
};
/// Reads a bench table. Throws ReportError naming what is missing or malformed.
BenchTable bench_from_json(const nlohmann::json& j);
/// Reads the bench table in the file `path`. Throws ReportError naming the file.
BenchTable load_bench(const std::string& path);

/// The fault matrix's colour for a verdict. Chosen so the verdicts a reviewer must tell apart (pass, fail,
/// poisoned, integrity failures, process failures) stay apart for deuteranopes too.
svg::Rgb verdict_colour(Verdict v);
/// The text mark written in a fault-matrix cell of that verdict ("ok", "NaN", ...): colour is never the
/// only cue.
std::string verdict_mark(Verdict v);

/// The report page for a finished (or merged) run, and `bench` when given (figure 4 is left out, with a
/// note on how to get it, otherwise). Never throws for a well-formed summary: cells whose case id cannot
/// be parsed are left out of the figures but still listed.
std::string html_report(const RunSummary& s, const ReportMeta& meta, const BenchTable* bench = nullptr);

}  // namespace pacheck
