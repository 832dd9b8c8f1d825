// Device and launch helpers shared by the GPU decode kernels: block reductions, the split-KV merge kernel
// and its scratch buffers, and launch-error checking.
//
// Split-KV scratch (vLLM paged_attention_v2's tmp_out / max_logits / exp_sums; FlashDecoding's partials):
//   tmp_out    [num_seqs, num_heads, max_parts, head_size] fp32, each partition's output already divided
//              by its own exp sum (and multiplied by v_scale);
//   max_logits [num_seqs, num_heads, max_parts] fp32, the partition's max logit in the log2 domain
//              (logits are kept as scale * log2(e) * q.k so every exponential is one exp2f);
//   exp_sums   [num_seqs, num_heads, max_parts] fp32, sum of exp2(logit - max) over the partition.
// A sequence has ceil(seq_len / partition_size) partitions; both the partition kernel and the merge kernel
// derive that count from seq_lens with the same formula, so they agree on which partitions exist.
// Sequences with a single partition are written straight to `out` and skipped by the merge.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/gpu/gpu_runtime.hpp"
#include "kernels/gpu/fp8.hpp"
#include "kernels/gpu/lane_math.hpp"
#include "kernels/gpu/launch.hpp"

namespace pacheck::gpu {

/// Warps per thread block of every decode kernel (4 x kWarpSize threads: 128 on CUDA and wave32, 256 on
/// wave64). Launchers multiply it by warp_size(), never by kWarpSize (host code: see gpu_runtime.hpp).
inline constexpr int kWarps = lanes::kBlockWarps;
inline constexpr float kLog2e = 1.4426950408889634f;

__host__ __device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

/// Block-wide max (NaN-propagating: a NaN logit must not be silently dropped). `red` holds kWarps floats.
PACHECK_DEVICE float nan_max(float a, float b) { return (b > a || b != b) ? b : a; }

PACHECK_DEVICE float block_max(float v, float* red) {
  for (int m = kWarpSize / 2; m >= 1; m >>= 1) v = nan_max(v, shfl_xor(v, m));
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = nan_max(r, red[w]);
  __syncthreads();  // `red` may be reused by the caller's next reduction
  return r;
}

/// Block-wide sum, in a fixed order (deterministic). `red` holds kWarps floats.
PACHECK_DEVICE float block_sum(float v, float* red) {
  for (int m = kWarpSize / 2; m >= 1; m >>= 1) v += shfl_xor(v, m);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r += red[w];
  __syncthreads();
  return r;
}

/// The fields of pacheck_kernel_args every decode kernel reads, at the start of each kernel's parameter struct
/// (PagedParams and WarpSplitParams derive from it, so their layout and the device code's accesses are those
/// of one flat struct). Pointers are device memory; strides are in elements: query and out
/// [num_seqs, num_heads, head_size] by q_/out_stride_seq and _head, the caches by ks / vs (the layout's
/// 5 strides, kernel_abi.h), block_tables rows of bt_stride entries; seq_lens [num_seqs].
struct DecodeParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  std::int64_t q_stride_seq, q_stride_head, out_stride_seq, out_stride_head;
  std::int64_t ks[5], vs[5];
  const std::int32_t* block_tables;
  std::int64_t bt_stride;
  const std::int32_t* seq_lens;
  int num_heads, num_kv_heads;
};

/// Copies the DecodeParams fields of `a` into `p` (host code; the launchers fill their own fields after).
inline void set_decode_params(DecodeParams& p, const pacheck_kernel_args& a) {
  p.q = a.query; p.k = a.key_cache; p.v = a.value_cache; p.out = a.out;
  p.q_stride_seq = a.q_stride_seq; p.q_stride_head = a.q_stride_head;
  p.out_stride_seq = a.out_stride_seq; p.out_stride_head = a.out_stride_head;
  for (int i = 0; i < 5; ++i) { p.ks[i] = a.k_strides[i]; p.vs[i] = a.v_strides[i]; }
  p.block_tables = a.block_tables; p.bt_stride = a.block_tables_stride; p.seq_lens = a.seq_lens;
  p.num_heads = a.num_heads; p.num_kv_heads = a.num_kv_heads;
}

/// Where one launch's split-KV partials go.
struct SplitScratch {
  float* tmp_out = nullptr;
  float* max_logits = nullptr;
  float* exp_sums = nullptr;
  int partition_size = 0;  ///< tokens per partition
  int max_parts = 1;       ///< partition dimension of the scratch tensors
};

struct MergeParams {
  SplitScratch sc;
  void* out;
  std::int64_t out_stride_seq, out_stride_head;
  const std::int32_t* seq_lens;
  int num_heads, head_size;
};

/// Second kernel of split-KV: one block per (query head, sequence) combines the partitions of a sequence,
/// weighting each by exp2(max_i - max) * exp_sum_i. A partition that exists but is empty (exp_sum 0,
/// max -inf) gets weight 0 and its partial output is not read, so -inf - -inf never forms; a partition
/// whose scratch was never written reads as NaN (pre-filled) and propagates, which is the point.
template <class T>
__global__ void __launch_bounds__(kWarps * kWarpSize) merge_partitions_kernel(MergeParams p) {
  const int h = blockIdx.x, s = blockIdx.y;
  const int num_parts = ceil_div(p.seq_lens[s], p.sc.partition_size);
  if (num_parts <= 1) return;  // the partition kernel wrote `out` directly
  extern __shared__ float weights[];  // [max_parts] + kWarps for reductions
  float* red = weights + p.sc.max_parts;
  const std::int64_t base = (static_cast<std::int64_t>(s) * p.num_heads + h) * p.sc.max_parts;

  float m = -INFINITY;
  for (int i = threadIdx.x; i < num_parts; i += blockDim.x) m = nan_max(m, p.sc.max_logits[base + i]);
  const float gmax = block_max(m, red);

  float l = 0.f;
  for (int i = threadIdx.x; i < num_parts; i += blockDim.x) {
    const float li = p.sc.exp_sums[base + i];
    const float w = (li == 0.f) ? 0.f : exp2f(p.sc.max_logits[base + i] - gmax) * li;
    weights[i] = w;
    l += w;
  }
  const float total = block_sum(l, red);  // its trailing barrier also publishes `weights`
  // Weights normalised first, so the output is a convex combination of the partials (no fp32 overflow
  // for V near the dtype's largest finite value).
  const float inv = 1.f / total;
  for (int i = threadIdx.x; i < num_parts; i += blockDim.x) weights[i] *= inv;
  __syncthreads();

  T* out = static_cast<T*>(p.out) + s * p.out_stride_seq + h * p.out_stride_head;
  for (int d = threadIdx.x; d < p.head_size; d += blockDim.x) {
    float o = 0.f;
    for (int i = 0; i < num_parts; ++i) {
      const float w = weights[i];
      if (w != 0.f) o = fmaf(w, p.sc.tmp_out[(base + i) * p.head_size + d], o);
    }
    out[d] = Elem<T>::from_float(o);
  }
}

/// "<what>: <runtime error name>: <message>" for a failed runtime call; fatal when the error is sticky.
inline LaunchResult runtime_failure(const std::string& what, Error e) {
  return {what + ": " + error_name(e) + ": " + error_string(e), is_sticky(e)};
}

/// Threads per block of the decode kernels on the current device, or an error when its warp width is not one
/// the kernels are compiled for (also when the width is unknown: launching 128 threads of a wave64 kernel
/// would silently skip half its warps).
inline LaunchResult block_threads(int* threads) {
  const int w = warp_size();
  if (!lanes::supported_warp(w))
    return {"device warp size " + std::to_string(w) + " not in {32, 64} (device properties unavailable?)", false};
  *threads = kWarps * w;
  return {};
}

/// Checks the last launch: a bad configuration shows here at once; faults inside the kernel show at the
/// next synchronisation (Backend::sync).
inline LaunchResult check_launch(const char* kernel) {
  const Error e = get_last_error();
  if (e != kSuccess) return runtime_failure(std::string(kernel) + ": launch failed", e);
  return {};
}

/// Allocates split-KV scratch on `stream` (stream-ordered, freed by release_scratch after the merge).
inline LaunchResult alloc_scratch(SplitScratch& sc, int num_seqs, int num_heads, int head_size, Stream stream,
                                  void** block) {
  const std::size_t rows = static_cast<std::size_t>(num_seqs) * num_heads * sc.max_parts;
  const std::size_t floats = rows * (static_cast<std::size_t>(head_size) + 2);
  keep_scratch_pool();
  const Error e = malloc_async(block, floats * sizeof(float), stream);
  if (e != kSuccess) return runtime_failure("split-KV scratch allocation of " + std::to_string(floats * 4) + " bytes", e);
  float* f = static_cast<float*>(*block);
  sc.tmp_out = f;
  sc.max_logits = f + rows * head_size;
  sc.exp_sums = sc.max_logits + rows;
  if (scratch_poison_enabled()) {
    // 0xFF bytes are a NaN in fp32: a merge that reads unwritten scratch yields NaN.
    const Error m = memset_async(*block, 0xFF, floats * sizeof(float), stream);
    if (m != kSuccess) return runtime_failure("split-KV scratch NaN fill", m);
  }
  return {};
}

inline LaunchResult release_scratch(void* block, Stream stream) {
  const Error e = free_async(block, stream);
  if (e != kSuccess) return runtime_failure("split-KV scratch release", e);
  return {};
}

/// Launches the merge of `sc` into `out` for every (sequence, query head).
template <class T>
LaunchResult launch_merge(const SplitScratch& sc, const pacheck_kernel_args& a, Stream stream) {
  MergeParams mp{sc, a.out, a.out_stride_seq, a.out_stride_head, a.seq_lens, a.num_heads, a.head_size};
  const int smem = (sc.max_parts + kWarps) * static_cast<int>(sizeof(float));
  if (smem > 48 * 1024) {
    const Error e = allow_dynamic_smem(merge_partitions_kernel<T>, smem);
    if (e != kSuccess) return runtime_failure("merge: " + std::to_string(sc.max_parts) + " partitions", e);
  }
  int threads = 0;
  if (LaunchResult r = block_threads(&threads); !r.ok()) return r;
  const dim3 grid(a.num_heads, a.num_seqs);
  merge_partitions_kernel<T><<<grid, threads, smem, stream>>>(mp);
  return check_launch("split-KV merge");
}

/// True for the three fp8 KV encodings.
inline bool is_fp8(pacheck_dtype t) {
  return t == PACHECK_DTYPE_FP8_E4M3FN || t == PACHECK_DTYPE_FP8_E4M3FNUZ || t == PACHECK_DTYPE_FP8_E5M2;
}

/// The dtype rule every GPU decode kernel follows: query, cache and output of one f32/f16/bf16 type, or an
/// fp8 cache with query == output in {bf16, f16}. Empty when `a` follows it, else the reason.
inline std::string dtype_problem(const pacheck_kernel_args& a) {
  if (is_fp8(a.kv_dtype)) {
    if (a.q_dtype != a.out_dtype || (a.q_dtype != PACHECK_DTYPE_BF16 && a.q_dtype != PACHECK_DTYPE_F16))
      return "an fp8 kv_dtype needs q_dtype == out_dtype in {bf16,f16}";
  } else if (a.q_dtype != a.kv_dtype || a.out_dtype != a.kv_dtype) {
    return "q_dtype, kv_dtype and out_dtype must match";
  }
  return {};
}

/// The checks every launcher makes first, in this order: an ABI struct of this version, the one layout the
/// kernel reads (`layout`, named `layout_name` in the message), the dtype rule (dtype_problem) and head_size
/// in {64,128,256}. Empty when `a` passes them, else the reason (the launcher prefixes its kernel's name).
inline std::string common_launch_problem(const pacheck_kernel_args& a, pacheck_layout layout, const char* layout_name) {
  if (a.struct_size < sizeof(pacheck_kernel_args)) return "pacheck_kernel_args from an older ABI";
  if (a.layout != layout) return std::string("layout must be ") + layout_name;
  if (std::string why = dtype_problem(a); !why.empty()) return why;
  if (a.head_size != 64 && a.head_size != 128 && a.head_size != 256)
    return "head_size " + std::to_string(a.head_size) + " not in {64,128,256}";
  return {};
}

/// Bytes per element of the KV cache in `*esize` (4 for f32, 2 for f16/bf16, 1 for the fp8 encodings).
/// Empty when kv_dtype is one of those, else the reason naming kv_dtype.
inline std::string kv_element_bytes(const pacheck_kernel_args& a, int* esize) {
  switch (a.kv_dtype) {
    case PACHECK_DTYPE_F32: *esize = 4; return {};
    case PACHECK_DTYPE_F16: case PACHECK_DTYPE_BF16: *esize = 2; return {};
    case PACHECK_DTYPE_FP8_E4M3FN: case PACHECK_DTYPE_FP8_E4M3FNUZ: case PACHECK_DTYPE_FP8_E5M2: *esize = 1; return {};
    default:
      return "kv_dtype " + std::to_string(static_cast<int>(a.kv_dtype)) +
             " not in {f32,f16,bf16,fp8_e4m3fn,fp8_e4m3fnuz,fp8_e5m2}";
  }
}

/// A type carried as a value, so a generic lambda can receive element types: `[&](auto q, auto c) { using T =
/// typename decltype(q)::type; ... }`.
template <class T>
struct TypeTag {
  using type = T;
};

/// Calls `launch(TypeTag<T>{}, TypeTag<C>{})` with the query/output element type T and the cache element type
/// C of `a`: T = C for f32/f16/bf16 caches; for fp8 caches C is the encoding and T is f16 or bf16 as
/// q_dtype says (the launchers check q_dtype == out_dtype and the supported combinations before calling).
template <class F>
LaunchResult for_element_types(const pacheck_kernel_args& a, F&& launch) {
  auto fp8 = [&](auto c) {
    return a.q_dtype == PACHECK_DTYPE_F16 ? launch(TypeTag<half_t>{}, c) : launch(TypeTag<bf16_t>{}, c);
  };
  switch (a.kv_dtype) {
    case PACHECK_DTYPE_F32: return launch(TypeTag<float>{}, TypeTag<float>{});
    case PACHECK_DTYPE_F16: return launch(TypeTag<half_t>{}, TypeTag<half_t>{});
    case PACHECK_DTYPE_BF16: return launch(TypeTag<bf16_t>{}, TypeTag<bf16_t>{});
    case PACHECK_DTYPE_FP8_E4M3FN: return fp8(TypeTag<fp8_e4m3fn_t>{});
    case PACHECK_DTYPE_FP8_E4M3FNUZ: return fp8(TypeTag<fp8_e4m3fnuz_t>{});
    case PACHECK_DTYPE_FP8_E5M2: return fp8(TypeTag<fp8_e5m2_t>{});
    default: return {"kv_dtype " + std::to_string(static_cast<int>(a.kv_dtype)) + " has no GPU element type", false};
  }
}

/// The end of every launcher: releases the split-KV scratch block (when there is one) after the launches
/// queued on `stream`, keeps the first error, and prefixes an error with the kernel's name `who`.
inline LaunchResult finish_launch(LaunchResult r, void* scratch, Stream stream, const std::string& who) {
  if (scratch) {
    LaunchResult f = release_scratch(scratch, stream);
    if (r.ok() && !f.ok()) r = f;
  }
  if (!r.ok()) r.error = who + ": " + r.error;
  return r;
}

}  // namespace pacheck::gpu
