// GPU kernels on seed 002's fp8 cache as AMD AITER's asm decode reads it (issue 18 item 5): the `aiter` layout
// (K as vllm's x-packed key cache, V shuffled [num_blocks, num_kv_heads, block_size/16, head_size, 16]) and
// per-slot scale tables ([num_blocks, num_kv_heads, block_size] fp32 by physical block id).
//
// Without a device (run everywhere):
//  - AiterIndex: the P.V addressing of gpu.paged_v1/v2 (lanes::paged_pv over value_offset, the same
//    __host__ __device__ functions the kernels call) replayed on the host for warps 32 and 64, every element
//    size (fp8, 16-bit, f32), head 64/128/256 and block sizes 16..256: each lane's 16-byte V vector is
//    VV contiguous tokens of one head-dim row, 16-byte aligned, and the vectors cover every (slot, row) of a
//    block exactly once, in both layouts; value_offset(aiter) equals the ABI's formula. Through a real paged
//    cache (the pager's bytes), every token a lane's vector loads is the pre-paging code of that token, and
//    every per-slot scale read at slot_scale_offset is the token's own.
//  - AiterSupport: the kernels that list the aiter layout take every cell of suites/aiter.toml; the others
//    decline each naming `layout` (or `k_scale` / `v_scale` for per-slot tables in the vllm layout).
// With a device (skip without one, saying why):
//  - GpuAiterSuite: every cell of suites/aiter.toml on each GPU kernel that lists the aiter layout, judged as
//    `pacheck run` judges it: an honest kernel passes every cell (bitwise unchanged under the poison);
//    a negative control fails exactly the cells its expected_failures() names and passes the others (an
//    audit, as --controls-everywhere runs it), and is caught at least once.
//  - GpuAiterSuite.SameOutputInBothLayouts: the kernel's output on a case in the aiter layout is bitwise
//    that on the same case in the vllm layout (the arithmetic is the same, only V's addresses differ).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/case.hpp"
#include "exec/runner.hpp"
#include "faults/inject.hpp"
#include "kernels/backend.hpp"
#include "kernels/gpu/lane_math.hpp"
#include "kernels/kernel.hpp"
#include "oracle/tensors.hpp"
#include "paging/layout.hpp"
#include "paging/pager.hpp"
#include "suites/suite.hpp"
#include "tests/kernel_checks.hpp"

namespace pacheck {
namespace {

using kernel_checks::Count;
using kernel_checks::Kinds;

// ---------------------------------------------------------------------------------------------------
// Index arithmetic (host).

/// The V vectors per row per warp step gpu.paged_v1/v2 are instantiated with (paged_attention.cu,
/// dispatch_vpr): 1 for fp8 caches, lanes::paged_vpr otherwise.
int kernel_vpr(int block_size, int elem_bytes) {
  return elem_bytes == 1 ? 1 : gpu::lanes::paged_vpr(block_size, elem_bytes);
}

/// The ABI's aiter V offset, written from kernel_abi.h's shape alone: [blocks, G, B/16, D, 16] row-major.
std::int64_t aiter_v_formula(std::int64_t b, int G, int D, int B, int g, int t, int d) {
  return (((b * G + g) * (B / 16) + t / 16) * D + d) * 16 + t % 16;
}
/// The ABI's vllm V offset: [blocks, G, D, B] row-major.
std::int64_t vllm_v_formula(std::int64_t b, int G, int D, int B, int g, int t, int d) {
  return ((b * G + g) * D + d) * B + t;
}

TEST(AiterIndex, ValueVectorsAreContiguousAlignedAndCoverEachBlockOnce) {
  const int G = 3;
  const std::int64_t blk = 5;  // a physical block past 0, so the block stride takes part
  int checked = 0;
  for (pacheck_layout layout : {PACHECK_LAYOUT_AITER, PACHECK_LAYOUT_VLLM})
    for (int warp : {32, 64})
      for (int eb : {1, 2, 4})
        for (int D : {64, 128, 256})
          for (int B : {16, 32, 64, 128, 256}) {
            const int x = 16 / eb, vpr = kernel_vpr(B, eb);
            ASSERT_TRUE(gpu::lanes::paged_pv_exact(warp, D, eb, vpr));
            const gpu::lanes::PagedPv pv = gpu::lanes::paged_pv(warp, D, eb, vpr);
            ASSERT_TRUE(gpu::lanes::paged_pv_tiles_block(pv, B));
            const CacheStrides st = make_strides(layout, G, D, B, x);
            const std::string where = std::string(layout == PACHECK_LAYOUT_AITER ? "aiter" : "vllm") + " warp " +
                                      std::to_string(warp) + " elem " + std::to_string(eb) + " head " +
                                      std::to_string(D) + " block " + std::to_string(B);
            for (int g : {0, G - 1}) {
              std::vector<int> seen(static_cast<std::size_t>(B) * D, 0);
              for (int lane = 0; lane < warp; ++lane)
                for (int c0 = 0; c0 < B; c0 += pv.chunk_tokens)
                  for (int i = 0; i < pv.rows_per_lane; ++i) {
                    const int slot = pv.slot(c0, lane), d = pv.row(lane, i);
                    ASSERT_EQ(slot % pv.vec_tokens, 0) << where;
                    ASSERT_LE(slot + pv.vec_tokens, B) << where;
                    const std::int64_t base = value_offset(layout, st.v, blk, g, slot, d);
                    // The kernels address row d as row 0's offset + d x row 1's offset at the origin.
                    ASSERT_EQ(base, value_offset(layout, st.v, blk, g, slot, 0) +
                                        d * value_offset(layout, st.v, 0, 0, 0, 1))
                        << where << ": value_offset is not linear in d";
                    ASSERT_EQ(base % pv.vec_tokens, 0) << where << ": vector at slot " << slot << " row " << d
                                                       << " is not 16-byte aligned";
                    for (int j = 0; j < pv.vec_tokens; ++j) {
                      const std::int64_t off = value_offset(layout, st.v, blk, g, slot + j, d);
                      ASSERT_EQ(off, base + j) << where << ": token " << slot + j << " row " << d
                                               << " is not lane " << j << " of its vector";
                      const std::int64_t want = layout == PACHECK_LAYOUT_AITER
                                                    ? aiter_v_formula(blk, G, D, B, g, slot + j, d)
                                                    : vllm_v_formula(blk, G, D, B, g, slot + j, d);
                      ASSERT_EQ(off, want) << where << ": token " << slot + j << " row " << d;
                      ++seen[static_cast<std::size_t>(slot + j) * D + d];
                    }
                  }
              for (std::size_t e = 0; e < seen.size(); ++e)
                ASSERT_EQ(seen[e], 1) << where << ": (slot " << e / D << ", row " << e % D << ") loaded "
                                      << seen[e] << " times";
              ++checked;
            }
          }
  EXPECT_EQ(checked, 2 * 2 * 3 * 3 * 5 * 2);
}

TEST(AiterIndex, SlotScaleOffsetIsTheAbiFormula) {
  for (int B : {16, 32, 64, 128, 256})
    for (int G : {1, 5, 8}) {
      PagedCache pc;
      pc.num_kv_heads = G;
      pc.block_size = B;
      for (std::int64_t b : {0LL, 1LL, 7LL, 1LL << 20})
        for (int g = 0; g < G; ++g)
          for (int slot : {0, 1, 15, 16, B - 1}) {
            const std::int64_t want = (b * G + g) * B + slot;  // kernel_abi.h, PACHECK_SCALE_FORM_PER_SLOT
            ASSERT_EQ(slot_scale_offset(b, G, B, g, slot), want);
            ASSERT_EQ(static_cast<std::int64_t>(pc.slot_scale_index(static_cast<int>(b), g, slot)), want);
          }
    }
}

/// An aiter case with an fp8 cache, per-slot K and V scales and straddling lengths at block size `bs`.
Case aiter_slot_case(int bs) {
  Case c;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_size = 64;
  c.block_size = bs;
  c.seq_lens = {3 * bs + 5, 17, bs};
  c.layout = Layout::aiter;
  c.kv_dtype = DType::fp8_e4m3fn;
  c.q_dtype = c.out_dtype = DType::bf16;
  c.k_scale.slot = std::pair{0.5f, 2.0f};
  c.v_scale.slot = std::pair{0.25f, 4.0f};
  c.seed = 11;
  return c;
}

// The kernels' V loads and per-slot scale reads replayed over the pager's own bytes: a lane's 16-byte vector
// at value_offset(aiter, ...) holds the pre-paging codes of its VV tokens (those before seq_len), and the
// scale entry at slot_scale_offset(block_tables entry, ...) is the token's own scale.
TEST(AiterIndex, KernelAddressingReadsThePagersBytes) {
  for (int bs : {16, 32, 64, 128}) {
    const Case c = aiter_slot_case(bs);
    SCOPED_TRACE(c.id());
    const PrePaging pre = generate(c);
    const PagedCache pc = page(c, pre);
    const int G = c.num_kv_heads, D = c.head_size, warp = 64;
    const gpu::lanes::PagedPv pv = gpu::lanes::paged_pv(warp, D, 1, 1);
    const std::uint8_t* vbytes = pc.value_cache.data();
    int tokens = 0;
    for (int s = 0; s < c.num_seqs(); ++s) {
      const int len = c.seq_lens[static_cast<std::size_t>(s)];
      for (int b = 0; b * bs < len; ++b) {
        const std::int64_t phys = pc.block_tables[static_cast<std::size_t>(s) * pc.max_blocks_per_seq + b];
        for (int g = 0; g < G; ++g)
          for (int lane = 0; lane < warp; ++lane)
            for (int c0 = 0; c0 < bs; c0 += pv.chunk_tokens)
              for (int i = 0; i < pv.rows_per_lane; ++i) {
                const int slot = pv.slot(c0, lane), d = pv.row(lane, i);
                const std::uint8_t* vec = vbytes + value_offset(PACHECK_LAYOUT_AITER, pc.strides.v, phys, g, slot, d);
                for (int j = 0; j < pv.vec_tokens; ++j) {
                  const int t = b * bs + slot + j;
                  if (t >= len) continue;
                  const std::size_t e = (static_cast<std::size_t>(t) * G + g) * D + d;
                  ASSERT_EQ(vec[j], pre.v_codes[static_cast<std::size_t>(s)][e])
                      << "seq " << s << " token " << t << " head " << g << " row " << d;
                  if (d == 0) {
                    const std::size_t tg = static_cast<std::size_t>(t) * G + g;
                    const std::int64_t si = slot_scale_offset(phys, G, bs, g, slot + j);
                    ASSERT_EQ(pc.v_slot_scales[static_cast<std::size_t>(si)], pre.v_slot_scales[s][tg]);
                    ASSERT_EQ(pc.k_slot_scales[static_cast<std::size_t>(si)], pre.k_slot_scales[s][tg]);
                    ++tokens;
                  }
                }
              }
      }
    }
    int want = 0;
    for (int len : c.seq_lens) want += len * G;
    EXPECT_EQ(tokens, want);
  }
}

// ---------------------------------------------------------------------------------------------------
// Support (host).

using kernel_checks::gpu_kind;

bool reads_aiter(const Kernel& k) {
  const std::vector<Layout> l = k.layouts();
  return std::find(l.begin(), l.end(), Layout::aiter) != l.end();
}

/// The registered GPU kernels that list the aiter layout (honest and controls), in registration order.
std::vector<std::string> aiter_kernels() {
  std::vector<std::string> out;
  for (const std::string& name : kernel_checks::registered(gpu_kind(), Kinds::all))
    if (reads_aiter(*Registry::global().find(name))) out.push_back(name);
  return out;
}

const Suite& aiter_suite() {
  static const Suite s = load_suite("aiter");
  return s;
}

TEST(AiterSupport, KernelsThatListTheLayoutTakeEverySuiteCell) {
#ifndef PACHECK_HAVE_GPU
  GTEST_SKIP() << "this pacheck was built without a GPU backend, so no GPU kernel is registered";
#else
  ASSERT_FALSE(aiter_suite().cells.empty());
  const std::vector<std::string> readers = aiter_kernels();
  for (const char* want : {"gpu.paged_v1", "gpu.paged_v2", "gpu.paged_v1_tail_fault", "gpu.slot_scale_unmasked"})
    EXPECT_NE(std::find(readers.begin(), readers.end(), want), readers.end()) << want << " does not list aiter";
  for (const std::string& name : kernel_checks::registered(gpu_kind(), Kinds::all)) {
    const KernelPtr k = Registry::global().find(name);
    const auto expected = k->expected_failures();
    int taken = 0, must_fail = 0;
    for (const SuiteCell& sc : aiter_suite().cells) {
      const Cell cell = sc.for_layouts(k->layouts());
      const Support s = k->supports(cell.c);
      must_fail += s.ok && expected && (*expected)(cell);
      if (reads_aiter(*k)) {
        EXPECT_TRUE(s.ok) << name << " " << cell.id() << ": " << s.reason;
      } else if (cell.c.layout == Layout::aiter) {
        EXPECT_EQ(s.reason.rfind("layout aiter", 0), 0u) << name << " " << cell.id() << ": " << s.reason;
      } else if (!s.ok) {  // seed 002's vllm-layout cells with per-slot tables
        EXPECT_TRUE(s.reason.rfind("k_scale", 0) == 0 || s.reason.rfind("v_scale", 0) == 0 ||
                    s.reason.rfind("layout vllm", 0) == 0)
            << name << " " << cell.id() << ": " << s.reason;
      }
      taken += s.ok;
    }
    // A control that reads the layout must meet its planted fault in this suite.
    if (expected && reads_aiter(*k)) EXPECT_GT(must_fail, 0) << name << ": no aiter cell is among its expected failures";
    std::printf("[ aiter    ] %s takes %d of %zu cells%s\n", name.c_str(), taken, aiter_suite().cells.size(),
                expected ? (", " + std::to_string(must_fail) + " of them its expected failures").c_str() : "");
  }
#endif
}

// ---------------------------------------------------------------------------------------------------
// On the device.

/// The GPU backend, opened once (kernel_checks::test_gpu).
kernel_checks::TestGpu& gpu() { return kernel_checks::test_gpu(); }

/// prepare_case of each case id, kept for the other kernels' tests (the oracle runs once per case).
const CaseData& prepared(const Case& c) {
  static std::map<std::string, std::unique_ptr<CaseData>> cache;
  std::unique_ptr<CaseData>& d = cache[c.id()];
  if (!d) d = std::make_unique<CaseData>(prepare_case(c, RunOptions{}));
  return *d;
}

class GpuAiterSuite : public ::testing::TestWithParam<std::string> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GpuAiterSuite);

TEST_P(GpuAiterSuite, EveryCellPassesOrIsCaughtExactly) {
  if (!gpu().backend) GTEST_SKIP() << "needs a " << gpu_kind() << " device; " << gpu().why;
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  // The suite's cells grouped by case, in file order: one clean run per case, then each fault's.
  std::vector<std::string> order;
  std::map<std::string, std::vector<Cell>> by_case;
  for (const SuiteCell& sc : aiter_suite().cells) {
    const Cell cell = sc.for_layouts(k->layouts());
    if (!k->supports(cell.c).ok) continue;  // AiterSupport says which may be declined
    auto [it, fresh] = by_case.try_emplace(cell.c.id());
    if (fresh) order.push_back(cell.c.id());
    it->second.push_back(cell);
  }
  Count count;
  for (const std::string& id : order) {
    const std::vector<Cell>& cells = by_case.at(id);
    const CaseData& data = prepared(cells.front().c);
    SCOPED_TRACE(id);
    const RawRun clean = run_kernel_once(*k, *gpu().backend, data, data.cache);
    kernel_checks::expect_clean_run(clean);
    for (const Cell& cell : cells) {
      if (cell.fault.clean()) {
        kernel_checks::expect_verdict(*k, cell, data, clean, nullptr, &count);
        continue;
      }
      PagedCache faulted = data.cache;
      inject(faulted, cell.fault);
      kernel_checks::expect_verdict(*k, cell, data, run_kernel_once(*k, *gpu().backend, data, faulted), &clean.bits,
                                    &count);
    }
  }
  kernel_checks::expect_ran(*k, count, "the aiter suite");
  kernel_checks::expect_control_caught(*k, count, "the aiter suite");
  std::printf("[ aiter    ] %s: %d cells of %zu cases judged, %d had to fail, %d did\n", k->name().c_str(),
              count.cells, order.size(), count.must_fail, count.failed);
}

// Same case, both layouts: only the V addresses differ, so the output bits must not.
TEST_P(GpuAiterSuite, SameOutputInBothLayouts) {
  if (!gpu().backend) GTEST_SKIP() << "needs a " << gpu_kind() << " device; " << gpu().why;
  const KernelPtr k = kernel_checks::registered_kernel(GetParam());
  ASSERT_TRUE(k);
  int compared = 0;
  for (int bs : {16, 32, 64, 128})
    for (int form = 0; form < 3; ++form) {  // fp8 per-slot, fp8 per-tensor, bf16
      Case c = aiter_slot_case(bs);
      c.seq_lens = {1000, 37, bs - 1};
      if (form == 1) {
        c.k_scale = KvScale{{0.5f}, std::nullopt};
        c.v_scale = KvScale{{2.0f}, std::nullopt};
      } else if (form == 2) {
        c.k_scale = KvScale{};
        c.v_scale = KvScale{};
        c.kv_dtype = DType::bf16;
      }
      Case v = c;
      v.layout = Layout::vllm;
      if (!k->supports(c).ok || !k->supports(v).ok) continue;
      SCOPED_TRACE(c.id());
      const CaseData& da = prepared(c);
      const CaseData& dv = prepared(v);
      const RawRun ra = run_kernel_once(*k, *gpu().backend, da, da.cache);
      const RawRun rv = run_kernel_once(*k, *gpu().backend, dv, dv.cache);
      kernel_checks::expect_clean_run(ra);
      ASSERT_EQ(ra.bits.size(), rv.bits.size());
      std::size_t differ = 0;
      for (std::size_t i = 0; i < ra.bits.size(); ++i) differ += ra.bits[i] != rv.bits[i];
      EXPECT_EQ(differ, 0u) << "aiter and vllm outputs differ in " << differ << " of " << ra.bits.size() << " elements";
      ++compared;
    }
  EXPECT_EQ(compared, 12) << k->name() << " declined some layout-pair case";
}

INSTANTIATE_TEST_SUITE_P(All, GpuAiterSuite, ::testing::ValuesIn(aiter_kernels()), kernel_checks::kernel_param_name);

}  // namespace
}  // namespace pacheck
