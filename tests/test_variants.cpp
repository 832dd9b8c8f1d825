// Attention variants (issue 19): sliding window, logit soft cap, ALiBi slopes and sinks.
//  - Case fields, id tokens and their round trip; a case without variants keeps its id; bad values are a
//    CaseError naming the field; the suite key `variants`.
//  - The oracle (fp32 and fp64) against a naive double loop written from the ABI's formula, and against
//    closed forms: window 1 = the last token's V, a window as long as the sequence = no window (bitwise),
//    dominant sinks give 0, a finite sink scales the plain output by 1 / (1 + e^(sink - lse)), a soft cap
//    bounds the logits (lse <= cap + log L), a huge cap ~ no cap, ALiBi over equal keys = geometric weights.
//  - Every registered CPU kernel on variant cells (clean and NaN/Inf tail poison): honest kernels pass and
//    stay bitwise clean; cpu.softcap_ratio and cpu.window_scratch fail exactly their expected cells.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/case.hpp"
#include "core/cell.hpp"
#include "faults/inject.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"
#include "oracle/oracle.hpp"
#include "paging/pager.hpp"
#include "suites/suite.hpp"
#include "tests/kernel_checks.hpp"

namespace pacheck {
namespace {

// ---- Case fields and ids ----

TEST(VariantIds, DefaultsLeaveIdsUnchanged) {
  const Case c{};
  EXPECT_EQ(c.id(), "h32/8 d128 bs16 bf16 ctx4090 nhd seed7");
  EXPECT_FALSE(c.has_variant());
}

TEST(VariantIds, RoundTrip) {
  for (const char* id : {"h8/2 d64 bs16 bf16 ctx1000,37 nhd seed7 win=128",
                         "h8/2 d64 bs16 bf16 ctx1000 nhd seed7 cap=50",
                         "h8/2 d64 bs16 bf16 ctx1000 nhd seed7 alibi=geo",
                         "h8/2 d64 bs16 bf16 ctx1000 nhd seed7 alibi=0.0625",
                         "h2/1 d64 bs16 bf16 ctx1000 nhd seed7 alibi=0.5,0.25",
                         "h8/2 d64 bs16 bf16 ctx1000 nhd seed7 sinks=-2~2",
                         "h8/2 d64 bs16 bf16 ctx1000 nhd seed7 sinks=dominant",
                         "h8/2 d64 bs16 bf16 ctx1000 nhd seed7 win=100 cap=50 alibi=geo sinks=-1~1"}) {
    const Case c = parse_case_id(id);
    EXPECT_TRUE(c.has_variant()) << id;
    EXPECT_EQ(c.id(), id);
  }
  const Case c = parse_case_id("h8/2 d64 bs16 bf16 ctx1000 nhd seed7 win=100 cap=30.5 alibi=geo sinks=-1~1");
  EXPECT_EQ(c.sliding_window, 100);
  EXPECT_EQ(c.logits_soft_cap, 30.5f);
  EXPECT_EQ(c.alibi_slopes.form, HeadValues::Form::geometric);
  EXPECT_EQ(c.sinks.form, HeadValues::Form::range);
  EXPECT_EQ(c.window_start(0), 900);
}

TEST(VariantIds, HeadValuesResolve) {
  // The ALiBi paper's slopes for 8 heads: 1/2, 1/4, ..., 1/256.
  HeadValues geo;
  geo.form = HeadValues::Form::geometric;
  const std::vector<float> s = geo.resolve(8);
  ASSERT_EQ(s.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(s[h], std::ldexp(1.0f, -(h + 1))) << h;
  const std::vector<float> r = HeadValues::parse("-2~2").resolve(5);
  EXPECT_EQ(r, (std::vector<float>{-2, -1, 0, 1, 2}));
  EXPECT_EQ(HeadValues::parse("0.5").resolve(3), (std::vector<float>{0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(HeadValues::parse("dominant").resolve(2), (std::vector<float>{1e4f, 1e4f}));
  EXPECT_TRUE(HeadValues{}.resolve(4).empty());
}

/// The CaseError field of parsing `id`, or "" when it parses.
std::string error_field(const std::string& id) {
  try {
    parse_case_id(id);
  } catch (const CaseError& e) {
    return e.field;
  }
  return "";
}

TEST(VariantIds, BadValuesNameTheField) {
  const std::string base = "h8/2 d64 bs16 bf16 ctx1000 nhd seed7 ";
  EXPECT_EQ(error_field(base + "win=0"), "sliding_window");
  EXPECT_EQ(error_field(base + "win=-3"), "sliding_window");
  EXPECT_EQ(error_field(base + "win=abc"), "sliding_window");
  EXPECT_EQ(error_field(base + "cap=0"), "logits_soft_cap");
  EXPECT_EQ(error_field(base + "cap=-1"), "logits_soft_cap");
  EXPECT_EQ(error_field(base + "cap=inf"), "logits_soft_cap");
  EXPECT_EQ(error_field(base + "cap=nan"), "logits_soft_cap");
  EXPECT_EQ(error_field(base + "alibi=-0.5"), "alibi_slopes");
  EXPECT_EQ(error_field(base + "alibi=1~2"), "alibi_slopes");
  EXPECT_EQ(error_field(base + "alibi=0.5,0.25"), "alibi_slopes");  // 2 values for 8 heads
  EXPECT_EQ(error_field(base + "sinks=geo"), "sinks");
  EXPECT_EQ(error_field(base + "sinks=1,x"), "sinks");
  EXPECT_EQ(error_field(base + "win=4 win=8"), "sliding_window");
  EXPECT_EQ(error_field(base + "sinks=dominant dist=extreme"), "sinks");
  EXPECT_EQ(error_field(base + "sinks=dominant dist=extreme cap=50"), "");
  Case c;
  c.logits_soft_cap = 0.0f;
  try {
    c.validate();
    ADD_FAILURE() << "cap 0 accepted";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.field, "logits_soft_cap");
    EXPECT_NE(std::string(e.what()).find("> 0"), std::string::npos) << e.what();
  }
}

TEST(VariantSuites, VariantsKeyIsAnAxis) {
  const std::string text = R"(name = "v"
description = "d"
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
seq_lens = [1000]
variants = ["none", "win=128", "cap=50 alibi=geo sinks=-1~1"]
faults = ["clean", "V:nan@tail"]
)";
  const Suite s = parse_suite(text, "v.toml");
  ASSERT_EQ(s.cells.size(), 6u);
  EXPECT_FALSE(s.cells[0].cell.c.has_variant());
  EXPECT_EQ(s.cells[2].cell.c.sliding_window, 128);
  EXPECT_EQ(s.cells[4].cell.id().find("cap=50 alibi=geo sinks=-1~1") != std::string::npos, true)
      << s.cells[4].cell.id();
}

/// The SuiteError field of parsing a one-group suite with `variants = [ITEM]`, or "".
std::string suite_error_field(const std::string& item) {
  const std::string text = "name = \"v\"\ndescription = \"d\"\n[[cells]]\nheads = \"8/2\"\nhead_sizes = 64\n"
                           "block_sizes = 16\nseq_lens = [1000]\nvariants = [\"" + item + "\"]\n";
  try {
    parse_suite(text, "v.toml");
  } catch (const SuiteError& e) {
    EXPECT_EQ(e.line, 8) << e.what();
    return e.field;
  }
  return "";
}

TEST(VariantSuites, BadItemsNameTheField) {
  EXPECT_EQ(suite_error_field("window=3"), "cells.variants");
  EXPECT_EQ(suite_error_field("win=3 win=4"), "cells.variants");
  EXPECT_EQ(suite_error_field("win=x"), "cells.sliding_window");
  EXPECT_EQ(suite_error_field("cap=0"), "cells.logits_soft_cap");
  EXPECT_EQ(suite_error_field("alibi=1,2,3"), "cells.alibi_slopes");
  EXPECT_EQ(suite_error_field("win=3"), "");
  // Several query tokens: 1 to 8, at most seq_len (1000 here), one value or one per sequence.
  EXPECT_EQ(suite_error_field("qlen=0"), "cells.query_lens");
  EXPECT_EQ(suite_error_field("qlen=9"), "cells.query_lens");
  EXPECT_EQ(suite_error_field("qlen=x"), "cells.query_lens");
  EXPECT_EQ(suite_error_field("qlen=2,2"), "cells.query_lens");  // 2 values for 1 sequence
  EXPECT_EQ(suite_error_field("qlen=8 win=3"), "");
}

// ---- Several query tokens per sequence (query_lens, id token qlen=) ----

Backend& cpu_backend() {
  static const std::unique_ptr<Backend> b = make_cpu_backend();
  return *b;
}


TEST(QueryLen, IdsRoundTripAndPlainDecodeKeepsItsId) {
  for (const char* id : {"h8/2 d64 bs16 bf16 ctx1000,37 nhd seed7 qlen=4",
                         "h8/2 d64 bs16 bf16 ctx1000,37,9 nhd seed7 qlen=1,8,2",
                         "h8/2 d64 bs16 bf16 ctx4090 nhd seed7 win=128 alibi=geo qlen=8"}) {
    const Case c = parse_case_id(id);
    EXPECT_TRUE(c.has_variant()) << id;
    EXPECT_EQ(c.id(), id);
    EXPECT_EQ(case_variants(c) & PACHECK_VARIANT_MULTI_QUERY, PACHECK_VARIANT_MULTI_QUERY) << id;
  }
  const Case c = parse_case_id("h8/2 d64 bs16 bf16 ctx1000,37,9 nhd seed7 qlen=1,8,2");
  EXPECT_EQ(c.max_query_len(), 8);
  EXPECT_EQ(c.num_query_tokens(), 11);
  EXPECT_EQ(c.query_start(0), 0);
  EXPECT_EQ(c.query_start(1), 1);
  EXPECT_EQ(c.query_start(2), 9);
  EXPECT_EQ(c.query_start(3), 11);
  EXPECT_EQ(c.query_pos(1, 0), 29);  // 37 - 8
  EXPECT_EQ(c.query_pos(1, 7), 36);
  // A list of ones is plain decode, with plain decode's id.
  const Case ones = parse_case_id("h8/2 d64 bs16 bf16 ctx1000,37 nhd seed7 qlen=1");
  EXPECT_FALSE(ones.has_variant());
  EXPECT_EQ(ones.id(), "h8/2 d64 bs16 bf16 ctx1000,37 nhd seed7");
  EXPECT_EQ(ones.num_query_tokens(), 2);
  // The window's first key is the first query row's: keys from there on are seen by some row.
  EXPECT_EQ(parse_case_id("h8/2 d64 bs16 bf16 ctx1000 nhd seed7 win=100 qlen=4").window_start(0), 897);
}

TEST(QueryLen, BadValuesNameTheField) {
  for (const char* id : {"h8/2 d64 bs16 bf16 ctx1000 nhd seed7 qlen=0", "h8/2 d64 bs16 bf16 ctx1000 nhd seed7 qlen=9",
                         "h8/2 d64 bs16 bf16 ctx3 nhd seed7 qlen=4", "h8/2 d64 bs16 bf16 ctx100,3 nhd seed7 qlen=2,4",
                         "h8/2 d64 bs16 bf16 ctx100,30 nhd seed7 qlen=2,2,2", "h8/2 d64 bs16 bf16 ctx100 nhd seed7 qlen=",
                         "h8/2 d64 bs16 bf16 ctx100 nhd seed7 qlen=2,", "h8/2 d64 bs16 bf16 ctx100 nhd seed7 qlen=2 qlen=2"}) {
    try {
      parse_case_id(id);
      ADD_FAILURE() << id << " was accepted";
    } catch (const CaseError& e) {
      EXPECT_EQ(e.field, "query_lens") << id << ": " << e.what();
    }
  }
  Case c = parse_case_id("h8/2 d64 bs16 bf16 ctx3 nhd seed7");
  c.query_lens = {4};
  try {
    c.validate();
    ADD_FAILURE() << "query_len 4 > seq_len 3 was accepted";
  } catch (const CaseError& e) {
    EXPECT_NE(std::string(e.what()).find("more than its seq_len 3"), std::string::npos) << e.what();
  }
}

TEST(QueryLen, SuiteItemsCarryIt) {
  const std::string text = R"(name = "v"
description = "d"
[[cells]]
heads = "8/2"
head_sizes = 64
block_sizes = 16
seq_lens = [[1000, 37]]
variants = ["qlen=4", "qlen=8 win=100"]
faults = ["clean"]
)";
  const Suite s = parse_suite(text, "v.toml");
  ASSERT_EQ(s.cells.size(), 2u);
  EXPECT_EQ(s.cells[0].cell.c.num_query_tokens(), 8);
  EXPECT_EQ(s.cells[1].cell.c.max_query_len(), 8);
  EXPECT_EQ(s.cells[1].cell.c.sliding_window, 100);
}

TEST(QueryLen, QueryRowsAndTheLastRowIsTheDecodeQuery) {
  const Case c = parse_case_id("h8/2 d64 bs16 f32 ctx300,37 nhd seed3 qlen=4,2");
  const Case d = parse_case_id("h8/2 d64 bs16 f32 ctx300,37 nhd seed3");
  const PrePaging p = generate(c), pd = generate(d);
  const std::size_t HD = 8 * 64;
  ASSERT_EQ(p.q.size(), 6 * HD);
  // Rows 3 (sequence 0's last) and 5 (sequence 1's last) are the one-token case's rows 0 and 1, and the
  // oracle's outputs there are the plain decode outputs bitwise (same q, same keys).
  EXPECT_TRUE(std::equal(pd.q.begin(), pd.q.begin() + HD, p.q.begin() + 3 * HD));
  EXPECT_TRUE(std::equal(pd.q.begin() + HD, pd.q.end(), p.q.begin() + 5 * HD));
  EXPECT_FALSE(std::equal(p.q.begin(), p.q.begin() + HD, p.q.begin() + HD));  // rows differ
  for (Precision pr : {Precision::f32, Precision::f64}) {
    const OracleResult o = oracle(c, p, pr), od = oracle(d, pd, pr);
    ASSERT_EQ(o.out.size(), 6 * HD);
    EXPECT_TRUE(std::equal(od.out.begin(), od.out.begin() + HD, o.out.begin() + 3 * HD));
    EXPECT_TRUE(std::equal(od.out.begin() + HD, od.out.end(), o.out.begin() + 5 * HD));
  }
}

// Hand-computed: with query_len = seq_len every key is also a query token. Row 0 sees key 0 alone, so its
// output is V_0 exactly; row 1 sees keys 0 and 1: out = (e^s0 V0 + e^s1 V1) / (e^s0 + e^s1) with
// s_j = scale q1.k_j. A window of 1 makes every row its own token's V; ALiBi slope a adds a (j - p).
TEST(QueryLen, HandComputedTinyCases) {
  const Case c = parse_case_id("h1/1 d4 bs2 f32 ctx3 nhd seed11 qlen=3");
  const PrePaging p = generate(c);
  const auto dot = [&](int row, int j) {
    double x = 0;
    for (int d = 0; d < 4; ++d) x += static_cast<double>(p.q[row * 4 + d]) * p.k[0][j * 4 + d];
    return x * 0.5;  // scale 1/sqrt(4)
  };
  for (Precision pr : {Precision::f32, Precision::f64}) {
    const OracleResult o = oracle(c, p, pr);
    for (int d = 0; d < 4; ++d) EXPECT_EQ(o.out[d], p.v[0][d]) << "row 0 sees key 0 only";
    const double s0 = dot(1, 0), s1 = dot(1, 1), m = std::max(s0, s1);
    const double w0 = std::exp(s0 - m), w1 = std::exp(s1 - m);
    for (int d = 0; d < 4; ++d)
      EXPECT_NEAR(o.out[4 + d], (w0 * p.v[0][d] + w1 * p.v[0][4 + d]) / (w0 + w1), 1e-6) << d;
    EXPECT_NEAR(o.lse[1], m + std::log(w0 + w1), 1e-6);
  }
  Case win1 = c;
  win1.sliding_window = 1;
  const OracleResult ow = oracle(win1, p, Precision::f64);
  for (int r = 0; r < 3; ++r)
    for (int d = 0; d < 4; ++d) EXPECT_EQ(ow.out[r * 4 + d], p.v[0][r * 4 + d]) << "row " << r;
  // ALiBi slope 0.5 on row 1 (position 1): key 0 gets -0.5, key 1 gets 0.
  Case al = c;
  al.alibi_slopes = HeadValues::parse("0.5");
  const OracleResult oa = oracle(al, p, Precision::f64);
  const double a0 = dot(1, 0) - 0.5, a1 = dot(1, 1), am = std::max(a0, a1);
  const double v0 = std::exp(a0 - am), v1 = std::exp(a1 - am);
  for (int d = 0; d < 4; ++d) EXPECT_NEAR(oa.out[4 + d], (v0 * p.v[0][d] + v1 * p.v[0][4 + d]) / (v0 + v1), 1e-12);
  // The emulation has the same rows: row 0 is V_0 rounded to the output dtype (f32: exactly).
  const std::vector<double> em = emulate_low_precision(c, p);
  ASSERT_EQ(em.size(), 12u);
  for (int d = 0; d < 4; ++d) EXPECT_EQ(em[d], p.v[0][d]);
}

/// A kernel that ignores query_start_loc and writes one row per sequence, as a decode kernel does: the query
/// rows past num_seqs stay unwritten.
class IgnoresQueryRows final : public Kernel {
 public:
  std::string name() const override { return "test.ignores_query_rows"; }
  std::string description() const override { return "cpu.reference called as plain decode"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
  unsigned variants() const override { return PACHECK_VARIANT_KNOWN; }
  void run(const pacheck_kernel_args& a) const override {
    pacheck_kernel_args b = a;
    b.max_query_len = 1;
    b.num_query_tokens = a.num_seqs;
    b.query_start_loc = b.query_start_loc_host = nullptr;
    Registry::global().find("cpu.reference")->run(b);
  }
};

// The output buffer, its fill pattern and guards cover every query row: rows a kernel leaves alone are
// `unwritten`, and the guard after the output sits past the last query row (a write there is oob_write).
TEST(QueryLen, EveryOutputRowIsGuardedAndChecked) {
  const Case c = parse_case_id("h4/1 d32 bs16 bf16 ctx40,37 nhd seed7 qlen=4,2");
  const CaseData data = prepare_case(c, RunOptions{});
  const IgnoresQueryRows k;
  const RawRun r = run_kernel_once(k, cpu_backend(), data, data.cache);
  EXPECT_TRUE(r.guard_ok) << r.guard_detail;
  EXPECT_EQ(r.out.size(), 6u * 4 * 32);
  EXPECT_EQ(r.unwritten, 4 * 4 * 32);  // rows 2..5 of 6
  EXPECT_EQ(r.first_unwritten, 2 * 4 * 32);
  const CellResult res = judge(Cell{c, {}}, k, data.ref, data.emulation_rel_linf, r, nullptr, Tolerance{});
  EXPECT_EQ(res.verdict, Verdict::unwritten) << res.detail;
  EXPECT_NE(res.detail.find("seq 0 query token 2 at position 38"), std::string::npos) << res.detail;
  const RawRun honest = run_kernel_once(*Registry::global().find("cpu.reference"), cpu_backend(), data, data.cache);
  EXPECT_EQ(honest.unwritten, 0);
}

TEST(QueryLen, ArgsAndDecline) {
  const Case c = parse_case_id("h8/2 d64 bs16 bf16 ctx1000,37,9 nhd seed7 qlen=1,8,2");
  const PagedCache pc = page(c, generate(c));
  ASSERT_EQ(pc.query_start_loc, (std::vector<std::int32_t>{0, 1, 9, 11}));
  const std::vector<std::int32_t> dev{0, 1, 9, 11};
  const pacheck_kernel_args a = make_args(c, pc, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                          nullptr, nullptr, nullptr, dev.data());
  EXPECT_EQ(a.max_query_len, 8);
  EXPECT_EQ(a.num_query_tokens, 11);
  EXPECT_EQ(a.query_start_loc, dev.data());
  EXPECT_EQ(a.query_start_loc_host, pc.query_start_loc.data());
  EXPECT_THROW(make_args(c, pc, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), std::invalid_argument);
  const Case plain = parse_case_id("h8/2 d64 bs16 bf16 ctx1000,37 nhd seed7");
  const pacheck_kernel_args b = make_args(plain, page(plain, generate(plain)), nullptr, nullptr, nullptr, nullptr,
                                          nullptr, nullptr);
  EXPECT_EQ(b.max_query_len, 1);
  EXPECT_EQ(b.num_query_tokens, 2);
  EXPECT_EQ(b.query_start_loc, nullptr);
  EXPECT_EQ(b.query_start_loc_host, nullptr);
  const auto no = variant_decline(c, PACHECK_VARIANT_KNOWN & ~PACHECK_VARIANT_MULTI_QUERY, "k");
  ASSERT_TRUE(no);
  EXPECT_EQ(no->reason.rfind("query_len 8: k", 0), 0u) << no->reason;
  EXPECT_FALSE(variant_decline(c, PACHECK_VARIANT_MULTI_QUERY, "k"));
}

// ---- The oracle ----

/// out and lse of every (s, h) from the ABI's formula, every step in double: s = scale q.k, cap, ALiBi,
/// window mask, sink in the denominator.
struct Naive {
  std::vector<double> out, lse;
};
Naive naive(const Case& c, const PrePaging& p) {
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, R = H / G;
  const double scale = c.effective_scale();
  const std::vector<float> slopes = c.alibi_slopes.resolve(H), sinks = c.sinks.resolve(H);
  Naive r;
  r.out.assign(static_cast<std::size_t>(c.num_query_tokens()) * H * D, 0.0);
  r.lse.assign(static_cast<std::size_t>(c.num_query_tokens()) * H, 0.0);
  // Query row i of sequence s (row index row = query_start(s) + i) sits at pos = seq_len - query_len + i
  // and sees keys j <= pos (causal): keys past it are masked like those outside the window.
  for (int s = 0; s < c.num_seqs(); ++s)
   for (int i = 0; i < c.query_len(s); ++i) {
    const int L = c.seq_lens[s], pos = L - c.query_len(s) + i, row = c.query_start(s) + i;
    for (int h = 0; h < H; ++h) {
      const int g = h / R;
      std::vector<double> w(L, 0.0);
      double mx = sinks.empty() ? -INFINITY : sinks[h];
      for (int j = 0; j < L; ++j) {
        if (j > pos || (c.sliding_window > 0 && pos - j >= c.sliding_window)) {
          w[j] = -INFINITY;
          continue;
        }
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += static_cast<double>(p.q[(static_cast<std::size_t>(row) * H + h) * D + d]) *
                 static_cast<double>(p.k[s][(static_cast<std::size_t>(j) * G + g) * D + d]);
        double x = scale * dot;
        if (c.logits_soft_cap) x = *c.logits_soft_cap * std::tanh(x / *c.logits_soft_cap);
        if (!slopes.empty()) x += slopes[h] * static_cast<double>(j - pos);
        mx = std::max(mx, w[j] = x);
      }
      double sum = sinks.empty() ? 0.0 : std::exp(sinks[h] - mx);
      for (double& x : w) sum += (x = std::exp(x - mx));
      for (int d = 0; d < D; ++d) {
        double acc = 0;
        for (int j = 0; j < L; ++j) acc += w[j] * p.v[s][(static_cast<std::size_t>(j) * G + g) * D + d];
        r.out[(static_cast<std::size_t>(row) * H + h) * D + d] = acc / sum;
      }
      r.lse[static_cast<std::size_t>(row) * H + h] = mx + std::log(sum);
    }
   }
  return r;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(VariantOracle, MatchesNaiveFormula) {
  for (const char* id : {"h8/2 d64 bs16 f32 ctx300,37 nhd seed3 win=100", "h8/2 d64 bs16 f32 ctx300,37 nhd seed3 cap=5",
                         "h8/2 d64 bs16 f32 ctx300,37 nhd seed3 alibi=geo",
                         "h8/2 d64 bs16 f32 ctx300,37 nhd seed3 sinks=-2~2",
                         "h8/2 d64 bs16 f32 ctx300,37 nhd seed3 win=100 cap=5 alibi=geo sinks=-1~1",
                         "h4/4 d64 bs16 f32 ctx300 nhd seed3 dist=extreme cap=50 alibi=0.01",
                         "h8/2 d64 bs16 f32 ctx300,37 nhd seed3 qlen=4",
                         "h8/2 d64 bs16 f32 ctx300,37,8 nhd seed3 qlen=8,1,3",
                         "h8/2 d64 bs16 f32 ctx300,37 nhd seed3 win=5 alibi=geo qlen=8",
                         "h8/2 d64 bs16 f32 ctx300,37 nhd seed3 win=100 cap=5 alibi=geo sinks=-1~1 qlen=3"}) {
    SCOPED_TRACE(id);
    const Case c = parse_case_id(id);
    const PrePaging p = generate(c);
    const Naive n = naive(c, p);
    const OracleResult o64 = oracle(c, p, Precision::f64), o32 = oracle(c, p, Precision::f32);
    // |V| <= ~4 for normal values, ~1e35 for extreme: compare relative to the largest |out|.
    double scale = 0;
    for (double x : n.out) scale = std::max(scale, std::fabs(x));
    EXPECT_LE(max_abs_diff(o64.out, n.out), 1e-12 * scale);
    EXPECT_LE(max_abs_diff(o32.out, n.out), 1e-4 * scale);
    for (std::size_t i = 0; i < n.lse.size(); ++i) {
      EXPECT_NEAR(o64.lse[i], n.lse[i], 1e-9 * (1 + std::fabs(n.lse[i])));
      EXPECT_NEAR(o32.lse[i], n.lse[i], 1e-4 * (1 + std::fabs(n.lse[i])));
    }
  }
}

TEST(VariantOracle, WindowOfOneIsTheLastTokensV) {
  const Case c = parse_case_id("h8/2 d64 bs16 bf16 ctx100,37 nhd seed5 win=1");
  const PrePaging p = generate(c);
  for (Precision pr : {Precision::f32, Precision::f64}) {
    const OracleResult o = oracle(c, p, pr);
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < 8; ++h)
        for (int d = 0; d < 64; ++d)
          ASSERT_EQ(o.out[(static_cast<std::size_t>(s) * 8 + h) * 64 + d],
                    static_cast<double>(p.v[s][(static_cast<std::size_t>(c.seq_lens[s] - 1) * 2 + h / 4) * 64 + d]));
  }
}

TEST(VariantOracle, WindowAsLongAsTheSequenceIsNoWindowBitwise) {
  Case plain = parse_case_id("h8/2 d64 bs16 bf16 ctx100,37 nhd seed5");
  Case wide = plain;
  wide.sliding_window = 100;
  const PrePaging p = generate(plain);
  for (Precision pr : {Precision::f32, Precision::f64}) {
    EXPECT_EQ(oracle(plain, p, pr).out, oracle(wide, p, pr).out);
    EXPECT_EQ(oracle(plain, p, pr).lse, oracle(wide, p, pr).lse);
  }
  EXPECT_EQ(emulate_low_precision(plain, p), emulate_low_precision(wide, p));
}

TEST(VariantOracle, DominantSinksGiveZero) {
  const Case c = parse_case_id("h8/2 d64 bs16 bf16 ctx1000,37 nhd seed5 sinks=dominant");
  const PrePaging p = generate(c);
  for (Precision pr : {Precision::f32, Precision::f64}) {
    const OracleResult o = oracle(c, p, pr);
    for (double x : o.out) ASSERT_EQ(x, 0.0);
    for (double l : o.lse) ASSERT_DOUBLE_EQ(l, 1e4);
  }
  for (double x : emulate_low_precision(c, p)) ASSERT_EQ(x, 0.0);
}

TEST(VariantOracle, FiniteSinkScalesThePlainOutput) {
  Case plain = parse_case_id("h8/2 d64 bs16 f32 ctx300,37 nhd seed5");
  Case sunk = plain;
  sunk.sinks = HeadValues::parse("-2~3");
  const PrePaging p = generate(plain);
  const std::vector<float> sink = sunk.sinks.resolve(8);
  const OracleResult a = oracle(plain, p, Precision::f64), b = oracle(sunk, p, Precision::f64);
  for (int s = 0; s < 2; ++s)
    for (int h = 0; h < 8; ++h) {
      const std::size_t row = static_cast<std::size_t>(s) * 8 + h;
      const double lse = a.lse[row], factor = 1.0 / (1.0 + std::exp(sink[h] - lse));
      EXPECT_NEAR(b.lse[row], std::max(lse, double{sink[h]}) + std::log1p(std::exp(-std::fabs(lse - sink[h]))), 1e-12);
      for (int d = 0; d < 64; ++d) EXPECT_NEAR(b.out[row * 64 + d], a.out[row * 64 + d] * factor, 1e-12);
    }
}

TEST(VariantOracle, SoftCapBoundsLogitsAndAHugeCapIsNoCap) {
  // extreme logits (~1e4) under cap 50: every logit in (-50, 50), so lse < 50 + log(L).
  const Case c = parse_case_id("h4/2 d64 bs16 bf16 ctx500 nhd seed5 dist=extreme cap=50");
  const PrePaging p = generate(c);
  for (double l : oracle(c, p, Precision::f64).lse) EXPECT_LT(l, 50.0 + std::log(500.0));
  Case plain = parse_case_id("h8/2 d64 bs16 f32 ctx300 nhd seed5");
  Case huge = plain;
  huge.logits_soft_cap = 1e6f;  // tanh(x / c) c = x (1 - x^2 / 3c^2 ...): relative change ~1e-12 at |x| ~ 5
  const PrePaging q = generate(plain);
  EXPECT_LE(max_abs_diff(oracle(plain, q, Precision::f64).out, oracle(huge, q, Precision::f64).out), 1e-9);
}

TEST(VariantOracle, AlibiOverEqualKeysGivesGeometricWeights) {
  // Every key equal: the logits differ only by slope (j - p), so token j's weight is r^(p - j) / sum, r =
  // e^-slope, and the output is sum_j w_j V_j.
  Case c = parse_case_id("h2/1 d64 bs16 f32 ctx40 nhd seed5 alibi=0.5,0.125");
  PrePaging p = generate(c);
  const int L = 40, D = 64;
  for (int j = 1; j < L; ++j) std::copy(p.k[0].begin(), p.k[0].begin() + D, p.k[0].begin() + j * D);
  const OracleResult o = oracle(c, p, Precision::f64);
  for (int h = 0; h < 2; ++h) {
    const double slope = h == 0 ? 0.5 : 0.125;
    double z = 0;
    for (int j = 0; j < L; ++j) z += std::exp(-slope * (L - 1 - j));
    for (int d = 0; d < D; ++d) {
      double want = 0;
      for (int j = 0; j < L; ++j) want += std::exp(-slope * (L - 1 - j)) / z * p.v[0][static_cast<std::size_t>(j) * D + d];
      EXPECT_NEAR(o.out[static_cast<std::size_t>(h) * D + d], want, 1e-12);
    }
  }
}

// ---- The `window` fault region ----

TEST(VariantFaults, WindowRegionPoisonsTheWrittenKeysBeforeTheEdge) {
  const Case c = parse_case_id("h4/2 d32 bs16 bf16 ctx100,37,300 nhd seed7 win=64");
  const PagedCache clean = page(c, generate(c));
  EXPECT_EQ(clean.window_first, (std::vector<std::int32_t>{36, 0, 236}));
  PagedCache pc = clean;
  EXPECT_EQ(inject(pc, FaultSpec{Poison::nan, Target::v, Region::window}), (36 + 236) * 2 * 32);
  // Exactly the V elements of keys 0..35 of sequence 0 and 0..235 of sequence 2 changed, K untouched.
  EXPECT_EQ(pc.key_cache, clean.key_cache);
  const int B = 16;
  for (int s = 0; s < 3; ++s)
    for (int t = 0; t < c.seq_lens[s]; ++t) {
      const int block = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + t / B];
      const std::int64_t at = pc.value_offset(block, 1, t % B, 5) * 2;
      const bool poisoned = t < pc.window_first[s];
      EXPECT_EQ(std::memcmp(pc.value_cache.data() + at, clean.value_cache.data() + at, 2) != 0, poisoned) << s << " " << t;
    }
  // No window, nothing to poison; a cell id or suite that asks for it is refused.
  Case plain = c;
  plain.sliding_window = 0;
  PagedCache none = page(plain, generate(plain));
  EXPECT_EQ(inject(none, FaultSpec{Poison::nan, Target::kv, Region::window}), 0);
  EXPECT_THROW(parse_cell_id("h4/2 d32 bs16 bf16 ctx100 nhd seed7 V:nan@window"), std::invalid_argument);
  EXPECT_NO_THROW(parse_cell_id("h4/2 d32 bs16 bf16 ctx100 nhd seed7 win=8 V:nan@window"));
}

TEST(VariantFaults, VectorVControlsReadTheWindowEdgesBlock) {
  // cpu.vector_v reads the edge's block whole: caught when the edge falls inside a block, not on one.
  EXPECT_TRUE(poisons_v_window(parse_cell_id("h4/2 d32 bs16 bf16 ctx100 nhd seed7 win=64 V:nan@window"), false));
  EXPECT_FALSE(poisons_v_window(parse_cell_id("h4/2 d32 bs16 bf16 ctx96 nhd seed7 win=64 V:nan@window"), false));
  EXPECT_TRUE(poisons_v_window(parse_cell_id("h4/2 d32 bs16 bf16 ctx96 nhd seed7 win=64 V:nan@window"), true));
  EXPECT_FALSE(poisons_v_window(parse_cell_id("h4/2 d32 bs16 bf16 ctx100 nhd seed7 win=64 K:nan@window"), true));
  EXPECT_FALSE(poisons_v_window(parse_cell_id("h4/2 d32 bs16 bf16 ctx100 nhd seed7 win=64 V:1e4@window"), true));
}

// ---- Every registered CPU kernel on variant cells ----

/// Variant cases: each variant alone and all together, windows whose edge falls inside a block (100) and
/// on a block edge (128) at the PR #47188 length, ALiBi, sinks (finite and dominant), soft caps on normal
/// values and on extreme ones (where cpu.softcap_ratio's ratio overflows).
std::vector<std::string> variant_ids() {
  return {"h8/2 d64 bs16 bf16 ctx4090,37 LAYOUT seed7 win=128",
          "h8/2 d64 bs16 bf16 ctx1000,37 LAYOUT seed7 win=100",
          "h8/2 d64 bs16 f32 ctx300 LAYOUT seed7 win=1",
          "h8/2 d64 bs16 bf16 ctx1000,37 LAYOUT seed7 cap=30",
          "h8/2 d64 bs16 bf16 ctx1030,33 LAYOUT seed7 dist=extreme cap=50",
          "h8/8 d64 bs16 bf16 ctx1030,33 LAYOUT seed7 alibi=geo",
          "h8/2 d64 bs16 f16 ctx1000,37 LAYOUT seed7 sinks=-2~2",
          "h8/2 d64 bs16 bf16 ctx1000,37 LAYOUT seed7 sinks=dominant",
          "h8/2 d64 bs16 f32 ctx1000,37 LAYOUT seed7 win=100 cap=50 alibi=geo sinks=-1~1",
          // Several query tokens (issue 19): across a block edge (1030 - 8 + 1 = 1023 .. 1029 at bs16: the
          // rows straddle block 63/64), aligned (1024), per sequence, with a window and GQA.
          "h8/2 d64 bs16 bf16 ctx1030,37 LAYOUT seed7 qlen=8",
          "h8/2 d64 bs16 bf16 ctx1024,5 LAYOUT seed7 qlen=4,2",
          "h8/2 d64 bs16 bf16 ctx1000,37 LAYOUT seed7 win=100 qlen=3",
          "h8/2 d64 bs16 f32 ctx300,37 LAYOUT seed7 win=100 cap=50 alibi=geo sinks=-1~1 qlen=5"};
}

class VariantKernel : public ::testing::TestWithParam<std::string> {};

TEST_P(VariantKernel, VariantCellsAgreeOrAreCaughtExactly) {
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  kernel_checks::Count count;
  for (std::string id : variant_ids()) {
    id.replace(id.find("LAYOUT"), 6, layout_name(k->layouts().front()));
    const Case c = parse_case_id(id);
    if (!k->supports(c).ok) continue;
    SCOPED_TRACE(id);
    const CaseData data = prepare_case(c, RunOptions{});
    kernel_checks::expect_poison_sweep(*k, cpu_backend(), data, {Poison::nan, Poison::pinf}, &count);
    if (c.sliding_window == 0) continue;
    // The keys before the window's edge, poisoned: the output must stay bitwise the clean run's.
    const RawRun clean = run_kernel_once(*k, cpu_backend(), data, data.cache);
    for (Target t : {Target::k, Target::v, Target::kv})
      for (Poison p : {Poison::nan, Poison::pinf}) {
        const Cell cell{c, FaultSpec{p, t, Region::window}};
        PagedCache faulted = data.cache;
        inject(faulted, cell.fault);
        kernel_checks::expect_verdict(*k, cell, data, run_kernel_once(*k, cpu_backend(), data, faulted), &clean.bits,
                                      &count);
      }
  }
  kernel_checks::expect_ran(*k, count, "the variant cells");
  if (count.must_fail > 0 || k->name() == "cpu.softcap_ratio" || k->name() == "cpu.window_scratch" ||
      k->name() == "cpu.qlen_no_causal")
    kernel_checks::expect_control_caught(*k, count, "the variant cells");
}

// A window at least as long as every sequence masks nothing: every kernel's output is bitwise its output
// without the window (the kernels take the window's path, from key 0).
TEST_P(VariantKernel, WindowAsLongAsTheContextIsNoWindowBitwise) {
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  for (const char* id : {"h8/2 d64 bs16 bf16 ctx1000,37 LAYOUT seed7", "h4/4 d32 bs8 f32 ctx513 LAYOUT seed9 cap=20"}) {
    std::string s = id;
    s.replace(s.find("LAYOUT"), 6, layout_name(k->layouts().front()));
    const Case plain = parse_case_id(s);
    for (int w : {1000, 1001, 4096}) {
      Case wide = plain;
      wide.sliding_window = w;
      if (w < plain.max_seq_len()) continue;
      SCOPED_TRACE(wide.id());
      const CaseData a = prepare_case(plain, RunOptions{}), b = prepare_case(wide, RunOptions{});
      EXPECT_EQ(run_kernel_once(*k, cpu_backend(), a, a.cache).bits, run_kernel_once(*k, cpu_backend(), b, b.cache).bits);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, VariantKernel,
                         ::testing::ValuesIn(kernel_checks::registered("cpu", kernel_checks::Kinds::all)),
                         kernel_checks::kernel_param_name);

TEST(VariantKernels, CpuKernelsImplementEveryVariant) {
  for (const std::string& name : kernel_checks::registered("cpu", kernel_checks::Kinds::all))
    EXPECT_EQ(Registry::global().find(name)->variants(), PACHECK_VARIANT_KNOWN) << name;
}

TEST(VariantKernels, DeclineNamesTheField) {
  const Case c = parse_case_id("h8/2 d64 bs16 bf16 ctx1000 nhd seed7 win=128 cap=50");
  const auto no = variant_decline(c, PACHECK_VARIANT_SLIDING_WINDOW, "k");
  ASSERT_TRUE(no);
  EXPECT_FALSE(no->ok);
  EXPECT_EQ(no->reason.rfind("logits_soft_cap 50", 0), 0u) << no->reason;
  EXPECT_FALSE(variant_decline(c, PACHECK_VARIANT_SLIDING_WINDOW | PACHECK_VARIANT_SOFT_CAP, "k"));
  EXPECT_EQ(case_variants(c), PACHECK_VARIANT_SLIDING_WINDOW | PACHECK_VARIANT_SOFT_CAP);
}

}  // namespace
}  // namespace pacheck
