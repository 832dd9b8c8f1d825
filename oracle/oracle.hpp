// The oracle: decode attention computed with Eigen from the pre-paging tensors, never from the cache.
//
// Quick start: a new case field that changes the mathematics (an attention variant, a scale)
//  Add the field to Case (core/case.hpp) and its id token, draw its inputs in generate() (tensors.cpp) if it
//  has any, and apply it here in the fp64/fp32 loop that forms logits, softmax and P.V; the oracle must
//  stay a direct reading of the formula, not a copy of a kernel's algorithm. tests/test_oracle.cpp checks it
//  against closed forms. Kernels learn of the field through pacheck_kernel_args (kernels/ stage).
#pragma once

#include <vector>

#include "core/case.hpp"
#include "oracle/tensors.hpp"

namespace pacheck {

enum class Precision { f32, f64 };

/// Oracle output of one case.
///  - out: [num_seqs, num_heads, head_size], out[s,h,:] = softmax(scale * q[s,h,:] . K_s^T) V_s, where
///    query head h reads KV head h / (num_heads / num_kv_heads).
///  - lse: [num_seqs, num_heads], natural-log log-sum-exp of the scaled logits of each row.
/// With attention variants (Case::sliding_window, logits_soft_cap, alibi_slopes, sinks) the logits are
/// formed and masked in the order of include/pacheck/kernel_abi.h's "Attention variants" (soft cap, then
/// ALiBi, then the window mask), and the sink logit joins the softmax denominator (lse includes it).
/// Values are held as double whatever the precision the oracle computed in.
struct OracleResult {
  std::vector<double> out;
  std::vector<double> lse;
  Precision precision = Precision::f32;
};

/// Computes the oracle from the pre-paging tensors (values already rounded to their dtypes) in fp32 or
/// fp64. Both products (logits = q.K^T, then P.V) are register-blocked loops on Eigen's SIMD packet layer
/// over 128-token tiles, processing all query heads of a GQA group against one read of K and V
/// (a plain Eigen GEMM ran at ~8 GFLOP/s here, 6x a stream of the same bytes; see docs/BENCHMARKS.md).
/// The softmax subtracts the row max (safe for the "extreme" distribution). Throws CaseError if `c` is
/// invalid or std::invalid_argument if `p` does not match `c`'s shapes.
OracleResult oracle(const Case& c, const PrePaging& p, Precision precision = Precision::f32);

/// Low-precision emulation of a kernel of the case's dtypes, used by the `calibrated` tolerance: fp32
/// logits and softmax (the denominator summed serially in token order), probabilities rounded to
/// out_dtype before P.V (as vLLM-style kernels do for bf16/f16), one serial fp32 accumulator per output
/// element, output rounded to out_dtype. Shape as OracleResult::out. Attention variants are applied as in
/// oracle() (the sink's weight first in the serial denominator).
std::vector<double> emulate_low_precision(const Case& c, const PrePaging& p);

}  // namespace pacheck
