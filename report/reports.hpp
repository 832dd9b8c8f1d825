// Reports CI systems read, written into a report directory (--report-dir):
//   results.jsonl  one line per finished cell, appended and flushed as each cell finishes, so a run that is
//                  killed keeps every cell it finished (--resume continues from it);
//   run.json       what identifies the run (suite, kernels, device, options that decide verdicts, shard),
//                  written first, checked by --resume;
//   report.json    the run summary and every cell's metrics, with the environment fingerprint;
//   junit.xml      one testcase per cell and kernel, for CI test-report viewers;
//   summary.md     a Markdown table for a pull-request comment;
//   report.html    the same run as figures, one self-contained page (report/html_report.hpp).
// Also: `pacheck merge` of several report directories (shards) into one.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/runner.hpp"

namespace pacheck {

/// A report directory or report file that cannot be read, written or combined. what() names the path.
struct ReportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A plugin library as the fingerprint records it.
struct PluginFingerprint {
  std::string path;    ///< as loaded
  std::string sha256;  ///< of the library file, 64 lower-case hex digits
};

/// Where a run's evidence came from: enough to tie results run on someone else's machine to a build.
struct Environment {
  std::string pacheck_version;     ///< "0.1.0"
  std::string git_commit;          ///< short hash of the build's checkout, "-dirty" if tracked files differed; "unknown" outside a checkout
  std::string build_type;          ///< CMAKE_BUILD_TYPE of the build
  std::string compiler;            ///< "gcc 12.2.0", "clang 16.0.6 ..."
  std::string host;                ///< uname: "Linux 6.1.0-18-amd64 x86_64"
  std::string device;              ///< device spec: "cpu", "cuda:0"
  std::string device_name;         ///< "NVIDIA H200", or the CPU model
  std::string arch;                ///< "sm_90", "gfx1100"; the machine architecture ("x86_64") for the CPU
  std::string driver;              ///< GPU driver version ("" on the CPU)
  std::string runtime;             ///< GPU runtime version ("" on the CPU)
  std::string device_description;  ///< Backend::description() verbatim
  std::vector<PluginFingerprint> plugins;
};

/// Collects the fingerprint of this build and of `device_spec`, opening the device to describe it. Call
/// it after isolated children have finished (a GPU context must not exist in the parent while it forks).
/// Never throws: a device that cannot be opened leaves device_name saying why.
Environment collect_environment(const std::string& device_spec, std::vector<PluginFingerprint> plugins = {});
/// Fills device_name, arch, driver and runtime of `env` from a Backend::description() such as
/// "NVIDIA H200 sm_90, 132 SMs, 139.8 GiB, driver 13.0, runtime 13.0" (CPU: the model; arch = uname -m).
void parse_device_description(Environment& env, const std::string& description);
nlohmann::json to_json(const Environment& env);
/// Reads to_json(Environment); missing keys read as "" (reports from older builds).
Environment environment_from_json(const nlohmann::json& j);

/// What identifies a run for --resume and merge: suite (name and cell count), kernels (names, in order),
/// device, the options that decide verdicts (filter, seed, tolerance, multiple, oracle precision) and the
/// shard {index, count}. `filter` is the regex text as given ("" for none).
nlohmann::json run_identity(const Suite& suite, const std::vector<std::string>& kernels, const std::string& device,
                            const RunOptions& opt, const std::string& filter);

/// Everything a report says besides the results.
struct ReportMeta {
  std::string suite;         ///< suite name; distinct names joined by "," in a merged report
  std::string device;        ///< device spec(s), likewise
  Environment environment;   ///< of this run (the first input's in a merged report)
  nlohmann::json run;        ///< run_identity() of this run
  nlohmann::json merged_from = nlohmann::json::array();  ///< merged reports: [{source, run, environment}]
};

/// report.json: to_json(RunSummary) with "environment", "run" and (merged reports) "merged_from" added.
nlohmann::json report_json(const RunSummary& s, const ReportMeta& meta);
/// junit.xml: <testsuites> with one <testsuite> per suite and kernel (properties carry the environment),
/// one <testcase> per cell: <failure type="VERDICT"> for a wrong output, <error type="VERDICT"> for
/// error/crash/timeout, <skipped> for declined, each carrying the verdict, detail and metrics; plus a
/// "pacheck.checks" testsuite with the comparator self-test, each negative control and each kernel's
/// "ran at least one cell" check, so the file fails exactly when the exit code is not 0.
std::string junit_xml(const RunSummary& s, const ReportMeta& meta);
/// summary.md: outcome and exit code, a table per suite and kernel (passed/failed/declined, negative
/// control), the comparator self-test, the worst cells (failures first, else closest to the limit) and
/// the environment.
std::string summary_markdown(const RunSummary& s, const ReportMeta& meta);

/// results.jsonl as read back.
struct ResultsLog {
  std::vector<CellResult> results;  ///< every complete line, in file order
  std::size_t valid_bytes = 0;      ///< bytes up to and including the last complete line
  bool torn_tail = false;           ///< bytes after the last newline (a write cut short by a kill) were dropped
};
/// Reads results.jsonl. A last line without its newline is dropped (torn_tail); any other malformed line
/// throws ReportError naming the file and line number. A missing file reads as empty.
ResultsLog read_results_jsonl(const std::string& path);

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
  /// Writes report.json, junit.xml, summary.md and report.html (each to a temporary file renamed into place, so a
  /// reader never sees half a report). Throws ReportError for any write failure, including an earlier
  /// append() failure.
  void finish(const RunSummary& s, const ReportMeta& meta);
  const std::string& dir() const { return dir_; }

 private:
  ReportDir(std::string dir, int fd);
  std::string dir_;
  int fd_ = -1;
  std::vector<CellResult> previous_;
  std::string append_error_;
};

/// Writes report.json, junit.xml, summary.md and a results.jsonl holding every result into `dir`
/// (used by merge, which has no run in progress). Throws ReportError.
void write_reports(const std::string& dir, const RunSummary& s, const ReportMeta& meta);

/// Reads a report: `path` is a report directory (its report.json) or a report JSON file (report.json, or
/// `pacheck run --json` output). Throws ReportError naming the path when it is missing or malformed; a
/// directory with results.jsonl but no report.json is an unfinished run and says so.
nlohmann::json load_report(const std::string& path);

/// The summary and metadata of a report.json (results, kernels, self-test), re-judged with summarize().
std::pair<RunSummary, ReportMeta> summary_from_report(const nlohmann::json& report);

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
