// cpu.split_kv_lse: split-KV decode whose partitions are merged through their log-sum-exp. Each partition
// of 256 tokens runs an online softmax over 32-token tiles (unnormalised fp32 accumulator), then stores its
// output normalised, o_i = acc_i / l_i, with lse_i = m_i + log(l_i). The merge, in fp32:
// out = sum_i exp(lse_i - max lse) o_i / sum_i exp(lse_i - max lse). It stands for FlashDecoding (Dao et
// al., 2023: split the KV sequence, rescale the partial outputs by their log-sum-exp), FlashInfer's
// merge_state (two partial states (v, lse) merged with weights exp(lse - max lse)) and vLLM's Triton decode
// (stage 1 stores acc / e_sum and e_max + log(e_sum) per KV split, stage 2 merges the splits through them;
// its grouped stage 1 tiles 32 tokens). The partition size differs from cpu.split_kv's 512 (vLLM
// paged_attention_v2), so other partition edges are tried.
// Bounds: each partition's accumulator is at most 256 x max|V| and the merge's numerator at most
// num_partitions x max|V| (every weight exp(lse_i - max lse) <= 1). Precision: lse_i rounded to fp32 is off
// by up to |lse_i| x 2^-24, so each weight by up to twice that relatively: at the extreme distribution's
// logits (|lse| ~ 1e4) about 1e-4 of the output, above the f32 limit (docs/PROPERTIES.md, Domains).
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

/// Tokens per partition: not cpu.split_kv's 512, so the generators' partition edges (511/512/513,
/// 1023/1024/1025) fall inside and at the edges of this kernel's partitions.
constexpr int kPartition = 256;
/// Tokens per tile inside a partition (vLLM's grouped Triton decode stage 1 BLOCK_N).
constexpr int kSplitTile = 32;

class SplitKvLse final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.split_kv_lse"; }
  std::string description() const override {
    return "split-KV: 256-token partitions (online softmax inside), outputs normalised and merged through their LSE";
  }
  void run(const pacheck_kernel_args& a) const override {
    const int P = kPartition;
    std::vector<float> lse, o;  // per partition: lse_i, and o_i [head_size]
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      // With a sliding window the partitions cover the window only, [first, len), from its left edge.
      const int len = sv.len, D = a.head_size, first = window_first(a, sv.len);
      const int nparts = (len - first + P - 1) / P;
      lse.assign(nparts, 0.0f);
      o.assign(static_cast<std::size_t>(nparts) * D, 0.0f);
      for (int i = 0; i < nparts; ++i) {  // stage 1: one partition (never empty: nparts = ceil(window / P))
        const int t0 = first + i * P, t1 = std::min(len, t0 + P);
        OnlineSoftmax st(D);
        st.add_tokens<KV>(sv, g, q, a.scale, t0, t1, kSplitTile);
        lse[i] = st.m + std::log(st.l);
        st.normalised(&o[static_cast<std::size_t>(i) * D]);
      }
      // Stage 2: merge through the LSE; a sink joins as one more partition with lse = sink and no output.
      const std::optional<float> sink = sink_logit(a, sv.h);
      const float M = std::max(*std::max_element(lse.begin(), lse.end()), sink.value_or(kNegInf));
      float denom = sink ? std::exp(*sink - M) : 0.0f;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int i = 0; i < nparts; ++i) {
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
/// cpu.split_kv_lse (registered in cpu_kernels.cpp).
KernelPtr make_cpu_split_kv_lse() { return std::make_shared<cpu::SplitKvLse>(); }
}  // namespace pacheck
