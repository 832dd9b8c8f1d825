// The tap format: TAP version 14 (testanything.org) on stdout, for TAP harnesses (prove, tappy, node-tap,
// Jenkins' TAP plugin). One test point per cell of a kernel under test, in suite order, then one per run
// check (the comparator self-test, each negative control with its counts, each kernel ran a cell), then
// the plan; the stream fails (some `not ok`) exactly when the exit code is not 0:
//   ok 1 - cpu.reference h32/8 d128 bs16 bf16 ctx17 vllm seed7 clean
//   not ok 2 - planted.k h32/8 d128 bs16 bf16 ctx17 vllm seed7 V:nan@tail
//     ---
//     verdict: "poisoned"
//     detail: "..."
//     rel_linf: .nan
//     limit: 4.000e-03
//     margin: .nan
//     repro: "pacheck repro 'h32/8 ... V:nan@tail' --kernel planted.k"
//     ...
//   ok 3 - planted.k h32/8 ... # SKIP declined: ...
//   # 122 cells of negative controls are counted, not listed (2 caught, 120 not run): in their controls' points below
//   ok 4 - comparator self-test
//   ok 5 - cpu.vector_v: negative control caught (2 caught, 0 missed, 120 not run)
//   ...
//   1..8
// A declined cell is `# SKIP`. A negative control is one point, its check, with its counts; of its cells
// only those that fail the run (a missed expected failure: `not ok`, with its diagnostics) or errored have
// points of their own (text.hpp's listed_as_row). Closing comments give the outcome and which negative
// controls ran (text.hpp's headline). The points are written when the run ends (cells finish in an order
// that depends on threads, and a resumed run does not rerun its finished cells), so the stream is the same
// for any thread count.
#include <fmt/format.h>

#include <ostream>

#include "report/json.hpp"
#include "report/report.hpp"
#include "report/text.hpp"

namespace pacheck {

namespace {

/// A test point's description: one line, '#' and '\' escaped (TAP 14 reads an unescaped '#' as a directive).
std::string description(const std::string& raw) {
  std::string out;
  for (char ch : valid_utf8(raw)) {
    if (ch == '#' || ch == '\\') out += '\\';
    out += ch == '\n' || ch == '\r' ? ' ' : ch;
  }
  return out;
}

/// A directive's reason: one line.
std::string reason(const std::string& raw) {
  std::string out = valid_utf8(raw);
  for (char& ch : out)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return out;
}

/// A YAML scalar for a string: double-quoted with JSON's escapes, which YAML reads alike.
std::string yaml_string(const std::string& s) { return json_text(nlohmann::json(s)); }
/// A metric as a YAML float: `text` as the other formats print it (metric_text, sci), with "nan", "inf" and
/// "-inf" in YAML's spelling of the same values (.nan, .inf, -.inf), which YAML reads as floats, not strings.
std::string yaml_number(const std::string& text) {
  if (text == "nan") return ".nan";
  if (text == "inf") return ".inf";
  if (text == "-inf") return "-.inf";
  return text;
}

class TapFormat : public ReportFormat {
 public:
  explicit TapFormat(std::ostream& out) : out_(out) {}

  void run_started(const RunStart& run) override {
    version();
    results_in_ = run.results_in;
    out_ << "# " << reason(run.title) << "\n";
    for (const auto& n : run.notes) out_ << "# " << reason(n) << "\n";
    out_.flush();
  }

  void run_ended(const RunSummary& s, const ReportMeta&) override {
    version();
    int n = 0;
    for (const CellResult& r : s.results) {
      const bool control = is_negative_control(s, r.kernel);
      if (!listed_as_row(r, control)) continue;  // in its control's point and the comment below
      const std::string what = description(r.kernel + " " + r.cell_id);
      switch (cell_outcome(r, control)) {
        case CellOutcome::passed: out_ << fmt::format("ok {} - {}\n", ++n, what); break;
        case CellOutcome::declined:
          out_ << fmt::format("ok {} - {} # SKIP declined: {}\n", ++n, what, reason(r.detail));
          break;
        case CellOutcome::not_run: out_ << fmt::format("ok {} - {} # SKIP {}\n", ++n, what, reason(r.detail)); break;
        case CellOutcome::caught:
          out_ << fmt::format("ok {} - {} (negative control: the planted fault was caught, {})\n", ++n, what,
                              verdict_name(r.verdict));
          break;
        case CellOutcome::missed:
          out_ << fmt::format("not ok {} - {} (negative control MISSED)\n", ++n, what);
          diagnostics(r, "negative control not caught: this cell must fail but passed (instrument blind)", s.judge_flags);
          break;
        case CellOutcome::failed:
          out_ << fmt::format("not ok {} - {}\n", ++n, what);
          diagnostics(r, r.detail, s.judge_flags);
          break;
      }
    }
    if (const std::string counted = summarised_text(summarised_cells(s)); !counted.empty())
      out_ << "# " << counted << ": in their controls' points below"
           << (results_in_.empty() ? "" : "; every cell is in " + reason(results_in_)) << "\n";
    for (const RunCheck& c : run_checks(s)) {
      const std::string what = description(c.counts.empty() ? c.name : fmt::format("{} ({})", c.name, c.counts));
      if (c.status == RunCheck::Status::passed) {
        out_ << fmt::format("ok {} - {}\n", ++n, what);
      } else if (c.status == RunCheck::Status::skipped) {
        out_ << fmt::format("ok {} - {} # SKIP {}\n", ++n, what, reason(c.message));
      } else {
        out_ << fmt::format("not ok {} - {}\n  ---\n  message: {}\n  detail: {}\n  ...\n", ++n, what,
                            yaml_string(c.message), yaml_string(c.text));
      }
    }
    out_ << fmt::format("1..{}\n", n);
    const Headline h = headline(s);
    out_ << fmt::format("# {} (exit {}): {}; {}\n# {}\n", h.word, h.code, h.meaning, h.counts, reason(h.controls));
    out_ << fmt::format("# verdicts: {}\n", verdicts_text(s));
    out_.flush();
  }

  bool needs_environment() const override { return false; }

 private:
  /// "TAP version 14", once, as the first line.
  void version() {
    if (started_) return;
    started_ = true;
    out_ << "TAP version 14\n";
  }

  /// The YAML block under a failing cell's test point.
  void diagnostics(const CellResult& r, const std::string& detail, const std::string& judge_flags) {
    out_ << "  ---\n";
    out_ << "  verdict: " << yaml_string(std::string(verdict_name(r.verdict))) << "\n";
    out_ << "  detail: " << yaml_string(detail) << "\n";
    if (has_output(r.verdict)) {
      out_ << "  rel_linf: " << yaml_number(metric_text(r.metrics, r.metrics.rel_linf)) << "\n";
      out_ << "  limit: " << yaml_number(sci(r.limit)) << "\n";
      out_ << "  margin: " << yaml_number(metric_text(r.metrics, r.margin)) << "\n";
    }
    out_ << "  fault: " << yaml_string(r.fault) << "\n";
    out_ << "  repro: " << yaml_string(repro_command(r, judge_flags)) << "\n";
    out_ << "  ...\n";
  }

  std::ostream& out_;
  bool started_ = false;
  std::string results_in_;  ///< RunStart::results_in
};

}  // namespace

std::unique_ptr<ReportFormat> make_tap_format(std::ostream& out, const FormatOptions&) {
  return std::make_unique<TapFormat>(out);
}

}  // namespace pacheck
