// cpu.vector_v and cpu.vector_v_masked: vLLM v1-style, logits of a whole block computed and masked past
// seq_len, but V multiplied in vectors covering the whole final block, so p = 0 meets the tail:
// 0 * NaN = NaN. cpu.vector_v is a NEGATIVE CONTROL (vLLM issue 641; ROCm custom kernel, PR 53856);
// cpu.vector_v_masked zeroes the straddling V vector's slots >= seq_len (the fix).
#include "kernels/cpu/cpu_common.hpp"

namespace pacheck::cpu {
namespace {

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
    // The tail, and V before a window edge inside a block (the edge's block is read whole from its start).
    return std::function<bool(const Cell&)>(
        [](const Cell& cell) { return poisons_v_tail(cell) || poisons_v_window(cell, false); });
  }
  void run(const pacheck_kernel_args& a) const override {
    dispatch_kv(a, [&]<DType KV>() {
      const int ratio = a.num_heads / a.num_kv_heads, D = a.head_size, B = a.block_size;
      std::vector<float> q(D), logits, acc(D), vvec(static_cast<std::size_t>(B) * D);
      const cpu::Scales sc(a);
      for (int s = 0; s < a.num_seqs; ++s) {
        const QueryRows rows = query_rows(a, s);
        for (int r = rows.first; r < rows.last; ++r) {
          // Query row r sees keys 0 .. len - 1 (causal); the block holding its last key is read whole, the
          // slots past it (later query tokens' keys, or the tail) masked in the logits only.
          const SeqView sv{a, s, cpu::pack_x(a), sc};
          const int len = row_keys(a, s, r);
          const int nblocks = (len + B - 1) / B;
          logits.assign(static_cast<std::size_t>(nblocks) * B, kNegInf);
          for (int h = 0; h < a.num_heads; ++h) {
            const int g = h / ratio;
            for (int d = 0; d < D; ++d) q[d] = cpu::query(a, r, h, d);
            // With a sliding window the loop starts at the block holding its edge `first`; that block's
            // slots before the edge are masked like the tail.
            const int first = window_first(a, len), jfirst = first / B;
            const std::optional<float> sink = sink_logit(a, h);
            float m = sink.value_or(kNegInf);
            for (int t = jfirst * B; t < nblocks * B; ++t) {
              float* k = k_scratch(D);
              sv.k_row<KV>(t, g, k, D);  // whole block, tail included
              float dot = 0;
              for (int d = 0; d < D; ++d) dot += q[d] * k[d];
              logits[t] = t < len && t >= first ? apply_variants(a, len, h, t, dot * a.scale) : kNegInf;  // the mask
              m = std::max(m, logits[t]);
            }
            // p = exp(-inf - m) = 0 exactly past seq_len.
            float sum = sink ? std::exp(*sink - m) : 0.0f;
            for (int t = jfirst * B; t < nblocks * B; ++t) sum += (logits[t] = std::exp(logits[t] - m));
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int j = jfirst; j < nblocks; ++j) {
              // Load the block's V vector: every slot, as a vectorised load would.
              for (int slot = 0; slot < B; ++slot) {
                const int t = j * B + slot;
                float* row = &vvec[static_cast<std::size_t>(slot) * D];
                if (MaskV && (t >= len || t < first)) std::fill(row, row + D, 0.0f);
                else sv.v_row<KV>(t, g, row, D);
              }
              for (int slot = 0; slot < B; ++slot) {
                const float w = logits[j * B + slot] / sum;  // 0 past seq_len: 0 x NaN = NaN unmasked
                for (int d = 0; d < D; ++d) acc[d] += w * vvec[static_cast<std::size_t>(slot) * D + d];
              }
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

/// cpu.vector_v_masked with `mask_v`, else the negative control cpu.vector_v (registered in cpu_kernels.cpp).
KernelPtr make_cpu_vector_v(bool mask_v) {
  if (mask_v) return std::make_shared<cpu::VectorV<true>>();
  return std::make_shared<cpu::VectorV<false>>();
}

}  // namespace pacheck
