// The honest MLA designs of fault-classes.md section 9, each written as the design computes it over a latent
// row (kernels/cpu/mla_common.hpp), for every check to accept:
//  cpu.mla_online          online softmax over 64-token tiles (FlashMLA's and FlashInfer's MLA tile of the KV
//                          sequence), UNnormalised fp32 accumulator of the V prefix, divided by the exp-sum once.
//  cpu.mla_split_kv_lse    split-KV: the row's keys in kMlaSplits partitions of cdiv(keys, kMlaSplits) tokens
//                          (vLLM's Triton MLA decode: kv_len_per_split = cdiv(seq_len, NUM_KV_SPLITS)), each an
//                          online softmax stored normalised in fp32 with its LSE, merged through the LSEs (stage
//                          2; FlashMLA's combine kernel merges its splits the same way).
//  cpu.mla_half_products   P and V in the 16-bit dtype with every P.V product rounded to it and an fp32 sum
//                          (half2 multiplies), logits in fp32.
//  cpu.mla_p_in_v_dtype    online softmax whose unnormalised P is rounded to V's dtype before P.V, as the bf16
//                          P.V matrix products of FlashMLA and the Triton MLA kernels take it; fp32 exp-sum.
#include "kernels/cpu/mla_common.hpp"

namespace pacheck::cpu {
namespace {

/// Tokens per tile of cpu.mla_online (FlashMLA's page block / KV tile of 64 tokens).
constexpr int kMlaOnlineTile = 64;
/// KV splits of cpu.mla_split_kv_lse (a fixed count, as NUM_KV_SPLITS is a constant of the Triton launch), and
/// tokens per tile inside a split.
constexpr int kMlaSplits = 4;
constexpr int kMlaSplitTile = 32;

/// cpu.mla_online, or with `p_in_v_dtype` cpu.mla_p_in_v_dtype: the same online softmax, its P rounded to V's
/// dtype before P.V (fp8 V is dequantised to the query's dtype, as those kernels do).
class MlaOnline final : public CpuMlaKernel {
 public:
  explicit MlaOnline(bool p_in_v_dtype) : p_in_v_dtype_(p_in_v_dtype) {}
  std::string name() const override { return p_in_v_dtype_ ? "cpu.mla_p_in_v_dtype" : "cpu.mla_online"; }
  std::string description() const override {
    return p_in_v_dtype_ ? "MLA online softmax, unnormalised P rounded to V's dtype before P.V (bf16 P.V products), fp32 "
                           "accumulator"
                         : "MLA online softmax over 64-token tiles, unnormalised fp32 accumulator of the V prefix, divided "
                           "at the end";
  }
  void run(const pacheck_kernel_args& a, const MlaDims& d) const override {
    const auto kv = static_cast<DType>(a.kv_dtype);
    const DType pv = !p_in_v_dtype_ ? DType::f32 : is_fp8(kv) ? static_cast<DType>(a.q_dtype) : kv;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int, const std::vector<float>& q, std::vector<float>& out) {
      OnlineSoftmax st(d.v_head_size, pv);  // logits over q's whole row, V over the accumulator's prefix
      st.add_tokens<KV>(sv, 0, q, a.scale, 0, sv.len, kMlaOnlineTile);
      st.normalised(out.data());
    }, d.v_head_size);
  }

 private:
  bool p_in_v_dtype_;
};

class MlaSplitKvLse final : public CpuMlaKernel {
 public:
  std::string name() const override { return "cpu.mla_split_kv_lse"; }
  std::string description() const override {
    return "MLA split-KV: 4 partitions of cdiv(keys, 4) tokens, normalised fp32 partials merged through their LSE";
  }
  void run(const pacheck_kernel_args& a, const MlaDims& d) const override {
    const int V = d.v_head_size;
    std::vector<float> lse, o;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int, const std::vector<float>& q, std::vector<float>& out) {
      const int per_split = (sv.len + kMlaSplits - 1) / kMlaSplits;
      lse.assign(kMlaSplits, kNegInf);
      o.assign(static_cast<std::size_t>(kMlaSplits) * V, 0.0f);
      for (int i = 0; i < kMlaSplits; ++i) {  // stage 1; a split past the row's keys stays empty (lse -inf)
        const int t0 = i * per_split, t1 = std::min(sv.len, t0 + per_split);
        if (t0 >= t1) continue;
        OnlineSoftmax st(V);
        st.add_tokens<KV>(sv, 0, q, a.scale, t0, t1, kMlaSplitTile);
        lse[i] = st.m + std::log(st.l);
        st.normalised(&o[static_cast<std::size_t>(i) * V]);
      }
      const float M = *std::max_element(lse.begin(), lse.end());  // stage 2
      float denom = 0;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int i = 0; i < kMlaSplits; ++i) {
        if (lse[i] == kNegInf) continue;
        const float w = std::exp(lse[i] - M);
        denom += w;
        for (int j = 0; j < V; ++j) out[j] += w * o[static_cast<std::size_t>(i) * V + j];
      }
      for (float& x : out) x /= denom;
    }, V);
  }
};

class MlaHalfProducts final : public CpuMlaKernel {
 public:
  std::string name() const override { return "cpu.mla_half_products"; }
  std::string description() const override {
    return "MLA with P and V in the 16-bit dtype, each P.V product rounded to it, fp32 sum";
  }
  void run(const pacheck_kernel_args& a, const MlaDims& d) const override {
    const DType H = half_product_dtype(a);
    auto r = [H](float x) { return H == DType::f32 ? x : round_to(x, H); };
    std::vector<float> s;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int, const std::vector<float>& q, std::vector<float>& out) {
      s.resize(static_cast<std::size_t>(sv.len));
      float m = kNegInf;
      for (int t = 0; t < sv.len; ++t) m = std::max(m, s[t] = logit<KV>(sv, q, t, 0, a.scale));
      float sum = 0;
      for (int t = 0; t < sv.len; ++t) sum += (s[t] = std::exp(s[t] - m));
      const float inv_sum = 1.0f / sum;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int t = 0; t < sv.len; ++t) {
        const float p = r(s[t] * inv_sum);
        for (int i = 0; i < d.v_head_size; ++i) out[i] += r(p * r(sv.v<KV>(t, 0, i)));
      }
    }, d.v_head_size);
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {

/// The honest MLA designs of this file, in the order above (listed in kernels/cpu/mla_kernels.cpp).
std::vector<MlaKernelPtr> make_cpu_mla_designs() {
  return {std::make_shared<cpu::MlaOnline>(false), std::make_shared<cpu::MlaSplitKvLse>(),
          std::make_shared<cpu::MlaHalfProducts>(), std::make_shared<cpu::MlaOnline>(true)};
}

}  // namespace pacheck
