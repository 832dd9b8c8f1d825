// Bench mode: per-cell kernel timing on one device, with achieved bandwidth against a device copy measured
// in the same run, and same-binary A/B ratios between two kernels (seed 000 figure 1, seed 001, seed 003).
//
// Quick start: `pacheck bench --suite S --kernel A [--kernel B] --device cuda` times the clean cells of S,
// with each kernel's rel_linf on the cell (a fast wrong kernel is flagged, exit 1) and an A/B ratio for two
// kernels. Record results in docs/BENCHMARKS.md with machine and date: performance targets live in
// benchmarks, never in unit tests.
#pragma once

#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "exec/runner.hpp"

namespace pacheck {

struct BenchRow;

/// How `pacheck bench` times each cell.
struct BenchOptions {
  int warmup = 5;                    ///< untimed calls before sampling
  int samples = 25;                  ///< timed samples; the median is reported
  double min_sample_ms = 0.5;        ///< calls per sample are batched until a sample lasts at least this
  std::size_t rotate_bytes = 192u << 20;  ///< input copies rotate until they span this many bytes (> 3x a 60 MB L2)
  std::optional<std::regex> filter;  ///< keep cases whose id matches
  int prepare_threads = 0;           ///< cases prepared ahead on host threads (0: one per hardware thread, at most 16)
  /// Host memory the cases prepared ahead may take together (estimate_case_memory, exec/prepare.hpp); the
  /// next case is always prepared, whatever its size.
  double prepare_bytes = static_cast<double>(std::size_t{16} << 30);
  /// Called with each row as soon as it is complete (rows arrive in suite order), so a caller can print or
  /// save results of a long bench before it ends.
  std::function<void(const BenchRow&)> on_row;
  /// Called once before the first row with the device description and the copy bandwidth in GB/s.
  std::function<void(const std::string& device, double copy_gbs)> on_start;
  RunOptions run;                    ///< tolerance etc. for the correctness check of each timed cell
};

/// Timing of one kernel on one case.
struct KernelTiming {
  std::string kernel;
  bool ran = false;
  std::string note;          ///< decline reason or error
  Verdict verdict = Verdict::pass;  ///< correctness verdict of the timed case (clean cache)
  double rel_linf = 0;
  double median_us = 0;      ///< median time per call
  double p10_us = 0, p90_us = 0;
  double spread_pct = 0;     ///< (p90 - p10) / median x 100: repeat-to-repeat spread
  double gbs = 0;            ///< KV bytes read per call / median time
  double copy_fraction = 0;  ///< gbs / device copy bandwidth of the same run
};

/// One case with every kernel's timing; ratio = time(kernels[0]) / time(kernels[1]) (above 1: the second
/// kernel is faster), when both ran.
struct BenchRow {
  std::string case_id;
  std::int64_t kv_bytes = 0;  ///< K and V bytes a decode call must read: sum_s seq_len_s * num_kv_heads * head_size * 2 * elem
  std::vector<KernelTiming> timings;
  std::optional<double> ratio;
};

struct BenchResult {
  std::string device;         ///< Backend::description()
  double copy_gbs = 0;        ///< device-to-device copy bandwidth (read + write) measured in this run
  std::vector<BenchRow> rows;
};

/// Times every clean case of `suite` (faulted cells are skipped: timing does not depend on the poison)
/// for each kernel on `device_spec`. CPU kernels are timed on the CPU with steady_clock. Input copies
/// rotate so that consecutive calls do not hit a warm L2. Throws like run_suite for a bad device.
BenchResult run_bench(const Suite& suite, const std::vector<KernelPtr>& kernels, const std::string& device_spec,
                      const BenchOptions& opt);

}  // namespace pacheck
