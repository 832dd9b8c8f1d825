// report.html figure 2, error against context length per kernel: rel_linf of every shape, the min-max band
// across shapes and the median, on a log length axis, with the tolerance limit (seed 000, figure 2).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "report/html_parts.hpp"
#include "report/text.hpp"

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
      // One value at every length: a line across the panel. A limit that grows with the length (the fixed
      // policy's fp32 accumulation term, or calibrated limits): a dashed line through (length, limit).
      double lo = 0, hi = 0;
      for (const auto& [len, lim] : ds.limit_at) {
        lo = lo == 0 ? lim : std::min(lo, lim);
        hi = std::max(hi, lim);
      }
      if (!ds.limit_at.empty() && lo == hi && y(hi) >= oy + mt - 1 && y(hi) <= oy + ph - mb + 1) {
        const double py = y(hi);
        w.open("g", {{"class", "limit-group"}});
        w.title(fmt::format("tolerance limit of {}: rel_linf {}", dtype, sci(hi)));
        w.line(ox + ml, py, ox + pw - mr, py, {{"class", "limit"}, {"stroke", ink}, {"stroke-width", "1.5"}, {"stroke-dasharray", "6 3"}});
        w.text(ox + pw - mr - 4, py - 4, fmt::format("{} limit {}", dtype, svg::tick_label(hi, true)), "end",
               {{"class", "tick"}, {"fill", ink}});
        w.close();
      } else if (lo != hi) {
        std::vector<std::pair<double, double>> path;
        for (const auto& [len, lim] : ds.limit_at)
          path.push_back({x(len), std::clamp(y(lim), oy + mt, oy + ph - mb)});
        w.open("g", {{"class", "limit-group"}});
        w.title(fmt::format("tolerance limit of {} against length: rel_linf {} to {}", dtype, sci(lo), sci(hi)));
        w.polyline(path, {{"class", "limit"}, {"stroke", ink}, {"stroke-width", "1.5"}, {"stroke-dasharray", "6 3"},
                          {"fill", "none"}});
        w.text(path.back().first - 4, path.back().second - 4,
               fmt::format("{} limit {}", dtype, svg::tick_label(ds.limit_at.rbegin()->second, true)), "end",
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

}  // namespace pacheck::html
