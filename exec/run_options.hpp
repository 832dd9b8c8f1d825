// The options of a run: what every exec/ step reads (tolerance and oracle precision for preparing and
// judging a case; selection, threads and isolation for scheduling).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <unordered_map>

#include "judge/comparator.hpp"
#include "judge/result.hpp"
#include "kernels/kernel.hpp"
#include "oracle/oracle.hpp"

namespace pacheck {

class CallWatchdog;  // exec/watchdog.hpp

struct RunOptions {
  int threads = 0;                         ///< CPU worker threads; 0 = hardware concurrency
  Tolerance tolerance;
  /// The oracle's arithmetic (issue 45): fp64 by default, so no verdict is decided by the oracle's own
  /// rounding (the fp32 oracle's error reached half the f16 limit on extreme logits); f32 is faster.
  Precision oracle_precision = Precision::f64;
  std::optional<std::regex> filter;        ///< keep cells whose id matches (std::regex_search)
  std::optional<std::uint64_t> seed;       ///< overrides every cell's seed
  int shard_index = 0, shard_count = 1;    ///< take cells with index % shard_count == shard_index
  std::function<void(const CellResult&)> on_result;  ///< called as each cell finishes (in any order)
  /// Called for each result in plan order (kernel-major, suite order), as soon as every result before it
  /// has finished (resumed results are skipped, never passed on): what it prints is the same whatever the
  /// thread count, lanes or isolation. When the run stops early (`stop`), the finished results not yet
  /// passed on follow in plan order before run_suite returns. Called after on_result for the same result.
  std::function<void(const CellResult&)> on_result_in_order;
  std::function<void(int done, int total)> on_progress;
  /// Called once, after planning and before any cell runs (from run_suite's thread): `total` results are
  /// planned and `done` of them are already settled (resumed from --resume). For a reporter that shows the
  /// total before the first result finishes (`--progress-interval`).
  std::function<void(int done, int total)> on_planned;
  /// Called when work on a result begins, from the thread doing it (several threads at once: must be
  /// thread-safe), with the kernel's name and the cell id its result will carry. In-process, for every job of
  /// a case as the case's preparation starts (its cells then run one after another); isolated, as the job is
  /// sent to its child. A result settled while planning, resumed, or lost before its child started gets no
  /// call. on_result follows for the same (kernel, cell id) unless the run stops first.
  std::function<void(const std::string& kernel, const std::string& cell_id)> on_started;
  /// Kernels whose cells run in child processes (exec/isolate.hpp); empty = none. A crash or hang then
  /// becomes the cell's verdict (crash, timeout) instead of ending the run.
  std::function<bool(const Kernel&)> isolate;
  double cell_timeout_s = 60;              ///< isolated cells: wall seconds before the child is killed
  /// Watches the in-process calls of the kernels it selects (each cell's execution, and supports() while
  /// planning): one that runs past its timeout ends the process (exec/watchdog.hpp). Null: none is watched.
  CallWatchdog* watchdog = nullptr;
  int isolate_lanes = 0;                   ///< isolated CPU kernels: child processes at once; 0 = `threads`
  /// Isolated GPU kernels: child processes per device at once (each with its own context, preparing its
  /// own cases); 0 = isolated_gpu_lanes()'s default.
  int isolate_gpu_lanes = 0;
  /// Results already measured (--resume), keyed by result_key(kernel, cell id): those cells are not run
  /// again and their results are neither re-emitted through on_result nor recomputed.
  std::unordered_map<std::string, CellResult> previous;
  /// Asked before each cell starts and while an isolated child runs one, from any thread (so it must be
  /// thread-safe; an atomic flag a signal handler sets): true stops the run. No further cell starts, cells
  /// running in this process finish and are reported, isolated children running a cell are killed and
  /// reaped (their cells stay unrun), and run_suite returns the finished results with RunSummary::stopped.
  std::function<bool()> stop;
  /// Run every negative control on every selected cell (`--controls-everywhere`, for audits: a control must
  /// then pass the cells outside its expected_failures()). False (the default): a control runs only on the
  /// cells its expected_failures() marks, the others are settled as Verdict::not_run while planning.
  bool controls_everywhere = false;
};

/// opt.stop is set and says stop.
bool stop_requested(const RunOptions& opt);

/// The CPU worker threads a run uses: opt.threads, or the hardware concurrency when it is 0; at least 1.
int worker_threads(const RunOptions& opt);

/// Most isolated GPU children per device by default. Each holds a device context (a few hundred MB of
/// device memory) and one prepared case; sixteen brought `sweep`'s isolated plugin run to the
/// in-process time on the H200 (docs/BENCHMARKS.md).
inline constexpr int kIsolatedGpuLanesCap = 16;

/// Isolated GPU children per device: opt.isolate_gpu_lanes, or min(worker_threads(opt),
/// kIsolatedGpuLanesCap) when it is 0. Case preparation (generation, oracle, paging) is what an isolated
/// GPU child spends most of its time on, so several children per device prepare cases in parallel while
/// the device runs one kernel at a time from each.
int isolated_gpu_lanes(const RunOptions& opt);

/// True when `k`'s cells run in child processes (opt.isolate is set and selects it).
bool runs_isolated(const RunOptions& opt, const Kernel& k);

}  // namespace pacheck
