#include "exec/plan.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/files.hpp"
#include "exec/execute.hpp"
#include "exec/isolate.hpp"
#include "exec/watchdog.hpp"

namespace pacheck {
namespace {

/// A cell that passed shard, filter and resume: it runs unless its kernel declines it.
struct Selected {
  const Kernel* kernel;
  Cell cell;
  std::size_t result_index;
  int index;  ///< position in Suite::cells
  bool isolated;
};

/// Calls f(kernel, suite position, cell, id) for every (kernel, cell) of suite x kernels, kernel-major in
/// suite order, that passes opt's shard and filter and pairs_with() the kernel (a mixed suite such as gate: its
/// own kind's cells only, not thousands of declines), with the kernel's layout and opt's seed applied.
template <class F>
void for_each_candidate(const Suite& suite, const std::vector<KernelPtr>& kernels, const RunOptions& opt, F&& f) {
  const CellKinds kinds = cell_kinds(suite);
  for (const auto& k : kernels)
    for (std::size_t ci = 0; ci < suite.cells.size(); ++ci) {
      if (static_cast<int>(ci % static_cast<std::size_t>(opt.shard_count)) != opt.shard_index) continue;
      if (!pairs_with(*k, suite.cells[ci].cell.c, kinds)) continue;
      Cell cell = suite.cells[ci].for_layouts(k->layouts());
      if (opt.seed) cell.c.seed = *opt.seed;
      const std::string id = cell.id();
      if (opt.filter && !std::regex_search(id, *opt.filter)) continue;
      f(k, ci, std::move(cell), id);
    }
}

/// Expands suite x kernels (kernel-major, suite order) into p.results, applying shard, seed and filter;
/// takes resumed results from opt.previous and returns the cells still to run.
std::vector<Selected> select_cells(Plan& p, const Suite& suite, const std::vector<KernelPtr>& kernels,
                                   const RunOptions& opt) {
  std::vector<Selected> selected;
  for_each_candidate(suite, kernels, opt, [&](const KernelPtr& k, std::size_t ci, Cell cell, const std::string& id) {
      const bool iso = runs_isolated(opt, *k);
      const std::size_t index = p.results.size();
      p.results.emplace_back();
      if (auto prev = opt.previous.find(result_key(k->name(), id)); prev != opt.previous.end()) {
        p.results[index] = prev->second;
        p.results[index].suite = suite.name;
        p.results[index].index = static_cast<int>(ci);
        p.resumed.push_back(index);
        return;
      }
      selected.push_back({k.get(), std::move(cell), index, static_cast<int>(ci), iso});
  });
  return selected;
}

/// One answer per selected cell: supports() here for in-process kernels, in one child per isolated kernel
/// (asked in `kernels` order). An in-process GPU kernel is asked in a child too when the run forks isolated
/// children: its supports() may query the device (gpu.paged_v1 reads the shared memory per block), which
/// would initialise CUDA here before those children are forked, and they could not use the device (issue
/// 17). A kernel whose child gave no answer gets `failure` on each of its cells.
struct Answer {
  Support support;
  std::string failure;  ///< non-empty: supports() could not be asked
};
std::vector<Answer> ask_supports(const std::vector<Selected>& selected, const std::vector<KernelPtr>& kernels,
                                 const RunOptions& opt) {
  struct Asked {
    std::vector<const Cell*> cells;
    std::vector<Support> answers;
    std::string failure;
    std::size_t next = 0;
  };
  std::unordered_map<const Kernel*, Asked> asked;
  const bool forks = std::any_of(kernels.begin(), kernels.end(), [&](const KernelPtr& k) { return runs_isolated(opt, *k); });
  auto in_child = [&](const Selected& sel) {
    return sel.isolated || (forks && sel.kernel->device() != PACHECK_DEVICE_CPU);
  };
  for (const auto& sel : selected)
    if (in_child(sel)) asked[sel.kernel].cells.push_back(&sel.cell);
  for (const auto& k : kernels)
    if (auto it = asked.find(k.get()); it != asked.end())
      it->second.answers = supports_in_child(*k, it->second.cells, opt.cell_timeout_s, &it->second.failure);
  std::vector<Answer> out;
  for (const auto& sel : selected) {
    if (!in_child(sel)) {
      Support s;
      try {
        const CallWatchdog::Watch watch = watch_call(opt.watchdog, *sel.kernel, [&] {
          return fmt::format("{}'s supports() of cell '{}'", sel.kernel->name(), sel.cell.id());
        });
        s = cell_support(*sel.kernel, sel.cell.c);
      } catch (const std::exception& e) {
        s = Support::error(std::string("supports() failed: ") + e.what());
      }
      out.push_back({s, {}});
      continue;
    }
    Asked& a = asked.at(sel.kernel);
    if (!a.failure.empty()) out.push_back({{}, a.failure});
    else out.push_back({a.answers[a.next++], {}});
  }
  return out;
}

/// Per selected cell: 1 when its kernel is a negative control whose expected_failures() holds for the cell,
/// 0 when it does not, 2 when it was not asked (an ordinary kernel, a declined cell, a history-dependent
/// control in an in-process lane, or opt.controls_everywhere). The predicates generate cases (row maxima of
/// the logits, lost probability mass), seconds of CPU on long contexts: they are asked on worker_threads(opt)
/// threads, as run() is, so planning does not hold every core but one idle. Rethrows the first exception a
/// predicate threw.
std::vector<char> ask_expected(const std::vector<Selected>& selected, const std::vector<Answer>& answers,
                               const RunOptions& opt) {
  std::vector<char> out(selected.size(), 2);
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const Kernel& k = *selected[i].kernel;
    const Lane lane = lane_of(k, selected[i].isolated);
    const bool by_history = k.history_dependent() && (lane == Lane::cpu || lane == Lane::gpu);
    if (answers[i].failure.empty() && answers[i].support.ok && !by_history && !opt.controls_everywhere &&
        k.is_negative_control())
      todo.push_back(i);
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr first_error;
  std::mutex mu;
  auto work = [&] {
    for (std::size_t n; (n = next++) < todo.size();) {
      const Selected& sel = selected[todo[n]];
      try {
        out[todo[n]] = (*sel.kernel->expected_failures())(sel.cell) ? 1 : 0;
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = std::current_exception();
        next = todo.size();
      }
    }
  };
  const int threads = std::min<int>(worker_threads(opt), static_cast<int>(todo.size()));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (first_error) std::rethrow_exception(first_error);
  return out;
}

/// Makes the chains of the in-process lanes: the items of one buffer_shape() become consecutive (the
/// shapes in the order they first appear, each shape's items in suite order) and each but the first of them
/// WorkItem::chained. One chain per shape: a kernel's state kept for one shape's buffers meets every later
/// call of that shape, and none of another.
void make_chains(Plan& p) {
  for (Lane lane : {Lane::cpu, Lane::gpu}) {
    std::vector<std::size_t>& items = p.lanes[static_cast<std::size_t>(lane)];
    std::unordered_map<std::string, std::size_t> rank;  // shape -> order of first appearance
    std::vector<std::pair<std::size_t, std::size_t>> keyed;  // (rank, item)
    for (std::size_t i : items) keyed.emplace_back(rank.emplace(buffer_shape(p.items[i].c), rank.size()).first->second, i);
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (std::size_t n = 0; n < keyed.size(); ++n) {
      items[n] = keyed[n].second;
      p.items[items[n]].chained = n > 0 && keyed[n - 1].first == keyed[n].first;
    }
  }
}

/// The jobs of history-dependent controls (Kernel::expected_failures_after) on the in-process lanes: sets
/// Job::expected_after from the cases before each job's in its chain, keeps each chain's jobs of the kernel
/// up to its last expected failure there (the history that failure needs) and settles the rest as not_run
/// (unless opt.controls_everywhere). Items left with no job leave their lane.
void plan_history_controls(Plan& p, const Suite& suite, const RunOptions& opt) {
  for (Lane lane : {Lane::cpu, Lane::gpu}) {
    std::vector<std::size_t>& items = p.lanes[static_cast<std::size_t>(lane)];
    // Per kernel: the case of each of its jobs so far in the current chain, and those jobs (item, job).
    std::unordered_map<const Kernel*, std::vector<const Case*>> before;
    std::unordered_map<const Kernel*, std::vector<JobRef>> in_chain;
    std::vector<JobRef> drop;
    auto close_chain = [&] {
      for (auto& [k, refs] : in_chain) {
        std::size_t last = 0;  // jobs up to the last expected one are kept
        for (std::size_t r = 0; r < refs.size(); ++r) {
          const Job& j = p.items[refs[r].item].jobs[refs[r].job];
          if (j.expected_after || (*k->expected_failures())(j.cell)) last = r + 1;
        }
        if (!opt.controls_everywhere) drop.insert(drop.end(), refs.begin() + static_cast<std::ptrdiff_t>(last), refs.end());
      }
      before.clear();
      in_chain.clear();
    };
    for (std::size_t i : items) {
      if (!p.items[i].chained) close_chain();
      for (std::size_t jj = 0; jj < p.items[i].jobs.size(); ++jj) {
        Job& j = p.items[i].jobs[jj];
        const auto after = j.kernel->expected_failures_after();
        if (!after) continue;
        j.expected_after = (*after)(j.cell, before[j.kernel]);
        in_chain[j.kernel].push_back({i, jj});
        before[j.kernel].push_back(&p.items[i].c);
      }
    }
    close_chain();
    // Settle the dropped jobs (highest job index first within an item, so the others keep their places).
    std::sort(drop.begin(), drop.end(), [](JobRef a, JobRef b) { return a.item != b.item ? a.item < b.item : a.job > b.job; });
    for (const JobRef& ref : drop) {
      Job& j = p.items[ref.item].jobs[ref.job];
      CellResult& r = p.results[j.result_index];
      r = unrun_result(j.cell, *j.kernel, Verdict::not_run, kNotRunDetail);
      r.suite = suite.name;
      r.index = j.index;
      p.settled.push_back(j.result_index);
      p.items[ref.item].jobs.erase(p.items[ref.item].jobs.begin() + static_cast<std::ptrdiff_t>(ref.job));
    }
    std::erase_if(items, [&](std::size_t i) { return p.items[i].jobs.empty(); });
  }
  std::sort(p.settled.begin(), p.settled.end());
}

}  // namespace

Lane lane_of(const Kernel& k, bool isolated) {
  const bool cpu = k.device() == PACHECK_DEVICE_CPU;
  if (isolated) return cpu ? Lane::isolated_cpu : Lane::isolated_gpu;
  return cpu ? Lane::cpu : Lane::gpu;
}

std::size_t count_selected(const Suite& suite, const std::vector<KernelPtr>& kernels, const RunOptions& opt) {
  std::size_t n = 0;
  for_each_candidate(suite, kernels, opt, [&](const KernelPtr&, std::size_t, const Cell&, const std::string&) { ++n; });
  return n;
}

MemoryPlan plan_memory(const Suite& suite, const std::vector<KernelPtr>& kernels, const RunOptions& opt) {
  MemoryPlan m;
  std::unordered_set<std::string> cases;
  const bool calibrated = opt.tolerance.policy == TolerancePolicy::calibrated;
  for_each_candidate(suite, kernels, opt, [&](const KernelPtr& k, std::size_t, const Cell& cell, const std::string& id) {
    if (opt.previous.count(result_key(k->name(), id))) return;
    if (!cases.insert(cell.c.id()).second) return;
    const MemoryEstimate e = estimate_case_memory(cell.c, opt.oracle_precision, calibrated);
    if (m.cell_id.empty() || e.total() > m.per_case.total()) {
      m.cell_id = id;
      m.per_case = e;
    }
  });
  m.cases = cases.size();
  m.concurrent = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::max(worker_threads(opt), opt.isolate_lanes)), cases.size()));
  return m;
}

namespace {
/// The number in the first line of `path` (a cgroup memory limit), or nullopt when the file is absent,
/// says "max" or holds no number.
std::optional<double> cgroup_limit(const char* path) {
  std::string text;
  try {
    text = read_regular_file(path, ReadLimit{4096, "a cgroup memory limit"});
  } catch (const std::exception&) {
    return std::nullopt;
  }
  double v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p == text.data() || v <= 0) return std::nullopt;
  return v;
}
}  // namespace

MemoryBudget default_memory_budget() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const double ram = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
  std::optional<double> cg = cgroup_limit("/sys/fs/cgroup/memory.max");
  if (!cg) cg = cgroup_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  if (cg && (ram == 0 || *cg < ram)) return {*cg / 2, "50% of the cgroup limit"};
  if (ram == 0) return {std::numeric_limits<double>::infinity(), "unknown RAM: no limit"};
  return {ram / 2, "50% of RAM"};
}

std::string format_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t u = 0;
  while (u + 1 < std::size(kUnits) && bytes >= 1024) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, kUnits[u]);
}

std::string memory_refusal(const MemoryPlan& m, const MemoryBudget& budget, const std::string& flag,
                           const std::string& threads_flag) {
  if (m.cell_id.empty() || m.total() <= budget.bytes) return {};
  const MemoryEstimate& e = m.per_case;
  const std::string parts = fmt::format(
      "pre-paging Q/K/V {}, paged cache {}, per-cell copies {}, output {}, oracle {}; {} case{} at once", format_bytes(e.pre_paging),
      format_bytes(e.paged_cache), format_bytes(e.cell_copies), format_bytes(e.output), format_bytes(e.oracle),
      m.concurrent, m.concurrent == 1 ? "" : "s");
  constexpr double kMiB = 1024.0 * 1024, kGiB = kMiB * 1024;
  const char* sep = flag.rfind("--", 0) == 0 ? " " : "=";
  std::string fix = m.total() < kGiB ? fmt::format("pass {}{}{:.0f}M", flag, sep, std::ceil(m.total() / kMiB))
                                     : fmt::format("pass {}{}{:.0f}G", flag, sep, std::ceil(m.total() / kGiB));
  const auto fit = static_cast<int>(std::floor(budget.bytes / e.total()));
  if (m.concurrent > 1 && fit >= 1 && !threads_flag.empty()) fix += fmt::format(" or {}{}{}", threads_flag, sep, fit);
  return fmt::format("{}: cell '{}' needs about {} ({}); {} is {} ({}); {}", flag, m.cell_id, format_bytes(m.total()),
                     parts, flag, format_bytes(budget.bytes), budget.source, fix);
}

MemoryPlan single_case_memory(const Case& c, const std::string& cell_id, const RunOptions& opt, double extra) {
  MemoryPlan m;
  m.cell_id = cell_id;
  m.per_case = estimate_case_memory(c, opt.oracle_precision, opt.tolerance.policy == TolerancePolicy::calibrated);
  m.per_case.cell_copies += extra;
  m.concurrent = 1;
  m.cases = 1;
  return m;
}

std::unordered_set<std::string> selected_keys(const Suite& suite, const std::vector<KernelPtr>& kernels,
                                              const RunOptions& opt) {
  std::unordered_set<std::string> keys;
  for_each_candidate(suite, kernels, opt, [&](const KernelPtr& k, std::size_t, const Cell&, const std::string& id) {
    keys.insert(result_key(k->name(), id));
  });
  return keys;
}

Plan plan_run(const Suite& suite, const std::vector<KernelPtr>& kernels, const RunOptions& opt) {
  Plan p;
  std::vector<Selected> selected = select_cells(p, suite, kernels, opt);
  const std::vector<Answer> answers = ask_supports(selected, kernels, opt);
  const std::vector<char> expected = ask_expected(selected, answers, opt);
  std::array<std::unordered_map<std::string, std::size_t>, kLaneCount> item_of_key;
  for (std::size_t i = 0; i < selected.size(); ++i) {
    Selected& sel = selected[i];
    const Kernel& k = *sel.kernel;
    const Answer& a = answers[i];
    if (!a.failure.empty() || !a.support.ok) {
      CellResult& r = p.results[sel.result_index];
      r = !a.failure.empty()   ? unrun_result(sel.cell, k, Verdict::error, a.failure)
          : a.support.failed ? unrun_result(sel.cell, k, Verdict::error, a.support.reason)
                             : unrun_result(sel.cell, k, Verdict::declined, a.support.reason);
      r.suite = suite.name;
      r.index = sel.index;
      p.settled.push_back(sel.result_index);
      continue;
    }
    const Lane lane = lane_of(k, sel.isolated);
    // A history-dependent control in an in-process lane is settled after chaining (plan_history_controls).
    if (expected[i] == 0) {
      // A negative control proves the checks can fail only where its planted fault shows: elsewhere it must
      // pass, which --controls-everywhere audits. Settled, counted and reported, never dropped.
      CellResult& r = p.results[sel.result_index];
      r = unrun_result(sel.cell, k, Verdict::not_run, kNotRunDetail);
      r.suite = suite.name;
      r.index = sel.index;
      p.settled.push_back(sel.result_index);
      continue;
    }
    // Isolated GPU work is grouped per kernel (its child keeps one context across cases); everything
    // else per case, shared by the kernels that run it.
    const std::string key = lane == Lane::isolated_gpu ? result_key(k.name(), sel.cell.c.id()) : sel.cell.c.id();
    auto& of_key = item_of_key[static_cast<std::size_t>(lane)];
    auto it = of_key.find(key);
    if (it == of_key.end()) {
      it = of_key.emplace(key, p.items.size()).first;
      p.lanes[static_cast<std::size_t>(lane)].push_back(p.items.size());
      p.items.push_back(WorkItem{sel.cell.c, {}});
    }
    p.items[it->second].jobs.push_back({sel.result_index, &k, std::move(sel.cell), sel.index});
  }
  make_chains(p);
  plan_history_controls(p, suite, opt);
  make_chains(p);  // items left empty are gone: a chain's first item may have gone with them
  return p;
}

std::vector<Support> supports_in_child(const Kernel& k, const std::vector<const Cell*>& cells, double timeout_s,
                                       std::string* failure) {
  const auto answer = run_in_child_process(
      [&] {
        nlohmann::json out = nlohmann::json::array();
        for (const Cell* cell : cells) {
          Support s;
          try {
            s = cell_support(k, cell->c);
          } catch (const std::exception& e) {
            s = Support::error(std::string("supports() failed: ") + e.what());
          }
          out.push_back({s.ok, s.reason, s.failed});
        }
        return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      },
      timeout_s);
  std::vector<Support> supports;
  try {
    if (answer)
      for (const auto& a : nlohmann::json::parse(*answer)) supports.push_back({a.at(0).get<bool>(), a.at(1).get<std::string>(), a.at(2).get<bool>()});
  } catch (const std::exception&) {
    supports.clear();
  }
  if (supports.size() != cells.size()) {
    *failure = fmt::format("not run: asking {} which cells it supports failed (its supports() died, hung past {:g} s or "
                           "answered garbage in the child process that asks it)",
                           k.name(), timeout_s);
    supports.clear();
  }
  return supports;
}

}  // namespace pacheck
