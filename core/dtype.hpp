// Element types of query, KV cache and output, and exact conversions between them and fp32.
// The fp8 types are KV-cache encodings only (docs/FP8.md); core/fp8.hpp defines them.
#pragma once

#include <cstddef>
#include <cstdint>
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
/// Size of one element in bytes (4 for f32, 2 for f16 and bf16, 1 for fp8); throws std::invalid_argument for
/// a value that is no DType.
std::size_t dtype_size(DType t);
/// Lower-case name used in case ids and suite files: "f32", "f16", "bf16", "fp8_e4m3fn", "fp8_e4m3fnuz",
/// "fp8_e5m2".
std::string_view dtype_name(DType t);
/// Parses a name written by dtype_name() (or "float32", "float8_e4m3fn", ... as PyTorch spells them);
/// throws std::invalid_argument naming the text otherwise.
DType parse_dtype(std::string_view s);
/// Largest finite value of the type (f32 3.40282347e38, f16 65504, bf16 3.38953139e38, fp8_e4m3fn 448,
/// fp8_e4m3fnuz 240, fp8_e5m2 57344).
double dtype_max_finite(DType t);

/// Rounds an fp32 value to `t` (round to nearest, ties to even; f16 subnormals kept) and returns the bit
/// pattern in the low bits of the result. f16/bf16: NaN stays NaN, Inf stays Inf, overflow gives Inf
/// (Eigen's `Eigen::half` / `Eigen::bfloat16`, which implement IEEE RNE). fp8: saturating, as
/// core/fp8.hpp states per encoding (overflow and, without an Inf code, Inf give +-max).
std::uint32_t to_bits(float v, DType t);
/// Decodes a bit pattern of type `t` to fp32 exactly (every f16/bf16/fp8 value is representable).
float from_bits(std::uint32_t bits, DType t);
/// Rounds `v` to `t` and back: the value a tensor of type `t` stores for `v`.
inline float round_to(float v, DType t) { return from_bits(to_bits(v, t), t); }

/// Writes element `i` of a raw buffer of type `t` (host memory).
void store(void* base, std::size_t i, DType t, float v);
/// Writes a raw bit pattern as element `i` of a buffer of type `t`.
void store_bits(void* base, std::size_t i, DType t, std::uint32_t bits);
/// Reads element `i` of a raw buffer of type `t` as fp32.
float load(const void* base, std::size_t i, DType t);
/// Reads the raw bit pattern of element `i`.
std::uint32_t load_bits(const void* base, std::size_t i, DType t);

/// A raw bit pattern of type `t` (sign-magnitude) as a position on the ordered integer line: one step per
/// representable value, -0 and +0 both 0, negative values below zero. ulp_distance and the comparator's
/// rounding-bias steps are differences of these.
std::int64_t ordered_bits(std::uint32_t bits, DType t);

/// Distance in units in the last place between two values of type `t`, on the ordered integer line
/// (so -0 and +0 are 0 apart, and adjacent representable values 1 apart). NaN in either gives UINT64_MAX.
std::uint64_t ulp_distance(float a, float b, DType t);

}  // namespace pacheck
