#include "judge/cause.hpp"

#include <fmt/format.h>

#include <optional>
#include <stdexcept>
#include <utility>

namespace pacheck {

std::int64_t differing_elements(const OutputBits& a, const OutputBits& b) {
  if (a.size() != b.size())
    throw std::invalid_argument(fmt::format("differing_elements: runs of {} and {} elements", a.size(), b.size()));
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

namespace {

/// "1 element", "3 elements".
std::string elements(std::int64_t n) { return fmt::format("{} element{}", n, n == 1 ? "" : "s"); }

/// The first run of `runs` that differs from runs[0]: its index and how many elements differ (0, 0: none).
std::pair<std::size_t, std::int64_t> first_disagreement(const std::vector<OutputBits>& runs) {
  for (std::size_t i = 1; i < runs.size(); ++i)
    if (const std::int64_t d = differing_elements(runs[0], runs[i])) return {i, d};
  return {0, 0};
}

/// Nondeterministic when two runs of `runs` (`what`: "clean", "faulted"), each a kernel's first call in a
/// fresh process, differ; nothing otherwise.
std::optional<Cause> same_history_differs(const std::vector<OutputBits>& runs, const char* what,
                                          const std::string& differs) {
  const auto [i, d] = first_disagreement(runs);
  if (d == 0) return std::nullopt;
  return Cause{Verdict::nondeterministic,
               fmt::format("{}, and so do two {} runs from the same history: {} differ between {} runs 1 and {}, "
                           "each the kernel's first call in a fresh process",
                           differs, what, elements(d), what, i + 1)};
}

/// The verdict from fresh clean and faulted runs that are each bitwise equal among themselves.
Cause with_fresh_runs(const CauseEvidence& e, const std::string& differs) {
  const std::size_t pc = e.fresh_clean.size(), pf = e.fresh_faulted.size();
  if (const std::int64_t d = differing_elements(e.fresh_clean[0], e.fresh_faulted[0]))
    return {Verdict::variant,
            fmt::format("{}; reproduced from the same history: in fresh processes the faulted run differs from the "
                        "clean run in {} ({} clean and {} faulted runs, each its kernel's first call, each kind "
                        "bitwise equal): the poison leaks into the output",
                        differs, elements(d), pc, pf)};
  const std::int64_t twin = differing_elements(*e.twin, e.fresh_clean[0]);
  const std::int64_t own = differing_elements(*e.faulted, e.fresh_faulted[0]);
  std::string rerun;
  if (!e.reruns.empty())
    rerun = fmt::format(", a clean re-run right after it in {}",
                        elements(differing_elements(e.reruns[0], e.fresh_clean[0])));
  return {Verdict::stateful,
          fmt::format("{}, but not through the fault: in fresh processes the faulted run equals the clean run ({} "
                      "clean and {} faulted runs, each its kernel's first call, all bitwise equal); against them this "
                      "process's clean-cache run differs in {}, its faulted run in {}{}: the output depends on "
                      "earlier calls",
                      differs, pc, pf, elements(twin), elements(own), rerun)};
}

/// The verdict from this process's runs only.
Cause in_process_only(const CauseEvidence& e, const std::string& differs) {
  const std::string why = fmt::format("no fresh process: {}", e.no_fresh.empty() ? "none was asked" : e.no_fresh);
  if (const auto [i, d] = first_disagreement(e.reruns); d > 0)
    return {Verdict::nondeterministic,
            fmt::format("{}, and clean re-runs 1 and {}, back to back in this process, differ in {} ({}; without "
                        "one an output that follows a call counter cannot be told from one that changes by chance)",
                        differs, i + 1, elements(d), why)};
  if (!e.reruns.empty())
    if (const std::int64_t d = differing_elements(*e.twin, e.reruns[0]))
      return {Verdict::stateful,
              fmt::format("{}; {} clean re-runs right after the faulted run agree with each other but differ from "
                          "the earlier clean-cache run in {}: the output depends on earlier calls ({})",
                          differs, e.reruns.size(), elements(d), why)};
  return {Verdict::variant, fmt::format("{}; the clean-cache run and {} clean re-runs in this process agree ({})",
                                        differs, e.reruns.size(), why)};
}

}  // namespace

bool bitwise_equal(const std::vector<OutputBits>& runs) { return first_disagreement(runs).second == 0; }

Cause name_cause(const CauseEvidence& e) {
  if (!e.twin || !e.faulted) throw std::invalid_argument("name_cause: the twin and the faulted run are required");
  const std::int64_t n = differing_elements(*e.twin, *e.faulted);
  const std::string differs = fmt::format("{} of {} differ{} bitwise from the clean-cache run", n,
                                          elements(static_cast<std::int64_t>(e.twin->size())), n == 1 ? "s" : "");
  if (auto c = same_history_differs(e.fresh_clean, "clean", differs)) return *c;
  if (auto c = same_history_differs(e.fresh_faulted, "faulted", differs)) return *c;
  if (!e.fresh_clean.empty() && !e.fresh_faulted.empty()) return with_fresh_runs(e, differs);
  return in_process_only(e, differs);
}

}  // namespace pacheck
