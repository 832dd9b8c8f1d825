// Naming the cause of a difference. A faulted cell whose output differs bitwise from its clean twin (the
// same cell with a clean cache) is not yet proof that poison leaks: the kernel's output may change from call
// to call (atomics, launch order) or depend on earlier calls (stale scratch memory, a counter). The runner
// re-runs the cell (exec/execute.cpp: in this process and in fresh ones, exec/fresh.hpp) and name_cause()
// decides from the runs' bits which of variant, nondeterministic and stateful it is. docs/CAUSES.md gives
// the protocol and the evidence it was chosen from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "judge/verdict.hpp"

namespace pacheck {

/// Raw output bits of one kernel call, [num_seqs, num_heads, head_size] flattened, in the cell's out dtype.
using OutputBits = std::vector<std::uint32_t>;

/// How many runs the protocol makes of a cell whose output differs from its clean twin. Fresh runs cost a
/// process each (and a device context on a GPU), so the clean ones are made once per (case, kernel) and
/// shared by every faulted cell of the pair that differs.
inline constexpr int kCauseReruns = 2;        ///< clean re-runs in this process, back to back after the cell
inline constexpr int kFreshCleanRuns = 4;     ///< clean runs, each its kernel's first call in a fresh process
inline constexpr int kFreshFaultedRuns = 2;   ///< faulted runs, each its kernel's first call in a fresh process

/// Every run of one faulted cell whose output differed from its clean twin. All runs have the same size.
struct CauseEvidence {
  const OutputBits* twin = nullptr;     ///< the clean-cache run the cell was judged against (this process)
  const OutputBits* faulted = nullptr;  ///< the cell's own faulted run (this process)
  /// Clean re-runs in this process, back to back right after the faulted run (kCauseReruns of them).
  std::vector<OutputBits> reruns;
  /// Runs that are each the kernel's first call in a process of their own, forked before the run's first
  /// kernel call (same history: none): clean (kFreshCleanRuns) and faulted (kFreshFaultedRuns; not made when
  /// the clean ones differ already). Both empty when no fresh process could run them, and `no_fresh` then
  /// says why.
  std::vector<OutputBits> fresh_clean, fresh_faulted;
  std::string no_fresh;
};

/// The cause of a difference: verdict variant, nondeterministic or stateful, and a detail naming the runs
/// that differed and in how many elements.
struct Cause {
  Verdict verdict = Verdict::variant;
  std::string detail;
};

/// The cause of `e.faulted` differing from `e.twin` (e.twin, e.faulted must be set). With fresh runs (clean
/// ones; faulted ones too unless the clean ones already differ):
///  - nondeterministic when two fresh runs of the same cell (clean, or faulted) differ: the same history
///    gave two outputs;
///  - else variant when the fresh faulted runs differ from the fresh clean runs: with the history held
///    fixed (none), the poison alone changes the output;
///  - else stateful: from the same history the faulted and the clean run agree, so the difference in this
///    process came from the calls before them.
/// Without fresh runs (e.no_fresh says why), from this process's runs only: nondeterministic when the
/// back-to-back re-runs differ (a call counter looks the same), stateful when they agree with each other but
/// not with the twin, variant when the twin and every re-run agree.
Cause name_cause(const CauseEvidence& e);

/// True when every run of `runs` is bitwise equal to the first (also for none or one).
bool bitwise_equal(const std::vector<OutputBits>& runs);

/// Elements whose bits differ between `a` and `b`. Throws std::invalid_argument when the sizes differ.
std::int64_t differing_elements(const OutputBits& a, const OutputBits& b);

}  // namespace pacheck
