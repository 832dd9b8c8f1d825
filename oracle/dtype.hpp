// Element types of query, KV cache and output, and exact conversions between them and fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pacheck/kernel_abi.h"

namespace pacheck {

/// Element type of a tensor. Values match `pacheck_dtype` in the plugin C ABI.
enum class DType : std::uint8_t {
  f32 = PACHECK_DTYPE_F32,
  f16 = PACHECK_DTYPE_F16,
  bf16 = PACHECK_DTYPE_BF16,
};

/// Size of one element in bytes (4 for f32, 2 for f16 and bf16).
std::size_t dtype_size(DType t);
/// Lower-case name used in case ids and suite files: "f32", "f16", "bf16".
std::string_view dtype_name(DType t);
/// Parses a name written by dtype_name(); throws std::invalid_argument naming the text otherwise.
DType parse_dtype(std::string_view s);
/// Largest finite value of the type (f32 3.40282347e38, f16 65504, bf16 3.38953139e38).
double dtype_max_finite(DType t);

/// Rounds an fp32 value to `t` (round to nearest, ties to even; NaN stays NaN, Inf stays Inf, f16
/// subnormals kept) and returns the bit pattern in the low bits of the result.
/// Conversions are Eigen's `Eigen::half` / `Eigen::bfloat16`, which implement IEEE RNE.
std::uint32_t to_bits(float v, DType t);
/// Decodes a bit pattern of type `t` to fp32 exactly (every f16/bf16 value is representable).
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

/// Distance in units in the last place between two values of type `t`, on the ordered integer line
/// (so -0 and +0 are 0 apart, and adjacent representable values 1 apart). NaN in either gives UINT64_MAX.
std::uint64_t ulp_distance(float a, float b, DType t);

}  // namespace pacheck
