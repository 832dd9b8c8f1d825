// Negative controls for the attention variants (issue 19; fault-classes.md section 8). Each is an honest
// CPU kernel with one planted fault taken from a real bug, and declares the cells it must fail:
//  cpu.softcap_ratio   the logit soft cap computed as c * (e^x - e^-x) / (e^x + e^-x), x = s / c, in fp32
//                      (vLLM #56578): e^|x| overflows once |s| > c * 88.72 (about 4,436 at c = 50), and
//                      inf / inf = NaN reaches the softmax.
//  cpu.window_scratch  split-KV over the sliding window whose scratch is sized for the whole context
//                      (ceil(seq_len / 256) partitions, as a grid sized from max_seq_len): the partitions past
//                      the window's end return without writing their (lse, out), and the merge reads every
//                      slot, so the unwritten scratch (NaN, as device memory after sleep/wake) reaches the
//                      output (vLLM PR #47188: NaN at ctx 4090, window 128).
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

/// ln(FLT_MAX) = 88.72: e^x is +inf in fp32 above it.
constexpr double kExpOverflow = 88.72283935546875;

/// True when cpu.softcap_ratio must fail the cell: a soft cap and logits that pass c * 88.72 in magnitude
/// with near certainty. The extreme and overflow distributions give scaled logits of standard deviation
/// sigma = 4096 sqrt(head_size) x scale (Q, K = +-64, random signs; core/case.hpp); with c * 88.72 <= 2 sigma
/// about 5% of the logits lie beyond it, and with 64 tokens or more in a sequence the chance that none of a
/// head's is beyond is below 0.955^64 = 5%, for every query head at once far less. Other distributions keep
/// |logit| below a few times scale x sqrt(head_size) and never reach it.
bool softcap_ratio_fails(const Case& c) {
  if (!c.logits_soft_cap || (c.dist != Dist::extreme && c.dist != Dist::overflow)) return false;
  if (c.max_seq_len() < 64) return false;
  const double sigma = 4096.0 * std::sqrt(static_cast<double>(c.head_size)) * c.effective_scale();
  return static_cast<double>(*c.logits_soft_cap) * kExpOverflow <= 2.0 * sigma;
}

/// Partition size of cpu.window_scratch, as cpu.split_kv_lse's.
constexpr int kScratchPartition = 256;
constexpr int kScratchTile = 32;

/// True when cpu.window_scratch must fail the cell: some sequence's window spans fewer partitions than its
/// context, so trailing scratch slots stay unwritten and the merge reads them.
bool window_scratch_fails(const Case& c) {
  if (c.sliding_window <= 0) return false;
  for (int s = 0; s < c.num_seqs(); ++s) {
    const int len = c.seq_lens[s], window = len - c.window_start(s);
    if ((window + kScratchPartition - 1) / kScratchPartition < (len + kScratchPartition - 1) / kScratchPartition) return true;
  }
  return false;
}

class SoftcapRatio final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.softcap_ratio"; }
  std::string description() const override {
    return "two-pass softmax with the soft cap as a ratio of exponentials: inf/inf = NaN past c*88.7 (vLLM #56578; "
           "negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>([](const Cell& cell) { return softcap_ratio_fails(cell.c); });
  }
  void run(const pacheck_kernel_args& a) const override {
    // The fault: the soft cap below instead of apply_variants' tanh. The call is otherwise cpu.two_pass's.
    pacheck_kernel_args b = a;
    b.logits_soft_cap = 0.0f;
    const float cap = a.logits_soft_cap;
    std::vector<float> s;
    for_each_query_head(b, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      const int len = b.seq_lens[sv.s], D = b.head_size, first = window_first(b, sv.s);
      const std::optional<float> sink = sink_logit(b, sv.h);
      s.resize(len);
      float m = sink.value_or(kNegInf);
      for (int t = first; t < len; ++t) {
        float dot = 0;
        for (int d = 0; d < D; ++d) dot += q[d] * sv.k<KV>(t, g, d);
        float x = dot * b.scale;
        if (cap > 0.0f) {
          const float y = x / cap, ep = std::exp(y), en = std::exp(-y);
          x = cap * ((ep - en) / (ep + en));  // tanh as a ratio: NaN once e^|y| overflows
        }
        if (b.alibi_slopes) x += b.alibi_slopes[sv.h] * static_cast<float>(t - (len - 1));
        m = std::max(m, s[t] = x);
      }
      float l = sink ? std::exp(*sink - m) : 0.0f;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int t = first; t < len; ++t) {
        const float p = std::exp(s[t] - m);
        l += p;
        for (int d = 0; d < D; ++d) out[d] += p * sv.v<KV>(t, g, d);
      }
      for (int d = 0; d < D; ++d) out[d] /= l;
    });
  }
};

class WindowScratch final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.window_scratch"; }
  std::string description() const override {
    return "split-KV over the sliding window merging every scratch slot of the whole context, unwritten ones "
           "included (vLLM PR #47188; negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>([](const Cell& cell) { return window_scratch_fails(cell.c); });
  }
  void run(const pacheck_kernel_args& a) const override {
    constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> lse, o;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      const int len = a.seq_lens[sv.s], D = a.head_size, first = window_first(a, sv.s);
      const int slots = (len + kScratchPartition - 1) / kScratchPartition;  // the fault: sized for the whole context
      lse.assign(slots, kNaN);                                // unwritten scratch
      o.assign(static_cast<std::size_t>(slots) * D, kNaN);
      for (int i = 0; i < slots; ++i) {
        const int t0 = first + i * kScratchPartition, t1 = std::min(len, t0 + kScratchPartition);
        if (t0 >= len) continue;  // a trailing empty split returns without writing its slot
        OnlineSoftmax st(D);
        st.add_tokens<KV>(sv, g, q, a.scale, t0, t1, kScratchTile);
        lse[i] = st.m + std::log(st.l);
        st.normalised(&o[static_cast<std::size_t>(i) * D]);
      }
      const std::optional<float> sink = sink_logit(a, sv.h);
      float M = sink.value_or(kNegInf);
      for (float x : lse) M = std::max(M, x);  // std::max keeps M when x is NaN ...
      float denom = sink ? std::exp(*sink - M) : 0.0f;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int i = 0; i < slots; ++i) {  // ... but the merge reads every slot
        const float w = std::exp(lse[i] - M);
        denom += w;
        for (int d = 0; d < D; ++d) out[d] += w * o[static_cast<std::size_t>(i) * D + d];
      }
      for (int d = 0; d < D; ++d) out[d] /= denom;
    });
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {
/// cpu.softcap_ratio (registered in cpu_kernels.cpp).
KernelPtr make_cpu_softcap_ratio() { return std::make_shared<cpu::SoftcapRatio>(); }
/// cpu.window_scratch (registered in cpu_kernels.cpp).
KernelPtr make_cpu_window_scratch() { return std::make_shared<cpu::WindowScratch>(); }
}  // namespace pacheck
