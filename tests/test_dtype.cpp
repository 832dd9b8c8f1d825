// bf16 / f16 rounding on known bit patterns, the exact decode, and ULP distance.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.hpp"

namespace pacheck {
namespace {

float f32(std::uint32_t bits) { return std::bit_cast<float>(bits); }

bool is_quiet_nan(std::uint32_t bits, DType t) {
  switch (t) {
    case DType::bf16: return (bits & 0x7F80u) == 0x7F80u && (bits & 0x0040u) != 0;
    case DType::f16: return (bits & 0x7C00u) == 0x7C00u && (bits & 0x0200u) != 0;
    case DType::f32: return (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x00400000u) != 0;
  }
  return false;
}

TEST(Dtype, NamesSizesAndLimits) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_THROW(parse_dtype("fp8"), std::invalid_argument);
  EXPECT_EQ(dtype_max_finite(DType::f16), 65504.0);
  EXPECT_EQ(dtype_max_finite(DType::bf16), 3.3895313892515355e38);  // 0x7F7F: (2 - 2^-7) * 2^127
  EXPECT_EQ(dtype_max_finite(DType::f32), static_cast<double>(std::numeric_limits<float>::max()));
}

struct Rounding {
  DType to;           // target dtype
  std::uint32_t in;   // fp32 bits
  std::uint32_t out;  // expected bits in the target dtype
  const char* what;
};

TEST(Dtype, Bf16AndF16RoundToNearestEven) {
  const std::vector<Rounding> cases = {
      {DType::bf16, 0x3F800000u, 0x3F80u, "1.0 exact"},
      {DType::bf16, 0x3F808000u, 0x3F80u, "tie between 0x3F80 and 0x3F81 goes down to even"},
      {DType::bf16, 0x3F818000u, 0x3F82u, "tie between 0x3F81 and 0x3F82 goes up to even"},
      {DType::bf16, 0x3F807FFFu, 0x3F80u, "just below a tie rounds down"},
      {DType::bf16, 0x3F808001u, 0x3F81u, "just above a tie rounds up"},
      {DType::bf16, 0xBF818000u, 0xBF82u, "negative tie goes to even magnitude"},
      {DType::bf16, 0x3FFF8000u, 0x4000u, "tie carries into the exponent"},
      {DType::bf16, 0x7F7F0000u, 0x7F7Fu, "bf16 max is exact"},
      {DType::bf16, 0x7F7F7FFFu, 0x7F7Fu, "below the tie above bf16 max stays finite"},
      {DType::bf16, 0x7F7F8000u, 0x7F80u, "tie above bf16 max rounds to even = +Inf"},
      {DType::bf16, 0x7F7FFFFFu, 0x7F80u, "FLT_MAX overflows to +Inf"},
      {DType::bf16, 0x7F800000u, 0x7F80u, "+Inf"},
      {DType::bf16, 0xFF800000u, 0xFF80u, "-Inf"},
      {DType::bf16, 0x00000000u, 0x0000u, "+0"},
      {DType::bf16, 0x80000000u, 0x8000u, "-0 keeps its sign"},
      {DType::bf16, 0x00010000u, 0x0001u, "smallest bf16 subnormal is exact"},
      {DType::bf16, 0x00008000u, 0x0000u, "tie between 0 and the smallest subnormal goes to 0"},
      {DType::bf16, 0x00018000u, 0x0002u, "subnormal tie goes up to even"},
      {DType::f16, 0x3F800000u, 0x3C00u, "1.0"},
      {DType::f16, 0x3F801000u, 0x3C00u, "1 + 2^-11: tie goes down to even"},
      {DType::f16, 0x3F803000u, 0x3C02u, "1 + 3*2^-11: tie goes up to even"},
      {DType::f16, 0x3F801001u, 0x3C01u, "just above a tie rounds up"},
      {DType::f16, 0x477FE000u, 0x7BFFu, "65504 = f16 max is exact"},
      {DType::f16, 0x477FEFFFu, 0x7BFFu, "just below 65520 stays 65504"},
      {DType::f16, 0x477FF000u, 0x7C00u, "65520: tie above max rounds to even = +Inf"},
      {DType::f16, 0x49742400u, 0x7C00u, "1e6 overflows to +Inf"},
      {DType::f16, 0xC9742400u, 0xFC00u, "-1e6 overflows to -Inf"},
      {DType::f16, 0x38800000u, 0x0400u, "2^-14: smallest normal"},
      {DType::f16, 0x387FC000u, 0x03FFu, "1023 * 2^-24: largest subnormal"},
      {DType::f16, 0x33800000u, 0x0001u, "2^-24: smallest subnormal"},
      {DType::f16, 0xB3800000u, 0x8001u, "-2^-24"},
      {DType::f16, 0x33000000u, 0x0000u, "2^-25: tie between 0 and 2^-24 goes to 0"},
      {DType::f16, 0x33000001u, 0x0001u, "just above 2^-25 rounds up to the smallest subnormal"},
      {DType::f16, 0x33C00000u, 0x0002u, "3 * 2^-25: subnormal tie goes up to even"},
      {DType::f16, 0x34400000u, 0x0003u, "3 * 2^-24 is an exact subnormal"},
      {DType::f16, 0x32800000u, 0x0000u, "2^-26 underflows to +0"},
      {DType::f16, 0x7F800000u, 0x7C00u, "+Inf"},
  };
  for (const auto& r : cases) EXPECT_EQ(to_bits(f32(r.in), r.to), r.out) << dtype_name(r.to) << ": " << r.what;
}

TEST(Dtype, NanStaysNanAndQuiet) {
  // Payloads whose top mantissa bits are zero are the trap: truncating to bf16 turns 0x7F800001 into
  // 0x7F80, which is +Inf.
  for (std::uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7F80FFFFu, 0x7FA12345u, 0xFF800001u, 0xFFFFFFFFu}) {
    ASSERT_TRUE(std::isnan(f32(nan)));
    for (DType t : {DType::bf16, DType::f16}) {
      const std::uint32_t b = to_bits(f32(nan), t);
      EXPECT_TRUE(is_quiet_nan(b, t)) << std::hex << nan << " -> " << b << " in " << dtype_name(t);
      EXPECT_TRUE(std::isnan(from_bits(b, t)));
      EXPECT_TRUE(std::isnan(round_to(f32(nan), t)));
    }
  }
}

TEST(Dtype, EveryHalfPatternDecodesExactlyAndReencodes) {
  // Exhaustive: each of the 2^16 bf16 and f16 patterns decodes to an fp32 that encodes back to itself
  // (NaNs to some NaN), so the pre-paging tensors' fp32 values are exactly what the cache stores.
  for (DType t : {DType::bf16, DType::f16}) {
    for (std::uint32_t b = 0; b <= 0xFFFFu; ++b) {
      const float v = from_bits(b, t);
      if (std::isnan(v)) {
        ASSERT_TRUE(std::isnan(from_bits(to_bits(v, t), t))) << std::hex << b;
      } else {
        ASSERT_EQ(to_bits(v, t), b) << dtype_name(t) << " " << std::hex << b;
      }
    }
  }
  EXPECT_EQ(from_bits(0x7F7Fu, DType::bf16), static_cast<float>(dtype_max_finite(DType::bf16)));
  EXPECT_EQ(from_bits(0x0001u, DType::f16), std::ldexp(1.0f, -24));
  EXPECT_EQ(from_bits(0x3F800000u, DType::f32), 1.0f);
}

TEST(Dtype, StoreAndLoadRawBuffers) {
  std::vector<std::uint8_t> buf(4 * 3, 0xAB);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    store(buf.data(), 1, t, 1.5f);
    EXPECT_EQ(load(buf.data(), 1, t), 1.5f);
    store_bits(buf.data(), 2, t, to_bits(-2.0f, t));
    EXPECT_EQ(load_bits(buf.data(), 2, t), to_bits(-2.0f, t));
    EXPECT_EQ(load(buf.data(), 2, t), -2.0f);
  }
  // A 2-byte store touches exactly its element.
  std::vector<std::uint8_t> b2(6, 0xAB);
  store(b2.data(), 1, DType::bf16, 1.0f);
  EXPECT_EQ(b2[0], 0xAB);
  EXPECT_EQ(b2[1], 0xAB);
  EXPECT_EQ(b2[4], 0xAB);
  EXPECT_EQ(load_bits(b2.data(), 1, DType::bf16), 0x3F80u);
}

TEST(Dtype, UlpDistance) {
  const float one = 1.0f, two = 2.0f;
  EXPECT_EQ(ulp_distance(one, one, DType::bf16), 0u);
  EXPECT_EQ(ulp_distance(one, from_bits(0x3F81u, DType::bf16), DType::bf16), 1u);
  EXPECT_EQ(ulp_distance(one, two, DType::bf16), 128u);       // 7 mantissa bits
  EXPECT_EQ(ulp_distance(one, two, DType::f16), 1024u);       // 10
  EXPECT_EQ(ulp_distance(one, two, DType::f32), 1u << 23);    // 23
  EXPECT_EQ(ulp_distance(two, one, DType::f16), 1024u) << "symmetric";
  EXPECT_EQ(ulp_distance(0.0f, -0.0f, DType::bf16), 0u);
  EXPECT_EQ(ulp_distance(from_bits(0x0001u, DType::f16), from_bits(0x8001u, DType::f16), DType::f16), 2u)
      << "across zero: -min_sub, 0, +min_sub";
  EXPECT_EQ(ulp_distance(-one, one, DType::bf16), 2u * 0x3F80u);
  EXPECT_EQ(ulp_distance(65504.0f, std::numeric_limits<float>::infinity(), DType::f16), 1u);
  EXPECT_EQ(ulp_distance(std::nanf(""), one, DType::bf16), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(ulp_distance(one, std::nanf(""), DType::f32), std::numeric_limits<std::uint64_t>::max());
}

// The inline f16/bf16/f32 conversions (core/dtype.hpp) against the Eigen-based ones they replaced
// (to_bits_reference, from_bits_reference), bit for bit.
TEST(Dtype, InlineDecodeMatchesReferenceOnEvery16BitPattern) {
  for (DType t : {DType::f16, DType::bf16}) {
    int differ = 0;
    for (std::uint32_t b = 0; b <= 0xFFFFu; ++b) {
      const std::uint32_t got = std::bit_cast<std::uint32_t>(from_bits(b, t));
      const std::uint32_t want = std::bit_cast<std::uint32_t>(from_bits_reference(b, t));
      if (got != want && ++differ <= 5)
        ADD_FAILURE() << dtype_name(t) << " pattern 0x" << std::hex << b << ": inline 0x" << got << ", reference 0x"
                      << want;
      // The round trip through the inline encoder keeps every non-NaN pattern.
      const bool nan = std::isnan(from_bits_reference(b, t));
      if (!nan && to_bits(from_bits(b, t), t) != b && ++differ <= 5)
        ADD_FAILURE() << dtype_name(t) << " pattern 0x" << std::hex << b << " does not re-encode to itself";
    }
    EXPECT_EQ(differ, 0) << dtype_name(t);
  }
}

/// fp32 inputs for the encoders: every 16-bit top half (so every bf16 and f16 exponent, Inf and NaN payloads)
/// with low halves around both rounding points (bit 15 for bf16, bit 12 of the 13 bits f16 drops), the
/// midpoints between neighbouring f16 and bf16 values (ties, subnormal ones and the one past 65504 included)
/// and their neighbours, fp32 subnormals, and pseudo-random patterns.
std::vector<float> encoder_inputs() {
  std::vector<float> v;
  std::vector<std::uint32_t> lows;
  for (std::uint32_t top3 = 0; top3 < 8; ++top3)
    for (std::uint32_t m : {0x0u, 0x1u, 0xFFFu, 0x1000u, 0x1001u, 0x1FFFu}) lows.push_back(top3 << 13 | m);
  for (std::uint32_t hi = 0; hi <= 0xFFFFu; ++hi)
    for (std::uint32_t lo : lows) v.push_back(f32(hi << 16 | lo));
  for (DType t : {DType::f16, DType::bf16})
    for (std::uint32_t b = 0; b < 0x7FFFu; ++b) {  // b and b + 1 both finite or b + 1 the Inf pattern
      const double a = from_bits_reference(b, t), c = from_bits_reference(b + 1, t);
      if (std::isnan(a) || std::isnan(c)) continue;
      const auto mid = static_cast<float>((a + c) / 2);  // exact: one bit more than the type holds
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
        v.push_back(x);
        v.push_back(-x);
      }
    }
  for (std::uint32_t b : {0x1u, 0x2u, 0x7FFFFFu, 0x400000u, 0x33000000u, 0x33000001u, 0x32FFFFFFu, 0x477FF000u,
                          0x477FEFFFu, 0x477FF001u, 0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu})
    for (std::uint32_t s : {0u, 0x80000000u}) v.push_back(f32(b | s));
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < (1 << 20); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v.push_back(f32(static_cast<std::uint32_t>(x >> 16)));
  }
  return v;
}

TEST(Dtype, InlineEncodeMatchesReference) {
  const std::vector<float> inputs = encoder_inputs();
  ASSERT_GT(inputs.size(), 3'000'000u);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    int differ = 0;
    for (float f : inputs) {
      const std::uint32_t got = to_bits(f, t), want = to_bits_reference(f, t);
      if (got != want && ++differ <= 5)
        ADD_FAILURE() << dtype_name(t) << " of fp32 0x" << std::hex << std::bit_cast<std::uint32_t>(f) << ": inline 0x"
                      << got << ", reference 0x" << want;
    }
    EXPECT_EQ(differ, 0) << dtype_name(t);
  }
  // Spot checks that the inputs reach the cases that matter.
  EXPECT_EQ(to_bits(65520.0f, DType::f16), 0x7C00u) << "the tie past 65504 rounds to even: Inf";
  EXPECT_EQ(to_bits(std::ldexp(1.0f, -25), DType::f16), 0x0000u) << "2^-25 ties to 0";
  EXPECT_EQ(to_bits(std::ldexp(3.0f, -25), DType::f16), 0x0002u) << "1.5 * 2^-24 ties to 2 * 2^-24";
  EXPECT_EQ(to_bits(-std::nanf(""), DType::bf16), 0xFFC0u);
}

TEST(Dtype, StoreAndLoadAgreeWithReferenceForEveryType) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::fp8_e4m3fn, DType::fp8_e4m3fnuz, DType::fp8_e5m2}) {
    std::vector<std::uint8_t> buf(4 * 8, 0xAB);
    const float values[] = {0.0f, -1.5f, 3.14159f, 1e-6f, -448.0f, 65504.0f, 1e30f, -0.0f};
    for (std::size_t i = 0; i < 8; ++i) store(buf.data(), i, t, values[i]);
    for (std::size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(load_bits(buf.data(), i, t), to_bits_reference(values[i], t)) << dtype_name(t) << " " << i;
      const float a = load(buf.data(), i, t), b = from_bits_reference(to_bits_reference(values[i], t), t);
      EXPECT_EQ(std::bit_cast<std::uint32_t>(a), std::bit_cast<std::uint32_t>(b)) << dtype_name(t) << " " << i;
    }
    for (std::size_t i = 8 * dtype_size(t); i < buf.size(); ++i) EXPECT_EQ(buf[i], 0xAB) << "wrote past element 7";
  }
}

}  // namespace
}  // namespace pacheck
