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
#include "judge/comparator.hpp"
#include "judge/judge.hpp"
#include "judge/summary.hpp"
#include "oracle/oracle.hpp"
#include "suites/suite.hpp"

namespace pacheck {

struct RunOptions {
  int threads = 0;                         ///< CPU worker threads; 0 = hardware concurrency
  Tolerance tolerance;
  Precision oracle_precision = Precision::f32;
  std::optional<std::regex> filter;        ///< keep cells whose id matches (std::regex_search)
  std::optional<std::uint64_t> seed;       ///< overrides every cell's seed
  int shard_index = 0, shard_count = 1;    ///< take cells with index % shard_count == shard_index
  std::function<void(const CellResult&)> on_result;  ///< called as each cell finishes (in any order)
  std::function<void(int done, int total)> on_progress;
  /// Kernels whose cells run in child processes (exec/isolate.hpp); empty = none. A crash or hang then
  /// becomes the cell's verdict (crash, timeout) instead of ending the run.
  std::function<bool(const Kernel&)> isolate;
  double cell_timeout_s = 60;              ///< isolated cells: wall seconds before the child is killed
  int isolate_lanes = 0;                   ///< isolated CPU kernels: child processes at once; 0 = `threads`
  /// Results already measured (--resume), keyed by result_key(kernel, cell id): those cells are not run
  /// again and their results are neither re-emitted through on_result nor recomputed.
  std::unordered_map<std::string, CellResult> previous;
};


/// Everything the runner computes for one case, shared by all cells and kernels of that case.
struct CaseData {
  Case c;
  PrePaging pre;
  OracleResult ref;
  std::optional<double> emulation_rel_linf;  ///< filled for the calibrated policy
  PagedCache cache;                          ///< clean paged cache
};
CaseData prepare_case(const Case& c, const RunOptions& opt);


/// Runs `k` once on `backend` over `cache` (already faulted): uploads inputs, fills the output with the
/// NaN fill pattern between guard regions, runs, downloads, and checks guards and input checksums.
/// Throws KernelError from the kernel or backend.
RawRun run_kernel_once(const Kernel& k, Backend& backend, const CaseData& data, const PagedCache& cache);

/// judge() with the oracle and emulation error of `data` and the tolerance of `opt`.
CellResult judge(const Cell& cell, const Kernel& k, const CaseData& data, const RawRun& run,
                 const std::vector<std::uint32_t>* clean_bits, const RunOptions& opt);


/// Runs every selected cell of `suite` on every kernel in `kernels` on the device `device_spec`
/// ("cpu", "cuda:0", "cuda:all"). CPU kernels use `opt.threads` workers; GPU kernels run one call at a time
/// per device on that device's stream. "cuda:all" / "hip:all" opens every local device of the kind (one
/// backend and stream each; isolated kernels get one child process per device) and spreads the GPU cases
/// over them (gpu_device_for); each result's CellResult::device names the device that ran it, and the
/// results are otherwise those of a single-device run. With no device present "cuda:all" fails as "cuda".
/// Kernels selected by `opt.isolate` run afterwards in child processes (exec/isolate.hpp), one kernel
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
