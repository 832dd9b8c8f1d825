// Crash and hang isolation: cells run in forked child processes under a per-cell watchdog, so a kernel that
// segfaults, aborts, hangs or loses its GPU context costs one cell's verdict instead of the whole run.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runner/runner.hpp"

namespace pacheck {

/// Jobs that one child process runs in order. A child only ever runs jobs of one `group` (the kernel
/// name): a kernel that corrupts its process's memory never shares that process with another kernel.
struct IsolatedBatch {
  std::string group;
  std::vector<std::size_t> jobs;
};

/// What a child sends back for one job.
struct ChildOutcome {
  CellResult result;
  /// The child's state is unusable after this job (a fatal device error: the GPU context is lost): the
  /// child exits and the next job gets a fresh process and a fresh context.
  bool restart = false;
};

struct IsolationHooks {
  /// Runs in the child process (a fork of the caller, so it sees the caller's memory as it was when the
  /// child was forked) and computes job `job`. Exceptions it throws become an `error` result.
  std::function<ChildOutcome(std::size_t job)> run;
  /// Runs in the parent for a job whose child died (verdict crash) or overran the timeout (verdict timeout):
  /// the result to record. `detail` names the signal or the timeout; `seconds` is the wall time spent.
  std::function<CellResult(std::size_t job, Verdict v, const std::string& detail, double seconds)> lost;
  /// Runs in the parent as each job finishes, one call at a time (never concurrently).
  std::function<void(std::size_t job, CellResult& r)> done;
};

struct IsolationOptions {
  int lanes = 1;               ///< child processes alive at once, each supervised by one parent thread
  double cell_timeout_s = 60;  ///< wall seconds a job may take, from the moment it is sent to the child
};

/// Runs every job of `batches` in child processes: `opt.lanes` supervisor threads take batches in order,
/// fork a child (fork + a Unix socket pair), send it one job at a time and wait for its result line with a
/// watchdog of `opt.cell_timeout_s`. A child that dies (signal or exit) or hangs (it is sent SIGKILL)
/// gives that job hooks.lost(..., crash | timeout, ...); a fresh child then continues with the next job.
/// Every job gets exactly one hooks.done call. Throws std::runtime_error only when no child can be created
/// at all (fork or socketpair fails), std::invalid_argument for lanes < 1 or a timeout <= 0.
///
/// Unix only. Children are killed with the parent (PR_SET_PDEATHSIG) so a killed run leaves no orphans.
/// fork() happens under a process-wide lock that hooks.done also runs under, so no child inherits a
/// lock (stdout, a report file) held halfway through writing a result.
void run_isolated(const std::vector<IsolatedBatch>& batches, const IsolationOptions& opt, const IsolationHooks& hooks);

/// Runs `fn` in a forked child and returns the string it returned, or std::nullopt when no child could be
/// forked, the child died, or it took longer than `timeout_s` (it is then killed). For probes that must
/// leave no state behind in this process: asking the CUDA runtime for its device count initialises it, and
/// a CUDA context initialised before fork() is unusable in every child forked afterwards.
std::optional<std::string> run_in_child_process(const std::function<std::string()>& fn, double timeout_s);

/// "SIGSEGV (Segmentation fault)" for a signal number; "signal N" for an unknown one.
std::string signal_description(int sig);

/// How a child ended, from a waitpid status: "killed by SIGSEGV (Segmentation fault)", "exited with
/// status 3".
std::string describe_wait_status(int status);

}  // namespace pacheck
