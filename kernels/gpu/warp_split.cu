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

#include "kernels/gpu/warp_split.cuh"

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


// The basic form: K/V loaded into registers, one step in flight per worker.
// T: query/output element type; C: cache element type (T, or an fp8 type with a 16-bit T); L: minimum
// 16-byte loads per lane and row (basic_min_loads).
template <class T, class C, int D, int QG, bool kFast, int L>
__global__ void __launch_bounds__(kWarps * kWarpSize) warp_split_basic_kernel(WarpSplitParams p) {
  using RS = RowSplit<C, D, L>;
  constexpr lanes::RowSplit SP = RS::kSplit;
  constexpr int EPL = RS::kEpl, NV = RS::kNv, VEC = RS::kVec;
  constexpr int U = lanes::ws_unroll(QG);  // tokens per worker per step (2 * NV loads each, all in flight)

  WsPlace w;
  if (!ws_place<RS, QG>(p, w)) return;  // a partition past this sequence's end: nothing to write

  float q[QG][EPL];
  load_queries<T, QG, EPL>(p, w.s, w.g, w.slot_first, w.d0, q);
  // K dequantisation scale of KV head g folded into the logit scale (host-folded when per tensor).
  const float qk_scale = p.k_scales ? p.scale_log2 * p.k_scales[w.g] : p.scale_log2;
  float m[QG], l[QG], acc[QG][EPL];
  ws_clear(m, l, acc);

  const NhdRows<C> rows(p, w.s, w.g, w.d0);
  const bool one_block = lanes::ws_step_in_one_block(p.block_size, w.P, U);

  const int stride = lanes::ws_step_stride(w.nrw, U);
  const int tw0 = lanes::ws_first_step(SP, w.t_begin, w.wt, U);
  // With one block per worker step, the block of the next step is read while this one computes, so the
  // block-table load is off the critical path of the K/V loads.
  std::uint32_t next_phys = 0, next_slot = 0;
  if (one_block) rows.locate(p, min(lanes::ws_worker_first(tw0, w.sg, U), w.t_end - 1), &next_phys, &next_slot);

  // The loop bound is warp-uniform (shuffles need the whole warp); tokens past t_end are masked per worker.
  for (int tw = tw0; tw < w.t_end; tw += stride) {
    uint4 kr[U][NV], vr[U][NV];
    bool valid[U];
    const int t0 = lanes::ws_worker_first(tw, w.sg, U);
    const std::uint32_t phys = next_phys, slot = next_slot;
    if (one_block) rows.locate(p, min(t0 + stride, w.t_end - 1), &next_phys, &next_slot);
    // A worker past the partition's end re-reads the partition's last token, masked below (its
    // probability is exactly 0): every load is issued without a branch and none goes past seq_len.
    const C* kp[U];
    const C* vp[U];
    rows.template step<U>(p, one_block, t0, w.t_end, phys, slot, kp, vp);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      valid[u] = t0 + u < w.t_end;
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
      ws_token_logits<RS, QG>(q, kf, valid[u], qk_scale, sc[u]);
    }

    // Online softmax, one rescale per step. acc stays normalised (the softmax-weighted mean of the V rows
    // seen so far): acc' = (acc * l * corr + sum p v) / l', at the same per-element cost as the unnormalised
    // form, and it cannot overflow fp32 for V near the dtype's largest finite value. A worker with no valid
    // token yet keeps m = -inf and l = 0 and must not form exp2(-inf - -inf).
    // Written out in each form rather than shared: as a function (even force-inlined) it made hipcc spill
    // registers in 28 gfx1030 and 2 gfx90a instantiations that spill nothing written this way.
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
      ws_add_pv(pr[u], vf, acc);
    }
  }

  __shared__ __align__(16) float merge_s[kWarps * QG * (D + 2)];
  merge_and_store<T, C, D, QG, EPL, kFast, L>(p, merge_s, m, l, acc, w.s, w.g, w.part, w.num_parts, w.tile_first);
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

  WsPlace w;
  if (!ws_place<RS, QG>(p, w)) return;  // a partition past this sequence's end: nothing to write

  float q[QG][EPL];
  load_queries<T, QG, EPL>(p, w.s, w.g, w.slot_first, w.d0, q);
  // K dequantisation scale of KV head g folded into the logit scale (host-folded when per tensor).
  const float qk_scale = p.k_scales ? p.scale_log2 * p.k_scales[w.g] : p.scale_log2;
  float m[QG], l[QG], acc[QG][EPL];
  ws_clear(m, l, acc);

  extern __shared__ __align__(16) unsigned char ws_smem[];
  uint4* ring = reinterpret_cast<uint4*>(ws_smem) + w.warp * S * PP::kStageVecs;
  const NhdRows<C> rows(p, w.s, w.g, w.d0);
  const int stride = lanes::ws_step_stride(w.nrw, U);
  const int lane = w.lane, t_end = w.t_end;

  const bool one_block = lanes::ws_step_in_one_block(p.block_size, w.P, U);

  // Issues one step's copies (tokens lanes::ws_token(tw, sg, u, U)) into ring stage `st` and commits them
  // as one group. Tokens at or past t_end are zero-filled without reading memory, so every step commits a
  // group and the wait counts below hold.
  auto issue = [&](int tw, int st) {
    uint4* dst = ring + st * PP::kStageVecs;
    const int t0 = lanes::ws_worker_first(tw, w.sg, U);
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

  const int tw0 = lanes::ws_first_step(SP, w.t_begin, w.wt, U);
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
      valid[u] = lanes::ws_token(tw, w.sg, u, U) < t_end;
      float kf[EPL];
#pragma unroll
      for (int n = 0; n < NV; ++n) expand16<C>(src[PS.ring_index(kWarpSize, NV, u, 0, lane, n)], kf + n * VEC);
      ws_token_logits<RS, QG>(q, kf, valid[u], qk_scale, sc[u]);
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
      ws_add_pv(pr[u], vf, acc);
    }
  }
  async_wait<0>();  // no copy may land in the ring once it is reused below

  // The ring is idle now: it holds the merge (every warp has passed its last wait before the barrier).
  __syncthreads();
  merge_and_store<T, C, D, QG, EPL, true>(p, reinterpret_cast<float*>(ws_smem), m, l, acc, w.s, w.g, w.part, w.num_parts,
                                         w.tile_first);
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
  if (const std::string why = common_launch_problem(a, PACHECK_LAYOUT_NHD, "nhd"); !why.empty()) return fail(why);
  if (a.block_size <= 0) return fail("block_size must be positive");
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) return fail("num_heads must be a multiple of num_kv_heads");
  if (a.k_scales_per_slot || a.v_scales_per_slot)
    return fail("per-slot scale tables: this kernel reads per-tensor and per-KV-head scales only");
  if (a.num_seqs <= 0) return {};
  int esize = 0;
  if (const std::string why = kv_element_bytes(a, &esize); !why.empty()) return fail(why);
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
  set_decode_params(p, a);
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
