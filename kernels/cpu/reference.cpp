// cpu.reference and the two fp8-scale negative controls built on it:
//  cpu.reference        reads only valid slots; fp32 logits, softmax and accumulation.
//  cpu.fp8_head0_scale  cpu.reference reading every KV head with head 0's dequantisation scales (per-head
//                       scales indexed by a constant). NEGATIVE CONTROL (fault classes, section 5).
//  cpu.fp8_scale_fault  cpu.reference given the last KV head's K and V scales as 1: the scale left out on
//                       one path. NEGATIVE CONTROL (fault classes, section 5).
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

/// Ratio >= kMaterialScaleRatio (either way) between the scale a kernel uses and the right one is an error
/// the fixed tolerance must see: 25% on every element of one KV head's K or V. The fp8 suites use per-head
/// ranges whose neighbouring heads differ by 2x or more.
constexpr float kMaterialScaleRatio = 1.25f;
bool material(float used, float right) {
  return !(used >= right / kMaterialScaleRatio && used <= right * kMaterialScaleRatio);
}

/// With `head0_scales` (cpu.fp8_head0_scale) every KV head is dequantised with head 0's scales.
class Reference final : public CpuKernel {
 public:
  explicit Reference(bool head0_scales = false) : head0_scales_(head0_scales) {}
  std::string name() const override { return head0_scales_ ? "cpu.fp8_head0_scale" : "cpu.reference"; }
  std::string description() const override {
    return head0_scales_ ? "reference reading every KV head with head 0's fp8 scales (negative control)"
                         : "reads only valid slots; fp32 softmax and accumulation";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    if (!head0_scales_) return std::nullopt;
    // Cells with per-head scales some head of which differs materially from head 0's.
    return std::function<bool(const Cell&)>([](const Cell& cell) {
      const Case& c = cell.c;
      if (!is_fp8(c.kv_dtype)) return false;
      for (const KvScale* ks : {&c.k_scale, &c.v_scale}) {
        const std::vector<float> s = ks->resolve(c.num_kv_heads);
        for (float sg : s)
          if (material(s[0], sg)) return true;
      }
      return false;
    });
  }
  void run(const pacheck_kernel_args& a) const override {
    dispatch_kv(a, [&]<DType KV>() {
      const int ratio = a.num_heads / a.num_kv_heads, D = a.head_size;
      std::vector<float> q(D), logits, acc(D);
      cpu::Scales sc(a);
      if (head0_scales_) {
        std::fill(sc.k.begin(), sc.k.end(), sc.k[0]);
        std::fill(sc.v.begin(), sc.v.end(), sc.v[0]);
      }
      for (int s = 0; s < a.num_seqs; ++s) {
        const SeqView sv{a, s, cpu::pack_x(a), sc};
        const int len = a.seq_lens[s];
        logits.assign(len, 0.0f);
        for (int h = 0; h < a.num_heads; ++h) {
          const int g = h / ratio;
          for (int d = 0; d < D; ++d) q[d] = cpu::query(a, s, h, d);
          float m = kNegInf;
          for (int t = 0; t < len; ++t) {
            float dot = 0;
            for (int d = 0; d < D; ++d) dot += q[d] * sv.k<KV>(t, g, d);
            logits[t] = dot * a.scale;
            m = std::max(m, logits[t]);
          }
          float sum = 0;
          for (int t = 0; t < len; ++t) sum += (logits[t] = std::exp(logits[t] - m));
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int t = 0; t < len; ++t) {
            const float w = logits[t] / sum;  // normalised first: |acc| <= max |V|, never Inf
            for (int d = 0; d < D; ++d) acc[d] += w * sv.v<KV>(t, g, d);
          }
          for (int d = 0; d < D; ++d) cpu::store_out(a, s, h, d, acc[d]);
        }
      }
    });
  }

 private:
  bool head0_scales_;
};

/// cpu.reference called with the K and V scales of one KV head replaced (faults/inject.hpp ScaleFault):
/// the kernel is right, the scales it is given are not, as when a scale is left out on one code path.
class ScaleFaultKernel final : public CpuKernel {
 public:
  ScaleFaultKernel(std::string name, ScaleFault f) : name_(std::move(name)), fault_(f) {}
  std::string name() const override { return name_; }
  std::string description() const override {
    return "reference given fp8 scales with the fault " + fault_.id() + " (negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    const ScaleFault f = fault_;
    return std::function<bool(const Cell&)>([f](const Cell& cell) {
      const Case& c = cell.c;
      if (!is_fp8(c.kv_dtype)) return false;
      const std::vector<float> k = c.k_scale.resolve(c.num_kv_heads), v = c.v_scale.resolve(c.num_kv_heads);
      std::vector<float> fk = k, fv = v;
      f.apply(fk, fv);
      for (std::size_t g = 0; g < k.size(); ++g)
        if (material(fk[g], k[g]) || material(fv[g], v[g])) return true;
      return false;
    });
  }
  void run(const pacheck_kernel_args& a) const override {
    cpu::Scales sc(a);
    fault_.apply(sc.k, sc.v);
    pacheck_kernel_args b = a;
    b.k_scales_per_head = sc.k.data();
    b.v_scales_per_head = sc.v.data();
    reference_.run(b);
  }

 private:
  std::string name_;
  ScaleFault fault_;
  Reference reference_;
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {

/// cpu.fp8_head0_scale with `head0_scales`, else cpu.reference (registered in cpu_kernels.cpp).
KernelPtr make_cpu_reference(bool head0_scales) { return std::make_shared<cpu::Reference>(head0_scales); }

KernelPtr make_cpu_scale_fault(std::string name, const ScaleFault& f) {
  return std::make_shared<cpu::ScaleFaultKernel>(std::move(name), f);
}

}  // namespace pacheck
