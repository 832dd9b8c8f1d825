// A result's metrics as every report format, figure and `repro` print them, with one spelling of a NaN or
// Inf output. Apart from comparator.cpp and result.cpp so that the libFuzzer targets, which compile
// judge/result.cpp alone (tests/fuzz/CMakeLists.txt), do not need them.
#pragma once

#include <string>

#include "judge/comparator.hpp"
#include "judge/result.hpp"

namespace pacheck {

/// A metric taken over the finite (output, oracle) pairs only (rel_linf, max_abs, mean_abs, nmse, and margin
/// with them): "nan" when the output holds a NaN, else "inf" when it holds an Inf, since a number
/// there would read as a small error; else `formatted`, the value as the caller prints it. The one place
/// that spells a non-finite output: every format, figure and `repro` print its word (TAP as YAML's .nan /
/// .inf; report.json writes null and keeps the counts, from which it is read back).
std::string unless_nonfinite(const Metrics& m, const std::string& formatted);

/// A metric of a result as every report and figure prints it: sci(v), or unless_nonfinite's "nan" / "inf"
/// when the output held NaN / Inf (rel_linf and margin are +inf then by construction, which would read as
/// "inf" for a NaN output). For rel_linf, max_abs, mean_abs, nmse and margin (= rel_linf / limit).
std::string metric_text(const Metrics& m, double v);

/// The largest ULP distance as reports print it: a count, or "nan" when the output holds a NaN (Metrics::
/// max_ulp is UINT64_MAX then). Taken over every element, so an Inf output has a count.
std::string max_ulp_text(const Metrics& m);

/// "rel_linf nan (limit 4.000e-03, margin nan)": a result's error against its limit in one clause
/// (metric_text for both numbers), for annotations, hover titles and repro comments.
std::string error_clause(const CellResult& r);

}  // namespace pacheck
