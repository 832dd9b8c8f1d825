// The json format: report.json in a report directory, the document of `--format json`.
#include "report/json.hpp"

#include <fmt/format.h>

#include <ostream>

#include "report/text.hpp"

namespace pacheck {

namespace {
/// {"oob_write": 0, ..., "pass": 40}: every verdict of verdict_table() with its count, 0 included.
nlohmann::json verdict_counts(const std::vector<int>& counts) {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t i = 0; i < verdict_table().size(); ++i)
    j[std::string(verdict_table()[i].name)] = i < counts.size() ? counts[i] : 0;
  return j;
}

/// The summary's "negative_controls": text.hpp's control_facts and controls_statement.
nlohmann::json controls_json(const RunSummary& s) {
  const ControlFacts c = control_facts(s);
  return {{"caught", c.caught},
          {"blind", c.blind},
          {"not_exercised", c.not_exercised},
          {"cells", {{"caught", c.caught_cells}, {"missed", c.missed_cells}, {"not_run", c.not_run_cells}}},
          {"statement", controls_statement(s)}};
}
}  // namespace

nlohmann::json to_json(const RunSummary& s, const std::string& suite, const std::string& device) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto& k : s.kernels)
    kernels.push_back({{"kernel", k.kernel},
                       {"passed", k.passed},
                       {"failed", k.failed},
                       {"declined", k.declined},
                       {"caught", k.caught},
                       {"missed", k.missed},
                       {"not_run", k.not_run},
                       {"negative_control", std::string(control_outcome_name(k.control))},
                       {"vacuous", k.vacuous},
                       {"verdicts", verdict_counts(k.verdicts)}});
  nlohmann::json results = nlohmann::json::array();
  for (const auto& r : s.results) results.push_back(to_json(r));
  return {{"pacheck", pacheck_version()},
          {"suite", suite},
          {"device", device},
          {"exit_code", s.exit_code()},
          {"summary",
           {{"passed", s.passed},
            {"failed", s.failed},
            {"declined", s.declined},
            {"caught", s.caught},
            {"not_run", s.not_run},
            {"blind", s.blind},
            {"vacuous", s.vacuous},
            {"verdicts", verdict_counts(s.verdicts)},
            {"meaning", exit_meaning(s)},
            {"negative_controls", controls_json(s)}}},
          {"selftest", {{"passed", s.selftest.passed}, {"lines", s.selftest.lines}}},
          {"judge_flags", s.judge_flags},
          {"kernels", kernels},
          {"results", results}};
}

nlohmann::json report_json(const RunSummary& s, const ReportMeta& meta) {
  nlohmann::json j = to_json(s, meta.suite, meta.device);
  j["environment"] = to_json(meta.environment);
  j["run"] = meta.run;
  if (!meta.merged_from.empty()) j["merged_from"] = meta.merged_from;
  return j;
}

nlohmann::json read_json_file(const std::string& path) {
  std::string text;
  try {
    text = read_regular_file(path, kReportJsonLimit);
  } catch (const FileError& e) {
    throw ReportError(fmt::format("cannot read {}", e.what()));
  }
  return parse_json_text(text, path);
}

namespace {
/// report_json() with one space of indent, as report.json holds it.
void write_json(std::ostream& out, const RunSummary& s, const ReportMeta& meta) {
  out << json_text(report_json(s, meta), 1) << "\n";
}
}  // namespace

std::unique_ptr<ReportFormat> make_json_format(std::ostream& out, const FormatOptions&) {
  return std::make_unique<DocumentFormat>(out, write_json);
}

}  // namespace pacheck
