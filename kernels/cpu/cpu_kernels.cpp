// CPU kernels: faithful models of real paged-attention decode designs, including negative controls.
//
//  cpu.reference        reads only valid slots; fp32 logits, softmax and accumulation.
// Every kernel normalises the softmax weights before P.V (out = sum_t (p_t / sum p) V_t, a convex
// combination, as vLLM's kernels and the GPU kernels do): an accumulator of unnormalised p x V overflows
// fp32 to Inf when a few V near the dtype's limit (bf16/f32 up to 3.4e38) tie at the max logit, where the
// output itself is finite (docs/PROPERTIES.md, Findings).
//  cpu.vector_v         vLLM v1-style: logits of a whole block computed and masked past seq_len, but V
//                       multiplied in vectors covering the whole final block, so p = 0 meets the tail:
//                       0 * NaN = NaN. NEGATIVE CONTROL (vLLM issue 641; ROCm custom kernel, PR 53856).
//  cpu.vector_v_masked  the same design with the straddling V vector's slots >= seq_len zeroed (the fix).
//  cpu.split_kv         split-KV (vLLM paged_attention_v2 / FlashDecoding): partitions of 512 tokens each
//                       produce (max, exp-sum, partial out); a merge rescales by exp(m_i - M).
//  cpu.fp8_head0_scale  cpu.reference reading every KV head with head 0's dequantisation scales (per-head
//                       scales indexed by a constant). NEGATIVE CONTROL (fault classes, section 5).
//  cpu.fp8_scale_fault  cpu.reference given the last KV head's K and V scales as 1: the scale left out on
//                       one path. NEGATIVE CONTROL (fault classes, section 5).
// Every kernel reads fp8 caches (e4m3fn, e4m3fnuz, e5m2) as decode(code) * scale of the KV head, in fp32:
// the product the oracle's pre-paging values were made with (oracle/tensors.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/kernel.hpp"

namespace pacheck {
namespace {

using cpu::dispatch_kv;
using cpu::ld;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

class CpuKernel : public Kernel {
 public:
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  Support supports(const Case&) const override { return Support::yes(); }
};

/// Reads K/V through the block table; `slot_of(t)` etc. computed per token. fp8 elements are dequantised
/// with `sc`; other dtypes are read as stored.
struct SeqView {
  const pacheck_kernel_args& a;
  int s, x;
  const cpu::Scales& sc;
  std::int64_t block_of(int t) const { return cpu::physical_block(a, s, t / a.block_size); }
  template <DType KV>
  float k(int t, int g, int d) const {
    const float e = ld<KV>(a.key_cache, key_offset(a.layout, a.k_strides, x, block_of(t), g, t % a.block_size, d));
    if constexpr (is_fp8(KV)) return e * sc.k[g];
    else return e;
  }
  template <DType KV>
  float v(int t, int g, int d) const {
    const float e = ld<KV>(a.value_cache, value_offset(a.layout, a.v_strides, block_of(t), g, t % a.block_size, d));
    if constexpr (is_fp8(KV)) return e * sc.v[g];
    else return e;
  }
};

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

/// vLLM v1-style block loop. Logits are computed for every slot of every block the sequence touches and
/// masked to -inf at or past seq_len (so K in the tail is harmless); V is multiplied in vectors spanning a
/// whole block. With MaskV the slots >= seq_len of the straddling vector are zeroed first.
template <bool MaskV>
class VectorV final : public CpuKernel {
 public:
  std::string name() const override { return MaskV ? "cpu.vector_v_masked" : "cpu.vector_v"; }
  std::string description() const override {
    return MaskV ? "block-vector V with the straddling V vector masked (the fix)"
                 : "block-vector V over the whole final block, tail unmasked (negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    if (MaskV) return std::nullopt;
    return std::function<bool(const Cell&)>(poisons_v_tail);
  }
  void run(const pacheck_kernel_args& a) const override {
    dispatch_kv(a, [&]<DType KV>() {
      const int ratio = a.num_heads / a.num_kv_heads, D = a.head_size, B = a.block_size;
      std::vector<float> q(D), logits, acc(D), vvec(static_cast<std::size_t>(B) * D);
      const cpu::Scales sc(a);
      for (int s = 0; s < a.num_seqs; ++s) {
        const SeqView sv{a, s, cpu::pack_x(a), sc};
        const int len = a.seq_lens[s];
        const int nblocks = (len + B - 1) / B;
        logits.assign(static_cast<std::size_t>(nblocks) * B, kNegInf);
        for (int h = 0; h < a.num_heads; ++h) {
          const int g = h / ratio;
          for (int d = 0; d < D; ++d) q[d] = cpu::query(a, s, h, d);
          float m = kNegInf;
          for (int t = 0; t < nblocks * B; ++t) {
            float dot = 0;
            for (int d = 0; d < D; ++d) dot += q[d] * sv.k<KV>(t, g, d);  // whole block, tail included
            logits[t] = t < len ? dot * a.scale : kNegInf;                 // the logit mask
            m = std::max(m, logits[t]);
          }
          // p = exp(-inf - m) = 0 exactly past seq_len.
          float sum = 0;
          for (int t = 0; t < nblocks * B; ++t) sum += (logits[t] = std::exp(logits[t] - m));
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int j = 0; j < nblocks; ++j) {
            // Load the block's V vector: every slot, as a vectorised load would.
            for (int slot = 0; slot < B; ++slot)
              for (int d = 0; d < D; ++d) {
                const int t = j * B + slot;
                vvec[static_cast<std::size_t>(slot) * D + d] = (MaskV && t >= len) ? 0.0f : sv.v<KV>(t, g, d);
              }
            for (int slot = 0; slot < B; ++slot) {
              const float w = logits[j * B + slot] / sum;  // 0 past seq_len: 0 x NaN = NaN unmasked
              for (int d = 0; d < D; ++d) acc[d] += w * vvec[static_cast<std::size_t>(slot) * D + d];
            }
          }
          for (int d = 0; d < D; ++d) cpu::store_out(a, s, h, d, acc[d]);
        }
      }
    });
  }
};

/// Split-KV over partitions of `partition` tokens: each partition keeps (max m_i, exp-sum l_i, normalised
/// partial o_i = sum (p / l_i) V, as vLLM v2's tmp_out); the merge takes M = max m_i, weights
/// w_i = exp(m_i - M) l_i and out = sum (w_i / sum w) o_i, skipping empty partitions (m_i = -inf) so
/// -inf - -inf never appears. Both sums are convex combinations: no intermediate exceeds max |V|.
class SplitKv final : public CpuKernel {
 public:
  explicit SplitKv(int partition) : partition_(partition) {}
  std::string name() const override {
    return partition_ == 512 ? "cpu.split_kv" : "cpu.split_kv_p" + std::to_string(partition_);
  }
  std::string description() const override {
    return "split-KV: partitions of " + std::to_string(partition_) + " tokens merged by max and exp-sum";
  }
  void run(const pacheck_kernel_args& a) const override {
    dispatch_kv(a, [&]<DType KV>() {
      const int ratio = a.num_heads / a.num_kv_heads, D = a.head_size, P = partition_;
      std::vector<float> q(D), part_m, part_l, part_o, logits(P);
      const cpu::Scales sc(a);
      for (int s = 0; s < a.num_seqs; ++s) {
        const SeqView sv{a, s, cpu::pack_x(a), sc};
        const int len = a.seq_lens[s];
        const int nparts = (len + P - 1) / P;
        for (int h = 0; h < a.num_heads; ++h) {
          const int g = h / ratio;
          for (int d = 0; d < D; ++d) q[d] = cpu::query(a, s, h, d);
          part_m.assign(nparts, kNegInf);
          part_l.assign(nparts, 0.0f);
          part_o.assign(static_cast<std::size_t>(nparts) * D, 0.0f);
          for (int pi = 0; pi < nparts; ++pi) {
            const int t0 = pi * P, t1 = std::min(len, t0 + P);
            for (int t = t0; t < t1; ++t) {
              float dot = 0;
              for (int d = 0; d < D; ++d) dot += q[d] * sv.k<KV>(t, g, d);
              logits[t - t0] = dot * a.scale;
              part_m[pi] = std::max(part_m[pi], logits[t - t0]);
            }
            for (int t = t0; t < t1; ++t) part_l[pi] += (logits[t - t0] = std::exp(logits[t - t0] - part_m[pi]));
            for (int t = t0; t < t1; ++t) {
              const float w = logits[t - t0] / part_l[pi];
              for (int d = 0; d < D; ++d) part_o[static_cast<std::size_t>(pi) * D + d] += w * sv.v<KV>(t, g, d);
            }
          }
          float M = kNegInf;
          for (int pi = 0; pi < nparts; ++pi) M = std::max(M, part_m[pi]);
          std::vector<float> weight(nparts, 0.0f), out(D, 0.0f);
          float denom = 0;
          for (int pi = 0; pi < nparts; ++pi) {
            if (part_m[pi] == kNegInf) continue;  // empty partition: weight 0
            denom += (weight[pi] = std::exp(part_m[pi] - M) * part_l[pi]);
          }
          for (int pi = 0; pi < nparts; ++pi) {
            if (part_m[pi] == kNegInf) continue;
            const float w = weight[pi] / denom;
            for (int d = 0; d < D; ++d) out[d] += w * part_o[static_cast<std::size_t>(pi) * D + d];
          }
          for (int d = 0; d < D; ++d) cpu::store_out(a, s, h, d, out[d]);
        }
      }
    });
  }

 private:
  int partition_;
};

}  // namespace

void register_cpu_kernels(Registry& r) {
  r.add(std::make_shared<Reference>());
  r.add(std::make_shared<VectorV<false>>());
  r.add(std::make_shared<VectorV<true>>());
  r.add(std::make_shared<SplitKv>(512));
  r.add(std::make_shared<Reference>(/*head0_scales=*/true));
  r.add(std::make_shared<ScaleFaultKernel>("cpu.fp8_scale_fault", ScaleFault{Target::kv, -1, 1.0f}));
}

KernelPtr make_cpu_scale_fault(std::string name, const ScaleFault& f) {
  return std::make_shared<ScaleFaultKernel>(std::move(name), f);
}

/// Factory for tests and properties that need another partition size.
KernelPtr make_cpu_split_kv(int partition) { return std::make_shared<SplitKv>(partition); }

}  // namespace pacheck
