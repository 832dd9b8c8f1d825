// pacheck cells: one cell of a suite at a time, for test frameworks (the library libpacheck_cells, CMake
// target pacheck::cells; include/pacheck/gtest.hpp builds GoogleTest registration on it).
//
// Each call runs the pipeline `pacheck run` runs for that cell (exec/'s run_cell: prepare the case, the
// oracle from the pre-paging tensors, the paged cache, the fault injected, the guarded kernel call, the
// clean twin, the judge, the cause of a difference from re-runs and fresh processes), and the pass/fail rule
// of every report (judge/summary.hpp's cell_outcome). Nothing is judged here.
//
// The interface holds only standard C++ types and the C ABI, so it is what an installed pacheck exposes:
// the library links the pipeline privately. Calls are not thread-safe (a test framework calls them from one
// thread). Errors are std::runtime_error with pacheck's message (a plugin's problem, a suite file's line).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pacheck/kernel_abi.h"

namespace pacheck::cells {

/// Registers the kernels of `register_kernels` (a plugin's pacheck_register_kernels, linked into this
/// binary) in this process's registry, as `pacheck run --plugin` registers a library's (same validation,
/// names unique). `repro_plugin` is the --plugin path printed in repro lines (a plugin built from the same
/// code; "" prints `--plugin <linked into this test binary>`). `abi_version`: what the code was compiled
/// against (PACHECK_ABI_VERSION of the header it saw). Returns the kernel names in registration order.
std::vector<std::string> add_linked_kernels(pacheck_register_kernels_fn register_kernels,
                                            const std::string& repro_plugin = "",
                                            std::uint32_t abi_version = PACHECK_ABI_VERSION);

/// Marks the registered kernel `kernel` as one that runs in this process only, never in a fork of it: a
/// kernel whose code lives in an interpreter (pacheck's Python module, python/pacheck) cannot be called
/// from a forked child (its threads, its GPU context). run_cell then forks no fresh-process server for its
/// faulted cells, and the cause of an output that differs from its clean twin is named from re-runs in
/// this process (the cell's detail says so). Throws std::runtime_error for a kernel not registered.
void keep_in_process(const std::string& kernel);

/// Loads the plugin library at `path` (pacheck's load_plugin: dlopen, ABI check, validation), after loading
/// it once in a child process as `pacheck run --plugin` does: a library that crashes or hangs while
/// registering throws std::runtime_error naming it, and this process lives. Returns its kernel names.
std::vector<std::string> add_plugin(const std::string& path);

/// The ids of every cell of `suite` (a name, or a .toml path) as kernel `kernel` runs them (its preferred
/// layout for cells that do not pin one), in suite order, each id once: exactly the lines of
/// `pacheck list cells --suite SUITE --kernel KERNEL`. Suites are found as `pacheck` finds them
/// ($PACHECK_SUITES_DIR, else the installed share/pacheck/suites, else the source tree).
std::vector<std::string> cell_ids(const std::string& suite, const std::string& kernel);

/// What one cell gave.
struct CellRun {
  std::string cell_id;  ///< the exact id (fault included)
  std::string kernel;
  std::string verdict;  ///< verdict name (pass, poisoned, variant, fail, declined, error, ...)
  bool declined = false;  ///< the kernel does not support the cell: neither a pass nor a failure
  bool failed = false;    ///< counts as a failure of a run (a control's caught cell does not)
  std::string detail;     ///< the verdict's detail (decline reason, first differing element, ...)
  std::string metrics;    ///< every metric, one "name: value" per line, worst element included; empty when no
                          ///< output was judged (declined, error, crash, timeout)
  std::string repro;      ///< the `pacheck repro ...` line that reruns the cell
};

/// Runs cell `cell_id` of `suite` (one of cell_ids(suite, kernel)) on `kernel` on `device` ("cpu",
/// "cuda", "cuda:N"). An empty `suite` builds the cell from its id alone (as `pacheck repro` does). A cell
/// the kernel's descriptor or supports() refuses is `declined` without a call. Throws std::runtime_error
/// for an id not in the suite (or not a cell id), an unknown kernel or an unusable device.
CellRun run_cell(const std::string& suite, const std::string& kernel, const std::string& cell_id,
                 const std::string& device = "cpu");

/// The instrument's own check, as a run makes it: the comparator self-test, and pacheck's CPU negative
/// controls on the cells of `suite` where their planted fault must show. `blind` when the self-test failed
/// or a control missed a cell; `summary` says which, one line each.
///
/// A check that passed is kept on disk and reused (a rerun of one test pays it once): in
/// $PACHECK_CACHE_DIR, else $XDG_CACHE_HOME/pacheck, else ~/.cache/pacheck, under instrument/, one file per
/// key, the key being the SHA-256 of this library's file (its build), the suite's resolved cells, the
/// device, the oracle's instruction set and the CPU controls' names. A blind check is never kept. `recheck`
/// (or PACHECK_RECHECK=1 in the environment) runs the check again and replaces the file. `cached` says the
/// answer came from `cache_file`; the summary's last line says so.
struct InstrumentCheck {
  bool blind = false;
  std::string summary;
  bool cached = false;
  std::string cache_file;  ///< the file the answer was read from or written to ("" when none could be)
};
InstrumentCheck check_instrument(const std::string& suite, bool recheck = false);

/// A GoogleTest-safe name for a cell id: letters and digits kept, '+' -> "plus", '-' -> "minus",
/// '@' -> "_at_", every other character (space, '/', ':', ',', '=', '.') -> '_'. Distinct ids of the built-in
/// suites map to distinct names; gtest.hpp appends "_2", "_3" ... to a name already taken in a test suite.
std::string test_name_of(const std::string& cell_id);

}  // namespace pacheck::cells
