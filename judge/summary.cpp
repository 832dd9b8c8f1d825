#include "judge/summary.hpp"

#include <fmt/format.h>

namespace pacheck {

std::string_view control_outcome_name(ControlOutcome o) {
  switch (o) {
    case ControlOutcome::not_control: return "-";
    case ControlOutcome::caught: return "caught";
    case ControlOutcome::blind: return "BLIND";
    case ControlOutcome::not_exercised: return "not exercised";
  }
  return "?";
}

int RunSummary::exit_code() const {
  if (blind || !selftest.passed) return 3;
  if (failed > 0 || vacuous) return 1;
  // A run that planned results and has fewer (none at all, when its process was cut short) never passes.
  if (results.size() < planned) return 1;
  return 0;
}

CellOutcome cell_outcome(const CellResult& r, bool negative_control) {
  if (r.verdict == Verdict::declined) return CellOutcome::declined;
  if (r.verdict == Verdict::not_run) return CellOutcome::not_run;
  if (negative_control && r.expected_fail) return is_failure(r.verdict) ? CellOutcome::caught : CellOutcome::missed;
  return is_failure(r.verdict) ? CellOutcome::failed : CellOutcome::passed;
}

bool is_negative_control(const RunSummary& s, const std::string& kernel) {
  for (const auto& k : s.kernels)
    if (k.kernel == kernel) return k.control != ControlOutcome::not_control;
  return false;
}

CellOutcome cell_outcome(const RunSummary& s, const CellResult& r) {
  return cell_outcome(r, is_negative_control(s, r.kernel));
}

bool counts_as_failure(const RunSummary& s, const CellResult& r) {
  const CellOutcome o = cell_outcome(s, r);
  return o == CellOutcome::failed || o == CellOutcome::missed;
}

std::string verdict_counts_text(const std::vector<int>& verdicts) {
  std::string out;
  for (std::size_t i = 0; i < verdicts.size() && i < verdict_table().size(); ++i)
    if (verdicts[i] > 0) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", verdicts[i], verdict_table()[i].name);
  return out.empty() ? "no cells" : out;
}

std::string verdicts_text(const RunSummary& s) {
  std::vector<int> tested(verdict_table().size(), 0), controls(verdict_table().size(), 0);
  bool control_ran = false;
  for (const KernelSummary& k : s.kernels) {
    const bool control = k.control != ControlOutcome::not_control;
    control_ran = control_ran || control;
    std::vector<int>& into = control ? controls : tested;
    for (std::size_t i = 0; i < k.verdicts.size() && i < into.size(); ++i) into[i] += k.verdicts[i];
  }
  if (!control_ran) return verdict_counts_text(tested);
  return fmt::format("{}; negative controls: {}", verdict_counts_text(tested), verdict_counts_text(controls));
}

void summarize(RunSummary& sum, const std::vector<KernelRole>& kernels) {
  sum.kernels.clear();
  sum.passed = sum.failed = sum.declined = sum.caught = sum.not_run = 0;
  sum.verdicts.assign(verdict_table().size(), 0);
  sum.blind = sum.vacuous = false;
  for (const auto& k : kernels) {
    KernelSummary ks;
    ks.kernel = k.name;
    ks.verdicts.assign(verdict_table().size(), 0);
    const bool control = k.negative_control;
    for (const auto& r : sum.results) {
      if (r.kernel != ks.kernel) continue;
      ++ks.verdicts[verdict_rank(r.verdict)];
      ++sum.verdicts[verdict_rank(r.verdict)];
      switch (cell_outcome(r, control)) {
        case CellOutcome::passed: ++ks.passed; break;
        case CellOutcome::failed: ++ks.failed; break;
        case CellOutcome::declined: ++ks.declined; break;
        case CellOutcome::caught: ++ks.caught; break;
        case CellOutcome::missed: ++ks.missed; break;
        case CellOutcome::not_run: ++ks.not_run; break;
      }
    }
    // A control whose cells were all not_run had cells selected, none of which can show its fault: it is
    // not_exercised (below), as when the selection holds no planted cell, not a kernel that ran nothing. The
    // same holds for a control that declines every selected cell (cpu.fp8_scale_fault on per-slot scale cells):
    // a declined cell is never planted (planted = caught + missed), so no cell could show its fault, and the
    // run is not vacuous for it; vacuous is a kernel under test that ran nothing.
    ks.vacuous = !control && ks.passed + ks.failed + ks.caught + ks.missed + ks.not_run == 0;
    if (control)
      ks.control = ks.caught + ks.missed == 0 ? ControlOutcome::not_exercised
                   : ks.missed                ? ControlOutcome::blind
                                              : ControlOutcome::caught;
    sum.passed += ks.passed;
    sum.failed += ks.failed;
    sum.declined += ks.declined;
    sum.caught += ks.caught;
    sum.not_run += ks.not_run;
    sum.blind = sum.blind || ks.control == ControlOutcome::blind;
    sum.vacuous = sum.vacuous || (ks.vacuous && !sum.shard);
    sum.kernels.push_back(ks);
  }
}

}  // namespace pacheck
