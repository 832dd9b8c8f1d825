// cpu.reference and the three scale negative controls built on it:
//  cpu.reference        reads only valid slots; fp32 logits, softmax and accumulation.
//  cpu.fixed_scale      cpu.reference using 1/sqrt(head_size) instead of the softmax scale it is passed, as
//                       a kernel that recomputes the usual scale does. NEGATIVE CONTROL (issue 18).
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

/// What reference.cpp's Reference computes: the honest kernel or one of its two controls.
enum class Variant {
  honest,        ///< cpu.reference
  head0_scales,  ///< cpu.fp8_head0_scale: every KV head dequantised with head 0's scales
  fixed_scale,   ///< cpu.fixed_scale: 1/sqrt(head_size) instead of pacheck_kernel_args::scale
};

/// True when cpu.fixed_scale must fail the cell, as measured (2026-12-04: heads 8/2, head 64 and 128,
/// bf16/f16/f32, 2 to 1,063 tokens, two seeds; docs/SUITES.md has the table). With r the ratio of the cell's
/// scale to head_size^-0.5, either way, and 16 or more tokens in some sequence:
///  - dist normal (logits ~ N(0, 1) at the default scale): r >= 1.05 (every cell failed, margin >= 2.1; at
///    2 to 5 tokens some passed);
///  - dist uniform (logits' spread a third of normal's): r >= 1.1 (every cell failed, margin >= 1.46; at
///    1.05 a fifth of them passed);
///  - dist peaked: a scale at most head_size^-0.5 / 6 (every cell failed, margin >= 3; at / 2 to / 4 some
///    did). Its hot keys lead by about 3 sqrt(head_size) x the scale's ratio: within / 1.1 .. x 2 all the
///    weight stays on them and the output was bitwise the honest one's;
///  - dist extreme, overflow: never (logits +-4e3 sqrt(head_size) apart, ties at the maximum: bitwise the
///    honest output from / 8 to x 2).
/// Cells between these bounds (a normal cell of 5 tokens at 1.05, a uniform one at 1.06, a peaked one at
/// / 3) fail or pass by their values; no built-in suite has one.
bool fixed_scale_fails(const Case& c) {
  const double used = 1.0 / std::sqrt(static_cast<double>(static_cast<float>(c.head_size)));
  const double s = c.effective_scale(), ratio = std::max(s / used, used / s);
  if (c.max_seq_len() < 16) return false;
  if (c.dist == Dist::normal) return ratio >= 1.05;
  if (c.dist == Dist::uniform) return ratio >= 1.1;
  if (c.dist == Dist::peaked) return s <= used / 6;
  return false;
}

class Reference final : public CpuKernel {
 public:
  explicit Reference(Variant v = Variant::honest) : variant_(v) {}
  std::string name() const override {
    switch (variant_) {
      case Variant::head0_scales: return "cpu.fp8_head0_scale";
      case Variant::fixed_scale: return "cpu.fixed_scale";
      case Variant::honest: break;
    }
    return "cpu.reference";
  }
  std::string description() const override {
    switch (variant_) {
      case Variant::head0_scales: return "reference reading every KV head with head 0's fp8 scales (negative control)";
      case Variant::fixed_scale:
        return "reference ignoring the softmax scale it is passed, using 1/sqrt(head_size) (negative control)";
      case Variant::honest: break;
    }
    return "reads only valid slots; fp32 softmax and accumulation";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    if (variant_ == Variant::honest) return std::nullopt;
    if (variant_ == Variant::fixed_scale)
      return std::function<bool(const Cell&)>([](const Cell& cell) { return fixed_scale_fails(cell.c); });
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
      // The fault of cpu.fixed_scale: a.scale is not read.
      const float scale = variant_ == Variant::fixed_scale ? 1.0f / std::sqrt(static_cast<float>(D)) : a.scale;
      if (variant_ == Variant::head0_scales) {
        std::fill(sc.k.begin(), sc.k.end(), sc.k[0]);
        std::fill(sc.v.begin(), sc.v.end(), sc.v[0]);
      }
      for (int s = 0; s < a.num_seqs; ++s) {
        const QueryRows rows = query_rows(a, s);
        for (int r = rows.first; r < rows.last; ++r) {  // each query row sees keys 0 .. len - 1 (causal)
          const SeqView sv{a, s, cpu::pack_x(a), sc};
          const int len = row_keys(a, s, r);
          logits.assign(len, 0.0f);
          for (int h = 0; h < a.num_heads; ++h) {
            const int g = h / ratio;
            for (int d = 0; d < D; ++d) q[d] = cpu::query(a, r, h, d);
            const int first = window_first(a, len);  // keys before it are outside the sliding window
            const std::optional<float> sink = sink_logit(a, h);
            float m = sink.value_or(kNegInf);
            for (int t = first; t < len; ++t) {
              float* k = k_scratch(D);
              sv.k_row<KV>(t, g, k, D);
              float dot = 0;
              for (int d = 0; d < D; ++d) dot += q[d] * k[d];
              logits[t] = apply_variants(a, len, h, t, dot * scale);
              m = std::max(m, logits[t]);
            }
            float sum = sink ? std::exp(*sink - m) : 0.0f;  // the sink: denominator only
            for (int t = first; t < len; ++t) sum += (logits[t] = std::exp(logits[t] - m));
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int t = first; t < len; ++t) {
              const float w = logits[t] / sum;  // normalised first: |acc| <= max |V|, never Inf
              float* v = v_scratch(D);
              sv.v_row<KV>(t, g, v, D);
              for (int d = 0; d < D; ++d) acc[d] += w * v[d];
            }
            for (int d = 0; d < D; ++d) cpu::store_out(a, r, h, d, acc[d]);
          }
        }
      }
    });
  }

 private:
  Variant variant_;
};

/// cpu.reference called with the K and V scales of one KV head replaced (faults/inject.hpp ScaleFault):
/// the kernel is right, the scales it is given are not, as when a scale is left out on one code path.
class ScaleFaultKernel final : public CpuKernel {
 public:
  ScaleFaultKernel(std::string name, ScaleFault f) : name_(std::move(name)), fault_(f) {}
  std::string name() const override { return name_; }
  // Its fault replaces per-KV-head scales; with per-slot tables (seed 002) there are none to replace.
  Support supports(const Case& c) const override {
    for (auto [field, s] : {std::pair{"k_scale", &c.k_scale}, std::pair{"v_scale", &c.v_scale}})
      if (is_fp8(c.kv_dtype) && s->per_slot())
        return Support::no(std::string(field) + " " + s->text() + ": per-slot scale tables; " + name_ +
                           " faults per-KV-head scales");
    return Support::yes();
  }
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
KernelPtr make_cpu_reference(bool head0_scales) {
  return std::make_shared<cpu::Reference>(head0_scales ? cpu::Variant::head0_scales : cpu::Variant::honest);
}

/// cpu.fixed_scale (registered in cpu_kernels.cpp).
KernelPtr make_cpu_fixed_scale() { return std::make_shared<cpu::Reference>(cpu::Variant::fixed_scale); }

KernelPtr make_cpu_scale_fault(std::string name, const ScaleFault& f) {
  return std::make_shared<cpu::ScaleFaultKernel>(std::move(name), f);
}

}  // namespace pacheck
