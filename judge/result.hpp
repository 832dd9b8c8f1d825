// The result of one cell on one kernel, and its JSON form (results.jsonl lines, report.json entries, the
// line an isolated child sends back).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "judge/comparator.hpp"
#include "judge/verdict.hpp"

namespace pacheck {

/// Result of one cell on one kernel.
struct CellResult {
  std::string suite;
  std::string kernel;
  std::string cell_id;     ///< Cell::id() with the layout the kernel ran
  std::string case_id;
  std::string fault;       ///< FaultSpec::id()
  bool straddle = false;   ///< some seq_len % block_size != 0
  Verdict verdict = Verdict::pass;
  std::string detail;      ///< why (decline reason, error message, first differing element, ...)
  Metrics metrics;         ///< vs the oracle
  double limit = 0;        ///< allowed rel_linf
  double margin = 0;       ///< rel_linf / limit
  std::int64_t variant_elements = 0;  ///< elements whose bits differ from the clean run
  bool expected_fail = false;  ///< negative control: the kernel's planted fault must show here
  double seconds = 0;      ///< wall time of the cell (generation excluded)
  int index = -1;          ///< position of the cell in Suite::cells; orders merged and resumed reports
  /// Backend that ran the kernel ("cpu", "cuda:1", ...); empty when no kernel ran (declined, lost before
  /// its device was opened) and in reports written before this field existed. With --device cuda:all
  /// it is the only field that differs from a single-device run of the same cells.
  std::string device;
};

/// The key that identifies a cell's result within one run: kernel and cell id (resume, merge).
std::string result_key(const std::string& kernel, const std::string& cell_id);

/// One cell's result as JSON: suite, kernel, cell, case, fault, straddle, verdict, detail, expected_fail,
/// metrics {max_abs, rel_linf, nmse, mean_abs, max_ulp, bitwise_equal_pct, nan, inf, elements, bias_ulp, bias_elements, bias_toward, bias_away, bias_rows_toward, bias_rows_away, worst {seq,head,dim}},
/// limit, margin, variant_elements, seconds, index (position in the suite; -1 when unknown).
nlohmann::json to_json(const CellResult& r);
/// Reads a result written by to_json (for resume and merge); throws std::runtime_error on a malformed one.
CellResult cell_result_from_json(const nlohmann::json& j);

}  // namespace pacheck
