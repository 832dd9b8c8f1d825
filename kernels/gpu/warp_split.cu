// gpu.warp_split and gpu.warp_split_gqa: split-KV decode over the `nhd` layout with an online softmax held
// in registers (the FlashDecoding design: Dao et al., "Flash-Decoding for long-context inference", 2023;
// online softmax after Milakov & Gimelshein, 2018). Written for pacheck from that design.
//
// Layout (PACHECK_LAYOUT_NHD): key_cache, value_cache [num_blocks, block_size, num_kv_heads, head_size];
// query and out [num_seqs, num_heads, head_size] with the strides from the args.
// Element types: query and output T (f32, f16 or bf16); cache C, either T itself or, with a bf16/f16 T, one
// of the fp8 encodings (kernels/gpu/fp8.hpp), decoded to fp32 right after the 16-byte loads. The row split
// below follows C (16 codes per load at fp8). The dequantisation scale of KV head g (k_scales_per_head[g]
// when given, else the scalar) is folded into the logit scale, and V's multiplies the finished P.V row;
// f32/f16/bf16 caches compute exactly as before (docs/FP8.md).
//
// Grid: x = (kv head, partition, head tile), tiles fastest; y = sequence. A thread block of kWarps warps
// handles one partition (warp_split_partition_size() tokens) of one sequence for a tile of QG query heads
// of one KV head:
//  - gpu.warp_split: QG = 1, so a warp serves one query head: each K/V row is loaded once per query head.
//    The warps of a block split into head_slots slots (up to 4, dividing the ratio), each slot serving
//    another query head of the group over the same keys, so the repeats can hit L1; the blocks of one
//    group are adjacent in the grid, so the rest mostly hit L2.
//  - gpu.warp_split_gqa: QG = min(8, next power of two >= gqa ratio): each K/V row is loaded once for every
//    query head of the tile (once for the whole group up to ratio 8; ratio 16 runs two tiles).
// A head row is split over LPR lanes holding EPL contiguous elements each, EPL = max(head_size / kWarpSize,
// L x 16 bytes), L = 1, or 2 ("wide rows", basic_min_loads) in gpu.warp_split's basic form: for head 256
// bf16 with L = 1 (and f32 128 and up) one warp covers one row, EPL = head / kWarpSize; for smaller rows a
// warp covers several rows at once rather than drop below L 16-byte loads per lane. Each row slot of a
// warp is a "worker" that takes U consecutive tokens of the partition per step (lanes::ws_token; they lie
// in one KV block, looked up once, when block_size and the partition size are multiples of U), with all
// its loads issued before the first use, keeping per query head a running max m, exp sum l and output
// accumulator in registers (logits in the log2 domain, rescaled once per step; the accumulator kept
// normalised).
// Workers are merged by butterfly shuffles within a warp and then across warps through shared memory. A
// sequence with one partition writes `out` directly; otherwise partitions write normalised partials to
// split-KV scratch and merge_partitions_kernel combines them (attention_common.cuh).
// Nothing past seq_len is ever loaded (each token is a separate row), so tail poison cannot reach the output.
// Two forms of the kernel (use_pipeline): gpu.warp_split runs the basic form above (loads into registers);
// gpu.warp_split_gqa the pipelined form, which stages K/V through shared memory with cp.async several
// steps ahead (warp_split_pipelined_kernel).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "kernels/gpu/attention_common.cuh"
#include "kernels/gpu/fp8.hpp"

namespace pacheck::gpu {
namespace {

std::atomic<int> g_partition_size{512};

/// Which form runs. Measured on the H200 (64 seqs x 8192 tokens, 32/8 heads, head 128, bf16; GpuBench,
/// docs/BENCHMARKS.md): the pipelined form takes gpu.warp_split_gqa from 0.73 to 0.59 ms (69% -> 84% of
/// the copy bandwidth), and the basic form gpu.warp_split to 0.83 ms (61%) where its pipelined form takes
/// about 1.05, so each kernel keeps its faster form. gpu.warp_split does the whole per-token work (dot,
/// shuffles, exp2, P.V) once per query head: it is bound by instruction issue, which the hoisted row
/// addressing (NhdRows: 587 -> 359 instructions per step in the SASS), the once-per-step block lookup and
/// the wide rows cut from 1.385 ms to 0.83 ms. PACHECK_WARP_SPLIT_PIPELINE=0 or =1 forces one form for
/// both (A/B runs).
bool use_pipeline(bool gqa_fused) {
  const char* v = std::getenv("PACHECK_WARP_SPLIT_PIPELINE");
  if (v && v[0] == '0') return false;
  if (v && v[0] == '1') return true;
  return gqa_fused;
}

/// Head slots per block of gpu.warp_split (see launch_warp_split), in both forms: 4, so that at GQA 4 the
/// four warps of a block serve the four query heads of a group and read the same K/V rows together (L1
/// hits). Chosen from the H200 A/B of tests/test_gpu_kernels.cpp (GpuBench) at the bandwidth shape, basic
/// form with wide rows: 1 slot 0.940 ms, 2 slots 0.846 ms, 4 slots 0.829 ms (docs/BENCHMARKS.md).
constexpr int kDefaultHeadSlots = 4;

/// Minimum 16-byte loads per lane and row of the basic form (lanes::row_split's min_loads): 2 ("wide
/// rows") with one query head per warp (gpu.warp_split), else 1. With wide rows a lane holds at least two
/// vectors of a row (head 128 at 16 bits: 8 lanes x 16 elements, 4 rows per warp, instead of 16 x 8 and
/// 2), so the per-token work that does not grow with the row (addresses, block-table reads, dot-product
/// shuffles, exp2, masks) is shared by twice the tokens per instruction. H200 A/B at the bandwidth shape
/// (4 tokens per worker and step, 2 head slots; docs/BENCHMARKS.md): 1.024 ms narrow, 0.843 ms wide.
/// Tiles of several query heads keep 1 (query and accumulator registers grow with the heads), and so do fp8
/// caches, whose single 16-byte vector already holds 16 elements (2 loads took 180-220 registers).
constexpr int basic_min_loads(int qg, int elem_bytes) { return qg == 1 && elem_bytes > 1 ? 2 : 1; }

struct WarpSplitParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  std::int64_t q_stride_seq, q_stride_head, out_stride_seq, out_stride_head;
  std::int64_t ks[5], vs[5];
  const std::int32_t* block_tables;
  std::int64_t bt_stride;
  const std::int32_t* seq_lens;
  int num_heads, num_kv_heads, ratio, tiles;
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

template <bool kFast>
PACHECK_DEVICE float ws_exp2(float x) {
  if constexpr (kFast) return fast_exp2(x);
  else return exp2f(x);
}
template <bool kFast>
PACHECK_DEVICE float ws_rcp(float x) {
  if constexpr (kFast) return fast_rcp(x);
  else return 1.f / x;
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

// The basic form: K/V loaded into registers, one step in flight per worker.
// T: query/output element type; C: cache element type (T, or an fp8 type with a 16-bit T); L: minimum
// 16-byte loads per lane and row (basic_min_loads).
template <class T, class C, int D, int QG, bool kFast, int L>
__global__ void __launch_bounds__(kWarps * kWarpSize) warp_split_basic_kernel(WarpSplitParams p) {
  using RS = RowSplit<C, D, L>;
  constexpr lanes::RowSplit SP = RS::kSplit;
  constexpr int EPL = RS::kEpl, NV = RS::kNv, VEC = RS::kVec;
  constexpr int U = lanes::ws_unroll(QG);  // tokens per worker per step (2 * NV loads each, all in flight)

  const int s = blockIdx.y;
  int bx = blockIdx.x;
  const int tile = bx % p.tiles;
  bx /= p.tiles;
  const int part = bx % p.sc.max_parts;
  const int g = bx / p.sc.max_parts;

  const int seq_len = p.seq_lens[s];
  const int P = p.sc.partition_size;
  const int num_parts = ceil_div(seq_len, P);
  if (part >= num_parts) return;
  const int t_begin = part * P, t_end = min(t_begin + P, seq_len);

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int sg = SP.worker(lane), sl = SP.row_lane(lane);
  const int d0 = SP.elem_at(sl);
  // Warps split into head_slots slots of QG query heads; the wph warps of a slot stride over the keys.
  // With several slots the warps of a block read the same rows at about the same time, so the repeats
  // are L1 hits rather than L2 reads.
  const int wph = kWarps / p.head_slots;
  const int hs = warp / wph, wt = warp % wph;
  const int tile_first = tile * p.head_slots * QG;  // first head of the tile, within the group
  const int nrw = lanes::ws_all_workers(SP, wph);    // workers of the slot

  float q[QG][EPL];
  load_queries<T, QG, EPL>(p, s, g, tile_first + hs * QG, d0, q);
  // K dequantisation scale of KV head g folded into the logit scale (host-folded when per tensor).
  const float qk_scale = p.k_scales ? p.scale_log2 * p.k_scales[g] : p.scale_log2;
  float m[QG], l[QG], acc[QG][EPL];
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[j][e] = 0.f;
  }

  const NhdRows<C> rows(p, s, g, d0);
  const bool one_block = lanes::ws_step_in_one_block(p.block_size, P, U);

  const int stride = lanes::ws_step_stride(nrw, U);
  const int tw0 = lanes::ws_first_step(SP, t_begin, wt, U);
  // With one block per worker step, the block of the next step is read while this one computes, so the
  // block-table load is off the critical path of the K/V loads.
  std::uint32_t next_phys = 0, next_slot = 0;
  if (one_block) rows.locate(p, min(lanes::ws_worker_first(tw0, sg, U), t_end - 1), &next_phys, &next_slot);

  // The loop bound is warp-uniform (shuffles need the whole warp); tokens past t_end are masked per worker.
  for (int tw = tw0; tw < t_end; tw += stride) {
    uint4 kr[U][NV], vr[U][NV];
    bool valid[U];
    const int t0 = lanes::ws_worker_first(tw, sg, U);
    const std::uint32_t phys = next_phys, slot = next_slot;
    if (one_block) rows.locate(p, min(t0 + stride, t_end - 1), &next_phys, &next_slot);
    // A worker past the partition's end re-reads the partition's last token, masked below (its
    // probability is exactly 0): every load is issued without a branch and none goes past seq_len.
    const C* kp[U];
    const C* vp[U];
    rows.template step<U>(p, one_block, t0, t_end, phys, slot, kp, vp);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      valid[u] = t0 + u < t_end;
#pragma unroll
      for (int n = 0; n < NV; ++n) kr[u][n] = load16(kp[u] + n * VEC);
#pragma unroll
      for (int n = 0; n < NV; ++n) vr[u][n] = load16(vp[u] + n * VEC);
    }

    // Logits of the U tokens for every head of the tile (log2 domain).
    float sc[U][QG];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[EPL];
#pragma unroll
      for (int n = 0; n < NV; ++n) expand16<C>(kr[u][n], kf + n * VEC);
#pragma unroll
      for (int j = 0; j < QG; ++j) {
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) dot = fmaf(q[j][e], kf[e], dot);
#pragma unroll
        for (int mk = 1; mk < SP.dot_reduce_end(); mk <<= 1) dot += shfl_xor(dot, mk);
        sc[u][j] = valid[u] ? dot * qk_scale : -INFINITY;
      }
    }

    // Online softmax, one rescale per step. acc stays normalised (the softmax-weighted mean of the V rows
    // seen so far): acc' = (acc * l * corr + sum p v) / l', at the same per-element cost as the unnormalised
    // form, and it cannot overflow fp32 for V near the dtype's largest finite value. A worker with no valid
    // token yet keeps m = -inf and l = 0 and must not form exp2(-inf - -inf).
    float pr[U][QG];
#pragma unroll
    for (int j = 0; j < QG; ++j) {
      float cmax = sc[0][j];
#pragma unroll
      for (int u = 1; u < U; ++u) cmax = fmaxf(cmax, sc[u][j]);
      const float mn = fmaxf(m[j], cmax);
      const float corr = (mn == -INFINITY) ? 1.f : ws_exp2<kFast>(m[j] - mn);
      float psum = 0.f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        pr[u][j] = valid[u] ? ws_exp2<kFast>(sc[u][j] - mn) : 0.f;
        psum += pr[u][j];
      }
      const float ln = fmaf(l[j], corr, psum);
      const float inv = (ln == 0.f) ? 0.f : ws_rcp<kFast>(ln);
      const float keep = l[j] * corr * inv;
#pragma unroll
      for (int u = 0; u < U; ++u) pr[u][j] *= inv;
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc[j][e] *= keep;
      l[j] = ln;
      m[j] = mn;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[EPL];
#pragma unroll
      for (int n = 0; n < NV; ++n) expand16<C>(vr[u][n], vf + n * VEC);
#pragma unroll
      for (int j = 0; j < QG; ++j)
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[j][e] = fmaf(pr[u][j], vf[e], acc[j][e]);
    }
  }

  __shared__ __align__(16) float merge_s[kWarps * QG * (D + 2)];
  merge_and_store<T, C, D, QG, EPL, kFast, L>(p, merge_s, m, l, acc, s, g, part, num_parts, tile_first);
}

// The pipelined form (gpu.warp_split_gqa's; see use_pipeline). Same arithmetic as the basic form, with three
// changes for bandwidth:
//  - K/V rows go global -> shared through cp.async into a per-warp ring of kStages steps, so every warp
//    keeps kStages - 1 steps of loads in flight while it computes one (no registers held by loads);
//  - exp2 and 1/x are the single-instruction approximations (fast_exp2, fast_rcp), as in the basic form
//    by default.
// The shared-memory plan is lanes::pipe_smem: a function of the warp width, so the kernel evaluates it with
// kWarpSize and the launcher with the device's warp_size() (never with kWarpSize in host code: a HIP host
// pass serves wave64 and wave32 targets at once).
template <class C, int D, int QG>
struct Pipe {
  using RS = RowSplit<C, D>;
  static constexpr lanes::PipeSmem kPlan = lanes::pipe_smem(kWarpSize, D, sizeof(C), QG, kWarps);
  static constexpr int kU = lanes::ws_unroll(QG);       // tokens per worker per step
  static constexpr int kStageVecs = kPlan.stage_vecs;   // uint4 per warp per stage
  static constexpr int kStages = kPlan.stages;
};

template <class T, class C, int D, int QG>
__global__ void __launch_bounds__(kWarps * kWarpSize) warp_split_pipelined_kernel(WarpSplitParams p) {
  using RS = RowSplit<C, D>;
  using PP = Pipe<C, D, QG>;
  constexpr lanes::RowSplit SP = RS::kSplit;
  constexpr lanes::PipeSmem PS = PP::kPlan;
  constexpr int EPL = RS::kEpl, NV = RS::kNv, VEC = RS::kVec;
  constexpr int U = PP::kU, S = PP::kStages;

  const int s = blockIdx.y;
  int bx = blockIdx.x;
  const int tile = bx % p.tiles;
  bx /= p.tiles;
  const int part = bx % p.sc.max_parts;
  const int g = bx / p.sc.max_parts;

  const int seq_len = p.seq_lens[s];
  const int P = p.sc.partition_size;
  const int num_parts = ceil_div(seq_len, P);
  if (part >= num_parts) return;
  const int t_begin = part * P, t_end = min(t_begin + P, seq_len);

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int sg = SP.worker(lane), sl = SP.row_lane(lane);
  const int d0 = SP.elem_at(sl);
  // Warps split into head_slots slots of QG query heads; the wph warps of a slot stride over the keys.
  const int wph = kWarps / p.head_slots;
  const int hs = warp / wph, wt = warp % wph;
  const int tile_first = tile * p.head_slots * QG;  // first head of the tile, within the group
  const int slot_first = tile_first + hs * QG;      // first head of this warp's slot, within the group
  const int nrw = lanes::ws_all_workers(SP, wph);  // workers of the slot

  float q[QG][EPL];
  load_queries<T, QG, EPL>(p, s, g, slot_first, d0, q);
  // K dequantisation scale of KV head g folded into the logit scale (host-folded when per tensor).
  const float qk_scale = p.k_scales ? p.scale_log2 * p.k_scales[g] : p.scale_log2;
  float m[QG], l[QG], acc[QG][EPL];
#pragma unroll
  for (int j = 0; j < QG; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[j][e] = 0.f;
  }

  extern __shared__ __align__(16) unsigned char ws_smem[];
  uint4* ring = reinterpret_cast<uint4*>(ws_smem) + warp * S * PP::kStageVecs;
  const NhdRows<C> rows(p, s, g, d0);
  const int stride = lanes::ws_step_stride(nrw, U);

  const bool one_block = lanes::ws_step_in_one_block(p.block_size, P, U);

  // Issues one step's copies (tokens lanes::ws_token(tw, sg, u, U)) into ring stage `st` and commits them
  // as one group. Tokens at or past t_end are zero-filled without reading memory, so every step commits a
  // group and the wait counts below hold.
  auto issue = [&](int tw, int st) {
    uint4* dst = ring + st * PP::kStageVecs;
    const int t0 = lanes::ws_worker_first(tw, sg, U);
    std::uint32_t phys = 0, slot = 0;
    if (one_block) rows.locate(p, min(t0, t_end - 1), &phys, &slot);
    const C* kp[U];
    const C* vp[U];
    rows.template step<U>(p, one_block, t0, t_end, phys, slot, kp, vp);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool valid = t0 + u < t_end;
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        async_copy16(dst + PS.ring_index(kWarpSize, NV, u, 0, lane, n), kp[u] + n * VEC, valid);
        async_copy16(dst + PS.ring_index(kWarpSize, NV, u, 1, lane, n), vp[u] + n * VEC, valid);
      }
    }
    async_commit();
  };

  const int tw0 = lanes::ws_first_step(SP, t_begin, wt, U);
#pragma unroll
  for (int i = 0; i < S - 1; ++i) issue(tw0 + i * stride, i);

  int st = 0;
  // Warp-uniform loop bound (shuffles need the whole warp); tokens past t_end are masked per worker.
  for (int tw = tw0; tw < t_end; tw += stride) {
    issue(tw + (S - 1) * stride, st == 0 ? S - 1 : st - 1);  // refill the stage consumed last step
    async_wait<S - 1>();                                       // this step's group has landed
    const uint4* src = ring + st * PP::kStageVecs;
    st = st + 1 == S ? 0 : st + 1;

    bool valid[U];
    float sc[U][QG];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      valid[u] = lanes::ws_token(tw, sg, u, U) < t_end;
      float kf[EPL];
#pragma unroll
      for (int n = 0; n < NV; ++n) expand16<C>(src[PS.ring_index(kWarpSize, NV, u, 0, lane, n)], kf + n * VEC);
#pragma unroll
      for (int j = 0; j < QG; ++j) {
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) dot = fmaf(q[j][e], kf[e], dot);
#pragma unroll
        for (int mk = 1; mk < SP.dot_reduce_end(); mk <<= 1) dot += shfl_xor(dot, mk);
        sc[u][j] = valid[u] ? dot * qk_scale : -INFINITY;
      }
    }
    // Online softmax with a normalised accumulator, as in the basic form.
    float pr[U][QG];
#pragma unroll
    for (int j = 0; j < QG; ++j) {
      float cmax = sc[0][j];
#pragma unroll
      for (int u = 1; u < U; ++u) cmax = fmaxf(cmax, sc[u][j]);
      const float mn = fmaxf(m[j], cmax);
      const float corr = (mn == -INFINITY) ? 1.f : fast_exp2(m[j] - mn);
      float psum = 0.f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        pr[u][j] = valid[u] ? fast_exp2(sc[u][j] - mn) : 0.f;
        psum += pr[u][j];
      }
      const float ln = fmaf(l[j], corr, psum);
      const float inv = (ln == 0.f) ? 0.f : fast_rcp(ln);
      const float keep = l[j] * corr * inv;
#pragma unroll
      for (int u = 0; u < U; ++u) pr[u][j] *= inv;
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc[j][e] *= keep;
      l[j] = ln;
      m[j] = mn;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[EPL];
#pragma unroll
      for (int n = 0; n < NV; ++n) expand16<C>(src[PS.ring_index(kWarpSize, NV, u, 1, lane, n)], vf + n * VEC);
#pragma unroll
      for (int j = 0; j < QG; ++j)
#pragma unroll
        for (int e = 0; e < EPL; ++e) acc[j][e] = fmaf(pr[u][j], vf[e], acc[j][e]);
    }
  }
  async_wait<0>();  // no copy may land in the ring once it is reused below

  // The ring is idle now: it holds the merge (every warp has passed its last wait before the barrier).
  __syncthreads();
  merge_and_store<T, C, D, QG, EPL, true>(p, reinterpret_cast<float*>(ws_smem), m, l, acc, s, g, part, num_parts, tile_first);
}

template <class T, class C, int D, int QG>
LaunchResult launch_one(const WarpSplitParams& p, int num_seqs, Stream stream, bool pipelined) {
  const dim3 grid(p.num_kv_heads * p.sc.max_parts * p.tiles, num_seqs);
  int threads = 0;
  if (LaunchResult r = block_threads(&threads); !r.ok()) return r;
  if (!pipelined) {
    // The basic form runs with the single-instruction exp2 and reciprocal; PACHECK_WARP_SPLIT_FAST=0 selects
    // the accurate ones for gpu.warp_split (A/B runs; qg = 1 and f32/f16/bf16 caches only, to bound the
    // instantiations: fp8 caches always run the fast ones).
    const char* fast = std::getenv("PACHECK_WARP_SPLIT_FAST");
    constexpr int L = basic_min_loads(QG, sizeof(C));
    if constexpr (QG == 1 && !kIsFp8<C>) {
      if (fast && fast[0] == '0') {
        warp_split_basic_kernel<T, C, D, QG, false, L><<<grid, threads, 0, stream>>>(p);
        return check_launch("warp split");
      }
    }
    warp_split_basic_kernel<T, C, D, QG, true, L><<<grid, threads, 0, stream>>>(p);
    return check_launch("warp split");
  }
  // The device's width, not kWarpSize: see Pipe.
  const int smem = lanes::pipe_smem(warp_size(), D, sizeof(C), QG, kWarps).bytes;
  auto* kernel = warp_split_pipelined_kernel<T, C, D, QG>;
  if (smem > 48 * 1024) {
    const Error e = allow_dynamic_smem(kernel, smem);
    if (e != kSuccess) return runtime_failure("warp split: " + std::to_string(smem) + " bytes of shared memory", e);
  }
  kernel<<<grid, threads, smem, stream>>>(p);
  return check_launch("warp split");
}

template <class T, class C, int D>
LaunchResult dispatch_qg(const WarpSplitParams& p, int qg, int num_seqs, Stream stream, bool pipelined) {
  switch (qg) {
    case 1: return launch_one<T, C, D, 1>(p, num_seqs, stream, pipelined);
    case 2: return launch_one<T, C, D, 2>(p, num_seqs, stream, pipelined);
    case 4: return launch_one<T, C, D, 4>(p, num_seqs, stream, pipelined);
    default:
      if constexpr (sizeof(C) == 1) return {"fp8 caches take at most 4 query heads per tile", false};  // launcher caps qg
      else return launch_one<T, C, D, 8>(p, num_seqs, stream, pipelined);
  }
}

template <class T, class C>
LaunchResult dispatch(const WarpSplitParams& p, const pacheck_kernel_args& a, int qg, Stream stream,
                      bool pipelined) {
  LaunchResult r;
  switch (a.head_size) {
    case 64: r = dispatch_qg<T, C, 64>(p, qg, a.num_seqs, stream, pipelined); break;
    case 128: r = dispatch_qg<T, C, 128>(p, qg, a.num_seqs, stream, pipelined); break;
    case 256: r = dispatch_qg<T, C, 256>(p, qg, a.num_seqs, stream, pipelined); break;
    default: return {"head_size " + std::to_string(a.head_size) + " not in {64,128,256}"};
  }
  if (!r.ok() || p.sc.max_parts == 1) return r;
  return launch_merge<T>(p.sc, a, stream);
}

}  // namespace

int warp_split_partition_size() { return g_partition_size.load(); }
void set_warp_split_partition_size(int tokens) { g_partition_size.store(std::max(tokens, 1)); }

LaunchResult launch_warp_split(const pacheck_kernel_args& a, bool gqa_fused) {
  const char* who = gqa_fused ? "gpu.warp_split_gqa" : "gpu.warp_split";
  auto fail = [&](const std::string& m) { return LaunchResult{std::string(who) + ": " + m, false}; };
  if (a.struct_size < sizeof(pacheck_kernel_args)) return fail("pacheck_kernel_args from an older ABI");
  if (a.layout != PACHECK_LAYOUT_NHD) return fail("layout must be nhd");
  if (const std::string why = dtype_problem(a); !why.empty()) return fail(why);
  if (a.head_size != 64 && a.head_size != 128 && a.head_size != 256)
    return fail("head_size " + std::to_string(a.head_size) + " not in {64,128,256}");
  if (a.block_size <= 0) return fail("block_size must be positive");
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) return fail("num_heads must be a multiple of num_kv_heads");
  if (a.num_seqs <= 0) return {};
  int esize = 0;
  switch (a.kv_dtype) {
    case PACHECK_DTYPE_F32: esize = 4; break;
    case PACHECK_DTYPE_F16: case PACHECK_DTYPE_BF16: esize = 2; break;
    case PACHECK_DTYPE_FP8_E4M3FN: case PACHECK_DTYPE_FP8_E4M3FNUZ: case PACHECK_DTYPE_FP8_E5M2: esize = 1; break;
    default:
      return fail("kv_dtype " + std::to_string(static_cast<int>(a.kv_dtype)) +
                  " not in {f32,f16,bf16,fp8_e4m3fn,fp8_e4m3fnuz,fp8_e5m2}");
  }
  const int vec = 16 / esize;
  if (a.k_strides[3] != 1 || a.v_strides[3] != 1) return fail("the innermost cache stride must be 1");
  for (int i = 0; i < 3; ++i)
    if (a.k_strides[i] % vec != 0 || a.v_strides[i] % vec != 0) return fail("cache rows must be 16-byte aligned");
  // NhdRows addresses rows with 32-bit byte strides (block_tables entries are non-negative int32).
  for (const std::int64_t st : {a.k_strides[0], a.v_strides[0]})
    if (st < 0 || st * esize > UINT32_MAX) return fail("block strides must be non-negative and under 4 GiB");
  for (const std::int64_t st : {a.k_strides[1], a.v_strides[1]})
    if (st < 0 || st * esize * std::max(a.block_size - 1, 1) > INT32_MAX)
      return fail("slot strides must be non-negative and a block's slot offsets under 2 GiB");
  if ((reinterpret_cast<std::uintptr_t>(a.key_cache) | reinterpret_cast<std::uintptr_t>(a.value_cache)) % 16 != 0)
    return fail("key_cache and value_cache must be 16-byte aligned");

  WarpSplitParams p{};
  p.q = a.query; p.k = a.key_cache; p.v = a.value_cache; p.out = a.out;
  p.q_stride_seq = a.q_stride_seq; p.q_stride_head = a.q_stride_head;
  p.out_stride_seq = a.out_stride_seq; p.out_stride_head = a.out_stride_head;
  for (int i = 0; i < 5; ++i) { p.ks[i] = a.k_strides[i]; p.vs[i] = a.v_strides[i]; }
  p.block_tables = a.block_tables; p.bt_stride = a.block_tables_stride; p.seq_lens = a.seq_lens;
  p.num_heads = a.num_heads; p.num_kv_heads = a.num_kv_heads;
  p.ratio = a.num_heads / a.num_kv_heads;
  p.block_size = a.block_size;
  p.block_div = lanes::fast_div(static_cast<unsigned>(a.block_size));
  // Dequantisation scales: a per-tensor K scale is folded here (exactly as before for every dtype); a
  // per-KV-head one (the scalar is NaN then) is multiplied in by the kernel for its head g. V: the kernel
  // scales the finished P.V row by v_scales[g] or the scalar.
  p.k_scales = a.k_scales_per_head;
  p.v_scales = a.v_scales_per_head;
  p.scale_log2 = a.k_scales_per_head ? a.scale * kLog2e : a.scale * a.k_scale * kLog2e;
  p.v_scale = a.v_scale;

  // Query heads per tile of gpu.warp_split_gqa: up to 8, but 4 for fp8 caches, where a lane holds 16
  // elements of a row (8 at 16-bit) and 8 heads of query and accumulator would spill registers.
  const bool fp8_cache = esize == 1;
  int qg = 1;
  if (gqa_fused) {
    while (qg < p.ratio && qg < (fp8_cache ? 4 : 8)) qg *= 2;
  }
  // gpu.warp_split (qg = 1): the warps of a block serve up to kWarps query heads of one group (a slot per
  // head) so their repeated reads of a row can hit L1 (head_slots; the slots must divide the ratio).
  // PACHECK_WARP_SPLIT_SLOTS=1, 2 or 4 forces the slot count (A/B runs; still capped to divide the ratio).
  const bool pipelined = use_pipeline(gqa_fused);
  p.head_slots = 1;
  if (!gqa_fused) {
    int want = kDefaultHeadSlots;
    if (const char* v = std::getenv("PACHECK_WARP_SPLIT_SLOTS")) want = std::atoi(v);
    for (int hs : {4, 2})
      if (p.head_slots == 1 && hs <= want && p.ratio % hs == 0) p.head_slots = hs;
  }
  p.tiles = ceil_div(p.ratio, qg * p.head_slots);

  const int P = warp_split_partition_size();
  const int max_tokens = a.max_blocks_per_seq * a.block_size;  // host bound on seq_lens (device memory)
  p.sc.partition_size = P;
  p.sc.max_parts = std::max(1, ceil_div(max_tokens, P));
  const Stream stream = static_cast<Stream>(a.stream);
  void* scratch = nullptr;
  if (p.sc.max_parts > 1) {
    LaunchResult r = alloc_scratch(p.sc, a.num_seqs, a.num_heads, a.head_size, stream, &scratch);
    if (!r.ok()) return {std::string(who) + ": " + r.error, r.fatal};
  }
  LaunchResult r = for_element_types(a, [&](auto q, auto c) {
    return dispatch<typename decltype(q)::type, typename decltype(c)::type>(p, a, qg, stream, pipelined);
  });
  return finish_launch(r, scratch, stream, who);
}

}  // namespace pacheck::gpu
