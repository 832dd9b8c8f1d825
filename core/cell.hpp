// The cell: one unit of a suite, a case and the fault injected into its cache. Its id is at once its name in
// reports, the --filter key and the argument of `pacheck repro`.
#pragma once

#include <string>

#include "core/case.hpp"
#include "core/fault.hpp"

namespace pacheck {
/// Empty when fault `f` fits case `c`; otherwise why not, naming the fault (region `window` needs a
/// sliding window, region `scales` per-slot scales on every cache it targets).
std::string fault_case_problem(const FaultSpec& f, const Case& c);
}  // namespace pacheck

namespace pacheck {

/// One unit of a suite: a case and the fault injected into its cache.
struct Cell {
  Case c;
  FaultSpec fault;
  /// "<case id> <fault id>", e.g. "h32/8 d128 bs16 bf16 ctx4090 nhd seed7 V:nan@tail".
  std::string id() const { return c.id() + " " + fault.id(); }
};

/// Parses an id written by Cell::id(): the fault is the last space-separated token, the case id the rest.
/// Throws std::invalid_argument ("cell id '...': ...") naming the part that cannot be read; a CaseError
/// from the case part keeps its field.
Cell parse_cell_id(const std::string& id);

}  // namespace pacheck
