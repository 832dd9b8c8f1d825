// One cell, start to verdict: inject its fault into a copy of the case's clean paged cache, run the kernel
// between guards (exec/guarded_run.hpp), and judge the output against the oracle and the clean twin; when
// it differs from the twin, re-run the cell to name the cause (judge/cause.hpp, docs/CAUSES.md). Every
// entry point runs cells through execute_cell: run and score (exec/in_process, exec/isolated), repro
// (run_cell), bench's correctness check and the agreement and tail-poison properties.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/cell.hpp"
#include "exec/fresh.hpp"
#include "exec/guarded_run.hpp"
#include "exec/prepare.hpp"
#include "judge/judge.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {

/// The clean-twin baseline of one kernel on one case: the output bits of that kernel on the case's clean
/// cache, which judge()'s invariance check compares each faulted cell's output with (a poison in unwritten
/// slots must leave the output bitwise unchanged). Empty until first needed: the first faulted cell of the
/// case runs the clean call, or a clean cell's own run fills it. Keep one per (case, kernel) and pass it
/// to every cell of that pair, so the clean call runs at most once.
struct CleanTwin {
  std::optional<std::vector<std::uint32_t>> bits;
  /// The clean cell's fresh-process runs (kFreshCleanRuns of them, judge/cause.hpp), made for the pair's
  /// first faulted cell that differs from `bits` and shared by the others; empty until then, and for good
  /// when they could not be made (`fresh_failed` says why).
  std::optional<std::vector<OutputBits>> fresh;
  std::string fresh_failed;
};

/// How an execution failed to reach the judge.
enum class ExecError {
  none,     ///< judged
  kernel,   ///< the kernel or backend threw KernelError
  fatal,    ///< KernelError with `fatal`: the device context is lost, later calls on it cannot succeed
  harness,  ///< another exception (host memory, a backend upload, ...)
};

/// What execute_cell produced.
struct Execution {
  CellResult result;  ///< the verdict, or `error` with the exception's message; device = backend.name()
  RawRun raw;         ///< the cell's own (faulted) call; empty when error != none
  ExecError error = ExecError::none;
  std::int64_t poisoned = 0;  ///< cache elements the fault wrote (inject's count)
  /// For callers that handle errors as exceptions: throws the error again, as KernelError (fatal kept) for
  /// kernel and fatal, std::runtime_error for harness, with result.detail as what(). Returns when judged.
  void rethrow() const;
};

/// How execute_cell reaches the device and the cell's inputs.
struct ExecuteOptions {
  /// Taken around each kernel call: one call at a time on a backend shared by threads (a GPU stream), while
  /// injection and judging stay parallel. Null: the caller owns the backend.
  std::mutex* device_mu = nullptr;
  /// The cache with cell.fault already written, for a caller that chose the fault from what it wrote (the
  /// tail-poison property); null: execute_cell writes cell.fault into a copy of data.cache.
  const FaultedCache* faulted = nullptr;
  /// The run's fresh-process server, for naming the cause of a faulted output that differs from its twin
  /// (exec/fresh.hpp). Null: the cause is named from re-runs in this process only, and its detail says so.
  const FreshProcesses* fresh = nullptr;
  /// Why there is no `fresh`, for the detail; empty: a caller that runs no server (the properties, bench).
  std::string no_fresh;
  /// The worker's buffers (exec/guarded_run.hpp), when consecutive calls of one shape reuse them (run's
  /// in-process lanes); null: every call gets buffers of its own.
  BufferPool* pool = nullptr;
};

/// Runs `cell` of the prepared case `data` (data.c == cell.c) on `k` on `backend`: fills `twin` first when
/// the fault is not clean and `twin` is empty (a clean call), injects the fault, runs the faulted call with
/// guards, fills `twin` from a clean cell's own call, and judges with `tolerance`. A faulted output that
/// differs from the twin (and is not judged worse) has its cause named: kCauseReruns clean re-runs here,
/// right after it, and through how.fresh kFreshCleanRuns clean (once per twin) and kFreshFaultedRuns faulted
/// runs in fresh processes on backend.name(); name_cause() then gives variant, nondeterministic or stateful.
/// A cell whose output fails (unwritten, poisoned, overflow, fail, biased) is run once more right after,
/// on buffers of its own (not how.pool's): when that run's bits differ, the failure may come from earlier
/// calls (state kept across calls: fault-classes.md section 7), and the cell's first call in fresh
/// processes (how.fresh, kHistoryFreshRuns of them; else the re-run here) decides: two fresh runs that
/// differ make it `nondeterministic`; a fresh run that passes makes it `stateful`, with the failure it
/// showed here in the detail (history_cause()). Otherwise the verdict stands.
/// Kernel and backend errors (in any of these calls) become an `error` result (ExecError says which; fatal
/// when the context is lost) rather than an exception. result.seconds covers the cell's own call, its
/// judging and the re-runs; result.index is left to the caller.
Execution execute_cell(const CaseData& data, const Kernel& k, const Cell& cell, Backend& backend, CleanTwin& twin,
                       const Tolerance& tolerance, const ExecuteOptions& how = {});

/// Fresh-process runs of a failing cell whose re-run on other buffers differed (execute_cell).
inline constexpr int kHistoryFreshRuns = 2;

/// The result of a cell that ran no kernel call: verdict `v` (declined, error, crash, timeout) with `why`
/// as its detail, the cell's ids, and expected_fail from the kernel's expected_failures(). device stays empty.
CellResult unrun_result(const Cell& cell, const Kernel& k, Verdict v, std::string why);

/// Runs a single cell on one kernel (for `pacheck repro`): prepare_case, then execute_cell with a fresh
/// twin. A faulted cell of a CPU kernel gets a fresh-process server of its own (forked first, before the
/// kernel's first call); a GPU kernel's backend is already open, so its cause is named from re-runs in this
/// process only. Returns the result and the raw run (empty on `error`); `data_out` receives the prepared
/// case. Throws what prepare_case throws.
std::pair<CellResult, RawRun> run_cell(const Cell& cell, const Kernel& k, Backend& backend, const RunOptions& opt,
                                       CaseData* data_out = nullptr);

}  // namespace pacheck
