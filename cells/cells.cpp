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

/// Whether backend_for has opened a backend other than the CPU's in this process: from then on nothing here
/// forks (a child of a process holding a GPU context cannot use the device; issue 17).
bool& gpu_opened() {
  static bool opened = false;
  return opened;
}

/// One open backend per device spec, for the life of the process (a GPU context is opened once).
Backend& backend_for(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Backend>> open;
  auto& b = open[device];
  if (!b) {
    b = open_backend(device);
    if (device != "cpu") gpu_opened() = true;
  }
  return *b;
}

std::vector<std::string> names_of(const PluginInfo& info) { return info.kernels; }

/// Kernels keep_in_process() marked.
std::set<std::string>& in_process_only() {
  static std::set<std::string> names;
  return names;
}

/// The fresh-process server that names the cause of a kernel's faulted output that differs from its clean
/// twin (exec/fresh.hpp), or why the kernel has none.
struct FreshServer {
  std::unique_ptr<FreshProcesses> server;
  std::string why_not;
};

/// The kernel's server, forked on the kernel's first cell in this process, before its first call, so its
/// children start from a kernel this process never called (as `pacheck run` forks its server before any
/// cell). None for a keep_in_process() kernel, a GPU kernel, or once this process has opened a GPU.
FreshServer& fresh_for(const Kernel& k) {
  static std::map<std::string, FreshServer> servers;
  auto [it, first] = servers.try_emplace(k.name());
  if (!first) return it->second;
  FreshServer& f = it->second;
  if (in_process_only().count(k.name()))
    f.why_not = fmt::format("{} runs in this process only (an interpreter's kernel is never called in a fork of it), "
                            "so the cause is named from re-runs here",
                            k.name());
  else if (k.device() != PACHECK_DEVICE_CPU || gpu_opened())
    f.why_not = "this process runs GPU cells, and a process forked after CUDA initialisation cannot use the device "
                "(issue 17), so the cause is named from re-runs here; `pacheck run --filter` on the cell's id names it "
                "from fresh processes";
  else
    f.server = std::make_unique<FreshProcesses>(std::vector<const Kernel*>{&k}, RunOptions{}.cell_timeout_s);
  return f;
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

  const FreshServer& fresh = fresh_for(*k);  // forked before the kernel's first call and any GPU context
  // The device asked for must exist even when this kernel runs on the CPU or declines the cell, as
  // `pacheck run --device` refuses an absent one: a typo or a missing GPU is an error, not a silent CPU run.
  try {
    check_device_spec(device);
    if (device != "cpu") backend_for(device);
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.rfind("--device: ", 0) == 0) why.erase(0, 10);  // the CLI's option name means nothing here
    throw std::runtime_error(fmt::format("device '{}': {}", device, why));
  }
  CellResult r;
  if (Support sup = k->supports(cell.c); !sup.ok) {
    r = unrun_result(cell, *k, sup.failed ? Verdict::error : Verdict::declined, sup.reason);
  } else {
    // The device a CPU kernel runs on is the CPU, whatever the binary was asked for (as `pacheck run`).
    const std::string dev = k->device() == PACHECK_DEVICE_CPU ? "cpu" : device;
    Backend& backend = backend_for(dev);
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
    ExecuteOptions how;
    if (fresh.server) how.fresh = fresh.server.get();
    else how.no_fresh = fresh.why_not;
    r = execute_cell(*last.data, *k, cell, backend, last.twins[kernel], opt.tolerance, how).result;
  }
  r.suite = suite_name;
  return r;
}

std::string judged_metrics_text(const CellResult& r) { return has_output(r.verdict) ? metrics_text(r) : std::string(); }

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
  out.metrics = judged_metrics_text(r);
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
