// Machine-readable reports of a run (JSON). Console rendering lives in cli/.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runner/runner.hpp"

namespace pacheck {

/// One cell's result as JSON: suite, kernel, cell, case, fault, straddle, verdict, detail, expected_fail,
/// metrics {max_abs, rel_linf, nmse, mean_abs, max_ulp, bitwise_equal_pct, nan, inf, worst {seq,head,dim}},
/// limit, margin, variant_elements, seconds, index (position in the suite; -1 when unknown).
nlohmann::json to_json(const CellResult& r);
/// Reads a result written by to_json (for resume and merge); throws std::runtime_error on a malformed one.
CellResult cell_result_from_json(const nlohmann::json& j);

/// The whole run: {"pacheck": version, "suite", "device", "exit_code", "summary": {...}, "selftest": {...},
/// "kernels": [...], "results": [...]}.
nlohmann::json to_json(const RunSummary& s, const std::string& suite, const std::string& device);

/// pacheck's version string ("0.1.0").
std::string pacheck_version();

}  // namespace pacheck
