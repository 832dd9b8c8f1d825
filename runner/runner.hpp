// The runner: for each cell and kernel, generate -> page -> inject -> run on a backend with guard regions
// -> compare with the oracle -> verdict.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"
#include "oracle/comparator.hpp"
#include "oracle/oracle.hpp"
#include "runner/suite.hpp"

namespace pacheck {

/// Outcome of one cell on one kernel, in order of precedence when several apply.
enum class Verdict {
  pass,           ///< within tolerance, finite, bitwise invariant under the fault
  fail,           ///< beyond tolerance
  poisoned,       ///< NaN/Inf where the oracle is finite
  variant,        ///< output changed under a change that must not change it (e.g. the poison value)
  unwritten,      ///< output elements left untouched (still the NaN fill pattern)
  oob_write,      ///< a guard region around the output changed
  input_mutated,  ///< query, caches, block_tables or seq_lens changed
  declined,       ///< the kernel does not support the cell
  error,          ///< the kernel or device reported an error
  crash,          ///< the kernel's process died (isolated runs)
  timeout,        ///< the kernel's process hung past the cell timeout (isolated runs)
};
std::string_view verdict_name(Verdict v);
Verdict parse_verdict(std::string_view s);
/// True for every verdict but pass and declined.
bool is_failure(Verdict v);

/// Result of one cell on one kernel.
struct CellResult {
  std::string suite;
  std::string kernel;
  std::string cell_id;     ///< Cell::id() with the layout the kernel ran
  std::string case_id;
  std::string fault;       ///< FaultSpec::id()
  bool straddle = false;   ///< some seq_len % block_size != 0
  Verdict verdict = Verdict::pass;
  std::string detail;      ///< why (decline reason, error message, first differing element, ...)
  Metrics metrics;         ///< vs the oracle
  double limit = 0;        ///< allowed rel_linf
  double margin = 0;       ///< rel_linf / limit
  std::int64_t variant_elements = 0;  ///< elements whose bits differ from the clean run
  bool expected_fail = false;  ///< negative control: the kernel's planted fault must show here
  double seconds = 0;      ///< wall time of the cell (generation excluded)
  int index = -1;          ///< position of the cell in Suite::cells; orders merged and resumed reports
  /// Backend that ran the kernel ("cpu", "cuda:1", ...); empty when no kernel ran (declined, lost before
  /// its device was opened) and in reports written before this field existed. With --device cuda:all
  /// it is the only field that differs from a single-device run of the same cells.
  std::string device;
};

/// The key that identifies a cell's result within one run: kernel and cell id (resume, merge).
std::string result_key(const std::string& kernel, const std::string& cell_id);

/// How a negative control fared in a run.
enum class ControlOutcome { not_control, caught, blind, not_exercised };
std::string_view control_outcome_name(ControlOutcome o);

struct KernelSummary {
  std::string kernel;
  int passed = 0, failed = 0, declined = 0, caught = 0, missed = 0;
  ControlOutcome control = ControlOutcome::not_control;
  bool vacuous = false;  ///< no cell of this kernel ran (all declined or none selected)
};

struct RunOptions {
  int threads = 0;                         ///< CPU worker threads; 0 = hardware concurrency
  Tolerance tolerance;
  Precision oracle_precision = Precision::f32;
  std::optional<std::regex> filter;        ///< keep cells whose id matches (std::regex_search)
  std::optional<std::uint64_t> seed;       ///< overrides every cell's seed
  int shard_index = 0, shard_count = 1;    ///< take cells with index % shard_count == shard_index
  std::function<void(const CellResult&)> on_result;  ///< called as each cell finishes (in any order)
  std::function<void(int done, int total)> on_progress;
  /// Kernels whose cells run in child processes (runner/isolate.hpp); empty = none. A crash or hang then
  /// becomes the cell's verdict (crash, timeout) instead of ending the run.
  std::function<bool(const Kernel&)> isolate;
  double cell_timeout_s = 60;              ///< isolated cells: wall seconds before the child is killed
  int isolate_lanes = 0;                   ///< isolated CPU kernels: child processes at once; 0 = `threads`
  /// Results already measured (--resume), keyed by result_key(kernel, cell id): those cells are not run
  /// again and their results are neither re-emitted through on_result nor recomputed.
  std::unordered_map<std::string, CellResult> previous;
};

struct RunSummary {
  std::vector<CellResult> results;   ///< in suite order, kernel-major
  std::vector<KernelSummary> kernels;
  SelfTestResult selftest;
  int passed = 0, failed = 0, declined = 0, caught = 0;
  bool blind = false;                ///< a negative control was not caught or the self-test failed
  bool vacuous = false;              ///< some kernel ran no cell (not counted for one shard of a run)
  /// One shard of a sharded run (--shard I/N, N > 1): a kernel without a cell in it is reported but not
  /// vacuous here, as a GoogleTest shard without tests passes; `pacheck merge` judges the whole run.
  bool shard = false;
  /// 0 all pass (controls caught), 1 some cell failed or a kernel ran nothing, 3 instrument blind.
  int exit_code() const;
};

/// A kernel as the per-kernel summary needs it: its name and whether it is a negative control.
struct KernelRole {
  std::string name;
  bool negative_control = false;
};

/// Recomputes `s.kernels` and the run totals (passed, failed, declined, caught, blind, vacuous) from
/// `s.results`, one KernelSummary per entry of `kernels` in that order. run_suite and merge share it, so a
/// merged report is judged exactly as a single run would be.
void summarize(RunSummary& s, const std::vector<KernelRole>& kernels);

/// Everything the runner computes for one case, shared by all cells and kernels of that case.
struct CaseData {
  Case c;
  PrePaging pre;
  OracleResult ref;
  std::optional<double> emulation_rel_linf;  ///< filled for the calibrated policy
  PagedCache cache;                          ///< clean paged cache
};
CaseData prepare_case(const Case& c, const RunOptions& opt);

/// Output of one kernel call plus the integrity checks around it.
struct RawRun {
  std::vector<double> out;            ///< decoded output [num_seqs, num_heads, head_size]
  std::vector<std::uint32_t> bits;    ///< raw output bits
  bool guard_ok = true;
  std::string guard_detail;
  bool inputs_ok = true;
  std::string inputs_detail;
  std::int64_t unwritten = 0;         ///< elements still holding the fill pattern
  std::int64_t first_unwritten = -1;
  double ms = 0;
};

/// Runs `k` once on `backend` over `cache` (already faulted): uploads inputs, fills the output with the
/// NaN fill pattern between guard regions, runs, downloads, and checks guards and input checksums.
/// Throws KernelError from the kernel or backend.
RawRun run_kernel_once(const Kernel& k, Backend& backend, const CaseData& data, const PagedCache& cache);

/// Judges one cell from a raw run: unwritten, guards, inputs, non-finite, invariance vs `clean_bits`
/// (nullptr for a clean cell), tolerance.
CellResult judge(const Cell& cell, const Kernel& k, const CaseData& data, const RawRun& run,
                 const std::vector<std::uint32_t>* clean_bits, const RunOptions& opt);

/// Runs every selected cell of `suite` on every kernel in `kernels` on the device `device_spec`
/// ("cpu", "cuda:0", "cuda:all"). CPU kernels use `opt.threads` workers; GPU kernels run one call at a time
/// per device on that device's stream. "cuda:all" / "hip:all" opens every local device of the kind (one
/// backend and stream each; isolated kernels get one child process per device) and spreads the GPU cases
/// over them (gpu_device_for); each result's CellResult::device names the device that ran it, and the
/// results are otherwise those of a single-device run. With no device present "cuda:all" fails as "cuda".
/// Kernels selected by `opt.isolate` run afterwards in child processes (runner/isolate.hpp), one kernel
/// per child, with a watchdog of `opt.cell_timeout_s` per cell. Cells found in `opt.previous` are not run.
/// Results sit at fixed positions (kernel-major, suite order), whatever the thread count or isolation.
/// Also runs the comparator self-test. Throws std::runtime_error / std::invalid_argument for an unusable
/// device or options.
RunSummary run_suite(const Suite& suite, const std::vector<KernelPtr>& kernels, const std::string& device_spec,
                     const RunOptions& opt);

/// The device (0..devices-1) that runs in-process GPU case number `position` (0-based, in suite order of
/// the run's GPU cases) when a run spreads its GPU cases over `devices` devices: position % devices, so
/// the assignment depends only on the suite, filter and shard, never on timing. Throws
/// std::invalid_argument when `devices` is 0.
std::size_t gpu_device_for(std::size_t position, std::size_t devices);

/// Runs a single cell on one kernel (for `pacheck repro`), returning the result and the raw run.
std::pair<CellResult, RawRun> run_cell(const Cell& cell, const Kernel& k, Backend& backend, const RunOptions& opt,
                                       CaseData* data_out = nullptr);

}  // namespace pacheck
