// pacheck repro CELL_ID --kernel K: one cell, every metric, and the worst elements.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <numeric>
#include <set>
#include <string>

#include "cli/common.hpp"
#include "cli/exit_guard.hpp"
#include "exec/isolate.hpp"
#include "judge/comparator.hpp"
#include "report/text.hpp"


namespace pacheck::cli {


namespace {

/// The `--top` worst elements of `out` against the oracle's `ref` by |out - ref| (non-finite first), one row
/// each: sequence (and query token when a sequence has several), head, dim, output, oracle, |diff|. `cc` has
/// the output's shape: head_size is the width of an output row (an MLA case's v_head_dim, not its latent row).
void print_worst_elements(std::string& text, const std::vector<double>& out, const std::vector<double>& ref,
                          const Case& cc, int top) {
  auto o = std::back_inserter(text);
  std::vector<std::size_t> idx(out.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto err = [&](std::size_t i) {
    const double v = out[i], r = ref[i];
    return std::isfinite(v) ? std::abs(v - r) : INFINITY;
  };
  const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(std::max(top, 0)), idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(n), idx.end(), [&](auto a, auto b) { return err(a) > err(b); });
  // With several query tokens per sequence an output row is (sequence, query token): both columns.
  const bool tokens = cc.max_query_len() > 1;
  fmt::format_to(o, "\n{:>5} {}{:>5} {:>5} {:>14} {:>14} {:>11}\n", "seq", tokens ? "token " : "", "head", "dim", "out",
                 "oracle", "|diff|");
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t i = idx[j];
    const Index3 at = index3(static_cast<std::int64_t>(i), cc);
    fmt::format_to(o, "{:>5} {}{:>5} {:>5} {:>14.6e} {:>14.6e} {:>11.3e}\n", at.seq,
                   tokens ? fmt::format("{:>5} ", at.token) : "", at.head, at.dim, out[i], ref[i], err(i));
  }
}

/// Runs `cell` on `k` on device `dev` and appends what repro prints to `text`: the verdict, every metric and
/// the `top` worst elements (or why the kernel declined or failed). Returns the exit code: kFail for a
/// failure, a decline or an error, else kPass.
int repro_cell(const Cell& cell, const Kernel& k, const std::string& dev, const RunOptions& ro, int top, std::string& text) {
  auto o = std::back_inserter(text);
  Support sup = cell_support(k, cell.c);
  if (!sup.ok && sup.failed) {  // supports() itself failed: an `error`, as `run` reports it, not a decline
    fmt::format_to(o, "cell      {}\nkernel    {}\nverdict   error  ({})\n", cell.id(), k.name(), sup.reason);
    return kFail;
  }
  if (!sup.ok) {
    fmt::format_to(o, "{} declines {}: {}\n", k.name(), cell.id(), sup.reason);
    return kFail;
  }
  auto backend = open_backend(dev);
  CaseData data;
  auto [r, raw] = run_cell(cell, k, *backend, ro, &data);
  const Metrics& m = r.metrics;
  fmt::format_to(o, "cell      {}\nkernel    {} on {}\nverdict   {}{}\n", r.cell_id, r.kernel, backend->description(),
                 verdict_name(r.verdict), r.detail.empty() ? "" : "  (" + r.detail + ")");
  if (r.verdict == Verdict::error) {  // the kernel or backend failed: no output to show
    return kFail;
  }
  // rel_linf, max_abs, mean_abs and nmse (and margin with them) are taken over finite pairs:
  // "nan"/"inf" when there are others, spelled as every report spells them.
  auto e6 = [&](double v) { return unless_nonfinite(m, fmt::format("{:.6e}", v)); };
  fmt::format_to(o, "rel_linf  {}   limit {:.3e}   margin {}\nmax_abs   {}   mean_abs {}   nmse {}\n",
                 e6(m.rel_linf), r.limit, unless_nonfinite(m, fmt::format("{:.3f}", r.margin)), e6(m.max_abs),
                 e6(m.mean_abs), e6(m.nmse));
  fmt::format_to(o, "max_ulp   {}   bitwise_equal {:.4f}%   NaN {}   Inf {}   elements {}\n", max_ulp_text(m),
                 m.bitwise_equal_pct, m.nan_count, m.inf_count, m.elements);
  if (m.bias_elements)
    fmt::format_to(o, "bias      {:+.4f} ULP signed mean over {} elements that need rounding ({} toward zero, {} away)\n",
                   m.bias_ulp, m.bias_elements, m.bias_toward, m.bias_away);
  if (r.variant_elements) fmt::format_to(o, "twin      {} elements differ bitwise from the clean-cache run\n", r.variant_elements);
  Case shape = cell.c;
  shape.head_size = shape.out_head_size();  // as the judge compared them
  print_worst_elements(text, raw.out, data.ref.out, shape, top);
  return is_failure(r.verdict) ? kFail : kPass;
}

}  // namespace

void add_repro_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("repro", "run one cell on one kernel and print every metric and the worst elements");
  auto cell_id = std::make_shared<std::string>();
  auto kernel = std::make_shared<std::string>();
  auto device = std::make_shared<std::string>();
  auto top = std::make_shared<int>(10);
  auto plugins = std::make_shared<std::vector<std::string>>();
  // The verdict options, as `run` takes them: a repro line printed by a run under non-default ones
  // carries them (judge_flags), so the cell is judged here under the same limit.
  auto judge = std::make_shared<JudgeOptions>();
  auto isolate = std::make_shared<bool>(false);
  auto no_isolate = std::make_shared<bool>(false);
  auto cell_timeout = std::make_shared<double>(60);
  auto memory = std::make_shared<MemoryFlag>();
  cmd->add_option("cell", *cell_id, "cell id as printed by run, e.g. 'h32/8 d128 bs16 bf16 ctx4090 vllm seed7 V:nan@tail'")->required();
  cmd->add_option("--kernel,-k", *kernel,
                  "kernel: built-in, plugin (--plugin) or planted.* (the property tests' planted faults); may be left out "
                  "when --plugin loads exactly one kernel");
  cmd->add_option("--plugin", *plugins,
                  "load kernels from this shared library first (repeatable), as the run that printed the repro line "
                  "did");
  cmd->add_option("--device,-d", *device, "cpu, cuda[:N] or hip[:N] (default: the kernel's device)");
  cmd->add_option("--top", *top, "worst elements to print")->capture_default_str();
  auto* iso = cmd->add_flag("--isolate", *isolate,
                            "run the cell in a child process (the default for plugin kernels, as in `run`): a crash "
                            "or hang is reported as the verdict crash or timeout instead of ending pacheck");
  cmd->add_flag("--no-isolate", *no_isolate, "run a plugin kernel in this process too (to debug it: a crash then ends pacheck)")
      ->excludes(iso);
  cmd->add_option("--cell-timeout", *cell_timeout,
                  "isolated cell: seconds before its child is killed (verdict timeout); a plugin kernel kept in this "
                  "process by --no-isolate: seconds before pacheck is ended (exit 1)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0).description("seconds, more than 0 and at most 86400"));
  judge->bind(cmd);
  memory->bind(cmd, "host memory the cell may take, from its estimate before anything is generated: a cell that "
                    "needs more is refused, exit 2");
  cmd->callback([&ctx, cell_id, kernel, device, top, plugins, judge, isolate, no_isolate, cell_timeout, memory] {
    RunOptions ro;
    judge->apply(ro);
    Cell cell;
    try {
      cell = parse_cell_id(*cell_id);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    // The budget run checks (exec/plan.hpp's memory_refusal), for this one cell: before anything is generated.
    check_memory(single_case_memory(cell.c, cell.id(), ro), memory->budget());
    load_plugin_flags(*plugins);  // before the kernel is looked up: it may be one of theirs
    if (kernel->empty()) {
      // As `run --plugin` takes the plugins' kernels when none is named: one of them is unambiguous.
      const std::set<std::string> theirs = plugin_kernel_names();
      if (theirs.size() != 1)
        throw UsageError(theirs.empty() ? std::string("--kernel is required (or --plugin with exactly one kernel)")
                                        : fmt::format("--kernel is required: the plugins load {} kernels ({})",
                                                      theirs.size(), fmt::join(theirs, ", ")));
      *kernel = *theirs.begin();
    }
    const KernelPtr k = find_named_kernel(*kernel);
    const std::string dev =
        k->device() == PACHECK_DEVICE_CPU ? "cpu" : resolve_device(device->empty() ? device_kind_spec(k->device()) : *device);
    // Everything the cell prints, and the exit code: made here, or in a child process when isolated.
    auto body = [&](std::string& text) -> int { return repro_cell(cell, *k, dev, ro, *top, text); };
    const bool isolated = *isolate || (!*no_isolate && plugin_kernel_names().count(k->name()) > 0);
    if (!isolated) {
      // A plugin kernel kept here by --no-isolate is watched for --cell-timeout, as in `run`.
      const std::string name = k->name();
      const std::unique_ptr<CallWatchdog> watchdog =
          plugin_kernel_names().count(name) > 0
              ? in_process_watchdog(*cell_timeout, [name](const Kernel& w) { return w.name() == name; })
              : nullptr;
      const CallWatchdog::Watch watch = watch_call(watchdog.get(), *k, [&] { return fmt::format("{} on cell '{}'", name, cell.id()); });
      std::string text;
      ctx.exit_code = body(text);
      fmt::print("{}", text);
      return;
    }
    // The first character carries the exit code back from the child.
    const ChildAnswer a = ask_child_process(
        [&] {
          std::string text;
          const int rc = body(text);
          return std::string(1, static_cast<char>('0' + rc)) + text;
        },
        *cell_timeout);
    if (a.answered && !a.text.empty()) {
      ctx.exit_code = a.text[0] - '0';
      fmt::print("{}", a.text.substr(1));
      return;
    }
    const bool hung = a.text.rfind("timeout", 0) == 0;
    fmt::print("cell      {}\nkernel    {} on {} (in a child process)\nverdict   {}  ({}; `--no-isolate` runs it in this "
               "process, under a debugger)\n",
               cell.id(), k->name(), dev, hung ? "timeout" : "crash", a.text);
    ctx.exit_code = kFail;
  });
}

}  // namespace pacheck::cli
