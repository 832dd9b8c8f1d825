// Negative controls for state kept from one call to the next (issue 45; fault-classes.md section 7). Both
// are honest in a fresh process and on a call's first buffers; each keeps, per thread, what a real kernel
// keeps between steps of an inference engine that hands it the same buffers again:
//  cpu.replay_output  the output of its first call on a set of buffer addresses (query, caches, block
//                     tables, seq_lens, output), replayed for every later call on those addresses whatever
//                     they now hold (an output cache keyed by pointers); forgotten when the shape changes.
//  cpu.stale_max      cpu.two_pass whose max of each query row and head starts from the value the previous
//                     call on the same output buffer left in its [rows, heads] scratch (a persistent kernel's
//                     workspace of running maxima never reset): a row whose logits lie more than 104 below the
//                     previous call's gets l = 0 and 0 / 0 = NaN; calls of one case leave their own maxima,
//                     which change nothing. Forgotten when the shape changes.
// `pacheck run` reuses a worker's buffers across the cells of one shape (exec/plan.hpp, chains), so both
// fail the gate where its suites put cells of one shape with contrasting inputs one after another, and the
// runner names the cause `stateful` (exec/execute.hpp). Their expected failures are history-dependent
// (Kernel::expected_failures_after).
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/row_logits.hpp"
#include "oracle/oracle.hpp"

namespace pacheck {
KernelPtr make_cpu_reference(bool head0_scales);  // reference.cpp
}

namespace pacheck::cpu {
namespace {

/// The fields of a call that fix its buffers' sizes: a kernel's cache keyed by pointers is dropped when
/// they change.
std::array<std::int64_t, 10> call_shape(const pacheck_kernel_args& a) {
  return {a.num_seqs, a.num_heads, a.num_kv_heads, a.head_size, a.block_size, a.q_dtype, a.kv_dtype, a.out_dtype,
          a.layout, static_cast<std::int64_t>(a.block_tables_stride)};
}

/// Rows of a call's output: num_query_tokens (num_seqs for plain decode).
int output_rows(const pacheck_kernel_args& a) { return a.query_start_loc_host ? a.query_start_loc_host[a.num_seqs] : a.num_seqs; }

/// The fp64 oracle output of `c` (oracle/oracle.hpp), computed once per case id in a process: the expected
/// failures ask for a case once per cell after it.
const std::vector<double>& oracle_out(const Case& c) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::vector<double>> cache;
  const std::string id = c.id();
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(id); it != cache.end()) return it->second;
  }
  std::vector<double> out = oracle(c, generate(c), Precision::f64).out;
  const std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(id, std::move(out)).first->second;
}

/// How far case `from`'s output lies from `c`'s, as the runner measures a cell: max |o_from - o_c| / max |o_c|
/// over their fp64 oracle outputs (same shape: cases of one chain). Infinity where o_c is all zeros and
/// o_from is not.
double output_distance(const Case& from, const Case& c) {
  const std::vector<double>&a = oracle_out(from), &b = oracle_out(c);
  double diff = 0, top = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs((i < a.size() ? a[i] : 0.0) - b[i]));
    top = std::max(top, std::abs(b[i]));
  }
  return top > 0 ? diff / top : diff > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

/// The distance from a cell's own output beyond which cpu.replay_output's replayed output fails it: 2.5 x
/// the largest fixed limit (bf16's 1.95e-2, docs/TOLERANCE.md), so the replayed output, within its own
/// case's limit of that case's output, fails every dtype's limit.
constexpr double kReplayFails = 0.05;

/// Whether cpu.replay_output fails `cell` after its calls of `before` on the same buffers (cases of one
/// chain, whose outputs have one size): it replays the output of the first of them, which fails the cell
/// where that case is another and its output lies more than kReplayFails from the cell's. Soft caps of 30
/// and 50 on normal logits, one after the other in the variants suite, differ by 6e-3: their cells pass.
bool replay_fails(const Cell& cell, const std::vector<const Case*>& before) {
  if (before.empty() || before.front()->id() == cell.c.id()) return false;
  return output_distance(*before.front(), cell.c) > kReplayFails;
}

class ReplayOutput final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.replay_output"; }
  std::string description() const override {
    return "cpu.reference whose output is cached by buffer addresses and replayed on later calls with the same "
           "addresses (negative control)";
  }
  /// None on its own: its fault needs an earlier call on the same buffers.
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>([](const Cell&) { return false; });
  }
  /// replay_fails: the cells of another case than the first on the same buffers, whose output it gets,
  /// where the two outputs lie apart.
  std::optional<HistoryPredicate> expected_failures_after() const override { return HistoryPredicate(replay_fails); }
  void run(const pacheck_kernel_args& a) const override {
    struct Cache {
      std::array<std::int64_t, 10> shape{};
      std::map<std::array<const void*, 6>, std::vector<std::uint8_t>> outputs;
    };
    thread_local Cache cache;
    if (call_shape(a) != cache.shape) cache = Cache{call_shape(a), {}};
    const std::array<const void*, 6> key{a.query, a.key_cache, a.value_cache, a.block_tables, a.seq_lens, a.out};
    const std::size_t bytes = static_cast<std::size_t>(output_rows(a)) * a.out_stride_seq *
                              dtype_size(static_cast<DType>(a.out_dtype));
    if (auto it = cache.outputs.find(key); it != cache.outputs.end() && it->second.size() == bytes) {
      std::memcpy(a.out, it->second.data(), bytes);  // the fault: whatever the buffers hold now
      return;
    }
    reference_->run(a);
    const auto* out = static_cast<const std::uint8_t*>(a.out);
    cache.outputs[key].assign(out, out + bytes);
  }

 private:
  KernelPtr reference_ = make_cpu_reference(false);
};

/// The running maximum each query row and head starts from after calls of `before` on the same buffers,
/// [num_query_tokens, num_heads]: each call leaves max(what it started from, the row's largest logit) in the
/// scratch, so it is the largest logit of that row and head over the earlier cases (-inf for none).
std::vector<double> stale_maxima(const Case& c, const std::vector<const Case*>& before) {
  std::vector<double> stale(static_cast<std::size_t>(c.num_query_tokens()) * c.num_heads,
                            -std::numeric_limits<double>::infinity());
  for (const Case* b : before) {
    const std::vector<double> m = row_max_logits(*b);
    for (std::size_t i = 0; i < stale.size() && i < m.size(); ++i) stale[i] = std::max(stale[i], m[i]);
  }
  return stale;
}

/// Whether cpu.stale_max fails `cell` after its calls of `before` on the same buffers: some row's logits all
/// lie more than exp()'s underflow below the max the calls of other cases left for that row and head (its own
/// case's calls leave its own maxima, which change nothing). No sinks: a sink's logit starts the max above
/// the scratch's reach.
bool stale_max_fails(const Cell& cell, const std::vector<const Case*>& before) {
  const Case& c = cell.c;
  if (!c.sinks.is_default()) return false;
  const std::string id = c.id();
  std::vector<const Case*> others;
  for (const Case* b : before)
    if (b->id() != id) others.push_back(b);
  if (others.empty()) return false;
  const std::vector<double> stale = stale_maxima(c, others), m = row_max_logits(c);
  for (std::size_t i = 0; i < m.size(); ++i)
    if (m[i] < stale[i] + kExpUnderflow) return true;
  return false;
}

class StaleMax final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.stale_max"; }
  std::string description() const override {
    return "two-pass softmax whose max per query row and head starts from the scratch the previous call on the same "
           "buffer left (negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>([](const Cell&) { return false; });
  }
  /// stale_max_fails: the cells whose rows start from a max earlier cases left far above their logits.
  std::optional<HistoryPredicate> expected_failures_after() const override {
    return HistoryPredicate(stale_max_fails);
  }
  void run(const pacheck_kernel_args& a) const override {
    struct Scratch {
      std::array<std::int64_t, 10> shape{};
      std::map<const void*, std::vector<float>> maxima;  ///< per output buffer: [query rows, heads]
    };
    thread_local Scratch scratch;
    if (call_shape(a) != scratch.shape) scratch = Scratch{call_shape(a), {}};
    std::vector<float>& kept = scratch.maxima[a.out];
    kept.resize(static_cast<std::size_t>(output_rows(a)) * a.num_heads, kNegInf);
    std::vector<float> s;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      const int len = sv.len, D = a.head_size, first = window_first(a, len);
      const std::optional<float> sink = sink_logit(a, sv.h);
      float& m = kept[static_cast<std::size_t>(sv.row) * a.num_heads + sv.h];  // the fault: not reset per call
      m = std::max(m, sink.value_or(kNegInf));
      s.resize(static_cast<std::size_t>(len));
      for (int t = first; t < len; ++t) m = std::max(m, s[t] = logit<KV>(sv, q, t, g, a.scale));
      float l = sink ? std::exp(*sink - m) : 0.0f;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int t = first; t < len; ++t) {
        const float p = std::exp(s[t] - m);
        l += p;
        for (int d = 0; d < D; ++d) out[d] += p * sv.v<KV>(t, g, d);
      }
      for (int d = 0; d < D; ++d) out[d] /= l;  // 0 / 0 when every weight underflowed
    });
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {
/// cpu.replay_output, cpu.stale_max (registered in cpu_kernels.cpp).
KernelPtr make_cpu_replay_output() { return std::make_shared<cpu::ReplayOutput>(); }
KernelPtr make_cpu_stale_max() { return std::make_shared<cpu::StaleMax>(); }
}  // namespace pacheck
