// pacheck cells as GoogleTest tests (CMake target pacheck::gtest: this header and libpacheck_gtest.a, over
// pacheck::cells). A kernel's own gtest binary registers every cell of a suite as one test:
//
//   #include <pacheck/gtest.hpp>
//   int main(int argc, char** argv) {
//     testing::InitGoogleTest(&argc, argv);
//     pacheck::gtest::register_suite("gate", pacheck_register_kernels);   // the plugin's registration function
//     pacheck::gtest::register_suite("tail-poison", pacheck_register_kernels);
//     return RUN_ALL_TESTS();
//   }
//
// Names: test suite = the suite name with '-' as '_' ("tail_poison"), followed by "/KERNEL" (dots as '_')
// when the registration function registers more than one kernel; test name = cells::test_name_of(cell id)
// ("h32_8_d128_bs16_bf16_ctx4090_vllm_seed7_V_nan_at_tail"). So --gtest_filter, GTEST_SHARD_INDEX /
// GTEST_TOTAL_SHARDS, --gtest_output=xml and IDE runners work unchanged. The exact cell id is in each
// test's failure text and recorded as the test property `cell_id` (with `kernel`, `suite` and `verdict`).
//
// A test runs its cell through pacheck's pipeline (pacheck/cells.hpp) and fails when the cell fails a run
// (the verdict, detail, metrics with the worst element, and the `pacheck repro` line are the message); a
// declined cell is skipped with its reason. Once per suite a global Environment runs the comparator
// self-test and pacheck's negative controls on the suite (or reuses their cached answer for this library
// build, suite and device: cells.hpp's check_instrument): if the instrument is blind, the environment fails
// and no test runs.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pacheck/cells.hpp"
#include "pacheck/kernel_abi.h"

namespace pacheck::gtest {

/// How register_suite registers.
struct Options {
  std::string device = "cpu";  ///< where the kernels run: "cpu", "cuda", "cuda:N"
  std::string kernel;          ///< only this kernel of the registration (""= every kernel it registers)
  std::string repro_plugin;    ///< --plugin path for printed repro lines (a plugin built from the same code)
  bool check_instrument = true;  ///< add the self-test and negative-control Environment (once per suite)
  /// Run the instrument check again instead of reusing its cached answer (cells.hpp's check_instrument; the
  /// environment's PACHECK_RECHECK=1 does the same for every binary).
  bool recheck_instrument = false;
};

/// Registers one test per cell of `suite` for each kernel `register_kernels` registers (the kernels are
/// registered with pacheck on the first call for a given function; later calls reuse them). Call after
/// testing::InitGoogleTest and before RUN_ALL_TESTS. Returns the number of tests registered. Throws
/// nothing: an unknown suite, a kernel name not registered, or a registration pacheck refuses registers
/// instead one test, `pacheck_setup.SUITE`, that fails with the reason, and returns 0 (the binary runs,
/// reports the reason in its console and XML output, and exits non-zero).
/// `file` and `line` default to the caller's (GCC's and Clang's __builtin_FILE/__builtin_LINE, evaluated
/// where the call is written): every test of the call is registered there and reports its failures there
/// ("cells_test.cpp:12: Failure" in the console, the XML's file and line), so an IDE or a CI log points at
/// the user's registration, not at pacheck's sources. A failure's text ends with the `pacheck repro` line
/// and a "rerun this test:" line (this binary's absolute path and a --gtest_filter for the test).
int register_suite(const std::string& suite, pacheck_register_kernels_fn register_kernels, const Options& opt = {},
                   const char* file = __builtin_FILE(), int line = __builtin_LINE());

/// The same for the kernels of a plugin library loaded from `plugin_path` (what `pacheck run --plugin` takes).
int register_suite_from_plugin(const std::string& suite, const std::string& plugin_path, const Options& opt = {},
                               const char* file = __builtin_FILE(), int line = __builtin_LINE());

/// The test suite name register_suite gives `suite` ("tail-poison" -> "tail_poison"), and with `kernel`
/// the per-kernel form ("tail_poison/example_cpu_reference").
std::string test_suite_name(const std::string& suite, const std::string& kernel = "");

}  // namespace pacheck::gtest
