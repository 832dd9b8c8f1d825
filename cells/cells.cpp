// pacheck::cells (include/pacheck/cells.hpp): one cell at a time through the pipeline, for test frameworks.
// Everything here strings together pieces of the earlier stages; nothing is judged or run differently.
#include "pacheck/cells.hpp"

#include "cells/cells_internal.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_set>

#include "exec/runner.hpp"
#include "judge/comparator.hpp"
#include "judge/summary.hpp"
#include "kernels/plugin.hpp"
#include "report/text.hpp"
#include "suites/suite.hpp"

namespace pacheck::cells {

namespace {

/// Suites loaded so far, by the name they were asked for (a gtest binary asks for each cell's suite).
const Suite& loaded_suite(const std::string& name) {
  static std::map<std::string, Suite> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) it = loaded.emplace(name, load_suite(name)).first;
  return it->second;
}

/// One open backend per device spec, for the life of the process (a GPU context is opened once).
Backend& backend_for(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Backend>> open;
  auto& b = open[device];
  if (!b) b = open_backend(device);
  return *b;
}

std::vector<std::string> names_of(const PluginInfo& info) { return info.kernels; }

/// Kernels keep_in_process() marked.
std::set<std::string>& in_process_only() {
  static std::set<std::string> names;
  return names;
}

}  // namespace

const Suite& suite_named(const std::string& name) { return loaded_suite(name); }

KernelPtr kernel_named(const std::string& name) {
  KernelPtr k = Registry::global().find(name);
  if (!k) throw std::runtime_error(fmt::format("kernel '{}' is not registered (add_linked_kernels or add_plugin first)", name));
  return k;
}

std::vector<std::string> add_linked_kernels(pacheck_register_kernels_fn register_kernels, const std::string& repro_plugin,
                                            std::uint32_t abi_version) {
  const std::string label = repro_plugin.empty() ? "<linked into this test binary>" : repro_plugin;
  return names_of(pacheck::add_linked_kernels(label, register_kernels, abi_version));
}

std::vector<std::string> add_plugin(const std::string& path) { return names_of(load_plugin(path, Registry::global())); }

std::vector<std::string> cell_ids(const std::string& suite, const std::string& kernel) {
  const Suite& s = suite_named(suite);
  const KernelPtr k = kernel_named(kernel);
  std::vector<std::string> ids;
  std::unordered_set<std::string> seen;
  for (const SuiteCell& c : s.cells) {
    std::string id = c.for_layouts(k->layouts()).id();
    if (seen.insert(id).second) ids.push_back(std::move(id));
  }
  return ids;
}

void keep_in_process(const std::string& kernel) {
  kernel_named(kernel);
  in_process_only().insert(kernel);
}

CellResult run_cell_result(const std::string& suite, const std::string& kernel, const std::string& cell_id,
                           const std::string& device) {
  const KernelPtr k = kernel_named(kernel);
  Cell cell;
  std::string suite_name;
  if (suite.empty()) {
    try {
      cell = parse_cell_id(cell_id);
    } catch (const std::exception& e) {
      throw std::runtime_error(e.what());
    }
  } else {
    const Suite& s = suite_named(suite);
    suite_name = s.name;
    const SuiteCell* found = nullptr;
    for (const SuiteCell& c : s.cells)
      if (c.for_layouts(k->layouts()).id() == cell_id) {
        found = &c;
        break;
      }
    if (!found) throw std::runtime_error(fmt::format("suite '{}' has no cell '{}' for kernel {}", suite, cell_id, kernel));
    cell = found->for_layouts(k->layouts());
  }

  CellResult r;
  if (Support sup = k->supports(cell.c); !sup.ok) {
    r = unrun_result(cell, *k, sup.failed ? Verdict::error : Verdict::declined, sup.reason);
  } else {
    // The device a CPU kernel runs on is the CPU, whatever the binary was asked for (as `pacheck run`).
    const std::string dev = k->device() == PACHECK_DEVICE_CPU ? "cpu" : device;
    Backend& backend = backend_for(dev);
    if (in_process_only().count(kernel)) {
      // exec/'s run_cell without its fresh-process server: nothing of this kernel may run in a fork.
      // The case is prepared once for all its cells and the clean twin run once per (case, kernel), as in
      // `pacheck run` (a suite's cells of one case are neighbours, so only the last case is kept).
      const RunOptions opt;
      static struct {
        std::string case_id;
        std::optional<CaseData> data;
        std::map<std::string, CleanTwin> twins;
      } last;
      if (!last.data || last.case_id != cell.c.id()) {
        last.data.reset();
        last.twins.clear();
        last.data.emplace(prepare_case(cell.c, opt));
        last.case_id = cell.c.id();
      }
      const CaseData& data = *last.data;
      CleanTwin& twin = last.twins[kernel];
      ExecuteOptions how;
      how.no_fresh = fmt::format("{} runs in this process only (an interpreter's kernel is never called in a fork of "
                                 "it), so the cause is named from re-runs here",
                                 kernel);
      r = execute_cell(data, *k, cell, backend, twin, opt.tolerance, how).result;
    } else {
      r = pacheck::run_cell(cell, *k, backend, RunOptions{}).first;
    }
  }
  r.suite = suite_name;
  return r;
}

CellRun run_cell(const std::string& suite, const std::string& kernel, const std::string& cell_id,
                 const std::string& device) {
  const CellResult r = run_cell_result(suite, kernel, cell_id, device);
  const KernelPtr k = kernel_named(kernel);
  CellRun out;
  out.cell_id = r.cell_id.empty() ? cell_id : r.cell_id;
  out.kernel = kernel;
  out.verdict = std::string(verdict_name(r.verdict));
  const CellOutcome o = cell_outcome(r, k->is_negative_control());
  out.declined = o == CellOutcome::declined;
  out.failed = o == CellOutcome::failed || o == CellOutcome::missed;
  out.detail = r.detail;
  out.metrics = metrics_text(r);
  out.repro = repro_command(r, "");
  return out;
}

InstrumentCheck check_instrument(const std::string& suite) {
  InstrumentCheck out;
  const SelfTestResult st = comparator_selftest();
  if (!st.passed) {
    out.blind = true;
    out.summary = fmt::format("comparator self-test failed:\n  {}\n", fmt::join(st.lines, "\n  "));
    return out;
  }
  out.summary = "comparator self-test passed\n";
  // pacheck's CPU negative controls on the cells of the suite where each one's planted fault must show
  // (a control that has none in this suite is not exercised, as in a run).
  const Suite& s = suite_named(suite);
  const std::vector<KernelPtr> controls = Registry::global().negative_controls(PACHECK_DEVICE_CPU);
  Suite planted = s;
  planted.cells.clear();
  for (const SuiteCell& c : s.cells)
    for (const auto& k : controls)
      if ((*k->expected_failures())(c.for_layouts(k->layouts()))) {
        planted.cells.push_back(c);
        break;
      }
  if (planted.cells.empty() || controls.empty()) {
    out.summary += fmt::format("negative controls: not exercised (suite {} plants none of their faults)\n", s.name);
    return out;
  }
  const RunSummary r = run_suite(planted, controls, "cpu", RunOptions{});
  out.blind = r.blind;
  for (const KernelSummary& k : r.kernels)
    out.summary += fmt::format("negative control {}: {} ({} cells caught, {} missed)\n", k.kernel,
                               control_outcome_name(k.control), k.caught, k.missed);
  return out;
}

std::string test_name_of(const std::string& cell_id) {
  std::string out;
  for (const char ch : cell_id) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if ((u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z')) out += ch;
    else if (ch == '+') out += "plus";
    else if (ch == '-') out += "minus";
    else if (ch == '@') out += "_at_";
    else out += '_';
  }
  return out;
}

}  // namespace pacheck::cells
