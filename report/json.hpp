// The json format: the run as JSON, for `--json FILE`, report.json of a report directory and `--format
// json` on stdout; and the JSON text helpers every report-directory file shares.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/files.hpp"
#include "report/report.hpp"
#include "report/report_read.hpp"

namespace pacheck {

/// The whole run (`pacheck score --json FILE`, `--format json`): {"pacheck": version, "suite", "device", "exit_code",
/// "summary": {passed, failed, declined, caught, not_run, blind, vacuous, verdicts, meaning (exit_meaning),
/// negative_controls: {caught, blind, not_exercised (control names), cells: {caught, missed, not_run},
/// statement (controls_statement)}}, "selftest": {passed, lines},
/// "kernels": [{kernel, passed, ..., vacuous, verdicts}...], "results": [to_json(CellResult)...]}. `verdicts`
/// maps every verdict name of verdict_table() to its count of cells (0 included). A non-finite metric is
/// null (JSON has none), read back as +inf; the result's metrics.nan and metrics.inf counts say which.
nlohmann::json to_json(const RunSummary& s, const std::string& suite, const std::string& device);
/// report.json and `pacheck run --json FILE`: to_json(RunSummary) with "environment" (the fingerprint of
/// report/environment.hpp), "run" and (merged reports) "merged_from" added.
nlohmann::json report_json(const RunSummary& s, const ReportMeta& meta);

/// `j` as text (`indent` as nlohmann's dump()). Bytes that are not valid UTF-8 (plugin messages and device
/// strings may hold them, on which a plain dump() throws) are written as U+FFFD.
/// Inline, so report/results_log.cpp needs nothing else of this file (the results.jsonl fuzz target).
inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}
/// The most a report JSON file (report.json, run.json, a --json file, bench results) may hold when read.
inline constexpr ReadLimit kReportJsonLimit{std::uint64_t{1} << 30, "a report JSON file"};

/// Parses the JSON file `path`. Throws ReportError naming it when it cannot be read, is not a regular file,
/// is over kReportJsonLimit (core/files.hpp's read_regular_file) or is not JSON (report_read.hpp's
/// parse_json_text).
nlohmann::json read_json_file(const std::string& path);

}  // namespace pacheck
