// The console format: what `pacheck run` and `pacheck score` print by default. The run's title, then one
// table row per cell as it finishes, then per-kernel counts, the cells per verdict, the comparator self-test
// and the closing "N passed, M failed" line.
#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "kernels/backend.hpp"
#include "report/report.hpp"

namespace pacheck {

namespace {

constexpr int kCellWidth = 58;
std::string clip(const std::string& s, std::size_t w) { return s.size() <= w ? s : s.substr(0, w - 1) + "~"; }

class ConsoleFormat : public ReportFormat {
 public:
  ConsoleFormat(std::ostream& out, const FormatOptions& opt) : out_(out), only_failures_(opt.only_failures) {}

  void run_started(const RunStart& run) override {
    out_ << run.title << "\n";
    for (const auto& n : run.notes) out_ << n << "\n";
    // max_abs and mean_abs next to rel_linf: fp8 results are usually quoted as max / mean absolute error
    // against an fp32 reference (seed 002), so those numbers can be compared directly.
    out_ << fmt::format("\n{:<{}} {:<20} {:<15} {:<8} {:<13} {:>9} {:>9} {:>9} {:>7}\n", "cell", kCellWidth, "kernel",
                        "fault", "length", "verdict", "rel_linf", "max_abs", "mean_abs", "margin");
    out_.flush();
  }

  void cell_finished(const CellResult& r) override {
    // A live result carries expected_fail only for a negative control (Kernel::expected_failures()).
    const CellOutcome outcome = cell_outcome(r, /*negative_control=*/r.expected_fail);
    if (only_failures_ && (outcome == CellOutcome::passed || outcome == CellOutcome::declined)) return;
    std::string verdict(verdict_name(r.verdict));
    if (outcome == CellOutcome::caught) verdict += " (caught)";
    if (outcome == CellOutcome::missed) verdict += " (MISSED)";
    // The cell column shows the case; the fault has its own column.
    const char* length = r.straddle ? "straddle" : "aligned";
    if (r.verdict == Verdict::declined || r.verdict == Verdict::error || r.verdict == Verdict::crash ||
        r.verdict == Verdict::timeout) {
      out_ << fmt::format("{:<{}} {:<20} {:<15} {:<8} {:<13} {}\n", clip(r.case_id, kCellWidth), kCellWidth, r.kernel,
                          r.fault, length, verdict, r.detail);
    } else {
      out_ << fmt::format("{:<{}} {:<20} {:<15} {:<8} {:<13} {:>9.2e} {:>9.2e} {:>9.2e} {:>7.3f}\n",
                          clip(r.case_id, kCellWidth), kCellWidth, r.kernel, r.fault, length, verdict,
                          r.metrics.rel_linf, r.metrics.max_abs, r.metrics.mean_abs, r.margin);
    }
    out_.flush();
  }

  void run_ended(const RunSummary& s, const ReportMeta& meta) override {
    out_ << fmt::format("\n{:<22} {:>6} {:>6} {:>8} {:>6} {:>6}  {}\n", "kernel", "passed", "failed", "declined",
                        "caught", "missed", "negative control");
    for (const auto& k : s.kernels)
      out_ << fmt::format("{:<22} {:>6} {:>6} {:>8} {:>6} {:>6}  {}{}\n", k.kernel, k.passed, k.failed, k.declined,
                          k.caught, k.missed, control_outcome_name(k.control),
                          !k.vacuous ? ""
                          : s.shard  ? "  (no cell in this shard: the merged run is judged)"
                                     : "  (NO CELL RAN: counts as a failure)");
    out_ << fmt::format("verdicts: {}\n", verdict_counts_text(s.verdicts));
    out_ << fmt::format("comparator self-test: {}\n", s.selftest.passed ? "passed" : "FAILED");
    if (!s.selftest.passed)
      for (const auto& l : s.selftest.lines) out_ << fmt::format("  {}\n", l);
    if (s.blind) out_ << "INSTRUMENT BLIND: a negative control was not caught; this run proves nothing (exit 3)\n";
    out_ << fmt::format("\n{} passed, {} failed ({} declined, {} caught by negative controls)\n", s.passed, s.failed,
                        s.declined, s.caught);
    if (is_all_devices_spec(meta.device)) print_devices(s);
    out_.flush();
  }

  bool needs_environment() const override { return false; }

 private:
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
  bool only_failures_;
};

}  // namespace

std::unique_ptr<ReportFormat> make_console_format(std::ostream& out, const FormatOptions& options) {
  return std::make_unique<ConsoleFormat>(out, options);
}

}  // namespace pacheck
