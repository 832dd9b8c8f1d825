#include "exec/runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace pacheck {
namespace {

void check_options(const RunOptions& opt) {
  if (opt.shard_count < 1 || opt.shard_index < 0 || opt.shard_index >= opt.shard_count)
    throw std::invalid_argument(fmt::format("--shard: index {} of {} is out of range", opt.shard_index, opt.shard_count));
  if (opt.isolate && !(opt.cell_timeout_s > 0))
    throw std::invalid_argument(fmt::format("--cell-timeout: {} s (must be > 0)", opt.cell_timeout_s));
}

/// Reports finished cells one at a time: names the suite, counts them and calls on_result / on_progress
/// as each finishes, and on_result_in_order in plan order (a result waits until every one before it has
/// finished). Keeps which results finished, for a run that stops early.
class Progress {
 public:
  Progress(const Suite& suite, const RunOptions& opt, Plan& plan)
      : suite_(suite), opt_(opt), plan_(plan), state_(plan.results.size(), State::pending),
        done_(static_cast<int>(plan.resumed.size())), total_(static_cast<int>(plan.results.size())) {
    for (std::size_t i : plan.resumed) state_[i] = State::resumed;
    release_in_order();  // a resumed prefix is skipped at once
  }
  /// `r` is a result slot of the plan (plan.results[i]) that just finished.
  void operator()(CellResult& r) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto pos = static_cast<std::size_t>(&r - plan_.results.data());
    if (pos >= state_.size()) throw std::logic_error("run_suite: a result outside the plan was reported");
    r.suite = suite_.name;
    ++done_;
    state_[pos] = State::finished;
    if (opt_.on_result) opt_.on_result(r);
    if (opt_.on_progress) opt_.on_progress(done_, total_);
    release_in_order();
  }
  /// After the last cell: passes on, in plan order, the finished results an unfinished one held back
  /// (only a stopped run has any). Returns whether every planned result finished.
  bool finish() {
    std::lock_guard<std::mutex> lock(mu_);
    for (; next_ < state_.size(); ++next_)
      if (state_[next_] == State::finished && opt_.on_result_in_order) opt_.on_result_in_order(plan_.results[next_]);
    return std::none_of(state_.begin(), state_.end(), [](State s) { return s == State::pending; });
  }
  /// The finished results (resumed ones included), in plan order.
  std::vector<CellResult> take_finished() {
    std::vector<CellResult> out;
    for (std::size_t i = 0; i < state_.size(); ++i)
      if (state_[i] != State::pending) out.push_back(std::move(plan_.results[i]));
    return out;
  }

 private:
  enum class State : unsigned char { pending, finished, resumed };
  void release_in_order() {
    for (; next_ < state_.size() && state_[next_] != State::pending; ++next_)
      if (state_[next_] == State::finished && opt_.on_result_in_order) opt_.on_result_in_order(plan_.results[next_]);
  }

  const Suite& suite_;
  const RunOptions& opt_;
  Plan& plan_;
  std::mutex mu_;
  std::vector<State> state_;
  std::size_t next_ = 0;  ///< first result not yet passed to on_result_in_order
  int done_, total_;
};

}  // namespace

RunSummary run_suite(const Suite& suite, const std::vector<KernelPtr>& kernels, const std::string& device_spec,
                     const RunOptions& opt) {
  check_options(opt);
  // First: forked before any kernel call and before a GPU context opens here, so its children are fresh
  // processes for every kernel and device (exec/fresh.hpp). Only suites with faulted cells need one.
  std::optional<FreshProcesses> fresh;
  if (std::any_of(suite.cells.begin(), suite.cells.end(), [](const SuiteCell& c) { return !c.cell.fault.clean(); })) {
    std::vector<const Kernel*> all;
    for (const auto& k : kernels) all.push_back(k.get());
    fresh.emplace(all, opt.cell_timeout_s);
  }
  RunSummary sum;
  sum.selftest = comparator_selftest();
  sum.judge_flags = judge_flags(opt.tolerance, opt.oracle_precision);
  // The order below keeps this process free of a GPU context until its last child is forked: a fork after
  // CUDA initialisation cannot use the device (cudaErrorInitializationError in every isolated cell, issue
  // 17). So isolated kernels (plugins by default) run first, in children forked from a process that has
  // touched no device (their supports() asked in children, and so is that of in-process GPU kernels, which
  // may query the device: plan_run), and only then does this process open its
  // own backends for the in-process GPU lane. A device that cannot be opened is still refused before any
  // cell runs: checked in a child when children come first.
  GpuDevices gpus = gpu_devices_of(kernels, device_spec);
  const bool forks = std::any_of(kernels.begin(), kernels.end(), [&](const KernelPtr& k) { return runs_isolated(opt, *k); });
  if (forks) check_in_process_gpus(gpus, kernels, opt);
  else open_in_process_gpus(gpus, kernels, opt);
  Plan plan = plan_run(suite, kernels, opt);

  Progress progress(suite, opt, plan);
  if (opt.on_planned) opt.on_planned(static_cast<int>(plan.resumed.size()), static_cast<int>(plan.results.size()));
  const EmitResult emit = [&](CellResult& r) { progress(r); };
  for (std::size_t i : plan.settled) emit(plan.results[i]);  // live table and results.jsonl see them first
  const FreshProcesses* server = fresh ? &*fresh : nullptr;
  // Before any in-process cell: no thread is inside a kernel when a child is forked, and no GPU context is
  // open in this process yet (unless the caller opened one before run_suite: see run_isolated_items).
  run_isolated_items(plan, kernels, gpus, opt, emit, server);
  open_in_process_gpus(gpus, kernels, opt);
  run_in_process(plan, gpus, opt, emit, server);

  sum.planned = plan.results.size();
  sum.stopped = !progress.finish();
  sum.results = sum.stopped ? progress.take_finished() : std::move(plan.results);
  std::vector<KernelRole> roles;
  for (const auto& k : kernels) roles.push_back({k->name(), k->is_negative_control()});
  sum.shard = opt.shard_count > 1;
  summarize(sum, roles);
  return sum;
}

}  // namespace pacheck
