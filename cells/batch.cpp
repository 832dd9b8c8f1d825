// Batches of cells (the C API's batch_open / batch_next / batch_close; pacheck.run_suite and the pytest
// plugin): the cells of a suite run one after another on the caller's thread, in batch order, while a pool of
// threads prepares the next cases (exec/prefetch.hpp). A cell's result is run_cell's: the same admission,
// execute_cell and answer.
#include <fmt/format.h>

#include <map>
#include <memory>
#include <regex>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "cells/cells_internal.hpp"
#include "exec/prefetch.hpp"
#include "judge/comparator.hpp"
#include "report/environment.hpp"
#include "report/report_dir.hpp"
#include "report/run_identity.hpp"

namespace pacheck::cells {

namespace {

/// One open batch.
struct Batch {
  KernelPtr kernel;
  std::string suite_name, device;
  Backend* backend = nullptr;
  RunOptions opt;
  std::vector<Cell> cells;
  std::vector<std::optional<CellResult>> settled;  ///< per cell: decided without a call
  std::vector<std::size_t> case_of;                 ///< per cell that runs: its case's index in `prefetch`
  std::unique_ptr<CasePrefetch> prefetch;
  std::unordered_map<std::size_t, CleanTwin> twins;  ///< by case index (only the current case's is kept)
  std::size_t next = 0;
  std::vector<CellResult> results;
  std::optional<ReportDir> reports;
  nlohmann::json identity;
};

std::map<int, std::unique_ptr<Batch>>& batches() {
  static std::map<int, std::unique_ptr<Batch>> open;
  return open;
}

/// The batch's cells: `ids` in their order (each must be in the suite), or the whole suite; then `filter`.
std::vector<Cell> batch_cells(const BatchRequest& req, const Kernel& k, std::string* suite_name) {
  const Suite& s = suite_named(req.suite);
  *suite_name = s.name;
  std::unordered_map<std::string, Cell> by_id;
  std::vector<Cell> all;
  std::unordered_set<std::string> seen;
  const CellKinds kinds = cell_kinds(s);
  for (const SuiteCell& sc : s.cells) {
    if (!pairs_with(k, sc.cell.c, kinds)) continue;
    Cell c = sc.for_layouts(k.layouts());
    if (!seen.insert(c.id()).second) continue;
    by_id.emplace(c.id(), c);
    all.push_back(std::move(c));
  }
  std::vector<Cell> picked;
  if (req.ids.empty()) {
    picked = std::move(all);
  } else {
    for (const std::string& id : req.ids) {
      const auto it = by_id.find(id);
      if (it == by_id.end())
        throw std::runtime_error(fmt::format("suite '{}' has no cell '{}' for kernel {}", req.suite, id, k.name()));
      picked.push_back(it->second);
    }
  }
  if (req.filter.empty()) return picked;
  std::regex re;
  try {
    re = std::regex(req.filter);
  } catch (const std::regex_error& e) {
    throw std::runtime_error(fmt::format("filter '{}': not a regular expression ({})", req.filter, e.what()));
  }
  std::vector<Cell> kept;
  for (Cell& c : picked)
    if (std::regex_search(c.id(), re)) kept.push_back(std::move(c));
  if (kept.empty())
    throw std::runtime_error(fmt::format("filter '{}' matches none of the {} cells of suite '{}'", req.filter,
                                         picked.size(), req.suite));
  return kept;
}

/// Admits every cell (supports(), sparse pools, memory with `concurrent` cases at once), on this thread.
void admit_cells(Batch& b, const MemoryBudget& budget, int concurrent, std::vector<Case>* cases) {
  for (const Cell& cell : b.cells) {
    Admission a = admit(cell, *b.kernel, b.opt, budget, concurrent);
    if (!a.refused.empty())
      a.settled = unrun_result(cell, *b.kernel, Verdict::error, "refused before anything was generated: " + a.refused);
    b.settled.push_back(std::move(a.settled));
    if (b.settled.back()) {
      b.case_of.push_back(0);
      continue;
    }
    // Cells of one case are neighbours in a suite; a case seen again later is prepared again (never kept).
    const std::string id = cell.c.id();
    if (cases->empty() || cases->back().id() != id) cases->push_back(cell.c);
    b.case_of.push_back(cases->size() - 1);
  }
}

/// Cases prepared at once that fit the budget: the largest case's estimate times (ahead + 1).
int ahead_that_fits(const Batch& b, const std::vector<Case>& cases, const MemoryBudget& budget, int want) {
  double largest = 0;
  for (const Case& c : cases)
    largest = std::max(largest, estimate_case_memory(c, b.opt.oracle_precision,
                                                     b.opt.tolerance.policy == TolerancePolicy::calibrated).total());
  if (largest <= 0) return want;
  const auto fit = static_cast<int>(budget.bytes / largest) - 1;
  return std::max(0, std::min(want, fit));
}

}  // namespace

BatchInfo open_batch(const BatchRequest& req) {
  static int next_handle = 0;
  auto b = std::make_unique<Batch>();
  b->kernel = kernel_named(req.kernel);
  b->cells = batch_cells(req, *b->kernel, &b->suite_name);
  b->device = req.device.empty() ? "cpu" : req.device;
  fresh_options(*b->kernel);  // a CPU kernel's fresh-process server: forked before any thread or call
  b->backend = &backend_for_kernel(*b->kernel, b->device);
  BatchInfo info;
  info.budget = req.max_memory > 0 ? MemoryBudget{req.max_memory, "given"} : default_memory_budget();
  info.threads = req.threads > 0 ? req.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int want = req.ahead >= 0 ? req.ahead : info.threads;
  std::vector<Case> cases;
  // Each cell must fit with the cases prepared ahead; a cell that does not fit even alone is refused.
  admit_cells(*b, info.budget, 1, &cases);
  info.ahead = ahead_that_fits(*b, cases, info.budget, want);
  info.cells = b->cells.size();
  info.cases = cases.size();
  if (!req.report_dir.empty()) {
    b->identity = run_identity(suite_named(req.suite), {b->kernel->name()}, b->device, b->opt, req.filter);
    b->identity["batch_cells"] = b->cells.size();  // a batch runs the cells it was given, in their order
    try {
      b->reports = ReportDir::start(req.report_dir, b->identity);
    } catch (const std::exception& e) {
      throw std::runtime_error(e.what());
    }
  }
  b->prefetch = std::make_unique<CasePrefetch>(std::move(cases), b->opt, info.threads, info.ahead);
  info.handle = ++next_handle;
  batches()[info.handle] = std::move(b);
  return info;
}

namespace {
Batch& batch_at(int handle) {
  const auto it = batches().find(handle);
  if (it == batches().end()) throw std::runtime_error(fmt::format("batch {} is not open", handle));
  return *it->second;
}
}  // namespace

std::optional<CellAnswer> batch_next(int handle) {
  Batch& b = batch_at(handle);
  if (b.next >= b.cells.size()) return std::nullopt;
  const std::size_t i = b.next++;
  const Cell& cell = b.cells[i];
  CellAnswer out;
  if (b.settled[i]) {
    out.result = std::move(*b.settled[i]);
  } else {
    const std::size_t ci = b.case_of[i];
    try {
      const CaseData& data = b.prefetch->get(ci);
      for (auto it = b.twins.begin(); it != b.twins.end();) it = it->first < ci ? b.twins.erase(it) : std::next(it);
      out = execute_prepared(data, *b.kernel, cell, *b.backend, b.twins[ci], b.opt);
    } catch (const std::exception& e) {
      out.result = unrun_result(cell, *b.kernel, Verdict::error, fmt::format("case preparation failed: {}", e.what()));
    }
  }
  out.result.suite = b.suite_name;
  out.result.index = static_cast<int>(i);
  if (b.reports) b.reports->append(out.result);
  b.results.push_back(out.result);
  return out;
}

BatchEnd close_batch(int handle) {
  auto it = batches().find(handle);
  if (it == batches().end()) throw std::runtime_error(fmt::format("batch {} is not open", handle));
  std::unique_ptr<Batch> b = std::move(it->second);
  batches().erase(it);
  b->prefetch.reset();  // stops its threads
  BatchEnd end;
  end.summary.results = std::move(b->results);
  end.summary.planned = b->cells.size();
  end.summary.stopped = end.summary.results.size() < b->cells.size();
  end.summary.selftest = comparator_selftest();
  summarize(end.summary, {{b->kernel->name(), b->kernel->is_negative_control()}});
  if (b->reports && !end.summary.stopped) {
    ReportMeta meta{b->suite_name, b->device, collect_environment(b->device), b->identity};
    try {
      b->reports->finish(end.summary, meta);
    } catch (const std::exception& e) {
      throw std::runtime_error(e.what());
    }
    end.reports = reports_line(b->reports->dir());
  } else if (b->reports) {
    end.reports = fmt::format("results of the {} finished cells in {}/{}; no reports (the batch was closed before its "
                              "last cell)",
                              end.summary.results.size(), b->reports->dir(), kResultsLogFile);
  }
  return end;
}

}  // namespace pacheck::cells
