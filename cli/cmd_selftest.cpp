// pacheck selftest: the comparator self-test, and the negative controls on the tail-poison suite.
#include <fmt/format.h>

#include "cli/common.hpp"

namespace pacheck::cli {

void add_selftest_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("selftest", "prove the instrument can fail: comparator self-test and negative controls");
  auto ulps = std::make_shared<int>(1);
  cmd->add_option("--ulps", *ulps, "ULPs of corruption to seed")->capture_default_str();
  cmd->callback([&ctx, ulps] {
    SelfTestResult st = comparator_selftest(*ulps);
    fmt::print("comparator self-test ({} ULP at offsets 5, 1024, 2047 of 2048; one NaN):\n", *ulps);
    for (const auto& l : st.lines) fmt::print("  {}\n", l);
    // Negative controls on the CPU: each must be caught on the tail-poison suite.
    std::vector<KernelPtr> controls;
    for (const auto& k : Registry::global().all())
      if (k->is_negative_control() && k->device() == PACHECK_DEVICE_CPU) controls.push_back(k);
    Suite suite = load_suite("tail-poison");
    RunOptions ro;
    RunSummary s = run_suite(suite, controls, "cpu", ro);
    fmt::print("negative controls on suite tail-poison:\n");
    for (const auto& k : s.kernels)
      fmt::print("  {:<24} {} ({} expected-failure cells caught, {} missed)\n", k.kernel, control_outcome_name(k.control),
                 k.caught, k.missed);
    const bool ok = st.passed && !s.blind &&
                    std::all_of(s.kernels.begin(), s.kernels.end(), [](const KernelSummary& k) { return k.control == ControlOutcome::caught; });
    fmt::print("selftest: {}\n", ok ? "passed" : "FAILED (instrument blind)");
    ctx.exit_code = ok ? kPass : kBlind;
  });
}

}  // namespace pacheck::cli
