// What cells.cpp shares with the C API of the same library (cells_c.cpp): the pipeline types behind
// pacheck/cells.hpp's standard-C++ interface. Not installed.
#pragma once

#include <string>

#include "judge/result.hpp"
#include "kernels/kernel.hpp"
#include "suites/suite.hpp"

namespace pacheck::cells {

/// The suite `name` (a name or a .toml path), loaded once per process and kept. Throws SuiteError.
const Suite& suite_named(const std::string& name);

/// The registered kernel `name`; throws std::runtime_error naming it when there is none.
KernelPtr kernel_named(const std::string& name);

/// run_cell's whole result (metrics, limit, margin, worst element, ...), before it is cut down to CellRun.
/// Same arguments and errors as run_cell.
CellResult run_cell_result(const std::string& suite, const std::string& kernel, const std::string& cell_id,
                           const std::string& device);

/// metrics_text(r) when the kernel's output was judged, else "" (declined, error, crash, timeout: no output,
/// so no metric or worst element means anything). The metrics of CellRun and of the C API's run_cell answer.
std::string judged_metrics_text(const CellResult& r);

}  // namespace pacheck::cells
