// cpu.two_pass: pass 1 forms every logit of the row and their max m; pass 2 forms p = exp(s - m) and sums p
// and p x V, both UNnormalised, in fp32, dividing the P.V sum by the exp-sum once at the end. This is the
// softmax written as (exp(s - m) @ V) / sum exp(s - m), as NumPy/PyTorch references put it (this project's
// examples/python/runner.py among them) and as decode kernels that keep a row's logits on chip and defer
// the division do; fault-classes.md section 9 names it ("two-pass kernels that sum p.V before dividing").
// Each p <= 1, so the P.V sum is at most seq_len x max|V|: the extreme distribution bounds V for it
// (oracle/tensors.cpp); the opt-in overflow property shows where its range ends.
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

class TwoPass final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.two_pass"; }
  std::string description() const override {
    return "two passes: logits and max, then unnormalised exp-sum and P.V in fp32, divided at the end";
  }
  void run(const pacheck_kernel_args& a) const override {
    std::vector<float> s;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      const int len = sv.len, D = a.head_size;
      const int first = window_first(a, sv.len);
      const std::optional<float> sink = sink_logit(a, sv.h);
      s.resize(len);
      float m = sink.value_or(kNegInf);  // the sink takes part in the max and the sum, not in P.V
      for (int t = first; t < len; ++t) m = std::max(m, s[t] = logit<KV>(sv, q, t, g, a.scale));  // pass 1
      float l = sink ? std::exp(*sink - m) : 0.0f;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int t = first; t < len; ++t) {  // pass 2
        const float p = std::exp(s[t] - m);
        l += p;
        float* v = v_scratch(D);
        sv.v_row<KV>(t, g, v, D);
        for (int d = 0; d < D; ++d) out[d] += p * v[d];
      }
      for (int d = 0; d < D; ++d) out[d] /= l;
    });
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {
/// cpu.two_pass (registered in cpu_kernels.cpp).
KernelPtr make_cpu_two_pass() { return std::make_shared<cpu::TwoPass>(); }
}  // namespace pacheck
