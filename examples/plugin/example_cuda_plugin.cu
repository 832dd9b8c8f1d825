/*
 * example.cuda_reference: a pacheck plugin kernel in CUDA, built when CMake finds a CUDA compiler.
 *     pacheck run --device cuda --plugin ./libpacheck_example_cuda_plugin.so
 *
 * One thread block per (sequence, query head). Pass 1: threads stride over the sequence's tokens and
 * write scaled logits into a scratch buffer; a block reduction gives the max. Pass 2: exponentiate and
 * sum. Pass 3: threads stride over head dimensions and accumulate (p / sum) . V. Only the first seq_lens[s] tokens
 * are read. Written for clarity, not speed: it is the template for wiring a real kernel to pacheck.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "pacheck/kernel_abi.h"

PACHECK_PLUGIN_DEFINE_ABI_VERSION;

namespace {

constexpr int kThreads = 128;

__device__ float load(const void* base, int64_t i, pacheck_dtype t) {
  switch (t) {
    case PACHECK_DTYPE_F32: return static_cast<const float*>(base)[i];
    case PACHECK_DTYPE_F16: return __half2float(static_cast<const __half*>(base)[i]);
    case PACHECK_DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return __int_as_float(0x7FC00000);
  }
}

__device__ void store(void* base, int64_t i, pacheck_dtype t, float v) {
  switch (t) {
    case PACHECK_DTYPE_F32: static_cast<float*>(base)[i] = v; break;
    case PACHECK_DTYPE_F16: static_cast<__half*>(base)[i] = __float2half_rn(v); break;
    case PACHECK_DTYPE_BF16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); break;
    default: break;
  }
}

__device__ int64_t key_off(const pacheck_kernel_args& a, int64_t block, int g, int slot, int d, int x) {
  const int64_t* s = a.k_strides;
  switch (a.layout) {
    case PACHECK_LAYOUT_VLLM: return block * s[0] + g * s[1] + (d / x) * s[2] + slot * s[3] + (d % x) * s[4];
    case PACHECK_LAYOUT_NHD: return block * s[0] + slot * s[1] + g * s[2] + d * s[3];
    default: return block * s[0] + g * s[1] + slot * s[2] + d * s[3];
  }
}

__device__ int64_t value_off(const pacheck_kernel_args& a, int64_t block, int g, int slot, int d) {
  const int64_t* s = a.v_strides;
  switch (a.layout) {
    case PACHECK_LAYOUT_VLLM: return block * s[0] + g * s[1] + d * s[2] + slot * s[3];
    case PACHECK_LAYOUT_NHD: return block * s[0] + slot * s[1] + g * s[2] + d * s[3];
    default: return block * s[0] + g * s[1] + slot * s[2] + d * s[3];
  }
}

/// Block-wide reduction (max or sum) through shared memory; every thread gets the result.
template <bool Max>
__device__ float block_reduce(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      const float o = shared[threadIdx.x + w];
      shared[threadIdx.x] = Max ? fmaxf(shared[threadIdx.x], o) : shared[threadIdx.x] + o;
    }
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();
  return r;
}

__global__ void decode(pacheck_kernel_args a, float* scratch, int64_t scratch_per_head) {
  __shared__ float red[kThreads];
  const int s = blockIdx.x, h = blockIdx.y;
  const int len = a.seq_lens[s], g = h / (a.num_heads / a.num_kv_heads);
  const int x = 16 / (a.kv_dtype == PACHECK_DTYPE_F32 ? 4 : 2);
  float* logits = scratch + (static_cast<int64_t>(s) * a.num_heads + h) * scratch_per_head;
  const int64_t q0 = s * a.q_stride_seq + h * a.q_stride_head;

  float m = -INFINITY;
  for (int t = threadIdx.x; t < len; t += blockDim.x) {
    const int64_t block = a.block_tables[s * a.block_tables_stride + t / a.block_size];
    float dot = 0.f;
    for (int d = 0; d < a.head_size; ++d)
      dot += load(a.query, q0 + d, a.q_dtype) * load(a.key_cache, key_off(a, block, g, t % a.block_size, d, x), a.kv_dtype);
    logits[t] = dot * a.scale * a.k_scale;
    m = fmaxf(m, logits[t]);
  }
  m = block_reduce<true>(m, red);
  float sum = 0.f;
  for (int t = threadIdx.x; t < len; t += blockDim.x) {
    logits[t] = __expf(logits[t] - m);
    sum += logits[t];
  }
  sum = block_reduce<false>(sum, red);  // also orders the writes to `logits` before pass 3 reads them
  // Weights normalised before P.V: acc is a convex combination of V and cannot overflow for V near the
  // fp32 limit (an unnormalised sum of p * V can).
  for (int d = threadIdx.x; d < a.head_size; d += blockDim.x) {
    float acc = 0.f;
    for (int t = 0; t < len; ++t) {
      const int64_t block = a.block_tables[s * a.block_tables_stride + t / a.block_size];
      acc += (logits[t] / sum) * load(a.value_cache, value_off(a, block, g, t % a.block_size, d), a.kv_dtype);
    }
    store(a.out, s * a.out_stride_seq + h * a.out_stride_head + d, a.out_dtype, acc * a.v_scale);
  }
}

pacheck_status fail(cudaError_t e, const char* what, char* error, size_t error_size) {
  std::snprintf(error, error_size, "%s: %s", what, cudaGetErrorString(e));
  return PACHECK_ERROR;
}

pacheck_status run(void*, const pacheck_kernel_args* a, char* error, size_t error_size) {
  auto stream = static_cast<cudaStream_t>(a->stream);
  // Scratch for one row of probabilities per (sequence, head), sized from the host-side max_seq_len
  // (ABI v2): no copy of the device's seq_lens back to the host, no synchronisation in the call.
  const int64_t per_head = a->max_seq_len;
  float* scratch = nullptr;
  cudaError_t e = cudaMallocAsync(&scratch, sizeof(float) * per_head * a->num_seqs * a->num_heads, stream);
  if (e != cudaSuccess) return fail(e, "cudaMallocAsync(scratch)", error, error_size);
  decode<<<dim3(a->num_seqs, a->num_heads), kThreads, 0, stream>>>(*a, scratch, per_head);
  e = cudaGetLastError();
  cudaFreeAsync(scratch, stream);
  if (e != cudaSuccess) return fail(e, "launch", error, error_size);
  return PACHECK_OK;
}

}  // namespace

extern "C" pacheck_status pacheck_register_kernels(pacheck_registrar* r) {
  static const pacheck_layout layouts[] = {PACHECK_LAYOUT_NHD, PACHECK_LAYOUT_HND, PACHECK_LAYOUT_VLLM};
  static const pacheck_dtype dtypes[] = {PACHECK_DTYPE_BF16, PACHECK_DTYPE_F16, PACHECK_DTYPE_F32};
  pacheck_kernel_desc d;
  std::memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.name = "example.cuda_reference";
  d.description = "example plugin (examples/plugin): CUDA paged decode, one block per (seq, head)";
  d.device = PACHECK_DEVICE_CUDA;
  d.layouts = layouts;
  d.num_layouts = 3;
  d.q_dtypes = d.kv_dtypes = d.out_dtypes = dtypes;
  d.num_q_dtypes = d.num_kv_dtypes = d.num_out_dtypes = 3;
  d.run = run;
  return r->add_kernel(r, &d);
}
