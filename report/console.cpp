// The console format: what `pacheck run` and `pacheck score` print by default. The run's title, then one
// table row per cell in suite order (kernel-major; the full cell id last), except the cells of negative
// controls that text.hpp's listed_as_row leaves out (caught, not run: one line says how many and where they
// are kept), then per-kernel counts (a control's caught, missed and not run there), the cells per verdict,
// the comparator self-test, the closing "N passed, M failed" line and, last, every failure with the
// `pacheck repro` line that reruns it.
#include <fmt/format.h>

#include <algorithm>
#include <ostream>
#include <set>

#include "kernels/backend.hpp"
#include "report/report.hpp"
#include "report/text.hpp"

namespace pacheck {

namespace {

/// One error column of a row (text.hpp's unless_nonfinite).
std::string error_column(double v, const Metrics& m) { return unless_nonfinite(m, fmt::format("{:.2e}", v)); }
/// The margin column (text.hpp's unless_nonfinite: "nan" for a NaN output, as the error columns).
std::string margin_column(const CellResult& r) { return unless_nonfinite(r.metrics, fmt::format("{:.3f}", r.margin)); }

/// `padded` (a verdict padded to its column) with its verdict word in the SGR colour of `outcome` (the
/// padding after it left uncoloured), or as it is when `color` is false.
std::string colored(const std::string& padded, CellOutcome outcome, bool color) {
  if (!color) return padded;
  const char* sgr = "";
  switch (outcome) {
    case CellOutcome::passed:
    case CellOutcome::caught: sgr = "\033[32m"; break;
    case CellOutcome::failed:
    case CellOutcome::missed: sgr = "\033[1;31m"; break;
    case CellOutcome::declined:
    case CellOutcome::not_run: sgr = "\033[33m"; break;
  }
  const std::size_t end = padded.find_last_not_of(' ') + 1;
  return fmt::format("{}{}\033[0m{}", sgr, padded.substr(0, end), padded.substr(end));
}

/// Failures the closing list shows with their repro lines; the rest are counted.
constexpr std::size_t kListedFailures = 100;

// What adds a negative control to this command's run: `score` (meta.run null, or holding the score's inputs)
// takes a planted runner's outputs, `run` the device's built-in controls; each names only its own option.
std::string no_control_hint(const ReportMeta& meta) {
  const bool score = meta.run.is_null() || (meta.run.is_object() && meta.run.contains("score"));
  return score ? " (`pacheck score --control-outputs DIR` scores the outputs of your runner with a planted "
                              "V-tail fault beside yours as one, as `pacheck verify` needs)"
                            : " (`pacheck run --with-controls` adds the device's built-in controls to a --plugin "
                              "or --kernel selection)";
}

class ConsoleFormat : public ReportFormat {
 public:
  ConsoleFormat(std::ostream& out, const FormatOptions& opt)
      : out_(out), only_failures_(opt.only_failures), quiet_(opt.quiet), color_(opt.color) {}

  void run_started(const RunStart& run) override {
    controls_.insert(run.negative_controls.begin(), run.negative_controls.end());
    results_in_ = run.results_in;
    out_ << run.title << "\n";
    for (const auto& n : run.notes) out_ << n << "\n";
    // max_abs and mean_abs next to rel_linf: fp8 results are usually quoted as max / mean absolute error
    // against an fp32 reference (seed 002), so those numbers can be compared directly. The cell id comes
    // last and whole (fault included): it pastes into `pacheck repro` and --filter as it stands.
    out_ << fmt::format("\n{:<24} {:<25} {:>9} {:>9} {:>9} {:>7} {:<8} {}\n", "kernel", "verdict", "rel_linf",
                        "max_abs", "mean_abs", "margin", "length", "cell");
    out_.flush();
  }

  void cell_finished(const CellResult& r) override {
    // A live result carries expected_fail only for a negative control (Kernel::expected_failures()), and only
    // a control's cells are not_run.
    const bool control = controls_.count(r.kernel) > 0 || r.expected_fail || r.verdict == Verdict::not_run;
    if (!listed_as_row(r, control)) return;  // counted in run_ended's line and the control's table row
    const CellOutcome outcome = cell_outcome(r, control);
    const bool failing = outcome == CellOutcome::failed || outcome == CellOutcome::missed;
    if (quiet_ && !failing) return;
    if (only_failures_ &&
        (outcome == CellOutcome::passed || outcome == CellOutcome::declined || outcome == CellOutcome::not_run))
      return;
    std::string verdict(verdict_name(r.verdict));
    if (outcome == CellOutcome::caught) verdict += " (caught)";
    if (outcome == CellOutcome::missed) verdict += " (MISSED)";
    const char* length = r.straddle ? "straddle" : "aligned";
    const std::string shown = colored(fmt::format("{:<25}", verdict), outcome, color_);
    if (!has_output(r.verdict)) {
      // No output to measure: the reason follows the id as a shell comment, so a pasted line still works.
      out_ << fmt::format("{:<24} {} {:>9} {:>9} {:>9} {:>7} {:<8} {}{}\n", r.kernel, shown, "-", "-", "-", "-",
                          length, r.cell_id, r.detail.empty() ? "" : "  # " + r.detail);
    } else {
      out_ << fmt::format("{:<24} {} {:>9} {:>9} {:>9} {:>7} {:<8} {}\n", r.kernel, shown,
                          error_column(r.metrics.rel_linf, r.metrics), error_column(r.metrics.max_abs, r.metrics),
                          error_column(r.metrics.mean_abs, r.metrics), margin_column(r), length, r.cell_id);
    }
    out_.flush();
  }

  void run_ended(const RunSummary& s, const ReportMeta& meta) override {
    if (const std::string counted = summarised_text(summarised_cells(s)); !counted.empty())
      out_ << fmt::format("\n{}: each control's counts are in the table below; {}\n", counted,
                          results_in_.empty() ? "--report-dir DIR or --json FILE keeps every cell"
                                              : "every cell is in " + results_in_);
    if (s.stopped)
      out_ << fmt::format("\nSTOPPED EARLY: {} of {} results finished; the counts below are theirs\n",
                          s.results.size(), s.planned);
    // A negative control is one row here: its caught, missed and not-run cells (the rows above list only
    // those that fail the run). The kernel column fits the longest name, so the counts stay in columns.
    std::size_t name_w = 22;
    for (const auto& k : s.kernels) name_w = std::max(name_w, k.kernel.size());
    out_ << fmt::format("\n{:<{}} {:>6} {:>6} {:>8} {:>6} {:>6} {:>7}  {}\n", "kernel", name_w, "passed", "failed",
                        "declined", "caught", "missed", "not run", "negative control");
    for (const auto& k : s.kernels)
      out_ << fmt::format("{:<{}} {:>6} {:>6} {:>8} {:>6} {:>6} {:>7}  {}{}\n", k.kernel, name_w, k.passed, k.failed,
                          k.declined, k.caught, k.missed, k.not_run, control_outcome_name(k.control),
                          !k.vacuous   ? ""
                          : s.stopped  ? "  (no cell finished before the stop)"
                          : s.shard    ? "  (no cell in this shard: the merged run is judged)"
                                     : "  (NO CELL RAN: counts as a failure)");
    out_ << fmt::format("verdicts: {}\n", verdicts_text(s));
    out_ << fmt::format("comparator self-test: {}\n", s.selftest.passed ? "passed" : "FAILED");
    if (!s.selftest.passed)
      for (const auto& l : s.selftest.lines) out_ << fmt::format("  {}\n", l);
    if (s.blind) out_ << "INSTRUMENT BLIND: a negative control was not caught; this run proves nothing (exit 3)\n";
    if (!s.kernels.empty())
      out_ << controls_statement(s)
           << (control_facts(s).ran() > 0 ? "" : no_control_hint(meta)) << "\n";
    for (const auto& k : s.kernels)
      if (k.control == ControlOutcome::not_exercised && !k.vacuous)
        out_ << fmt::format("negative control {}: not exercised, no selected cell is among its expected failures{}{}\n", k.kernel,
                            k.not_run > 0 ? fmt::format(" ({} not run)", k.not_run) : "",
                            k.declined > 0 ? fmt::format(" ({} declined by the control)", k.declined) : "");
    if (s.not_run > 0)
      out_ << fmt::format("not run: {} cells of negative controls outside their expected failures "
                          "(--controls-everywhere runs them)\n",
                          s.not_run);
    out_ << fmt::format("\n{} passed, {} failed ({} declined, {} caught by negative controls{})\n", s.passed, s.failed,
                        s.declined, s.caught, s.not_run > 0 ? fmt::format(", {} not run", s.not_run) : "");
    if (is_all_devices_spec(meta.device)) print_devices(s);
    print_failures(s);
    out_.flush();
  }

  bool needs_environment() const override { return false; }

 private:
  /// Last: every result that fails the run (cell_outcome failed or missed) with the command that reruns it,
  /// in suite order, kernel-major; the first kListedFailures of them, then how many more.
  void print_failures(const RunSummary& s) {
    std::vector<const CellResult*> failures;
    for (const auto& r : s.results)
      if (counts_as_failure(s, r)) failures.push_back(&r);
    if (failures.empty()) return;
    out_ << fmt::format("\nfailures ({}), each with the command that reruns it:\n", failures.size());
    for (std::size_t i = 0; i < failures.size() && i < kListedFailures; ++i) {
      const CellResult& r = *failures[i];
      std::string verdict(verdict_name(r.verdict));
      const CellOutcome outcome = cell_outcome(s, r);
      if (outcome == CellOutcome::missed) verdict += " (MISSED: negative control)";
      out_ << fmt::format("  {} {}\n", colored(fmt::format("{:<17}", verdict), outcome, color_),
                          repro_command(r, s.judge_flags));
    }
    if (failures.size() > kListedFailures)
      out_ << fmt::format("  ... and {} more (every failure is in report.json, or the rows of --only-failures)\n",
                          failures.size() - kListedFailures);
  }

  /// "devices: cuda:0 (12 cells), cuda:1 (12 cells)": which device ran how many cells (CellResult::device,
  /// in order of first appearance; declined cells ran nowhere and are not counted).
  void print_devices(const RunSummary& s) {
    std::vector<std::pair<std::string, int>> seen;
    for (const auto& r : s.results) {
      if (r.device.empty()) continue;
      auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& p) { return p.first == r.device; });
      if (it == seen.end()) seen.emplace_back(r.device, 1);
      else ++it->second;
    }
    std::string line;
    for (const auto& [dev, n] : seen) line += fmt::format("{}{} ({} cells)", line.empty() ? "" : ", ", dev, n);
    out_ << fmt::format("devices: {}\n", line.empty() ? "none ran a cell" : line);
  }

  std::ostream& out_;
  bool only_failures_, quiet_, color_;
  std::set<std::string> controls_;  ///< RunStart::negative_controls
  std::string results_in_;          ///< RunStart::results_in
};

}  // namespace

std::unique_ptr<ReportFormat> make_console_format(std::ostream& out, const FormatOptions& options) {
  return std::make_unique<ConsoleFormat>(out, options);
}

}  // namespace pacheck
