// Element types of query, KV cache and output, and exact conversions between them and fp32.
// The fp8 types are KV-cache encodings only (docs/FP8.md); core/fp8.hpp defines them.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "pacheck/kernel_abi.h"

namespace pacheck {

/// Element type of a tensor. Values match `pacheck_dtype` in the plugin C ABI.
enum class DType : std::uint8_t {
  f32 = PACHECK_DTYPE_F32,
  f16 = PACHECK_DTYPE_F16,
  bf16 = PACHECK_DTYPE_BF16,
  fp8_e4m3fn = PACHECK_DTYPE_FP8_E4M3FN,      ///< OCP OFP8 E4M3: NaN 0x7F/0xFF, no Inf, max 448
  fp8_e4m3fnuz = PACHECK_DTYPE_FP8_E4M3FNUZ,  ///< AMD/Graphcore: NaN 0x80 only, no -0, max 240 (0x7F)
  fp8_e5m2 = PACHECK_DTYPE_FP8_E5M2,          ///< OCP OFP8 E5M2: IEEE-like, Inf and NaN, max 57344
};

/// True for the three fp8 encodings (KV-cache dtypes only).
constexpr bool is_fp8(DType t) {
  return t == DType::fp8_e4m3fn || t == DType::fp8_e4m3fnuz || t == DType::fp8_e5m2;
}

/// One row of dtype_table().
struct DTypeInfo {
  DType value;
  std::string_view name;     ///< as case ids and suite files spell it ("bf16")
  std::string_view aliases;  ///< other accepted spellings, space-separated (PyTorch's "bfloat16")
  std::size_t size;          ///< bytes per element
};
/// f32, f16, bf16, fp8_e4m3fn, fp8_e4m3fnuz, fp8_e5m2.
std::span<const DTypeInfo> dtype_table();
/// Throws std::invalid_argument("dtype_size: unknown dtype"): dtype_size's error, out of line.
[[noreturn]] void throw_unknown_dtype();
/// Size of one element in bytes (4 for f32, 2 for f16 and bf16, 1 for fp8); throws std::invalid_argument for
/// a value that is no DType. Inline: paging, fault injection and the kernels call it per element.
inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::fp8_e4m3fn:
    case DType::fp8_e4m3fnuz:
    case DType::fp8_e5m2: return 1;
  }
  throw_unknown_dtype();
}
/// Lower-case name used in case ids and suite files: "f32", "f16", "bf16", "fp8_e4m3fn", "fp8_e4m3fnuz",
/// "fp8_e5m2".
std::string_view dtype_name(DType t);
/// Parses a name written by dtype_name() (or "float32", "float8_e4m3fn", ... as PyTorch spells them);
/// throws std::invalid_argument naming the text otherwise.
DType parse_dtype(std::string_view s);
/// Largest finite value of the type (f32 3.40282347e38, f16 65504, bf16 3.38953139e38, fp8_e4m3fn 448,
/// fp8_e4m3fnuz 240, fp8_e5m2 57344).
double dtype_max_finite(DType t);

/// fp32 -> IEEE binary16 bits, round to nearest, ties to even, subnormals kept; overflow gives +-Inf, NaN
/// gives the quiet NaN 0x7E00 with the input's sign (Eigen::half's conversion, bit for bit: tests/test_dtype.cpp
/// compares every case with to_bits_reference). Integer arithmetic only, so the rounding mode and FTZ/DAZ
/// do not matter.
inline std::uint16_t f32_to_f16_bits(float v) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;     // NaN
  if (a >= 0x47800000u) return sign | 0x7C00u;    // |v| >= 2^16 (Inf included): +-Inf
  if (a >= 0x38800000u) {                         // |v| >= 2^-14: a normal f16 (or Inf once rounded up)
    std::uint32_t h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3FFu);
    const std::uint32_t rest = a & 0x1FFFu;       // the 13 bits dropped; 0x1000 is half an f16 ulp
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent, to Inf at most
    return static_cast<std::uint16_t>(sign | h);
  }
  // Subnormal or zero: the result counts units of 2^-24. |v| = mant * 2^(e - 150), so |v| / 2^-24 =
  // mant / 2^(126 - e).
  const std::uint32_t e = a >> 23;
  if (e < 102) return sign;                       // |v| < 2^-25: rounds to zero (2^-25 itself is the tie)
  const std::uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  const std::uint32_t shift = 126u - e;           // 14 .. 24
  std::uint32_t q = mant >> shift;
  const std::uint32_t rest = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // 0x400 is the smallest normal: still right
  return static_cast<std::uint16_t>(sign | q);
}

/// IEEE binary16 bits -> fp32, exactly (NaN payloads kept in the top of the fp32 mantissa, as Eigen::half).
inline float f16_bits_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | m << 13);  // Inf, NaN
  if (e != 0) return std::bit_cast<float>(sign | (e + 112u) << 23 | m << 13);
  if (m == 0) return std::bit_cast<float>(sign);
  // Subnormal m * 2^-24: shift the leading 1 of m to bit 10 (the implicit bit) and lower the exponent.
  const int s = 11 - std::bit_width(m);
  return std::bit_cast<float>(sign | static_cast<std::uint32_t>(113 - s) << 23 | ((m << s) & 0x3FFu) << 13);
}

/// f16_bits_to_f32 of every one of the 65,536 bit patterns, indexed by the bits (256 KiB, built on first use):
/// the CPU kernels' f16 loads, one lookup per element instead of the branches.
const std::array<float, 65536>& f16_decode_table();

/// fp32 -> bfloat16 bits, round to nearest, ties to even; NaN gives 0x7FC0 / 0xFFC0 by sign (Eigen::bfloat16's
/// conversion, bit for bit).
inline std::uint16_t f32_to_bf16_bits(float v) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u & 0x80000000u) ? 0xFFC0u : 0x7FC0u;
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/// bfloat16 bits -> fp32: bf16 is the top half of an fp32.
inline float bf16_bits_to_f32(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

/// to_bits and from_bits of the fp8 encodings (core/fp8.hpp), out of line.
std::uint32_t fp8_to_bits(float v, DType t);
float fp8_from_bits(std::uint32_t bits, DType t);

/// Rounds an fp32 value to `t` (round to nearest, ties to even; f16 subnormals kept) and returns the bit
/// pattern in the low bits of the result. f16/bf16: NaN stays NaN, Inf stays Inf, overflow gives Inf
/// (bit for bit Eigen's `Eigen::half` / `Eigen::bfloat16`, which implement IEEE RNE). fp8: saturating, as
/// core/fp8.hpp states per encoding (overflow and, without an Inf code, Inf give +-max). Inline for f32, f16
/// and bf16: paging and the CPU kernels convert per element.
inline std::uint32_t to_bits(float v, DType t) {
  switch (t) {
    case DType::f32: return std::bit_cast<std::uint32_t>(v);
    case DType::f16: return f32_to_f16_bits(v);
    case DType::bf16: return f32_to_bf16_bits(v);
    default: return fp8_to_bits(v, t);
  }
}
/// Decodes a bit pattern of type `t` to fp32 exactly (every f16/bf16/fp8 value is representable).
inline float from_bits(std::uint32_t bits, DType t) {
  switch (t) {
    case DType::f32: return std::bit_cast<float>(bits);
    case DType::f16: return f16_bits_to_f32(static_cast<std::uint16_t>(bits));
    case DType::bf16: return bf16_bits_to_f32(static_cast<std::uint16_t>(bits));
    default: return fp8_from_bits(bits, t);
  }
}
/// The conversions as they were before the inline ones: through Eigen::half / Eigen::bfloat16 (and the fp8
/// codecs). Kept for tests/test_dtype.cpp, which holds to_bits / from_bits to them bit for bit.
std::uint32_t to_bits_reference(float v, DType t);
float from_bits_reference(std::uint32_t bits, DType t);

/// Rounds `v` to `t` and back: the value a tensor of type `t` stores for `v`.
inline float round_to(float v, DType t) { return from_bits(to_bits(v, t), t); }

/// Writes a raw bit pattern as element `i` of a buffer of type `t` (the low dtype_size(t) bytes of `bits`).
inline void store_bits(void* base, std::size_t i, DType t, std::uint32_t bits) {
  switch (dtype_size(t)) {
    case 4: std::memcpy(static_cast<char*>(base) + 4 * i, &bits, 4); break;
    case 2: {
      const auto b16 = static_cast<std::uint16_t>(bits);
      std::memcpy(static_cast<char*>(base) + 2 * i, &b16, 2);
      break;
    }
    default: static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(bits);
  }
}
/// Reads the raw bit pattern of element `i` of a buffer of type `t`.
inline std::uint32_t load_bits(const void* base, std::size_t i, DType t) {
  switch (dtype_size(t)) {
    case 4: {
      std::uint32_t b;
      std::memcpy(&b, static_cast<const char*>(base) + 4 * i, 4);
      return b;
    }
    case 2: {
      std::uint16_t b16;
      std::memcpy(&b16, static_cast<const char*>(base) + 2 * i, 2);
      return b16;
    }
    default: return static_cast<const std::uint8_t*>(base)[i];
  }
}
/// Writes element `i` of a raw buffer of type `t` (host memory).
inline void store(void* base, std::size_t i, DType t, float v) { store_bits(base, i, t, to_bits(v, t)); }
/// Reads element `i` of a raw buffer of type `t` as fp32.
inline float load(const void* base, std::size_t i, DType t) { return from_bits(load_bits(base, i, t), t); }

/// A raw bit pattern of type `t` (sign-magnitude) as a position on the ordered integer line: one step per
/// representable value, -0 and +0 both 0, negative values below zero. ulp_distance and the comparator's
/// rounding-bias steps are differences of these.
std::int64_t ordered_bits(std::uint32_t bits, DType t);

/// Distance in units in the last place between two values of type `t`, on the ordered integer line
/// (so -0 and +0 are 0 apart, and adjacent representable values 1 apart). NaN in either gives UINT64_MAX.
std::uint64_t ulp_distance(float a, float b, DType t);

}  // namespace pacheck
