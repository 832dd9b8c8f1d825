// results.jsonl: one line per finished cell, appended and flushed as each cell finishes, so a run that is
// killed keeps every cell it finished and --resume continues from it. Not a ReportFormat: it is written
// while the run goes (report/report_dir.hpp appends to it), not once at its end.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/files.hpp"
#include "exec/runner.hpp"

namespace pacheck {

/// One line of results.jsonl: to_json(CellResult) on one line, newline-terminated.
std::string results_line(const CellResult& r);

/// results.jsonl as read back.
struct ResultsLog {
  std::vector<CellResult> results;  ///< every complete line, in file order
  std::vector<int> line_numbers;     ///< results[i]'s line in the file (1-based)
  std::vector<std::string> lines;    ///< results[i]'s line as read, newline included
  std::size_t valid_bytes = 0;      ///< bytes up to and including the last complete line
  bool torn_tail = false;           ///< bytes after the last newline (a write cut short by a kill) were dropped
};
/// The most results.jsonl may hold when read back (--resume): a line is about 1 KiB per cell.
inline constexpr ReadLimit kResultsLogLimit{std::uint64_t{1} << 30, "results.jsonl"};

/// Reads results.jsonl. A last line without its newline is dropped (torn_tail); any other malformed line
/// throws ReportError naming the file and line number. A missing file reads as empty; a symbolic link, a
/// file that is not regular or one over kResultsLogLimit throws ReportError (core/files.hpp's reason).
ResultsLog read_results_jsonl(const std::string& path);
/// Parses the text of results.jsonl as read_results_jsonl does (`path` names the file in messages only):
/// a last line without its newline is dropped (torn_tail), an empty line is skipped, and any other line
/// that is not one cell result (judge/result.hpp's JSON) throws ReportError "PATH:LINE: malformed result
/// line: REASON". Throws nothing else.
ResultsLog parse_results_jsonl(const std::string& text, const std::string& path);

}  // namespace pacheck
