// pacheck bench: per-cell timing of one or two kernels on one device (same-binary A/B).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "cli/common.hpp"
#include "bench/bench.hpp"
#include "report/report.hpp"
#include "report/text.hpp"

namespace pacheck::cli {

namespace {

/// Prints one bench row (case, KV bytes, each kernel's timing or why it did not run, the A/B ratio) and
/// flushes stdout; returns the row as the --json file holds it. Sets `any_wrong` when a timed kernel failed
/// its correctness check.
nlohmann::json print_bench_row(const BenchRow& row, bool& any_wrong) {
  fmt::print("{:<48} {:>9.1f}", row.case_id, static_cast<double>(row.kv_bytes) / 1e6);
  nlohmann::json jr = {{"case", row.case_id}, {"kv_bytes", row.kv_bytes}};
  for (const auto& t : row.timings) {
    if (!t.ran) fmt::print(" | {:>57}", t.note.substr(0, 57));
    else
      fmt::print(" | {:>22.2f} {:>9.1f} {:>7.1f} {:>5.0f}% {:>9.2e}", t.median_us, t.spread_pct, t.gbs, 100 * t.copy_fraction,
                 t.rel_linf);
    if (is_failure(t.verdict)) any_wrong = true;
    jr["kernels"].push_back({{"kernel", t.kernel}, {"ran", t.ran}, {"note", t.note}, {"verdict", std::string(verdict_name(t.verdict))},
                             {"median_us", t.median_us}, {"p10_us", t.p10_us}, {"p90_us", t.p90_us},
                             {"spread_pct", t.spread_pct}, {"gbs", t.gbs}, {"copy_fraction", t.copy_fraction},
                             {"rel_linf", t.rel_linf}});
  }
  if (row.ratio) {
    fmt::print(" | {:>7.3f}", *row.ratio);
    jr["ratio"] = *row.ratio;
  }
  fmt::print("\n");
  std::fflush(stdout);
  return jr;
}

/// Refuses, with UsageError naming the option, what bench cannot take: no --kernel, --samples outside 3 to
/// 100000, a run option bench does not use (--seed, --shard, the isolation options), a negative --warmup, a
/// --min-sample-ms that is not in (0, 10000], an all-devices --device.
void check_bench_flags(const CLI::App& cmd, const CommonOptions& opts, const BenchOptions& bo) {
  if (opts.kernels.empty()) throw UsageError("bench: give at least one --kernel (two for an A/B table)");
  if (bo.samples < 3 || bo.samples > 100000)
    throw UsageError(fmt::format("--samples: {} (must be 3 to 100000)", bo.samples));
  // Options bench shares with run but does not use: refused rather than silently ignored.
  for (const char* unused : {"--seed", "--shard", "--isolate", "--no-isolate", "--cell-timeout", "--gpu-children"})
    if (cmd.count(unused) > 0)
      throw UsageError(fmt::format("{}: not used by bench (it times each clean cell of the suite as written, "
                                   "in this process)", unused));
  if (bo.warmup < 0) throw UsageError(fmt::format("--warmup: {} calls (must be >= 0)", bo.warmup));
  // Calls are doubled until a sample lasts this long: NaN or a huge value would never end.
  if (!(bo.min_sample_ms > 0 && bo.min_sample_ms <= 10000))
    throw UsageError(fmt::format("--min-sample-ms: {} (must be > 0 and at most 10000)", bo.min_sample_ms));
  if (is_all_devices_spec(opts.device))
    throw UsageError(fmt::format("--device {}: bench times on one device (give {}:N)", opts.device,
                                 opts.device.substr(0, opts.device.size() - 4)));
}

/// The device the kernels are timed on: "cpu" when every kernel is a CPU kernel (even when a GPU is the
/// default device), else `device`. A --device other than cpu given for CPU kernels only is a UsageError.
std::string bench_device(const std::vector<KernelPtr>& kernels, const std::string& flag, const std::string& device) {
  const bool all_cpu = std::all_of(kernels.begin(), kernels.end(), [](const KernelPtr& k) { return k->device() == PACHECK_DEVICE_CPU; });
  if (all_cpu && !flag.empty() && flag != "cpu")
    throw UsageError(fmt::format("--device {}: every --kernel given is a CPU kernel, timed on the CPU (omit --device "
                                 "or give cpu)", flag));
  return all_cpu ? "cpu" : device;
}

/// The table's title and column header: the suite, the device, the device copy's bandwidth, then per kernel
/// its time, spread, GB/s, fraction of the copy and rel_linf, and the A/B column for two kernels.
void print_bench_header(const std::string& suite, const std::vector<KernelPtr>& kernels, const std::string& device_desc,
                        double copy_gbs) {
  fmt::print("pacheck bench | suite {} | {} | device copy {:.0f} GB/s (read + write)\n\n", suite, device_desc, copy_gbs);
  fmt::print("{:<48} {:>9}", "case", "KV MB");
  for (const auto& k : kernels) fmt::print(" | {:>22} {:>9} {:>7} {:>6} {:>9}", k->name() + " us", "spread%", "GB/s", "%copy", "rel_linf");
  if (kernels.size() == 2) fmt::print(" | {:>7}", "A/B");
  fmt::print("\n");
}

/// The rows a bench has printed, kept for its --json file.
struct BenchLog {
  nlohmann::json rows = nlohmann::json::array();
  bool any_wrong = false;   ///< a timed kernel failed its correctness check, or a case could not be prepared
  std::string device_desc;  ///< the device's description, once the bench started
  double copy_gbs = 0;      ///< the device copy's bandwidth, once the bench started

  /// Writes the --json file at `path` ("" = none; nothing either before the first row), through a temporary
  /// file and a rename: rewritten after every row, so a bench cut short keeps every row it printed, and an
  /// earlier file is replaced only once a row exists.
  void write(const std::string& path, const std::string& suite, bool complete) const {
    if (path.empty() || rows.empty()) return;
    write_output_file("--json", path,
                      nlohmann::json{{"pacheck", pacheck_version()}, {"suite", suite}, {"device", device_desc},
                                     {"copy_gbs", copy_gbs}, {"complete", complete}, {"rows", rows}}
                              .dump(1) +
                          "\n");
  }
};

/// Times the suite's clean cells on the kernels `opts` selects and prints the table as rows finish, with
/// the --json file `json_path` rewritten after each. Returns kPass, or kFail when no cell was timed or a timed
/// kernel failed its correctness check. Throws UsageError for a bad option, before anything is timed.
int bench_command(const CLI::App& cmd, CommonOptions& opts, BenchOptions& bo, const std::string& json_path) {
  opts.load_plugins();
  check_bench_flags(cmd, opts, bo);
  const std::string device = resolve_device(opts.device);
  const Suite suite = load_suite_flag(opts.suite);
  auto kernels = select_kernels(opts.kernels, device, opts.kernel_source());
  bo.run = opts.run_options();
  opts.check_selection(suite, kernels, bo.run);
  // Cases are prepared ahead only while their estimates fit the budget together (bench/bench.hpp), so
  // only a case that alone exceeds it is refused.
  const MemoryBudget budget = opts.memory.budget();
  MemoryPlan mem = plan_memory(suite, kernels, bo.run);
  mem.concurrent = std::min(mem.concurrent, 1);
  check_memory(mem, budget);
  bo.prepare_bytes = budget.bytes;
  bo.filter = bo.run.filter;
  bo.prepare_threads = opts.threads;
  const std::string dev = bench_device(kernels, opts.device, device);
  // Rows are printed as they finish, so a bench cut short by a time limit keeps what it measured.
  BenchLog log;
  bo.on_start = [&](const std::string& device_desc, double copy_gbs) {
    log.device_desc = device_desc;
    log.copy_gbs = copy_gbs;
    print_bench_header(suite.name, kernels, device_desc, copy_gbs);
    std::fflush(stdout);
  };
  bo.on_row = [&](const BenchRow& row) {
    log.rows.push_back(print_bench_row(row, log.any_wrong));
    log.write(json_path, suite.name, false);
  };
  // Checked before the bench runs, so an unwritable path fails at once instead of after the timing; an
  // existing file is left as it is until the first row replaces it.
  if (!json_path.empty()) check_writable_file("--json", json_path);
  BenchResult res = run_bench(suite, kernels, dev, bo);
  if (res.rows.empty()) {
    fmt::print(stderr, "NO CELL TIMED: no clean cell of suite {} matched{}\n", suite.name,
               bo.filter ? " --filter" : " (bench times clean cells only)");
    return kFail;
  }
  if (kernels.size() == 2) fmt::print("\nA/B = time({}) / time({}): above 1 means {} is faster.\n", kernels[0]->name(), kernels[1]->name(), kernels[1]->name());
  if (log.any_wrong)
    fmt::print("WARNING: some timed kernel failed its correctness check on a bench cell, or a case could not be "
               "prepared ({})\n",
               json_path.empty() ? command_name() + " repro CELL --kernel K shows why" : "verdicts in " + json_path);
  log.write(json_path, suite.name, true);
  return log.any_wrong ? kFail : kPass;
}

}  // namespace

void add_bench_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("bench", "time kernels per cell (median of repeats, GB/s vs a device copy, A/B ratio)");
  auto opts = std::make_shared<CommonOptions>();
  auto bo = std::make_shared<BenchOptions>();
  auto json_path = std::make_shared<std::string>();
  opts->suite = "sweep";
  opts->bind(cmd);
  // bench times clean cases, so its filter sees case ids (a cell id without the fault part).
  cmd->get_option("--filter")->description("only cases whose id (a cell id without its fault) matches this regular expression");
  cmd->get_option("--kernel")->description("kernel(s) to time (required): one, or two for an A/B ratio column");
  cmd->add_option("--samples", bo->samples, "timed samples per cell (median reported)")->capture_default_str();
  cmd->add_option("--warmup", bo->warmup, "untimed calls before sampling")->capture_default_str();
  cmd->add_option("--min-sample-ms", bo->min_sample_ms, "batch calls until one sample lasts this long")->capture_default_str();
  cmd->add_option("--json", *json_path,
                  "write the bench table to this JSON file (rewritten after every row; \"complete\": false until the end)");
  cmd->callback([&ctx, cmd, opts, bo, json_path] { ctx.exit_code = bench_command(*cmd, *opts, *bo, *json_path); });
}

}  // namespace pacheck::cli
