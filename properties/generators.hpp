// Generators of decode cells for the properties: dependent (block_size -> seq_lens -> geometry -> paging),
// restricted to what the kernel under test supports, and bounded in cost by RapidCheck's size.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/mla.hpp"
#include "kernels/kernel.hpp"

namespace pacheck::prop {

/// Tokens per split-KV partition that "multi-partition" refers to (cpu.split_kv, vLLM paged_attention_v2).
inline constexpr int kPartitionTokens = 512;

/// The values a generator may draw for each field of a case. probe_space() fills it from a kernel's
/// supports(), so no generated case is declined for a field the kernel never runs. A space is of one kind: a
/// multi-head space (mla_shapes empty) draws multi-head cases, an MLA space MLA cases only (core/mla.hpp), as a
/// kernel runs one kind (cell_support).
struct CaseSpace {
  std::vector<int> block_sizes;  ///< subset of {1, 8, 16, 32, 64, 128, 256}, smallest first
  std::vector<int> head_sizes;   ///< subset of {32, 64, 80, 96, 112, 128, 192, 256}, smallest first
  std::vector<int> gqa_ratios;   ///< subset of 1..16 (num_heads / num_kv_heads), smallest first
  std::vector<DType> kv_dtypes;  ///< cache dtypes
  bool mixed_dtypes = true;      ///< whether q_dtype and out_dtype may differ from kv_dtype
  std::vector<Layout> layouts;  ///< drawn uniformly (never aiter: its block_size constraint is drawn apart)
  /// Whether the kernel reads the aiter layout (seed 002): gen_case then makes one case in 8 whose
  /// block_size is a multiple of 16 an aiter case, from size 10 (docs/PROPERTIES.md, fuzz coverage).
  bool aiter_layout = false;
  std::vector<Dist> dists;
  /// The offset distributions the kernel takes (far_below, far_above, mixed_scales: logits far from zero;
  /// probe_space). gen_case moves one case in 8 from size 10 to one of them (16/32-bit caches only); empty:
  /// none (the properties whose domain leaves them out clear it, docs/PROPERTIES.md, Domains).
  std::vector<Dist> offset_dists;
  /// fp8 cache encodings the kernel takes (probe_space; full_space: all three). gen_case moves one case in 8
  /// from size 10 to one of them (gen_fp8: its scale form drawn among those below). Empty: no fp8 draw; the
  /// properties whose transforms do not carry fp8 codes and scales clear it (docs/PROPERTIES.md, Domains).
  std::vector<DType> fp8_dtypes;
  bool per_head_scales = false;  ///< the kernel takes per-KV-head fp8 scales (PACHECK_SCALE_FORM_PER_KV_HEAD)
  bool per_slot_scales = false;  ///< the kernel takes per-slot fp8 scale tables (seed 002, PER_SLOT)
  /// The attention variants (PACHECK_VARIANT_* bits) the kernel takes: probe_space tries each variant row of
  /// the case field table (core/case_fields.hpp) with its example value; full_space has them all. Cases carry
  /// several query tokens per sequence (Case::query_lens) only with PACHECK_VARIANT_MULTI_QUERY; from size 10
  /// one case in 8 gets one of its SLIDING_WINDOW, SOFT_CAP, ALIBI and SINKS for real (gen_variant). A
  /// property whose domain leaves the real variants out clears those bits (docs/PROPERTIES.md, Domains).
  unsigned variants = 0;
  /// Work bound at the largest size (100), in units of padded tokens x num_heads x head_size summed over
  /// sequences; smaller sizes get proportionally less (work_budget). The CPU kernels are scalar code, so
  /// this is what keeps a property run of hundreds of cases within seconds.
  std::int64_t max_work = 1 << 21;
  /// Joint constraints the per-field probes cannot see (e.g. a context bound). Empty: everything.
  std::function<Support(const Case&)> supports;
  /// The latent shapes of an MLA space, a subset of {512+64, 512+64,v256} (kv_lora_rank + qk_rope_head_dim,
  /// v_head_dim: DeepSeek-V2/V3's and Kimi-K2's row, and suite mla's shorter V prefix). Non-empty: gen_case draws
  /// MLA cases only (gen_mla_case), one KV head, head_size the row, layout nhd, num_heads from mla_heads;
  /// head_sizes, gqa_ratios, layouts, aiter_layout and offset_dists are then not drawn (MLA cases take none of
  /// them but nhd; check_mla_case).
  std::vector<MlaShape> mla_shapes;
  /// Query heads per rank of an MLA space: a subset of {1, 2, 4, 8, 16, 32, 64, 128} (DeepSeek-V3 128 on one
  /// rank and 16 at 8-way tensor parallelism, Kimi-K2 64 and 8, DeepSeek-V2-Lite 16), smallest first.
  std::vector<int> mla_heads;
  /// True for an MLA space (mla_shapes non-empty).
  bool mla() const { return !mla_shapes.empty(); }
};

/// Every value the generators know for multi-head cases, for a kernel that runs every case (Arbitrary<Case>
/// uses it).
CaseSpace full_space();

/// Every value the generators know for MLA cases (an MLA space: full_space's block sizes 1, 16, 32 and 64 only,
/// the uniform, normal and peaked distributions, e4m3fn/e5m2/e4m3fnuz caches with a per-tensor k_scale, several
/// query tokens and no other variant), for an MLA kernel that runs every MLA case.
CaseSpace full_mla_space();

/// Probes `cell_support(*k, ...)` one field at a time around a case the kernel accepts, keeping the values it
/// accepts. The probes are of the kernel's kind (Kernel::takes_mla, which cell_support enforces): multi-head
/// cases for a multi-head kernel, MLA cases (an MLA space: mla_shapes, mla_heads) for an MLA kernel, built-in,
/// plugin or Python. GPU kernels get a larger work bound (the oracle, on the CPU, is then the cost). Throws
/// std::invalid_argument naming the kernel when it declines every probe case of its kind.
CaseSpace probe_space(const KernelPtr& k);

/// Kernel work of a case: sum over sequences of seq_len rounded up to whole blocks (kernels that read
/// whole blocks pay for the tail), times num_heads x head_size.
std::int64_t case_work(const Case& c);

/// The work bound for RapidCheck size `size` (0..100): from 16K at size 0 up to space.max_work at 100.
std::int64_t work_budget(const CaseSpace& space, int size);

/// True when some sequence spans more than one split-KV partition (seq_len > kPartitionTokens).
bool multi_partition(const Case& c);

/// An integer uniform in [min, max) at every RapidCheck size, shrinking towards min. gen::inRange narrows
/// its range with the size (at size 0 it always gives min), which would pin every categorical choice to
/// its first value in the small cases; the generators here scale their bounds with the size explicitly.
rc::Gen<int> gen_uniform(int min, int max);

/// One seq_len for block size `bs` at RapidCheck size `size`, favouring the edges: 1, bs - 1, bs,
/// bs + 1; multiples of bs +- 1; the partition edges 511/512/513 (and 1023/1024/1025); anything in a
/// few blocks; and, from size 20 on, occasionally long (> 1024). Shrinks towards the edges, then 1.
rc::Gen<int> gen_seq_len(int bs, int size);

/// Which softmax scale a case gets: 0 (the default, head_size^-0.5, Case::scale unset) with probability 3/4,
/// else 3..7 uniformly: 1/head_size, (168/128 head_size)^-0.5, (144/128 head_size)^-0.5, 2 and 1/2 x the
/// default (the model-derived forms of docs/SUITES.md). Shrinks towards the default.
rc::Gen<int> gen_scale_choice();

/// A whole case of `space`'s kind: an MLA case (gen_mla_case) for an MLA space, else a multi-head one, as
/// follows. Multi-head: block_size, then 1..4 seq_lens for it, then GQA ratio, num_kv_heads, head_size,
/// dtypes, layout, distribution, seed and paging (spare_blocks, padding_columns, padding_target),
/// reduced to fit work_budget and repaired (longest sequence halved) until `space.supports` accepts it;
/// then the softmax scale (gen_scale_choice: non-default one case in four), high block ids (from size 20,
/// one case in 16 past 2^31 and one in 16 past 2^32) and, when `space.variants` has MULTI_QUERY, several query
/// tokens (gen_query_lens: from size 10, one case in 8) and one real attention variant (gen_variant, one case in
/// 8 from size 10, among space.variants' SLIDING_WINDOW, SOFT_CAP, ALIBI and SINKS); before those, from size 10,
/// one case in 8 gets an offset distribution (space.offset_dists: logits far from zero) and, after it, one case
/// in 8 an fp8 cache when the space has fp8_dtypes (with_fp8, of 16 draws: scale 1 and per tensor one each, per
/// KV head four, per tensor at the top binade two, per slot eight; not with an offset distribution, which needs a
/// 16/32-bit cache).
rc::Gen<Case> gen_case(const CaseSpace& space);

/// The MLA part of gen_case for an MLA space: block_size, then seq_lens for it as a multi-head case draws them
/// (1..4, or from size 30 one case in 8 a large batch), then the latent shape (space.mla_shapes), num_heads
/// (1, 8, 16, 64 and 128 two times in three, any of space.mla_heads otherwise), the softmax scale of an MLA model
/// (mla_models(): DeepSeek-V3's, DeepSeek-V2-Lite's or Kimi-K2's, explicit: MLA's scale is not 1 / sqrt(row)),
/// dtypes, distribution, seed and paging; then reduced to fit work_budget (fit_mla_budget: query heads halved
/// down to 16, then the longest sequence halved, then heads halved down to 1) and repaired as a multi-head case.
/// gen_case then adds high block ids, an fp8 cache (per-tensor k_scale: with_fp8) and several query tokens as
/// for a multi-head case. Shrinks towards block_size 1, one sequence of length 1, 512+64, one head and
/// DeepSeek-V3's scale.
rc::Gen<Case> gen_mla_case(const CaseSpace& space);

/// Query tokens per sequence for `c` (issue 19, speculative decode): from RapidCheck size 10, one case in 8
/// gets them, half the time one query_len for every sequence (2..8), else one per sequence (1..8, at least one
/// of them > 1); each is capped by its seq_len and so that the rows' work (case_work x max query_len) stays
/// within twice `budget`. Returns the case unchanged otherwise, or when no cap above 1 is left. Shrinks
/// towards no query tokens, then towards fewer.
rc::Gen<Case> gen_query_lens(Case c, int size, std::int64_t budget);

/// One real attention variant for `c` among the `variants` bits (issue 45; one case in 8 from size 10, the
/// kind uniform among those given): a sliding window W in 1..max seq_len, at least the query tokens (half the
/// time W < the shortest seq_len, so every sequence is cut), a soft cap of 30 or 50 (Grok-1's and Gemma-2's), geometric ALiBi
/// slopes, or sink logits spread from -2 to 3 over the query heads (not with an offset distribution, whose
/// rows the sink would outweigh entirely). Returns `c` unchanged otherwise. Shrinks towards no variant.
rc::Gen<Case> gen_variant(Case c, int size, unsigned variants);

/// `c` moved to an fp8 cache of encoding `kv` (seed 002, issue 18 item 5): `form` 0 the default scales (1),
/// 1 per tensor (k_scale 0.37, v_scale 2.5), 2 per KV head (ks=0.3~3, vs=3~0.3), 3 per tensor at the top binade
/// (k_scale = v_scale = the distribution's largest |value| / 400: 0.0025 uniform, 0.01 normal and peaked, 0.16
/// extreme, so e4m3fn codes 256..448 are read; issue 45; an e4m3fn cache whatever `kv`, where the space has
/// e4m3fn), 4 (or more) per slot (ks=vs=slot0.25~4;
/// per head instead where the space lacks per-slot tables or the pool is placed at high block ids, per tensor
/// where it lacks per-head ones). Per KV head over one KV head (a per-tensor scale in effect) splits the query
/// heads over two KV heads where the GQA ratio is even and the space takes the split (the work, which counts
/// query heads, is unchanged). An output dtype finer than the query's becomes the query's (designs that
/// round P.V products of an fp8 cache to the query dtype, cpu.half_products, meet their limit there).
/// An MLA case (one latent cache, one per-tensor k_scale: check_mla_case) takes forms 0, 1 and 3 on k_scale
/// alone; 2 and 4 become 1.
/// Returns `c` unchanged when the moved case is invalid or `space.supports` declines it.
Case with_fp8(const CaseSpace& space, const Case& c, DType kv, int form);

/// A fault that writes something: poison value (NaN first), target (V first) and region (tail first).
rc::Gen<FaultSpec> gen_fault();

/// A fault for case `c`: gen_fault(), except that a case with per-slot K and V scale tables poisons their
/// unwritten entries (region `scales`) half the time, and a case with a sliding window the keys before its
/// edge (region `window`) half the time otherwise (both drawn second, so shrinking goes to gen_fault's
/// regions); an fp8 cache without Inf codes gets poison `max` for ±Inf outside the (fp32) scale tables.
rc::Gen<FaultSpec> gen_fault_for(const Case& c);

/// A cell of gen_case; its fault is gen_fault_for(case) when `with_fault`, clean otherwise.
rc::Gen<Cell> gen_cell(const CaseSpace& space, bool with_fault);

}  // namespace pacheck::prop

namespace pacheck {
/// RapidCheck printers: a counterexample shows the case/cell id, which `pacheck repro` reads back.
void showValue(const Case& c, std::ostream& os);
void showValue(const FaultSpec& f, std::ostream& os);
void showValue(const Cell& cell, std::ostream& os);
}  // namespace pacheck

namespace rc {
/// Decode cases over every field value pacheck knows (full_space()), for RC_GTEST_PROP arguments.
template <>
struct Arbitrary<pacheck::Case> {
  static Gen<pacheck::Case> arbitrary();
};
/// Non-clean faults (gen_fault()).
template <>
struct Arbitrary<pacheck::FaultSpec> {
  static Gen<pacheck::FaultSpec> arbitrary();
};
/// Cells with a non-clean fault over full_space().
template <>
struct Arbitrary<pacheck::Cell> {
  static Gen<pacheck::Cell> arbitrary();
};
}  // namespace rc
