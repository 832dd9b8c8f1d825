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

}  // namespace

std::string error_length_figure(const RunSummary& s, const std::vector<CellInfo>& cells) {
  // Clean cells with an output, per kernel, dtype and shape: the worst rel_linf at each length (over seeds).
  // Bands are per dtype: bf16 and f16 errors differ several-fold, and one band across both would show
  // the dtype, not the kernel.
  struct DtypeSeries {
    std::map<std::string, std::map<int, double>> by_shape;  // shape -> length -> rel_linf
    std::map<int, double> limit_at;  // length -> the largest limit of a cell of that length
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
      double& lim = ds.limit_at[c.length];
      lim = std::max(lim, c.r->limit);
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

  // Shared axes across panels, so kernels compare at a glance. x: the measured lengths in order, evenly
  // spaced (a log axis drew 4090 and 4096, or 15, 16 and 17, on one pixel: the lengths a suite pairs to
  // tell a straddling block from an aligned one).
  std::vector<int> distinct_lengths;
  for (double l : lengths) distinct_lengths.push_back(static_cast<int>(l));
  std::sort(distinct_lengths.begin(), distinct_lengths.end());
  distinct_lengths.erase(std::unique(distinct_lengths.begin(), distinct_lengths.end()), distinct_lengths.end());
  std::vector<std::string> length_labels;
  for (int l : distinct_lengths) length_labels.push_back(std::to_string(l));
  auto index_of = [&](int len) {
    return static_cast<double>(std::lower_bound(distinct_lengths.begin(), distinct_lengths.end(), len) - distinct_lengths.begin());
  };
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
  const std::vector<svg::Tick> y_ticks = log_y ? svg::log_ticks(yd0, yd1) : svg::linear_ticks(yd0, yd1, 5);

  // Panels: two per row when two fit the page; a panel gives each length 14 px (room for a label turned
  // upright) up to the page's width, and at least 8 px (past the page's width: the figure scrolls).
  double widest_y = 0;
  for (const auto& t : y_ticks) widest_y = std::max(widest_y, svg::text_width(t.label, 11));
  const double ml = std::max(70.0, widest_y + 48), mr = 16, mt = 30, plot_h = 214;
  const double n = static_cast<double>(distinct_lengths.size());
  const double pw = std::max({540.0, std::min(kPageWidth, ml + mr + n * 14), ml + mr + n * 8});
  const std::size_t per_row = 2 * pw <= kPageWidth ? 2 : 1;
  const double step = (pw - ml - mr) / n;
  const svg::BandAxis x_axis = svg::band_axis(length_labels, step);
  const double ph = mt + plot_h + x_axis.height + 14;
  const std::size_t nrows = (kernels.size() + per_row - 1) / per_row;
  const double width = pw * static_cast<double>(std::min(per_row, kernels.size()));
  const Rgb grey = svg::parse_hex("#555555"), nan_ink = svg::parse_hex("#d55e00");

  // What each panel draws, per dtype: the worst-seed rel_linf of each shape at each length; where two or
  // more shapes share a length, their min-max band and median; the tolerance limit.
  struct Stats {
    std::map<int, std::vector<double>> at_len;  // length -> values of the shapes there, sorted
  };
  auto stats_of = [](const DtypeSeries& ds) {
    Stats st;
    for (const auto& [shape, pts] : ds.by_shape)
      for (const auto& [len, v] : pts) st.at_len[len].push_back(v);
    for (auto& [len, vs] : st.at_len) std::sort(vs.begin(), vs.end());
    return st;
  };
  // The key dtypes share a limit line by: one value at every length is a line across the panel, whatever
  // lengths the dtype has; a limit that grows with the length (the fixed policy's fp32 accumulation term,
  // calibrated limits) goes through its lengths.
  auto limit_key = [](const DtypeSeries& ds) {
    const bool constant = std::all_of(ds.limit_at.begin(), ds.limit_at.end(),
                                      [&](const auto& e) { return e.second == ds.limit_at.begin()->second; });
    return constant ? std::map<int, double>{{0, ds.limit_at.begin()->second}} : ds.limit_at;
  };
  bool any_band = false, any_limit = false, any_nonfinite = false, shared_limit = false;
  for (const auto& k : kernels) {
    const Series& se = per_kernel[k];
    any_nonfinite = any_nonfinite || !se.nonfinite.empty();
    std::set<std::map<int, double>> keys;
    std::size_t with_limit = 0;
    for (const auto& [d, ds] : se.by_dtype) {
      if (!ds.limit_at.empty()) keys.insert(limit_key(ds)), ++with_limit;
      for (const auto& [len, vs] : stats_of(ds).at_len) any_band = any_band || vs.size() >= 2;
    }
    any_limit = any_limit || with_limit > 0;
    shared_limit = shared_limit || keys.size() < with_limit;
  }

  // Legend: the dtype colours, then what each kind of mark means (drawn in grey: it holds for every colour),
  // only for marks some panel draws.
  std::vector<LegendEntry> legend;
  for (const auto& d : dtypes) legend.push_back({"dtype-" + d, d, fill_swatch(colour_of(d))});
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
    legend.push_back({"nonfinite", "NaN/Inf output", [nan_ink](svg::Writer& w, double x, double y) {
                        w.polygon({{x + 13, y + 13}, {x + 6, y}, {x + 20, y}}, {{"fill", nan_ink.hex()}});
                      }});
  const double legend_h = legend_height(legend, 4, width) + 12;
  const double height = legend_h + ph * static_cast<double>(nrows);

  svg::Writer w(width, height, std::string(html_ids::kErrorVsLength) + "-svg",
                "Relative L-infinity error against context length, per kernel",
                "One panel per kernel, one colour per dtype: each shape's rel_linf at each context length (points, joined "
                "per shape), where shapes share a length the min-max band across them (shaded) and their median (bold), "
                "and the tolerance limit (dashed). The context lengths are evenly spaced, in order.");
  draw_legend(w, legend, 4, 4, width);

  for (std::size_t p = 0; p < kernels.size(); ++p) {
    const Series& se = per_kernel[kernels[p]];
    const double ox = pw * static_cast<double>(p % per_row), oy = legend_h + ph * static_cast<double>(p / per_row);
    const double px0 = ox + ml, px1 = ox + pw - mr, py0 = oy + mt, py1 = oy + mt + plot_h;
    auto x = [&](int len) { return px0 + step * (index_of(len) + 0.5); };
    const svg::Scale y = log_y ? svg::Scale::log10(yd0, yd1, py1, py0) : svg::Scale::linear(yd0, yd1, py1, py0);
    w.open("g", {{"class", "panel"}, {"data-kernel", kernels[p]}});
    fitted_text(w, px0, py0 - 10, fmt::format("{}  ({} shape{}, {} clean cell{})", kernels[p], se.shapes, se.shapes == 1 ? "" : "s", se.cells,
                                    se.cells == 1 ? "" : "s"), px1 - px0, 13,
                true, "start", {{"class", "panel-title"}});
    w.rect(px0, py0, px1 - px0, plot_h, {{"fill", "#fcfcfc"}, {"stroke", "#ddd"}});
    axis_left(w, y, px0, y_ticks, std::string("rel_linf, unitless") + (log_y ? " (log scale)" : ""), px1);
    svg::axis_bottom_bands(w, px0, py1, x_axis, length_labels, "context length (tokens, in order)");

    // Tolerance limits: dtypes with the same limit share one line (grey), labelled once.
    std::map<std::map<int, double>, std::vector<std::string>> limit_groups;
    for (const auto& [dtype, ds] : se.by_dtype)
      if (!ds.limit_at.empty()) limit_groups[limit_key(ds)].push_back(dtype);
    std::vector<std::pair<double, double>> taken;  // vertical extents of the limit labels placed
    for (const auto& [limits, group] : limit_groups) {
      const std::string ink = group.size() == 1 ? colour_of(group.front()).hex() : grey.hex();
      double lo = INFINITY, hi = 0;
      for (const auto& [len, lim] : limits) lo = std::min(lo, lim), hi = std::max(hi, lim);
      const std::string names = join(group, ", ");
      const std::string value = lo == hi ? svg::tick_label(hi, true) : fmt::format("{} to {}", svg::tick_label(lo, true), svg::tick_label(hi, true));
      w.open("g", {{"class", "limit-group"}, {"data-series", "limit"}});
      w.title(fmt::format("tolerance limit of {}: rel_linf {}", names, lo == hi ? sci(hi) : fmt::format("{} to {}", sci(lo), sci(hi))));
      double label_y;
      if (lo == hi) {
        label_y = std::clamp(y(hi), py0, py1);
        w.line(px0, label_y, px1, label_y, {{"class", "limit"}, {"stroke", ink}, {"stroke-width", "1.5"}, {"stroke-dasharray", "6 3"}});
      } else {
        std::vector<std::pair<double, double>> path;
        for (const auto& [len, lim] : limits) path.push_back({x(len), std::clamp(y(lim), py0, py1)});
        w.polyline(path, {{"class", "limit"}, {"stroke", ink}, {"stroke-width", "1.5"}, {"stroke-dasharray", "6 3"}});
        label_y = path.back().second;
      }
      // The label at the right end, above the line, else below it, else left out (the hover has it).
      const std::string text = abbreviate(group.size() == 1 ? fmt::format("{} limit {}", group.front(), value)
                                                            : fmt::format("limit {}: {} and {} more", value, group.front(), group.size() - 1),
                                          11, (px1 - px0) * 0.6);
      for (double base : {label_y - 4, label_y + 13}) {
        const double top = base - 10, bottom = base + 3;
        if (top < py0 + 1 || bottom > py1 - 1) continue;
        if (std::any_of(taken.begin(), taken.end(), [&](const auto& t) { return top < t.second && bottom > t.first; })) continue;
        taken.push_back({top, bottom});
        w.text(px1 - 4, base, text, "end", {{"class", "tick limit-label"}, {"fill", ink}});
        break;
      }
      w.close();
    }

    for (const auto& [dtype, ds] : se.by_dtype) {
      const std::string ink = colour_of(dtype).hex();
      const Stats st = stats_of(ds);
      w.open("g", {{"class", "dtype-series"}, {"data-dtype", dtype}, {"data-series", "dtype-" + dtype}});
      // Band and median where two or more shapes share a length, in runs of such lengths.
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
      for (const auto& run : runs) {
        std::vector<std::pair<double, double>> upper, lower, median;
        for (int len : run) {
          const auto& vs = st.at_len.at(len);
          const double med = vs.size() % 2 ? vs[vs.size() / 2] : (vs[vs.size() / 2 - 1] + vs[vs.size() / 2]) / 2;
          upper.push_back({x(len), y(vs.back())});
          lower.push_back({x(len), y(vs.front())});
          median.push_back({x(len), y(med)});
        }
        if (run.size() == 1) {  // one length: the band as a bar a third of a step wide
          const double half = std::max(3.0, step / 6);
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
      for (const auto& [shape, pts] : ds.by_shape) {
        std::vector<std::pair<double, double>> line;
        for (const auto& [len, v] : pts) line.push_back({x(len), y(v)});
        w.open("g", {{"class", "series"}, {"data-series", "shape"}});
        w.title(shape);
        if (line.size() > 1) w.polyline(line, {{"stroke", ink}, {"stroke-opacity", "0.5"}, {"stroke-width", "1"}});
        for (const auto& [len, v] : pts) {
          w.open("g", {{"class", "point"}, {"data-x", std::to_string(len)}});
          w.title(fmt::format("{} ctx{}: rel_linf {}", shape, len, sci(v)));
          w.circle(x(len), y(v), 2.6, {{"fill", ink}, {"fill-opacity", "0.7"}});
          w.close();
        }
        w.close();
      }
      w.close();
    }
    // Clean cells that produced NaN/Inf: a triangle on the top edge at their length.
    for (const auto& [len, id] : se.nonfinite) {
      const double tx = x(len), ty = py0;
      w.open("g", {{"class", "nonfinite"}, {"data-series", "nonfinite"}, {"data-x", std::to_string(len)}});
      w.title(fmt::format("{}: NaN/Inf output on a clean cell", id));
      w.polygon({{tx, ty + 12}, {tx - 6, ty}, {tx + 6, ty}}, {{"fill", nan_ink.hex()}});
      w.close();
    }
    w.close();
  }
  std::string caption =
      "<b>Error against context length.</b> Clean cells only; rel_linf is the largest absolute error over the largest "
      "absolute reference value (unitless, against the fp32/f64 oracle computed from the pre-paging K/V). x is the longest "
      "sequence of the batch in tokens: every length measured, in order and evenly spaced (not to scale), so lengths a "
      "suite pairs (4090 and 4096, 15, 16 and 17) stay apart. One colour per dtype: points are single shapes (worst "
      "seed), joined per shape; where two or more shapes share a length, the shaded band spans the lowest to the highest "
      "and the bold line is their median; the dashed line is the tolerance limit (grey where several dtypes share it; "
      "hover it for which). <b>Good:</b> each dtype's points flat and well under its limit at every length "
      "\xE2\x80\x94 a different accumulation order shows as a slight offset between kernels, not a rise. Points that "
      "climb with length mean error grows with the sum; a triangle means a clean cell gave NaN/Inf.";
  if (has_zero) caption += " Cells with zero error sit on the bottom edge.";
  return figure(html_ids::kErrorVsLength, "2. Error against context length", chart(w), caption);
}

}  // namespace pacheck::html
