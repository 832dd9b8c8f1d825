// The fp8 decode of the GPU kernels (kernels/gpu/fp8.hpp), compiled here by the host compiler: the same
// bit arithmetic nvcc and hipcc compile into the kernels, checked without a GPU against the oracle's decode
// (core/fp8.cpp) for all 256 codes of every encoding, bit for bit (NaN codes: the quiet NaN 0x7FC00000).
// The device path (16-byte load + expand16) is checked in tests/test_gpu_kernels.cpp where a GPU exists.
// Also checks the P.V lane split the fp8 instantiations use (one 16-token vector per lane-row).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "kernels/gpu/fp8.hpp"
#include "kernels/gpu/lane_math.hpp"
#include "core/fp8.hpp"

namespace pacheck::gpu {
namespace {

template <class C>
void expect_all_codes_match(Fp8 e) {
  int nan = 0, inf = 0, neg_zero = 0;
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<std::uint8_t>(code);
    const float got = fp8_to_f32<C>(c), want = fp8_decode(c, e);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
        << "code 0x" << std::hex << code << ": " << got << " vs oracle " << want;
    EXPECT_EQ(std::isnan(got), fp8_is_nan(c, e)) << "code 0x" << std::hex << code;
    nan += std::isnan(got);
    inf += std::isinf(got);
    neg_zero += got == 0.f && std::signbit(got);
  }
  const Fp8Format& f = fp8_format(e);
  EXPECT_EQ(nan, e == Fp8::e4m3fn ? 2 : (e == Fp8::e4m3fnuz ? 1 : 6));
  EXPECT_EQ(inf, f.has_inf ? 2 : 0);
  EXPECT_EQ(neg_zero, f.has_negative_zero ? 1 : 0);
  EXPECT_EQ(fp8_to_f32<C>(f.max_code), f.max_finite);
}

TEST(GpuFp8Decode, AllCodesMatchTheOracle) {
  expect_all_codes_match<fp8_e4m3fn_t>(Fp8::e4m3fn);
  expect_all_codes_match<fp8_e4m3fnuz_t>(Fp8::e4m3fnuz);
  expect_all_codes_match<fp8_e5m2_t>(Fp8::e5m2);
}

TEST(GpuFp8Decode, TheBytesThatDifferBetweenEncodings) {
  EXPECT_TRUE(std::isnan(fp8_e4m3fn_to_f32(0x7F)));
  EXPECT_EQ(fp8_e4m3fnuz_to_f32(0x7F), 240.f);  // finite: a tail holding it must stay harmless
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3fnuz_to_f32(0x80)));  // the only NaN of e4m3fnuz
  EXPECT_TRUE(std::signbit(fp8_e4m3fn_to_f32(0x80)) && fp8_e4m3fn_to_f32(0x80) == 0.f);
  EXPECT_EQ(fp8_e4m3fn_to_f32(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(fp8_e4m3fnuz_to_f32(0x01), std::ldexp(1.f, -10));
  EXPECT_EQ(fp8_e5m2_to_f32(0x01), std::ldexp(1.f, -16));
  EXPECT_EQ(fp8_e5m2_to_f32(0xFC), -INFINITY);
}

// The fp8 instantiations of gpu.paged_v1/v2 use one 16-token V vector per lane-row (VPR 1) for every block
// size they accept (16..256): the split must be exact and tile every such block, for both warp widths.
TEST(GpuFp8Decode, PagedPvSplitForOneByteElements) {
  for (int warp : {32, 64})
    for (int d : {64, 128, 256}) {
      EXPECT_TRUE(lanes::paged_pv_exact(warp, d, 1, 1)) << warp << " " << d;
      const lanes::PagedPv pv = lanes::paged_pv(warp, d, 1, 1);
      EXPECT_EQ(pv.vec_tokens, 16);
      for (int b : {16, 32, 64, 128, 256}) EXPECT_TRUE(lanes::paged_pv_tiles_block(pv, b)) << warp << " " << d << " " << b;
      EXPECT_FALSE(lanes::paged_pv_tiles_block(pv, 8));  // why block 8 is declined at fp8
    }
}

}  // namespace
}  // namespace pacheck::gpu
