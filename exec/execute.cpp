#include "exec/execute.hpp"

#include <fmt/format.h>

#include <chrono>
#include <functional>
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

namespace {

/// The runs name_cause() decides from, for a faulted run `faulted` that differs from twin.bits: `clean()`
/// calls the kernel on the clean cache here; fresh runs come from how.fresh on `device`.
Cause find_cause(const Kernel& k, const Cell& cell, const std::string& device, CleanTwin& twin, const RawRun& faulted,
                 const std::function<RawRun()>& clean, const ExecuteOptions& how) {
  const FreshProcesses* fresh = how.fresh;
  CauseEvidence ev;
  ev.twin = &*twin.bits;
  ev.faulted = &faulted.bits;
  for (int i = 0; i < kCauseReruns; ++i) ev.reruns.push_back(clean().bits);
  if (!fresh) {
    ev.no_fresh = how.no_fresh.empty() ? "this caller runs no fresh-process server (pacheck run and score do)"
                                       : how.no_fresh;
    return name_cause(ev);
  }
  auto runs = [&](bool with_fault, int count, std::string* why) {
    std::vector<OutputBits> out = fresh->run(k, cell, with_fault, device, count, why);
    for (const OutputBits& r : out)
      if (r.size() != faulted.bits.size()) {
        *why = fmt::format("a fresh run gave {} elements, not {}", r.size(), faulted.bits.size());
        return std::vector<OutputBits>{};
      }
    return out;
  };
  if (!twin.fresh && twin.fresh_failed.empty()) {
    std::vector<OutputBits> clean_runs = runs(false, kFreshCleanRuns, &twin.fresh_failed);
    if (!clean_runs.empty()) twin.fresh = std::move(clean_runs);
  }
  if (!twin.fresh) {
    ev.no_fresh = twin.fresh_failed;
    return name_cause(ev);
  }
  ev.fresh_clean = *twin.fresh;
  // Clean runs from the same history that differ decide it (nondeterministic) whatever faulted runs would
  // show, so none is made: that keeps a nondeterministic GPU kernel's cells at one set of fresh runs a case.
  if (!bitwise_equal(ev.fresh_clean)) return name_cause(ev);
  ev.fresh_faulted = runs(true, kFreshFaultedRuns, &ev.no_fresh);
  if (ev.fresh_faulted.empty()) ev.fresh_clean.clear();  // no fresh faulted runs: this process's runs decide
  return name_cause(ev);
}

/// A RawRun of bits `bits` in `c`'s output dtype, as a run that passed its integrity checks (fresh-process
/// runs carry the output bits only).
RawRun from_output_bits(const Case& c, const OutputBits& bits) {
  RawRun r;
  r.bits = bits;
  r.out.resize(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) r.out[i] = from_bits(bits[i], c.out_dtype);
  return r;
}

/// Whether `v` says the output itself is wrong (not the guards or inputs, not a cause already named).
bool output_verdict(Verdict v) {
  return v == Verdict::unwritten || v == Verdict::poisoned || v == Verdict::overflow || v == Verdict::fail ||
         v == Verdict::biased;
}

/// The verdict of a failing cell `failed` whose re-run right after, on other buffers (`again`), gave other
/// bits: nondeterministic or stateful when the cell's first calls in fresh processes say so, else `failed`
/// unchanged. `judge_run` judges a run of the cell against the oracle.
CellResult history_cause(const Kernel& k, const Cell& cell, const std::string& device, const CellResult& failed,
                         const RawRun& faulted, const RawRun& again, const std::function<CellResult(const RawRun&)>& judge_run,
                         const ExecuteOptions& how) {
  const std::int64_t moved = differing_elements(faulted.bits, again.bits);
  const std::string here = fmt::format("{} here, after earlier calls ({})", verdict_name(failed.verdict), failed.detail);
  std::string no_fresh = how.fresh ? std::string() : how.no_fresh.empty() ? "none was asked" : how.no_fresh;
  std::vector<OutputBits> runs;
  if (how.fresh) {
    runs = how.fresh->run(k, cell, !cell.fault.clean(), device, kHistoryFreshRuns, &no_fresh);
    for (const OutputBits& r : runs)
      if (r.size() != faulted.bits.size()) runs.clear();
  }
  CellResult out = failed;
  if (runs.size() >= 2 && differing_elements(runs[0], runs[1]) > 0) {
    out.verdict = Verdict::nondeterministic;
    out.detail = fmt::format("{}; two runs of the cell, each the kernel's first call in a fresh process, differ in {} "
                             "elements: the output changes from call to call",
                             here, differing_elements(runs[0], runs[1]));
    return out;
  }
  const CellResult first = judge_run(runs.empty() ? again : from_output_bits(cell.c, runs[0]));
  if (is_failure(first.verdict)) return failed;  // it fails from no history too: the failure is the kernel's own
  out.verdict = Verdict::stateful;
  out.detail = runs.empty()
                   ? fmt::format("{}; a re-run right after it on buffers of its own passes (rel_linf {:.3e}), {} "
                                 "elements differ: the output depends on earlier calls (no fresh process: {})",
                                 here, first.metrics.rel_linf, moved, no_fresh)
                   : fmt::format("{}; as its kernel's first call in a fresh process the cell passes ({} runs, bitwise "
                                 "equal, rel_linf {:.3e}), and a re-run right after it here on buffers of its own "
                                 "differs in {} elements: the output depends on earlier calls",
                                 here, runs.size(), first.metrics.rel_linf, moved);
  return out;
}

}  // namespace

Execution execute_cell(const CaseData& data, const Kernel& k, const Cell& cell, Backend& backend, CleanTwin& twin,
                       const Tolerance& tolerance, const ExecuteOptions& how) {
  Execution e;
  auto call = [&](const PagedCache& cache, BufferPool* pool) {
    std::unique_lock<std::mutex> lock;
    if (how.device_mu) lock = std::unique_lock<std::mutex>(*how.device_mu);
    return run_kernel_once(k, backend, data, cache, pool);
  };
  auto once = [&](const PagedCache& cache) { return call(cache, how.pool); };
  const bool clean = cell.fault.clean();
  try {
    if (!clean && !twin.bits) {
      // The clean twin's run is this cell's baseline: say so when it fails, or the message reads as the
      // poisoned call's own (a replayed export names the twin's file, a plugin the twin's error).
      try {
        twin.bits = once(data.cache).bits;
      } catch (const KernelError& err) {
        throw KernelError(fmt::format("the clean twin '{}' (the same case, clean cache), which this cell is compared "
                                      "against bitwise, could not run: {}",
                                      Cell{cell.c, FaultSpec{}}.id(), err.what()),
                          err.fatal);
      }
    }
    std::optional<FaultedCache> own;
    const FaultedCache* faulted = how.faulted;
    if (!clean && !faulted) faulted = &own.emplace(faulted_cache(data.c, data.cache, cell.fault));
    if (faulted) e.poisoned = faulted->poisoned;
    const auto t0 = std::chrono::steady_clock::now();
    e.raw = once(clean ? data.cache : faulted->cache);
    if (clean && !twin.bits) twin.bits = e.raw.bits;
    e.result = judge(cell, k, data.ref, data.emulation_rel_linf, e.raw, clean ? nullptr : &*twin.bits, tolerance);
    if (e.result.verdict == Verdict::variant) {
      // The output differs from the twin and nothing worse applies: name the cause before the verdict.
      const Cause cause = find_cause(k, cell, backend.name(), twin, e.raw, [&] { return once(data.cache); }, how);
      e.result = judge(cell, k, data.ref, data.emulation_rel_linf, e.raw, &*twin.bits, tolerance, &cause);
    }
    if (output_verdict(e.result.verdict)) {
      // A wrong output may come from the calls before (state kept across calls): the same cell right after,
      // on buffers of its own, gives the same bits when it does not.
      const PagedCache& used = clean ? data.cache : faulted->cache;
      const RawRun again = call(used, nullptr);
      if (again.bits != e.raw.bits) {
        // Against the oracle only: the twin was made in this process, after the same history.
        auto judge_run = [&](const RawRun& r) {
          return judge(cell, k, data.ref, data.emulation_rel_linf, r, nullptr, tolerance);
        };
        e.result = history_cause(k, cell, backend.name(), e.result, e.raw, again, judge_run, how);
      }
    }
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
  // Forked before the kernel's first call, so its children are fresh. A GPU backend is open already: a fork
  // now could not use the device (issue 17), so a GPU kernel's cause comes from re-runs here.
  std::optional<FreshProcesses> fresh;
  if (!cell.fault.clean() && k.device() == PACHECK_DEVICE_CPU)
    fresh.emplace(std::vector<const Kernel*>{&k}, opt.cell_timeout_s);
  CaseData data = prepare_case(cell.c, opt);
  CleanTwin twin;
  ExecuteOptions how;
  if (fresh) how.fresh = &*fresh;
  else how.no_fresh = "pacheck repro opened the GPU before the cell ran, and a process forked after CUDA "
                      "initialisation cannot use it (issue 17); `pacheck run --filter` on the cell's id names the "
                      "cause from fresh processes";
  Execution e = execute_cell(data, k, cell, backend, twin, opt.tolerance, how);
  if (data_out) *data_out = std::move(data);
  return {std::move(e.result), std::move(e.raw)};
}

}  // namespace pacheck
