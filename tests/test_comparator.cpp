// The comparator: metrics on hand-made vectors, the NaN/Inf rules, ULPs in the output dtype, the
// tolerance policies, A/B between kernels, and the self-test (including that it fails when blinded).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "judge/comparator.hpp"
#include "oracle/oracle.hpp"

namespace pacheck {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

/// num_seqs 2 x num_heads 2 x head_size 4 = 16 elements; flat i = (seq*2 + head)*4 + dim.
Case tiny_case() {
  Case c;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_size = 4;
  c.seq_lens = {3, 5};
  return c;
}

/// ref[i] = (i - 8) / 4: -2 .. 1.75, all exactly representable in bf16; max|ref| = 2 (at i = 0).
std::vector<double> tiny_ref() {
  std::vector<double> r(16);
  for (int i = 0; i < 16; ++i) r[i] = (i - 8) * 0.25;
  return r;
}

/// One element: num_seqs 1 x num_heads 1 x head_size 1.
Case one_element_case() {
  Case c;
  c.num_heads = c.num_kv_heads = 1;
  c.head_size = 1;
  c.seq_lens = {1};
  return c;
}

/// Expects the non-finite counts of `m` (NaN elements of out, Inf elements of out, non-finite mismatches)
/// and the (seq, head, dim) of its worst element.
void expect_nonfinite_and_worst(const Metrics& m, std::int64_t nan, std::int64_t inf, std::int64_t bad,
                                Index3 worst) {
  EXPECT_EQ(m.nan_count, nan);
  EXPECT_EQ(m.inf_count, inf);
  EXPECT_EQ(m.bad_nonfinite, bad);
  EXPECT_EQ(m.worst.seq, worst.seq);
  EXPECT_EQ(m.worst.head, worst.head);
  EXPECT_EQ(m.worst.dim, worst.dim);
}

// Issue 19: with several query tokens per sequence the worst element is named by its sequence and query
// token (output row query_start(s) + i), not by its output row; flat() maps it back to the element.
TEST(Compare, WorstElementOfSeveralQueryTokensNamesSequenceAndToken) {
  Case c;
  c.num_heads = c.num_kv_heads = 1;
  c.head_size = 2;
  c.seq_lens = {4, 5, 6};
  c.query_lens = {2, 3, 1};  // rows: seq 0 -> 0, 1; seq 1 -> 2, 3, 4; seq 2 -> 5
  c.validate();
  const std::vector<double> ref(12, 1.0);
  std::vector<double> out = ref;
  out[9] = 2.0;  // row 4, dim 1: sequence 1's third query token
  const Metrics m = compare(out, ref, c, DType::f32);
  EXPECT_EQ(m.worst.seq, 1);
  EXPECT_EQ(m.worst.token, 2);
  EXPECT_EQ(m.worst.head, 0);
  EXPECT_EQ(m.worst.dim, 1);
  EXPECT_EQ(m.worst.flat(c), 9);
  EXPECT_EQ(describe(m.worst), "seq 1, query token 2, head 0, dim 1");
  // Plain decode keeps the row as the sequence and names no query token.
  Case d = c;
  d.query_lens.clear();
  std::vector<double> out_d(6, 1.0);
  out_d[5] = 2.0;  // row 2, dim 1
  const Metrics md = compare(out_d, std::vector<double>(6, 1.0), d, DType::f32);
  EXPECT_EQ(md.worst.token, -1);
  EXPECT_EQ(describe(md.worst), "seq 2, head 0, dim 1");
  EXPECT_EQ(md.worst.flat(d), 5);
}

TEST(Compare, MetricsOfHandMadeVectors) {
  const Case c = tiny_case();
  const std::vector<double> ref = tiny_ref();
  std::vector<double> out = ref;
  out[13] = ref[13] + 0x1p-5;  // 1.25 -> 1.28125: 4 bf16 ULPs (2^-7 apart in [1, 2))
  out[2] = ref[2] + 0x1p-7;    // -1.5 -> -1.4921875: 1 ULP, towards zero
  const Metrics m = compare(out, ref, c, DType::bf16);
  EXPECT_EQ(m.elements, 16);
  EXPECT_DOUBLE_EQ(m.max_abs, 0x1p-5);
  EXPECT_DOUBLE_EQ(m.rel_linf, 0x1p-5 / 2.0);
  EXPECT_DOUBLE_EQ(m.nmse, (0x1p-10 + 0x1p-14) / 21.5);  // sum ref^2 = 344 / 16
  EXPECT_DOUBLE_EQ(m.mean_abs, (0x1p-5 + 0x1p-7) / 16);
  EXPECT_EQ(m.max_ulp, 4u);
  EXPECT_DOUBLE_EQ(m.bitwise_equal_pct, 100.0 * 14 / 16);
  expect_nonfinite_and_worst(m, 0, 0, 0, {.seq = 1, .head = 1, .dim = 1});  // element 13
  EXPECT_EQ(differing_elements(out, ref, DType::bf16), (std::vector<std::int64_t>{2, 13}));
}

TEST(Compare, IdenticalOutputsAreExact) {
  const Case c = tiny_case();
  const std::vector<double> ref = tiny_ref();
  const Metrics m = compare(ref, ref, c, DType::f16);
  EXPECT_EQ(m.max_abs, 0);
  EXPECT_EQ(m.rel_linf, 0);
  EXPECT_EQ(m.nmse, 0);
  EXPECT_EQ(m.max_ulp, 0u);
  EXPECT_EQ(m.bitwise_equal_pct, 100.0);
  EXPECT_TRUE(differing_elements(ref, ref, DType::f16).empty());
}

TEST(Compare, NanAndInfCountsAndTheWorstIndex) {
  const Case c = tiny_case();
  std::vector<double> ref = tiny_ref();
  ref[9] = -kInf;
  std::vector<double> out = ref;
  out[4] = kNan;   // (seq 0, head 1, dim 0): the first non-finite mismatch is the worst element
  out[6] = kInf;   // Inf where ref is finite
  out[11] += 1.0;  // a large finite error does not outrank a non-finite one
  // out[9] = -Inf where ref is -Inf: allowed
  const Metrics m = compare(out, ref, c, DType::bf16);
  expect_nonfinite_and_worst(m, 1, 2, 2, {.seq = 0, .head = 1, .dim = 0});  // element 4
  EXPECT_DOUBLE_EQ(m.max_abs, 1.0) << "max_abs is over finite pairs";
  EXPECT_EQ(m.rel_linf, kInf) << "an unmatched non-finite element makes the error unbounded";
  EXPECT_EQ(m.max_ulp, std::numeric_limits<std::uint64_t>::max()) << "NaN has no ULP distance";
  EXPECT_DOUBLE_EQ(m.bitwise_equal_pct, 100.0 * 13 / 16);
  EXPECT_EQ(differing_elements(out, ref, DType::bf16), (std::vector<std::int64_t>{4, 6, 11}));
}

TEST(Compare, InfPassesOnlyWhereTheReferenceHasTheSameInf) {
  const Case c = one_element_case();
  struct Row {
    double out, ref;
    bool bad;
    const char* what;
  };
  const Row rows[] = {
      {kInf, kInf, false, "+Inf where ref is +Inf"},
      {-kInf, -kInf, false, "-Inf where ref is -Inf"},
      {kInf, -kInf, true, "+Inf where ref is -Inf"},
      {kInf, 1.0, true, "+Inf where ref is finite"},
      {1.0, kInf, true, "finite where ref is +Inf"},
      {kNan, kNan, true, "NaN never passes, even against NaN"},
      {kNan, 1.0, true, "NaN where ref is finite"},
      {1.0, kNan, true, "finite where ref is NaN"},
      {1.0, 1.0, false, "finite and equal"},
  };
  for (const Row& r : rows) {
    for (DType t : {DType::bf16, DType::f16, DType::f32}) {
      const Metrics m = compare({r.out}, {r.ref}, c, t);
      EXPECT_EQ(m.bad_nonfinite, r.bad ? 1 : 0) << r.what << " " << dtype_name(t);
      if (!r.bad) {
        EXPECT_EQ(m.rel_linf, 0) << r.what;
        EXPECT_EQ(m.bitwise_equal_pct, 100.0) << r.what;
      } else {
        EXPECT_EQ(m.rel_linf, kInf) << r.what;
        EXPECT_EQ(m.bitwise_equal_pct, 0.0) << r.what;
      }
    }
  }
}

TEST(Compare, UlpsAndBitsAreMeasuredInTheOutputDtype) {
  const Case c = one_element_case();
  const double one = 1.0, next_bf16 = 1.0 + 0x1p-7;
  EXPECT_EQ(compare({next_bf16}, {one}, c, DType::bf16).max_ulp, 1u);
  EXPECT_EQ(compare({next_bf16}, {one}, c, DType::f16).max_ulp, 8u);
  EXPECT_EQ(compare({next_bf16}, {one}, c, DType::f32).max_ulp, 1u << 16);
  // The reference is rounded to the output dtype before bits are compared: 1 + 2^-9 is 1.0 in bf16,
  // so a bf16 kernel storing 1.0 is bitwise equal (the error still shows in max_abs).
  const Metrics m = compare({one}, {1.0 + 0x1p-9}, c, DType::bf16);
  EXPECT_EQ(m.bitwise_equal_pct, 100.0);
  EXPECT_EQ(m.max_ulp, 0u);
  EXPECT_DOUBLE_EQ(m.max_abs, 0x1p-9);
  EXPECT_EQ(compare({one}, {1.0 + 0x1p-9}, c, DType::f32).bitwise_equal_pct, 0.0);
}

TEST(Compare, ReferenceIsRoundedOnceNotTwice) {
  // 1 + 2^-8 + 2^-30 is just above the bf16 midpoint between 1 and 1 + 2^-7, so it rounds up. Going
  // through float first lands exactly on the midpoint (2^-30 is below float's half ULP) and then ties
  // to even, down to 1.0: the wrong bits. Same for f16 with 1 + 2^-11 + 2^-40.
  const Case c = one_element_case();
  const Metrics b = compare({1.0 + 0x1p-7}, {1.0 + 0x1p-8 + 0x1p-30}, c, DType::bf16);
  EXPECT_EQ(b.bitwise_equal_pct, 100.0);
  EXPECT_EQ(b.max_ulp, 0u);
  const Metrics h = compare({1.0 + 0x1p-10}, {1.0 + 0x1p-11 + 0x1p-40}, c, DType::f16);
  EXPECT_EQ(h.bitwise_equal_pct, 100.0);
  // An exact midpoint still ties to even.
  EXPECT_EQ(compare({1.0}, {1.0 + 0x1p-8}, c, DType::bf16).bitwise_equal_pct, 100.0);
  EXPECT_EQ(compare({-1.0}, {-1.0 - 0x1p-8}, c, DType::bf16).bitwise_equal_pct, 100.0);
}

TEST(Compare, RejectsMismatchedSizes) {
  const Case c = tiny_case();
  const std::vector<double> ref = tiny_ref();
  std::vector<double> shorter(ref.begin(), ref.end() - 1);
  EXPECT_THROW(compare(shorter, ref, c, DType::bf16), std::invalid_argument);
  EXPECT_THROW(compare(shorter, shorter, c, DType::bf16), std::invalid_argument) << "must match the case";
  EXPECT_THROW(differing_elements(shorter, ref, DType::bf16), std::invalid_argument);
}

TEST(Tolerance, FixedTable) {
  EXPECT_EQ(fixed_limit(DType::bf16), 5 * 0x1p-8);
  EXPECT_EQ(fixed_limit(DType::f16), 5 * 0x1p-11);
  EXPECT_EQ(fixed_limit(DType::f32), 0x1p-14);
  // Seed 000's GPU band (2.12e-3 .. 4.72e-3 over 90 bf16 cells) must pass with room to spare.
  EXPECT_LT(4.72e-3 / fixed_limit(DType::bf16), 0.5);
  const Tolerance fixed;
  EXPECT_EQ(fixed.policy, TolerancePolicy::fixed);
  EXPECT_EQ(fixed.limit(DType::bf16, 123.0), fixed_limit(DType::bf16)) << "fixed ignores the emulation";
  EXPECT_THROW(fixed_limit(DType::fp8_e4m3fn), std::invalid_argument) << "fp8 is a KV dtype, never an output";
}

TEST(Tolerance, CalibratedIsMultipleOfEmulationPlusFloor) {
  Tolerance t;
  t.policy = TolerancePolicy::calibrated;
  EXPECT_EQ(t.multiple, 4.0);
  EXPECT_EQ(t.limit(DType::bf16, 0), 0x1p-12) << "the floor";
  EXPECT_EQ(t.limit(DType::f16, 0), 0x1p-15);
  EXPECT_EQ(t.limit(DType::f32, 0), 0x1p-19);
  EXPECT_DOUBLE_EQ(t.limit(DType::bf16, 3e-3), 4 * 3e-3 + 0x1p-12);
  t.multiple = 2;
  EXPECT_DOUBLE_EQ(t.limit(DType::f16, 5e-4), 2 * 5e-4 + 0x1p-15);
  EXPECT_THROW(t.limit(DType::bf16, -1e-3), std::invalid_argument);
  EXPECT_THROW(t.limit(DType::bf16, kNan), std::invalid_argument);
  EXPECT_THROW(t.limit(DType::bf16, kInf), std::invalid_argument);
}

/// A kernel that accumulates P.V in bf16 (the classic precision bug): each partial sum is rounded.
std::vector<double> bf16_accumulating_kernel(const Case& c, const PrePaging& p) {
  const int H = c.num_heads, G = c.num_kv_heads, D = c.head_size, R = H / G;
  std::vector<double> out(static_cast<std::size_t>(c.num_seqs()) * H * D);
  for (int s = 0; s < c.num_seqs(); ++s)
    for (int h = 0; h < H; ++h) {
      const int L = c.seq_lens[s], g = h / R;
      std::vector<float> w(L);
      float mx = -INFINITY, sum = 0;
      for (int t = 0; t < L; ++t) {
        float dot = 0;
        for (int d = 0; d < D; ++d)
          dot += p.q[(static_cast<std::size_t>(s) * H + h) * D + d] * p.k[s][(static_cast<std::size_t>(t) * G + g) * D + d];
        mx = std::max(mx, w[t] = dot * c.effective_scale());
      }
      for (float& x : w) sum += (x = std::exp(x - mx));
      for (int d = 0; d < D; ++d) {
        float acc = 0;
        for (int t = 0; t < L; ++t)
          acc = round_to(acc + w[t] / sum * p.v[s][(static_cast<std::size_t>(t) * G + g) * D + d], DType::bf16);
        out[(static_cast<std::size_t>(s) * H + h) * D + d] = acc;
      }
    }
  return out;
}

TEST(Tolerance, SeparatesAnHonestKernelFromBf16Accumulation) {
  // The emulation stands in for an honest bf16 kernel (probabilities and output rounded, fp32
  // accumulation); accumulating in bf16 instead must fail both policies at a realistic context.
  Case c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_size = 128;
  for (int ctx : {1024, 4090}) {
    c.seq_lens = {ctx};
    const PrePaging p = generate(c);
    const std::vector<double> ref = oracle(c, p).out;
    const double emu = compare(emulate_low_precision(c, p), ref, c, DType::bf16).rel_linf;
    Tolerance cal;
    cal.policy = TolerancePolicy::calibrated;
    EXPECT_LE(emu, fixed_limit(DType::bf16)) << ctx;
    EXPECT_LE(emu, cal.limit(DType::bf16, emu)) << ctx;
    const double bad = compare(bf16_accumulating_kernel(c, p), ref, c, DType::bf16).rel_linf;
    EXPECT_GT(bad, fixed_limit(DType::bf16)) << ctx;
    EXPECT_GT(bad, cal.limit(DType::bf16, emu)) << ctx;
  }
}

TEST(ABCompare, TwoKernelOutputs) {
  // Seed 001's table compares two kernels with each other: bitwise %, max_abs, max_rel.
  Case c;
  c.num_heads = 16;
  c.num_kv_heads = 4;
  c.head_size = 128;
  c.seq_lens = {100};
  const PrePaging p = generate(c);
  const std::vector<double> a = emulate_low_precision(c, p);  // a bf16 kernel
  const Metrics same = compare(a, a, c, DType::bf16);
  EXPECT_EQ(same.bitwise_equal_pct, 100.0);
  EXPECT_EQ(same.max_abs, 0);

  std::vector<double> b = a;  // kernel B: two elements one ULP away
  for (std::int64_t i : {17, 1500}) b[i] = from_bits(to_bits(static_cast<float>(a[i]), DType::bf16) + 1, DType::bf16);
  const Metrics ab = compare(b, a, c, DType::bf16), ba = compare(a, b, c, DType::bf16);
  EXPECT_DOUBLE_EQ(ab.bitwise_equal_pct, 100.0 * (2048 - 2) / 2048);
  EXPECT_EQ(ab.max_ulp, 1u);
  EXPECT_EQ(ab.max_abs, ba.max_abs) << "A/B is symmetric in max_abs";
  EXPECT_EQ(ab.bitwise_equal_pct, ba.bitwise_equal_pct);
  EXPECT_EQ(differing_elements(b, a, DType::bf16), (std::vector<std::int64_t>{17, 1500}));
  const std::int64_t worst = (static_cast<std::int64_t>(ab.worst.seq) * 16 + ab.worst.head) * 128 + ab.worst.dim;
  EXPECT_TRUE(worst == 17 || worst == 1500);

  // Two honest kernels (emulation vs the oracle rounded to bf16) differ, but by less than the limit.
  std::vector<double> rounded = oracle(c, p).out;
  for (double& x : rounded) x = round_to(static_cast<float>(x), DType::bf16);
  const Metrics honest = compare(a, rounded, c, DType::bf16);
  EXPECT_LT(honest.bitwise_equal_pct, 100.0);
  EXPECT_GT(honest.bitwise_equal_pct, 50.0);
  EXPECT_LE(honest.rel_linf, fixed_limit(DType::bf16));
}

TEST(SelfTest, PassesWithTheSeed001Defaults) {
  const SelfTestResult r = comparator_selftest();
  EXPECT_TRUE(r.passed);
  ASSERT_GE(r.lines.size(), 9u);
  for (const std::string& l : r.lines) EXPECT_EQ(l.rfind("ok", 0), 0u) << l;
  bool saw_pct = false;
  for (const std::string& l : r.lines) saw_pct |= l.find("99.8535%") != std::string::npos;
  EXPECT_TRUE(saw_pct) << "3 of 2048 seeded: 100% -> 99.8535%, as seed 001 reports";
}

TEST(SelfTest, PassesWithOtherCorruptions) {
  EXPECT_TRUE(comparator_selftest(2, {0, 100, 2047}).passed);
  EXPECT_TRUE(comparator_selftest(7, {1024}).passed);
}

TEST(SelfTest, FailsWhenTheComparatorIsBlind) {
  const SelfTestResult r = comparator_selftest(1, {5, 1024, 2047}, /*blind=*/true);
  EXPECT_FALSE(r.passed);
  int failed = 0;
  for (const std::string& l : r.lines) failed += l.rfind("FAILED", 0) == 0;
  EXPECT_GE(failed, 4) << "detection, bitwise drop, locations and the NaN must each fail";
}

TEST(SelfTest, RejectsBadArguments) {
  EXPECT_FALSE(comparator_selftest(1, {2048}).passed) << "outside the row";
  EXPECT_FALSE(comparator_selftest(1, {5, 5}).passed) << "duplicate offset";
  EXPECT_FALSE(comparator_selftest(1, {}).passed) << "nothing seeded";
  EXPECT_FALSE(comparator_selftest(0).passed) << "0 ULP is no corruption";
}

// ---- The bias check (docs/TOLERANCE.md "Bias"): signed rounding direction against ref rounded to nearest.

/// An oracle row of 16 heads x 128 (ctx 31, straddling a 32-token block): 2048 values, nearly all of them
/// inexact in bf16 and f16.
struct OracleRow {
  Case c;
  std::vector<double> ref;
  OracleRow() {
    c.num_heads = 16;
    c.num_kv_heads = 4;
    c.head_size = 128;
    c.block_size = 32;
    c.seq_lens = {31};
    ref = oracle(c, generate(c)).out;
  }
};

/// `r` stored in `t` by a conversion: 0 nearest even, -1 toward zero, +1 away from zero.
double store(double r, DType t, int direction) {
  const float f = static_cast<float>(r);
  const float nearest = round_to(f, t);
  if (direction == 0 || static_cast<double>(nearest) == r) return nearest;
  const bool went_away = std::fabs(static_cast<double>(nearest)) > std::fabs(r);
  const std::uint32_t b = to_bits(nearest, t);
  if (direction < 0) return went_away ? from_bits(b - 1, t) : nearest;  // sign-magnitude: one code down = toward 0
  return went_away ? nearest : from_bits(b + 1, t);
}

TEST(Bias, NearestEvenScoresZeroTruncationMinusAHalf) {
  const OracleRow row;
  for (DType t : {DType::bf16, DType::f16}) {
    std::vector<double> nearest(row.ref.size()), trunc(row.ref.size()), away(row.ref.size());
    for (std::size_t i = 0; i < row.ref.size(); ++i) {
      nearest[i] = store(row.ref[i], t, 0);
      trunc[i] = store(row.ref[i], t, -1);
      away[i] = store(row.ref[i], t, +1);
    }
    const Metrics mn = compare(nearest, row.ref, row.c, t);
    EXPECT_GT(mn.bias_elements, 1900) << dtype_name(t) << ": nearly every oracle value needs rounding";
    EXPECT_EQ(mn.bias_ulp, 0.0);
    EXPECT_EQ(mn.bias_toward + mn.bias_away, 0);
    EXPECT_EQ(bias_finding(mn), "");

    const Metrics mt = compare(trunc, row.ref, row.c, t);
    EXPECT_LT(mt.bias_ulp, -0.4) << dtype_name(t);
    EXPECT_GT(mt.bias_ulp, -0.6) << dtype_name(t);
    EXPECT_EQ(mt.bias_away, 0);
    EXPECT_LT(mt.rel_linf, fixed_limit(t)) << "truncation stays inside the rel_linf limit: only the bias check sees it";
    const std::string ft = bias_finding(mt);
    EXPECT_NE(ft.find("rounds toward zero"), std::string::npos) << ft;
    EXPECT_NE(ft.find("truncating conversion"), std::string::npos) << ft;

    const Metrics ma = compare(away, row.ref, row.c, t);
    EXPECT_GT(ma.bias_ulp, 0.4);
    EXPECT_NE(bias_finding(ma).find("rounds away from zero"), std::string::npos);
  }
}

TEST(Bias, WrongRoundingsBothWaysAreNoBias) {
  // Every fourth element rounded the wrong way, alternately toward and away from zero: an inaccurate but
  // unbiased kernel (half of its elements off by an ULP would still be no bias).
  const OracleRow row;
  std::vector<double> out(row.ref.size());
  for (std::size_t i = 0; i < row.ref.size(); ++i)
    out[i] = store(row.ref[i], DType::bf16, i % 4 != 0 ? 0 : (i % 8 == 0 ? -1 : +1));
  const Metrics m = compare(out, row.ref, row.c, DType::bf16);
  EXPECT_GT(m.bias_toward, 100);
  EXPECT_GT(m.bias_away, 100);
  EXPECT_LT(std::fabs(m.bias_ulp), 0.05);
  EXPECT_EQ(bias_finding(m), "");
}

TEST(Bias, AFewTruncatedElementsAreNotSignificant) {
  // 4 elements, all truncated: the mean is far past the limit, but 4 one-way steps are no evidence (z = 2).
  Case c = tiny_case();
  c.seq_lens = {3};
  c.num_heads = 1;
  const std::vector<double> ref{0.1, 0.3, -0.7, 1.1};
  std::vector<double> out(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) out[i] = store(ref[i], DType::bf16, -1);
  const Metrics m = compare(out, ref, c, DType::bf16);
  EXPECT_EQ(m.bias_elements, 4);
  EXPECT_LT(m.bias_ulp, -0.25);
  EXPECT_EQ(bias_finding(m), "") << "z = (toward - away) / sqrt(toward + away) < 5";
  EXPECT_NE(bias_finding(m, BiasCheck{.limit_ulp = 0.25, .min_z = 1.0, .min_row_z = 1.0}), "")
      << "the same cell under a weaker test";
}

TEST(Bias, RowsScaledBothWaysAreNoBias) {
  // Probability rounding scales each row by its own factor: here rows alternately by 1 + 2^-9 and 1 - 2^-9
  // (up to a bf16 ULP). Each row is one-way, the cell is not: a truncating conversion moves every row.
  const OracleRow row;
  std::vector<double> out(row.ref.size());
  for (std::size_t i = 0; i < row.ref.size(); ++i) {
    const double scale = (i / 128) % 2 ? 1 + 0x1p-9 : 1 - 0x1p-9;
    out[i] = store(row.ref[i] * scale, DType::bf16, 0);
  }
  const Metrics m = compare(out, row.ref, row.c, DType::bf16);
  EXPECT_EQ(m.bias_rows_toward, 8);
  EXPECT_EQ(m.bias_rows_away, 8);
  EXPECT_EQ(bias_finding(m, BiasCheck{.limit_ulp = 0.0, .min_z = 0.0}), "") << "rows split 8 / 8";
  // All rows one way: the same factor for every row is a bias (a wrong scale would fail rel_linf first).
  for (std::size_t i = 0; i < row.ref.size(); ++i) out[i] = store(row.ref[i] * (1 - 0x1p-9), DType::bf16, 0);
  const Metrics all = compare(out, row.ref, row.c, DType::bf16);
  EXPECT_EQ(all.bias_rows_toward, 16);
  EXPECT_NE(bias_finding(all), "");
}

TEST(Bias, ManyUlpErrorsWeighAsOneAndF32HasNoBias) {
  const OracleRow row;
  // Element 0 far off (1000 ULPs toward zero): clamped to one wrong rounding, so the mean moves by 1/n.
  std::vector<double> out(row.ref.size());
  for (std::size_t i = 0; i < row.ref.size(); ++i) out[i] = store(row.ref[i], DType::bf16, 0);
  out[0] *= 0.5;
  const Metrics m = compare(out, row.ref, row.c, DType::bf16);
  EXPECT_EQ(m.bias_toward, 1);
  EXPECT_NEAR(m.bias_ulp, -1.0 / static_cast<double>(m.bias_elements), 1e-12);
  // An f32 output is stored as computed: nothing is measured.
  std::vector<double> f32(row.ref.size());
  for (std::size_t i = 0; i < row.ref.size(); ++i) f32[i] = static_cast<float>(row.ref[i]);
  const Metrics m32 = compare(f32, row.ref, row.c, DType::f32);
  EXPECT_EQ(m32.bias_elements, 0);
  EXPECT_EQ(bias_finding(m32), "");
}

}  // namespace
}  // namespace pacheck
