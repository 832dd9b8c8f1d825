// fp8 encodings (core/fp8.hpp): every code decoded and re-encoded, round-to-nearest-even against a
// brute-force nearest search, saturation, NaN/Inf, the DType plumbing and the poison-pattern table.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "faults/inject.hpp"
#include "core/dtype.hpp"
#include "core/fp8.hpp"

namespace pacheck {
namespace {

constexpr Fp8 kAll[] = {Fp8::e4m3fn, Fp8::e4m3fnuz, Fp8::e5m2};
const char* name(Fp8 e) { return e == Fp8::e4m3fn ? "e4m3fn" : e == Fp8::e4m3fnuz ? "e4m3fnuz" : "e5m2"; }
constexpr float kInf = std::numeric_limits<float>::infinity();

float pow2(int e) { return std::ldexp(1.0f, e); }

TEST(Fp8Decode, KnownCodes) {
  struct Row { Fp8 e; std::uint8_t code; float value; };
  const Row rows[] = {
      // e4m3fn: bias 7, 0x7F/0xFF NaN, max 0x7E = 1.75 * 2^8
      {Fp8::e4m3fn, 0x00, 0.0f}, {Fp8::e4m3fn, 0x38, 1.0f}, {Fp8::e4m3fn, 0x7E, 448.0f}, {Fp8::e4m3fn, 0xFE, -448.0f},
      {Fp8::e4m3fn, 0x01, pow2(-9)}, {Fp8::e4m3fn, 0x07, 7 * pow2(-9)}, {Fp8::e4m3fn, 0x08, pow2(-6)},
      {Fp8::e4m3fn, 0x3F, 1.875f}, {Fp8::e4m3fn, 0xB8, -1.0f},
      // e4m3fnuz: bias 8, 0x7F = 1.875 * 2^7 = 240 is finite, 0xFF = -240
      {Fp8::e4m3fnuz, 0x00, 0.0f}, {Fp8::e4m3fnuz, 0x40, 1.0f}, {Fp8::e4m3fnuz, 0x7F, 240.0f},
      {Fp8::e4m3fnuz, 0xFF, -240.0f}, {Fp8::e4m3fnuz, 0x01, pow2(-10)}, {Fp8::e4m3fnuz, 0x08, pow2(-7)},
      {Fp8::e4m3fnuz, 0x81, -pow2(-10)},
      // e5m2: bias 15, 0x7B = 1.75 * 2^15 = 57344, 0x7C Inf
      {Fp8::e5m2, 0x00, 0.0f}, {Fp8::e5m2, 0x3C, 1.0f}, {Fp8::e5m2, 0x7B, 57344.0f}, {Fp8::e5m2, 0x7C, kInf},
      {Fp8::e5m2, 0xFC, -kInf}, {Fp8::e5m2, 0x01, pow2(-16)}, {Fp8::e5m2, 0x04, pow2(-14)},
  };
  for (const Row& r : rows) EXPECT_EQ(fp8_decode(r.code, r.e), r.value) << name(r.e) << " 0x" << std::hex << int(r.code);
  EXPECT_TRUE(std::signbit(fp8_decode(0x80, Fp8::e4m3fn))) << "e4m3fn 0x80 is -0";
  EXPECT_TRUE(std::signbit(fp8_decode(0x80, Fp8::e5m2))) << "e5m2 0x80 is -0";
}

TEST(Fp8Decode, NanCodesPerEncoding) {
  for (Fp8 e : kAll) {
    std::vector<int> nans;
    for (int c = 0; c < 256; ++c) {
      const bool nan = std::isnan(fp8_decode(static_cast<std::uint8_t>(c), e));
      EXPECT_EQ(nan, fp8_is_nan(static_cast<std::uint8_t>(c), e)) << name(e) << " " << c;
      if (nan) nans.push_back(c);
    }
    if (e == Fp8::e4m3fn) EXPECT_EQ(nans, (std::vector<int>{0x7F, 0xFF}));
    if (e == Fp8::e4m3fnuz) EXPECT_EQ(nans, (std::vector<int>{0x80}));
    if (e == Fp8::e5m2) EXPECT_EQ(nans, (std::vector<int>{0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}));
  }
}

TEST(Fp8Decode, PositiveCodesAreStrictlyIncreasing) {
  for (Fp8 e : kAll) {
    const std::uint8_t top = fp8_format(e).max_code;
    for (int c = 1; c <= top; ++c)
      EXPECT_LT(fp8_decode(static_cast<std::uint8_t>(c - 1), e), fp8_decode(static_cast<std::uint8_t>(c), e))
          << name(e) << " " << c;
    EXPECT_EQ(fp8_decode(top, e), fp8_format(e).max_finite) << name(e);
  }
}

TEST(Fp8RoundTrip, EveryCodeOfEveryEncoding) {
  for (Fp8 e : kAll) {
    const std::uint8_t canonical = fp8_format(e).nan_code;
    int same = 0;
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<std::uint8_t>(c);
      const std::uint8_t back = fp8_encode(fp8_decode(code, e), e);
      if (fp8_is_nan(code, e)) {
        EXPECT_EQ(back, canonical) << name(e) << " NaN code 0x" << std::hex << c << " -> the canonical NaN";
      } else {
        EXPECT_EQ(back, code) << name(e) << " 0x" << std::hex << c;  // includes -0 (0x80) in e4m3fn and e5m2
        ++same;
      }
    }
    EXPECT_EQ(same, e == Fp8::e4m3fn ? 254 : e == Fp8::e4m3fnuz ? 255 : 250) << name(e);
  }
}

/// The nearest finite code to v by exhaustive search, ties to the even code (the code's last bit is the
/// mantissa's), with the encoding's saturation and zero rules. Independent of fp8_encode's bit arithmetic.
std::uint8_t brute_nearest(float v, Fp8 e) {
  const Fp8Format& f = fp8_format(e);
  const double a = std::fabs(static_cast<double>(v));
  int best = 0;
  double best_d = a;
  for (int c = 1; c <= f.max_code; ++c) {
    const double d = std::fabs(static_cast<double>(fp8_decode(static_cast<std::uint8_t>(c), e)) - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  if (a >= f.max_finite) best = f.max_code;
  if (best == 0 && !f.has_negative_zero) return 0;
  return static_cast<std::uint8_t>((std::signbit(v) ? 0x80 : 0) | best);
}

TEST(Fp8Encode, MatchesBruteForceNearestEven) {
  for (Fp8 e : kAll) {
    std::vector<float> probes;
    const std::uint8_t top = fp8_format(e).max_code;
    for (int c = 0; c <= top; ++c) {
      const float lo = fp8_decode(static_cast<std::uint8_t>(c), e);
      const float hi = c < top ? fp8_decode(static_cast<std::uint8_t>(c + 1), e) : 2 * lo;
      const float mid = (lo + hi) / 2;  // exact: fp8 values have few bits
      for (float p : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf), (3 * lo + hi) / 4, hi})
        probes.push_back(p), probes.push_back(-p);
    }
    // Far below the smallest subnormal, fp32 subnormals, and a log-spaced sweep of 20000 values.
    for (float p : {pow2(-30), pow2(-126), std::numeric_limits<float>::denorm_min(), 1e-20f}) probes.push_back(p);
    for (int i = 0; i < 20000; ++i) probes.push_back(std::exp2(-20.0f + 38.0f * static_cast<float>(i) / 20000.0f));
    int checked = 0;
    for (float p : probes) {
      ASSERT_EQ(fp8_encode(p, e), brute_nearest(p, e)) << name(e) << " v=" << p << " bits 0x" << std::hex
                                                       << std::bit_cast<std::uint32_t>(p);
      ++checked;
    }
    EXPECT_GT(checked, 20000);
  }
}

TEST(Fp8Encode, TiesGoToEven) {
  // e4m3fn near 1: spacing 1/8. 1.0625 lies between 0x38 (1.0, even) and 0x39; 1.1875 between 0x39 and 0x3A.
  EXPECT_EQ(fp8_encode(1.0625f, Fp8::e4m3fn), 0x38);
  EXPECT_EQ(fp8_encode(1.1875f, Fp8::e4m3fn), 0x3A);
  EXPECT_EQ(fp8_encode(-1.1875f, Fp8::e4m3fn), 0xBA);
  EXPECT_EQ(fp8_encode(std::nextafter(1.0625f, 2.0f), Fp8::e4m3fn), 0x39) << "just above a tie rounds up";
  // Subnormal ties: half the smallest subnormal rounds to 0, 1.5 of it to 2 (0x02).
  EXPECT_EQ(fp8_encode(pow2(-10), Fp8::e4m3fn), 0x00);
  EXPECT_EQ(fp8_encode(1.5f * pow2(-9), Fp8::e4m3fn), 0x02);
  EXPECT_EQ(fp8_encode(pow2(-11), Fp8::e4m3fnuz), 0x00);
  EXPECT_EQ(fp8_encode(pow2(-17), Fp8::e5m2), 0x00);
  // Carry into the next binade: 1.9375 (between 1.875 = 0x3F and 2.0 = 0x40) goes to even 0x40.
  EXPECT_EQ(fp8_encode(1.9375f, Fp8::e4m3fn), 0x40);
  // e5m2 near 1: spacing 1/4; 1.125 ties 0x3C (even) / 0x3D, 1.375 ties 0x3D / 0x3E (even).
  EXPECT_EQ(fp8_encode(1.125f, Fp8::e5m2), 0x3C);
  EXPECT_EQ(fp8_encode(1.375f, Fp8::e5m2), 0x3E);
}

TEST(Fp8Encode, SaturationAndNonFinite) {
  const float big = std::numeric_limits<float>::max(), qnan = std::numeric_limits<float>::quiet_NaN();
  const float snan = std::bit_cast<float>(0x7F800001u), neg_nan = std::bit_cast<float>(0xFFC00000u);
  struct Row { Fp8 e; float in; std::uint8_t out; const char* what; };
  const Row rows[] = {
      {Fp8::e4m3fn, 448.0f, 0x7E, "max exact"},
      {Fp8::e4m3fn, 464.0f, 0x7E, "tie between max and the NaN code saturates"},
      {Fp8::e4m3fn, 1e6f, 0x7E, "overflow saturates"},
      {Fp8::e4m3fn, -big, 0xFE, "-FLT_MAX saturates"},
      {Fp8::e4m3fn, kInf, 0x7E, "+Inf: no Inf code, +max"},
      {Fp8::e4m3fn, -kInf, 0xFE, "-Inf: -max"},
      {Fp8::e4m3fn, -0.0f, 0x80, "-0 kept"},
      {Fp8::e4m3fn, -1e-9f, 0x80, "negative underflow to -0"},
      {Fp8::e4m3fnuz, 240.0f, 0x7F, "max exact, 0x7F finite"},
      {Fp8::e4m3fnuz, 248.0f, 0x7F, "overflow saturates"},
      {Fp8::e4m3fnuz, kInf, 0x7F, "+Inf: +max"},
      {Fp8::e4m3fnuz, -kInf, 0xFF, "-Inf: -max (0xFF = -240)"},
      {Fp8::e4m3fnuz, -0.0f, 0x00, "no -0: 0x80 is NaN"},
      {Fp8::e4m3fnuz, -1e-9f, 0x00, "negative underflow to +0"},
      {Fp8::e5m2, 57344.0f, 0x7B, "max exact"},
      {Fp8::e5m2, 61440.0f, 0x7B, "IEEE would round this tie to Inf; saturates"},
      {Fp8::e5m2, big, 0x7B, "FLT_MAX saturates"},
      {Fp8::e5m2, kInf, 0x7C, "+Inf kept"},
      {Fp8::e5m2, -kInf, 0xFC, "-Inf kept"},
      {Fp8::e5m2, -0.0f, 0x80, "-0 kept"},
  };
  for (const Row& r : rows) EXPECT_EQ(fp8_encode(r.in, r.e), r.out) << name(r.e) << ": " << r.what;
  for (Fp8 e : kAll)
    for (float n : {qnan, snan, neg_nan}) EXPECT_EQ(fp8_encode(n, e), fp8_format(e).nan_code) << name(e);
  EXPECT_EQ(fp8_format(Fp8::e4m3fn).nan_code, 0x7F);
  EXPECT_EQ(fp8_format(Fp8::e4m3fnuz).nan_code, 0x80);
  EXPECT_EQ(fp8_format(Fp8::e5m2).nan_code, 0x7E);
}

TEST(Fp8Dtype, NamesSizesLimitsAndStorage) {
  const DType all[] = {DType::fp8_e4m3fn, DType::fp8_e4m3fnuz, DType::fp8_e5m2};
  for (DType t : all) {
    EXPECT_TRUE(is_fp8(t));
    EXPECT_EQ(dtype_size(t), 1u);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
    EXPECT_EQ(static_cast<int>(t), static_cast<int>(static_cast<Fp8>(static_cast<std::uint8_t>(t))));
  }
  EXPECT_EQ(static_cast<int>(DType::fp8_e4m3fn), PACHECK_DTYPE_FP8_E4M3FN);
  EXPECT_EQ(static_cast<int>(DType::fp8_e4m3fnuz), PACHECK_DTYPE_FP8_E4M3FNUZ);
  EXPECT_EQ(static_cast<int>(DType::fp8_e5m2), PACHECK_DTYPE_FP8_E5M2);
  EXPECT_EQ(parse_dtype("float8_e4m3fnuz"), DType::fp8_e4m3fnuz);
  EXPECT_FALSE(is_fp8(DType::bf16));
  EXPECT_EQ(dtype_max_finite(DType::fp8_e4m3fn), 448.0);
  EXPECT_EQ(dtype_max_finite(DType::fp8_e4m3fnuz), 240.0);
  EXPECT_EQ(dtype_max_finite(DType::fp8_e5m2), 57344.0);
  EXPECT_EQ(to_bits(1.0f, DType::fp8_e4m3fnuz), 0x40u);
  EXPECT_EQ(from_bits(0x7F, DType::fp8_e4m3fnuz), 240.0f);
  EXPECT_TRUE(std::isnan(from_bits(0x7F, DType::fp8_e4m3fn)));
  // One byte per element, neighbours untouched.
  std::vector<std::uint8_t> buf(4, 0xAA);
  store(buf.data(), 1, DType::fp8_e5m2, 1.0f);
  EXPECT_EQ(buf, (std::vector<std::uint8_t>{0xAA, 0x3C, 0xAA, 0xAA}));
  EXPECT_EQ(load(buf.data(), 1, DType::fp8_e5m2), 1.0f);
  EXPECT_EQ(load_bits(buf.data(), 0, DType::fp8_e5m2), 0xAAu);
}

TEST(Fp8Poison, PatternTable) {
  struct Row { Poison p; DType t; std::uint32_t bits; };
  const Row rows[] = {
      {Poison::nan, DType::fp8_e4m3fn, 0x7F},       {Poison::nan, DType::fp8_e4m3fnuz, 0x80},
      {Poison::nan, DType::fp8_e5m2, 0x7E},         {Poison::pinf, DType::fp8_e5m2, 0x7C},
      {Poison::ninf, DType::fp8_e5m2, 0xFC},        {Poison::max_finite, DType::fp8_e4m3fn, 0x7E},
      {Poison::max_finite, DType::fp8_e4m3fnuz, 0x7F}, {Poison::max_finite, DType::fp8_e5m2, 0x7B},
      {Poison::big, DType::fp8_e4m3fn, 0x7E},       {Poison::big, DType::fp8_e4m3fnuz, 0x7F},
      {Poison::big, DType::fp8_e5m2, 0x71},         {Poison::zero, DType::fp8_e4m3fnuz, 0x00},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(poison_unsupported(r.p, r.t), "") << poison_name(r.p) << " " << dtype_name(r.t);
    EXPECT_EQ(poison_bits(r.p, r.t), r.bits) << poison_name(r.p) << " " << dtype_name(r.t);
  }
  EXPECT_EQ(from_bits(poison_bits(Poison::big, DType::fp8_e5m2), DType::fp8_e5m2), 10240.0f);
  // NaN poison decodes to NaN and 'max' to a finite value in every encoding; 0x7F is NaN in e4m3fn only.
  for (DType t : {DType::fp8_e4m3fn, DType::fp8_e4m3fnuz, DType::fp8_e5m2}) {
    EXPECT_TRUE(std::isnan(from_bits(poison_bits(Poison::nan, t), t))) << dtype_name(t);
    EXPECT_TRUE(std::isfinite(from_bits(poison_bits(Poison::max_finite, t), t))) << dtype_name(t);
  }
  // +-Inf where there is no Inf code: refused with a reason naming 'max', never silently written as max.
  for (DType t : {DType::fp8_e4m3fn, DType::fp8_e4m3fnuz})
    for (Poison p : {Poison::pinf, Poison::ninf}) {
      const std::string why = poison_unsupported(p, t);
      EXPECT_NE(why.find("no Inf"), std::string::npos) << why;
      EXPECT_NE(why.find("'max'"), std::string::npos) << why;
      EXPECT_THROW(poison_bits(p, t), std::invalid_argument);
      EXPECT_THROW(check_fault(FaultSpec{p, Target::v, Region::tail}, t), std::invalid_argument);
    }
  EXPECT_NO_THROW(check_fault(FaultSpec{Poison::pinf, Target::v, Region::tail}, DType::fp8_e5m2));
  EXPECT_NO_THROW(check_fault(FaultSpec{Poison::pinf, Target::v, Region::tail}, DType::bf16));
}

}  // namespace
}  // namespace pacheck
