// Benchmark (not a test): the fp32 oracle against a stream over the same K and V bytes.
//
// The oracle reads every K and V element once per GQA group, so its floor on a memory-bound machine is
// one streaming read of the pre-paging K and V (fp32, as the oracle reads them). This prints both times
// and their ratio for the issue-2 cell (h32/8 d128 ctx32768) with 1 and 4 sequences. Single thread on
// both sides. Usage: bench_oracle [repeats=5]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <vector>

#include "oracle/oracle.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double median_ms = 0, min_ms = 0;
};

Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front()};
}

double elapsed_ms(const std::function<void()>& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// Times `a` and `b` alternately (`repeats` each, after one untimed warm-up of each), so that load from
/// other processes on a shared machine falls on both sides of the ratio alike.
std::pair<Timing, Timing> time_interleaved(int repeats, const std::function<void()>& a,
                                           const std::function<void()>& b) {
  a();
  b();
  std::vector<double> ta, tb;
  for (int i = 0; i < repeats; ++i) {
    ta.push_back(elapsed_ms(a));
    tb.push_back(elapsed_ms(b));
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

void run_cell(int num_seqs, int repeats) {
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

  volatile float sink = 0;
  volatile double osink = 0;
  const auto [stream, orc] = time_interleaved(
      repeats,
      [&] {
        float s = 0;
        for (int i = 0; i < num_seqs; ++i) s += stream_sum(p.k[i]) + stream_sum(p.v[i]);
        sink = s;
      },
      [&] { osink = pacheck::oracle(c, p, pacheck::Precision::f32).out[0]; });
  const double emu_ms = elapsed_ms([&] { osink = pacheck::emulate_low_precision(c, p)[0]; });

  fmt::print("cell: {}  (K+V {:.0f} MiB fp32; generation {:.0f} ms)\n", c.id(), bytes / (1 << 20), gen_ms);
  fmt::print("  stream K+V    median {:8.2f} ms  min {:8.2f} ms  ({:.1f} GB/s)\n", stream.median_ms,
             stream.min_ms, bytes / stream.median_ms * 1e-6);
  fmt::print("  oracle fp32   median {:8.2f} ms  min {:8.2f} ms  ({:.1f} GB/s of K+V)\n", orc.median_ms,
             orc.min_ms, bytes / orc.median_ms * 1e-6);
  fmt::print("  ratio oracle/stream: medians {:.2f}x, mins {:.2f}x\n", orc.median_ms / stream.median_ms,
             orc.min_ms / stream.min_ms);
  fmt::print("  (info) low-precision emulation, one run: {:.2f} ms\n", emu_ms);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  fmt::print("bench_oracle: fp32 oracle vs streaming read of the same K/V bytes, single thread, {} repeats\n",
             repeats);
  run_cell(1, repeats);
  run_cell(4, repeats);
  return 0;
}
