// report.html: one self-contained page a reviewer of a kernel PR reads instead of a wall of numbers. Inline
// CSS, inline SVG, no script, no font files, no network. The html format of report/report.hpp's table writes
// this page (report/html.cpp): a header with the outcome and per-kernel counts, the four figures of
// figures/figures.hpp (fault matrix, error against context length, margin heat map, A/B time ratio), then
// the environment fingerprint, the comparator self-test, the negative controls and the repro command of
// every failing cell.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "exec/runner.hpp"
#include "figures/figures.hpp"
#include "report/report.hpp"

namespace pacheck {

/// Reads a bench table (`pacheck bench --json` output, figures/figures.hpp's BenchTable). Throws ReportError
/// naming what is missing or malformed.
BenchTable bench_from_json(const nlohmann::json& j);
/// Reads the bench table in the file `path`. Throws ReportError naming the file.
BenchTable load_bench(const std::string& path);

/// The report page for a finished (or merged) run, and `bench` when given (figure 4 is left out, with a
/// note on how to get it, otherwise). Never throws for a well-formed summary: cells whose case id cannot
/// be parsed are left out of the figures but still listed.
std::string html_report(const RunSummary& s, const ReportMeta& meta, const BenchTable* bench = nullptr);

}  // namespace pacheck
