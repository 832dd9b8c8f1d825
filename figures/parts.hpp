// The building blocks report.html's figures share (internal to figures/, not an interface):
//   cells.cpp         what a cell is from its ids (CellInfo), verdict styles, legends, labels, figure wrapper
//   fault_matrix.cpp  figure 1, the fault matrix
//   error_length.cpp  figure 2, error against context length
//   heatmap.cpp       the heat-map layout and figure 3, the margin heat map
//   bench.cpp         figure 4, the A/B time ratio
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "figures/figures.hpp"
#include "figures/svg.hpp"

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

/// The suites of `cells`, in order of first appearance.
std::vector<std::string> suites_in(const std::vector<CellInfo>& cells);
/// The kernels of `s` that have a cell in `cells`, in the summary's order.
std::vector<std::string> kernels_in(const RunSummary& s, const std::vector<const CellInfo*>& cells);

/// The figure wrapper: <figure id> with a heading, the SVGs, and a caption that says what good looks like.
std::string figure(const char* id, const std::string& heading, const std::string& body, const std::string& caption);
/// One legend entry: the series it names (its data-series key, which the drawn marks of that series carry
/// too, so the browser check can tell a key for something not drawn), its text, and a swatch drawn in the
/// 26 x 15 box whose top-left corner is (x, y).
struct LegendEntry {
  std::string series;
  std::string text;
  std::function<void(svg::Writer& w, double x, double y)> swatch;
};
/// A swatch: a rect of `fill` (outlined in grey) with `mark` written in it when not empty.
std::function<void(svg::Writer&, double, double)> fill_swatch(svg::Rgb fill, std::string mark = "");
/// Height in pixels of `entries` laid out left to right from x = `x0`, wrapping back to x = `x0` before
/// `width` (20 px per line; 0 for no entries).
double legend_height(const std::vector<LegendEntry>& entries, double x0, double width);
/// Draws `entries` as legend_height() lays them out, the first line's top at `top`, inside
/// <g class="legend">, each entry a <g data-series="...">.
void draw_legend(svg::Writer& w, const std::vector<LegendEntry>& entries, double x0, double top, double width);

/// `text` cut to fit `max_px` when set at `font_px` (bold when `bold`), ending in an ellipsis; unchanged when
/// it fits.
std::string abbreviate(const std::string& text, double font_px, double max_px, bool bold = false);
/// <text> of `text` at (x, y) cut to `max_px` by abbreviate(); a cut text is wrapped in a <g> whose <title>
/// holds the whole text (the hover shows it).
void fitted_text(svg::Writer& w, double x, double y, const std::string& text, double max_px, double font_px, bool bold,
                 std::string_view anchor, svg::Attrs attrs);
/// A context-length label: runs of equal lengths written once with a count ("8192x64" for a batch of 64
/// sequences of 8192 tokens, with the multiplication sign), other lists as they are ("1030,33,517").
std::string ctx_label(const std::string& ctx);

/// An SVG for the page: as it is when it fits the page's width (kPageWidth), else inside
/// <div class="chart-scroll">, which scrolls sideways and keeps the SVG at its full size (scaling it down to
/// the page would shrink its text below readable).
std::string chart(const svg::Writer& w);

/// One heat-map cell: its fill, the text written in it, its hover title and whether it is outlined.
struct HeatCell {
  std::string fill;  ///< colour, or "url(#...)" for a pattern
  std::string text;
  svg::Rgb text_colour;
  std::string title;
  bool outline = false;
  std::string series;          ///< legend key of the cell's fill ("nonfinite"), or empty
  std::string outline_series;  ///< legend key of its outline ("failed"), or empty
};

/// Where a heat map's parts go: a label column, then panels of rows x columns side by side, wrapping onto
/// further blocks when the page is too narrow; columns too many for one panel to fit the page even at the
/// narrowest cells wrap too, into groups drawn one under the other (each with its row labels and its
/// columns named on its axis title). Sizing the SVG and drawing into it share this.
struct HeatLayout {
  double cell_w = 0, cell_h = 0;
  double label_w = 0;     ///< row-label column
  double row_text_w = 0;  ///< the widest a row label is drawn (longer ones are cut, whole in their hover title)
  bool rotate = false;    ///< column labels at 45 degrees (they are wider than a cell)
  double header_h = 0;    ///< panel title, axis title and column labels above the grid
  double slot_w = 0;      ///< one panel with its gap: at least as wide as its title, axis title and last column label
  std::size_t per_block = 1, blocks = 1;  ///< panels per block, blocks per column group
  std::size_t group_cols = 1, groups = 1;  ///< columns per group (the last may hold fewer), groups
  double block_h = 0, width = 0, height = 0;
};
/// The widest a heat map's row label is drawn, in pixels.
inline constexpr double kMaxRowLabelPx = 320;
/// The layout of heat maps with these panel titles, row and column labels (as drawn) and axis titles, cells
/// of cell_w x cell_h pixels: cells narrow down to `min_cell_w` (what their text needs) when that keeps one
/// panel inside the page's width; a map that does not fit even so wraps its columns into groups that do, so
/// the map is never wider than the page and its text never shrinks.
HeatLayout layout_heat(const std::vector<std::string>& panels, const std::vector<std::string>& rows,
                       const std::vector<std::string>& cols, const std::string& row_axis, const std::string& col_axis,
                       double cell_w, double cell_h, double min_cell_w);
/// The cell at (panel, row, column), or nullopt for an empty one.
using HeatCellAt = std::function<std::optional<HeatCell>(std::size_t panel, std::size_t row, std::size_t col)>;
/// Draws the heat map laid out by `l` from pixel row `top`: row labels on the left, per panel a title,
/// column labels and the cells; a cell's <g> carries its data-series, its outline its outline_series.
void heat_panels(svg::Writer& w, const HeatLayout& l, double top, const std::vector<std::string>& panels,
                 const std::vector<std::string>& rows, const std::vector<std::string>& cols,
                 const std::string& row_axis, const std::string& col_axis, const HeatCellAt& cell);
/// Distinct length labels of (longest sequence, label) pairs, ordered by the longest sequence, then the label.
std::vector<std::string> length_columns(const std::vector<std::pair<int, std::string>>& lens);

}  // namespace pacheck::html
