// The github format: GitHub Actions workflow commands on stdout, which the runner turns into annotations
// on the workflow run and the pull request. One `::error` per failing cell (its verdict, detail, metrics
// and repro command) and per failed run check (blind negative control, failed comparator self-test, a
// kernel that ran no cell), then one `::notice` with the outcome; an `::error` appears exactly when the
// exit code is not 0. GitHub shows at most 10 error annotations per step, so past 9 the rest are counted
// in a 10th. Workflow commands are one line each: messages escape '%', '\r' and '\n' (%25, %0D, %0A), and
// property values (title=) also ':' and ',' (%3A, %2C), as the runner's command parser requires.
// A failing cell's error carries file= and line= where the run knows the suite file's [[cells]] group that
// wrote it (ReportMeta::cell_sources), relative to $GITHUB_WORKSPACE, so GitHub attaches it to that line of
// a suite file in the pull request.
// The notice (text.hpp's headline) says what the exit code means for this run, which negative controls ran,
// and the cells per verdict ("verdicts: 3 variant, 40 pass").
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <ostream>

#include "report/report.hpp"
#include "report/text.hpp"

namespace pacheck {

namespace {

/// A workflow command's message (the text after "::").
std::string escape_data(const std::string& raw) {
  std::string out;
  for (char ch : valid_utf8(raw)) {
    if (ch == '%') out += "%25";
    else if (ch == '\r') out += "%0D";
    else if (ch == '\n') out += "%0A";
    else out += ch;
  }
  return out;
}

/// A workflow command's property value (title=...).
std::string escape_property(const std::string& raw) {
  std::string out;
  for (char ch : escape_data(raw)) {
    if (ch == ':') out += "%3A";
    else if (ch == ',') out += "%2C";
    else out += ch;
  }
  return out;
}

/// One annotation: "::KIND file=FILE,line=LINE,title=TITLE::MESSAGE" (file and line only when known).
struct Annotation {
  std::string title, message;
  CellSource at;
};

/// `file` as an annotation names it: relative to $GITHUB_WORKSPACE (the checkout, where GitHub resolves
/// annotation paths), or else to the working directory, when it lies under it; otherwise as given (a
/// built-in suite outside the checkout: the annotation is listed, but attached to no file of the diff).
std::string annotation_path(const std::string& file) {
  namespace fs = std::filesystem;
  const char* ws = std::getenv("GITHUB_WORKSPACE");
  std::error_code ec;
  const fs::path root = ws && *ws ? fs::path(ws) : fs::current_path(ec);
  const fs::path abs = fs::weakly_canonical(fs::absolute(file, ec), ec);
  if (ec) return file;
  const fs::path rel = abs.lexically_relative(fs::weakly_canonical(root, ec));
  if (ec || rel.empty() || *rel.begin() == "..") return file;
  return rel.generic_string();
}

/// Where the suite writes the cell of `r` (the path as loaded; write() shortens it for the shown
/// annotations only), or {} when the run did not say.
CellSource source_of(const ReportMeta& meta, const CellResult& r) {
  if (r.index < 0 || static_cast<std::size_t>(r.index) >= meta.cell_sources.size()) return {};
  const CellSource& c = meta.cell_sources[static_cast<std::size_t>(r.index)];
  return c.file.empty() || c.line <= 0 ? CellSource{} : c;
}

/// The message of a failing cell: what went wrong, its metrics when it has an output, how to rerun it.
std::string cell_message(const RunSummary& s, const CellResult& r) {
  std::string m = cell_outcome(s, r) == CellOutcome::missed
                      ? "negative control not caught: this cell must fail but passed (instrument blind)"
                      : fmt::format("{}: {}", verdict_name(r.verdict), r.detail);
  if (has_output(r.verdict)) m += "\n" + error_clause(r);
  return m + "\nrepro: " + repro_command(r, s.judge_flags);
}

class GithubFormat : public ReportFormat {
 public:
  explicit GithubFormat(std::ostream& out) : out_(out) {}

  void run_ended(const RunSummary& s, const ReportMeta& meta) override {
    std::vector<Annotation> errors;
    for (const RunCheck& c : run_checks(s))
      if (c.status == RunCheck::Status::failed) errors.push_back({"pacheck: " + c.name, c.message + "\n" + c.text});
    for (const CellResult& r : s.results)
      if (counts_as_failure(s, r))
        errors.push_back({fmt::format("pacheck: {} {}", r.kernel, r.cell_id), cell_message(s, r), source_of(meta, r)});
    constexpr std::size_t kShown = 10;  // GitHub's error annotations per step
    const std::size_t shown = errors.size() <= kShown ? errors.size() : kShown - 1;
    for (std::size_t i = 0; i < shown; ++i) write("error", errors[i]);
    if (shown < errors.size())
      write("error", {fmt::format("pacheck: {} more failures", errors.size() - shown),
                      "not annotated (GitHub shows 10 per step): see junit.xml or report.json, or the `pacheck repro` "
                      "commands in summary.md and report.html"});
    const Headline h = headline(s);
    write("notice", {fmt::format("pacheck {}: {} (exit {})", meta.suite, h.word, h.code),
                     fmt::format("{} on {}: {}\n{}\nverdicts: {}", h.meaning, meta.device, h.counts, h.controls,
                                 verdicts_text(s))});
    out_.flush();
  }

  bool needs_environment() const override { return false; }

 private:
  void write(const char* kind, const Annotation& a) {
    out_ << "::" << kind << " ";
    if (!a.at.file.empty())
      out_ << "file=" << escape_property(annotation_path(a.at.file)) << ",line=" << a.at.line << ",";
    out_ << "title=" << escape_property(a.title) << "::" << escape_data(a.message) << "\n";
  }

  std::ostream& out_;
};

}  // namespace

std::unique_ptr<ReportFormat> make_github_format(std::ostream& out, const FormatOptions&) {
  return std::make_unique<GithubFormat>(out);
}

}  // namespace pacheck
