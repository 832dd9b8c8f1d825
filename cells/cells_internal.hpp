// What the files of the cells library share (cells.cpp, batch.cpp, instrument_cache.cpp, fuzz.cpp and the C
// API, cells_c.cpp): the pipeline types behind pacheck/cells.hpp's standard-C++ interface. Not installed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "exec/execute.hpp"
#include "exec/plan.hpp"
#include "judge/result.hpp"
#include "judge/summary.hpp"
#include "kernels/kernel.hpp"
#include "pacheck/cells.hpp"
#include "suites/suite.hpp"

namespace pacheck::cells {

/// The suite `name` (a name or a .toml path), loaded once per process and kept. Throws SuiteError.
const Suite& suite_named(const std::string& name);

/// The registered kernel `name`; throws std::runtime_error naming it when there is none.
KernelPtr kernel_named(const std::string& name);

/// The prefix of the message a Python kernel's run() returns when pacheck.Kernel's per-cell timeout stopped it
/// (python/pacheck's trampoline writes it; the C API's info answer gives it as "timeout_marker"): such a
/// cell's verdict is `timeout`, not `error`.
inline constexpr const char* kTimeoutMarker = "pacheck-timeout: ";

/// How this library treats a registered kernel beyond its descriptor (the C API's kernel_options call).
struct KernelOptions {
  /// The kernel is handed sparse pools (Case::high_block_ids: a pool of 2^31 or more elements whose untouched
  /// blocks take no memory). A kernel that may copy a whole pool must leave this false: such cells are
  /// declined for it, naming the pool's size.
  bool sparse_pools = true;
  /// Float32 copies of its inputs (the query and both pools as handed) the kernel may make, counted in the
  /// memory budget on top of pacheck's own: 0 for compiled kernels, 1 for Python ones (to_float32 of each).
  double input_copies = 0;
};
void set_kernel_options(const std::string& kernel, const KernelOptions& o);
KernelOptions kernel_options(const std::string& kernel);

/// The cell `cell_id` of `suite` as kernel `k` runs it (its layout resolved); an empty `suite` parses the id
/// (as `pacheck repro`). Sets *suite_name to the suite's name ("" for none). Throws std::runtime_error for an
/// id not in the suite or not a cell id.
Cell find_cell(const std::string& suite, const Kernel& k, const std::string& cell_id, std::string* suite_name);

/// The backend `k` runs on when `device` is asked for (a CPU kernel: the CPU, but the device asked for must
/// exist, as `pacheck run --device` checks). Throws std::runtime_error "device 'D': why" for an unknown or
/// absent device. Backends stay open for the life of the process.
Backend& backend_for_kernel(const Kernel& k, const std::string& device);

/// Whether `cell` may run on `k` at all, decided before anything is generated: `settled` (a result with no
/// call: declined by the descriptor, supports(), or a sparse pool the kernel did not take; or supports()'s
/// error) or `refused`, why its memory does not fit `budget` (exec/plan.hpp's memory_refusal with `concurrent`
/// cases at once and the kernel's input_copies), else neither.
struct Admission {
  std::optional<CellResult> settled;
  std::string refused;
};
Admission admit(const Cell& cell, const Kernel& k, const RunOptions& opt, const MemoryBudget& budget,
                int concurrent = 1);

/// One cell's result and the values at its worst element (the output and the oracle there), when an output
/// was judged.
struct CellAnswer {
  CellResult result;
  std::optional<double> worst_out, worst_ref;
};

/// The fresh-process server of `k` (forked on its first cell in this process, before any call to it), or why
/// there is none (a Python kernel, a GPU kernel, a process that opened a GPU). How execute_cell is told.
ExecuteOptions fresh_options(const Kernel& k);

/// execute_cell of `cell` on its prepared case, on `backend`, with `twin`: the verdict of a Python kernel
/// its timeout stopped is `timeout`; the values at the worst element are read from the call's output.
CellAnswer execute_prepared(const CaseData& data, const Kernel& k, const Cell& cell, Backend& backend, CleanTwin& twin,
                            const RunOptions& opt);

/// run_cell's whole answer. Same arguments and errors as run_cell, and a cell whose memory does not fit the
/// budget (`max_memory` bytes; 0: default_memory_budget()) throws std::runtime_error with the refusal.
CellAnswer run_cell_answer(const std::string& suite, const std::string& kernel, const std::string& cell_id,
                           const std::string& device, double max_memory = 0);

/// metrics_text(r) when the kernel's output was judged, else "" (declined, error, crash, timeout: no output,
/// so no metric or worst element means anything). The metrics of CellRun and of the C API's run_cell answer.
std::string judged_metrics_text(const CellResult& r);

/// What a batch runs (the C API's batch_open): the cells of `suite` on `kernel` on `device`, every cell or
/// those of `ids` (in that order), `filter` (a regular expression, std::regex_search) applied to them.
struct BatchRequest {
  std::string suite, kernel, device = "cpu";
  std::vector<std::string> ids;  ///< empty: every cell of the suite, in suite order
  std::string filter;
  int threads = 0;        ///< threads preparing cases; 0 = the hardware's
  int ahead = -1;         ///< cases prepared past the current one; -1 = threads (cut to fit the memory budget)
  std::string report_dir; ///< "" = no report directory
  double max_memory = 0;  ///< bytes; 0 = default_memory_budget()
};
/// What batch_open planned.
struct BatchInfo {
  int handle = 0;
  std::size_t cells = 0, cases = 0;  ///< cells of the batch, distinct cases among those that run
  int threads = 0, ahead = 0;
  MemoryBudget budget;
};
/// Plans the batch (asks supports() and the memory budget of every cell, on this thread), starts preparing
/// its first cases on a pool of threads, and starts its report directory (results.jsonl, run.json). Throws
/// std::runtime_error for an unknown suite, kernel or device, an id not in the suite, a filter that is not
/// a regular expression or selects nothing, or a report directory that cannot be written.
BatchInfo open_batch(const BatchRequest& req);
/// The next cell of the batch, run on this thread in batch order (its case prepared ahead), or nothing when
/// every cell has run. Throws std::runtime_error for a handle not open.
std::optional<CellAnswer> batch_next(int handle);
/// Ends the batch: the summary of its results (judge/summary.hpp's counts and exit code), and the report
/// directory's files written. `reports`: the closing line ("reports in DIR: ..."), "" without a directory.
struct BatchEnd {
  RunSummary summary;
  std::string reports;
};
BatchEnd close_batch(int handle);

/// check_instrument with its on-disk cache (instrument_cache.cpp): `device` is part of the key with the
/// library file, the suite's cells, the oracle's instruction set and the CPU controls.
InstrumentCheck check_instrument_on(const std::string& suite, const std::string& device, bool recheck);

/// What pacheck.fuzz asks (fuzz.cpp): `pacheck fuzz`'s options.
struct FuzzRequest {
  std::string kernel, device;
  std::vector<std::string> properties;  ///< empty: the default properties
  std::optional<std::uint64_t> seed;
  int cases = 0;           ///< per property; 0 = 100 unless budget_s
  double budget_s = 0;     ///< wall seconds in all, shared by the properties
  int max_size = 100;
  bool shrink = true;
  std::string reproduce;
  double max_memory = 0;   ///< bytes per generated case; 0 = default_memory_budget()
};
/// One property's run, as `pacheck fuzz` prints it.
struct FuzzProperty {
  std::string name;
  bool passed = false;
  int cases = 0, shrinks = 0, over_memory = 0;
  int device_out_of_memory = 0;  ///< cases discarded: the device ran out of memory (prop::PropertyRun)
  int exercised = 0;  ///< of `cases`, those that checked something (prop::PropertyRun::exercised)
  double seconds = 0;
  std::string coverage, message, counterexample, cell_id, reproduce;
};
struct FuzzAnswer {
  std::string kernel, device;
  std::uint64_t seed = 0;
  MemoryBudget budget;
  bool negative_control = false;
  std::vector<FuzzProperty> properties;
};
/// The properties' names, property_table()'s order, each with whether it is opt-in (run only when named).
/// Throws as fuzz() does in a library built without RapidCheck.
std::vector<std::pair<std::string, bool>> property_names();
/// Runs the properties against `req.kernel` on this thread (a Python kernel's calls come back to it).
/// Throws std::runtime_error for an unknown kernel or property, a device it cannot use, or a library built
/// without RapidCheck.
FuzzAnswer fuzz(const FuzzRequest& req);

}  // namespace pacheck::cells
