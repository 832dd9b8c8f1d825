#include "report/html_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/case.hpp"
#include "report/svg.hpp"

namespace pacheck {

namespace {

using svg::escape;
using svg::Rgb;

// ---- page frame -----------------------------------------------------------------------------------------

/// Inline CSS. System fonts only (no @font-face: the page must not load anything); figure sizes come from
/// the SVGs' own width/height so layout does not depend on the fonts a machine has.
constexpr const char* kCss = R"(
:root { color-scheme: light; }
body { margin: 0; background: #fafafa; color: #1b1b1b;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans",
    "Liberation Sans", "DejaVu Sans", sans-serif; font-size: 15px; line-height: 1.45; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 28px 60px; background: #fff; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 19px; margin: 34px 0 6px; padding-top: 10px; border-top: 1px solid #ddd; }
h3 { font-size: 16px; margin: 20px 0 4px; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono",
  "DejaVu Sans Mono", monospace; font-size: 13px; }
pre { background: #f3f3f3; padding: 8px 10px; overflow-x: auto; border-radius: 4px; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { border: 1px solid #d8d8d8; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f1f1f1; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.lede { color: #444; margin: 0 0 12px; }
.outcome { padding: 8px 12px; border-radius: 4px; border-left: 6px solid; margin: 10px 0; }
.outcome.ok { background: #e8f1fa; border-color: #0072b2; }
.outcome.bad { background: #fdf0e6; border-color: #d55e00; }
nav ol { margin: 4px 0; padding-left: 22px; }
figure { margin: 14px 0 22px; }
figcaption { max-width: 980px; color: #333; font-size: 14px; margin-top: 6px; }
figcaption b { color: #000; }
.note { color: #555; font-style: italic; }
svg.chart { display: block; max-width: 100%; height: auto; margin: 8px 0; }
svg.chart text { font-family: inherit; }
svg.chart text:not([fill]) { fill: #222; }
svg.chart .tick { font-size: 11px; }
svg.chart .axis-label { font-size: 12px; font-weight: 600; }
svg.chart .panel-title { font-size: 13px; font-weight: 700; }
svg.chart .legend-title { font-size: 11px; }
svg.chart .legend { font-size: 11px; }
svg.chart .mark { font-size: 10px; font-weight: 700; pointer-events: none; }
svg.chart .row-label { font-size: 11px; }
svg.chart .col-label { font-size: 10.5px; }
svg.chart .cell:hover rect.fill { stroke: #000; stroke-width: 2; }
)";

std::string sci(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.3e}", v);
}

/// Single-quoted for a POSIX shell: cell ids hold spaces and '+', and must paste into a terminal intact.
std::string shell_quote(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '/';
  });
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const auto& x : v) {
    if (!out.empty()) out += sep;
    out += x;
  }
  return out;
}

// ---- verdict styles -------------------------------------------------------------------------------------

/// Fill and mark of a verdict in the fault matrix. Passing cells recede (pale blue); failures use the
/// Okabe-Ito orange, vermillion and reddish purple, which stay apart for deuteranopes by lightness and the
/// blue-yellow axis; every cell also carries its mark, so colour is never the only cue.
struct VerdictStyle {
  Rgb fill;
  std::string mark;
  std::string meaning;
};

VerdictStyle style_of(Verdict v) {
  switch (v) {
    case Verdict::pass: return {svg::parse_hex("#d6e6f4"), "ok", "pass: within tolerance"};
    case Verdict::fail: return {svg::parse_hex("#e69f00"), "\xC3\x97", "fail: beyond tolerance"};  // U+00D7
    case Verdict::poisoned: return {svg::parse_hex("#d55e00"), "NaN", "poisoned: NaN/Inf where the reference is finite"};
    case Verdict::variant: return {svg::parse_hex("#cc79a7"), "var", "variant: output changed with the poison value"};
    case Verdict::unwritten: return {svg::parse_hex("#cc79a7"), "unw", "unwritten: output elements left untouched"};
    case Verdict::oob_write: return {svg::parse_hex("#cc79a7"), "oob", "oob_write: wrote past the output"};
    case Verdict::input_mutated: return {svg::parse_hex("#cc79a7"), "in", "input_mutated: changed an input"};
    case Verdict::declined: return {svg::parse_hex("#ffffff"), "\xE2\x80\x93", "declined: unsupported cell"};  // U+2013
    case Verdict::error: return {svg::parse_hex("#333333"), "err", "error: the kernel reported an error"};
    case Verdict::crash: return {svg::parse_hex("#333333"), "crash", "crash: the kernel's process died"};
    case Verdict::timeout: return {svg::parse_hex("#333333"), "t/o", "timeout: the kernel hung"};
  }
  return {svg::parse_hex("#ffffff"), "?", "?"};
}

bool has_output(Verdict v) {
  return v != Verdict::declined && v != Verdict::error && v != Verdict::crash && v != Verdict::timeout;
}

bool is_control(const RunSummary& s, const std::string& kernel) {
  for (const auto& k : s.kernels)
    if (k.kernel == kernel) return k.control != ControlOutcome::not_control;
  return false;
}

/// A failure of the run: a wrong cell of a kernel under test, or a negative control's expected failure
/// that did not show (the same rule as junit.xml and the exit code).
bool counts_as_failure(const RunSummary& s, const CellResult& r) {
  if (r.verdict == Verdict::declined) return false;
  if (r.expected_fail && is_control(s, r.kernel)) return !is_failure(r.verdict);
  return is_failure(r.verdict);
}

// ---- what a cell is, from its ids -----------------------------------------------------------------------

std::vector<std::string> split_spaces(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

bool is_layout_token(const std::string& t) { return t == "vllm" || t == "nhd" || t == "hnd"; }

/// One result with the parts of its case and fault the figures group by.
struct CellInfo {
  const CellResult* r = nullptr;
  std::string dtype;      ///< "bf16", or "bf16 q=f32 o=f32" for mixed dtypes
  std::string heads;      ///< "h32/8"
  int gqa = 1;
  int head_size = 0, block_size = 0;
  int length = 0;         ///< longest sequence of the batch
  std::string ctx;        ///< "4090" or "1030,33,517"
  std::string row_key;    ///< case id without the layout: the same suite cell for every kernel
  std::string shape;      ///< case id without lengths, seed and layout: a shape for figures 2 and 3
  std::string seed;
  std::string target;     ///< "clean", "K", "V", "K+V"
  std::string poison;     ///< "nan@tail", "" for clean
};

std::optional<CellInfo> describe(const CellResult& r) {
  Case c;
  try {
    c = parse_case_id(r.case_id);
  } catch (const std::exception&) {
    return std::nullopt;  // not a pacheck case id: listed in tables, left out of the figures
  }
  CellInfo info;
  info.r = &r;
  const auto toks = split_spaces(r.case_id);
  std::vector<std::string> row, shape, dtype;
  for (std::size_t i = 0; i < toks.size(); ++i) {
    const std::string& t = toks[i];
    if (is_layout_token(t)) continue;
    row.push_back(t);
    if (t.rfind("ctx", 0) == 0) {
      info.ctx = t.substr(3);
      continue;
    }
    if (t.rfind("seed", 0) == 0) {
      info.seed = t.substr(4);
      continue;
    }
    shape.push_back(t);
    if (i == 3 || t.rfind("q=", 0) == 0 || t.rfind("o=", 0) == 0) dtype.push_back(t);
  }
  info.row_key = join(row, " ");
  info.shape = join(shape, " ");
  info.dtype = join(dtype, " ");
  info.heads = toks.empty() ? "" : toks[0];
  info.gqa = c.gqa_ratio();
  info.head_size = c.head_size;
  info.block_size = c.block_size;
  info.length = c.seq_lens.empty() ? 0 : *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  const auto colon = r.fault.find(':');
  info.target = colon == std::string::npos ? r.fault : r.fault.substr(0, colon);
  info.poison = colon == std::string::npos ? "" : r.fault.substr(colon + 1);
  return info;
}

int target_rank(const std::string& t) {
  if (t == "clean") return 0;
  if (t == "K") return 1;
  if (t == "V") return 2;
  if (t == "K+V") return 3;
  return 4;
}

/// Results of `s`, described, deduplicated by (suite, kernel, cell) in report order.
std::vector<CellInfo> describe_all(const RunSummary& s) {
  std::vector<CellInfo> out;
  std::set<std::string> seen;
  for (const auto& r : s.results) {
    if (!seen.insert(r.suite + '\n' + r.kernel + '\n' + r.cell_id).second) continue;
    if (auto info = describe(r)) out.push_back(std::move(*info));
  }
  return out;
}

std::vector<std::string> suites_in(const std::vector<CellInfo>& cells) {
  std::vector<std::string> out;
  for (const auto& c : cells)
    if (std::find(out.begin(), out.end(), c.r->suite) == out.end()) out.push_back(c.r->suite);
  return out;
}

std::vector<std::string> kernels_in(const RunSummary& s, const std::vector<const CellInfo*>& cells) {
  std::vector<std::string> out;
  for (const auto& k : s.kernels)
    if (std::any_of(cells.begin(), cells.end(), [&](const CellInfo* c) { return c->r->kernel == k.kernel; }))
      out.push_back(k.kernel);
  return out;
}

/// Sort key of a length label: by the longest sequence, then the text.
bool ctx_less(const std::pair<int, std::string>& a, const std::pair<int, std::string>& b) { return a < b; }

/// The figure wrapper: <figure id> with a heading, the SVGs, and a caption that says what good looks like.
std::string figure(const char* id, const std::string& heading, const std::string& body, const std::string& caption) {
  return fmt::format("<figure id=\"{}\" class=\"report-figure\">\n<h2>{}</h2>\n{}\n<figcaption>{}</figcaption>\n</figure>\n", id,
                     escape(heading), body, caption);
}

/// A legend entry: swatch (or drawn sample), then its text; returns the x after it.
double legend_swatch(svg::Writer& w, double x, double y, Rgb fill, const std::string& mark, const std::string& text) {
  w.rect(x, y - 11, 26, 15, {{"fill", fill.hex()}, {"stroke", "#888"}, {"stroke-width", "0.5"}});
  if (!mark.empty()) w.text(x + 13, y, mark, "middle", {{"class", "mark"}, {"fill", svg::text_on(fill).hex()}});
  w.text(x + 31, y, text, "start", {{"class", "legend"}});
  return x + 31 + svg::text_width(text, 11) + 16;
}

// ---- figure 1: the fault matrix -------------------------------------------------------------------------

constexpr double kPageWidth = 1120;  // widest figure before panels wrap onto another row

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

  // Geometry.
  const double row_h = 18, group_gap = 7;
  double group_w = 0, ctx_w = svg::text_width("context", 11), seed_w = 0;
  for (const CellInfo* r : rows) {
    group_w = std::max(group_w, svg::text_width(group_of(r), 11));
    ctx_w = std::max(ctx_w, svg::text_width(r->ctx, 11));
  }
  // Each label column is at least as wide as its bold heading.
  constexpr double kBold = 1.1;
  group_w = std::max(group_w, svg::text_width("dtype \xC2\xB7 heads (GQA)", 12) * kBold);
  ctx_w = std::max(ctx_w, svg::text_width("context (tokens)", 12) * kBold);
  if (seeds.size() > 1) seed_w = 60;
  const double straddle_w = std::max(svg::text_width("straddles", 11), svg::text_width("last block", 12) * kBold) + 10;
  const double label_w = 10 + group_w + 12 + ctx_w + 10 + seed_w + straddle_w + 6;
  double widest_header = 0;
  for (const auto& [f, fc] : faults) widest_header = std::max(widest_header, svg::text_width(f, 10.5));
  const bool rotate = faults.size() > 6;
  double cell_w = 38;
  if (!rotate)
    for (const auto& [f, fc] : faults)
      cell_w = std::max(cell_w, std::max(svg::text_width(fc->poison, 10.5), svg::text_width(fc->target, 11)) + 10);
  // A panel's slot is as wide as its cells, its title and its axis title, whichever is widest, so narrow
  // matrices (one fault column) do not run their titles into the next panel.
  double title_w = svg::text_width("poison target : value@region", 12) * 1.2;
  for (const auto& k : kernels) title_w = std::max(title_w, svg::text_width(k + "  (negative control)", 13) * 1.2);
  const double slot_w = std::max(cell_w * static_cast<double>(faults.size()), title_w) + 26;
  const auto per_block = std::max<std::size_t>(1, static_cast<std::size_t>((kPageWidth - label_w) / slot_w));
  const double header_h = (rotate ? widest_header * 0.72 + 12 : 34) + 20 /* panel title */ + 18 /* axis title */;
  double rows_h = 0;
  for (std::size_t i = 0; i < rows.size(); ++i)
    rows_h += row_h + (i > 0 && group_of(rows[i]) != group_of(rows[i - 1]) ? group_gap : 0);
  const std::size_t blocks = (kernels.size() + per_block - 1) / per_block;
  const double legend_h = 30, block_gap = 24, bottom = 12;
  const double block_h = header_h + rows_h;
  const double width = std::max(label_w + static_cast<double>(std::min(per_block, kernels.size())) * slot_w, 560.0);
  const double height = legend_h + static_cast<double>(blocks) * (block_h + block_gap) + bottom;

  std::set<Verdict> present;
  bool any_expected = false;
  for (const CellInfo* c : cells) {
    present.insert(c->r->verdict);
    any_expected = any_expected || (c->r->expected_fail && is_control(s, c->r->kernel));
  }
  svg::Writer w(width, height, std::string(html_ids::kFaultMatrix) + "-" + suite,
                fmt::format("Fault matrix of suite {}", suite),
                fmt::format("Verdict per cell: rows are dtype, heads and context length (straddling or aligned), columns "
                            "the poison target and value, one panel per kernel ({}).",
                            join(kernels, ", ")));
  // Legend: every verdict present (pass and the common failures always, so the key reads the same across
  // reports), and the outline that marks a negative control's expected failures.
  w.open("g", {{"class", "legend"}});
  double lx = 4;
  for (Verdict v : {Verdict::pass, Verdict::fail, Verdict::poisoned, Verdict::variant, Verdict::unwritten, Verdict::oob_write,
                    Verdict::input_mutated, Verdict::declined, Verdict::error, Verdict::crash, Verdict::timeout}) {
    if (!present.count(v) && v != Verdict::pass && v != Verdict::fail && v != Verdict::poisoned) continue;
    const VerdictStyle st = style_of(v);
    lx = legend_swatch(w, lx, 18, st.fill, st.mark, std::string(verdict_name(v)));
  }
  if (any_expected) {
    w.rect(lx, 7, 26, 15, {{"fill", "#ffffff"}, {"stroke", "#111"}, {"stroke-width", "1.6"}, {"stroke-dasharray", "3 2"}});
    w.text(lx + 31, 18, "expected to fail (negative control)", "start", {{"class", "legend"}});
  }
  w.close();

  for (std::size_t b = 0; b < blocks; ++b) {
    const double top = legend_h + static_cast<double>(b) * (block_h + block_gap);
    const double grid_top = top + header_h;
    // Row labels (the y axis: dtype x heads groups, context length, straddling or aligned).
    w.open("g", {{"class", "axis y-axis"}});
    w.text(10, grid_top - 6, "dtype \xC2\xB7 heads (GQA)", "start", {{"class", "axis-label"}});
    const double ctx_x = 10 + group_w + 12;
    w.text(ctx_x + ctx_w, grid_top - 6, "context (tokens)", "end", {{"class", "axis-label"}});
    w.text(ctx_x + ctx_w + 10 + seed_w, grid_top - 6, "last block", "start", {{"class", "axis-label"}});
    double y = grid_top;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const CellInfo* r = rows[i];
      const bool new_group = i == 0 || group_of(r) != group_of(rows[i - 1]);
      if (new_group && i > 0) y += group_gap;
      if (new_group) w.text(10, y + 13, group_of(r), "start", {{"class", "row-label"}, {"font-weight", "600"}});
      w.text(ctx_x + ctx_w, y + 13, r->ctx, "end", {{"class", "row-label"}});
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
      const bool control = is_control(s, kernel);
      w.text(px, top + 14, kernel + (control ? "  (negative control)" : ""), "start", {{"class", "panel-title"}});
      // Column headers (the x axis: poison target and value@region).
      w.open("g", {{"class", "axis x-axis"}});
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
          w.text(cx, grid_top - 6, fc->poison, "middle", {{"class", "col-label"}});
        }
      }
      w.close();
      double cy = grid_top;
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const CellInfo* row = rows[i];
        if (i > 0 && group_of(row) != group_of(rows[i - 1])) cy += group_gap;
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
          w.open("g", {{"class", "cell"}, {"data-verdict", std::string(verdict_name(r.verdict))}});
          w.title(fmt::format("{} | {}\nverdict: {}{}\nrel_linf {} (limit {}, margin {})\n{}", kernel, r.cell_id,
                              verdict_name(r.verdict),
                              expected ? (is_failure(r.verdict) ? " (expected: negative control caught)" : " (expected to fail: MISSED)")
                                       : "",
                              sci(r.metrics.rel_linf), sci(r.limit), sci(r.margin), r.detail));
          w.rect(cx + 1, cy + 1, cell_w - 2, row_h - 2,
                 {{"class", "fill"}, {"fill", st.fill.hex()}, {"stroke", r.verdict == Verdict::declined ? "#999" : "none"}});
          if (expected)
            w.rect(cx + 2.5, cy + 2.5, cell_w - 5, row_h - 5,
                   {{"fill", "none"}, {"stroke", "#111"}, {"stroke-width", "1.6"}, {"stroke-dasharray", "3 2"}});
          w.text(cx + cell_w / 2, cy + 12.5, st.mark, "middle", {{"class", "mark"}, {"fill", svg::text_on(st.fill).hex()}});
          w.close();
        }
        cy += row_h;
      }
      w.close();
    }
  }
  return w.str();
}

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
                "<b>Fault matrix.</b> One panel per kernel; rows are dtype \xC2\xB7 heads (GQA ratio) \xC2\xB7 context length in tokens, "
                "marked <i>straddles</i> when the last KV block is partly filled (the unwritten tail a kernel may read) or "
                "<i>aligned</i> when it is full; columns are the poison target (K, V or both) and value@region. Colour and mark "
                "give the verdict; hover a cell for its id, metrics and detail. <b>Good:</b> every cell of a kernel under test "
                "is a pale <i>ok</i>. A negative control must fail exactly in its dashed-outlined cells: that pattern (V and K+V at "
                "the straddling length, never K alone, never the aligned length) is the proof the instrument can see the fault.");
}

// ---- figure 2: error against context length -------------------------------------------------------------

/// Series colours of figure 2, one per dtype: Okabe-Ito blue, bluish green, reddish purple and sky blue,
/// apart for colour-blind readers and from the vermillion of the NaN marks.
Rgb series_colour(std::size_t i) {
  static const char* const kColours[] = {"#0072b2", "#009e73", "#cc79a7", "#56b4e9"};
  return svg::parse_hex(i < 4 ? kColours[i] : "#777777");
}

std::string error_length_figure(const RunSummary& s, const std::vector<CellInfo>& cells) {
  // Clean cells with an output, per kernel, dtype and shape: the worst rel_linf at each length (over seeds).
  // Bands are per dtype: bf16 and f16 errors differ several-fold, and one band across both would show
  // the dtype, not the kernel.
  struct DtypeSeries {
    std::map<std::string, std::map<int, double>> by_shape;  // shape -> length -> rel_linf
    std::set<double> limits;
  };
  struct Series {
    std::map<std::string, DtypeSeries> by_dtype;
    std::vector<std::pair<int, std::string>> nonfinite;  // length, cell id
    int cells = 0;
    std::size_t shapes = 0;
  };
  std::map<std::string, Series> per_kernel;
  std::vector<std::string> dtypes;  // colour order, first appearance
  std::vector<double> lengths, values;
  for (const auto& c : cells) {
    if (c.target != "clean" || !has_output(c.r->verdict) || c.length <= 0) continue;
    Series& se = per_kernel[c.r->kernel];
    ++se.cells;
    lengths.push_back(c.length);
    if (std::find(dtypes.begin(), dtypes.end(), c.dtype) == dtypes.end()) dtypes.push_back(c.dtype);
    DtypeSeries& ds = se.by_dtype[c.dtype];
    if (std::isfinite(c.r->limit) && c.r->limit > 0) {
      ds.limits.insert(c.r->limit);
      values.push_back(c.r->limit);
    }
    const double v = c.r->metrics.rel_linf;
    if (!std::isfinite(v)) {
      se.nonfinite.push_back({c.length, c.r->cell_id});
      continue;
    }
    auto [it, fresh] = ds.by_shape[c.shape].emplace(c.length, v);
    if (!fresh) it->second = std::max(it->second, v);
    values.push_back(v);
  }
  for (auto& [k, se] : per_kernel)
    for (const auto& [d, ds] : se.by_dtype) se.shapes += ds.by_shape.size();
  const std::vector<std::string> kernels = [&] {
    std::vector<std::string> out;
    for (const auto& k : s.kernels)
      if (per_kernel.count(k.kernel)) out.push_back(k.kernel);
    return out;
  }();
  if (kernels.empty())
    return figure(html_ids::kErrorVsLength, "2. Error against context length",
                  "<p class=\"note\">No clean cell with an output in this report: nothing to plot.</p>",
                  "<b>Error against context length.</b> Needs clean cells (fault <code>clean</code>). <b>Good:</b> a "
                  "run with clean cells draws a flat band here.");
  auto colour_of = [&](const std::string& dtype) {
    return series_colour(static_cast<std::size_t>(std::find(dtypes.begin(), dtypes.end(), dtype) - dtypes.begin()));
  };

  // Shared axes across panels, so kernels compare at a glance.
  const auto [lmin, lmax] = std::minmax_element(lengths.begin(), lengths.end());
  const auto [xd0, xd1] = svg::padded_log_domain(*lmin, *lmax);
  std::vector<double> distinct_lengths(lengths.begin(), lengths.end());
  std::sort(distinct_lengths.begin(), distinct_lengths.end());
  distinct_lengths.erase(std::unique(distinct_lengths.begin(), distinct_lengths.end()), distinct_lengths.end());
  double vmin_pos = INFINITY, vmax = 0;
  for (double v : values) {
    if (v > 0) vmin_pos = std::min(vmin_pos, v);
    vmax = std::max(vmax, v);
  }
  const bool has_zero = std::any_of(values.begin(), values.end(), [](double v) { return v <= 0; });
  const bool log_y = std::isfinite(vmin_pos) && vmax / vmin_pos > 30;
  double yd0, yd1;
  if (log_y) std::tie(yd0, yd1) = svg::padded_log_domain(vmin_pos, vmax);
  else std::tie(yd0, yd1) = svg::nice_linear_domain(0, vmax > 0 ? vmax * 1.08 : 1e-3, true);

  const double pw = 540, ph = 300, ml = 86, mr = 24, mt = 34, mb = 56;
  const std::size_t per_row = 2;
  const std::size_t nrows = (kernels.size() + per_row - 1) / per_row;
  const double legend_h = 56;
  const double width = pw * static_cast<double>(std::min(per_row, kernels.size()));
  const double height = legend_h + ph * static_cast<double>(nrows);
  const Rgb grey = svg::parse_hex("#555555"), nan_ink = svg::parse_hex("#d55e00");

  svg::Writer w(std::max(width, 600.0), height, std::string(html_ids::kErrorVsLength) + "-svg",
                "Relative L-infinity error against context length, per kernel",
                "One panel per kernel, one colour per dtype: each shape's rel_linf at each context length (thin lines), "
                "the min-max band across shapes (shaded), their median (bold) and the tolerance limit (dashed).");
  // Legend: the dtype colours, then what each mark means (drawn in grey: it holds for every colour).
  w.open("g", {{"class", "legend"}});
  double lx = 4;
  for (const auto& d : dtypes) {
    w.rect(lx, 8, 26, 14, {{"fill", colour_of(d).hex()}});
    w.text(lx + 31, 19, d, "start", {{"class", "legend"}});
    lx += 31 + svg::text_width(d, 11) + 16;
  }
  lx = 4;
  const double ly = 44;
  w.rect(lx, ly - 11, 26, 14, {{"fill", grey.hex()}, {"fill-opacity", "0.2"}});
  w.text(lx + 31, ly, "min\xE2\x80\x93max across shapes", "start", {{"class", "legend"}});
  lx += 31 + svg::text_width("min-max across shapes", 11) + 16;
  w.line(lx, ly - 4, lx + 26, ly - 4, {{"stroke", grey.hex()}, {"stroke-width", "2.6"}});
  w.text(lx + 31, ly, "median of the shapes", "start", {{"class", "legend"}});
  lx += 31 + svg::text_width("median of the shapes", 11) + 16;
  w.line(lx, ly - 4, lx + 26, ly - 4, {{"stroke", grey.hex()}, {"stroke-opacity", "0.5"}, {"stroke-width", "1"}});
  w.text(lx + 31, ly, "one shape (hover for its name)", "start", {{"class", "legend"}});
  lx += 31 + svg::text_width("one shape (hover for its name)", 11) + 16;
  w.line(lx, ly - 4, lx + 26, ly - 4, {{"stroke", grey.hex()}, {"stroke-width", "1.5"}, {"stroke-dasharray", "6 3"}});
  w.text(lx + 31, ly, "tolerance limit of the dtype", "start", {{"class", "legend"}});
  lx += 31 + svg::text_width("tolerance limit of the dtype", 11) + 16;
  w.polygon({{lx + 13, ly + 2}, {lx + 6, ly - 11}, {lx + 20, ly - 11}}, {{"fill", nan_ink.hex()}});
  w.text(lx + 31, ly, "NaN/Inf output", "start", {{"class", "legend"}});
  w.close();

  for (std::size_t p = 0; p < kernels.size(); ++p) {
    const Series& se = per_kernel[kernels[p]];
    const double ox = pw * static_cast<double>(p % per_row), oy = legend_h + ph * static_cast<double>(p / per_row);
    const svg::Scale x = svg::Scale::log10(xd0, xd1, ox + ml, ox + pw - mr);
    const svg::Scale y = log_y ? svg::Scale::log10(yd0, yd1, oy + ph - mb, oy + mt) : svg::Scale::linear(yd0, yd1, oy + ph - mb, oy + mt);
    w.open("g", {{"class", "panel"}, {"data-kernel", kernels[p]}});
    w.text(ox + ml, oy + mt - 12, fmt::format("{}  ({} shapes, {} clean cells)", kernels[p], se.shapes, se.cells), "start",
           {{"class", "panel-title"}});
    w.rect(ox + ml, oy + mt, pw - ml - mr, ph - mt - mb, {{"fill", "#fcfcfc"}, {"stroke", "#ddd"}});
    axis_left(w, y, ox + ml, log_y ? svg::log_ticks(yd0, yd1) : svg::linear_ticks(yd0, yd1, 5),
              std::string("rel_linf, unitless") + (log_y ? " (log scale)" : ""), ox + pw - mr);
    axis_bottom(w, x, oy + ph - mb, svg::log_ticks(xd0, xd1, distinct_lengths), "context length (tokens, log scale)");

    for (const auto& [dtype, ds] : se.by_dtype) {
      const std::string ink = colour_of(dtype).hex();
      // Band and median across the dtype's shapes at each length.
      std::map<int, std::vector<double>> at_len;
      for (const auto& [shape, pts] : ds.by_shape)
        for (const auto& [len, v] : pts) at_len[len].push_back(v);
      std::vector<std::pair<double, double>> upper, lower, median;
      for (auto& [len, vs] : at_len) {
        std::sort(vs.begin(), vs.end());
        const double med = vs.size() % 2 ? vs[vs.size() / 2] : (vs[vs.size() / 2 - 1] + vs[vs.size() / 2]) / 2;
        upper.push_back({x(len), y(vs.back())});
        lower.push_back({x(len), y(vs.front())});
        median.push_back({x(len), y(med)});
      }
      if (upper.size() == 1) {  // one length: widen the band into a visible bar
        upper = {{upper[0].first - 5, upper[0].second}, {upper[0].first + 5, upper[0].second}};
        lower = {{lower[0].first - 5, lower[0].second}, {lower[0].first + 5, lower[0].second}};
      }
      w.open("g", {{"class", "dtype-series"}, {"data-dtype", dtype}});
      if (!upper.empty()) {
        std::vector<std::pair<double, double>> band = upper;
        band.insert(band.end(), lower.rbegin(), lower.rend());
        w.open("g", {{"class", "band"}});
        w.title(fmt::format("{}: min\xE2\x80\x93max of rel_linf across {} shape(s) at each length", dtype, ds.by_shape.size()));
        w.polygon(band, {{"fill", ink}, {"fill-opacity", "0.2"}, {"stroke", ink}, {"stroke-opacity", "0.35"}});
        w.close();
      }
      for (const auto& [shape, pts] : ds.by_shape) {
        std::vector<std::pair<double, double>> line;
        for (const auto& [len, v] : pts) line.push_back({x(len), y(v)});
        w.open("g", {{"class", "series"}});
        w.title(shape);
        if (line.size() > 1) w.polyline(line, {{"stroke", ink}, {"stroke-opacity", "0.5"}, {"stroke-width", "1"}});
        for (const auto& [len, v] : pts) {
          w.open("g", {{"class", "point"}});
          w.title(fmt::format("{} ctx{}: rel_linf {}", shape, len, sci(v)));
          w.circle(x(len), y(v), 2.6, {{"fill", ink}, {"fill-opacity", "0.7"}});
          w.close();
        }
        w.close();
      }
      if (median.size() > 1) w.polyline(median, {{"class", "median"}, {"stroke", ink}, {"stroke-width", "2.6"}});
      for (const auto& [mx, my] : median) w.circle(mx, my, 3.6, {{"fill", "#fff"}, {"stroke", ink}, {"stroke-width", "2"}});
      // The dtype's tolerance limit, labelled just above the line at the right end, in the dtype's colour.
      for (double lim : ds.limits) {
        const double py = y(lim);
        if (py < oy + mt - 1 || py > oy + ph - mb + 1) continue;
        w.open("g", {{"class", "limit-group"}});
        w.title(fmt::format("tolerance limit of {}: rel_linf {}", dtype, sci(lim)));
        w.line(ox + ml, py, ox + pw - mr, py, {{"class", "limit"}, {"stroke", ink}, {"stroke-width", "1.5"}, {"stroke-dasharray", "6 3"}});
        w.text(ox + pw - mr - 4, py - 4, fmt::format("{} limit {}", dtype, svg::tick_label(lim, true)), "end",
               {{"class", "tick"}, {"fill", ink}});
        w.close();
      }
      w.close();
    }
    // Clean cells that produced NaN/Inf: a triangle on the top edge at their length.
    for (const auto& [len, id] : se.nonfinite) {
      const double tx = x(len), ty = oy + mt;
      w.open("g", {{"class", "nonfinite"}});
      w.title(fmt::format("{}: NaN/Inf output on a clean cell", id));
      w.polygon({{tx, ty + 12}, {tx - 6, ty}, {tx + 6, ty}}, {{"fill", nan_ink.hex()}});
      w.close();
    }
    w.close();
  }
  std::string caption =
      "<b>Error against context length.</b> Clean cells only; rel_linf is the largest absolute error over the largest "
      "absolute reference value (unitless, against the fp32/f64 oracle computed from the pre-paging K/V). One colour per "
      "dtype: thin lines are single shapes (worst seed), the shaded band spans the lowest to the highest shape at each "
      "length and the bold line is their median; the dashed line is that dtype's tolerance limit; x is the longest "
      "sequence of the batch in tokens. <b>Good:</b> each band flat and well under its own limit at every length "
      "\xE2\x80\x94 a different accumulation order shows as a slight offset between kernels, not a rise. A band that "
      "climbs with length means error grows with the sum; a triangle means a clean cell gave NaN/Inf.";
  if (has_zero) caption += " Cells with zero error sit on the bottom edge.";
  return figure(html_ids::kErrorVsLength, "2. Error against context length", w.str(), caption);
}

// ---- heat maps (figures 3 and 4) ------------------------------------------------------------------------

/// One heat-map cell: its fill, the text written in it, its hover title and whether it is outlined.
struct HeatCell {
  std::string fill;  ///< colour, or "url(#...)" for a pattern
  std::string text;
  Rgb text_colour;
  std::string title;
  bool outline = false;
};

/// Where a heat map's parts go: a label column, then panels of rows x columns side by side, wrapping onto
/// further blocks when the page is too narrow. Sizing the SVG and drawing into it share this.
struct HeatLayout {
  double cell_w = 0, cell_h = 0;
  double label_w = 0;   ///< row-label column
  bool rotate = false;  ///< column labels at 45 degrees (they are wider than a cell)
  double header_h = 0;  ///< panel title, axis title and column labels above the grid
  double slot_w = 0;    ///< one panel with its gap: at least as wide as its title and axis title
  std::size_t per_block = 1, blocks = 1;
  double block_h = 0, width = 0, height = 0;
};

HeatLayout layout_heat(const std::vector<std::string>& panels, const std::vector<std::string>& rows,
                       const std::vector<std::string>& cols, const std::string& row_axis, const std::string& col_axis,
                       double cell_w, double cell_h) {
  constexpr double kBold = 1.2;  // bold titles run wider than text_width's regular estimate
  HeatLayout l;
  l.cell_w = cell_w;
  l.cell_h = cell_h;
  double row_w = svg::text_width(row_axis, 12) * kBold;
  for (const auto& r : rows) row_w = std::max(row_w, svg::text_width(r, 11));
  l.label_w = row_w + 24;
  double widest_col = 0;
  for (const auto& c : cols) widest_col = std::max(widest_col, svg::text_width(c, 10.5));
  l.rotate = widest_col > cell_w - 4;
  l.header_h = 20 /* panel title */ + 16 /* axis title */ + (l.rotate ? widest_col * 0.72 + 8 : 16);
  double title_w = svg::text_width(col_axis, 12) * kBold;
  for (const auto& p : panels) title_w = std::max(title_w, svg::text_width(p, 13) * kBold);
  l.slot_w = std::max(cell_w * static_cast<double>(cols.size()), title_w) + 24;
  l.per_block = std::max<std::size_t>(1, static_cast<std::size_t>((kPageWidth - l.label_w) / l.slot_w));
  l.blocks = (panels.size() + l.per_block - 1) / l.per_block;
  l.block_h = l.header_h + cell_h * static_cast<double>(rows.size()) + 16;
  l.width = l.label_w + static_cast<double>(std::min(l.per_block, panels.size())) * l.slot_w;
  l.height = static_cast<double>(l.blocks) * l.block_h;
  return l;
}

/// Draws the heat map laid out by `l` from pixel row `top`: row labels on the left, per panel a title,
/// column labels and the cells. `cell(panel, row, col)` returns nullopt for an empty cell.
template <class F>
void heat_panels(svg::Writer& w, const HeatLayout& l, double top, const std::vector<std::string>& panels,
                 const std::vector<std::string>& rows, const std::vector<std::string>& cols, const std::string& row_axis,
                 const std::string& col_axis, F cell) {
  const double cell_w = l.cell_w, cell_h = l.cell_h;
  for (std::size_t b = 0; b < l.blocks; ++b) {
    const double btop = top + static_cast<double>(b) * l.block_h;
    const double grid_top = btop + l.header_h;
    w.open("g", {{"class", "axis y-axis"}});
    w.text(8, btop + 30, row_axis, "start", {{"class", "axis-label"}});
    for (std::size_t r = 0; r < rows.size(); ++r)
      w.text(l.label_w - 8, grid_top + cell_h * static_cast<double>(r) + cell_h / 2 + 4, rows[r], "end", {{"class", "row-label"}});
    w.close();
    for (std::size_t p = b * l.per_block; p < std::min(panels.size(), (b + 1) * l.per_block); ++p) {
      const double px = l.label_w + static_cast<double>(p - b * l.per_block) * l.slot_w;
      w.open("g", {{"class", "panel"}, {"data-panel", panels[p]}});
      w.text(px, btop + 14, panels[p], "start", {{"class", "panel-title"}});
      w.open("g", {{"class", "axis x-axis"}});
      w.text(px, btop + 30, col_axis, "start", {{"class", "axis-label"}});
      for (std::size_t c = 0; c < cols.size(); ++c) {
        const double cx = px + cell_w * (static_cast<double>(c) + 0.5), ty = grid_top - 5;
        if (l.rotate)
          w.text(cx, ty, cols[c], "start", {{"class", "col-label"}, {"transform", fmt::format("rotate(-45 {} {})", svg::num(cx), svg::num(ty))}});
        else
          w.text(cx, ty, cols[c], "middle", {{"class", "col-label"}});
      }
      w.close();
      for (std::size_t r = 0; r < rows.size(); ++r) {
        for (std::size_t c = 0; c < cols.size(); ++c) {
          const double x = px + cell_w * static_cast<double>(c), y = grid_top + cell_h * static_cast<double>(r);
          const std::optional<HeatCell> hc = cell(p, r, c);
          if (!hc) {
            w.rect(x + 0.5, y + 0.5, cell_w - 1, cell_h - 1, {{"fill", "#f5f5f5"}});
            continue;
          }
          w.open("g", {{"class", "cell"}});
          w.title(hc->title);
          w.rect(x + 0.5, y + 0.5, cell_w - 1, cell_h - 1,
                 {{"class", "fill"}, {"fill", hc->fill}, {"stroke", hc->outline ? "#000" : "none"}, {"stroke-width", hc->outline ? "2.5" : "0"}});
          w.text(x + cell_w / 2, y + cell_h / 2 + 4, hc->text, "middle", {{"class", "mark"}, {"fill", hc->text_colour.hex()}});
          w.close();
        }
      }
      w.close();
    }
  }
}

/// Distinct length columns of `cells` (by the longest sequence, then the text).
std::vector<std::string> length_columns(const std::vector<std::pair<int, std::string>>& lens) {
  std::vector<std::pair<int, std::string>> v = lens;
  std::sort(v.begin(), v.end(), ctx_less);
  v.erase(std::unique(v.begin(), v.end()), v.end());
  std::vector<std::string> out;
  for (const auto& [n, s] : v) out.push_back(s);
  return out;
}

constexpr const char* kHatchId = "hatch-nonfinite";

std::string margin_figure(const RunSummary& s, const std::vector<CellInfo>& cells) {
  std::string body;
  bool any = false;
  for (const auto& suite : suites_in(cells)) {
    // Worst finite margin per kernel, shape and length; non-finite and over-limit flags.
    struct Acc {
      double worst = -1;
      bool nonfinite = false, failed = false;
      int n = 0;
      std::string worst_cell;
    };
    std::map<std::string, Acc> acc;  // kernel \n shape \n ctx
    std::vector<std::string> shapes;
    std::vector<std::pair<int, std::string>> lens;
    std::vector<const CellInfo*> in;
    for (const auto& c : cells) {
      if (c.r->suite != suite || !has_output(c.r->verdict)) continue;
      in.push_back(&c);
      if (std::find(shapes.begin(), shapes.end(), c.shape) == shapes.end()) shapes.push_back(c.shape);
      lens.push_back({c.length, c.ctx});
      Acc& a = acc[c.r->kernel + '\n' + c.shape + '\n' + c.ctx];
      ++a.n;
      if (!std::isfinite(c.r->margin)) a.nonfinite = true;
      else if (c.r->margin > a.worst) a.worst = c.r->margin, a.worst_cell = c.r->cell_id;
      if (is_failure(c.r->verdict) && !(c.r->expected_fail && is_control(s, c.r->kernel))) a.failed = true;
    }
    if (in.empty()) continue;
    any = true;
    const std::vector<std::string> cols = length_columns(lens);
    const std::vector<std::string> kernels = kernels_in(s, in);
    constexpr std::size_t kMaxShapes = 80;
    std::string note;
    if (shapes.size() > kMaxShapes) {
      note = fmt::format("{} of {} shapes shown. ", kMaxShapes, shapes.size());
      shapes.resize(kMaxShapes);
    }
    const double legend_h = 56;
    const std::string row_axis = "shape (heads, head size, block, dtype)", col_axis = "context length (tokens)";
    const HeatLayout l = layout_heat(kernels, shapes, cols, row_axis, col_axis, 58, 20);
    // The legend runs to ~610 px: never clip it on a narrow map.
    svg::Writer w(std::max(l.width, 620.0), legend_h + l.height, std::string(html_ids::kMargin) + "-" + suite,
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
    svg::colour_bar(w, 12, 22, 260, 12, 0, 1, [](double t) { return svg::viridis(t); },
                    {{0, "0"}, {0.25, "0.25"}, {0.5, "0.5"}, {0.75, "0.75"}, {1, "1 = limit"}},
                    "margin = rel_linf / limit (unitless)");
    w.open("g", {{"class", "legend"}});
    w.rect(300, 22, 26, 14, {{"fill", fmt::format("url(#{}-{})", kHatchId, suite)}, {"stroke", "#888"}});
    w.text(331, 33, "NaN/Inf output", "start", {{"class", "legend"}});
    w.rect(440, 22, 26, 14, {{"fill", svg::viridis(1).hex()}, {"stroke", "#000"}, {"stroke-width", "2.5"}});
    w.text(471, 33, "failed (over the limit)", "start", {{"class", "legend"}});
    w.close();
    heat_panels(
        w, l, legend_h, kernels, shapes, cols, row_axis, col_axis,
        [&](std::size_t p, std::size_t r, std::size_t c) -> std::optional<HeatCell> {
          auto it = acc.find(kernels[p] + '\n' + shapes[r] + '\n' + cols[c]);
          if (it == acc.end()) return std::nullopt;
          const Acc& a = it->second;
          HeatCell hc;
          if (a.worst < 0 && a.nonfinite) {
            hc.fill = fmt::format("url(#{}-{})", kHatchId, suite);
            hc.text = "NaN";
            hc.text_colour = {17, 17, 17};
          } else {
            const Rgb col = svg::viridis(std::min(a.worst, 1.0));
            hc.fill = col.hex();
            hc.text = a.worst >= 10 ? ">10" : fmt::format("{:.2f}", a.worst);
            if (a.nonfinite) hc.text += "*";
            hc.text_colour = svg::text_on(col);
          }
          hc.outline = a.failed;
          hc.title = fmt::format("{} | {} ctx{}\nworst margin {} over {} cell(s){}{}\n{}", kernels[p], shapes[r], cols[c],
                                 a.worst < 0 ? "-" : fmt::format("{:.3f}", a.worst), a.n,
                                 a.nonfinite ? "; some gave NaN/Inf (*)" : "", a.failed ? "; FAILED" : "", a.worst_cell);
          return hc;
        });
    body += fmt::format("<h3>Suite {}</h3>\n", escape(suite)) + w.str();
    if (!note.empty()) body += "<p class=\"note\">" + escape(note) + "</p>";
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
  const HeatLayout l = layout_heat({panel}, shapes, cols, row_axis, col_axis, 64, 24);
  svg::Writer w(std::max(l.width, 560.0), legend_h + l.height, std::string(html_ids::kBenchRatio) + "-svg",
                fmt::format("Time ratio {} / {} per shape and context length", a, b),
                "Heat map: rows are shapes, columns context lengths; each cell is time(A) / time(B), purple when B is "
                "faster, orange when A is; hover a cell for both times.");
  std::vector<std::pair<double, std::string>> ticks;
  for (double r : {1 / max_dev, 0.5, 1.0, 2.0, max_dev}) {
    const double t = std::log(r) / lmax;
    if (std::none_of(ticks.begin(), ticks.end(), [&](const auto& k) { return std::abs(k.first - t) < 0.12; }))
      ticks.push_back({t, fmt::format("{}\xC3\x97", svg::tick_label(std::round(r * 100) / 100))});
  }
  svg::colour_bar(w, 24, 22, 300, 12, -1, 1, [](double t) { return svg::diverging(t); }, ticks,
                  "time(A) / time(B), log scale: above 1 means B is faster");
  heat_panels(
      w, l, legend_h, {panel}, shapes, cols, row_axis, col_axis,
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
  return figure(html_ids::kBenchRatio, "4. A/B time ratio per shape and context length", w.str(),
                fmt::format("<b>A/B time ratio</b> from <code>pacheck bench</code> on {}: each cell is the median time of A ({}) "
                            "divided by the median time of B ({}), same binary, same inputs; rows are shapes, columns the "
                            "context length in tokens. Purple (above 1) means B is faster, orange (below 1) means A is; hover a "
                            "cell for both times with their p10\xE2\x80\x93p90 spread. <b>Good</b> for a change that proposes "
                            "B: purple in every cell, with no orange cell and no <i>!</i> (a timed kernel whose output was "
                            "wrong \xE2\x80\x94 a fast wrong kernel is not a result).",
                            escape(bench->device), escape(a), escape(b)));
}

// ---- section 5: provenance ------------------------------------------------------------------------------

std::string provenance_section(const RunSummary& s, const ReportMeta& meta) {
  std::ostringstream o;
  o << "<section id=\"" << html_ids::kProvenance << "\">\n<h2>5. Provenance, instrument checks and repro commands</h2>\n";
  const Environment& e = meta.environment;
  o << "<h3>Environment fingerprint</h3>\n<table class=\"env\">\n";
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"pacheck version", e.pacheck_version}, {"git commit", e.git_commit},  {"build type", e.build_type},
      {"compiler", e.compiler},               {"host", e.host},              {"device", e.device},
      {"device name", e.device_name},         {"architecture", e.arch},      {"driver", e.driver},
      {"runtime", e.runtime},                 {"device description", e.device_description}};
  for (const auto& [k, v] : rows)
    if (!v.empty()) o << "<tr><th>" << escape(k) << "</th><td class=\"mono\">" << escape(v) << "</td></tr>\n";
  for (const auto& p : e.plugins)
    o << "<tr><th>plugin</th><td class=\"mono\">" << escape(p.path) << "<br>sha256 " << escape(p.sha256) << "</td></tr>\n";
  for (const auto& m : meta.merged_from)
    if (m.is_object()) o << "<tr><th>merged from</th><td class=\"mono\">" << escape(m.value("source", std::string())) << "</td></tr>\n";
  o << "</table>\n";

  o << "<h3>Comparator self-test</h3>\n<p>" << (s.selftest.passed ? "<b>passed</b>: the comparator flags the planted errors it is given."
                                                                     : "<b>FAILED</b>: the comparator missed a planted error; no verdict of this run can be trusted.")
    << "</p>\n";
  if (!s.selftest.lines.empty()) {
    o << "<details><summary>" << s.selftest.lines.size() << " checks</summary>\n<pre>";
    for (const auto& l : s.selftest.lines) o << escape(l) << "\n";
    o << "</pre></details>\n";
  }

  o << "<h3>Negative controls</h3>\n";
  bool any_control = false;
  std::ostringstream t;
  t << "<table><tr><th>kernel</th><th>outcome</th><th>expected failures caught</th><th>missed</th></tr>\n";
  for (const auto& k : s.kernels) {
    if (k.control == ControlOutcome::not_control) continue;
    any_control = true;
    const char* meaning = k.control == ControlOutcome::caught ? "caught: the instrument sees the planted fault"
                          : k.control == ControlOutcome::blind ? "BLIND: a planted fault passed unseen"
                                                               : "not exercised: no cell of this run can show its fault";
    t << "<tr><td class=\"mono\">" << escape(k.kernel) << "</td><td>" << escape(meaning) << "</td><td class=\"num\">" << k.caught
      << "</td><td class=\"num\">" << k.missed << "</td></tr>\n";
  }
  t << "</table>\n";
  if (any_control) o << t.str();
  else
    o << "<p class=\"note\">No negative control ran. A clean result means more with one beside it: e.g. "
         "<code>--kernel cpu.vector_v</code> on the tail-poison suite must fail exactly at the straddling V cells.</p>\n";

  std::vector<const CellResult*> failing;
  for (const auto& r : s.results)
    if (counts_as_failure(s, r)) failing.push_back(&r);
  o << "<h3>Failing cells (" << failing.size() << ")</h3>\n";
  if (failing.empty()) {
    o << "<p>None: every cell of every kernel under test passed or was declined, and every negative control failed where "
         "it must.</p>\n";
  } else {
    constexpr std::size_t kShow = 300;
    o << "<p>Rerun one cell with every metric and its worst elements:</p>\n<pre class=\"repro\">";
    for (std::size_t i = 0; i < std::min(kShow, failing.size()); ++i) {
      const CellResult& r = *failing[i];
      const bool missed = r.expected_fail && is_control(s, r.kernel);
      o << escape(fmt::format("pacheck repro {} --kernel {}", shell_quote(r.cell_id), shell_quote(r.kernel)))
        << "   <span class=\"note\"># " << escape(missed ? "negative control MISSED (passed)" : std::string(verdict_name(r.verdict)))
        << (std::isfinite(r.metrics.rel_linf) && has_output(r.verdict) ? escape(fmt::format(", rel_linf {}", sci(r.metrics.rel_linf))) : "")
        << "</span>\n";
    }
    o << "</pre>\n";
    if (failing.size() > kShow) o << "<p class=\"note\">... and " << failing.size() - kShow << " more in junit.xml and report.json.</p>\n";
    if (!e.plugins.empty())
      o << "<p class=\"note\">Plugin kernels: load the same libraries when reproducing (their SHA-256 are above).</p>\n";
  }
  o << "</section>\n";
  return o.str();
}

// ---- header ---------------------------------------------------------------------------------------------

std::string exit_meaning(int code) {
  switch (code) {
    case 0: return "every cell passed and every negative control was caught";
    case 1: return "some cell failed, or some kernel ran no cell";
    case 3: return "instrument blind: a negative control was not caught or the comparator self-test failed";
  }
  return "?";
}

std::string header(const RunSummary& s, const ReportMeta& meta) {
  std::ostringstream o;
  o << "<h1>pacheck report: " << escape(meta.suite) << "</h1>\n";
  o << "<p class=\"lede\">" << escape(fmt::format("device {} \xC2\xB7 pacheck {} ({}) \xC2\xB7 {} results from {} kernel(s)", meta.device,
                                                   meta.environment.pacheck_version, meta.environment.git_commit, s.results.size(),
                                                   s.kernels.size()))
    << "</p>\n";
  const int code = s.exit_code();
  o << "<div class=\"outcome " << (code == 0 ? "ok" : "bad") << "\"><b>exit code " << code << "</b>: " << escape(exit_meaning(code))
    << ". " << s.passed << " passed, " << s.failed << " failed, " << s.declined << " declined"
    << (s.caught ? fmt::format(", {} expected failures caught", s.caught) : "") << ".</div>\n";
  o << "<table><tr><th>kernel</th><th>passed</th><th>failed</th><th>declined</th><th>negative control</th></tr>\n";
  for (const auto& k : s.kernels)
    o << "<tr><td class=\"mono\">" << escape(k.kernel) << "</td><td class=\"num\">" << k.passed << "</td><td class=\"num\">" << k.failed
      << "</td><td class=\"num\">" << k.declined << "</td><td>" << escape(std::string(control_outcome_name(k.control)))
      << (k.vacuous ? " (ran no cell)" : "") << "</td></tr>\n";
  o << "</table>\n";
  o << "<nav><ol>"
    << fmt::format("<li><a href=\"#{}\">Fault matrix</a></li><li><a href=\"#{}\">Error against context length</a></li>"
                   "<li><a href=\"#{}\">Margin heat map</a></li><li><a href=\"#{}\">A/B time ratio</a></li>"
                   "<li><a href=\"#{}\">Provenance, checks and repro commands</a></li>",
                   html_ids::kFaultMatrix, html_ids::kErrorVsLength, html_ids::kMargin, html_ids::kBenchRatio, html_ids::kProvenance)
    << "</ol></nav>\n";
  return o.str();
}

}  // namespace

// ---- bench tables ---------------------------------------------------------------------------------------

BenchTable bench_from_json(const nlohmann::json& j) {
  BenchTable t;
  try {
    t.suite = j.value("suite", std::string());
    t.device = j.value("device", std::string());
    for (const auto& row : j.at("rows")) {
      BenchCaseRow r;
      r.case_id = row.at("case").get<std::string>();
      if (row.contains("kernels"))
        for (const auto& k : row.at("kernels")) {
          BenchTimingRow kt;
          kt.kernel = k.at("kernel").get<std::string>();
          kt.ran = k.value("ran", false);
          kt.note = k.value("note", std::string());
          kt.verdict = k.value("verdict", std::string("pass"));
          kt.median_us = k.value("median_us", 0.0);
          kt.p10_us = k.value("p10_us", 0.0);
          kt.p90_us = k.value("p90_us", 0.0);
          kt.rel_linf = k.value("rel_linf", 0.0);
          r.kernels.push_back(std::move(kt));
        }
      if (row.contains("ratio") && row["ratio"].is_number()) r.ratio = row["ratio"].get<double>();
      t.rows.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw ReportError(fmt::format("malformed bench results (expected `pacheck bench --json` output): {}", e.what()));
  }
  return t;
}

BenchTable load_bench(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ReportError(fmt::format("cannot read bench results '{}'", path));
  try {
    return bench_from_json(nlohmann::json::parse(in));
  } catch (const nlohmann::json::parse_error& e) {
    throw ReportError(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  } catch (const ReportError& e) {
    throw ReportError(fmt::format("{}: {}", path, e.what()));
  }
}

svg::Rgb verdict_colour(Verdict v) { return style_of(v).fill; }
std::string verdict_mark(Verdict v) { return style_of(v).mark; }

std::string html_report(const RunSummary& s, const ReportMeta& meta, const BenchTable* bench) {
  const std::vector<CellInfo> cells = describe_all(s);
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    // No network at all, even if a string in the page were mistaken for a URL.
    << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n"
    << "<title>" << escape(fmt::format("pacheck report: {} on {}", meta.suite, meta.device)) << "</title>\n"
    << "<style>" << kCss << "</style>\n</head>\n<body>\n<main>\n";
  o << header(s, meta);
  o << fault_matrix_figure(s, cells);
  o << error_length_figure(s, cells);
  o << margin_figure(s, cells);
  o << bench_figure(bench);
  o << provenance_section(s, meta);
  o << "</main>\n</body>\n</html>\n";
  return o.str();
}

}  // namespace pacheck
