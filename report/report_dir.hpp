// A report directory (--report-dir, `pacheck merge --out`): results.jsonl and run.json (report/report.hpp's
// kResultsLogFile, kRunFile), then, when the run ends, the file of every format of the table that has one
// (report.json, junit.xml, summary.md, report.html), each written to a temporary file renamed into place.
// `pacheck run` writes evidence.json (kEvidenceFile, verify/evidence.hpp) after them, while it still holds the
// directory's lock; the directory removes an earlier run's before anything else.
// No file is ever written through a symbolic link: a file replaced (the reports, run.json, a fresh
// results.jsonl) replaces a link planted at its name, and results.jsonl continued by --resume must be the
// directory's own regular file. A run holds the directory's lock (kLockFile) from start to end.
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/report.hpp"

namespace pacheck {

/// The format whose file marks a finished run: it is written last, and load_report tells an unfinished
/// run (results.jsonl but no report.json) by its absence.
inline constexpr const char* kFinishedFormat = "json";

/// The evidence manifest of a finished run's directory (verify/evidence.hpp writes it, `pacheck verify`
/// reads it; not manifest.json: that is an export's case list). A run or merge into the directory removes
/// an earlier one first: it must never outlive the files it lists.
inline constexpr const char* kEvidenceFile = "evidence.json";

/// The lock file of a report directory: a run (or merge) holds a POSIX write lock (fcntl F_SETLK) on it while it
/// writes there,
/// and writes its pid into it, so a second run into the same directory fails at once naming the holder.
inline constexpr const char* kLockFile = ".pacheck.lock";

/// Writes `text` to `path` through a new temporary file beside it, renamed into place (core/files.hpp's
/// write_file_atomically): a reader (or a run killed while writing) never sees half a file under the final
/// name, and a symbolic link at `path` is replaced, never written through. Throws ReportError naming the
/// file and the errno text.
void write_atomically(const std::string& path, const std::string& text);

/// The lock on report directory `dir` (kLockFile, created if absent, never through a link), held until
/// destroyed. The lock belongs to this process only (a record lock: the children a run forks do not inherit
/// it), and the kernel releases it when the process ends, however it ends, so a killed run never leaves a
/// stale lock, even while a child it forked is still exiting. One per process and directory (closing a
/// second descriptor of the file would release a record lock). Not copyable.
class ReportDirLock {
 public:
  /// Takes the lock without waiting. Throws ReportError "report directory 'DIR' is in use by another
  /// pacheck run (pid N); wait for it to finish or write into another directory" when another process holds
  /// it, or naming the lock file and errno when it cannot be created.
  explicit ReportDirLock(const std::string& dir);
  ReportDirLock(ReportDirLock&& o) noexcept;
  ReportDirLock& operator=(ReportDirLock&& o) noexcept;
  ReportDirLock(const ReportDirLock&) = delete;
  ReportDirLock& operator=(const ReportDirLock&) = delete;
  ~ReportDirLock();

 private:
  int fd_ = -1;
};

/// What --resume does with the lines of results.jsonl, given the run's plan: lines of cells the plan does
/// not hold are dropped (from the file too) and listed; a second line for one cell is an error.
struct ResumePlan {
  /// Whether (kernel, cell id) is a cell of the run being resumed.
  std::function<bool(const std::string& kernel, const std::string& cell_id)> planned;
};

/// DIR/NAME as a path string: the file `name` of the report directory `dir`. Inline, so the readers of
/// report-directory files (verify) need nothing else of report_dir.cpp.
inline std::string path_in(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

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
  /// Starts a fresh run in `dir` (created if absent): takes its lock, removes the reports of any earlier
  /// run there (a symbolic link at a report's name is removed, its target left alone), creates a new
  /// results.jsonl and writes run.json. Throws ReportError when `dir` cannot be created or written, or when
  /// another run holds its lock (before anything in it is changed).
  static ReportDir start(const std::string& dir, const nlohmann::json& run);
  /// Continues the run in `dir`: checks that run.json equals `run`, reads results.jsonl and checks each
  /// line against `plan`: a line whose cell the plan does not hold is dropped and listed in dropped(); a
  /// torn last line is dropped; the file is rewritten without them. Throws ReportError when there is no
  /// run.json, when it differs (naming the fields), when results.jsonl is a symbolic link or not a regular
  /// file, when a line is malformed (naming its number), or when two lines hold the same cell (naming both:
  /// one of them is not this run's, and which cannot be told).
  static ReportDir resume(const std::string& dir, const nlohmann::json& run, const ResumePlan& plan);

  ReportDir(ReportDir&&) noexcept;
  ReportDir& operator=(ReportDir&&) noexcept;
  ~ReportDir();

  /// Results already in results.jsonl when resumed (empty for a fresh run): one per planned cell at most.
  const std::vector<CellResult>& previous() const { return previous_; }
  /// Lines of results.jsonl dropped by resume() because the plan holds no such cell, as "line N: KERNEL
  /// 'CELL ID'", in file order.
  const std::vector<std::string>& dropped() const { return dropped_; }
  /// Appends one line to results.jsonl with a single write(2) to a file opened O_APPEND, so a killed run
  /// keeps every line it finished (the kernel's page cache holds it; no fsync: a killed process, not a
  /// lost machine, is the case this guards). Never throws (it runs on worker threads); a failure is kept
  /// and thrown by finish().
  void append(const CellResult& r);
  /// Writes the file of every format that has one (report.json last). Throws ReportError for any write
  /// failure, including an earlier append() failure. The caller writes evidence.json after it
  /// (verify/evidence.hpp's write_evidence), before this ReportDir (and its lock) goes.
  void finish(const RunSummary& s, const ReportMeta& meta);
  const std::string& dir() const { return dir_; }
  /// Why an append() failed ("cannot append to 'DIR/results.jsonl': No space left on device"); empty while
  /// none has. A stopped run, which never calls finish(), reports it from here.
  const std::string& append_error() const { return append_error_; }

 private:
  ReportDir(std::string dir, ReportDirLock lock, int fd);
  std::string dir_;
  ReportDirLock lock_;
  int fd_ = -1;
  std::vector<CellResult> previous_;
  std::vector<std::string> dropped_;
  std::string append_error_;
};

/// Writes results.jsonl holding every result, run.json and every format's file into `dir` (used by merge,
/// which has no run in progress), holding the directory's lock while it writes. Throws ReportError.
void write_reports(const std::string& dir, const RunSummary& s, const ReportMeta& meta);

}  // namespace pacheck
