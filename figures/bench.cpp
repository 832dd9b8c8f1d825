// report.html figure 4: with `pacheck bench --json` results, the A/B time-ratio heat map, both times in each
// cell's hover title (seed 000, figure 1). report/html_report.hpp's load_bench reads those results.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/case.hpp"
#include "figures/parts.hpp"

namespace pacheck {
namespace html {

using svg::escape;
using svg::Rgb;

namespace {

/// The case id without its lengths, seed and layout (the row of figure 4); `ctx` gets the lengths' text and
/// `length` the longest sequence (0 when the id does not parse).
std::string shape_of_case_id(const std::string& case_id, std::string* ctx, int* length) {
  std::vector<std::string> keep;
  for (const auto& t : split_spaces(case_id)) {
    if (is_layout_token(t) || t.rfind("seed", 0) == 0) continue;
    if (t.rfind("ctx", 0) == 0) {
      *ctx = t.substr(3);
      continue;
    }
    keep.push_back(t);
  }
  *length = 0;
  try {
    const Case c = parse_case_id(case_id);
    for (int n : c.seq_lens) *length = std::max(*length, n);
  } catch (const std::exception&) {
  }
  return join(keep, " ");
}

}  // namespace

std::string bench_figure(const BenchTable* bench) {
  const std::string how =
      "Time two kernels with <code>pacheck bench --kernel A --kernel B --json bench.json</code> and render with "
      "<code>pacheck report DIR --bench bench.json</code>.";
  if (!bench)
    return fmt::format("<section id=\"{}\"><h2>4. A/B time ratio</h2><p class=\"note\">No bench results given. {}</p></section>\n",
                       html_ids::kBenchRatio, how);
  std::string a, b;
  for (const auto& row : bench->rows)
    if (row.kernels.size() == 2) {
      a = row.kernels[0].kernel;
      b = row.kernels[1].kernel;
      break;
    }
  if (a.empty())
    return fmt::format("<section id=\"{}\"><h2>4. A/B time ratio</h2><p class=\"note\">The bench results time one kernel: there "
                       "is no A/B ratio to map. {}</p></section>\n",
                       html_ids::kBenchRatio, how);
  std::vector<std::string> shapes;
  std::vector<std::pair<int, std::string>> lens;
  std::map<std::string, const BenchCaseRow*> at;
  double max_dev = 2;
  for (const auto& row : bench->rows) {
    std::string ctx;
    int len = 0;
    const std::string shape = shape_of_case_id(row.case_id, &ctx, &len);
    if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) shapes.push_back(shape);
    lens.push_back({len, ctx});
    at.emplace(shape + '\n' + ctx, &row);
    if (row.ratio && *row.ratio > 0) max_dev = std::max(max_dev, std::max(*row.ratio, 1 / *row.ratio));
  }
  const std::vector<std::string> cols = length_columns(lens);
  // Symmetric in log(ratio), so 2x faster and 2x slower get equally strong colours.
  const double lmax = std::log(max_dev);
  const double legend_h = 58;
  const std::string panel = fmt::format("A = {},  B = {}", a, b);
  const std::string row_axis = "shape (heads, head size, block, dtype)", col_axis = "context length (tokens)";
  std::vector<std::string> col_text;
  for (const auto& c : cols) col_text.push_back(abbreviate(ctx_label(c), 10.5, 150));
  // Cell text is at most "12.34x!" in 10 px bold: 48 px holds it.
  const HeatLayout l = layout_heat({panel}, shapes, col_text, row_axis, col_axis, 64, 24, 48);
  svg::Writer w(std::max(l.width, 560.0), legend_h + l.height, std::string(html_ids::kBenchRatio) + "-svg",
                fmt::format("Time ratio {} / {} per shape and context length", a, b),
                "Heat map: rows are shapes, columns context lengths; each cell is time(A) / time(B), purple when B is "
                "faster, orange when A is; hover a cell for both times.");
  std::vector<std::pair<double, std::string>> ticks;
  // The ends first: colour_bar drops a later tick whose label would touch one already placed.
  for (double r : {1 / max_dev, max_dev, 1.0, 0.5, 2.0})
    ticks.push_back({std::log(r) / lmax, fmt::format("{}\xC3\x97", svg::tick_label(std::round(r * 100) / 100))});
  svg::colour_bar(w, 24, 22, 300, 12, -1, 1, [](double t) { return svg::diverging(t); }, ticks,
                  "time(A) / time(B), log scale: above 1 means B is faster");
  heat_panels(
      w, l, legend_h, {panel}, shapes, col_text, row_axis, col_axis,
      [&](std::size_t, std::size_t r, std::size_t c) -> std::optional<HeatCell> {
        auto it = at.find(shapes[r] + '\n' + cols[c]);
        if (it == at.end()) return std::nullopt;
        const BenchCaseRow& row = *it->second;
        HeatCell hc;
        auto timing = [](const BenchTimingRow& t, const char* name) {
          if (!t.ran) return fmt::format("{} {}: did not run ({})", name, t.kernel, t.note);
          return fmt::format("{} {}: {:.2f} us median (p10 {:.2f}, p90 {:.2f}){}", name, t.kernel, t.median_us, t.p10_us, t.p90_us,
                             t.verdict != "pass" ? fmt::format(" WRONG OUTPUT: {}", t.verdict) : "");
        };
        hc.title = row.case_id;
        if (row.kernels.size() > 0) hc.title += "\n" + timing(row.kernels[0], "A");
        if (row.kernels.size() > 1) hc.title += "\n" + timing(row.kernels[1], "B");
        const bool wrong = std::any_of(row.kernels.begin(), row.kernels.end(), [](const BenchTimingRow& t) { return t.ran && t.verdict != "pass"; });
        if (row.ratio && *row.ratio > 0) {
          const Rgb col = svg::diverging(std::log(*row.ratio) / lmax);
          hc.fill = col.hex();
          hc.text_colour = svg::text_on(col);
          hc.text = fmt::format("{:.2f}\xC3\x97", *row.ratio) + (wrong ? "!" : "");
          hc.title += fmt::format("\nratio {:.3f}: {} is faster", *row.ratio, *row.ratio > 1 ? "B" : *row.ratio < 1 ? "A" : "neither");
        } else {
          hc.fill = "#eeeeee";
          hc.text_colour = {85, 85, 85};
          hc.text = "\xE2\x80\x93";
          hc.title += "\nno ratio: a kernel did not run";
        }
        hc.outline = wrong;
        if (wrong) hc.title += "\n! a timed kernel failed its correctness check on this case";
        return hc;
      });
  return figure(html_ids::kBenchRatio, "4. A/B time ratio per shape and context length", chart(w),
                fmt::format("<b>A/B time ratio</b> from <code>pacheck bench</code> on {}: each cell is the median time of A ({}) "
                            "divided by the median time of B ({}), same binary, same inputs; rows are shapes, columns the "
                            "context length in tokens. Purple (above 1) means B is faster, orange (below 1) means A is; hover a "
                            "cell for both times with their p10\xE2\x80\x93p90 spread. <b>Good</b> for a change that proposes "
                            "B: purple in every cell, with no orange cell and no <i>!</i> (a timed kernel whose output was "
                            "wrong \xE2\x80\x94 a fast wrong kernel is not a result).",
                            escape(bench->device), escape(a), escape(b)));
}

}  // namespace html
}  // namespace pacheck
