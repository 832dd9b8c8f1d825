// A small SVG writer for the HTML report's figures: an element writer that escapes everything it is
// given, linear and log scales with readable ticks, axes, and colour-blind-safe palettes.
//
// Written here rather than taken from a library: Debian ships no C++ SVG *writer* (librsvg and Qt SVG
// render SVG; cairo's SVG surface turns text into glyph outlines, so the report would lose selectable
// text, <title> hover and its small size). The figures need only rects, lines, paths and text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pacheck::svg {

// ---- text -----------------------------------------------------------------------------------------------

/// `raw` made safe as XML/HTML text or attribute value: &, <, >, " and ' escaped, bytes that are not valid
/// UTF-8 and control characters other than tab/newline replaced by '?'. Kernel names, plugin paths and
/// error details come from outside pacheck and end up in the page.
std::string escape(std::string_view raw);

/// A number for an SVG coordinate: at most 2 decimals, trailing zeros dropped ("12.5", "3", "-0.25").
std::string num(double v);

/// Width in CSS pixels of `text` set in DejaVu Sans (bold when `bold`: font-weight 600 and above) at
/// `font_px`: figures size their label columns, cells and legends with it (the report has no script to
/// measure text). DejaVu Sans is the widest font of the page's font list, so on other machines text comes
/// out narrower, never wider; characters outside ASCII count as 0.84 em, about the widest symbol.
double text_width(std::string_view text, double font_px, bool bold = false);

// ---- colours --------------------------------------------------------------------------------------------

/// An sRGB colour.
struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  /// "#rrggbb".
  std::string hex() const;
  /// Relative luminance (WCAG 2), 0 for black to 1 for white.
  double luminance() const;
  bool operator==(const Rgb&) const = default;
};
/// Parses "#rrggbb"; throws std::invalid_argument otherwise.
Rgb parse_hex(std::string_view hex);
/// Black or white, whichever has the higher contrast on `background` (text inside heat-map cells).
Rgb text_on(Rgb background);
/// WCAG 2 contrast ratio of two colours (1 to 21).
double contrast(Rgb a, Rgb b);

/// Sequential, perceptually uniform, readable in every common colour-vision deficiency and in grey:
/// matplotlib's viridis, t in [0, 1] (clamped), dark purple to yellow.
Rgb viridis(double t);
/// Sequential, designed for deuteranopia (Nuñez et al. 2018): cividis, t in [0, 1], dark blue to yellow.
Rgb cividis(double t);
/// Diverging around a neutral centre, orange to purple (ColorBrewer PuOr's hues, safe for colour-blind
/// readers), with both arms mirror images in CIELAB lightness and chroma: t in [-1, 1] (clamped), -1
/// orange-brown, 0 near white, +1 purple; equal |t| looks equally strong on either side.
Rgb diverging(double t);
/// `c` as a reader with deuteranopia (no M cones) sees it (Viénot, Brettel & Mollon 1999, in linear RGB).
/// Tests use it to keep categorical colours apart for those readers.
Rgb simulate_deuteranopia(Rgb c);
/// CIE76 colour difference (Euclidean distance in CIELAB); ~2.3 is just noticeable, 20+ is clearly apart.
double delta_e(Rgb a, Rgb b);

// ---- scales and ticks -----------------------------------------------------------------------------------

/// A map from a data interval onto a pixel interval, linear or base-10 logarithmic. A log scale needs a
/// positive domain; values <= 0 map to the domain's low end (callers mark such points themselves).
class Scale {
 public:
  static Scale linear(double d0, double d1, double r0, double r1);
  static Scale log10(double d0, double d1, double r0, double r1);
  /// Pixel position of data value `v` (not clamped, except <= 0 on a log scale).
  double operator()(double v) const;
  bool is_log() const { return log_; }
  double d0() const { return d0_; }
  double d1() const { return d1_; }
  double r0() const { return r0_; }
  double r1() const { return r1_; }

 private:
  Scale(double d0, double d1, double r0, double r1, bool log) : d0_(d0), d1_(d1), r0_(r0), r1_(r1), log_(log) {}
  double d0_, d1_, r0_, r1_;
  bool log_;
};

/// A tick: its data value and its label.
struct Tick {
  double value;
  std::string label;
};
/// About `count` ticks at 1, 2 or 5 times a power of ten inside [lo, hi] (lo < hi), labelled compactly.
std::vector<Tick> linear_ticks(double lo, double hi, int count = 5);
/// Ticks for a log axis over [lo, hi] (0 < lo < hi): the powers of ten inside it, plus 2x and 5x when the
/// range spans under three decades, plus `extra` values when given (e.g. the context lengths measured, so
/// every measured length is labelled exactly). Labels: "1e-3" style on an axis that reaches tiny or huge
/// values, else plain.
std::vector<Tick> log_ticks(double lo, double hi, const std::vector<double>& extra = {});
/// A compact label for a value: 4090, 0.25, 2.1e-3 (always the last form when `scientific`).
std::string tick_label(double v, bool scientific = false);

/// The smallest "nice" interval [lo', hi'] containing [lo, hi] for a linear axis starting at 0 when
/// `from_zero`; a degenerate interval is widened so the scale stays defined.
std::pair<double, double> nice_linear_domain(double lo, double hi, bool from_zero);
/// A log domain around [lo, hi] (both > 0), padded by a fraction of a decade on each side, and widened to
/// at least a factor of 4 so one value still gets a readable axis.
std::pair<double, double> padded_log_domain(double lo, double hi);

// ---- the element writer ---------------------------------------------------------------------------------

/// Attributes of an element, in order. Values are escaped by the writer.
using Attrs = std::vector<std::pair<std::string, std::string>>;

/// Writes one <svg> element. Every text and attribute value is escaped; elements opened with open() are
/// closed by close() or by str(). The root carries role="img" and aria-labelledby its <title>/<desc>, so
/// a screen reader announces what the figure shows.
class Writer {
 public:
  /// An <svg> of `width` x `height` CSS pixels (viewBox the same, so it scales down on narrow screens),
  /// with `id` and an accessible `title` and `desc`.
  Writer(double width, double height, std::string id, std::string_view title, std::string_view desc);

  /// Opens <tag attrs...>; pair with close().
  Writer& open(std::string_view tag, const Attrs& attrs = {});
  /// Closes the innermost element opened with open(). Throws std::logic_error when none is open.
  Writer& close();
  /// An element with no children (<rect/>, <line/>, ...).
  Writer& empty(std::string_view tag, const Attrs& attrs);
  /// An element holding escaped text (<text>, <title>, <tspan>).
  Writer& text_element(std::string_view tag, const Attrs& attrs, std::string_view text);

  Writer& rect(double x, double y, double w, double h, Attrs attrs = {});
  Writer& line(double x1, double y1, double x2, double y2, Attrs attrs = {});
  /// An open polyline through `points`.
  Writer& polyline(const std::vector<std::pair<double, double>>& points, Attrs attrs = {});
  /// A closed polygon through `points`.
  Writer& polygon(const std::vector<std::pair<double, double>>& points, Attrs attrs = {});
  Writer& circle(double cx, double cy, double r, Attrs attrs = {});
  /// <text x y>text</text>; `anchor` is text-anchor ("start", "middle", "end").
  Writer& text(double x, double y, std::string_view text, std::string_view anchor = "start", Attrs attrs = {});
  /// <title>: the tooltip a browser shows on hover over the enclosing element.
  Writer& title(std::string_view text);

  double width() const { return width_; }
  double height() const { return height_; }
  /// The finished <svg> element (closing whatever is still open).
  std::string str() const;

 private:
  std::string out_;
  std::vector<std::string> stack_;
  double width_, height_;
};

/// Draws a bottom axis at pixel row `y` along `x`: the axis line, tick marks and labels from `ticks`
/// (those inside the domain), and `label` centred below, all inside <g class="axis x-axis">.
void axis_bottom(Writer& w, const Scale& x, double y, const std::vector<Tick>& ticks, std::string_view label);
/// Draws a left axis at pixel column `x` along `y`, with `label` rotated along it, inside
/// <g class="axis y-axis">. `grid_to` > x draws light grid lines from the axis to that column.
void axis_left(Writer& w, const Scale& y, double x, const std::vector<Tick>& ticks, std::string_view label,
               double grid_to = 0);

/// How a bottom axis of evenly spaced categories (band_axis()) writes its labels: `step` pixels apart,
/// horizontal when they fit, else turned to read upwards, and when even that crowds them, only every
/// `every`-th is written (every category keeps its tick mark). `height`: pixels below the axis line that the
/// labels and the axis title take.
struct BandAxis {
  double step = 0;
  bool vertical = false;
  std::size_t every = 1;
  double height = 0;
};
/// The BandAxis for `labels` (11 px text) `step` pixels apart.
BandAxis band_axis(const std::vector<std::string>& labels, double step);
/// Draws a bottom axis of evenly spaced categories at pixel row `y`, category i centred at x0 + (i + 0.5) *
/// a.step: the axis line, a tick mark per category, the labels as `a` says and `label` below them, inside
/// <g class="axis x-axis" data-categories="N"> where N is the number of labels written.
void axis_bottom_bands(Writer& w, double x0, double y, const BandAxis& a, const std::vector<std::string>& labels,
                       std::string_view label);

/// A horizontal colour bar for a continuous palette: `colour(t)` for t from `t0` to `t1` left to right,
/// with ticks at the given (t, label) positions and a title above, inside <g class="colorbar">. Ticks are
/// taken in the order given: one whose 11 px label would come within 4 px of a label already drawn is
/// left out, so list the ticks that must show (the ends) first.
template <class F>
void colour_bar(Writer& w, double x, double y, double width, double height, double t0, double t1, F colour,
                const std::vector<std::pair<double, std::string>>& ticks, std::string_view title) {
  w.open("g", {{"class", "colorbar"}});
  w.text(x, y - 6, title, "start", {{"class", "legend-title"}});
  const int steps = 48;
  for (int i = 0; i < steps; ++i) {
    const double t = t0 + (t1 - t0) * (i + 0.5) / steps;
    w.rect(x + width * i / steps, y, width / steps + 0.6, height, {{"fill", colour(t).hex()}});
  }
  w.rect(x, y, width, height, {{"fill", "none"}, {"stroke", "#555"}, {"stroke-width", "0.5"}});
  std::vector<std::pair<double, double>> drawn;  // left and right edge of each label written
  for (const auto& [t, label] : ticks) {
    const double px = x + width * (t - t0) / (t1 - t0);
    const double half = text_width(label, 11) / 2;
    if (std::any_of(drawn.begin(), drawn.end(),
                    [&](const auto& d) { return px - half < d.second + 4 && px + half > d.first - 4; }))
      continue;
    drawn.push_back({px - half, px + half});
    w.line(px, y + height, px, y + height + 4, {{"stroke", "#555"}});
    w.text(px, y + height + 15, label, "middle", {{"class", "tick"}});
  }
  w.close();
}

}  // namespace pacheck::svg
