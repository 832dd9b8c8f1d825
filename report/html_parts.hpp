// The parts report.html is built from, shared by its files (internal to report/, not an interface):
//   html.cpp               the page: header, provenance section, the html format
//   html_cells.cpp         what a cell is from its ids (CellInfo), verdict styles, figure wrapper
//   html_fault_matrix.cpp  figure 1, the fault matrix
//   html_error_length.cpp  figure 2, error against context length
//   html_heatmap.cpp       the heat-map layout and figure 3, the margin heat map
//   html_bench.cpp         bench tables and figure 4, the A/B time ratio
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "report/html_report.hpp"
#include "report/svg.hpp"

namespace pacheck::html {

/// Widest figure, in SVG pixels, before panels wrap onto another row.
inline constexpr double kPageWidth = 1120;

/// Fill and mark of a verdict in the fault matrix. Passing cells recede (pale blue); failures use the
/// Okabe-Ito orange, vermillion and reddish purple, which stay apart for deuteranopes by lightness and the
/// blue-yellow axis; every cell also carries its mark, so colour is never the only cue.
struct VerdictStyle {
  svg::Rgb fill;
  std::string mark;
  std::string meaning;
};
VerdictStyle style_of(Verdict v);

/// `v` joined with `sep` between elements.
std::string join(const std::vector<std::string>& v, std::string_view sep);
/// The whitespace-separated words of `s`.
std::vector<std::string> split_spaces(const std::string& s);
/// "vllm", "nhd" or "hnd": a case id's cache-layout word.
bool is_layout_token(const std::string& t);

/// One result with the parts of its case and fault the figures group by.
struct CellInfo {
  const CellResult* r = nullptr;
  std::string dtype;  ///< "bf16", or "bf16 q=f32 o=f32" for mixed dtypes
  std::string heads;  ///< "h32/8"
  int gqa = 1;
  int head_size = 0, block_size = 0;
  int length = 0;       ///< longest sequence of the batch
  std::string ctx;      ///< "4090" or "1030,33,517"
  std::string row_key;  ///< case id without the layout: the same suite cell for every kernel
  std::string shape;    ///< case id without lengths, seed and layout: a shape for figures 2 and 3
  std::string seed;
  std::string target;  ///< "clean", "K", "V", "K+V"
  std::string poison;  ///< "nan@tail", "" for clean
};
/// Results of `s`, described, deduplicated by (suite, kernel, cell) in report order; results whose case id
/// does not parse are left out (they are still listed in the tables).
std::vector<CellInfo> describe_all(const RunSummary& s);
/// The suites of `cells`, in order of first appearance.
std::vector<std::string> suites_in(const std::vector<CellInfo>& cells);
/// The kernels of `s` that have a cell in `cells`, in the summary's order.
std::vector<std::string> kernels_in(const RunSummary& s, const std::vector<const CellInfo*>& cells);

/// The figure wrapper: <figure id> with a heading, the SVGs, and a caption that says what good looks like.
std::string figure(const char* id, const std::string& heading, const std::string& body, const std::string& caption);
/// A legend entry at (x, baseline y): swatch (with `mark` in it when not empty), then its text; returns the
/// x after it.
double legend_swatch(svg::Writer& w, double x, double y, svg::Rgb fill, const std::string& mark,
                     const std::string& text);

/// One heat-map cell: its fill, the text written in it, its hover title and whether it is outlined.
struct HeatCell {
  std::string fill;  ///< colour, or "url(#...)" for a pattern
  std::string text;
  svg::Rgb text_colour;
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
/// The layout of heat maps with these panel titles, row and column labels and axis titles, cells of
/// cell_w x cell_h pixels.
HeatLayout layout_heat(const std::vector<std::string>& panels, const std::vector<std::string>& rows,
                       const std::vector<std::string>& cols, const std::string& row_axis, const std::string& col_axis,
                       double cell_w, double cell_h);
/// The cell at (panel, row, column), or nullopt for an empty one.
using HeatCellAt = std::function<std::optional<HeatCell>(std::size_t panel, std::size_t row, std::size_t col)>;
/// Draws the heat map laid out by `l` from pixel row `top`: row labels on the left, per panel a title,
/// column labels and the cells.
void heat_panels(svg::Writer& w, const HeatLayout& l, double top, const std::vector<std::string>& panels,
                 const std::vector<std::string>& rows, const std::vector<std::string>& cols,
                 const std::string& row_axis, const std::string& col_axis, const HeatCellAt& cell);
/// Distinct length labels of (longest sequence, label) pairs, ordered by the longest sequence, then the label.
std::vector<std::string> length_columns(const std::vector<std::pair<int, std::string>>& lens);

/// The figures of the page, each a <figure> (or a <section> saying why it is empty).
std::string fault_matrix_figure(const RunSummary& s, const std::vector<CellInfo>& cells);
std::string error_length_figure(const RunSummary& s, const std::vector<CellInfo>& cells);
std::string margin_figure(const RunSummary& s, const std::vector<CellInfo>& cells);
/// Figure 4 from `bench` (nullptr: a note saying how to get it).
std::string bench_figure(const BenchTable* bench);

}  // namespace pacheck::html
