// The in-process part of a run: a pool of worker threads over the plan's Lane::gpu and Lane::cpu items.
#pragma once

#include <functional>

#include "exec/devices.hpp"
#include "exec/fresh.hpp"
#include "exec/plan.hpp"
#include "exec/run_options.hpp"

namespace pacheck {

/// Called once per finished cell, possibly from several threads at once (the caller serialises).
using EmitResult = std::function<void(CellResult&)>;

/// Runs every job of plan.items_of(Lane::gpu) and plan.items_of(Lane::cpu) in this process and stores each
/// result at plan.results[job.result_index], then calls `emit` on it. worker_threads(opt) workers take work
/// items from one queue, GPU items first; an item's case is prepared once and each of its kernels gets one
/// clean twin (exec/execute.hpp). GPU item number i (in suite order) runs on
/// gpus.in_process[gpu_device_for(i, devices)], one kernel call at a time per device through that
/// device's mutex, whichever thread prepares it; CPU items run on the worker's own CPU backend. A failed
/// preparation makes each job of the item an `error`; a fatal kernel error (lost context) makes the later
/// jobs of that device's kernels `error` without running them, and leaves the other devices running. `fresh`
/// (the run's fresh-process server, or null) names the cause of faulted outputs that differ from their twin.
void run_in_process(Plan& plan, const GpuDevices& gpus, const RunOptions& opt, const EmitResult& emit,
                    const FreshProcesses* fresh = nullptr);

}  // namespace pacheck
