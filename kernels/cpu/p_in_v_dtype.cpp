// cpu.p_in_v_dtype: online softmax over 32-token tiles whose UNnormalised weights p = exp(s - m_new) (each
// <= 1) are rounded to V's dtype before P.V, with an fp32 accumulator and an fp32 exp-sum of the unrounded
// p, divided at the end. It stands for vLLM's Triton kernels (triton_decode_attention's grouped stage 1, 32
// tokens per tile, and triton_unified_attention: `acc += tl.dot(p.to(v.dtype), v)`, `l_i` summed from the
// fp32 p) and the Triton fused-attention tutorial they descend from.
//  - V's dtype: the cache dtype for f16, bf16 and f32 caches (f32: nothing is rounded); for fp8 caches the
//    query dtype, into which those kernels dequantise V ((v.to(float32) * v_scale).to(Q.dtype)), so P and V
//    are rounded to the query dtype there (fp32 for an f32 query).
//  - Q.K in fp32 (fp8 K read as decode(code) x k_scale, as every kernel here; the Triton kernels also round
//    the dequantised K to the query dtype, which this one does not).
// The weights stay unnormalised, so the accumulator reaches at most seq_len x max|V|, as cpu.online's.
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

/// Tokens per K/V tile (vLLM's grouped Triton decode stage 1 BLOCK_N).
constexpr int kPInVTile = 32;

class PInVDtype final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.p_in_v_dtype"; }
  std::string description() const override {
    return "online softmax, unnormalised P rounded to V's dtype before P.V (Triton p.to(v.dtype)), fp32 accumulator";
  }
  void run(const pacheck_kernel_args& a) const override {
    const auto kv = static_cast<DType>(a.kv_dtype);
    const DType v_dtype = is_fp8(kv) ? static_cast<DType>(a.q_dtype) : kv;
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      const int len = sv.len;
      OnlineSoftmax st(a.head_size, v_dtype);
      st.start_from_sink(sink_logit(a, sv.h));
      st.add_tokens<KV>(sv, g, q, a.scale, window_first(a, sv.len), len, kPInVTile);
      st.normalised(out.data());
    });
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {
/// cpu.p_in_v_dtype (registered in cpu_kernels.cpp).
KernelPtr make_cpu_p_in_v_dtype() { return std::make_shared<cpu::PInVDtype>(); }
}  // namespace pacheck
