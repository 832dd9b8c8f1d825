#include "judge/repeat.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace pacheck {

RunSummary combine_repeats(std::vector<RunSummary> runs, const std::vector<KernelRole>& kernels,
                           std::vector<RepeatDifference>* differences) {
  if (runs.empty()) throw std::invalid_argument("combine_repeats: no repeat to combine");
  for (std::size_t k = 0; k < runs.size(); ++k) {
    if (runs[k].stopped) throw std::invalid_argument(fmt::format("combine_repeats: repeat {} stopped early", k + 1));
    if (runs[k].results.size() != runs[0].results.size())
      throw std::invalid_argument(fmt::format("combine_repeats: repeat {} has {} results, repeat 1 has {}", k + 1,
                                              runs[k].results.size(), runs[0].results.size()));
  }
  auto control = [&](const std::string& kernel) {
    for (const auto& k : kernels)
      if (k.name == kernel) return k.negative_control;
    return false;
  };
  auto fails = [&](const CellResult& r) {
    const CellOutcome o = cell_outcome(r, control(r.kernel));
    return o == CellOutcome::failed || o == CellOutcome::missed;
  };
  RunSummary out;
  out.shard = runs[0].shard;
  out.planned = runs[0].planned;
  out.selftest = runs[0].selftest;
  out.judge_flags = runs[0].judge_flags;
  for (const auto& run : runs)
    if (!run.selftest.passed) {
      out.selftest = run.selftest;
      break;
    }
  for (std::size_t i = 0; i < runs[0].results.size(); ++i) {
    const CellResult& first = runs[0].results[i];
    std::size_t recorded = 0;
    bool any_fails = false, all_fail = true, verdicts_differ = false;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      const CellResult& r = runs[k].results[i];
      if (r.kernel != first.kernel || r.cell_id != first.cell_id)
        throw std::invalid_argument(fmt::format("combine_repeats: result {} of repeat {} is {} '{}', repeat 1 has {} '{}'",
                                                i, k + 1, r.kernel, r.cell_id, first.kernel, first.cell_id));
      const bool f = fails(r);
      if (f && !any_fails) recorded = k;
      any_fails = any_fails || f;
      all_fail = all_fail && f;
      verdicts_differ = verdicts_differ || r.verdict != first.verdict;
    }
    if (verdicts_differ && differences) {
      RepeatDifference d{first.kernel, first.cell_id, {}, any_fails && !all_fail, recorded};
      for (const auto& run : runs) d.verdicts.push_back(run.results[i].verdict);
      differences->push_back(std::move(d));
    }
    out.results.push_back(std::move(runs[recorded].results[i]));
  }
  summarize(out, kernels);
  return out;
}

}  // namespace pacheck
