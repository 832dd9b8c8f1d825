// The oracle's two products over a run of tokens, compiled once per instruction set (oracle/products.cpp)
// and chosen at run time (oracle_isa(), oracle/oracle.hpp). Internal to oracle/.
#pragma once

#include <cstddef>

#include "oracle/oracle.hpp"

namespace pacheck::detail {

using Index = std::ptrdiff_t;

/// Tokens per register pass of P.V (see products_body.inc's pv_block): its accumulators stay in registers
/// over kSubTile tokens, whose rows it reads one KV head's slice at a time.
inline constexpr Index kSubTile = 4;

/// How many rows ahead of the one it reads P.V prefetches V into L2 (products_body.inc's pv_tokens).
inline constexpr Index kPvAhead = 64;

/// Tokens whose exponentials the softmax sums in registers (S) before adding them into a double
/// (products_body.inc's softmax_columns).
inline constexpr Index kSumBlock = 1024;

/// The two products (and the plain softmax between them) over T consecutive tokens of one sequence, for all num_heads = G * R query heads
/// (G KV heads, GQA ratio R: query head h reads KV head h / R), in scalar S (float or double). K and V
/// are in the pre-paging layout: token t's row [G, D] at k + t * G * D (D = head_size contiguous values
/// per KV head). The tokens are read in order, each row (or run of kSubTile rows) whole before the next,
/// so both products stream through K and V as the hardware prefetchers expect.
template <class S>
struct TileProducts {
  /// lg[h * ld + t] = q_h . K_t[h / R] for h in [0, G * R) and t in [0, T). q: num_heads rows of D.
  void (*logits)(const S* q, int G, int R, int D, const S* k, Index T, S* lg, Index ld);
  /// The plain softmax's exponentials, H columns of L logits x at lg + h * ld, in place: mx[h] = max of
  /// scale * x (scale > 0), x replaced by exp(scale * x - mx[h]), sum[h] = their sum (in any order, blocks
  /// of it in double). The caller normalises (pv's pscale = 1 / sum) and forms lse = mx + log(sum).
  /// Null for double: the fp64 oracle keeps Eigen's softmax (oracle.cpp).
  void (*softmax)(S* lg, Index ld, Index L, int H, S scale, S* mx, double* sum);
  /// acc[h * D + d] += sum over t in [0, T) of p'(h, t) * V_t[h / R][d], each element's sum carried token
  /// by token in order (t = 0, 1, ...) in S, where p'(h, t) = p[h * ld + t] * pscale[h] rounded to S, or
  /// p[h * ld + t] when pscale is null. Tv >= T: the rows of V readable at v (the sequence's rest), which
  /// P.V may prefetch beyond the T it reads.
  void (*pv)(const S* p, Index ld, const S* pscale, int G, int R, int D, const S* v, Index T, Index Tv, S* acc);
};

/// The products compiled for `isa`. Throws std::invalid_argument when `isa` was not compiled into this
/// build (AVX2 / AVX-512 off x86-64); callers pick `isa` from available_oracle_isas(), which also checks
/// that the CPU runs it.
const TileProducts<float>& tile_products_f32(OracleIsa isa);
const TileProducts<double>& tile_products_f64(OracleIsa isa);

/// True when `isa`'s products were compiled into this build (whatever the CPU).
bool oracle_isa_compiled(OracleIsa isa);

}  // namespace pacheck::detail
