// Benchmark (not a test): the fp32 oracle against a stream over the same K and V bytes.
//
// The oracle reads every K and V element once per GQA group, so its floor on a memory-bound machine is
// one streaming read of the pre-paging K and V (fp32, as the oracle reads them). This prints both times
// and their ratio for the issue-2 cell (h32/8 d128 ctx32768) with 1 and 4 sequences, on every instruction
// set of the oracle this CPU runs (available_oracle_isas(); the stream is timed again, interleaved, for
// each), then the same as a markdown table (docs/BENCHMARKS.md). Single thread on both sides.
// Usage: bench_oracle [repeats=5]
#include <fmt/format.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "oracle/oracle.hpp"

namespace {

using Clock = std::chrono::steady_clock;

/// Wall time and this thread's CPU time of one run, in ms. On a shared machine the wall time also
/// counts the time the thread waited for a core; the CPU time does not (memory stalls count in both).
struct Sample {
  double wall_ms = 0, cpu_ms = 0;
};

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

Sample run_once(const std::function<void()>& fn) {
  const double c0 = thread_cpu_ms();
  const auto t0 = Clock::now();
  fn();
  return {std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), thread_cpu_ms() - c0};
}

struct Timing {
  double median_ms = 0, min_ms = 0, cpu_median_ms = 0, cpu_min_ms = 0;
};

Timing summarize(const std::vector<Sample>& v) {
  std::vector<double> w, c;
  for (const Sample& s : v) {
    w.push_back(s.wall_ms);
    c.push_back(s.cpu_ms);
  }
  std::sort(w.begin(), w.end());
  std::sort(c.begin(), c.end());
  return {w[w.size() / 2], w.front(), c[c.size() / 2], c.front()};
}

/// Times `a` and `b` alternately (`repeats` each, after one untimed warm-up of each), so that load from
/// other processes on a shared machine falls on both sides of the ratio alike.
std::pair<Timing, Timing> time_interleaved(int repeats, const std::function<void()>& a,
                                           const std::function<void()>& b) {
  a();
  b();
  std::vector<Sample> ta, tb;
  for (int i = 0; i < repeats; ++i) {
    ta.push_back(run_once(a));
    tb.push_back(run_once(b));
  }
  return {summarize(ta), summarize(tb)};
}

/// Reads every float of `x` once. 32 independent partial sums let the compiler vectorise the loop
/// without reassociating one sum (no -ffast-math), so the loop is bound by memory, not by add latency.
float stream_sum(const std::vector<float>& x) {
  float acc[32] = {};
  const std::size_t n = x.size(), n32 = n - n % 32;
  for (std::size_t i = 0; i < n32; i += 32)
    for (int j = 0; j < 32; ++j) acc[j] += x[i + j];
  for (std::size_t i = n32; i < n; ++i) acc[0] += x[i];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

/// One row of the summary table.
struct Row {
  std::string cell, isa;
  double mib = 0;
  Timing stream, oracle;
  double emu_ms = 0;
};

void run_cell(int num_seqs, int repeats, std::vector<Row>& rows) {
  pacheck::Case c;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_size = 128;
  c.seq_lens.assign(num_seqs, 32768);
  c.dist = pacheck::Dist::uniform;  // timing does not depend on the values; uniform generates fastest
  const auto tg = Clock::now();
  const pacheck::PrePaging p = pacheck::generate(c);
  const double gen_ms = std::chrono::duration<double, std::milli>(Clock::now() - tg).count();

  double bytes = 0;
  for (int s = 0; s < num_seqs; ++s) bytes += 4.0 * static_cast<double>(p.k[s].size() + p.v[s].size());
  fmt::print("cell: {}  (K+V {:.0f} MiB fp32; generation {:.0f} ms)\n", c.id(), bytes / (1 << 20), gen_ms);

  for (const pacheck::OracleIsa isa : pacheck::available_oracle_isas()) {
    volatile float sink = 0;
    volatile double osink = 0;
    const auto [stream, orc] = time_interleaved(
        repeats,
        [&] {
          float s = 0;
          for (int i = 0; i < num_seqs; ++i) s += stream_sum(p.k[i]) + stream_sum(p.v[i]);
          sink = s;
        },
        [&] { osink = pacheck::oracle(c, p, pacheck::Precision::f32, isa).out[0]; });
    const double emu_ms = run_once([&] { osink = pacheck::emulate_low_precision(c, p, isa)[0]; }).wall_ms;
    const std::string name(pacheck::oracle_isa_name(isa));
    fmt::print(" instruction set: {}\n", name);
    auto line = [&](const char* what, const Timing& t) {
      fmt::print("  {:<12} wall median {:8.2f} ms  min {:8.2f} ms  ({:5.1f} GB/s) | thread CPU median {:8.2f} ms  min {:8.2f} ms\n",
                 what, t.median_ms, t.min_ms, bytes / t.min_ms * 1e-6, t.cpu_median_ms, t.cpu_min_ms);
    };
    line("stream K+V", stream);
    line("oracle fp32", orc);
    fmt::print("  ratio oracle/stream: wall medians {:.2f}x, wall mins {:.2f}x | CPU medians {:.2f}x, CPU mins {:.2f}x\n",
               orc.median_ms / stream.median_ms, orc.min_ms / stream.min_ms, orc.cpu_median_ms / stream.cpu_median_ms,
               orc.cpu_min_ms / stream.cpu_min_ms);
    fmt::print("  (info) low-precision emulation, one run: {:.2f} ms\n", emu_ms);
    rows.push_back({fmt::format("{} x {} tokens", num_seqs, c.seq_lens[0]), name, bytes / (1 << 20), stream, orc, emu_ms});
  }
}

/// The CPU's model name as /proc/cpuinfo gives it (lscpu's "Model name"), or "unknown".
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  fmt::print("bench_oracle: fp32 oracle vs streaming read of the same K/V bytes, single thread, {} repeats\n",
             repeats);
  fmt::print("CPU: {}; default instruction set: {}\n", cpu_model(), pacheck::oracle_isa_name(pacheck::oracle_isa()));
  std::vector<Row> rows;
  run_cell(1, repeats, rows);
  run_cell(4, repeats, rows);
  fmt::print("\n| cell | K+V | oracle ISA | stream: wall / CPU median (ms) | oracle fp32: wall / CPU median (ms) | "
             "ratio wall | ratio CPU | emulation (ms) |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Row& r : rows)
    fmt::print("| {} | {:.0f} MiB | {} | {:.1f} / {:.1f} | {:.1f} / {:.1f} | {:.2f}x | {:.2f}x | {:.1f} |\n", r.cell, r.mib,
               r.isa, r.stream.median_ms, r.stream.cpu_median_ms, r.oracle.median_ms, r.oracle.cpu_median_ms,
               r.oracle.median_ms / r.stream.median_ms, r.oracle.cpu_median_ms / r.stream.cpu_median_ms, r.emu_ms);
  return 0;
}
