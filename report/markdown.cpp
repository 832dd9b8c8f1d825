// The markdown format: summary.md, a table for a pull-request comment (ci/gate.sh appends it to GitHub's
// step summary): outcome and exit code (text.hpp's headline: what the code means for this run, the counts
// and which negative controls ran), a table per suite and kernel (passed/failed/declined, negative
// control), the comparator self-test, the worst cells (failures first, else closest to the limit) and the
// environment.
// A "Verdicts:" line under the outcome gives the cells per verdict.
#include <fmt/format.h>

#include <algorithm>
#include <ostream>

#include "report/report.hpp"
#include "report/text.hpp"

namespace pacheck {

namespace {

/// Text for a Markdown table cell: one line, no pipes, clipped.
std::string md(const std::string& raw, std::size_t max = 160) {
  std::string out;
  for (char ch : valid_utf8(raw)) {
    if (ch == '|') out += "\\|";
    else if (ch == '\n' || ch == '\r') out += ' ';
    else out += ch;
  }
  if (out.size() > max) out = out.substr(0, max - 3) + "...";
  return out;
}

/// Severity for "worst cells": the process-level failures first, then integrity, then numerics.
int severity(Verdict v) {
  switch (v) {
    case Verdict::crash: return 10;
    case Verdict::timeout: return 9;
    case Verdict::oob_write: return 8;
    case Verdict::input_mutated: return 7;
    case Verdict::error: return 6;
    case Verdict::unwritten: return 5;
    case Verdict::poisoned:
    case Verdict::overflow: return 4;
    case Verdict::variant:
    case Verdict::nondeterministic:
    case Verdict::stateful: return 3;
    case Verdict::fail: return 2;
    case Verdict::biased: return 1;
    default: return 0;
  }
}

void write_markdown(std::ostream& o, const RunSummary& s, const ReportMeta& meta) {
  const Headline h = headline(s);
  o << fmt::format("## pacheck {}: {} (exit {})\n\n", md(meta.suite), h.word, h.code);
  o << fmt::format("{} on `{}`: {}.\n\n{}.\n\n", h.meaning, md(meta.device), h.counts, md(h.controls, 4000));
  o << fmt::format("Verdicts: {}.\n\n", verdicts_text(s));

  o << "| suite | kernel | passed | failed | declined | negative control |\n| --- | --- | ---: | ---: | ---: | --- |\n";
  for (const auto& suite : suites_of(s))
    for (const auto& k : s.kernels) {
      const KernelSummary ks = kernel_summary_in(s, suite, k.kernel);
      if (ks.passed + ks.failed + ks.declined + ks.caught + ks.missed + ks.not_run == 0) continue;
      std::string control(control_outcome_name(ks.control));
      if (ks.control == ControlOutcome::caught || ks.control == ControlOutcome::blind)
        control += fmt::format(" ({} caught, {} missed)", ks.caught, ks.missed);
      if (ks.not_run > 0) control += fmt::format("; not run on {} cells (outside its expected failures)", ks.not_run);
      o << fmt::format("| {} | `{}` | {} | {} | {} | {}{} |\n", md(suite), md(k.kernel), ks.passed, ks.failed + ks.missed,
                       ks.declined, control, ks.vacuous ? " - **no cell ran**" : "");
    }
  o << fmt::format("\n**Comparator self-test:** {}\n", s.selftest.passed ? "passed" : "FAILED");
  if (!s.selftest.passed)
    for (const auto& l : s.selftest.lines) o << "- " << md(l, 300) << "\n";

  std::vector<const CellResult*> failing, ran;
  for (const auto& r : s.results) {
    if (counts_as_failure(s, r)) failing.push_back(&r);
    else if (r.verdict == Verdict::pass && !is_negative_control(s, r.kernel)) ran.push_back(&r);
  }
  constexpr std::size_t kShow = 10;
  if (!failing.empty()) {
    std::stable_sort(failing.begin(), failing.end(), [](const CellResult* a, const CellResult* b) {
      if (severity(a->verdict) != severity(b->verdict)) return severity(a->verdict) > severity(b->verdict);
      return a->margin > b->margin;
    });
    o << fmt::format("\n### Worst cells ({} failing)\n\n| kernel | cell | verdict | rel_linf | margin | detail |\n"
                     "| --- | --- | --- | ---: | ---: | --- |\n",
                     failing.size());
    for (std::size_t i = 0; i < std::min(kShow, failing.size()); ++i) {
      const CellResult& r = *failing[i];
      const std::string verdict = r.expected_fail ? "pass (negative control MISSED)" : std::string(verdict_name(r.verdict));
      // Cells that produced no output have no metrics to show.
      const bool no_output = is_error_verdict(r.verdict);
      o << fmt::format("| `{}` | `{}` | {} | {} | {} | {} |\n", md(r.kernel), md(r.cell_id), verdict,
                       no_output ? "-" : metric_text(r.metrics, r.metrics.rel_linf),
                       no_output ? "-" : metric_text(r.metrics, r.margin), md(r.detail));
    }
    if (failing.size() > kShow) o << fmt::format("\n... and {} more in junit.xml and report.json.\n", failing.size() - kShow);
  } else if (!ran.empty()) {
    std::stable_sort(ran.begin(), ran.end(), [](const CellResult* a, const CellResult* b) { return a->margin > b->margin; });
    o << "\n### Closest to the limit (no cell failed)\n\n| kernel | cell | rel_linf | limit | margin |\n"
         "| --- | --- | ---: | ---: | ---: |\n";
    for (std::size_t i = 0; i < std::min<std::size_t>(5, ran.size()); ++i) {
      const CellResult& r = *ran[i];
      o << fmt::format("| `{}` | `{}` | {} | {} | {} |\n", md(r.kernel), md(r.cell_id), metric_text(r.metrics, r.metrics.rel_linf),
                       sci(r.limit), metric_text(r.metrics, r.margin));
    }
  }

  o << "\n<details><summary>Environment</summary>\n\n| | |\n| --- | --- |\n";
  for (const auto& [k, v] : environment_rows(meta.environment))
    if (!v.empty()) o << fmt::format("| {} | `{}` |\n", md(k), md(v, 300));
  for (const auto& m : meta.merged_from)
    o << fmt::format("| merged from | `{}` |\n", md(m.value("source", std::string())));
  o << "\n</details>\n";
}

}  // namespace

std::unique_ptr<ReportFormat> make_markdown_format(std::ostream& out, const FormatOptions&) {
  return std::make_unique<DocumentFormat>(out, write_markdown);
}

}  // namespace pacheck
