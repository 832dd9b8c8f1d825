// Lane arithmetic of the GPU decode kernels (kernels/gpu/lane_math.hpp), checked on the CPU for warp widths
// 32 (CUDA, RDNA wave32: gfx1030) and 64 (CDNA wave64: gfx90a). The kernels index with these very functions,
// so a wave-width bug in them shows here without a GPU. Each test replays a kernel's loops over every lane
// and counts ownership:
//  - paged q.K: every key element of every token of a block is read by exactly one lane, and each token's dot
//    product is summed over exactly the lanes of its thread group (never across tokens);
//  - paged P.V: every (token, head-dim row) product is formed exactly once, and partial rows are summed over
//    exactly the lanes that share them;
//  - warp_split: every head element of every worker's row is owned once, dot products and worker merges
//    span exactly the right lanes, and every token of a partition is taken by exactly one worker for any
//    partition length and start;
//  - the pipelined warp_split shared-memory plan: ring slots distinct and in range, and the whole plan within
//    an AMD workgroup's 64 KiB for both widths;
//  - the block reductions' butterfly spans the whole warp and blocks stay within 1024 threads;
//  - fast_div, the warp-split kernels' token -> block division, equals / for every block size they take.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gpu/lane_math.hpp"

namespace pacheck::gpu::lanes {
namespace {

const int kHeads[] = {64, 128, 256};        // head sizes the kernels are instantiated for
const int kElemBytes[] = {2, 4};            // f16/bf16 and f32
const int kPagedBlocks[] = {8, 16, 32, 64, 128, 256};
const int kSplitElemBytes[] = {1, 2, 4};    // warp_split also takes fp8 caches
const int kMinLoads[] = {1, 2};             // row_split's 16-byte loads per lane: 2 = the basic form's wide rows

/// Every (min_loads, element bytes) pair the warp-split row split is checked for.
std::vector<std::pair<int, int>> split_params() {
  std::vector<std::pair<int, int>> out;
  for (int ml : kMinLoads)
    for (int eb : kSplitElemBytes) out.emplace_back(ml, eb);
  return out;
}

/// Lanes reachable from `lane` by xor with the offsets first, 2 * first, ... < end: the lanes a butterfly
/// reduction with those offsets combines.
std::set<int> butterfly(int lane, int first, int end) {
  std::set<int> s{lane};
  for (int m = first; m < end; m <<= 1) {
    std::set<int> next = s;
    for (int x : s) next.insert(x ^ m);
    s = next;
  }
  return s;
}

/// Lanes of a warp satisfying `pred`.
template <class F>
std::set<int> lanes_where(int warp, F pred) {
  std::set<int> s;
  for (int l = 0; l < warp; ++l)
    if (pred(l)) s.insert(l);
  return s;
}

std::string where(int warp, int d, int eb, int b = 0) {
  return "warp " + std::to_string(warp) + " head " + std::to_string(d) + " elem_bytes " + std::to_string(eb) +
         (b ? " block " + std::to_string(b) : "");
}

class LaneMath : public ::testing::TestWithParam<int> {
 protected:
  int W() const { return GetParam(); }
};

TEST_P(LaneMath, PagedQkReadsEveryKeyElementOfEveryTokenOnce) {
  for (int eb : kElemBytes)
    for (int d : kHeads)
      for (int b : kPagedBlocks) {
        const PagedQk qk = paged_qk(W(), b);
        const int x = vec16(eb), nch = d / x;
        ASSERT_EQ(qk.group * qk.tokens_per_pass, W()) << where(W(), d, eb, b);
        // count[slot][chunk], replaying: for pass; for lane: slot = pass + token_in_pass; c = group_lane, += group.
        std::vector<int> count(static_cast<std::size_t>(b) * nch, 0);
        for (int pass = 0; pass < b; pass += qk.tokens_per_pass)
          for (int lane = 0; lane < W(); ++lane) {
            const int slot = pass + qk.token_in_pass(lane);
            ASSERT_LT(slot, b) << where(W(), d, eb, b) << ": lane " << lane << " reads past its block";
            for (int c = qk.group_lane(lane); c < nch; c += qk.group) ++count[slot * nch + c];
          }
        for (int i = 0; i < b * nch; ++i)
          ASSERT_EQ(count[i], 1) << where(W(), d, eb, b) << ": slot " << i / nch << " chunk " << i % nch;
      }
}

TEST_P(LaneMath, PagedQkSumsEachTokenOverExactlyItsGroup) {
  for (int b : kPagedBlocks) {
    const PagedQk qk = paged_qk(W(), b);
    std::set<int> writers_per_token[256];
    for (int lane = 0; lane < W(); ++lane) {
      const auto got = butterfly(lane, qk.reduce_first(), qk.reduce_end());
      const auto want = lanes_where(W(), [&](int l) { return qk.token_in_pass(l) == qk.token_in_pass(lane); });
      ASSERT_EQ(got, want) << "warp " << W() << " block " << b << " lane " << lane;
      ASSERT_EQ(static_cast<int>(want.size()), qk.group);
      if (qk.group_lane(lane) == 0) writers_per_token[qk.token_in_pass(lane)].insert(lane);  // writes the logit
    }
    for (int t = 0; t < qk.tokens_per_pass; ++t) EXPECT_EQ(writers_per_token[t].size(), 1u) << "block " << b << " token " << t;
  }
}

TEST_P(LaneMath, PagedPvFormsEveryTokenRowProductOnce) {
  for (int eb : kElemBytes)
    for (int d : kHeads)
      for (int b : kPagedBlocks) {
        const int vpr = paged_vpr(b, eb);
        ASSERT_TRUE(paged_pv_exact(W(), d, eb, vpr)) << where(W(), d, eb, b) << " vpr " << vpr;
        const PagedPv pv = paged_pv(W(), d, eb, vpr);
        ASSERT_TRUE(paged_pv_tiles_block(pv, b)) << where(W(), d, eb, b) << " vpr " << vpr;
        std::vector<int> count(static_cast<std::size_t>(b) * d, 0);  // [slot][row]
        for (int c0 = 0; c0 < b; c0 += pv.chunk_tokens)
          for (int lane = 0; lane < W(); ++lane)
            for (int i = 0; i < pv.rows_per_lane; ++i)
              for (int j = 0; j < pv.vec_tokens; ++j) {
                const int slot = pv.slot(c0, lane) + j, row = pv.row(lane, i);
                ASSERT_LT(slot, b) << where(W(), d, eb, b) << ": a V vector runs past its block";
                ASSERT_LT(row, d) << where(W(), d, eb, b);
                ++count[slot * d + row];
              }
        for (int k = 0; k < b * d; ++k)
          ASSERT_EQ(count[k], 1) << where(W(), d, eb, b) << ": slot " << k / d << " row " << k % d;
      }
}

TEST_P(LaneMath, PagedPvSumsPartialRowsOverExactlyTheSharingLanes) {
  for (int eb : kElemBytes)
    for (int d : kHeads)
      for (int b : kPagedBlocks) {
        const PagedPv pv = paged_pv(W(), d, eb, paged_vpr(b, eb));
        std::vector<int> written(d, 0);
        for (int lane = 0; lane < W(); ++lane) {
          const auto want = lanes_where(W(), [&](int l) { return pv.row0(l) == pv.row0(lane); });
          ASSERT_EQ(butterfly(lane, 1, pv.reduce_end()), want) << where(W(), d, eb, b) << " lane " << lane;
          if (pv.vec(lane) == 0)  // the lane that stores the warp's rows
            for (int i = 0; i < pv.rows_per_lane; ++i) ++written[pv.row(lane, i)];
        }
        for (int r = 0; r < d; ++r) ASSERT_EQ(written[r], 1) << where(W(), d, eb, b) << " row " << r;
      }
}

TEST_P(LaneMath, RowSplitOwnsEveryHeadElementOncePerWorker) {
  for (const auto& [ml, eb] : split_params())
    for (int d : kHeads) {
      ASSERT_TRUE(row_split_exact(W(), d, eb, ml)) << where(W(), d, eb) << " min_loads " << ml;
      const RowSplit rs = row_split(W(), d, eb, ml);
      EXPECT_GE(rs.loads, ml) << where(W(), d, eb);
      EXPECT_EQ(rs.workers * rs.lanes_per_row, W()) << where(W(), d, eb);
      EXPECT_EQ(rs.loads * rs.vec, rs.elems_per_lane) << where(W(), d, eb);
      EXPECT_GE(rs.elems_per_lane, rs.vec) << "loads below 16 bytes: " << where(W(), d, eb);
      std::vector<int> count(static_cast<std::size_t>(rs.workers) * d, 0);  // [worker][element]
      for (int lane = 0; lane < W(); ++lane)
        for (int e = 0; e < rs.elems_per_lane; ++e) {
          const int el = rs.first_elem(lane) + e;
          ASSERT_LT(el, d) << where(W(), d, eb) << " lane " << lane;
          ++count[rs.worker(lane) * d + el];
        }
      for (int k = 0; k < rs.workers * d; ++k)
        ASSERT_EQ(count[k], 1) << where(W(), d, eb) << ": worker " << k / d << " element " << k % d;
    }
}

TEST_P(LaneMath, RowSplitReductionsSpanExactlyTheirLanes) {
  for (const auto& [ml, eb] : split_params())
    for (int d : kHeads) {
      const RowSplit rs = row_split(W(), d, eb, ml);
      for (int lane = 0; lane < W(); ++lane) {
        // A row's dot product: the lanes of the same worker.
        EXPECT_EQ(butterfly(lane, 1, rs.dot_reduce_end()),
                  lanes_where(W(), [&](int l) { return rs.worker(l) == rs.worker(lane); }))
            << where(W(), d, eb) << " lane " << lane;
        // Merging workers: every worker's lane holding the same elements.
        EXPECT_EQ(butterfly(lane, rs.merge_first(), rs.merge_end()),
                  lanes_where(W(), [&](int l) { return rs.row_lane(l) == rs.row_lane(lane); }))
            << where(W(), d, eb) << " lane " << lane;
      }
    }
}

TEST_P(LaneMath, WarpSplitTakesEveryTokenOfAPartitionOnce) {
  const int starts[] = {0, 512, 7};
  for (const auto& [ml, eb] : split_params())
    for (int d : kHeads) {
      const RowSplit rs = row_split(W(), d, eb, ml);
      for (int warps : {1, 2, 4})        // warps striding over one head slot's keys (4 / head_slots)
        for (int unroll : {ws_unroll(1), ws_unroll(8)})
          for (int t_begin : starts)
            for (int len : {1, 2, rs.workers - 1, rs.workers, rs.workers + 1, 63, 64, 65, 257, 512}) {
              if (len < 1) continue;
              const int t_end = t_begin + len;
              std::vector<int> count(len, 0);
              const int all = ws_all_workers(rs, warps);
              for (int w = 0; w < warps; ++w)
                // The kernels' loop: a warp-uniform bound on the step's first token, tokens masked per worker.
                for (int tw = ws_first_step(rs, t_begin, w, unroll); tw < t_end; tw += ws_step_stride(all, unroll))
                  for (int k = 0; k < rs.workers; ++k)
                    for (int u = 0; u < unroll; ++u) {
                      const int t = ws_token(tw, k, u, unroll);
                      ASSERT_GE(t, t_begin);
                      if (t < t_end) ++count[t - t_begin];
                      // With an aligned start, block and partition, a worker's step stays in one block.
                      for (int bs : {1, 2, 4, 8, 16, 32, 3, 12})
                        if (t_begin % 512 == 0 && ws_step_in_one_block(bs, 512, unroll))
                          ASSERT_EQ(t / bs, ws_worker_first(tw, k, unroll) / bs)
                              << where(W(), d, eb) << " block " << bs << " unroll " << unroll << " token " << t;
                    }
              for (int i = 0; i < len; ++i)
                ASSERT_EQ(count[i], 1) << where(W(), d, eb) << " warps " << warps << " unroll " << unroll << " tokens ["
                                       << t_begin << ", " << t_end << "): token " << t_begin + i;
            }
    }
}

TEST_P(LaneMath, PipelinedRingSlotsAreDistinctAndFitAnAmdWorkgroup) {
  for (int eb : kElemBytes)
    for (int d : kHeads)
      for (int qg : {1, 2, 4, 8}) {
        const RowSplit rs = row_split(W(), d, eb);
        const PipeSmem ps = pipe_smem(W(), d, eb, qg);
        EXPECT_GE(ps.stages, 2);
        EXPECT_LE(ps.stages, 4);
        EXPECT_GE(ps.bytes, ps.ring_bytes);
        EXPECT_GE(ps.bytes, ps.merge_bytes);
        EXPECT_LE(ps.bytes, kAmdLdsBytes) << where(W(), d, eb) << " QG " << qg << ": no AMD workgroup holds it";
        std::vector<int> used(ps.stage_vecs, 0);
        for (int u = 0; u < ws_unroll(qg); ++u)
          for (int kv = 0; kv < 2; ++kv)
            for (int lane = 0; lane < W(); ++lane)
              for (int n = 0; n < rs.loads; ++n) {
                const int i = ps.ring_index(W(), rs.loads, u, kv, lane, n);
                ASSERT_GE(i, 0);
                ASSERT_LT(i, ps.stage_vecs) << where(W(), d, eb) << " QG " << qg;
                ++used[i];
              }
        for (int i = 0; i < ps.stage_vecs; ++i) ASSERT_EQ(used[i], 1) << where(W(), d, eb) << " QG " << qg << " slot " << i;
      }
}

TEST_P(LaneMath, BlockReductionButterflySpansTheWarp) {
  std::set<int> all;
  for (int l = 0; l < W(); ++l) all.insert(l);
  // block_max / block_sum: offsets W/2, W/4, ..., 1 (the same set as 1, 2, ..., < W).
  for (int lane = 0; lane < W(); ++lane) EXPECT_EQ(butterfly(lane, 1, W()), all) << "lane " << lane;
  EXPECT_TRUE(supported_warp(W()));
  EXPECT_LE(kBlockWarps * W(), 1024) << "threads per block";
  // Each warp of a block owns one slot of the kBlockWarps-float reduction buffer.
  std::set<int> slots;
  for (int tid = 0; tid < kBlockWarps * W(); ++tid) slots.insert(tid / W());
  EXPECT_EQ(static_cast<int>(slots.size()), kBlockWarps);
  EXPECT_EQ(*slots.rbegin(), kBlockWarps - 1);
}

INSTANTIATE_TEST_SUITE_P(Waves, LaneMath, ::testing::Values(32, 64),
                         [](const ::testing::TestParamInfo<int>& i) { return "wave" + std::to_string(i.param); });

// The shared-memory plan of the pipelined kernel differs between the widths, so a launcher that sized it
// with the host pass's compile-time width instead of the device's would over- or under-allocate.
TEST(LaneMathHost, PipelinedSharedMemoryDependsOnTheWarpWidth) {
  EXPECT_NE(pipe_smem(32, 64, 2, 1).stages, pipe_smem(64, 64, 2, 1).stages);
  EXPECT_NE(pipe_smem(32, 64, 2, 1).bytes, pipe_smem(64, 64, 2, 1).bytes);
}

// Shapes outside what the kernels instantiate are reported as inexact rather than silently mis-split.
TEST(LaneMathHost, InexactSplitsAreDetected) {
  EXPECT_FALSE(paged_pv_exact(64, 64, 2, paged_vpr(4, 2)));      // block 4 of bf16: no whole V vector
  EXPECT_FALSE(paged_pv_exact(64, 96, 2, 3));                     // vpr 3 does not divide the warp
  EXPECT_FALSE(paged_pv_exact(64, 32, 4, 1));                     // 32 rows, 64 per wave64 step
  EXPECT_TRUE(paged_pv_exact(32, 32, 4, 1));                      // ... but exactly one wave32 step
  EXPECT_FALSE(paged_pv_tiles_block(paged_pv(32, 64, 4, 4), 8));  // 16-token steps over an 8-token block
  EXPECT_FALSE(row_split_exact(64, 48, 2));                       // 48 / 8 = 6 lanes do not divide 64
  EXPECT_FALSE(supported_warp(16));
}

// The warp-split kernels find a token's block with fast_div instead of a divide: it must agree with / for
// every block size up to 4096 (and some far larger) at the edges of each block and at random tokens below
// 2^31, the largest token index an int32 seq_lens entry can name.
TEST(LaneMathHost, FastDivEqualsIntegerDivision) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<unsigned> any(0, 0x7fffffffu);
  std::vector<unsigned> divisors;
  for (unsigned d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (unsigned d : {65521u, 1u << 20, (1u << 20) + 1, 0x7ffffffeu, 0x7fffffffu}) divisors.push_back(d);
  int mismatches = 0;
  for (unsigned d : divisors) {
    const FastDiv f = fast_div(d);
    std::vector<unsigned> ns = {0u, 1u, d - 1, d, d + 1, 2 * d - 1, 0x7fffffffu, 0x7fffffffu - d};
    for (int i = 0; i < 200; ++i) ns.push_back(any(rng));
    for (unsigned k : {1000u, 123457u}) {
      const std::uint64_t edge = std::uint64_t{d} * k;
      if (edge < 0x80000000ull) ns.insert(ns.end(), {static_cast<unsigned>(edge), static_cast<unsigned>(edge - 1)});
    }
    for (unsigned n : ns) {
      if (n > 0x7fffffffu) continue;
      if (f.quotient(n) != n / d && ++mismatches <= 10)
        ADD_FAILURE() << n << " / " << d << ": fast_div gives " << f.quotient(n) << ", expected " << n / d;
    }
  }
  EXPECT_EQ(mismatches, 0);
  // Powers of two reduce to a shift.
  EXPECT_EQ(fast_div(16).mul, 1u);
  EXPECT_EQ(fast_div(16).shift, 4);
}

}  // namespace
}  // namespace pacheck::gpu::lanes
