// report.html's cells and styles: what a cell is, from its ids (CellInfo), the verdict colours and marks,
// legends, fitted labels and the figure wrapper every figure shares.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "core/case.hpp"
#include "figures/parts.hpp"

namespace pacheck {

using svg::escape;
using svg::Rgb;

svg::Rgb verdict_colour(Verdict v) { return html::style_of(v).fill; }
std::string verdict_mark(Verdict v) { return html::style_of(v).mark; }

namespace html {

VerdictStyle style_of(Verdict v) {
  switch (v) {
    case Verdict::pass: return {svg::parse_hex("#d6e6f4"), "ok", "pass: within tolerance"};
    case Verdict::fail: return {svg::parse_hex("#e69f00"), "\xC3\x97", "fail: beyond tolerance"};  // U+00D7
    case Verdict::biased: return {svg::parse_hex("#e69f00"), "bias", "biased: the output rounds one way (truncation)"};
    case Verdict::poisoned: return {svg::parse_hex("#d55e00"), "NaN", "poisoned: NaN/Inf where the reference is finite"};
    case Verdict::overflow: return {svg::parse_hex("#d55e00"), "ovf", "overflow: NaN/Inf from V near the dtype's limit"};
    case Verdict::variant: return {svg::parse_hex("#cc79a7"), "var", "variant: output changed with the poison value"};
    // The causes of a difference from the clean twin share variant's colour; the marks tell them apart.
    case Verdict::nondeterministic:
      return {svg::parse_hex("#cc79a7"), "ndet", "nondeterministic: runs from the same history differ"};
    case Verdict::stateful: return {svg::parse_hex("#cc79a7"), "stat", "stateful: output depends on earlier calls"};
    case Verdict::unwritten: return {svg::parse_hex("#cc79a7"), "unw", "unwritten: output elements left untouched"};
    case Verdict::oob_write: return {svg::parse_hex("#cc79a7"), "oob", "oob_write: wrote past the output"};
    case Verdict::input_mutated: return {svg::parse_hex("#cc79a7"), "in", "input_mutated: changed an input"};
    case Verdict::declined: return {svg::parse_hex("#ffffff"), "\xE2\x80\x93", "declined: unsupported cell"};  // U+2013
    case Verdict::not_run:
      return {svg::parse_hex("#ffffff"), "n/r", "not_run: outside a negative control's expected failures"};
    case Verdict::error: return {svg::parse_hex("#333333"), "err", "error: the kernel reported an error"};
    case Verdict::crash: return {svg::parse_hex("#333333"), "crash", "crash: the kernel's process died"};
    case Verdict::timeout: return {svg::parse_hex("#333333"), "t/o", "timeout: the kernel hung"};
  }
  return {svg::parse_hex("#ffffff"), "?", "?"};
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (const auto& x : v) {
    if (!out.empty()) out += sep;
    out += x;
  }
  return out;
}

std::vector<std::string> split_spaces(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

bool is_layout_token(const std::string& t) { return t == "vllm" || t == "nhd" || t == "hnd"; }

namespace {

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
  info.length = c.max_seq_len();
  const auto colon = r.fault.find(':');
  info.target = colon == std::string::npos ? r.fault : r.fault.substr(0, colon);
  info.poison = colon == std::string::npos ? "" : r.fault.substr(colon + 1);
  return info;
}

}  // namespace

std::vector<std::string> drawn_kernels(const RunSummary& s) {
  std::vector<std::string> tested, controls;
  for (const auto& k : s.kernels) (k.control == ControlOutcome::not_control ? tested : controls).push_back(k.kernel);
  return tested.empty() ? controls : tested;
}

std::vector<CellInfo> describe_all(const RunSummary& s) {
  std::vector<CellInfo> out;
  std::set<std::string> seen;
  const std::vector<std::string> drawn = drawn_kernels(s);
  const std::set<std::string> drawn_set(drawn.begin(), drawn.end());
  for (const auto& r : s.results) {
    if (!drawn_set.count(r.kernel)) continue;
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

std::string figure(const char* id, const std::string& heading, const std::string& body, const std::string& caption) {
  return fmt::format("<figure id=\"{}\" class=\"report-figure\">\n<h2>{}</h2>\n{}\n<figcaption>{}</figcaption>\n</figure>\n", id,
                     escape(heading), body, caption);
}

std::function<void(svg::Writer&, double, double)> fill_swatch(Rgb fill, std::string mark) {
  return [fill, mark](svg::Writer& w, double x, double y) {
    w.rect(x, y, 26, 15, {{"fill", fill.hex()}, {"stroke", "#888"}, {"stroke-width", "0.5"}});
    if (!mark.empty()) w.text(x + 13, y + 11, mark, "middle", {{"class", "mark"}, {"fill", svg::text_on(fill).hex()}});
  };
}

namespace {
constexpr double kLegendFont = 11, kLegendLine = 20, kSwatchGap = 31, kEntryGap = 16;
double entry_width(const LegendEntry& e) { return kSwatchGap + svg::text_width(e.text, kLegendFont) + kEntryGap; }
/// Top-left corners of the entries' swatches, relative to (x0, top of the first line).
std::vector<std::pair<double, double>> legend_layout(const std::vector<LegendEntry>& entries, double x0, double width) {
  std::vector<std::pair<double, double>> at;
  double x = x0, y = 0;
  for (const auto& e : entries) {
    if (x > x0 && x + entry_width(e) - kEntryGap > width) {
      x = x0;
      y += kLegendLine;
    }
    at.push_back({x, y});
    x += entry_width(e);
  }
  return at;
}
}  // namespace

double legend_height(const std::vector<LegendEntry>& entries, double x0, double width) {
  if (entries.empty()) return 0;
  return legend_layout(entries, x0, width).back().second + kLegendLine;
}

void draw_legend(svg::Writer& w, const std::vector<LegendEntry>& entries, double x0, double top, double width) {
  if (entries.empty()) return;
  const auto at = legend_layout(entries, x0, width);
  w.open("g", {{"class", "legend"}});
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto [x, y] = at[i];
    w.open("g", {{"data-series", entries[i].series}});
    entries[i].swatch(w, x, top + y + 2);
    w.text(x + kSwatchGap, top + y + 13, entries[i].text, "start", {{"class", "legend"}});
    w.close();
  }
  w.close();
}

std::string abbreviate(const std::string& text, double font_px, double max_px, bool bold) {
  if (svg::text_width(text, font_px, bold) <= max_px) return text;
  const std::string ellipsis = "\xE2\x80\xA6";
  std::string cut = text;
  while (!cut.empty() && svg::text_width(cut + ellipsis, font_px, bold) > max_px) {
    cut.pop_back();
    while (!cut.empty() && (static_cast<unsigned char>(cut.back()) & 0xC0) == 0x80) cut.pop_back();  // whole UTF-8 characters
    if (!cut.empty() && static_cast<unsigned char>(cut.back()) >= 0xC0) cut.pop_back();
  }
  while (!cut.empty() && cut.back() == ' ') cut.pop_back();
  return cut + ellipsis;
}

void fitted_text(svg::Writer& w, double x, double y, const std::string& text, double max_px, double font_px, bool bold,
                 std::string_view anchor, svg::Attrs attrs) {
  const std::string shown = abbreviate(text, font_px, max_px, bold);
  if (shown == text) {
    w.text(x, y, text, anchor, std::move(attrs));
    return;
  }
  w.open("g", {{"class", "abbreviated"}});
  w.title(text);
  w.text(x, y, shown, anchor, std::move(attrs));
  w.close();
}

std::string ctx_label(const std::string& ctx) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : ctx + ",") {
    if (c != ',') {
      cur += c;
      continue;
    }
    parts.push_back(cur);
    cur.clear();
  }
  std::string out;
  for (std::size_t i = 0; i < parts.size();) {
    std::size_t j = i;
    while (j < parts.size() && parts[j] == parts[i]) ++j;
    if (!out.empty()) out += ',';
    out += parts[i];
    if (j - i > 1) out += fmt::format("\xC3\x97{}", j - i);
    i = j;
  }
  return out;
}

std::string chart(const svg::Writer& w) {
  if (w.width() <= kPageWidth) return w.str();
  return "<div class=\"chart-scroll\">" + w.str() + "</div>";
}

}  // namespace html
}  // namespace pacheck
