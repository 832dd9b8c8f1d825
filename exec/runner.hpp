// exec/: running cells (case -> paged cache -> fault -> guarded kernel call -> verdict) and scheduling them.
// The stage's main header: it includes the header of every step.
//
// Quick start: running cells
//   CaseData d = prepare_case(cell.c, opt);    // pre-paging tensors, oracle, clean paged cache
//   CleanTwin twin;                            // one per (case, kernel), shared by all its cells
//   Execution e = execute_cell(d, kernel, cell, backend, twin, opt.tolerance);  // inject, guarded run, judge
//   RunSummary s = run_suite(suite, kernels, "cpu", opt);  // a suite: results kernel-major, in suite order
// Quick start: where a new step goes (one job per file)
//   computed once per case -> prepare          a check around the kernel call -> guarded_run (+ judge/)
//   one call to one verdict -> execute         which cells run, grouped how -> plan
//   threads, GPU devices -> in_process, devices   child processes -> isolated (over isolate's primitives)
//   runs in processes that ran nothing before (naming the cause of a difference) -> fresh
//   run_suite (runner.cpp) only strings them together: fresh server -> plan -> isolated -> open the
//   in-process GPU backends -> in-process -> summarize. Every fork (fresh server, supports() probes,
//   isolated children) happens before this process opens a GPU context: CUDA does not survive fork().
#pragma once

#include <string>
#include <vector>

#include "exec/devices.hpp"
#include "exec/execute.hpp"
#include "exec/fresh.hpp"
#include "exec/guarded_run.hpp"
#include "exec/in_process.hpp"
#include "exec/isolated.hpp"
#include "exec/plan.hpp"
#include "exec/prepare.hpp"
#include "exec/run_options.hpp"
#include "judge/summary.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"
#include "suites/suite.hpp"

namespace pacheck {

/// Runs every selected cell of `suite` on every kernel in `kernels` on the device `device_spec`
/// ("cpu", "cuda:0", "cuda:all"). CPU kernels use `opt.threads` workers; GPU kernels run one call at a time
/// per device on that device's stream. "cuda:all" / "hip:all" opens every local device of the kind (one
/// backend and stream each; isolated kernels get one child process per device) and spreads the GPU cases
/// over them (gpu_device_for); each result's CellResult::device names the device that ran it, and the
/// results are otherwise those of a single-device run. With no device present "cuda:all" fails as "cuda".
/// Kernels selected by `opt.isolate` run first, in child processes (exec/isolate.hpp), one kernel per child,
/// with a watchdog of `opt.cell_timeout_s` per cell; the in-process lanes (and the in-process GPU backends,
/// opened only then) follow, so no child is forked from a process holding a GPU context (issue 17). An
/// unusable device is still refused before any cell runs (probed in a child when children come first). Cells found in `opt.previous` are not run.
/// A suite with faulted cells first forks a fresh-process server (exec/fresh.hpp), which names the cause
/// of faulted outputs that differ from their clean twin in both lanes (judge/cause.hpp).
/// Results sit at fixed positions (kernel-major, suite order), whatever the thread count or isolation;
/// opt.on_result_in_order sees them in that order too. When opt.stop stops the run before every result
/// finished, the summary holds the finished ones only, with RunSummary::stopped set (planned counts all).
/// Cells settled while planning (declined, or the `error` of an isolated kernel whose supports() could not
/// be asked) reach opt.on_result first. Also runs the comparator self-test. Throws std::runtime_error /
/// std::invalid_argument for an unusable device or options (--shard, --cell-timeout).
RunSummary run_suite(const Suite& suite, const std::vector<KernelPtr>& kernels, const std::string& device_spec,
                     const RunOptions& opt);

}  // namespace pacheck
