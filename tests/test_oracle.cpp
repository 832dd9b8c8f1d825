// The oracle against a naive double-precision loop written straight from the definition.
#include <gtest/gtest.h>

#include <algorithm>
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

}  // namespace
}  // namespace pacheck
