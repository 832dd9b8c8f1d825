// pacheck run: a suite against kernels, with verdicts, a console table and an exit code CI can gate on.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "cli/common.hpp"
#include "kernels/backend.hpp"
#include "kernels/plugin.hpp"
#include "report/report.hpp"
#include "exec/isolate.hpp"
#include "report/reports.hpp"

namespace pacheck::cli {

namespace {
/// Checks `device` before anything is printed or written, so a run that cannot start never empties the
/// report directory of an earlier run: check_device_form checks its form (before kernels are chosen for
/// it); check_device that a device the user named opens, even when every kernel runs on the CPU (a gate
/// that names cuda:0 on a machine without one must not pass on its CPU kernels). The probe runs in a child
/// process, which leaves this process without a GPU context for the isolated children forked later.
/// Both throw UsageError with open_backend's message ("--device: unknown device ...", "no CUDA device: ...").
void check_device_form(const std::string& device) {
  try {
    check_device_spec(device);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

void check_device(const std::string& device) {
  if (device == "cpu") return;
  auto probe = [&]() -> std::string {
    try {
      for (const auto& spec : resolve_device_specs(device)) open_backend(spec);
      return "ok";
    } catch (const std::exception& e) {
      return std::string("!") + e.what();
    }
  };
  const std::optional<std::string> answer = run_in_child_process(probe, 120);
  if (answer && answer->rfind('!', 0) == 0) throw UsageError(answer->substr(1));
  // No answer (no child could be forked, or it died): the run itself reports the device as before.
}

/// " results.jsonl report.json junit.xml summary.md report.html": the report files present in `dir`, in
/// that order, each after a space (what the closing line lists).
std::string written_reports(const std::string& dir) {
  std::string out;
  for (const char* f : {"results.jsonl", "report.json", "junit.xml", "summary.md", "report.html"})
    if (std::filesystem::exists(std::filesystem::path(dir) / f)) out += std::string(" ") + f;
  return out;
}

/// "devices: cuda:0 (12 cells), cuda:1 (12 cells)": which device ran how many cells (CellResult::device,
/// in order of first appearance; declined cells ran nowhere and are not counted).
void print_devices(const RunSummary& s) {
  std::vector<std::pair<std::string, int>> seen;
  for (const auto& r : s.results) {
    if (r.device.empty()) continue;
    auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& p) { return p.first == r.device; });
    if (it == seen.end()) seen.emplace_back(r.device, 1);
    else ++it->second;
  }
  std::string line;
  for (const auto& [dev, n] : seen) line += fmt::format("{}{} ({} cells)", line.empty() ? "" : ", ", dev, n);
  fmt::print("devices: {}\n", line.empty() ? "none ran a cell" : line);
}
}  // namespace

void add_run_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("run", "run a suite against kernels and give a verdict per cell (default: gate)");
  auto opts = std::make_shared<CommonOptions>();
  auto json_path = std::make_shared<std::string>();
  auto only_failures = std::make_shared<bool>(false);
  auto report_dir = std::make_shared<std::string>();
  auto resume_dir = std::make_shared<std::string>();
  opts->bind(cmd);
  cmd->add_option("--report-dir", *report_dir,
                  "write results.jsonl (one line per finished cell, as it finishes), report.json, junit.xml, "
                  "summary.md and report.html into this directory, replacing an earlier run's reports there");
  cmd->add_option("--resume", *resume_dir,
                  "complete the interrupted run whose reports are in this directory: cells already in its "
                  "results.jsonl are not run again (same suite, kernels, device and options required)");
  cmd->add_option("--json", *json_path, "write the full report (summary and every cell's metrics) to this JSON file");
  cmd->add_flag("--only-failures", *only_failures, "print only cells that did not pass");
  cmd->callback([&ctx, opts, json_path, only_failures, report_dir, resume_dir] {
    opts->load_plugins();
    const std::string device = resolve_device(opts->device);
    check_device_form(device);
    Suite suite;
    try {
      suite = load_suite(opts->suite);
    } catch (const SuiteError& e) {
      throw UsageError(e.what());
    }
    auto kernels = select_kernels(opts->kernels, device);
    // A default device was found by resolve_device (itself a probe): only a named one is opened here.
    if (!opts->device.empty()) check_device(device);
    RunOptions ro = opts->run_options();
    std::optional<ReportDir> reports;
    std::vector<std::string> kernel_names;
    for (const auto& k : kernels) kernel_names.push_back(k->name());
    const nlohmann::json identity = run_identity(suite, kernel_names, device, ro, opts->filter);
    try {
      if (!resume_dir->empty()) {
        if (!report_dir->empty() && std::filesystem::weakly_canonical(*report_dir) != std::filesystem::weakly_canonical(*resume_dir))
          throw UsageError("--report-dir and --resume name different directories (--resume DIR writes its reports into DIR)");
        reports = ReportDir::resume(*resume_dir, identity);
        for (const auto& r : reports->previous()) ro.previous[result_key(r.kernel, r.cell_id)] = r;
      } else if (!report_dir->empty()) {
        reports = ReportDir::start(*report_dir, identity);
      }
    } catch (const ReportError& e) {
      throw UsageError(e.what());
    }
    const bool tty = isatty(fileno(stderr));
    fmt::print("pacheck {} | suite {} ({} cells) | device {} | kernels:", pacheck_version(), suite.name,
               suite.cells.size(), device);
    for (const auto& k : kernels) fmt::print(" {}", k->name());
    if (ro.shard_count > 1) fmt::print(" | shard {}/{}", ro.shard_index, ro.shard_count);
    fmt::print("\n");
    if (reports && !resume_dir->empty())
      fmt::print("resuming {}: {} finished cells in results.jsonl are not run again\n", reports->dir(), ro.previous.size());
    fmt::print("\n");
    print_header();
    std::fflush(stdout);
    ro.on_result = [&](const CellResult& r) {
      if (reports) reports->append(r);  // first: a kill right after this cell must not lose it
      if (tty) fmt::print(stderr, "\r\033[K");
      if (!*only_failures || is_failure(r.verdict) || r.expected_fail) print_row(r);
      std::fflush(stdout);
    };
    if (tty) ro.on_progress = [](int done, int total) { fmt::print(stderr, "\r[{}/{}] cells", done, total); };
    RunSummary s;
    try {
      s = run_suite(suite, kernels, device, ro);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
    if (tty) fmt::print(stderr, "\r\033[K");
    print_summary(s);
    if (is_all_devices_spec(device)) print_devices(s);
    if (!json_path->empty()) {
      std::ofstream out(*json_path);
      if (!out) throw UsageError(fmt::format("--json: cannot write '{}'", *json_path));
      out << to_json(s, suite.name, device).dump(1) << "\n";
    }
    ctx.exit_code = s.exit_code();
    if (reports) {
      std::vector<PluginFingerprint> plugins;
      for (const auto& p : loaded_plugins()) plugins.push_back({p.path, p.sha256});
      const ReportMeta meta{suite.name, device, collect_environment(device, std::move(plugins)), identity};
      try {
        reports->finish(s, meta);
      } catch (const ReportError& e) {
        // The verdicts exist but CI cannot read them: never let that pass as success.
        fmt::print(stderr, "pacheck: error: {}\n", e.what());
        ctx.exit_code = kUsage;
        return;
      }
      fmt::print("reports in {}:{}\n", reports->dir(), written_reports(reports->dir()));
    }
  });
}

}  // namespace pacheck::cli
