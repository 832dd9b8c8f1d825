// pacheck report DIR: the run in a report directory (or report JSON file) as one self-contained HTML page
// with figures, optionally with the A/B time ratios of a `pacheck bench --json` file.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "cli/common.hpp"
#include "report/html_report.hpp"
#include "report/merge.hpp"
#include "report/report_dir.hpp"

namespace pacheck::cli {

namespace {
/// Where the page goes without --out: DIR/report.html for a directory, else beside the JSON file with
/// its extension replaced (run.json -> run.html), never over the input.
std::string default_out(const std::string& input) {
  namespace fs = std::filesystem;
  if (fs::is_directory(input)) return (fs::path(input) / "report.html").string();
  fs::path p(input);
  p.replace_extension(".html");
  return p.string();
}
}  // namespace

void add_report_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("report", "render a report directory (or report JSON) as one self-contained HTML page with figures");
  auto input = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto bench = std::make_shared<std::string>();
  cmd->add_option("dir", *input, "report directory written by --report-dir or merge, or a report JSON file (run --json)")->required();
  cmd->add_option("--out,-o", *out, "HTML file to write (default: DIR/report.html, or the JSON file's name with .html)");
  cmd->add_option("--bench", *bench, "bench results (pacheck bench --json FILE) for the A/B time-ratio heat map");
  cmd->callback([&ctx, input, out, bench] {
    std::optional<BenchTable> table;
    std::string html;
    try {
      auto [summary, meta] = summary_from_report(load_report(*input), report_file_of(*input));
      if (!bench->empty()) table = load_bench(*bench);
      html = html_report(summary, meta, table ? &*table : nullptr);
    } catch (const ReportError& e) {
      throw UsageError(e.what());
    }
    const std::string path = out->empty() ? default_out(*input) : *out;
    try {
      write_atomically(path, html);  // a browser or CI artifact upload never reads half a page
    } catch (const ReportError& e) {
      throw UsageError(fmt::format("--out: {}", e.what()));
    }
    fmt::print("wrote {} ({} KiB{})\n", path, (html.size() + 1023) / 1024, table ? ", with bench ratios" : "");
    ctx.exit_code = kPass;  // rendering succeeded; the run's own verdict is in the page and its exit code
  });
}

}  // namespace pacheck::cli
