// The checks every kernel of the registry gets, whatever its device: tests/test_cpu_kernels.cpp and
// tests/test_gpu_kernels.cpp build their parameter lists with registered() and run these on each kernel, so a
// kernel added to a registration table (kernels/cpu/cpu_kernels.cpp, kernels/gpu/gpu_kernels.cpp) is tested
// without editing a test. Each cell is judged as `pacheck run` judges it (judge/judge.hpp: integrity,
// non-finite output, bitwise invariance against the clean-cache run, the fixed tolerance): an honest kernel
// must pass every cell it supports; a negative control must fail exactly the cells its expected_failures()
// names and pass the others.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "core/fault.hpp"
#include "exec/runner.hpp"
#include "faults/inject.hpp"
#include "judge/judge.hpp"
#include "judge/verdict.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"

namespace pacheck::kernel_checks {

/// Which kernels of a device kind a parameter list holds.
enum class Kinds { honest, controls, all };

/// Names of the kernels of Registry::global() whose device kind (device_kind_spec of Kernel::device():
/// "cpu", "cuda" or "hip") is `kind`, honest ones (no expected_failures), negative controls or both, in
/// registration order. The parameter lists of the registry-driven tests. Controls whose expected failures
/// depend on the calls before (Kernel::history_dependent: cpu.replay_output, cpu.stale_max) are left out:
/// these checks run each cell on buffers of its own, whose addresses the allocator may hand out again, so
/// such a control's outcome would depend on the allocator; tests/test_state_controls.cpp runs them as
/// `pacheck run` does. MLA kernels (Kernel::takes_mla) are left out too: every check here draws multi-head
/// cases, which they decline; tests/test_mla.cpp and tests/test_gpu_mla.cpp run them over MLA cells.
inline std::vector<std::string> registered(const std::string& kind, Kinds which) {
  std::vector<std::string> names;
  for (const KernelPtr& k : Registry::global().all()) {
    if (device_kind_spec(k->device()) != kind || k->history_dependent() || k->takes_mla()) continue;
    if ((which == Kinds::honest && k->is_negative_control()) || (which == Kinds::controls && !k->is_negative_control()))
      continue;
    names.push_back(k->name());
  }
  return names;
}

/// The GPU backend kind this binary links: "cuda" or "hip"; "cuda" when it has none, so that skips read
/// "no CUDA device: this pacheck was built without the CUDA backend".
inline std::string gpu_kind() {
  const std::string k = gpu_backend_kind();
  return k.empty() ? "cuda" : k;
}

/// The GPU backend of gpu_kind(), opened once per process (every GPU test binary shares this one), or why not
/// ("no CUDA device: <runtime message>"): the tests that need it skip with that reason. Split-KV scratch is
/// pre-filled with NaN (PACHECK_GPU_POISON_SCRATCH=1), so a merge that reads an unwritten partition fails loudly.
struct TestGpu {
  std::unique_ptr<Backend> backend;
  std::string why;
};
inline TestGpu& test_gpu() {
  static TestGpu g = [] {
    TestGpu r;
    setenv("PACHECK_GPU_POISON_SCRATCH", "1", 1);
    try {
      r.backend = open_backend(gpu_kind());
    } catch (const std::exception& e) {
      r.why = e.what();
    }
    return r;
  }();
  return g;
}

/// GoogleTest name of a kernel parameter: its registry name after the device prefix ("gpu.paged_v1" ->
/// "paged_v1"), with characters other than letters, digits and '_' replaced by '_'.
inline std::string kernel_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param.substr(info.param.find('.') + 1);
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

/// The registered kernel named `name`; fails the test (fatally) when there is none.
inline KernelPtr registered_kernel(const std::string& name) {
  const KernelPtr k = Registry::global().find(name);
  if (!k) ADD_FAILURE() << name << " is not registered";
  return k;
}

/// Integrity of a raw run: nothing left unwritten, no guard or input touched.
inline void expect_clean_run(const RawRun& r) {
  EXPECT_EQ(r.unwritten, 0) << "first unwritten element " << r.first_unwritten;
  EXPECT_TRUE(r.guard_ok) << r.guard_detail;
  EXPECT_TRUE(r.inputs_ok) << r.inputs_detail;
}

/// Cells a check ran, and of them the ones a negative control had to fail (must_fail) and did (failed).
struct Count {
  int cells = 0, must_fail = 0, failed = 0;
};

/// Judges one run of `k` on cell `cell` (oracle and emulation of `data`, fixed tolerance; `clean_bits` the
/// clean-cache run's output for a faulted cell, nullptr for a clean one) and expects what the kernel
/// promises: a failing verdict where its expected_failures() names the cell, pass everywhere else.
inline CellResult expect_verdict(const Kernel& k, const Cell& cell, const CaseData& data, const RawRun& run,
                                 const std::vector<std::uint32_t>* clean_bits, Count* count) {
  const CellResult r = judge(cell, k, data.ref, data.emulation_rel_linf, run, clean_bits, Tolerance{});
  ++count->cells;
  if (r.expected_fail) {
    ++count->must_fail;
    count->failed += is_failure(r.verdict);
    EXPECT_TRUE(is_failure(r.verdict)) << k.name() << " " << cell.id() << ": negative control blind: the planted "
                                       << "fault did not show (verdict " << verdict_name(r.verdict) << ")";
  } else {
    EXPECT_EQ(std::string(verdict_name(r.verdict)), "pass") << k.name() << " " << cell.id() << ": " << r.detail;
  }
  return r;
}

/// Runs `k` on `backend` over the clean cache of `data` and judges the clean cell (expect_verdict).
inline CellResult expect_clean_cell(const Kernel& k, Backend& backend, const CaseData& data, Count* count) {
  const RawRun r = run_kernel_once(k, backend, data, data.cache);
  return expect_verdict(k, Cell{data.c, FaultSpec{}}, data, r, nullptr, count);
}

/// Runs `k` on `backend` over the clean cache of `data`, then with each poison of `poisons` (skipping those
/// the KV encoding cannot hold: +-Inf in the e4m3 encodings) in K, V and K+V, over the final block's
/// unwritten tail and over every unwritten slot, and judges every cell (expect_verdict): an honest kernel's
/// output must stay bitwise that of the clean run; a negative control must fail where it says it does.
inline void expect_poison_sweep(const Kernel& k, Backend& backend, const CaseData& data,
                                const std::vector<Poison>& poisons, Count* count) {
  const Case& c = data.c;
  const RawRun clean = run_kernel_once(k, backend, data, data.cache);
  expect_verdict(k, Cell{c, FaultSpec{}}, data, clean, nullptr, count);
  for (Target t : {Target::k, Target::v, Target::kv}) {
    for (Poison p : poisons) {
      if (!poison_unsupported(p, c.kv_dtype).empty()) continue;
      for (Region rg : {Region::tail, Region::all}) {
        const Cell cell{c, FaultSpec{p, t, rg}};
        PagedCache faulted = data.cache;
        inject(faulted, cell.fault);
        expect_verdict(k, cell, data, run_kernel_once(k, backend, data, faulted), &clean.bits, count);
      }
    }
  }
}

/// A registry-driven test ran `k` on some cell: a kernel that declines every cell of a test is not tested by
/// it, which fails, as `pacheck run` fails a kernel that ran no cell.
inline void expect_ran(const Kernel& k, const Count& count, const char* what) {
  EXPECT_GT(count.cells, 0) << k.name() << " declined every cell of " << what;
}

/// For a negative control `k`, at the end of a test built to exercise it: some cell had to fail (the test
/// reaches the planted fault) and every such cell failed. Prints the counts. Nothing for honest kernels.
inline void expect_control_caught(const Kernel& k, const Count& count, const char* what) {
  if (!k.is_negative_control()) return;
  EXPECT_GT(count.must_fail, 0) << k.name() << ": no cell of " << what << " reaches its planted fault";
  EXPECT_EQ(count.failed, count.must_fail) << k.name();
  std::printf("[ control  ] %s failed %d of the %d cells of %s it must fail (%d cells run)\n", k.name().c_str(),
              count.failed, count.must_fail, what, count.cells);
}

}  // namespace pacheck::kernel_checks
