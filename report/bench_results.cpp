// Reading `pacheck bench --json` results for report.html's figure 4 (figures/bench.cpp draws it).
#include <fmt/format.h>

#include "report/html_report.hpp"
#include "report/json.hpp"

namespace pacheck {

BenchTable bench_from_json(const nlohmann::json& j) {
  BenchTable t;
  try {
    t.suite = j.value("suite", std::string());
    t.device = j.value("device", std::string());
    for (const auto& row : j.at("rows")) {
      BenchCaseRow r;
      r.case_id = row.at("case").get<std::string>();
      if (row.contains("kernels"))
        for (const auto& k : row.at("kernels")) {
          BenchTimingRow kt;
          kt.kernel = k.at("kernel").get<std::string>();
          kt.ran = k.value("ran", false);
          kt.note = k.value("note", std::string());
          kt.verdict = k.value("verdict", std::string("pass"));
          kt.median_us = k.value("median_us", 0.0);
          kt.p10_us = k.value("p10_us", 0.0);
          kt.p90_us = k.value("p90_us", 0.0);
          kt.rel_linf = k.value("rel_linf", 0.0);
          r.kernels.push_back(std::move(kt));
        }
      if (row.contains("ratio") && row["ratio"].is_number()) r.ratio = row["ratio"].get<double>();
      t.rows.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw ReportError(fmt::format("malformed bench results (expected `pacheck bench --json` output): {}", e.what()));
  }
  return t;
}

BenchTable load_bench(const std::string& path) {
  std::string text;
  try {
    text = read_regular_file(path, kReportJsonLimit);
  } catch (const FileError& e) {
    throw ReportError(fmt::format("cannot read bench results {}", e.what()));
  }
  try {
    return bench_from_json(nlohmann::json::parse(text));
  } catch (const nlohmann::json::parse_error& e) {
    throw ReportError(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  } catch (const ReportError& e) {
    throw ReportError(fmt::format("{}: {}", path, e.what()));
  }
}

}  // namespace pacheck
