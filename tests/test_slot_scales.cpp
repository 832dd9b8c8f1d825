// Seed 002, issue 18 item 5: per-slot fp8 scale tables ([num_blocks, num_kv_heads, block_size], as AITER's
// asm decode reads them). The oracle dequantises from the pre-paging per-token scales (a hand-computed
// case checks it), the pager pages them by physical block id (an independent index formula reads them
// back), the `scales` fault region poisons the unwritten slots' entries only, the honest CPU kernels pass
// such cells, and cpu.slot_scale_unmasked (scales applied across the whole final block) is caught on them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/cell.hpp"
#include "core/fp8.hpp"
#include "exec/execute.hpp"
#include "faults/inject.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"
#include "oracle/oracle.hpp"
#include "paging/pager.hpp"

namespace pacheck {
namespace {

Case slot_case(Layout layout, int bs, std::vector<int> lens) {
  Case c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_size = 32;
  c.block_size = bs;
  c.seq_lens = std::move(lens);
  c.layout = layout;
  c.kv_dtype = DType::fp8_e4m3fn;
  c.q_dtype = c.out_dtype = DType::bf16;
  c.k_scale.slot = std::pair{0.5f, 2.0f};
  c.v_scale.slot = std::pair{0.25f, 4.0f};
  return c;
}

TEST(SlotScales, IdSuiteTokenAndValidation) {
  Case c = slot_case(Layout::aiter, 32, {37});
  EXPECT_NE(c.id().find(" ks=slot0.5~2 vs=slot0.25~4"), std::string::npos) << c.id();
  const Case back = parse_case_id(c.id());
  EXPECT_TRUE(back.k_scale.per_slot());
  EXPECT_EQ(back.id(), c.id());
  EXPECT_FALSE(c.k_scale.per_head());
  Case bad = c;
  bad.v_scale.slot = std::pair{0.0f, 4.0f};
  EXPECT_THROW(bad.validate(), CaseError);
  bad = c;
  bad.high_block_ids = 31;
  try {
    bad.validate();
    ADD_FAILURE() << "per-slot scales with high block ids accepted";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.field, "k_scale");
  }
  // The `scales` region needs a per-slot table for each cache it targets.
  EXPECT_NO_THROW(parse_cell_id(c.id() + " V:nan@scales"));
  Case no_slot = c;
  no_slot.v_scale = KvScale{};
  EXPECT_NO_THROW(parse_cell_id(no_slot.id() + " K:nan@scales"));
  try {
    parse_cell_id(no_slot.id() + " K+V:nan@scales");
    ADD_FAILURE() << "V:scales accepted without a per-slot V table";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("per-slot V scale table"), std::string::npos) << e.what();
  }
}

// A hand-computed case: one sequence of 3 tokens, one KV head, one query head. K and V are the codes
// decoded times each token's own scale; the softmax and P.V are done here in double from them.
TEST(SlotScales, OracleUsesEachTokensScaleHandComputed) {
  Case c = slot_case(Layout::aiter, 16, {3});
  c.num_heads = c.num_kv_heads = 1;
  c.head_size = 16;
  const PrePaging p = generate(c);
  ASSERT_EQ(p.k_slot_scales.size(), 1u);
  ASSERT_EQ(p.k_slot_scales[0].size(), 3u);
  double logits[3], m = -1e300;
  for (int t = 0; t < 3; ++t) {
    const float ks = p.k_slot_scales[0][t], vs = p.v_slot_scales[0][t];
    EXPECT_GE(ks, 0.5f);
    EXPECT_LE(ks, 2.0f);
    EXPECT_GE(vs, 0.25f);
    EXPECT_LE(vs, 4.0f);
    double dot = 0;
    for (int d = 0; d < 16; ++d) {
      const float k = from_bits(p.k_codes[0][t * 16 + d], c.kv_dtype) * ks;
      const float v = from_bits(p.v_codes[0][t * 16 + d], c.kv_dtype) * vs;
      ASSERT_EQ(p.k[0][t * 16 + d], k) << "t " << t << " d " << d;
      ASSERT_EQ(p.v[0][t * 16 + d], v) << "t " << t << " d " << d;
      dot += static_cast<double>(p.q[d]) * k;
    }
    logits[t] = dot * c.effective_scale();
    m = std::max(m, logits[t]);
  }
  // The three tokens' scales differ (a per-tensor reading would be wrong).
  EXPECT_NE(p.v_slot_scales[0][0], p.v_slot_scales[0][1]);
  double sum = 0, w[3];
  for (int t = 0; t < 3; ++t) sum += (w[t] = std::exp(logits[t] - m));
  const OracleResult o = oracle(c, p, Precision::f64);
  for (int d = 0; d < 16; ++d) {
    double want = 0;
    for (int t = 0; t < 3; ++t) want += w[t] / sum * p.v[0][t * 16 + d];
    EXPECT_NEAR(o.out[d], want, 1e-9 * (1 + std::abs(want))) << "d " << d;
  }
}

// The pager writes each token's scale at entry (block_tables[s, t / B] * G + g) * B + t % B, the documented
// index, and 1 in every unwritten slot's entry.
TEST(SlotScales, PagerTableByPhysicalBlockAndUnwrittenEntries) {
  for (int bs : {16, 32, 64}) {
    const Case c = slot_case(Layout::aiter, bs, {37, 2 * bs, 5});
    const PrePaging p = generate(c);
    const PagedCache pc = page(c, p);
    const int G = c.num_kv_heads;
    ASSERT_EQ(pc.v_slot_scales.size(), static_cast<std::size_t>(pc.num_blocks) * G * bs);
    std::vector<bool> seen(pc.v_slot_scales.size(), false);
    for (int s = 0; s < c.num_seqs(); ++s)
      for (int t = 0; t < c.seq_lens[s]; ++t) {
        const std::int64_t b = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + t / bs];
        for (int g = 0; g < G; ++g) {
          const std::size_t i = static_cast<std::size_t>((b * G + g) * bs + t % bs);
          ASSERT_EQ(pc.k_slot_scales[i], p.k_slot_scales[s][static_cast<std::size_t>(t) * G + g]);
          ASSERT_EQ(pc.v_slot_scales[i], p.v_slot_scales[s][static_cast<std::size_t>(t) * G + g]);
          seen[i] = true;
        }
      }
    for (std::size_t i = 0; i < seen.size(); ++i)
      if (!seen[i]) ASSERT_EQ(pc.v_slot_scales[i], 1.0f) << "entry " << i;
  }
}

// Region `scales`: NaN in exactly the entries of the unwritten slots, the caches and written entries untouched.
TEST(SlotScales, ScalesRegionPoisonsOnlyUnwrittenEntries) {
  const Case c = slot_case(Layout::aiter, 32, {37, 64, 5});
  const PagedCache clean = page(c, generate(c));
  for (Target t : {Target::k, Target::v, Target::kv}) {
    PagedCache pc = clean;
    const std::int64_t n = inject(pc, FaultSpec{Poison::nan, t, Region::scales});
    std::int64_t unwritten = 0;
    for (int b = 0; b < pc.num_blocks; ++b)
      for (int slot = 0; slot < pc.block_size; ++slot) {
        const bool w = pc.slot_class(b, slot) == SlotClass::written;
        unwritten += !w;
        for (int g = 0; g < pc.num_kv_heads; ++g) {
          const std::size_t i = pc.slot_scale_index(b, g, slot);
          EXPECT_EQ(std::isnan(pc.k_slot_scales[i]), !w && t != Target::v);
          EXPECT_EQ(std::isnan(pc.v_slot_scales[i]), !w && t != Target::k);
        }
      }
    EXPECT_EQ(n, unwritten * pc.num_kv_heads * (t == Target::kv ? 2 : 1));
    EXPECT_TRUE(std::equal(pc.value_cache.data(), pc.value_cache.data() + pc.value_cache.size(), clean.value_cache.data()));
    EXPECT_TRUE(std::equal(pc.key_cache.data(), pc.key_cache.data() + pc.key_cache.size(), clean.key_cache.data()));
  }
}

// Every honest CPU kernel passes per-slot cells clean and with NaN / garbage in the unwritten slots' scale
// entries (and in the caches' tails); cpu.slot_scale_unmasked is caught on exactly the V-scale NaN cells of a
// straddling length and passes the rest; the GPU-style decline is checked in test_gpu_kernels.
TEST(SlotScales, HonestCpuKernelsPassAndTheControlIsCaught) {
  auto backend = make_cpu_backend();
  const std::vector<std::string> faults{"clean", "V:nan@scales", "K:nan@scales", "K+V:nan@scales", "V:1e4@scales",
                                        "K+V:max@scales", "V:nan@tail", "K+V:nan@all"};
  int caught = 0, control_cells = 0;
  for (const Layout layout : {Layout::aiter, Layout::vllm, Layout::nhd})
    for (const std::vector<int>& lens : {std::vector<int>{100, 37}, std::vector<int>{64, 32}}) {
      const Case c = slot_case(layout, 32, lens);
      for (const std::string& f : faults) {
        const Cell cell = parse_cell_id(c.id() + " " + f);
        for (const KernelPtr& k : Registry::global().all()) {
          if (k->device() != PACHECK_DEVICE_CPU || !k->supports(c).ok) continue;
          const bool control = k->name() == "cpu.slot_scale_unmasked";
          if (k->is_negative_control() && !control) continue;
          const CellResult r = run_cell(cell, *k, *backend, RunOptions{}).first;
          if (control) {
            ++control_cells;
            const bool expect = (*k->expected_failures())(cell);
            EXPECT_EQ(expect, c.straddles() && (f == "V:nan@scales" || f == "K+V:nan@scales")) << cell.id();
            EXPECT_EQ(is_failure(r.verdict), expect) << k->name() << " " << cell.id() << ": " << verdict_name(r.verdict);
            caught += expect && is_failure(r.verdict);
          } else {
            EXPECT_EQ(r.verdict, Verdict::pass) << k->name() << " " << cell.id() << ": " << r.detail;
          }
        }
      }
    }
  EXPECT_GT(control_cells, 0);
  EXPECT_EQ(caught, 3 * 2);  // V and K+V NaN at the straddling batch, in each of the three layouts
}

}  // namespace
}  // namespace pacheck
