// fp8 KV-cache elements of the GPU decode kernels: the three encodings as distinct one-byte element types and
// their exact decode to fp32 by bit arithmetic (no table, no runtime intrinsic), so the same functions
// compile with nvcc, hipcc and the host compiler. tests/test_gpu_fp8_decode.cpp checks them on the CPU for
// all 256 codes of every encoding against core/fp8.cpp; tests/test_gpu_kernels.cpp checks the device
// path (16-byte load + expand16) the kernels use.
//
// Encodings (docs/FP8.md has the table; core/fp8.hpp the reference):
//   e4m3fn    1/4/3, bias 7:  NaN 0x7F and 0xFF, no Inf, -0 is 0x80, largest 0x7E = 448.
//   e4m3fnuz  1/4/3, bias 8:  NaN 0x80 only, no Inf, no -0, largest 0x7F = 240.
//   e5m2      1/5/2, bias 15: Inf 0x7C/0xFC, NaN 0x7D-0x7F and 0xFD-0xFF, -0 is 0x80, largest 0x7B = 57344.
// Every NaN code decodes to the quiet fp32 NaN 0x7FC00000 (what the oracle's decode returns), every other
// code to its exact value (fp8 values are all fp32 values, subnormals included, without fp32 denormals:
// the smallest is e5m2's 2^-16).
//
// This header is plain C++17 when no GPU compiler is present (for the host-side test); under nvcc/hipcc it
// also specialises expand16 (kernels/gpu/gpu_runtime.hpp) for the fp8 element types: one 16-byte vector =
// 16 codes -> 16 fp32 values.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#include "kernels/gpu/gpu_runtime.hpp"
#define PACHECK_FP8_FN __host__ __device__ __forceinline__
#else
#define PACHECK_FP8_FN inline
#endif

namespace pacheck::gpu {

/// Cache element types of an fp8 KV cache (one byte each: 16 per 16-byte vector, so x = 16 for the vllm
/// key layout). `bits` is the stored code. kind names the pacheck_dtype / DType code of the encoding.
struct fp8_e4m3fn_t {
  std::uint8_t bits;
  static constexpr int kind = 3;  // PACHECK_DTYPE_FP8_E4M3FN
};
struct fp8_e4m3fnuz_t {
  std::uint8_t bits;
  static constexpr int kind = 4;  // PACHECK_DTYPE_FP8_E4M3FNUZ
};
struct fp8_e5m2_t {
  std::uint8_t bits;
  static constexpr int kind = 5;  // PACHECK_DTYPE_FP8_E5M2
};
static_assert(sizeof(fp8_e4m3fn_t) == 1 && sizeof(fp8_e4m3fnuz_t) == 1 && sizeof(fp8_e5m2_t) == 1,
              "fp8 element types are one byte");

/// True for the three fp8 element types.
template <class C>
inline constexpr bool kIsFp8 = false;
template <> inline constexpr bool kIsFp8<fp8_e4m3fn_t> = true;
template <> inline constexpr bool kIsFp8<fp8_e4m3fnuz_t> = true;
template <> inline constexpr bool kIsFp8<fp8_e5m2_t> = true;

/// fp32 from its bit pattern (device: the runtime's bit cast; host: memcpy).
PACHECK_FP8_FN float fp8_bits_to_f32(std::uint32_t b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

inline constexpr std::uint32_t kFp8QuietNan = 0x7FC00000u;

/// Value of a finite, non-special code of an encoding with MAN mantissa bits and exponent bias BIAS: normal
/// codes move exponent and mantissa into fp32's fields (rebiased); subnormal codes (exponent field 0) are
/// man * 2^(1 - BIAS - MAN), an exact product (a small integer times a power of two, a normal fp32
/// number). The sign is applied by negation, exact too (0x80 gives -0).
template <int MAN, int BIAS>
PACHECK_FP8_FN float fp8_finite_to_f32(std::uint32_t c) {
  const std::uint32_t mag = c & 0x7Fu, e = mag >> MAN, m = mag & ((1u << MAN) - 1u);
  constexpr std::uint32_t kSubnormalUnit = static_cast<std::uint32_t>(1 - BIAS - MAN + 127) << 23;
  const float v = e != 0 ? fp8_bits_to_f32(((e + 127u - BIAS) << 23) | (m << (23 - MAN)))
                         : static_cast<float>(m) * fp8_bits_to_f32(kSubnormalUnit);
  return (c & 0x80u) ? -v : v;
}

/// Exact decode of one e4m3fn code (NaN: 0x7F, 0xFF).
PACHECK_FP8_FN float fp8_e4m3fn_to_f32(std::uint8_t c) {
  if ((c & 0x7Fu) == 0x7Fu) return fp8_bits_to_f32(kFp8QuietNan);
  return fp8_finite_to_f32<3, 7>(c);
}

/// Exact decode of one e4m3fnuz code (NaN: 0x80 only; 0x7F = 240 is finite; no -0).
PACHECK_FP8_FN float fp8_e4m3fnuz_to_f32(std::uint8_t c) {
  if (c == 0x80u) return fp8_bits_to_f32(kFp8QuietNan);
  return fp8_finite_to_f32<3, 8>(c);
}

/// Exact decode of one e5m2 code (Inf: 0x7C / 0xFC; NaN: 0x7D-0x7F, 0xFD-0xFF).
PACHECK_FP8_FN float fp8_e5m2_to_f32(std::uint8_t c) {
  const std::uint32_t mag = c & 0x7Fu, sign = static_cast<std::uint32_t>(c & 0x80u) << 24;
  if (mag > 0x7Cu) return fp8_bits_to_f32(kFp8QuietNan);
  if (mag == 0x7Cu) return fp8_bits_to_f32(sign | 0x7F800000u);
  return fp8_finite_to_f32<2, 15>(c);
}

/// Decode of one code of element type C (one of the fp8 types above).
template <class C>
PACHECK_FP8_FN float fp8_to_f32(std::uint8_t c) {
  static_assert(kIsFp8<C>, "fp8_to_f32: C must be an fp8 element type");
  if constexpr (C::kind == 3) return fp8_e4m3fn_to_f32(c);
  else if constexpr (C::kind == 4) return fp8_e4m3fnuz_to_f32(c);
  else return fp8_e5m2_to_f32(c);
}

#if defined(__CUDACC__) || defined(__HIPCC__)
/// Expands one 16-byte vector of fp8 codes (code i in byte i, little-endian words) into 16 fp32 values.
template <class C>
PACHECK_DEVICE void expand16_fp8(const uint4& v, float* out) {
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int b = 0; b < 4; ++b) out[4 * i + b] = fp8_to_f32<C>(static_cast<std::uint8_t>(w[i] >> (8 * b)));
  }
}
template <>
PACHECK_DEVICE void expand16<fp8_e4m3fn_t>(const uint4& v, float* out) { expand16_fp8<fp8_e4m3fn_t>(v, out); }
template <>
PACHECK_DEVICE void expand16<fp8_e4m3fnuz_t>(const uint4& v, float* out) { expand16_fp8<fp8_e4m3fnuz_t>(v, out); }
template <>
PACHECK_DEVICE void expand16<fp8_e5m2_t>(const uint4& v, float* out) { expand16_fp8<fp8_e5m2_t>(v, out); }
#endif

}  // namespace pacheck::gpu
