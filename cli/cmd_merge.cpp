// pacheck merge: combines the reports of several runs (the shards of a CI matrix) into one report directory,
// judged as one run, with the exit code that run would have had.
#include <fmt/format.h>

#include <filesystem>

#include "cli/common.hpp"
#include "report/merge.hpp"
#include "report/report_dir.hpp"

namespace pacheck::cli {

void add_merge_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand(
      "merge", "combine report directories (e.g. --shard I/N runs) into one; exits as the combined run would");
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out_dir = std::make_shared<std::string>();
  cmd->add_option("inputs", *inputs, "report directories (--report-dir of finished runs) or report.json files")
      ->required();
  cmd->add_option(
         "--out,-o", *out_dir,
         fmt::format("directory to write the merged {}, {}, {}", kResultsLogFile, kRunFile, format_files_prose()))
      ->required();
  cmd->callback([&ctx, inputs, out_dir] {
    // The merged reports must not replace an input's: a later merge of the same shards would find one gone.
    namespace fs = std::filesystem;
    for (const auto& path : *inputs) {
      const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
      std::error_code ec;
      if (fs::exists(*out_dir) && fs::equivalent(dir.empty() ? fs::path(".") : dir, *out_dir, ec) && !ec)
        throw UsageError(fmt::format("--out {}: is the input '{}'; write the merged reports to a new directory", *out_dir, path));
    }
    std::vector<MergeInput> in;
    try {
      for (const auto& path : *inputs) in.push_back({path, load_report(path)});
      const auto [summary, meta] = merge_reports(in);
      write_reports(*out_dir, summary, meta);
      fmt::print("pacheck merge | {} report(s) | suite {} | device {} | {} cells\n", in.size(), meta.suite, meta.device,
                 summary.results.size());
      stdout_format(kDefaultFormat)->run_ended(summary, meta);
      fmt::print("{}\n", reports_line(*out_dir));
      ctx.exit_code = summary.exit_code();
    } catch (const ReportError& e) {
      throw UsageError(e.what());
    }
  });
}

}  // namespace pacheck::cli
