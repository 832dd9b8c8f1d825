// The oracle: decode attention computed with Eigen from the pre-paging tensors, never from the cache.
//
// Quick start: a new case field that changes the mathematics (an attention variant, a scale)
//  Add the field to Case (core/case.hpp) and its id token, draw its inputs in generate() (tensors.cpp) if it
//  has any, and apply it here in the fp64/fp32 loop that forms logits, softmax and P.V; the oracle must
//  stay a direct reading of the formula, not a copy of a kernel's algorithm. tests/test_oracle.cpp checks it
//  against closed forms. Kernels learn of the field through pacheck_kernel_args (kernels/ stage).
#pragma once

#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "core/case.hpp"
#include "oracle/tensors.hpp"

namespace pacheck {

enum class Precision { f32, f64 };

/// The instruction set the oracle's two products (logits and P.V, most of its time) and its fp32 plain
/// softmax (exp and sum; with an attention variant, in fp64 and in the emulation the softmax is Eigen's on
/// the build's flags) run on. Each is compiled into every x86-64 build (oracle/products.cpp says how, without
/// -m flags, so the binary still runs on any x86-64) and one is chosen at run time (oracle_isa()).
///  - baseline: Eigen's packets for the build's flags (SSE2 on a default x86-64 build: 4 floats, multiply
///    then add; NEON on aarch64); what every build has.
///  - avx2: AVX2 with FMA (8 floats or 4 doubles, fused multiply-add); x86-64 CPUs since 2013 (Haswell, Zen).
///  - avx512: AVX-512F (16 floats or 8 doubles, fused multiply-add); Skylake-SP and later, Zen 4.
/// The paths differ in summation order, fusing and exp's last bit only: each stays within the oracle's
/// bounds against a double loop (tests/test_oracle.cpp: 8 fp32 unit roundoffs of max|out| in fp32, 5e-15 in
/// fp64).
enum class OracleIsa { baseline, avx2, avx512 };

/// One row of oracle_isa_table(): the instruction set, its PACHECK_ORACLE_ISA name and what it is.
struct OracleIsaInfo {
  OracleIsa value;
  const char* name;
  const char* meaning;
};
/// Every instruction set, narrowest first (core/table.hpp's name_of / parse apply).
std::span<const OracleIsaInfo> oracle_isa_table();
std::string_view oracle_isa_name(OracleIsa isa);

/// PACHECK_ORACLE_ISA names an instruction set this build or CPU cannot run, or none at all. what() names
/// the variable, its value and the instruction sets available; the CLI exits 2 with it.
struct OracleIsaError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// The instruction sets this build has and this CPU and OS run (the CPU's support as
/// __builtin_cpu_supports reports it, which includes the OS's XSAVE support of the registers), narrowest
/// first; always starts with baseline.
std::vector<OracleIsa> available_oracle_isas();

/// The instruction set named by `env` (PACHECK_ORACLE_ISA's value: baseline, avx2 or avx512), or, for a
/// null or empty `env`, the widest of available_oracle_isas(). Throws OracleIsaError for an unknown name or
/// one this CPU cannot run (a forced path never falls back silently).
OracleIsa resolve_oracle_isa(const char* env);

/// The instruction set oracle() uses by default: resolve_oracle_isa(getenv("PACHECK_ORACLE_ISA")),
/// decided on the first call and the same for the rest of the process (and its forked children). Throws
/// OracleIsaError as resolve_oracle_isa does, on every call.
OracleIsa oracle_isa();

/// Oracle output of one case.
///  - out: [num_query_tokens, num_heads, head_size] (num_query_tokens = num_seqs for plain decode),
///    out[r,h,:] = softmax(scale * q[r,h,:] . K_s[0..p]^T) V_s[0..p] for query row r of sequence s at
///    position p = seq_len - query_len + i (Case::query_pos): causal, the row sees keys j <= p only; query
///    head h reads KV head h / (num_heads / num_kv_heads).
///  - lse: [num_query_tokens, num_heads], natural-log log-sum-exp of the scaled logits of each row.
/// With attention variants (Case::sliding_window, logits_soft_cap, alibi_slopes, sinks) the logits are
/// formed and masked in the order of include/pacheck/kernel_abi.h's "Attention variants" (soft cap, then
/// ALiBi, then the window mask), and the sink logit joins the softmax denominator (lse includes it); a
/// row's ALiBi distances and window edge are taken from its own position p (window: keys p - W < j <= p).
/// Values are held as double whatever the precision the oracle computed in.
struct OracleResult {
  std::vector<double> out;
  std::vector<double> lse;
  Precision precision = Precision::f32;
};

/// Computes the oracle from the pre-paging tensors (values already rounded to their dtypes) in fp32 or
/// fp64. Both products (logits = q.K^T, then P.V) are register-blocked SIMD loops over 128-token tiles,
/// processing all query heads of a GQA group against one read of K and V (a plain Eigen GEMM ran at ~8
/// GFLOP/s here, 6x a stream of the same bytes; see docs/BENCHMARKS.md), on instruction set `isa`
/// (default: oracle_isa()). The softmax subtracts the row max (safe for the "extreme" distribution).
/// Throws CaseError if `c` is invalid, std::invalid_argument if `p` does not match `c`'s shapes or `isa` is
/// not in available_oracle_isas(), OracleIsaError as oracle_isa() does.
OracleResult oracle(const Case& c, const PrePaging& p, Precision precision = Precision::f32);
OracleResult oracle(const Case& c, const PrePaging& p, Precision precision, OracleIsa isa);

/// Low-precision emulation of a kernel of the case's dtypes, used by the `calibrated` tolerance: fp32
/// logits and softmax (the denominator summed serially in token order), probabilities rounded to
/// out_dtype before P.V (as vLLM-style kernels do for bf16/f16), one serial fp32 accumulator per output
/// element, output rounded to out_dtype. Shape as OracleResult::out. Attention variants are applied as in
/// oracle() (the sink's weight first in the serial denominator). Products on `isa` (default oracle_isa()), as
/// oracle().
std::vector<double> emulate_low_precision(const Case& c, const PrePaging& p);
std::vector<double> emulate_low_precision(const Case& c, const PrePaging& p, OracleIsa isa);

}  // namespace pacheck
