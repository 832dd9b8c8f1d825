// Negative controls for logits far from zero (issue 45; fault-classes.md sections 4 and 7). Each is an honest
// online softmax (cpu.online's) with one planted fault taken from public kernels, and declares the cells it
// must fail:
//  cpu.sentinel_max   the running max starts at the finite sentinel -5e4 instead of -inf (FlashInfer #4450):
//                     a row whose every logit lies more than 104 below it gets p = exp(s + 5e4) = 0 for every
//                     key, l = 0, and the kernel writes zeros for it (its guard against l = 0).
//  cpu.softmax_no_max exp(s) without the row max subtracted: a logit above 88.7 overflows (inf / inf = NaN),
//                     and a row whose logits all lie below -104 gets 0 / 0.
//  cpu.carried_max    one running max per query head carried from one sequence of the batch to the next (a
//                     persistent kernel that does not reset it between work tiles): a sequence whose logits
//                     lie more than 104 below an earlier sequence's maximum gets l = 0 and 0 / 0 = NaN.
// Their cells are the offset distributions (core/case.hpp: far_below, far_above, mixed_scales) and, for the
// last two, the extreme distribution, whose logits spread over +-4e3 sqrt(head_size).
#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/row_logits.hpp"

namespace pacheck::cpu {
namespace {

/// The finite sentinel cpu.sentinel_max starts its running max from.
constexpr float kSentinel = -5e4f;
/// ln(FLT_MAX): exp(x) of fp32 is +inf above it.
constexpr double kFp32ExpOverflow = 88.72283935546875;

/// True when cpu.sentinel_max must fail the cell: no sinks (a sink logit above the sentinel starts the max
/// there, as the oracle's denominator does) and some row whose largest logit lies below the sentinel by more
/// than exp()'s underflow: every weight is 0 and the row comes out as zeros.
bool sentinel_fails(const Case& c) {
  if (!c.sinks.is_default()) return false;
  const std::vector<double>& m = row_max_logits(c);
  return std::any_of(m.begin(), m.end(), [](double x) { return x < kSentinel + kExpUnderflow; });
}

/// True when cpu.softmax_no_max must fail the cell: some row whose largest logit overflows exp() or whose
/// every logit underflows it (no sinks: a sink's own weight exp(sink) would keep l > 0), or the extreme and
/// overflow distributions, whose V (up to FLT_MAX / (2 seq_len)) times an unnormalised weight above 2
/// overflows the sum.
bool no_max_fails(const Case& c) {
  if (c.dist == Dist::extreme || c.dist == Dist::overflow) return true;
  const std::vector<double>& m = row_max_logits(c);
  return std::any_of(m.begin(), m.end(), [&](double x) {
    return x > kFp32ExpOverflow || (c.sinks.is_default() && x < kExpUnderflow);
  });
}

/// True when cpu.carried_max must fail the cell: in the kernel's order (sequence, query row, head), some
/// row's largest logit lies more than exp()'s underflow below the running max carried into it from the rows
/// before (per query head). Sinks start each row's max at least at the sink: no cell with sinks is claimed.
bool carried_max_fails(const Case& c) {
  if (!c.sinks.is_default()) return false;
  const std::vector<double>& m = row_max_logits(c);
  std::vector<double> carry(static_cast<std::size_t>(c.num_heads), -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < m.size(); ++i) {
    double& k = carry[i % static_cast<std::size_t>(c.num_heads)];
    if (m[i] < k + kExpUnderflow) return true;
    k = std::max(k, m[i]);
  }
  return false;
}

/// cpu.online's online softmax over 64-token tiles, its running max started at `m0` (per row) where
/// that is above the sink's: returns the row's final running max. With l = 0 (every weight underflowed) the
/// row's output is `if_empty` (0 for the sentinel's guard, NaN for 0 / 0).
template <DType KV>
float online_from(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out, float m0, float if_empty) {
  const pacheck_kernel_args& a = sv.a;
  OnlineSoftmax st(a.head_size);
  st.start_from_sink(sink_logit(a, sv.h));
  if (st.m < m0) {
    st.l *= std::exp(st.m - m0);  // 0 when there is no sink (m = -inf)
    st.m = m0;
  }
  st.add_tokens<KV>(sv, g, q, a.scale, window_first(a, sv.len), sv.len, 64);
  if (st.l == 0.0f) std::fill(out.begin(), out.end(), if_empty);
  else st.normalised(out.data());
  return st.m;
}

class SentinelMax final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.sentinel_max"; }
  std::string description() const override {
    return "online softmax whose running max starts at the finite sentinel -5e4: rows below it come out as zeros "
           "(FlashInfer #4450; negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>([](const Cell& cell) { return sentinel_fails(cell.c); });
  }
  void run(const pacheck_kernel_args& a) const override {
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      online_from<KV>(sv, g, q, out, kSentinel, 0.0f);
    });
  }
};

class SoftmaxNoMax final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.softmax_no_max"; }
  std::string description() const override {
    return "softmax as exp(s) / sum exp(s), the row max not subtracted: overflow far above zero, 0/0 far below "
           "(negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>([](const Cell& cell) { return no_max_fails(cell.c); });
  }
  void run(const pacheck_kernel_args& a) const override {
    std::vector<float> s;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      const int len = sv.len, D = a.head_size, first = window_first(a, len);
      const std::optional<float> sink = sink_logit(a, sv.h);
      float l = sink ? std::exp(*sink) : 0.0f;  // the fault: exp of the logit itself
      std::fill(out.begin(), out.end(), 0.0f);
      for (int t = first; t < len; ++t) {
        const float p = std::exp(logit<KV>(sv, q, t, g, a.scale));
        l += p;
        for (int d = 0; d < D; ++d) out[d] += p * sv.v<KV>(t, g, d);
      }
      for (int d = 0; d < D; ++d) out[d] /= l;
    });
  }
};

class CarriedMax final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.carried_max"; }
  std::string description() const override {
    return "online softmax whose running max is carried from one sequence of the batch to the next, per query head "
           "(a persistent kernel not resetting it; negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>([](const Cell& cell) { return carried_max_fails(cell.c); });
  }
  void run(const pacheck_kernel_args& a) const override {
    std::vector<float> carry(static_cast<std::size_t>(a.num_heads), kNegInf);  // the fault: never reset
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      float& m = carry[static_cast<std::size_t>(sv.h)];
      m = online_from<KV>(sv, g, q, out, m, std::numeric_limits<float>::quiet_NaN());
    });
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {
/// cpu.sentinel_max, cpu.softmax_no_max, cpu.carried_max (registered in cpu_kernels.cpp).
KernelPtr make_cpu_sentinel_max() { return std::make_shared<cpu::SentinelMax>(); }
KernelPtr make_cpu_softmax_no_max() { return std::make_shared<cpu::SoftmaxNoMax>(); }
KernelPtr make_cpu_carried_max() { return std::make_shared<cpu::CarriedMax>(); }
}  // namespace pacheck
