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

}  // namespace
}  // namespace pacheck
