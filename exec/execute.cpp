#include "exec/execute.hpp"

#include <chrono>
#include <stdexcept>

namespace pacheck {

CellResult unrun_result(const Cell& cell, const Kernel& k, Verdict v, std::string why) {
  CellResult r;
  r.kernel = k.name();
  r.cell_id = cell.id();
  r.case_id = cell.c.id();
  r.fault = cell.fault.id();
  r.straddle = cell.c.straddles();
  r.verdict = v;
  r.detail = std::move(why);
  if (auto pred = k.expected_failures()) r.expected_fail = (*pred)(cell);
  return r;
}

Execution execute_cell(const CaseData& data, const Kernel& k, const Cell& cell, Backend& backend, CleanTwin& twin,
                       const Tolerance& tolerance, const ExecuteOptions& how) {
  Execution e;
  auto once = [&](const PagedCache& cache) {
    std::unique_lock<std::mutex> lock;
    if (how.device_mu) lock = std::unique_lock<std::mutex>(*how.device_mu);
    return run_kernel_once(k, backend, data, cache);
  };
  const bool clean = cell.fault.clean();
  try {
    if (!clean && !twin.bits) twin.bits = once(data.cache).bits;
    std::optional<FaultedCache> own;
    const FaultedCache* faulted = how.faulted;
    if (!clean && !faulted) faulted = &own.emplace(faulted_cache(data.cache, cell.fault));
    if (faulted) e.poisoned = faulted->poisoned;
    const auto t0 = std::chrono::steady_clock::now();
    e.raw = once(clean ? data.cache : faulted->cache);
    if (clean && !twin.bits) twin.bits = e.raw.bits;
    e.result = judge(cell, k, data.ref, data.emulation_rel_linf, e.raw, clean ? nullptr : &*twin.bits, tolerance);
    e.result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (const KernelError& err) {
    e.result = unrun_result(cell, k, Verdict::error, err.what());
    e.raw = RawRun{};
    e.error = err.fatal ? ExecError::fatal : ExecError::kernel;
  } catch (const std::exception& err) {
    e.result = unrun_result(cell, k, Verdict::error, err.what());
    e.raw = RawRun{};
    e.error = ExecError::harness;
  }
  e.result.device = backend.name();
  return e;
}

void Execution::rethrow() const {
  switch (error) {
    case ExecError::none: return;
    case ExecError::kernel: throw KernelError(result.detail);
    case ExecError::fatal: throw KernelError(result.detail, /*fatal=*/true);
    case ExecError::harness: throw std::runtime_error(result.detail);
  }
}

std::pair<CellResult, RawRun> run_cell(const Cell& cell, const Kernel& k, Backend& backend, const RunOptions& opt,
                                       CaseData* data_out) {
  CaseData data = prepare_case(cell.c, opt);
  CleanTwin twin;
  Execution e = execute_cell(data, k, cell, backend, twin, opt.tolerance);
  if (data_out) *data_out = std::move(data);
  return {std::move(e.result), std::move(e.raw)};
}

}  // namespace pacheck
