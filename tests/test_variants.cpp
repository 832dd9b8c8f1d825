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
  r.out.assign(static_cast<std::size_t>(c.num_seqs()) * H * D, 0.0);
  r.lse.assign(static_cast<std::size_t>(c.num_seqs()) * H, 0.0);
  for (int s = 0; s < c.num_seqs(); ++s) {
    const int L = c.seq_lens[s], pos = L - 1;
    for (int h = 0; h < H; ++h) {
      const int g = h / R;
      std::vector<double> w(L, 0.0);
      double mx = sinks.empty() ? -INFINITY : sinks[h];
      for (int j = 0; j < L; ++j) {
        if (c.sliding_window > 0 && pos - j >= c.sliding_window) {
          w[j] = -INFINITY;
          continue;
        }
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += static_cast<double>(p.q[(static_cast<std::size_t>(s) * H + h) * D + d]) *
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
        r.out[(static_cast<std::size_t>(s) * H + h) * D + d] = acc / sum;
      }
      r.lse[static_cast<std::size_t>(s) * H + h] = mx + std::log(sum);
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
                         "h4/4 d64 bs16 f32 ctx300 nhd seed3 dist=extreme cap=50 alibi=0.01"}) {
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

Backend& cpu_backend() {
  static const std::unique_ptr<Backend> b = make_cpu_backend();
  return *b;
}

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
          "h8/2 d64 bs16 f32 ctx1000,37 LAYOUT seed7 win=100 cap=50 alibi=geo sinks=-1~1"};
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
  if (count.must_fail > 0 || k->name() == "cpu.softcap_ratio" || k->name() == "cpu.window_scratch")
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

TEST(VariantKernels, CpuKernelsImplementEveryVariantButMultiQuery) {
  for (const std::string& name : kernel_checks::registered("cpu", kernel_checks::Kinds::all))
    EXPECT_EQ(Registry::global().find(name)->variants(), PACHECK_VARIANT_KNOWN & ~PACHECK_VARIANT_MULTI_QUERY) << name;
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
