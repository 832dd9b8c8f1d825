#include "figures/svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

namespace pacheck::svg {

// ---- text -----------------------------------------------------------------------------------------------

std::string escape(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size();) {
    const auto c = static_cast<unsigned char>(raw[i]);
    // Length of the UTF-8 sequence starting here (0: not a valid lead byte).
    const int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + static_cast<std::size_t>(len) <= raw.size();
    for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(raw[i + k]) >> 6) == 0x2;
    if (!ok) {
      out += '?';
      ++i;
      continue;
    }
    if (len > 1) {
      out.append(raw.substr(i, static_cast<std::size_t>(len)));
      i += static_cast<std::size_t>(len);
      continue;
    }
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        // XML 1.0 forbids most control characters even as references.
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') out += '?';
        else out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "0";  // a non-finite coordinate would make the whole element invalid
  std::string s = fmt::format("{:.2f}", v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  return s;
}

namespace {
// Advance widths in em of printable ASCII (space to '~') in DejaVu Sans Book and Bold, measured in Chromium
// (getComputedTextLength at 1000 px). DejaVu Sans is the widest of the page's fallback fonts and what
// Linux machines without the others use; Arial, Roboto and Segoe UI set the same text narrower.
constexpr std::array<double, 95> kRegular = {
      0.318, 0.401, 0.460, 0.838, 0.636, 0.950, 0.780, 0.275, 0.390, 0.390, 0.500, 0.838,
      0.318, 0.361, 0.318, 0.337, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636,
      0.636, 0.636, 0.337, 0.337, 0.838, 0.838, 0.838, 0.531, 1.000, 0.698, 0.686, 0.698,
      0.770, 0.632, 0.575, 0.775, 0.752, 0.295, 0.295, 0.656, 0.557, 0.863, 0.748, 0.787,
      0.603, 0.787, 0.695, 0.635, 0.602, 0.732, 0.684, 0.989, 0.685, 0.611, 0.685, 0.390,
      0.337, 0.390, 0.838, 0.500, 0.500, 0.613, 0.635, 0.550, 0.635, 0.615, 0.344, 0.635,
      0.634, 0.278, 0.278, 0.579, 0.278, 0.974, 0.634, 0.612, 0.635, 0.635, 0.402, 0.521,
      0.392, 0.634, 0.592, 0.818, 0.592, 0.592, 0.525, 0.636, 0.337, 0.636, 0.838,
  };
constexpr std::array<double, 95> kBold = {
      0.348, 0.456, 0.521, 0.838, 0.696, 1.002, 0.872, 0.306, 0.457, 0.457, 0.523, 0.838,
      0.380, 0.415, 0.380, 0.365, 0.696, 0.696, 0.696, 0.696, 0.696, 0.696, 0.696, 0.696,
      0.696, 0.696, 0.400, 0.400, 0.838, 0.838, 0.838, 0.580, 1.000, 0.774, 0.762, 0.734,
      0.830, 0.683, 0.683, 0.821, 0.837, 0.372, 0.372, 0.775, 0.637, 0.995, 0.837, 0.850,
      0.733, 0.850, 0.770, 0.698, 0.694, 0.812, 0.774, 1.103, 0.771, 0.724, 0.725, 0.457,
      0.365, 0.457, 0.838, 0.500, 0.500, 0.675, 0.716, 0.593, 0.716, 0.678, 0.405, 0.716,
      0.712, 0.343, 0.343, 0.665, 0.343, 1.042, 0.712, 0.687, 0.716, 0.716, 0.493, 0.595,
      0.478, 0.712, 0.652, 0.924, 0.645, 0.652, 0.582, 0.712, 0.365, 0.712, 0.838,
  };
}  // namespace

double text_width(std::string_view text, double font_px, bool bold) {
  const auto& em_of = bold ? kBold : kRegular;
  double em = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) == 0x80) continue;  // UTF-8 continuation byte: counted with its lead byte
    if (c >= 0x20 && c < 0x7F) em += em_of[c - 0x20];
    else em += 0.84;  // non-ASCII (the page's middle dots, dashes, x signs): as wide as the widest symbols
  }
  return em * font_px;
}

// ---- colours --------------------------------------------------------------------------------------------

std::string Rgb::hex() const { return fmt::format("#{:02x}{:02x}{:02x}", r, g, b); }

namespace {
double to_linear(std::uint8_t c) {
  const double s = c / 255.0;
  return s <= 0.04045 ? s / 12.92 : std::pow((s + 0.055) / 1.055, 2.4);
}
std::uint8_t from_linear(double l) {
  l = std::clamp(l, 0.0, 1.0);
  const double s = l <= 0.0031308 ? 12.92 * l : 1.055 * std::pow(l, 1 / 2.4) - 0.055;
  return static_cast<std::uint8_t>(std::lround(s * 255.0));
}
Rgb lerp(Rgb a, Rgb b, double t) {
  auto mix = [t](std::uint8_t x, std::uint8_t y) { return static_cast<std::uint8_t>(std::lround(x + (y - x) * t)); };
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}
/// Piecewise-linear interpolation through evenly spaced anchors (the published palettes sampled finely
/// enough that the steps between anchors stay perceptually even).
template <std::size_t N>
Rgb ramp(const std::array<const char*, N>& anchors, double t) {
  if (!std::isfinite(t)) t = 0;
  t = std::clamp(t, 0.0, 1.0) * static_cast<double>(N - 1);
  const auto i = std::min(static_cast<std::size_t>(t), N - 2);
  return lerp(parse_hex(anchors[i]), parse_hex(anchors[i + 1]), t - static_cast<double>(i));
}
}  // namespace

double Rgb::luminance() const { return 0.2126 * to_linear(r) + 0.7152 * to_linear(g) + 0.0722 * to_linear(b); }

Rgb parse_hex(std::string_view hex) {
  auto digit = [&](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    throw std::invalid_argument(fmt::format("'{}' is not a #rrggbb colour", hex));
  };
  if (hex.size() != 7 || hex[0] != '#') throw std::invalid_argument(fmt::format("'{}' is not a #rrggbb colour", hex));
  auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(digit(hex[i]) * 16 + digit(hex[i + 1])); };
  return {byte(1), byte(3), byte(5)};
}

double contrast(Rgb a, Rgb b) {
  const double la = a.luminance(), lb = b.luminance();
  return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

Rgb text_on(Rgb background) {
  const Rgb black{17, 17, 17}, white{255, 255, 255};
  return contrast(background, black) >= contrast(background, white) ? black : white;
}

Rgb viridis(double t) {
  static constexpr std::array<const char*, 17> kViridis = {
      "#440154", "#481a6c", "#472f7d", "#414487", "#39568c", "#31688e", "#2a788e", "#23888e", "#1f988b",
      "#22a884", "#35b779", "#54c568", "#7ad151", "#a5db36", "#d2e21b", "#f1e51d", "#fde725"};
  return ramp(kViridis, t);
}

Rgb cividis(double t) {
  static constexpr std::array<const char*, 11> kCividis = {"#00224e", "#0f336f", "#383f6e", "#4f516d", "#64636e",
                                                          "#7a7673", "#8f8975", "#a69d72", "#bfb26a", "#d9c75c",
                                                          "#fee838"};
  return ramp(kCividis, t);
}

Rgb simulate_deuteranopia(Rgb c) {
  // Viénot et al. 1999 projection for deuteranopes, applied in linear sRGB.
  const double r = to_linear(c.r), g = to_linear(c.g), b = to_linear(c.b);
  const double rd = 0.29275 * r + 0.70725 * g;
  const double bd = -0.02234 * r + 0.02234 * g + b;
  return {from_linear(rd), from_linear(rd), from_linear(bd)};
}

namespace {
std::array<double, 3> lab(Rgb c) {
  const double r = to_linear(c.r), g = to_linear(c.g), b = to_linear(c.b);
  // sRGB (D65) to XYZ, normalised by the D65 white point.
  const double x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047;
  const double y = (0.2126 * r + 0.7152 * g + 0.0722 * b) / 1.0;
  const double z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883;
  auto f = [](double t) { return t > 216.0 / 24389.0 ? std::cbrt(t) : (24389.0 / 27.0 * t + 16.0) / 116.0; };
  return {116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))};
}
}  // namespace

double delta_e(Rgb a, Rgb b) {
  const auto la = lab(a), lb = lab(b);
  return std::sqrt((la[0] - lb[0]) * (la[0] - lb[0]) + (la[1] - lb[1]) * (la[1] - lb[1]) + (la[2] - lb[2]) * (la[2] - lb[2]));
}

namespace {
Rgb from_lab(double L, double a, double b) {
  const double fy = (L + 16) / 116, fx = fy + a / 500, fz = fy - b / 200;
  auto inv = [](double f) { return f * f * f > 216.0 / 24389.0 ? f * f * f : (116 * f - 16) / (24389.0 / 27.0); };
  const double x = inv(fx) * 0.95047, y = inv(fy), z = inv(fz) * 1.08883;
  const double r = 3.2406 * x - 1.5372 * y - 0.4986 * z;
  const double g = -0.9689 * x + 1.8758 * y + 0.0415 * z;
  const double bl = 0.0557 * x - 0.2040 * y + 1.0570 * z;
  return {from_linear(r), from_linear(g), from_linear(bl)};
}
}  // namespace

Rgb diverging(double t) {
  // ColorBrewer PuOr's hues, rebuilt in CIELAB so both arms are mirror images in lightness and chroma:
  // published PuOr darkens much faster on its purple arm, which would make "B 2x faster" look louder than
  // "A 2x faster". Each arm runs in a straight line from the near-white centre to an end of L* 48 and
  // chroma ~61 (orange: PuOr's #b35806; purple at the hue of PuOr's #542788).
  static const std::array<double, 3> centre = lab(parse_hex("#f7f7f7"));
  static constexpr std::array<double, 3> orange = {48, 29, 54}, purple = {48, 36, -49.5};
  if (!std::isfinite(t) || t == 0) return parse_hex("#f7f7f7");
  t = std::clamp(t, -1.0, 1.0);
  const auto& end = t < 0 ? orange : purple;
  const double s = std::abs(t);
  return from_lab(centre[0] + s * (end[0] - centre[0]), centre[1] + s * (end[1] - centre[1]), centre[2] + s * (end[2] - centre[2]));
}

// ---- scales and ticks -----------------------------------------------------------------------------------

Scale Scale::linear(double d0, double d1, double r0, double r1) { return Scale(d0, d1, r0, r1, false); }
Scale Scale::log10(double d0, double d1, double r0, double r1) {
  if (!(d0 > 0 && d1 > 0)) throw std::invalid_argument("log scale: the domain must be positive");
  return Scale(d0, d1, r0, r1, true);
}

double Scale::operator()(double v) const {
  double t;
  if (log_) {
    v = v > 0 ? v : d0_;
    t = (std::log10(v) - std::log10(d0_)) / (std::log10(d1_) - std::log10(d0_));
  } else {
    t = d1_ == d0_ ? 0.5 : (v - d0_) / (d1_ - d0_);
  }
  return r0_ + t * (r1_ - r0_);
}

std::string tick_label(double v, bool scientific) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (scientific || a >= 1e5 || a < 1e-2) {
    // "2.5e-3": mantissa with at most two decimals, exponent without '+' or leading zeros.
    int e = static_cast<int>(std::floor(std::log10(a)));
    double m = v / std::pow(10.0, e);
    if (std::abs(std::round(m * 100) / 100) >= 10) {
      m /= 10;
      ++e;
    }
    std::string ms = fmt::format("{:.2f}", m);
    while (ms.back() == '0') ms.pop_back();
    if (ms.back() == '.') ms.pop_back();
    return fmt::format("{}e{}", ms, e);
  }
  if (a >= 100 || std::abs(v - std::round(v)) < 1e-9) return fmt::format("{:.0f}", v);
  std::string s = fmt::format("{:.3g}", v);
  return s;
}

namespace {
double nice_step(double span, int count) {
  const double raw = span / std::max(count, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}
}  // namespace

std::vector<Tick> linear_ticks(double lo, double hi, int count) {
  std::vector<Tick> out;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  const double step = nice_step(hi - lo, count);
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k += 1) {
    const double v = std::round(k) * step;  // from the integer multiple, so 0.1 * 3 does not print 0.30000000000000004
    out.push_back({v, tick_label(v)});
  }
  return out;
}

std::vector<Tick> log_ticks(double lo, double hi, const std::vector<double>& extra) {
  std::vector<Tick> out;
  if (!(lo > 0 && hi > lo)) return out;
  const double eps = 1e-9;
  auto inside = [&](double v) { return v >= lo * (1 - eps) && v <= hi * (1 + eps); };
  std::vector<double> measured;
  for (double e : extra)
    if (e > 0 && inside(e)) measured.push_back(e);
  std::vector<double> values = measured;
  const bool fine = std::log10(hi / lo) < 3;
  for (int d = static_cast<int>(std::floor(std::log10(lo))); d <= static_cast<int>(std::ceil(std::log10(hi))); ++d) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m != 1.0 && !fine) continue;
      const double v = m * std::pow(10.0, d);
      if (!inside(v)) continue;
      // The measured values own the axis: a round value close to one of them would only crowd it.
      const bool near = std::any_of(measured.begin(), measured.end(), [&](double e) { return std::abs(std::log10(e / v)) < 0.15; });
      if (!near) values.push_back(v);
    }
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end(), [](double a, double b) { return std::abs(a - b) <= 1e-12 * std::abs(b); }),
               values.end());
  // One style per axis: "1e-2, 5e-3, 2e-3" rather than "0.01, 5e-3, 2e-3".
  const bool scientific = lo < 1e-2 || hi >= 1e5;
  for (double v : values) out.push_back({v, tick_label(v, scientific)});
  return out;
}

std::pair<double, double> nice_linear_domain(double lo, double hi, bool from_zero) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {0, 1};
  if (from_zero) lo = std::min(lo, 0.0);
  if (hi <= lo) hi = lo + (lo == 0 ? 1 : std::abs(lo));
  const double step = nice_step(hi - lo, 5);
  return {std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step};
}

std::pair<double, double> padded_log_domain(double lo, double hi) {
  double a = std::log10(lo), b = std::log10(hi);
  const double min_span = std::log10(4.0);
  if (b - a < min_span) {
    const double mid = (a + b) / 2;
    a = mid - min_span / 2;
    b = mid + min_span / 2;
  }
  const double pad = 0.06 * (b - a);
  return {std::pow(10.0, a - pad), std::pow(10.0, b + pad)};
}

// ---- the element writer ---------------------------------------------------------------------------------

namespace {
void put_attrs(std::string& out, const Attrs& attrs) {
  for (const auto& [k, v] : attrs) {
    out += ' ';
    out += k;  // attribute names are pacheck's own literals
    out += "=\"";
    out += escape(v);
    out += '"';
  }
}
std::string points_text(const std::vector<std::pair<double, double>>& pts) {
  std::string s;
  for (const auto& [x, y] : pts) {
    if (!s.empty()) s += ' ';
    s += num(x) + "," + num(y);
  }
  return s;
}
}  // namespace

Writer::Writer(double width, double height, std::string id, std::string_view title, std::string_view desc)
    : width_(width), height_(height) {
  out_ = fmt::format("<svg id=\"{0}\" class=\"chart\" width=\"{1}\" height=\"{2}\" viewBox=\"0 0 {1} {2}\" role=\"img\" "
                     "aria-labelledby=\"{0}-title {0}-desc\">",
                     escape(id), num(width), num(height));
  out_ += fmt::format("<title id=\"{}-title\">{}</title><desc id=\"{}-desc\">{}</desc>\n", escape(id), escape(title),
                      escape(id), escape(desc));
}

Writer& Writer::open(std::string_view tag, const Attrs& attrs) {
  out_ += '<';
  out_ += tag;
  put_attrs(out_, attrs);
  out_ += '>';
  stack_.emplace_back(tag);
  return *this;
}

Writer& Writer::close() {
  if (stack_.empty()) throw std::logic_error("svg::Writer::close: no open element");
  out_ += "</" + stack_.back() + ">\n";
  stack_.pop_back();
  return *this;
}

Writer& Writer::empty(std::string_view tag, const Attrs& attrs) {
  out_ += '<';
  out_ += tag;
  put_attrs(out_, attrs);
  out_ += "/>";
  return *this;
}

Writer& Writer::text_element(std::string_view tag, const Attrs& attrs, std::string_view text) {
  out_ += '<';
  out_ += tag;
  put_attrs(out_, attrs);
  out_ += '>';
  out_ += escape(text);
  out_ += "</";
  out_ += tag;
  out_ += ">";
  return *this;
}

Writer& Writer::rect(double x, double y, double w, double h, Attrs attrs) {
  attrs.insert(attrs.begin(), {{"x", num(x)}, {"y", num(y)}, {"width", num(std::max(w, 0.0))}, {"height", num(std::max(h, 0.0))}});
  return empty("rect", attrs);
}

Writer& Writer::line(double x1, double y1, double x2, double y2, Attrs attrs) {
  attrs.insert(attrs.begin(), {{"x1", num(x1)}, {"y1", num(y1)}, {"x2", num(x2)}, {"y2", num(y2)}});
  return empty("line", attrs);
}

Writer& Writer::polyline(const std::vector<std::pair<double, double>>& points, Attrs attrs) {
  attrs.insert(attrs.begin(), {"points", points_text(points)});
  if (std::none_of(attrs.begin(), attrs.end(), [](const auto& a) { return a.first == "fill"; })) attrs.push_back({"fill", "none"});
  return empty("polyline", attrs);
}

Writer& Writer::polygon(const std::vector<std::pair<double, double>>& points, Attrs attrs) {
  attrs.insert(attrs.begin(), {"points", points_text(points)});
  return empty("polygon", attrs);
}

Writer& Writer::circle(double cx, double cy, double r, Attrs attrs) {
  attrs.insert(attrs.begin(), {{"cx", num(cx)}, {"cy", num(cy)}, {"r", num(r)}});
  return empty("circle", attrs);
}

Writer& Writer::text(double x, double y, std::string_view text, std::string_view anchor, Attrs attrs) {
  attrs.insert(attrs.begin(), {{"x", num(x)}, {"y", num(y)}});
  if (anchor != "start") attrs.push_back({"text-anchor", std::string(anchor)});
  return text_element("text", attrs, text);
}

Writer& Writer::title(std::string_view text) { return text_element("title", {}, text); }

std::string Writer::str() const {
  std::string s = out_;
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) s += "</" + *it + ">";
  return s + "</svg>";
}

// ---- axes -----------------------------------------------------------------------------------------------

namespace {
bool in_domain(const Scale& s, double v) {
  const double lo = std::min(s.d0(), s.d1()), hi = std::max(s.d0(), s.d1());
  const double tol = (s.is_log() ? 1e-9 * hi : 1e-9 * (hi - lo));
  return v >= lo - tol && v <= hi + tol;
}
}  // namespace

void axis_bottom(Writer& w, const Scale& x, double y, const std::vector<Tick>& ticks, std::string_view label) {
  constexpr double kTickFont = 11;
  w.open("g", {{"class", "axis x-axis"}});
  w.line(x.r0(), y, x.r1(), y, {{"class", "domain"}, {"stroke", "#444"}});
  double last_right = -1e9;
  for (const auto& t : ticks) {
    if (!in_domain(x, t.value)) continue;
    const double px = x(t.value);
    w.line(px, y, px, y + 5, {{"stroke", "#444"}});
    // Labels that would overlap the previous one are left out (the tick mark stays).
    const double half = text_width(t.label, kTickFont) / 2;
    if (px - half < last_right + 4) continue;
    w.text(px, y + 18, t.label, "middle", {{"class", "tick"}});
    last_right = px + half;
  }
  w.text((x.r0() + x.r1()) / 2, y + 38, label, "middle", {{"class", "axis-label"}});
  w.close();
}

void axis_left(Writer& w, const Scale& y, double x, const std::vector<Tick>& ticks, std::string_view label, double grid_to) {
  w.open("g", {{"class", "axis y-axis"}});
  w.line(x, y.r0(), x, y.r1(), {{"class", "domain"}, {"stroke", "#444"}});
  double last_top = 1e9;
  double widest = 0;
  for (const auto& t : ticks) {
    if (!in_domain(y, t.value)) continue;
    const double py = y(t.value);
    if (grid_to > x) w.line(x, py, grid_to, py, {{"class", "grid"}, {"stroke", "#e4e4e4"}});
    w.line(x - 5, py, x, py, {{"stroke", "#444"}});
    if (py + 6 > last_top - 2) continue;  // overlapping label (ticks run bottom to top)
    w.text(x - 8, py + 4, t.label, "end", {{"class", "tick"}});
    widest = std::max(widest, text_width(t.label, 11));
    last_top = py - 6;
  }
  const double lx = x - widest - 22, ly = (y.r0() + y.r1()) / 2;
  w.text(lx, ly, label, "middle", {{"class", "axis-label"}, {"transform", fmt::format("rotate(-90 {} {})", num(lx), num(ly))}});
  w.close();
}

BandAxis band_axis(const std::vector<std::string>& labels, double step) {
  constexpr double kFont = 11, kLine = 14 /* a label's height, and the least distance between turned labels */;
  BandAxis a;
  a.step = step;
  double widest = 0;
  for (const auto& l : labels) widest = std::max(widest, text_width(l, kFont));
  if (widest + 6 <= step) {
    a.height = 18 + 22;
    return a;
  }
  a.vertical = true;
  a.every = static_cast<std::size_t>(std::ceil(kLine / std::max(step, 1e-9)));
  a.height = 8 + widest + 8 + 16;
  return a;
}

void axis_bottom_bands(Writer& w, double x0, double y, const BandAxis& a, const std::vector<std::string>& labels,
                       std::string_view label) {
  std::size_t written = 0;
  for (std::size_t i = 0; i < labels.size(); i += a.every) ++written;
  w.open("g", {{"class", "axis x-axis"}, {"data-categories", std::to_string(written)}});
  w.line(x0, y, x0 + a.step * static_cast<double>(labels.size()), y, {{"class", "domain"}, {"stroke", "#444"}});
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const double px = x0 + a.step * (static_cast<double>(i) + 0.5);
    w.line(px, y, px, y + 5, {{"stroke", "#444"}});
    if (i % a.every != 0) continue;
    if (!a.vertical) {
      w.text(px, y + 18, labels[i], "middle", {{"class", "tick"}});
    } else {
      // Turned to read upwards, its end at the tick: the text runs down from y + 8.
      const double tx = px + 4, ty = y + 8;
      w.text(tx, ty, labels[i], "end", {{"class", "tick"}, {"transform", fmt::format("rotate(-90 {} {})", num(tx), num(ty))}});
    }
  }
  w.text(x0 + a.step * static_cast<double>(labels.size()) / 2, y + a.height - 4, label, "middle", {{"class", "axis-label"}});
  w.close();
}

}  // namespace pacheck::svg
