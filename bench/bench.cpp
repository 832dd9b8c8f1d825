#include "bench/bench.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <optional>
#include <set>
#include <thread>

namespace pacheck {
namespace {

/// Device copies of one case's inputs (uploaded as for the guarded run) and a zeroed output.
struct Copy {
  DeviceInputs inputs;
  DeviceBuffer out;
  pacheck_kernel_args args;
  Copy(Backend& b, const CaseData& d, const std::vector<std::uint8_t>& q)
      : inputs(b, d.c, q, d.cache), out(b, out_bytes(d.c)), args(inputs.args(out.p)) {
    const std::vector<std::uint8_t> zeros(out_bytes(d.c), 0);
    b.upload(out.p, zeros.data(), zeros.size());
  }
  static std::size_t out_bytes(const Case& c) {
    return static_cast<std::size_t>(c.num_query_tokens()) * c.num_heads * c.head_size * dtype_size(c.out_dtype);
  }
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double idx = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(idx);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

KernelTiming time_kernel(const Kernel& k, Backend& b, const CaseData& d, const BenchOptions& opt, std::int64_t kv_bytes,
                         double copy_gbs) {
  KernelTiming t;
  t.kernel = k.name();
  Cell cell{d.c, FaultSpec{}};
  // The timing loop below calls run() with multi-head arguments; MLA cells are checked by `pacheck run`, not timed.
  Support s = d.c.is_mla() ? Support::no("kv_lora_rank: pacheck bench does not time MLA cells") : cell_support(k, d.c);
  if (!s.ok) {
    t.note = "declined: " + s.reason;
    return t;
  }
  // Correctness first: a fast wrong kernel is not a result.
  CleanTwin twin;
  const CellResult r = execute_cell(d, k, cell, b, twin, opt.run.tolerance).result;
  t.verdict = r.verdict;
  t.rel_linf = r.metrics.rel_linf;
  if (r.verdict == Verdict::error) {
    t.note = "error: " + r.detail;
    return t;
  }
  try {
    const std::vector<std::uint8_t> q = query_bytes(d.c, d.pre);
    const std::size_t per_copy = d.cache.key_cache.size() * 2 + q.size();
    const int ncopies = static_cast<int>(std::clamp<std::size_t>(opt.rotate_bytes / std::max<std::size_t>(per_copy, 1) + 1, 1, 32));
    std::vector<std::unique_ptr<Copy>> copies;
    for (int i = 0; i < ncopies; ++i) copies.push_back(std::make_unique<Copy>(b, d, q));
    std::size_t next = 0;
    auto call = [&] { k.run(copies[next++ % copies.size()]->args); };
    for (int i = 0; i < opt.warmup; ++i) call();
    b.sync();
    // Batch calls so a sample is long enough for the timer's resolution.
    int inner = 1;
    while (inner < (1 << 16)) {
      const double ms = b.time_ms([&] { for (int i = 0; i < inner; ++i) call(); });
      if (ms >= opt.min_sample_ms) break;
      inner *= 2;
    }
    std::vector<double> us;
    for (int sIdx = 0; sIdx < opt.samples; ++sIdx)
      us.push_back(1000.0 * b.time_ms([&] { for (int i = 0; i < inner; ++i) call(); }) / inner);
    b.sync();
    t.median_us = percentile(us, 0.5);
    t.p10_us = percentile(us, 0.1);
    t.p90_us = percentile(us, 0.9);
    t.spread_pct = t.median_us > 0 ? 100.0 * (t.p90_us - t.p10_us) / t.median_us : 0;
    t.gbs = static_cast<double>(kv_bytes) / (t.median_us * 1e3);
    t.copy_fraction = copy_gbs > 0 ? t.gbs / copy_gbs : 0;
    t.ran = true;
  } catch (const std::exception& e) {
    t.verdict = Verdict::error;
    t.note = std::string("error: ") + e.what();
  }
  return t;
}

}  // namespace

BenchResult run_bench(const Suite& suite, const std::vector<KernelPtr>& kernels, const std::string& device_spec,
                      const BenchOptions& opt) {
  BenchResult res;
  auto backend = open_backend(device_spec);
  res.device = backend->description();
  res.copy_gbs = backend->copy_bandwidth_gbs(device_spec == "cpu" ? (std::size_t{256} << 20) : (std::size_t{2} << 30), 10);
  if (opt.on_start) opt.on_start(res.device, res.copy_gbs);

  // Plan first (cheap): one row per clean suite cell, and per row one case per layout its kernels run in
  // (native-layout cells are prepared per kernel layout). The row id is the first group's case id.
  struct Group {
    std::size_t row;
    Case c;
    std::vector<std::size_t> kernel_idx;
  };
  std::vector<Group> groups;
  std::set<std::string> seen;
  for (const auto& sc : suite.cells) {
    if (!sc.cell.fault.clean()) continue;
    std::vector<Group> mine;
    for (std::size_t ki = 0; ki < kernels.size(); ++ki) {
      Case c = sc.for_layouts(kernels[ki]->layouts()).c;
      auto it = std::find_if(mine.begin(), mine.end(), [&](const Group& g) { return g.c.id() == c.id(); });
      if (it == mine.end()) mine.push_back({res.rows.size(), c, {ki}});
      else it->kernel_idx.push_back(ki);
    }
    BenchRow row;
    row.case_id = mine.front().c.id();
    if (opt.filter && !std::regex_search(row.case_id, *opt.filter)) continue;
    if (!seen.insert(row.case_id).second) continue;
    row.timings.resize(kernels.size());
    res.rows.push_back(std::move(row));
    for (auto& g : mine) groups.push_back(std::move(g));
  }

  // Preparing a case (pre-paging tensors, paging, oracle) is host work that dominates a suite of small cells:
  // it runs on worker threads up to `lookahead` groups ahead of the timing, which stays on this thread so
  // no two kernels ever share the device while one is timed.
  const std::size_t lookahead = std::clamp<std::size_t>(opt.prepare_threads > 0 ? static_cast<std::size_t>(opt.prepare_threads)
                                                                               : std::thread::hardware_concurrency(),
                                                        1, 16);
  // Also bounded in host memory, by the estimate of what preparing and running each case takes.
  auto host_bytes = [&](const Group& g) {
    return estimate_case_memory(g.c, opt.run.oracle_precision, opt.run.tolerance.policy == TolerancePolicy::calibrated).total();
  };
  const double budget = opt.prepare_bytes;
  std::vector<std::future<CaseData>> prepared(groups.size());
  std::size_t next = 0;
  double in_flight = 0;
  auto fill = [&](std::size_t consumed) {
    while (next < groups.size() && next < consumed + lookahead &&
           (next == consumed || in_flight + host_bytes(groups[next]) <= budget)) {
      in_flight += host_bytes(groups[next]);
      const std::size_t i = next++;
      prepared[i] = std::async(std::launch::async, [&, i] { return prepare_case(groups[i].c, opt.run); });
    }
  };
  fill(0);
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    // A case that cannot be prepared (out of host memory, say) is an `error` row for its kernels, and the
    // rows before and after it are still timed and reported.
    std::optional<CaseData> d;
    std::string prep_error;
    try {
      d = prepared[gi].get();
    } catch (const std::exception& e) {
      prep_error = e.what();
    }
    in_flight -= host_bytes(groups[gi]);
    fill(gi + 1);
    const Group& g = groups[gi];
    BenchRow& row = res.rows[g.row];
    row.kv_bytes = 0;
    for (int s = 0; s < g.c.num_seqs(); ++s)
      row.kv_bytes += static_cast<std::int64_t>(g.c.seq_lens[s]) * g.c.num_kv_heads * g.c.head_size * 2 *
                      static_cast<std::int64_t>(dtype_size(g.c.kv_dtype));
    for (std::size_t ki : g.kernel_idx) {
      if (d) {
        row.timings[ki] = time_kernel(*kernels[ki], *backend, *d, opt, row.kv_bytes, res.copy_gbs);
      } else {
        KernelTiming& t = row.timings[ki];
        t.kernel = kernels[ki]->name();
        t.verdict = Verdict::error;
        t.note = "error: preparing the case failed: " + prep_error;
      }
    }
    if (gi + 1 < groups.size() && groups[gi + 1].row == g.row) continue;  // the row has another layout to time
    if (row.timings.size() == 2 && row.timings[0].ran && row.timings[1].ran && row.timings[1].median_us > 0)
      row.ratio = row.timings[0].median_us / row.timings[1].median_us;
    if (opt.on_row) opt.on_row(row);
  }
  return res;
}

}  // namespace pacheck
