// A report directory (--report-dir, `pacheck merge --out`): results.jsonl and run.json (report/report.hpp's
// kResultsLogFile, kRunFile), then, when the run ends, the file of every format of the table that has one
// (report.json, junit.xml, summary.md, report.html), each written to a temporary file renamed into place.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/report.hpp"

namespace pacheck {

/// The format whose file marks a finished run: it is written last, and load_report tells an unfinished
/// run (results.jsonl but no report.json) by its absence.
inline constexpr const char* kFinishedFormat = "json";

/// Writes `text` to `path` through a temporary file (`path`.tmp) renamed into place: a reader (or a run
/// killed while writing) never sees half a file under the final name. Throws ReportError naming the file.
void write_atomically(const std::string& path, const std::string& text);

/// "report.json, junit.xml, summary.md and report.html": the format files of a report directory, in table
/// order, as prose (option help).
std::string format_files_prose();
/// "reports in DIR: results.jsonl report.json junit.xml summary.md report.html": the report files present
/// in `dir`, results.jsonl first, then the format files in table order (the closing line of run and merge).
std::string reports_line(const std::string& dir);

/// A report directory being written by a run. Not thread-safe: run_suite's on_result already serialises
/// calls to append().
class ReportDir {
 public:
  /// Starts a fresh run in `dir` (created if absent): removes the reports of any earlier run there and
  /// writes run.json. Throws ReportError when `dir` cannot be created or written.
  static ReportDir start(const std::string& dir, const nlohmann::json& run);
  /// Continues the run in `dir`: reads results.jsonl (dropping a torn last line from the file too) and
  /// checks that run.json equals `run`. Throws ReportError when there is no run.json, when it differs
  /// (naming the fields), or when results.jsonl is malformed.
  static ReportDir resume(const std::string& dir, const nlohmann::json& run);

  ReportDir(ReportDir&&) noexcept;
  ReportDir& operator=(ReportDir&&) noexcept;
  ~ReportDir();

  /// Results already in results.jsonl when resumed (empty for a fresh run).
  const std::vector<CellResult>& previous() const { return previous_; }
  /// Appends one line to results.jsonl with a single write(2) to a file opened O_APPEND, so a killed run
  /// keeps every line it finished (the kernel's page cache holds it; no fsync: a killed process, not a
  /// lost machine, is the case this guards). Never throws (it runs on worker threads); a failure is kept
  /// and thrown by finish().
  void append(const CellResult& r);
  /// Writes the file of every format that has one (report.json last). Throws ReportError for any write
  /// failure, including an earlier append() failure.
  void finish(const RunSummary& s, const ReportMeta& meta);
  const std::string& dir() const { return dir_; }

 private:
  ReportDir(std::string dir, int fd);
  std::string dir_;
  int fd_ = -1;
  std::vector<CellResult> previous_;
  std::string append_error_;
};

/// Writes results.jsonl holding every result, run.json and every format's file into `dir` (used by merge,
/// which has no run in progress). Throws ReportError.
void write_reports(const std::string& dir, const RunSummary& s, const ReportMeta& meta);

}  // namespace pacheck
