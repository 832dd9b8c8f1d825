// pacheck selftest: the comparator self-test, and every CPU negative control caught on the built-in suites
// that plant its fault.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "cli/common.hpp"

namespace pacheck::cli {

namespace {

/// The suites a CPU negative control is run on: tail-poison plants the tail faults (cpu.vector_v), fp8 the
/// fp8 scale faults (cpu.fp8_*) and the per-slot scale-table poison (cpu.slot_scale_unmasked), scales the softmax scales a kernel that ignores its scale gets wrong
/// (cpu.fixed_scale), variants the attention-variant faults (cpu.softcap_ratio, cpu.window_scratch,
/// cpu.qlen_no_causal), pool the high block ids a 32-bit block offset gets wrong (cpu.int32_offset,
/// cpu.uint32_offset). A
/// control that has no expected failure in any of them is reported as not
/// exercised and fails the self-test: selftest must show every control caught, not assume it.
/// gate last: the controls of logits far from zero, flat f16 at long contexts, the e4m3fn top binade and state
/// across calls (cpu.sentinel_max, carried_max, p_f16_ftz, e4m3_ieee, replay_output, stale_max) have their
/// expected failures only there (a control runs only on its expected-failure cells, so it costs those alone), and
/// so do the MLA controls (cpu.mla_*: gate's MLA group).
constexpr const char* kControlSuites[] = {"tail-poison", "fp8", "scales", "variants", "pool", "gate"};

/// A control's caught and missed cells summed over kControlSuites.
struct ControlTally {
  int caught = 0, missed = 0;
  ControlOutcome outcome() const {
    return missed > 0 ? ControlOutcome::blind : caught > 0 ? ControlOutcome::caught : ControlOutcome::not_exercised;
  }
};

}  // namespace

void add_selftest_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("selftest", "prove the instrument can fail: comparator self-test and negative controls");
  auto ulps = std::make_shared<int>(1);
  // 0 ULPs seeds nothing: the self-test would fail as "instrument blind" for a bad value, not a blind one.
  cmd->add_option("--ulps", *ulps, "ULPs of corruption to seed (1 to 1024)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->callback([&ctx, ulps] {
    SelfTestResult st = comparator_selftest(*ulps);
    fmt::print("comparator self-test ({} ULP at offsets 5, 1024, 2047 of 2048; one NaN):\n", *ulps);
    for (const auto& l : st.lines) fmt::print("  {}\n", l);
    if (!st.passed) {
      // The verdict is already "blind", whatever the controls do: say so now rather than after a minute.
      fmt::print("negative controls not run: the comparator self-test failed\nselftest: FAILED (instrument blind)\n");
      ctx.exit_code = kBlind;
      return;
    }
    const std::vector<KernelPtr> controls = Registry::global().negative_controls(PACHECK_DEVICE_CPU);
    std::map<std::string, ControlTally> tally;
    for (const auto& k : controls) tally[k->name()];
    bool blind = false;
    for (const char* name : kControlSuites) {
      RunSummary s = run_suite(load_suite(name), controls, "cpu", RunOptions{});
      blind = blind || s.blind;
      for (const auto& k : s.kernels) {
        tally[k.kernel].caught += k.caught;
        tally[k.kernel].missed += k.missed;
      }
    }
    fmt::print("negative controls on suites {}:\n", fmt::join(kControlSuites, ", "));
    bool all_caught = !blind;
    for (const auto& k : controls) {
      const ControlTally& t = tally[k->name()];
      all_caught = all_caught && t.outcome() == ControlOutcome::caught;
      fmt::print("  {:<24} {} ({} expected-failure cells caught, {} missed)\n", k->name(),
                 control_outcome_name(t.outcome()), t.caught, t.missed);
    }
    const bool ok = all_caught;
    fmt::print("selftest: {}\n", ok ? "passed" : "FAILED (instrument blind)");
    ctx.exit_code = ok ? kPass : kBlind;
  });
}

}  // namespace pacheck::cli
