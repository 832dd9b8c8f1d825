// report.html: every figure is there, drawn (not an empty frame), with axes and a caption that says what
// good looks like; the page loads nothing from outside; verdicts stay readable for colour-blind readers;
// failing cells come with their repro command; --report-dir writes the page. The browser check
// (ci/check-report-browser.sh, ctest html_report_browser) renders a real run's page in Chromium.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "figures/svg.hpp"
#include "report/html_report.hpp"
#include "report/reports.hpp"

namespace pacheck {
namespace {

namespace fs = std::filesystem;

/// Number of non-overlapping occurrences of `needle` in `hay`.
std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

/// The element that starts with `<tag id="id"` up to its matching close tag (tags of the same name nest).
std::string element(const std::string& html, const std::string& tag, const std::string& id) {
  const std::string open = "<" + tag + " id=\"" + id + "\"";
  const std::size_t start = html.find(open);
  if (start == std::string::npos) return "";
  int depth = 0;
  for (std::size_t p = start; p < html.size();) {
    const std::size_t next_open = html.find("<" + tag, p + 1), next_close = html.find("</" + tag + ">", p + 1);
    if (next_close == std::string::npos) return "";
    if (next_open != std::string::npos && next_open < next_close) {
      ++depth;
      p = next_open;
    } else {
      if (depth == 0) return html.substr(start, next_close + tag.size() + 3 - start);
      --depth;
      p = next_close;
    }
  }
  return "";
}

/// HTML text back to characters (the page escapes quotes in repro commands).
std::string unescape(std::string s) {
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"&#39;", "'"}, {"&quot;", "\""}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}}) {
    for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  }
  return s;
}

// ---- a run shaped like seed 000's figure 4 --------------------------------------------------------------

CellResult cell(const std::string& kernel, const std::string& layout, const std::string& heads, const std::string& dtype, int len,
                const std::string& fault, Verdict v, double rel) {
  CellResult r;
  r.suite = "tail-poison";
  r.kernel = kernel;
  r.case_id = fmt::format("h{} d128 bs16 {} ctx{} {} seed7", heads, dtype, len, layout);
  r.fault = fault;
  r.cell_id = r.case_id + " " + fault;
  r.straddle = len % 16 != 0;
  r.verdict = v;
  r.metrics.rel_linf = rel;
  r.metrics.max_abs = rel * 3;
  r.limit = dtype == "bf16" ? 1.6e-2 : 2e-3;
  r.margin = rel / r.limit;
  return r;
}

/// The tail-poison matrix for cpu.reference (clean everywhere but one planted beyond-tolerance cell) and
/// the negative control cpu.vector_v (poisoned at V and K+V of the straddling length, as expected).
RunSummary tail_poison_run() {
  RunSummary s;
  const std::vector<std::string> faults = {"clean", "K:nan@tail", "V:nan@tail", "K+V:nan@tail"};
  for (const std::string kernel : {"cpu.reference", "cpu.vector_v"}) {
    const std::string layout = kernel == "cpu.reference" ? "nhd" : "vllm";
    int index = 0;
    for (const std::string dtype : {"bf16", "f16"})
      for (const std::string heads : {"32/16", "32/8"})
        for (int len : {4090, 4096})
          for (const auto& f : faults) {
            const double base = (dtype == "bf16" ? 3e-3 : 4e-4) * (1 + 0.05 * (heads == "32/8")) * (1 + 0.01 * (len == 4096));
            CellResult r = cell(kernel, layout, heads, dtype, len, f, Verdict::pass, base);
            r.index = index++;
            if (kernel == "cpu.vector_v") {
              r.expected_fail = len % 16 != 0 && f.rfind("K:", 0) != 0 && f != "clean";
              if (r.expected_fail) {
                r.verdict = Verdict::poisoned;
                r.metrics.rel_linf = INFINITY;
                r.margin = INFINITY;
                r.detail = "NaN at (seq 0, head 3, dim 17)";
              }
            }
            if (kernel == "cpu.reference" && dtype == "f16" && heads == "32/8" && len == 4090 && f == "clean") {
              r.verdict = Verdict::fail;  // planted: one cell beyond tolerance
              r.metrics.rel_linf = 5e-3;
              r.margin = r.metrics.rel_linf / r.limit;
              r.detail = "<script>alert('x')</script> beyond tolerance";
            }
            s.results.push_back(r);
          }
  }
  s.selftest.passed = true;
  s.selftest.lines = {"ok 1-ulp at offset 5 flagged", "ok NaN flagged"};
  summarize(s, {{"cpu.reference", false}, {"cpu.vector_v", true}});
  return s;
}

ReportMeta meta_of() {
  ReportMeta m;
  m.suite = "tail-poison";
  m.device = "cpu";
  m.environment.pacheck_version = "0.1.0";
  m.environment.git_commit = "abc1234";
  m.environment.compiler = "gcc 12.2.0";
  m.environment.device = "cpu";
  m.environment.device_name = "Test CPU @ 2 GHz";
  m.environment.arch = "x86_64";
  m.environment.plugins = {{"/tmp/libplanted.so", std::string(64, 'a')}};
  return m;
}

BenchTable bench_of() {
  BenchTable t;
  t.device = "Test CPU";
  for (const std::string heads : {"32/16", "32/8"})
    for (int len : {1024, 4096, 16384}) {
      BenchCaseRow row;
      row.case_id = fmt::format("h{} d128 bs16 bf16 ctx{} nhd seed7", heads, len);
      const double a = len * 0.01, b = len * 0.01 / (heads == "32/8" ? 2.0 : 0.8);
      row.kernels = {{"cpu.vector_v", true, "", "pass", a, a * 0.95, a * 1.05, 3e-3},
                     {"cpu.vector_v_masked", true, "", "pass", b, b * 0.95, b * 1.05, 3e-3}};
      row.ratio = a / b;
      t.rows.push_back(row);
    }
  return t;
}

class HtmlReport : public ::testing::Test {
 protected:
  RunSummary s = tail_poison_run();
  ReportMeta meta = meta_of();
  BenchTable bench = bench_of();
  std::string html = html_report(s, meta, &bench);
};

// ---- structure ------------------------------------------------------------------------------------------

TEST_F(HtmlReport, EveryFigureIsPresentDrawnWithAxesAndACaption) {
  for (const char* id : {html_ids::kFaultMatrix, html_ids::kErrorVsLength, html_ids::kMargin, html_ids::kBenchRatio}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(count(html, fmt::format("id=\"{}\"", id)), 1u) << "each figure exactly once";
    const std::string fig = element(html, "figure", id);
    ASSERT_FALSE(fig.empty()) << "figure missing";
    EXPECT_NE(fig.find("<svg "), std::string::npos) << "no inline SVG";
    // Drawn, not an empty frame: many marks.
    const std::size_t marks = count(fig, "<rect") + count(fig, "<polyline") + count(fig, "<polygon") + count(fig, "<circle");
    EXPECT_GE(marks, 8u);
    // Both axes, each with a label, and tick labels or row/column labels.
    EXPECT_GE(count(fig, "class=\"axis x-axis\""), 1u);
    EXPECT_GE(count(fig, "class=\"axis y-axis\""), 1u);
    EXPECT_GE(count(fig, "class=\"axis-label\""), 2u);
    EXPECT_GE(count(fig, "class=\"tick\"") + count(fig, "class=\"row-label\"") + count(fig, "class=\"col-label\""), 4u);
    // A caption that says what good looks like, and an accessible title/description on every SVG.
    const std::size_t cap = fig.find("<figcaption>");
    ASSERT_NE(cap, std::string::npos) << "no caption";
    const std::string caption = fig.substr(cap, fig.find("</figcaption>") - cap);
    EXPECT_NE(caption.find("<b>Good"), std::string::npos) << "caption must say what good looks like";
    EXPECT_EQ(count(fig, "<svg "), count(fig, "aria-labelledby="));
    EXPECT_EQ(count(fig, "<svg "), count(fig, "<desc "));
  }
  EXPECT_NE(html.find(fmt::format("id=\"{}\"", html_ids::kProvenance)), std::string::npos);
}

TEST_F(HtmlReport, EverySvgHasAPositiveSizeAndViewBox) {
  const std::regex svg_re(R"re(<svg id="[^"]+" class="chart" width="([0-9.]+)" height="([0-9.]+)" viewBox="0 0 ([0-9.]+) ([0-9.]+)")re");
  std::size_t n = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), svg_re); it != std::sregex_iterator(); ++it, ++n) {
    EXPECT_GT(std::stod((*it)[1]), 100);
    EXPECT_GT(std::stod((*it)[2]), 50);
    EXPECT_EQ((*it)[1], (*it)[3]);
    EXPECT_EQ((*it)[2], (*it)[4]);
  }
  EXPECT_EQ(n, count(html, "<svg "));
  EXPECT_GE(n, 4u);
}

TEST_F(HtmlReport, LoadsNothingFromOutside) {
  for (const char* banned : {"<script", "<link", "<iframe", "<img", "<object", "<embed", "@import", "@font-face", "http:", "https:",
                             "src=", "//fonts", "xlink:href"}) {
    EXPECT_EQ(html.find(banned), std::string::npos) << "page contains " << banned;
  }
  // url() only for in-page patterns; href only for in-page anchors.
  for (std::size_t p = html.find("url("); p != std::string::npos; p = html.find("url(", p + 1)) EXPECT_EQ(html[p + 4], '#');
  for (std::size_t p = html.find("href=\""); p != std::string::npos; p = html.find("href=\"", p + 1)) EXPECT_EQ(html[p + 6], '#');
  // System fonts only.
  EXPECT_NE(html.find("font-family: system-ui"), std::string::npos);
  EXPECT_NE(html.find("Content-Security-Policy\" content=\"default-src 'none'"), std::string::npos);
}

TEST_F(HtmlReport, TextFromOutsideIsEscaped) {
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert"), std::string::npos);
}

// ---- content --------------------------------------------------------------------------------------------

TEST_F(HtmlReport, FaultMatrixDrawsTheKernelsUnderTest) {
  const std::string fig = element(html, "figure", html_ids::kFaultMatrix);
  ASSERT_NE(fig.find("data-kernel=\"cpu.reference\""), std::string::npos);
  EXPECT_EQ(fig.find("data-kernel=\"cpu.vector_v\""), std::string::npos) << "the control is counted in section 5";
  EXPECT_EQ(count(fig, "data-verdict=\"pass\""), 31u);
  EXPECT_EQ(count(fig, "data-verdict=\"fail\""), 1u);
  // Rows carry dtype, heads with the GQA ratio, the length and whether it straddles.
  EXPECT_NE(fig.find("bf16 \xC2\xB7 h32/8 (GQA 4)"), std::string::npos);
  EXPECT_NE(fig.find(">straddles<"), std::string::npos);
  EXPECT_NE(fig.find(">aligned<"), std::string::npos);
  for (const char* col : {">clean<", ">K<", ">V<", ">K+V<", ">nan@tail<"}) EXPECT_NE(fig.find(col), std::string::npos) << col;
  // Hover titles carry the cell id and metrics.
  EXPECT_NE(fig.find("<title>cpu.reference | h32/16 d128 bs16 bf16 ctx4090 nhd seed7 V:nan@tail"), std::string::npos);
}

/// tail_poison_run's negative control cpu.vector_v alone.
RunSummary control_alone() {
  RunSummary s = tail_poison_run();
  s.results.erase(std::remove_if(s.results.begin(), s.results.end(), [](const CellResult& r) { return r.kernel != "cpu.vector_v"; }),
                  s.results.end());
  summarize(s, {{"cpu.vector_v", true}});
  return s;
}

TEST_F(HtmlReport, FaultMatrixShowsTheNegativeControlsPatternInARunOfControlsAlone) {
  const std::string fig = element(html_report(control_alone(), meta), "figure", html_ids::kFaultMatrix);
  ASSERT_NE(fig.find("data-kernel=\"cpu.vector_v\""), std::string::npos);
  // 2 dtypes x 2 GQA ratios x (V, K+V) at the straddling length poison; the other 24 cells pass.
  EXPECT_EQ(count(fig, "data-verdict=\"poisoned\""), 8u);
  EXPECT_EQ(count(fig, "data-verdict=\"pass\""), 24u);
  EXPECT_EQ(count(fig, "stroke-dasharray=\"3 2\""), 8u + 1u) << "expected failures outlined, and the legend's key";
  EXPECT_NE(fig.find("<title>cpu.vector_v | h32/16 d128 bs16 bf16 ctx4090 vllm seed7 V:nan@tail"), std::string::npos);
}

/// tail_poison_run as a run makes it: the control's cells outside its expected failures not_run, and the
/// control listed first among the kernels.
RunSummary run_with_not_run_control() {
  RunSummary s = tail_poison_run();
  for (auto& r : s.results)
    if (r.kernel == "cpu.vector_v" && !r.expected_fail) {
      r.verdict = Verdict::not_run;
      r.detail = "outside the control's expected failures";
    }
  summarize(s, {{"cpu.vector_v", true}, {"cpu.reference", false}});
  return s;
}

TEST_F(HtmlReport, ControlsAreOneRowEachAfterTheKernelsUnderTestAndTheirNotRunCellsAreNotEmbedded) {
  const RunSummary ctl = run_with_not_run_control();
  ASSERT_EQ(ctl.not_run, 24);
  ASSERT_EQ(ctl.caught, 8);
  const std::string page = html_report(ctl, meta);
  // The header's table: the kernel under test first, then the control with its caught, missed and not-run
  // cells (passed, failed, declined, caught, missed, not run).
  const std::size_t ref = page.find("<td class=\"mono\">cpu.reference</td>"), vv = page.find("<td class=\"mono\">cpu.vector_v</td>");
  ASSERT_NE(ref, std::string::npos);
  ASSERT_NE(vv, std::string::npos);
  EXPECT_LT(ref, vv) << "the kernels under test first";
  EXPECT_NE(page.find("<td class=\"mono\">cpu.vector_v</td><td class=\"num\">0</td><td class=\"num\">0</td><td class=\"num\">0</td>"
                      "<td class=\"num\">8</td><td class=\"num\">0</td><td class=\"num\">24</td>"),
            std::string::npos);
  // No figure draws the control; section 5 lists it once with its counts and its caught cells.
  for (const char* id : {html_ids::kFaultMatrix, html_ids::kErrorVsLength, html_ids::kMargin})
    EXPECT_EQ(element(page, "figure", id).find("cpu.vector_v"), std::string::npos) << id;
  const std::string sec = element(page, "section", html_ids::kProvenance);
  EXPECT_NE(sec.find("<tr><td class=\"mono\">cpu.vector_v</td><td>caught: the instrument sees the planted fault</td>"
                     "<td class=\"num\">8</td><td class=\"num\">0</td><td class=\"num\">24</td><td class=\"num\">0</td></tr>"),
            std::string::npos)
      << sec;
  for (const auto& r : ctl.results) {
    if (r.kernel != "cpu.vector_v") continue;
    // The control's cells are the vllm ones (the kernel under test ran nhd): a not_run id is nowhere.
    if (r.verdict == Verdict::not_run) EXPECT_EQ(page.find(r.cell_id), std::string::npos) << r.cell_id;
    else EXPECT_EQ(count(page, "poisoned          " + r.cell_id + "\n"), 1u) << r.cell_id;
  }
}

TEST(HtmlFigures, ErrorFigurePlotsFaultedCellsAndMarksTheFailedOnes) {
  // A kernel under test with cpu.vector_v's fault (V's unmasked tail): its clean cells are fine, its faulted
  // ones poisoned. Its panel drew clean cells only and looked healthy.
  RunSummary s = tail_poison_run();
  for (auto& r : s.results) r.kernel = r.kernel == "cpu.vector_v" ? "planted.reads_tail" : r.kernel;
  for (auto& r : s.results) r.expected_fail = false;
  summarize(s, {{"cpu.reference", false}, {"planted.reads_tail", false}});
  ASSERT_EQ(s.failed, 9);
  const std::string fig = element(html_report(s, meta_of()), "figure", html_ids::kErrorVsLength);
  const std::size_t panel = fig.find("<g class=\"panel\" data-kernel=\"planted.reads_tail\">");
  ASSERT_NE(panel, std::string::npos);
  const std::string tail = fig.substr(panel), reference = fig.substr(0, panel);
  EXPECT_EQ(count(tail, "class=\"nonfinite\""), 8u) << "the 8 poisoned cells, on the top edge";
  EXPECT_EQ(count(tail, "class=\"failed\""), 8u);
  EXPECT_NE(tail.find("planted.reads_tail  (4 shapes, 32 cells, 24 faulted; 8 FAILED)"), std::string::npos);
  EXPECT_NE(tail.find("h32/16 d128 bs16 bf16 ctx4090 vllm seed7 V:nan@tail: FAILED (poisoned)"), std::string::npos);
  // The kernel under test's one failed clean cell, at its rel_linf.
  EXPECT_EQ(count(reference, "class=\"failed\""), 1u);
  EXPECT_NE(reference.find("h32/8 d128 bs16 f16 ctx4090 nhd seed7 clean: FAILED (fail, rel_linf 5.000e-03)"), std::string::npos);
  EXPECT_NE(fig.find(">failed cell (on the top edge: no finite output)<"), std::string::npos) << "in the legend";
}

TEST_F(HtmlReport, ErrorFigureHasBandMedianLimitAndAnAxisOfTheMeasuredLengths) {
  const std::string fig = element(html, "figure", html_ids::kErrorVsLength);
  // One band, median and limit per kernel under test and dtype: bf16 and f16 errors differ several-fold,
  // so a band across both would show the dtype rather than the kernel. Two shapes per dtype share both
  // lengths.
  EXPECT_EQ(count(fig, "class=\"band\""), 2u);
  EXPECT_EQ(count(fig, "class=\"median\""), 2u);
  EXPECT_EQ(count(fig, "class=\"limit\""), 2u);
  EXPECT_EQ(count(fig, "data-dtype=\"bf16\""), 1u);
  EXPECT_NE(fig.find(">bf16 limit 1.6e-2<"), std::string::npos);
  EXPECT_NE(fig.find(">f16 limit 2e-3<"), std::string::npos);
  EXPECT_NE(fig.find("context length (tokens, in order)"), std::string::npos);
  EXPECT_NE(fig.find("rel_linf"), std::string::npos);
  // Both measured lengths are labelled (the log axis had room for 4090 only).
  EXPECT_NE(fig.find(">4090<"), std::string::npos);
  EXPECT_NE(fig.find(">4096<"), std::string::npos);
  // One thin line per shape: 2 dtypes x 2 head configurations.
  EXPECT_EQ(count(fig, "class=\"series\""), 4u);
}

TEST_F(HtmlReport, MarginHeatMapColoursEveryShapeAndLength) {
  const std::string fig = element(html, "figure", html_ids::kMargin);
  // 4 shapes x 2 lengths of the kernel under test.
  EXPECT_EQ(count(fig, "<g class=\"cell\">"), 8u);
  EXPECT_NE(fig.find("margin = rel_linf / limit"), std::string::npos);
  // The control's poisoned lengths are drawn where the run has controls alone.
  EXPECT_NE(element(html_report(control_alone(), meta), "figure", html_ids::kMargin).find(">NaN<"), std::string::npos);
  EXPECT_NE(fig.find("stroke=\"#000\" stroke-width=\"2.5\""), std::string::npos) << "the failed cell is outlined";
}

TEST_F(HtmlReport, BenchCellsCarryBothTimesOnHover) {
  const std::string fig = element(html, "figure", html_ids::kBenchRatio);
  EXPECT_EQ(count(fig, "<g class=\"cell\">"), 6u);
  const std::regex title_re(R"(<title>([^<]*)</title>)");
  std::size_t with_both = 0;
  for (auto it = std::sregex_iterator(fig.begin(), fig.end(), title_re); it != std::sregex_iterator(); ++it) {
    const std::string t = (*it)[1];
    if (t.find("A cpu.vector_v: ") != std::string::npos && t.find("B cpu.vector_v_masked: ") != std::string::npos &&
        t.find(" us median") != std::string::npos)
      ++with_both;
  }
  EXPECT_EQ(with_both, 6u);
  EXPECT_NE(fig.find(">2.00\xC3\x97<"), std::string::npos) << "ratio written in the cell";
  EXPECT_NE(fig.find("above 1 means B is faster"), std::string::npos);
}

// The colour bar's tick labels come from measured times: 1 / max and max sit wherever the slowest cell
// puts them. A 2.33x spread once put "0.43x" 27 px from "0.5x", overlapping in the browser check.
TEST(BenchFigure, ColourBarTickLabelsNeverOverlapAndKeepTheEnds) {
  const std::regex colorbar_re(R"re(<g class="colorbar">([\s\S]*?)</g>)re");
  const std::regex tick_re(R"re(<text x="([0-9.]+)" y="[0-9.]+" class="tick" text-anchor="middle">([^<]*)</text>)re");
  for (double spread : {2.0, 2.05, 2.33, 2.6, 3.0, 4.0, 16.0, 1000.0}) {
    BenchTable t = bench_of();
    t.rows[0].ratio = 1 / spread;
    const std::string page = html_report(tail_poison_run(), meta_of(), &t);
    const std::string fig = element(page, "figure", html_ids::kBenchRatio);
    std::smatch bar;
    ASSERT_TRUE(std::regex_search(fig, bar, colorbar_re)) << spread;
    const std::string body = bar[1];
    std::vector<std::pair<double, double>> boxes;
    std::vector<std::string> labels;
    for (auto it = std::sregex_iterator(body.begin(), body.end(), tick_re); it != std::sregex_iterator(); ++it) {
      const double x = std::stod((*it)[1]), half = svg::text_width((*it)[2].str(), 11) / 2;
      for (const auto& [l, r] : boxes) EXPECT_FALSE(x - half < r && x + half > l) << "spread " << spread << ": " << (*it)[2];
      boxes.push_back({x - half, x + half});
      labels.push_back((*it)[2]);
    }
    const std::string lo = fmt::format("{}\xC3\x97", svg::tick_label(std::round(100 / spread) / 100));
    const std::string hi = fmt::format("{}\xC3\x97", svg::tick_label(std::round(spread * 100) / 100));
    EXPECT_NE(std::find(labels.begin(), labels.end(), lo), labels.end()) << "spread " << spread << " lost " << lo;
    EXPECT_NE(std::find(labels.begin(), labels.end(), hi), labels.end()) << "spread " << spread << " lost " << hi;
    EXPECT_GE(labels.size(), 3u) << "spread " << spread;
  }
}

TEST_F(HtmlReport, WithoutBenchTheSectionSaysHowToGetIt) {
  const std::string page = html_report(s, meta);
  EXPECT_TRUE(element(page, "figure", html_ids::kBenchRatio).empty());
  EXPECT_NE(page.find("No bench results given"), std::string::npos);
  EXPECT_NE(page.find("pacheck bench --kernel A --kernel B --json"), std::string::npos);
}

TEST_F(HtmlReport, ProvenanceHasFingerprintChecksAndReproCommands) {
  const std::string sec = unescape(element(html, "section", html_ids::kProvenance));
  ASSERT_FALSE(sec.empty());
  for (const char* want : {"abc1234", "gcc 12.2.0", "Test CPU @ 2 GHz", "/tmp/libplanted.so", "passed", "ok NaN flagged", "caught"})
    EXPECT_NE(sec.find(want), std::string::npos) << want;
  // The one failing cell of the run, ready to paste; the control's caught cells are not failures.
  EXPECT_NE(sec.find("pacheck repro 'h32/8 d128 bs16 f16 ctx4090 nhd seed7 clean' --kernel cpu.reference"), std::string::npos);
  EXPECT_EQ(count(sec, "pacheck repro "), 1u);
  EXPECT_NE(sec.find("Failing cells (1)"), std::string::npos);
}

TEST_F(HtmlReport, MissedControlIsAFailingCellAndTheOutcomeSaysBlind) {
  for (auto& r : s.results)
    if (r.kernel == "cpu.vector_v" && r.expected_fail) {
      r.verdict = Verdict::pass;
      r.metrics.rel_linf = 1e-3;
      r.margin = 0.1;
    }
  summarize(s, {{"cpu.reference", false}, {"cpu.vector_v", true}});
  const std::string page = unescape(html_report(s, meta));
  EXPECT_NE(page.find("exit code 3"), std::string::npos);
  EXPECT_NE(page.find("BLIND"), std::string::npos);
  EXPECT_NE(page.find("--kernel cpu.vector_v   <span class=\"note\"># negative control MISSED"), std::string::npos);
}

TEST_F(HtmlReport, UnparsableCaseIdsAreLeftOutOfFiguresNotFatal) {
  s.results.front().case_id = "not a case id";
  EXPECT_NO_THROW(html_report(s, meta));
}

// ---- the report directory -------------------------------------------------------------------------------

TEST_F(HtmlReport, ReportDirectoryGetsTheSamePage) {
  char tmpl[] = "/tmp/pacheck_html_XXXXXX";
  const fs::path dir = ::mkdtemp(tmpl);
  write_reports(dir.string(), s, meta);
  std::ifstream in(dir / "report.html");
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written, html_report(s, meta));
  // A new run in the directory removes the old page until it finishes (no stale figures).
  auto rd = ReportDir::start(dir.string(), nlohmann::json{{"suite", "x"}});
  EXPECT_FALSE(fs::exists(dir / "report.html"));
  fs::remove_all(dir);
}

// ---- figures at the sizes of real suites (issue 21) -----------------------------------------------------

/// A passing result of `kernel` for case `case_id` and `fault`, with error `rel` under `limit`.
CellResult result_of(const std::string& suite, const std::string& kernel, const std::string& case_id, const std::string& fault,
                     double limit, double rel, bool straddle = true) {
  CellResult r;
  r.suite = suite;
  r.kernel = kernel;
  r.case_id = case_id;
  r.fault = fault;
  r.cell_id = case_id + " " + fault;
  r.straddle = straddle;
  r.verdict = Verdict::pass;
  r.metrics.rel_linf = rel;
  r.metrics.max_abs = rel * 3;
  r.limit = limit;
  r.margin = rel / limit;
  return r;
}

RunSummary summary_of(std::vector<CellResult> results, const std::vector<KernelRole>& roles) {
  RunSummary s;
  for (std::size_t i = 0; i < results.size(); ++i) results[i].index = static_cast<int>(i);
  s.results = std::move(results);
  s.selftest.passed = true;
  summarize(s, roles);
  return s;
}

/// Width and height of the first <svg> in `html` after `from`.
std::pair<double, double> svg_size(const std::string& html, std::size_t from = 0) {
  static const std::regex re(R"re(<svg id="[^"]+" class="chart" width="([0-9.]+)" height="([0-9.]+)")re");
  std::smatch m;
  const std::string rest = html.substr(from);
  if (!std::regex_search(rest, m, re)) return {0, 0};
  return {std::stod(m[1]), std::stod(m[2])};
}

/// The texts of the <text> elements of `fig` that carry `cls` among their classes.
std::vector<std::string> texts_of_class(const std::string& fig, const std::string& cls) {
  std::vector<std::string> out;
  const std::regex re("<text [^>]*class=\"([^\"]*)\"[^>]*>([^<]*)</text>");
  for (auto it = std::sregex_iterator(fig.begin(), fig.end(), re); it != std::sregex_iterator(); ++it) {
    std::istringstream classes((*it)[1].str());
    for (std::string c; classes >> c;)
      if (c == cls) out.push_back((*it)[2]);
  }
  return out;
}

TEST(HtmlFigures, ErrorFigureDrawsEveryMeasuredLengthApartAndLabelsIt) {
  // The lengths a suite pairs to tell a straddling block from an aligned one: on a log axis 15, 16 and 17
  // (and 4090, 4096) fell on one pixel and all but one lost their label.
  std::vector<CellResult> rs;
  for (int len : {15, 16, 17, 4090, 4096})
    rs.push_back(result_of("boundary", "cpu.reference", fmt::format("h16/8 d128 bs16 bf16 ctx{} vllm seed7", len), "clean", 1.953125e-2, 3e-3));
  const std::string fig = element(html_report(summary_of(rs, {{"cpu.reference", false}}), meta_of()), "figure", html_ids::kErrorVsLength);
  const std::regex point_re(R"re(ctx(\d+): rel_linf [^<]*</title><circle cx="([0-9.]+)")re");
  std::map<int, double> cx;
  for (auto it = std::sregex_iterator(fig.begin(), fig.end(), point_re); it != std::sregex_iterator(); ++it)
    cx[std::stoi((*it)[1])] = std::stod((*it)[2]);
  ASSERT_EQ(cx.size(), 5u);
  for (auto a = cx.begin(), b = std::next(cx.begin()); b != cx.end(); ++a, ++b)
    EXPECT_GE(b->second - a->second, 10) << "ctx" << a->first << " and ctx" << b->first << " drawn apart";
  const auto ticks = texts_of_class(fig, "tick");
  for (const char* len : {"15", "16", "17", "4090", "4096"})
    EXPECT_NE(std::find(ticks.begin(), ticks.end(), len), ticks.end()) << "length " << len << " labelled";
}

TEST(HtmlFigures, ErrorFigureLegendNamesOnlyWhatItDraws) {
  // One cell: one shape at one length. No band or median can be drawn, and no NaN: the legend must not
  // promise them.
  const RunSummary one = summary_of({result_of("boundary", "cpu.reference", "h16/8 d128 bs16 bf16 ctx17 vllm seed7", "clean", 1.953125e-2, 3e-3)},
                                    {{"cpu.reference", false}});
  const std::string fig = element(html_report(one, meta_of()), "figure", html_ids::kErrorVsLength);
  ASSERT_FALSE(fig.empty());
  for (const char* absent : {"min\xE2\x80\x93max across shapes", "median of the shapes", "NaN/Inf output"})
    EXPECT_EQ(fig.find(std::string(">") + absent + "<"), std::string::npos) << absent;
  // Every legend entry names a series that is drawn outside the legend.
  const std::regex entry_re(R"re(<g data-series="([^"]+)">)re");
  std::size_t entries = 0;
  for (auto it = std::sregex_iterator(fig.begin(), fig.end(), entry_re); it != std::sregex_iterator(); ++it, ++entries)
    EXPECT_GE(count(fig, "data-series=\"" + (*it)[1].str() + "\""), 2u) << (*it)[1] << " is in the legend but not drawn";
  EXPECT_GE(entries, 3u) << "dtype, shape and limit entries";
  // The fixture run has two shapes per length: band and median are drawn and named.
  const std::string two = element(html_report(tail_poison_run(), meta_of()), "figure", html_ids::kErrorVsLength);
  EXPECT_NE(two.find(">median of the shapes<"), std::string::npos);
  EXPECT_GE(count(two, "data-series=\"band\""), 2u);
}

TEST(HtmlFigures, ErrorFigureLabelsASharedLimitOnce) {
  // bf16 and the fp8 caches read with bf16 queries share bf16's limit: their labels were written on top of
  // each other.
  std::vector<CellResult> rs;
  for (const std::string dtype : {"bf16", "fp8_e4m3fn q=bf16 o=bf16", "fp8_e5m2 q=bf16 o=bf16"})
    for (int len : {1000, 1008})
      rs.push_back(result_of("gate", "cpu.reference", fmt::format("h8/2 d128 bs16 {} ctx{} vllm seed7", dtype, len), "clean", 1.953125e-2, 3e-3));
  const std::string fig = element(html_report(summary_of(rs, {{"cpu.reference", false}}), meta_of()), "figure", html_ids::kErrorVsLength);
  EXPECT_EQ(count(fig, "class=\"limit\""), 1u) << "one line for the three dtypes";
  const auto labels = texts_of_class(fig, "limit-label");
  ASSERT_EQ(labels.size(), 1u);
  EXPECT_EQ(labels[0], "limit 1.95e-2: bf16 and 2 more");
  EXPECT_NE(fig.find("tolerance limit of bf16, fp8_e4m3fn q=bf16 o=bf16, fp8_e5m2 q=bf16 o=bf16: rel_linf"), std::string::npos)
      << "the hover names them all";
}

/// A gate-sized run: `kernels` kernels x gate's 27 faults x 24 rows of 4 groups, every cell passing.
RunSummary gate_sized_run(int kernels) {
  const std::vector<std::string> faults = {
      "clean", "K:nan@tail", "K:+inf@tail", "K:-inf@tail", "K:1e4@tail", "K:max@tail", "K:zero@tail", "V:nan@tail", "V:+inf@tail",
      "V:-inf@tail", "V:1e4@tail", "V:max@tail", "V:zero@tail", "K+V:nan@tail", "K+V:nan@all", "K+V:+inf@tail", "K+V:-inf@tail",
      "K+V:1e4@tail", "K+V:max@tail", "K+V:nan@unused", "K+V:+inf@unused", "K+V:max@unused", "K+V:nan@padding", "K+V:-inf@padding",
      "K+V:max@padding", "K+V:1e4@all", "K+V:max@all"};
  std::vector<CellResult> rs;
  std::vector<KernelRole> roles;
  for (int k = 0; k < kernels; ++k) {
    const std::string kernel = fmt::format("cpu.kernel_number_{:02d}", k);
    roles.push_back({kernel, false});
    for (const std::string shape : {"h32/16 d128 bs16 bf16", "h8/2 d128 bs16 fp8_e4m3fnuz q=bf16 o=bf16 ks=0.3~3 vs=3~0.3", "h16/8 d128 bs32 f16",
                                    "h28/4 d128 bs16 bf16"})
      for (const std::string ctx : {"1", "15", "16", "17", "1030,33,517", "4096"})
        for (const auto& f : faults)
          rs.push_back(result_of("gate", kernel, fmt::format("{} ctx{} vllm seed7", shape, ctx), f, 1.953125e-2, 2e-3));
  }
  return summary_of(rs, roles);
}

TEST(HtmlFigures, NegativeControlsBesideAGateAddOnlyTheirRowsAndCaughtCells) {
  // One kernel's gate with the built-in controls: each control's cells are mostly not_run (a CPU gate had
  // 6,456 of them over 24 controls), and the page embedded every one in a panel of each figure (13.8 MB).
  const RunSummary alone = gate_sized_run(1);
  std::vector<CellResult> rs = alone.results;
  std::vector<KernelRole> roles = {{"cpu.kernel_number_00", false}};
  const std::size_t cells = rs.size();
  for (int k = 0; k < 6; ++k) {
    const std::string control = fmt::format("cpu.control_{}", k);
    roles.push_back({control, true});
    for (std::size_t i = 0; i < cells; ++i) {
      CellResult r = rs[i];
      r.kernel = control;
      r.expected_fail = i % 97 == static_cast<std::size_t>(k);  // a few planted cells each, caught
      r.verdict = r.expected_fail ? Verdict::poisoned : Verdict::not_run;
      rs.push_back(r);
    }
  }
  const RunSummary with = summary_of(rs, roles);
  ASSERT_EQ(with.exit_code(), 0);
  ASSERT_GT(with.not_run, 3000);
  const std::string page = html_report(with, meta_of()), plain = html_report(alone, meta_of());
  EXPECT_LT(page.size(), plain.size() + 40000) << "6 table rows and " << with.caught << " caught cells, no panels";
  EXPECT_LT(page.size(), 1000000u);
}

TEST(HtmlFigures, GateSizedFaultMatrixFitsThePageWithItsHeaders) {
  // 27 fault columns: the matrix was 1180 px wide (the page scaled it, and its text, down) and the last
  // rotated headers ran past its right edge.
  const std::string fig = element(html_report(gate_sized_run(3), meta_of()), "figure", html_ids::kFaultMatrix);
  const auto [width, height] = svg_size(fig);
  EXPECT_GT(width, 0);
  EXPECT_LE(width, 1120) << "as wide as the page at most";
  EXPECT_EQ(fig.find("chart-scroll"), std::string::npos) << "fits without scrolling";
  const std::regex col_re(R"re(<text x="([0-9.]+)" y="[0-9.]+" class="col-label" transform="rotate\(-45[^"]*">([^<]*)</text>)re");
  std::size_t cols = 0;
  for (auto it = std::sregex_iterator(fig.begin(), fig.end(), col_re); it != std::sregex_iterator(); ++it, ++cols)
    EXPECT_LE(std::stod((*it)[1]) + svg::text_width((*it)[2].str(), 10.5) * 0.71, width) << (*it)[2] << " reaches past the svg";
  EXPECT_EQ(cols, 27u * 3);
  // Long group names (the fp8 shape's options) are whole: they head their rows across the figure.
  EXPECT_NE(fig.find(">fp8_e4m3fnuz q=bf16 o=bf16 \xC2\xB7 h8/2 (GQA 4) bs16 ks=0.3~3 vs=3~0.3<"), std::string::npos);
  for (const auto& t : texts_of_class(fig, "group-label")) EXPECT_LE(svg::text_width(t, 11, true), width - 10) << t;
}

TEST(HtmlFigures, FaultMatrixLegendListsOnlyTheVerdictsDrawn) {
  const std::string fig = element(html_report(gate_sized_run(1), meta_of()), "figure", html_ids::kFaultMatrix);
  const auto legend = texts_of_class(fig, "legend");
  EXPECT_EQ(legend, std::vector<std::string>{"pass"}) << "every cell passes: fail and poisoned are not drawn";
  const std::string tp = element(html_report(tail_poison_run(), meta_of()), "figure", html_ids::kFaultMatrix);
  EXPECT_EQ(texts_of_class(tp, "legend"), (std::vector<std::string>{"pass", "fail"}));
  const std::string alone = element(html_report(control_alone(), meta_of()), "figure", html_ids::kFaultMatrix);
  EXPECT_EQ(texts_of_class(alone, "legend"), (std::vector<std::string>{"pass", "poisoned", "expected to fail (negative control)"}));
}

TEST(HtmlFigures, MarginMapWritesABatchOfEqualLengthsOnce) {
  // The bandwidth suite's cells are batches of 64 sequences of 8192 tokens: the column label was the whole
  // list, 320 characters, running off the figure.
  std::string batch = "8192";
  for (int i = 1; i < 64; ++i) batch += ",8192";
  const RunSummary s = summary_of({result_of("bandwidth", "cpu.reference", "h32/8 d128 bs16 bf16 ctx" + batch + " vllm seed7", "clean", 1.953125e-2, 3e-3, false)},
                                  {{"cpu.reference", false}});
  const std::string page = html_report(s, meta_of());
  const std::string fig = element(page, "figure", html_ids::kMargin);
  EXPECT_EQ(texts_of_class(fig, "col-label"), std::vector<std::string>{"8192\xC3\x97" "64"});
  const auto rows = texts_of_class(element(page, "figure", html_ids::kFaultMatrix), "row-label");
  EXPECT_NE(std::find(rows.begin(), rows.end(), "8192\xC3\x97" "64"), rows.end());
  for (const auto& r : rows) EXPECT_EQ(r.find("8192,8192"), std::string::npos) << r;
}

TEST(HtmlFigures, HeatMapsFitThePageByWrappingTheirColumnsButNeverShrink) {
  // Gate's 21 lengths with its long fp8 shapes fit the page in one piece; 100 lengths cannot: they wrap
  // into column groups, one under the other (a map scaled down to the page made its text 2.6 px, and one
  // that scrolled showed its first columns only, its scroll bar a screen below).
  auto margin_of = [](int lengths) {
    std::vector<CellResult> rs;
    for (const std::string shape : {"h32/16 d128 bs16 bf16", "h8/2 d128 bs16 fp8_e4m3fnuz q=bf16 o=bf16 ks=0.3~3 vs=3~0.3"})
      for (int i = 0; i < lengths; ++i)
        rs.push_back(result_of("gate", "cpu.reference", fmt::format("{} ctx{} vllm seed7", shape, 1 + 37 * i), "clean", 1.953125e-2, 3e-3));
    return element(html_report(summary_of(rs, {{"cpu.reference", false}}), meta_of()), "figure", html_ids::kMargin);
  };
  const std::string gate = margin_of(21);
  EXPECT_LE(svg_size(gate).first, 1120);
  EXPECT_EQ(gate.find("chart-scroll"), std::string::npos);
  EXPECT_NE(gate.find("data-categories=\"21\""), std::string::npos) << "every length is a labelled column";
  EXPECT_EQ(gate.find("columns 1"), std::string::npos) << "one group: no column range in its axis title";
  const std::string wide = margin_of(100);
  EXPECT_LE(svg_size(wide).first, 1120);
  EXPECT_EQ(wide.find("chart-scroll"), std::string::npos);
  // Every length once, over the groups, each group's axis title naming its columns.
  const std::regex group_re(R"re(<g class="axis x-axis" data-categories="(\d+)"><text [^>]*>context length \(tokens\): columns (\d+)\xE2\x80\x93(\d+) of 100</text>)re");
  int columns = 0, groups = 0, next = 1;
  for (auto it = std::sregex_iterator(wide.begin(), wide.end(), group_re); it != std::sregex_iterator(); ++it, ++groups) {
    EXPECT_EQ(std::stoi((*it)[2]), next);
    EXPECT_EQ(std::stoi((*it)[3]) - std::stoi((*it)[2]) + 1, std::stoi((*it)[1]));
    columns += std::stoi((*it)[1]);
    next = std::stoi((*it)[3]) + 1;
  }
  EXPECT_EQ(columns, 100);
  EXPECT_GE(groups, 2);
  EXPECT_EQ(count(wide, "<g class=\"cell\">"), 200u) << "2 shapes x 100 lengths";
  const std::regex cell_re(R"re(<g class="cell"><title>[^<]*</title><rect x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)")re");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(wide, m, cell_re));
  EXPECT_GE(std::stod(m[1]), 35) << "cells keep room for their text";
  // The page lets a scrolling figure (the fault matrix of very many kernels) keep its size.
  EXPECT_NE(html_report(tail_poison_run(), meta_of()).find(".chart-scroll svg.chart { max-width: none; }"), std::string::npos);
}

TEST(BenchTable, ReadsBenchJsonAndRejectsMalformed) {
  const auto j = nlohmann::json::parse(R"({"suite":"sweep","device":"cpu","rows":[{"case":"h8/2 d128 bs16 bf16 ctx100 nhd seed7",
    "kernels":[{"kernel":"a","ran":true,"median_us":10,"p10_us":9,"p90_us":11,"verdict":"pass"},
               {"kernel":"b","ran":false,"note":"declined: x"}]}]})");
  const BenchTable t = bench_from_json(j);
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_FALSE(t.rows[0].ratio.has_value());
  EXPECT_EQ(t.rows[0].kernels[1].note, "declined: x");
  EXPECT_THROW(bench_from_json(nlohmann::json::parse(R"({"rows":[{"kernels":[]}]})")), ReportError);
  EXPECT_THROW(load_bench("/nonexistent/bench.json"), ReportError);
}

// ---- colours --------------------------------------------------------------------------------------------

TEST(Palette, SequentialAndDivergingEndpoints) {
  EXPECT_EQ(svg::viridis(0).hex(), "#440154");
  EXPECT_EQ(svg::viridis(1).hex(), "#fde725");
  EXPECT_EQ(svg::viridis(2).hex(), "#fde725") << "clamped";
  EXPECT_EQ(svg::cividis(0).hex(), "#00224e");
  EXPECT_EQ(svg::diverging(0).hex(), "#f7f7f7") << "ratio 1 is neutral";
  // Perceptual order: luminance rises monotonically along viridis.
  for (int i = 1; i <= 20; ++i) EXPECT_GT(svg::viridis(i / 20.0).luminance(), svg::viridis((i - 1) / 20.0).luminance());
  // The diverging arms are equally strong: 2x faster and 2x slower look equally far from 1, and each arm
  // moves steadily away from the centre.
  for (double t : {0.1, 0.25, 0.5, 0.75, 1.0}) {
    const double lo = svg::delta_e(svg::diverging(-t), svg::diverging(0)), hi = svg::delta_e(svg::diverging(t), svg::diverging(0));
    EXPECT_NEAR(lo, hi, 0.06 * hi + 1) << "t = " << t;
    EXPECT_NEAR(svg::diverging(-t).luminance(), svg::diverging(t).luminance(), 0.03) << "t = " << t;
    EXPECT_GT(svg::delta_e(svg::diverging(t), svg::diverging(0)), svg::delta_e(svg::diverging(t - 0.1), svg::diverging(0)));
  }
  EXPECT_GT(svg::delta_e(svg::simulate_deuteranopia(svg::diverging(-1)), svg::simulate_deuteranopia(svg::diverging(1))), 30)
      << "the two arms stay apart for deuteranopes";
}

TEST(Palette, VerdictColoursStayApartForDeuteranopesAndCarryMarks) {
  const std::vector<Verdict> kinds = {Verdict::pass, Verdict::fail, Verdict::poisoned, Verdict::variant, Verdict::error};
  for (std::size_t i = 0; i < kinds.size(); ++i)
    for (std::size_t j = i + 1; j < kinds.size(); ++j) {
      const svg::Rgb a = verdict_colour(kinds[i]), b = verdict_colour(kinds[j]);
      EXPECT_GT(svg::delta_e(svg::simulate_deuteranopia(a), svg::simulate_deuteranopia(b)), 12)
          << verdict_name(kinds[i]) << " vs " << verdict_name(kinds[j]) << " under deuteranopia";
      EXPECT_NE(verdict_mark(kinds[i]), verdict_mark(kinds[j]));
    }
  // Every mark is readable on its own fill (WCAG AA for text).
  for (Verdict v : {Verdict::pass, Verdict::fail, Verdict::poisoned, Verdict::variant, Verdict::unwritten, Verdict::oob_write,
                    Verdict::input_mutated, Verdict::declined, Verdict::error, Verdict::crash, Verdict::timeout})
    EXPECT_GE(svg::contrast(verdict_colour(v), svg::text_on(verdict_colour(v))), 4.5) << verdict_name(v);
}

TEST(Palette, DeuteranopiaSimulationKeepsGreysAndMergesRedGreen) {
  EXPECT_EQ(svg::simulate_deuteranopia({128, 128, 128}).hex(), "#808080");
  // Pure red and a green of similar lightness become hard to tell apart: the check above can fail.
  EXPECT_LT(svg::delta_e(svg::simulate_deuteranopia(svg::parse_hex("#d62728")), svg::simulate_deuteranopia(svg::parse_hex("#7f7f00"))),
            12);
}

// ---- scales, ticks, writer ------------------------------------------------------------------------------

TEST(Svg, LogTicksLabelMeasuredLengthsAndDecades) {
  const auto ticks = svg::log_ticks(100, 40000, {256, 1024, 4096, 32768});
  std::vector<std::string> labels;
  for (const auto& t : ticks) labels.push_back(t.label);
  for (const char* want : {"256", "1024", "4096", "32768", "100"}) EXPECT_NE(std::find(labels.begin(), labels.end(), want), labels.end()) << want;
  // 1000 is within 0.15 decades of 1024 and crowds it out; 10000 is far enough from everything.
  EXPECT_EQ(std::find(labels.begin(), labels.end(), "1000"), labels.end());
  EXPECT_NE(std::find(labels.begin(), labels.end(), "10000"), labels.end());
  EXPECT_EQ(svg::tick_label(0.0021), "2.1e-3");
  EXPECT_EQ(svg::tick_label(0.016), "0.016");
  EXPECT_EQ(svg::tick_label(4090), "4090");
}

TEST(Svg, LinearTicksAreRound) {
  const auto ticks = svg::linear_ticks(0, 0.3, 5);
  ASSERT_FALSE(ticks.empty());
  EXPECT_EQ(ticks.front().label, "0");
  EXPECT_EQ(ticks.back().label, "0.3");
  const auto [lo, hi] = svg::nice_linear_domain(0.0013, 0.0047, true);
  EXPECT_EQ(lo, 0);
  EXPECT_GE(hi, 0.0047);
}

TEST(Svg, ScalesMapDomainOntoRange) {
  const auto x = svg::Scale::log10(10, 1000, 0, 200);
  EXPECT_DOUBLE_EQ(x(100), 100);
  EXPECT_DOUBLE_EQ(x(0), 0) << "non-positive values sit at the low end of a log axis";
  const auto y = svg::Scale::linear(0, 1, 300, 100);
  EXPECT_DOUBLE_EQ(y(0.5), 200);
  EXPECT_THROW(svg::Scale::log10(0, 1, 0, 1), std::invalid_argument);
}

TEST(Svg, TextWidthCoversDejaVuSans) {
  // DejaVu Sans (what Linux machines without the other fonts of the page draw with) sets digits at 0.636 em
  // and capitals up to 0.99 em: an estimate below that let labels run into each other and off the figure.
  EXPECT_GE(svg::text_width("4096", 11), 4 * 0.636 * 11 - 0.01);
  EXPECT_GE(svg::text_width("W", 10), 9.8);
  EXPECT_GT(svg::text_width("context (tokens)", 12, true), svg::text_width("context (tokens)", 12));
  EXPECT_DOUBLE_EQ(svg::text_width("", 11), 0);
}

TEST(Svg, BandAxisTurnsAndThinsCrowdedLabels) {
  const std::vector<std::string> few = {"17"}, gate = {"1", "15", "16", "17", "31", "32", "33", "64", "100", "127", "128", "129", "256",
                                                      "685", "1000", "1008", "1024", "1030", "4090", "4096"};
  EXPECT_FALSE(svg::band_axis(few, 300).vertical);
  const svg::BandAxis g = svg::band_axis(gate, 21);
  EXPECT_TRUE(g.vertical) << "4-digit labels do not fit 21 px side by side";
  EXPECT_EQ(g.every, 1u) << "but every one fits turned upright";
  std::vector<std::string> hundred;
  for (int i = 0; i < 100; ++i) hundred.push_back(std::to_string(4000 + i));
  EXPECT_EQ(svg::band_axis(hundred, 8).every, 2u);
  svg::Writer w(900, 100, "t", "", "");
  svg::axis_bottom_bands(w, 0, 10, svg::band_axis(hundred, 8), hundred, "x");
  const std::string out = w.str();
  EXPECT_NE(out.find("data-categories=\"50\""), std::string::npos);
  EXPECT_EQ(count(out, "<line "), 101u) << "the axis line and a tick mark per category";
}

TEST(Svg, WriterEscapesAndClosesElements) {
  svg::Writer w(100, 50, "t", "a <title>", "d & \"desc\"");
  w.open("g", {{"class", "x\"y"}});
  w.text(1, 2, "5 < 6 & bad\x01" "byte\xff");  // split: a hex escape would swallow the 'b'
  const std::string out = w.str();
  EXPECT_NE(out.find("a &lt;title&gt;"), std::string::npos);
  EXPECT_NE(out.find("class=\"x&quot;y\""), std::string::npos);
  EXPECT_NE(out.find("5 &lt; 6 &amp; bad?byte?"), std::string::npos);
  EXPECT_NE(out.find("</g></svg>"), std::string::npos) << "open elements closed";
  EXPECT_THROW(svg::Writer(1, 1, "x", "", "").close(), std::logic_error);
  EXPECT_EQ(svg::num(12.5000), "12.5");
  EXPECT_EQ(svg::num(-0.001), "0");
  EXPECT_EQ(svg::num(NAN), "0");
}

}  // namespace
}  // namespace pacheck
