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
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/row_logits.hpp"

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
  /// Every cell of a case that follows, on the same buffers, a call of another case: it gets that case's
  /// output.
  std::optional<HistoryPredicate> expected_failures_after() const override {
    return HistoryPredicate([](const Cell& cell, const std::vector<const Case*>& before) {
      return std::any_of(before.begin(), before.end(), [&](const Case* b) { return b->id() != cell.c.id(); });
    });
  }
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
