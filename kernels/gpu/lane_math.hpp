// Lane arithmetic of the GPU decode kernels: which lanes of a warp (wave) own which head-dim elements and
// which tokens, and which xor offsets their reductions use. Written as constexpr functions of the warp width
// so that
//   - the kernels call them with kWarpSize (32 on CUDA and RDNA wave32, 64 on CDNA wave64): one definition,
//     no hand-written 32 in any index expression;
//   - the launchers call them with the device's runtime width (warp_size()): host code must never use
//     kWarpSize, because a HIP host pass compiles once for several targets and sees one arbitrary width;
//   - tests/test_lane_math.cpp checks them on the CPU for widths 32 and 64 (every element owned exactly
//     once, every token covered exactly once, every reduction spanning exactly the lanes it must).
// Plain C++17 with no runtime header, so the tests include it with the host compiler alone.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PACHECK_LANE_FN __host__ __device__ constexpr inline
#else
#define PACHECK_LANE_FN constexpr inline
#endif

namespace pacheck::gpu::lanes {

/// Warps per thread block of every decode kernel (kWarps in attention_common.cuh).
inline constexpr int kBlockWarps = 4;
/// Largest local (shared) memory one AMD workgroup may use (gfx90a and gfx1030 alike): the pipelined
/// warp-split kernel's shared-memory plan must fit it for both wave widths.
inline constexpr int kAmdLdsBytes = 64 * 1024;

PACHECK_LANE_FN int min_i(int a, int b) { return a < b ? a : b; }
PACHECK_LANE_FN int max_i(int a, int b) { return a > b ? a : b; }
PACHECK_LANE_FN bool is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

/// Elements of one 16-byte vector (the unit of every K/V load) for elements of `elem_bytes` bytes.
PACHECK_LANE_FN int vec16(int elem_bytes) { return 16 / elem_bytes; }

/// A warp width the kernels are written for: a power of two the shuffles can span (32 or 64).
PACHECK_LANE_FN bool supported_warp(int warp) { return warp == 32 || warp == 64; }

// -------------------------------------------------------------------------------------------------------
// gpu.paged_v1 / gpu.paged_v2, step 1 (q . K): a "thread group" of lanes shares one token of a KV block and
// splits its key's x-vectors (16-byte chunks) among themselves. Lanes are numbered token-fastest
// (lane = group_lane * tokens_per_pass + token_in_pass), so one x-chunk of consecutive tokens is one
// contiguous load for the warp.

/// Thread groups of a warp over a block of `block_size` tokens.
struct PagedQk {
  int group;            ///< lanes per token: max(warp / block_size, 1)
  int tokens_per_pass;  ///< tokens the warp covers at once: warp / group = min(block_size, warp)
  int warp;             ///< the warp width this split is for

  /// Token (slot offset within the current pass) lane `lane` works on.
  PACHECK_LANE_FN int token_in_pass(int lane) const { return lane % tokens_per_pass; }
  /// Position of `lane` within its token's group: it reads x-chunks group_lane, group_lane + group, ...
  PACHECK_LANE_FN int group_lane(int lane) const { return lane / tokens_per_pass; }
  /// The group's dot products are summed by xor offsets reduce_first(), 2 * reduce_first(), ... < warp:
  /// exactly the lane bits that select group_lane, so lanes of different tokens never mix.
  PACHECK_LANE_FN int reduce_first() const { return tokens_per_pass; }
  PACHECK_LANE_FN int reduce_end() const { return warp; }
};

PACHECK_LANE_FN PagedQk paged_qk(int warp, int block_size) {
  const int group = max_i(warp / block_size, 1);
  return PagedQk{group, warp / group, warp};
}

// gpu.paged_v1 / gpu.paged_v2, step 3 (P . V): V rows are contiguous over tokens, so each lane loads
// 16-byte vectors of vec_tokens consecutive tokens of one head-dim row. `vpr` lanes side by side take
// consecutive vectors of the same rows (one warp step covers chunk_tokens tokens of a block); the other lane
// bits pick the row: lane = row0 * vpr + vec, rows row0, row0 + rows_per_step, ... (rows_per_lane of them).

/// 16-byte V vectors per row per warp step: min(block_size / vec_tokens, 4). The launcher instantiates the
/// kernel for this value (1 only for 16-bit types at block 8), so no vector runs past its block.
PACHECK_LANE_FN int paged_vpr(int block_size, int elem_bytes) { return min_i(block_size / vec16(elem_bytes), 4); }

struct PagedPv {
  int vpr;            ///< lanes sharing rows, each with its own token vector
  int vec_tokens;     ///< tokens per 16-byte V vector
  int chunk_tokens;   ///< tokens of a block one warp step covers: vpr * vec_tokens
  int rows_per_step;  ///< head-dim rows one warp step covers: warp / vpr
  int rows_per_lane;  ///< row accumulators per lane: head_size / rows_per_step

  PACHECK_LANE_FN int vec(int lane) const { return lane % vpr; }
  PACHECK_LANE_FN int row0(int lane) const { return lane / vpr; }
  /// The i-th head-dim row (i < rows_per_lane) of a lane whose row0() is `r0`.
  PACHECK_LANE_FN int row_at(int r0, int i) const { return r0 + i * rows_per_step; }
  PACHECK_LANE_FN int row(int lane, int i) const { return row_at(row0(lane), i); }
  /// First slot of the vector a lane whose vec() is `v` loads in the warp step starting at slot c0 of a block.
  PACHECK_LANE_FN int slot_at(int c0, int v) const { return c0 + v * vec_tokens; }
  PACHECK_LANE_FN int slot(int c0, int lane) const { return slot_at(c0, vec(lane)); }
  /// Partial rows of the vpr lanes that share them are summed by xor offsets 1, 2, ... < vpr.
  PACHECK_LANE_FN int reduce_end() const { return vpr; }
};

PACHECK_LANE_FN PagedPv paged_pv(int warp, int head_size, int elem_bytes, int vpr) {
  const int rps = warp / vpr;
  return PagedPv{vpr, vec16(elem_bytes), vpr * vec16(elem_bytes), rps, head_size / rps};
}

/// True when paged_pv's rows split evenly over the lanes (checked at compile time by the kernel).
PACHECK_LANE_FN bool paged_pv_exact(int warp, int head_size, int elem_bytes, int vpr) {
  if (vpr < 1 || !is_pow2(vpr) || warp % vpr != 0) return false;
  const PagedPv pv = paged_pv(warp, head_size, elem_bytes, vpr);
  return pv.rows_per_lane >= 1 && head_size % pv.rows_per_step == 0;
}
/// True when the warp steps of `pv` tile a block exactly, so no V vector runs past its block (the launcher
/// picks vpr with paged_vpr, which guarantees it for the power-of-two blocks 8..256 it accepts).
PACHECK_LANE_FN bool paged_pv_tiles_block(const PagedPv& pv, int block_size) {
  return pv.chunk_tokens >= 1 && block_size % pv.chunk_tokens == 0;
}

// -------------------------------------------------------------------------------------------------------
// gpu.warp_split / gpu.warp_split_gqa: a head row is split over `lanes_per_row` lanes holding
// `elems_per_lane` contiguous elements each (at least one 16-byte vector: small rows are not split below
// a vector, a warp then holds several rows at once). Each row slot of a warp is a "worker" striding over the
// partition's tokens: lane = worker * lanes_per_row + row_lane.

struct RowSplit {
  int vec;             ///< elements per 16-byte vector
  int elems_per_lane;  ///< EPL = max(head_size / warp, vec)
  int loads;           ///< 16-byte loads per lane per row: EPL / vec
  int lanes_per_row;   ///< LPR = head_size / EPL
  int workers;         ///< RPW: rows (workers) per warp = warp / LPR
  int warp;

  PACHECK_LANE_FN int worker(int lane) const { return lane / lanes_per_row; }
  PACHECK_LANE_FN int row_lane(int lane) const { return lane % lanes_per_row; }
  /// First head-dim element of a lane whose row_lane() is `rl`; it owns [that, that + elems_per_lane).
  PACHECK_LANE_FN int elem_at(int rl) const { return rl * elems_per_lane; }
  PACHECK_LANE_FN int first_elem(int lane) const { return elem_at(row_lane(lane)); }
  /// Dot products of a row are summed by xor offsets 1, 2, ... < lanes_per_row (the row's lanes).
  PACHECK_LANE_FN int dot_reduce_end() const { return lanes_per_row; }
  /// Workers of a warp are merged by xor offsets lanes_per_row, 2 * lanes_per_row, ... < warp.
  PACHECK_LANE_FN int merge_first() const { return lanes_per_row; }
  PACHECK_LANE_FN int merge_end() const { return warp; }
};

/// `min_loads` 16-byte vectors per lane at least: 2 gives "wide rows" (half the lanes per row, twice the
/// rows per warp), which the basic warp-split form uses for one query head per warp (see warp_split.cu).
PACHECK_LANE_FN RowSplit row_split(int warp, int head_size, int elem_bytes, int min_loads = 1) {
  const int v = vec16(elem_bytes);
  const int epl = max_i(head_size / warp, v * min_loads);
  const int lpr = head_size / epl;
  return RowSplit{v, epl, epl / v, lpr, warp / lpr, warp};
}

/// True when row_split is exact: the row splits evenly and its lanes divide the warp.
PACHECK_LANE_FN bool row_split_exact(int warp, int head_size, int elem_bytes, int min_loads = 1) {
  const RowSplit rs = row_split(warp, head_size, elem_bytes, min_loads);
  return rs.lanes_per_row >= 1 && rs.lanes_per_row <= warp && warp % rs.lanes_per_row == 0 &&
         head_size % rs.elems_per_lane == 0 && rs.elems_per_lane % rs.vec == 0;
}

/// Token order of the warp-split workers. `warps` warps (all of a block, or those of one head slot) with
/// `rs.workers` workers each form all = warps * rs.workers workers; a step of a warp covers `unroll`
/// consecutive tokens per worker. Warp w starts at t_begin + w * workers * unroll and steps by unroll * all;
/// worker k of that warp takes tokens step_first + k * unroll + u, u < unroll. With t_begin, block_size and
/// the partition size multiples of unroll, a worker's tokens of one step lie in one KV block, so the
/// kernels look the block up once per step (ws_step_in_one_block). (`all` is passed in, not recomputed, so
/// the kernels keep the value they computed once.)
PACHECK_LANE_FN int ws_all_workers(const RowSplit& rs, int warps) { return warps * rs.workers; }
PACHECK_LANE_FN int ws_first_step(const RowSplit& rs, int t_begin, int warp_in_group, int unroll) {
  return t_begin + warp_in_group * rs.workers * unroll;
}
PACHECK_LANE_FN int ws_step_stride(int all_workers, int unroll) { return unroll * all_workers; }
PACHECK_LANE_FN int ws_worker_first(int step_first, int worker, int unroll) { return step_first + worker * unroll; }
PACHECK_LANE_FN int ws_token(int step_first, int worker, int u, int unroll) {
  return ws_worker_first(step_first, worker, unroll) + u;
}
/// True when every worker's `unroll` tokens of a step lie in one block of `block_size` tokens: partitions
/// start at multiples of partition_size, so both must be multiples of unroll.
PACHECK_LANE_FN bool ws_step_in_one_block(int block_size, int partition_size, int unroll) {
  return block_size % unroll == 0 && partition_size % unroll == 0;
}

/// Division of a token index by block_size without a divide: n / d == (mulhi(n, mul) + n) >> shift for
/// every n < 2^31 and 1 <= d < 2^31 (Granlund & Montgomery, "Division by invariant integers using
/// multiplication", PLDI 1994, section 4, with l = ceil(log2 d) and m' = floor(2^32 (2^l - d) / d) + 1;
/// n < 2^31 keeps mulhi(n, m') + n below 2^32). A power of two gets mul = 1 (mulhi is 0): a plain shift.
/// Three instructions for any block size, so the kernels need no branch on block_size's form.
/// tests/test_lane_math.cpp checks it against / for every d up to 4096 at edge and random n.
struct FastDiv {
  unsigned mul;
  int shift;

  PACHECK_LANE_FN unsigned quotient(unsigned n) const {
    return (static_cast<unsigned>((static_cast<unsigned long long>(n) * mul) >> 32) + n) >> shift;
  }
};

PACHECK_LANE_FN FastDiv fast_div(unsigned d) {
  int l = 0;
  while ((1ull << l) < d) ++l;
  const unsigned long long m = ((1ull << 32) * ((1ull << l) - d)) / d + 1;
  return FastDiv{static_cast<unsigned>(m), l};
}

/// Tokens per worker per step of the warp-split kernels: 4, or 2 for tiles of 8 query heads (registers).
PACHECK_LANE_FN int ws_unroll(int query_heads_per_tile) { return query_heads_per_tile >= 8 ? 2 : 4; }

/// Shared memory of the pipelined warp-split kernel: a per-warp ring of `stages` steps of K and V vectors
/// (uint4 index ((u * 2 + kv) * warp + lane) * loads + n), reused after the loop for the merge of the warps
/// ([warps][heads][head_size] accumulators plus [warps][heads][2] max/sum).
struct PipeSmem {
  int stage_vecs;   ///< 16-byte vectors per warp per stage
  int stages;       ///< ring depth, 2..4, as many as fit the ring budget
  int ring_bytes;
  int merge_bytes;
  int bytes;        ///< dynamic shared memory of one block: max(ring, merge)

  /// Ring index (in 16-byte vectors, within one warp's stage) of load n of K (kv = 0) or V (kv = 1) of
  /// token u of lane `lane`.
  PACHECK_LANE_FN int ring_index(int warp, int loads, int u, int kv, int lane, int n) const {
    return ((u * 2 + kv) * warp + lane) * loads + n;
  }
};

/// Ring bytes per block the stage count is chosen against (the default shared-memory size of a CUDA block).
inline constexpr int kPipeRingBudget = 48 * 1024;

PACHECK_LANE_FN PipeSmem pipe_smem(int warp, int head_size, int elem_bytes, int query_heads_per_tile,
                                   int warps = kBlockWarps) {
  const RowSplit rs = row_split(warp, head_size, elem_bytes);
  const int stage_vecs = ws_unroll(query_heads_per_tile) * 2 * warp * rs.loads;
  const int fit = kPipeRingBudget / (warps * stage_vecs * 16);
  const int stages = fit < 2 ? 2 : (fit > 4 ? 4 : fit);
  const int ring = warps * stages * stage_vecs * 16;
  const int merge = warps * query_heads_per_tile * (head_size + 2) * 4;
  return PipeSmem{stage_vecs, stages, ring, merge, ring > merge ? ring : merge};
}

}  // namespace pacheck::gpu::lanes
