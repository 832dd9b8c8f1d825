// Building blocks of the two warp-split kernels (kernels/gpu/warp_split.cu, which describes the design):
// their parameters, the row split and the nhd row addressing, the block's place in the grid, the query
// load, the logits of a token, P.V, and the merge of workers and warps that ends both forms. Included by
// warp_split.cu only (its anonymous namespace is that TU's).
#pragma once

#include <cstdint>

#include "kernels/gpu/attention_common.cuh"
#include "kernels/gpu/fp8.hpp"

namespace pacheck::gpu {
namespace {

/// The kernels' parameters: the shared DecodeParams (query, caches, out, block_tables, seq_lens and their
/// strides, head counts), then the fields of this design.
struct WarpSplitParams : DecodeParams {
  int ratio, tiles;             ///< query heads per KV head; head tiles per group
  int head_slots;               ///< warps split into this many head slots (1, 2 or 4), each serving QG query heads
  int block_size;
  lanes::FastDiv block_div;     ///< token -> logical block: fast_div(block_size)
  float scale_log2;             ///< scale * k_scale * log2(e); scale * log2(e) when k_scales is given
  float v_scale;                ///< per-tensor V scale (NaN, unused, when v_scales is given)
  const float* k_scales;        ///< [num_kv_heads] device fp32 per-KV-head K scales, or null
  const float* v_scales;        ///< [num_kv_heads] device fp32 per-KV-head V scales, or null
  SplitScratch sc;              ///< partition_size and max_parts always set; buffers when max_parts > 1
};

// Which lanes own which elements and tokens, and the shuffle offsets of the reductions: lanes::row_split and
// the lanes::ws_* token order (lane_math.hpp, tested for wave32 and wave64 in tests/test_lane_math.cpp).
// C is the cache element type: the split follows its size (16 fp8 codes per 16-byte load). L is the
// minimum number of 16-byte loads per lane and row (2: wide rows, see basic_min_loads).
template <class C, int D, int L = 1>
struct RowSplit {
  static constexpr lanes::RowSplit kSplit = lanes::row_split(kWarpSize, D, sizeof(C), L);
  static constexpr int kVec = kSplit.vec;
  static constexpr int kEpl = kSplit.elems_per_lane;  // elements per lane
  static constexpr int kNv = kSplit.loads;            // 16-byte loads per lane per row
  static_assert(lanes::row_split_exact(kWarpSize, D, sizeof(C), L), "head row must split over a warp");
  static_assert(kSplit.workers * kSplit.lanes_per_row == kWarpSize, "the row split must span exactly one warp");
};

// K/V row addressing of KV head g in the nhd layout, hoisted out of the token loops: the row of (phys,
// slot) starts kb * phys + kslot * slot bytes past the bases (the lane's element d0 of block 0, slot 0).
// The offsets are key_offset / value_offset's (paging/layout.hpp) with g and d0 folded into the
// bases and the strides in bytes; the launcher checks that block strides fit in 32 unsigned bits and a
// block's slot offsets in 31 (both non-negative), so a row's address is two wide multiply-adds instead of
// four 64-bit products. In the SASS of the bf16 head-128 basic form (nvcc 13.0, sm_90) this took the
// token loop from 587 to 359 instructions per step (4 tokens x 2 rows per warp).
template <class C>
struct NhdRows {
  std::uint64_t k, v;    ///< addresses of the lane's first element of KV head g in block 0, slot 0
  std::uint32_t kb, vb;  ///< block strides (bytes)
  std::uint32_t kslot, vslot;  ///< slot strides (bytes)
  const std::int32_t* bt;      ///< the sequence's block_tables row

  PACHECK_DEVICE NhdRows(const WarpSplitParams& p, int s, int g, int d0)
      : k(reinterpret_cast<std::uint64_t>(static_cast<const C*>(p.k) + g * p.ks[2] + d0)),
        v(reinterpret_cast<std::uint64_t>(static_cast<const C*>(p.v) + g * p.vs[2] + d0)),
        kb(static_cast<std::uint32_t>(p.ks[0] * sizeof(C))),
        vb(static_cast<std::uint32_t>(p.vs[0] * sizeof(C))),
        kslot(static_cast<std::uint32_t>(p.ks[1] * sizeof(C))),
        vslot(static_cast<std::uint32_t>(p.vs[1] * sizeof(C))),
        bt(p.block_tables + s * p.bt_stride) {}

  /// Physical block and slot of token t (>= 0).
  PACHECK_DEVICE void locate(const WarpSplitParams& p, int t, std::uint32_t* phys, std::uint32_t* slot) const {
    const unsigned lb = p.block_div.quotient(static_cast<unsigned>(t));
    *slot = static_cast<unsigned>(t) - lb * static_cast<unsigned>(p.block_size);
    *phys = static_cast<std::uint32_t>(bt[lb]);
  }
  PACHECK_DEVICE const C* key(std::uint32_t phys, std::uint32_t slot) const {
    return reinterpret_cast<const C*>(mad_wide_u32(slot, kslot, mad_wide_u32(phys, kb, k)));
  }
  PACHECK_DEVICE const C* value(std::uint32_t phys, std::uint32_t slot) const {
    return reinterpret_cast<const C*>(mad_wide_u32(slot, vslot, mad_wide_u32(phys, vb, v)));
  }

  /// Rows of a worker's U tokens t0 + u of one step (lanes::ws_token), each clamped to the partition's last
  /// token t_end - 1 (a token past it is re-read and masked by the caller: nothing past seq_len is ever
  /// read). `one_block` (lanes::ws_step_in_one_block) means the U tokens share a block, which the caller
  /// has located already (`phys`, `slot`: locate(min(t0, t_end - 1)), possibly a step ahead); the clamped
  /// tokens stay in it (t_end - 1 >= t0 lies in [t0, t0 + U) when t0 < t_end). Otherwise each token is
  /// located here and `phys`, `slot` are unused.
  template <int U>
  PACHECK_DEVICE void step(const WarpSplitParams& p, bool one_block, int t0, int t_end, std::uint32_t phys,
                           std::uint32_t slot, const C* (&kp)[U], const C* (&vp)[U]) const {
    const int last = t_end - 1;
    if (one_block) {
      const int room = max(last - t0, 0);  // tokens after t0 that are still valid
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const std::uint32_t su = slot + min(u, room);
        kp[u] = key(phys, su);
        vp[u] = value(phys, su);
      }
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        std::uint32_t pu, su;
        locate(p, min(t0 + u, last), &pu, &su);
        kp[u] = key(pu, su);
        vp[u] = value(pu, su);
      }
    }
  }
};

// Query rows of one head slot, fp32: row j is query head g * ratio + slot_first + j of the group, where heads
// past the group's end repeat its last head (computed, never written).
template <class T, int QG, int EPL>
PACHECK_DEVICE void load_queries(const WarpSplitParams& p, int s, int g, int slot_first, int d0, float (&q)[QG][EPL]) {
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    const int hq = g * p.ratio + min(slot_first + j, p.ratio - 1);
    const T* qp = static_cast<const T*>(p.q) + s * p.q_stride_seq + hq * p.q_stride_head + d0;
#pragma unroll
    for (int e = 0; e < EPL; ++e) q[j][e] = Elem<T>::to_float(qp[e]);
  }
}

/// 2^x: the single-instruction fast_exp2 when kFast, else exp2f (PACHECK_WARP_SPLIT_FAST=0, A/B runs).
template <bool kFast>
PACHECK_DEVICE float ws_exp2(float x) {
  if constexpr (kFast) return fast_exp2(x);
  else return exp2f(x);
}
/// 1/x: the single-instruction fast_rcp when kFast, else the division.
template <bool kFast>
PACHECK_DEVICE float ws_rcp(float x) {
  if constexpr (kFast) return fast_rcp(x);
  else return 1.f / x;
}

/// Where a thread block of either form works, from the grid (x = (KV head, partition, head tile), tiles
/// fastest; y = sequence), and where its thread sits in the row split and the head slots.
struct WsPlace {
  int s, g, tile, part, num_parts;  ///< sequence, KV head, head tile, partition, partitions of the sequence
  int P, t_begin, t_end;            ///< tokens per partition; the partition's tokens [t_begin, t_end)
  int warp, lane, sg, d0;           ///< warp, lane, the lane's worker (row slot) and its first element
  int wph, hs, wt;                  ///< warps per head slot, the warp's slot, the warp's index in its slot
  int tile_first;                   ///< first head of the tile, within the group
  int slot_first;                   ///< first head of this warp's slot, within the group
  int nrw;                          ///< workers of the slot
};

/// Fills `w` for this thread, the row split RS and QG query heads per slot. False when the block's partition
/// lies past its sequence's end (part >= num_parts): the block has nothing to write and returns at once;
/// only s, g, tile, part, P and num_parts are set then.
template <class RS, int QG>
PACHECK_DEVICE bool ws_place(const WarpSplitParams& p, WsPlace& w) {
  constexpr lanes::RowSplit SP = RS::kSplit;
  w.s = blockIdx.y;
  int bx = blockIdx.x;
  w.tile = bx % p.tiles;
  bx /= p.tiles;
  w.part = bx % p.sc.max_parts;
  w.g = bx / p.sc.max_parts;

  const int seq_len = p.seq_lens[w.s];
  w.P = p.sc.partition_size;
  w.num_parts = ceil_div(seq_len, w.P);
  if (w.part >= w.num_parts) return false;
  w.t_begin = w.part * w.P;
  w.t_end = min(w.t_begin + w.P, seq_len);

  const int tid = threadIdx.x;
  w.warp = tid / kWarpSize;
  w.lane = tid % kWarpSize;
  w.sg = SP.worker(w.lane);
  w.d0 = SP.elem_at(SP.row_lane(w.lane));
  // Warps split into head_slots slots of QG query heads; the wph warps of a slot stride over the keys.
  // With several slots the warps of a block read the same rows at about the same time, so the repeats
  // are L1 hits rather than L2 reads.
  w.wph = kWarps / p.head_slots;
  w.hs = w.warp / w.wph;
  w.wt = w.warp % w.wph;
  w.tile_first = w.tile * p.head_slots * QG;
  w.slot_first = w.tile_first + w.hs * QG;
  w.nrw = lanes::ws_all_workers(SP, w.wph);
  return true;
}

/// Online-softmax state of the QG query heads of a slot, emptied: running max m = -inf, exp sum l = 0,
/// normalised accumulator acc = 0.
template <int QG, int EPL>
PACHECK_DEVICE void ws_clear(float (&m)[QG], float (&l)[QG], float (&acc)[QG][EPL]) {
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[j][e] = 0.f;
  }
}

/// Logits (log2 domain) of one token for the QG query heads of the slot: q . k over the lane's elements `kf`
/// (fp32), summed over the row's lanes, times qk_scale; -inf when the token is not `valid`.
template <class RS, int QG>
PACHECK_DEVICE void ws_token_logits(const float (&q)[QG][RS::kEpl], const float (&kf)[RS::kEpl], bool valid,
                                    float qk_scale, float (&sc)[QG]) {
  constexpr lanes::RowSplit SP = RS::kSplit;
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < RS::kEpl; ++e) dot = fmaf(q[j][e], kf[e], dot);
#pragma unroll
    for (int mk = 1; mk < SP.dot_reduce_end(); mk <<= 1) dot += shfl_xor(dot, mk);
    sc[j] = valid ? dot * qk_scale : -INFINITY;
  }
}

/// acc[j] += pr[j] x v for one token's V elements `vf` (fp32) and the QG query heads of the slot.
template <int QG, int EPL>
PACHECK_DEVICE void ws_add_pv(const float (&pr)[QG], const float (&vf)[EPL], float (&acc)[QG][EPL]) {
#pragma unroll
  for (int j = 0; j < QG; ++j)
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[j][e] = fmaf(pr[j], vf[e], acc[j][e]);
}

// The end of both forms: merges the workers of each warp (butterfly over the lane bits above the row's
// lanes), then the wph = kWarps / head_slots warps of each head slot through shared memory `smem`
// (kWarps * QG * (D + 2) floats, free for reuse: the caller synchronises before), and writes each query
// head's row: to `out` when the sequence has one partition, else the normalised partial, its max logit and
// exp sum to split-KV scratch. kFast picks the single-instruction exp2 and reciprocal.
template <class T, class C, int D, int QG, int EPL, bool kFast, int L = 1>
PACHECK_DEVICE void merge_and_store(const WarpSplitParams& p, float* smem, float (&m)[QG], float (&l)[QG],
                                    float (&acc)[QG][EPL], int s, int g, int part, int num_parts, int tile_first) {
  constexpr lanes::RowSplit SP = RowSplit<C, D, L>::kSplit;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int sg = SP.worker(lane), sl = SP.row_lane(lane);
  const int d0 = SP.elem_at(sl);
  // V dequantisation scale of KV head g, applied to the finished P.V row (1 for f32/f16/bf16 caches).
  const float v_scale = p.v_scales ? p.v_scales[g] : p.v_scale;
#pragma unroll
  for (int mk = SP.merge_first(); mk < SP.merge_end(); mk <<= 1) {
#pragma unroll
    for (int j = 0; j < QG; ++j) {
      const float mo = shfl_xor(m[j], mk), lo = shfl_xor(l[j], mk);
      const float mn = fmaxf(m[j], mo);
      const float a = (mn == -INFINITY) ? 0.f : ws_exp2<kFast>(m[j] - mn) * l[j];
      const float b = (mn == -INFINITY) ? 0.f : ws_exp2<kFast>(mo - mn) * lo;
      const float ls = a + b;
      const float inv = (ls == 0.f) ? 0.f : ws_rcp<kFast>(ls);
      const float wa = a * inv, wb = b * inv;
      l[j] = ls;
      m[j] = mn;
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc[j][e] = acc[j][e] * wa + shfl_xor(acc[j][e], mk) * wb;
    }
  }

  float* acc_s = smem;                       // [kWarps][QG][D]
  float* ml_s = acc_s + kWarps * QG * D;     // [kWarps][QG][2]
  if (sg == 0) {
#pragma unroll
    for (int j = 0; j < QG; ++j) {
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc_s[(warp * QG + j) * D + d0 + e] = acc[j][e];
      if (sl == 0) {
        ml_s[(warp * QG + j) * 2] = m[j];
        ml_s[(warp * QG + j) * 2 + 1] = l[j];
      }
    }
  }
  __syncthreads();

  const int wph = kWarps / p.head_slots;
  const bool to_scratch = num_parts > 1;
  const int per_slot = QG * D;
  for (int idx = tid; idx < p.head_slots * per_slot; idx += blockDim.x) {
    const int slot = idx / per_slot, j = (idx / D) % QG, d = idx % D;
    const int hg = tile_first + slot * QG + j;  // head within the group
    if (hg >= p.ratio) continue;
    const int w0 = slot * wph;
    float gm = -INFINITY;
    for (int w = w0; w < w0 + wph; ++w) gm = fmaxf(gm, ml_s[(w * QG + j) * 2]);
    float wts[kWarps], lsum = 0.f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) {
      wts[i] = 0.f;
      if (i < wph) {
        const float mw = ml_s[((w0 + i) * QG + j) * 2];
        wts[i] = (mw == -INFINITY) ? 0.f : ws_exp2<kFast>(mw - gm) * ml_s[((w0 + i) * QG + j) * 2 + 1];
        lsum += wts[i];
      }
    }
    const float inv = ws_rcp<kFast>(lsum);
    float o = 0.f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i)
      if (i < wph) o = fmaf(acc_s[((w0 + i) * QG + j) * D + d], wts[i] * inv, o);
    o *= v_scale;
    const int h = g * p.ratio + hg;
    if (to_scratch) {
      const std::int64_t srow = (static_cast<std::int64_t>(s) * p.num_heads + h) * p.sc.max_parts + part;
      p.sc.tmp_out[srow * D + d] = o;
      if (d == 0) {
        p.sc.max_logits[srow] = gm;
        p.sc.exp_sums[srow] = lsum;
      }
    } else {
      static_cast<T*>(p.out)[s * p.out_stride_seq + h * p.out_stride_head + d] = Elem<T>::from_float(o);
    }
  }
}

}  // namespace
}  // namespace pacheck::gpu
