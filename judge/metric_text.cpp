#include "judge/metric_text.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>

namespace pacheck {

std::string unless_nonfinite(const Metrics& m, const std::string& formatted) {
  if (m.nan_count > 0) return "nan";
  if (m.inf_count > 0) return "inf";
  return formatted;
}

std::string metric_text(const Metrics& m, double v) { return unless_nonfinite(m, sci(v)); }

std::string max_ulp_text(const Metrics& m) {
  // Measured over every element (an Inf's distance is a count like any other): only NaN has no distance.
  return m.max_ulp == UINT64_MAX ? sci(std::nan("")) : std::to_string(m.max_ulp);
}

std::string error_clause(const CellResult& r) {
  return fmt::format("rel_linf {} (limit {}, margin {})", metric_text(r.metrics, r.metrics.rel_linf), sci(r.limit),
                     metric_text(r.metrics, r.margin));
}

}  // namespace pacheck
