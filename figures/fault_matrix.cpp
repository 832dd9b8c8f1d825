// report.html figure 1, the fault matrix per suite and kernel: cells by poison target x straddling/aligned
// length x dtype x GQA ratio, coloured by verdict and marked with its name (seed 000, figure 4).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "figures/parts.hpp"
#include "judge/comparator.hpp"  // sci

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

std::string fault_matrix_svg(const RunSummary& s, const std::string& suite, const std::vector<const CellInfo*>& cells,
                             std::string* note) {
  // Columns: faults by target (clean, K, V, K+V), then by first appearance in the suite.
  std::vector<std::pair<std::string, const CellInfo*>> faults;
  for (const CellInfo* c : cells)
    if (std::none_of(faults.begin(), faults.end(), [&](const auto& f) { return f.first == c->r->fault; }))
      faults.push_back({c->r->fault, c});
  std::stable_sort(faults.begin(), faults.end(),
                   [](const auto& a, const auto& b) { return target_rank(a.second->target) < target_rank(b.second->target); });

  // Rows: suite cells without the fault and layout, grouped by dtype and heads, then by length.
  std::map<std::string, const CellInfo*> row_info;
  for (const CellInfo* c : cells) row_info.emplace(c->row_key, c);
  std::vector<const CellInfo*> rows;
  for (const auto& [k, c] : row_info) rows.push_back(c);
  std::set<int> head_sizes, block_sizes;
  std::set<std::string> seeds;
  for (const CellInfo* c : rows) {
    head_sizes.insert(c->head_size);
    block_sizes.insert(c->block_size);
    seeds.insert(c->seed);
  }
  auto group_of = [&](const CellInfo* c) {
    // dtype x heads (GQA ratio) always; head size, block size and any other shape option when they vary.
    std::string g = fmt::format("{} \xC2\xB7 {} (GQA {})", c->dtype, c->heads, c->gqa);
    if (head_sizes.size() > 1) g += fmt::format(" d{}", c->head_size);
    if (block_sizes.size() > 1) g += fmt::format(" bs{}", c->block_size);
    const auto toks = split_spaces(c->shape);
    for (std::size_t i = 4; i < toks.size(); ++i)
      if (toks[i].rfind("q=", 0) != 0 && toks[i].rfind("o=", 0) != 0) g += " " + toks[i];
    return g;
  };
  std::vector<std::string> group_order;
  for (const CellInfo* c : cells)
    if (std::find(group_order.begin(), group_order.end(), group_of(c)) == group_order.end()) group_order.push_back(group_of(c));
  auto rank_of = [&](const std::string& g) { return std::find(group_order.begin(), group_order.end(), g) - group_order.begin(); };
  std::stable_sort(rows.begin(), rows.end(), [&](const CellInfo* a, const CellInfo* b) {
    const auto ga = rank_of(group_of(a)), gb = rank_of(group_of(b));
    if (ga != gb) return ga < gb;
    if (a->length != b->length) return a->length < b->length;
    if (a->ctx != b->ctx) return a->ctx < b->ctx;
    return a->seed < b->seed;
  });

  const std::vector<std::string> kernels = kernels_in(s, cells);
  std::map<std::string, const CellResult*> at;  // kernel \n row \n fault
  for (const CellInfo* c : cells) at.emplace(c->r->kernel + '\n' + c->row_key + '\n' + c->r->fault, c->r);

  // A big suite keeps the rows where something did not pass, then passing rows up to the cap.
  constexpr std::size_t kMaxRows = 96;
  if (rows.size() > kMaxRows) {
    auto interesting = [&](const CellInfo* row) {
      for (const auto& k : kernels)
        for (const auto& [f, fc] : faults)
          if (auto it = at.find(k + '\n' + row->row_key + '\n' + f); it != at.end() && it->second->verdict != Verdict::pass)
            return true;
      return false;
    };
    std::vector<const CellInfo*> keep;
    std::size_t budget = kMaxRows;
    for (const CellInfo* r : rows)
      if (interesting(r) && budget > 0) keep.push_back(r), --budget;
    const std::size_t left_out_interesting = std::count_if(rows.begin(), rows.end(), interesting) - keep.size();
    for (const CellInfo* r : rows)
      if (!interesting(r) && budget > 0) keep.push_back(r), --budget;
    std::stable_sort(keep.begin(), keep.end(), [&](const CellInfo* a, const CellInfo* b) {
      return std::find(rows.begin(), rows.end(), a) < std::find(rows.begin(), rows.end(), b);
    });
    *note += fmt::format("Suite {}: {} of {} rows shown (rows where some cell did not pass come first{}). ", suite, keep.size(),
                         rows.size(), left_out_interesting ? fmt::format("; {} such rows left out", left_out_interesting) : "");
    rows = keep;
  }

  // Geometry. Rows are grouped by dtype x heads; each group opens with a header line naming it, across the
  // whole width (so a long group name never crowds the label column); the label column holds the context
  // length, the seed when seeds vary, and whether the last block straddles.
  constexpr double kRowFont = 11, kColFont = 10.5, kTitleFont = 13, kAxisFont = 12, kMarkFont = 10;
  const double row_h = 18, group_h = 20;
  double ctx_w = svg::text_width("context (tokens)", kAxisFont, true);
  for (const CellInfo* r : rows) ctx_w = std::max(ctx_w, svg::text_width(abbreviate(ctx_label(r->ctx), kRowFont, kMaxCtxPx), kRowFont));
  double seed_w = 0;
  if (seeds.size() > 1) {
    seed_w = svg::text_width("seed", kAxisFont, true);
    for (const auto& sd : seeds) seed_w = std::max(seed_w, svg::text_width("seed " + sd, kRowFont));
    seed_w += 10;
  }
  const double straddle_w = std::max(svg::text_width("straddles", kRowFont), svg::text_width("last block", kAxisFont, true)) + 10;
  const double label_w =
      std::max(10 + ctx_w + 10 + seed_w + straddle_w, 10 + svg::text_width("rows: dtype \xC2\xB7 heads (GQA)", kAxisFont, true)) + 12;
  double widest_header = 0;
  for (const auto& [f, fc] : faults) widest_header = std::max(widest_header, svg::text_width(f, kColFont));
  // Cells: 38 px, narrower (down to what the widest verdict mark present needs) when that keeps one panel
  // inside the page; column headers at 45 degrees once there are more than 6 columns or they are wider
  // than a cell, and then the last header reaches past the grid by its width times cos 45.
  double widest_mark = svg::text_width("ok", kMarkFont, true);
  for (const CellInfo* c : cells) widest_mark = std::max(widest_mark, svg::text_width(style_of(c->r->verdict).mark, kMarkFont, true));
  const double min_cell = std::max(22.0, widest_mark + 5);
  double cell_w = 38;
  bool rotate = faults.size() > 6;
  if (!rotate)
    for (const auto& [f, fc] : faults)
      cell_w = std::max(cell_w, std::max(svg::text_width(fc->poison, kColFont), svg::text_width(fc->target, kColFont, true)) + 10);
  if (cell_w > 60) {  // headers too wide for a cell: rotate them instead of widening every cell
    rotate = true;
    cell_w = 38;
  }
  const double n_cols = static_cast<double>(faults.size());

  // What one panel takes beside the label column: its cells, the last header's reach past them, a gap.
  auto panel_w = [&](double cw) {
    double reach = 0;  // how far the rotated column headers reach past the last column's right edge
    if (rotate)
      for (std::size_t f = 0; f < faults.size(); ++f)
        reach = std::max(reach, (static_cast<double>(f) + 0.5 - n_cols) * cw + svg::text_width(faults[f].first, kColFont) * 0.71);
    return cw * n_cols + reach + 26;
  };
  while (cell_w > min_cell && label_w + panel_w(cell_w) > kPageWidth) cell_w = std::max(min_cell, cell_w - 1);
  // A panel's slot is as wide as its cells, its title and its axis title, whichever is widest, so narrow
  // matrices (one fault column) do not run their titles into the next panel.
  double title_w = svg::text_width("poison target : value@region", kAxisFont, true);
  for (const auto& k : kernels) title_w = std::max(title_w, svg::text_width(k + "  (negative control)", kTitleFont, true));
  const double slot_w = std::max(panel_w(cell_w), title_w + 26);
  const auto per_block = std::max<std::size_t>(1, static_cast<std::size_t>((kPageWidth - label_w) / slot_w));
  const double header_h = (rotate ? widest_header * 0.71 + 14 : 34) + 20 /* panel title */ + 18 /* axis title */;
  double rows_h = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) rows_h += row_h + (i == 0 || group_of(rows[i]) != group_of(rows[i - 1]) ? group_h : 0);
  const std::size_t blocks = (kernels.size() + per_block - 1) / per_block;
  std::set<Verdict> present;
  bool any_expected = false;
  for (const CellInfo* c : cells) {
    present.insert(c->r->verdict);
    any_expected = any_expected || (c->r->expected_fail && is_negative_control(s, c->r->kernel));
  }
  // Legend: the verdicts drawn, in a fixed order, and the outline that marks a negative control's expected
  // failures when one is drawn.
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
  const double content_w = label_w + static_cast<double>(std::min(per_block, kernels.size())) * slot_w;
  const double width = std::max(content_w, 420.0);
  const double legend_h = legend_height(legend, 4, width) + 10, block_gap = 24, bottom = 12;
  const double block_h = header_h + rows_h;
  const double height = legend_h + static_cast<double>(blocks) * (block_h + block_gap) + bottom;

  svg::Writer w(width, height, std::string(html_ids::kFaultMatrix) + "-" + suite,
                fmt::format("Fault matrix of suite {}", suite),
                fmt::format("Verdict per cell: rows are dtype, heads and context length (straddling or aligned), columns "
                            "the poison target and value, one panel per kernel ({}).",
                            join(kernels, ", ")));
  draw_legend(w, legend, 4, 4, width);

  for (std::size_t b = 0; b < blocks; ++b) {
    const double top = legend_h + static_cast<double>(b) * (block_h + block_gap);
    const double grid_top = top + header_h;
    // Row labels (the y axis: dtype x heads groups, context length, seed, straddling or aligned).
    w.open("g", {{"class", "axis y-axis"}, {"data-categories", std::to_string(rows.size())}});
    w.text(10, grid_top - 24, "rows: dtype \xC2\xB7 heads (GQA)", "start", {{"class", "axis-label"}});
    const double ctx_x = 10;
    w.text(ctx_x + ctx_w, grid_top - 6, "context (tokens)", "end", {{"class", "axis-label"}});
    if (seed_w > 0) w.text(ctx_x + ctx_w + 10, grid_top - 6, "seed", "start", {{"class", "axis-label"}});
    w.text(ctx_x + ctx_w + 10 + seed_w, grid_top - 6, "last block", "start", {{"class", "axis-label"}});
    double y = grid_top;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const CellInfo* r = rows[i];
      if (i == 0 || group_of(r) != group_of(rows[i - 1])) {
        fitted_text(w, 10, y + 15, group_of(r), width - 20, kRowFont, true, "start",
                    {{"class", "row-label group-label"}, {"font-weight", "600"}});
        y += group_h;
      }
      const std::string ctx = ctx_label(r->ctx);
      fitted_text(w, ctx_x + ctx_w, y + 13, ctx, kMaxCtxPx, kRowFont, false, "end", {{"class", "row-label"}});
      if (seed_w > 0) w.text(ctx_x + ctx_w + 10, y + 13, "seed " + r->seed, "start", {{"class", "row-label"}});
      w.text(ctx_x + ctx_w + 10 + seed_w, y + 13, r->r->straddle ? "straddles" : "aligned", "start",
             {{"class", "row-label"}, {"font-style", r->r->straddle ? "normal" : "italic"}, {"fill", r->r->straddle ? "#000" : "#555"}});
      y += row_h;
    }
    w.close();

    for (std::size_t p = b * per_block; p < std::min(kernels.size(), (b + 1) * per_block); ++p) {
      const std::string& kernel = kernels[p];
      const double px = label_w + static_cast<double>(p - b * per_block) * slot_w;
      w.open("g", {{"class", "panel"}, {"data-kernel", kernel}});
      const bool control = is_negative_control(s, kernel);
      w.text(px, top + 14, kernel + (control ? "  (negative control)" : ""), "start", {{"class", "panel-title"}});
      // Column headers (the x axis: poison target and value@region).
      w.open("g", {{"class", "axis x-axis"}, {"data-categories", std::to_string(faults.size())}});
      w.text(px, top + 32, "poison target : value@region", "start", {{"class", "axis-label"}});
      for (std::size_t f = 0; f < faults.size(); ++f) {
        const double cx = px + cell_w * (static_cast<double>(f) + 0.5);
        const CellInfo* fc = faults[f].second;
        if (rotate) {
          const double ty = grid_top - 5;
          w.text(cx, ty, faults[f].first, "start",
                 {{"class", "col-label"}, {"transform", fmt::format("rotate(-45 {} {})", svg::num(cx), svg::num(ty))}});
        } else {
          w.text(cx, grid_top - 20, fc->target, "middle", {{"class", "col-label"}, {"font-weight", "700"}});
          if (!fc->poison.empty()) w.text(cx, grid_top - 6, fc->poison, "middle", {{"class", "col-label"}});
        }
      }
      w.close();
      double cy = grid_top;
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const CellInfo* row = rows[i];
        if (i == 0 || group_of(row) != group_of(rows[i - 1])) cy += group_h;
        for (std::size_t f = 0; f < faults.size(); ++f) {
          const double cx = px + cell_w * static_cast<double>(f);
          auto it = at.find(kernel + '\n' + row->row_key + '\n' + faults[f].first);
          if (it == at.end()) {
            // Not a cell of the suite (the suite is not a full cross product) or not in this shard.
            w.rect(cx + 1, cy + 1, cell_w - 2, row_h - 2, {{"fill", "#f5f5f5"}});
            continue;
          }
          const CellResult& r = *it->second;
          const VerdictStyle st = style_of(r.verdict);
          const bool expected = r.expected_fail && control;
          w.open("g", {{"class", "cell"}, {"data-verdict", std::string(verdict_name(r.verdict))},
                       {"data-series", "verdict-" + std::string(verdict_name(r.verdict))}});
          w.title(fmt::format("{} | {}\nverdict: {}{}\nrel_linf {} (limit {}, margin {})\n{}", kernel, r.cell_id,
                              verdict_name(r.verdict),
                              expected ? (is_failure(r.verdict) ? " (expected: negative control caught)" : " (expected to fail: MISSED)")
                                       : "",
                              sci(r.metrics.rel_linf), sci(r.limit), sci(r.margin), r.detail));
          w.rect(cx + 1, cy + 1, cell_w - 2, row_h - 2,
                 {{"class", "fill"}, {"fill", st.fill.hex()}, {"stroke", r.verdict == Verdict::declined || r.verdict == Verdict::not_run ? "#999" : "none"}});
          if (expected)
            w.rect(cx + 2.5, cy + 2.5, cell_w - 5, row_h - 5,
                   {{"fill", "none"}, {"stroke", "#111"}, {"stroke-width", "1.6"}, {"stroke-dasharray", "3 2"}, {"data-series", "expected"}});
          w.text(cx + cell_w / 2, cy + 12.5, st.mark, "middle", {{"class", "mark"}, {"fill", svg::text_on(st.fill).hex()}});
          w.close();
        }
        cy += row_h;
      }
      w.close();
    }
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
                "is a pale <i>ok</i>. A negative control must fail exactly in its dashed-outlined cells: that pattern (V and K+V at "
                "the straddling length, never K alone, never the aligned length) is the proof the instrument can see the fault.");
}

}  // namespace pacheck::html
