// The pager: page -> gather is exact, the slot map counts what it should, block tables name distinct,
// permuted blocks, and the layouts put each element where the documented shape says.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "paging/pager.hpp"

namespace pacheck {
namespace {

struct PagerParam {
  Layout layout;
  DType dtype;
  int block_size;
};

std::string param_name(const ::testing::TestParamInfo<PagerParam>& info) {
  return std::string(layout_name(info.param.layout)) + "_" + std::string(dtype_name(info.param.dtype)) + "_bs" +
         std::to_string(info.param.block_size);
}

/// Lengths 1, bs-1, bs, bs+1 and a large one, as one multi-sequence case.
Case pager_case(const PagerParam& p) {
  Case c;
  c.layout = p.layout;
  c.kv_dtype = c.q_dtype = c.out_dtype = p.dtype;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_size = 16;  // a multiple of the vllm vector width for every dtype (x = 4 or 8)
  c.block_size = p.block_size;
  const int bs = p.block_size;
  c.seq_lens = {1, bs, bs + 1, 1000};
  if (bs > 1) c.seq_lens.insert(c.seq_lens.begin() + 1, bs - 1);
  c.seed = 3 + static_cast<std::uint64_t>(bs);
  return c;
}

/// Index of element (block, g, slot, d) computed by hand from the shapes in kernel_abi.h.
std::int64_t hand_key_index(const PagedCache& pc, std::int64_t b, int g, int slot, int d) {
  const std::int64_t G = pc.num_kv_heads, D = pc.head_size, B = pc.block_size, x = pc.x;
  switch (pc.layout) {
    case Layout::vllm: return (((b * G + g) * (D / x) + d / x) * B + slot) * x + d % x;  // [n, G, D/x, B, x]
    case Layout::nhd: return ((b * B + slot) * G + g) * D + d;                         // [n, B, G, D]
    case Layout::hnd: return ((b * G + g) * B + slot) * D + d;                         // [n, G, B, D]
    case Layout::aiter: return (((b * G + g) * (D / x) + d / x) * B + slot) * x + d % x;  // K as vllm
  }
  return -1;
}
std::int64_t hand_value_index(const PagedCache& pc, std::int64_t b, int g, int slot, int d) {
  const std::int64_t G = pc.num_kv_heads, D = pc.head_size, B = pc.block_size;
  if (pc.layout == Layout::vllm) return ((b * G + g) * D + d) * B + slot;  // [n, G, D, B]
  // aiter (seed 002): V shuffled [n, G, B/16, D, 16]
  if (pc.layout == Layout::aiter) return (((b * G + g) * (B / 16) + slot / 16) * D + d) * 16 + slot % 16;
  return hand_key_index(pc, b, g, slot, d);
}

class Pager : public ::testing::TestWithParam<PagerParam> {};

TEST_P(Pager, GatherRoundTripIsExact) {
  const Case c = pager_case(GetParam());
  const PrePaging p = generate(c);
  const PagedCache pc = page(c, p);
  for (int s = 0; s < c.num_seqs(); ++s) {
    const auto [k, v] = gather(pc, s);
    ASSERT_EQ(k, p.k[s]) << "K of sequence " << s << " (len " << c.seq_lens[s] << ")";
    ASSERT_EQ(v, p.v[s]) << "V of sequence " << s;
  }
}

TEST_P(Pager, ElementsSitAtTheDocumentedIndex) {
  // Independent of the pager's own offset functions: read the raw cache at the hand-computed index.
  const Case c = pager_case(GetParam());
  const PrePaging p = generate(c);
  const PagedCache pc = page(c, p);
  ASSERT_EQ(pc.x, 16 / static_cast<int>(dtype_size(c.kv_dtype)));
  ASSERT_EQ(pc.elements(), static_cast<std::int64_t>(pc.num_blocks) * c.num_kv_heads * c.head_size * c.block_size);
  ASSERT_EQ(pc.key_cache.size(), static_cast<std::size_t>(pc.elements()) * dtype_size(c.kv_dtype));
  ASSERT_EQ(pc.value_cache.size(), pc.key_cache.size());
  const int G = c.num_kv_heads, D = c.head_size;
  for (int s = 0; s < c.num_seqs(); ++s)
    for (int t = 0; t < c.seq_lens[s]; ++t) {
      const int b = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + t / c.block_size];
      const int slot = t % c.block_size;
      for (int g = 0; g < G; ++g)
        for (int d = 0; d < D; ++d) {
          const std::size_t src = (static_cast<std::size_t>(t) * G + g) * D + d;
          ASSERT_EQ(pc.key_offset(b, g, slot, d), hand_key_index(pc, b, g, slot, d));
          ASSERT_EQ(pc.value_offset(b, g, slot, d), hand_value_index(pc, b, g, slot, d));
          ASSERT_EQ(load(pc.key_cache.data(), hand_key_index(pc, b, g, slot, d), c.kv_dtype), p.k[s][src]);
          ASSERT_EQ(load(pc.value_cache.data(), hand_value_index(pc, b, g, slot, d), c.kv_dtype), p.v[s][src]);
        }
    }
}

TEST_P(Pager, OffsetsCoverThePoolExactlyOnce) {
  const Case c = pager_case(GetParam());
  const PagedCache pc = page(c, generate(c));
  std::vector<int> khits(pc.elements(), 0), vhits(pc.elements(), 0);
  for (int b = 0; b < pc.num_blocks; ++b)
    for (int g = 0; g < pc.num_kv_heads; ++g)
      for (int slot = 0; slot < pc.block_size; ++slot)
        for (int d = 0; d < pc.head_size; ++d) {
          const auto ko = pc.key_offset(b, g, slot, d), vo = pc.value_offset(b, g, slot, d);
          ASSERT_TRUE(ko >= 0 && ko < pc.elements() && vo >= 0 && vo < pc.elements());
          ++khits[ko];
          ++vhits[vo];
        }
  EXPECT_TRUE(std::all_of(khits.begin(), khits.end(), [](int h) { return h == 1; }));
  EXPECT_TRUE(std::all_of(vhits.begin(), vhits.end(), [](int h) { return h == 1; }));
}

TEST_P(Pager, SlotMapCountsAndClasses) {
  const Case c = pager_case(GetParam());
  const PagedCache pc = page(c, generate(c));
  const int bs = c.block_size;
  std::int64_t written = 0, tail = 0, needed = 0;
  for (int s = 0; s < c.num_seqs(); ++s) {
    written += c.seq_lens[s];
    tail += (bs - c.seq_lens[s] % bs) % bs;
    needed += c.blocks_for(s);
  }
  ASSERT_EQ(pc.num_blocks, needed + c.spare_blocks);
  ASSERT_EQ(pc.slot_map.size(), static_cast<std::size_t>(pc.num_blocks) * bs);
  const auto n = pc.class_counts();
  EXPECT_EQ(n[static_cast<int>(SlotClass::written)], written);
  EXPECT_EQ(n[static_cast<int>(SlotClass::tail)], tail);
  EXPECT_EQ(n[static_cast<int>(SlotClass::padding_target)], bs) << "one dedicated padding block";
  EXPECT_EQ(n[static_cast<int>(SlotClass::unused)], (c.spare_blocks - 1) * static_cast<std::int64_t>(bs));

  // Class of every slot of every block a sequence uses.
  for (int s = 0; s < c.num_seqs(); ++s)
    for (int j = 0; j < c.blocks_for(s); ++j) {
      const int b = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + j];
      for (int slot = 0; slot < bs; ++slot)
        ASSERT_EQ(pc.slot_class(b, slot), j * bs + slot < c.seq_lens[s] ? SlotClass::written : SlotClass::tail)
            << "s " << s << " block " << j << " slot " << slot;
    }
  for (int slot = 0; slot < bs; ++slot) EXPECT_EQ(pc.slot_class(pc.padding_block, slot), SlotClass::padding_target);
}

TEST_P(Pager, UnwrittenSlotsAreZero) {
  const Case c = pager_case(GetParam());
  const PagedCache pc = page(c, generate(c));
  std::int64_t checked = 0;
  for (int b = 0; b < pc.num_blocks; ++b)
    for (int slot = 0; slot < pc.block_size; ++slot) {
      if (pc.slot_class(b, slot) == SlotClass::written) continue;
      for (int g = 0; g < pc.num_kv_heads; ++g)
        for (int d = 0; d < pc.head_size; ++d) {
          ASSERT_EQ(load_bits(pc.key_cache.data(), pc.key_offset(b, g, slot, d), pc.kv_dtype), 0u);
          ASSERT_EQ(load_bits(pc.value_cache.data(), pc.value_offset(b, g, slot, d), pc.kv_dtype), 0u);
          ++checked;
        }
    }
  EXPECT_GT(checked, 0);
}

TEST_P(Pager, BlockTablesNameDistinctPermutedBlocksAndPadding) {
  const Case c = pager_case(GetParam());
  const PagedCache pc = page(c, generate(c));
  int longest = 0;
  for (int s = 0; s < c.num_seqs(); ++s) longest = std::max(longest, c.blocks_for(s));
  ASSERT_EQ(pc.max_blocks_per_seq, longest + c.padding_columns);
  ASSERT_EQ(pc.block_tables.size(), static_cast<std::size_t>(c.num_seqs()) * pc.max_blocks_per_seq);
  ASSERT_EQ(pc.seq_lens, std::vector<std::int32_t>(c.seq_lens.begin(), c.seq_lens.end()));

  std::set<int> used;
  int logical = 0, moved = 0;
  for (int s = 0; s < c.num_seqs(); ++s)
    for (int j = 0; j < pc.max_blocks_per_seq; ++j) {
      const int b = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + j];
      ASSERT_GE(b, 0);
      ASSERT_LT(b, pc.num_blocks);
      if (j < c.blocks_for(s)) {
        EXPECT_TRUE(used.insert(b).second) << "physical block " << b << " named twice";
        moved += b != logical++;
      } else {
        EXPECT_EQ(b, pc.padding_block) << "padding entry s " << s << " column " << j;
      }
    }
  EXPECT_EQ(used.count(pc.padding_block), 0u) << "the default padding target is a spare block";
  EXPECT_GT(moved, 0) << "physical ids are a permutation, not the allocation order";
}

/// Every layout x dtype x block_size {1, 8, 16, 32, 128} (aiter: the multiples of 16 to 128; its fp8 round
/// trip is in tests/test_fp8_cache.cpp).
std::vector<PagerParam> all_params() {
  std::vector<PagerParam> v;
  for (Layout l : {Layout::vllm, Layout::nhd, Layout::hnd})
    for (DType t : {DType::f32, DType::f16, DType::bf16})
      for (int bs : {1, 8, 16, 32, 128}) v.push_back({l, t, bs});
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (int bs : {16, 32, 64, 128}) v.push_back({Layout::aiter, t, bs});
  return v;
}

INSTANTIATE_TEST_SUITE_P(LayoutsDtypesBlockSizes, Pager, ::testing::ValuesIn(all_params()), param_name);

// Seed 002: at 16-token blocks AITER's shuffled V [n, G, 1, D, 16] is byte for byte vLLM's V [n, G, D, 16],
// and K is vLLM's K at every block size; at 32 and above the V bytes differ (same tokens, same blocks).
TEST(PagerAiter, SameBytesAsVllmAtBlock16Only) {
  for (int bs : {16, 32, 64, 128}) {
    Case c;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_size = 64;
    c.block_size = bs;
    c.q_dtype = c.out_dtype = DType::bf16;
    c.kv_dtype = DType::fp8_e4m3fn;
    c.seq_lens = {1000, 37, 16};
    c.layout = Layout::vllm;
    const PagedCache v = page(c, generate(c));
    c.layout = Layout::aiter;
    const PagedCache a = page(c, generate(c));
    SCOPED_TRACE(c.id());
    ASSERT_EQ(a.block_tables, v.block_tables);
    ASSERT_EQ(a.key_cache.size(), v.key_cache.size());
    EXPECT_TRUE(std::equal(a.key_cache.data(), a.key_cache.data() + a.key_cache.size(), v.key_cache.data()));
    const bool same_v =
        std::equal(a.value_cache.data(), a.value_cache.data() + a.value_cache.size(), v.value_cache.data());
    EXPECT_EQ(same_v, bs == 16);
  }
}

TEST(PagerAiter, BlockSizeNotAMultipleOf16IsRefused) {
  Case c;
  c.layout = Layout::aiter;
  for (int bs : {1, 8, 24, 40}) {
    c.block_size = bs;
    try {
      c.validate();
      ADD_FAILURE() << "block_size " << bs << " accepted in the aiter layout";
    } catch (const CaseError& e) {
      EXPECT_EQ(e.field, "block_size");
      EXPECT_NE(e.reason.find("aiter"), std::string::npos) << e.reason;
      EXPECT_NE(e.reason.find("multiple of 16"), std::string::npos) << e.reason;
    }
  }
  c.block_size = 48;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(parse_case_id(c.id()).layout, Layout::aiter);
  EXPECT_EQ(parse_case_id(c.id()).id(), c.id());
  EXPECT_NE(c.id().find(" aiter "), std::string::npos) << c.id();
}

TEST(PagerOptions, PaddingTargetCanBeChosen) {
  Case c;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_size = 8;
  c.block_size = 4;
  c.seq_lens = {10, 3};  // 3 + 1 blocks, pool of 4 + 3 spare
  c.spare_blocks = 3;
  const PrePaging p = generate(c);

  // A block a sequence uses: padding entries name it, and its slots keep their written/tail class.
  const PagedCache base = page(c, p);
  c.padding_target = base.block_tables[0];
  const PagedCache on_used = page(c, p);
  EXPECT_EQ(on_used.padding_block, c.padding_target);
  EXPECT_EQ(on_used.block_tables[static_cast<std::size_t>(on_used.max_blocks_per_seq) + 1], c.padding_target);
  EXPECT_EQ(on_used.class_counts()[static_cast<int>(SlotClass::padding_target)], 0);
  EXPECT_EQ(on_used.class_counts()[static_cast<int>(SlotClass::unused)], 3 * 4);

  // A spare block of our choosing.
  std::set<int> used(base.block_tables.begin(), base.block_tables.end());
  int spare = 0;
  while (used.count(spare)) ++spare;
  c.padding_target = spare;
  const PagedCache on_spare = page(c, p);
  EXPECT_EQ(on_spare.padding_block, spare);
  for (int slot = 0; slot < c.block_size; ++slot) EXPECT_EQ(on_spare.slot_class(spare, slot), SlotClass::padding_target);
}

TEST(PagerOptions, DeterministicPerSeedAndValidated) {
  Case c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_size = 16;
  c.seq_lens = {100, 37};
  const PrePaging p = generate(c);
  const PagedCache a = page(c, p), b = page(c, p);
  EXPECT_EQ(a.block_tables, b.block_tables);
  EXPECT_EQ(a.key_cache, b.key_cache);
  EXPECT_EQ(a.value_cache, b.value_cache);
  Case other = c;
  other.seed = 99;
  EXPECT_NE(page(other, p).block_tables, a.block_tables) << "the permutation follows the seed";
  Case bad = c;
  bad.block_size = 0;
  EXPECT_THROW(page(bad, p), CaseError);
}

/// Resident bytes of this process (/proc/self/statm, field 2 in pages).
long long resident_bytes() {
  std::ifstream in("/proc/self/statm");
  long long size = 0, resident = 0;
  in >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Issue 18: high physical block ids. The window of used and spare blocks straddles the first block whose
// element offset reaches 2^31 / 2^32 (some sequences' blocks below, some at or above it), the round trip is
// exact in every layout, and the pool is virtual: its K and V caches span 2^B elements or more while the
// process grows by a few MB (the live blocks), not by the pool's gigabytes.
TEST(PagerHighBlockIds, BlocksStraddleTheOffsetAndThePoolIsSparse) {
  for (int bits : {31, 32})
    for (Layout layout : {Layout::vllm, Layout::nhd, Layout::hnd, Layout::aiter}) {
      Case c;
      c.num_heads = 8;
      c.num_kv_heads = 2;
      c.head_size = 128;
      c.block_size = 16;
      c.seq_lens = {1000, 37, 16};
      c.layout = layout;
      c.high_block_ids = bits;
      SCOPED_TRACE(c.id());
      const PrePaging p = generate(c);
      const long long before = resident_bytes();
      const PagedCache pc = page(c, p);
      const PagedCache copy = pc;  // a faulted copy is made this way: it stays sparse
      const long long grown = resident_bytes() - before;
      ASSERT_TRUE(pc.sparse());
      ASSERT_TRUE(copy.sparse());
      const std::int64_t E = pc.strides.k[0], T = std::int64_t{1} << bits;
      EXPECT_EQ(pc.strides.v[0], E);
      EXPECT_GE(pc.elements(), T) << "the pool spans 2^" << bits << " elements";
      EXPECT_EQ(pc.key_cache.size(), static_cast<std::size_t>(pc.elements()) * 2);
      int below = 0, above = 0;
      for (int s = 0; s < c.num_seqs(); ++s)
        for (int j = 0; j < c.blocks_for(s); ++j) {
          const std::int64_t b = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + j];
          (b * E >= T ? above : below)++;
        }
      // 67 blocks needed: the window's first 33 ids lie below 2^B; 3 spares may take some of them.
      EXPECT_GE(below, 30) << "blocks below 2^" << bits;
      EXPECT_LE(below, 33);
      EXPECT_EQ(above, 67 - below);
      for (int s = 0; s < c.num_seqs(); ++s) {
        const auto [k, v] = gather(pc, s);
        ASSERT_EQ(k, p.k[s]);
        ASSERT_EQ(v, p.v[s]);
      }
      EXPECT_EQ(copy.key_cache, pc.key_cache);
      EXPECT_LT(pc.key_cache.live_bytes(), std::size_t{64} << 20);
      EXPECT_LT(grown, 256LL << 20) << "pool of " << pc.key_cache.size() << " bytes made the process grow by " << grown;
      // Every block a 32-bit wrapped offset of a used block lands on inside the pool is live (so a kernel
      // that wraps reads a mapped block that faults can poison).
      const std::set<int> live(pc.resident_blocks.begin(), pc.resident_blocks.end());
      for (std::int32_t b : pc.block_tables) {
        const std::int64_t w = (static_cast<std::int64_t>(b) * E) % (std::int64_t{1} << 32);
        if (static_cast<std::int64_t>(b) * E >= (std::int64_t{1} << 32)) EXPECT_TRUE(live.count(static_cast<int>(w / E))) << b;
        EXPECT_TRUE(live.count(b)) << b;
      }
      std::printf("hiblk=%d %s: %d blocks, pool %.1f GiB virtual per cache, %zu live blocks, process grew %.1f MiB\n",
                  bits, std::string(layout_name(layout)).c_str(), pc.num_blocks,
                  static_cast<double>(pc.key_cache.size()) / (1 << 30), pc.resident_blocks.size(),
                  static_cast<double>(grown) / (1 << 20));
    }
}

TEST(PagerHighBlockIds, ValidatedAndInTheId) {
  Case c;
  c.seq_lens = {100};
  c.high_block_ids = 31;
  EXPECT_NE(c.id().find(" hiblk=31"), std::string::npos);
  EXPECT_EQ(parse_case_id(c.id()).high_block_ids, 31);
  c.high_block_ids = 30;
  EXPECT_THROW(c.validate(), CaseError);
  // 2^32 elements of blocks of 1 element need 2^32 blocks: more than a pool may have.
  c.num_heads = c.num_kv_heads = 1;
  c.head_size = 1;
  c.block_size = 1;
  c.layout = Layout::nhd;
  c.high_block_ids = 32;
  try {
    c.validate();
    ADD_FAILURE() << "no error";
  } catch (const CaseError& e) {
    EXPECT_EQ(e.field, "high_block_ids");
  }
}

}  // namespace
}  // namespace pacheck
