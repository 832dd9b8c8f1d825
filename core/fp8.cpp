#include "core/fp8.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace pacheck {

const Fp8Format& fp8_format(Fp8 e) {
  // exp, man, bias, max code, NaN, Inf, -0, max
  static const Fp8Format e4m3fn{4, 3, 7, 0x7E, 0x7F, false, true, 448.0f};
  static const Fp8Format e4m3fnuz{4, 3, 8, 0x7F, 0x80, false, false, 240.0f};
  static const Fp8Format e5m2{5, 2, 15, 0x7B, 0x7E, true, true, 57344.0f};
  switch (e) {
    case Fp8::e4m3fn: return e4m3fn;
    case Fp8::e4m3fnuz: return e4m3fnuz;
    case Fp8::e5m2: return e5m2;
  }
  throw std::invalid_argument("fp8_format: unknown encoding");
}

bool fp8_is_nan(std::uint8_t code, Fp8 e) {
  switch (e) {
    case Fp8::e4m3fn: return (code & 0x7F) == 0x7F;
    case Fp8::e4m3fnuz: return code == 0x80;
    case Fp8::e5m2: return (code & 0x7F) > 0x7C;
  }
  return false;
}

std::uint8_t fp8_encode(float v, Fp8 e) {
  const Fp8Format& f = fp8_format(e);
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const std::uint32_t mag = u & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return f.nan_code;
  if (mag == 0x7F800000u) return sign | (f.has_inf ? std::uint8_t{0x7C} : f.max_code);
  if (std::bit_cast<float>(mag) >= f.max_finite) return sign | f.max_code;

  // |v| = m * 2^(E - 23) with m holding the implicit bit (fp32 subnormals: E = -126, no implicit bit).
  int E = static_cast<int>(mag >> 23) - 127;
  std::uint32_t m = mag & 0x7FFFFFu;
  if (E == -127) E = -126;
  else m |= 0x800000u;
  // The fp8 exponent the result is counted in: the value's own, or the subnormal exponent 1 - bias
  // below it. r = |v| / 2^(te - man_bits), rounded to nearest even, is then the significand.
  const int emin = 1 - f.bias;
  int te = std::max(E, emin);
  const int shift = 23 - f.man_bits + (te - E);  // >= 20: always drops bits
  std::uint32_t r = 0;
  if (shift < 25) {  // otherwise m < 2^24 <= half an ulp: rounds to zero, never a tie
    const std::uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    r = m >> shift;
    if (rem > half || (rem == half && (r & 1u))) ++r;
  }
  if (r >= (2u << f.man_bits)) {  // rounding carried into the next binade (r == 2^(man_bits+1))
    r >>= 1;
    ++te;
  }
  std::uint32_t code;
  if (r < (1u << f.man_bits)) code = r;  // subnormal or zero (te == emin)
  else code = (static_cast<std::uint32_t>(te + f.bias) << f.man_bits) | (r - (1u << f.man_bits));
  // |v| < max_finite and max_finite is on the grid, so code <= max_code here.
  if (code == 0) return f.has_negative_zero ? sign : std::uint8_t{0};
  return static_cast<std::uint8_t>(sign | code);
}

float fp8_decode(std::uint8_t code, Fp8 e) {
  const Fp8Format& f = fp8_format(e);
  if (fp8_is_nan(code, e)) return std::numeric_limits<float>::quiet_NaN();
  const bool neg = (code & 0x80u) != 0;
  const int mag = code & 0x7F;
  if (f.has_inf && mag == 0x7C) return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const int biased = mag >> f.man_bits, man = mag & ((1 << f.man_bits) - 1);
  const float v = biased == 0 ? std::ldexp(static_cast<float>(man), 1 - f.bias - f.man_bits)
                              : std::ldexp(static_cast<float>((1 << f.man_bits) + man), biased - f.bias - f.man_bits);
  return neg ? -v : v;
}

const std::array<float, 256>& fp8_decode_table(Fp8 e) {
  auto build = [](Fp8 enc) {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = fp8_decode(static_cast<std::uint8_t>(c), enc);
    return t;
  };
  static const std::array<float, 256> e4m3fn = build(Fp8::e4m3fn), e4m3fnuz = build(Fp8::e4m3fnuz),
                                      e5m2 = build(Fp8::e5m2);
  switch (e) {
    case Fp8::e4m3fn: return e4m3fn;
    case Fp8::e4m3fnuz: return e4m3fnuz;
    case Fp8::e5m2: return e5m2;
  }
  throw std::invalid_argument("fp8_decode_table: unknown encoding");
}

}  // namespace pacheck
