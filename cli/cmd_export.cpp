// pacheck export: a suite's kernel inputs as safetensors case files plus manifest.json, for kernels written
// in Python, Triton or any language pacheck cannot call (interop/casefiles.hpp describes the format).
#include <fmt/format.h>

#include <algorithm>

#include "cli/common.hpp"
#include "interop/casefiles.hpp"
#include "interop/safetensors.hpp"

namespace pacheck::cli {

namespace {

/// Why an export left its MLA cells out, for the summary line: " (a format_version 4 export carries no latent
/// cache; format_version 5 added it)", from the reason of its manifest's left_out entry.
std::string mla_left_out(const ExportSummary& s) {
  for (const auto& l : left_out_kinds(s))
    if (l.kind == "mla") return fmt::format(" ({})", l.reason.substr(l.reason.find(": ") + 2));
  return {};
}

}  // namespace

void add_export_command(CLI::App& app, Context& ctx) {
  auto* cmd = app.add_subcommand("export", "write a suite's kernel inputs as safetensors case files for a foreign runner");
  struct Opts {
    std::string suite = "gate", out, layout, filter;
    std::string seed;
    int threads = 0;
    int format_version = kManifestFormatVersion;
    MemoryFlag memory;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--suite,-s", o->suite, "suite name (suites/NAME.toml) or path to a suite file")->capture_default_str();
  cmd->add_option("--out,-o", o->out, "directory to write manifest.json and the case files into")->required();
  cmd->add_option("--kernel-layout", o->layout,
                  "layout the foreign kernel reads (vllm, nhd, hnd, aiter): unpinned cells use it, cells pinned to "
                  "another layout (or that it cannot hold: aiter needs block_size % 16 == 0) are skipped (default: "
                  "vllm, as `run` resolves them)");
  cmd->add_option("--filter,-f", o->filter, "only cells whose id matches this regular expression");
  auto* seed_flag = cmd->add_option("--seed", o->seed, "override every cell's seed (0 to 2^64-1, as in a cell id)");
  cmd->add_option("--threads,-j", o->threads,
                  "cases generated and written at once (default: all cores); the files and manifest are the same "
                  "for every value")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--format-version", o->format_version,
                  fmt::format("the manifest's format_version, {} to {}: {} leaves MLA cells out (counted), for a runner "
                              "that reads up to {}", kOldestExportFormatVersion, kManifestFormatVersion,
                              kOldestExportFormatVersion, kOldestExportFormatVersion))
      ->capture_default_str();
  o->memory.bind(cmd);
  cmd->callback([&ctx, o, seed_flag] {
    ExportOptions eo;
    if (!o->layout.empty()) {
      try {
        eo.kernel_layout = parse_layout(o->layout);
      } catch (const std::invalid_argument&) {
        throw UsageError(fmt::format("--kernel-layout: '{}' is not vllm, nhd, hnd or aiter", o->layout));
      }
    }
    if (!o->filter.empty()) {
      try {
        eo.filter = std::regex(o->filter);
      } catch (const std::regex_error& e) {
        throw UsageError(fmt::format("--filter: '{}' is not a valid regular expression: {}", o->filter, e.what()));
      }
    }
    eo.seed = parse_seed_flag(o->seed, seed_flag->count() > 0);
    eo.threads = o->threads;
    eo.format_version = o->format_version;  // export_cases refuses one it cannot write, naming the flag
    const Suite suite = load_suite_flag(o->suite);
    const MemoryBudget budget = o->memory.budget();
    // --threads cases at a time, without an oracle: the largest case's estimate times that against the budget.
    eo.preflight = [&](const std::vector<Cell>& cells) {
      RunOptions threads;
      threads.threads = o->threads;
      const int concurrent = std::max(1, std::min<int>(worker_threads(threads), static_cast<int>(cells.size())));
      MemoryPlan m;
      for (const auto& cell : cells) {
        MemoryEstimate e = estimate_case_memory(cell.c);
        e.oracle = 0;
        if (m.cell_id.empty() || e.total() > m.per_case.total()) m = {cell.id(), e, concurrent, cells.size()};
      }
      check_memory(m, budget);
    };
    ExportSummary s;
    try {
      s = export_cases(suite, o->out, eo);
    } catch (const CaseFilesError& e) {
      throw UsageError(e.what());
    } catch (const SafetensorsError& e) {
      throw UsageError(e.what());
    }
    if (s.cells == 0) {
      const int left_out = s.skipped_layout + s.skipped_dtype + s.skipped_high_ids + s.skipped_mla;
      if (left_out == 0)
        throw UsageError(o->filter.empty()
                             ? fmt::format("export: suite {} has no cell", suite.name)
                             : fmt::format("--filter: '{}' matches none of the {} cells of suite '{}' (ids look like '{}')",
                                           o->filter, suite.cells.size(), suite.name,
                                           suite.cells.empty() ? "" : suite.cells.front().cell.id()));
      throw UsageError(fmt::format("export: none of the {} selected cells of suite {} can be written as case files "
                                   "({} pinned to another layout or not valid in it, {} of an untagged dtype, {} with high "
                                   "block ids, {} MLA cells{}): run them with `pacheck run` or the Python module",
                                   left_out, suite.name, s.skipped_layout, s.skipped_dtype, s.skipped_high_ids,
                                   s.skipped_mla, s.skipped_mla ? mla_left_out(s) : ""));
    }
    std::string skipped;
    if (s.skipped_layout) skipped += fmt::format(", skipped {} cells pinned to another layout or not valid in it", s.skipped_layout);
    if (s.skipped_dtype) skipped += fmt::format(", skipped {} cells of a dtype safetensors cannot tag", s.skipped_dtype);
    if (s.skipped_high_ids)
      skipped += fmt::format(", left out {} cells with high block ids (their pools of 2^31 elements and more are "
                             "not written to case files)",
                             s.skipped_high_ids);
    if (s.skipped_mla) skipped += fmt::format(", left out {} MLA cells{}", s.skipped_mla, mla_left_out(s));
    fmt::print("exported {} cells of suite {} as {} case files ({} clean baselines for the invariance check) in "
               "format_version {}{} -> {}\n",
               s.cells, suite.name, s.files, s.baselines, s.format_version, skipped, s.manifest);
    ctx.exit_code = kPass;
  });
}

}  // namespace pacheck::cli
