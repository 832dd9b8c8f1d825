// pacheck repro CELL_ID --kernel K: one cell, every metric, and the worst elements.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cli/common.hpp"


namespace pacheck::cli {


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
  cmd->add_option("cell", *cell_id, "cell id as printed by run, e.g. 'h32/8 d128 bs16 bf16 ctx4090 vllm seed7 V:nan@tail'")->required();
  cmd->add_option("--kernel,-k", *kernel, "kernel: built-in, plugin (--plugin) or planted.* (the property tests' planted faults)")->required();
  cmd->add_option("--plugin", *plugins,
                  "load kernels from this shared library first (repeatable), as the run that printed the repro line "
                  "did; the cell runs in this process");
  cmd->add_option("--device,-d", *device, "cpu, cuda[:N] or hip[:N] (default: the kernel's device)");
  cmd->add_option("--top", *top, "worst elements to print")->capture_default_str();
  judge->bind(cmd);
  cmd->callback([&ctx, cell_id, kernel, device, top, plugins, judge] {
    RunOptions ro;
    judge->apply(ro);
    Cell cell;
    try {
      cell = parse_cell_id(*cell_id);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    load_plugin_flags(*plugins);  // before the kernel is looked up: it may be one of theirs
    const KernelPtr k = find_named_kernel(*kernel);
    const std::string dev =
        k->device() == PACHECK_DEVICE_CPU ? "cpu" : resolve_device(device->empty() ? device_kind_spec(k->device()) : *device);
    Support sup = k->supports(cell.c);
    if (!sup.ok) {
      fmt::print("{} declines {}: {}\n", k->name(), cell.id(), sup.reason);
      ctx.exit_code = kFail;
      return;
    }
    auto backend = open_backend(dev);
    CaseData data;
    auto [r, raw] = run_cell(cell, *k, *backend, ro, &data);
    const Metrics& m = r.metrics;
    fmt::print("cell      {}\nkernel    {} on {}\nverdict   {}{}\n", r.cell_id, r.kernel, backend->description(),
               verdict_name(r.verdict), r.detail.empty() ? "" : "  (" + r.detail + ")");
    if (r.verdict == Verdict::error) {  // the kernel or backend failed: no output to show
      ctx.exit_code = kFail;
      return;
    }
    fmt::print("rel_linf  {:.6e}   limit {:.3e}   margin {:.3f}\nmax_abs   {:.6e}   mean_abs {:.6e}   nmse {:.6e}\n", m.rel_linf,
               r.limit, r.margin, m.max_abs, m.mean_abs, m.nmse);
    fmt::print("max_ulp   {}   bitwise_equal {:.4f}%   NaN {}   Inf {}   elements {}\n",
               m.max_ulp == UINT64_MAX ? std::string("inf (NaN present)") : std::to_string(m.max_ulp), m.bitwise_equal_pct,
               m.nan_count, m.inf_count, m.elements);
    if (m.bias_elements)
      fmt::print("bias      {:+.4f} ULP signed mean over {} elements that need rounding ({} toward zero, {} away)\n",
                 m.bias_ulp, m.bias_elements, m.bias_toward, m.bias_away);
    if (r.variant_elements) fmt::print("twin      {} elements differ bitwise from the clean-cache run\n", r.variant_elements);
    // Worst elements by |out - ref|, non-finite first.
    std::vector<std::size_t> idx(raw.out.size());
    std::iota(idx.begin(), idx.end(), 0);
    auto err = [&](std::size_t i) {
      const double o = raw.out[i], ref = data.ref.out[i];
      return std::isfinite(o) ? std::abs(o - ref) : INFINITY;
    };
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(std::max(*top, 0)), idx.size());
    std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(n), idx.end(), [&](auto a, auto b) { return err(a) > err(b); });
    fmt::print("\n{:>5} {:>5} {:>5} {:>14} {:>14} {:>11}\n", "seq", "head", "dim", "out", "oracle", "|diff|");
    const int D = cell.c.head_size, H = cell.c.num_heads;
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = idx[j];
      fmt::print("{:>5} {:>5} {:>5} {:>14.6e} {:>14.6e} {:>11.3e}\n", i / (H * D), (i / D) % H, i % D, raw.out[i],
                 data.ref.out[i], err(i));
    }
    ctx.exit_code = is_failure(r.verdict) ? kFail : kPass;
  });
}

}  // namespace pacheck::cli
