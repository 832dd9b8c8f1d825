#include "exec/isolated.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>

#include "exec/execute.hpp"
#include "exec/isolate.hpp"

namespace pacheck {
namespace {

/// A case prepared for isolated children (or why it could not be).
struct PreparedCase {
  std::optional<CaseData> data;
  std::string error;
};

PreparedCase prepare_for_children(const Case& c, const RunOptions& opt) {
  PreparedCase p;
  try {
    p.data = prepare_case(c, opt);
  } catch (const std::exception& e) {
    p.error = e.what();
  }
  return p;
}

/// State of one isolated child process. The parent's instances are only ever used inside children: each
/// child starts from the parent's copy, which the parent never touches, so every child starts empty.
struct ChildState {
  std::size_t item = SIZE_MAX;  ///< the work item `own` / `twin` belong to
  PreparedCase own;             ///< the case, when the child prepares it itself
  CleanTwin twin;               ///< baseline of the child's kernel on `item`
  std::unique_ptr<Backend> cpu, gpu;
};

/// Runs job `ref` of `plan` inside an isolated child (see run_isolated), on `prepared` (the parent's
/// preparation, inherited through fork) or, when it is null, on a case the child prepares itself. A GPU
/// kernel's backend is opened from `gpu_spec`, here, not inherited: a GPU context does not survive fork().
ChildOutcome run_in_child(ChildState& st, const Plan& plan, JobRef ref, const std::string& gpu_spec,
                          const RunOptions& opt, const PreparedCase* prepared, const FreshProcesses* fresh) {
  const Job& j = plan.job(ref);
  ChildOutcome out;
  if (st.item != ref.item) {
    st.item = ref.item;
    st.twin = CleanTwin{};
    st.own = prepared ? PreparedCase{} : prepare_for_children(plan.items[ref.item].c, opt);
  }
  const PreparedCase& pc = prepared ? *prepared : st.own;
  if (!pc.data) {
    out.result = unrun_result(j.cell, *j.kernel, Verdict::error, fmt::format("case preparation failed: {}", pc.error));
    out.result.index = j.index;
    return out;
  }
  const bool cpu = j.kernel->device() == PACHECK_DEVICE_CPU;
  std::unique_ptr<Backend>& backend = cpu ? st.cpu : st.gpu;
  if (!backend) {
    try {
      backend = cpu ? make_cpu_backend() : open_backend(gpu_spec);
    } catch (const std::exception& e) {
      out.result = unrun_result(j.cell, *j.kernel, Verdict::error, fmt::format("cannot open the device: {}", e.what()));
      out.result.index = j.index;
      out.restart = true;
      return out;
    }
  }
  ExecuteOptions how;
  how.fresh = fresh;
  Execution e = execute_cell(*pc.data, *j.kernel, j.cell, *backend, st.twin, opt.tolerance, how);
  out.result = std::move(e.result);
  out.result.index = j.index;
  out.restart = e.error == ExecError::fatal;
  return out;
}

/// The isolated jobs by number: the job numbers run_isolated hands the hooks index `refs`.
struct JobTable {
  std::vector<JobRef> refs;
  std::unordered_map<const Kernel*, int> group_of;  ///< a kernel's group: one kernel per child process

  /// One batch per work item of `items`, numbering its jobs.
  std::vector<IsolatedBatch> batches(const Plan& plan, const std::vector<std::size_t>& items) {
    std::vector<IsolatedBatch> out;
    for (std::size_t i : items) {
      IsolatedBatch b;
      for (std::size_t jj = 0; jj < plan.items[i].jobs.size(); ++jj) {
        b.jobs.push_back(refs.size());
        b.groups.push_back(group_of.at(plan.items[i].jobs[jj].kernel));
        refs.push_back({i, jj});
      }
      out.push_back(std::move(b));
    }
    return out;
  }
};

}  // namespace

void run_isolated_items(Plan& plan, const std::vector<KernelPtr>& kernels, const GpuDevices& gpus,
                        const RunOptions& opt, const EmitResult& emit, const FreshProcesses* fresh) {
  const std::vector<std::size_t>& cpu_items = plan.items_of(Lane::isolated_cpu);
  const std::vector<std::size_t>& gpu_items = plan.items_of(Lane::isolated_gpu);
  if (cpu_items.empty() && gpu_items.empty()) return;
  JobTable table;
  for (const auto& k : kernels) table.group_of.emplace(k.get(), static_cast<int>(table.group_of.size()));
  const std::vector<IsolatedBatch> cpu_batches = table.batches(plan, cpu_items);
  const std::size_t cpu_refs = table.refs.size();  // job numbers below this are the CPU lanes'
  const std::vector<IsolatedBatch> gpu_batches = table.batches(plan, gpu_items);

  IsolationHooks common;
  common.lost = [&](std::size_t job, Verdict v, const std::string& detail, double seconds) {
    const Job& j = plan.job(table.refs.at(job));
    CellResult r = unrun_result(j.cell, *j.kernel, v, detail);
    r.seconds = seconds;
    r.index = j.index;
    return r;
  };
  if (opt.on_started)
    common.started = [&](std::size_t job) {
      const Job& j = plan.job(table.refs.at(job));
      opt.on_started(j.kernel->name(), j.cell.id());
    };
  common.done = [&](std::size_t job, CellResult& r) {
    CellResult& slot = plan.results[plan.job(table.refs.at(job)).result_index];
    slot = std::move(r);
    emit(slot);
  };

  // CPU: each case is prepared once, in the parent (prepare runs before the batch's first fork), and
  // inherited by a short-lived child per kernel. A child's state only ever lives in that child: the
  // parent never touches `cpu_child`.
  IsolationOptions cpu_opt;
  cpu_opt.lanes = opt.isolate_lanes > 0 ? opt.isolate_lanes : worker_threads(opt);
  cpu_opt.cell_timeout_s = opt.cell_timeout_s;
  cpu_opt.child_per_batch = true;
  cpu_opt.stop = opt.stop;
  std::vector<PreparedCase> lane_case(static_cast<std::size_t>(std::max(1, cpu_opt.lanes)));
  ChildState cpu_child;
  IsolationHooks cpu_hooks = common;
  cpu_hooks.prepare = [&](std::size_t b, int lane) { lane_case[lane] = prepare_for_children(plan.items[cpu_items[b]].c, opt); };
  cpu_hooks.release = [&](std::size_t, int lane) { lane_case[lane] = PreparedCase{}; };
  cpu_hooks.run = [&](std::size_t job, int lane) {
    return run_in_child(cpu_child, plan, table.refs.at(job), {}, opt, &lane_case[lane], fresh);
  };

  // GPU: per device isolated_gpu_lanes(opt) lanes, each with a child per kernel kept across cases (one
  // device context per child) that prepares its cases itself. Preparation is most of an isolated GPU
  // cell's time, so several children per device prepare in parallel (one lane per device made `sweep`
  // 6.5x slower than in-process, issue 17). Lane L uses device L % devices. Lanes take cases as they free
  // up: which child and device runs a case varies from run to run, the results (fixed indices) do not.
  const std::size_t devices = std::max<std::size_t>(1, gpus.specs.size());
  ChildState gpu_child;
  IsolationHooks gpu_hooks = common;
  gpu_hooks.run = [&](std::size_t job, int lane) {
    return run_in_child(gpu_child, plan, table.refs.at(job), gpus.specs.at(static_cast<std::size_t>(lane) % devices),
                        opt, nullptr, fresh);
  };
  IsolationOptions gpu_opt;
  gpu_opt.lanes = static_cast<int>(devices) * isolated_gpu_lanes(opt);
  gpu_opt.cell_timeout_s = opt.cell_timeout_s;
  gpu_opt.stop = opt.stop;

  // A GPU context already open in this process (a caller that ran GPU kernels in-process before this run)
  // would make every GPU child fail with cudaErrorInitializationError: say so instead of forking them.
  // run_suite itself opens its in-process GPU backends only after this function returns.
  const bool gpu_forkable = !gpu_context_opened();
  if (!gpu_forkable)
    for (std::size_t job = cpu_refs; job < table.refs.size(); ++job) {
      const Job& j = plan.job(table.refs[job]);
      CellResult r = unrun_result(j.cell, *j.kernel, Verdict::error,
                                  "not run: this process opened a GPU context before forking the isolated child "
                                  "for this GPU kernel, and a process forked after CUDA initialisation cannot use "
                                  "the device; run it in a process of its own (issue 17)");
      r.index = j.index;
      common.done(job, r);
    }

  std::exception_ptr gpu_error, cpu_error;
  std::thread gpu_lanes;
  if (!gpu_batches.empty() && gpu_forkable)
    gpu_lanes = std::thread([&] {
      try {
        run_isolated(gpu_batches, gpu_opt, gpu_hooks);
      } catch (...) {
        gpu_error = std::current_exception();
      }
    });
  try {
    if (!cpu_batches.empty()) run_isolated(cpu_batches, cpu_opt, cpu_hooks);
  } catch (...) {
    cpu_error = std::current_exception();
  }
  if (gpu_lanes.joinable()) gpu_lanes.join();
  if (cpu_error) std::rethrow_exception(cpu_error);
  if (gpu_error) std::rethrow_exception(gpu_error);
}

}  // namespace pacheck
