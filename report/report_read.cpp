#include "report/report_read.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <set>
#include <vector>

#include "report/json.hpp"

namespace pacheck {

nlohmann::json parse_json_text(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ReportError(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  }
}

std::string json_reason(const nlohmann::json::exception& e) {
  const std::string why = e.what();
  const auto at = why.find("] ");
  return why.rfind("[json.exception.", 0) == 0 && at != std::string::npos ? why.substr(at + 2) : why;
}

Environment environment_from_json(const nlohmann::json& j) {
  Environment e;
  if (!j.is_object()) return e;
  auto s = [&](const char* k) { return j.value(k, std::string()); };
  e.pacheck_version = s("pacheck_version");
  e.git_commit = s("git_commit");
  e.build_type = s("build_type");
  e.compiler = s("compiler");
  e.host = s("host");
  e.device = s("device");
  e.device_name = s("device_name");
  e.arch = s("arch");
  e.driver = s("driver");
  e.runtime = s("runtime");
  e.device_description = s("device_description");
  if (j.contains("plugins") && j["plugins"].is_array())
    for (const auto& p : j["plugins"]) e.plugins.push_back({p.value("path", ""), p.value("sha256", "")});
  return e;
}

std::pair<RunSummary, ReportMeta> summary_from_report(const nlohmann::json& report, const std::string& source) {
  if (!report.is_object())
    throw ReportError(fmt::format("{}: not a pacheck report: a JSON {}, not an object (a report.json, or the file of "
                                  "`pacheck run --json`)",
                                  source, report.type_name()));
  RunSummary s;
  ReportMeta meta;
  try {
    meta.suite = report.at("suite").get<std::string>();
    meta.device = report.at("device").get<std::string>();
    if (report.contains("environment")) meta.environment = environment_from_json(report["environment"]);
    meta.run = report.value("run", nlohmann::json::object());
    if (report.contains("merged_from")) meta.merged_from = report["merged_from"];
    const auto& st = report.at("selftest");
    s.selftest.passed = st.at("passed").get<bool>();
    s.selftest.lines = st.at("lines").get<std::vector<std::string>>();
    s.judge_flags = report.value("judge_flags", std::string());  // absent in reports from before it
    for (const auto& r : report.at("results")) s.results.push_back(cell_result_from_json(r));
    std::vector<KernelRole> roles;
    std::set<std::string> names;
    for (const auto& k : report.at("kernels")) {
      roles.push_back({k.at("kernel").get<std::string>(), k.at("negative_control").get<std::string>() != "-"});
      if (!names.insert(roles.back().name).second)
        throw std::runtime_error(fmt::format("kernels lists '{}' twice", roles.back().name));
    }
    // summarize() counts a result under its kernel: one of no listed kernel would be shown but never counted.
    for (std::size_t i = 0; i < s.results.size(); ++i)
      if (!names.count(s.results[i].kernel))
        throw std::runtime_error(
            fmt::format("results[{}] is of kernel '{}', which kernels does not list", i, s.results[i].kernel));
    if (meta.run.is_object() && meta.run.contains("shard")) s.shard = meta.run["shard"].value("count", 1) > 1;
    summarize(s, roles);
  } catch (const nlohmann::json::exception& e) {
    throw ReportError(fmt::format("{}: malformed report: {}", source, json_reason(e)));
  } catch (const std::exception& e) {
    // runtime_error from the checks above and cell_result_from_json, invalid_argument for an unknown verdict.
    throw ReportError(fmt::format("{}: malformed report: {}", source, e.what()));
  }
  return {std::move(s), std::move(meta)};
}

void check_same_run(const nlohmann::json& before, const nlohmann::json& run, const std::string& run_path) {
  if (!before.is_object())
    throw ReportError(fmt::format("--resume: {}: not a run pacheck wrote (a JSON {}, not an object naming the suite, "
                                  "kernels, device and options): nothing to resume; start afresh with --report-dir",
                                  run_path, before.type_name()));
  if (before == run) return;
  std::vector<std::string> diff;
  for (const auto& [k, v] : run.items())
    if (!before.contains(k) || before[k] != v)
      diff.push_back(
          fmt::format("{} was {}, now {}", k, before.contains(k) ? json_text(before[k]) : "absent", json_text(v)));
  for (const auto& [k, v] : before.items())
    if (!run.contains(k)) diff.push_back(fmt::format("{} was {}, now absent", k, json_text(v)));
  std::string why;
  for (const auto& d : diff) why += (why.empty() ? "" : "; ") + d;
  throw ReportError(fmt::format(
      "--resume: '{}' holds a different run ({}); give the same suite, kernels, plugin builds, device and options",
      std::filesystem::path(run_path).parent_path().string(), why));
}

}  // namespace pacheck
