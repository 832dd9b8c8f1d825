// pacheck verify DIR: checks a report directory someone else produced (on hardware the kernel author may
// not have) against the evidence.json its run wrote: file hashes, the suite's cells, the plugin, the
// negative controls on that device, the self-test. docs/VALIDATING.md walks through the exchange.
#include <fmt/format.h>

#include <filesystem>

#include "cli/common.hpp"
#include "core/digest.hpp"
#include "core/files.hpp"
#include "interop/casefiles.hpp"
#include "interop/manifest.hpp"
#include "verify/verify.hpp"

namespace pacheck::cli {

namespace {

/// --cases DIR as verify takes it: DIR/manifest.json's SHA-256 and its cells as the score judged them.
/// Throws UsageError naming --cases when the manifest cannot be read or parsed.
ScoredExport read_scored_export(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "manifest.json").string();
  try {
    const std::string text = read_regular_file(path, kManifestLimit);
    return {dir, sha256_of(text), manifest_suite(parse_manifest(text, path), path)};
  } catch (const FileError& e) {
    throw UsageError(fmt::format("--cases: cannot read {} (is '{}' a directory written by pacheck export?)", e.what(), dir));
  } catch (const CaseFilesError& e) {
    throw UsageError(fmt::format("--cases: {}", e.what()));
  }
}

}  // namespace

void add_verify_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand(
      "verify", "check a report directory another machine produced: file hashes, suite cells, plugin SHA-256, "
                "negative controls caught on its device, self-test (exit codes 10-18 per failure: docs/VALIDATING.md)");
  auto req = std::make_shared<VerifyRequest>();
  cmd->add_option("dir", req->dir,
                  "report directory of a finished `pacheck run --report-dir` or `pacheck score --report-dir` (with its "
                  "evidence.json)")
      ->required();
  cmd->add_option("--suite,-s", req->suite,
                  "the suite the run must be of, resolved by this pacheck (default: the suite the evidence names)");
  auto cases = std::make_shared<std::string>();
  cmd->add_option("--cases", *cases,
                  "for the evidence of `pacheck score`: your copy of the export it scored (`pacheck export --out` DIR); "
                  "its cells stand in for a suite's")
      ->check(CLI::Validator(
          [](const std::string& v) { return v.empty() ? std::string("an empty directory name") : std::string(); },
          "DIR", "not empty"));
  cmd->add_option("--plugin", req->plugin, "the plugin library the run must have loaded (compared by SHA-256)");
  cmd->add_option("--device-expect", req->device_expect,
                  "text the run's device description must contain (\"NVIDIA H200\", \"driver 13.0\")")
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v.empty() ? std::string("an empty text is in every description (an unset variable?)") : std::string();
          },
          "TEXT", "not empty"));
  cmd->add_flag("--require-pass", req->require_pass,
                "also exit 18 when the evidence verifies but the run failed a cell: for a CI gate on the kernel, "
                "not only on the evidence (without it the failed count is reported and the exit code is 0)");
  cmd->callback([&ctx, req, cases] {
    if (!cases->empty()) req->cases = read_scored_export(*cases);
    const VerifyOutcome out = verify_report_dir(*req);
    if (out.code == kVerified) fmt::print("{}\n", out.line);
    else fmt::print(stderr, "pacheck: {}\n", out.line);
    ctx.exit_code = out.code;
  });
}

}  // namespace pacheck::cli
