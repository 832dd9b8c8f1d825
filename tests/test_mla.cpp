// MLA decode (core/mla.hpp): the models' shapes and scales, the pre-paging latent rows, the oracle against a
// direct fp64 reading of the formula, the latent pager and its two views, fault injection into parts of the
// row, and every CPU MLA kernel over MLA cells (tests/mla_checks.hpp): the honest designs pass every cell, each
// negative control fails exactly the cells its expected_failures() names.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/mla.hpp"
#include "faults/mla_inject.hpp"
#include "oracle/mla.hpp"
#include "paging/mla_pager.hpp"
#include "tests/mla_checks.hpp"

namespace pacheck {
namespace {

using mla_checks::Count;
using mla_checks::MlaData;

const MlaModel& v3() { return mla_model("deepseek-v3"); }

// ---- shapes, models, cases ----

TEST(MlaShape, TextRoundTripsAndBadFieldsAreNamed) {
  const MlaShape m{512, 64, 512};
  EXPECT_EQ(m.text(), "512+64");
  EXPECT_EQ(MlaShape::parse("512+64"), m);
  const MlaShape v{512, 64, 128};
  EXPECT_EQ(v.text(), "512+64,v128");
  EXPECT_EQ(MlaShape::parse(v.text()), v);
  const auto field_of = [](auto&& f) {
    try {
      f();
    } catch (const CaseError& e) {
      return e.field;
    }
    return std::string("no error");
  };
  EXPECT_EQ(field_of([] { MlaShape::parse("512"); }), "kv_lora_rank");
  EXPECT_EQ(field_of([] { MlaShape::parse("512+x"); }), "qk_rope_head_dim");
  EXPECT_EQ(field_of([] { MlaShape::parse("512+64,w3"); }), "v_head_dim");
  EXPECT_EQ(field_of([] { MlaShape{512, 64, 513}.validate(); }), "v_head_dim");
  EXPECT_EQ(field_of([] { MlaShape{1000, 64, 512}.validate(); }), "qk_rope_head_dim");
  EXPECT_EQ(field_of([] { MlaShape{0, 64, 1}.validate(); }), "kv_lora_rank");
}

// The published scales (core/mla.hpp cites the configs): qk_head_dim 192 and the YaRN mscale, not 1/sqrt(576).
TEST(MlaModels, SoftmaxScalesAreThePublishedOnes) {
  EXPECT_NEAR(mla_model("deepseek-v3").softmax_scale(), 0.1352338, 1e-7);
  EXPECT_NEAR(mla_model("deepseek-v2-lite").softmax_scale(), 0.1147214, 1e-7);
  EXPECT_NEAR(mla_model("kimi-k2").softmax_scale(), 0.1308608, 1e-7);
  EXPECT_NEAR(yarn_softmax_scale(192, 1.0, 1.0), 1.0 / std::sqrt(192.0), 1e-15);  // no YaRN: plain 1/sqrt(192)
  for (const MlaModel& m : mla_models()) {
    EXPECT_EQ(m.shape().row(), 576) << m.name;
    EXPECT_GT(m.softmax_scale() / (1.0 / std::sqrt(576.0)), 2.5) << m.name;  // 3.25x for DeepSeek-V3
  }
  EXPECT_THROW(mla_model("llama"), std::invalid_argument);
}

TEST(MlaCase, IdAndRefusalsNameTheField) {
  const MlaCase mc = make_mla_case(v3(), 16, {100, 37}, 64);
  EXPECT_NE(mc.id().find("h16/1 d576 bs64 bf16 ctx100,37 nhd"), std::string::npos) << mc.id();
  EXPECT_NE(mc.id().find(" mla=512+64"), std::string::npos) << mc.id();
  EXPECT_EQ(mc.output_case().head_size, 512);
  const auto refused = [&](auto&& edit) {
    MlaCase bad = mc;
    edit(bad);
    try {
      bad.validate();
    } catch (const CaseError& e) {
      return e.field;
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused([](MlaCase& b) { b.c.num_kv_heads = 2; b.c.num_heads = 16; }), "num_kv_heads");
  EXPECT_EQ(refused([](MlaCase& b) { b.c.head_size = 512; }), "head_size");
  EXPECT_EQ(refused([](MlaCase& b) { b.c.layout = Layout::vllm; }), "layout");
  EXPECT_EQ(refused([](MlaCase& b) { b.c.dist = Dist::extreme; }), "dist");
  EXPECT_EQ(refused([](MlaCase& b) { b.c.sliding_window = 32; }), "sliding_window");
  EXPECT_EQ(refused([](MlaCase& b) { b.c.kv_dtype = DType::fp8_e4m3fn; b.c.v_scale = KvScale::parse("0.5"); }),
            "v_scale");
  EXPECT_EQ(refused([](MlaCase& b) { b.c.kv_dtype = DType::fp8_e4m3fn; b.c.k_scale = KvScale::parse("slot0.25~4"); }),
            "k_scale");
  EXPECT_EQ(refused([](MlaCase& b) { b.c.query_lens = {2}; }), "accepted");
}

TEST(MlaTargets, KIsTheRopePartVTheLatentPart) {
  const MlaShape m{512, 64, 512};
  EXPECT_EQ(mla_target_columns(m, Target::k).first, 512);
  EXPECT_EQ(mla_target_columns(m, Target::k).last, 576);
  EXPECT_EQ(mla_target_columns(m, Target::v).first, 0);
  EXPECT_EQ(mla_target_columns(m, Target::v).last, 512);
  EXPECT_EQ(mla_target_columns(m, Target::kv).last, 576);
}

// ---- pre-paging rows and the oracle ----

/// A small MLA shape (kv_lora_rank 32, rope 16, V 24: a V prefix shorter than the latent part), 3 query tokens.
MlaCase small_case(DType kv = DType::bf16) {
  MlaCase mc;
  mc.m = {32, 16, 24};
  mc.c.num_heads = 4;
  mc.c.num_kv_heads = 1;
  mc.c.head_size = mc.m.row();
  mc.c.block_size = 16;
  mc.c.seq_lens = {40, 7};
  mc.c.query_lens = {3, 1};
  mc.c.scale = 0.3f;
  mc.c.layout = Layout::nhd;
  mc.c.kv_dtype = kv;
  if (is_fp8(kv)) mc.c.k_scale = KvScale::parse("0.5");
  return mc;
}

TEST(MlaTensors, LatentRowsAreTheKeysOfTheSameMqaCase) {
  for (DType kv : {DType::bf16, DType::fp8_e4m3fn}) {
    const MlaCase mc = small_case(kv);
    const PrePaging p = generate_mla(mc), full = generate(mc.c);
    EXPECT_TRUE(p.v.empty() && p.v_codes.empty());
    ASSERT_EQ(p.k.size(), 2u);
    EXPECT_EQ(p.k, full.k);
    EXPECT_EQ(p.q, full.q);
    EXPECT_EQ(p.k[0].size(), 40u * 48u);
    if (is_fp8(kv)) {
      EXPECT_EQ(p.k_codes, full.k_codes);
      for (std::size_t i = 0; i < p.k[1].size(); ++i)
        ASSERT_EQ(p.k[1][i], from_bits(p.k_codes[1][i], kv) * 0.5f);
    }
  }
}

/// The MLA formula read directly in double: for each query row (causal) and head, softmax(scale q . row) over
/// the whole row, output the weighted sum of each row's first v_head_dim values.
std::vector<double> direct_mla(const MlaCase& mc, const PrePaging& p) {
  const Case& c = mc.c;
  const int W = mc.m.row(), V = mc.m.v_head_dim, H = c.num_heads;
  std::vector<double> out(static_cast<std::size_t>(c.num_query_tokens()) * H * V, 0.0);
  for (int s = 0; s < c.num_seqs(); ++s)
    for (int i = 0; i < c.query_len(s); ++i) {
      const int r = c.query_start(s) + i, keys = c.query_pos(s, i) + 1;
      for (int h = 0; h < H; ++h) {
        std::vector<double> lg(keys);
        double m = -INFINITY, sum = 0;
        for (int t = 0; t < keys; ++t) {
          double dot = 0;
          for (int j = 0; j < W; ++j)
            dot += static_cast<double>(p.q[(static_cast<std::size_t>(r) * H + h) * W + j]) * p.k[s][static_cast<std::size_t>(t) * W + j];
          m = std::max(m, lg[t] = static_cast<double>(*c.scale) * dot);
        }
        for (double& x : lg) sum += (x = std::exp(x - m));
        for (int t = 0; t < keys; ++t)
          for (int d = 0; d < V; ++d)
            out[(static_cast<std::size_t>(r) * H + h) * V + d] += lg[t] / sum * p.k[s][static_cast<std::size_t>(t) * W + d];
      }
    }
  return out;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}

TEST(MlaOracle, MatchesTheFormulaReadDirectly) {
  for (DType kv : {DType::bf16, DType::fp8_e4m3fn}) {
    const MlaCase mc = small_case(kv);
    const PrePaging p = generate_mla(mc);
    const std::vector<double> want = direct_mla(mc, p);
    const OracleResult f64 = mla_oracle(mc, p, Precision::f64), f32 = mla_oracle(mc, p, Precision::f32);
    ASSERT_EQ(f64.out.size(), want.size());
    EXPECT_LT(max_rel(f64.out, want), 1e-13);
    EXPECT_LT(max_rel(f32.out, want), 1e-5);
    EXPECT_EQ(f64.lse.size(), static_cast<std::size_t>(mc.c.num_query_tokens() * mc.c.num_heads));
    EXPECT_LT(max_rel(mla_emulate_low_precision(mc, p), want), 1e-2);
  }
}

TEST(MlaOracle, OneKeyGivesItsRowPrefixAndTheRopePartMoves) {
  MlaCase mc = small_case();
  mc.c.seq_lens = {1, 30};
  mc.c.query_lens = {};
  PrePaging p = generate_mla(mc);
  const OracleResult r = mla_oracle(mc, p, Precision::f64);
  const int W = mc.m.row(), V = mc.m.v_head_dim;
  for (int h = 0; h < mc.c.num_heads; ++h)
    for (int d = 0; d < V; ++d) ASSERT_EQ(r.out[static_cast<std::size_t>(h) * V + d], p.k[0][d]);  // weight 1
  // The rope part enters the logits: zeroing q's rope values changes sequence 1's output.
  for (std::size_t i = 0; i < p.q.size(); ++i)
    if (static_cast<int>(i % W) >= mc.m.kv_lora_rank) p.q[i] = 0;
  const OracleResult no_rope = mla_oracle(mc, p, Precision::f64);
  EXPECT_GT(max_rel(no_rope.out, r.out), 1e-3);
}

TEST(MlaOracle, RefusesTensorsOfTheWrongShape) {
  const MlaCase mc = small_case();
  PrePaging p = generate_mla(mc);
  p.k[1].pop_back();
  EXPECT_THROW(mla_oracle(mc, p), std::invalid_argument);
}

// ---- the latent pager ----

TEST(MlaPager, RoundTripsEveryPageSizeAndFp8) {
  for (int bs : {1, 16, 32, 64})
    for (DType kv : {DType::bf16, DType::fp8_e4m3fn, DType::fp8_e5m2}) {
      MlaCase mc = make_mla_case(v3(), 16, {70, 3}, bs, kv);
      if (is_fp8(kv)) mc.c.k_scale = KvScale::parse("0.25");
      const PrePaging p = generate_mla(mc);
      const PagedCache pc = page_mla(mc, p);
      EXPECT_EQ(pc.value_cache.size(), 0u) << "one latent cache";
      EXPECT_EQ(pc.key_cache.size(), static_cast<std::size_t>(pc.num_blocks) * bs * 576 * dtype_size(kv));
      for (int s = 0; s < 2; ++s) EXPECT_EQ(gather_mla(pc, s), p.k[s]) << "bs" << bs << " " << dtype_name(kv);
      // The same pool as the MQA case's pager lays out: blocks, tables, slot classes.
      const PagedCache mqa = page(mc.c, generate(mc.c));
      EXPECT_EQ(pc.block_tables, mqa.block_tables);
      EXPECT_EQ(pc.slot_map, mqa.slot_map);
      EXPECT_EQ(pc.key_cache, mqa.key_cache);
    }
}

// vLLM's [num_blocks, block_size, 576] and FlashMLA's [num_blocks, 64, 1, 576] are the nhd layout of one KV head.
TEST(MlaPager, VllmAndFlashMlaViewsAreTheNhdLayout) {
  const MlaCase mc = make_mla_case(v3(), 16, {130}, 64);
  const PagedCache pc = page_mla(mc, generate_mla(mc));
  for (int b = 0; b < pc.num_blocks; ++b)
    for (int slot = 0; slot < 64; ++slot)
      for (int i = 0; i < 576; ++i) {
        const std::int64_t nhd = pc.key_offset(b, 0, slot, i);
        ASSERT_EQ(mla_pool_offset(64, 576, b, slot, i), nhd);
        ASSERT_EQ(flashmla_offset(64, 576, b, slot, i), nhd);
      }
}

// ---- faults in parts of the row ----

std::int64_t slots_of(const PagedCache& pc, SlotClass c) { return pc.class_counts()[static_cast<int>(c)]; }

TEST(MlaInject, PoisonsThePartOfTheRowTheTargetNames) {
  const MlaCase mc = make_mla_case(v3(), 16, {70, 37}, 16);
  const PagedCache clean = page_mla(mc, generate_mla(mc));
  const std::int64_t tail = slots_of(clean, SlotClass::tail);
  ASSERT_GT(tail, 0);
  const std::map<Target, std::int64_t> width{{Target::k, 64}, {Target::v, 512}, {Target::kv, 576}};
  for (const auto& [t, w] : width) {
    PagedCache pc = clean;
    EXPECT_EQ(inject_mla(pc, mc.m, FaultSpec{Poison::nan, t, Region::tail}), tail * w);
    const RowColumns cols = mla_target_columns(mc.m, t);
    for (int b = 0; b < pc.num_blocks; ++b)
      for (int slot = 0; slot < pc.block_size; ++slot)
        for (int i = 0; i < 576; ++i) {
          const std::int64_t o = pc.key_offset(b, 0, slot, i);
          const bool poisoned = pc.slot_class(b, slot) == SlotClass::tail && i >= cols.first && i < cols.last;
          const float v = load(pc.key_cache.data(), o, pc.kv_dtype);
          ASSERT_EQ(std::isnan(v), poisoned) << target_name(t) << " block " << b << " slot " << slot << " value " << i;
          if (!poisoned) ASSERT_EQ(v, load(clean.key_cache.data(), o, pc.kv_dtype));
        }
  }
  PagedCache pc = clean;
  EXPECT_EQ(inject_mla(pc, mc.m, FaultSpec{Poison::nan, Target::kv, Region::unused}),
            slots_of(clean, SlotClass::unused) * 576);
  EXPECT_EQ(inject_mla(pc, mc.m, FaultSpec{Poison::nan, Target::v, Region::window}), 0);
  EXPECT_THROW(inject_mla(pc, mc.m, FaultSpec{Poison::nan, Target::v, Region::scales}), std::invalid_argument);
  MlaCase e4m3 = mc;
  e4m3.c.kv_dtype = DType::fp8_e4m3fn;
  PagedCache fp8 = page_mla(e4m3, generate_mla(e4m3));
  EXPECT_THROW(inject_mla(fp8, e4m3.m, FaultSpec{Poison::pinf, Target::v, Region::tail}), std::invalid_argument);
}

// ---- the kernels ----

/// The MLA cells every CPU MLA kernel runs: model shapes per rank, page sizes 1/16/32/64, straddling and aligned
/// lengths, batches whose first sequence's last 64-token tile reaches the next one's tail, fp8 latent caches
/// with a per-tensor scale, two query tokens per sequence, uniform and peaked rows.
std::vector<MlaCase> kernel_cases() {
  const MlaModel &lite = mla_model("deepseek-v2-lite"), &k2 = mla_model("kimi-k2");
  std::vector<MlaCase> out{
      make_mla_case(v3(), 16, {100, 37}, 64),      // DeepSeek-V3 per rank of 8, FlashMLA's page 64, straddling
      make_mla_case(lite, 16, {32, 10, 20}, 16),   // V2-Lite, page 16: sequence 0's last tile reaches sequence 1's tail
      make_mla_case(k2, 16, {64, 96}, 32),         // Kimi-K2 per rank of 4, aligned lengths
      make_mla_case(v3(), 16, {33, 17}, 1),        // page size 1 (AITER, FlashInfer)
      make_mla_case(v3(), 16, {40, 21}, 16, DType::fp8_e4m3fn),
      make_mla_case(v3(), 16, {45, 19}, 32, DType::fp8_e5m2),
      make_mla_case(v3(), 16, {50, 23}, 16),
      make_mla_case(k2, 16, {60, 21}, 16),
      make_mla_case(v3(), 16, {80, 30}, 64),
      make_mla_case(k2, 16, {16, 5}, 16),          // kMlaMinKeys exactly: the controls' threshold, normal rows
      make_mla_case(lite, 16, {16, 3}, 32),        // and uniform rows
  };
  out[4].c.k_scale = KvScale::parse("0.5");
  out[5].c.k_scale = KvScale::parse("2");
  out[6].c.query_lens = {2};
  out[7].c.dist = Dist::uniform;
  out[8].c.dist = Dist::peaked;
  out[10].c.dist = Dist::uniform;
  return out;
}

Backend& cpu() {
  static const std::unique_ptr<Backend> b = make_cpu_backend();
  return *b;
}

const std::vector<MlaData>& prepared() {
  static const std::vector<MlaData> d = [] {
    std::vector<MlaData> out;
    for (const MlaCase& mc : kernel_cases()) out.push_back(mla_checks::prepare_mla(mc));
    return out;
  }();
  return d;
}

MlaKernelPtr cpu_mla(const std::string& name) { return mla_checks::find_mla(cpu_mla_kernels(), name); }

class CpuMlaKernels : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuMlaKernels, PassEveryCellOrFailExactlyTheExpectedOnes) {
  const MlaKernelPtr k = cpu_mla(GetParam());
  ASSERT_TRUE(k);
  Count count;
  for (const MlaData& d : prepared()) {
    if (const Support s = k->supports(d.mc); !s.ok) {
      EXPECT_TRUE(k->is_negative_control()) << k->name() << " declined " << d.mc.id() << ": " << s.reason;
      continue;
    }
    mla_checks::expect_mla_cells(*k, cpu(), d, mla_checks::mla_faults(), &count);
  }
  EXPECT_GT(count.cells, 0);
  mla_checks::expect_mla_control_caught(*k, count, "the CPU MLA cells");
}

INSTANTIATE_TEST_SUITE_P(All, CpuMlaKernels, ::testing::ValuesIn(mla_checks::mla_names(cpu_mla_kernels())),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param.substr(4); });

TEST(CpuMlaKernels, HonestPanelAndControlsAreListed) {
  std::set<std::string> honest, controls;
  for (const MlaKernelPtr& k : cpu_mla_kernels()) (k->is_negative_control() ? controls : honest).insert(k->name());
  EXPECT_EQ(honest, (std::set<std::string>{"cpu.mla_reference", "cpu.mla_online", "cpu.mla_split_kv_lse",
                                           "cpu.mla_half_products", "cpu.mla_p_in_v_dtype"}));
  EXPECT_EQ(controls, (std::set<std::string>{"cpu.mla_fixed_scale", "cpu.mla_rope_dropped", "cpu.mla_rope_unscaled",
                                             "cpu.mla_v_offset", "cpu.mla_v_tail", "cpu.mla_packed_tile"}));
}

// cpu.mla_packed_tile reads another sequence's unwritten slots, never its own: it fails a subset of
// cpu.mla_v_tail's cells, and where sequence 0 is aligned and the next sequence straddles (FlashInfer #942's
// case) the NaN lands in sequence 0's output, which reads nothing poisoned itself.
TEST(CpuMlaKernels, PackedTileLeaksAnotherSequencesTail) {
  const auto tail = *cpu_mla("cpu.mla_v_tail")->expected_failures(),
             packed = *cpu_mla("cpu.mla_packed_tile")->expected_failures();
  int only_tail = 0, both = 0;
  for (const MlaCase& mc : kernel_cases())
    for (const FaultSpec& f : mla_checks::mla_faults()) {
      const MlaCell cell{mc, f};
      EXPECT_TRUE(!packed(cell) || tail(cell)) << cell.id();
      only_tail += tail(cell) && !packed(cell);
      both += tail(cell) && packed(cell);
    }
  EXPECT_GT(only_tail, 0);
  EXPECT_GT(both, 0);
  const MlaData& d = prepared()[1];  // ctx 32,10,20 at page size 16
  const FaultSpec others{Poison::nan, Target::v, Region::others};
  PagedCache faulted = d.cache;
  inject_mla(faulted, d.mc.m, others);
  const MlaKernelPtr k = cpu_mla("cpu.mla_packed_tile");
  const RawRun clean = mla_checks::run_mla_once(*k, cpu(), d, d.cache), run = mla_checks::run_mla_once(*k, cpu(), d, faulted);
  Count count;
  const CellResult r = mla_checks::expect_mla_verdict(*k, MlaCell{d.mc, others}, d, run, &clean.bits, &count);
  // Sequence 2's tail reaches sequence 1 too (its tile runs on into sequence 2's pages); sequence 2 reads none.
  EXPECT_NE(r.detail.find("in sequences 0, 1 (2 of 3)"), std::string::npos) << r.detail;
}

}  // namespace
}  // namespace pacheck
