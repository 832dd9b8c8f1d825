#include "judge/summary.hpp"

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
  return 0;
}

void summarize(RunSummary& sum, const std::vector<KernelRole>& kernels) {
  sum.kernels.clear();
  sum.passed = sum.failed = sum.declined = sum.caught = 0;
  sum.blind = sum.vacuous = false;
  for (const auto& k : kernels) {
    KernelSummary ks;
    ks.kernel = k.name;
    const bool control = k.negative_control;
    int expected = 0;
    for (const auto& r : sum.results) {
      if (r.kernel != ks.kernel) continue;
      if (r.verdict == Verdict::declined) { ++ks.declined; continue; }
      if (control && r.expected_fail) {
        ++expected;
        (is_failure(r.verdict) ? ks.caught : ks.missed)++;
      } else if (is_failure(r.verdict)) {
        ++ks.failed;
      } else {
        ++ks.passed;
      }
    }
    ks.vacuous = ks.passed + ks.failed + ks.caught + ks.missed == 0;
    if (control) ks.control = expected == 0 ? ControlOutcome::not_exercised : ks.missed ? ControlOutcome::blind : ControlOutcome::caught;
    sum.passed += ks.passed;
    sum.failed += ks.failed;
    sum.declined += ks.declined;
    sum.caught += ks.caught;
    sum.blind = sum.blind || ks.control == ControlOutcome::blind;
    sum.vacuous = sum.vacuous || (ks.vacuous && !sum.shard);
    sum.kernels.push_back(ks);
  }
}

}  // namespace pacheck
