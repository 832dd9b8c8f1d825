// Crash and hang isolation: cells run in forked child processes under a per-cell watchdog, so a kernel that
// segfaults, aborts, hangs or loses its GPU context costs one cell's verdict instead of the whole run.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "judge/result.hpp"

namespace pacheck {

/// Jobs that one lane runs in order. `groups[i]` is the group of `jobs[i]` (the kernel): a child only ever
/// runs jobs of one group, so a kernel that corrupts its process's memory never shares that process with
/// another kernel.
struct IsolatedBatch {
  std::vector<std::size_t> jobs;
  std::vector<int> groups;
};

/// What a child sends back for one job.
struct ChildOutcome {
  CellResult result;
  /// The child's state is unusable after this job (a fatal device error: the GPU context is lost): the
  /// child exits and the next job gets a fresh process and a fresh context.
  bool restart = false;
};

struct IsolationHooks {
  /// Optional. Runs in the parent, in lane `lane`'s thread, before the batch's first child is forked, so
  /// what it prepares (per lane) is inherited by every child of the batch instead of being recomputed in
  /// each. Must not throw. Requires IsolationOptions::child_per_batch.
  std::function<void(std::size_t batch, int lane)> prepare;
  /// Optional. Runs in the parent after the batch's last job and child: frees what `prepare` made.
  std::function<void(std::size_t batch, int lane)> release;
  /// Runs in the child process (a fork of the caller, so it sees the caller's memory as it was when the
  /// child was forked, `prepare`'s work for its lane included) and computes job `job`. Exceptions it
  /// throws become an `error` result.
  std::function<ChildOutcome(std::size_t job, int lane)> run;
  /// Runs in the parent for a job whose child died (verdict crash) or overran the timeout (verdict timeout):
  /// the result to record. `detail` names the signal or the timeout; `seconds` is the wall time spent.
  std::function<CellResult(std::size_t job, Verdict v, const std::string& detail, double seconds)> lost;
  /// Runs in the parent as each job finishes, one call at a time (never concurrently).
  std::function<void(std::size_t job, CellResult& r)> done;
  /// Optional. Runs in the parent, in the lane's thread (lanes call it concurrently), as job `job` is about
  /// to be sent to its child: the job has started.
  std::function<void(std::size_t job)> started;
};

struct IsolationOptions {
  int lanes = 1;               ///< child processes alive at once, each supervised by one parent thread
  double cell_timeout_s = 60;  ///< wall seconds a job may take, from the moment it is sent to the child
  /// End each batch's children with the batch (needed by hooks.prepare, whose data a child forked earlier
  /// would not have). Otherwise a lane keeps its child across batches of the same group, which saves a
  /// device context per batch on GPUs.
  bool child_per_batch = false;
  /// Optional, asked from every lane's thread (thread-safe): true stops the run. No further job is sent;
  /// a child running a job is killed (SIGKILL) and reaped, and that job gets no hooks.done call.
  std::function<bool()> stop;
};

/// Runs every job of `batches` in child processes: `opt.lanes` supervisor threads take batches in order,
/// call hooks.prepare, fork a child per group (fork + a Unix socket pair), send it one job at a time and
/// wait for its result line with a watchdog of `opt.cell_timeout_s`. A child that dies (signal or exit) or hangs (it is sent SIGKILL)
/// gives that job hooks.lost(..., crash | timeout, ...); a fresh child then continues with the next job.
/// Every job gets exactly one hooks.done call, unless opt.stop stops the run first (jobs not finished
/// then get none). Throws std::runtime_error only when no child can be created
/// at all (fork or socketpair fails), std::invalid_argument for lanes < 1 or a timeout <= 0.
///
/// POSIX. On Linux children die with the parent (PR_SET_PDEATHSIG), so a killed run leaves no orphans;
/// each child has its own process group, so a terminal's Ctrl-C ends the run rather than a cell.
/// fork() happens under a process-wide lock that hooks.done also runs under, so no child inherits a
/// lock (stdout, a report file) held halfway through writing a result.
void run_isolated(const std::vector<IsolatedBatch>& batches, const IsolationOptions& opt, const IsolationHooks& hooks);

/// Runs `fn` in a forked child and returns the string it returned, or std::nullopt when no child could be
/// forked, the child died, or it took longer than `timeout_s` (it is then killed). For probes that must
/// leave no state behind in this process: asking the CUDA runtime for its device count initialises it, and
/// a CUDA context initialised before fork() is unusable in every child forked afterwards.
std::optional<std::string> run_in_child_process(const std::function<std::string()>& fn, double timeout_s);

/// What ask_child_process got: `answered` with fn's string, or not, with `why` ("crash: signal 11
/// (SIGSEGV)", "timeout: ...", or why no child could be forked).
struct ChildAnswer {
  bool answered = false;
  std::string text;  ///< fn's string when answered, else why not
};
/// run_in_child_process that also says why no answer came (for probes whose crash is itself the finding,
/// such as loading a plugin library).
ChildAnswer ask_child_process(const std::function<std::string()>& fn, double timeout_s);

/// Loads the plugin library at `path` in a forked child first, into a scratch registry (its constructors and
/// pacheck_register_kernels run there, not here): "" when the child came back, else why it died ("crash:
/// child process killed by signal 11 (SIGSEGV)", "timeout: ..."). An error load_plugin throws is not reported
/// (the real load in this process then throws it with the same message). Every loader of plugins (the CLI's
/// --plugin, the cells library's add_plugin) calls it before load_plugin, so a library that crashes or hangs
/// while loading is an error naming it rather than the end of the process.
std::string plugin_dies_on_load(const std::string& path, double timeout_s = 60);

/// The first step of every child this project forks to run kernel code, called in the child right after
/// fork(): it dies with the thread that forked it (Linux: PR_SET_PDEATHSIG; and at once when `parent`, the
/// forking process's pid, is already gone), leaves the terminal's process group (Ctrl-C ends the run, not
/// the child first), writes no core file, and gets the default actions of SIGPIPE, SIGINT and SIGTERM and an
/// empty signal mask back.
void setup_forked_child(pid_t parent);

/// A child forked with a socket to it (fork_connected_child): pid and this side of the socket, or pid -1
/// and why not.
struct ConnectedChild {
  pid_t pid = -1;
  int fd = -1;
  std::string why;
};
/// Forks a child connected to this process by a new Unix socket pair of `type` (SOCK_STREAM,
/// SOCK_SEQPACKET), under the process-wide lock every fork of exec/ takes (no child inherits a lock held
/// halfway, or another child's socket) and with stdio flushed first. The child runs setup_forked_child and
/// then `body` with its side of the socket, and ends with _exit(0) if `body` returns.
ConnectedChild fork_connected_child(int type, const std::function<void(int fd)>& body);

/// "SIGSEGV (Segmentation fault)" for a signal number; "signal N" for an unknown one.
std::string signal_description(int sig);

/// How a child ended, from a waitpid status: "killed by SIGSEGV (Segmentation fault)", "exited with
/// status 3".
std::string describe_wait_status(int status);

}  // namespace pacheck
