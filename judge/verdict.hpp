// Verdicts: the outcome of one cell on one kernel.
#pragma once

#include <string_view>

namespace pacheck {

/// Outcome of one cell on one kernel, in order of precedence when several apply.
enum class Verdict {
  pass,           ///< within tolerance, finite, bitwise invariant under the fault
  fail,           ///< beyond tolerance
  poisoned,       ///< NaN/Inf where the oracle is finite
  variant,        ///< output changed under a change that must not change it (e.g. the poison value)
  unwritten,      ///< output elements left untouched (still the NaN fill pattern)
  oob_write,      ///< a guard region around the output changed
  input_mutated,  ///< query, caches, block_tables or seq_lens changed
  declined,       ///< the kernel does not support the cell
  error,          ///< the kernel or device reported an error
  crash,          ///< the kernel's process died (isolated runs)
  timeout,        ///< the kernel's process hung past the cell timeout (isolated runs)
};
std::string_view verdict_name(Verdict v);
Verdict parse_verdict(std::string_view s);
/// True for every verdict but pass and declined.
bool is_failure(Verdict v);

}  // namespace pacheck
