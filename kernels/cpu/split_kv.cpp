// cpu.split_kv: split-KV (vLLM paged_attention_v2 / FlashDecoding): partitions of 512 tokens each produce
// (max, exp-sum, partial out); a merge rescales by exp(m_i - M). make_cpu_split_kv builds it with other
// partition sizes (cpu.split_kv_pN) for tests and properties.
// cpu.split_kv_tmp_out: the same, with each partition's normalised output stored in the OUTPUT dtype before
// the merge, as vLLM's paged_attention_v2 keeps `tmp_out` ([num_seqs, num_heads, max_num_partitions,
// head_size] of scalar_t, the activation dtype) while max_logits and exp_sums stay fp32; its reduce kernel
// reads tmp_out back as float. A partial in the output dtype's subnormal range (f16: below 2^-14) loses
// relative precision there (docs/PROPERTIES.md, Domains: exact-scaling). Not modelled: vLLM's + 1e-6 in
// both of its divisions (1 / (exp_sum + 1e-6f)), a relative bias of at most 1e-6.
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

/// Split-KV over partitions of `partition` tokens: each partition keeps (max m_i, exp-sum l_i, normalised
/// partial o_i = sum (p / l_i) V, as vLLM v2's tmp_out); the merge takes M = max m_i, weights
/// w_i = exp(m_i - M) l_i and out = sum (w_i / sum w) o_i, skipping empty partitions (m_i = -inf) so
/// -inf - -inf never appears. Both sums are convex combinations: no intermediate exceeds max |V|. With
/// `partials_in_out_dtype` each o_i is rounded to the output dtype as it is stored (vLLM v2's tmp_out).
class SplitKv final : public CpuKernel {
 public:
  SplitKv(int partition, bool partials_in_out_dtype) : partition_(partition), tmp_out_(partials_in_out_dtype) {}
  std::string name() const override {
    if (tmp_out_) return partition_ == 512 ? "cpu.split_kv_tmp_out" : "cpu.split_kv_tmp_out_p" + std::to_string(partition_);
    return partition_ == 512 ? "cpu.split_kv" : "cpu.split_kv_p" + std::to_string(partition_);
  }
  std::string description() const override {
    if (tmp_out_)
      return "split-KV: partitions of " + std::to_string(partition_) +
             " tokens, each normalised output stored in the output dtype (vLLM v2's tmp_out), merged by max and exp-sum";
    return "split-KV: partitions of " + std::to_string(partition_) + " tokens merged by max and exp-sum";
  }
  void run(const pacheck_kernel_args& a) const override {
    dispatch_kv(a, [&]<DType KV>() {
      const int ratio = a.num_heads / a.num_kv_heads, D = a.head_size, P = partition_;
      std::vector<float> q(D), part_m, part_l, part_o, logits(P);
      const cpu::Scales sc(a);
      for (int s = 0; s < a.num_seqs; ++s) {
        const QueryRows rows = query_rows(a, s);
        for (int r = rows.first; r < rows.last; ++r) {  // each query row sees keys 0 .. len - 1 (causal)
          const SeqView sv{a, s, cpu::pack_x(a), sc};
          const int len = row_keys(a, s, r);
          const int nparts = (len + P - 1) / P;
          for (int h = 0; h < a.num_heads; ++h) {
            const int g = h / ratio;
            for (int d = 0; d < D; ++d) q[d] = cpu::query(a, r, h, d);
            part_m.assign(nparts, kNegInf);
            part_l.assign(nparts, 0.0f);
            part_o.assign(static_cast<std::size_t>(nparts) * D, 0.0f);
            // Partitions cover the whole context as vLLM v2's grid does; with a sliding window those before
            // its edge `first` read nothing and stay empty (m = -inf, skipped by the merge: PR #47188's fix).
            const int first = window_first(a, len);
            for (int pi = 0; pi < nparts; ++pi) {
              const int t0 = std::max(pi * P, first), t1 = std::min(len, pi * P + P);
              for (int t = t0; t < t1; ++t) {
                float* k = k_scratch(D);
                sv.k_row<KV>(t, g, k, D);
                float dot = 0;
                for (int d = 0; d < D; ++d) dot += q[d] * k[d];
                logits[t - t0] = apply_variants(a, len, h, t, dot * a.scale);
                part_m[pi] = std::max(part_m[pi], logits[t - t0]);
              }
              for (int t = t0; t < t1; ++t) part_l[pi] += (logits[t - t0] = std::exp(logits[t - t0] - part_m[pi]));
              for (int t = t0; t < t1; ++t) {
                const float w = logits[t - t0] / part_l[pi];
                float* v = v_scratch(D);
                sv.v_row<KV>(t, g, v, D);
                for (int d = 0; d < D; ++d) part_o[static_cast<std::size_t>(pi) * D + d] += w * v[d];
              }
              if (tmp_out_)  // stored as the output dtype, read back as float by the merge
                for (int d = 0; d < D; ++d) {
                  float& o = part_o[static_cast<std::size_t>(pi) * D + d];
                  o = round_to(o, static_cast<DType>(a.out_dtype));
                }
            }
            const std::optional<float> sink = sink_logit(a, h);  // joins the merge's max and denominator
            float M = sink.value_or(kNegInf);
            for (int pi = 0; pi < nparts; ++pi) M = std::max(M, part_m[pi]);
            std::vector<float> weight(nparts, 0.0f), out(D, 0.0f);
            float denom = sink ? std::exp(*sink - M) : 0.0f;
            for (int pi = 0; pi < nparts; ++pi) {
              if (part_m[pi] == kNegInf) continue;  // empty partition: weight 0
              denom += (weight[pi] = std::exp(part_m[pi] - M) * part_l[pi]);
            }
            for (int pi = 0; pi < nparts; ++pi) {
              if (part_m[pi] == kNegInf) continue;
              const float w = weight[pi] / denom;
              for (int d = 0; d < D; ++d) out[d] += w * part_o[static_cast<std::size_t>(pi) * D + d];
            }
            for (int d = 0; d < D; ++d) cpu::store_out(a, r, h, d, out[d]);
          }
        }
      }
    });
  }

 private:
  int partition_;
  bool tmp_out_;
};

}  // namespace
}  // namespace pacheck::cpu

/// Factory for tests and properties that need another partition size.
pacheck::KernelPtr pacheck::make_cpu_split_kv(int partition, bool partials_in_out_dtype) {
  return std::make_shared<cpu::SplitKv>(partition, partials_in_out_dtype);
}
