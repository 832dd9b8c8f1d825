// Fault injector: poison bit patterns, regions from the slot map, and the negative-control predicate.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/fp8.hpp"
#include "exec/execute.hpp"
#include "exec/runner.hpp"
#include "faults/inject.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel.hpp"
#include "oracle/tensors.hpp"
#include "properties/planted_kernels.hpp"

namespace pacheck {
namespace {

Case small_case(Layout layout, DType dt, std::vector<int> lens, int bs = 16) {
  Case c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_size = 16;
  c.block_size = bs;
  c.seq_lens = std::move(lens);
  c.layout = layout;
  c.q_dtype = c.kv_dtype = c.out_dtype = dt;
  return c;
}

TEST(PoisonBits, ExactPatternsPerDtype) {
  EXPECT_EQ(poison_bits(Poison::nan, DType::bf16), 0x7FC0u);
  EXPECT_EQ(poison_bits(Poison::nan, DType::f16), 0x7E00u);
  EXPECT_EQ(poison_bits(Poison::nan, DType::f32), 0x7FC00000u);
  EXPECT_EQ(poison_bits(Poison::pinf, DType::bf16), 0x7F80u);
  EXPECT_EQ(poison_bits(Poison::ninf, DType::f16), 0xFC00u);
  EXPECT_EQ(poison_bits(Poison::pinf, DType::f32), 0x7F800000u);
  EXPECT_EQ(poison_bits(Poison::max_finite, DType::f16), 0x7BFFu);
  EXPECT_EQ(poison_bits(Poison::max_finite, DType::bf16), 0x7F7Fu);
  EXPECT_EQ(from_bits(poison_bits(Poison::big, DType::f32), DType::f32), 1.0e4f);
  EXPECT_EQ(from_bits(poison_bits(Poison::big, DType::bf16), DType::bf16), 9984.0f);  // 1e4 rounded to bf16
  EXPECT_EQ(poison_bits(Poison::zero, DType::bf16), 0u);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    EXPECT_TRUE(std::isnan(from_bits(poison_bits(Poison::nan, t), t)));
    EXPECT_TRUE(std::isinf(from_bits(poison_bits(Poison::ninf, t), t)));
  }
}

// subnormal is code 1 in every dtype: the smallest positive subnormal of core/fp8.hpp's table and of IEEE
// binary32 / binary16 / bfloat16, a finite value.
TEST(PoisonBits, SubnormalIsTheSmallestPositiveSubnormalOfEachDtype) {
  const std::vector<std::pair<DType, float>> smallest{
      {DType::f32, 0x1p-149f},       {DType::f16, 0x1p-24f},         {DType::bf16, 0x1p-133f},
      {DType::fp8_e4m3fn, 0x1p-9f}, {DType::fp8_e4m3fnuz, 0x1p-10f}, {DType::fp8_e5m2, 0x1p-16f}};
  for (const auto& [t, value] : smallest) {
    EXPECT_EQ(poison_bits(Poison::subnormal, t), 1u) << dtype_name(t);
    EXPECT_EQ(from_bits(poison_bits(Poison::subnormal, t), t), value) << dtype_name(t);
    EXPECT_EQ(to_bits(value / 2, t), 0u) << dtype_name(t) << ": nothing positive lies below it";
  }
  EXPECT_FALSE(poison_is_nonfinite(Poison::subnormal));
  EXPECT_EQ(poison_unsupported(Poison::subnormal, DType::fp8_e4m3fn), "");
}

TEST(FaultSpec, IdRoundTripAndErrors) {
  for (const char* id : {"clean", "V:nan@tail", "K+V:-inf@all", "K:1e4@unused", "V:max@padding", "K:+inf@tail",
                         "V:subnormal@tail", "K+V:subnormal@all"})
    EXPECT_EQ(parse_fault(id).id(), id);
  EXPECT_THROW(parse_fault("V:nan"), std::invalid_argument);
  EXPECT_THROW(parse_fault("Q:nan@tail"), std::invalid_argument);
  EXPECT_THROW(parse_fault("V:banana@tail"), std::invalid_argument);
  EXPECT_THROW(parse_fault("V:nan@nowhere"), std::invalid_argument);
}

/// Counts slots whose K (or V) elements all hold `bits`, per class.
std::vector<std::int64_t> poisoned_slots(const PagedCache& pc, bool k, std::uint32_t bits) {
  std::vector<std::int64_t> n(4, 0);
  for (int b = 0; b < pc.num_blocks; ++b)
    for (int s = 0; s < pc.block_size; ++s) {
      bool all = true;
      for (int g = 0; g < pc.num_kv_heads && all; ++g)
        for (int d = 0; d < pc.head_size && all; ++d) {
          const auto off = k ? pc.key_offset(b, g, s, d) : pc.value_offset(b, g, s, d);
          all = load_bits(k ? pc.key_cache.data() : pc.value_cache.data(), off, pc.kv_dtype) == bits;
        }
      if (all) ++n[static_cast<int>(pc.slot_class(b, s))];
    }
  return n;
}

TEST(Inject, WritesExactlyTheRegionAndTarget) {
  for (Layout layout : {Layout::vllm, Layout::nhd, Layout::hnd, Layout::aiter}) {
    const Case c = small_case(layout, DType::bf16, {37, 16, 5});
    const PrePaging pre = generate(c);
    const PagedCache clean = page(c, pre);
    const auto counts = clean.class_counts();
    const std::uint32_t nan = poison_bits(Poison::nan, DType::bf16);
    struct Want { Region r; Target t; };
    for (Want w : {Want{Region::tail, Target::v}, Want{Region::tail, Target::k}, Want{Region::unused, Target::kv},
                   Want{Region::padding, Target::kv}, Want{Region::all, Target::v}}) {
      PagedCache pc = clean;
      const auto written = inject(pc, FaultSpec{Poison::nan, w.t, w.r});
      const auto k_slots = poisoned_slots(pc, true, nan), v_slots = poisoned_slots(pc, false, nan);
      std::vector<std::int64_t> expect(4, 0);
      for (int cls = 1; cls < 4; ++cls) {
        const bool in = w.r == Region::all || (w.r == Region::tail && cls == 1) || (w.r == Region::unused && cls == 2) ||
                        (w.r == Region::padding && cls == 3);
        if (in) expect[cls] = counts[cls];
      }
      const std::vector<std::int64_t> none(4, 0);
      EXPECT_EQ(v_slots, w.t == Target::k ? none : expect) << layout_name(layout) << " " << region_name(w.r);
      EXPECT_EQ(k_slots, w.t == Target::v ? none : expect) << layout_name(layout) << " " << region_name(w.r);
      std::int64_t slots = 0;
      for (auto e : expect) slots += e;
      EXPECT_EQ(written, slots * c.num_kv_heads * c.head_size * (w.t == Target::kv ? 2 : 1));
      // Written slots are untouched.
      for (int s = 0; s < c.num_seqs(); ++s) EXPECT_EQ(gather(pc, s), gather(clean, s));
    }
  }
}

// Seed 002: in AITER's shuffled V [n, G, B/16, D, 16] tail poison lands on the unwritten slots. Checked on
// the raw bytes: every element index is decoded with the documented formula (not the pager's accessors),
// and an element holds NaN exactly when its slot is a tail slot, at 32- and 64-token blocks where the
// layout differs from vLLM's.
TEST(Inject, TailPoisonLandsOnTheUnwrittenSlotsOfTheAiterLayout) {
  for (int bs : {16, 32, 64}) {
    const Case c = small_case(Layout::aiter, DType::bf16, {37, 2 * bs, 5, bs + 17}, bs);
    PagedCache pc = page(c, generate(c));
    inject(pc, FaultSpec{Poison::nan, Target::v, Region::tail});
    const std::uint32_t nan = poison_bits(Poison::nan, DType::bf16);
    const std::int64_t G = c.num_kv_heads, D = c.head_size, B = bs;
    std::int64_t poisoned = 0, tail_elements = 0;
    for (std::int64_t i = 0; i < pc.elements(); ++i) {
      const std::int64_t lane = i % 16, d = (i / 16) % D, group = (i / (16 * D)) % (B / 16), b = i / (G * D * B);
      const int slot = static_cast<int>(group * 16 + lane);
      const bool tail = pc.slot_class(static_cast<int>(b), slot) == SlotClass::tail;
      const bool is_nan = load_bits(pc.value_cache.data(), static_cast<std::size_t>(i), c.kv_dtype) == nan;
      ASSERT_EQ(is_nan, tail) << "bs" << bs << " element " << i << " (block " << b << ", slot " << slot << ", d " << d
                              << ")";
      poisoned += is_nan;
      tail_elements += tail;
    }
    EXPECT_GT(poisoned, 0);
    EXPECT_EQ(poisoned, tail_elements);
  }
}

// --- Issue 18: Region::others (FlashInfer #941) -------------------------------------------------------
// `others` writes the tails of sequences 1.. and the unused blocks; sequence 0's final block and the
// padding target stay clean, so nothing sequence 0 reads is poisoned.
TEST(Inject, OthersSparesSequenceZeroAndThePaddingTarget) {
  for (Layout layout : {Layout::vllm, Layout::nhd, Layout::hnd}) {
    const Case c = small_case(layout, DType::bf16, {37, 16, 5, 20});
    const PrePaging pre = generate(c);
    const PagedCache clean = page(c, pre);
    PagedCache pc = clean;
    const std::uint32_t nan = poison_bits(Poison::nan, DType::bf16);
    const auto written = inject(pc, FaultSpec{Poison::nan, Target::v, Region::others});
    const int seq0_last = clean.block_tables[static_cast<std::size_t>((37 - 1) / 16)];
    std::int64_t slots = 0;
    for (int b = 0; b < pc.num_blocks; ++b)
      for (int slot = 0; slot < pc.block_size; ++slot) {
        const SlotClass cls = pc.slot_class(b, slot);
        const bool want = cls == SlotClass::unused || (cls == SlotClass::tail && b != seq0_last);
        bool poisoned = true;
        for (int g = 0; g < pc.num_kv_heads; ++g)
          for (int d = 0; d < pc.head_size; ++d)
            poisoned = poisoned && load_bits(pc.value_cache.data(), pc.value_offset(b, g, slot, d), pc.kv_dtype) == nan;
        EXPECT_EQ(poisoned, want) << layout_name(layout) << " block " << b << " slot " << slot;
        slots += want;
      }
    EXPECT_GT(slots, pc.class_counts()[static_cast<int>(SlotClass::unused)]);  // some other sequence's tail
    EXPECT_EQ(written, slots * c.num_kv_heads * c.head_size);
    EXPECT_EQ(pc.key_cache, clean.key_cache);  // V only
    for (int s = 0; s < c.num_seqs(); ++s) EXPECT_EQ(gather(pc, s), gather(clean, s));
  }
}

TEST(NegativeControlPredicate, OthersNeedsAStraddlingSequenceAfterTheFirst) {
  Cell cell{small_case(Layout::vllm, DType::bf16, {4090, 32}), FaultSpec{Poison::nan, Target::v, Region::others}};
  EXPECT_FALSE(poisons_v_tail(cell));  // only sequence 0 straddles, and its tail is spared
  cell.c.seq_lens = {4096, 33};
  EXPECT_TRUE(poisons_v_tail(cell));
  cell.c.seq_lens = {33};
  EXPECT_FALSE(poisons_v_tail(cell));
  cell.c.seq_lens = {4096, 33};
  cell.fault.target = Target::k;
  EXPECT_FALSE(poisons_v_tail(cell));
}
// A kernel that leaks another sequence's slots into sequence 0 (planted.cross_seq_chunk) is caught on
// sequence 0 under `others`, and the detail names it; a tail-read kernel (cpu.vector_v) fails on the
// sequences whose own tails are poisoned, never on sequence 0; the honest panel passes.
TEST(RegionOthers, CatchesALeakIntoSequenceZeroAndPassesTheHonestPanel) {
  Case c = small_case(Layout::nhd, DType::bf16, {1030, 33, 517, 20});
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_size = 64;
  const Cell cell{c, parse_fault("V:nan@others")};
  auto cpu = make_cpu_backend();
  const CellResult leak = run_cell(cell, *prop::new_planted_kernel("planted.cross_seq_chunk"), *cpu, RunOptions{}).first;
  EXPECT_EQ(leak.verdict, Verdict::poisoned) << leak.detail;
  EXPECT_NE(leak.detail.find("first at (seq 0,"), std::string::npos) << leak.detail;
  EXPECT_NE(leak.detail.find("; in sequences 0, "), std::string::npos) << leak.detail;
  // The same kernel on the clean cache and on a finite poison (0 x 1e4 = 0) passes.
  EXPECT_EQ(run_cell(Cell{c, FaultSpec{}}, *prop::new_planted_kernel("planted.cross_seq_chunk"), *cpu, RunOptions{}).first.verdict,
            Verdict::pass);
  const CellResult tail = run_cell(cell, *Registry::global().find("cpu.vector_v"), *cpu, RunOptions{}).first;
  EXPECT_EQ(tail.verdict, Verdict::poisoned) << tail.detail;
  EXPECT_NE(tail.detail.find("; in sequences 1, 2, 3 (3 of 4)"), std::string::npos) << tail.detail;
  for (const char* name : {"cpu.reference", "cpu.vector_v_masked", "cpu.split_kv", "cpu.online", "cpu.two_pass",
                           "cpu.split_kv_lse", "cpu.half_products", "cpu.p_in_v_dtype"}) {
    const CellResult r = run_cell(cell, *Registry::global().find(name), *cpu, RunOptions{}).first;
    EXPECT_EQ(r.verdict, Verdict::pass) << name << ": " << r.detail;
  }
}
// --- end issue 18 --------------------------------------------------------------------------------------

TEST(Inject, AlignedLengthHasNoTail) {
  const Case c = small_case(Layout::nhd, DType::f16, {32, 16});
  PagedCache pc = page(c, generate(c));
  EXPECT_EQ(inject(pc, FaultSpec{Poison::nan, Target::kv, Region::tail}), 0);
  EXPECT_GT(inject(pc, FaultSpec{Poison::nan, Target::kv, Region::unused}), 0);
}

TEST(NegativeControlPredicate, OnlyNonFiniteVTailAtStraddlingLengths) {
  Cell cell{small_case(Layout::vllm, DType::bf16, {4090}), FaultSpec{Poison::nan, Target::v, Region::tail}};
  EXPECT_TRUE(poisons_v_tail(cell));
  cell.fault.target = Target::kv;
  EXPECT_TRUE(poisons_v_tail(cell));
  cell.fault.target = Target::k;
  EXPECT_FALSE(poisons_v_tail(cell));
  cell.fault = FaultSpec{Poison::big, Target::v, Region::tail};
  EXPECT_FALSE(poisons_v_tail(cell));
  cell.fault = FaultSpec{Poison::nan, Target::v, Region::unused};
  EXPECT_FALSE(poisons_v_tail(cell));
  cell.fault = FaultSpec{Poison::ninf, Target::v, Region::all};
  EXPECT_TRUE(poisons_v_tail(cell));
  cell.c.seq_lens = {4096};
  EXPECT_FALSE(poisons_v_tail(cell));
  // A finite poison is no expected failure of the negative control: subnormal x 0 = 0.
  cell.c.seq_lens = {4090};
  cell.fault = parse_fault("V:subnormal@tail");
  EXPECT_FALSE(poisons_v_tail(cell));
}

// A subnormal poison is finite: a correct kernel's output is bitwise that of the clean cache, and so is the
// negative control's, which multiplies the V tail by a zero probability (subnormal x 0 = 0). The same cells
// with NaN show that cpu.vector_v does read the tail there.
TEST(SubnormalPoison, LeavesTheOutputBitwiseUnchangedOnReferenceAndVectorV) {
  auto backend = make_cpu_backend();
  for (DType dt : {DType::bf16, DType::f16, DType::f32, DType::fp8_e4m3fn}) {
    Case c = small_case(Layout::vllm, dt, {37, 5});
    if (is_fp8(dt)) c.q_dtype = c.out_dtype = DType::bf16;
    ASSERT_TRUE(c.straddles());
    for (const char* kernel : {"cpu.reference", "cpu.vector_v"}) {
      const KernelPtr k = Registry::global().find(kernel);
      ASSERT_TRUE(k);
      const auto [clean, clean_raw] = run_cell(Cell{c, FaultSpec{}}, *k, *backend, RunOptions{});
      ASSERT_EQ(clean.verdict, Verdict::pass) << kernel << " " << c.id();
      for (const char* fault : {"V:subnormal@tail", "K+V:subnormal@all"}) {
        const Cell cell{c, parse_fault(fault)};
        SCOPED_TRACE(std::string(kernel) + " " + cell.id());
        EXPECT_FALSE(poisons_v_tail(cell));
        PagedCache pc = page(c, generate(c));
        EXPECT_GT(inject(pc, cell.fault), 0) << "the cell poisons nothing";
        const auto [r, raw] = run_cell(cell, *k, *backend, RunOptions{});
        EXPECT_EQ(r.verdict, Verdict::pass) << r.detail;
        EXPECT_EQ(r.variant_elements, 0);
        EXPECT_EQ(raw.bits, clean_raw.bits);
      }
    }
    const Cell nan_tail{c, parse_fault("V:nan@tail")};
    EXPECT_TRUE(poisons_v_tail(nan_tail));
    EXPECT_EQ(run_cell(nan_tail, *Registry::global().find("cpu.vector_v"), *backend, RunOptions{}).first.verdict,
              Verdict::poisoned)
        << dtype_name(dt);
  }
}

// Issue 18: a sparse pool (high block ids) is poisoned in its live blocks only: every unused slot of a live
// block holds the poison, every block outside resident_blocks still reads as zero, and the count of
// written elements is that of the live unused slots.
TEST(Inject, SparsePoolPoisonsItsLiveBlocksOnly) {
  Case c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_size = 64;
  c.block_size = 16;
  c.seq_lens = {100, 37};
  c.layout = Layout::nhd;
  c.high_block_ids = 32;
  PagedCache pc = page(c, generate(c));
  ASSERT_TRUE(pc.sparse());
  std::int64_t unused_live = 0;
  for (int b : pc.resident_blocks)
    for (int slot = 0; slot < c.block_size; ++slot) unused_live += pc.slot_class(b, slot) == SlotClass::unused;
  const std::int64_t written = inject(pc, parse_fault("K+V:nan@unused"));
  EXPECT_EQ(written, unused_live * c.num_kv_heads * c.head_size * 2);
  const std::uint32_t nan = poison_bits(Poison::nan, c.kv_dtype);
  int poisoned_blocks = 0;
  for (int b : pc.resident_blocks)
    if (pc.slot_class(b, 3) == SlotClass::unused) {
      EXPECT_EQ(load_bits(pc.key_cache.data(), pc.key_offset(b, 1, 3, 5), c.kv_dtype), nan) << "live block " << b;
      ++poisoned_blocks;
    }
  EXPECT_GT(poisoned_blocks, 8) << "the wrapped-offset blocks, block 0 and the sampled ones at least";
  const std::set<int> live(pc.resident_blocks.begin(), pc.resident_blocks.end());
  int dead = 1;
  while (live.count(dead)) ++dead;
  EXPECT_EQ(pc.slot_class(dead, 0), SlotClass::unused);
  EXPECT_EQ(load_bits(pc.key_cache.data(), pc.key_offset(dead, 0, 0, 0), c.kv_dtype), 0u) << "block " << dead;
}

}  // namespace
}  // namespace pacheck
