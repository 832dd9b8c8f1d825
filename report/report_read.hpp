// Reading back the JSON files pacheck writes: report.json (`pacheck report`, `merge`) and run.json
// (`run --resume`). In a file of their own, with nothing of the report formats, so the libFuzzer targets of
// tests/fuzz/ compile these readers alone.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "report/report.hpp"

namespace pacheck {

/// Parses `text`, the contents of `path` (named in the message only). Throws ReportError "'PATH' is not valid
/// JSON: REASON" for anything else.
nlohmann::json parse_json_text(const std::string& text, const std::string& path);

/// The reason of a nlohmann::json exception without its "[json.exception.type_error.302] " tag.
std::string json_reason(const nlohmann::json::exception& e);

/// The summary and metadata of a report.json (results, kernels, self-test), re-judged with summarize().
/// Throws ReportError "SOURCE: not a pacheck report: ..." for a JSON value that is not an object, and
/// "SOURCE: malformed report: REASON" for a missing field or a field of the wrong type (`source`: the file).
std::pair<RunSummary, ReportMeta> summary_from_report(const nlohmann::json& report, const std::string& source);

/// The run.json `before` of a report directory (at `run_path`) against the identity `run` of the run that
/// resumes it (report/run_identity.hpp). Throws ReportError "--resume: RUN_PATH: not a run pacheck wrote"
/// when `before` is not a JSON object, and "--resume: 'DIR' holds a different run (FIELD was A, now B; ...)"
/// when they differ. Returns when they are equal.
void check_same_run(const nlohmann::json& before, const nlohmann::json& run, const std::string& run_path);

}  // namespace pacheck
