#include "properties/generators.hpp"

#include "core/case_fields.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <optional>
#include <tuple>

namespace pacheck::prop {
namespace {

using rc::Gen;
namespace gen = rc::gen;

const std::vector<int> kBlockSizes{1, 8, 16, 32, 64, 128, 256};
const std::vector<int> kHeadSizes{32, 64, 80, 96, 112, 128, 192, 256, 512};
/// GQA ratios of real models (and the odd 3 and 7; 5, 6 and 12 of issue 18: 40/8, 48/8, 96/8); drawn more
/// often than the rest of 1..16.
const std::vector<int> kFavouredRatios{1, 2, 3, 4, 5, 6, 7, 8, 12, 16};
const std::vector<DType> kDTypes{DType::bf16, DType::f16, DType::f32};
const std::vector<DType> kFp8DTypes{DType::fp8_e4m3fn, DType::fp8_e5m2, DType::fp8_e4m3fnuz};
/// Every distribution but overflow, which only the opt-in overflow property draws (docs/PROPERTIES.md, Domains).
const std::vector<Dist> kDists{Dist::normal, Dist::uniform, Dist::peaked, Dist::extreme};
/// The offset distributions (logits far from zero), drawn apart: one case in 8 from size 10.
const std::vector<Dist> kOffsetDists{Dist::far_below, Dist::far_above, Dist::mixed_scales};
/// The attention variants gen_variant draws for real.
constexpr unsigned kDrawnVariants =
    PACHECK_VARIANT_SLIDING_WINDOW | PACHECK_VARIANT_SOFT_CAP | PACHECK_VARIANT_ALIBI | PACHECK_VARIANT_SINKS;
/// Every poison value of poison_table() but `none`, in its order (NaN first, where shrinking goes), so a new
/// poison value is drawn with no edit here.
const std::vector<Poison> kPoisons = [] {
  std::vector<Poison> v;
  for (const PoisonInfo& p : poison_table())
    if (p.value != Poison::none) v.push_back(p.value);
  return v;
}();
const std::vector<Target> kTargets{Target::v, Target::k, Target::kv};
/// MLA (core/mla.hpp): the latent shapes, 512+64 first (where shrinking goes): DeepSeek-V2/V3's, V2-Lite's and
/// Kimi-K2's row, and suite mla's V prefix of 256 of its 512 latent values.
const std::vector<MlaShape> kMlaShapes{{512, 64, 512}, {512, 64, 256}};
/// Query heads per rank of an MLA case; 1, 8, 16, 64 and 128 (DeepSeek-V3 on 128 ranks, 8-way and one rank;
/// Kimi-K2 at 8-way and one rank) drawn two times in three, 1 first (where shrinking goes).
const std::vector<int> kMlaHeads{1, 2, 4, 8, 16, 32, 64, 128};
const std::vector<int> kFavouredMlaHeads{1, 8, 16, 64, 128};
/// MLA page sizes: AITER's and FlashInfer's 1, vLLM's 16 and 32, FlashMLA's 64.
const std::vector<int> kMlaBlockSizes{1, 16, 32, 64};
/// Query heads an MLA case over budget keeps before its sequences are shortened (fit_mla_budget): DeepSeek-V3's
/// and V2-Lite's count at 8-way tensor parallelism.
constexpr int kMlaHeadsKept = 16;
const std::vector<Region> kRegions{Region::tail, Region::all, Region::unused, Region::padding, Region::others};

/// Seeds uniform in [0, 2^20) at every size (see gen_uniform).
Gen<std::uint64_t> gen_seed() { return gen::resize(100, gen::inRange<std::uint64_t>(0, 1u << 20)); }

/// An element of `v` picked by index, so it shrinks towards v[0] (gen::elementOf does not shrink).
template <typename T>
Gen<T> pick(std::vector<T> v) {
  if (v.empty()) throw std::invalid_argument("generator: nothing to pick from");
  const int n = static_cast<int>(v.size());
  return gen::map(gen_uniform(0, n), [v = std::move(v)](int i) { return v[static_cast<std::size_t>(i)]; });
}

int blocks_of(int len, int bs) { return (len + bs - 1) / bs; }

std::int64_t pool_blocks(const Case& c) {
  std::int64_t n = c.spare_blocks;
  for (int s = 0; s < c.num_seqs(); ++s) n += c.blocks_for(s);
  return n;
}

/// The largest value of `sorted` below `v`, if any.
std::optional<int> next_smaller(const std::vector<int>& sorted, int v) {
  std::optional<int> out;
  for (int x : sorted)
    if (x < v) out = x;
  return out;
}

/// Shrinks `c` until its work fits `budget`: fewer KV heads, then a smaller head_size, then a smaller
/// GQA ratio, and only then shorter sequences, so the features that make a case interesting (lengths
/// at edges, GQA) survive as long as possible.
void fit_budget(Case& c, const CaseSpace& sp, std::int64_t budget) {
  while (case_work(c) > budget) {
    const int ratio = c.gqa_ratio();
    if (c.num_kv_heads > 1) {
      c.num_kv_heads /= 2;
      c.num_heads = ratio * c.num_kv_heads;
    } else if (auto hs = next_smaller(sp.head_sizes, c.head_size)) {
      c.head_size = *hs;
    } else if (auto r = next_smaller(sp.gqa_ratios, ratio)) {
      c.num_heads = *r * c.num_kv_heads;
    } else {
      auto longest = std::max_element(c.seq_lens.begin(), c.seq_lens.end());
      if (*longest == 1) return;
      *longest = (*longest + 1) / 2;
    }
  }
}

/// Shrinks MLA case `c` until its work fits `budget`: query heads halved down to kMlaHeadsKept, then the
/// longest sequence halved, then heads halved down to 1, so lengths at block edges survive the budget before a
/// model's head count below 16 does. A case of one head and sequences of length 1 may stay over (one block of a
/// 576-value row at page 64 is 36,864, over size 0's 16K).
void fit_mla_budget(Case& c, std::int64_t budget) {
  while (case_work(c) > budget) {
    auto longest = std::max_element(c.seq_lens.begin(), c.seq_lens.end());
    if (c.num_heads > kMlaHeadsKept) c.num_heads = std::max(kMlaHeadsKept, c.num_heads / 2);
    else if (*longest > 1) *longest = (*longest + 1) / 2;
    else if (c.num_heads > 1) c.num_heads /= 2;
    else return;
  }
}

/// An element of `all` from `favoured` (those of it in `all`) two times in three, any of `all` otherwise;
/// shrinks towards favoured's first.
Gen<int> gen_favoured(const std::vector<int>& favoured_values, const std::vector<int>& all) {
  std::vector<int> favoured;
  for (int r : favoured_values)
    if (std::find(all.begin(), all.end(), r) != all.end()) favoured.push_back(r);
  if (favoured.empty()) favoured = all;
  return gen::mapcat(gen_uniform(0, 3), [favoured, all](int which) { return which < 2 ? pick(favoured) : pick(all); });
}

/// GQA ratio: a favoured ratio two times in three, any supported ratio otherwise.
Gen<int> gen_ratio(const CaseSpace& sp) { return gen_favoured(kFavouredRatios, sp.gqa_ratios); }

/// Significand bits (with the implicit one) of bf16, f16 and f32.
int significand_bits(DType t) { return t == DType::f32 ? 24 : t == DType::f16 ? 11 : 8; }

/// (q, kv, out) dtypes: q and out equal kv four times in five (the common case), else any dtype, except an
/// output dtype finer than the KV dtype (f16/f32 output of a bf16 cache, f32 of an f16 one), which becomes
/// the KV dtype. The fixed limit is the output dtype's; honest designs that compute P.V in the cache dtype
/// (cpu.half_products: products rounded to it; cpu.p_in_v_dtype: P rounded to it, as vLLM's CUDA and Triton
/// kernels do, where cache, query and output dtypes agree) miss a finer output's limit by design:
/// h4/2 d64 bs16 bf16 o=f16 ctx100 seed3 gives rel_linf 2.98e-3 and 1.32e-3 against 1.22e-3.
/// docs/PROPERTIES.md, Domains.
Gen<std::tuple<DType, DType, DType>> gen_dtypes(const CaseSpace& sp) {
  const bool mixed = sp.mixed_dtypes;
  return gen::map(gen::tuple(pick(sp.kv_dtypes), gen_uniform(0, 5), pick(kDTypes), gen_uniform(0, 5), pick(kDTypes)),
                  [mixed](const std::tuple<DType, int, DType, int, DType>& t) {
                    const DType kv = std::get<0>(t);
                    const DType q = mixed && std::get<1>(t) == 4 ? std::get<2>(t) : kv;
                    const DType drawn = std::get<4>(t);
                    const bool finer = significand_bits(drawn) > significand_bits(kv);
                    const DType out = mixed && std::get<3>(t) == 4 && !finer ? drawn : kv;
                    return std::make_tuple(q, kv, out);
                  });
}

/// (spare_blocks, padding_columns, padding target choice): the target is -1 (a dedicated spare block)
/// three times in four; otherwise a raw draw reduced modulo the pool once its size is known, so
/// padding can also point at a block a sequence uses, as vLLM's padding with block 0 does.
Gen<std::tuple<int, int, int>> gen_paging(int size) {
  return gen::map(gen::tuple(gen_uniform(1, 4 + size / 4), gen_uniform(0, 4), gen_uniform(0, 4),
                             gen_uniform(0, 1 << 16)),
                  [](const std::tuple<int, int, int, int>& t) {
                    return std::make_tuple(std::get<0>(t), std::get<1>(t), std::get<2>(t) < 3 ? -1 : std::get<3>(t));
                  });
}

/// `c` (fitted to its work budget) with joint constraints (a context bound, say) the per-field probes cannot see
/// repaired by shortening the longest sequence a few times before the case is given up to the final filter,
/// and its padding target (a raw draw `padto`, -1: a spare block) reduced modulo its pool.
Case repaired(const CaseSpace& sp, Case c, int padto) {
  for (int i = 0; i < 16 && sp.supports && !sp.supports(c).ok; ++i) {
    auto longest = std::max_element(c.seq_lens.begin(), c.seq_lens.end());
    if (*longest == 1) break;
    *longest = (*longest + 1) / 2;
  }
  c.padding_target = padto < 0 ? -1 : static_cast<int>(padto % pool_blocks(c));
  return c;
}

using Shape = std::tuple<int, int, int, std::tuple<DType, DType, DType>, Layout, Dist, std::uint64_t,
                         std::tuple<int, int, int>>;

Case build_case(const CaseSpace& sp, int size, int bs, const std::vector<int>& lens, const Shape& t) {
  Case c;
  c.block_size = bs;
  c.seq_lens = lens;
  const int ratio = std::get<0>(t);
  c.num_kv_heads = std::get<1>(t);
  c.num_heads = ratio * c.num_kv_heads;
  c.head_size = std::get<2>(t);
  std::tie(c.q_dtype, c.kv_dtype, c.out_dtype) = std::get<3>(t);
  c.layout = std::get<4>(t);
  c.dist = std::get<5>(t);
  if (c.dist == Dist::extreme && c.out_dtype == DType::f32) {
    // Outside the f32 limit's domain (docs/PROPERTIES.md, Domains): an LSE merge (cpu.split_kv_lse,
    // FlashInfer, vLLM Triton stage 2) rounds lse = m + log l to fp32, |lse| x 2^-24 in each partition's
    // log-weight; at extreme's logits (|lse| ~ 1e4) that is rel_linf 1.1e-4 against f32's 6.1e-5
    // (h1/1 d32 bs16 f32 ctx1000 seed3 dist=extreme). A bf16 output keeps the f32 cache's extreme V.
    if (sp.mixed_dtypes) c.out_dtype = DType::bf16;
    else c.dist = Dist::peaked;
  }
  c.seed = std::get<6>(t);
  int padto = -1;
  std::tie(c.spare_blocks, c.padding_columns, padto) = std::get<7>(t);
  fit_budget(c, sp, work_budget(sp, size));
  return repaired(sp, std::move(c), padto);
}

using MlaDraw = std::tuple<MlaShape, int, int, std::tuple<DType, DType, DType>, Dist, std::uint64_t,
                           std::tuple<int, int, int>>;

/// An MLA case of block size `bs` and lengths `lens` from the draw (shape, num_heads, index of its model in
/// mla_models() for the scale, dtypes, distribution, seed, paging), fitted to the size's work budget.
Case build_mla_case(const CaseSpace& sp, int size, int bs, const std::vector<int>& lens, const MlaDraw& t) {
  Case c;
  const MlaShape& m = std::get<0>(t);
  c.kv_lora_rank = m.kv_lora_rank;
  c.qk_rope_head_dim = m.qk_rope_head_dim;
  c.v_head_dim = m.v_head_dim;
  c.head_size = m.row();
  c.num_kv_heads = 1;
  c.num_heads = std::get<1>(t);
  c.layout = Layout::nhd;
  c.scale = static_cast<float>(mla_models()[static_cast<std::size_t>(std::get<2>(t))].softmax_scale());
  std::tie(c.q_dtype, c.kv_dtype, c.out_dtype) = std::get<3>(t);
  c.dist = std::get<4>(t);
  c.seed = std::get<5>(t);
  c.block_size = bs;
  c.seq_lens = lens;
  int padto = -1;
  std::tie(c.spare_blocks, c.padding_columns, padto) = std::get<6>(t);
  fit_mla_budget(c, work_budget(sp, size));
  return repaired(sp, std::move(c), padto);
}

/// Softmax scale of a case of `head_size`: the default (Case::scale unset) three times in four (choice 0..2,
/// where shrinking goes); otherwise one of the model-derived forms of docs/SUITES.md, relative to the
/// default d^-0.5: 1/d (Granite's attention_multiplier = 1/head_size), (168/128 d)^-0.5 and (144/128 d)^-0.5
/// (Gemma-3's and Gemma-2's query_pre_attn_scalar at head 128, scaled to the head size), 2 d^-0.5 and
/// d^-0.5 / 2.
std::optional<float> scale_for(int choice, int head_size) {
  const float d = static_cast<float>(head_size), dflt = 1.0f / std::sqrt(d);
  switch (choice) {
    case 3: return 1.0f / d;
    case 4: return 1.0f / std::sqrt(d * 168.0f / 128.0f);
    case 5: return 1.0f / std::sqrt(d * 144.0f / 128.0f);
    case 6: return 2.0f * dflt;
    case 7: return 0.5f * dflt;
    default: return std::nullopt;
  }
}

/// `f` (valid, accepted by `sp`) with its query heads split over two KV heads when it has one KV head and an
/// even GQA ratio, and the space accepts the split; `f` otherwise. Per-KV-head scales over one KV head are a
/// per-tensor scale: the split makes them differ between heads. case_work counts query heads, so the split
/// keeps the case within its work budget.
Case two_kv_heads(const CaseSpace& sp, const Case& f) {
  if (f.num_kv_heads != 1 || f.num_heads % 2 != 0) return f;
  Case two = f;
  two.num_kv_heads = 2;
  try {
    two.validate();
  } catch (const CaseError&) {
    return f;
  }
  return sp.supports && !sp.supports(two).ok ? f : two;
}

}  // namespace

Gen<int> gen_scale_choice() {
  return gen::mapcat(gen_uniform(0, 4), [](int which) { return which < 3 ? gen::just(0) : gen_uniform(3, 8); });
}

Gen<int> gen_uniform(int min, int max) { return gen::resize(100, gen::inRange(min, max)); }

CaseSpace full_space() {
  CaseSpace sp;
  sp.block_sizes = kBlockSizes;
  sp.head_sizes = kHeadSizes;
  sp.gqa_ratios.resize(16);
  std::iota(sp.gqa_ratios.begin(), sp.gqa_ratios.end(), 1);
  sp.kv_dtypes = kDTypes;
  sp.mixed_dtypes = true;
  sp.layouts = {Layout::nhd, Layout::hnd, Layout::vllm};
  sp.aiter_layout = true;
  sp.dists = kDists;
  sp.offset_dists = kOffsetDists;
  sp.fp8_dtypes = kFp8DTypes;
  sp.per_head_scales = sp.per_slot_scales = true;
  for (const CaseField& f : case_field_table()) sp.variants |= f.variant_bit;
  return sp;
}

CaseSpace full_mla_space() {
  CaseSpace sp = full_space();
  sp.block_sizes = kMlaBlockSizes;
  sp.head_sizes.clear();
  sp.gqa_ratios.clear();
  sp.layouts = {Layout::nhd};
  sp.aiter_layout = false;
  sp.dists = {Dist::normal, Dist::uniform, Dist::peaked};
  sp.offset_dists.clear();
  sp.per_head_scales = sp.per_slot_scales = false;
  sp.variants = PACHECK_VARIANT_MULTI_QUERY;
  sp.mla_shapes = kMlaShapes;
  sp.mla_heads = kMlaHeads;
  return sp;
}

namespace {

/// The MLA space of MLA kernel `k`: the probes of probe_space around an MLA case it accepts (512+64 at 16 heads
/// and 100 tokens, DeepSeek-V3's scale; page sizes 64, 16, 32, 1; bf16, f16, f32), each field of full_mla_space
/// tried alone. Throws std::invalid_argument naming the kernel when it accepts no such case. `ok` asks
/// cell_support of a valid case.
CaseSpace probe_mla_space(const KernelPtr& k, const std::function<bool(const Case&)>& ok) {
  const CaseSpace all = full_mla_space();
  std::optional<Case> base;
  for (DType t : kDTypes)
    for (int bs : {64, 16, 32, 1})
      if (!base) {
        Case c = make_mla_case(mla_model("deepseek-v3"), 16, {100}, bs, t).as_case();
        c.q_dtype = c.out_dtype = t;
        if (ok(c)) base = c;
      }
  if (!base)
    throw std::invalid_argument(fmt::format("{} is an MLA decode kernel and declines every MLA probe case (mla=512+64, "
                                            "16 query heads, 100 tokens, block_size 64, 16, 32 or 1, bf16, f16 or "
                                            "f32): nothing to generate",
                                            k->name()));
  CaseSpace sp = all;
  sp.supports = nullptr;
  auto keep = [&](auto& kept, const auto& values, auto set) {
    kept.clear();
    for (const auto& v : values) {
      Case c = *base;
      set(c, v);
      if (ok(c)) kept.push_back(v);
    }
  };
  keep(sp.block_sizes, all.block_sizes, [](Case& c, int bs) { c.block_size = bs; });
  keep(sp.mla_heads, all.mla_heads, [](Case& c, int h) { c.num_heads = h; });
  keep(sp.mla_shapes, all.mla_shapes, [](Case& c, const MlaShape& m) {
    c.kv_lora_rank = m.kv_lora_rank;
    c.qk_rope_head_dim = m.qk_rope_head_dim;
    c.v_head_dim = m.v_head_dim;
    c.head_size = m.row();
  });
  keep(sp.kv_dtypes, all.kv_dtypes, [](Case& c, DType t) { c.q_dtype = c.kv_dtype = c.out_dtype = t; });
  keep(sp.dists, all.dists, [](Case& c, Dist d) { c.dist = d; });
  keep(sp.fp8_dtypes, all.fp8_dtypes, [](Case& c, DType t) {
    c.kv_dtype = t;
    if (c.out_dtype == DType::f32 || c.q_dtype == DType::f32) c.q_dtype = c.out_dtype = DType::bf16;
    c.k_scale.values = {0.5f};
  });
  Case q = *base, o = *base;
  q.q_dtype = base->kv_dtype == DType::f32 ? DType::bf16 : DType::f32;
  o.out_dtype = q.q_dtype;
  sp.mixed_dtypes = ok(q) && ok(o);
  Case multi = *base;
  multi.query_lens = {3};
  sp.variants = ok(multi) ? PACHECK_VARIANT_MULTI_QUERY : 0u;
  // The base's own block size, head count, shape, dtype and distribution are among those tried: no list is empty.
  return sp;
}

}  // namespace

CaseSpace probe_space(const KernelPtr& k) {
  const CaseSpace all = full_space();
  auto ok = [&](const Case& c) {
    try {
      c.validate();
      return cell_support(*k, c).ok;
    } catch (const std::exception&) {
      return false;
    }
  };
  if (k->takes_mla()) {
    // One kind per kernel (cell_support): an MLA kernel is probed with MLA cases only, a multi-head one below.
    CaseSpace sp = probe_mla_space(k, ok);
    sp.max_work = k->device() == PACHECK_DEVICE_CPU ? all.max_work : 4 * all.max_work;
    sp.supports = [k](const Case& c) { return cell_support(*k, c); };
    return sp;
  }
  // A base case the kernel accepts: its preferred layouts first, common shapes first (aiter last: it
  // constrains block_size, and is probed apart below).
  std::vector<Layout> layouts = k->layouts();
  std::erase(layouts, Layout::aiter);
  for (Layout l : all.layouts)
    if (std::find(layouts.begin(), layouts.end(), l) == layouts.end()) layouts.push_back(l);
  const auto kl = k->layouts();
  const bool lists_aiter = std::find(kl.begin(), kl.end(), Layout::aiter) != kl.end();
  std::optional<Case> base;
  for (Layout l : layouts)
    for (DType t : kDTypes)
      for (int hs : {128, 64, 256, 32, 80, 96, 112, 192})
        for (int bs : {16, 32, 8, 64, 128, 256, 1})
          for (int ratio : {4, 1, 2, 8})
            if (!base) {
              Case c;
              c.layout = l;
              c.q_dtype = c.kv_dtype = c.out_dtype = t;
              c.head_size = hs;
              c.block_size = bs;
              c.num_kv_heads = 2;
              c.num_heads = 2 * ratio;
              c.seq_lens = {100};
              if (ok(c)) base = c;
            }
  if (!base) throw std::invalid_argument(fmt::format("{} declines every probe case; nothing to generate", k->name()));

  CaseSpace sp;
  for (int bs : all.block_sizes) {
    Case c = *base;
    c.block_size = bs;
    if (ok(c)) sp.block_sizes.push_back(bs);
  }
  for (int hs : all.head_sizes) {
    Case c = *base;
    c.head_size = hs;
    if (ok(c)) sp.head_sizes.push_back(hs);
  }
  for (int r : all.gqa_ratios) {
    Case c = *base;
    c.num_heads = r * c.num_kv_heads;
    if (ok(c)) sp.gqa_ratios.push_back(r);
  }
  for (DType t : all.kv_dtypes) {
    Case c = *base;
    c.q_dtype = c.kv_dtype = c.out_dtype = t;
    if (ok(c)) sp.kv_dtypes.push_back(t);
  }
  {
    Case q = *base, o = *base;
    q.q_dtype = base->kv_dtype == DType::f32 ? DType::bf16 : DType::f32;
    o.out_dtype = q.q_dtype;
    sp.mixed_dtypes = ok(q) && ok(o);
  }
  if (lists_aiter) layouts.push_back(Layout::aiter);
  for (Layout l : layouts) {
    Case c = *base;
    c.layout = l;
    if (l == Layout::aiter) {  // needs block_size % 16 == 0: drawn apart by gen_case, not uniformly
      c.block_size = 16;
      c.head_size = 128;
      sp.aiter_layout = ok(c);
      continue;
    }
    if (ok(c)) sp.layouts.push_back(l);
  }
  for (Dist d : all.dists) {
    Case c = *base;
    c.dist = d;
    if (ok(c)) sp.dists.push_back(d);
  }
  if (sp.dists.empty()) sp.dists = {base->dist};
  for (Dist d : all.offset_dists) {
    Case c = *base;
    c.dist = d;
    if (ok(c)) sp.offset_dists.push_back(d);
  }
  // Each attention variant of the case field table, tried with its example value ("win=16", "qlen=3").
  for (const CaseField& f : case_field_table()) {
    if (!f.variant_bit) continue;
    Case c = *base;
    f.parse(f, f.example.substr(f.token.size()), c);
    if (ok(c)) sp.variants |= f.variant_bit;
  }
  for (DType t : all.fp8_dtypes) {
    Case c = *base;
    c.kv_dtype = t;
    if (c.out_dtype == DType::f32 || c.q_dtype == DType::f32) c.q_dtype = c.out_dtype = DType::bf16;
    if (!ok(c)) continue;
    sp.fp8_dtypes.push_back(t);
    Case h = c, s = c;
    h.k_scale.range = h.v_scale.range = std::pair{0.5f, 2.0f};
    s.k_scale.slot = s.v_scale.slot = std::pair{0.5f, 2.0f};
    sp.per_head_scales = sp.per_head_scales || ok(h);
    sp.per_slot_scales = sp.per_slot_scales || ok(s);
  }
  // GPU kernels are fast; the CPU oracle and generation then bound the cost, so allow more work.
  sp.max_work = k->device() == PACHECK_DEVICE_CPU ? all.max_work : 4 * all.max_work;
  // cell_support, not supports(): an MLA plugin (or Python) kernel's own supports() never sees the kind check.
  sp.supports = [k](const Case& c) { return cell_support(*k, c); };
  return sp;
}

std::int64_t case_work(const Case& c) {
  std::int64_t tokens = 0;
  for (int len : c.seq_lens) tokens += static_cast<std::int64_t>(blocks_of(len, c.block_size)) * c.block_size;
  return tokens * c.num_heads * c.head_size;
}

std::int64_t work_budget(const CaseSpace& sp, int size) {
  constexpr std::int64_t kFloor = 1 << 14;
  const std::int64_t s = std::clamp(size, 0, 100);
  return kFloor + std::max<std::int64_t>(0, sp.max_work - kFloor) * s / 100;
}

bool multi_partition(const Case& c) {
  return std::any_of(c.seq_lens.begin(), c.seq_lens.end(), [](int len) { return len > kPartitionTokens; });
}

Gen<int> gen_seq_len(int bs, int size) {
  const int max_mult = 2 + size / 8;
  const int near = 2 * bs + 8 * size + 2;
  const int long_hi = 1025 + 40 * size;
  // Branch weights: block edges, multiples +- 1, partition edges, anywhere near, long. The branch is a
  // shrinkable index, so a failing length shrinks towards the block edges and finally to 1.
  // Issue 18: from size 40, a sixth branch puts the length at 2^14, 2^15, 2^16 or 2^17 tokens + {-6, -1, 0,
  // 1, 10} (one draw in 14); the work budget then decides how much of it a case keeps (docs/PROPERTIES.md).
  const std::vector<int> weights{4, 3, size >= 5 ? 2 : 0, 3, size >= 20 ? 1 : 0, size >= 40 ? 1 : 0};
  const int total = std::accumulate(weights.begin(), weights.end(), 0);
  return gen::mapcat(gen_uniform(0, total), [=](int draw) -> Gen<int> {
    std::size_t branch = 0;
    while (draw >= weights[branch]) draw -= weights[branch++];
    switch (branch) {
      case 0:
        return gen::map(gen_uniform(0, 4), [bs](int i) { return std::max(1, std::array{1, bs - 1, bs, bs + 1}[i]); });
      case 1:
        return gen::map(gen::pair(gen_uniform(1, max_mult + 1), gen_uniform(0, 3)), [bs](std::pair<int, int> p) {
          return std::max(1, p.first * bs + std::array{0, -1, 1}[p.second]);
        });
      case 2:
        return pick(std::vector<int>{511, 512, 513, 1023, 1024, 1025});
      case 3:
        return gen_uniform(1, near);
      case 4:
        return gen_uniform(1025, long_hi);
      default:
        return gen::map(gen::pair(gen_uniform(0, 4), gen_uniform(0, 5)), [](std::pair<int, int> p) {
          return (1 << (14 + p.first)) + std::array{-6, -1, 0, 1, 10}[p.second];
        });
    }
  });
}

/// Issue 18: a decode batch of 5 to 256 sequences: half the time one of the sizes kernels switch paths
/// around (8, 9, 33, 64, 255, 256), otherwise uniform in 5..256; lengths as gen_seq_len draws them at size
/// 10 (block edges, multiples +- 1, a few blocks), so about half the sequences straddle a block. At most
/// `cap` sequences (one block each, one head of the smallest head size, within the size's work budget: the
/// budget can shorten sequences but not drop them); the budget then shortens the longest sequences first.
static Gen<std::vector<int>> gen_big_batch(int bs, int cap) {
  return gen::mapcat(gen::pair(gen_uniform(0, 2), gen::pair(pick(std::vector<int>{8, 9, 33, 64, 255, 256}), gen_uniform(5, 257))),
                     [bs, cap](const std::pair<int, std::pair<int, int>>& t) {
                       const int n = std::min(cap, t.first == 0 ? t.second.first : t.second.second);
                       return gen::container<std::vector<int>>(static_cast<std::size_t>(n), gen_seq_len(bs, 10));
                     });
}

/// The seq_lens of a case of block size `bs` at RapidCheck size `size`: 1 to 1 + size / 30 lengths of
/// gen_seq_len or, from size 30, one case in 8 a large batch (gen_big_batch) of at most as many sequences as
/// blocks of `block_work` (one block of the smallest case the space draws) fit the size's work budget.
static Gen<std::vector<int>> gen_lens(const CaseSpace& sp, int size, int bs, std::int64_t block_work) {
  const int max_seqs = 1 + size / 30;  // 1 sequence at small sizes, up to 4 at size 90+
  const int cap = static_cast<int>(std::min<std::int64_t>(256, work_budget(sp, size) / block_work));
  return gen::mapcat(gen_uniform(0, 8), [bs, size, max_seqs, cap](int which) {
    if (which == 7 && size >= 30 && cap >= 5) return gen_big_batch(bs, cap);
    return gen::mapcat(gen_uniform(1, max_seqs + 1), [bs, size](int n) {
      return gen::container<std::vector<int>>(static_cast<std::size_t>(n), gen_seq_len(bs, size));
    });
  });
}

/// The multi-head part of gen_case: shape, dtypes, layout, distribution, seed, paging, fitted to the budget,
/// then the softmax scale.
static Gen<Case> gen_mha_case(const CaseSpace& sp) {
  Gen<Case> g = gen::withSize([sp](int size) {
    return gen::mapcat(pick(sp.block_sizes), [sp, size](int bs) {
      const std::int64_t one_block = static_cast<std::int64_t>(bs) * *std::min_element(sp.head_sizes.begin(), sp.head_sizes.end());
      return gen::mapcat(gen_lens(sp, size, bs, one_block), [sp, size, bs](const std::vector<int>& l) {
        return gen::map(gen::tuple(gen_ratio(sp), gen_uniform(1, 2 + size / 25), pick(sp.head_sizes), gen_dtypes(sp),
                                   pick(sp.layouts), pick(sp.dists), gen_seed(),
                                   gen_paging(size)),
                        [sp, size, bs, l](const Shape& t) { return build_case(sp, size, bs, l, t); });
      });
    });
  });
  // The softmax scale, for the head size the case ended with (fit_budget may shrink it).
  return gen::mapcat(std::move(g), [](Case c) {
    return gen::map(gen_scale_choice(), [c](int choice) {
      Case out = c;
      out.scale = scale_for(choice, c.head_size);
      return out;
    });
  });
}

Gen<Case> gen_mla_case(const CaseSpace& sp) {
  if (!sp.mla()) throw std::invalid_argument("gen_mla_case: the space has no MLA shape (mla_shapes)");
  int min_row = sp.mla_shapes.front().row();
  for (const MlaShape& m : sp.mla_shapes) min_row = std::min(min_row, m.row());
  const int models = static_cast<int>(mla_models().size());
  return gen::withSize([sp, min_row, models](int size) {
    return gen::mapcat(pick(sp.block_sizes), [sp, size, min_row, models](int bs) {
      const std::int64_t one_block = static_cast<std::int64_t>(bs) * min_row;  // one query head
      return gen::mapcat(gen_lens(sp, size, bs, one_block), [sp, size, bs, models](const std::vector<int>& l) {
        return gen::map(gen::tuple(pick(sp.mla_shapes), gen_favoured(kFavouredMlaHeads, sp.mla_heads),
                                   gen_uniform(0, models), gen_dtypes(sp), pick(sp.dists), gen_seed(), gen_paging(size)),
                        [sp, size, bs, l](const MlaDraw& t) { return build_mla_case(sp, size, bs, l, t); });
      });
    });
  });
}

Gen<Case> gen_case(const CaseSpace& sp) {
  Gen<Case> g = sp.mla() ? gen_mla_case(sp) : gen_mha_case(sp);
  // Issue 18: high physical block ids. From size 20, one case in 16 puts its blocks past 2^31 elements and
  // one in 16 past 2^32 (Case::high_block_ids), when num_kv_heads x head_size >= 128: the pool is sparse,
  // but its slot map has a byte per slot of the whole pool (2^B / (num_kv_heads x head_size) bytes, at most
  // 32 MiB then). The draw is made after the budget and the scale, so it changes no other field.
  g = gen::mapcat(std::move(g), [](Case c) {
    return gen::withSize([c](int size) {
      return gen::map(gen_uniform(0, 16), [c, size](int draw) {
        Case out = c;
        if (size >= 20 && draw < 2 && static_cast<long long>(c.num_kv_heads) * c.head_size >= 128)
          out.high_block_ids = draw == 0 ? 31 : 32;
        return out;
      });
    });
  });
  // Seed 002 (issue 18 item 5): AITER's shuffled-V layout. From size 10, one case in 8 whose block_size is a
  // multiple of 16 is laid out as aiter, when the kernel reads it (CaseSpace::aiter_layout).
  if (sp.aiter_layout)
    g = gen::mapcat(std::move(g), [](Case c) {
      return gen::withSize([c](int size) {
        return gen::map(gen_uniform(0, 8), [c, size](int draw) {
          Case out = c;
          if (size >= 10 && draw == 7 && c.block_size % kAiterSlotGroup == 0) out.layout = Layout::aiter;  // 7: shrinks away
          return out;
        });
      });
    });
  // Issue 45: logits far from zero (offset distributions). From size 10, one case in 8 (draw 7: shrinks away)
  // whose cache is not fp8 gets one, a third each.
  if (!sp.offset_dists.empty())
    g = gen::mapcat(std::move(g), [sp](Case c) {
      return gen::withSize([sp, c](int size) {
        return gen::map(gen::pair(gen_uniform(0, 8), pick(sp.offset_dists)), [sp, c, size](const std::pair<int, Dist>& t) {
          if (size < 10 || t.first != 7) return c;
          Case out = c;
          out.dist = t.second;
          try {
            out.validate();
          } catch (const CaseError&) {
            return c;
          }
          return sp.supports && !sp.supports(out).ok ? c : out;
        });
      });
    });
  // Seed 002 / issue 18 item 5: fp8 caches and their scale forms, per-slot tables among them. From size 10,
  // one case in 8 (draw 7: shrinks away) when the space has fp8 encodings.
  if (!sp.fp8_dtypes.empty())
    g = gen::mapcat(std::move(g), [sp](Case c) {
      return gen::withSize([sp, c](int size) {
        // Of 16 draws: scale 1 and per tensor one each, per KV head four, the top binade two, per slot eight.
        // The per-slot tables are the only form with a poison region of their own (`scales`), and it must be
        // drawn often enough for tail-poison to reach it (1,000 GPU fuzz cases at a quarter caught no
        // control). Per KV head (on two KV heads or more) is the only form that shows cpu.fp8_head0_scale:
        // at an eighth, 300 tail-poison cases missed it at 6 seeds of 20; at a quarter, with one KV head split
        // in two (with_fp8), at none of 20 (agreement: none of 40).
        return gen::map(gen::tuple(gen_uniform(0, 8), pick(sp.fp8_dtypes), gen_uniform(0, 16)),
                        [sp, c, size](const std::tuple<int, DType, int>& t) {
                          if (size < 10 || std::get<0>(t) != 7) return c;
                          static constexpr int kForm[16] = {0, 1, 2, 2, 2, 2, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4};
                          return with_fp8(sp, c, std::get<1>(t), kForm[std::get<2>(t)]);
                        });
      });
    });
  if (sp.variants & PACHECK_VARIANT_MULTI_QUERY)
    g = gen::mapcat(std::move(g), [sp](Case c) {
      return gen::withSize([sp, c](int size) { return gen_query_lens(c, size, work_budget(sp, size)); });
    });
  if (sp.variants & kDrawnVariants)
    g = gen::mapcat(std::move(g), [sp](Case c) {
      return gen::withSize([sp, c](int size) { return gen_variant(c, size, sp.variants); });
    });
  if (!sp.supports) return g;
  return gen::suchThat(std::move(g), [sp](const Case& c) { return sp.supports(c).ok; });
}

Gen<Case> gen_query_lens(Case c, int size, std::int64_t budget) {
  // The cap: Case::kMaxQueryLen, the shortest seq_len (a query_len is at most its seq_len), and the work
  // bound (each query row reads up to its sequence's keys, so the rows multiply case_work).
  const std::int64_t work = std::max<std::int64_t>(1, case_work(c));
  int cap = static_cast<int>(std::min<std::int64_t>(Case::kMaxQueryLen, 2 * budget / work));
  if (size < 10 || cap < 2) return gen::just(c);
  // The branch is drawn in [0, 8) and only the last value adds query tokens, so shrinking drops them first.
  return gen::mapcat(gen_uniform(0, 8), [c, cap](int which) -> Gen<Case> {
    if (which != 7) return gen::just(c);
    const int n = c.num_seqs();
    return gen::map(gen::pair(gen_uniform(0, 2), gen::container<std::vector<int>>(static_cast<std::size_t>(n), gen_uniform(0, cap))),
                    [c, cap](const std::pair<int, std::vector<int>>& t) {
                      Case out = c;
                      if (t.first == 0 || out.num_seqs() == 1) {
                        // One query_len for every sequence: 2..cap, at most the shortest seq_len.
                        const int q = std::min(2 + t.second[0] % (cap - 1), *std::min_element(c.seq_lens.begin(), c.seq_lens.end()));
                        if (q > 1) out.query_lens = {q};
                        return out;
                      }
                      // One per sequence: 1..cap each, capped by its seq_len; a list of ones is plain decode.
                      std::vector<int> q(t.second.size());
                      bool several = false;
                      for (std::size_t s = 0; s < q.size(); ++s) {
                        q[s] = std::min(1 + t.second[s], c.seq_lens[s]);
                        several = several || q[s] > 1;
                      }
                      if (several) out.query_lens = std::move(q);
                      return out;
                    });
  });
}

Gen<Case> gen_variant(Case c, int size, unsigned variants) {
  std::vector<unsigned> kinds;
  for (unsigned v : {PACHECK_VARIANT_SLIDING_WINDOW, PACHECK_VARIANT_SOFT_CAP, PACHECK_VARIANT_ALIBI, PACHECK_VARIANT_SINKS})
    if ((variants & v) && !(v == PACHECK_VARIANT_SINKS && offset_dist(c.dist))) kinds.push_back(v);
  if (size < 10 || kinds.empty()) return gen::just(c);
  // The branch is drawn in [0, 8) and only the last value adds a variant, so shrinking drops it first.
  return gen::map(gen::tuple(gen_uniform(0, 8), pick(kinds), gen_uniform(0, 2), gen_uniform(0, 1 << 20)),
                  [c](const std::tuple<int, unsigned, int, int>& t) {
                    if (std::get<0>(t) != 7) return c;
                    Case out = c;
                    const int half = std::get<2>(t), raw = std::get<3>(t);
                    using F = HeadValues::Form;
                    switch (std::get<1>(t)) {
                      case PACHECK_VARIANT_SLIDING_WINDOW: {
                        // Half the time below the shortest seq_len (every sequence cut), else up to the longest.
                        const int shortest = *std::min_element(c.seq_lens.begin(), c.seq_lens.end());
                        const int top = half == 0 ? std::max(1, shortest - 1) : c.max_seq_len();
                        // At least the query tokens: the offset distributions' hot key (at the first query
                        // token's position) then stays in every row's window.
                        out.sliding_window = std::max(c.max_query_len(), 1 + raw % top);
                        break;
                      }
                      case PACHECK_VARIANT_SOFT_CAP: out.logits_soft_cap = half == 0 ? 30.0f : 50.0f; break;
                      case PACHECK_VARIANT_ALIBI: out.alibi_slopes = HeadValues{F::geometric, {}, {}}; break;
                      default: out.sinks = HeadValues{F::range, {}, {-2.0f, 3.0f}}; break;
                    }
                    try {
                      out.validate();
                    } catch (const CaseError&) {
                      return c;
                    }
                    return out;
                  });
}

Case with_fp8(const CaseSpace& sp, const Case& c, DType kv, int form) {
  Case f = c;
  // The top binade form is for e4m3fn, the encoding whose exponent 15 holds finite codes (e5m2's is Inf and
  // NaN; e4m3fnuz's largest code is 240).
  const bool fn = std::find(sp.fp8_dtypes.begin(), sp.fp8_dtypes.end(), DType::fp8_e4m3fn) != sp.fp8_dtypes.end();
  f.kv_dtype = form == 3 && fn ? DType::fp8_e4m3fn : kv;
  // Precision order f32 > f16 > bf16: an output finer than the query becomes the query's dtype.
  auto rank = [](DType t) { return t == DType::f32 ? 2 : t == DType::f16 ? 1 : 0; };
  if (rank(f.out_dtype) > rank(f.q_dtype)) f.out_dtype = f.q_dtype;
  if (form > 4) form = 4;
  if (form == 4 && (!sp.per_slot_scales || c.high_block_ids)) form = 2;
  if (form == 2 && !sp.per_head_scales) form = 1;
  // An MLA cache is one tensor with one per-tensor k_scale (check_mla_case): forms 0, 1 and 3 on k_scale alone.
  const bool mla = c.is_mla();
  if (mla && (form == 2 || form == 4)) form = 1;
  switch (form) {
    case 1:
      f.k_scale.values = {0.37f};
      if (!mla) f.v_scale.values = {2.5f};
      break;
    case 2:
      f.k_scale.range = std::pair{0.3f, 3.0f};
      f.v_scale.range = std::pair{3.0f, 0.3f};
      break;
    case 3: {
      // The top binade (issue 45): a per-tensor scale of about the distribution's largest |value| / 400
      // (an amax / 448 calibration) puts e4m3fn codes of exponent 15 (256..448) into the slots every row reads;
      // the rest saturate at the largest finite code. Extreme K is +-64 (its V follows v_scale by design).
      const float top = c.dist == Dist::uniform ? 1.0f / 400 : c.dist == Dist::extreme ? 64.0f / 400 : 4.0f / 400;
      f.k_scale.values = {top};
      if (!mla) f.v_scale.values = {top};
      break;
    }
    case 4:
      f.k_scale.slot = f.v_scale.slot = std::pair{0.25f, 4.0f};
      break;
    default:
      break;
  }
  try {
    f.validate();
  } catch (const CaseError&) {
    return c;  // e.g. a head_size the fp8 vllm layout's 16-element vectors do not divide
  }
  if (sp.supports && !sp.supports(f).ok) return c;
  return form == 2 ? two_kv_heads(sp, f) : f;
}

Gen<FaultSpec> gen_fault() {
  return gen::map(gen::tuple(pick(kPoisons), pick(kTargets), pick(kRegions)),
                  [](const std::tuple<Poison, Target, Region>& t) {
                    return FaultSpec{std::get<0>(t), std::get<1>(t), std::get<2>(t)};
                  });
}

Gen<FaultSpec> gen_fault_for(const Case& c) {
  if (!is_fp8(c.kv_dtype) && c.sliding_window == 0) return gen_fault();
  const bool slots = is_fp8(c.kv_dtype) && c.k_scale.per_slot() && c.v_scale.per_slot();
  const bool window = c.sliding_window > 0;
  const DType kv = c.kv_dtype;
  return gen::map(gen::pair(gen_fault(), gen_uniform(0, 4)), [slots, window, kv](const std::pair<FaultSpec, int>& t) {
    FaultSpec f = t.first;
    if (slots && t.second >= 2) f.region = Region::scales;
    else if (window && t.second % 2 == 1) f.region = Region::window;  // keys before the window's edge (issue 45)
    // The scale tables are fp32 and take every poison; an fp8 encoding without Inf (e4m3fn, e4m3fnuz) gets
    // its largest finite value instead, the nearest thing to Inf it has (poison_unsupported).
    if (f.region != Region::scales && !poison_unsupported(f.poison, kv).empty()) f.poison = Poison::max_finite;
    return f;
  });
}

Gen<Cell> gen_cell(const CaseSpace& sp, bool with_fault) {
  return gen::mapcat(gen_case(sp), [with_fault](const Case& c) {
    return gen::map(with_fault ? gen_fault_for(c) : gen::just(FaultSpec{}), [c](const FaultSpec& f) { return Cell{c, f}; });
  });
}

}  // namespace pacheck::prop

namespace pacheck {
void showValue(const Case& c, std::ostream& os) { os << c.id(); }
void showValue(const FaultSpec& f, std::ostream& os) { os << f.id(); }
void showValue(const Cell& cell, std::ostream& os) { os << cell.id(); }
}  // namespace pacheck

namespace rc {
Gen<pacheck::Case> Arbitrary<pacheck::Case>::arbitrary() { return pacheck::prop::gen_case(pacheck::prop::full_space()); }
Gen<pacheck::FaultSpec> Arbitrary<pacheck::FaultSpec>::arbitrary() { return pacheck::prop::gen_fault(); }
Gen<pacheck::Cell> Arbitrary<pacheck::Cell>::arbitrary() {
  return pacheck::prop::gen_cell(pacheck::prop::full_space(), true);
}
}  // namespace rc
