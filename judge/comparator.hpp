// The comparator: metrics of a kernel output against the oracle (or another kernel's output), tolerance
// policies, and the self-test that proves the comparator can fail.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/case.hpp"

namespace pacheck {

/// (sequence, head, dim) coordinates of one output element.
struct Index3 {
  int seq = -1, head = -1, dim = -1;
};

/// Metrics of `out` against `ref`, both [num_seqs, num_heads, head_size].
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
  Index3 worst;                ///< element with the largest |out - ref| (a non-finite one wins)
  std::int64_t elements = 0;
};

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
  double limit(DType out_dtype, double emulation_rel_linf, bool tf32_products = false) const;
};

/// Fixed-policy rel_linf limit of an output dtype.
double fixed_limit(DType out_dtype);

/// rel_linf limit of an f32 output from a kernel whose dots read f32 operands as TF32 (10 explicit
/// mantissa bits: u = 2^-11, f16's precision with fp32's range). docs/TOLERANCE.md gives the measurements.
double tf32_limit();

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
