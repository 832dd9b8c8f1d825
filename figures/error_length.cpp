// report.html figure 2, error against context length per kernel: rel_linf of every shape, the min-max band
// across shapes and the median where shapes share a length, on an axis of the measured lengths in order, with
// the tolerance limits (seed 000, figure 2).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "figures/parts.hpp"
#include "judge/comparator.hpp"  // sci
#include "judge/verdict.hpp"     // has_output

namespace pacheck::html {

using svg::escape;
using svg::Rgb;

namespace {

/// Series colours of figure 2, one per dtype: Okabe-Ito blue, bluish green, reddish purple and sky blue,
/// apart for colour-blind readers and from the vermillion of the NaN marks.
Rgb series_colour(std::size_t i) {
  static const char* const kColours[] = {"#0072b2", "#009e73", "#cc79a7", "#56b4e9"};
  return svg::parse_hex(i < 4 ? kColours[i] : "#777777");
}

/// The ink of the marks that hold for every colour (the legend's shape, band and median keys, shared limits).
Rgb grey_ink() { return svg::parse_hex("#555555"); }
/// The ink of the NaN/Inf triangles.
Rgb nan_ink() { return svg::parse_hex("#d55e00"); }

/// One kernel's cells of one dtype. Bands are per dtype: bf16 and f16 errors differ several-fold, and one
/// band across both would show the dtype, not the kernel.
struct DtypeErrors {
  std::map<std::string, std::map<int, double>> by_shape;  // shape -> length -> rel_linf (worst seed and fault)
  std::map<int, double> limit_at;  // length -> the largest limit of a cell of that length
};
/// A cell drawn on its own over the series: a failed one (its × mark) or one whose output held NaN/Inf
/// (a triangle on the top edge).
struct MarkedCell {
  int length = 0;
  double rel_linf = 0;  ///< NaN where the cell has no output
  std::string cell_id, verdict;
};
/// One kernel's panel: its cells with an output (clean and faulted), by dtype; those whose output held
/// NaN/Inf; those that failed the run, output or not.
struct ErrorSeries {
  std::map<std::string, DtypeErrors> by_dtype;
  std::vector<MarkedCell> nonfinite, failed;
  int cells = 0, faulted = 0;
  std::size_t shapes = 0;
};

/// What figure 2 plots: every cell with an output, clean and faulted, per kernel, dtype and shape.
struct ErrorData {
  std::map<std::string, ErrorSeries> per_kernel;
  std::vector<std::string> kernels;  ///< those with such a cell, in the summary's order
  std::vector<std::string> dtypes;   ///< colour order, first appearance
  std::vector<double> lengths;       ///< of every cell plotted
  std::vector<double> values;        ///< every finite rel_linf and limit plotted
  Rgb colour_of(const std::string& dtype) const {
    return series_colour(static_cast<std::size_t>(std::find(dtypes.begin(), dtypes.end(), dtype) - dtypes.begin()));
  }
};

/// Cells with an output, clean and faulted, per kernel, dtype and shape: the worst rel_linf at each length
/// (over seeds and faults: a poison a kernel must not read leaves its error where the clean cell's is, so a
/// kernel that reads it rises here). A failed cell is also marked on its own, with an output or without.
ErrorData gather_errors(const RunSummary& s, const std::vector<CellInfo>& cells) {
  ErrorData d;
  for (const auto& c : cells) {
    if (c.length <= 0) continue;
    const bool output = has_output(c.r->verdict);
    const bool failed = counts_as_failure(s, *c.r);
    if (!output && !failed) continue;  // declined, not_run: nothing measured
    ErrorSeries& se = d.per_kernel[c.r->kernel];
    d.lengths.push_back(c.length);
    if (failed)
      se.failed.push_back({c.length, output ? c.r->metrics.rel_linf : NAN, c.r->cell_id, std::string(verdict_name(c.r->verdict))});
    if (!output) continue;
    ++se.cells;
    if (c.target != "clean") ++se.faulted;
    if (std::find(d.dtypes.begin(), d.dtypes.end(), c.dtype) == d.dtypes.end()) d.dtypes.push_back(c.dtype);
    DtypeErrors& ds = se.by_dtype[c.dtype];
    if (std::isfinite(c.r->limit) && c.r->limit > 0) {
      double& lim = ds.limit_at[c.length];
      lim = std::max(lim, c.r->limit);
      d.values.push_back(c.r->limit);
    }
    const double v = c.r->metrics.rel_linf;
    if (!std::isfinite(v)) {
      se.nonfinite.push_back({c.length, v, c.r->cell_id, std::string(verdict_name(c.r->verdict))});
      continue;
    }
    auto [it, fresh] = ds.by_shape[c.shape].emplace(c.length, v);
    if (!fresh) it->second = std::max(it->second, v);
    d.values.push_back(v);
  }
  for (auto& [k, se] : d.per_kernel)
    for (const auto& [dt, ds] : se.by_dtype) se.shapes += ds.by_shape.size();
  for (const auto& k : s.kernels)
    if (d.per_kernel.count(k.kernel)) d.kernels.push_back(k.kernel);
  return d;
}

/// The axes every panel shares, so kernels compare at a glance. x: the measured lengths in order, evenly
/// spaced (a log axis drew 4090 and 4096, or 15, 16 and 17, on one pixel: the lengths a suite pairs to tell
/// a straddling block from an aligned one). y: linear from 0, or log when the values span over 30x.
struct ErrorAxes {
  std::vector<int> lengths;  ///< distinct, ascending
  std::vector<std::string> labels;
  bool log_y = false, has_zero = false;
  double yd0 = 0, yd1 = 0;
  std::vector<svg::Tick> y_ticks;
  double index_of(int len) const {
    return static_cast<double>(std::lower_bound(lengths.begin(), lengths.end(), len) - lengths.begin());
  }
};

ErrorAxes shared_axes(const ErrorData& d) {
  ErrorAxes a;
  for (double l : d.lengths) a.lengths.push_back(static_cast<int>(l));
  std::sort(a.lengths.begin(), a.lengths.end());
  a.lengths.erase(std::unique(a.lengths.begin(), a.lengths.end()), a.lengths.end());
  for (int l : a.lengths) a.labels.push_back(std::to_string(l));
  double vmin_pos = INFINITY, vmax = 0;
  for (double v : d.values) {
    if (v > 0) vmin_pos = std::min(vmin_pos, v);
    vmax = std::max(vmax, v);
  }
  a.has_zero = std::any_of(d.values.begin(), d.values.end(), [](double v) { return v <= 0; });
  a.log_y = std::isfinite(vmin_pos) && vmax / vmin_pos > 30;
  if (a.log_y) std::tie(a.yd0, a.yd1) = svg::padded_log_domain(vmin_pos, vmax);
  else std::tie(a.yd0, a.yd1) = svg::nice_linear_domain(0, vmax > 0 ? vmax * 1.08 : 1e-3, true);
  a.y_ticks = a.log_y ? svg::log_ticks(a.yd0, a.yd1) : svg::linear_ticks(a.yd0, a.yd1, 5);
  return a;
}

/// Where the panels go: two per row when two fit the page; a panel gives each length 14 px (room for a label
/// turned upright) up to the page's width, and at least 8 px (past the page's width: the figure scrolls).
struct ErrorLayout {
  double ml = 0, mr = 16, mt = 30, plot_h = 214;  ///< margins and plot height of a panel
  double pw = 0, ph = 0;                          ///< a panel's width and height
  double step = 0;                                ///< pixels per length
  std::size_t per_row = 1, nrows = 1;
  double width = 0;
  svg::BandAxis x_axis;
};

ErrorLayout layout_panels(const ErrorData& d, const ErrorAxes& a) {
  ErrorLayout l;
  double widest_y = 0;
  for (const auto& t : a.y_ticks) widest_y = std::max(widest_y, svg::text_width(t.label, 11));
  l.ml = std::max(70.0, widest_y + 48);
  const double n = static_cast<double>(a.lengths.size());
  l.pw = std::max({540.0, std::min(kPageWidth, l.ml + l.mr + n * 14), l.ml + l.mr + n * 8});
  l.per_row = 2 * l.pw <= kPageWidth ? 2 : 1;
  l.step = (l.pw - l.ml - l.mr) / n;
  l.x_axis = svg::band_axis(a.labels, l.step);
  l.ph = l.mt + l.plot_h + l.x_axis.height + 14;
  l.nrows = (d.kernels.size() + l.per_row - 1) / l.per_row;
  l.width = l.pw * static_cast<double>(std::min(l.per_row, d.kernels.size()));
  return l;
}

/// What a panel draws per dtype: the worst-seed rel_linf of each shape at each length; where two or more
/// shapes share a length, their min-max band and median.
struct LengthStats {
  std::map<int, std::vector<double>> at_len;  // length -> values of the shapes there, sorted
};
LengthStats length_stats(const DtypeErrors& ds) {
  LengthStats st;
  for (const auto& [shape, pts] : ds.by_shape)
    for (const auto& [len, v] : pts) st.at_len[len].push_back(v);
  for (auto& [len, vs] : st.at_len) std::sort(vs.begin(), vs.end());
  return st;
}
/// The key dtypes share a limit line by: one value at every length is a line across the panel, whatever
/// lengths the dtype has; a limit that grows with the length (the fixed policy's fp32 accumulation term,
/// calibrated limits) goes through its lengths.
std::map<int, double> limit_key(const DtypeErrors& ds) {
  const bool constant = std::all_of(ds.limit_at.begin(), ds.limit_at.end(),
                                    [&](const auto& e) { return e.second == ds.limit_at.begin()->second; });
  return constant ? std::map<int, double>{{0, ds.limit_at.begin()->second}} : ds.limit_at;
}

/// The × of a failed cell, centred on (x, y).
void draw_cross(svg::Writer& w, double x, double y) {
  const svg::Attrs ink = {{"stroke", nan_ink().hex()}, {"stroke-width", "2.2"}};
  w.line(x - 5, y - 5, x + 5, y + 5, ink);
  w.line(x - 5, y + 5, x + 5, y - 5, ink);
}

/// The legend: the dtype colours, then what each kind of mark means (drawn in grey: it holds for every
/// colour), only for marks some panel draws.
std::vector<LegendEntry> error_legend(const ErrorData& d) {
  bool any_band = false, any_limit = false, any_nonfinite = false, any_failed = false, shared_limit = false;
  for (const auto& k : d.kernels) {
    const ErrorSeries& se = d.per_kernel.at(k);
    any_nonfinite = any_nonfinite || !se.nonfinite.empty();
    any_failed = any_failed || !se.failed.empty();
    std::set<std::map<int, double>> keys;
    std::size_t with_limit = 0;
    for (const auto& [dt, ds] : se.by_dtype) {
      if (!ds.limit_at.empty()) keys.insert(limit_key(ds)), ++with_limit;
      for (const auto& [len, vs] : length_stats(ds).at_len) any_band = any_band || vs.size() >= 2;
    }
    any_limit = any_limit || with_limit > 0;
    shared_limit = shared_limit || keys.size() < with_limit;
  }
  std::vector<LegendEntry> legend;
  const Rgb grey = grey_ink(), nan = nan_ink();
  for (const auto& dt : d.dtypes) legend.push_back({"dtype-" + dt, dt, fill_swatch(d.colour_of(dt))});
  legend.push_back({"shape", "one shape: its lengths joined (hover for its name)", [grey](svg::Writer& w, double x, double y) {
                      w.line(x, y + 10, x + 26, y + 4, {{"stroke", grey.hex()}, {"stroke-opacity", "0.5"}});
                      w.circle(x + 4, y + 9.5, 2.6, {{"fill", grey.hex()}});
                      w.circle(x + 22, y + 5, 2.6, {{"fill", grey.hex()}});
                    }});
  if (any_band) {
    legend.push_back({"band", "min\xE2\x80\x93max across shapes", [grey](svg::Writer& w, double x, double y) {
                        w.rect(x, y, 26, 14, {{"fill", grey.hex()}, {"fill-opacity", "0.2"}});
                      }});
    legend.push_back({"median", "median of the shapes", [grey](svg::Writer& w, double x, double y) {
                        w.line(x, y + 7, x + 26, y + 7, {{"stroke", grey.hex()}, {"stroke-width", "2.6"}});
                        w.circle(x + 13, y + 7, 3.6, {{"fill", "#fff"}, {"stroke", grey.hex()}, {"stroke-width", "2"}});
                      }});
  }
  if (any_limit)
    legend.push_back({"limit", shared_limit ? "tolerance limit (grey: one that several dtypes share)" : "tolerance limit of the dtype", [grey](svg::Writer& w, double x, double y) {
                        w.line(x, y + 7, x + 26, y + 7, {{"stroke", grey.hex()}, {"stroke-width", "1.5"}, {"stroke-dasharray", "6 3"}});
                      }});
  if (any_nonfinite)
    legend.push_back({"nonfinite", "NaN/Inf output", [nan](svg::Writer& w, double x, double y) {
                        w.polygon({{x + 13, y + 13}, {x + 6, y}, {x + 20, y}}, {{"fill", nan.hex()}});
                      }});
  if (any_failed)
    legend.push_back({"failed", "failed cell (on the top edge: no finite output)", [](svg::Writer& w, double x, double y) {
                        draw_cross(w, x + 13, y + 7);
                      }});
  return legend;
}

/// One panel's plot area in pixels and its scales.
struct ErrorPanel {
  double px0, px1, py0, py1;
  double step;
  const ErrorAxes& axes;
  svg::Scale y;
  double x(int len) const { return px0 + step * (axes.index_of(len) + 0.5); }
};

/// Tolerance limits: dtypes with the same limit share one line (grey), labelled once, at the right end above
/// the line, else below it, else left out (the hover has it).
void draw_limits(svg::Writer& w, const ErrorData& d, const ErrorSeries& se, const ErrorPanel& p) {
  std::map<std::map<int, double>, std::vector<std::string>> limit_groups;
  for (const auto& [dtype, ds] : se.by_dtype)
    if (!ds.limit_at.empty()) limit_groups[limit_key(ds)].push_back(dtype);
  std::vector<std::pair<double, double>> taken;  // vertical extents of the limit labels placed
  for (const auto& [limits, group] : limit_groups) {
    const std::string ink = group.size() == 1 ? d.colour_of(group.front()).hex() : grey_ink().hex();
    double lo = INFINITY, hi = 0;
    for (const auto& [len, lim] : limits) lo = std::min(lo, lim), hi = std::max(hi, lim);
    const std::string names = join(group, ", ");
    const std::string value = lo == hi ? svg::tick_label(hi, true) : fmt::format("{} to {}", svg::tick_label(lo, true), svg::tick_label(hi, true));
    w.open("g", {{"class", "limit-group"}, {"data-series", "limit"}});
    w.title(fmt::format("tolerance limit of {}: rel_linf {}", names, lo == hi ? sci(hi) : fmt::format("{} to {}", sci(lo), sci(hi))));
    double label_y;
    if (lo == hi) {
      label_y = std::clamp(p.y(hi), p.py0, p.py1);
      w.line(p.px0, label_y, p.px1, label_y, {{"class", "limit"}, {"stroke", ink}, {"stroke-width", "1.5"}, {"stroke-dasharray", "6 3"}});
    } else {
      std::vector<std::pair<double, double>> path;
      for (const auto& [len, lim] : limits) path.push_back({p.x(len), std::clamp(p.y(lim), p.py0, p.py1)});
      w.polyline(path, {{"class", "limit"}, {"stroke", ink}, {"stroke-width", "1.5"}, {"stroke-dasharray", "6 3"}});
      label_y = path.back().second;
    }
    const std::string text = abbreviate(group.size() == 1 ? fmt::format("{} limit {}", group.front(), value)
                                                          : fmt::format("limit {}: {} and {} more", value, group.front(), group.size() - 1),
                                        11, (p.px1 - p.px0) * 0.6);
    for (double base : {label_y - 4, label_y + 13}) {
      const double top = base - 10, bottom = base + 3;
      if (top < p.py0 + 1 || bottom > p.py1 - 1) continue;
      if (std::any_of(taken.begin(), taken.end(), [&](const auto& t) { return top < t.second && bottom > t.first; })) continue;
      taken.push_back({top, bottom});
      w.text(p.px1 - 4, base, text, "end", {{"class", "tick limit-label"}, {"fill", ink}});
      break;
    }
    w.close();
  }
}

/// The lengths where two or more shapes share a length, in runs of consecutive such lengths.
std::vector<std::vector<int>> band_runs(const LengthStats& st) {
  std::vector<std::vector<int>> runs;
  int prev = -1;
  for (const auto& [len, vs] : st.at_len) {
    if (vs.size() < 2) {
      prev = -1;
      continue;
    }
    if (prev < 0) runs.emplace_back();
    runs.back().push_back(len);
    prev = len;
  }
  return runs;
}

/// A dtype's band (min to max across shapes) and median over one run of lengths.
void draw_band(svg::Writer& w, const std::string& dtype, const std::string& ink, const LengthStats& st,
               const std::vector<int>& run, const ErrorPanel& p) {
  std::vector<std::pair<double, double>> upper, lower, median;
  for (int len : run) {
    const auto& vs = st.at_len.at(len);
    const double med = vs.size() % 2 ? vs[vs.size() / 2] : (vs[vs.size() / 2 - 1] + vs[vs.size() / 2]) / 2;
    upper.push_back({p.x(len), p.y(vs.back())});
    lower.push_back({p.x(len), p.y(vs.front())});
    median.push_back({p.x(len), p.y(med)});
  }
  if (run.size() == 1) {  // one length: the band as a bar a third of a step wide
    const double half = std::max(3.0, p.step / 6);
    upper = {{upper[0].first - half, upper[0].second}, {upper[0].first + half, upper[0].second}};
    lower = {{lower[0].first - half, lower[0].second}, {lower[0].first + half, lower[0].second}};
  }
  std::vector<std::pair<double, double>> band = upper;
  band.insert(band.end(), lower.rbegin(), lower.rend());
  w.open("g", {{"class", "band"}, {"data-series", "band"}});
  w.title(fmt::format("{}: min\xE2\x80\x93max of rel_linf across the shapes at {} length(s)", dtype, run.size()));
  w.polygon(band, {{"fill", ink}, {"fill-opacity", "0.2"}, {"stroke", ink}, {"stroke-opacity", "0.35"}});
  w.close();
  w.open("g", {{"class", "median-group"}, {"data-series", "median"}});
  if (median.size() > 1) w.polyline(median, {{"class", "median"}, {"stroke", ink}, {"stroke-width", "2.6"}});
  for (std::size_t i = 0; i < median.size(); ++i)
    w.circle(median[i].first, median[i].second, 3.6,
             {{"fill", "#fff"}, {"stroke", ink}, {"stroke-width", "2"}, {"data-x", std::to_string(run[i])}});
  w.close();
}

/// A dtype's marks: its bands and medians, then each shape's points joined by a line.
void draw_dtype(svg::Writer& w, const std::string& dtype, const DtypeErrors& ds, const std::string& ink, const ErrorPanel& p) {
  const LengthStats st = length_stats(ds);
  w.open("g", {{"class", "dtype-series"}, {"data-dtype", dtype}, {"data-series", "dtype-" + dtype}});
  for (const auto& run : band_runs(st)) draw_band(w, dtype, ink, st, run, p);
  for (const auto& [shape, pts] : ds.by_shape) {
    std::vector<std::pair<double, double>> line;
    for (const auto& [len, v] : pts) line.push_back({p.x(len), p.y(v)});
    w.open("g", {{"class", "series"}, {"data-series", "shape"}});
    w.title(shape);
    if (line.size() > 1) w.polyline(line, {{"stroke", ink}, {"stroke-opacity", "0.5"}, {"stroke-width", "1"}});
    for (const auto& [len, v] : pts) {
      w.open("g", {{"class", "point"}, {"data-x", std::to_string(len)}});
      w.title(fmt::format("{} ctx{}: rel_linf {} (worst of its seeds and faults)", shape, len, sci(v)));
      w.circle(p.x(len), p.y(v), 2.6, {{"fill", ink}, {"fill-opacity", "0.7"}});
      w.close();
    }
    w.close();
  }
  w.close();
}

/// The cells drawn on their own: a triangle on the top edge at the length of each cell that gave NaN/Inf,
/// and a × on each failed cell (on the top edge when it has no finite output).
void draw_marked_cells(svg::Writer& w, const ErrorSeries& se, const ErrorPanel& p) {
  for (const MarkedCell& c : se.nonfinite) {
    const double tx = p.x(c.length), ty = p.py0;
    w.open("g", {{"class", "nonfinite"}, {"data-series", "nonfinite"}, {"data-x", std::to_string(c.length)}});
    w.title(fmt::format("{}: NaN/Inf output ({})", c.cell_id, c.verdict));
    w.polygon({{tx, ty + 12}, {tx - 6, ty}, {tx + 6, ty}}, {{"fill", nan_ink().hex()}});
    w.close();
  }
  for (const MarkedCell& c : se.failed) {
    const bool finite = std::isfinite(c.rel_linf);
    const double y = finite ? std::clamp(p.y(c.rel_linf), p.py0 + 6, p.py1 - 6) : p.py0 + 18;
    w.open("g", {{"class", "failed"}, {"data-series", "failed"}, {"data-x", std::to_string(c.length)}});
    w.title(fmt::format("{}: FAILED ({}{})", c.cell_id, c.verdict, finite ? ", rel_linf " + sci(c.rel_linf) : ""));
    draw_cross(w, p.x(c.length), y);
    w.close();
  }
}

/// Kernel number `i`'s panel: title, frame, axes, limits, each dtype's marks and the marked cells.
void draw_error_panel(svg::Writer& w, const ErrorData& d, const ErrorAxes& a, const ErrorLayout& l, double legend_h,
                std::size_t i) {
  const std::string& kernel = d.kernels[i];
  const ErrorSeries& se = d.per_kernel.at(kernel);
  const double ox = l.pw * static_cast<double>(i % l.per_row), oy = legend_h + l.ph * static_cast<double>(i / l.per_row);
  const double px0 = ox + l.ml, px1 = ox + l.pw - l.mr, py0 = oy + l.mt, py1 = oy + l.mt + l.plot_h;
  const ErrorPanel p{px0, px1, py0, py1, l.step, a,
                a.log_y ? svg::Scale::log10(a.yd0, a.yd1, py1, py0) : svg::Scale::linear(a.yd0, a.yd1, py1, py0)};
  w.open("g", {{"class", "panel"}, {"data-kernel", kernel}});
  fitted_text(w, px0, py0 - 10,
              fmt::format("{}  ({} shape{}, {} cell{}, {} faulted{})", kernel, se.shapes, se.shapes == 1 ? "" : "s", se.cells,
                          se.cells == 1 ? "" : "s", se.faulted, se.failed.empty() ? "" : fmt::format("; {} FAILED", se.failed.size())),
              px1 - px0, 13, true, "start", {{"class", "panel-title"}});
  w.rect(px0, py0, px1 - px0, l.plot_h, {{"fill", "#fcfcfc"}, {"stroke", "#ddd"}});
  axis_left(w, p.y, px0, a.y_ticks, std::string("rel_linf, unitless") + (a.log_y ? " (log scale)" : ""), px1);
  svg::axis_bottom_bands(w, px0, py1, l.x_axis, a.labels, "context length (tokens, in order)");
  draw_limits(w, d, se, p);
  for (const auto& [dtype, ds] : se.by_dtype) draw_dtype(w, dtype, ds, d.colour_of(dtype).hex(), p);
  draw_marked_cells(w, se, p);
  w.close();
}

constexpr const char* kErrorHeading = "2. Error against context length";
constexpr const char* kErrorCaption =
    "<b>Error against context length.</b> Every cell with an output, clean and faulted alike (a poison the kernel must "
    "not read leaves its error where the clean cell's is); rel_linf is the largest absolute error over the largest "
    "absolute reference value (unitless, against the fp32/f64 oracle computed from the pre-paging K/V). x is the longest "
    "sequence of the batch in tokens: every length measured, in order and evenly spaced (not to scale), so lengths a "
    "suite pairs (4090 and 4096, 15, 16 and 17) stay apart. One colour per dtype: points are single shapes (worst "
    "seed and fault), joined per shape; where two or more shapes share a length, the shaded band spans the lowest to the highest "
    "and the bold line is their median; the dashed line is the tolerance limit (grey where several dtypes share it; "
    "hover it for which). <b>Good:</b> each dtype's points flat and well under its limit at every length "
    "\xE2\x80\x94 a different accumulation order shows as a slight offset between kernels, not a rise. Points that "
    "climb with length mean error grows with the sum; a triangle means a cell gave NaN/Inf, and a red \xC3\x97 marks a "
    "cell that failed (hover it for its verdict; on the top edge when it has no finite output): a kernel under "
    "test should have none.";

}  // namespace

std::string error_length_figure(const RunSummary& s, const std::vector<CellInfo>& cells) {
  const ErrorData d = gather_errors(s, cells);
  if (d.kernels.empty())
    return figure(html_ids::kErrorVsLength, kErrorHeading,
                  "<p class=\"note\">No cell with an output in this report: nothing to plot.</p>",
                  "<b>Error against context length.</b> Needs cells with an output. <b>Good:</b> a run with cells "
                  "that ran draws a flat band here.");
  const ErrorAxes a = shared_axes(d);
  const ErrorLayout l = layout_panels(d, a);
  const std::vector<LegendEntry> legend = error_legend(d);
  const double legend_h = legend_height(legend, 4, l.width) + 12;
  const double height = legend_h + l.ph * static_cast<double>(l.nrows);
  svg::Writer w(l.width, height, std::string(html_ids::kErrorVsLength) + "-svg",
                "Relative L-infinity error against context length, per kernel",
                "One panel per kernel, one colour per dtype: each shape's rel_linf at each context length (points, joined "
                "per shape), where shapes share a length the min-max band across them (shaded) and their median (bold), "
                "and the tolerance limit (dashed). The context lengths are evenly spaced, in order.");
  draw_legend(w, legend, 4, 4, l.width);
  for (std::size_t i = 0; i < d.kernels.size(); ++i) draw_error_panel(w, d, a, l, legend_h, i);
  std::string caption = kErrorCaption;
  if (a.has_zero) caption += " Cells with zero error sit on the bottom edge.";
  return figure(html_ids::kErrorVsLength, kErrorHeading, chart(w), caption);
}

}  // namespace pacheck::html
