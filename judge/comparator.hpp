// The comparator: metrics of a kernel output against the oracle (or another kernel's output), tolerance
// policies, and the self-test that proves the comparator can fail.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/case.hpp"

namespace pacheck {

/// Coordinates of one output element: its sequence, query token, head and dim. `token` is the query token
/// within sequence `seq` (0..query_len - 1) when the case has several query tokens per sequence (Case::
/// query_lens), -1 for plain decode (one output row per sequence). flat() gives the element's index in the
/// [num_query_tokens, num_heads, head_size] output: output row Case::query_start(seq) + token.
struct Index3 {
  int seq = -1, head = -1, dim = -1;
  int token = -1;
  /// The flat index in `c`'s output (the case the metrics were computed for); -1 when no element was named.
  std::int64_t flat(const Case& c) const {
    if (seq < 0) return -1;
    const std::int64_t row = c.query_start(seq) + (token < 0 ? 0 : token);
    return (row * c.num_heads + head) * c.head_size + dim;
  }
};

/// The element at flat index `i` of `c`'s [num_query_tokens, num_heads, head_size] output: its sequence, and
/// its query token within the sequence when `c` has several (the inverse of Index3::flat).
Index3 index3(std::int64_t i, const Case& c);

/// "seq 1, head 0, dim 5", or "seq 1, query token 2, head 0, dim 5" with several query tokens per sequence.
std::string describe(const Index3& at);

/// Metrics of `out` against `ref`, both [num_query_tokens, num_heads, head_size] (num_query_tokens =
/// num_seqs for plain decode).
struct Metrics {
  double max_abs = 0;          ///< max |out - ref| over finite pairs
  double rel_linf = 0;         ///< max |out - ref| / max |ref| (seed 000's scoring)
  double nmse = 0;             ///< sum (out - ref)^2 / sum ref^2
  double mean_abs = 0;         ///< mean |out - ref|
  std::uint64_t max_ulp = 0;   ///< largest ULP distance in the output dtype (UINT64_MAX if any NaN)
  double bitwise_equal_pct = 0;///< % of elements whose bits in the output dtype equal ref rounded to it
  std::int64_t nan_count = 0;  ///< NaN elements in `out`
  std::int64_t inf_count = 0;  ///< Inf elements in `out`
  std::int64_t bad_nonfinite = 0; ///< NaN anywhere, or Inf where ref is not the same Inf
  /// Signed rounding bias in output ULPs (bf16/f16 outputs; 0 for f32): the mean over `bias_elements` of
  /// the steps from ref rounded to nearest even to out, counted away from zero positive and toward zero
  /// negative, each clamped to [-1, 1]. Over the elements whose ref is not representable in the output
  /// dtype (a representable one has nothing to round). An output rounded to nearest scores ~0 whatever its
  /// accuracy; one truncated toward zero (tt-metal #19882) about -0.5. docs/TOLERANCE.md "Bias".
  double bias_ulp = 0;
  std::int64_t bias_elements = 0;  ///< finite pairs whose ref is inexact in the output dtype
  std::int64_t bias_toward = 0;    ///< of those, elements stored toward zero from ref's nearest
  std::int64_t bias_away = 0;      ///< of those, elements stored away from zero from ref's nearest
  /// Output rows (seq, head) whose clamped steps sum below / above zero. A conversion fault moves every row
  /// the same way; probability rounding scales a row by a common factor of either sign (see BiasCheck).
  std::int64_t bias_rows_toward = 0, bias_rows_away = 0;
  Index3 worst;                ///< element with the largest |out - ref| (a non-finite one wins)
  std::int64_t elements = 0;
};

/// A metric as reports and figures print it: "1.234e-03" (3 decimals in scientific notation), "nan", "inf" or
/// "-inf".
std::string sci(double v);

/// Computes Metrics. `out_dtype` is the dtype the output was stored in (ULPs and bitwise equality are
/// measured there). Throws std::invalid_argument on size mismatch.
Metrics compare(const std::vector<double>& out, const std::vector<double>& ref, const Case& c, DType out_dtype);

/// Indices (flat) of elements whose bits differ between out and ref rounded to `dtype`.
std::vector<std::int64_t> differing_elements(const std::vector<double>& out, const std::vector<double>& ref,
                                             DType dtype);

/// Tolerance policy.
///  - fixed: rel_linf <= a per-dtype limit (docs/TOLERANCE.md gives the table and its reasons).
///  - calibrated: rel_linf <= multiple x rel_linf(low-precision emulation vs oracle) + floor.
enum class TolerancePolicy { fixed, calibrated };

struct Tolerance {
  TolerancePolicy policy = TolerancePolicy::fixed;
  double multiple = 4.0;  ///< calibrated: allowed multiple of the emulation's error
  /// Every kernel of the run declared to read f32 dot operands as TF32 (`--tf32`), as if each kernel's
  /// Kernel::tf32_products() were true. Read by judge(), which alone knows whether a cell has an f32
  /// operand and passes the outcome to limit() as `tf32_products`; limit() itself ignores this field.
  bool tf32 = false;
  /// The rel_linf limit for this cell. `emulation_rel_linf` is used by the calibrated policy only.
  /// `tf32_products` (the kernel, or `tf32`, declares TF32 and the cell has an f32 operand: judge() decides)
  /// gives max(tf32_limit(), fixed_limit(out_dtype)) under both policies: the emulation models fp32 dots,
  /// not TF32 ones, and an f16/bf16 output of TF32 dots still rounds as its dtype does.
  /// `max_seq_len` (the cell's longest sequence, tokens) raises a fixed limit to accumulation_limit()
  /// where that is larger: fixed_limit(out_dtype, max_seq_len). 0 leaves the length term out (a caller
  /// that knows the cell passes its longest seq_len: judge() and the properties do). The calibrated
  /// policy's emulation already carries one serial fp32 accumulator, so it needs no length term.
  double limit(DType out_dtype, double emulation_rel_linf, bool tf32_products = false, int max_seq_len = 0) const;
};

enum class Precision;  // oracle/oracle.hpp

/// The command-line flags that reproduce a run's verdict options where they differ from pacheck's
/// defaults, in the order `pacheck run --help` lists them: "--tolerance calibrated", "--multiple M"
/// (calibrated only, when not 4), "--oracle-precision f32", "--tf32", joined by single spaces; "" for the
/// defaults. Every repro and replay line carries them, so a verdict judged under other limits is
/// reproduced under the same ones (issue 16). `multiple` is printed with the shortest round-trip form.
std::string judge_flags(const Tolerance& tolerance, Precision oracle_precision);

/// Fixed-policy rel_linf limit of an output dtype, whatever the length (the dtype's rounding budget).
double fixed_limit(DType out_dtype);

/// What a serial fp32 accumulation over `max_seq_len` tokens can lose, relative: 2·u·L with u = 2^-24
/// (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2: recursive summation
/// of n terms errs by at most (n-1)u·sum|x_i| to first order; the numerator and the denominator of
/// softmax(QK)V each, hence 2). It is reached where many tokens weigh less than u times the running
/// sum and are dropped one by one (swamping): dist=peaked at a few thousand tokens, where fuzz found
/// honest token-by-token fp32 kernels at rel_linf 6.1e-5 with 2,423 tokens (issue 16, docs/TOLERANCE.md).
double accumulation_limit(int max_seq_len);

/// The fixed limit of a cell: max(fixed_limit(out_dtype), accumulation_limit(max_seq_len)). The length
/// term exceeds the dtype's budget above 512 tokens for f32, 20,480 for f16 and 163,840 for bf16.
double fixed_limit(DType out_dtype, int max_seq_len);

/// rel_linf limit of an f32 output from a kernel whose dots read f32 operands as TF32 (10 explicit
/// mantissa bits: u = 2^-11, f16's precision with fp32's range). docs/TOLERANCE.md gives the measurements.
double tf32_limit();

/// Smallest f32 rel_linf for which a failure's detail suggests undeclared TF32 dots: 2^-13 (1.2e-4), a
/// quarter of TF32's unit roundoff. Failures below it (e.g. under the calibrated policy's few-1e-6 limits)
/// are no TF32 error and get no such hint.
double tf32_hint_floor();

/// The bias check (issue 16; docs/TOLERANCE.md "Bias"): does the output round off-centre, all of it one
/// way, as a truncating float -> bf16 conversion does? bf16 and f16 outputs only (an f32 output is
/// stored as computed; Metrics::bias_elements is 0 for it).
struct BiasCheck {
  /// |Metrics::bias_ulp| beyond which a cell is biased. The honest panel measured at most 0.05 (the
  /// half-product designs); a truncating output about 0.5.
  double limit_ulp = 0.25;
  /// And the one-way excess must be significant: (toward - away) / sqrt(toward + away) >= min_z, so that a
  /// few wrong roundings in a small cell are not a bias (a sign test: z ~ N(0, 1) for an unbiased kernel).
  double min_z = 5.0;
  /// And the rows must agree: (rows one way - rows the other) / sqrt(rows with a net step) >= min_row_z (at
  /// least 9 rows, all one way). An honest kernel that rounds the probabilities (to bf16 before P.V, or its
  /// products) scales each row by a factor that differs from 1 by up to u: one row can look biased, with any
  /// z, but the rows of different query vectors go both ways. A truncating conversion moves every row.
  double min_row_z = 3.0;
};

/// Detail of a biased output ("rounds toward zero: ..."), or "" when `m` shows no bias under `check`.
/// judge() applies it where its domain holds (docs/TOLERANCE.md "Bias"): dist=uniform and normal cells only
/// (peaked, extreme and overflow give every row one dominant or tied weight, whose rounding then moves every
/// row the same way in honest kernels that round P), and not on cells judged as TF32 (a TF32 operand
/// conversion that truncates P biases the output toward zero by design).
std::string bias_finding(const Metrics& m, const BiasCheck& check = {});

/// Outcome of the comparator self-test.
struct SelfTestResult {
  bool passed = false;
  std::vector<std::string> lines;  ///< one line per check, "ok ..." or "FAILED ..."
};

/// The comparator self-test (seed 001): takes a clean output row of 2048 elements, seeds k-ULP corruption
/// at `offsets` (default 5, 1024, 2047) and separately one NaN, and checks that each seeded copy is
/// detected, the bitwise-equal percentage drops by exactly the seeded fraction, the reported locations are
/// exactly the seeded offsets and no others, and the unseeded copy passes. `blind` replaces the comparator
/// by one that reports every output equal, so tests can show the self-test fails when the comparator is
/// broken.
SelfTestResult comparator_selftest(int ulps = 1, std::vector<std::int64_t> offsets = {5, 1024, 2047},
                                   bool blind = false);

}  // namespace pacheck
