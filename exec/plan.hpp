// Step 0 of a run: which (kernel, cell) pairs run, and where. Expands suite x kernels into cells (each
// kernel's native layout resolved), applies shard, seed and filter, takes resumed results, asks each kernel
// which cells it supports (isolated kernels in a child process), and groups the cells that run into work
// items by case, one list of items per lane.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/cell.hpp"
#include "exec/prepare.hpp"
#include "exec/run_options.hpp"
#include "judge/result.hpp"
#include "kernels/kernel.hpp"
#include "suites/suite.hpp"

namespace pacheck {

/// Where a work item runs: in this process on a CPU worker or a GPU device, or in child processes
/// (exec/isolated.hpp), before every in-process item (no GPU context is open when they are forked).
enum class Lane { cpu, gpu, isolated_cpu, isolated_gpu };
inline constexpr std::size_t kLaneCount = 4;

/// The lane of `k`'s cells: its device, isolated or not.
Lane lane_of(const Kernel& k, bool isolated);

/// One (kernel, cell) to run and where its result goes.
struct Job {
  std::size_t result_index;  ///< position in Plan::results (and RunSummary::results)
  const Kernel* kernel;
  Cell cell;                 ///< with the kernel's layout and the run's seed
  int index;                 ///< position of the cell in Suite::cells
};

/// One case and every job that uses it: the case is prepared once for all of them. On Lane::isolated_gpu
/// an item holds one kernel's jobs only (that kernel's child keeps its device context across cases).
struct WorkItem {
  Case c;
  std::vector<Job> jobs;
};

/// A job of a plan by position: job `job` of work item `item`.
struct JobRef {
  std::size_t item, job;
};

/// What a run does.
struct Plan {
  /// One result per selected (kernel, cell), kernel-major and in suite order: the report's fixed positions.
  /// Resumed and settled results are filled (suite and index set); the others are filled as jobs finish.
  std::vector<CellResult> results;
  std::vector<WorkItem> items;
  std::array<std::vector<std::size_t>, kLaneCount> lanes;  ///< item indices of each Lane, in suite order
  std::vector<std::size_t> resumed;  ///< result indices taken from RunOptions::previous, ascending
  std::vector<std::size_t> settled;  ///< result indices settled while planning (declined, error), ascending

  const std::vector<std::size_t>& items_of(Lane l) const { return lanes[static_cast<std::size_t>(l)]; }
  const Job& job(JobRef r) const { return items[r.item].jobs[r.job]; }
};

/// The detail of a Verdict::not_run result.
inline constexpr const char* kNotRunDetail =
    "not run: outside the negative control's expected failures (the cells its planted fault must fail; "
    "--controls-everywhere runs it)";

/// Plans `suite` x `kernels` with `opt`'s shard, seed, filter, previous, isolate and controls_everywhere. A
/// kernel that declines a cell settles it as `declined` with its reason; a negative control's supported cell
/// outside its expected_failures() is settled as `not_run` (kNotRunDetail) unless opt.controls_everywhere
/// (the cells it must fail are all run, which is all the run needs of it; where its fault may still show but
/// is not certain to, e.g. cpu.qlen_no_causal at long bf16 contexts, it is not run either; the cell is still
/// counted and reported); an isolated kernel whose supports() could not be asked (supports_in_child)
/// settles every cell of it as `error`. Calls supports() of in-process kernels here,
/// except that of in-process GPU kernels when some kernel runs isolated: those are asked in a child too, so
/// that no device query initialises CUDA in this process before the isolated children are forked.
Plan plan_run(const Suite& suite, const std::vector<KernelPtr>& kernels, const RunOptions& opt);

/// How many (kernel, cell) pairs of `suite` x `kernels` pass `opt`'s shard and filter (with its seed
/// applied to the ids), resumed or not: 0 means the run would have nothing to do, which commands report
/// as a usage error naming the flag before anything is run or written.
std::size_t count_selected(const Suite& suite, const std::vector<KernelPtr>& kernels, const RunOptions& opt);

/// The host memory a run of `opt` needs at its peak, from the cases alone (nothing generated): the case of
/// the selected, not resumed cells with the largest estimate_case_memory() (exec/prepare.hpp), times the
/// cases prepared at once (min(max(worker_threads(opt), opt.isolate_lanes), distinct cases)).
struct MemoryPlan {
  std::string cell_id;      ///< a cell of the largest case (empty when nothing is selected)
  MemoryEstimate per_case;  ///< that case's estimate
  int concurrent = 0;       ///< cases prepared at once
  std::size_t cases = 0;    ///< distinct cases selected
  double total() const { return per_case.total() * concurrent; }
};
/// MemoryPlan of `suite` x `kernels` under `opt` (shard, filter, seed, previous, threads, precision).
MemoryPlan plan_memory(const Suite& suite, const std::vector<KernelPtr>& kernels, const RunOptions& opt);

/// The host memory budget of a run, in bytes, and where it came from.
struct MemoryBudget {
  double bytes = 0;
  std::string source;  ///< "given", or "50% of RAM" / "50% of the cgroup limit"
};
/// Half of the physical RAM (sysconf), or of the cgroup's memory limit (/sys/fs/cgroup/memory.max, cgroup
/// v1's memory/memory.limit_in_bytes) when that is lower.
MemoryBudget default_memory_budget();
/// "38.2 GiB": `bytes` in the largest binary unit that keeps it >= 1.
std::string format_bytes(double bytes);
/// The one memory check of every entry point (run, score, export, bench, repro and the library's run_cell):
/// "" when the largest case of `m` times its concurrency fits `budget`, else why not, naming the cell, its
/// estimate by part, the cases at once, the budget and how to raise it: `flag` (the option or argument that
/// sets the budget, "--max-memory") with a size that fits, or `threads_flag` ("--threads"; "" for none) with
/// the cases that fit when one case would. Starts with "FLAG: cell 'ID' needs about ...".
std::string memory_refusal(const MemoryPlan& m, const MemoryBudget& budget, const std::string& flag = "--max-memory",
                           const std::string& threads_flag = "--threads");
/// MemoryPlan of one case at a time: the memory a single cell of `c` (its id `cell_id`) needs under `opt`'s
/// oracle precision and tolerance policy, plus `extra` bytes the caller adds to its cell copies (a Python
/// kernel's allowed copy of its inputs, cells/).
MemoryPlan single_case_memory(const Case& c, const std::string& cell_id, const RunOptions& opt, double extra = 0);

/// result_key(kernel, cell id) of every (kernel, cell) count_selected() counts: the cells a run of `opt`
/// plans, resumed or not (--resume checks each line of results.jsonl against it).
std::unordered_set<std::string> selected_keys(const Suite& suite, const std::vector<KernelPtr>& kernels,
                                              const RunOptions& opt);

/// Asks isolated kernel `k` whether it runs each of `cells`, in a child process: supports() is kernel code
/// too (a plugin's callback may crash), and a GPU kernel's supports() may query its device, which would
/// create a GPU context in the parent that no child forked afterwards could use. A supports() that throws
/// declines the cell ("supports() failed: ...", as the plugin ABI reports PACHECK_ERROR). Returns one
/// answer per cell; when the child dies, hangs past `timeout_s` or answers garbage, sets `failure` (the
/// cells' error) and returns nothing.
std::vector<Support> supports_in_child(const Kernel& k, const std::vector<const Cell*>& cells, double timeout_s,
                                       std::string* failure);

}  // namespace pacheck
