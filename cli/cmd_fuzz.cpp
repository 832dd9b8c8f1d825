// pacheck fuzz --kernel K: the properties of properties/ (random cells, metamorphic checks, shrinking)
// against one kernel, CPU, GPU or plugin; prints the minimal counterexample of each failing property.
#include <fmt/format.h>

#include <cmath>

#include <memory>
#include <random>

#include "cli/common.hpp"
#include "report/text.hpp"

#ifdef PACHECK_HAVE_FUZZ
#include "properties/planted_kernels.hpp"
#include "properties/properties.hpp"
#endif

namespace pacheck::cli {

#ifdef PACHECK_HAVE_FUZZ
namespace {

struct FuzzOptions {
  std::string kernel;
  std::string device;
  double budget = 0;
  int cases = 0;
  std::string seed;  ///< --seed as given; parse_seed_flag checks it (not given: random)
  bool seed_given = false;
  std::vector<std::string> properties;
  int max_size = 100;
  bool no_shrink = false;
  std::string reproduce;
  CommonOptions common;  ///< --plugin and the verdict flags (JudgeOptions), as `pacheck run`
};

int run_fuzz(FuzzOptions& o) {
  o.common.load_plugins();
  const KernelPtr kernel = find_named_kernel(o.kernel);
  if (kernel->device() != PACHECK_DEVICE_CPU && o.device == "cpu")
    throw UsageError(fmt::format("--kernel: {} is a GPU kernel but --device is cpu; it runs with --device {}", o.kernel,
                                 device_kind_spec(kernel->device())));
  std::vector<prop::Property> props;
  try {
    for (const auto& name : o.properties) props.push_back(prop::parse_property(name));
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--property: {}", e.what()));
  }
  // Opt-in properties (overflow) run only when named; an MLA kernel runs those that apply to it (check_applies).
  if (props.empty()) props = prop::default_properties_for(*kernel);
  for (prop::Property p : props) {
    try {
      prop::check_applies(p, *kernel);
    } catch (const std::invalid_argument& e) {
      throw UsageError(fmt::format("--property: {}", e.what()));
    }
  }
  if (!o.reproduce.empty() && props.size() != 1)
    throw UsageError("--reproduce replays one property's failure: name it with --property");

  prop::KernelUnderTest target;
  try {
    target = prop::make_target(kernel, o.device, o.common.run_options());
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("cannot fuzz {}: {}", kernel->name(), e.what()));
  }

  const MemoryBudget budget = o.common.memory.budget();
  target.max_case_bytes = budget.bytes;

  prop::RunParams params;
  const std::optional<std::uint64_t> seed = parse_seed_flag(o.seed, o.seed_given);
  params.seed = seed ? *seed : std::random_device{}();
  params.cases = o.cases > 0 ? o.cases : 100;
  params.budget_seconds = o.budget > 0 ? o.budget / static_cast<double>(props.size()) : 0;
  params.max_size = o.max_size;
  params.shrink = !o.no_shrink;
  params.reproduce = o.reproduce;

  const std::string how = params.budget_seconds > 0 ? fmt::format("{:.1f} s per property", params.budget_seconds)
                                                    : fmt::format("{} cases per property", params.cases);
  fmt::print("pacheck fuzz: {} on {}, seed {}, {}; a case over --max-memory {} ({}) is discarded\n", kernel->name(),
             target.device, params.seed, how, format_bytes(budget.bytes), budget.source);
  if (kernel->is_negative_control())
    fmt::print("{} is a negative control: a failing property here is its planted fault being caught\n", kernel->name());
  fmt::print("\n{:<18} {:<13} {:>6} {:>8}  {}\n", "property", "result", "cases", "seconds", "coverage");
  std::fflush(stdout);

  int failed = 0, unexercised = 0;
  for (prop::Property p : props) {
    const prop::PropertyRun run = prop::run_property(p, target, params);
    std::string coverage = prop::tag_summary(run.distribution);
    if (run.over_memory > 0)
      coverage += fmt::format("{}{} case{} over --max-memory discarded", coverage.empty() ? "" : ", ",
                              run.over_memory, run.over_memory == 1 ? "" : "s");
    if (run.device_out_of_memory > 0)
      coverage += fmt::format("{}{} case{} discarded: the device ran out of memory", coverage.empty() ? "" : ", ",
                              run.device_out_of_memory, run.device_out_of_memory == 1 ? "" : "s");
    // A property that held only vacuously (every case skipped its check) showed nothing: not "held".
    const bool exercised = run.exercised > 0;
    if (run.passed && !exercised) ++unexercised;
    if (run.exercised < run.cases)
      coverage = fmt::format("{} of {} cases exercised{}{}", run.exercised, run.cases, coverage.empty() ? "" : ", ",
                             coverage);
    fmt::print("{:<18} {:<13} {:>6} {:>8.1f}  {}\n", prop::property_name(p),
               !run.passed ? "FAILED" : exercised ? "held" : "not exercised", run.cases, run.seconds, coverage);
    if (!run.passed) {
      ++failed;
      if (run.counterexample) {
        fmt::print("  minimal counterexample after {} shrinks:\n", run.shrinks);
        std::string text = run.counterexample->message;
        for (std::size_t at = 0; (at = text.find('\n', at)) != std::string::npos; at += 5) text.replace(at, 1, "\n    ");
        fmt::print("    {}\n", text);
        fmt::print("    replay {} fuzz --kernel {}{}{} --property {} --reproduce '{}'\n", command_name(), kernel->name(),
                   kernel->device() == PACHECK_DEVICE_CPU ? "" : " --device " + target.device,
                   plugin_flag(kernel->name()), prop::property_name(p), run.reproduce);
      } else {
        fmt::print("  {}\n", run.message);
        if (run.over_memory > 0)
          fmt::print("  {} generated case{} did not fit --max-memory {} ({}): raise it, or lower --max-size\n",
                     run.over_memory, run.over_memory == 1 ? "" : "s", format_bytes(budget.bytes),
                     budget.source);
        if (run.device_out_of_memory > 0)
          fmt::print("  {} case{} ended with the device out of memory: free the GPU of other processes (nvidia-smi), "
                     "run fewer jobs on it, or lower --max-size; a kernel that leaks device memory ends this way too\n",
                     run.device_out_of_memory, run.device_out_of_memory == 1 ? "" : "s");
      }
    }
    std::fflush(stdout);
  }
  fmt::print("\n{} properties held, {} not exercised, {} failed\n",
             props.size() - static_cast<std::size_t>(failed + unexercised), unexercised, failed);
  // A control no property caught is not evidence of anything: say so (its fault may need cells the generators
  // draw rarely, e.g. per-slot fp8 tables with a poisoned entry), rather than let "held" read as a pass.
  if (kernel->is_negative_control() && failed == 0)
    fmt::print("warning: no property caught the negative control {} in {}: its planted fault went unseen; raise "
               "--cases (docs/PROPERTIES.md says which property and cells catch it)\n",
               kernel->name(), how);
  return failed ? kFail : kPass;
}

}  // namespace

void add_fuzz_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand(
      "fuzz", "run the property-based tests (random cells, metamorphic properties, shrinking) against one kernel");
  auto o = std::make_shared<FuzzOptions>();
  cmd->add_option("--kernel,-k", o->kernel, "kernel to fuzz: built-in, plugin (--plugin) or planted.*")->required();
  cmd->add_option("--device,-d", o->device, "cuda[:N] or hip[:N] for GPU kernels (default: device 0 of the kernel's kind); CPU kernels run on cpu");
  // Checked by hand: CLI11's PositiveNumber prints its range as 0 to 1.79e308 in full, and passes NaN.
  auto positive = [] {
    return CLI::Validator(
        [](std::string& v) -> std::string {
          double x = 0;
          try {
            std::size_t used = 0;
            x = std::stod(v, &used);
            if (used != v.size()) return fmt::format("must be a number, got '{}'", v);
          } catch (const std::exception&) {
            return fmt::format("must be a number, got '{}'", v);
          }
          if (!(x > 0) || !std::isfinite(x)) return fmt::format("must be a positive finite number, got '{}'", v);
          return {};
        },
        "POSITIVE");
  };
  auto* budget = cmd->add_option("--budget", o->budget, "wall seconds in all, shared equally by the properties")
                     ->check(positive());
  auto* cases = cmd->add_option("--cases", o->cases, "cases per property (default 100)")->check(positive());
  budget->excludes(cases);
  auto* seed_flag = cmd->add_option("--seed", o->seed, "RapidCheck seed, 0 to 2^64 - 1 (default: random, printed)");
  std::vector<std::string_view> names;
  for (const prop::PropertyInfo& p : prop::property_table()) names.push_back(p.name);
  cmd->add_option("--property,-p", o->properties,
                  fmt::format("property to run (repeatable; default all but the opt-in overflow, for an MLA kernel those that apply to it): {}",
                              fmt::join(names, ", ")));
  cmd->add_option("--max-size", o->max_size, "RapidCheck max_size: 0..100 scales lengths and work per case")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_flag("--no-shrink", o->no_shrink, "report the first failing case as found, without shrinking");
  cmd->add_option("--reproduce", o->reproduce, "replay a failure from the reproduce string printed with it");
  cmd->add_option("--plugin", o->common.plugins, "kernel library to load (repeatable)");
  o->common.judge.bind(cmd);  // the verdict flags `run` takes, --multiple and --tf32 included
  o->common.memory.bind(cmd,
                        "host memory one generated case may take, from its estimate before anything of it is "
                        "generated (as run's --max-memory): a case that needs more is discarded (not run, not a "
                        "failure) and counted in the property's coverage line");
  cmd->callback([&ctx, o, seed_flag] {
    o->seed_given = seed_flag->count() > 0;
    ctx.exit_code = run_fuzz(*o);
  });
}
#else
// Built without RapidCheck (PACHECK_BUILD_TESTS=OFF): the subcommand exists and says why it cannot run.
void add_fuzz_command(CLI::App& app, Context&) {
  auto* cmd = app.add_subcommand("fuzz", "property-based tests (not in this build: it has no RapidCheck)");
  cmd->allow_extras();
  cmd->callback([] { throw UsageError("pacheck fuzz needs RapidCheck: rebuild with -DPACHECK_BUILD_TESTS=ON"); });
}
#endif

}  // namespace pacheck::cli
