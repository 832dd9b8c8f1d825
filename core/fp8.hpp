// The three 8-bit floating-point encodings of an fp8 KV cache, and exact conversions to and from fp32.
//
// Sources:
//  - e4m3fn, e5m2: OCP 8-bit Floating Point Specification (OFP8), revision 1.0, 2023 (the "FN" suffix:
//    finite, with NaN but no Inf).
//  - e4m3fnuz: the AMD / Graphcore variant ("FNUZ": finite, NaN only, unsigned zero), as in MI300's FP8
//    and LLVM's APFloat Float8E4M3FNUZ.
//
//  encoding  sign/exp/man  bias  NaN codes              Inf         -0    largest finite       smallest subnormal
//  e4m3fn    1/4/3         7     0x7F, 0xFF             none        0x80  0x7E = 448            0x01 = 2^-9
//  e4m3fnuz  1/4/3         8     0x80 only              none        none  0x7F = 240            0x01 = 2^-10
//  e5m2      1/5/2         15    0x7D-0x7F, 0xFD-0xFF   0x7C, 0xFC  0x80  0x7B = 57344          0x01 = 2^-16
//
// Encoding from fp32 (fp8_encode) rounds to nearest, ties to even, and saturates:
//  - finite values whose magnitude is at or above the largest finite value become +-max (as serving
//    engines clamp before writing an fp8 cache; a finite value is never turned into Inf or NaN);
//  - +-Inf become +-Inf in e5m2 and +-max in e4m3fn / e4m3fnuz, which have no Inf;
//  - NaN (any sign or payload) becomes the encoding's canonical NaN: e4m3fn 0x7F, e4m3fnuz 0x80,
//    e5m2 0x7E (the top byte of f16's quiet NaN 0x7E00);
//  - in e4m3fnuz, -0 and negative values that round to zero become +0 (0x00): 0x80 is the NaN.
#pragma once

#include <array>
#include <cstdint>

#include "core/dtype.hpp"

namespace pacheck {

/// One fp8 encoding. Values (not names) are the matching pacheck_dtype / DType codes.
enum class Fp8 : std::uint8_t { e4m3fn = 3, e4m3fnuz = 4, e5m2 = 5 };
/// The encoding of an fp8 DType (is_fp8(t)); the codes are the same.
constexpr Fp8 fp8_of(DType t) { return static_cast<Fp8>(static_cast<std::uint8_t>(t)); }

/// Parameters of an fp8 encoding (see the table above).
struct Fp8Format {
  int exp_bits, man_bits, bias;
  std::uint8_t max_code;    ///< magnitude code of the largest finite value
  std::uint8_t nan_code;    ///< canonical NaN
  bool has_inf;             ///< e5m2 only: 0x7C / 0xFC
  bool has_negative_zero;   ///< false for e4m3fnuz, whose 0x80 is NaN
  float max_finite;
};
const Fp8Format& fp8_format(Fp8 e);

/// fp32 -> code, round to nearest even with the saturation rules above.
std::uint8_t fp8_encode(float v, Fp8 e);
/// code -> fp32, exact (every fp8 value is an fp32 value). NaN codes give a quiet fp32 NaN.
float fp8_decode(std::uint8_t code, Fp8 e);
/// The 256 decoded values of an encoding, indexed by code (what fp8_decode returns), for inner loops.
const std::array<float, 256>& fp8_decode_table(Fp8 e);
/// True for the encoding's NaN codes.
bool fp8_is_nan(std::uint8_t code, Fp8 e);

}  // namespace pacheck
