// Step 1 of a cell: a case's pre-paging tensors, its oracle and its clean paged cache, computed once and
// shared by every cell and kernel of the case; and the faulted copy of that cache a cell's call reads.
#pragma once

#include <cstdint>
#include <optional>

#include "core/case.hpp"
#include "core/fault.hpp"
#include "exec/run_options.hpp"
#include "oracle/oracle.hpp"
#include "paging/pager.hpp"

namespace pacheck {

/// Everything the runner computes for one case, shared by all cells and kernels of that case.
struct CaseData {
  Case c;
  PrePaging pre;
  OracleResult ref;                          ///< empty when made by prepare_inputs
  std::optional<double> emulation_rel_linf;  ///< filled for the calibrated policy
  PagedCache cache;                          ///< clean paged cache
};

/// The kernel inputs of `c` only: pre-paging tensors and the clean paged cache, no oracle (for callers
/// that compare a kernel with itself or only capture its inputs, such as export). Throws CaseError for an
/// invalid case.
CaseData prepare_inputs(const Case& c);

/// prepare_inputs plus the oracle at opt.oracle_precision and, for the calibrated tolerance policy, the
/// low-precision emulation's rel_linf against it.
CaseData prepare_case(const Case& c, const RunOptions& opt);

/// A copy of a clean paged cache with one fault written into it.
struct FaultedCache {
  PagedCache cache;
  std::int64_t poisoned = 0;  ///< elements inject() wrote (0 for a clean fault or a region the case lacks)
};
/// `clean` with `fault` injected into a copy (faults/inject.hpp).
FaultedCache faulted_cache(const PagedCache& clean, const FaultSpec& fault);

}  // namespace pacheck
