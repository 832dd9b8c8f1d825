// Pre-paging tensors: deterministic, independent of generation order, rounded to their dtypes, and
// distributed as the Dist docs say.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "oracle/tensors.hpp"

namespace pacheck {
namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool same_bits(const PrePaging& a, const PrePaging& b) {
  if (!same_bits(a.q, b.q) || a.k.size() != b.k.size() || a.v.size() != b.v.size()) return false;
  for (std::size_t s = 0; s < a.k.size(); ++s)
    if (!same_bits(a.k[s], b.k[s]) || !same_bits(a.v[s], b.v[s])) return false;
  return true;
}

Case small_case(Dist d = Dist::normal) {
  Case c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_size = 64;
  c.seq_lens = {300, 77};
  c.dist = d;
  return c;
}

/// Scaled logits of query head h of sequence s against every token, in double.
std::vector<double> logits(const Case& c, const PrePaging& p, int s, int h) {
  const int G = c.num_kv_heads, D = c.head_size, g = h / c.gqa_ratio();
  std::vector<double> l(c.seq_lens[s]);
  for (int t = 0; t < c.seq_lens[s]; ++t) {
    double dot = 0;
    for (int d = 0; d < D; ++d)
      dot += static_cast<double>(p.q[(static_cast<std::size_t>(s) * c.num_heads + h) * D + d]) *
             p.k[s][(static_cast<std::size_t>(t) * G + g) * D + d];
    l[t] = c.effective_scale() * dot;
  }
  return l;
}

/// Softmax probabilities of a row of logits, sorted largest first.
std::vector<double> sorted_probs(std::vector<double> l) {
  const double mx = *std::max_element(l.begin(), l.end());
  double sum = 0;
  for (double& x : l) sum += (x = std::exp(x - mx));
  for (double& x : l) x /= sum;
  std::sort(l.rbegin(), l.rend());
  return l;
}

TEST(Tensors, ShapesFollowTheCase) {
  const Case c = small_case();
  const PrePaging p = generate(c);
  EXPECT_EQ(p.q.size(), 2u * 8 * 64);
  ASSERT_EQ(p.k.size(), 2u);
  ASSERT_EQ(p.v.size(), 2u);
  EXPECT_EQ(p.k[0].size(), 300u * 2 * 64);
  EXPECT_EQ(p.v[1].size(), 77u * 2 * 64);
  Case bad = c;
  bad.num_kv_heads = 3;
  EXPECT_THROW(generate(bad), CaseError);
}

TEST(Tensors, SameSeedSameBitsOtherSeedOtherValues) {
  for (Dist d : {Dist::uniform, Dist::normal, Dist::peaked, Dist::extreme}) {
    Case c = small_case(d);
    const PrePaging a = generate(c), b = generate(c);
    EXPECT_TRUE(same_bits(a, b)) << dist_name(d);
    c.seed = 8;
    const PrePaging other = generate(c);
    EXPECT_FALSE(same_bits(a.q, other.q)) << dist_name(d);
    EXPECT_FALSE(same_bits(a.v[0], other.v[0])) << dist_name(d);
  }
}

TEST(Tensors, SequenceValuesDoNotDependOnOtherSequences) {
  // Counter-based: a value depends on (seed, tensor, sequence, index) only. Adding a sequence, or
  // changing another sequence's length, leaves sequence 0 bit-identical.
  for (Dist d : {Dist::uniform, Dist::normal, Dist::peaked, Dist::extreme}) {
    Case one = small_case(d);
    one.seq_lens = {300};
    Case two = one, longer_second = one;
    two.seq_lens = {300, 77};
    longer_second.seq_lens = {300, 5000};
    const PrePaging a = generate(one), b = generate(two), c = generate(longer_second);
    const std::size_t qn = a.q.size();
    EXPECT_TRUE(std::equal(a.q.begin(), a.q.end(), b.q.begin())) << dist_name(d);
    EXPECT_TRUE(same_bits(a.k[0], b.k[0]) && same_bits(a.v[0], b.v[0])) << dist_name(d);
    EXPECT_TRUE(same_bits(b.k[0], c.k[0]) && same_bits(b.v[0], c.v[0])) << dist_name(d);
    EXPECT_TRUE(std::equal(b.q.begin() + qn, b.q.end(), c.q.begin() + qn)) << "q of sequence 1";
  }
}

TEST(Tensors, LongerSequenceExtendsTheShorterOne) {
  // Token t's values do not depend on the sequence length (uniform/normal/overflow; "peaked" places one hot
  // key per length on purpose), so a ctx-4096 cell and a ctx-4090 cell share their first 4090 tokens.
  for (Dist d : {Dist::uniform, Dist::normal, Dist::overflow}) {
    Case a = small_case(d), b = small_case(d);
    a.seq_lens = {100};
    b.seq_lens = {131};
    const PrePaging pa = generate(a), pb = generate(b);
    EXPECT_TRUE(std::equal(pa.k[0].begin(), pa.k[0].end(), pb.k[0].begin())) << dist_name(d);
    EXPECT_TRUE(std::equal(pa.v[0].begin(), pa.v[0].end(), pb.v[0].begin())) << dist_name(d);
  }
  // extreme bounds V by FLT_MAX / seq_len (docs/PROPERTIES.md, Domains): K and the signs of V are shared,
  // and V itself where the bound is not the binding cap (f16, whose 65504 is far below it).
  for (DType kv : {DType::bf16, DType::f16}) {
    Case a = small_case(Dist::extreme), b = small_case(Dist::extreme);
    a.kv_dtype = a.out_dtype = b.kv_dtype = b.out_dtype = kv;
    a.seq_lens = {100};
    b.seq_lens = {131};
    const PrePaging pa = generate(a), pb = generate(b);
    EXPECT_TRUE(std::equal(pa.k[0].begin(), pa.k[0].end(), pb.k[0].begin())) << dtype_name(kv);
    EXPECT_TRUE(std::equal(pa.v[0].begin(), pa.v[0].end(), pb.v[0].begin(),
                           [](float x, float y) { return std::signbit(x) == std::signbit(y); }))
        << dtype_name(kv);
    EXPECT_EQ(std::equal(pa.v[0].begin(), pa.v[0].end(), pb.v[0].begin()), kv == DType::f16) << dtype_name(kv);
  }
}

TEST(Tensors, ValuesAreRepresentableInTheirDtypes) {
  for (Dist d : {Dist::uniform, Dist::normal, Dist::peaked, Dist::extreme}) {
    for (auto [qt, kvt] : {std::pair{DType::bf16, DType::bf16}, std::pair{DType::f16, DType::bf16},
                           std::pair{DType::f32, DType::f16}}) {
      Case c = small_case(d);
      c.q_dtype = qt;
      c.kv_dtype = kvt;
      const PrePaging p = generate(c);
      for (float x : p.q) ASSERT_EQ(round_to(x, qt), x) << dist_name(d) << " q " << dtype_name(qt);
      for (int s = 0; s < c.num_seqs(); ++s) {
        for (float x : p.k[s]) ASSERT_EQ(round_to(x, kvt), x) << dist_name(d) << " k " << dtype_name(kvt);
        for (float x : p.v[s]) ASSERT_EQ(round_to(x, kvt), x) << dist_name(d) << " v " << dtype_name(kvt);
        for (float x : p.v[s]) ASSERT_TRUE(std::isfinite(x));
      }
    }
  }
  // With f32 Q, values are not all bf16-representable: rounding follows q_dtype, not kv_dtype.
  Case c = small_case();
  c.q_dtype = DType::f32;
  const PrePaging p = generate(c);
  EXPECT_TRUE(std::any_of(p.q.begin(), p.q.end(), [](float x) { return round_to(x, DType::bf16) != x; }));
}

TEST(Tensors, UniformAndNormalMoments) {
  Case c = small_case(Dist::uniform);
  c.seq_lens = {2000};
  PrePaging p = generate(c);
  const auto& u = p.v[0];
  EXPECT_LE(*std::max_element(u.begin(), u.end()), 1.0f);
  EXPECT_GE(*std::min_element(u.begin(), u.end()), -1.0f);
  EXPECT_GT(*std::max_element(u.begin(), u.end()), 0.99f);
  EXPECT_LT(*std::min_element(u.begin(), u.end()), -0.99f);
  const double n = static_cast<double>(u.size());
  double mean = std::accumulate(u.begin(), u.end(), 0.0) / n;
  double var = 0;
  for (float x : u) var += (x - mean) * (x - mean) / n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0 / 3.0, 0.01);  // U(-1, 1)

  c.dist = Dist::normal;
  p = generate(c);
  const auto& z = p.k[0];
  mean = std::accumulate(z.begin(), z.end(), 0.0) / n;
  var = 0;
  for (float x : z) var += (x - mean) * (x - mean) / n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  const double beyond3 = static_cast<double>(std::count_if(z.begin(), z.end(), [](float x) { return std::fabs(x) > 3; })) / n;
  EXPECT_NEAR(beyond3, 0.0027, 0.0015);  // two-sided 3-sigma tail of N(0, 1)
}

TEST(Tensors, PeakedConcentratesAttentionOnFewKeys) {
  Case c = small_case(Dist::peaked);
  c.seq_lens = {64, 2000};
  const PrePaging p = generate(c);
  Case flat = c;
  flat.dist = Dist::normal;
  const PrePaging pf = generate(flat);
  for (int h = 0; h < c.num_heads; ++h) {
    // Short sequence: one hot key (at most a couple) takes most of the mass.
    EXPECT_GT(sorted_probs(logits(c, p, 0, h))[0], 0.3) << "h " << h;
    // Long sequence: the top 1% of keys (the hot ones, ~1 in 500) carry 99% of the mass, where a
    // normal cell's top 1% carries well under half.
    const std::size_t top = 2000 / 100;
    const auto pk = sorted_probs(logits(c, p, 1, h)), pn = sorted_probs(logits(flat, pf, 1, h));
    EXPECT_GT(std::accumulate(pk.begin(), pk.begin() + top, 0.0), 0.99) << "h " << h;
    EXPECT_LT(std::accumulate(pn.begin(), pn.begin() + top, 0.0), 0.5) << "h " << h;
  }
}

TEST(Tensors, ExtremeLogitsAndValues) {
  for (Dist dist : {Dist::extreme, Dist::overflow})
    for (DType kv : {DType::bf16, DType::f16, DType::f32}) {
      Case c = small_case(dist);
      c.kv_dtype = c.out_dtype = kv;
      const PrePaging p = generate(c);
      // Logits far from zero in both signs.
      double lo = 0, hi = 0;
      for (int h = 0; h < c.num_heads; ++h)
        for (double l : logits(c, p, 0, h)) {
          lo = std::min(lo, l);
          hi = std::max(hi, l);
        }
      EXPECT_GT(hi, 1e3) << dtype_name(kv);
      EXPECT_LT(lo, -1e3) << dtype_name(kv);
      // V: both signs, every magnitude in [0.25, 0.5] x B (rounded to the dtype). B is the largest finite
      // value capped at 3e38, and under extreme also at FLT_MAX / seq_len, so that seq_len x max|V| (the
      // largest unnormalised fp32 sum of p x V) stays below FLT_MAX / 2, rounding aside.
      for (int s = 0; s < c.num_seqs(); ++s) {
        const int len = c.seq_lens[s];
        double b = std::min(dtype_max_finite(kv), 3e38);
        if (dist == Dist::extreme) b = std::min(b, static_cast<double>(std::numeric_limits<float>::max()) / len);
        double vmin_abs = INFINITY, vmax_abs = 0;
        bool neg = false, pos = false;
        for (float x : p.v[s]) {
          vmin_abs = std::min(vmin_abs, std::fabs(static_cast<double>(x)));
          vmax_abs = std::max(vmax_abs, std::fabs(static_cast<double>(x)));
          neg |= x < 0;
          pos |= x > 0;
        }
        const std::string what = std::string(dtype_name(kv)) + " " + std::string(dist_name(dist)) + " seq " +
                                 std::to_string(s);
        EXPECT_TRUE(neg && pos) << what;
        EXPECT_GE(vmin_abs, 0.24 * b) << what;
        EXPECT_GE(vmax_abs, 0.45 * b) << what;
        EXPECT_LE(vmax_abs, 0.5 * b * (1 + 0x1p-8)) << what;
        if (dist == Dist::extreme)
          EXPECT_LE(len * vmax_abs, 0.5 * std::numeric_limits<float>::max() * (1 + 0x1p-8)) << what;
        else if (kv != DType::f16)
          EXPECT_GT(len * vmax_abs, static_cast<double>(std::numeric_limits<float>::max())) << what << ": can overflow";
      }
    }
}

}  // namespace
}  // namespace pacheck
