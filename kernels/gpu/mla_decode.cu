// gpu.mla_decode and gpu.mla_decode_tail_fault: paged MLA decode over the latent cache (core/mla.hpp,
// kernels/mla_kernel.hpp), written here for pacheck from the MLA formula and the tiling MLA decode kernels use
// (FlashMLA, FlashInfer's MLA wrapper): the latent rows of a tile of tokens are loaded once into shared memory and
// used by a group of query heads for both products, since every query head reads the same row (MQA).
//
// Layout: query [num_query_tokens, num_heads, row] (row = head_size = kv_lora_rank + qk_rope_head_dim), the latent
// cache nhd with one KV head ([num_blocks, block_size, 1, row]; value_cache is the same memory), out
// [num_query_tokens, num_heads, v_head_size]. Element types: query and output T (f32, f16, bf16); cache C, T
// itself or an fp8 encoding with a 16-bit T, each value decoded to fp32 and multiplied by k_scale (the latent
// cache's per-tensor scale) as it is loaded.
//
// One thread block (kWarps warps) per (query row, group of kHeadsPerBlock query heads). The row belongs to the
// sequence whose query_start_loc range holds it and sees keys 0 .. its position (causal, kernel_abi.h). For each
// tile of kTile tokens:
//  1. the tile's latent rows are loaded into shared memory (fp32); rows of tokens the query row does not see are
//     zero and never loaded;
//  2. the logits q_h . row_t of the group's heads, one warp per (head, token), in log2 units (scale x log2 e);
//  3. an online softmax per head: running max m, exp-sum l, the accumulator rescaled by exp2(m_old - m_new);
//  4. acc[h][d] += p[h][t] x row_t[d] for d < v_head_size, each thread holding a few d of every head.
// The output is acc / l. Accumulation is fp32 throughout.
// TAIL_FAULT = true is the negative control gpu.mla_decode_tail_fault: step 1 loads every slot of the query row's
// final block, the tail past its keys included (p is 0 there, but 0 x NaN = NaN): the fault of
// cpu.mla_v_tail (FlashInfer #941), on the GPU.
#include <string>

#include "kernels/gpu/attention_common.cuh"
#include "kernels/gpu/fp8.hpp"
#include "kernels/gpu/mla_launch.hpp"
#include "paging/layout.hpp"

namespace pacheck::gpu {
namespace {

/// Query heads per thread block: the heads that share one load of each tile (4: their accumulators, 4 x
/// kMaxVPerThread per thread, stay in registers on wave32 AMD targets too, which spilled at 8).
constexpr int kHeadsPerBlock = 4;
/// Tokens per tile.
constexpr int kTile = 16;
/// Output values per thread per head (v_head_size <= kMaxVPerThread x threads: 1024 on 128 threads).
constexpr int kMaxVPerThread = 8;

struct MlaParams : DecodeParams {
  int block_size;
  int row;        ///< values per latent row and per query head
  int v_dim;      ///< output values per head: the row's prefix read as V
  int num_seqs;
  float scale_log2;   ///< softmax scale x log2(e)
  float latent_scale; ///< the cache's dequantisation scale (k_scale; 1 for 16/32-bit caches)
  const std::int32_t* query_start_loc;  ///< [num_seqs + 1] device, or null: row r is sequence r
};

template <class C>
PACHECK_DEVICE float latent_value(const C* base, std::int64_t i) {
  if constexpr (kIsFp8<C>) return fp8_to_f32<C>(base[i].bits);
  else return Elem<C>::to_float(base[i]);
}

/// The sequence of query row r: the last s with query_start_loc[s] <= r (row r itself without the array).
PACHECK_DEVICE int sequence_of(const MlaParams& p, int r) {
  if (!p.query_start_loc) return r;
  int lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.query_start_loc[mid] <= r) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// Shared memory floats: the group's query rows, one tile of latent rows, the tile's probabilities, and per
/// head its rescale factor.
__host__ __device__ constexpr int mla_smem_floats(int row) {
  return kHeadsPerBlock * row + kTile * row + kHeadsPerBlock * kTile + kHeadsPerBlock;
}

template <class T, class C, bool TAIL_FAULT>
__global__ void __launch_bounds__(kWarps * kWarpSize) mla_decode_kernel(MlaParams p) {
  const int r = blockIdx.x, h0 = blockIdx.y * kHeadsPerBlock;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize, W = p.row;
  const int s = sequence_of(p, r);
  const int last_row = p.query_start_loc ? p.query_start_loc[s + 1] - 1 : r;
  const int keys = p.seq_lens[s] - (last_row - r);  // this row's position + 1
  // The tail-fault twin reads through the end of the final block of the row's keys.
  const int loaded = TAIL_FAULT ? ceil_div(keys, p.block_size) * p.block_size : keys;

  extern __shared__ float smem[];
  float* q_s = smem;                          // [kHeadsPerBlock][W]
  float* kv_s = q_s + kHeadsPerBlock * W;     // [kTile][W]
  float* p_s = kv_s + kTile * W;              // [kHeadsPerBlock][kTile]
  float* alpha_s = p_s + kHeadsPerBlock * kTile;  // [kHeadsPerBlock]

  for (int i = tid; i < kHeadsPerBlock * W; i += blockDim.x) {
    const int h = h0 + i / W;
    const T* q = static_cast<const T*>(p.q) + r * p.q_stride_seq + h * p.q_stride_head;
    q_s[i] = h < p.num_heads ? Elem<T>::to_float(q[i % W]) : 0.f;
  }
  const C* cache = static_cast<const C*>(p.k);
  const std::int32_t* bt = p.block_tables + s * p.bt_stride;
  float m = -INFINITY, l = 0.f;  // per head, held by thread h (h < kHeadsPerBlock)
  float acc[kHeadsPerBlock][kMaxVPerThread];
#pragma unroll
  for (int h = 0; h < kHeadsPerBlock; ++h)
#pragma unroll
    for (int j = 0; j < kMaxVPerThread; ++j) acc[h][j] = 0.f;

  for (int t0 = 0; t0 < keys; t0 += kTile) {
    __syncthreads();  // the previous tile's rows and probabilities are no longer read
    // 1. The tile's latent rows.
    for (int i = tid; i < kTile * W; i += blockDim.x) {
      const int t = t0 + i / W;
      float v = 0.f;
      if (t < loaded) {
        const std::int64_t off = key_offset(PACHECK_LAYOUT_NHD, p.ks, 1, bt[t / p.block_size], 0, t % p.block_size, i % W);
        v = latent_value<C>(cache, off) * p.latent_scale;
      }
      kv_s[i] = v;
    }
    __syncthreads();
    // 2. Logits in log2 units; tokens the row does not see get -inf.
    for (int pair = warp; pair < kHeadsPerBlock * kTile; pair += kWarps) {
      const int h = pair / kTile, t = pair % kTile;
      float dot = 0.f;
      for (int i = lane; i < W; i += kWarpSize) dot = fmaf(q_s[h * W + i], kv_s[t * W + i], dot);
      for (int o = kWarpSize / 2; o >= 1; o >>= 1) dot += shfl_xor(dot, o);
      if (lane == 0) p_s[pair] = t0 + t < keys ? dot * p.scale_log2 : -INFINITY;
    }
    __syncthreads();
    // 3. Online softmax, one thread per head.
    if (tid < kHeadsPerBlock) {
      float m_new = m;
      for (int t = 0; t < kTile; ++t) m_new = fmaxf(m_new, p_s[tid * kTile + t]);
      const float alpha = exp2f(m - m_new);  // 0 on the first tile (m = -inf)
      float sum = 0.f;
      for (int t = 0; t < kTile; ++t) sum += (p_s[tid * kTile + t] = exp2f(p_s[tid * kTile + t] - m_new));
      l = l * alpha + sum;
      m = m_new;
      alpha_s[tid] = alpha;
    }
    __syncthreads();
    // 4. P . V over the row's prefix: the accumulators rescaled, then the tile's tokens in order, one token's
    // probabilities and values at a time (so only they, not the whole tile, are held in registers).
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) {
      const float alpha = alpha_s[h];
#pragma unroll
      for (int j = 0; j < kMaxVPerThread; ++j) acc[h][j] *= alpha;
    }
#pragma unroll 1
    for (int t = 0; t < kTile; ++t) {
      float pt[kHeadsPerBlock];
#pragma unroll
      for (int h = 0; h < kHeadsPerBlock; ++h) pt[h] = p_s[h * kTile + t];
#pragma unroll
      for (int j = 0; j < kMaxVPerThread; ++j) {
        const int d = tid + j * static_cast<int>(blockDim.x);
        if (d >= p.v_dim) break;
        const float v = kv_s[t * W + d];
#pragma unroll
        for (int h = 0; h < kHeadsPerBlock; ++h) acc[h][j] = fmaf(pt[h], v, acc[h][j]);
      }
    }
  }
  __syncthreads();
  if (tid < kHeadsPerBlock) alpha_s[tid] = 1.f / l;  // the exp-sums, published for the output
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kMaxVPerThread; ++j) {
    const int d = tid + j * static_cast<int>(blockDim.x);
    if (d >= p.v_dim) break;
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) {
      if (h0 + h >= p.num_heads) break;
      T* out = static_cast<T*>(p.out) + r * p.out_stride_seq + (h0 + h) * p.out_stride_head;
      out[d] = Elem<T>::from_float(acc[h][j] * alpha_s[h]);
    }
  }
}

template <class T, class C>
LaunchResult launch_typed(const MlaParams& p, int rows, bool tail_fault, int threads, Stream stream) {
  auto kernel = tail_fault ? mla_decode_kernel<T, C, true> : mla_decode_kernel<T, C, false>;
  const int smem = mla_smem_floats(p.row) * static_cast<int>(sizeof(float));
  if (smem > 48 * 1024) {
    const Error e = allow_dynamic_smem(kernel, smem);
    if (e != kSuccess) return runtime_failure("shared memory of " + std::to_string(smem) + " bytes", e);
  }
  const dim3 grid(rows, ceil_div(p.num_heads, kHeadsPerBlock));
  kernel<<<grid, threads, smem, stream>>>(p);
  return check_launch("mla decode");
}

}  // namespace

LaunchResult launch_mla_decode(const pacheck_kernel_args& a, int kv_lora_rank, int v_head_size, bool tail_fault) {
  const std::string who = tail_fault ? "gpu.mla_decode_tail_fault" : "gpu.mla_decode";
  auto fail = [&](const std::string& why) { return LaunchResult{who + ": " + why, false}; };
  if (a.struct_size < sizeof(pacheck_kernel_args)) return fail("pacheck_kernel_args from an older ABI");
  if (a.layout != PACHECK_LAYOUT_NHD || a.num_kv_heads != 1)
    return fail("the latent cache must be nhd with num_kv_heads 1 ([num_blocks, block_size, 1, row])");
  if (a.key_cache != a.value_cache) return fail("value_cache must be key_cache: V is a prefix of the latent row");
  if (kv_lora_rank < 1 || kv_lora_rank > a.head_size || v_head_size < 1 || v_head_size > kv_lora_rank)
    return fail("v_head_size " + std::to_string(v_head_size) + " must lie in [1, kv_lora_rank " +
                std::to_string(kv_lora_rank) + "] and kv_lora_rank in [1, head_size]");
  if (std::string why = dtype_problem(a); !why.empty()) return fail(why);
  if (a.head_size > 1024) return fail("head_size " + std::to_string(a.head_size) + " above 1024");
  if (a.logits_soft_cap > 0.f || a.alibi_slopes || a.sinks || a.sliding_window > 0)
    return fail("MLA decode takes no attention variant but several query tokens");
  int threads = 0;
  if (LaunchResult r = block_threads(&threads); !r.ok()) return {who + ": " + r.error, r.fatal};
  if (v_head_size > kMaxVPerThread * threads)
    return fail("v_head_size " + std::to_string(v_head_size) + " above " + std::to_string(kMaxVPerThread * threads));
  if (a.num_seqs <= 0) return {};

  MlaParams p{};
  set_decode_params(p, a);
  p.block_size = a.block_size;
  p.row = a.head_size;
  p.v_dim = v_head_size;
  p.num_seqs = a.num_seqs;
  p.scale_log2 = a.scale * kLog2e;
  p.latent_scale = is_fp8(a.kv_dtype) ? a.k_scale : 1.f;
  p.query_start_loc = a.query_start_loc;
  const int rows = a.query_start_loc ? a.num_query_tokens : a.num_seqs;
  const Stream stream = static_cast<Stream>(a.stream);
  LaunchResult r = for_element_types(a, [&](auto q, auto c) {
    return launch_typed<typename decltype(q)::type, typename decltype(c)::type>(p, rows, tail_fault, threads, stream);
  });
  return finish_launch(r, nullptr, stream, who);
}

}  // namespace pacheck::gpu
