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

#include "exec/isolate.hpp"
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

/// Settings given through set_kernel_options, by kernel name.
std::map<std::string, KernelOptions>& options_of() {
  static std::map<std::string, KernelOptions> m;
  return m;
}

/// "4.0 GiB" and more of a sparse pool: what the decline of a kernel that does not take one says.
std::string sparse_pool_decline(const Case& c, const Kernel& k) {
  const Case::PoolPlan plan = c.pool_plan();
  const double pool = static_cast<double>(plan.num_blocks) * c.block_size * c.num_kv_heads * c.head_size *
                      static_cast<double>(dtype_size(c.kv_dtype));
  return fmt::format("high_block_ids {}: each cache is a sparse pool of {} blocks ({} if copied dense, a few MiB "
                     "resident); {} does not declare that it takes one (a kernel that reads only the blocks "
                     "block_tables names declares sparse_pools; one that copies a whole pool must not)",
                     c.high_block_ids, plan.num_blocks, format_bytes(pool), k.name());
}

}  // namespace

void set_kernel_options(const std::string& kernel, const KernelOptions& o) {
  kernel_named(kernel);
  options_of()[kernel] = o;
}

KernelOptions kernel_options(const std::string& kernel) {
  const auto it = options_of().find(kernel);
  return it == options_of().end() ? KernelOptions{} : it->second;
}

ExecuteOptions fresh_options(const Kernel& k) {
  const FreshServer& fresh = fresh_for(k);
  ExecuteOptions how;
  if (fresh.server) how.fresh = fresh.server.get();
  else how.no_fresh = fresh.why_not;
  return how;
}

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

std::vector<std::string> add_plugin(const std::string& path) {
  // The library's constructors and pacheck_register_kernels run in a child first, as `pacheck run --plugin`
  // loads it: one that crashes or hangs there is an error naming it, not the end of this process (a Python
  // interpreter, a test binary).
  if (const std::string died = plugin_dies_on_load(path); !died.empty())
    throw std::runtime_error(fmt::format("plugin {}: the library died while being loaded in a child process ({}); "
                                         "its constructors and pacheck_register_kernels must return",
                                         path, died));
  return names_of(load_plugin(path, Registry::global()));
}

std::vector<std::string> cell_ids(const std::string& suite, const std::string& kernel) {
  const Suite& s = suite_named(suite);
  const KernelPtr k = kernel_named(kernel);
  std::vector<std::string> ids;
  std::unordered_set<std::string> seen;
  const CellKinds kinds = cell_kinds(s);
  for (const SuiteCell& c : s.cells) {
    if (!pairs_with(*k, c.cell.c, kinds)) continue;
    std::string id = c.for_layouts(k->layouts()).id();
    if (seen.insert(id).second) ids.push_back(std::move(id));
  }
  return ids;
}

void keep_in_process(const std::string& kernel) {
  kernel_named(kernel);
  in_process_only().insert(kernel);
}

Cell find_cell(const std::string& suite, const Kernel& k, const std::string& cell_id, std::string* suite_name) {
  *suite_name = "";
  if (suite.empty()) {
    try {
      return parse_cell_id(cell_id);
    } catch (const std::exception& e) {
      throw std::runtime_error(e.what());
    }
  }
  const Suite& s = suite_named(suite);
  *suite_name = s.name;
  for (const SuiteCell& c : s.cells)
    if (Cell cell = c.for_layouts(k.layouts()); cell.id() == cell_id) return cell;
  throw std::runtime_error(fmt::format("suite '{}' has no cell '{}' for kernel {}", suite, cell_id, k.name()));
}

Backend& backend_for_kernel(const Kernel& k, const std::string& device) {
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
  // The device a CPU kernel runs on is the CPU, whatever the binary was asked for (as `pacheck run`).
  return backend_for(k.device() == PACHECK_DEVICE_CPU ? "cpu" : device);
}

Admission admit(const Cell& cell, const Kernel& k, const RunOptions& opt, const MemoryBudget& budget, int concurrent) {
  Admission a;
  const KernelOptions ko = kernel_options(k.name());
  if (Support sup = cell_support(k, cell.c); !sup.ok) {
    a.settled = unrun_result(cell, k, sup.failed ? Verdict::error : Verdict::declined, sup.reason);
    return a;
  }
  if (cell.c.high_block_ids > 0 && !ko.sparse_pools) {
    a.settled = unrun_result(cell, k, Verdict::declined, sparse_pool_decline(cell.c, k));
    return a;
  }
  // The kernel's allowed float32 copies of its inputs: the query, and both pools as handed (a sparse pool's
  // resident blocks), which the estimate's paged cache counts at kv_dtype's size.
  const Case& c = cell.c;
  const double query = 4.0 * c.num_query_tokens() * c.num_heads * c.head_size;
  const MemoryEstimate own = estimate_case_memory(c, opt.oracle_precision,
                                                  opt.tolerance.policy == TolerancePolicy::calibrated);
  const double copies = ko.input_copies * (query + own.paged_cache * 4.0 / static_cast<double>(dtype_size(c.kv_dtype)));
  MemoryPlan m = single_case_memory(c, cell.id(), opt, copies);
  m.concurrent = std::max(1, concurrent);
  a.refused = memory_refusal(m, budget, "max_memory", "");
  return a;
}

CellAnswer execute_prepared(const CaseData& data, const Kernel& k, const Cell& cell, Backend& backend, CleanTwin& twin,
                            const RunOptions& opt) {
  Execution e = execute_cell(data, k, cell, backend, twin, opt.tolerance, fresh_options(k));
  CellAnswer out;
  out.result = std::move(e.result);
  CellResult& r = out.result;
  if (r.verdict == Verdict::error && in_process_only().count(k.name()))
    if (const auto at = r.detail.find(kTimeoutMarker); at != std::string::npos) {
      r.verdict = Verdict::timeout;
      r.detail = r.detail.substr(at + std::string_view(kTimeoutMarker).size());
    }
  const std::int64_t i = r.metrics.worst.flat(cell.c);
  if (has_output(r.verdict) && i >= 0 && static_cast<std::size_t>(i) < e.raw.out.size() &&
      static_cast<std::size_t>(i) < data.ref.out.size()) {
    out.worst_out = e.raw.out[static_cast<std::size_t>(i)];
    out.worst_ref = data.ref.out[static_cast<std::size_t>(i)];
  }
  return out;
}

CellAnswer run_cell_answer(const std::string& suite, const std::string& kernel, const std::string& cell_id,
                           const std::string& device, double max_memory) {
  const KernelPtr k = kernel_named(kernel);
  std::string suite_name;
  const Cell cell = find_cell(suite, *k, cell_id, &suite_name);
  fresh_for(*k);  // forked before the kernel's first call and any GPU context
  Backend& backend = backend_for_kernel(*k, device);
  const RunOptions opt;
  const MemoryBudget budget = max_memory > 0 ? MemoryBudget{max_memory, "given"} : default_memory_budget();
  Admission adm = admit(cell, *k, opt, budget);
  if (!adm.refused.empty()) throw std::runtime_error(adm.refused);
  CellAnswer out;
  if (adm.settled) {
    out.result = std::move(*adm.settled);
  } else {
    // The case is prepared once for all its cells and the clean twin run once per (case, kernel), as in
    // `pacheck run` (a suite's cells of one case are neighbours, so only the last case is kept).
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
    out = execute_prepared(*last.data, *k, cell, backend, last.twins[kernel], opt);
  }
  out.result.suite = suite_name;
  return out;
}

std::string judged_metrics_text(const CellResult& r) { return has_output(r.verdict) ? metrics_text(r) : std::string(); }

CellRun run_cell(const std::string& suite, const std::string& kernel, const std::string& cell_id,
                 const std::string& device) {
  const CellResult r = run_cell_answer(suite, kernel, cell_id, device).result;
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

InstrumentCheck check_instrument(const std::string& suite, bool recheck) {
  return check_instrument_on(suite, "cpu", recheck);
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
