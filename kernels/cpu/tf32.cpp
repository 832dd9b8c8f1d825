// cpu.tf32: an honest design for f32 inputs whose dot products run on tensor cores in TF32 (issue 16,
// panel design (f); docs/fault-classes.md section 9): Triton's `tl.dot` on fp32 operands defaults to
// input_precision "tf32" on NVIDIA GPUs from Ampere on, and cuBLAS/CUTLASS fp32 GEMMs may use it when
// allowed. The kernel declares it (Kernel::tf32_products), so pacheck judges its f32 cells against the
// TF32 limit (judge/comparator.hpp tf32_limit) instead of the fp32 one.
//
// TF32 keeps fp32's 8 exponent bits and 10 of its 23 explicit mantissa bits. The kernel keeps the top 19
// bits of every f32 operand of both dots (q and K for the logits; P and V for the output) and drops the low
// 13 (rounding toward zero): the larger of the two conversions in use (cvt.rna.tf32.f32, round to nearest,
// is the other), so the limit it is measured against covers both. The products of two TF32 values are
// exact in fp32 (11 x 11 significant bits) and accumulate in fp32, as the tensor cores do. Operands that
// are not f32 (f16, bf16, fp8 caches, P against a 16-bit V) are not TF32 dots and run in plain fp32.
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

/// x with its low 13 mantissa bits cleared: the TF32 value a tensor core reads from an fp32 register.
/// Inf and NaN keep their class (the low bits of a NaN payload may go; a quiet NaN stays NaN).
inline float tf32(float x) {
  if (!std::isfinite(x)) return x;
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) & 0xFFFFE000u);
}

/// Normalised-softmax decode (as cpu.reference) with TF32 operands wherever an operand of a dot is f32.
class Tf32 final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.tf32"; }
  std::string description() const override {
    return "fp32 dots with TF32 operands (Triton tl.dot default on NVIDIA); declares TF32";
  }
  bool tf32_products() const override { return true; }
  void run(const pacheck_kernel_args& a) const override {
    dispatch_kv(a, [&]<DType KV>() {
      const bool q_tf32 = a.q_dtype == PACHECK_DTYPE_F32, kv_tf32 = KV == DType::f32;
      const auto op = [](bool t, float x) { return t ? tf32(x) : x; };
      const int ratio = a.num_heads / a.num_kv_heads, D = a.head_size;
      std::vector<float> q(D), p, acc(D);
      const cpu::Scales sc(a);
      for (int s = 0; s < a.num_seqs; ++s) {
        const QueryRows rows = query_rows(a, s);
        for (int r = rows.first; r < rows.last; ++r) {  // each query row sees keys 0 .. len - 1 (causal)
          const SeqView sv{a, s, cpu::pack_x(a), sc};
          const int len = row_keys(a, s, r);
          p.assign(len, 0.0f);
          for (int h = 0; h < a.num_heads; ++h) {
            const int g = h / ratio;
            for (int d = 0; d < D; ++d) q[d] = op(q_tf32, cpu::query(a, r, h, d));
            const int first = window_first(a, len);
            const std::optional<float> sink = sink_logit(a, h);
            float m = sink.value_or(kNegInf);
            for (int t = first; t < len; ++t) {
              float* k = k_scratch(D);
              sv.k_row<KV>(t, g, k, D);
              float dot = 0;
              for (int d = 0; d < D; ++d) dot += q[d] * op(kv_tf32, k[d]);
              p[t] = apply_variants(a, len, h, t, dot * a.scale);
              m = std::max(m, p[t]);
            }
            float sum = sink ? std::exp(*sink - m) : 0.0f;
            for (int t = first; t < len; ++t) sum += (p[t] = std::exp(p[t] - m));
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int t = first; t < len; ++t) {
              const float w = op(kv_tf32, p[t] / sum);
              float* v = v_scratch(D);
              sv.v_row<KV>(t, g, v, D);
              for (int d = 0; d < D; ++d) acc[d] += w * op(kv_tf32, v[d]);
            }
            for (int d = 0; d < D; ++d) cpu::store_out(a, r, h, d, acc[d]);
          }
        }
      }
    });
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {

/// cpu.tf32 (registered in cpu_kernels.cpp).
KernelPtr make_cpu_tf32() { return std::make_shared<cpu::Tf32>(); }

}  // namespace pacheck
