// report.html figure 1, the fault matrix per suite and kernel: cells by poison target x straddling/aligned
// length x dtype x GQA ratio, coloured by verdict and marked with its name (seed 000, figure 4).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "figures/parts.hpp"
#include "judge/metric_text.hpp"  // error_clause

namespace pacheck::html {

using svg::escape;

namespace {

/// The widest a context-length label may be before it is cut (its hover title keeps it whole).
constexpr double kMaxCtxPx = 150;

/// Columns go clean, K, V, K+V, then any other target.
int target_rank(const std::string& t) {
  if (t == "clean") return 0;
  if (t == "K") return 1;
  if (t == "V") return 2;
  if (t == "K+V") return 3;
  return 4;
}

/// One suite's fault matrix: its columns (faults), its rows (suite cells without the fault and layout) in
/// drawing order, their groups, and the result at each (kernel, row, fault).
struct Matrix {
  std::vector<std::pair<std::string, const CellInfo*>> faults;  ///< a column's fault and a cell that has it
  std::vector<const CellInfo*> rows;                            ///< one cell of each row
  std::set<int> head_sizes, block_sizes;
  std::set<std::string> seeds;
  std::vector<std::string> group_order;  ///< groups by first appearance
  std::vector<std::string> kernels;
  std::map<std::string, const CellResult*> at;  ///< kernel \n row \n fault

  /// A row's group: dtype x heads (GQA ratio) always; head size, block size and any other shape option when
  /// they vary.
  std::string group_of(const CellInfo* c) const {
    std::string g = fmt::format("{} \xC2\xB7 {} (GQA {})", c->dtype, c->heads, c->gqa);
    if (head_sizes.size() > 1) g += fmt::format(" d{}", c->head_size);
    if (block_sizes.size() > 1) g += fmt::format(" bs{}", c->block_size);
    const auto toks = split_spaces(c->shape);
    for (std::size_t i = 4; i < toks.size(); ++i)
      if (toks[i].rfind("q=", 0) != 0 && toks[i].rfind("o=", 0) != 0) g += " " + toks[i];
    return g;
  }
  /// Row `i` opens a group (its header line is drawn above it).
  bool opens_group(std::size_t i) const { return i == 0 || group_of(rows[i]) != group_of(rows[i - 1]); }
  /// The result of `kernel` at (row, fault), or nullptr when the suite has no such cell (it is not a full
  /// cross product) or this shard does not hold it.
  const CellResult* result(const std::string& kernel, const CellInfo* row, const std::string& fault) const {
    const auto it = at.find(kernel + '\n' + row->row_key + '\n' + fault);
    return it == at.end() ? nullptr : it->second;
  }
};

/// The matrix of `cells`: columns are faults by target (clean, K, V, K+V), then by first appearance in the
/// suite; rows are grouped by dtype and heads, then ordered by length, context and seed.
Matrix build_matrix(const RunSummary& s, const std::vector<const CellInfo*>& cells) {
  Matrix m;
  for (const CellInfo* c : cells)
    if (std::none_of(m.faults.begin(), m.faults.end(), [&](const auto& f) { return f.first == c->r->fault; }))
      m.faults.push_back({c->r->fault, c});
  std::stable_sort(m.faults.begin(), m.faults.end(),
                   [](const auto& a, const auto& b) { return target_rank(a.second->target) < target_rank(b.second->target); });
  std::map<std::string, const CellInfo*> row_info;
  for (const CellInfo* c : cells) row_info.emplace(c->row_key, c);
  for (const auto& [k, c] : row_info) m.rows.push_back(c);
  for (const CellInfo* c : m.rows) {
    m.head_sizes.insert(c->head_size);
    m.block_sizes.insert(c->block_size);
    m.seeds.insert(c->seed);
  }
  for (const CellInfo* c : cells)
    if (std::find(m.group_order.begin(), m.group_order.end(), m.group_of(c)) == m.group_order.end())
      m.group_order.push_back(m.group_of(c));
  auto rank_of = [&](const std::string& g) { return std::find(m.group_order.begin(), m.group_order.end(), g) - m.group_order.begin(); };
  std::stable_sort(m.rows.begin(), m.rows.end(), [&](const CellInfo* a, const CellInfo* b) {
    const auto ga = rank_of(m.group_of(a)), gb = rank_of(m.group_of(b));
    if (ga != gb) return ga < gb;
    if (a->length != b->length) return a->length < b->length;
    if (a->ctx != b->ctx) return a->ctx < b->ctx;
    return a->seed < b->seed;
  });
  m.kernels = kernels_in(s, cells);
  for (const CellInfo* c : cells) m.at.emplace(c->r->kernel + '\n' + c->row_key + '\n' + c->r->fault, c->r);
  return m;
}

/// A big suite keeps the rows where something did not pass, then passing rows up to the cap, and says so in
/// `note`.
void cap_rows(Matrix& m, const std::string& suite, std::string* note) {
  constexpr std::size_t kMaxRows = 96;
  if (m.rows.size() <= kMaxRows) return;
  auto interesting = [&](const CellInfo* row) {
    for (const auto& k : m.kernels)
      for (const auto& [f, fc] : m.faults)
        if (const CellResult* r = m.result(k, row, f); r && r->verdict != Verdict::pass) return true;
    return false;
  };
  std::vector<const CellInfo*> keep;
  std::size_t budget = kMaxRows;
  for (const CellInfo* r : m.rows)
    if (interesting(r) && budget > 0) keep.push_back(r), --budget;
  const std::size_t left_out_interesting = std::count_if(m.rows.begin(), m.rows.end(), interesting) - keep.size();
  for (const CellInfo* r : m.rows)
    if (!interesting(r) && budget > 0) keep.push_back(r), --budget;
  std::stable_sort(keep.begin(), keep.end(), [&](const CellInfo* a, const CellInfo* b) {
    return std::find(m.rows.begin(), m.rows.end(), a) < std::find(m.rows.begin(), m.rows.end(), b);
  });
  *note += fmt::format("Suite {}: {} of {} rows shown (rows where some cell did not pass come first{}). ", suite, keep.size(),
                       m.rows.size(), left_out_interesting ? fmt::format("; {} such rows left out", left_out_interesting) : "");
  m.rows = keep;
}

constexpr double kRowFont = 11, kColFont = 10.5, kTitleFont = 13, kAxisFont = 12, kMarkFont = 10;

/// Where the matrix's parts go. Rows are grouped by dtype x heads; each group opens with a header line
/// naming it, across the whole width (so a long group name never crowds the label column); the label
/// column holds the context length, the seed when seeds vary, and whether the last block straddles. Panels
/// (one per kernel) sit side by side in blocks as many as fit the page.
struct MatrixLayout {
  double row_h = 18, group_h = 20;
  double ctx_w = 0, seed_w = 0;  ///< label columns: context length, seed (0 when seeds do not vary)
  double label_w = 0;            ///< the whole label column
  double cell_w = 38;
  bool rotate = false;  ///< column headers at 45 degrees
  double slot_w = 0;    ///< one panel with its gap
  std::size_t per_block = 1, blocks = 1;
  double header_h = 0, rows_h = 0;
};

/// The label column's widths of `l` for the rows of `m`.
void layout_labels(const Matrix& m, MatrixLayout& l) {
  l.ctx_w = svg::text_width("context (tokens)", kAxisFont, true);
  for (const CellInfo* r : m.rows) l.ctx_w = std::max(l.ctx_w, svg::text_width(abbreviate(ctx_label(r->ctx), kRowFont, kMaxCtxPx), kRowFont));
  if (m.seeds.size() > 1) {
    l.seed_w = svg::text_width("seed", kAxisFont, true);
    for (const auto& sd : m.seeds) l.seed_w = std::max(l.seed_w, svg::text_width("seed " + sd, kRowFont));
    l.seed_w += 10;
  }
  const double straddle_w = std::max(svg::text_width("straddles", kRowFont), svg::text_width("last block", kAxisFont, true)) + 10;
  l.label_w =
      std::max(10 + l.ctx_w + 10 + l.seed_w + straddle_w, 10 + svg::text_width("rows: dtype \xC2\xB7 heads (GQA)", kAxisFont, true)) + 12;
}

/// The cells' width and whether the column headers turn. Cells: 38 px, narrower (down to what the widest
/// verdict mark present needs) when that keeps one panel inside the page; column headers at 45 degrees once
/// there are more than 6 columns or they are wider than a cell, and then the last header reaches past the
/// grid by its width times cos 45.
void layout_cells(const Matrix& m, const std::vector<const CellInfo*>& cells, MatrixLayout& l) {
  double widest_mark = svg::text_width("ok", kMarkFont, true);
  for (const CellInfo* c : cells) widest_mark = std::max(widest_mark, svg::text_width(style_of(c->r->verdict).mark, kMarkFont, true));
  const double min_cell = std::max(22.0, widest_mark + 5);
  l.rotate = m.faults.size() > 6;
  if (!l.rotate)
    for (const auto& [f, fc] : m.faults)
      l.cell_w = std::max(l.cell_w, std::max(svg::text_width(fc->poison, kColFont), svg::text_width(fc->target, kColFont, true)) + 10);
  if (l.cell_w > 60) {  // headers too wide for a cell: rotate them instead of widening every cell
    l.rotate = true;
    l.cell_w = 38;
  }
  const double n_cols = static_cast<double>(m.faults.size());
  // What one panel takes beside the label column: its cells, the last header's reach past them, a gap.
  auto panel_w = [&](double cw) {
    double reach = 0;  // how far the rotated column headers reach past the last column's right edge
    if (l.rotate)
      for (std::size_t f = 0; f < m.faults.size(); ++f)
        reach = std::max(reach, (static_cast<double>(f) + 0.5 - n_cols) * cw + svg::text_width(m.faults[f].first, kColFont) * 0.71);
    return cw * n_cols + reach + 26;
  };
  while (l.cell_w > min_cell && l.label_w + panel_w(l.cell_w) > kPageWidth) l.cell_w = std::max(min_cell, l.cell_w - 1);
  // A panel's slot is as wide as its cells, its title and its axis title, whichever is widest, so narrow
  // matrices (one fault column) do not run their titles into the next panel.
  double title_w = svg::text_width("poison target : value@region", kAxisFont, true);
  for (const auto& k : m.kernels) title_w = std::max(title_w, svg::text_width(k + "  (negative control)", kTitleFont, true));
  l.slot_w = std::max(panel_w(l.cell_w), title_w + 26);
}

MatrixLayout layout_matrix(const Matrix& m, const std::vector<const CellInfo*>& cells) {
  MatrixLayout l;
  layout_labels(m, l);
  double widest_header = 0;
  for (const auto& [f, fc] : m.faults) widest_header = std::max(widest_header, svg::text_width(f, kColFont));
  layout_cells(m, cells, l);
  l.per_block = std::max<std::size_t>(1, static_cast<std::size_t>((kPageWidth - l.label_w) / l.slot_w));
  l.header_h = (l.rotate ? widest_header * 0.71 + 14 : 34) + 20 /* panel title */ + 18 /* axis title */;
  for (std::size_t i = 0; i < m.rows.size(); ++i) l.rows_h += l.row_h + (m.opens_group(i) ? l.group_h : 0);
  l.blocks = (m.kernels.size() + l.per_block - 1) / l.per_block;
  return l;
}

/// The legend: the verdicts drawn, in a fixed order, and the outline that marks a negative control's
/// expected failures when one is drawn.
std::vector<LegendEntry> matrix_legend(const RunSummary& s, const std::vector<const CellInfo*>& cells) {
  std::set<Verdict> present;
  bool any_expected = false;
  for (const CellInfo* c : cells) {
    present.insert(c->r->verdict);
    any_expected = any_expected || (c->r->expected_fail && is_negative_control(s, c->r->kernel));
  }
  std::vector<LegendEntry> legend;
  for (Verdict v : {Verdict::pass, Verdict::fail, Verdict::biased, Verdict::poisoned, Verdict::overflow, Verdict::variant, Verdict::nondeterministic,
                    Verdict::stateful, Verdict::unwritten, Verdict::oob_write, Verdict::input_mutated, Verdict::declined,
                    Verdict::not_run, Verdict::error, Verdict::crash, Verdict::timeout}) {
    if (!present.count(v)) continue;
    const VerdictStyle st = style_of(v);
    legend.push_back({"verdict-" + std::string(verdict_name(v)), std::string(verdict_name(v)), fill_swatch(st.fill, st.mark)});
  }
  if (any_expected)
    legend.push_back({"expected", "expected to fail (negative control)", [](svg::Writer& w, double x, double y) {
                        w.rect(x, y, 26, 15, {{"fill", "#ffffff"}, {"stroke", "#111"}, {"stroke-width", "1.6"}, {"stroke-dasharray", "3 2"}});
                      }});
  return legend;
}

/// The row labels of a block (the y axis: dtype x heads groups, context length, seed, straddling or
/// aligned), the grid's top at `grid_top`.
void draw_row_labels(svg::Writer& w, const Matrix& m, const MatrixLayout& l, double grid_top, double width) {
  w.open("g", {{"class", "axis y-axis"}, {"data-categories", std::to_string(m.rows.size())}});
  w.text(10, grid_top - 24, "rows: dtype \xC2\xB7 heads (GQA)", "start", {{"class", "axis-label"}});
  const double ctx_x = 10;
  w.text(ctx_x + l.ctx_w, grid_top - 6, "context (tokens)", "end", {{"class", "axis-label"}});
  if (l.seed_w > 0) w.text(ctx_x + l.ctx_w + 10, grid_top - 6, "seed", "start", {{"class", "axis-label"}});
  w.text(ctx_x + l.ctx_w + 10 + l.seed_w, grid_top - 6, "last block", "start", {{"class", "axis-label"}});
  double y = grid_top;
  for (std::size_t i = 0; i < m.rows.size(); ++i) {
    const CellInfo* r = m.rows[i];
    if (m.opens_group(i)) {
      fitted_text(w, 10, y + 15, m.group_of(r), width - 20, kRowFont, true, "start",
                  {{"class", "row-label group-label"}, {"font-weight", "600"}});
      y += l.group_h;
    }
    const std::string ctx = ctx_label(r->ctx);
    fitted_text(w, ctx_x + l.ctx_w, y + 13, ctx, kMaxCtxPx, kRowFont, false, "end", {{"class", "row-label"}});
    if (l.seed_w > 0) w.text(ctx_x + l.ctx_w + 10, y + 13, "seed " + r->seed, "start", {{"class", "row-label"}});
    w.text(ctx_x + l.ctx_w + 10 + l.seed_w, y + 13, r->r->straddle ? "straddles" : "aligned", "start",
           {{"class", "row-label"}, {"font-style", r->r->straddle ? "normal" : "italic"}, {"fill", r->r->straddle ? "#000" : "#555"}});
    y += l.row_h;
  }
  w.close();
}

/// A panel's column headers (the x axis: poison target and value@region).
void draw_column_headers(svg::Writer& w, const Matrix& m, const MatrixLayout& l, double px, double top, double grid_top) {
  w.open("g", {{"class", "axis x-axis"}, {"data-categories", std::to_string(m.faults.size())}});
  w.text(px, top + 32, "poison target : value@region", "start", {{"class", "axis-label"}});
  for (std::size_t f = 0; f < m.faults.size(); ++f) {
    const double cx = px + l.cell_w * (static_cast<double>(f) + 0.5);
    const CellInfo* fc = m.faults[f].second;
    if (l.rotate) {
      const double ty = grid_top - 5;
      w.text(cx, ty, m.faults[f].first, "start",
             {{"class", "col-label"}, {"transform", fmt::format("rotate(-45 {} {})", svg::num(cx), svg::num(ty))}});
    } else {
      w.text(cx, grid_top - 20, fc->target, "middle", {{"class", "col-label"}, {"font-weight", "700"}});
      if (!fc->poison.empty()) w.text(cx, grid_top - 6, fc->poison, "middle", {{"class", "col-label"}});
    }
  }
  w.close();
}

/// One cell of the matrix at (cx, cy): its verdict's fill and mark, a hover title with its id, metrics and
/// detail, and the dashed outline of a negative control's expected failure.
void draw_cell(svg::Writer& w, const MatrixLayout& l, const std::string& kernel, const CellResult& r, bool control,
               double cx, double cy) {
  const VerdictStyle st = style_of(r.verdict);
  const bool expected = r.expected_fail && control;
  w.open("g", {{"class", "cell"}, {"data-verdict", std::string(verdict_name(r.verdict))},
               {"data-series", "verdict-" + std::string(verdict_name(r.verdict))}});
  w.title(fmt::format("{} | {}\nverdict: {}{}\n{}\n{}", kernel, r.cell_id, verdict_name(r.verdict),
                      expected ? (is_failure(r.verdict) ? " (expected: negative control caught)" : " (expected to fail: MISSED)")
                               : "",
                      error_clause(r), r.detail));
  w.rect(cx + 1, cy + 1, l.cell_w - 2, l.row_h - 2,
         {{"class", "fill"}, {"fill", st.fill.hex()}, {"stroke", r.verdict == Verdict::declined || r.verdict == Verdict::not_run ? "#999" : "none"}});
  if (expected)
    w.rect(cx + 2.5, cy + 2.5, l.cell_w - 5, l.row_h - 5,
           {{"fill", "none"}, {"stroke", "#111"}, {"stroke-width", "1.6"}, {"stroke-dasharray", "3 2"}, {"data-series", "expected"}});
  w.text(cx + l.cell_w / 2, cy + 12.5, st.mark, "middle", {{"class", "mark"}, {"fill", svg::text_on(st.fill).hex()}});
  w.close();
}

/// The panel of `kernel` at x = `px`: its title, column headers and cells.
void draw_matrix_panel(svg::Writer& w, const RunSummary& s, const Matrix& m, const MatrixLayout& l,
                       const std::string& kernel, double px, double top, double grid_top) {
  w.open("g", {{"class", "panel"}, {"data-kernel", kernel}});
  const bool control = is_negative_control(s, kernel);
  w.text(px, top + 14, kernel + (control ? "  (negative control)" : ""), "start", {{"class", "panel-title"}});
  draw_column_headers(w, m, l, px, top, grid_top);
  double cy = grid_top;
  for (std::size_t i = 0; i < m.rows.size(); ++i) {
    if (m.opens_group(i)) cy += l.group_h;
    for (std::size_t f = 0; f < m.faults.size(); ++f) {
      const double cx = px + l.cell_w * static_cast<double>(f);
      if (const CellResult* r = m.result(kernel, m.rows[i], m.faults[f].first)) {
        draw_cell(w, l, kernel, *r, control, cx, cy);
        continue;
      }
      // Not a cell of the suite (the suite is not a full cross product) or not in this shard.
      w.rect(cx + 1, cy + 1, l.cell_w - 2, l.row_h - 2, {{"fill", "#f5f5f5"}});
    }
    cy += l.row_h;
  }
  w.close();
}

std::string fault_matrix_svg(const RunSummary& s, const std::string& suite, const std::vector<const CellInfo*>& cells,
                             std::string* note) {
  Matrix m = build_matrix(s, cells);
  cap_rows(m, suite, note);
  const MatrixLayout l = layout_matrix(m, cells);
  const std::vector<LegendEntry> legend = matrix_legend(s, cells);
  const double content_w = l.label_w + static_cast<double>(std::min(l.per_block, m.kernels.size())) * l.slot_w;
  const double width = std::max(content_w, 420.0);
  const double legend_h = legend_height(legend, 4, width) + 10, block_gap = 24, bottom = 12;
  const double block_h = l.header_h + l.rows_h;
  const double height = legend_h + static_cast<double>(l.blocks) * (block_h + block_gap) + bottom;

  svg::Writer w(width, height, std::string(html_ids::kFaultMatrix) + "-" + suite,
                fmt::format("Fault matrix of suite {}", suite),
                fmt::format("Verdict per cell: rows are dtype, heads and context length (straddling or aligned), columns "
                            "the poison target and value, one panel per kernel ({}).",
                            join(m.kernels, ", ")));
  draw_legend(w, legend, 4, 4, width);
  for (std::size_t b = 0; b < l.blocks; ++b) {
    const double top = legend_h + static_cast<double>(b) * (block_h + block_gap);
    const double grid_top = top + l.header_h;
    draw_row_labels(w, m, l, grid_top, width);
    for (std::size_t p = b * l.per_block; p < std::min(m.kernels.size(), (b + 1) * l.per_block); ++p)
      draw_matrix_panel(w, s, m, l, m.kernels[p], l.label_w + static_cast<double>(p - b * l.per_block) * l.slot_w, top,
                        grid_top);
  }
  return chart(w);
}

}  // namespace

std::string fault_matrix_figure(const RunSummary& s, const std::vector<CellInfo>& cells) {
  std::string body, note;
  for (const auto& suite : suites_in(cells)) {
    std::vector<const CellInfo*> in;
    for (const auto& c : cells)
      if (c.r->suite == suite) in.push_back(&c);
    body += fmt::format("<h3>Suite {}</h3>\n", escape(suite));
    body += fault_matrix_svg(s, suite, in, &note);
  }
  if (body.empty()) body = "<p class=\"note\">No cell results in this report.</p>";
  if (!note.empty()) body += "<p class=\"note\">" + escape(note) + "</p>";
  return figure(html_ids::kFaultMatrix, "1. Fault matrix: verdict per cell, by poison target and length", body,
                "<b>Fault matrix.</b> One panel per kernel; rows are context lengths in tokens under a line naming their dtype "
                "\xC2\xB7 heads (GQA ratio) (and the head size, block size or options when those vary), "
                "marked <i>straddles</i> when the last KV block is partly filled (the unwritten tail a kernel may read) or "
                "<i>aligned</i> when it is full; columns are the poison target (K, V or both) and value@region. Colour and mark "
                "give the verdict; hover a cell for its id, metrics and detail. <b>Good:</b> every cell of a kernel under test "
                "is a pale <i>ok</i>. Negative controls have panels here only in a run of controls alone (section 5 counts them "
                "otherwise): a control must fail exactly in its dashed-outlined cells, and that pattern (V and K+V at the "
                "straddling length, never K alone, never the aligned length) is the proof the instrument can see the fault.");
}

}  // namespace pacheck::html
