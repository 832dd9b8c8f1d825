// gpu.paged_v1, gpu.paged_v1_tail_fault, gpu.paged_v1_half_products, gpu.slot_scale_unmasked and gpu.paged_v2:
// paged-attention decode over the `vllm` layout (and, but for half_products, the `aiter` layout),
// after the design of vLLM's csrc/attention paged_attention_v1/v2 kernels (written here from that design,
// not from its code).
//
// Element types: query and output T (f32, f16 or bf16); cache C, either T itself or, with a bf16/f16 T, one
// of the fp8 encodings (kernels/gpu/fp8.hpp: e4m3fn, e4m3fnuz, e5m2), decoded to fp32 right after the
// 16-byte loads (16 codes per load). The dequantisation scale of KV head g (k_scales_per_head[g] when the
// array is given, else the scalar k_scale; likewise V) multiplies every element; as a product in fp32 it is
// applied to q.k (folded into the softmax scale) and to the finished P.V row, which differs from scaling
// each element by fp32 rounding only (docs/FP8.md). f32/f16/bf16 caches have scale 1: bitwise as before.
// Per-slot scale tables (PACHECK_SCALE_FORM_PER_SLOT, seed 002: AITER's [num_blocks, num_kv_heads,
// block_size] fp32 by physical block id) vary per token, so they cannot be folded: the K entry of a slot
// multiplies its q.k, read only for slots that take part (before seq_len, inside the window); the V entry
// is folded into the token's probability in step 3, again only for slots that take part. An unwritten
// slot's entry (NaN under the `scales` fault) thus never meets the output, not even as 0 x NaN.
//
// Layout (include/pacheck/kernel_abi.h, PACHECK_LAYOUT_VLLM), x = 16 bytes / cache element size (16 for fp8):
//   query       [num_seqs, num_heads, head_size]                 (strides from the args)
//   key_cache   [num_blocks, num_kv_heads, head_size / x, block_size, x]
//   value_cache [num_blocks, num_kv_heads, head_size, block_size]
//   out         [num_seqs, num_heads, head_size]                 (strides from the args)
// The `aiter` layout (PACHECK_LAYOUT_AITER, AMD AITER's pa_fwd_asm fp8 cache) has the same key_cache and V
// shuffled as [num_blocks, num_kv_heads, block_size / 16, head_size, 16] (block_size a multiple of 16): the
// 16 slots of a group are contiguous per head-dim row, so the 16-byte V vectors of step 3 (16 fp8, 8 16-bit
// or 4 f32 tokens, starting at a multiple of their length) are the same loads at value_offset(aiter, ...).
//
// One thread block (kWarps warps) per (query head, sequence, partition); v1 has one partition per sequence.
//  1. q . K: each warp takes whole KV blocks in turn. Within a block a "thread group" of
//     max(kWarpSize / block_size, 1) lanes shares one token and reads its key 16 bytes (one x-vector) at a
//     time; lanes are ordered token-fastest so a warp's loads of one x-chunk are contiguous. Logits of
//     slots at or past seq_len are stored as -inf: the K tail may hold NaN and is never used.
//  2. Softmax over the partition's logits in shared memory (block max, exp2, block sum, then p / sum;
//     masked slots get p = 0 exactly).
//  3. P . V: V rows are contiguous over tokens, so each lane loads 16-byte vectors of consecutive tokens of
//     one head-dim row (kVec16<C> tokens) and multiplies them with the matching probabilities. The final
//     block's vectors cover slots past seq_len; their lanes are zeroed before the multiply (the fix of
//     vLLM issue 641, and of the ROCm kernel in PR 53856): p is 0 there, but 0 * NaN = NaN. The
//     ZERO_V_TAIL = false instantiation omits exactly that zeroing: gpu.paged_v1_tail_fault.
//     With `half_products` (gpu.paged_v1_half_products, an honest design of issue 16's panel) a 16-bit T
//     rounds each probability to T and each product p x v to T before the fp32 sum, as vLLM's CUDA kernel
//     does with half2/bfloat162 multiplies in its dot(): the exact fp32 product of two 16-bit values
//     rounded once to T is what __hmul gives. fp8 codes decode exactly into either 16-bit T.
//  4. Warps' partial rows are summed through shared memory in a fixed order.
// Accumulation is fp32 throughout; logits are kept as scale * log2(e) * q.k so the exponentials are exp2f.
// Attention variants (kernel_abi.h, issue 19): with a soft cap or ALiBi slopes step 1 forms the logit in
// natural units (scale * q.k, then c tanh(s / c), then + slope_h (j - (seq_len - 1))) before converting it;
// v1 also masks keys before the sliding window's edge like the tail (p = 0; they are still read, so their
// V must be finite, as written slots are) and adds exp2(sink - max) of a sink logit to the exp-sum. v2's
// split-KV merge takes neither (the launcher refuses them; gpu_kernels.cpp declines such cells).
#include <algorithm>
#include <string>

#include "kernels/gpu/attention_common.cuh"
#include "kernels/gpu/fp8.hpp"
#include "paging/layout.hpp"

namespace pacheck::gpu {
namespace {

/// The kernel's parameters: the shared DecodeParams (query, caches, out, block_tables, seq_lens and their
/// strides, head counts), then the fields of this design.
struct PagedParams : DecodeParams {
  int block_size;
  pacheck_layout layout;  ///< PACHECK_LAYOUT_VLLM or PACHECK_LAYOUT_AITER: the same K; V [D, B] or [B/16, D, 16]
  float scale_log2;  ///< scale * log2(e); the kernel multiplies it by the K scale of its KV head
  float k_scale, v_scale;                        ///< per-tensor scales (NaN when the arrays are given)
  const float* k_scales_per_head;                ///< [num_kv_heads] device fp32, or null: use k_scale
  const float* v_scales_per_head;                ///< [num_kv_heads] device fp32, or null: use v_scale
  /// Per-slot tables [num_blocks, num_kv_heads, block_size] device fp32 by physical block id
  /// (slot_scale_offset), or null; each replaces the K (V) scale above, whose scalar is NaN then.
  const float* k_scales_per_slot;
  const float* v_scales_per_slot;
  /// gpu.slot_scale_unmasked (negative control): the V codes past seq_len are zeroed, but every slot's
  /// per-slot V scale of the final block is folded into its p (0 x NaN from an unwritten slot's entry).
  bool scale_unmasked;
  int partition_size;  ///< tokens per partition, a multiple of block_size; v1: at least the longest context
  int logits_capacity; ///< floats of shared memory for one partition's logits
  bool split;          ///< v2: write partials of multi-partition sequences to scratch
  bool half_products;  ///< 16-bit T: p and each p x v product rounded to T before the fp32 sum (step 3)
  SplitScratch sc;
  // Attention variants (kernel_abi.h, "Attention variants"; issue 19). v1 takes all four; v2 (split) takes
  // the soft cap and ALiBi only, whose terms live in step 1 (the launcher refuses a window or sinks there).
  bool variant_logits;         ///< a soft cap or ALiBi slopes: step 1 forms the logit in natural units
  float scale;                 ///< the softmax scale (natural units), for variant_logits
  float soft_cap;              ///< c > 0: s = c tanh(s / c); 0 = none
  const float* alibi_slopes;   ///< [num_heads] device fp32, or null
  const float* sinks;          ///< [num_heads] device fp32, or null (v1 only)
  int sliding_window;          ///< W > 0: keys before seq_len - W get p = 0 (v1 only); 0 = none
};

/// Shared memory floats besides the logits: q [D], reductions [kWarps] x 2, warp rows [kWarps, D].
__host__ __device__ constexpr int fixed_smem_floats(int head_size) { return head_size + 2 * kWarps + kWarps * head_size; }

// T: query/output element type; C: cache element type (T, or an fp8 type with a 16-bit T).
// VPR: 16-byte V vectors per row per lane-row (1, 2 or 4; always 1 for fp8): a warp step covers CH = VPR * kVec16<C> tokens
// of a block and kWarpSize / VPR head-dim rows, each lane holding D * VPR / kWarpSize row accumulators.
// Which lane owns which token and element in steps 1 and 3 is lanes::paged_qk / lanes::paged_pv
// (lane_math.hpp, tested for wave32 and wave64 in tests/test_lane_math.cpp).
template <class T, class C, int D, int VPR, bool ZERO_V_TAIL>
__global__ void __launch_bounds__(kWarps * kWarpSize) paged_attention_kernel(PagedParams p) {
  constexpr lanes::PagedPv PV = lanes::paged_pv(kWarpSize, D, sizeof(C), VPR);
  constexpr int X = kVec16<C>;              // elements per x-vector of the key cache (16 bytes)
  constexpr int NCH = D / X;                // x-vectors per key row
  constexpr int VV = PV.vec_tokens;         // tokens per V vector (16 bytes)
  constexpr int CH = PV.chunk_tokens;       // tokens of a block one warp step covers in P . V
  constexpr int ROWS = PV.rows_per_lane;    // accumulators per lane
  static_assert(D % X == 0 && lanes::paged_pv_exact(kWarpSize, D, sizeof(C), VPR),
                "head_size must split evenly over lanes");
  // Fails to compile for the wave64 target if a split is ever computed for a fixed width of 32.
  static_assert(PV.rows_per_step * PV.vpr == kWarpSize, "the P.V split must span exactly one warp of this target");

  const int h = blockIdx.x, s = blockIdx.y, part = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int B = p.block_size;
  const int seq_len = p.seq_lens[s];
  const int num_parts = ceil_div(seq_len, p.partition_size);
  if (part >= num_parts) return;  // a partition past this sequence's end: nothing to write
  const int g = h / (p.num_heads / p.num_kv_heads);
  // Dequantisation scales of KV head g: the per-head arrays replace the scalars (which are NaN then); a
  // per-slot table replaces both (each token's own scale, applied in steps 1 and 3), and the head's is 1.
  const float k_head = p.k_scales_per_slot ? 1.f : (p.k_scales_per_head ? p.k_scales_per_head[g] : p.k_scale);
  const float qk_scale = p.scale_log2 * k_head;
  const float v_scale = p.v_scales_per_slot ? 1.f : (p.v_scales_per_head ? p.v_scales_per_head[g] : p.v_scale);
  const int tok_begin = part * p.partition_size;  // a multiple of B
  const int tok_end = min(tok_begin + p.partition_size, seq_len);
  // The sliding window's first key (v1): earlier keys are masked like the tail (their p is exactly 0).
  const int win_first = p.sliding_window > 0 && seq_len > p.sliding_window ? seq_len - p.sliding_window : 0;
  const int blk_begin = tok_begin / B, blk_end = ceil_div(tok_end, B);
  const int n_slots = (blk_end - blk_begin) * B;  // logits incl. the final block's tail

  extern __shared__ float smem[];
  float* q_s = smem;                   // [D]
  float* red = q_s + D;                // [2 * kWarps]
  float* rows_s = red + 2 * kWarps;    // [kWarps, D]
  float* logits = rows_s + kWarps * D; // [n_slots]

  const T* q = static_cast<const T*>(p.q) + s * p.q_stride_seq + h * p.q_stride_head;
  for (int d = tid; d < D; d += blockDim.x) q_s[d] = Elem<T>::to_float(q[d]);
  __syncthreads();

  const C* kc = static_cast<const C*>(p.k);
  const C* vc = static_cast<const C*>(p.v);
  const std::int32_t* bt = p.block_tables + s * p.bt_stride;

  // 1. q . K for every slot of the partition's blocks.
  const lanes::PagedQk qk = lanes::paged_qk(kWarpSize, B);
  const int tg = qk.group;              // lanes per token
  const int tpp = qk.tokens_per_pass;   // tokens per pass (= min(B, kWarpSize))
  const int tg_lane = qk.group_lane(lane), tok_in_pass = qk.token_in_pass(lane);
  float qk_max = -INFINITY;
  for (int b = blk_begin + warp; b < blk_end; b += kWarps) {
    const std::int64_t phys = bt[b];
    for (int pass = 0; pass < B; pass += tpp) {
      const int slot = pass + tok_in_pass;
      float dot = 0.f;
      for (int c = tg_lane; c < NCH; c += tg) {
        float kf[X];
        expand16<C>(load16(kc + key_offset(PACHECK_LAYOUT_VLLM, p.ks, X, phys, g, slot, c * X)), kf);
#pragma unroll
        for (int j = 0; j < X; ++j) dot = fmaf(q_s[c * X + j], kf[j], dot);
      }
      for (int m = qk.reduce_first(); m < qk.reduce_end(); m <<= 1) dot += shfl_xor(dot, m);
      const int tok = b * B + slot;
      if (tg_lane == 0) {
        const bool valid = tok < tok_end && tok >= win_first;
        // The slot's own K scale (per-slot table), read only for a slot that takes part: the entry of an
        // unwritten slot is arbitrary (NaN under the `scales` fault) and is never loaded. 1 otherwise, so
        // the products below are bitwise those without a table.
        const float ks = valid && p.k_scales_per_slot
                             ? p.k_scales_per_slot[slot_scale_offset(phys, p.num_kv_heads, B, g, slot)]
                             : 1.f;
        float logit = valid ? dot * qk_scale * ks : -INFINITY;
        if (valid && p.variant_logits) {
          // scale * k scale * q.k in natural units, then the soft cap and ALiBi term, then log2 units.
          float x = dot * (p.scale * k_head * ks);
          if (p.soft_cap > 0.f) x = p.soft_cap * tanhf(x / p.soft_cap);
          if (p.alibi_slopes) x += p.alibi_slopes[h] * static_cast<float>(tok - (seq_len - 1));
          logit = x * kLog2e;
        }
        logits[tok - tok_begin] = logit;
        if (valid) qk_max = nan_max(qk_max, logit);
      }
    }
  }
  // A sink logit (v1) joins the max and, below, the exp-sum: it takes mass but has no V row.
  const float sink2 = p.sinks ? p.sinks[h] * kLog2e : -INFINITY;
  const float gmax = nan_max(block_max(qk_max, red), sink2);  // its barrier also publishes `logits`

  // 2. p = exp2(logit - max) for slots before seq_len, exactly 0 for the tail.
  float part_sum = 0.f;
  for (int i = tid; i < n_slots; i += blockDim.x) {
    const float e = (tok_begin + i < tok_end) ? exp2f(logits[i] - gmax) : 0.f;
    logits[i] = e;
    part_sum += e;
  }
  const float exp_sum = block_sum(part_sum, red + kWarps) + (p.sinks ? exp2f(sink2 - gmax) : 0.f);
  // Normalise before P . V (as vLLM does): the output is then a convex combination of V rows and cannot
  // overflow fp32 even when V is near the dtype's largest finite value.
  const float inv_sum = 1.f / exp_sum;
  for (int i = tid; i < n_slots; i += blockDim.x) logits[i] *= inv_sum;
  __syncthreads();

  // 3. P . V.
  const int vec = PV.vec(lane), row0 = PV.row0(lane);
  // Per-slot V scales (fp8 with a table): token t's V row is code x its slot's scale s_t, and p_t x (code x
  // s_t) is formed as (p_t x s_t) x code, the scale folded into the token's probability (one multiply per
  // token, not per element, and no extra registers). The honest kernels (ZERO_V_TAIL) fold it only for the
  // lanes that take part and never load a masked lane's entry (its p is exactly 0 and its code is zeroed
  // below). The tail-fault twin and the slot_scale_unmasked control fold every lane's entry, masked or
  // not: a NaN/Inf entry of an unwritten slot gives p x s = 0 x NaN = NaN, whatever the code.
  const bool v_slot = p.v_scales_per_slot != nullptr;
  const bool fold_masked = !ZERO_V_TAIL || p.scale_unmasked;
  // value_offset is linear in the head-dim row d in both layouts (d x v_strides[2] in vllm, d x v_strides[3]
  // in aiter): a vector's address is its row-0 offset plus d times the offset of row 1 at the origin, the
  // layout's switch taken once per vector rather than per row (tests/test_gpu_aiter.cpp checks it).
  const std::int64_t v_row_stride = value_offset(p.layout, p.vs, 0, 0, 0, 1);
  float acc[ROWS];
#pragma unroll
  for (int i = 0; i < ROWS; ++i) acc[i] = 0.f;
  for (int b = blk_begin + warp; b < blk_end; b += kWarps) {
    const std::int64_t phys = bt[b];
    for (int c0 = 0; c0 < B; c0 += CH) {
      const int slot = PV.slot_at(c0, vec);
      const int tok = b * B + slot;  // first token of this lane's vector
      float pv[VV];
#pragma unroll
      for (int j = 0; j < VV; ++j) pv[j] = logits[tok - tok_begin + j];
      const std::int64_t v_base = value_offset(p.layout, p.vs, phys, g, slot, 0);
      if constexpr (kIsFp8<C>) {  // per-slot tables come with fp8 caches only (the launcher checks)
        if (v_slot) {
          const float* vrow = p.v_scales_per_slot + slot_scale_offset(phys, p.num_kv_heads, B, g, slot);
#pragma unroll
          for (int j = 0; j < VV; ++j) {
            const bool masked = tok + j >= tok_end || tok + j < win_first;
            if (fold_masked || !masked) pv[j] *= vrow[j];
          }
        }
      }
#pragma unroll
      for (int i = 0; i < ROWS; ++i) {
        const int d = PV.row_at(row0, i);
        float vf[VV];
        // aiter's V groups 16 slots per head-dim row ([B/16, D, 16]): a vector of VV <= 16 tokens starting at
        // a multiple of VV lies in one group, contiguous as in vllm's [D, B] rows (tests/test_gpu_aiter.cpp).
        expand16<C>(load16(vc + v_base + d * v_row_stride), vf);
        if constexpr (ZERO_V_TAIL) {
          // The tail past seq_len, and (v1 with a sliding window) the keys before the window's edge: p is 0
          // there, but the slots may hold NaN (the `window` fault region).
          if (tok + VV > tok_end || tok < win_first) {
#pragma unroll
            for (int j = 0; j < VV; ++j)
              if (tok + j >= tok_end || tok + j < win_first) vf[j] = 0.f;
          }
        }
        float sv = 0.f;
        if (sizeof(T) == 2 && p.half_products) {
#pragma unroll
          for (int j = 0; j < VV; ++j) {
            const float ph = Elem<T>::to_float(Elem<T>::from_float(pv[j]));
            sv += Elem<T>::to_float(Elem<T>::from_float(ph * vf[j]));
          }
        } else {
#pragma unroll
          for (int j = 0; j < VV; ++j) sv = fmaf(pv[j], vf[j], sv);
        }
        acc[i] += sv;
      }
    }
  }
  // Lanes with the same row0 hold the same rows for different token vectors: combine them.
#pragma unroll
  for (int i = 0; i < ROWS; ++i)
    for (int m = 1; m < PV.reduce_end(); m <<= 1) acc[i] += shfl_xor(acc[i], m);
  if (vec == 0) {
#pragma unroll
    for (int i = 0; i < ROWS; ++i) rows_s[warp * D + PV.row_at(row0, i)] = acc[i];
  }
  __syncthreads();

  // 4. Sum the warps' rows in a fixed order.
  const bool to_scratch = p.split && num_parts > 1;
  const std::int64_t srow = (static_cast<std::int64_t>(s) * p.num_heads + h) * p.sc.max_parts + part;
  T* out = static_cast<T*>(p.out) + s * p.out_stride_seq + h * p.out_stride_head;
  for (int d = tid; d < D; d += blockDim.x) {
    float o = rows_s[d];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) o += rows_s[w * D + d];
    o *= v_scale;
    if (to_scratch) p.sc.tmp_out[srow * D + d] = o;
    else out[d] = Elem<T>::from_float(o);
  }
  if (to_scratch && tid == 0) {
    p.sc.max_logits[srow] = gmax;
    p.sc.exp_sums[srow] = exp_sum;
  }
}

template <class T, class C, int D, int VPR, bool ZERO>
LaunchResult launch_one(const PagedParams& p, int num_seqs, int max_parts, Stream stream) {
  auto* kernel = paged_attention_kernel<T, C, D, VPR, ZERO>;
  const int smem = (fixed_smem_floats(D) + p.logits_capacity) * static_cast<int>(sizeof(float));
  if (smem > 48 * 1024) {
    const Error e = allow_dynamic_smem(kernel, smem);
    if (e != kSuccess) return runtime_failure("paged attention: " + std::to_string(smem) + " bytes of shared memory", e);
  }
  int threads = 0;
  if (LaunchResult r = block_threads(&threads); !r.ok()) return r;
  const dim3 grid(p.num_heads, num_seqs, max_parts);
  kernel<<<grid, threads, smem, stream>>>(p);
  return check_launch(ZERO ? "paged attention" : "paged attention (tail fault)");
}

template <class T, class C, int D, bool ZERO>
LaunchResult dispatch_vpr(const PagedParams& p, int num_seqs, int max_parts, Stream stream) {
  // fp8: one 16-token vector per lane-row for every block size (16..256), which keeps the fp8
  // instantiations to one per (T, C, D, ZERO) for compile time. Otherwise VPR = min(block_size / vector
  // tokens, 4): block 8 with 16-bit types is one vector per row.
  if constexpr (kIsFp8<C>) {
    return launch_one<T, C, D, 1, ZERO>(p, num_seqs, max_parts, stream);
  } else {
    const int vpr = lanes::paged_vpr(p.block_size, sizeof(C));
    if constexpr (sizeof(C) == 2) {
      if (vpr == 1) return launch_one<T, C, D, 1, ZERO>(p, num_seqs, max_parts, stream);
    }
    if (vpr == 2) return launch_one<T, C, D, 2, ZERO>(p, num_seqs, max_parts, stream);
    return launch_one<T, C, D, 4, ZERO>(p, num_seqs, max_parts, stream);
  }
}

template <class T, class C, bool ZERO>
LaunchResult dispatch_head(const PagedParams& p, int head_size, int num_seqs, int max_parts, Stream stream) {
  switch (head_size) {
    case 64: return dispatch_vpr<T, C, 64, ZERO>(p, num_seqs, max_parts, stream);
    case 128: return dispatch_vpr<T, C, 128, ZERO>(p, num_seqs, max_parts, stream);
    case 256: return dispatch_vpr<T, C, 256, ZERO>(p, num_seqs, max_parts, stream);
  }
  return {"paged attention: head_size " + std::to_string(head_size) + " not in {64,128,256}"};
}

template <class T, class C>
LaunchResult dispatch(const PagedParams& p, const pacheck_kernel_args& a, int max_parts, bool zero, Stream stream) {
  LaunchResult r = zero ? dispatch_head<T, C, true>(p, a.head_size, a.num_seqs, max_parts, stream)
                        : dispatch_head<T, C, false>(p, a.head_size, a.num_seqs, max_parts, stream);
  if (!r.ok() || !p.split || max_parts == 1) return r;
  return launch_merge<T>(p.sc, a, stream);
}

/// Test kernel of decode_fp8_codes: thread i decodes the 16 codes of vector i with the kernels' own load16 +
/// expand16 path.
template <class C>
__global__ void decode_fp8_kernel(const std::uint8_t* codes, float* out, int vectors) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= vectors) return;
  float f[16];
  expand16<C>(load16(codes + 16 * i), f);
#pragma unroll
  for (int j = 0; j < 16; ++j) out[16 * i + j] = f[j];
}

}  // namespace

int paged_v1_max_tokens(int head_size) {
  int dev = 0, n = 0;
  const bool have = device_count(&n) == kSuccess && n > 0 && get_device(&dev) == kSuccess;
  if (!have) (void)get_last_error();
  const int smem = have ? max_shared_per_block() : 227 * 1024;
  return smem / static_cast<int>(sizeof(float)) - fixed_smem_floats(head_size);
}

LaunchResult launch_paged_attention(const pacheck_kernel_args& a, int partition_size, bool zero_v_tail,
                                    bool half_products, bool scale_unmasked) {
  const char* who = partition_size > 0 ? "gpu.paged_v2"
                    : half_products    ? "gpu.paged_v1_half_products"
                    : scale_unmasked   ? "gpu.slot_scale_unmasked"
                    : zero_v_tail      ? "gpu.paged_v1"
                                       : "gpu.paged_v1_tail_fault";
  auto fail = [&](const std::string& m) { return LaunchResult{std::string(who) + ": " + m, false}; };
  const bool aiter = a.layout == PACHECK_LAYOUT_AITER;
  if (const std::string why = common_launch_problem(a, aiter ? PACHECK_LAYOUT_AITER : PACHECK_LAYOUT_VLLM, "vllm or aiter");
      !why.empty())
    return fail(why);
  const bool fp8 = is_fp8(a.kv_dtype);
  if (!lanes::is_pow2(a.block_size) || a.block_size < 8 || a.block_size > 256)
    return fail("block_size " + std::to_string(a.block_size) + " not in {8,16,32,64,128,256}");
  if (a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0) return fail("num_heads must be a multiple of num_kv_heads");
  if (fp8 && a.block_size < 16)
    return fail("block_size " + std::to_string(a.block_size) + " with an fp8 cache: a 16-byte V vector spans 16 tokens");
  if (aiter && a.block_size % 16 != 0)
    return fail("block_size " + std::to_string(a.block_size) + " with the aiter layout: V groups 16 slots");
  if ((a.k_scales_per_slot || a.v_scales_per_slot) && !fp8)
    return fail("per-slot scale tables are given but kv_dtype is not an fp8 encoding");
  if (scale_unmasked && (!zero_v_tail || half_products || partition_size > 0))
    return fail("the scale_unmasked control is gpu.paged_v1 with its V tail zeroed");
  if (half_products && (a.k_scales_per_slot || a.v_scales_per_slot))
    return fail("per-slot scale tables: half_products rounds p to the 16-bit dtype, with no per-token V scale");
  if (a.num_seqs <= 0) return {};

  int esize = 0;
  if (const std::string why = kv_element_bytes(a, &esize); !why.empty()) return fail(why);
  // 16-byte vector loads need unit innermost strides and 16-byte aligned vectors. aiter's V: a group of 16
  // slots is the innermost dimension, so a vector of up to 16 tokens starting at a multiple of its length
  // never crosses a group.
  const int x = 16 / esize;
  const int v_inner = aiter ? 4 : 3;
  if (a.k_strides[4] != 1 || a.v_strides[v_inner] != 1) return fail("the innermost cache stride must be 1");
  if (aiter && a.v_strides[3] != 16) return fail("the aiter value_cache's head-dim stride must be 16 (one slot group)");
  for (int i = 0; i < 4; ++i)
    if (a.k_strides[i] % x != 0) return fail("key_cache strides must be multiples of x = " + std::to_string(x));
  for (int i = 0; i < v_inner - 1; ++i)
    if (a.v_strides[i] % x != 0) return fail("value_cache strides must be multiples of 16 bytes");
  if ((reinterpret_cast<std::uintptr_t>(a.key_cache) | reinterpret_cast<std::uintptr_t>(a.value_cache)) % 16 != 0)
    return fail("key_cache and value_cache must be 16-byte aligned");

  PagedParams p{};
  set_decode_params(p, a);
  p.block_size = a.block_size;
  p.layout = aiter ? PACHECK_LAYOUT_AITER : PACHECK_LAYOUT_VLLM;
  p.scale_log2 = a.scale * kLog2e;
  p.k_scale = a.k_scale;
  p.v_scale = a.v_scale;
  p.k_scales_per_head = a.k_scales_per_head;
  p.v_scales_per_head = a.v_scales_per_head;
  p.k_scales_per_slot = a.k_scales_per_slot;
  p.v_scales_per_slot = a.v_scales_per_slot;
  p.scale_unmasked = scale_unmasked;
  p.half_products = half_products;
  p.scale = a.scale;
  p.soft_cap = a.logits_soft_cap;
  p.alibi_slopes = a.alibi_slopes;
  p.variant_logits = a.logits_soft_cap > 0.f || a.alibi_slopes != nullptr;
  p.sinks = a.sinks;
  p.sliding_window = a.sliding_window;
  if (partition_size > 0 && (a.sliding_window > 0 || a.sinks))
    return fail(a.sliding_window > 0 ? "sliding_window: not implemented by the split-KV merge"
                                     : "sinks: not implemented by the split-KV merge");

  // The host never reads seq_lens (device memory): the longest context is bounded by the block table.
  const int max_tokens = a.max_blocks_per_seq * a.block_size;
  const Stream stream = static_cast<Stream>(a.stream);
  int max_parts = 1;
  void* scratch = nullptr;
  if (partition_size > 0) {
    if (partition_size % a.block_size != 0) return fail("partition size must be a multiple of block_size");
    p.partition_size = partition_size;
    p.logits_capacity = partition_size;
    max_parts = std::max(1, ceil_div(max_tokens, partition_size));
    p.split = max_parts > 1;
    p.sc.partition_size = partition_size;
    p.sc.max_parts = max_parts;
    if (p.split) {
      LaunchResult r = alloc_scratch(p.sc, a.num_seqs, a.num_heads, a.head_size, stream, &scratch);
      if (!r.ok()) return {std::string(who) + ": " + r.error, r.fatal};
    }
  } else {
    const int cap = paged_v1_max_tokens(a.head_size);
    if (max_tokens > cap)
      return fail("context bound max_blocks_per_seq * block_size = " + std::to_string(max_tokens) +
                  " exceeds the " + std::to_string(cap) + " logits shared memory holds");
    p.partition_size = std::max(max_tokens, a.block_size);
    p.logits_capacity = p.partition_size;
    p.sc.partition_size = p.partition_size;
    p.sc.max_parts = 1;
  }

  LaunchResult r = for_element_types(a, [&](auto q, auto c) {
    return dispatch<typename decltype(q)::type, typename decltype(c)::type>(p, a, max_parts, zero_v_tail, stream);
  });
  return finish_launch(r, scratch, stream, who);
}

LaunchResult decode_fp8_codes(pacheck_dtype kv_dtype, const void* codes, float* out, int n, void* stream) {
  if (n <= 0 || n % 16 != 0) return {"decode_fp8_codes: n = " + std::to_string(n) + " is not a positive multiple of 16"};
  if (reinterpret_cast<std::uintptr_t>(codes) % 16 != 0) return {"decode_fp8_codes: codes must be 16-byte aligned"};
  const int vectors = n / 16, threads = 64, blocks = ceil_div(vectors, threads);
  const auto* c = static_cast<const std::uint8_t*>(codes);
  const Stream s = static_cast<Stream>(stream);
  switch (kv_dtype) {
    case PACHECK_DTYPE_FP8_E4M3FN: decode_fp8_kernel<fp8_e4m3fn_t><<<blocks, threads, 0, s>>>(c, out, vectors); break;
    case PACHECK_DTYPE_FP8_E4M3FNUZ: decode_fp8_kernel<fp8_e4m3fnuz_t><<<blocks, threads, 0, s>>>(c, out, vectors); break;
    case PACHECK_DTYPE_FP8_E5M2: decode_fp8_kernel<fp8_e5m2_t><<<blocks, threads, 0, s>>>(c, out, vectors); break;
    default: return {"decode_fp8_codes: kv_dtype " + std::to_string(static_cast<int>(kv_dtype)) + " is not an fp8 encoding"};
  }
  return check_launch("fp8 decode");
}

}  // namespace pacheck::gpu
