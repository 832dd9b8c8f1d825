// The oracle's tile products (oracle/products_body.inc) compiled three times: for the build's own
// instruction set through Eigen's packet layer ("baseline": SSE2 on a default x86-64 build, NEON on
// aarch64), and, on x86-64, for AVX2+FMA and for AVX-512F through intrinsics. oracle_isa() (oracle.cpp)
// picks one at run time.
//
// Why this cannot put AVX instructions into the baseline path (the ODR hazard of per-ISA code):
// compiling a file with -mavx2 makes every inline function it instantiates (Eigen's packet templates,
// std::vector's members, std::min) an AVX2 copy under the same mangled name as the SSE2 copies other files
// emit; the linker keeps one copy of each, possibly the AVX2 one, and the baseline path then executes AVX2
// instructions (SIGILL on a CPU without them). Here instead:
//  - This file is compiled with the project's ordinary flags, like every other file. The only code built
//    for AVX2 / AVX-512 is the bodies of functions that carry __attribute__((target(...))): every copy of
//    an inline function this file emits out of line (PrefetchCursor::step, Eigen's and the standard
//    library's templates) is a baseline copy, identical in kind to every other file's. Such functions are
//    only ever compiled for AVX inside the target functions they are inlined into.
//  - Every function with a target attribute (the .inc's templates and the Vec operations) is declared in an
//    anonymous namespace: internal linkage, so the linker never merges them with anything, and a
//    per-ISA namespace around it keeps their names apart inside this file too. The intrinsics are
//    GCC's/clang's always-inline header functions (never emitted out of line).
//  - The only external symbols are the accessors at the end, which run no vector code themselves; they
//    return tables of pointers that oracle_isa() hands out only after __builtin_cpu_supports() said the
//    CPU (and the OS, which GCC's check includes through XGETBV) runs that instruction set.
// ci/check-oracle-isa.py checks the object file: every function with a ymm/zmm register is local and in
// one of the per-ISA namespaces.
#include "oracle/products.hpp"

#include <Eigen/Core>

#include <stdexcept>
#include <string>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define PACHECK_ORACLE_X86 1
#include <immintrin.h>
#else
#define PACHECK_ORACLE_X86 0
#endif

namespace pacheck::detail {

// ---- baseline: Eigen's packets for the build's flags (on x86-64 without -march: SSE2, and multiply then
// add, as Eigen's pmadd is without FMA) ----
namespace isa_baseline {
namespace {
namespace ei = Eigen::internal;
/// The SIMD operations products_body.inc uses, on packets P of N values of S: zero, broadcast, unaligned
/// load and store, madd(a, b, c) = a * b + c (fused where the instruction set has FMA), and hsums(a): the
/// packet whose lane i is the sum of the N lanes of a[i] (N packets reduced together, in any order).
/// kTok: tokens per pass of the logits (products_body.inc's logits_tokens), as many as keep the 4 x kTok
/// sums and the kTok rows of K in registers (16 registers on SSE2 / AVX2, 32 on AVX-512).
/// For the softmax (products_body.inc's softmax_columns): add, sub, mul, max (lane-wise; a NaN in `b`
/// is returned) and exp(x) lane-wise, accurate to a few units in the last place for x <= 0 (the softmax's
/// arguments), 0 or the smallest normal value below about -87 (the float baseline: Eigen's pexp, which
/// clamps there), NaN for NaN.
template <class S>
struct Vec {
  using P = typename ei::packet_traits<S>::type;
  static constexpr int N = ei::unpacket_traits<P>::size;
  static constexpr int kTok = 2;
  static constexpr int kPvChunks = 2;
  static P zero() { return ei::pset1<P>(S(0)); }
  static P set1(S x) { return ei::pset1<P>(x); }
  static P load(const S* p) { return ei::ploadu<P>(p); }
  static void store(S* p, P x) { ei::pstoreu(p, x); }
  static P madd(P a, P b, P c) { return ei::pmadd(a, b, c); }
  static P add(P a, P b) { return ei::padd(a, b); }
  static P sub(P a, P b) { return ei::psub(a, b); }
  static P mul(P a, P b) { return ei::pmul(a, b); }
  static P max(P a, P b) { return ei::pmax<Eigen::PropagateNaN>(a, b); }
  static P exp(P x) { return ei::pexp(x); }
  // GCC warns that PacketBlock<__m128> drops the vector type's alignment attribute from the template
  // argument (-Wignored-attributes); Eigen's own uses of PacketBlock do the same, behind -isystem.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
#endif
  using Block = ei::PacketBlock<P, N>;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  static P hsums(const P* a) {  // transpose the N x N block, then add its rows
    Block b;
    for (int i = 0; i < N; ++i) b.packet[i] = a[i];
    ei::ptranspose(b);
    P s = b.packet[0];
    for (int i = 1; i < N; ++i) s = ei::padd(s, b.packet[i]);
    return s;
  }
};
#define PACHECK_ISA_FN
#include "oracle/products_body.inc"
#undef PACHECK_ISA_FN
}  // namespace
}  // namespace isa_baseline

#if PACHECK_ORACLE_X86
// ---- AVX2 + FMA: 8 floats / 4 doubles per packet, fused multiply-add ----
namespace isa_avx2 {
namespace {
#define PACHECK_ISA_FN __attribute__((target("avx2,fma")))
#define PACHECK_ISA_OP __attribute__((target("avx2,fma"), always_inline)) static inline
template <class S>
struct Vec;
template <>
struct Vec<float> {
  using P = __m256;
  static constexpr int N = 8;
  PACHECK_ISA_OP P zero() { return _mm256_setzero_ps(); }
  PACHECK_ISA_OP P set1(float x) { return _mm256_set1_ps(x); }
  PACHECK_ISA_OP P load(const float* p) { return _mm256_loadu_ps(p); }
  PACHECK_ISA_OP void store(float* p, P x) { _mm256_storeu_ps(p, x); }
  static constexpr int kTok = 2;
  static constexpr int kPvChunks = 2;
  PACHECK_ISA_OP P madd(P a, P b, P c) { return _mm256_fmadd_ps(a, b, c); }
  PACHECK_ISA_OP P add(P a, P b) { return _mm256_add_ps(a, b); }
  PACHECK_ISA_OP P sub(P a, P b) { return _mm256_sub_ps(a, b); }
  PACHECK_ISA_OP P mul(P a, P b) { return _mm256_mul_ps(a, b); }
  PACHECK_ISA_OP P max(P a, P b) { return _mm256_max_ps(a, b); }  // vmaxps returns its second operand on NaN
  /// e^x = 2^n e^r with n = round(x log2 e), r = x - n ln 2 (ln 2 in two parts, each product exact with
  /// FMA), e^r by Cephes' degree-7 minimax polynomial on |r| <= ln 2 / 2 (about 1 ulp), and 2^n built in the
  /// exponent field. x is clamped to [-87.34, 88.73] (n in [-126, 128]: 2^128 is inf, the right overflow);
  /// below -87.34 (where e^x < the smallest normal float) the result is 0. NaN stays NaN.
  PACHECK_ISA_OP P exp(P x) {
    const P lo = _mm256_set1_ps(-87.3365402f), hi = _mm256_set1_ps(88.7228394f);
    const P under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);  // false for NaN
    x = _mm256_min_ps(hi, _mm256_max_ps(lo, x));       // NaN passes (the second operand)
    const P n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    P r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    P y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
  }
  /// Three levels of pairwise adds (21 instructions for 8 sums): 128-bit halves, then pairs of lanes,
  /// then lanes. Lane i of the result is the sum of a[i]; the inputs are taken in the order that gives it.
  PACHECK_ISA_OP P hsums(const P* a) {
    P b[4];
    for (int k = 0; k < 4; ++k)  // b[k]: low half a[k]'s 4 partial sums, high half a[k + 4]'s
      b[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[k], a[k + 4], 0x20), _mm256_permute2f128_ps(a[k], a[k + 4], 0x31));
    const P c0 = _mm256_add_ps(_mm256_shuffle_ps(b[0], b[1], 0x44), _mm256_shuffle_ps(b[0], b[1], 0xEE));
    const P c1 = _mm256_add_ps(_mm256_shuffle_ps(b[2], b[3], 0x44), _mm256_shuffle_ps(b[2], b[3], 0xEE));
    return _mm256_add_ps(_mm256_shuffle_ps(c0, c1, 0x88), _mm256_shuffle_ps(c0, c1, 0xDD));
  }
};
template <>
struct Vec<double> {
  using P = __m256d;
  static constexpr int N = 4;
  PACHECK_ISA_OP P zero() { return _mm256_setzero_pd(); }
  PACHECK_ISA_OP P set1(double x) { return _mm256_set1_pd(x); }
  PACHECK_ISA_OP P load(const double* p) { return _mm256_loadu_pd(p); }
  PACHECK_ISA_OP void store(double* p, P x) { _mm256_storeu_pd(p, x); }
  static constexpr int kTok = 2;
  static constexpr int kPvChunks = 2;
  PACHECK_ISA_OP P madd(P a, P b, P c) { return _mm256_fmadd_pd(a, b, c); }
  PACHECK_ISA_OP P hsums(const P* a) {  // 128-bit halves, then hadd: lane i = sum of a[i]
    const P b0 = _mm256_add_pd(_mm256_permute2f128_pd(a[0], a[2], 0x20), _mm256_permute2f128_pd(a[0], a[2], 0x31));
    const P b1 = _mm256_add_pd(_mm256_permute2f128_pd(a[1], a[3], 0x20), _mm256_permute2f128_pd(a[1], a[3], 0x31));
    return _mm256_hadd_pd(b0, b1);
  }
};
#include "oracle/products_body.inc"
#undef PACHECK_ISA_OP
#undef PACHECK_ISA_FN
}  // namespace
}  // namespace isa_avx2

// ---- AVX-512F: 16 floats / 8 doubles per packet, fused multiply-add ----
// GCC 12's avx512fintrin.h initialises its "undefined" vectors from themselves, which -Wmaybe-uninitialized
// reports at every inlined _mm512_reduce_add_* (GCC bug 105593, fixed in GCC 13): silenced for this block.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace isa_avx512 {
namespace {
#define PACHECK_ISA_FN __attribute__((target("avx512f,avx2,fma")))
#define PACHECK_ISA_OP __attribute__((target("avx512f,avx2,fma"), always_inline)) static inline
template <class S>
struct Vec;
template <>
struct Vec<float> {
  using P = __m512;
  static constexpr int N = 16;
  PACHECK_ISA_OP P zero() { return _mm512_setzero_ps(); }
  PACHECK_ISA_OP P set1(float x) { return _mm512_set1_ps(x); }
  PACHECK_ISA_OP P load(const float* p) { return _mm512_loadu_ps(p); }
  PACHECK_ISA_OP void store(float* p, P x) { _mm512_storeu_ps(p, x); }
  static constexpr int kTok = 4;
  static constexpr int kPvChunks = 4;
  PACHECK_ISA_OP P madd(P a, P b, P c) { return _mm512_fmadd_ps(a, b, c); }
  PACHECK_ISA_OP P add(P a, P b) { return _mm512_add_ps(a, b); }
  PACHECK_ISA_OP P sub(P a, P b) { return _mm512_sub_ps(a, b); }
  PACHECK_ISA_OP P mul(P a, P b) { return _mm512_mul_ps(a, b); }
  PACHECK_ISA_OP P max(P a, P b) { return _mm512_max_ps(a, b); }  // vmaxps returns its second operand on NaN
  /// As the AVX2 one, with 2^n applied by vscalefps, which rounds results below the smallest normal float
  /// to the nearest subnormal or 0 as the formula does (x clamped to [-110, 89]: e^-110 rounds to 0,
  /// e^89 to inf).
  PACHECK_ISA_OP P exp(P x) {
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-110.0f), x));  // NaN passes
    const P n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    P r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    P y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, n);
  }
  /// Four levels of pairwise adds (45 instructions for 16 sums): 256-bit halves, 128-bit quarters, pairs of
  /// lanes, lanes. The tree leaves lane 4q + m holding input 4m + q, so the inputs are taken transposed
  /// (x[4m + q] = a[4q + m]) and lane i of the result is the sum of a[i].
  PACHECK_ISA_OP P hsums(const P* a) {
    P b[8];
    for (int k = 0; k < 8; ++k) {
      const int i0 = 2 * k, i1 = 2 * k + 1;  // x indices, transposed to a's
      const P x = a[(i0 % 4) * 4 + i0 / 4], y = a[(i1 % 4) * 4 + i1 / 4];
      b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
    }
    P c[4];
    for (int m = 0; m < 4; ++m)
      c[m] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0x88),
                           _mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0xDD));
    const P d0 = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x44), _mm512_shuffle_ps(c[0], c[1], 0xEE));
    const P d1 = _mm512_add_ps(_mm512_shuffle_ps(c[2], c[3], 0x44), _mm512_shuffle_ps(c[2], c[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(d0, d1, 0x88), _mm512_shuffle_ps(d0, d1, 0xDD));
  }
};
template <>
struct Vec<double> {
  using P = __m512d;
  static constexpr int N = 8;
  PACHECK_ISA_OP P zero() { return _mm512_setzero_pd(); }
  PACHECK_ISA_OP P set1(double x) { return _mm512_set1_pd(x); }
  PACHECK_ISA_OP P load(const double* p) { return _mm512_loadu_pd(p); }
  PACHECK_ISA_OP void store(double* p, P x) { _mm512_storeu_pd(p, x); }
  static constexpr int kTok = 4;
  static constexpr int kPvChunks = 4;
  PACHECK_ISA_OP P madd(P a, P b, P c) { return _mm512_fmadd_pd(a, b, c); }
  /// As the float one, three levels: lane 2q + m holds input x[4m + q] = a[2q + m].
  PACHECK_ISA_OP P hsums(const P* a) {
    P b[4];
    for (int k = 0; k < 4; ++k) {
      const int i0 = 2 * k, i1 = 2 * k + 1;
      const P x = a[(i0 % 4) * 2 + i0 / 4], y = a[(i1 % 4) * 2 + i1 / 4];
      b[k] = _mm512_add_pd(_mm512_shuffle_f64x2(x, y, 0x44), _mm512_shuffle_f64x2(x, y, 0xEE));
    }
    const P c0 = _mm512_add_pd(_mm512_shuffle_f64x2(b[0], b[1], 0x88), _mm512_shuffle_f64x2(b[0], b[1], 0xDD));
    const P c1 = _mm512_add_pd(_mm512_shuffle_f64x2(b[2], b[3], 0x88), _mm512_shuffle_f64x2(b[2], b[3], 0xDD));
    return _mm512_add_pd(_mm512_unpacklo_pd(c0, c1), _mm512_unpackhi_pd(c0, c1));
  }
};
#include "oracle/products_body.inc"
#undef PACHECK_ISA_OP
#undef PACHECK_ISA_FN
}  // namespace
}  // namespace isa_avx512
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

namespace {
[[noreturn]] void not_compiled(OracleIsa isa) {
  throw std::invalid_argument("oracle: the " + std::string(oracle_isa_name(isa)) +
                              " products are not compiled into this build (x86-64 only)");
}
}  // namespace

bool oracle_isa_compiled(OracleIsa isa) { return isa == OracleIsa::baseline || PACHECK_ORACLE_X86; }

const TileProducts<float>& tile_products_f32(OracleIsa isa) {
  switch (isa) {
    case OracleIsa::baseline: return isa_baseline::kProductsF32;
#if PACHECK_ORACLE_X86
    case OracleIsa::avx2: return isa_avx2::kProductsF32;
    case OracleIsa::avx512: return isa_avx512::kProductsF32;
#endif
    default: break;
  }
  not_compiled(isa);
}

const TileProducts<double>& tile_products_f64(OracleIsa isa) {
  switch (isa) {
    case OracleIsa::baseline: return isa_baseline::kProductsF64;
#if PACHECK_ORACLE_X86
    case OracleIsa::avx2: return isa_avx2::kProductsF64;
    case OracleIsa::avx512: return isa_avx512::kProductsF64;
#endif
    default: break;
  }
  not_compiled(isa);
}

}  // namespace pacheck::detail
