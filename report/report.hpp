// The report stage: a finished run (RunSummary) written in the formats people and CI systems read.
//
// Quick start: adding a report format
//   1. Create report/NAME.cpp with a class deriving from ReportFormat (below) and its factory
//        std::unique_ptr<ReportFormat> make_NAME_format(std::ostream& out, const FormatOptions& options);
//      run_ended() writes the document; run_started() and cell_finished() are for formats that stream.
//      A format that only writes a document at the end is a function: return
//      std::make_unique<DocumentFormat>(out, write_NAME).
//      Use report/text.hpp for the outcome line (headline(): what the exit code means for this run, the
//      counts and which negative controls ran, never your own wording, so no format claims a control that
//      did not run), numbers (metric_text, judge/metric_text.hpp, which text.hpp includes: it spells a NaN or
//      Inf output as every format and figure does), repro
//      commands and the run's checks, and cell_outcome() (judge/summary.hpp) for what passes and fails, so
//      every format agrees with the exit code.
//   2. Add one row to format_table() in report/report.cpp (name, file name in a report directory or
//      nullptr, one-line description, factory), and the factory's declaration to the list above it.
//   That is all: --format NAME, `pacheck list formats`, --report-dir, `pacheck merge` and the closing
//   "reports in DIR: ..." line all iterate the table. report/CMakeLists.txt compiles every report/*.cpp.
//   Test it in tests/test_reports.cpp through render_format("NAME", ...), parsing what it writes (the tests
//   that every format states the controls and spells NaN/Inf alike iterate the table: they cover it already).
//
// Files: report.cpp (the table), text (shared wording), environment, run_identity, results_log
// (results.jsonl), report_dir (--report-dir), merge (merge, load_report), and NAME.cpp for each format of the
// table (html.cpp is the page of report/html_report.hpp, whose figures are the earlier stage figures/;
// bench_results.cpp reads the bench results it maps). evidence.json and `pacheck verify` are the later
// stage verify/.
#pragma once

#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/version.hpp"  // pacheck_version(): every report names the pacheck that wrote it
#include "exec/runner.hpp"
#include "report/environment.hpp"

namespace pacheck {

/// A report directory or report file that cannot be read, written or combined. what() names the path.
struct ReportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// What a run tells its formats before the first cell: enough for a reader to know what runs.
struct RunStart {
  /// One line: "pacheck 0.1.0 | suite gate (48 cells) | device cpu | kernels: cpu.reference cpu.vector_v".
  std::string title;
  /// Further lines about the run, in order ("resuming DIR: 12 finished cells in results.jsonl are not run
  /// again").
  std::vector<std::string> notes;
  /// The kernels of the run that are negative controls: a format that streams its rows lists their cells
  /// only where text.hpp's listed_as_row says (a result whose verdict is not_run or that carries
  /// expected_fail is a control's whether named here or not).
  std::vector<std::string> negative_controls;
  /// Where every cell's result is kept ("rep/results.jsonl and rep/report.json", "out.json"), for the line
  /// that says where the cells a format counts instead of listing are; empty when the run keeps none.
  std::string results_in;
};

/// A place in a suite file: a path as the suite was loaded and a 1-based line (0: unknown).
struct CellSource {
  std::string file;
  int line = 0;
};

/// Everything a report says besides the results.
struct ReportMeta {
  std::string suite;         ///< suite name; distinct names joined by "," in a merged report
  std::string device;        ///< device spec(s), likewise
  Environment environment;   ///< of this run (the first input's in a merged report)
  nlohmann::json run;        ///< run_identity() of this run (null where there is none: `pacheck score`)
  nlohmann::json merged_from = nlohmann::json::array();  ///< merged reports: [{source, run, environment}]
  /// Where each cell of the suite is written, by CellResult::index (SuiteCell::file and line): the github
  /// format's annotations carry it. Empty where it is not known (`score`, a report read back, a merge).
  std::vector<CellSource> cell_sources;
};

/// SuiteCell::file and line of every cell of `suite`, in order: ReportMeta::cell_sources.
std::vector<CellSource> cell_sources_of(const Suite& suite);

/// Options a command line passes to the format it prints.
struct FormatOptions {
  bool only_failures = false;  ///< --only-failures: console rows of cells that did not pass only
  /// --quiet: console rows of failing cells only (cell_outcome failed or missed: not the caught cells of
  /// negative controls), then the summary and the failure list.
  bool quiet = false;
  /// --color: the console writes each row's and failure line's verdict in ANSI SGR colour by its
  /// cell_outcome (passed and caught green, failed and missed red, declined yellow), padding kept.
  bool color = false;
};

/// A report format: a few callbacks a run makes, in this order, from one thread at a time. Cells a resumed
/// run does not rerun reach cell_finished() never, run_ended() always (its summary holds every result).
class ReportFormat {
 public:
  virtual ~ReportFormat() = default;
  /// Before the first cell. Default: nothing.
  virtual void run_started(const RunStart& run);
  /// One cell of one kernel finished. `pacheck run` and `score` call it in plan order (kernel-major, suite
  /// order: RunOptions::on_result_in_order), whatever the thread count. Default: nothing.
  virtual void cell_finished(const CellResult& r);
  /// The run ended: `s` holds every result in suite order, kernel-major (only the finished ones when
  /// `s.stopped`: the console says so; the commands give a stopped run to no other format). Writes the format's document (or
  /// what is left of it) to the stream the format was made with; the caller checks that stream.
  virtual void run_ended(const RunSummary& s, const ReportMeta& meta) = 0;
  /// Whether run_ended reads meta.environment: collecting it opens the device, which a format that does not
  /// print it spares the run (Catch2's reporter preferences play this role).
  virtual bool needs_environment() const { return true; }
};

/// A format that writes one document when the run ends and nothing before: `write(out, s, meta)` (json,
/// junit, markdown and html are this).
class DocumentFormat : public ReportFormat {
 public:
  using Write = void (*)(std::ostream& out, const RunSummary& s, const ReportMeta& meta);
  DocumentFormat(std::ostream& out, Write write) : out_(out), write_(write) {}
  void run_ended(const RunSummary& s, const ReportMeta& meta) override { write_(out_, s, meta); }

 private:
  std::ostream& out_;
  Write write_;
};

/// Makes a format writing to `out` (which must outlive it).
using FormatFactory = std::unique_ptr<ReportFormat>(std::ostream& out, const FormatOptions& options);

/// One row of the table of report formats.
struct FormatInfo {
  const char* name;         ///< what --format takes and `pacheck list formats` prints: "junit"
  const char* file;         ///< its file in a report directory ("junit.xml"); nullptr: stdout only
  const char* description;  ///< one line for `pacheck list formats`
  FormatFactory* make;
};

/// Every report format, in the order `pacheck list formats` prints them and the closing "reports in DIR:"
/// line names their files (report/report.cpp).
std::span<const FormatInfo> format_table();
/// The row named `name`, or nullptr.
const FormatInfo* find_format(const std::string& name);
/// "console, json, junit, ...": the names in table order, for messages and option help.
std::string format_names();
/// The format --format prints when not given: "console".
inline constexpr const char* kDefaultFormat = "console";

/// Files of a report directory besides the formats' own: results.jsonl, one line per finished cell appended
/// as it finishes (report/results_log.hpp), and run.json, the run's identity (report/run_identity.hpp),
/// written first and checked by --resume.
inline constexpr const char* kResultsLogFile = "results.jsonl";
inline constexpr const char* kRunFile = "run.json";

/// The document `format` writes for a finished run (run_ended alone), as text: what a report directory
/// holds under its file name, and what tests parse. Throws std::invalid_argument for an unknown name.
std::string render_format(const std::string& format, const RunSummary& s, const ReportMeta& meta);

}  // namespace pacheck
