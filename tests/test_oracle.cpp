// The oracle against a naive double-precision loop written straight from the definition.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <cmath>
#include <cstdint>
#include <vector>

#include "oracle/oracle.hpp"

namespace pacheck {
namespace {

struct Naive {
  std::vector<double> out, lse;
};

/// out[s,h,:] = sum_t softmax(scale * q[s,h,:] . K_s[t,g,:]) V_s[t,g,:], g = h / (num_heads /
/// num_kv_heads), every step in double, no max subtraction shortcuts beyond the textbook one.
Naive naive(const Case& c, const PrePaging& p) {
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, R = H / G;
  const double scale = c.effective_scale();
  Naive r;
  r.out.assign(static_cast<std::size_t>(c.num_seqs()) * H * D, 0.0);
  r.lse.assign(static_cast<std::size_t>(c.num_seqs()) * H, 0.0);
  for (int s = 0; s < c.num_seqs(); ++s) {
    const int L = c.seq_lens[s];
    for (int h = 0; h < H; ++h) {
      const int g = h / R;
      std::vector<double> logit(L);
      for (int t = 0; t < L; ++t) {
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += static_cast<double>(p.q[(static_cast<std::size_t>(s) * H + h) * D + d]) *
                 static_cast<double>(p.k[s][(static_cast<std::size_t>(t) * G + g) * D + d]);
        logit[t] = scale * dot;
      }
      const double mx = *std::max_element(logit.begin(), logit.end());
      double sum = 0;
      for (double& l : logit) sum += (l = std::exp(l - mx));
      for (int d = 0; d < D; ++d) {
        double acc = 0;
        for (int t = 0; t < L; ++t) acc += logit[t] * p.v[s][(static_cast<std::size_t>(t) * G + g) * D + d];
        r.out[(static_cast<std::size_t>(s) * H + h) * D + d] = acc / sum;
      }
      r.lse[static_cast<std::size_t>(s) * H + h] = mx + std::log(sum);
    }
  }
  return r;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

/// max |a - b| / max |b|: rel_linf, seed 000's scoring.
double rel_linf(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m / max_abs(b);
}

double max_lse_err(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]) / (1.0 + std::fabs(b[i])));
  return m;
}

constexpr double kF32Unit = 0x1p-24;  // fp32 unit roundoff

struct Shape {
  int ratio, head_size;
};

class OracleVsNaive : public ::testing::TestWithParam<Shape> {};

// GQA 1, 2, 4, 7 x head sizes 64, 80, 128, 256; lengths straddle the oracle's 128-token tile and
// include a single-token sequence.
TEST_P(OracleVsNaive, MatchesNaiveDoubleLoop) {
  const Shape sh = GetParam();
  const Case c{.num_heads = 2 * sh.ratio, .num_kv_heads = 2, .head_size = sh.head_size, .seq_lens = {1, 127, 129, 300},
               .seed = static_cast<std::uint64_t>(11 + sh.ratio * 1000 + sh.head_size)};
  const PrePaging p = generate(c);
  const Naive ref = naive(c, p);

  const OracleResult o64 = oracle(c, p, Precision::f64);
  EXPECT_EQ(o64.precision, Precision::f64);
  ASSERT_EQ(o64.out.size(), ref.out.size());
  ASSERT_EQ(o64.lse.size(), ref.lse.size());
  EXPECT_LE(rel_linf(o64.out, ref.out), 5e-15) << c.id();  // measured <= 5e-16
  EXPECT_LE(max_lse_err(o64.lse, ref.lse), 5e-15) << c.id();

  // fp32: the worst cell measured 1.9 u relative to max|ref|; the bound is 8 u (4.8e-7), i.e. 1/8000 of
  // bf16's and 1/1000 of f16's output rounding, the errors this oracle is used to judge. (An fp32
  // computation cannot be "far below fp32 rounding"; it is far below the kernels' rounding.)
  const OracleResult o32 = oracle(c, p);
  EXPECT_EQ(o32.precision, Precision::f32);
  EXPECT_LE(rel_linf(o32.out, ref.out), 8 * kF32Unit) << c.id();
  EXPECT_LE(max_lse_err(o32.lse, ref.lse), 8 * kF32Unit) << c.id();
}

INSTANTIATE_TEST_SUITE_P(GqaByHeadSize, OracleVsNaive,
                         ::testing::Values(Shape{1, 64}, Shape{1, 80}, Shape{1, 128}, Shape{1, 256},
                                           Shape{2, 64}, Shape{2, 80}, Shape{2, 128}, Shape{2, 256},
                                           Shape{4, 64}, Shape{4, 80}, Shape{4, 128}, Shape{4, 256},
                                           Shape{7, 64}, Shape{7, 80}, Shape{7, 128}, Shape{7, 256}),
                         [](const auto& info) {
                           return "gqa" + std::to_string(info.param.ratio) + "_d" +
                                  std::to_string(info.param.head_size);
                         });

TEST(Oracle, OddHeadSizeAndExplicitScale) {
  // head_size 3 (no full SIMD packet) and a non-default scale exercise the scalar tails.
  const Case c{.num_heads = 6, .num_kv_heads = 2, .head_size = 3, .seq_lens = {5, 200}, .scale = 0.37f};
  const PrePaging p = generate(c);
  const Naive ref = naive(c, p);
  EXPECT_LE(rel_linf(oracle(c, p, Precision::f64).out, ref.out), 5e-15);
  EXPECT_LE(rel_linf(oracle(c, p).out, ref.out), 8 * kF32Unit);
  EXPECT_LE(max_lse_err(oracle(c, p).lse, ref.lse), 8 * kF32Unit);
}

TEST(Oracle, QueryHeadReadsKvHeadByGqaRatio) {
  // V of KV head g is the constant g + 1, so every output element of query head h must be exactly
  // h / ratio + 1: a mapping by h % num_kv_heads (or any other) shows up as a wrong constant.
  const Case c{.num_heads = 12, .num_kv_heads = 3, .head_size = 16, .seq_lens = {9, 40}};
  PrePaging p = generate(c);
  for (int s = 0; s < c.num_seqs(); ++s)
    for (std::size_t i = 0; i < p.v[s].size(); ++i)
      p.v[s][i] = static_cast<float>((i / c.head_size) % c.num_kv_heads + 1);
  const OracleResult o = oracle(c, p);
  for (int s = 0; s < c.num_seqs(); ++s)
    for (int h = 0; h < c.num_heads; ++h)
      for (int d = 0; d < c.head_size; ++d) {
        const double want = h / c.gqa_ratio() + 1;
        ASSERT_NEAR(o.out[(static_cast<std::size_t>(s) * c.num_heads + h) * c.head_size + d], want, 4e-6 * want)
            << "s " << s << " h " << h << " d " << d;
      }
}

TEST(Oracle, SingleTokenOutputIsV) {
  // softmax over one token is exactly 1, so the output is V itself, bit for bit, in both precisions.
  const Case c{.num_heads = 8, .num_kv_heads = 2, .head_size = 64, .seq_lens = {1}};
  const PrePaging p = generate(c);
  for (Precision pr : {Precision::f32, Precision::f64}) {
    const OracleResult o = oracle(c, p, pr);
    for (int h = 0; h < c.num_heads; ++h)
      for (int d = 0; d < c.head_size; ++d)
        ASSERT_EQ(o.out[static_cast<std::size_t>(h) * c.head_size + d],
                  static_cast<double>(p.v[0][static_cast<std::size_t>(h / 4) * c.head_size + d]));
  }
}

TEST(Oracle, ExtremeDistributionStaysFiniteAndAccurate) {
  // Logits of +-1e4 and V near the largest finite value (overflow; extreme bounds V by FLT_MAX / seq_len):
  // without the max subtraction exp() overflows, and with unnormalised accumulation a few tied tokens
  // overflow fp32. The oracle normalises first, so both stay finite.
  for (Dist dist : {Dist::extreme, Dist::overflow})
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      const Case c{.num_heads = 8, .num_kv_heads = 2, .head_size = 128, .seq_lens = {1000, 33},
                   .q_dtype = dt, .kv_dtype = dt, .out_dtype = dt, .dist = dist};
      const PrePaging p = generate(c);
      const OracleResult o = oracle(c, p);
      const Naive ref = naive(c, p);
      for (double x : o.out) ASSERT_TRUE(std::isfinite(x)) << dtype_name(dt);
      for (double x : o.lse) ASSERT_TRUE(std::isfinite(x)) << dtype_name(dt);
      if (dist == Dist::overflow)
        EXPECT_GT(max_abs(o.out), 0.1 * dtype_max_finite(dt)) << "the cell should reach V's magnitude";
      EXPECT_LE(rel_linf(o.out, ref.out), 8 * kF32Unit) << dtype_name(dt);
      EXPECT_LE(max_lse_err(o.lse, ref.lse), 8 * kF32Unit) << dtype_name(dt);
    }
}

TEST(Oracle, RejectsTensorsOfAnotherShape) {
  const Case c{.num_heads = 4, .num_kv_heads = 2, .head_size = 16, .seq_lens = {10, 20}};
  PrePaging p = generate(c);
  PrePaging short_v = p;
  short_v.v[1].pop_back();
  EXPECT_THROW(oracle(c, short_v), std::invalid_argument);
  PrePaging one_seq = p;
  one_seq.k.pop_back();
  EXPECT_THROW(oracle(c, one_seq), std::invalid_argument);
  PrePaging long_q = p;
  long_q.q.push_back(0);
  EXPECT_THROW(oracle(c, long_q), std::invalid_argument);
  Case bad = c;
  bad.num_kv_heads = 3;
  EXPECT_THROW(oracle(bad, p), CaseError);
}

TEST(Emulation, RoundsProbabilitiesAndOutputToOutDtype) {
  Case c{.num_heads = 16, .num_kv_heads = 4, .head_size = 128, .seq_lens = {500, 77}};
  for (DType dt : {DType::bf16, DType::f16}) {
    c.out_dtype = dt;
    const PrePaging p = generate(c);
    const std::vector<double> ref = oracle(c, p).out;
    const std::vector<double> emu = emulate_low_precision(c, p);
    ASSERT_EQ(emu.size(), ref.size());
    for (double x : emu) ASSERT_EQ(static_cast<double>(round_to(static_cast<float>(x), dt)), x) << "not representable";
    // Output rounding (<= u) plus probability rounding (<= u): nonzero, and within 2u of the oracle.
    const double u = dt == DType::bf16 ? 0x1p-8 : 0x1p-11;
    const double err = rel_linf(emu, ref);
    EXPECT_GT(err, 0.25 * u) << dtype_name(dt);
    EXPECT_LE(err, 2 * u) << dtype_name(dt);
  }
  // f32 output: nothing is rounded but the accumulation order differs from the oracle's.
  c.out_dtype = DType::f32;
  const PrePaging p = generate(c);
  EXPECT_LE(rel_linf(emulate_low_precision(c, p), oracle(c, p).out), 8 * kF32Unit);
}


// ---- The oracle's instruction sets (OracleIsa): every path this CPU runs, against the double loop and
// against the baseline path, so a wrong AVX2 / AVX-512 kernel (a dropped tail, a wrong reduction, a
// mis-strided head) fails here on any machine that has it. ----

std::string isa_list(const std::vector<OracleIsa>& v) {
  std::string s;
  for (OracleIsa i : v) s += std::string(oracle_isa_name(i)) + " ";
  return s;
}

TEST(OracleIsa, EveryAvailablePathMatchesTheDoubleLoopAndBaseline) {
  const std::vector<OracleIsa> isas = available_oracle_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), OracleIsa::baseline);
  ::testing::Test::RecordProperty("oracle_isas", isa_list(isas));
  std::cout << "instruction sets tested: " << isa_list(isas) << "\n";
  // GQA 1, 3 (a block of 3), 4, 5 (4 + 1), 7 x head sizes 3 (no full packet), 64, 80 (one packet left
  // over at 16 lanes), 128, 136 (8 left over at 16 lanes); lengths 1, odd and tile-straddling.
  struct Sh {
    int ratio, head_size;
  };
  for (Sh sh : {Sh{1, 64}, Sh{3, 80}, Sh{4, 128}, Sh{5, 136}, Sh{7, 3}, Sh{2, 256}, Sh{4, 80}})
    for (Dist dist : {Dist::normal, Dist::peaked, Dist::extreme}) {
      const Case c{.num_heads = 2 * sh.ratio, .num_kv_heads = 2, .head_size = sh.head_size,
                   .seq_lens = {1, 2, 127, 300},
                   .seed = static_cast<std::uint64_t>(5 + sh.ratio * 100 + sh.head_size), .dist = dist};
      const PrePaging p = generate(c);
      const Naive ref = naive(c, p);
      const OracleResult base = oracle(c, p, Precision::f32, OracleIsa::baseline);
      const std::vector<double> base_emu = emulate_low_precision(c, p, OracleIsa::baseline);
      for (OracleIsa isa : isas) {
        const std::string what = std::string(oracle_isa_name(isa)) + " " + c.id();
        const OracleResult o64 = oracle(c, p, Precision::f64, isa);
        EXPECT_LE(rel_linf(o64.out, ref.out), 5e-15) << what;
        EXPECT_LE(max_lse_err(o64.lse, ref.lse), 5e-15) << what;
        const OracleResult o32 = oracle(c, p, Precision::f32, isa);
        EXPECT_LE(rel_linf(o32.out, ref.out), 8 * kF32Unit) << what;
        EXPECT_LE(max_lse_err(o32.lse, ref.lse), 8 * kF32Unit) << what;
        // Each within 8 u of the double loop, so within 16 u of each other.
        EXPECT_LE(rel_linf(o32.out, base.out), 16 * kF32Unit) << what;
        // The emulation rounds to bf16 (the case's out_dtype): paths may land on either side of a rounding
        // boundary, one bf16 ULP apart at most.
        EXPECT_LE(rel_linf(emulate_low_precision(c, p, isa), base_emu), 0x1p-7) << what;
      }
    }
}

TEST(OracleIsa, PathsDifferOnlyInRoundingNotInWhatTheyCompute) {
  // A planted slip in a path (a head read from the wrong KV head, a lost tail) would move the output by
  // O(1), not by rounding: V of KV head g is the constant g + 1, so every path must give h / ratio + 1.
  const Case c{.num_heads = 15, .num_kv_heads = 3, .head_size = 80, .seq_lens = {9, 300}};
  PrePaging p = generate(c);
  for (int s = 0; s < c.num_seqs(); ++s)
    for (std::size_t i = 0; i < p.v[s].size(); ++i)
      p.v[s][i] = static_cast<float>((i / c.head_size) % c.num_kv_heads + 1);
  for (OracleIsa isa : available_oracle_isas()) {
    const OracleResult o = oracle(c, p, Precision::f32, isa);
    for (int s = 0; s < c.num_seqs(); ++s)
      for (int h = 0; h < c.num_heads; ++h)
        for (int d = 0; d < c.head_size; ++d) {
          const double want = h / c.gqa_ratio() + 1;
          ASSERT_NEAR(o.out[(static_cast<std::size_t>(s) * c.num_heads + h) * c.head_size + d], want, 4e-6 * want)
              << oracle_isa_name(isa) << " s " << s << " h " << h << " d " << d;
        }
  }
}

TEST(OracleIsa, ResolvesTheEnvironmentVariable) {
  const std::vector<OracleIsa> isas = available_oracle_isas();
  EXPECT_EQ(resolve_oracle_isa(nullptr), isas.back()) << "unset: the widest available";
  EXPECT_EQ(resolve_oracle_isa(""), isas.back()) << "empty counts as unset";
  for (OracleIsa isa : isas) EXPECT_EQ(resolve_oracle_isa(std::string(oracle_isa_name(isa)).c_str()), isa);
  try {
    resolve_oracle_isa("sse9");
    ADD_FAILURE() << "an unknown name was accepted";
  } catch (const OracleIsaError& e) {
    EXPECT_NE(std::string(e.what()).find("PACHECK_ORACLE_ISA: 'sse9' is not an instruction set"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(resolve_oracle_isa("AVX2"), OracleIsaError) << "names are case-sensitive, as every table's";
  // A path this CPU cannot run is refused, never silently replaced; and oracle() refuses it as an argument.
  for (const OracleIsaInfo& r : oracle_isa_table())
    if (std::find(isas.begin(), isas.end(), r.value) == isas.end()) {
      EXPECT_THROW(resolve_oracle_isa(r.name), OracleIsaError) << r.name;
      const Case c{.num_heads = 4, .num_kv_heads = 2, .head_size = 16, .seq_lens = {10}};
      EXPECT_THROW(oracle(c, generate(c), Precision::f32, r.value), std::invalid_argument) << r.name;
    }
}

}  // namespace
}  // namespace pacheck
