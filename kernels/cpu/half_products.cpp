// cpu.half_products: P.V with every product rounded to a 16-bit dtype and an fp32 sum, as vLLM's CUDA
// paged_attention v1/v2 kernels do: the normalised weights are converted to scalar_t (from_float of the
// logits vector, after logits *= 1 / exp_sum), V is read (fp8: scaled_convert to scalar_t), and
// `accs[i] += dot(logits_vec, v_vec)` multiplies them as half2 / bfloat162 pairs (mul.f16x2, __hmul2:
// each product rounded to the 16-bit dtype) before adding them into an fp32 accumulator.
//  - The 16-bit dtype H: the cache dtype for f16 and bf16 caches; for f32 caches there is none (plain fp32
//    products); for fp8 caches the query dtype when it is f16 or bf16 (vLLM's scalar_t, the dtype of query
//    and output, into which it decodes fp8: V = round_H(decode(code) x v_scale)), fp32 otherwise.
//  - Q.K is in fp32, as vLLM's Qk_dot: its half-vector mul<float2, uint32_t, uint32_t> converts both
//    operands to fp32 before multiplying (fp8 K: decode(code) x k_scale in fp32, as every kernel here).
//  - Not modelled: vLLM's f16 dot() also adds the V_VEC_SIZE products of one vector in f16 (add.f16x2)
//    before the fp32 sum; this kernel adds every rounded product in fp32 (fault-classes.md section 9's
//    "every product rounded to f16/bf16 and an fp32 sum").
// Products p x v below H's smallest normal (2^-14 in f16) are rounded in its subnormal range, so
// exact-scaling claims exactness only where none is (docs/PROPERTIES.md, Domains).
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

class HalfProducts final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.half_products"; }
  std::string description() const override {
    return "P and V in the 16-bit dtype, each P.V product rounded to it (half2 multiplies, vLLM CUDA), fp32 sum";
  }
  void run(const pacheck_kernel_args& a) const override {
    const DType H = half_product_dtype(a);
    auto r = [H](float x) { return H == DType::f32 ? x : round_to(x, H); };
    std::vector<float> s;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      const int len = sv.len, D = a.head_size;
      const int first = window_first(a, sv.len);
      const std::optional<float> sink = sink_logit(a, sv.h);
      s.resize(len);
      float m = sink.value_or(kNegInf);
      for (int t = first; t < len; ++t) m = std::max(m, s[t] = logit<KV>(sv, q, t, g, a.scale));
      float sum = sink ? std::exp(*sink - m) : 0.0f;
      for (int t = first; t < len; ++t) sum += (s[t] = std::exp(s[t] - m));
      const float inv_sum = 1.0f / sum;
      std::fill(out.begin(), out.end(), 0.0f);
      for (int t = first; t < len; ++t) {
        const float p = r(s[t] * inv_sum);  // the weight in H
        float* v = v_scratch(D);
        sv.v_row<KV>(t, g, v, D);
        if (H != KV)  // V rounded to H; an f16 or bf16 cache's V already is an H value
          for (int d = 0; d < D; ++d) v[d] = r(v[d]);
        for (int d = 0; d < D; ++d) out[d] += r(p * v[d]);  // product rounded to H, fp32 sum
      }
    });
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {
/// cpu.half_products (registered in cpu_kernels.cpp).
KernelPtr make_cpu_half_products() { return std::make_shared<cpu::HalfProducts>(); }
}  // namespace pacheck
