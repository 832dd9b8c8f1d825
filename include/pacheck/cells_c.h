/*
 * pacheck cells, C API: the calls of pacheck/cells.hpp for callers that cannot use C++ (Python's ctypes:
 * python/pacheck loads libpacheck_cells with it, so one build serves any Python 3 with no compiled
 * extension). Exported from libpacheck_cells, next to the C++ interface.
 *
 * Every call returns 0 and sets *json_out to a JSON text describing the answer, or returns non-zero and
 * sets *json_out to {"error": "MESSAGE"} (pacheck's message: a suite file's line, a kernel not registered,
 * an id not in the suite). *json_out is NUL-terminated UTF-8, allocated by the library: release it with
 * pacheck_cells_free. No call throws or aborts on bad input. Calls are not thread-safe: make them from one
 * thread (a Python kernel's run callback is entered on that same thread, inside pacheck_cells_run_cell,
 * pacheck_cells_batch_next or pacheck_cells_fuzz). The newer calls take one JSON object, `request_json`.
 *
 * Two libraries export this API: libpacheck_cells.so (with the C++ interface pacheck/cells.hpp) and
 * libpacheck_cells_c.so (this API alone, libstdc++ linked statically, and the properties: pacheck_cells_fuzz;
 * the Python package's library and the wheel's).
 */
#ifndef PACHECK_CELLS_C_H
#define PACHECK_CELLS_C_H

#include <stdint.h>

#include "pacheck/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this C API: a caller checks it before any other call. */
#define PACHECK_CELLS_C_API_VERSION 1

/* Releases a *json_out of any call below (NULL is ignored). */
PACHECK_PLUGIN_EXPORT void pacheck_cells_free(char* json);

/* {"api_version": PACHECK_CELLS_C_API_VERSION, "abi_version": PACHECK_ABI_VERSION, "sizeof": {
 * "pacheck_kernel_args", "pacheck_case_info", "pacheck_kernel_desc", "pacheck_registrar"}: bytes},
 * "abi_fields": {struct name: [{"name", "offset", "size", "version"}, ...] every field in declaration order},
 * "case_fields": [...] (the case field table, as `pacheck list fields --json` gives it), "suites_dir": where
 * suites are found, "suites": [names], "timeout_marker": the prefix of a Python kernel's run() error message
 * that makes its cell `timeout` (the kernel's own timeout stopped it)}: lets a caller that lays the ABI structs
 * out itself (ctypes) check its layout against the library's, field by field, before registering anything. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_info(char** json_out);

/* Registers the kernels that `register_kernels` adds (a plugin's registration function, here a ctypes
 * callback), as `pacheck run --plugin` would: same validation, names unique (pacheck/cells.hpp's
 * add_linked_kernels). `abi_version`: the PACHECK_ABI_VERSION the caller laid its structs out for.
 * `repro_label` stands for the plugin in printed repro lines (NULL or "" = "<linked into this test binary>").
 * `in_process_only` != 0: the kernels are never called in a fork of this process (cells.hpp's
 * keep_in_process; required for kernels written in an interpreter). Answer: {"kernels": [names]}. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_add_linked_kernels(pacheck_register_kernels_fn register_kernels,
                                                           uint32_t abi_version, const char* repro_label,
                                                           int in_process_only, char** json_out);

/* Loads the plugin library at `path` (pacheck's load_plugin), after loading it once in a child process: a
 * library that crashes or hangs while registering is an error naming it, and this process lives. Answer:
 * {"kernels": [names]}. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_add_plugin(const char* path, char** json_out);

/* Every registered kernel: {"kernels": [{"name", "description", "device" ("cpu", "cuda", "hip"),
 * "negative_control": bool}]}, built-in ones first. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_kernels(char** json_out);

/* The cells of `suite` (a name or a .toml path) as kernel `kernel` runs them (its preferred layout for cells
 * that do not pin one), in suite order, each id once: exactly `pacheck list cells --suite S --kernel K`.
 * Answer: {"suite": name, "cells": [{"id", "case", "fault", "straddles": some seq_len % block_size != 0,
 * "poisons_v_tail": a non-finite poison in the V tail a whole-block V read touches (what the tail-read
 * negative controls must fail), "expected_fail": the kernel is a negative control that must fail it}]}. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_list_cells(const char* suite, const char* kernel, char** json_out);

/* Runs one cell (pacheck/cells.hpp's run_cell) of `suite` ("" or NULL: the cell is built from its id alone,
 * as `pacheck repro` does) on `kernel` on `device` ("cpu", "cuda", "cuda:N"; NULL = "cpu"), in this thread.
 * Answer: {"cell_id", "kernel", "verdict", "declined", "failed", "detail", "metrics" (text, one
 * "name: value" a line, the worst element included; "" when no output was judged: declined, error, crash,
 * timeout), "repro" (the `pacheck repro` line), "result": the
 * cell's whole result as report.json writes it (its "seconds": the cell's wall time), and when an output was
 * judged "worst_values": {"out", "ref"}: the output and the oracle at the worst element (NaN and the
 * infinities as the strings "nan", "inf", "-inf")}. Before anything is generated the cell is declined when it
 * has a sparse pool and the kernel does not take one (pacheck_cells_kernel_options), and refused (an error
 * naming the cell, its estimate and the budget) when its memory does not fit the budget: 50% of RAM or of the
 * cgroup limit, as `pacheck run --max-memory` defaults. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_run_cell(const char* suite, const char* kernel, const char* cell_id,
                                                 const char* device, char** json_out);

/* The instrument's own check on `suite` (pacheck/cells.hpp's check_instrument: the comparator self-test and
 * pacheck's CPU negative controls on the suite's cells that plant their faults; cached on disk as it
 * documents). Answer: {"blind": bool, "summary": text, "cached": bool, "cache_file": path}. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_check_instrument(const char* suite, char** json_out);

/* How printed commands invoke pacheck: request {"command": shell words, e.g. "python -m pacheck"}; every repro
 * line and fuzz replay this library prints afterwards starts with them instead of "pacheck" (the Python
 * module sets "python -m pacheck", which works wherever the module imports). Answer {"command": the words}. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_set_command(const char* request_json, char** json_out);

/* pacheck_cells_run_cell with a request {"suite" ("" or absent: from the id alone), "kernel", "cell_id",
 * "device" (default "cpu"), "max_memory" (bytes; default 50% of RAM)}. Same answer. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_run(const char* request_json, char** json_out);

/* How the library treats the registered kernel "kernel" beyond its descriptor: {"kernel", "sparse_pools": a
 * bool (default true; false declines every cell with high block ids, naming the pool's size), "input_copies":
 * float32 copies of its inputs the memory budget counts for it (default 0)}. Answer: the settings. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_kernel_options(const char* request_json, char** json_out);

/* Opens a batch: the cells of {"suite", "kernel", "device", "ids" (absent: every cell, in suite order),
 * "filter" (a regular expression on the ids), "threads" (threads preparing cases; default the hardware's),
 * "ahead" (cases prepared past the current one; default the threads, cut to fit the budget), "report_dir"
 * (results.jsonl, run.json, then the report files as `pacheck run --report-dir`), "max_memory"}. Every cell is
 * admitted here (supports(), sparse pools, the memory budget: a cell that does not fit is an `error` result
 * saying so). Answer: {"batch": handle, "cells", "cases", "threads", "ahead", "budget", "budget_source"}. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_batch_open(const char* request_json, char** json_out);

/* Runs the batch's next cell on this thread (its case prepared ahead on the batch's threads, which never call
 * the kernel). Answer: {"done": true} after the last cell, else {"done": false, "cell": run_cell's answer}. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_batch_next(int batch, char** json_out);

/* Ends a batch (its threads stopped, its report files written when every cell ran). Answer: {"passed",
 * "failed", "declined", "caught", "results", "planned", "stopped", "verdicts" (text), "exit_code" (as `pacheck
 * run`'s, without the instrument check), "reports" (the report directory's closing line, or "")}. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_batch_close(int batch, char** json_out);

/* The instrument check with {"suite", "device" (part of the cache key; default "cpu"), "recheck" (run it again
 * and replace the cached answer)}. Answer as pacheck_cells_check_instrument. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_instrument(const char* request_json, char** json_out);

/* `pacheck fuzz` on a registered kernel, on this thread: {"kernel", "device", "properties" (names; absent:
 * the default ones), "seed", "cases" (per property), "budget" (wall seconds in all), "max_size", "shrink",
 * "reproduce" (a string from an earlier failure; one property), "max_memory" (bytes per generated case)}.
 * Answer: {"kernel", "device", "seed", "budget", "budget_source", "negative_control", "properties": [{"name",
 * "passed", "cases", "exercised" (of cases, those that checked something), "shrinks", "over_memory", "device_out_of_memory", "seconds", "coverage", "message", "counterexample" (text),
 * "cell_id", "reproduce"}]}. {"list": true} runs nothing and answers {"properties": [{"name", "opt_in"}]} in
 * property_table()'s order. An error in libpacheck_cells.so, which has no properties. */
PACHECK_PLUGIN_EXPORT int pacheck_cells_fuzz(const char* request_json, char** json_out);

#ifdef __cplusplus
}
#endif

#endif /* PACHECK_CELLS_C_H */
