// Shared pieces of the CPU MLA kernels (kernels/cpu/mla_*.cpp): their base class and the latent-row products.
// An MLA call reaches them as one KV head of head_size = the latent row (kernels/mla_kernel.hpp), so the
// SeqView of cpu_common.hpp reads it: sv.k<KV>(t, 0, i) is value i of token t's latent row and sv.v<KV>(t, 0, d)
// value d of the same row (value_cache == key_cache), both dequantised with the cache's scale.
#pragma once

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/mla_kernel.hpp"

namespace pacheck::cpu {

/// Base of the CPU MLA kernels: device CPU, every MLA case supported.
class CpuMlaKernel : public MlaKernel {
 public:
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
};

/// q . row_t over the row's values [first, last), summed in fp32 in value order; `q` is the query row [row].
template <DType KV>
float row_dot(const SeqView& sv, const std::vector<float>& q, int t, int first, int last) {
  float dot = 0;
  for (int i = first; i < last; ++i) dot += q[static_cast<std::size_t>(i)] * sv.k<KV>(t, 0, i);
  return dot;
}

/// Value i of the latent row in slot `slot` of physical block `phys`, read as V is read (value_cache, the same
/// rows as key_cache), dequantised with the cache's scale: for kernels that address slots through something
/// other than the sequence's block_tables row.
template <DType KV>
float latent_at(const pacheck_kernel_args& a, const Scales& sc, std::int64_t phys, int slot, int i) {
  const float e = ld<KV>(a.value_cache, value_offset(a.layout, a.v_strides, phys, 0, slot, i));
  if constexpr (is_fp8(KV)) return e * sc.v_at(phys, 0, slot);
  else return e;
}

/// Keys the longest sequence of a normal or uniform cell must have for the logit controls (cpu.mla_fixed_scale,
/// cpu.mla_rope_dropped, cpu.mla_rope_unscaled) to claim a failure: tests/test_mla.cpp's cells, 16 heads at 16 to
/// 100 keys, all fail. Below it a cell fails or passes by its values (one key gives weight 1 whatever the logit);
/// the predicates make no claim there and no test or suite cell has such a length.
inline constexpr int kMlaMinKeys = 16;

/// True for the distributions on which the MLA controls that change logits or V offsets are judged: normal and
/// uniform. Under `peaked` every row's weight sits on its hot tokens, whose latent rows are identical (+3 in every
/// value), so a changed logit or a V read at another offset of the row gives the same output.
inline bool mla_varied_rows(const Case& c) { return c.dist == Dist::normal || c.dist == Dist::uniform; }

}  // namespace pacheck::cpu
