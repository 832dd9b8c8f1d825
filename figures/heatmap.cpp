// report.html's heat maps: their layout and drawing (shared with figure 4) and figure 3, a heat map per suite
// and kernel of the margin (rel_linf / limit) per shape x length.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "figures/parts.hpp"
#include "judge/verdict.hpp"  // has_output

namespace pacheck::html {

using svg::escape;
using svg::Rgb;

namespace {
constexpr double kHeatRowFont = 11, kHeatColFont = 10.5, kHeatAxisFont = 12, kHeatTitleFont = 13;
constexpr double kHeatGap = 24, kHeatMargin = 4;  // between panels; after the last one

/// The column axis title of a column group: `axis` alone when the map is one group, else with the
/// columns it shows ("context length (tokens): columns 31-60 of 75").
std::string group_axis(const std::string& axis, std::size_t first, std::size_t count, std::size_t n) {
  if (count == n) return axis;
  return fmt::format("{}: columns {}\xE2\x80\x93{} of {}", axis, first + 1, first + count, n);
}

/// One panel's width over columns [first, first + count): its cells, the last column label's reach past
/// them (rotated or centred), at least its titles, and the gap after it.
double panel_width(const std::vector<std::string>& cols, std::size_t first, std::size_t count, double cw, bool rotate,
                   double title_w) {
  double reach = 0;
  const double n = static_cast<double>(count);
  for (std::size_t c = 0; c < count; ++c) {
    const double tw = svg::text_width(cols[first + c], kHeatColFont);
    reach = std::max(reach, (static_cast<double>(c) + 0.5 - n) * cw + (rotate ? tw * 0.71 : tw / 2));
  }
  return std::max(cw * n + reach, title_w) + kHeatGap;
}
}  // namespace

HeatLayout layout_heat(const std::vector<std::string>& panels, const std::vector<std::string>& rows,
                       const std::vector<std::string>& cols, const std::string& row_axis, const std::string& col_axis,
                       double cell_w, double cell_h, double min_cell_w) {
  HeatLayout l;
  l.cell_h = cell_h;
  for (const auto& r : rows) l.row_text_w = std::max(l.row_text_w, svg::text_width(r, kHeatRowFont));
  l.row_text_w = std::min(l.row_text_w, kMaxRowLabelPx);
  l.label_w = std::max(l.row_text_w, svg::text_width(row_axis, kHeatAxisFont, true)) + 24;
  double widest_col = 0;
  for (const auto& c : cols) widest_col = std::max(widest_col, svg::text_width(c, kHeatColFont));
  const std::size_t n = cols.size();
  double title_w = svg::text_width(col_axis, kHeatAxisFont, true);
  for (const auto& p : panels) title_w = std::max(title_w, svg::text_width(p, kHeatTitleFont, true));
  auto fits = [&](double cw, std::size_t count) {
    for (std::size_t first = 0; first < n; first += count)
      if (l.label_w + panel_width(cols, first, std::min(count, n - first), cw, widest_col > cw - 4, title_w) - kHeatGap + kHeatMargin >
          kPageWidth)
        return false;
    return true;
  };
  l.cell_w = cell_w;
  while (l.cell_w > min_cell_w && !fits(l.cell_w, n)) l.cell_w = std::max(min_cell_w, l.cell_w - 1);
  l.rotate = widest_col > l.cell_w - 4;
  // Too wide even so: the columns wrap into groups, each drawn under the last with the row labels again and
  // its columns named on its axis title (the longest such title counted).
  l.group_cols = std::max<std::size_t>(1, n);
  if (!fits(l.cell_w, n)) {
    title_w = std::max(title_w, svg::text_width(group_axis(col_axis, n, n - 1, n + 1), kHeatAxisFont, true));
    while (l.group_cols > 1 && !fits(l.cell_w, l.group_cols)) --l.group_cols;
  }
  l.groups = n == 0 ? 1 : (n + l.group_cols - 1) / l.group_cols;
  l.header_h = 20 /* panel title */ + 16 /* axis title */ + (l.rotate ? widest_col * 0.71 + 10 : 16);
  for (std::size_t first = 0; first < std::max<std::size_t>(n, 1); first += l.group_cols)
    l.slot_w = std::max(l.slot_w, panel_width(cols, first, std::min(l.group_cols, n - first), l.cell_w, l.rotate, title_w));
  l.per_block = std::max<std::size_t>(1, static_cast<std::size_t>((kPageWidth - l.label_w + kHeatGap - kHeatMargin) / l.slot_w));
  l.blocks = (panels.size() + l.per_block - 1) / l.per_block;
  l.block_h = l.header_h + cell_h * static_cast<double>(rows.size()) + 16;
  l.width = l.label_w + static_cast<double>(std::min(l.per_block, panels.size())) * l.slot_w - kHeatGap + kHeatMargin;
  l.height = static_cast<double>(l.groups * l.blocks) * l.block_h;
  return l;
}

namespace {
/// The row labels of one block, its grid's top at `grid_top`.
void heat_row_labels(svg::Writer& w, const HeatLayout& l, double btop, double grid_top, const std::vector<std::string>& rows,
                     const std::string& row_axis) {
  w.open("g", {{"class", "axis y-axis"}, {"data-categories", std::to_string(rows.size())}});
  w.text(8, btop + 30, row_axis, "start", {{"class", "axis-label"}});
  for (std::size_t r = 0; r < rows.size(); ++r)
    fitted_text(w, l.label_w - 8, grid_top + l.cell_h * static_cast<double>(r) + l.cell_h / 2 + 4, rows[r], l.row_text_w, 11,
                false, "end", {{"class", "row-label"}});
  w.close();
}

/// One heat-map cell at (x, y): empty (a pale square) or its fill, outline, text and hover title.
void heat_cell(svg::Writer& w, const HeatLayout& l, double x, double y, const std::optional<HeatCell>& hc) {
  if (!hc) {
    w.rect(x + 0.5, y + 0.5, l.cell_w - 1, l.cell_h - 1, {{"fill", "#f5f5f5"}});
    return;
  }
  svg::Attrs g = {{"class", "cell"}};
  if (!hc->series.empty()) g.push_back({"data-series", hc->series});
  w.open("g", g);
  w.title(hc->title);
  svg::Attrs fill = {{"class", "fill"}, {"fill", hc->fill}, {"stroke", hc->outline ? "#000" : "none"}, {"stroke-width", hc->outline ? "2.5" : "0"}};
  if (hc->outline && !hc->outline_series.empty()) fill.push_back({"data-series", hc->outline_series});
  w.rect(x + 0.5, y + 0.5, l.cell_w - 1, l.cell_h - 1, fill);
  w.text(x + l.cell_w / 2, y + l.cell_h / 2 + 4, hc->text, "middle", {{"class", "mark"}, {"fill", hc->text_colour.hex()}});
  w.close();
}
}  // namespace

void heat_panels(svg::Writer& w, const HeatLayout& l, double top, const std::vector<std::string>& panels,
                 const std::vector<std::string>& rows, const std::vector<std::string>& cols, const std::string& row_axis,
                 const std::string& col_axis, const HeatCellAt& cell) {
  const double cell_w = l.cell_w, cell_h = l.cell_h;
  for (std::size_t g = 0; g < l.groups; ++g) {
    const std::size_t first = g * l.group_cols, count = std::min(l.group_cols, cols.size() - std::min(first, cols.size()));
    const std::string axis = group_axis(col_axis, first, count, cols.size());
    for (std::size_t b = 0; b < l.blocks; ++b) {
      const double btop = top + static_cast<double>(g * l.blocks + b) * l.block_h;
      const double grid_top = btop + l.header_h;
      heat_row_labels(w, l, btop, grid_top, rows, row_axis);
      for (std::size_t p = b * l.per_block; p < std::min(panels.size(), (b + 1) * l.per_block); ++p) {
        const double px = l.label_w + static_cast<double>(p - b * l.per_block) * l.slot_w;
        w.open("g", {{"class", "panel"}, {"data-panel", panels[p]}});
        w.text(px, btop + 14, panels[p], "start", {{"class", "panel-title"}});
        w.open("g", {{"class", "axis x-axis"}, {"data-categories", std::to_string(count)}});
        w.text(px, btop + 30, axis, "start", {{"class", "axis-label"}});
        for (std::size_t c = 0; c < count; ++c) {
          const double cx = px + cell_w * (static_cast<double>(c) + 0.5), ty = grid_top - 5;
          if (l.rotate)
            w.text(cx, ty, cols[first + c], "start",
                   {{"class", "col-label"}, {"transform", fmt::format("rotate(-45 {} {})", svg::num(cx), svg::num(ty))}});
          else
            w.text(cx, ty, cols[first + c], "middle", {{"class", "col-label"}});
        }
        w.close();
        for (std::size_t r = 0; r < rows.size(); ++r)
          for (std::size_t c = 0; c < count; ++c)
            heat_cell(w, l, px + cell_w * static_cast<double>(c), grid_top + cell_h * static_cast<double>(r), cell(p, r, first + c));
        w.close();
      }
    }
  }
}

std::vector<std::string> length_columns(const std::vector<std::pair<int, std::string>>& lens) {
  std::vector<std::pair<int, std::string>> v = lens;
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  std::vector<std::string> out;
  for (const auto& [n, s] : v) out.push_back(s);
  return out;
}

namespace {

constexpr const char* kHatchId = "hatch-nonfinite";

/// One heat-map cell of figure 3: the worst finite margin of a kernel's cells of one shape and length, and
/// whether any was non-finite or failed.
struct MarginAcc {
  double worst = -1;
  bool nonfinite = false, failed = false;
  int n = 0;
  std::string worst_cell;
};

/// One suite's margins: per kernel, shape and length, from its cells with an output.
struct SuiteMargins {
  std::map<std::string, MarginAcc> acc;  ///< kernel \n shape \n ctx
  std::vector<std::string> shapes;       ///< first appearance
  std::vector<std::pair<int, std::string>> lens;
  std::vector<const CellInfo*> in;
};

SuiteMargins gather_margins(const RunSummary& s, const std::string& suite, const std::vector<CellInfo>& cells) {
  SuiteMargins m;
  for (const auto& c : cells) {
    if (c.r->suite != suite || !has_output(c.r->verdict)) continue;
    m.in.push_back(&c);
    if (std::find(m.shapes.begin(), m.shapes.end(), c.shape) == m.shapes.end()) m.shapes.push_back(c.shape);
    m.lens.push_back({c.length, c.ctx});
    MarginAcc& a = m.acc[c.r->kernel + '\n' + c.shape + '\n' + c.ctx];
    ++a.n;
    if (!std::isfinite(c.r->margin)) a.nonfinite = true;
    else if (c.r->margin > a.worst) a.worst = c.r->margin, a.worst_cell = c.r->cell_id;
    if (cell_outcome(s, *c.r) == CellOutcome::failed) a.failed = true;
  }
  return m;
}

/// The legend beside the colour bar: the hatched and outlined cells, when the map has any.
std::vector<LegendEntry> margin_legend(const SuiteMargins& m, const std::string& hatch) {
  bool any_nonfinite = false, any_failed = false;
  for (const auto& [key, a] : m.acc) {
    any_nonfinite = any_nonfinite || (a.worst < 0 && a.nonfinite);
    any_failed = any_failed || a.failed;
  }
  std::vector<LegendEntry> legend;
  if (any_nonfinite)
    legend.push_back({"nonfinite", "NaN/Inf output", [hatch](svg::Writer& w, double x, double y) {
                        w.rect(x, y, 26, 14, {{"fill", hatch}, {"stroke", "#888"}});
                      }});
  if (any_failed)
    legend.push_back({"failed", "failed (over the limit)", [](svg::Writer& w, double x, double y) {
                        w.rect(x, y, 26, 14, {{"fill", svg::viridis(1).hex()}, {"stroke", "#000"}, {"stroke-width", "2.5"}});
                      }});
  return legend;
}

/// The heat-map cell of `a`: viridis by the worst margin (hatched NaN when every cell there was
/// non-finite), outlined when one failed, its hover title naming the worst cell.
HeatCell margin_cell(const MarginAcc& a, const std::string& kernel, const std::string& shape, const std::string& col,
                     const std::string& hatch) {
  HeatCell hc;
  if (a.worst < 0 && a.nonfinite) {
    hc.fill = hatch;
    hc.text = "NaN";
    hc.text_colour = {17, 17, 17};
    hc.series = "nonfinite";
  } else {
    const Rgb colour = svg::viridis(std::min(a.worst, 1.0));
    hc.fill = colour.hex();
    hc.text = a.worst >= 10 ? ">10" : fmt::format("{:.2f}", a.worst);
    if (a.nonfinite) hc.text += "*";
    hc.text_colour = svg::text_on(colour);
  }
  hc.outline = a.failed;
  if (a.failed) hc.outline_series = "failed";
  hc.title = fmt::format("{} | {} ctx{}\nworst margin {} over {} cell(s){}{}\n{}", kernel, shape, col,
                         a.worst < 0 ? "-" : fmt::format("{:.3f}", a.worst), a.n,
                         a.nonfinite ? "; some gave NaN/Inf (*)" : "", a.failed ? "; FAILED" : "", a.worst_cell);
  return hc;
}

/// The margin heat map of one suite (its <h3> and SVG, and a note when shapes were left out); "" when no
/// cell of the suite has an output.
std::string margin_suite(const RunSummary& s, const std::string& suite, const std::vector<CellInfo>& cells) {
  SuiteMargins m = gather_margins(s, suite, cells);
  if (m.in.empty()) return "";
  const std::vector<std::string> cols = length_columns(m.lens);
  std::vector<std::string> col_text;
  for (const auto& c : cols) col_text.push_back(abbreviate(ctx_label(c), 10.5, 150));
  const std::vector<std::string> kernels = kernels_in(s, m.in);
  constexpr std::size_t kMaxShapes = 80;
  std::string note;
  if (m.shapes.size() > kMaxShapes) {
    note = fmt::format("{} of {} shapes shown. ", kMaxShapes, m.shapes.size());
    m.shapes.resize(kMaxShapes);
  }
  const std::string row_axis = "shape (heads, head size, block, dtype)", col_axis = "context length (tokens)";
  // Cell text is at most "0.12*" or "NaN" in 10 px bold: 36 px holds it.
  const HeatLayout l = layout_heat(kernels, m.shapes, col_text, row_axis, col_axis, 58, 20, 36);
  const std::string hatch = fmt::format("url(#{}-{})", kHatchId, suite);
  const std::vector<LegendEntry> legend = margin_legend(m, hatch);
  const double bar_w = 260, bar_right = 12 + bar_w + 40;
  const double width = std::max(l.width, bar_right + 10);
  // Beside the colour bar when the entries fit there, else on lines below it.
  const bool beside = legend_height(legend, bar_right, width) <= 20;
  const double legend_h = 56 + (beside ? 0 : legend_height(legend, 12, width));
  svg::Writer w(width, legend_h + l.height, std::string(html_ids::kMargin) + "-" + suite,
                fmt::format("Margin (rel_linf / limit) per shape and context length, suite {}", suite),
                "Heat map per kernel: rows are shapes, columns context lengths; colour is the worst margin over the "
                "cell's poison cases and seeds (viridis, 0 to 1 = the limit).");
  w.open("defs");
  w.open("pattern", {{"id", std::string(kHatchId) + "-" + suite}, {"width", "6"}, {"height", "6"}, {"patternUnits", "userSpaceOnUse"},
                     {"patternTransform", "rotate(45)"}});
  w.rect(0, 0, 6, 6, {{"fill", "#ffffff"}});
  w.line(0, 0, 0, 6, {{"stroke", "#999"}, {"stroke-width", "3"}});
  w.close();
  w.close();
  svg::colour_bar(w, 12, 22, bar_w, 12, 0, 1, [](double t) { return svg::viridis(t); },
                  {{0, "0"}, {0.25, "0.25"}, {0.5, "0.5"}, {0.75, "0.75"}, {1, "1 = limit"}},
                  "margin = rel_linf / limit (unitless)");
  if (beside) draw_legend(w, legend, bar_right, 20, width);
  else draw_legend(w, legend, 12, 56, width);
  heat_panels(w, l, legend_h, kernels, m.shapes, col_text, row_axis, col_axis,
              [&](std::size_t p, std::size_t r, std::size_t c) -> std::optional<HeatCell> {
                auto it = m.acc.find(kernels[p] + '\n' + m.shapes[r] + '\n' + cols[c]);
                if (it == m.acc.end()) return std::nullopt;
                return margin_cell(it->second, kernels[p], m.shapes[r], cols[c], hatch);
              });
  std::string out = fmt::format("<h3>Suite {}</h3>\n", escape(suite)) + chart(w);
  if (!note.empty()) out += "<p class=\"note\">" + escape(note) + "</p>";
  return out;
}

}  // namespace

std::string margin_figure(const RunSummary& s, const std::vector<CellInfo>& cells) {
  std::string body;
  bool any = false;
  for (const auto& suite : suites_in(cells)) {
    const std::string part = margin_suite(s, suite, cells);
    if (part.empty()) continue;
    any = true;
    body += part;
  }
  if (!any) body = "<p class=\"note\">No cell with an output in this report: nothing to map.</p>";
  return figure(html_ids::kMargin, "3. Margin to the tolerance limit, per shape and length", body,
                "<b>Margin heat map.</b> Per suite and kernel: rows are shapes (heads, head size, block size, dtype), columns "
                "the context length in tokens; each cell is the worst margin = rel_linf / limit over its poison cases and seeds "
                "(unitless; 1 is the limit). <b>Good:</b> dark cells everywhere, with no trend along a row \xE2\x80\x94 a "
                "kernel with headroom sits well under 0.5. Yellow means the error uses most of its allowance; a black-outlined "
                "cell failed; a hatched <i>NaN</i> cell (or a value marked *) produced non-finite output for some poison "
                "case \xE2\x80\x94 the fault matrix says which.");
}

}  // namespace pacheck::html
