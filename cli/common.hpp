// Shared pieces of the pacheck subcommands: exit codes, kernel selection, the --format option.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/plan.hpp"
#include "exec/runner.hpp"
#include "kernels/plugin.hpp"
#include "report/report.hpp"
#include "suites/suite.hpp"

namespace pacheck::cli {

/// Documented exit codes (docs/REFERENCE.md "Exit codes").
enum Exit : int {
  kPass = 0,        ///< every cell passed and every negative control that ran was caught (none may have run)
  kFail = 1,        ///< some cell failed, or some kernel ran no cell
  kUsage = 2,       ///< bad command line or bad input file (suite, case id, plugin)
  kBlind = 3,       ///< instrument blind: a negative control was not caught or the comparator self-test failed
};

/// A usage or input error: printed as "pacheck: error: ..." and exits with kUsage.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// State shared by subcommands: the exit code the chosen subcommand sets.
struct Context {
  int exit_code = kPass;
};

/// Adds to every option of `app` and of its subcommands that takes a value (positionals included) a check
/// that refuses an empty value: `--report-dir ''` (an unset CI variable) is exit 2 naming the option, never
/// taken as "no value" or as the default. Call once, after every subcommand is added.
void refuse_empty_values(CLI::App& app);
/// True when `arg` ("--name", "-n" or "--name=value") names an option of `app` itself (not a subcommand's).
bool is_app_option(const CLI::App& app, const std::string& arg);

/// The registered kernels' names (built-in and loaded plugins), then those of `extra` (e.g. the planted
/// kernels of the property tests), comma-separated: the "known:" list of a "no kernel named" error.
std::string known_kernels(const std::vector<KernelPtr>& extra = {});
/// The kernel named `name`: built-in or plugin (Registry::global()), else a planted kernel of the property
/// tests (planted.*, in builds with RapidCheck). Throws UsageError naming --kernel and listing the kernels.
KernelPtr find_named_kernel(const std::string& name);

/// Where the names select_kernels checks came from, so that its messages name only what the user passed.
struct KernelSource {
  bool from_plugins = false;  ///< no --kernel was given: the names are the --plugin libraries' kernels
  bool device_given = true;   ///< --device was given (else `device` is the default device)
};

/// Loads every --plugin library of `plugins` into Registry::global(), each first in a child process (so a
/// library that crashes or hangs while loading is an input error naming it, not a dead pacheck). Throws
/// UsageError naming the library and the problem (exit 2, nothing run). Returns the libraries loaded.
std::vector<PluginInfo> load_plugin_flags(const std::vector<std::string>& plugins);

/// The names of every kernel a loaded plugin registered: foreign code, which `run` and `repro` call in a
/// child process by default (a crash then costs a cell, not pacheck).
std::set<std::string> plugin_kernel_names();

/// Kernels named by `names` (all kernels of `device`'s kind when empty). Throws UsageError for an
/// unknown name (listing the known ones) or a GPU kernel asked for on the CPU device; that message names
/// --kernel or the --plugin library the kernel came from, and --device or "the default device", as `src`
/// says.
/// With no names, the default selection holds the MLA kernels (Kernel::takes_mla) only when `suite` has an MLA
/// cell, and the multi-head ones only when it has a multi-head cell (no suite: the multi-head ones).
std::vector<KernelPtr> select_kernels(const std::vector<std::string>& names, const std::string& device,
                                      KernelSource src = {}, const Suite* suite = nullptr);

/// Resolves "--device" ("" = the default device: cuda:0 when present, else cpu).
std::string resolve_device(const std::string& device);

/// The suite `--suite` names (a built-in suite's name or a path to a .toml file; suites/suite.hpp's
/// load_suite). Throws UsageError carrying the SuiteError's "FILE:LINE: FIELD: REASON" for a malformed suite,
/// and "--suite: REASON" for one that cannot be read (no such suite, not a regular file, over the cap).
Suite load_suite_flag(const std::string& name_or_path);

/// Binds `--format NAME` onto `cmd`: which report format (report/report.hpp's table) stdout carries.
void bind_format_option(CLI::App* cmd, std::string& name);
/// Binds `--color auto|always|never` onto `cmd` (another value: exit 2 naming --color).
void bind_color_option(CLI::App* cmd, std::string& mode);
/// Whether the console colours its verdicts under `--color mode`: always yes, never no; auto only when
/// stdout is a terminal, NO_COLOR is unset or empty (no-color.org) and TERM is not "dumb". An explicit
/// `always` wins over NO_COLOR and TERM.
bool resolve_color(const std::string& mode);
/// Adds `--tf32` (every kernel reads f32 dot operands as TF32; f32 outputs get tf32_limit()) to `cmd`.
void bind_tf32_flag(CLI::App* cmd, bool& tf32);
/// The flags that decide verdicts, bound alike on every command that judges cells (run, score, fuzz,
/// repro): `--tolerance` (fixed or calibrated), `--multiple` (> 0, finite), `--oracle-precision` (f32 or
/// f64) and `--tf32`. judge_flags() is the inverse of apply(): the flags a repro line carries.
struct JudgeOptions {
  std::string tolerance = "fixed";
  double multiple = Tolerance{}.multiple;
  std::string precision = "f64";
  bool tf32 = false;
  void bind(CLI::App* cmd);
  /// Sets `o`'s tolerance and oracle precision; throws UsageError naming the flag and the reason.
  void apply(RunOptions& o) const;
};
/// The format `name` writing to stdout. Throws UsageError naming --format and the known formats.
std::unique_ptr<ReportFormat> stdout_format(const std::string& name, const FormatOptions& options = {});

/// A shard of a suite's cells: those whose position p in the suite has p % count == index.
struct Shard {
  int index = 0, count = 1;
};
/// The shard to run: `flag` ("I/N", from --shard) when not empty, else GoogleTest's GTEST_SHARD_INDEX and
/// GTEST_TOTAL_SHARDS from the environment (so a ctest or CI matrix that shards GoogleTest binaries shards
/// pacheck the same way), else 0/1. Touches GTEST_SHARD_STATUS_FILE when the environment names one, as
/// GoogleTest does to tell the test runner that sharding is supported. Throws UsageError for a malformed
/// value, N < 1 or I outside [0, N).
Shard resolve_shard(const std::string& flag);

/// The value of a --seed flag: nullopt when the flag was not `given`, else the seed, with the rule a cell
/// id's "seedN" follows (decimal digits, [0, 2^64 - 1]). Throws UsageError naming --seed for anything else,
/// the empty text included (`--seed ''` was silently ignored; a negative seed too, a too-large one clamped).
std::optional<std::uint64_t> parse_seed_flag(const std::string& text, bool given);

/// `--max-memory SIZE` (bytes, or with a K, M, G, T suffix or KiB, MiB, GiB, TiB: powers of 1024; CLI11's
/// AsSizeValue). bind() adds it to a command (`help`: what the budget does there; empty: run's refusal of a
/// case that does not fit); budget() is the value given or default_memory_budget().
struct MemoryFlag {
  std::uint64_t bytes = 0;
  CLI::Option* option = nullptr;
  void bind(CLI::App* cmd, const std::string& help = "");
  MemoryBudget budget() const;
};
/// Pre-flight of a run's memory: throws UsageError (exit 2, before anything is generated) when the largest
/// case of `m` times its concurrency exceeds `budget`, naming the cell, its estimate by part, the threads,
/// the budget and how to raise it (--max-memory, or fewer --threads when one case would fit).
void check_memory(const MemoryPlan& m, const MemoryBudget& budget);

/// Options shared by run-like commands (run, fuzz, bench), bound onto `cmd`.
struct CommonOptions {
  std::string suite = "gate";
  std::vector<std::string> kernels;
  std::string device;
  std::string filter;
  std::string seed;          ///< --seed: empty = each cell's own; checked by parse_seed_flag
  int threads = 0;
  std::string shard;         ///< --shard I/N; empty: GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS, else the whole suite
  bool isolate = false;      ///< --isolate: every kernel's cells in child processes (plugin kernels always)
  bool no_isolate = false;   ///< --no-isolate: not even plugin kernels (debugging a plugin in-process)
  double cell_timeout = 60;  ///< --cell-timeout S: isolated cells, wall seconds before the child is killed
  int gpu_children = 0;      ///< --gpu-children N: isolated GPU child processes per device (0 = default)
  JudgeOptions judge;  ///< --tolerance, --multiple, --oracle-precision, --tf32
  std::vector<std::string> plugins;  ///< --plugin PATH (repeatable): kernel libraries to load
  MemoryFlag memory;  ///< --max-memory SIZE
  void bind(CLI::App* cmd);
  /// Loads every --plugin library into Registry::global(); call before select_kernels. A bad library
  /// throws UsageError naming it and the problem (exit 2, nothing run). Without --kernel the plugins'
  /// kernels become the selection, so `--plugin lib.so` alone tests the plugin, not the built-ins too.
  void load_plugins();
  /// Where `kernels` came from (--kernel, or the plugins' kernels when none was given) and whether
  /// --device was given: select_kernels' third argument.
  KernelSource kernel_source() const { return {kernels_from_plugins_, !device.empty()}; }
  /// RunOptions from the flags (shard, isolation and cell timeout included); throws UsageError for a bad
  /// regex, policy, shard, seed, thread count or timeout.
  RunOptions run_options() const;
  /// The watchdog of --no-isolate (cli/exit_guard.hpp's in_process_watchdog): the plugin kernels it keeps in
  /// this process are watched for --cell-timeout, and a call past it ends the command (exit 1). Null without
  /// --no-isolate or without plugins. Set RunOptions::watchdog to it for the run.
  std::unique_ptr<CallWatchdog> watchdog() const;
  /// Throws UsageError naming --filter (and the suite's size) when the filter leaves no cell of the whole
  /// `suite` x `kernels`: a mistake in the command line, not a run. An empty shard passes (GoogleTest's way).
  void check_selection(const Suite& suite, const std::vector<KernelPtr>& kernels, const RunOptions& o) const;

 private:
  CLI::Option* seed_option_ = nullptr;  ///< to tell `--seed ''` from no --seed
  bool kernels_from_plugins_ = false;   ///< load_plugins filled `kernels` (no --kernel was given)
};

/// Pre-flight of an output file named by `flag`, before anything is run: throws UsageError when `path` is
/// a directory, its directory does not exist or is not writable, or it cannot be opened for writing (tried:
/// an existing file is opened without truncation, and for a new one a probe file is created in its
/// directory and removed, as access() says yes to root even on /proc). Changes no file.
void check_writable_file(const std::string& flag, const std::string& path);

/// Writes an output file named by `flag` (--json): a regular file (or a new one) through a temporary file
/// renamed into place (core/files.hpp: no half file, no temporary left behind, the errno in the message), a
/// FIFO or device such as /dev/stdout in place. Throws UsageError naming the flag, the file and the reason.
void write_output_file(const std::string& flag, const std::string& path, const std::string& text);

/// Where a run or score keeps every result (RunStart::results_in): "DIR/results.jsonl and DIR/report.json"
/// for a report directory, FILE for --json, both joined by " and "; "" for neither.
std::string results_kept_in(const std::string& report_dir, const std::string& json_path);

void add_run_command(CLI::App& app, Context& ctx);
void add_list_command(CLI::App& app, Context& ctx);
void add_selftest_command(CLI::App& app, Context& ctx);
void add_repro_command(CLI::App& app, Context& ctx);
void add_fuzz_command(CLI::App& app, Context& ctx);
void add_export_command(CLI::App& app, Context& ctx);
void add_score_command(CLI::App& app, Context& ctx);
void add_bench_command(CLI::App& app, Context& ctx);
void add_report_command(CLI::App& app, Context& ctx);
void add_merge_command(CLI::App& app, Context& ctx);
/// `pacheck verify DIR`: verify/verify.hpp's verify_report_dir, its exit code (VerifyExit) and line.
void add_verify_command(CLI::App& app, Context& ctx);

}  // namespace pacheck::cli
