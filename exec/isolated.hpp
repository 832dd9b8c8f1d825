// The isolated part of a run: the plan's Lane::isolated_cpu and Lane::isolated_gpu items in child
// processes (over exec/isolate.hpp's run_isolated), one kernel per child, before any in-process item: the
// children must be forked while this process has no GPU context (a fork after CUDA initialisation cannot
// use the device, issue 17).
#pragma once

#include <vector>

#include "exec/devices.hpp"
#include "exec/in_process.hpp"
#include "exec/plan.hpp"
#include "exec/run_options.hpp"

namespace pacheck {

/// Runs every job of plan.items_of(Lane::isolated_cpu) and plan.items_of(Lane::isolated_gpu) in child
/// processes with a watchdog of opt.cell_timeout_s per cell, storing each result at
/// plan.results[job.result_index] and then calling `emit` on it (one call at a time). A child that crashes
/// or hangs gives its job the verdict crash or timeout; a fatal kernel error restarts the child.
///   CPU: opt.isolate_lanes lanes (0: worker_threads(opt)); each case is prepared once in the parent and
///   inherited by a short-lived child per kernel (forking is cheap; the oracle is not).
///   GPU: isolated_gpu_lanes(opt) lanes per device of gpus.specs (lane L on gpus.specs[L % devices]),
///   running alongside the CPU lanes; in each lane a child per kernel kept across cases prepares each case
///   itself (one device context per child), so the lanes of one device prepare in parallel.
/// `kernels` are the run's (a child runs one of them only). `fresh` (the run's fresh-process server, forked
/// before any child, or null) names the cause of faulted outputs that differ from their twin: the children
/// send it their requests. Must run with no other thread inside a kernel and before this process opens a GPU
/// context (run_suite calls it before its in-process lanes): children are forked. When a GPU context is
/// open here already (gpu_context_opened(): a caller that ran GPU kernels in-process earlier), the isolated
/// GPU jobs are not forked but get `error` saying why. Throws std::runtime_error when no child can be created
/// at all.
void run_isolated_items(Plan& plan, const std::vector<KernelPtr>& kernels, const GpuDevices& gpus,
                        const RunOptions& opt, const EmitResult& emit, const FreshProcesses* fresh = nullptr);

}  // namespace pacheck
