// Judging one cell: a kernel's output and the integrity checks around its call, against the oracle and the
// clean-cache twin, become one verdict.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/cell.hpp"
#include "judge/cause.hpp"
#include "judge/comparator.hpp"
#include "judge/result.hpp"
#include "kernels/kernel.hpp"
#include "oracle/oracle.hpp"

namespace pacheck {

/// Output of one kernel call plus the integrity checks around it.
struct RawRun {
  std::vector<double> out;            ///< decoded output [num_seqs, num_heads, head_size]
  std::vector<std::uint32_t> bits;    ///< raw output bits
  bool guard_ok = true;
  std::string guard_detail;
  bool inputs_ok = true;
  std::string inputs_detail;
  std::int64_t unwritten = 0;         ///< elements still holding the fill pattern
  std::int64_t first_unwritten = -1;
  double ms = 0;
};

/// Judges one cell from a raw run: guards (oob_write), inputs (input_mutated), unwritten, non-finite
/// (poisoned), invariance vs `clean_bits` (nullptr for a clean cell), tolerance (fail). When several apply,
/// the verdict is the first in verdict_table()'s order of precedence (judge/verdict.hpp), with that check's
/// detail; pass when none applies. A run that differs from `clean_bits` is `variant` ("N elements differ
/// bitwise from the clean-cache run") until its cause is known: with `cause` (name_cause() of the re-runs,
/// judge/cause.hpp) the invariance check gives cause->verdict and cause->detail instead. `ref` is the oracle
/// of cell.c; `emulation_rel_linf` the low-precision emulation's error, which only the calibrated policy uses.
CellResult judge(const Cell& cell, const Kernel& k, const OracleResult& ref, std::optional<double> emulation_rel_linf,
                 const RawRun& run, const std::vector<std::uint32_t>* clean_bits, const Tolerance& tolerance,
                 const Cause* cause = nullptr);

}  // namespace pacheck
