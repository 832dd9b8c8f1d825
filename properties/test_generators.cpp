// The generators: valid cases whose ids read back (the repro line depends on it), within the work budget,
// inside what a kernel supports, and covering the edges issue 5 asks for.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "properties/generators.hpp"
#include "properties/properties.hpp"

namespace {

using namespace pacheck;
using namespace pacheck::prop;

/// A kernel that runs a narrow slice of the space, with a joint constraint (a context bound) that the
/// per-field probes cannot see. It is never run.
class Narrow final : public Kernel {
 public:
  std::string name() const override { return "test.narrow"; }
  std::string description() const override { return "supports a narrow slice"; }
  pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
  std::vector<Layout> layouts() const override { return {Layout::vllm}; }
  Support supports(const Case& c) const override {
    if (c.layout != Layout::vllm) return Support::no("layout");
    if (c.block_size != 16 && c.block_size != 32) return Support::no("block_size");
    if (c.head_size != 128 && c.head_size != 64) return Support::no("head_size");
    if (c.kv_dtype != DType::bf16 || c.q_dtype != c.kv_dtype || c.out_dtype != c.kv_dtype) return Support::no("dtype");
    if (c.gqa_ratio() > 8) return Support::no("gqa ratio");
    for (int len : c.seq_lens)
      if (len > 1500) return Support::no("seq_lens: context bound");
    return Support::yes();
  }
  void run(const pacheck_kernel_args&) const override {}
};

/// A GPU kernel of either kind that supports everything and is never run: make_target only probes it.
class AnyGpu final : public Kernel {
 public:
  explicit AnyGpu(pacheck_device d) : d_(d) {}
  std::string name() const override { return "test.any_gpu"; }
  std::string description() const override { return "a GPU kernel of a given kind"; }
  pacheck_device device() const override { return d_; }
  Support supports(const Case&) const override { return Support::yes(); }
  void run(const pacheck_kernel_args&) const override {}

 private:
  pacheck_device d_;
};

}  // namespace

// With no device named, a GPU kernel is fuzzed on the first device of its own kind: a HIP kernel on
// "hip", never on "cuda". Where that kind has no device (or is not built in) the error names the kind.
TEST(MakeTarget, AGpuKernelWithNoDeviceNamedOpensADeviceOfItsOwnKind) {
  for (const auto& [dev, kind, runtime] : {std::tuple{PACHECK_DEVICE_CUDA, "cuda", "CUDA"},
                                           std::tuple{PACHECK_DEVICE_HIP, "hip", "HIP"}}) {
    for (const std::string named : {"", "cpu"}) {
      try {
        const KernelUnderTest t = make_target(std::make_shared<AnyGpu>(dev), named);
        EXPECT_EQ(t.device.rfind(std::string(kind) + ":", 0), 0u) << t.device;
      } catch (const std::exception& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(std::string("no ") + runtime + " device"), std::string::npos) << kind << ": " << what;
      }
    }
  }
}

RC_GTEST_PROP(Generators, CellsAreValidAndTheirIdsReadBack, (const Cell& cell)) {
  cell.c.validate();
  RC_ASSERT(!cell.fault.clean());
  const Case back = parse_case_id(cell.c.id());
  RC_ASSERT(back.id() == cell.c.id());
  RC_ASSERT(back.seq_lens == cell.c.seq_lens);
  RC_ASSERT(back.padding_target == cell.c.padding_target);
  RC_ASSERT(parse_fault(cell.fault.id()).id() == cell.fault.id());
}

RC_GTEST_PROP(Generators, CasesFitTheWorkBudgetOfTheirSize, ()) {
  const CaseSpace sp = full_space();
  const int size = *rc::gen::withSize([](int s) { return rc::gen::just(s); });
  const Case c = *gen_case(sp);
  RC_TAG(c.straddles() ? "straddling" : "aligned");
  RC_ASSERT(case_work(c) <= work_budget(sp, size));
}

TEST(Generators, ProbeKeepsOnlyWhatTheKernelSupports) {
  const CaseSpace sp = probe_space(std::make_shared<Narrow>());
  EXPECT_EQ(sp.block_sizes, (std::vector<int>{16, 32}));
  EXPECT_EQ(sp.head_sizes, (std::vector<int>{64, 128}));
  EXPECT_EQ(sp.gqa_ratios, (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(sp.kv_dtypes, (std::vector<DType>{DType::bf16}));
  EXPECT_FALSE(sp.mixed_dtypes);
  EXPECT_EQ(sp.layouts, (std::vector<Layout>{Layout::vllm}));
  const auto gen = gen_case(sp);
  const Narrow k;
  for (int i = 0; i < 2000; ++i) {
    const Case c = gen(rc::Random(i), i % 101).value();
    ASSERT_TRUE(k.supports(c).ok) << c.id() << ": " << k.supports(c).reason;
  }
}

// A kernel that declines several query tokens (the GPU kernels, plugins without PACHECK_VARIANT_MULTI_QUERY)
// gets a space without them, so no generated case is a decline; one that takes them gets them (issue 19).
TEST(Generators, ProbeFindsWhetherTheKernelTakesSeveralQueryTokens) {
  class OneQueryToken final : public Kernel {
   public:
    std::string name() const override { return "test.one_query_token"; }
    std::string description() const override { return "declines query_len > 1"; }
    pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
    Support supports(const Case& c) const override {
      return c.max_query_len() > 1 ? Support::no("query_len") : Support::yes();
    }
    void run(const pacheck_kernel_args&) const override {}
  };
  const CaseSpace one = probe_space(std::make_shared<OneQueryToken>());
  EXPECT_FALSE(one.variants & PACHECK_VARIANT_MULTI_QUERY);
  // Every other variant row's example (core/case_fields.cpp) is a valid case the kernel takes.
  EXPECT_EQ(one.variants, PACHECK_VARIANT_KNOWN & ~PACHECK_VARIANT_MULTI_QUERY);
  const auto gen = gen_case(one);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(gen(rc::Random(i), i % 101).value().max_query_len(), 1);
  EXPECT_TRUE(probe_space(std::make_shared<Narrow>()).variants & PACHECK_VARIANT_MULTI_QUERY);
}

// Every registered CPU kernel: the space probed from it generates only cells it supports, so no property
// case is wasted on a decline (a new kernel is covered with no edit here).
class ProbedSpace : public ::testing::TestWithParam<std::string> {};

TEST_P(ProbedSpace, GeneratesOnlyCellsTheKernelSupports) {
  const KernelPtr k = Registry::global().find(GetParam());
  ASSERT_TRUE(k);
  const CaseSpace sp = probe_space(k);
  EXPECT_EQ(sp.mla(), k->takes_mla());
  const auto gen = gen_cell(sp, true);
  for (int i = 0; i < 500; ++i) {
    const Cell cell = gen(rc::Random(i), i % 101).value();
    const Support s = cell_support(*k, cell.c);
    ASSERT_TRUE(s.ok) << cell.id() << ": " << s.reason;
  }
}

std::vector<std::string> cpu_kernels() {
  std::vector<std::string> names;
  for (const KernelPtr& k : Registry::global().all())
    if (k->device() == PACHECK_DEVICE_CPU) names.push_back(k->name());  // the MLA ones get MLA cases
  return names;
}

INSTANTIATE_TEST_SUITE_P(Registry, ProbedSpace, ::testing::ValuesIn(cpu_kernels()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '.', '_');
                           return s;
                         });

TEST(Generators, ProbeRejectsAKernelThatDeclinesEverything) {
  class Nothing final : public Kernel {
   public:
    std::string name() const override { return "test.nothing"; }
    std::string description() const override { return "declines everything"; }
    pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
    Support supports(const Case&) const override { return Support::no("nothing"); }
    void run(const pacheck_kernel_args&) const override {}
  };
  EXPECT_THROW(probe_space(std::make_shared<Nothing>()), std::invalid_argument);
}

// Over 3000 cases across all sizes, every edge of issue 5 appears.
TEST(Generators, CoverTheEdges) {
  const CaseSpace sp = full_space();
  const auto gen = gen_case(sp);
  std::map<std::string, int> seen;
  std::set<int> ratios, heads, blocks;
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    const Case c = gen(rc::Random(1000 + i), i % 101).value();
    ratios.insert(c.gqa_ratio());
    heads.insert(c.head_size);
    blocks.insert(c.block_size);
    ++seen[c.straddles() ? "straddling" : "aligned"];
    if (c.gqa_ratio() > 1) ++seen["gqa"];
    if (multi_partition(c)) ++seen["multi-partition"];
    if (c.num_seqs() > 1) ++seen["batch"];
    // Issue 18's axes.
    if (c.num_seqs() >= 5) ++seen["batch>=5"];
    if (c.num_seqs() == 256 || c.num_seqs() == 255) ++seen["batch 255/256"];
    if (c.max_seq_len() > 16384) ++seen["ctx>16K"];
    if (c.block_size >= 128) ++seen["block>=128"];
    if (c.high_block_ids) ++seen["block ids>2^31"];
    if (c.high_block_ids == 32) ++seen["block ids>2^32"];
    // Issue 19: several query tokens, one for all or one per sequence, each within 1..8 and its seq_len.
    if (c.max_query_len() > 1) {
      ++seen["qlen>1"];
      ++seen[c.query_lens.size() == 1 ? "qlen one for all" : "qlen per sequence"];
      if (c.max_query_len() == Case::kMaxQueryLen) ++seen["qlen 8"];
      for (int s = 0; s < c.num_seqs(); ++s) {
        EXPECT_GE(c.query_len(s), 1) << c.id();
        EXPECT_LE(c.query_len(s), std::min(Case::kMaxQueryLen, c.seq_lens[s])) << c.id();
      }
      EXPECT_NO_THROW(c.validate()) << c.id();
    }
    ++seen[std::string("dist=") + std::string(dist_name(c.dist))];
    ++seen[std::string("layout=") + std::string(layout_name(c.layout))];
    ++seen[std::string("kv=") + std::string(dtype_name(c.kv_dtype))];
    if (c.q_dtype != c.kv_dtype || c.out_dtype != c.kv_dtype) ++seen["mixed dtypes"];
    // Issue 18 item 5: fp8 caches and each scale form (with_fp8).
    if (is_fp8(c.kv_dtype)) {
      ++seen["fp8"];
      ++seen[c.k_scale.per_slot() ? "fp8 per slot" : c.k_scale.per_head() ? "fp8 per head" : c.k_scale.is_default() ? "fp8 scale 1" : "fp8 per tensor"];
      EXPECT_EQ(c.k_scale.per_slot(), c.v_scale.per_slot()) << c.id();
      if (c.k_scale.per_slot()) EXPECT_EQ(c.high_block_ids, 0) << c.id();
      // One KV head's per-head range is one scale: with_fp8 splits an even GQA ratio over two KV heads.
      if (c.k_scale.per_head() && c.num_heads % 2 == 0) EXPECT_GE(c.num_kv_heads, 2) << c.id();
    }
    if (c.k_scale.values.size() == 1 && c.k_scale.values[0] < 0.2f) {
      ++seen["fp8 top binade"];
      EXPECT_EQ(c.kv_dtype, DType::fp8_e4m3fn) << "the top binade form is e4m3fn's: " << c.id();
    }
    // Issue 45: real attention variants and the offset distributions.
    if (c.sliding_window > 0) ++seen["window"];
    if (c.logits_soft_cap) ++seen["soft cap"];
    if (!c.alibi_slopes.is_default()) ++seen["alibi"];
    if (!c.sinks.is_default()) ++seen["sinks"];
    if (c.has_variant() && c.max_query_len() == 1) ++seen["variant"];
    if (c.padding_target >= 0) ++seen["padding into the pool"];
    if (c.scale) {
      ++seen["scale set"];
      // Each model-derived form of gen_scale_choice, told apart by its ratio to the default.
      const double r = *c.scale * std::sqrt(static_cast<double>(c.head_size));
      for (const auto& [name, want] : {std::pair{"scale 1/d", 1.0 / std::sqrt(static_cast<double>(c.head_size))},
                                       std::pair{"scale qpas 168", std::sqrt(128.0 / 168)},
                                       std::pair{"scale qpas 144", std::sqrt(128.0 / 144)},
                                       std::pair{"scale x2", 2.0}, std::pair{"scale x1/2", 0.5}})
        if (std::abs(r / want - 1) < 1e-5) ++seen[name];
    }
    for (int len : c.seq_lens) {
      const int bs = c.block_size;
      if (len == 1) ++seen["len 1"];
      if (bs > 1 && len == bs - 1) ++seen["len bs-1"];
      if (len == bs) ++seen["len bs"];
      if (len == bs + 1) ++seen["len bs+1"];
      if (len > bs + 1 && (len % bs == 1 || len % bs == bs - 1)) ++seen["multiple +-1"];
      if (len >= 511 && len <= 513) ++seen["partition edge"];
      if (len > 1025) ++seen["long"];
    }
  }
  for (const char* key : {"straddling", "aligned", "gqa", "multi-partition", "batch", "dist=uniform", "dist=normal",
                          "dist=peaked", "dist=extreme", "layout=vllm", "layout=nhd", "layout=hnd", "layout=aiter", "kv=bf16", "kv=f16",
                          "kv=f32", "mixed dtypes", "padding into the pool", "len 1", "len bs-1", "len bs", "len bs+1",
                          "multiple +-1", "partition edge", "long", "scale 1/d", "scale qpas 168", "scale qpas 144",
                          "scale x2", "scale x1/2", "batch>=5", "batch 255/256", "ctx>16K", "block>=128",
                          "block ids>2^31", "block ids>2^32", "qlen>1", "qlen one for all", "qlen per sequence",
                          "qlen 8", "kv=fp8_e4m3fn", "kv=fp8_e5m2", "kv=fp8_e4m3fnuz", "fp8 per slot", "fp8 per head",
                          "fp8 scale 1", "fp8 per tensor", "fp8 top binade", "dist=far_below", "dist=far_above",
                          "dist=mixed_scales", "window", "soft cap", "alibi", "sinks"})
    EXPECT_GT(seen[key], 0) << key;
  // gen_variant: one case in 8 from size 10 (about 11% of the draws), one kind each.
  EXPECT_GT(seen["variant"], n / 25);
  EXPECT_LT(seen["variant"], n * 3 / 20);
  // The offset distributions: one case in 8 from size 10 whose cache is not fp8.
  EXPECT_GT(seen["dist=far_below"] + seen["dist=far_above"] + seen["dist=mixed_scales"], n / 20);
  // gen_big_batch: one case in 8 from size 30 (70 of 101 sizes: about 8.7% of the draws, 260 expected).
  EXPECT_GT(seen["batch>=5"], n / 20);
  EXPECT_LT(seen["batch>=5"], n * 3 / 20);
  // High block ids: 2 draws in 16 from size 20 where num_kv_heads x head_size >= 128: below 12.5% in all.
  EXPECT_LT(seen["block ids>2^31"], n / 8);
  // gen_query_lens: one case in 8 from size 10 (91 of 101 sizes: about 11%, 338 expected), less where the
  // work bound leaves no room for a second query row.
  EXPECT_GT(seen["qlen>1"], n / 20);
  EXPECT_LT(seen["qlen>1"], n * 3 / 20);
  // The aiter layout: one draw in 8 from size 10 of the cases whose block_size is a multiple of 16 (a few
  // percent in all), never with another block size.
  EXPECT_LT(seen["layout=aiter"], n / 8);
  // with_fp8: one case in 8 from size 10 (about 11%), less where a head_size the fp8 vllm layout does not
  // divide keeps the drawn dtype; half of them per slot (high block ids fall back to per head).
  EXPECT_GT(seen["fp8"], n / 16);
  EXPECT_LT(seen["fp8"], n * 3 / 20);
  EXPECT_GT(seen["fp8 per slot"], seen["fp8"] / 3);
  // Per KV head: a quarter of the fp8 draws (cpu.fp8_head0_scale's only trigger), and per slot's fallback.
  EXPECT_GT(seen["fp8 per head"], seen["fp8"] / 5);
  // gen_scale_choice: a non-default scale one case in four (3000 draws: 750 expected, sd 24).
  EXPECT_GT(seen["scale set"], n / 5);
  EXPECT_LT(seen["scale set"], n * 3 / 10);
  EXPECT_GT(seen["straddling"], n / 5);
  EXPECT_GT(seen["aligned"], n / 5);
  EXPECT_GT(seen["gqa"], n / 2);
  for (int r : {1, 2, 3, 5, 6, 7, 12, 16}) EXPECT_TRUE(ratios.count(r)) << "GQA ratio " << r;
  EXPECT_EQ(heads, (std::set<int>{32, 64, 80, 96, 112, 128, 192, 256, 512}));
  EXPECT_EQ(blocks, (std::set<int>{1, 8, 16, 32, 64, 128, 256}));
}

// Faults draw every poison value of poison_table() but none (a new value is fuzzed with no edit), every
// target and every region.
TEST(Generators, FaultsDrawEveryPoisonTargetAndRegion) {
  const auto gen = gen_cell(full_space(), true);
  std::set<std::string> seen;
  for (int i = 0; i < 2000; ++i) {
    const Cell cell = gen(rc::Random(5000 + i), i % 101).value();
    const FaultSpec& f = cell.fault;
    // Every drawn fault can be written into its case: the region exists (scales: per-slot tables), and an fp8
    // cache without Inf codes gets no ±Inf poison outside the fp32 scale tables.
    EXPECT_EQ(fault_case_problem(f, cell.c), "") << cell.id();
    if (f.region != Region::scales) EXPECT_EQ(poison_unsupported(f.poison, cell.c.kv_dtype), "") << cell.id();
    seen.insert("poison " + std::string(poison_name(f.poison)));
    seen.insert("target " + std::string(target_name(f.target)));
    seen.insert("region " + std::string(region_name(f.region)));
  }
  for (const PoisonInfo& p : poison_table())
    EXPECT_EQ(seen.count("poison " + std::string(p.name)), p.value == Poison::none ? 0u : 1u) << p.name;
  for (const TargetInfo& t : target_table()) EXPECT_TRUE(seen.count("target " + std::string(t.name))) << t.name;
  // `window` poisons keys before a sliding window's edge: drawn for half the cases with a window (gen_variant
  // draws windows, issue 45). `scales` poisons per-slot fp8 scale entries: drawn for half the cases with
  // per-slot tables (gen_fault_for).
  for (const RegionInfo& r : region_table()) EXPECT_EQ(seen.count("region " + std::string(r.name)), 1u) << r.name;
}

// A kernel that takes MLA cells only (a plugin or Python kernel with PACHECK_KERNEL_MLA) whose own supports()
// accepts any case: the probes ask cell_support and are of the kernel's kind, so its space is an MLA space and
// every generated case is an MLA case (probing supports() alone once handed its run() a multi-head case). A
// multi-head kernel that accepts everything gets multi-head cases only, and an MLA kernel that declines every
// MLA case is refused by name.
TEST(Generators, ProbeGivesAnMlaKernelWhoseSupportsAcceptsEverythingMlaCasesOnly) {
  class AnyCase final : public Kernel {
   public:
    AnyCase(bool mla, bool takes) : mla_(mla), takes_(takes) {}
    std::string name() const override { return mla_ ? (takes_ ? "test.mla_takes_all" : "test.mla_nothing") : "test.mha_takes_all"; }
    std::string description() const override { return "a kernel without a supports() of its own"; }
    pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
    Support supports(const Case&) const override { return takes_ ? Support::yes() : Support::no("nothing"); }
    bool takes_mla() const override { return mla_; }
    void run(const pacheck_kernel_args&) const override {}

   private:
    bool mla_, takes_;
  };
  for (const bool mla : {true, false}) {
    const CaseSpace sp = probe_space(std::make_shared<AnyCase>(mla, true));
    EXPECT_EQ(sp.mla(), mla);
    const auto gen = gen_case(sp);
    int mla_cases = 0;
    for (int i = 0; i < 1000; ++i) {
      const Case c = gen(rc::Random(i), i % 101).value();
      mla_cases += c.is_mla();
      ASSERT_TRUE(cell_support(AnyCase(mla, true), c).ok) << c.id();
    }
    EXPECT_EQ(mla_cases, mla ? 1000 : 0) << (mla ? "an MLA kernel was given a multi-head case" : "an MLA case");
  }
  try {
    probe_space(std::make_shared<AnyCase>(true, false));
    ADD_FAILURE() << "an MLA kernel that declines every MLA case was given a space";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("test.mla_nothing is an MLA decode kernel and declines every MLA probe case"),
              std::string::npos)
        << e.what();
  }
}

// An MLA kernel's space keeps only what it takes, one field at a time (as ProbeKeepsOnlyWhatTheKernelSupports for
// a multi-head kernel): page sizes, head counts, shapes, distributions, dtypes, fp8 encodings, query tokens.
TEST(Generators, ProbeKeepsOnlyWhatAnMlaKernelSupports) {
  class NarrowMla final : public Kernel {
   public:
    std::string name() const override { return "test.narrow_mla"; }
    std::string description() const override { return "an MLA kernel of a narrow slice"; }
    pacheck_device device() const override { return PACHECK_DEVICE_CPU; }
    bool takes_mla() const override { return true; }
    Support supports(const Case& c) const override {
      if (c.block_size != 64 && c.block_size != 1) return Support::no("block_size");
      if (c.num_heads > 64) return Support::no("num_heads");
      if (c.v_head_dim != c.kv_lora_rank) return Support::no("v_head_dim");
      if (c.dist == Dist::peaked) return Support::no("dist");
      if (c.kv_dtype == DType::f32 || c.kv_dtype == DType::fp8_e4m3fnuz) return Support::no("kv_dtype");
      if (!is_fp8(c.kv_dtype) && (c.q_dtype != c.kv_dtype || c.out_dtype != c.kv_dtype)) return Support::no("dtype");
      if (c.max_query_len() > 1) return Support::no("query_lens");
      return Support::yes();
    }
    void run(const pacheck_kernel_args&) const override {}
  };
  const auto k = std::make_shared<NarrowMla>();
  const CaseSpace sp = probe_space(k);
  ASSERT_TRUE(sp.mla());
  EXPECT_EQ(sp.block_sizes, (std::vector<int>{1, 64}));
  EXPECT_EQ(sp.mla_heads, (std::vector<int>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(sp.mla_shapes, (std::vector<MlaShape>{{512, 64, 512}}));
  EXPECT_EQ(sp.dists, (std::vector<Dist>{Dist::normal, Dist::uniform}));
  EXPECT_EQ(sp.kv_dtypes, (std::vector<DType>{DType::bf16, DType::f16}));
  EXPECT_FALSE(sp.mixed_dtypes);
  EXPECT_EQ(sp.fp8_dtypes, (std::vector<DType>{DType::fp8_e4m3fn, DType::fp8_e5m2}));
  EXPECT_EQ(sp.variants, 0u);
  const auto gen = gen_case(sp);
  for (int i = 0; i < 1000; ++i) {
    const Case c = gen(rc::Random(i), i % 101).value();
    ASSERT_TRUE(c.is_mla() && k->supports(c).ok) << c.id() << ": " << k->supports(c).reason;
  }
}

// The MLA space: its cases are valid MLA cases (check_mla_case) whose ids read back, with faults an MLA cache
// takes (no per-slot `scales` table, no `window`).
RC_GTEST_PROP(Generators, MlaCellsAreValidAndTheirIdsReadBack, ()) {
  const Cell cell = *gen_cell(full_mla_space(), true);
  cell.c.validate();
  RC_ASSERT(cell.c.is_mla());
  RC_ASSERT(cell.c.num_kv_heads == 1 && cell.c.layout == Layout::nhd && cell.c.scale.has_value());
  RC_ASSERT(parse_case_id(cell.c.id()).id() == cell.c.id());
  RC_ASSERT(parse_fault(cell.fault.id()).id() == cell.fault.id());
  RC_ASSERT(fault_case_problem(cell.fault, cell.c).empty());
  RC_ASSERT(cell.fault.region != Region::scales && cell.fault.region != Region::window);
  RC_ASSERT(poison_unsupported(cell.fault.poison, cell.c.kv_dtype).empty());
}

// Within the work budget, but for a case of one query head whose sequences are 1 token long (one block of a
// 576-value row at page 64 is over size 0's budget): fit_mla_budget halves heads and lengths down to that.
RC_GTEST_PROP(Generators, MlaCasesFitTheWorkBudgetOfTheirSize, ()) {
  const CaseSpace sp = full_mla_space();
  const int size = *rc::gen::withSize([](int s) { return rc::gen::just(s); });
  const Case c = *gen_case(sp);
  RC_ASSERT(case_work(c) <= work_budget(sp, size) || (c.num_heads == 1 && c.max_seq_len() == 1));
}

// Over 3000 MLA cases across all sizes: both latent shapes, the page sizes, the models' head counts and scales,
// the edges of gen_seq_len, batches, several query tokens and each fp8 encoding with its per-tensor k_scale.
TEST(Generators, MlaCasesCoverTheEdges) {
  const CaseSpace sp = full_mla_space();
  const auto gen = gen_case(sp);
  std::map<std::string, int> seen;
  std::set<int> heads, blocks;
  std::set<std::string> shapes;
  std::set<float> scales;
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    const Case c = gen(rc::Random(7000 + i), i % 101).value();
    ASSERT_TRUE(c.is_mla()) << c.id();
    heads.insert(c.num_heads);
    blocks.insert(c.block_size);
    shapes.insert(mla_case_of(c).m.text());
    scales.insert(*c.scale);
    ++seen[c.straddles() ? "straddling" : "aligned"];
    if (c.num_seqs() > 1) ++seen["batch"];
    if (c.num_seqs() >= 5) ++seen["batch>=5"];
    if (c.max_query_len() > 1) ++seen["qlen>1"];
    if (c.high_block_ids) ++seen["block ids>2^31"];
    if (c.padding_target >= 0) ++seen["padding into the pool"];
    ++seen[std::string("dist=") + std::string(dist_name(c.dist))];
    if (c.q_dtype != c.kv_dtype || c.out_dtype != c.kv_dtype) ++seen["mixed dtypes"];
    ++seen[std::string("kv=") + std::string(dtype_name(c.kv_dtype))];
    if (is_fp8(c.kv_dtype)) {
      EXPECT_TRUE(c.v_scale.is_default()) << c.id();
      EXPECT_FALSE(c.k_scale.per_head() || c.k_scale.per_slot()) << c.id();
      ++seen[c.k_scale.is_default() ? "fp8 scale 1" : "fp8 per tensor"];
    }
    for (int len : c.seq_lens) {
      const int bs = c.block_size;
      if (len == 1) ++seen["len 1"];
      if (bs > 1 && len == bs - 1) ++seen["len bs-1"];
      if (len == bs) ++seen["len bs"];
      if (len == bs + 1) ++seen["len bs+1"];
      if (len > 64) ++seen["past one 64-token tile"];
    }
  }
  for (const char* key : {"straddling", "aligned", "batch", "batch>=5", "qlen>1", "block ids>2^31",
                          "padding into the pool", "dist=normal", "dist=uniform", "dist=peaked", "mixed dtypes",
                          "kv=bf16", "kv=f16", "kv=f32", "kv=fp8_e4m3fn", "kv=fp8_e5m2", "kv=fp8_e4m3fnuz",
                          "fp8 scale 1", "fp8 per tensor", "len 1", "len bs-1", "len bs", "len bs+1",
                          "past one 64-token tile"})
    EXPECT_GT(seen[key], 0) << key;
  EXPECT_GT(seen["straddling"], n / 5);
  EXPECT_GT(seen["aligned"], n / 5);
  EXPECT_EQ(blocks, (std::set<int>{1, 16, 32, 64}));
  EXPECT_EQ(shapes, (std::set<std::string>{"512+64", "512+64,v256"}));
  for (int h : {1, 8, 16, 64, 128}) EXPECT_TRUE(heads.count(h)) << "num_heads " << h;
  for (const MlaModel& m : mla_models()) EXPECT_TRUE(scales.count(static_cast<float>(m.softmax_scale()))) << m.name;
}
