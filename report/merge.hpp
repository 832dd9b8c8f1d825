// Reading finished reports back and combining several (the shards of a CI matrix, or runs of different
// suites) into one run, judged as a single run would be: `pacheck merge`, `pacheck report`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "report/report.hpp"
#include "report/report_read.hpp"  // summary_from_report

namespace pacheck {

/// Reads a report: `path` is a report directory (its report.json) or a report JSON file (report.json, or
/// `pacheck run --json` output). Throws ReportError naming the path when it is missing or malformed; a
/// directory with results.jsonl but no report.json is an unfinished run and says so.
nlohmann::json load_report(const std::string& path);

/// The path of the report JSON file load_report(path) reads: DIR/report.json for a directory, else `path`.
std::string report_file_of(const std::string& path);

/// One report to merge and where it came from (for messages and "merged_from").
struct MergeInput {
  std::string source;
  nlohmann::json report;
};

/// Combines reports (shards of one run, or runs of different suites) into one: results are the union,
/// kernels in first-seen order, ordered kernel-major by suite position as a single run orders them, and
/// re-judged with summarize(); the self-test passes only if it passed in every input. Throws ReportError
/// when two inputs hold different verdicts for the same cell, when the same shard appears twice, or when
/// the shards of a run are incomplete (shards 0 and 2 of 3 without 1: merging them would drop cells
/// silently).
std::pair<RunSummary, ReportMeta> merge_reports(const std::vector<MergeInput>& inputs);

/// `report` with every timing removed (cells' "seconds"), for comparing two runs of the same cells.
nlohmann::json without_timings(nlohmann::json report);

}  // namespace pacheck
