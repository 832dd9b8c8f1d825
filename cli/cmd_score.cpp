// pacheck score: verdicts for outputs a foreign runner computed from `pacheck export` case files, with the
// same table, summary, JSON report and exit code as `pacheck run`.
#include <fmt/format.h>

#include "cli/common.hpp"
#include "interop/casefiles.hpp"
#include "interop/safetensors.hpp"
#include "report/json.hpp"

namespace pacheck::cli {

void add_score_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("score", "judge a foreign runner's outputs for exported case files, like `run`");
  struct Opts {
    std::string cases, outputs, json, kernel = "foreign", format = kDefaultFormat;
    bool only_failures = false, negative_control = false;
  };
  auto o = std::make_shared<Opts>();
  auto common = std::make_shared<CommonOptions>();  // for the tolerance flags only
  cmd->add_option("--cases", o->cases, "directory written by `pacheck export`")->required();
  cmd->add_option("--outputs", o->outputs, "directory holding one output safetensors per case file")->required();
  cmd->add_option("--kernel-name", o->kernel, "name to report the outputs under")->capture_default_str();
  cmd->add_option("--json", o->json, "write the full report (summary and every cell's metrics) to this JSON file");
  cmd->add_flag("--only-failures", o->only_failures, "console: print only cells that did not pass");
  bind_format_option(cmd, o->format);
  cmd->add_flag("--negative-control", o->negative_control,
                "the outputs come from a runner with the planted V-tail fault (runner.py --bug v-tail): it must fail "
                "the cells that poison the V tail, or the run is instrument blind (exit 3)");
  cmd->add_option("--threads,-j", common->threads, "CPU worker threads (default: all cores)");
  cmd->add_option("--tolerance", common->tolerance, "tolerance policy: fixed or calibrated")->capture_default_str();
  cmd->add_option("--multiple", common->multiple, "calibrated policy: allowed multiple of the emulation's error")->capture_default_str();
  cmd->add_option("--oracle-precision", common->precision, "oracle precision: f32 or f64")->capture_default_str();
  bind_tf32_flag(cmd, common->tf32);
  cmd->callback([&ctx, o, common] {
    const std::unique_ptr<ReportFormat> out = stdout_format(o->format, {o->only_failures});
    // Pre-flight: an unwritable --json fails now, not after every output was scored.
    if (!o->json.empty()) check_writable_file("--json", o->json);
    ScoreOptions so;
    so.kernel_name = o->kernel;
    so.negative_control = o->negative_control;
    so.run = common->run_options();
    // The table starts with the first result, so a bad case directory prints only its error.
    bool started = false;
    so.run.on_result = [&](const CellResult& r) {
      if (!started) {
        out->run_started(
            {fmt::format("pacheck {} | score {} against {}", pacheck_version(), o->outputs, o->cases), {}});
        started = true;
      }
      out->cell_finished(r);
    };
    std::string suite;
    RunSummary s;
    try {
      s = score_cases(o->cases, o->outputs, so, &suite);
    } catch (const CaseFilesError& e) {
      throw UsageError(e.what());
    } catch (const SafetensorsError& e) {
      throw UsageError(e.what());
    }
    const std::string device = "cpu (replayed outputs)";
    ReportMeta meta{suite, device, {}, nullptr};
    if (out->needs_environment()) meta.environment = collect_environment("cpu");  // outputs are judged on the CPU
    out->run_ended(s, meta);
    if (!o->json.empty()) write_output_file("--json", o->json, to_json(s, suite, device).dump(1) + "\n");
    ctx.exit_code = s.exit_code();
  });
}

}  // namespace pacheck::cli
