// cpu.slot_scale_unmasked: NEGATIVE CONTROL for per-slot fp8 scale tables (seed 002: AITER's asm decode
// reads [num_blocks, num_kv_heads, block_size] scales). Logits are masked past seq_len and the V codes of
// the final block are masked too, but the block's per-slot V scales are loaded as one vector and applied
// to every slot after the masked product: p x (code x scale) with p = 0 and code = 0 still meets the scale
// of an unwritten slot, and 0 x NaN = NaN. Caught exactly on the cells whose V scale-table entries of some
// tail slot are NaN or Inf (region `scales`, a straddling length); honest everywhere else.
#include "faults/inject.hpp"
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

class SlotScaleUnmasked final : public CpuKernel {
 public:
  std::string name() const override { return "cpu.slot_scale_unmasked"; }
  std::string description() const override {
    return "per-slot V scales applied across the whole final block after masking (negative control)";
  }
  std::optional<std::function<bool(const Cell&)>> expected_failures() const override {
    return std::function<bool(const Cell&)>(poisons_v_slot_scale_tail);
  }
  void run(const pacheck_kernel_args& a) const override {
    for_each_query_head(a, [&]<DType KV>(const SeqView& sv, int g, const std::vector<float>& q, std::vector<float>& out) {
      const int len = sv.len, D = a.head_size, B = a.block_size, first = window_first(a, len);
      std::vector<float> p(static_cast<std::size_t>(len), 0.0f);
      const std::optional<float> sink = sink_logit(a, sv.h);
      float m = sink.value_or(kNegInf);
      for (int t = first; t < len; ++t) {
        float dot = 0;
        for (int d = 0; d < D; ++d) dot += q[d] * sv.k<KV>(t, g, d);
        p[t] = apply_variants(a, len, sv.h, t, dot * a.scale);
        m = std::max(m, p[t]);
      }
      float sum = sink ? std::exp(*sink - m) : 0.0f;
      for (int t = first; t < len; ++t) sum += (p[t] = std::exp(p[t] - m));
      std::fill(out.begin(), out.end(), 0.0f);
      const int nblocks = (len + B - 1) / B;
      for (int j = first / B; j < nblocks; ++j) {
        const std::int64_t block = sv.block_of(j * B);
        for (int slot = 0; slot < B; ++slot) {
          const int t = j * B + slot;
          const bool in = t >= first && t < len;
          const float w = in ? p[t] / sum : 0.0f;
          // The planted fault: the slot's scale is read for every slot of the block, masked or not.
          const float scale = is_fp8(KV) ? sv.sc.v_at(block, g, slot) : 1.0f;
          for (int d = 0; d < D; ++d) {
            const float code = in ? ld<KV>(a.value_cache, value_offset(a.layout, a.v_strides, block, g, slot, d)) : 0.0f;
            out[d] += w * (code * scale);
          }
        }
      }
    });
  }
};

}  // namespace
}  // namespace pacheck::cpu

namespace pacheck {

/// cpu.slot_scale_unmasked (registered in cpu_kernels.cpp).
KernelPtr make_cpu_slot_scale_unmasked() { return std::make_shared<cpu::SlotScaleUnmasked>(); }

}  // namespace pacheck
