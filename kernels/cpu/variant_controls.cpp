// Negative controls for the attention variants (issue 19; fault-classes.md section 8). Each is an honest
// CPU kernel with one planted fault taken from a real bug, and declares the cells it must fail:
//  cpu.softcap_ratio   the logit soft cap computed as c * (e^x - e^-x) / (e^x + e^-x), x = s / c, in fp32
//                      (vLLM #56578): e^|x| overflows once |s| > c * 88.72 (about 4,436 at c = 50), and
//                      inf / inf = NaN reaches the softmax.
//  cpu.window_scratch  split-KV over the sliding window whose scratch is sized for the whole context
//                      (ceil(seq_len / 256) partitions, as a grid sized from max_seq_len): the partitions past
//                      the window's end return without writing their (lse, out), and the merge reads every
//                      slot, so the unwritten scratch (NaN, as device memory after sleep/wake) reaches the
//                      output (vLLM PR #47188: NaN at ctx 4090, window 128). With several query tokens per
//                      sequence a row sees only the keys up to its position, so the same fault shows without a
//                      window when a row's keys end a partition short of the context's.
//  cpu.qlen_no_causal  several query tokens per sequence with no causal mask among them: every query row
//                      attends to all seq_len keys, as the last row does (a decode kernel reused for
//                      speculative decoding that masks by seq_len only; AITER and FlashInfer test query
//                      lengths 1 to 4 for this): every row but the last sees the later query tokens' keys.
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

/// True when cpu.window_scratch must fail the cell: the keys some query row of some sequence sees (its
/// window, and with several query tokens only those up to its own position) span fewer partitions than the
/// sequence's context, so trailing scratch slots stay unwritten and the merge reads them. The first query
/// row sees the fewest keys (min(W, p + 1) grows with p): it fails whenever any row does. Without a window
/// this happens with several query tokens whose first lies at or before a partition edge (ctx 1030 with 8
/// query tokens: the row at 1022 sees 1,023 keys, 4 partitions of the context's 5).
bool window_scratch_fails(const Case& c) {
  for (int s = 0; s < c.num_seqs(); ++s) {
    const int len = c.seq_lens[s], p0 = c.query_pos(s, 0), seen = p0 + 1 - c.window_start_at(p0);
    if ((seen + kScratchPartition - 1) / kScratchPartition < (len + kScratchPartition - 1) / kScratchPartition) return true;
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
      const int len = sv.len, D = b.head_size, first = window_first(b, sv.len);
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
      const int len = sv.len, D = a.head_size, first = window_first(a, sv.len);
      const int ctx = a.seq_lens[sv.s];  // the whole context, whatever the query row sees
      const int slots = (ctx + kScratchPartition - 1) / kScratchPartition;  // the fault: sized for the whole context
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

/// One row of where cpu.qlen_no_causal must fail: output dtype, at least `min_heads` query heads and
/// `min_query_len` query tokens in a sequence whose effective context (seq_len, or the window when shorter)
/// is at most `max_len` tokens.
struct NoCausalFails {
  DType out;
  int min_heads, min_query_len, max_len;
};
/// As measured (2026-12-05: cpu.qlen_no_causal on clean cells, normal and uniform values, heads 1/1, 8/2,
/// 8/8 and 32/8, head 64 and 128, 6 to 12 seeds per point, with and without window, ALiBi, soft cap and
/// sinks; the least margin of each row's corner in brackets). A row that wrongly sees k more keys of L moves
/// by ~ k / L of |V - out|, so the fault hides in the output's rounding at long contexts: bf16 (limit
/// 1.95e-2) with 2 query tokens passed at ctx 300 (margin 0.68 at 8 heads) and a single head at ctx 37
/// (0.55); f16 with 2 at ctx 1030-4090 (0.43); bf16 with 4 or 8 at ctx 1030 (0.44 at one head). The rows
/// below keep a margin of 1.8 or more.
constexpr NoCausalFails kNoCausalFails[] = {
    {DType::bf16, 8, 2, 37},     // (4.92)
    {DType::bf16, 8, 3, 100},    // (3.72)
    {DType::bf16, 1, 4, 100},    // (3.43; with a window of 100 at ctx 1030: 2.14)
    {DType::f16, 1, 2, 300},     // (4.57)
    {DType::f16, 1, 4, 1030},    // (3.25)
    {DType::f32, 1, 2, 1030},    // (30.7)
    {DType::f32, 1, 4, 8192},    // (7.25)
};

/// True when cpu.qlen_no_causal must fail the cell: the normal or uniform distribution (spread logits, so
/// the keys a row must not see carry weight; the peaked, extreme and overflow distributions put the weight
/// on a few keys, which the later tokens hold only by chance) and some sequence in a row of kNoCausalFails.
/// Cells with several query tokens outside these rows may fail or pass; the built-in suites hold none.
bool qlen_no_causal_fails(const Case& c) {
  if (c.dist != Dist::normal && c.dist != Dist::uniform) return false;
  for (int s = 0; s < c.num_seqs(); ++s) {
    const int len = c.sliding_window > 0 ? std::min(c.seq_lens[s], c.sliding_window) : c.seq_lens[s];
    for (const NoCausalFails& r : kNoCausalFails)
      if (c.out_dtype == r.out && c.num_heads >= r.min_heads && c.query_len(s) >= r.min_query_len && len <= r.max_len)
        return true;
  }
  return false;
}

class QlenNoCausal final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.qlen_no_causal"; }
  std::string description() const override {
    return "two-pass softmax in which every query row sees all seq_len keys: no causal mask among several query "
           "tokens (negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>([](const Cell& cell) { return qlen_no_causal_fails(cell.c); });
  }
  void run(const pacheck_kernel_args& a) const override {
    std::vector<float> s;
    for_each_query_head(a, [&]<DType KV>(const SeqView& row, int g, const std::vector<float>& q, std::vector<float>& out) {
      // The fault: the row is given the whole context (the last row's keys, window and ALiBi position),
      // not the keys 0 .. its own position. The rest is cpu.two_pass's.
      SeqView sv = row;
      sv.len = a.seq_lens[row.s];
      const int len = sv.len, D = a.head_size, first = window_first(a, len);
      const std::optional<float> sink = sink_logit(a, sv.h);
      s.resize(len);
      float m = sink.value_or(kNegInf);
      for (int t = first; t < len; ++t) m = std::max(m, s[t] = logit<KV>(sv, q, t, g, a.scale));
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

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {
/// cpu.qlen_no_causal (registered in cpu_kernels.cpp).
KernelPtr make_cpu_qlen_no_causal() { return std::make_shared<cpu::QlenNoCausal>(); }
/// cpu.softcap_ratio (registered in cpu_kernels.cpp).
KernelPtr make_cpu_softcap_ratio() { return std::make_shared<cpu::SoftcapRatio>(); }
/// cpu.window_scratch (registered in cpu_kernels.cpp).
KernelPtr make_cpu_window_scratch() { return std::make_shared<cpu::WindowScratch>(); }
}  // namespace pacheck
