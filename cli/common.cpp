#include "cli/common.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <string_view>

#include "cli/exit_guard.hpp"
#include "core/files.hpp"
#include "kernels/backend.hpp"
#include "kernels/plugin.hpp"
#include "exec/isolate.hpp"
#include "exec/plan.hpp"
#ifdef PACHECK_HAVE_FUZZ
#include "properties/planted_kernels.hpp"
#endif

namespace pacheck::cli {

void refuse_empty_values(CLI::App& app) {
  const CLI::Validator non_empty(
      [](std::string& value) -> std::string {
        if (!value.empty()) return {};
        return "the value is empty (an unset variable?): give a value, or leave the option out for its default";
      },
      "");  // no description: --help shows the option as before
  auto guard = [&](CLI::App& a) {
    for (CLI::Option* opt : a.get_options())
      if (opt->get_type_size_max() > 0) opt->check(non_empty);
  };
  guard(app);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) guard(*sub);
}

bool is_app_option(const CLI::App& app, const std::string& arg) {
  const std::string name = arg.substr(0, arg.find('='));
  for (const CLI::Option* opt : app.get_options())
    if (opt->check_name(name)) return true;
  return false;
}

std::string resolve_device(const std::string& device) {
  if (!device.empty()) return device;
  // Probed in a child process: finding the default device initialises CUDA, and isolated GPU kernels
  // (--isolate, plugins) run in children forked later, which cannot use a context initialised before fork.
  if (auto probed = run_in_child_process([] { return default_device(); }, 120)) return *probed;
  return default_device();
}

Suite load_suite_flag(const std::string& name_or_path) {
  try {
    return load_suite(name_or_path);
  } catch (const SuiteError& e) {
    // The named file itself cannot be used (missing, not a regular file, over the cap): name the flag.
    if (e.line == 0 && e.field == "suite") throw UsageError(fmt::format("--suite: {}", e.reason));
    throw UsageError(e.what());
  }
}

std::string known_kernels(const std::vector<KernelPtr>& extra) {
  std::string known;
  for (const auto& k : Registry::global().all()) known += (known.empty() ? "" : ", ") + k->name();
  for (const auto& k : extra) known += (known.empty() ? "" : ", ") + k->name();
  return known;
}

KernelPtr find_named_kernel(const std::string& name) {
  if (KernelPtr k = Registry::global().find(name)) return k;
  std::vector<KernelPtr> planted;
#ifdef PACHECK_HAVE_FUZZ
  if (KernelPtr k = prop::find_planted_kernel(name)) return k;
  planted = prop::planted_kernels();
#endif
  throw UsageError(fmt::format("--kernel: no kernel named '{}' (known: {})", name, known_kernels(planted)));
}

std::vector<KernelPtr> select_kernels(const std::vector<std::string>& names, const std::string& device,
                                      KernelSource src, const Suite* suite) {
  const Registry& reg = Registry::global();
  const bool cpu = device == "cpu";
  std::vector<KernelPtr> out;
  if (names.empty()) {
    // Of the MLA kernels and the multi-head ones, only a kind some cell of the suite has (each declines
    // the other kind's cells, and a kernel that runs no cell is a vacuous pass); no suite: multi-head only.
    bool mla = false, mha = suite == nullptr;
    if (suite)
      for (const SuiteCell& c : suite->cells) (c.cell.c.is_mla() ? mla : mha) = true;
    for (const auto& k : reg.all())
      if ((k->device() == PACHECK_DEVICE_CPU) == cpu && (k->takes_mla() ? mla : mha)) out.push_back(k);
    if (out.empty()) throw UsageError(fmt::format("no built-in kernel runs on device '{}'", device));
    return out;
  }
  for (const auto& n : names) {
    KernelPtr k = find_named_kernel(n);
    if (k->device() != PACHECK_DEVICE_CPU && cpu) {
      const std::string gpu = device_kind_spec(k->device());
      const std::string origin = src.from_plugins ? fmt::format("--plugin {}: its kernel {}", plugin_path_of(n), n)
                                                  : fmt::format("--kernel: {}", n);
      const std::string where = src.device_given ? "--device is cpu"
                                                 : "the default device is cpu (no GPU was found: `pacheck list devices` says why)";
      throw UsageError(fmt::format("{} is a GPU kernel but {}; it runs with --device {}", origin, where, gpu));
    }
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  return out;
}

void CommonOptions::bind(CLI::App* cmd) {
  cmd->add_option("--suite,-s", suite, "suite name (suites/NAME.toml) or path to a suite file")->capture_default_str();
  cmd->add_option("--kernel,-k", kernels, "kernel(s) to test (default: every built-in kernel of the device)");
  cmd->add_option("--device,-d", device, "cpu, cuda[:N] or hip[:N] (default: cuda:0 or hip:0 when present, else cpu); cuda:all or hip:all "
                  "spreads the GPU cells over every local device, one worker (or --isolate child) per device");
  cmd->add_option("--filter,-f", filter, "only cells whose id matches this regular expression");
  seed_option_ = cmd->add_option("--seed", seed, "override every cell's seed (0 to 2^64-1, as in a cell id)");
  cmd->add_option("--threads,-j", threads, "CPU worker threads (default: all cores)");
  cmd->add_option("--shard", shard,
                  "run shard I of N (I/N, 0-based): the cells at suite positions p with p % N == I "
                  "(default: GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS when set)");
  auto* iso = cmd->add_flag("--isolate", isolate,
                            "run every kernel's cells in child processes with a per-cell watchdog "
                            "(plugin kernels always are): a crash or hang becomes that cell's verdict");
  cmd->add_flag("--no-isolate", no_isolate, "run plugin kernels in-process too (a crash then ends the run)")->excludes(iso);
  cmd->add_option("--cell-timeout", cell_timeout,
                  "isolated cells: seconds a cell may take, case generation included, before its child is killed "
                  "(verdict timeout); plugin kernels kept in this process by --no-isolate: seconds a cell's kernel "
                  "calls may take before the run is ended (exit 1), as a call in this process cannot be stopped")
      ->capture_default_str();
  cmd->add_option("--gpu-children", gpu_children,
                  fmt::format("isolated GPU kernels: child processes per device at once, each preparing its own "
                              "cases (0 or left out: the worker threads, at most {})",
                              kIsolatedGpuLanesCap));
  judge.bind(cmd);
  cmd->add_option("--plugin", plugins, "load kernels from this shared library (repeatable; see include/pacheck/kernel_abi.h)");
  memory.bind(cmd);
}

void MemoryFlag::bind(CLI::App* cmd, const std::string& help) {
  option = cmd->add_option("--max-memory", bytes,
                           (help.empty() ? std::string("host memory the run may take, from a per-case estimate before "
                                                       "anything is generated: a case (times the cases prepared at "
                                                       "once, one per --threads) that needs more is refused, exit 2")
                                         : help) +
                               ". SIZE is bytes or with K, M, G, T (KiB ... TiB: powers of 1024) (default: 50% of "
                               "RAM, or of the cgroup memory limit when lower)")
               ->type_name("SIZE")
               // AsSizeValue reads "-1", and a number past 2^64 - 1 ("18446744073709551616"), as 2^64 - 1 (no
               // budget at all): a sign and such a number are refused first.
               ->check(CLI::Validator(
                   [](std::string& v) -> std::string {
                     if (v.find_first_of("-+") != std::string::npos)
                       return fmt::format("'{}' is not a size (bytes, or a number with K, M, G or T)", v);
                     std::uint64_t n = 0;
                     if (std::from_chars(v.data(), v.data() + v.size(), n).ec == std::errc::result_out_of_range)
                       return fmt::format("'{}' is more than 2^64 - 1 bytes", v);
                     return {};
                   },
                   "SIZE"))
               ->transform(CLI::AsSizeValue(false));
}

MemoryBudget MemoryFlag::budget() const {
  if (option && option->count() > 0) return {static_cast<double>(bytes), "given"};
  return default_memory_budget();
}

void check_memory(const MemoryPlan& m, const MemoryBudget& budget) {
  if (std::string why = memory_refusal(m, budget); !why.empty()) throw UsageError(why);
}

std::vector<PluginInfo> load_plugin_flags(const std::vector<std::string>& plugins) {
  if (plugins.empty()) return {};
  // A library's constructors and pacheck_register_kernels run in this process: load each first in a child
  // process, so one that crashes or hangs while loading is an input error naming it, not a dead pacheck.
  for (const auto& path : plugins)
    if (const std::string died = plugin_dies_on_load(path); !died.empty())
      throw UsageError(fmt::format("--plugin {}: the library died while being loaded ({}); its constructors and "
                                   "pacheck_register_kernels run inside pacheck and must return",
                                   path, died));
  std::vector<PluginInfo> loaded;
  try {
    loaded = pacheck::load_plugins(plugins);
  } catch (const PluginError& e) {
    throw UsageError(e.what());
  }
  return loaded;
}

void CommonOptions::load_plugins() {
  const std::vector<PluginInfo> loaded = load_plugin_flags(plugins);
  if (kernels.empty()) {
    for (const auto& p : loaded) kernels.insert(kernels.end(), p.kernels.begin(), p.kernels.end());
    kernels_from_plugins_ = !kernels.empty();
  }
}

namespace {
/// --threads above this is a typo, not a machine: each worker holds a prepared case.
constexpr int kMaxThreads = 1024;
}  // namespace

void JudgeOptions::bind(CLI::App* cmd) {
  cmd->add_option("--tolerance", tolerance, "tolerance policy: fixed or calibrated")->capture_default_str();
  cmd->add_option("--multiple", multiple, "calibrated policy: allowed multiple of the emulation's error")->capture_default_str();
  cmd->add_option("--oracle-precision", precision,
                  "oracle precision: f64 (its error ~1e-15, far below every limit) or f32 (faster; its own error can "
                  "reach half the f16 limit on extreme logits, docs/TOLERANCE.md)")
      ->capture_default_str();
  bind_tf32_flag(cmd, tf32);
}

void JudgeOptions::apply(RunOptions& o) const {
  if (tolerance == "fixed") o.tolerance.policy = TolerancePolicy::fixed;
  else if (tolerance == "calibrated") o.tolerance.policy = TolerancePolicy::calibrated;
  else throw UsageError(fmt::format("--tolerance: '{}' is not fixed or calibrated", tolerance));
  if (!(multiple > 0) || !std::isfinite(multiple))
    throw UsageError(fmt::format("--multiple: {} (must be > 0 and finite)", multiple));
  o.tolerance.multiple = multiple;
  o.tolerance.tf32 = tf32;
  if (precision == "f32") o.oracle_precision = Precision::f32;
  else if (precision == "f64") o.oracle_precision = Precision::f64;
  else throw UsageError(fmt::format("--oracle-precision: '{}' is not f32 or f64", precision));
  // PACHECK_ORACLE_ISA is checked here, before anything runs: a forced instruction set this CPU lacks
  // would otherwise surface as every case's preparation error.
  try {
    (void)oracle_isa();
  } catch (const OracleIsaError& e) {
    throw UsageError(e.what());
  }
}

RunOptions CommonOptions::run_options() const {
  RunOptions o;
  if (threads < 0 || threads > kMaxThreads)
    throw UsageError(fmt::format("-j/--threads: {} (must be 0 to {}; 0 = one per core)", threads, kMaxThreads));
  o.threads = threads;
  judge.apply(o);
  if (!filter.empty()) {
    try {
      o.filter = std::regex(filter);
    } catch (const std::regex_error& e) {
      // A glob (`*d128*`) is the usual slip: say what the flag takes.
      const bool glob = filter.find_first_of("*?") == 0 || filter.find("(*") != std::string::npos ||
                        filter.find("|*") != std::string::npos;
      throw UsageError(fmt::format("--filter: '{}' is not a valid regular expression: {}{}", filter, e.what(),
                                   glob ? " (--filter takes an ECMAScript regular expression, not a glob: '.*' "
                                          "matches any text, 'd128.*ctx4090' a cell id with both)"
                                        : ""));
    }
  }
  o.seed = parse_seed_flag(seed, seed_option_ && seed_option_->count() > 0);
  const Shard sh = resolve_shard(shard);
  o.shard_index = sh.index;
  o.shard_count = sh.count;
  if (!(cell_timeout > 0) || !std::isfinite(cell_timeout))
    throw UsageError(fmt::format("--cell-timeout: {} s (must be > 0 and finite: a hung kernel must end)", cell_timeout));
  o.cell_timeout_s = cell_timeout;
  if (gpu_children < 0 || gpu_children > 64)
    throw UsageError(fmt::format("--gpu-children: {} (must be 1 to 64 child processes per device; 0 means the default)", gpu_children));
  o.isolate_gpu_lanes = gpu_children;
  if (isolate) {
    o.isolate = [](const Kernel&) { return true; };
  } else if (!no_isolate) {
    // Plugin kernels are foreign code: by default a crash in one must cost a cell, not the run.
    std::set<std::string> foreign = plugin_kernel_names();
    if (!foreign.empty()) o.isolate = [foreign](const Kernel& k) { return foreign.count(k.name()) > 0; };
  }
  return o;
}

std::unique_ptr<CallWatchdog> CommonOptions::watchdog() const {
  std::set<std::string> foreign = plugin_kernel_names();
  if (!no_isolate || foreign.empty()) return nullptr;
  return in_process_watchdog(cell_timeout, [foreign](const Kernel& k) { return foreign.count(k.name()) > 0; });
}

void CommonOptions::check_selection(const Suite& suite, const std::vector<KernelPtr>& kernels,
                                    const RunOptions& o) const {
  if (kernels.empty() || !o.filter) return;
  // Over the whole suite: a shard left empty by more shards than cells passes, as a GoogleTest shard
  // without tests does; a filter that matches nothing anywhere is a mistake in every shard.
  RunOptions whole = o;
  whole.shard_index = 0;
  whole.shard_count = 1;
  if (count_selected(suite, kernels, whole) > 0) return;
  const std::string example = suite.cells.empty() ? "" : suite.cells.front().for_layouts(kernels.front()->layouts()).id();
  throw UsageError(fmt::format("--filter: '{}' matches none of the {} cells of suite '{}' (ids look like '{}')", filter,
                               suite.cells.size(), suite.name, example));
}

void check_writable_file(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw UsageError(fmt::format("{}: cannot write '{}': it is a directory", flag, path));
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec))
    throw UsageError(fmt::format("{}: cannot write '{}': directory '{}' does not exist", flag, path, parent.string()));
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw UsageError(fmt::format("{}: cannot write '{}': directory '{}' is not writable", flag, path, parent.string()));
  // access() says yes to root almost everywhere (/proc, /sys): try it. An existing file is opened for
  // writing without truncation (O_NONBLOCK: a FIFO without a reader fails instead of waiting); for a new
  // one, a probe file is created in its directory and removed, so the path itself is never created.
  if (fs::exists(fs::symlink_status(path, ec))) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) throw UsageError(fmt::format("{}: cannot write '{}': {}", flag, path, std::strerror(errno)));
    ::close(fd);
    return;
  }
  std::string probe = (parent / ".pacheck-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) throw UsageError(fmt::format("{}: cannot write '{}': cannot create a file in '{}': {}", flag, path,
                                           parent.string(), std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
}

std::string results_kept_in(const std::string& report_dir, const std::string& json_path) {
  std::vector<std::string> where;
  if (!report_dir.empty()) {
    const std::filesystem::path d(report_dir);
    where.push_back(fmt::format("{} and {}", (d / kResultsLogFile).string(), (d / find_format("json")->file).string()));
  }
  if (!json_path.empty()) where.push_back(json_path);
  return fmt::format("{}", fmt::join(where, " and "));
}

void write_output_file(const std::string& flag, const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st) || fs::is_regular_file(st)) {
    try {
      write_file_atomically(path, text);
    } catch (const FileError& e) {
      throw UsageError(fmt::format("{}: cannot write {}", flag, e.what()));
    }
    return;
  }
  // A FIFO or device (/dev/stdout): written in place, as a temporary file cannot be renamed over it.
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.flush();
  if (!out) throw UsageError(fmt::format("{}: cannot write '{}': {}", flag, path, std::strerror(errno)));
}

std::optional<std::uint64_t> parse_seed_flag(const std::string& text, bool given) {
  if (!given) return std::nullopt;
  if (text.empty())
    throw UsageError("--seed: '' is not an unsigned 64-bit integer (leave --seed out to keep the default)");
  try {
    return parse_seed(text);
  } catch (const CaseError& e) {
    throw UsageError(fmt::format("--seed: {}", e.reason));
  }
}

namespace {
/// A non-negative decimal integer filling all of `text`; nullopt if it is not one, INT_MAX + 1 when its
/// digits exceed int (so the caller can say "too large" rather than "not an integer").
std::optional<long long> parse_count(const std::string& text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  int v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range) return static_cast<long long>(std::numeric_limits<int>::max()) + 1;
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}
}  // namespace

Shard resolve_shard(const std::string& flag) {
  Shard s;
  std::string what;
  std::optional<long long> index, count;
  if (!flag.empty()) {
    what = fmt::format("--shard '{}'", flag);
    const auto slash = flag.find('/');
    if (slash == std::string::npos) throw UsageError(fmt::format("{}: expected I/N, e.g. 0/4", what));
    index = parse_count(flag.substr(0, slash));
    count = parse_count(flag.substr(slash + 1));
  } else {
    const char* total = std::getenv("GTEST_TOTAL_SHARDS");
    const char* idx = std::getenv("GTEST_SHARD_INDEX");
    if (!total && !idx) return s;
    what = fmt::format("GTEST_SHARD_INDEX={} GTEST_TOTAL_SHARDS={}", idx ? idx : "(unset)", total ? total : "(unset)");
    if (!total || !idx) throw UsageError(fmt::format("{}: set both or neither", what));
    index = parse_count(idx);
    count = parse_count(total);
    if (const char* status = std::getenv("GTEST_SHARD_STATUS_FILE"); status && *status) std::ofstream(status, std::ios::app);
  }
  if (!index || !count) throw UsageError(fmt::format("{}: I and N must be non-negative integers", what));
  constexpr long long kMax = std::numeric_limits<int>::max();
  if (*count > kMax) throw UsageError(fmt::format("{}: N must be at most {}", what, kMax));
  if (*index > kMax) throw UsageError(fmt::format("{}: I must be at most {}", what, kMax));
  if (*count < 1 || *index >= *count) throw UsageError(fmt::format("{}: need 0 <= I < N", what));
  s.index = static_cast<int>(*index);
  s.count = static_cast<int>(*count);
  return s;
}

void bind_tf32_flag(CLI::App* cmd, bool& tf32) {
  cmd->add_flag("--tf32", tf32,
                "the kernels read f32 dot operands as TF32 (Triton's default fp32 tl.dot on NVIDIA): f32 outputs are "
                "judged against the TF32 limit (docs/TOLERANCE.md)");
}

void bind_color_option(CLI::App* cmd, std::string& mode) {
  cmd->add_option("--color", mode,
                  "console verdicts in colour: auto (when stdout is a terminal, NO_COLOR is unset or empty and TERM "
                  "is not dumb), always (even with NO_COLOR set), never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
}

bool resolve_color(const std::string& mode) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  return isatty(fileno(stdout)) && !(no_color && *no_color) && !(term && std::string_view(term) == "dumb");
}

void bind_format_option(CLI::App* cmd, std::string& name) {
  cmd->add_option("--format", name, fmt::format("what stdout carries: {} (`pacheck list formats`)", format_names()))
      ->capture_default_str();
}

std::unique_ptr<ReportFormat> stdout_format(const std::string& name, const FormatOptions& options) {
  const FormatInfo* f = find_format(name);
  if (!f) throw UsageError(fmt::format("--format: no report format named '{}' (known: {})", name, format_names()));
  return f->make(std::cout, options);
}

std::set<std::string> plugin_kernel_names() {
  std::set<std::string> names;
  for (const auto& p : loaded_plugins()) names.insert(p.kernels.begin(), p.kernels.end());
  return names;
}

}  // namespace pacheck::cli
