#include "core/dtype.hpp"

#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "core/fp8.hpp"
#include "core/table.hpp"

namespace pacheck {

namespace {
constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "f32", "fp32 float32", 4},
    {DType::f16, "f16", "fp16 float16", 2},
    {DType::bf16, "bf16", "bfloat16", 2},
    {DType::fp8_e4m3fn, "fp8_e4m3fn", "float8_e4m3fn", 1},
    {DType::fp8_e4m3fnuz, "fp8_e4m3fnuz", "float8_e4m3fnuz", 1},
    {DType::fp8_e5m2, "fp8_e5m2", "float8_e5m2", 1},
};
}  // namespace

std::span<const DTypeInfo> dtype_table() { return kDTypes; }

void throw_unknown_dtype() { throw std::invalid_argument("dtype_size: unknown dtype"); }

std::string_view dtype_name(DType t) { return name_of(dtype_table(), t); }
DType parse_dtype(std::string_view s) { return parse(dtype_table(), s, "dtype"); }

double dtype_max_finite(DType t) {
  switch (t) {
    case DType::f32: return std::numeric_limits<float>::max();
    case DType::f16: return 65504.0;
    case DType::bf16: return static_cast<double>(std::bit_cast<float>(0x7F7F0000u));
    case DType::fp8_e4m3fn:
    case DType::fp8_e4m3fnuz:
    case DType::fp8_e5m2: return fp8_format(fp8_of(t)).max_finite;
  }
  return 0;
}

std::uint32_t fp8_to_bits(float v, DType t) { return is_fp8(t) ? fp8_encode(v, fp8_of(t)) : 0; }
const std::array<float, 65536>& f16_decode_table() {
  static const std::array<float, 65536> table = [] {
    std::array<float, 65536> t{};
    for (std::uint32_t b = 0; b < t.size(); ++b) t[b] = f16_bits_to_f32(static_cast<std::uint16_t>(b));
    return t;
  }();
  return table;
}

float fp8_from_bits(std::uint32_t bits, DType t) { return is_fp8(t) ? fp8_decode_table(fp8_of(t))[bits & 0xFFu] : 0; }

std::uint32_t to_bits_reference(float v, DType t) {
  switch (t) {
    case DType::f32: return std::bit_cast<std::uint32_t>(v);
    case DType::f16: return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(v));
    case DType::bf16: return Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(v));
    case DType::fp8_e4m3fn:
    case DType::fp8_e4m3fnuz:
    case DType::fp8_e5m2: return fp8_encode(v, fp8_of(t));
  }
  return 0;
}

float from_bits_reference(std::uint32_t bits, DType t) {
  switch (t) {
    case DType::f32: return std::bit_cast<float>(bits);
    case DType::f16:
      return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<std::uint16_t>(bits)));
    case DType::bf16: return std::bit_cast<float>(bits << 16);  // bf16 is the top half of an fp32
    case DType::fp8_e4m3fn:
    case DType::fp8_e4m3fnuz:
    case DType::fp8_e5m2: return fp8_decode_table(fp8_of(t))[bits & 0xFFu];
  }
  return 0;
}

std::int64_t ordered_bits(std::uint32_t bits, DType t) {
  const std::int64_t u = bits;
  const std::int64_t sign = std::int64_t{1} << (static_cast<int>(dtype_size(t)) * 8 - 1);
  return (u & sign) ? -(u & (sign - 1)) : u;
}

std::uint64_t ulp_distance(float a, float b, DType t) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<std::uint64_t>::max();
  const std::int64_t d = ordered_bits(to_bits(a, t), t) - ordered_bits(to_bits(b, t), t);
  return static_cast<std::uint64_t>(d < 0 ? -d : d);
}

}  // namespace pacheck
