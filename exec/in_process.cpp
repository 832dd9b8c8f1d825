#include "exec/in_process.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "exec/execute.hpp"
#include "exec/watchdog.hpp"

namespace pacheck {
namespace {

/// One device of the in-process pool: its backend, the mutex its kernel calls take (null for the
/// workers' own CPU backends, which no other thread uses) and whether a fatal error lost its context.
struct PoolDevice {
  Backend* backend;
  std::mutex* calls;
  std::atomic<bool>* lost;
};

/// Runs all jobs of one work item on `dev`: prepares the case, then each job with its kernel's clean twin,
/// its calls on `pool`'s buffers (those of the chain's earlier items, when the shapes match).
void run_item(const WorkItem& item, const PoolDevice& dev, BufferPool& pool, Plan& plan, const RunOptions& opt,
              const EmitResult& emit, const FreshProcesses* fresh) {
  if (stop_requested(opt)) return;
  if (opt.on_started)
    for (const auto& j : item.jobs) opt.on_started(j.kernel->name(), j.cell.id());
  std::optional<CaseData> data;
  try {
    data = prepare_case(item.c, opt);
  } catch (const std::exception& e) {
    for (const auto& j : item.jobs) {
      CellResult& r = plan.results[j.result_index];
      r = unrun_result(j.cell, *j.kernel, Verdict::error, fmt::format("case preparation failed: {}", e.what()));
      r.index = j.index;
      emit(r);
    }
    return;
  }
  std::unordered_map<const Kernel*, CleanTwin> twins;
  ExecuteOptions how;
  how.device_mu = dev.calls;
  how.fresh = fresh;
  how.pool = &pool;
  for (const auto& j : item.jobs) {
    if (stop_requested(opt)) return;  // the rest of the item stays unrun
    CellResult& r = plan.results[j.result_index];
    if (*dev.lost && j.kernel->device() != PACHECK_DEVICE_CPU) {
      r = unrun_result(j.cell, *j.kernel, Verdict::error, "not run: the device context was lost by an earlier fatal error");
    } else {
      const CallWatchdog::Watch watch =
          watch_call(opt.watchdog, *j.kernel, [&] { return fmt::format("{} on cell '{}'", j.kernel->name(), j.cell.id()); });
      Execution e = execute_cell(*data, *j.kernel, j.cell, *dev.backend, twins[j.kernel], opt.tolerance, how);
      if (e.error == ExecError::fatal) *dev.lost = true;
      r = std::move(e.result);
      r.expected_fail = r.expected_fail || j.expected_after;  // a history-dependent control's, from the plan
    }
    r.index = j.index;
    emit(r);
  }
}

}  // namespace

void run_in_process(Plan& plan, const GpuDevices& gpus, const RunOptions& opt, const EmitResult& emit,
                    const FreshProcesses* fresh) {
  const std::vector<std::size_t>& gpu_items = plan.items_of(Lane::gpu);
  const std::vector<std::size_t>& cpu_items = plan.items_of(Lane::cpu);
  std::vector<std::size_t> queue = gpu_items;
  queue.insert(queue.end(), cpu_items.begin(), cpu_items.end());
  // Workers take chains (WorkItem::chained): the positions in `queue` where one starts.
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < queue.size(); ++i)
    if (i == 0 || i == gpu_items.size() || !plan.items[queue[i]].chained) starts.push_back(i);
  const std::size_t ndev = std::max<std::size_t>(1, gpus.in_process.size());
  std::vector<std::mutex> gpu_calls(ndev);
  std::vector<std::atomic<bool>> gpu_lost(ndev);
  std::atomic<bool> cpu_lost{false};
  const int threads = worker_threads(opt);
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < std::min<int>(threads, static_cast<int>(starts.size())); ++t)
    workers.emplace_back([&] {
      auto cpu = make_cpu_backend();
      for (std::size_t c; !stop_requested(opt) && (c = next++) < starts.size();) {
        const std::size_t first = starts[c], last = c + 1 < starts.size() ? starts[c + 1] : queue.size();
        PoolDevice dev{cpu.get(), nullptr, &cpu_lost};
        if (first < gpu_items.size()) {  // a chain's GPU items run on one device: its first item's
          const std::size_t d = gpu_device_for(first, ndev);
          dev = {gpus.in_process[d].get(), &gpu_calls[d], &gpu_lost[d]};
        }
        // The chain's buffers, freed before the next chain (of another shape) is prepared.
        BufferPool pool(*dev.backend);
        for (std::size_t i = first; i < last && !stop_requested(opt); ++i)
          run_item(plan.items[queue[i]], dev, pool, plan, opt, emit, fresh);
      }
    });
  for (auto& w : workers) w.join();
}

}  // namespace pacheck
